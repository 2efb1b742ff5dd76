//! The range assignor and the read_committed filter, pure; the consumer against a one-broker
//! fake serving the real group coordinator, in madsim.

use super::*;
use crate::client::AssignmentStrategy;
use eosim_sim::kafka::service::broker_ip;
use eosim_sim::kafka::AbortedTxn;
use std::sync::{Arc, Mutex};

mod kip848;

fn members(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    list.iter()
        .map(|(m, topics)| {
            (
                m.to_string(),
                topics.iter().map(|t| t.to_string()).collect(),
            )
        })
        .collect()
}

fn partitions(topic: &str, list: &[u32]) -> Vec<TopicPartition> {
    list.iter()
        .map(|&p| TopicPartition::new(topic, p))
        .collect()
}

#[test]
fn range_assignor_gives_the_first_members_one_partition_more() {
    let members = members(&[("c1", &["t"]), ("c2", &["t"]), ("c3", &["t"])]);
    let counts = BTreeMap::from([("t".to_string(), 7)]);
    let assignment = range_assign(&members, &counts);
    assert_eq!(assignment["c1"], partitions("t", &[0, 1, 2]));
    assert_eq!(assignment["c2"], partitions("t", &[3, 4]));
    assert_eq!(assignment["c3"], partitions("t", &[5, 6]));
}

#[test]
fn range_assignor_assigns_each_topic_separately_to_its_subscribers() {
    let members = members(&[("a", &["t", "u"]), ("b", &["t"]), ("c", &["u"])]);
    let counts = BTreeMap::from([("t".to_string(), 3), ("u".to_string(), 1)]);
    let assignment = range_assign(&members, &counts);
    assert_eq!(
        assignment["a"],
        [partitions("t", &[0, 1]), partitions("u", &[0])].concat()
    );
    assert_eq!(assignment["b"], partitions("t", &[2]));
    assert_eq!(assignment["c"], Vec::new());
}

#[test]
fn range_assignor_leaves_surplus_members_empty_and_skips_unknown_topics() {
    let members = members(&[("a", &["t", "x"]), ("b", &["t"]), ("c", &["t"])]);
    let counts = BTreeMap::from([("t".to_string(), 2)]);
    let assignment = range_assign(&members, &counts);
    assert_eq!(assignment["a"], partitions("t", &[0]));
    assert_eq!(assignment["b"], partitions("t", &[1]));
    assert_eq!(assignment["c"], Vec::new());
}

#[test]
fn read_committed_drops_records_of_aborted_transactions_from_their_first_offset() {
    let record = |offset, producer_id, transactional| FetchedRecord {
        offset,
        record: eosim_sim::kafka::Record {
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp_ms: 0,
        },
        producer_id,
        transactional,
        leader_epoch: 0,
    };
    let records = vec![
        record(0, 7, true),
        record(1, 8, true),
        record(2, 7, true),
        record(3, -1, false),
    ];
    let aborted = [AbortedTxn {
        producer_id: 7,
        first_offset: 2,
        last_offset: 3,
    }];
    let kept: Vec<Offset> = drop_aborted(records, &aborted)
        .iter()
        .map(|r| r.offset)
        .collect();
    assert_eq!(kept, vec![0, 1, 3]);
}

/// One broker serving the real group coordinator and a fixed log: topic `t` with
/// [`PARTITIONS`] partitions of [`RECORDS_PER_PARTITION`] records each, leader broker 1.
mod fake_broker {
    use super::*;
    use eosim_sim::kafka::group::GroupCoordinator;
    use eosim_sim::kafka::model::{ParkToken, Reply};
    use eosim_sim::kafka::service::broker_addr;
    use eosim_sim::kafka::{ClusterConfig, PartitionMetadata, Record};

    pub const TOPIC: &str = "t";
    pub const PARTITIONS: u32 = 3;
    pub const RECORDS_PER_PARTITION: i64 = 10;
    const TICK_MS: u64 = 5;

    type Shared = Arc<Mutex<GroupCoordinator>>;

    pub async fn serve(start: Instant) {
        let coordinator: Shared =
            Arc::new(Mutex::new(GroupCoordinator::new(ClusterConfig::default())));
        let ticker = coordinator.clone();
        tokio::spawn(async move {
            loop {
                sleep(Duration::from_millis(TICK_MS)).await;
                ticker
                    .lock()
                    .expect("lock")
                    .tick(start.elapsed().as_millis() as u64);
            }
        });
        let endpoint = madsim::net::Endpoint::bind(broker_addr(1))
            .await
            .expect("bind broker-1");
        eosim_sim::net::serve(endpoint, move |request: Request, _from| {
            let coordinator = coordinator.clone();
            async move { answer(&coordinator, start, request).await }
        })
        .await;
    }

    async fn answer(coordinator: &Shared, start: Instant, request: Request) -> Response {
        let now = || start.elapsed().as_millis() as u64;
        match request {
            Request::Metadata { .. } => metadata(),
            Request::FindCoordinator { .. } => Response::FindCoordinator { broker: 1 },
            Request::ListOffsets { spec, .. } => Response::ListOffsets {
                offset: match spec {
                    OffsetSpec::Earliest => 0,
                    OffsetSpec::Latest(_) => RECORDS_PER_PARTITION,
                },
            },
            Request::Fetch { partitions, .. } => fetch(partitions),
            Request::ConsumerGroupHeartbeat(r) => {
                let count = |t: &str| (t == TOPIC).then_some(PARTITIONS);
                let mut coordinator = coordinator.lock().expect("lock");
                coordinator.consumer_group_heartbeat(now(), r, &count)
            }
            group_request => {
                let reply = coordinator
                    .lock()
                    .expect("lock")
                    .handle(now(), group_request);
                match reply {
                    Reply::Done(response) => response,
                    Reply::Parked(ParkToken::Group(token)) => loop {
                        sleep(Duration::from_millis(TICK_MS)).await;
                        if let Some(r) = coordinator.lock().expect("lock").poll_parked(now(), token)
                        {
                            break r;
                        }
                    },
                    Reply::Parked(other) => panic!("unexpected token {other:?}"),
                }
            }
        }
    }

    fn metadata() -> Response {
        let partitions = (0..PARTITIONS)
            .map(|partition| PartitionMetadata {
                partition,
                leader: Some(1),
                leader_epoch: 0,
                replicas: vec![1],
                isr: vec![1],
            })
            .collect();
        Response::Metadata {
            brokers: vec![1],
            topics: BTreeMap::from([(TOPIC.into(), partitions)]),
        }
    }

    /// At most 4 records per partition and fetch.
    fn fetch(partitions: Vec<(TopicPartition, Offset)>) -> Response {
        let partitions = partitions
            .into_iter()
            .map(|(tp, offset)| {
                let end = (offset + 4).min(RECORDS_PER_PARTITION).max(offset);
                let records = (offset..end)
                    .map(|o| FetchedRecord {
                        offset: o,
                        record: Record {
                            key: None,
                            value: Some(format!("{tp}@{o}").into()),
                            headers: Vec::new(),
                            timestamp_ms: 0,
                        },
                        producer_id: -1,
                        transactional: false,
                        leader_epoch: 0,
                    })
                    .collect();
                let error =
                    (offset > RECORDS_PER_PARTITION).then_some(KafkaError::OffsetOutOfRange);
                let result = FetchPartition {
                    error,
                    high_watermark: RECORDS_PER_PARTITION,
                    last_stable_offset: RECORDS_PER_PARTITION,
                    log_start_offset: 0,
                    records,
                    aborted: Vec::new(),
                    next_fetch_offset: end,
                };
                (tp, result)
            })
            .collect();
        Response::Fetch { partitions }
    }
}

type Seen = Arc<Mutex<Vec<(TopicPartition, Offset)>>>;

/// Subscribes, polls and commits what it got for `run_for`; returns the assignment it
/// ended with and then closes the consumer if `close`.
async fn consume(seen: Seen, run_for: Duration, close: bool) -> Vec<TopicPartition> {
    let conn = Connection::open(1).await.expect("client endpoint");
    let mut config = ConsumerConfig::new("g");
    config.session_timeout_ms = 10_000;
    config.heartbeat_interval_ms = 1_000;
    config.max_poll_records = 3;
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    let mut consumer = SimConsumer::new(conn, config);
    consumer
        .subscribe(&[fake_broker::TOPIC.to_string()])
        .await
        .expect("subscribe");
    let end = Instant::now() + run_for;
    while Instant::now() < end {
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        assert!(records.len() <= 3, "max.poll.records is respected");
        let mut next = BTreeMap::new();
        for r in &records {
            seen.lock().expect("lock").push((r.tp.clone(), r.offset));
            next.insert(r.tp.clone(), r.offset + 1);
        }
        if !next.is_empty() {
            let offsets: Vec<_> = next.into_iter().collect();
            consumer
                .commit(&offsets)
                .await
                .expect("commit in a stable group");
        }
    }
    let assignment = consumer.assignment();
    if close {
        consumer.close().await;
    }
    assignment
}

#[test]
fn two_consumers_split_the_partitions_and_the_survivor_resumes_from_committed_offsets() {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        let start = Instant::now();
        let broker = handle
            .create_node()
            .name("broker-1")
            .ip(broker_ip(1))
            .build();
        broker.spawn(fake_broker::serve(start));
        let seen = Seen::default();
        let a = handle
            .create_node()
            .name("consumer-a")
            .ip([10, 0, 2, 1].into())
            .build();
        let b = handle
            .create_node()
            .name("consumer-b")
            .ip([10, 0, 2, 2].into())
            .build();
        let task_a = a.spawn(consume(seen.clone(), Duration::from_secs(20), false));
        sleep(Duration::from_secs(2)).await;
        let task_b = b.spawn(consume(seen.clone(), Duration::from_secs(8), true));
        let b_assignment = task_b.await.expect("consumer b");
        let a_assignment = task_a.await.expect("consumer a");
        assert_eq!(
            b_assignment.len(),
            1,
            "b shared the first generation: {b_assignment:?}"
        );
        assert_eq!(
            a_assignment.len(),
            fake_broker::PARTITIONS as usize,
            "a took over"
        );
        let mut seen = seen.lock().expect("lock").clone();
        let total = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), total, "no record consumed twice");
        let expected =
            fake_broker::PARTITIONS as usize * fake_broker::RECORDS_PER_PARTITION as usize;
        assert_eq!(total, expected, "every record consumed");
    });
}

fn test_config() -> ConsumerConfig {
    let mut config = ConsumerConfig::new("g");
    config.session_timeout_ms = 10_000;
    config.heartbeat_interval_ms = 1_000;
    config.max_poll_records = 3;
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config
}

/// Polls and commits until it has drained its partitions (at most 10 s), sleeps 20 s (the
/// test pauses the node meanwhile), then commits its old offsets again and polls for 10 s
/// more. Returns the commit's result after the pause and the final assignment.
async fn consume_through_a_pause(seen: Seen) -> (Result<(), ClientError>, Vec<TopicPartition>) {
    let conn = Connection::open(1).await.expect("client endpoint");
    let mut consumer = SimConsumer::new(conn, test_config());
    consumer
        .subscribe(&[fake_broker::TOPIC.to_string()])
        .await
        .expect("subscribe");
    let mut committed = BTreeMap::new();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll");
        if records.is_empty() && !committed.is_empty() {
            break;
        }
        for r in records {
            seen.lock().expect("lock").push((r.tp.clone(), r.offset));
            committed.insert(r.tp, r.offset + 1);
        }
        let offsets: Vec<_> = committed.clone().into_iter().collect();
        consumer
            .commit(&offsets)
            .await
            .expect("commit before the pause");
    }
    assert!(!committed.is_empty(), "b consumed before the pause");
    sleep(Duration::from_secs(20)).await;
    let offsets: Vec<_> = committed.into_iter().collect();
    let after_pause = consumer.commit(&offsets).await;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        for r in consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
        {
            seen.lock().expect("lock").push((r.tp.clone(), r.offset));
        }
    }
    (after_pause, consumer.assignment())
}

#[test]
fn a_paused_consumer_is_removed_its_commit_fails_and_it_rejoins_after_resuming() {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        let start = Instant::now();
        let broker = handle
            .create_node()
            .name("broker-1")
            .ip(broker_ip(1))
            .build();
        broker.spawn(fake_broker::serve(start));
        let seen = Seen::default();
        let a = handle
            .create_node()
            .name("consumer-a")
            .ip([10, 0, 2, 1].into())
            .build();
        let b = handle
            .create_node()
            .name("consumer-b")
            .ip([10, 0, 2, 2].into())
            .build();
        let task_a = a.spawn(consume(seen.clone(), Duration::from_secs(50), false));
        let task_b = b.spawn(consume_through_a_pause(seen.clone()));
        sleep(Duration::from_secs(12)).await;
        handle.pause(b.id());
        sleep(Duration::from_secs(22)).await;
        handle.resume(b.id());
        let (after_pause, b_assignment) = task_b.await.expect("consumer b");
        let a_assignment = task_a.await.expect("consumer a");
        let Err(ClientError::CommitFailed(_)) = after_pause else {
            panic!("a removed member's commit must fail, got {after_pause:?}")
        };
        assert!(!b_assignment.is_empty(), "b rejoined");
        assert!(!a_assignment.is_empty(), "a kept a share");
        assert_eq!(
            a_assignment.len() + b_assignment.len(),
            fake_broker::PARTITIONS as usize
        );
        let mut seen = seen.lock().expect("lock").clone();
        let total = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), total, "no record consumed twice");
    });
}

/// Runs one consumer with `config` for 10 s after `setup` ran against the broker; returns
/// what it consumed.
fn consume_alone(config: ConsumerConfig, setup: Option<Request>) -> Vec<(TopicPartition, Offset)> {
    consume_alone_seeking(config, setup, None)
}

/// A seek a test asks for: once `tp` was consumed up to `after`, seek it to `to`.
type SeekOnce = Option<(TopicPartition, Offset, Offset)>;

/// [`consume_alone`], seeking once as `seek` says.
fn consume_alone_seeking(
    config: ConsumerConfig,
    setup: Option<Request>,
    mut seek: SeekOnce,
) -> Vec<(TopicPartition, Offset)> {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async move {
        let handle = madsim::runtime::Handle::current();
        let start = Instant::now();
        let broker = handle
            .create_node()
            .name("broker-1")
            .ip(broker_ip(1))
            .build();
        broker.spawn(fake_broker::serve(start));
        let node = handle
            .create_node()
            .name("consumer")
            .ip([10, 0, 2, 1].into())
            .build();
        let seen = Seen::default();
        let task_seen = seen.clone();
        node.spawn(async move {
            let conn = Connection::open(1).await.expect("client endpoint");
            if let Some(request) = setup {
                let response = conn.request(1, request, Duration::from_secs(1)).await;
                assert!(
                    matches!(response, Ok(Response::OffsetCommit)),
                    "{response:?}"
                );
            }
            let mut consumer = SimConsumer::new(conn, config);
            consumer
                .subscribe(&[fake_broker::TOPIC.to_string()])
                .await
                .expect("subscribe");
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                for r in consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .expect("poll")
                {
                    if seek
                        .as_ref()
                        .is_some_and(|(tp, after, _)| *tp == r.tp && r.offset >= *after)
                    {
                        let (tp, _, to) = seek.take().expect("seek");
                        consumer.seek(&tp, to).expect("seek an assigned partition");
                        let unassigned = TopicPartition::new(fake_broker::TOPIC, 99);
                        assert!(consumer.seek(&unassigned, 0).is_err(), "not assigned");
                    }
                    task_seen.lock().expect("lock").push((r.tp, r.offset));
                }
            }
        })
        .await
        .expect("consumer task");
        let seen = seen.lock().expect("lock").clone();
        seen
    })
}

/// Checklist D: a consumer with no committed offset starts at the end (latest) or at the
/// log start offset (earliest) per auto.offset.reset.
#[test]
fn without_a_committed_offset_latest_starts_at_the_end_and_earliest_at_the_start() {
    let mut latest = test_config();
    latest.auto_offset_reset = AutoOffsetReset::Latest;
    assert_eq!(consume_alone(latest, None), Vec::new());
    let all = consume_alone(test_config(), None);
    let expected = fake_broker::PARTITIONS as usize * fake_broker::RECORDS_PER_PARTITION as usize;
    assert_eq!(all.len(), expected);
}

/// `seek` (Java's `KafkaConsumer.seek`): the next polls read the partition from the new
/// position, dropping what was already fetched of it; other partitions are untouched. A
/// partition not assigned cannot be sought.
#[test]
fn seek_rereads_a_partition_from_the_given_offset() {
    let tp0 = TopicPartition::new(fake_broker::TOPIC, 0);
    let seen = consume_alone_seeking(test_config(), None, Some((tp0.clone(), 5, 2)));
    let of = |p: u32| -> Vec<Offset> {
        seen.iter()
            .filter(|(tp, _)| tp.partition == p)
            .map(|(_, o)| *o)
            .collect()
    };
    let n = fake_broker::RECORDS_PER_PARTITION;
    let expected: Vec<Offset> = (0..=5).chain(2..n).collect();
    let first = of(0);
    // Records fetched past 5 before the seek may have been polled in the same batch.
    let resumed = first.iter().rposition(|&o| o == 2).expect("re-read from 2");
    assert_eq!(
        first[resumed..],
        expected[6..],
        "re-read in order from the seek"
    );
    assert!(first[..resumed].starts_with(&expected[..6]), "{first:?}");
    assert_eq!(of(1), (0..n).collect::<Vec<_>>());
}

#[test]
fn a_committed_offset_out_of_range_is_reset_by_auto_offset_reset() {
    let simple_commit = Request::OffsetCommit {
        group_id: "g".into(),
        generation: -1,
        member_id: String::new(),
        offsets: vec![(TopicPartition::new(fake_broker::TOPIC, 0), 50)],
    };
    let seen = consume_alone(test_config(), Some(simple_commit));
    let partition_0 = seen.iter().filter(|(tp, _)| tp.partition == 0).count();
    assert_eq!(
        partition_0,
        fake_broker::RECORDS_PER_PARTITION as usize,
        "reset to earliest"
    );
}

#[test]
fn auto_offset_reset_none_without_a_committed_offset_is_fatal() {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        let start = Instant::now();
        let broker = handle
            .create_node()
            .name("broker-1")
            .ip(broker_ip(1))
            .build();
        broker.spawn(fake_broker::serve(start));
        let node = handle
            .create_node()
            .name("consumer")
            .ip([10, 0, 2, 1].into())
            .build();
        let outcome = node
            .spawn(async {
                let conn = Connection::open(1).await.expect("client endpoint");
                let mut config = test_config();
                config.auto_offset_reset = AutoOffsetReset::None;
                let mut consumer = SimConsumer::new(conn, config);
                consumer
                    .subscribe(&[fake_broker::TOPIC.to_string()])
                    .await
                    .expect("subscribe");
                for _ in 0..40 {
                    consumer.poll(Duration::from_millis(500)).await?;
                }
                Ok(())
            })
            .await
            .expect("consumer task");
        assert!(matches!(outcome, Err(ClientError::Fatal(_))), "{outcome:?}");
    });
}

/// Consumes every record and commits, then idles 25 s without polling (well within
/// `max.poll.interval.ms`) and commits again: the result of that commit.
async fn drain_then_idle() -> Result<(), ClientError> {
    let conn = Connection::open(1).await.expect("client endpoint");
    let mut config = test_config();
    config.request_timeout_ms = 2_000;
    let mut consumer = SimConsumer::new(conn, config);
    consumer
        .subscribe(&[fake_broker::TOPIC.to_string()])
        .await
        .expect("subscribe");
    let mut committed = BTreeMap::new();
    let end = Instant::now() + Duration::from_secs(6);
    while Instant::now() < end {
        for r in consumer
            .poll(Duration::from_millis(500))
            .await
            .expect("poll")
        {
            committed.insert(r.tp, r.offset + 1);
        }
    }
    let offsets: Vec<_> = committed.into_iter().collect();
    let expected = fake_broker::PARTITIONS as usize;
    assert_eq!(offsets.len(), expected, "drained before the cut");
    consumer
        .commit(&offsets)
        .await
        .expect("commit before the cut");
    sleep(Duration::from_secs(25)).await;
    consumer.commit(&offsets).await
}

/// A heartbeat times out (the link to the coordinator is cut for 3 s, longer than
/// `request.timeout.ms`), which marks the coordinator unknown. Like Java's heartbeat
/// thread, the heartbeat task must look it up again; before, it stopped for good while
/// the member believed itself stable, and the member expired unnoticed.
#[test]
fn the_heartbeat_task_finds_the_coordinator_again_after_a_timeout() {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        let start = Instant::now();
        let broker = handle
            .create_node()
            .name("broker-1")
            .ip(broker_ip(1))
            .build();
        broker.spawn(fake_broker::serve(start));
        let node = handle
            .create_node()
            .name("consumer")
            .ip([10, 0, 2, 1].into())
            .build();
        let task = node.spawn(drain_then_idle());
        cut_link(
            &node,
            &broker,
            Duration::from_secs(9),
            Duration::from_secs(3),
        )
        .await;
        let after_idle = task.await.expect("consumer task");
        assert!(
            after_idle.is_ok(),
            "the member kept heartbeating: {after_idle:?}"
        );
    });
}

/// Waits `after`, then cuts the link between `a` and `b` both ways for `cut_for`.
async fn cut_link(
    a: &madsim::runtime::NodeHandle,
    b: &madsim::runtime::NodeHandle,
    after: Duration,
    cut_for: Duration,
) {
    sleep(after).await;
    let net = madsim::net::NetSim::current();
    net.clog_link(a.id(), b.id());
    net.clog_link(b.id(), a.id());
    sleep(cut_for).await;
    net.unclog_link(a.id(), b.id());
    net.unclog_link(b.id(), a.id());
}

/// A consumer of the fake broker's topic, subscribed; listening for revocations if
/// `listen`.
async fn subscribed(config: ConsumerConfig, listen: bool) -> SimConsumer {
    let conn = Connection::open(1).await.expect("client endpoint");
    let mut consumer = SimConsumer::new(conn, config);
    if listen {
        assert!(consumer.listen_for_revocations());
    }
    consumer
        .subscribe(&[fake_broker::TOPIC.to_string()])
        .await
        .expect("subscribe");
    consumer
}

/// One poll of at most 500 ms; `next` learns the next offset of each partition it returned.
async fn poll_tracking(
    consumer: &mut SimConsumer,
    next: &mut BTreeMap<TopicPartition, Offset>,
) -> Vec<ConsumedRecord> {
    let records = consumer
        .poll(Duration::from_millis(500))
        .await
        .expect("poll");
    for r in &records {
        next.insert(r.tp.clone(), r.offset + 1);
    }
    records
}

/// What a listening consumer saw when a second member joined: the revocation it was handed
/// (if any), the result of committing the revoked partitions before its next poll, and its
/// assignment at the end.
type RevocationSeen = (Option<Revocation>, Option<Result<(), ClientError>>, usize);

/// Consumes alone, listening for revocations, for 15 s (a second member joins at 5 s);
/// commits what it consumed when handed a revocation, before polling again.
async fn consume_listening() -> RevocationSeen {
    let mut consumer = subscribed(test_config(), true).await;
    let mut next = BTreeMap::new();
    let (mut revocation, mut commit) = (None, None);
    let end = Instant::now() + Duration::from_secs(15);
    while Instant::now() < end {
        let records = poll_tracking(&mut consumer, &mut next).await;
        if let Some(r) = consumer.take_revocation() {
            assert!(records.is_empty(), "a revoking poll returns nothing");
            assert_eq!(consumer.assignment(), r.partitions, "still assigned");
            let offsets: Vec<_> = next.clone().into_iter().collect();
            commit.get_or_insert(consumer.commit(&offsets).await);
            revocation.get_or_insert(r);
        }
    }
    (revocation, commit, consumer.assignment().len())
}

/// Java's `onJoinPrepare` with a rebalance listener: before rejoining for the new member,
/// the consumer hands out its whole assignment (eager) while still owning it, and a commit
/// of those partitions in the old generation succeeds (the group is preparing the
/// rebalance); then it rejoins and keeps a share.
#[test]
fn a_listening_consumer_hands_out_its_partitions_before_it_rejoins_and_can_commit_them() {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        start_fake_broker(&handle);
        let a = handle
            .create_node()
            .name("consumer-a")
            .ip([10, 0, 2, 1].into())
            .build();
        let b = handle
            .create_node()
            .name("consumer-b")
            .ip([10, 0, 2, 2].into())
            .build();
        let task_a = a.spawn(consume_listening());
        sleep(Duration::from_secs(5)).await;
        let task_b = b.spawn(consume(Seen::default(), Duration::from_secs(8), false));
        let (revocation, commit, a_partitions) = task_a.await.expect("consumer a");
        task_b.await.expect("consumer b");
        let revocation = revocation.expect("a revocation was handed out before the rejoin");
        assert_eq!(
            revocation.partitions,
            partitions(fake_broker::TOPIC, &[0, 1, 2])
        );
        assert!(!revocation.lost, "the generation was still valid");
        assert_eq!(
            commit,
            Some(Ok(())),
            "the revoked partitions' commit went through"
        );
        assert!((1..3).contains(&a_partitions), "a rejoined with a share");
    });
    eosim_sim::marks::assert_hit(&["client:consumer-revocation-handed-out"]);
}

/// Java's `pause`: a paused partition's records are held back while the others flow, and
/// come once it is resumed; pausing a partition not assigned is refused.
#[test]
fn a_paused_partition_is_held_back_until_resumed() {
    let runtime = madsim::runtime::Runtime::new();
    let (while_paused, after) = runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        start_fake_broker(&handle);
        let node = handle
            .create_node()
            .name("consumer")
            .ip([10, 0, 2, 1].into())
            .build();
        node.spawn(async move {
            let conn = Connection::open(1).await.expect("client endpoint");
            let mut consumer = SimConsumer::new(conn, test_config());
            consumer
                .subscribe(&[fake_broker::TOPIC.to_string()])
                .await
                .expect("subscribe");
            let tp0 = TopicPartition::new(fake_broker::TOPIC, 0);
            let mut seen = Vec::new();
            while consumer.assignment().is_empty() {
                seen.extend(
                    consumer
                        .poll(Duration::from_millis(100))
                        .await
                        .expect("poll"),
                );
            }
            assert!(consumer.pause(&[TopicPartition::new("t", 99)]).is_err());
            consumer
                .pause(std::slice::from_ref(&tp0))
                .expect("pause an assigned partition");
            let mut while_paused = Vec::new();
            for _ in 0..20 {
                let records = consumer
                    .poll(Duration::from_millis(200))
                    .await
                    .expect("poll");
                while_paused.extend(records.into_iter().map(|r| r.tp.partition));
            }
            consumer.resume(&[tp0]).expect("resume");
            let mut after = Vec::new();
            for _ in 0..20 {
                let records = consumer
                    .poll(Duration::from_millis(200))
                    .await
                    .expect("poll");
                after.extend(records.into_iter().map(|r| r.tp.partition));
            }
            (while_paused, after)
        })
        .await
        .expect("consumer task")
    });
    assert!(
        !while_paused.contains(&0),
        "nothing of p0 while paused: {while_paused:?}"
    );
    assert!(!while_paused.is_empty(), "the others flowed");
    assert!(after.contains(&0), "p0 came after resume: {after:?}");
}

/// What a cooperative member saw: its assignment after every poll (partition numbers), the
/// revocations it was handed, and whether committing their offsets then succeeded.
#[derive(Debug, Default)]
struct CooperativeSeen {
    assignments: Vec<Vec<u32>>,
    revocations: Vec<(Revocation, bool)>,
}

/// A `cooperative-sticky` member that polls and commits what it got for `run_for`
/// (commits refused while the group rebalances are let go, as Java's
/// `RebalanceInProgressException` would be); with `listen` it commits the positions of a
/// revocation's partitions when handed one, before polling again.
async fn consume_cooperative(run_for: Duration, listen: bool) -> CooperativeSeen {
    let mut config = test_config();
    config.partition_assignment_strategy = vec![AssignmentStrategy::CooperativeSticky];
    let mut consumer = subscribed(config, listen).await;
    let mut seen = CooperativeSeen::default();
    let mut next = BTreeMap::new();
    let end = Instant::now() + run_for;
    while Instant::now() < end {
        let records = poll_tracking(&mut consumer, &mut next).await;
        if let Some(revoked) = commit_polled(&mut consumer, &records, &next).await {
            seen.revocations.push(revoked);
        }
        seen.assignments.push(partition_numbers(&consumer));
    }
    seen
}

/// After a poll that returned `records` (`next`: the next offset of each partition polled
/// so far): commits the positions of a handed-out revocation's partitions and returns it
/// with whether that commit went through; else commits every position when records came
/// (a refused commit is let go, as Java's `RebalanceInProgressException` would be).
async fn commit_polled(
    consumer: &mut SimConsumer,
    records: &[ConsumedRecord],
    next: &BTreeMap<TopicPartition, Offset>,
) -> Option<(Revocation, bool)> {
    if let Some(r) = consumer.take_revocation() {
        let mine: Vec<_> = (next.iter())
            .filter(|(tp, _)| r.partitions.contains(tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let committed = consumer.commit(&mine).await.is_ok();
        return Some((r, committed));
    }
    if !records.is_empty() {
        let offsets: Vec<_> = next.clone().into_iter().collect();
        let _ = consumer.commit(&offsets).await;
    }
    None
}

/// The partition numbers of `consumer`'s assignment.
fn partition_numbers(consumer: &SimConsumer) -> Vec<u32> {
    consumer
        .assignment()
        .iter()
        .map(|tp| tp.partition)
        .collect()
}

/// Starts the fake broker on node `broker-1`, returned.
fn start_fake_broker(handle: &madsim::runtime::Handle) -> madsim::runtime::NodeHandle {
    let broker = handle
        .create_node()
        .name("broker-1")
        .ip(broker_ip(1))
        .build();
    broker.spawn(fake_broker::serve(Instant::now()));
    broker
}

/// Runs `a` from the start, `b` from 4 s and `c` (if any) from 9 s, each on its own node
/// against the fake broker, each for 20 s from the start; returns what they saw.
fn run_cooperative_members(three: bool, listen_a: bool) -> Vec<CooperativeSeen> {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async move {
        let handle = madsim::runtime::Handle::current();
        start_fake_broker(&handle);
        let starts: &[u64] = if three { &[0, 4, 9] } else { &[0, 4] };
        let (mut tasks, mut now) = (Vec::new(), 0);
        for (i, &start) in (1u8..).zip(starts) {
            sleep(Duration::from_secs(start - now)).await;
            now = start;
            let node = handle
                .create_node()
                .name(format!("consumer-{i}"))
                .ip([10, 0, 2, i].into())
                .build();
            let run_for = Duration::from_secs(20 - start);
            tasks.push(node.spawn(consume_cooperative(run_for, listen_a && i == 1)));
        }
        let mut seen = Vec::new();
        for task in tasks {
            seen.push(task.await.expect("consumer task"));
        }
        seen
    })
}

/// KIP-429: when a third member joins, only partitions that move are revoked. The member
/// whose share stays the same (b, with p2 since the second member's rebalance) never gives
/// it up, and the first member never stands empty-handed: under the eager protocol both
/// would hold nothing while each rebalance ran.
#[test]
fn a_cooperative_rebalance_revokes_only_what_moves() {
    let seen = run_cooperative_members(true, false);
    let finals: Vec<&Vec<u32>> = seen.iter().map(|s| s.assignments.last().unwrap()).collect();
    let mut all: Vec<u32> = finals.iter().copied().flatten().copied().collect();
    all.sort();
    assert_eq!(
        all,
        vec![0, 1, 2],
        "each partition once at the end: {finals:?}"
    );
    assert!(finals.iter().all(|f| f.len() == 1), "balanced: {finals:?}");
    for (name, s) in ["a", "b"].iter().zip(&seen) {
        let first = s.assignments.iter().position(|a| !a.is_empty());
        let owned = &s.assignments[first.expect("it got partitions")..];
        assert!(
            owned.iter().all(|a| !a.is_empty()),
            "{name} stood empty during a rebalance: {:?}",
            s.assignments
        );
    }
    let b = &seen[1].assignments;
    let b_owned: Vec<&Vec<u32>> = b.iter().filter(|a| !a.is_empty()).collect();
    assert!(
        b_owned.iter().all(|a| *a == b_owned[0]),
        "b's partition was revoked when c joined: {b:?}"
    );
    eosim_sim::marks::assert_hit(&[
        "client:cooperative-revoke-partial",
        "client:cooperative-second-rejoin",
    ]);
}

/// With a rebalance listener, a cooperative member is handed only the partitions the new
/// assignment moved (`onPartitionsRevoked` from `onJoinComplete`), still owns them while
/// it commits their offsets in the new generation, and keeps the rest throughout.
#[test]
fn a_cooperative_revocation_names_only_the_moved_partitions() {
    let seen = run_cooperative_members(false, true);
    let a = &seen[0];
    let [(revocation, committed)] = a.revocations.as_slice() else {
        panic!("one revocation expected: {:?}", a.revocations);
    };
    assert_eq!(revocation.partitions, partitions(fake_broker::TOPIC, &[2]));
    assert!(!revocation.lost, "the generation was valid");
    assert!(*committed, "the revoked partition's offsets were committed");
    assert_eq!(a.assignments.last(), Some(&vec![0, 1]));
    assert_eq!(seen[1].assignments.last(), Some(&vec![2]));
    eosim_sim::marks::assert_hit(&["client:consumer-revocation-handed-out"]);
}

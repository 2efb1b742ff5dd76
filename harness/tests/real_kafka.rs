//! The rdkafka clients against Apache Kafka 4.x started natively (KRaft): produce,
//! consume with a group, commit, re-read committed offsets, murmur2 placement, pause (and
//! its end at a rebalance) and leader failover, and a differential test against the Kafka
//! model. Runs only with `EOSIM_REAL=1`.
#![cfg(not(madsim))]

#[path = "real_support/differential.rs"]
mod differential;
#[path = "real_support/group_differential.rs"]
mod group_differential;
#[allow(dead_code)]
#[path = "real_support/real_cluster.rs"]
mod real_cluster;
mod real_support;
#[path = "real_support/wire.rs"]
mod wire;

use bytes::Bytes;
use eosim::client::real::{RealAdmin, RealConsumer, RealProducer};
use eosim::client::{
    Admin, AutoOffsetReset, ClientError, ConsumedRecord, Consumer, ConsumerConfig, Delivery,
    Producer, ProducerConfig, ProducerRecord,
};
use eosim::real::provision::Kafka;
use eosim_sim::kafka::group::GroupCoordinator;
use eosim_sim::kafka::model::Reply;
use eosim_sim::kafka::{
    ClusterConfig, GroupProtocols, KafkaError, Offset, Request, Response, StaticMemberRejoin,
    TopicConfig, TopicPartition,
};
use real_support::{one_broker, real_enabled, runtime, service_dir, timed};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

fn record(topic: &str, key: &str, value: &str) -> ProducerRecord {
    ProducerRecord {
        topic: topic.into(),
        partition: None,
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: vec![("h".into(), Bytes::from_static(b"1"))],
    }
}

fn consumer_config(group: &str) -> ConsumerConfig {
    let mut c = ConsumerConfig::new(group);
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.session_timeout_ms = 10_000;
    c.fetch_max_wait_ms = 100;
    c
}

/// Polls until `count` records arrived or `max` passed.
async fn poll_until(
    consumer: &mut RealConsumer,
    count: usize,
    max: Duration,
) -> Vec<ConsumedRecord> {
    let started = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < count && started.elapsed() < max {
        seen.extend(
            consumer
                .poll(Duration::from_millis(500))
                .await
                .expect("poll"),
        );
    }
    seen
}

/// The next offset to read per partition after `records`.
fn next_offsets(records: &[ConsumedRecord]) -> Vec<(TopicPartition, Offset)> {
    let mut next: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    for r in records {
        let e = next.entry(r.tp.clone()).or_insert(0);
        *e = (*e).max(r.offset + 1);
    }
    next.into_iter().collect()
}

/// Creates `topic` with `partitions` partitions, replication factor 1.
async fn create_topic(bootstrap: &str, topic: &str, partitions: u32) {
    RealAdmin::new(bootstrap, ADMIN_TIMEOUT)
        .unwrap()
        .create_topic(topic, partitions, 1, TopicConfig::default())
        .await
        .unwrap();
}

async fn produce_all(producer: &RealProducer, topic: &str, keys: &[String]) -> Vec<Delivery> {
    let mut deliveries = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let d = producer
            .send(record(topic, key, &format!("v{i}")))
            .await
            .expect("acked");
        deliveries.push(d);
    }
    deliveries
}

#[test]
fn one_broker_produce_consume_commit_and_reread_committed_offsets() {
    if !real_enabled("one_broker_produce_consume_commit_and_reread_committed_offsets") {
        return;
    }
    let (mut kafka, _dir) = one_broker("kafka-1");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        let admin = RealAdmin::new(&bootstrap, ADMIN_TIMEOUT).unwrap();
        let created = admin
            .create_topic("roundtrip", 3, 1, TopicConfig::default())
            .await;
        assert_eq!(created, Ok(()));
        let again = admin
            .create_topic("roundtrip", 3, 1, TopicConfig::default())
            .await;
        assert_eq!(
            again,
            Err(ClientError::Kafka(KafkaError::TopicAlreadyExists))
        );
        let producer = RealProducer::new(&bootstrap, ProducerConfig::default()).unwrap();
        let keys: Vec<String> = (0..30).map(|i| format!("k{i}")).collect();
        let deliveries = produce_all(&producer, "roundtrip", &keys).await;
        assert_dense_per_partition(&deliveries);
        consume_all_then_commit(&bootstrap, &keys, &deliveries).await;
        new_member_starts_at_committed_offsets(&bootstrap, &producer).await;
        pause_makes_produce_time_out(&mut kafka, &bootstrap).await;
    });
}

/// Per partition, offsets of one idempotent producer are dense from 0.
fn assert_dense_per_partition(deliveries: &[Delivery]) {
    let mut per_partition: BTreeMap<u32, Vec<Offset>> = BTreeMap::new();
    for d in deliveries {
        per_partition.entry(d.partition).or_default().push(d.offset);
    }
    for offsets in per_partition.values() {
        assert_eq!(*offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    }
}

/// A lone group member reads every record where it was delivered, commits, and reads the
/// committed offsets back.
async fn consume_all_then_commit(bootstrap: &str, keys: &[String], deliveries: &[Delivery]) {
    let mut consumer = RealConsumer::new(bootstrap, consumer_config("g-roundtrip")).unwrap();
    consumer
        .subscribe(&["roundtrip".to_string()])
        .await
        .unwrap();
    let seen = poll_until(&mut consumer, keys.len(), Duration::from_secs(60)).await;
    assert_eq!(
        seen.len(),
        keys.len(),
        "every produced record is consumed once"
    );
    for r in &seen {
        let value = std::str::from_utf8(r.value.as_ref().unwrap()).unwrap();
        let i: usize = value[1..].parse().unwrap();
        let delivered = (deliveries[i].partition, deliveries[i].offset);
        assert_eq!((r.tp.partition, r.offset), delivered);
        assert_eq!(r.key.as_deref(), Some(keys[i].as_bytes()));
        assert_eq!(r.headers, vec![("h".to_string(), Bytes::from_static(b"1"))]);
    }
    let all: Vec<TopicPartition> = (0..3)
        .map(|p| TopicPartition::new("roundtrip", p))
        .collect();
    assert_eq!(
        consumer.assignment(),
        all,
        "range assignor gives a lone member everything"
    );
    let next = next_offsets(&seen);
    consumer.commit(&next).await.expect("commit");
    assert_eq!(
        consumer.committed(&all).await.unwrap(),
        next,
        "committed offsets re-read"
    );
    consumer.close().await;
}

/// A new member of the group starts at the committed offsets.
async fn new_member_starts_at_committed_offsets(bootstrap: &str, producer: &RealProducer) {
    let keys = ["a".to_string(), "b".into(), "c".into()];
    let more = produce_all(producer, "roundtrip", &keys).await;
    let mut second = RealConsumer::new(bootstrap, consumer_config("g-roundtrip")).unwrap();
    second.subscribe(&["roundtrip".to_string()]).await.unwrap();
    let rest = poll_until(&mut second, 3, Duration::from_secs(60)).await;
    let mut got: Vec<(u32, Offset)> = rest.iter().map(|r| (r.tp.partition, r.offset)).collect();
    let mut want: Vec<(u32, Offset)> = more.iter().map(|d| (d.partition, d.offset)).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "only records after the committed offsets");
    second.close().await;
}

/// SIGSTOP of the only broker: a send with a short delivery timeout ends in an ambiguous
/// timeout; after SIGCONT the next send is acknowledged.
async fn pause_makes_produce_time_out(kafka: &mut Kafka, bootstrap: &str) {
    let config = ProducerConfig {
        delivery_timeout_ms: 3_000,
        request_timeout_ms: 2_000,
        ..Default::default()
    };
    let producer = RealProducer::new(bootstrap, config).unwrap();
    producer
        .send(record("roundtrip", "p", "before"))
        .await
        .expect("acked before pause");
    kafka.pause(1).unwrap();
    let err = producer
        .send(record("roundtrip", "p", "paused"))
        .await
        .expect_err("no ack while paused");
    assert!(matches!(err, ClientError::Timeout { .. }), "got {err:?}");
    assert!(err.is_ambiguous());
    kafka.resume(1).unwrap();
    producer
        .send(record("roundtrip", "p", "after"))
        .await
        .expect("acked after resume");
}

#[test]
fn keyed_records_land_on_the_murmur2_partition() {
    if !real_enabled("keyed_records_land_on_the_murmur2_partition") {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-murmur2");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        create_topic(&bootstrap, "keyed", 3).await;
        let producer = RealProducer::new(&bootstrap, ProducerConfig::default()).unwrap();
        let mut keys: Vec<String> = vec!["0".into(), "1".into(), "key-1".into()];
        keys.extend((0..20).map(|i| format!("user-{i}")));
        for key in &keys {
            let d = producer.send(record("keyed", key, "v")).await.unwrap();
            let model = eosim_sim::kafka::murmur2::partition_for_key(key.as_bytes(), 3);
            assert_eq!(
                d.partition, model,
                "key {key:?}: Kafka put it on {}, murmur2 says {model}",
                d.partition
            );
        }
    });
}

/// What a static member (`group.instance.id`) that restarts is told, from the first
/// JoinGroup to the SyncGroup after the restart: (generation after the restart, whether it
/// is told it leads, whether the leader named is its replaced id, `skip_assignment`,
/// members listed, the assignment its SyncGroup gets), in group `group`. `call` answers
/// one request.
fn static_restart(
    group: &str,
    call: &mut dyn FnMut(Request) -> Response,
) -> (i32, bool, bool, bool, usize, Vec<TopicPartition>) {
    let join = |member_id: &str| Request::JoinGroup {
        group_id: group.into(),
        member_id: member_id.into(),
        group_instance_id: Some("instance-0".into()),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        topics: vec!["t".into()],
        protocols: GroupProtocols::offering(&["range"]),
    };
    let sync = |member_id: &str, generation: i32, to: &[TopicPartition]| Request::SyncGroup {
        group_id: group.into(),
        generation,
        member_id: member_id.into(),
        assignments: BTreeMap::from([(member_id.to_string(), to.to_vec())]),
    };
    let Response::JoinGroup {
        member_id: first,
        generation,
        ..
    } = call(join(""))
    else {
        panic!("the first JoinGroup of a static member is answered with a generation");
    };
    let owned = vec![TopicPartition::new("t", 0)];
    assert!(matches!(
        call(sync(&first, generation, &owned)),
        Response::SyncGroup { .. }
    ));
    // The restart: the same instance id, no member id.
    let Response::JoinGroup {
        member_id,
        generation,
        leader,
        skip_assignment,
        members,
        ..
    } = call(join(""))
    else {
        panic!("the restarted member's JoinGroup is answered with a generation");
    };
    let Response::SyncGroup { assignment } = call(sync(&member_id, generation, &[])) else {
        panic!("the restarted member's SyncGroup is answered with its assignment");
    };
    let told_leads = leader == member_id;
    (
        generation,
        told_leads,
        leader == first,
        skip_assignment,
        members.len(),
        assignment,
    )
}

/// KAFKA-13435 / KIP-814 on real Kafka: a static member restarted in a Stable group
/// keeps its generation and partitions; through JoinGroup v5 it is told its replaced id
/// leads, through v9 that it leads and must skip the assignment. The model gives the same
/// answers under `pre-kip814` and `kip814`.
#[test]
fn a_restarted_static_leader_is_answered_as_the_model_answers_before_and_after_kip_814() {
    if !real_enabled(
        "a_restarted_static_leader_is_answered_as_the_model_answers_before_and_after_kip_814",
    ) {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-static");
    let address = kafka.bootstrap_servers();
    let cases = [
        (5, StaticMemberRejoin::PreKip814),
        (9, StaticMemberRejoin::Kip814),
    ];
    let mut answers = Vec::new();
    for (version, rejoin) in cases {
        let group = format!("g-static-v{version}");
        group_differential::prepare_real(&address, &group).expect("coordinator ready");
        let mut conn = wire::WireConn::connect(&address).expect("connects");
        conn.join_group_version = version;
        let real = static_restart(&group, &mut |r| conn.call(&r).expect("answered"));
        let mut model = GroupCoordinator::new(ClusterConfig {
            group_initial_rebalance_delay_ms: 0,
            static_member_rejoin: rejoin,
            ..ClusterConfig::default()
        });
        let mut now = 0;
        let simulated = static_restart(&group, &mut |r| {
            now += 1;
            match model.handle(now, r) {
                Reply::Done(response) => response,
                Reply::Parked(token) => panic!("the model parked {token:?}"),
            }
        });
        assert_eq!(real, simulated, "JoinGroup v{version} against {rejoin:?}");
        assert_eq!(real.0, 1, "no rebalance: the generation stays");
        assert_eq!(
            real.5,
            vec![TopicPartition::new("t", 0)],
            "the partitions stay"
        );
        answers.push(real);
    }
    assert_eq!(
        (answers[0].1, answers[0].2),
        (false, true),
        "v5: the old id leads"
    );
    assert_eq!(
        (answers[1].1, answers[1].3),
        (true, true),
        "v9: it leads, skips"
    );
}

#[test]
fn leader_failover_on_three_brokers_keeps_acknowledged_records() {
    if !real_enabled("leader_failover_on_three_brokers_keeps_acknowledged_records") {
        return;
    }
    let dir = service_dir("kafka-3");
    let mut kafka =
        timed("kafka (3 brokers) start", || Kafka::start(dir.path(), 3)).expect("kafka starts");
    let bootstrap = kafka.bootstrap_servers();
    let rt = runtime();
    let topic_config = TopicConfig {
        min_insync_replicas: 2,
        ..Default::default()
    };
    rt.block_on(async {
        let admin = RealAdmin::new(&bootstrap, ADMIN_TIMEOUT).unwrap();
        admin
            .create_topic("failover", 1, 3, topic_config)
            .await
            .unwrap();
    });
    let producer = RealProducer::new(&bootstrap, ProducerConfig::default()).unwrap();
    let before: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    rt.block_on(produce_all(&producer, "failover", &before));
    let old = timed("kill partition leader", || kafka.kill_leader("failover", 0)).unwrap();
    let new = timed("new leader elected", || {
        kafka.wait_new_leader("failover", 0, old, 60_000)
    })
    .unwrap();
    assert_ne!(old, new);
    let after: Vec<String> = (0..10).map(|i| format!("a{i}")).collect();
    let acked = rt.block_on(produce_all(&producer, "failover", &after));
    assert_eq!(
        acked.last().map(|d| d.offset),
        Some(19),
        "offsets continue after failover"
    );
    let values = rt.block_on(async {
        let mut consumer = RealConsumer::new(&bootstrap, consumer_config("g-failover")).unwrap();
        consumer.subscribe(&["failover".to_string()]).await.unwrap();
        let seen = poll_until(&mut consumer, 20, Duration::from_secs(60)).await;
        consumer.close().await;
        seen.into_iter()
            .map(|r| (r.offset, r.value.unwrap()))
            .collect::<Vec<_>>()
    });
    let want: Vec<(Offset, Bytes)> = (0..20)
        .map(|i| (i as i64, Bytes::from(format!("v{}", i % 10))))
        .collect();
    assert_eq!(
        values, want,
        "every acknowledged record survives the failover, in order"
    );
    timed("restart killed broker", || kafka.restart(old)).expect("old leader rejoins");
    let pids = kafka.pids();
    assert_eq!(pids.len(), 3);
    timed("stop 3 brokers (SIGTERM)", || kafka.stop());
    for pid in pids {
        real_support::assert_group_gone("kafka", pid);
    }
}

/// Generated sequences of produce (key, acks) / commit / fetch run against one real broker
/// and against `eosim_sim::kafka::model::Cluster`; offsets, committed offsets and what a
/// consumer reads must be equal. See `real_support/differential.rs`.
#[test]
fn model_and_real_kafka_agree_on_offsets_commits_and_fetches() {
    if !real_enabled("model_and_real_kafka_agree_on_offsets_commits_and_fetches") {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-differential");
    let cases = real_support::diff_cases(8);
    let (agreed, ran, tally) = timed(&format!("differential, {cases} cases"), || {
        differential::run(&kafka.bootstrap_servers(), cases)
    });
    real_support::report_agreement("Kafka produce, commit, fetch", agreed, ran, &tally);
}

/// Generated JoinGroup / SyncGroup / Heartbeat / OffsetCommit / LeaveGroup / OffsetFetch
/// requests of three members sent over the wire protocol to one real broker and to the
/// model's group coordinator; every answer, and every held-back answer a request
/// releases, must be equal. Prints the agreement rate. See
/// `real_support/group_differential.rs`.
#[test]
fn model_and_real_kafka_agree_on_the_group_protocol() {
    if !real_enabled("model_and_real_kafka_agree_on_the_group_protocol") {
        return;
    }
    let tally = group_differential_on(1, 16);
    real_support::assert_exercised(
        &tally,
        &[
            "MemberIdRequired",
            "JoinGroup",
            "SyncGroup",
            "Heartbeat",
            "OffsetCommit",
        ],
    );
}

/// The group differential on three brokers (topic `t` with replication factor 3,
/// `min.insync.replicas` 2): every case kills the group coordinator's broker (in half of
/// them after bringing the group to rest), goes on with the coordinator moved, and starts
/// the broker again. Prints the agreement rate.
#[test]
fn model_and_real_kafka_agree_on_the_group_protocol_across_a_coordinator_kill() {
    if !real_enabled("model_and_real_kafka_agree_on_the_group_protocol_across_a_coordinator_kill") {
        return;
    }
    let tally = group_differential_on(3, 5);
    real_support::assert_exercised(
        &tally,
        &[
            "killed",
            "revived",
            "JoinGroup",
            "Heartbeat",
            "OffsetCommit",
        ],
    );
}

/// Runs the group differential on a fresh cluster of `brokers` brokers with topic `t`,
/// `EOSIM_DIFF_CASES` or `default_cases` cases, reports the agreement and returns the tally.
fn group_differential_on(brokers: u32, default_cases: u32) -> BTreeMap<String, u32> {
    let dir = service_dir(&format!("kafka-group-differential-{brokers}"));
    let cluster = timed(&format!("kafka ({brokers} brokers) start"), || {
        real_cluster::RealCluster::start(dir.path(), brokers)
    })
    .expect("kafka starts");
    let admin = RealAdmin::new(cluster.bootstrap(), ADMIN_TIMEOUT).expect("admin");
    let (replication_factor, config) = real_support::model_world::topic_config(brokers);
    let partitions = group_differential::PARTITIONS;
    runtime()
        .block_on(admin.create_topic("t", partitions, replication_factor, config))
        .expect("create topic t");
    let cases = real_support::diff_cases(default_cases);
    let (agreed, ran, tally) = timed(
        &format!("group differential, {brokers} brokers, {cases} cases"),
        || group_differential::run(&cluster, cases),
    );
    let suite = match brokers {
        1 => "Kafka group protocol (wire)",
        _ => "Kafka group protocol (wire), 3 brokers, coordinator kill",
    };
    real_support::report_agreement(suite, agreed, ran, &tally);
    cluster.stop();
    tally
}

/// A member that does not poll within `max.poll.interval.ms` leaves the group; its commit
/// afterwards fails as Java's `CommitFailedException` does, which is not ambiguous: the
/// offsets were not committed.
///
/// A rebalance alone does not make a librdkafka commit fail, unlike Java's: librdkafka
/// rejoins in its background thread without the application polling, and then commits in
/// the new generation, even offsets of partitions the member no longer owns.
#[test]
fn commit_after_max_poll_interval_is_commit_failed() {
    if !real_enabled("commit_after_max_poll_interval_is_commit_failed") {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-poll-interval");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        create_topic(&bootstrap, "slow", 2).await;
        let producer = RealProducer::new(&bootstrap, ProducerConfig::default()).unwrap();
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        produce_all(&producer, "slow", &keys).await;
        let mut config = consumer_config("g-slow");
        config.session_timeout_ms = 6_000;
        config.max_poll_interval_ms = 6_000;
        let mut a = RealConsumer::new(&bootstrap, config).unwrap();
        a.subscribe(&["slow".to_string()]).await.unwrap();
        let seen = poll_until(&mut a, 10, Duration::from_secs(60)).await;
        assert_eq!(seen.len(), 10);
        // Twice `max.poll.interval.ms`: librdkafka checks the interval about once a second
        // and then leaves the group through the coordinator, which takes a moment more.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let err = a
            .commit(&next_offsets(&seen))
            .await
            .expect_err("member left the group");
        assert!(matches!(err, ClientError::CommitFailed(_)), "got {err:?}");
        assert!(!err.is_ambiguous());
        a.close().await;
    });
}

/// The differential runner's regression corpus (no services needed): a failing case's seed
/// is kept in the corpus file, and the next run, whatever its generation seed, replays that
/// case before any generated one.
#[test]
fn a_differential_failure_is_kept_in_the_corpus_and_replayed_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus: &'static str = Box::leak(
        dir.path()
            .join("suite.txt")
            .display()
            .to_string()
            .into_boxed_str(),
    );
    let strategy = 0u32..1_000_000;
    let mut runner = real_support::diff_runner(64, 0, corpus);
    let failed = runner.run(&strategy, |x| {
        proptest::prop_assert!(x < 500_000, "too big: {x}");
        Ok(())
    });
    let Err(proptest::test_runner::TestError::Fail(_, failing)) = failed else {
        panic!("64 cases over 0..1e6 never reached 500000: {failed:?}")
    };
    let kept = std::fs::read_to_string(corpus).expect("the corpus file was written");
    assert!(kept.lines().any(|l| l.starts_with("cc ")), "{kept}");
    // Another generation seed: the kept case still comes first.
    std::env::set_var("EOSIM_DIFF_SEED", "7");
    let mut runner = real_support::diff_runner(4, 0, corpus);
    let seen = std::sync::Mutex::new(Vec::new());
    let _ = runner.run(&strategy, |x| {
        seen.lock().expect("seen").push(x);
        Ok(())
    });
    std::env::remove_var("EOSIM_DIFF_SEED");
    let seen = seen.into_inner().expect("seen");
    assert_eq!(seen.first(), Some(&failing), "replayed: {seen:?}");
}

/// Java's `KafkaConsumer.pause`: the pause of a partition revoked from the consumer is not
/// kept, so a paused partition that a rebalance revokes and gives back is consumed again
/// (apache/kafka#22538 documents it; `SubscriptionState.assignFromSubscribed` builds fresh
/// partition states). librdkafka keeps the pause on the partition object across the
/// unassign and the assign (confluentinc/librdkafka#1849, confluent-kafka-go#193): the
/// real consumer resumes what it is assigned, or a Connect task whose `put` failed before
/// a rebalance never reads its partitions again (the real P2 stall under lost answers).
#[test]
fn a_paused_partition_revoked_and_assigned_again_is_consumed() {
    if !real_enabled("a_paused_partition_revoked_and_assigned_again_is_consumed") {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-pause-rebalance");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        create_topic(&bootstrap, "paused", 2).await;
        let topics = ["paused".to_string()];
        let mut a = RealConsumer::new(&bootstrap, consumer_config("g-paused")).unwrap();
        assert!(a.listen_for_revocations());
        a.subscribe(&topics).await.unwrap();
        let started = Instant::now();
        while a.assignment().len() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "a never assigned"
            );
            a.poll(Duration::from_millis(200)).await.expect("poll");
        }
        a.pause(&a.assignment()).unwrap();
        let producer = RealProducer::new(&bootstrap, ProducerConfig::default()).unwrap();
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let deliveries = produce_all(&producer, "paused", &keys).await;
        let produced_to: std::collections::BTreeSet<u32> =
            deliveries.iter().map(|d| d.partition).collect();
        assert_eq!(produced_to.len(), 2, "both partitions get records");
        let paused = poll_until(&mut a, 1, Duration::from_secs(3)).await;
        assert!(paused.is_empty(), "paused partitions returned {paused:?}");

        // `b` joins (eager: every partition is revoked from `a`), then leaves (revoked
        // again, both given back to `a`).
        let mut b = RealConsumer::new(&bootstrap, consumer_config("g-paused")).unwrap();
        b.subscribe(&topics).await.unwrap();
        let started = Instant::now();
        while b.assignment().is_empty() || a.assignment().len() != 1 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "b never joined"
            );
            let (pa, pb) = tokio::join!(
                a.poll(Duration::from_millis(200)),
                b.poll(Duration::from_millis(200))
            );
            pa.expect("a polls");
            pb.expect("b polls");
            let _ = a.take_revocation();
        }
        b.close().await;

        // Nothing was committed: `a` reads both partitions from the start.
        let started = Instant::now();
        let mut seen = Vec::new();
        while seen.len() < keys.len() && started.elapsed() < Duration::from_secs(60) {
            seen.extend(a.poll(Duration::from_millis(200)).await.expect("poll"));
            let _ = a.take_revocation();
        }
        let read_from: std::collections::BTreeSet<u32> =
            seen.iter().map(|r| r.tp.partition).collect();
        assert_eq!(
            (seen.len(), read_from.len()),
            (keys.len(), 2),
            "after the rebalances `a` (assigned {:?}) read {seen:?}",
            a.assignment()
        );
        a.close().await;
    });
}

/// Consumer `a` of `group` on `config` owns all 4 partitions of `topic`; consumer `b` joins.
/// Returns what `a` was asked to give up and what it kept, once `b` owns some.
async fn revoked_and_kept_when_a_member_joins(
    bootstrap: &str,
    topic: &str,
    config: ConsumerConfig,
) -> (Vec<TopicPartition>, Vec<TopicPartition>) {
    let topics = [topic.to_string()];
    let mut a = RealConsumer::new(bootstrap, config.clone()).unwrap();
    assert!(a.listen_for_revocations());
    a.subscribe(&topics).await.unwrap();
    let started = Instant::now();
    while a.assignment().len() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "a never owned all"
        );
        a.poll(Duration::from_millis(200)).await.expect("a polls");
        let _ = a.take_revocation();
    }
    let mut b = RealConsumer::new(bootstrap, config).unwrap();
    b.subscribe(&topics).await.unwrap();
    let mut revoked = Vec::new();
    let mut kept_while_revoking = Vec::new();
    let started = Instant::now();
    while b.assignment().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "b never joined"
        );
        let (pa, pb) = tokio::join!(
            a.poll(Duration::from_millis(200)),
            b.poll(Duration::from_millis(200))
        );
        pa.expect("a polls");
        pb.expect("b polls");
        if let Some(r) = a.take_revocation() {
            // What a still holds beside the revocation, before it gives it up.
            kept_while_revoking = (a.assignment().into_iter())
                .filter(|tp| !r.partitions.contains(tp))
                .collect();
            revoked.extend(r.partitions);
        }
    }
    b.close().await;
    a.close().await;
    (revoked, kept_while_revoking)
}

/// The group as classic `DescribeGroups` shows it: (state, protocol type, assignor).
fn describe_classic(bootstrap: &str, group: &str) -> Result<(String, String, String), String> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let client: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("client");
    let list = client
        .fetch_group_list(Some(group), Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    let g = list.groups().first().ok_or("no group")?;
    Ok((
        g.state().into(),
        g.protocol_type().into(),
        g.protocol().into(),
    ))
}

/// The real consumer follows the group protocol the scenario names, as the simulated one
/// does: `partition.assignment.strategy = cooperative-sticky` (KIP-429) and KIP-848's
/// `group.protocol = consumer` both move partitions incrementally, so a member that joins
/// takes some of `a`'s partitions while `a` keeps the others (an eager rebalance revokes
/// all four), and classic `DescribeGroups` knows the classic groups but not the KIP-848
/// one. Before, the real consumer always ran librdkafka's eager `range`, whatever the
/// scenario said.
#[test]
fn cooperative_and_kip848_consumers_move_partitions_incrementally_on_real_kafka() {
    if !real_enabled("cooperative_and_kip848_consumers_move_partitions_incrementally_on_real_kafka")
    {
        return;
    }
    let (kafka, _dir) = one_broker("kafka-incremental");
    let bootstrap = kafka.bootstrap_servers();
    runtime().block_on(async {
        create_topic(&bootstrap, "incremental", 4).await;
        let mut cooperative = consumer_config("g-cooperative");
        cooperative.partition_assignment_strategy =
            vec![eosim::client::AssignmentStrategy::CooperativeSticky];
        let mut kip848 = consumer_config("g-kip848");
        kip848.group_protocol = eosim::client::GroupProtocol::Consumer;
        let eager = consumer_config("g-eager");
        for (name, config) in [("cooperative", cooperative), ("kip848", kip848)] {
            let (revoked, kept) =
                revoked_and_kept_when_a_member_joins(&bootstrap, "incremental", config).await;
            assert!(
                !revoked.is_empty() && revoked.len() < 4 && !kept.is_empty(),
                "{name}: a gave up {revoked:?} and kept {kept:?}"
            );
        }
        let (revoked, kept) =
            revoked_and_kept_when_a_member_joins(&bootstrap, "incremental", eager).await;
        assert_eq!(
            (revoked.len(), kept.len()),
            (4, 0),
            "eager range revokes everything: {revoked:?}, kept {kept:?}"
        );
    });
    // Classic DescribeGroups sees the two classic groups (empty now), not the KIP-848 one:
    // Kafka answers it as a group it does not have ("Dead"), since it is not a classic
    // group (`GroupMetadataManager.describeGroups`).
    for classic in ["g-cooperative", "g-eager"] {
        let described = describe_classic(&bootstrap, classic).expect("described");
        assert_eq!(described.0, "Empty", "{classic}: {described:?}");
        assert_eq!(described.1, "consumer", "{classic}: {described:?}");
    }
    let kip848 = describe_classic(&bootstrap, "g-kip848").expect("described");
    assert_eq!(kip848.0, "Dead", "not a classic group: {kip848:?}");
}

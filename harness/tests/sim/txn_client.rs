//! The simulated transactional producer against the Kafka model: what it sends for
//! `send_offsets_to_transaction`, and its queued sends (`send_with_callback`).

use bytes::Bytes;
use eosim::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use eosim::client::sim::{admin::SimAdmin, conn::Connection};
use eosim::client::{
    Admin, ConsumerGroupMetadata, Delivery, ProducerConfig, ProducerRecord, TransactionalProducer,
    TxnError,
};
use eosim::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::{broker_ip, KafkaWorld};
use eosim_sim::kafka::{ClusterConfig, Offset, TopicConfig, TopicPartition};
use eosim_sim::net::{set_message_faults, MessageFaults};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// What each `send_offsets_to_transaction` call returned, in order (`Err` as text).
type Results = Arc<Mutex<Vec<Result<(), String>>>>;

/// One transaction per offsets list, each with one record, each sending that list with the
/// metadata of a member of a group that does not exist at generation 5 (a stale one).
async fn transactions(results: Results, offsets_lists: Vec<Vec<(TopicPartition, Offset)>>) {
    let conn = Connection::open(1).await.expect("connection");
    let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
    admin
        .create_topic("t", 1, 1, TopicConfig::default())
        .await
        .expect("create topic");
    let producer = SimTransactionalProducer::new(conn, TxnProducerConfig::new("tx-1"));
    producer.init_transactions(TIMEOUT).await.expect("init");
    let stale = ConsumerGroupMetadata {
        group_id: "g".into(),
        generation: 5,
        member_id: "m-1".into(),
    };
    for offsets in offsets_lists {
        producer.begin_transaction().expect("begin");
        let record = ProducerRecord {
            topic: "t".into(),
            partition: Some(0),
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
        };
        producer.send(record).await.expect("send");
        let sent = producer
            .send_offsets_to_transaction(&offsets, &stale, TIMEOUT)
            .await
            .map_err(|e| e.to_string());
        let ok = sent.is_ok();
        results.lock().expect("lock").push(sent);
        if ok {
            producer.commit_transaction(TIMEOUT).await.expect("commit");
        } else {
            producer.abort_transaction(TIMEOUT).await.expect("abort");
        }
    }
}

fn run(offsets_lists: Vec<Vec<(TopicPartition, Offset)>>) -> Vec<Result<(), String>> {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async move {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let results = Results::default();
        let (r, lists) = (results.clone(), offsets_lists);
        world.add_node(
            "client",
            IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)),
            move || transactions(r.clone(), lists.clone()),
        );
        madsim::time::sleep(Duration::from_secs(30)).await;
        let results = results.lock().expect("lock").clone();
        results
    })
}

#[test]
fn empty_or_negative_offsets_send_nothing_so_a_stale_generation_is_never_checked() {
    let tp = TopicPartition::new("t", 0);
    let results = run(vec![Vec::new(), vec![(tp.clone(), -1)], vec![(tp, 1)]]);
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], Ok(()), "empty list: no request, no error");
    assert_eq!(
        results[1],
        Ok(()),
        "only an invalid offset: dropped, as librdkafka does"
    );
    let err = results[2]
        .as_ref()
        .expect_err("a real offset reaches the coordinator");
    assert!(
        err.contains("ILLEGAL_GENERATION") || err.contains("IllegalGeneration"),
        "{err}"
    );
}

/// What each queued record's callback got, in the order the callbacks ran.
type Outcomes = Arc<Mutex<Vec<Result<(u32, Offset), TxnError>>>>;

/// What a queued-sends run saw: the callbacks' outcomes when the call under test was
/// made (`before`) and after it, the call's result, and the offset of one record committed
/// in the next transaction.
#[derive(Debug, Default)]
struct QueuedRun {
    before: usize,
    outcomes: Vec<Result<(u32, Offset), TxnError>>,
    ended: Option<Result<(), TxnError>>,
    next_offset: Option<Offset>,
}

fn keyless(partition: u32, i: usize) -> ProducerRecord {
    ProducerRecord {
        topic: "t".into(),
        partition: Some(partition),
        key: None,
        value: Some(Bytes::from(i.to_string())),
        headers: Vec::new(),
    }
}

/// A transaction of 10 records queued with `send_with_callback` to partitions 0 and 1 of a
/// producer lingering 1 s, ended by `commit` (else an abort); then, when it ended well, one
/// more transaction of one awaited record to partition 0. `faults` go on the producer's
/// link to the broker once the producer is initialized.
fn queued_transaction(commit: bool, faults: MessageFaults) -> QueuedRun {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async move {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let run: Arc<Mutex<QueuedRun>> = Arc::default();
        let sink = run.clone();
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));
        world.add_node("client", ip, move || {
            let (sink, faults) = (sink.clone(), faults);
            async move {
                let conn = Connection::open(1).await.expect("connection");
                let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
                admin
                    .create_topic("t", 2, 1, TopicConfig::default())
                    .await
                    .expect("create topic");
                let mut config = TxnProducerConfig::new("tx-q");
                config.producer = ProducerConfig {
                    linger_ms: 1_000,
                    request_timeout_ms: 1_000,
                    delivery_timeout_ms: 3_000,
                    ..ProducerConfig::default()
                };
                let producer = SimTransactionalProducer::new(conn, config);
                producer.init_transactions(TIMEOUT).await.expect("init");
                set_message_faults(ip, broker_ip(1), faults);
                producer.begin_transaction().expect("begin");
                let outcomes = Outcomes::default();
                for i in 0..10 {
                    let out = outcomes.clone();
                    let callback = Box::new(move |r: Result<Delivery, TxnError>| {
                        let r = r.map(|d| (d.partition, d.offset));
                        out.lock().expect("lock").push(r);
                    });
                    producer
                        .send_with_callback(keyless((i % 2) as u32, i), callback)
                        .await;
                }
                let before = outcomes.lock().expect("lock").len();
                let ended = match commit {
                    true => producer.commit_transaction(TIMEOUT).await,
                    false => producer.abort_transaction(TIMEOUT).await,
                };
                let ok = ended.is_ok();
                {
                    let mut run = sink.lock().expect("lock");
                    run.before = before;
                    run.outcomes = outcomes.lock().expect("lock").clone();
                    run.ended = Some(ended);
                }
                if ok {
                    producer.begin_transaction().expect("begin again");
                    let sent = producer.send(keyless(0, 10)).await.expect("send");
                    producer.commit_transaction(TIMEOUT).await.expect("commit");
                    sink.lock().expect("lock").next_offset = Some(sent.offset);
                }
            }
        });
        madsim::time::sleep(Duration::from_secs(30)).await;
        let run = std::mem::take(&mut *run.lock().expect("lock"));
        run
    })
}

#[test]
fn queued_records_wait_in_batches_that_the_commit_flushes_before_its_end_txn() {
    eosim_sim::marks::take();
    let run = queued_transaction(true, MessageFaults::default());
    let marks = eosim_sim::marks::take();
    assert_eq!(
        run.before, 0,
        "nothing delivered before the commit: linger.ms 1000"
    );
    assert_eq!(run.ended, Some(Ok(())));
    let delivered: Vec<(u32, Offset)> = (run.outcomes.iter())
        .map(|r| r.clone().expect("delivered"))
        .collect();
    // Callbacks run batch by batch (partition 0's, then 1's), each record at its batch's
    // base offset plus its index.
    let expected: Vec<(u32, Offset)> = (0..2).flat_map(|p| (0..5).map(move |i| (p, i))).collect();
    assert_eq!(delivered, expected);
    // One batch per partition, and the next transaction's one-record batch.
    assert_eq!(marks.get("client:produce-batch"), Some(&3), "{marks:?}");
    assert_eq!(marks.get("client:produce-batch-multi-record"), Some(&2));
    // The next transaction's record follows the commit marker (offset 5).
    assert_eq!(run.next_offset, Some(6));
}

#[test]
fn an_abort_fails_the_queued_records_unsent_and_none_is_appended() {
    eosim_sim::marks::take();
    let run = queued_transaction(false, MessageFaults::default());
    let marks = eosim_sim::marks::take();
    assert_eq!(run.ended, Some(Ok(())));
    assert_eq!(run.outcomes.len(), 10);
    for outcome in &run.outcomes {
        let e = outcome.as_ref().expect_err("failed unsent");
        assert!(e.txn_requires_abort(), "{e}");
        assert!(e.to_string().contains("aborted"), "{e}");
    }
    assert_eq!(marks.get("client:txn-batch-failed-unsent"), Some(&2));
    // No aborted record was appended to partition 0: the next record is its first, or
    // follows only an abort marker (had partition 0 joined the transaction first).
    assert!(matches!(run.next_offset, Some(0 | 1)), "{run:?}");
}

#[test]
fn queued_records_of_a_transaction_that_cannot_add_their_partitions_fail_and_so_does_the_commit() {
    // Every response lost: the AddPartitionsToTxn sent for the first queued record of a
    // partition gets no answer, the transaction turns abortable, and the batches fail
    // without leaving; the commit then refuses.
    let lost = MessageFaults {
        drop_response_probability: 1.0,
        ..MessageFaults::default()
    };
    eosim_sim::marks::take();
    let run = queued_transaction(true, lost);
    let marks = eosim_sim::marks::take();
    let ended = run.ended.expect("the commit returned");
    let e = ended.expect_err("the transaction failed");
    assert!(e.txn_requires_abort(), "{e}");
    assert_eq!(run.outcomes.len(), 10);
    for outcome in &run.outcomes {
        let e = outcome.as_ref().expect_err("not delivered");
        assert!(e.txn_requires_abort() && !e.is_ambiguous(), "{e}");
    }
    // A batch that left after the transaction failed fails at once; one already waiting
    // for the AddPartitionsToTxn under way fails with it.
    assert!(
        marks.contains_key("client:txn-batch-failed-unsent"),
        "{marks:?}"
    );
}

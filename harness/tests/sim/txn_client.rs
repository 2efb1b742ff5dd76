//! The simulated transactional producer against the Kafka model: what it sends for
//! `send_offsets_to_transaction`.

use bytes::Bytes;
use eosim::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use eosim::client::sim::{admin::SimAdmin, conn::Connection};
use eosim::client::{Admin, ConsumerGroupMetadata, ProducerRecord, TransactionalProducer};
use eosim::runner::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::{ClusterConfig, Offset, TopicConfig, TopicPartition};
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

//! The batching producer: the accumulator (`linger.ms`, `batch.size`) and
//! `max.in.flight.requests.per.connection` at work, on the producer alone and in the
//! catalogue's `alo-batching-*` scenarios.

use super::support::{catalogue, run_checked, run_holding};
use bytes::Bytes;
use eosim::checker::{Anomaly, Validity};
use eosim::client::sim::{admin::SimAdmin, conn::Connection, producer::SimProducer};
use eosim::client::{Admin, Delivery, Producer, ProducerConfig, ProducerRecord};
use eosim::runner::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::{ClusterConfig, TopicConfig};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn record(partition: u32, i: usize) -> ProducerRecord {
    ProducerRecord {
        topic: "t".into(),
        partition: Some(partition),
        key: None,
        value: Some(Bytes::from(i.to_string())),
        headers: Vec::new(),
    }
}

/// Queues 5 records to each of 2 partitions of a lingering producer, then flushes; returns
/// every delivery in send order and the marks.
fn queued_deliveries(config: ProducerConfig) -> Vec<Delivery> {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async move {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let out: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let sink = out.clone();
        world.add_node(
            "producer",
            IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)),
            move || {
                let (sink, config) = (sink.clone(), config.clone());
                async move {
                    let conn = Connection::open(1).await.expect("connection");
                    let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
                    admin
                        .create_topic("t", 2, 1, TopicConfig::default())
                        .await
                        .expect("create topic");
                    let producer = SimProducer::new(conn, config);
                    let mut reports = Vec::new();
                    for i in 0..10 {
                        let report = producer.send_async(record((i % 2) as u32, i)).await;
                        reports.push(report.expect("queued"));
                    }
                    producer
                        .flush(Duration::from_secs(30))
                        .await
                        .expect("flush");
                    for report in reports {
                        let delivery = report.await.expect("delivered");
                        sink.lock().expect("lock").push(delivery);
                    }
                }
            },
        );
        madsim::time::sleep(Duration::from_secs(10)).await;
        let deliveries = out.lock().expect("lock").clone();
        deliveries
    })
}

#[test]
fn a_lingering_batch_delivers_each_record_at_its_base_offset_plus_index() {
    let config = ProducerConfig {
        linger_ms: 1_000,
        ..ProducerConfig::default()
    };
    eosim_sim::marks::take();
    let deliveries = queued_deliveries(config);
    let marks = eosim_sim::marks::take();
    let offsets: Vec<(u32, i64)> = deliveries.iter().map(|d| (d.partition, d.offset)).collect();
    let expected: Vec<(u32, i64)> = (0..10).map(|i| ((i % 2) as u32, (i / 2) as i64)).collect();
    assert_eq!(offsets, expected);
    // One batch per partition: the flush sent both before their linger expired.
    assert_eq!(marks.get("client:produce-batch"), Some(&2), "{marks:?}");
    assert_eq!(marks.get("client:produce-batch-multi-record"), Some(&2));
}

#[test]
fn batch_size_cuts_a_partition_s_records_into_batches_of_what_fits() {
    // A record of a 1-byte value and no key is 8 + 1 = 9 bytes as the model counts it, a
    // batch 61 + 9 per record: 4 records make 97 bytes, a full batch of 97.
    let config = ProducerConfig {
        linger_ms: 1_000,
        batch_size: 97,
        ..ProducerConfig::default()
    };
    eosim_sim::marks::take();
    let deliveries = queued_deliveries(config);
    let marks = eosim_sim::marks::take();
    assert_eq!(deliveries.len(), 10);
    // Per partition, 5 records: a full batch of 4, then 1 sent by the flush.
    assert_eq!(marks.get("client:produce-batch"), Some(&4), "{marks:?}");
    assert_eq!(marks.get("client:produce-batch-multi-record"), Some(&2));
}

#[test]
fn the_batching_catalogue_scenario_sends_several_records_per_request() {
    let (outcome, _) = run_holding("alo-batching-producer.toml", 1);
    let batches = outcome.marks["client:produce-batch"];
    let records = outcome.marks["client:produce-batch-record"];
    assert!(
        records >= 2 * batches,
        "{records} records in {batches} requests"
    );
}

#[test]
fn retried_batches_of_a_non_idempotent_producer_land_twice_and_the_idempotent_twin_holds() {
    let unsafe_twin = catalogue("alo-batching-in-flight-5-non-idempotent-duplicates.toml");
    let (_, result) = run_checked(&unsafe_twin, 1);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(result.forbidden.contains(&Anomaly::Duplicate));
    let (outcome, _) = run_holding("alo-batching-in-flight-5-idempotent.toml", 1);
    assert!(outcome
        .marks
        .contains_key("client:producer-retry-after-timeout"));
}

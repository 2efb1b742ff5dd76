//! The batching producer: the accumulator (`linger.ms`, `batch.size`) and
//! `max.in.flight.requests.per.connection` at work, on the producer alone and in the
//! catalogue's `alo-batching-*` scenarios.

use super::support::{catalogue, run_checked, run_holding};
use bytes::Bytes;
use eosim::checker::{Anomaly, Validity};
use eosim::client::sim::{admin::SimAdmin, conn::Connection, producer::SimProducer};
use eosim::client::{Admin, ClientError, Delivery, Producer, ProducerConfig, ProducerRecord};
use eosim::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::{broker_ip, KafkaWorld};
use eosim_sim::kafka::{ClusterConfig, TopicConfig};
use eosim_sim::net::{set_message_faults, MessageFaults};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The producer node's address.
const PRODUCER_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));

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
/// every delivery in send order.
fn queued_deliveries(config: ProducerConfig) -> Vec<Delivery> {
    queued_outcomes(config, MessageFaults::default())
        .into_iter()
        .map(|r| r.expect("delivered"))
        .collect()
}

/// As [`queued_deliveries`], with `faults` on the producer's link to the broker once the
/// topic exists; returns every record's outcome in send order.
fn queued_outcomes(
    config: ProducerConfig,
    faults: MessageFaults,
) -> Vec<Result<Delivery, ClientError>> {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async move {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let out: Arc<Mutex<Vec<Result<Delivery, ClientError>>>> = Arc::default();
        let sink = out.clone();
        world.add_node("producer", PRODUCER_IP, move || {
            let (sink, config) = (sink.clone(), config.clone());
            async move {
                let conn = Connection::open(1).await.expect("connection");
                let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
                admin
                    .create_topic("t", 2, 1, TopicConfig::default())
                    .await
                    .expect("create topic");
                set_message_faults(PRODUCER_IP, broker_ip(1), faults);
                let producer = SimProducer::new(conn, config);
                let mut reports = Vec::new();
                for i in 0..10 {
                    let report = producer.send_async(record((i % 2) as u32, i)).await;
                    reports.push(report.expect("queued"));
                }
                let _ = producer.flush(Duration::from_secs(30)).await;
                for report in reports {
                    let outcome = report.await;
                    sink.lock().expect("lock").push(outcome);
                }
            }
        });
        madsim::time::sleep(Duration::from_secs(60)).await;
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
fn a_batch_whose_responses_are_all_lost_is_ambiguous_for_every_record_of_it() {
    // Every Produce is applied and its response lost: each batch retries until
    // `delivery.timeout.ms`, and no record of it may be reported as failed for certain.
    let config = ProducerConfig {
        linger_ms: 1_000,
        request_timeout_ms: 1_000,
        delivery_timeout_ms: 5_000,
        ..ProducerConfig::default()
    };
    let lost = MessageFaults {
        drop_response_probability: 1.0,
        ..MessageFaults::default()
    };
    eosim_sim::marks::take();
    let outcomes = queued_outcomes(config, lost);
    let marks = eosim_sim::marks::take();
    assert_eq!(outcomes.len(), 10);
    for (i, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Err(e) => assert!(e.is_ambiguous(), "record {i}: {e}"),
            Ok(d) => panic!("record {i} delivered at {d:?} though every response was lost"),
        }
    }
    assert!(
        marks.contains_key("client:produce-batch-multi-record"),
        "{marks:?}"
    );
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

/// `produce_interval_ms = 0` hands every record to the producer without a pause, so its
/// batches fill up to `batch.size` (300 small records: a few requests). A zero sleep
/// instead waits madsim's least, 1 ms, and the 10 ms linger then cut batches of about 3.
#[test]
fn an_unpaced_batching_producer_fills_its_batches() {
    let mut s = catalogue("alo-batching-producer.toml");
    s.workload.produce_interval_ms = 0;
    let (outcome, _) = super::support::run_valid(&s, 1);
    let batches = outcome.marks["client:produce-batch"];
    let records = outcome.marks["client:produce-batch-record"];
    assert!(
        records >= 20 * batches,
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

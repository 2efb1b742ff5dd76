//! The simulated consumer long-polls as Java's `Fetcher` does: one Fetch in flight per
//! leader, all leaders at once, each held by the broker up to `fetch.max.wait.ms` until
//! `fetch.min.bytes` are readable (`DelayedFetch`). A record produced while the consumer
//! waits reaches it within a replica tick and a round trip, not after a retry backoff.

use bytes::Bytes;
use eosim::client::{AutoOffsetReset, Consumer, ConsumerConfig};
use eosim::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::*;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// When each record reached the consumer, as `(partition, ms since the world began)`.
type Seen = Arc<Mutex<Vec<(u32, u64)>>>;

const PARTITIONS: u32 = 3;

/// Three brokers; topic `t` with three partitions of one replica each, so each broker
/// leads one.
fn cluster() -> Cluster {
    let topic = TopicConfig::default();
    crate::support::three_broker_cluster(ClusterConfig::default(), PARTITIONS, 1, topic)
}

async fn consume(kafka: KafkaWorld, seen: Seen) {
    let mut config = ConsumerConfig::new("g");
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    let mut consumer = crate::support::subscribed_to_t(config).await;
    loop {
        let Ok(records) = consumer.poll(Duration::from_secs(2)).await else {
            continue;
        };
        for r in records {
            seen.lock()
                .expect("lock")
                .push((r.tp.partition, kafka.now_ms()));
        }
    }
}

/// An acks=1 produce of one record to partition `partition` at its leader, through the
/// broker service as a client's would go (so the ticker hears of it); returns the model
/// time it was sent at.
async fn produce(kafka: &KafkaWorld, partition: u32) -> u64 {
    let tp = TopicPartition::new("t", partition);
    let now = kafka.now_ms();
    let leader = kafka
        .cluster
        .lock()
        .expect("lock")
        .leader(&tp)
        .expect("leader");
    let request = Request::Produce {
        tp,
        acks: Acks::Leader,
        timeout_ms: 5_000,
        header: ProducerBatchHeader::NONE,
        records: vec![Record {
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
            timestamp_ms: 0,
        }],
    };
    let response = kafka.handle(leader, request).await;
    assert!(matches!(response, Response::Produce { .. }), "{response:?}");
    now
}

#[test]
fn the_consumer_long_polls_every_leader_at_once_and_gets_a_new_record_without_backoff() {
    eosim_sim::marks::take();
    let runtime = madsim::runtime::Runtime::with_seed_and_config(3, madsim::Config::default());
    let (idle_parks, produced, seen) = runtime.block_on(async move {
        let kafka = KafkaWorld::new(cluster());
        let leaders: BTreeSet<BrokerId> = (0..PARTITIONS)
            .map(|p| {
                let tp = TopicPartition::new("t", p);
                kafka
                    .cluster
                    .lock()
                    .expect("lock")
                    .leader(&tp)
                    .expect("leader")
            })
            .collect();
        assert_eq!(leaders.len(), 3, "each broker leads one partition");
        let mut world = World::new(kafka.clone(), 3);
        world.add_kafka();
        let seen = Seen::default();
        let (s, k) = (seen.clone(), kafka.clone());
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));
        world.add_node("consumer", ip, move || consume(k.clone(), s.clone()));
        // Joined and positioned by then; then 5 s with nothing to read.
        madsim::time::sleep(Duration::from_secs(5)).await;
        eosim_sim::marks::take();
        madsim::time::sleep(Duration::from_secs(5)).await;
        let idle_parks = eosim_sim::marks::take()
            .get("kafka:fetch-parked")
            .copied()
            .unwrap_or(0);
        // Five records at odd moments, each to another partition.
        let mut produced = Vec::new();
        for i in 0..5u32 {
            madsim::time::sleep(Duration::from_millis(777 + 131 * u64::from(i))).await;
            produced.push((i % PARTITIONS, produce(&kafka, i % PARTITIONS).await));
        }
        madsim::time::sleep(Duration::from_secs(2)).await;
        let seen = seen.lock().expect("lock").clone();
        (idle_parks, produced, seen)
    });
    // 3 leaders x 5 s / 500 ms = 30 long polls, give or take the ones in flight at the
    // edges; one leader at a time would be 10, short polls none.
    assert!(
        (24..=36).contains(&idle_parks),
        "parked fetches in 5 idle seconds: {idle_parks}"
    );
    assert_eq!(seen.len(), produced.len(), "every record read: {seen:?}");
    for ((partition, at), (seen_partition, seen_at)) in produced.iter().zip(&seen) {
        assert_eq!(partition, seen_partition);
        let latency = seen_at - at;
        assert!(
            latency < 50,
            "record to partition {partition} produced at {at} ms read at {seen_at} ms"
        );
    }
}

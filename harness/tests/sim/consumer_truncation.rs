//! The simulated consumer against the Kafka model when the log is truncated under its
//! position (KIP-320): an unclean leader election makes the new leader's log diverge below
//! what the consumer already read; the consumer must notice (OffsetsForLeaderEpoch after
//! the leader change) and seek back to the first diverging offset, not keep fetching from
//! its old position and skip the new leader's records there.

use bytes::Bytes;
use eosim::client::{AutoOffsetReset, Consumer, ConsumerConfig};
use eosim::runner::nemesis;
use eosim::world::World;
use eosim_sim::kafka::model::{Cluster, CrashMode, Reply};
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::*;
use eosim_sim::nemesis::Fault;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the consumer read, as `(offset, value)`.
type Seen = Arc<Mutex<Vec<(Offset, String)>>>;

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

/// Three brokers; topic `t` (one partition on brokers 1 and 2, min ISR 1, unclean election
/// on); a group whose coordinator is broker 3, which no fault touches.
fn cluster() -> (Cluster, String) {
    let config = ClusterConfig {
        broker_session_timeout_ms: 3_000,
        ..ClusterConfig::default()
    };
    let topic = TopicConfig {
        unclean_leader_election_enable: true,
        ..TopicConfig::default()
    };
    let cluster = crate::support::three_broker_cluster(config, 1, 2, topic);
    let group = (0..100)
        .map(|i| format!("g{i}"))
        .find(|g| cluster.coordinator_for(g, CoordinatorKind::Group) == Some(3))
        .expect("a group coordinated by broker 3");
    (cluster, group)
}

/// Reads `t` from the start for 40 s, without committing (a rebalance would re-read).
async fn consume(group: String, seen: Seen) {
    let mut config = ConsumerConfig::new(group);
    config.session_timeout_ms = 30_000;
    config.heartbeat_interval_ms = 1_000;
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    let mut consumer = crate::support::subscribed_to_t(config).await;
    let end = madsim::time::Instant::now() + Duration::from_secs(40);
    while madsim::time::Instant::now() < end {
        let Ok(records) = consumer.poll(Duration::from_millis(500)).await else {
            continue;
        };
        for r in records {
            let value = String::from_utf8(r.value.expect("a value").to_vec()).expect("utf-8");
            seen.lock().expect("lock").push((r.offset, value));
        }
    }
}

/// An acks=1 produce of `value` at broker `at`, straight into the model.
fn produce(kafka: &KafkaWorld, at: BrokerId, value: &str) {
    let request = Request::Produce {
        tp: tp(),
        acks: Acks::Leader,
        timeout_ms: 5_000,
        header: ProducerBatchHeader::NONE,
        records: vec![Record {
            key: None,
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Vec::new(),
            timestamp_ms: 0,
        }],
    };
    let now = kafka.now_ms();
    let reply = kafka.cluster.lock().expect("lock").handle(now, at, request);
    assert!(
        matches!(reply, Reply::Done(Response::Produce { .. })),
        "{value} at broker-{at}: {reply:?}"
    );
}

fn kill(world: &World, b: BrokerId) {
    let fault = Fault::Kill {
        target: vec![format!("broker-{b}")],
        mode: CrashMode::ProcessKill,
    };
    nemesis::apply(world, &fault, false).expect("kill");
}

fn restart(world: &World, b: BrokerId) {
    let fault = Fault::Restart {
        target: vec![format!("broker-{b}")],
    };
    nemesis::apply(world, &fault, false).expect("restart");
}

async fn sleep_s(s: u64) {
    madsim::time::sleep(Duration::from_secs(s)).await;
}

#[test]
fn a_consumer_seeks_back_to_the_diverging_offset_after_an_unclean_election_truncates_its_log() {
    eosim_sim::marks::take();
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    let seen = runtime.block_on(async move {
        let (cluster, group) = cluster();
        let kafka = KafkaWorld::new(cluster);
        let mut world = World::new(kafka.clone(), 3);
        world.add_kafka();
        let seen = Seen::default();
        let (s, g) = (seen.clone(), group);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));
        world.add_node("consumer", ip, move || consume(g.clone(), s.clone()));
        let leader = kafka
            .cluster
            .lock()
            .expect("lock")
            .leader(&tp())
            .expect("leader");
        let follower = 3 - leader;
        produce(&kafka, leader, "a");
        sleep_s(2).await;
        // The follower dies and leaves the ISR; the leader alone commits "b" and "c", which
        // the consumer reads at epoch 0.
        kill(&world, follower);
        sleep_s(6).await;
        produce(&kafka, leader, "b");
        produce(&kafka, leader, "c");
        sleep_s(4).await;
        // The leader dies; the stale follower comes back and is elected uncleanly: its log
        // ends after "a", and it appends "d" and "e" at offsets 1 and 2.
        kill(&world, leader);
        restart(&world, follower);
        sleep_s(8).await;
        let now_leader = kafka.cluster.lock().expect("lock").leader(&tp());
        assert_eq!(now_leader, Some(follower), "unclean election");
        produce(&kafka, follower, "d");
        produce(&kafka, follower, "e");
        restart(&world, leader);
        sleep_s(25).await;
        let seen = seen.lock().expect("lock").clone();
        seen
    });
    let has = |offset: Offset, value: &str| seen.contains(&(offset, value.to_string()));
    assert!(
        has(1, "b") && has(2, "c"),
        "read before the truncation: {seen:?}"
    );
    assert!(
        has(1, "d") && has(2, "e"),
        "the new leader's records at the diverged offsets are read: {seen:?}"
    );
    eosim_sim::marks::assert_hit(&["client:consumer-log-truncation-detected"]);
}

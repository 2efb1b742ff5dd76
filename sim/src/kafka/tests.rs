//! Tests of the Kafka model: one per line of models-reference checklist A (named after it),
//! a few more for the request surface, and a property test of durability and convergence.

use super::model::{Cluster, CrashMode, Env, ParkToken, Reply};
use super::types::*;
use bytes::Bytes;
use std::collections::BTreeSet;

/// The environment a test controls: dead-or-paused brokers, cut links (both directions),
/// brokers cut off from the controller.
#[derive(Debug, Default, Clone)]
struct TestEnv {
    down: BTreeSet<BrokerId>,
    cut: BTreeSet<(BrokerId, BrokerId)>,
    no_controller: BTreeSet<BrokerId>,
}

impl TestEnv {
    fn isolate(&mut self, b: BrokerId, brokers: u32) {
        for o in 1..=brokers {
            if o != b {
                self.cut.insert((b.min(o), b.max(o)));
            }
        }
        self.no_controller.insert(b);
    }

    fn heal(&mut self) {
        self.cut.clear();
        self.no_controller.clear();
    }
}

impl Env for TestEnv {
    fn broker_up(&self, b: BrokerId) -> bool {
        !self.down.contains(&b)
    }
    fn link_up(&self, from: BrokerId, to: BrokerId) -> bool {
        !self.cut.contains(&(from.min(to), from.max(to)))
    }
    fn controller_link_up(&self, b: BrokerId) -> bool {
        !self.no_controller.contains(&b)
    }
}

const TICK_MS: u64 = 10;

/// A cluster, its environment and the clock.
struct World {
    cluster: Cluster,
    env: TestEnv,
    now: TimeMs,
    tp: TopicPartition,
}

impl World {
    /// `brokers` brokers, topic "t" with one partition and replication factor `rf`.
    fn new(brokers: u32, rf: u32, config: TopicConfig) -> Self {
        Self::with_config(brokers, rf, config, ClusterConfig::default())
    }

    /// [`World::new`] with broker settings `cluster` (3 offsets partitions).
    fn with_config(brokers: u32, rf: u32, config: TopicConfig, cluster: ClusterConfig) -> Self {
        let cfg = ClusterConfig {
            offsets_topic_num_partitions: 3,
            transaction_state_log_num_partitions: 3,
            ..cluster
        };
        let mut cluster = Cluster::new(brokers, cfg);
        let req = Request::CreateTopic {
            name: "t".into(),
            partitions: 1,
            replication_factor: rf,
            config,
        };
        assert_eq!(
            cluster.handle(0, 1, req),
            Reply::Done(Response::CreateTopic)
        );
        Self {
            cluster,
            env: TestEnv::default(),
            now: 0,
            tp: TopicPartition::new("t", 0),
        }
    }

    fn tick_for(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += TICK_MS;
            self.cluster.tick(self.now, &self.env);
        }
    }

    fn leader(&self) -> BrokerId {
        self.cluster.leader(&self.tp).expect("partition online")
    }

    fn produce_at(&mut self, broker: BrokerId, acks: Acks, value: &str) -> Reply {
        let req = Request::Produce {
            tp: self.tp.clone(),
            acks,
            timeout_ms: 30_000,
            header: ProducerBatchHeader::NONE,
            records: vec![record(value)],
        };
        self.cluster.handle(self.now, broker, req)
    }

    fn produce(&mut self, acks: Acks, value: &str) -> Reply {
        let leader = self.leader();
        self.produce_at(leader, acks, value)
    }

    /// Polls a parked produce while ticking, up to `ms_max`.
    fn await_parked(&mut self, token: ParkToken, ms_max: u64) -> Response {
        let end = self.now + ms_max;
        loop {
            if let Some(r) = self.cluster.poll_parked(self.now, &token) {
                return r;
            }
            assert!(
                self.now < end,
                "parked produce not completed after {ms_max} ms"
            );
            self.tick_for(TICK_MS);
        }
    }

    /// Produces with acks=all and waits for the outcome.
    fn produce_all(&mut self, value: &str) -> Response {
        match self.produce(Acks::All, value) {
            Reply::Done(r) => r,
            Reply::Parked(t) => self.await_parked(t, 60_000),
        }
    }

    fn fetch_at(
        &mut self,
        broker: BrokerId,
        isolation: Isolation,
        offset: Offset,
    ) -> FetchPartition {
        let req = Request::Fetch {
            isolation,
            partitions: vec![(self.tp.clone(), offset)],
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
            min_bytes: 1,
            max_wait_ms: 0,
            current_leader_epochs: Vec::new(),
        };
        match self.cluster.handle(self.now, broker, req) {
            Reply::Done(Response::Fetch { mut partitions }) => partitions.remove(0).1,
            other => panic!("unexpected fetch reply {other:?}"),
        }
    }

    fn values(&self) -> Vec<String> {
        self.cluster
            .records(&self.tp)
            .into_iter()
            .map(|(_, r)| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
            .collect()
    }

    fn crash(&mut self, b: BrokerId, mode: CrashMode) {
        self.cluster.crash_broker(self.now, b, mode);
        self.env.down.insert(b);
    }

    fn restart(&mut self, b: BrokerId) {
        self.cluster.restart_broker(self.now, b);
        self.env.down.remove(&b);
    }

    /// A correlated power loss: every broker of `1..=brokers` machine-crashes at once,
    /// stays down `down_ms` and restarts.
    fn power_loss(&mut self, brokers: u32, down_ms: u64) {
        for b in 1..=brokers {
            self.crash(b, CrashMode::MachineCrash);
        }
        self.tick_for(down_ms);
        for b in 1..=brokers {
            self.restart(b);
        }
    }
}

fn record(value: &str) -> Record {
    Record {
        key: None,
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        headers: Vec::new(),
        timestamp_ms: 0,
    }
}

fn base_offset(r: &Response) -> Offset {
    match r {
        Response::Produce { base_offset, .. } => *base_offset,
        other => panic!("expected a produce response, got {other:?}"),
    }
}

fn min_isr(n: u32) -> TopicConfig {
    TopicConfig {
        min_insync_replicas: n,
        ..TopicConfig::default()
    }
}

// ------------------------------------------------------------------- checklist A

#[test]
fn acks_all_below_min_isr_is_rejected_and_leaves_leo_unchanged() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(3, 3, min_isr(2));
    let leader = w.leader();
    let followers: Vec<BrokerId> = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
        .collect();
    for &f in &followers {
        w.crash(f, CrashMode::ProcessKill);
    }
    w.tick_for(10_000); // fenced after broker.session.timeout.ms, removed from the ISR
    assert_eq!(w.cluster.isr(&w.tp), vec![leader]);
    let leo = w.cluster.log_end_offset(&w.tp, leader);
    assert_eq!(
        w.produce(Acks::All, "x"),
        Reply::Done(Response::Error(KafkaError::NotEnoughReplicas))
    );
    assert_eq!(w.cluster.log_end_offset(&w.tp, leader), leo);
    // acks=1 is not checked against min ISR.
    assert!(matches!(
        w.produce(Acks::Leader, "y"),
        Reply::Done(Response::Produce { .. })
    ));
    crate::marks::assert_hit(&["kafka:produce-not-enough-replicas", "kafka:isr-shrink"]);
}

#[test]
fn acks_all_when_isr_shrinks_below_min_isr_after_append_returns_after_append_and_keeps_batch() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    // Pre-3.7 rule: the HW may advance with the ISR below min ISR.
    let mut w = World::new(3, 3, min_isr(2));
    w.cluster.set_hold_hw_under_min_isr(false);
    let leader = w.leader();
    let Reply::Parked(token) = w.produce(Acks::All, "x") else {
        panic!("acks=all parks")
    };
    for f in w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
    {
        w.crash(f, CrashMode::ProcessKill);
    }
    let r = w.await_parked(token, 20_000);
    assert_eq!(r, Response::Error(KafkaError::NotEnoughReplicasAfterAppend));
    assert_eq!(w.cluster.isr(&w.tp), vec![leader]);
    assert_eq!(
        w.values(),
        vec!["x"],
        "the batch is in the log and committed"
    );
    crate::marks::assert_hit(&["kafka:produce-not-enough-replicas-after-append"]);
}

#[test]
fn under_min_isr_partitions_do_not_advance_hw_even_for_acks_1_appends() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(3, 3, min_isr(2));
    let leader = w.leader();
    for f in w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
    {
        w.crash(f, CrashMode::ProcessKill);
    }
    w.tick_for(10_000);
    assert!(matches!(
        w.produce(Acks::Leader, "a"),
        Reply::Done(Response::Produce { base_offset: 0, .. })
    ));
    w.tick_for(1_000);
    assert_eq!(w.cluster.high_watermark(&w.tp), Some(0));
    assert_eq!(w.cluster.log_end_offset(&w.tp, leader), Some(1));
    // A follower comes back, catches up, rejoins: the ISR reaches min ISR and the HW moves.
    let follower = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .find(|&b| b != leader)
        .unwrap();
    w.restart(follower);
    w.tick_for(1_000);
    assert_eq!(w.cluster.isr(&w.tp).len(), 2);
    assert_eq!(w.cluster.high_watermark(&w.tp), Some(1));
    crate::marks::assert_hit(&["kafka:hw-held-under-min-isr"]);
}

#[test]
fn read_uncommitted_fetch_never_returns_offsets_at_or_above_hw_nor_read_committed_at_or_above_lso()
{
    let mut w = World::new(3, 3, TopicConfig::default());
    let leader = w.leader();
    for i in 0..3 {
        w.produce_all(&format!("c{i}"));
    }
    // Two more appended but not replicated: a follower is cut off, so the HW stays at 3.
    let follower = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .find(|&b| b != leader)
        .unwrap();
    w.env
        .cut
        .insert((leader.min(follower), leader.max(follower)));
    w.produce(Acks::Leader, "u0");
    w.produce(Acks::Leader, "u1");
    w.tick_for(100);
    let hw = w.cluster.high_watermark(&w.tp).unwrap();
    assert_eq!(hw, 3);
    assert_eq!(w.cluster.log_end_offset(&w.tp, leader), Some(5));
    for iso in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let f = w.fetch_at(leader, iso, 0);
        assert_eq!(f.error, None);
        assert!(f
            .records
            .iter()
            .all(|r| r.offset < f.high_watermark && r.offset < f.last_stable_offset));
        assert_eq!(f.records.len(), 3);
        assert_eq!(f.next_fetch_offset, 3);
        assert!(f.last_stable_offset <= f.high_watermark);
    }
}

#[test]
fn hw_never_exceeds_the_leo_of_any_isr_member_and_never_decreases_on_a_leader() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let mut last: Option<(i32, Offset)> = None;
    for i in 0..50 {
        w.produce(
            if i % 2 == 0 { Acks::All } else { Acks::Leader },
            &format!("v{i}"),
        );
        if i == 20 {
            let l = w.leader();
            w.crash(l, CrashMode::ProcessKill);
        }
        if i == 35 {
            let dead: Vec<_> = w.env.down.iter().copied().collect();
            for b in dead {
                w.restart(b);
            }
        }
        for _ in 0..30 {
            w.tick_for(TICK_MS);
            let Some(hw) = w.cluster.high_watermark(&w.tp) else {
                continue;
            };
            let epoch = w.cluster.leader_epoch(&w.tp).unwrap();
            for b in w.cluster.isr(&w.tp) {
                let leo = w.cluster.log_end_offset(&w.tp, b).unwrap();
                // An ISR member that is dead may have any LEO; live ones hold the HW.
                if w.cluster.broker_alive(b) {
                    assert!(hw <= leo, "HW {hw} above LEO {leo} of ISR member {b}");
                }
            }
            if let Some((e, h)) = last {
                if e == epoch {
                    assert!(hw >= h, "HW went back from {h} to {hw} in epoch {e}");
                }
            }
            last = Some((epoch, hw));
        }
    }
}

#[test]
fn with_clean_election_acks_all_batches_survive_single_broker_failures() {
    let mut w = World::new(3, 3, min_isr(2));
    let mut acked = Vec::new();
    for round in 0..6 {
        for i in 0..5 {
            let v = format!("r{round}-{i}");
            if let Response::Produce { .. } = w.produce_all(&v) {
                acked.push(v);
            }
        }
        let victim = w.leader();
        w.crash(
            victim,
            if round % 2 == 0 {
                CrashMode::ProcessKill
            } else {
                CrashMode::MachineCrash
            },
        );
        w.tick_for(10_000);
        assert_ne!(w.cluster.leader(&w.tp), Some(victim));
        w.restart(victim);
        w.tick_for(5_000);
        assert_eq!(
            w.cluster.isr(&w.tp).len(),
            3,
            "restarted broker rejoined the ISR"
        );
    }
    let values = w.values();
    for v in &acked {
        assert!(values.contains(v), "acked {v} lost");
    }
    assert_eq!(acked.len(), 30);
}

#[test]
fn acks_1_batch_acked_by_a_leader_that_dies_before_replication_is_lost_after_rejoin() {
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("kept");
    let old = w.leader();
    // Cut the leader off from its followers (not from the controller yet) and write.
    w.env.isolate(old, 3);
    w.env.no_controller.remove(&old);
    let r = w.produce(Acks::Leader, "lost");
    assert!(matches!(
        r,
        Reply::Done(Response::Produce { base_offset: 1, .. })
    ));
    w.crash(old, CrashMode::ProcessKill);
    w.env.heal();
    w.tick_for(10_000);
    let new = w.leader();
    assert_ne!(new, old);
    w.restart(old);
    w.tick_for(5_000);
    assert_eq!(w.values(), vec!["kept"]);
    assert_eq!(
        w.cluster.log_end_offset(&w.tp, old),
        w.cluster.log_end_offset(&w.tp, new)
    );
}

#[test]
fn a_partitioned_ex_leader_accepts_acks_1_writes_that_are_lost_when_it_learns_the_new_leader() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("kept");
    let old = w.leader();
    w.env.isolate(old, 3);
    w.tick_for(10_000); // fenced; a new leader is elected
    let new = w.leader();
    assert_ne!(new, old);
    // The ex-leader still believes it leads: acks=1 succeeds, acks=all cannot commit.
    assert!(matches!(
        w.produce_at(old, Acks::Leader, "zombie"),
        Reply::Done(Response::Produce { .. })
    ));
    let Reply::Parked(token) = w.produce_at(old, Acks::All, "zombie-all") else {
        panic!("parks")
    };
    assert!(matches!(
        w.produce_at(new, Acks::All, "new"),
        Reply::Parked(_) | Reply::Done(_)
    ));
    w.tick_for(1_000);
    assert_eq!(w.cluster.poll_parked(w.now, &token), None);
    w.env.heal();
    w.tick_for(1_000);
    assert_eq!(
        w.cluster.poll_parked(w.now, &token),
        Some(Response::Error(KafkaError::NotLeaderOrFollower))
    );
    w.tick_for(2_000);
    let values = w.values();
    assert!(!values.contains(&"zombie".to_string()));
    assert!(values.contains(&"new".to_string()));
    crate::marks::assert_hit(&["kafka:leader-change"]);
}

#[test]
fn after_a_leader_change_every_follower_log_is_a_prefix_consistent_copy_of_the_leader() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut w = World::new(3, 3, TopicConfig::default());
    for i in 0..3 {
        w.produce_all(&format!("a{i}"));
    }
    let old = w.leader();
    // Divergent suffix on the old leader, then it dies.
    w.env.isolate(old, 3);
    w.env.no_controller.remove(&old);
    for i in 0..4 {
        w.produce_at(old, Acks::Leader, &format!("div{i}"));
    }
    w.crash(old, CrashMode::ProcessKill);
    w.env.heal();
    w.tick_for(10_000);
    for i in 0..2 {
        w.produce_all(&format!("b{i}"));
    }
    w.restart(old);
    w.tick_for(5_000);
    let leader = w.leader();
    let reference = w.cluster.replica_batches(&w.tp, leader);
    for b in w.cluster.replicas(&w.tp) {
        let batches = w.cluster.replica_batches(&w.tp, b);
        assert_eq!(
            &reference[..batches.len()],
            &batches[..],
            "replica {b} diverges"
        );
        assert_eq!(batches.len(), reference.len(), "replica {b} caught up");
    }
    assert_eq!(w.values(), vec!["a0", "a1", "a2", "b0", "b1"]);
    crate::marks::assert_hit(&[
        "kafka:leader-change",
        "kafka:follower-truncated",
        "kafka:isr-shrink",
        "kafka:isr-expand",
    ]);
}

#[test]
fn with_no_live_isr_member_and_unclean_election_off_the_partition_rejects_produce_and_fetch() {
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("a");
    let leader = w.leader();
    let followers: Vec<_> = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
        .collect();
    for &f in &followers {
        w.crash(f, CrashMode::ProcessKill);
    }
    w.tick_for(10_000);
    assert_eq!(w.cluster.isr(&w.tp), vec![leader]);
    w.crash(leader, CrashMode::ProcessKill);
    for &f in &followers {
        w.restart(f);
    }
    w.tick_for(10_000);
    assert_eq!(
        w.cluster.leader(&w.tp),
        None,
        "offline: the only ISR member is down"
    );
    for b in followers {
        assert_eq!(
            w.produce_at(b, Acks::Leader, "x"),
            Reply::Done(Response::Error(KafkaError::NotLeaderOrFollower))
        );
        assert_eq!(
            w.fetch_at(b, Isolation::ReadUncommitted, 0).error,
            Some(KafkaError::NotLeaderOrFollower)
        );
    }
    let req = Request::Metadata {
        topics: Some(vec!["t".into()]),
    };
    let Reply::Done(Response::Metadata { topics, .. }) =
        w.cluster.handle(w.now, 1.max(leader % 3 + 1), req)
    else {
        panic!("metadata")
    };
    assert_eq!(topics["t"][0].leader, None);
    // The last ISR member comes back and leads again, with its data.
    w.restart(leader);
    w.tick_for(5_000);
    assert_eq!(w.cluster.leader(&w.tp), Some(leader));
    assert_eq!(w.values(), vec!["a"]);
}

#[test]
fn unclean_election_elects_a_non_isr_replica_and_loses_acked_writes() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let config = TopicConfig {
        unclean_leader_election_enable: true,
        ..TopicConfig::default()
    };
    let mut w = World::new(3, 3, config);
    let leader = w.leader();
    let followers: Vec<_> = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
        .collect();
    for &f in &followers {
        w.crash(f, CrashMode::ProcessKill);
    }
    w.tick_for(10_000);
    assert!(matches!(w.produce_all("acked"), Response::Produce { .. }));
    w.crash(leader, CrashMode::ProcessKill);
    w.restart(followers[0]);
    w.tick_for(10_000);
    assert_eq!(w.cluster.leader(&w.tp), Some(followers[0]));
    w.restart(leader);
    w.tick_for(5_000);
    assert!(
        w.values().is_empty(),
        "the acks=all write is lost: {:?}",
        w.values()
    );
    assert_eq!(
        w.cluster.log_end_offset(&w.tp, leader),
        Some(0),
        "the old leader truncated"
    );
    crate::marks::assert_hit(&[
        "kafka:unclean-leader-election",
        "kafka:partition-offline",
        "kafka:follower-truncated",
    ]);
}

#[test]
fn every_control_record_occupies_one_offset_and_is_never_delivered_to_an_application() {
    let mut w = World::new(1, 1, TopicConfig::default());
    w.produce_all("a");
    let marker = w
        .cluster
        .append_control_batch(&w.tp, ProducerBatchHeader::NONE, record("COMMIT"))
        .unwrap();
    assert_eq!(marker, 1);
    w.produce_all("b");
    w.tick_for(TICK_MS);
    let f = w.fetch_at(1, Isolation::ReadCommitted, 0);
    let offsets: Vec<Offset> = f.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![0, 2], "offsets are not dense");
    assert_eq!(f.next_fetch_offset, 3);
    // Fetching at the marker skips past it.
    let f = w.fetch_at(1, Isolation::ReadUncommitted, 1);
    assert_eq!(
        f.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(w.values(), vec!["a", "b"]);
}

#[test]
fn keyed_records_land_on_to_positive_murmur2_modulo_partition_count() {
    use super::murmur2::partition_for_key;
    for (key, p) in [("0", 2), ("1", 0), ("key-1", 0), ("", 0)] {
        assert_eq!(partition_for_key(key.as_bytes(), 3), p, "key {key:?}");
    }
}

// ------------------------------------------------------------------ request surface

#[test]
fn produce_to_a_follower_gets_not_leader_or_follower() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let follower = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .find(|&b| b != w.leader())
        .unwrap();
    let r = w.produce_at(follower, Acks::All, "x");
    assert_eq!(
        r,
        Reply::Done(Response::Error(KafkaError::NotLeaderOrFollower))
    );
    let f = w.fetch_at(follower, Isolation::ReadUncommitted, 0);
    assert_eq!(f.error, Some(KafkaError::NotLeaderOrFollower));
}

/// KIP-937's window (`LogValidator.validateTimestamp`): with Kafka 4's defaults a record
/// stamped more than an hour ahead of the leader's clock fails its batch with the
/// non-retriable `INVALID_TIMESTAMP` and nothing is appended; one stamped two days behind
/// is taken (`before.max.ms` is `Long.MAX_VALUE`) unless `before.max.ms` is set.
#[test]
fn a_record_stamped_outside_the_timestamp_window_fails_its_batch_with_invalid_timestamp() {
    let hour_ms: i64 = 3_600_000;
    let mut w = World::new(1, 1, TopicConfig::default());
    w.now = 10 * 86_400_000;
    let now = w.now as i64;
    let produce_stamped = |w: &mut World, timestamp_ms: i64| {
        let req = Request::Produce {
            tp: w.tp.clone(),
            acks: Acks::Leader,
            timeout_ms: 30_000,
            header: ProducerBatchHeader::NONE,
            records: vec![
                Record {
                    timestamp_ms: now,
                    ..record("a")
                },
                Record {
                    timestamp_ms,
                    ..record("b")
                },
            ],
        };
        let leader = w.leader();
        w.cluster.handle(w.now, leader, req)
    };
    let refused = Reply::Done(Response::Error(KafkaError::InvalidTimestamp));
    assert_eq!(produce_stamped(&mut w, now + 2 * hour_ms), refused);
    assert_eq!(w.cluster.high_watermark(&w.tp), Some(0), "nothing appended");
    assert!(!KafkaError::InvalidTimestamp.is_retriable());
    assert_eq!(
        KafkaError::from_code(32),
        Some(KafkaError::InvalidTimestamp)
    );
    assert_ne!(
        produce_stamped(&mut w, now + hour_ms),
        refused,
        "the edge is inside"
    );
    assert_ne!(produce_stamped(&mut w, now - 2 * 86_400_000), refused);
    let cluster = ClusterConfig {
        log_message_timestamp_before_max_ms: 60_000,
        ..ClusterConfig::default()
    };
    let mut w = World::with_config(1, 1, TopicConfig::default(), cluster);
    w.now = 10 * 86_400_000;
    assert_eq!(produce_stamped(&mut w, now - 60_001), refused);
    assert_ne!(produce_stamped(&mut w, now - 60_000), refused);
}

#[test]
fn a_batch_over_max_message_bytes_is_rejected_with_message_too_large() {
    let mut w = World::new(
        1,
        1,
        TopicConfig {
            max_message_bytes: 100,
            ..TopicConfig::default()
        },
    );
    let big = "x".repeat(200);
    assert_eq!(
        w.produce(Acks::Leader, &big),
        Reply::Done(Response::Error(KafkaError::MessageTooLarge))
    );
    assert_eq!(w.cluster.log_end_offset(&w.tp, 1), Some(0));
}

#[test]
fn acks_all_times_out_with_request_timed_out_but_the_batch_stays_and_may_commit() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let leader = w.leader();
    for f in w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .filter(|&b| b != leader)
    {
        w.env.cut.insert((leader.min(f), leader.max(f)));
    }
    let Reply::Parked(token) = w.produce(Acks::All, "late") else {
        panic!("parks")
    };
    let r = w.await_parked(token, 31_000);
    assert_eq!(r, Response::Error(KafkaError::RequestTimedOut));
    assert_eq!(w.cluster.log_end_offset(&w.tp, leader), Some(1));
    // The lagging followers leave the ISR after replica.lag.time.max.ms: the batch commits.
    w.tick_for(1_000);
    assert_eq!(w.cluster.isr(&w.tp), vec![leader]);
    assert_eq!(w.values(), vec!["late"]);
}

#[test]
fn acks_0_and_acks_1_answer_at_once_with_minus_one_and_the_base_offset() {
    let mut w = World::new(3, 3, TopicConfig::default());
    assert!(matches!(
        w.produce(Acks::None, "a"),
        Reply::Done(Response::Produce {
            base_offset: -1,
            ..
        })
    ));
    let Reply::Done(r) = w.produce(Acks::Leader, "b") else {
        panic!("acks=1 answers at once")
    };
    assert_eq!(base_offset(&r), 1);
    assert_eq!(base_offset(&w.produce_all("c")), 2);
}

#[test]
fn fetch_outside_log_start_and_leo_is_offset_out_of_range() {
    let mut w = World::new(1, 1, TopicConfig::default());
    w.produce_all("a");
    assert_eq!(
        w.fetch_at(1, Isolation::ReadUncommitted, 2).error,
        Some(KafkaError::OffsetOutOfRange)
    );
    assert_eq!(
        w.fetch_at(1, Isolation::ReadUncommitted, -1).error,
        Some(KafkaError::OffsetOutOfRange)
    );
    let at_end = w.fetch_at(1, Isolation::ReadUncommitted, 1);
    assert_eq!(
        (at_end.error, at_end.records.len(), at_end.next_fetch_offset),
        (None, 0, 1)
    );
}

/// A Fetch with `max_wait_ms` 500 and `min_bytes` as given, at the current leader.
fn long_poll(w: &mut World, offset: Offset, min_bytes: u32) -> Reply {
    long_poll_for(w, offset, min_bytes, 500)
}

fn long_poll_for(w: &mut World, offset: Offset, min_bytes: u32, max_wait_ms: u64) -> Reply {
    let req = Request::Fetch {
        isolation: Isolation::ReadUncommitted,
        partitions: vec![(w.tp.clone(), offset)],
        max_bytes: 1 << 20,
        partition_max_bytes: 1 << 20,
        min_bytes,
        max_wait_ms,
        current_leader_epochs: Vec::new(),
    };
    let leader = w.leader();
    w.cluster.handle(w.now, leader, req)
}

fn fetched(response: Option<Response>) -> FetchPartition {
    match response {
        Some(Response::Fetch { mut partitions }) => partitions.remove(0).1,
        other => panic!("expected a fetch response, got {other:?}"),
    }
}

#[test]
fn an_empty_long_poll_parks_and_completes_once_a_record_is_below_the_hw() {
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("a");
    let Reply::Parked(token) = long_poll(&mut w, 1, 1) else {
        panic!("nothing readable at offset 1: the fetch must park");
    };
    w.tick_for(100);
    assert_eq!(w.cluster.poll_parked(w.now, &token), None, "still waiting");
    assert_eq!(w.cluster.parked_fetch_count(), 1);
    // acks=1: the record is in the leader's log at once but readable only below the HW.
    assert!(matches!(w.produce(Acks::Leader, "b"), Reply::Done(_)));
    let mut got = None;
    for _ in 0..10 {
        got = w.cluster.poll_parked(w.now, &token);
        if got.is_some() {
            break;
        }
        w.tick_for(TICK_MS);
    }
    assert!(w.now < 500, "completed before max_wait_ms");
    let f = fetched(got);
    assert_eq!(f.records.len(), 1, "the new record");
    assert_eq!(f.records[0].offset, 1);
    assert_eq!(w.cluster.parked_fetch_count(), 0);
}

#[test]
fn a_long_poll_answers_empty_at_max_wait_and_waits_for_min_bytes() {
    let mut w = World::new(1, 1, TopicConfig::default());
    w.produce_all("a");
    // min_bytes above one batch: one batch readable is not enough.
    let Reply::Parked(token) = long_poll(&mut w, 0, 1 << 20) else {
        panic!("one small batch is below min_bytes: the fetch must park");
    };
    w.tick_for(490);
    assert_eq!(w.cluster.poll_parked(w.now, &token), None);
    w.tick_for(10);
    let f = fetched(w.cluster.poll_parked(w.now, &token));
    assert_eq!(f.records.len(), 1, "at max_wait_ms: what is readable then");
    // Nothing readable and the wait over: empty, not an error.
    let Reply::Parked(token) = long_poll(&mut w, 1, 1) else {
        panic!("must park");
    };
    w.tick_for(500);
    let f = fetched(w.cluster.poll_parked(w.now, &token));
    assert!(f.records.is_empty() && f.error.is_none(), "{f:?}");
}

#[test]
fn a_parked_fetch_completes_with_not_leader_when_its_broker_loses_leadership() {
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("a");
    let old = w.leader();
    let Reply::Parked(token) = long_poll_for(&mut w, 1, 1, 60_000) else {
        panic!("must park");
    };
    // The leader restarts and comes back as a follower (an unclean shutdown).
    w.crash(old, CrashMode::ProcessKill);
    w.tick_for(100);
    w.restart(old);
    let mut got = None;
    for _ in 0..3000 {
        w.tick_for(TICK_MS);
        got = w.cluster.poll_parked(w.now, &token);
        if got.is_some() {
            break;
        }
    }
    assert!(w.now < 60_000, "completed before max_wait_ms");
    let f = fetched(got);
    assert_eq!(f.error, Some(KafkaError::NotLeaderOrFollower), "{f:?}");
}

#[test]
fn a_long_poll_with_max_wait_zero_answers_at_once() {
    let mut w = World::new(1, 1, TopicConfig::default());
    w.produce_all("a");
    let f = w.fetch_at(w.leader(), Isolation::ReadUncommitted, 1);
    assert!(f.records.is_empty() && f.error.is_none());
    assert_eq!(w.cluster.parked_fetch_count(), 0);
}

#[test]
fn fetch_respects_byte_limits_but_always_returns_the_first_batch() {
    let mut w = World::new(1, 1, TopicConfig::default());
    for i in 0..10 {
        w.produce_all(&format!("{i:0>100}"));
    }
    let fetch = |w: &mut World, max_bytes: u32, partition_max_bytes: u32| {
        let req = Request::Fetch {
            isolation: Isolation::ReadUncommitted,
            partitions: vec![(w.tp.clone(), 0)],
            max_bytes,
            partition_max_bytes,
            min_bytes: 1,
            max_wait_ms: 500,
            current_leader_epochs: Vec::new(),
        };
        match w.cluster.handle(w.now, 1, req) {
            Reply::Done(Response::Fetch { mut partitions }) => partitions.remove(0).1,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        fetch(&mut w, 1, 1).records.len(),
        1,
        "one batch even over the limits"
    );
    let batch = super::log::batch_size_bytes(&[record(&format!("{:0>100}", 0))]);
    let f = fetch(&mut w, 3 * batch, 1 << 20);
    assert_eq!((f.records.len(), f.next_fetch_offset), (3, 3));
    let f = fetch(&mut w, 1 << 20, 2 * batch);
    assert_eq!((f.records.len(), f.next_fetch_offset), (2, 2));
}

#[test]
fn create_topic_rejects_duplicates_and_replication_above_live_brokers() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let create = |name: &str, partitions: u32, rf: u32| Request::CreateTopic {
        name: name.into(),
        partitions,
        replication_factor: rf,
        config: TopicConfig::default(),
    };
    let err = |e| Reply::Done(Response::Error(e));
    assert_eq!(
        w.cluster.handle(0, 1, create("t", 1, 1)),
        err(KafkaError::TopicAlreadyExists)
    );
    assert_eq!(
        w.cluster.handle(0, 1, create("u", 1, 4)),
        err(KafkaError::InvalidReplicationFactor)
    );
    assert_eq!(
        w.cluster.handle(0, 1, create("u", 0, 1)),
        err(KafkaError::InvalidPartitions)
    );
    w.crash(3, CrashMode::ProcessKill);
    w.tick_for(10_000);
    assert_eq!(
        w.cluster.handle(w.now, 1, create("u", 1, 3)),
        err(KafkaError::InvalidReplicationFactor)
    );
    assert_eq!(
        w.cluster.handle(w.now, 1, create("u", 6, 2)),
        Reply::Done(Response::CreateTopic)
    );
    assert_eq!(w.cluster.topics(), vec!["t".to_string(), "u".to_string()]);
}

#[test]
fn replicas_are_assigned_round_robin_like_kafka() {
    let a = super::model::assign_replicas(&[1, 2, 3], 6, 3);
    assert_eq!(
        a,
        vec![
            vec![1, 2, 3],
            vec![2, 3, 1],
            vec![3, 1, 2],
            vec![1, 3, 2],
            vec![2, 1, 3],
            vec![3, 2, 1]
        ]
    );
}

#[test]
fn metadata_lists_user_topics_and_omits_unknown_ones() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let Reply::Done(Response::Metadata { brokers, topics }) =
        w.cluster.handle(0, 2, Request::Metadata { topics: None })
    else {
        panic!()
    };
    assert_eq!(brokers, vec![1, 2, 3]);
    assert_eq!(topics.keys().collect::<Vec<_>>(), vec!["t"]);
    assert_eq!(topics["t"][0].leader, Some(1));
    assert_eq!(topics["t"][0].isr, vec![1, 2, 3]);
    let req = Request::Metadata {
        topics: Some(vec!["nope".into(), "__consumer_offsets".into()]),
    };
    let Reply::Done(Response::Metadata { topics, .. }) = w.cluster.handle(0, 2, req) else {
        panic!()
    };
    assert_eq!(
        topics.keys().collect::<Vec<_>>(),
        vec!["__consumer_offsets"]
    );
}

#[test]
fn list_offsets_gives_log_start_and_the_high_watermark() {
    let mut w = World::new(1, 1, TopicConfig::default());
    w.produce_all("a");
    w.produce_all("b");
    let ask = |w: &mut World, spec| {
        w.cluster.handle(
            w.now,
            1,
            Request::ListOffsets {
                tp: w.tp.clone(),
                spec,
            },
        )
    };
    assert_eq!(
        ask(&mut w, OffsetSpec::Earliest),
        Reply::Done(Response::ListOffsets { offset: 0 })
    );
    let latest = OffsetSpec::Latest(Isolation::ReadCommitted);
    assert_eq!(
        ask(&mut w, latest),
        Reply::Done(Response::ListOffsets { offset: 2 })
    );
}

#[test]
fn the_internal_topics_take_their_own_partition_counts() {
    let cfg = ClusterConfig {
        offsets_topic_num_partitions: 3,
        transaction_state_log_num_partitions: 5,
        ..ClusterConfig::default()
    };
    let cluster = Cluster::new(3, cfg);
    assert_eq!(cluster.partition_count("__consumer_offsets"), Some(3));
    assert_eq!(cluster.partition_count("__transaction_state"), Some(5));
    // "abc".hashCode() = 96354: partition 96354 % 5 = 4 of __transaction_state coordinates
    // the transactional id "abc" (TransactionStateManager.partitionFor).
    let leader = cluster
        .leader(&TopicPartition::new("__transaction_state", 4))
        .unwrap();
    assert_eq!(
        cluster.coordinator_for("abc", CoordinatorKind::Transaction),
        Some(leader)
    );
}

#[test]
fn find_coordinator_names_the_leader_of_the_groups_offsets_partition() {
    let mut w = World::new(3, 3, TopicConfig::default());
    // offsets_topic_num_partitions is 3 in these tests: "abc".hashCode() = 96354, % 3 = 0.
    let tp = TopicPartition::new("__consumer_offsets", 0);
    let leader = w.cluster.leader(&tp).unwrap();
    let req = Request::FindCoordinator {
        key: "abc".into(),
        kind: CoordinatorKind::Group,
    };
    assert_eq!(
        w.cluster.handle(0, 3, req),
        Reply::Done(Response::FindCoordinator { broker: leader })
    );
    assert_eq!(
        w.cluster.coordinator_for("abc", CoordinatorKind::Group),
        Some(leader)
    );
    // A group request at another broker is NOT_COORDINATOR.
    let other = if leader == 1 { 2 } else { 1 };
    let hb = Request::Heartbeat {
        group_id: "abc".into(),
        generation: 0,
        member_id: "m".into(),
    };
    assert_eq!(
        w.cluster.handle(0, other, hb),
        Reply::Done(Response::Error(KafkaError::NotCoordinator))
    );
    // Offline coordinator partition: COORDINATOR_NOT_AVAILABLE.
    for b in 1..=3 {
        w.crash(b, CrashMode::ProcessKill);
    }
    w.restart(other);
    w.tick_for(10_000);
    if w.cluster.leader(&tp).is_none() {
        let req = Request::FindCoordinator {
            key: "abc".into(),
            kind: CoordinatorKind::Group,
        };
        let r = w.cluster.handle(w.now, other, req);
        assert_eq!(
            r,
            Reply::Done(Response::Error(KafkaError::CoordinatorNotAvailable))
        );
    }
}

/// Sends a group request to the coordinator of `abc` and ticks until it is answered.
fn group_call(w: &mut World, request: Request) -> Response {
    let coordinator = w
        .cluster
        .coordinator_for("abc", CoordinatorKind::Group)
        .unwrap();
    match w.cluster.handle(w.now, coordinator, request) {
        Reply::Done(r) => r,
        Reply::Parked(token) => {
            // The first join waits out `group.initial.rebalance.delay.ms` (3 s).
            let end = w.now + 10_000;
            loop {
                assert!(
                    w.now < end,
                    "a parked group request was not answered in 10 s"
                );
                w.tick_for(TICK_MS);
                if let Some(r) = w.cluster.poll_parked(w.now, &token) {
                    break r;
                }
            }
        }
    }
}

/// Kills the broker coordinating `group` and ticks until the controller has moved the
/// coordinator; returns the killed broker.
fn move_group_coordinator(w: &mut World, group: &str) -> BrokerId {
    let old = w
        .cluster
        .coordinator_for(group, CoordinatorKind::Group)
        .unwrap();
    w.crash(old, CrashMode::ProcessKill);
    w.tick_for(20_000);
    let new = w
        .cluster
        .coordinator_for(group, CoordinatorKind::Group)
        .unwrap();
    assert_ne!(old, new, "the coordinator moved");
    old
}

/// Found by the three-broker group differential against Kafka 4.1: a new group
/// coordinator knows a group only as its last metadata record says. A generation whose
/// join phase completed but whose leader never sent SyncGroup was never written
/// (`GroupMetadataManager.completeClassicGroupJoin` writes a record only for a group that
/// became empty), so after the move its member is unknown; a generation the leader's
/// SyncGroup completed survives, members, assignment and all.
#[test]
fn a_moved_group_coordinator_knows_only_what_the_groups_records_say() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let join = |member_id: &str| Request::JoinGroup {
        group_id: "abc".into(),
        member_id: member_id.into(),
        group_instance_id: None,
        session_timeout_ms: 300_000,
        rebalance_timeout_ms: 300_000,
        topics: vec!["t".into()],
        protocols: GroupProtocols::offering(&["range"]),
    };
    let Response::MemberIdRequired { member_id } = group_call(&mut w, join("")) else {
        panic!("KIP-394: a member id first")
    };
    let joined = group_call(&mut w, join(&member_id));
    assert!(
        matches!(joined, Response::JoinGroup { generation: 1, .. }),
        "{joined:?}"
    );
    let killed = move_group_coordinator(&mut w, "abc");
    assert_eq!(
        group_call(&mut w, join(&member_id)),
        Response::Error(KafkaError::UnknownMemberId),
        "the unsynced generation 1 was never written"
    );
    // A generation that the leader synced is written, and loaded by the next coordinator.
    let Response::MemberIdRequired { member_id } = group_call(&mut w, join("")) else {
        panic!("KIP-394: a member id first")
    };
    let joined = group_call(&mut w, join(&member_id));
    let Response::JoinGroup { generation, .. } = joined else {
        panic!("joined: {joined:?}")
    };
    let assignment = vec![TopicPartition::new("t", 0)];
    let sync = Request::SyncGroup {
        group_id: "abc".into(),
        generation,
        member_id: member_id.clone(),
        assignments: [(member_id.clone(), assignment.clone())]
            .into_iter()
            .collect(),
    };
    assert_eq!(
        group_call(&mut w, sync.clone()),
        Response::SyncGroup {
            assignment: assignment.clone()
        }
    );
    w.restart(killed);
    w.tick_for(20_000);
    move_group_coordinator(&mut w, "abc");
    let heartbeat = Request::Heartbeat {
        group_id: "abc".into(),
        generation,
        member_id: member_id.clone(),
    };
    assert_eq!(group_call(&mut w, heartbeat), Response::Heartbeat);
    assert_eq!(group_call(&mut w, sync), Response::SyncGroup { assignment });
    crate::marks::assert_hit(&["kafka:group-reloaded-from-records"]);
}

/// A.10: a power loss keeps of a log only what is on disk for sure (here: what the OS wrote
/// back, older than `vm.dirty_expire_centisecs`), which may lie below the HW; a process
/// kill keeps everything; a cut drawn at the LEO keeps everything too.
#[test]
fn a_machine_crash_keeps_what_the_os_wrote_back_possibly_below_the_high_watermark() {
    crate::marks::take();
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("a");
    w.tick_for(40_000); // the OS writes "a" back
    w.produce_all("b");
    let leader = w.leader();
    assert_eq!(w.cluster.replica_high_watermark(&w.tp, leader), Some(2));
    let followers: Vec<BrokerId> = (1..=3).filter(|&b| b != leader).collect();
    w.crash(leader, CrashMode::MachineCrash);
    assert_eq!(
        w.cluster.log_end_offset(&w.tp, leader),
        Some(1),
        "the acks=all write \"b\" was only in the page cache"
    );
    w.crash(followers[0], CrashMode::ProcessKill);
    assert_eq!(w.cluster.log_end_offset(&w.tp, followers[0]), Some(2));
    let kept = w.cluster.crash_broker_with(
        w.now,
        followers[1],
        CrashMode::MachineCrash,
        &mut |_, end| end,
    );
    assert_eq!(kept, 0);
    assert_eq!(w.cluster.log_end_offset(&w.tp, followers[1]), Some(2));
    crate::marks::assert_hit(&[
        "kafka:machine-crash-lost-unflushed-tail",
        "kafka:machine-crash-lost-below-hw",
    ]);
}

/// A.10: every replica's machine crashing at once (correlated power loss) loses
/// acknowledged acks=all writes under Kafka's default flush settings, and none with
/// `log.flush.interval.messages = 1` (leader and followers fsync every append,
/// `UnifiedLog.append`), nor with the log flusher on (`log.flush.scheduler.interval.ms`,
/// `log.flush.interval.ms`) once it has run.
#[test]
fn a_correlated_machine_crash_loses_acks_all_writes_unless_logs_are_flushed() {
    let default = ClusterConfig::default();
    let per_message = ClusterConfig {
        log_flush_interval_messages: 1,
        ..ClusterConfig::default()
    };
    let timer = ClusterConfig {
        log_flush_scheduler_interval_ms: 1_000,
        log_flush_interval_ms: Some(1_000),
        ..ClusterConfig::default()
    };
    for (config, survives) in [(default, false), (per_message, true), (timer, true)] {
        let mut w = World::with_config(3, 3, min_isr(2), config.clone());
        for v in ["a", "b", "c"] {
            assert!(matches!(w.produce_all(v), Response::Produce { .. }));
        }
        w.tick_for(2_000);
        w.power_loss(3, 10_000);
        w.tick_for(10_000);
        let expected: Vec<String> = if survives {
            vec!["a".into(), "b".into(), "c".into()]
        } else {
            Vec::new()
        };
        assert_eq!(w.values(), expected, "{config:?}");
    }
}

/// KIP-320 at the broker (`Partition.fetchOffsetForLeaderEpoch`, `checkCurrentLeaderEpoch`,
/// `LeaderEpochFileCache.endOffsetFor`): after an unclean election truncated the log below
/// what a consumer read at epoch 0, OffsetsForLeaderEpoch at the new leader says where epoch
/// 0 ends there; a fetch naming an older leader epoch is fenced, a newer one unknown.
#[test]
fn offsets_for_leader_epoch_names_where_a_consumers_epoch_ends_after_a_truncation() {
    let config = TopicConfig {
        unclean_leader_election_enable: true,
        ..TopicConfig::default()
    };
    let mut w = World::new(2, 2, config);
    w.produce_all("a");
    let leader = w.leader();
    let follower = 3 - leader;
    w.crash(follower, CrashMode::ProcessKill);
    w.tick_for(10_000);
    w.produce_all("b");
    w.produce_all("c");
    let read = w.fetch_at(leader, Isolation::ReadUncommitted, 1);
    let epochs: Vec<i32> = read.records.iter().map(|r| r.leader_epoch).collect();
    assert_eq!(
        epochs,
        vec![0, 0],
        "the consumer read offsets 1 and 2 at epoch 0"
    );
    w.crash(leader, CrashMode::ProcessKill);
    w.restart(follower);
    w.tick_for(10_000);
    assert_eq!(w.cluster.leader(&w.tp), Some(follower));
    let epoch = w.cluster.leader_epoch(&w.tp).unwrap();
    assert_eq!(
        base_offset(&w.produce_all("d")),
        1,
        "the new leader diverges at 1"
    );
    let tp = w.tp.clone();
    let ask = |current_leader_epoch| Request::OffsetsForLeaderEpoch {
        tp: tp.clone(),
        current_leader_epoch,
        leader_epoch: 0,
    };
    let answer = |w: &mut World, r| match w.cluster.handle(w.now, follower, r) {
        Reply::Done(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        answer(&mut w, ask(epoch)),
        Response::OffsetsForLeaderEpoch {
            leader_epoch: 0,
            end_offset: 1
        }
    );
    for (current, e) in [
        (epoch - 1, KafkaError::FencedLeaderEpoch),
        (epoch + 1, KafkaError::UnknownLeaderEpoch),
    ] {
        assert_eq!(answer(&mut w, ask(current)), Response::Error(e));
        let fetch = Request::Fetch {
            isolation: Isolation::ReadUncommitted,
            partitions: vec![(tp.clone(), 1)],
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
            min_bytes: 1,
            max_wait_ms: 0,
            current_leader_epochs: vec![(tp.clone(), current)],
        };
        let Reply::Done(Response::Fetch { partitions }) = w.cluster.handle(w.now, follower, fetch)
        else {
            panic!("a fetch answer")
        };
        assert_eq!(partitions[0].1.error, Some(e));
    }
}

/// KRaft brokers answer Metadata and FindCoordinator from their own replay of the metadata
/// log (`KRaftMetadataCache`): a broker cut off from the controller keeps naming itself as
/// leader and coordinator after the controller moved both; the others name the new ones.
#[test]
fn a_broker_cut_off_from_the_controller_answers_metadata_from_its_stale_image() {
    crate::marks::take();
    let mut w = World::new(3, 3, min_isr(2));
    let old = w.leader();
    let key = (0..100)
        .map(|i| format!("g{i}"))
        .find(|g| w.cluster.coordinator_for(g, CoordinatorKind::Group) == Some(old))
        .expect("a group coordinated by the leader");
    w.env.isolate(old, 3);
    w.tick_for(15_000);
    let new = w.leader();
    assert_ne!(new, old, "the controller moved the leadership");
    let leader_at = |w: &mut World, b: BrokerId| {
        let req = Request::Metadata {
            topics: Some(vec!["t".into()]),
        };
        match w.cluster.handle(w.now, b, req) {
            Reply::Done(Response::Metadata { topics, .. }) => topics["t"][0].leader,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(leader_at(&mut w, old), Some(old), "stale image");
    assert_eq!(leader_at(&mut w, new), Some(new));
    let coordinator_at = |w: &mut World, b: BrokerId| {
        let req = Request::FindCoordinator {
            key: key.clone(),
            kind: CoordinatorKind::Group,
        };
        w.cluster.handle(w.now, b, req)
    };
    let stale = Reply::Done(Response::FindCoordinator { broker: old });
    assert_eq!(coordinator_at(&mut w, old), stale);
    assert_ne!(coordinator_at(&mut w, new), stale);
    w.env.heal();
    w.tick_for(1_000);
    assert_eq!(
        leader_at(&mut w, old),
        Some(new),
        "caught up with the controller"
    );
    crate::marks::assert_hit(&["kafka:broker-metadata-stale"]);
}

// ------------------------------------------------------------------------ property

// ------------------------------------------------------------ Kafka-on-Pulsar flavour

/// A world whose brokers are KoP with `kop` (3 brokers, replication factor 3).
fn kop_world(kop: super::kop::KopConfig) -> World {
    let cluster = ClusterConfig {
        flavour: super::kop::Flavour::Kop(kop),
        ..ClusterConfig::default()
    };
    World::with_config(3, 3, min_isr(2), cluster)
}

/// KoP before 2.8: no `AppendIndexMetadataInterceptor`, ledgers of `entries` entries.
fn kop_pre_index(entries: u64) -> super::kop::KopConfig {
    super::kop::KopConfig {
        broker_entry_metadata_interceptors: Vec::new(),
        managed_ledger_max_entries_per_ledger: entries,
        ..super::kop::KopConfig::default()
    }
}

impl World {
    /// Produces `values` as one batch with acks=all and returns its base offset.
    fn produce_batch(&mut self, values: &[&str]) -> Offset {
        let req = Request::Produce {
            tp: self.tp.clone(),
            acks: Acks::All,
            timeout_ms: 30_000,
            header: ProducerBatchHeader::NONE,
            records: values.iter().map(|v| record(v)).collect(),
        };
        let leader = self.leader();
        let r = match self.cluster.handle(self.now, leader, req) {
            Reply::Done(r) => r,
            Reply::Parked(t) => self.await_parked(t, 60_000),
        };
        base_offset(&r)
    }

    fn offsets(&self) -> Vec<Offset> {
        self.cluster
            .records(&self.tp)
            .iter()
            .map(|(o, _)| *o)
            .collect()
    }
}

#[test]
fn kop_without_the_index_interceptor_gives_each_entry_4096_offsets_and_rolls_ledgers_by_2_pow_44() {
    let mut w = kop_world(kop_pre_index(3));
    assert_eq!(w.produce_batch(&["a", "b"]), 0);
    assert_eq!(w.produce_batch(&["c"]), 4096);
    assert_eq!(w.produce_batch(&["d"]), 8192);
    assert_eq!(
        w.produce_batch(&["e"]),
        1 << 44,
        "the fourth entry opens ledger 1"
    );
    w.tick_for(100);
    // The test that fails if offsets become dense again.
    assert_eq!(w.offsets(), vec![0, 1, 4096, 8192, 1 << 44]);
    assert_ne!(w.offsets(), (0..5).collect::<Vec<Offset>>());
    // The log end offset (and so the HW) is one past the last record, not the next entry.
    assert_eq!(w.cluster.high_watermark(&w.tp), Some((1 << 44) + 1));
    // Followers copy the leader's offsets as they are.
    let leader_batches = w.cluster.replica_batches(&w.tp, w.leader());
    for b in 1..=3 {
        assert_eq!(
            w.cluster.replica_batches(&w.tp, b),
            leader_batches,
            "broker-{b}"
        );
    }
}

#[test]
fn kop_fetch_from_inside_a_gap_returns_the_next_entry_and_the_next_position_past_it() {
    let mut w = kop_world(kop_pre_index(50_000));
    w.produce_batch(&["a", "b"]);
    w.produce_batch(&["c"]);
    w.tick_for(100);
    let leader = w.leader();
    // A consumer that consumed offset 1 asks for offset 2: it is in the gap.
    let f = w.fetch_at(leader, Isolation::ReadUncommitted, 2);
    let offsets: Vec<Offset> = f.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![4096]);
    assert_eq!(f.next_fetch_offset, 4097);
    assert_eq!(f.high_watermark, 4097);
    // Caught up at the HW: nothing more, and no OFFSET_OUT_OF_RANGE.
    let f = w.fetch_at(leader, Isolation::ReadUncommitted, 4097);
    assert!(f.records.is_empty() && f.error.is_none(), "{f:?}");
}

#[test]
fn kop_keeps_its_entry_sequence_across_a_leader_failover() {
    let mut w = kop_world(kop_pre_index(50_000));
    w.produce_batch(&["a"]);
    w.produce_batch(&["b"]);
    w.tick_for(100);
    let old = w.leader();
    w.crash(old, CrashMode::ProcessKill);
    w.tick_for(15_000);
    assert_ne!(w.leader(), old, "a new leader");
    assert_eq!(
        w.produce_batch(&["c"]),
        8192,
        "the new leader appends the next entry"
    );
}

#[test]
fn kop_with_the_index_interceptor_places_offsets_as_kafka_does_a_marker_taking_one() {
    let mut w = kop_world(super::kop::KopConfig::default());
    assert_eq!(w.produce_batch(&["a", "b"]), 0);
    let marker = w
        .cluster
        .append_control_batch(&w.tp, ProducerBatchHeader::NONE, record("COMMIT"))
        .unwrap();
    assert_eq!(marker, 2);
    assert_eq!(w.produce_batch(&["c"]), 3);
    w.tick_for(100);
    assert_eq!(w.offsets(), vec![0, 1, 3]);
}

#[test]
fn kop_with_the_coordinator_disabled_closes_the_connection_on_every_transaction_request() {
    crate::marks::take();
    let mut w = kop_world(kop_pre_index(50_000));
    let requests = [
        Request::InitProducerId {
            transactional_id: Some("tx".into()),
            transaction_timeout_ms: 10_000,
            producer_id: -1,
            producer_epoch: -1,
        },
        Request::InitProducerId {
            transactional_id: None,
            transaction_timeout_ms: 10_000,
            producer_id: -1,
            producer_epoch: -1,
        },
        Request::AddPartitionsToTxn {
            transactional_id: "tx".into(),
            producer_id: 0,
            producer_epoch: 0,
            partitions: vec![w.tp.clone()],
        },
        Request::AddOffsetsToTxn {
            transactional_id: "tx".into(),
            producer_id: 0,
            producer_epoch: 0,
            group_id: "g".into(),
        },
        Request::EndTxn {
            transactional_id: "tx".into(),
            producer_id: 0,
            producer_epoch: 0,
            commit: true,
        },
    ];
    for req in requests {
        match w.cluster.handle(w.now, 1, req.clone()) {
            Reply::Done(Response::ConnectionClosed { reason }) => {
                assert!(
                    reason.contains("kafkaTransactionCoordinatorEnabled=false"),
                    "{reason}"
                );
            }
            other => panic!("{req:?}: expected the connection closed, got {other:?}"),
        }
    }
    assert_eq!(
        crate::marks::take()["kop:transaction-coordinator-disabled"],
        5
    );
    // Plain produce and both isolation levels of fetch are served.
    w.produce_batch(&["a"]);
    w.tick_for(100);
    let leader = w.leader();
    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let f = w.fetch_at(leader, isolation, 0);
        assert_eq!(f.records.len(), 1, "{isolation:?}");
    }
}

#[test]
fn kop_with_the_coordinator_enabled_hands_out_producer_ids() {
    let mut w = kop_world(super::kop::KopConfig {
        kafka_transaction_coordinator_enabled: true,
        ..super::kop::KopConfig::default()
    });
    let req = Request::InitProducerId {
        transactional_id: None,
        transaction_timeout_ms: 10_000,
        producer_id: -1,
        producer_epoch: -1,
    };
    match w.cluster.handle(w.now, 1, req) {
        Reply::Done(Response::InitProducerId { .. }) => {}
        other => panic!("expected a producer id, got {other:?}"),
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const BROKERS: u32 = 3;
    const PARTITIONS: u32 = 2;

    #[derive(Debug, Clone)]
    enum Op {
        /// Produce to `partition` at `via` (0 = the controller's leader, else that broker).
        Produce {
            partition: u32,
            acks_all: bool,
            via: u32,
        },
        Crash(BrokerId),
        Restart(BrokerId),
        Tick(u64),
        CutLink(BrokerId, BrokerId),
        CutController(BrokerId),
        Heal,
    }

    fn op() -> impl Strategy<Value = Op> {
        let b = 1..=BROKERS;
        prop_oneof![
            6 => (0..PARTITIONS, any::<bool>(), 0..=BROKERS)
                .prop_map(|(partition, acks_all, via)| Op::Produce { partition, acks_all, via }),
            1 => b.clone().prop_map(Op::Crash),
            1 => b.clone().prop_map(Op::Restart),
            4 => (10u64..4_000).prop_map(Op::Tick),
            1 => (b.clone(), b.clone()).prop_map(|(x, y)| Op::CutLink(x, y)),
            1 => b.prop_map(Op::CutController),
            1 => Just(Op::Heal),
        ]
    }

    struct Run {
        cluster: Cluster,
        env: TestEnv,
        now: TimeMs,
        parked: Vec<(ParkToken, String, TopicPartition)>,
        acked: Vec<(TopicPartition, String)>,
        /// Per partition: (leader, epoch, HW) last seen.
        hw_seen: BTreeMap<TopicPartition, (BrokerId, i32, Offset)>,
        next_value: u64,
    }

    impl Run {
        fn new(min_isr: u32) -> Self {
            let cfg = ClusterConfig {
                offsets_topic_num_partitions: 1,
                transaction_state_log_num_partitions: 1,
                ..ClusterConfig::default()
            };
            let mut cluster = Cluster::new(BROKERS, cfg);
            let config = TopicConfig {
                min_insync_replicas: min_isr,
                ..TopicConfig::default()
            };
            let req = Request::CreateTopic {
                name: "t".into(),
                partitions: PARTITIONS,
                replication_factor: 3,
                config,
            };
            assert_eq!(
                cluster.handle(0, 1, req),
                Reply::Done(Response::CreateTopic)
            );
            Self {
                cluster,
                env: TestEnv::default(),
                now: 0,
                parked: Vec::new(),
                acked: Vec::new(),
                hw_seen: BTreeMap::new(),
                next_value: 0,
            }
        }

        fn apply(&mut self, op: &Op) {
            match *op {
                Op::Produce {
                    partition,
                    acks_all,
                    via,
                } => self.produce(partition, acks_all, via),
                Op::Crash(b) => {
                    if self.cluster.broker_alive(b) {
                        self.cluster
                            .crash_broker(self.now, b, CrashMode::ProcessKill);
                        self.env.down.insert(b);
                    }
                }
                Op::Restart(b) => {
                    self.cluster.restart_broker(self.now, b);
                    self.env.down.remove(&b);
                }
                Op::Tick(ms) => self.tick_for(ms),
                Op::CutLink(x, y) if x != y => {
                    self.env.cut.insert((x.min(y), x.max(y)));
                }
                Op::CutLink(..) => {}
                Op::CutController(b) => {
                    self.env.no_controller.insert(b);
                }
                Op::Heal => self.env.heal(),
            }
        }

        fn produce(&mut self, partition: u32, acks_all: bool, via: u32) {
            let tp = TopicPartition::new("t", partition);
            let broker = if via == 0 {
                self.cluster.leader(&tp).unwrap_or(1)
            } else {
                via
            };
            if !self.cluster.broker_alive(broker) {
                return;
            }
            let value = format!("v{}", self.next_value);
            self.next_value += 1;
            let acks = if acks_all { Acks::All } else { Acks::Leader };
            let req = Request::Produce {
                tp: tp.clone(),
                acks,
                timeout_ms: 5_000,
                header: ProducerBatchHeader::NONE,
                records: vec![record(&value)],
            };
            match self.cluster.handle(self.now, broker, req) {
                Reply::Parked(token) => self.parked.push((token, value, tp)),
                Reply::Done(Response::Produce { .. }) if acks_all => self.acked.push((tp, value)),
                Reply::Done(_) => {}
            }
        }

        fn tick_for(&mut self, ms: u64) {
            let end = self.now + ms;
            while self.now < end {
                self.now += TICK_MS;
                self.cluster.tick(self.now, &self.env);
                self.poll_parked();
                self.check_hw_monotone();
            }
        }

        fn poll_parked(&mut self) {
            let mut still = Vec::new();
            for (token, value, tp) in std::mem::take(&mut self.parked) {
                match self.cluster.poll_parked(self.now, &token) {
                    None => still.push((token, value, tp)),
                    Some(Response::Produce { .. }) => self.acked.push((tp, value)),
                    Some(_) => {}
                }
            }
            self.parked = still;
        }

        fn check_hw_monotone(&mut self) {
            for p in 0..PARTITIONS {
                let tp = TopicPartition::new("t", p);
                let (Some(leader), Some(hw)) =
                    (self.cluster.leader(&tp), self.cluster.high_watermark(&tp))
                else {
                    continue;
                };
                let epoch = self.cluster.leader_epoch(&tp).unwrap();
                if let Some(&(l, e, h)) = self.hw_seen.get(&tp) {
                    if l == leader && e == epoch {
                        assert!(
                            hw >= h,
                            "{tp}: HW went back from {h} to {hw} on leader {l} epoch {e}"
                        );
                    }
                }
                self.hw_seen.insert(tp, (leader, epoch, hw));
            }
        }

        /// Heals everything, restarts every broker and lets the cluster converge.
        fn converge(&mut self) {
            self.env.heal();
            for b in 1..=BROKERS {
                self.cluster.restart_broker(self.now, b);
                self.env.down.remove(&b);
            }
            self.tick_for(45_000);
        }
    }

    /// Everything a run can observe, for comparing two runs.
    fn observe(run: &Run) -> Vec<String> {
        let mut out = vec![format!("acked {:?}", run.acked)];
        for p in 0..PARTITIONS {
            let tp = TopicPartition::new("t", p);
            let c = &run.cluster;
            out.push(format!(
                "{tp} leader {:?} epoch {:?} isr {:?}",
                c.leader(&tp),
                c.leader_epoch(&tp),
                c.isr(&tp)
            ));
            for b in 1..=BROKERS {
                let hw = c.replica_high_watermark(&tp, b);
                out.push(format!(
                    "{tp} {b} hw {hw:?} {:?}",
                    c.replica_batches(&tp, b)
                ));
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn the_quiet_partition_fast_path_changes_nothing_observable(
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let mut fast = Run::new(2);
            let mut slow = Run::new(2);
            slow.cluster.set_fast_paths(false);
            for op in &ops {
                fast.apply(op);
                slow.apply(op);
                prop_assert_eq!(observe(&fast), observe(&slow), "after {:?}", op);
            }
            fast.converge();
            slow.converge();
            prop_assert_eq!(observe(&fast), observe(&slow));
        }

        #[test]
        fn acked_writes_survive_and_replicas_converge_under_kills_and_partitions(
            ops in proptest::collection::vec(op(), 1..60),
            min_isr in 1u32..=2,
        ) {
            let mut run = Run::new(min_isr);
            for op in &ops {
                run.apply(op);
            }
            run.converge();
            for p in 0..PARTITIONS {
                let tp = TopicPartition::new("t", p);
                let leader = run.cluster.leader(&tp).expect("online after convergence");
                let values: BTreeSet<String> = run
                    .cluster
                    .records(&tp)
                    .into_iter()
                    .map(|(_, r)| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
                    .collect();
                for (_, v) in run.acked.iter().filter(|(t, _)| *t == tp) {
                    prop_assert!(values.contains(v), "{tp}: acks=all write {v} lost");
                }
                let reference = run.cluster.replica_batches(&tp, leader);
                for b in 1..=BROKERS {
                    let batches = run.cluster.replica_batches(&tp, b);
                    prop_assert_eq!(&batches, &reference, "{} replica {}", tp, b);
                }
                prop_assert_eq!(run.cluster.isr(&tp).len(), 3);
                let leo = run.cluster.log_end_offset(&tp, leader);
                prop_assert_eq!(run.cluster.high_watermark(&tp), leo);
            }
        }
    }
}

/// Rough throughput of the model alone: 100,000 records through 3 brokers / 6 partitions,
/// one record per produce, a tick after every `EOSIM_TICK_EVERY` (default 1) produces. Run with
/// `cargo test -p eosim-sim --release -- --ignored model_throughput --nocapture`.
#[test]
#[ignore]
fn model_throughput() {
    let mut cluster = Cluster::new(3, ClusterConfig::default());
    let config = TopicConfig::default();
    let req = Request::CreateTopic {
        name: "t".into(),
        partitions: 6,
        replication_factor: 3,
        config,
    };
    assert_eq!(
        cluster.handle(0, 1, req),
        Reply::Done(Response::CreateTopic)
    );
    let env = TestEnv::default();
    let start = std::time::Instant::now();
    let mut now = 0;
    let mut parked = Vec::new();
    let every: u32 = std::env::var("EOSIM_TICK_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for i in 0..100_000u32 {
        let tp = TopicPartition::new("t", i % 6);
        let leader = cluster.leader(&tp).unwrap();
        let req = Request::Produce {
            tp,
            acks: Acks::All,
            timeout_ms: 30_000,
            header: ProducerBatchHeader::NONE,
            records: vec![record("0123456789abcdef")],
        };
        if let Reply::Parked(t) = cluster.handle(now, leader, req) {
            parked.push(t);
        }
        if i % every == every - 1 {
            now += 1;
            cluster.tick(now, &env);
            parked.retain(|t| cluster.poll_parked(now, t).is_none());
        }
    }
    for _ in 0..3 {
        now += 1;
        cluster.tick(now, &env);
    }
    parked.retain(|t| cluster.poll_parked(now, t).is_none());
    let secs = start.elapsed().as_secs_f64();
    println!(
        "100000 records in {secs:.3} s = {:.0} records/s",
        100_000.0 / secs
    );
    assert!(parked.is_empty());
}

#[test]
fn metadata_auto_creates_a_named_topic_when_auto_create_topics_is_enabled() {
    let cfg = ClusterConfig {
        auto_create_topics_enable: true,
        ..ClusterConfig::default()
    };
    let mut cluster = Cluster::new(3, cfg);
    let req = Request::Metadata {
        topics: Some(vec!["auto".into()]),
    };
    let Reply::Done(Response::Metadata { topics, .. }) = cluster.handle(0, 1, req) else {
        panic!()
    };
    assert_eq!(topics["auto"].len(), 1);
    assert_eq!(cluster.topics(), vec!["auto".to_string()]);
}

#[test]
fn a_parked_produce_nobody_polls_is_forgotten_after_its_deadline() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let leader = w.leader();
    w.env.isolate(leader, 3);
    w.env.no_controller.remove(&leader);
    let Reply::Parked(token) = w.produce(Acks::All, "x") else {
        panic!("parks")
    };
    assert_eq!(w.cluster.parked_produce_count(), 1);
    w.tick_for(30_000 + 60_000 + 2 * TICK_MS);
    assert_eq!(w.cluster.parked_produce_count(), 0);
    let late = w.cluster.poll_parked(w.now, &token);
    assert_eq!(late, Some(Response::Error(KafkaError::RequestTimedOut)));
}

#[test]
fn group_requests_reach_the_group_coordinator_only_at_the_coordinator_broker() {
    let mut w = World::new(3, 3, TopicConfig::default());
    let coordinator = w
        .cluster
        .coordinator_for("g", CoordinatorKind::Group)
        .unwrap();
    let join = || Request::JoinGroup {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        topics: vec!["t".into()],
        protocols: GroupProtocols::offering(&["range"]),
    };
    let other = coordinator % 3 + 1;
    let not_coordinator = Reply::Done(Response::Error(KafkaError::NotCoordinator));
    assert_eq!(w.cluster.handle(0, other, join()), not_coordinator);
    let r = w.cluster.handle(0, coordinator, join());
    assert!(
        matches!(r, Reply::Done(Response::MemberIdRequired { .. })),
        "{r:?}"
    );
    let commit = Request::OffsetCommit {
        group_id: "g".into(),
        generation: -1,
        member_id: String::new(),
        offsets: vec![(w.tp.clone(), 5)],
    };
    assert_eq!(
        w.cluster.handle(0, coordinator, commit),
        Reply::Done(Response::OffsetCommit)
    );
    assert_eq!(w.cluster.committed_offsets("g"), vec![(w.tp.clone(), 5)]);
}

/// Commits `offset` for `group` on t-0 at its coordinator, retrying through loads and
/// moves for up to 30 s.
fn commit_offset(w: &mut World, group: &str, offset: Offset) {
    for _ in 0..300 {
        if let Some(c) = w.cluster.coordinator_for(group, CoordinatorKind::Group) {
            let req = Request::OffsetCommit {
                group_id: group.into(),
                generation: -1,
                member_id: String::new(),
                offsets: vec![(w.tp.clone(), offset)],
            };
            if w.cluster.handle(w.now, c, req) == Reply::Done(Response::OffsetCommit) {
                return;
            }
        }
        w.tick_for(100);
    }
    panic!("no coordinator accepted the commit of {group}");
}

/// The internal partition owning `key`.
fn state_partition(w: &World, topic: &str, key: &str) -> TopicPartition {
    let count = w.cluster.partition_count(topic).expect("internal topic");
    let p = crate::kafka::murmur2::coordinator_partition_for(key, count);
    TopicPartition::new(topic, p)
}

/// Coordinator state lives in `__consumer_offsets` (`GroupMetadataManager.storeOffsets`,
/// acks=-1): a commit appends a record on every in-sync replica, and a clean move of the
/// coordinator loads it back from the new leader's log.
#[test]
fn a_committed_offset_is_logged_on_the_isr_and_survives_a_clean_coordinator_move() {
    let mut w = World::new(3, 3, TopicConfig::default());
    w.tick_for(1_000);
    let tp = state_partition(&w, "__consumer_offsets", "g");
    let before: Vec<Offset> = (1..=3)
        .map(|b| w.cluster.log_end_offset(&tp, b).unwrap())
        .collect();
    commit_offset(&mut w, "g", 7);
    for b in 1..=3 {
        let leo = w.cluster.log_end_offset(&tp, b).unwrap();
        assert_eq!(leo, before[(b - 1) as usize] + 1, "broker {b}'s log");
    }
    move_group_coordinator(&mut w, "g");
    assert_eq!(w.cluster.committed_offsets("g"), vec![(w.tp.clone(), 7)]);
    commit_offset(&mut w, "g", 9);
    assert_eq!(w.cluster.committed_offsets("g"), vec![(w.tp.clone(), 9)]);
}

/// What a coordinator acknowledged is only as durable as its log: a power loss of every
/// replica before the log was flushed (`log.flush.interval.messages` at its default) loses
/// the commit's record, and the coordinator that loads the partition afterwards has the
/// offset rolled back; with `log.flush.interval.messages = 1` it survives.
#[test]
fn a_power_loss_of_every_replica_rolls_a_committed_offset_back_unless_flushed() {
    let per_message = ClusterConfig {
        log_flush_interval_messages: 1,
        ..ClusterConfig::default()
    };
    for (config, survives) in [(ClusterConfig::default(), false), (per_message, true)] {
        let mut w = World::with_config(3, 3, TopicConfig::default(), config.clone());
        w.tick_for(1_000);
        commit_offset(&mut w, "g", 7);
        w.tick_for(500);
        w.power_loss(3, 10_000);
        w.tick_for(20_000);
        assert!(w
            .cluster
            .coordinator_for("g", CoordinatorKind::Group)
            .is_some());
        let expected = if survives {
            vec![(w.tp.clone(), 7)]
        } else {
            Vec::new()
        };
        assert_eq!(w.cluster.committed_offsets("g"), expected, "{config:?}");
    }
}

/// DeleteRecords (KIP-107): the log start rises, reads below it are OFFSET_OUT_OF_RANGE,
/// ListOffsets earliest answers the new start, records from it on are still read, an
/// offset past the HW is refused, and the start never goes down.
#[test]
fn delete_records_moves_the_log_start_and_reads_below_it_are_out_of_range() {
    let mut w = World::new(3, 3, TopicConfig::default());
    for i in 0..6 {
        w.produce_all(&format!("v{i}"));
    }
    assert_eq!(w.cluster.delete_records(&w.tp, Some(4)), Ok((0, 4)));
    let leader = w.leader();
    assert_eq!(
        w.fetch_at(leader, Isolation::ReadUncommitted, 3).error,
        Some(KafkaError::OffsetOutOfRange)
    );
    let from_start = w.fetch_at(leader, Isolation::ReadUncommitted, 4);
    let offsets: Vec<Offset> = from_start.records.iter().map(|r| r.offset).collect();
    assert_eq!((from_start.error, offsets), (None, vec![4, 5]));
    assert_eq!(from_start.log_start_offset, 4);
    let earliest = w.cluster.handle(
        w.now,
        leader,
        Request::ListOffsets {
            tp: w.tp.clone(),
            spec: OffsetSpec::Earliest,
        },
    );
    assert_eq!(earliest, Reply::Done(Response::ListOffsets { offset: 4 }));
    assert_eq!(w.values(), vec!["v4", "v5"]);
    assert_eq!(
        w.cluster.delete_records(&w.tp, Some(7)),
        Err(KafkaError::OffsetOutOfRange),
        "past the HW"
    );
    assert_eq!(w.cluster.delete_records(&w.tp, Some(2)), Ok((4, 4)));
    assert_eq!(
        w.cluster.delete_records(&w.tp, None),
        Ok((4, 6)),
        "None: the HW"
    );
    assert_eq!(w.cluster.log_start_offset(&w.tp), Some(6));
}

/// A client's DeleteRecords request (Kafka Streams purging a repartition topic) is
/// answered only by the leader, with the new low watermark.
#[test]
fn a_delete_records_request_is_refused_by_a_follower_and_moves_the_leaders_log_start() {
    let mut w = World::new(3, 3, TopicConfig::default());
    for i in 0..4 {
        w.produce_all(&format!("v{i}"));
    }
    let leader = w.leader();
    let follower = (1..=3).find(|b| *b != leader).expect("a follower");
    let request = |before| Request::DeleteRecords {
        tp: w.tp.clone(),
        before,
    };
    let refused = w.cluster.handle(w.now, follower, request(3));
    let refused_error = Reply::Done(Response::Error(KafkaError::NotLeaderOrFollower));
    assert_eq!(refused, refused_error);
    assert_eq!(w.cluster.log_start_offset(&w.tp), Some(0));
    let done = w.cluster.handle(w.now, leader, request(3));
    assert_eq!(
        done,
        Reply::Done(Response::DeleteRecords { low_watermark: 3 })
    );
    assert_eq!(w.values(), vec!["v3"]);
}

/// A follower down while records were deleted takes its leader's log start when it
/// fetches again, starting its log anew there when its own log ended below it; after a
/// failover the new leader's log start is the deleted one (no deleted record comes back).
#[test]
fn followers_take_the_leaders_log_start_and_deleted_records_never_come_back() {
    crate::marks::take();
    let mut w = World::new(3, 3, TopicConfig::default());
    w.produce_all("a0");
    let leader = w.leader();
    let behind = w
        .cluster
        .replicas(&w.tp)
        .into_iter()
        .find(|&b| b != leader)
        .expect("a follower");
    w.crash(behind, CrashMode::ProcessKill);
    w.tick_for(10_000);
    for i in 1..5 {
        w.produce_all(&format!("a{i}"));
    }
    assert_eq!(w.cluster.delete_records(&w.tp, Some(3)), Ok((0, 3)));
    w.restart(behind);
    w.tick_for(10_000);
    assert_eq!(
        w.cluster.replica_batches(&w.tp, behind),
        w.cluster.replica_batches(&w.tp, leader),
        "the follower holds what the leader holds, from the new start"
    );
    w.crash(leader, CrashMode::ProcessKill);
    w.tick_for(10_000);
    assert_ne!(w.leader(), leader);
    assert_eq!(w.cluster.log_start_offset(&w.tp), Some(3));
    assert_eq!(w.values(), vec!["a3", "a4"]);
    crate::marks::assert_hit(&[
        "kafka:delete-records-moved-log-start",
        "kafka:follower-restarted-at-leader-log-start",
    ]);
}

/// CreatePartitions (KIP-195): "t" grows from 1 to 3 partitions laid out as a new topic's,
/// with its replication factor, the existing partition and its records untouched; the new
/// ones take acks=all writes at once and show in Metadata. Not an increase is
/// INVALID_PARTITIONS, an unknown topic UNKNOWN_TOPIC_OR_PARTITION, and fewer unfenced
/// brokers than replicas per partition INVALID_REPLICATION_FACTOR, each changing nothing.
#[test]
fn create_partitions_adds_empty_replicated_partitions_and_refuses_what_kafka_refuses() {
    let mut w = World::new(3, 2, TopicConfig::default());
    w.produce_all("before");
    assert_eq!(w.cluster.create_partitions(w.now, "t", 3), Ok((1, 3)));
    assert_eq!(w.cluster.partition_count("t"), Some(3));
    let brokers = [1, 2, 3];
    for (p, expected) in super::model::assign_replicas(&brokers, 3, 2)
        .into_iter()
        .enumerate()
    {
        let tp = TopicPartition::new("t", p as u32);
        assert_eq!(w.cluster.replicas(&tp), expected, "{tp}");
    }
    assert_eq!(w.values(), vec!["before"], "partition 0 keeps its log");
    w.tp = TopicPartition::new("t", 2);
    assert!(
        matches!(w.produce_all("added"), Response::Produce { .. }),
        "the new partition takes acks=all writes"
    );
    assert_eq!(w.values(), vec!["added"]);
    let Reply::Done(Response::Metadata { topics, .. }) =
        w.cluster
            .handle(w.now, 3, Request::Metadata { topics: None })
    else {
        panic!("metadata")
    };
    assert_eq!(topics["t"].len(), 3);
    assert_eq!(
        w.cluster.create_partitions(w.now, "t", 3),
        Err(KafkaError::InvalidPartitions),
        "already 3"
    );
    assert_eq!(
        w.cluster.create_partitions(w.now, "t", 2),
        Err(KafkaError::InvalidPartitions),
        "not an increase"
    );
    assert_eq!(
        w.cluster.create_partitions(w.now, "nope", 4),
        Err(KafkaError::UnknownTopicOrPartition)
    );
    w.crash(2, CrashMode::ProcessKill);
    w.crash(3, CrashMode::ProcessKill);
    w.tick_for(30_000);
    assert_eq!(
        w.cluster.create_partitions(w.now, "t", 4),
        Err(KafkaError::InvalidReplicationFactor),
        "one unfenced broker, two replicas per partition"
    );
    assert_eq!(w.cluster.partition_count("t"), Some(3));
}

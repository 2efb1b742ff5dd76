//! Tests of the idempotent producer and transactions: one per line of models-reference
//! checklists B and C that applies (named after it), cases.md F8 and F10 under each
//! protocol version, and property tests against a reference model (`txn_tests/property.rs`).

use super::model::{Cluster, CrashMode, Env, Reply};
use super::txn::TxnState;
use super::types::*;
use bytes::Bytes;
use std::collections::BTreeSet;

mod checklist;
mod property;
mod protocol;

/// Every broker up unless listed; links cut both ways.
#[derive(Debug, Default, Clone)]
pub(super) struct TestEnv {
    pub down: BTreeSet<BrokerId>,
    pub cut: BTreeSet<(BrokerId, BrokerId)>,
    pub no_controller: BTreeSet<BrokerId>,
}

impl Env for TestEnv {
    fn broker_up(&self, b: BrokerId) -> bool {
        !self.down.contains(&b)
    }
    fn link_up(&self, from: BrokerId, to: BrokerId) -> bool {
        !self.cut.contains(&(from.min(to), from.max(to)))
    }
    fn controller_link_up(&self, b: BrokerId) -> bool {
        !self.down.contains(&b) && !self.no_controller.contains(&b)
    }
}

pub(super) const TICK_MS: u64 = 10;
/// Bound on every wait-for-convergence loop of these tests, in simulated ms.
pub(super) const WAIT_MS_MAX: u64 = 60_000;

/// A 3-broker cluster with topic "t" (2 partitions, replication factor 3), its
/// environment and the clock.
pub(super) struct World {
    pub cluster: Cluster,
    pub env: TestEnv,
    pub now: TimeMs,
}

pub(super) fn tp(p: u32) -> TopicPartition {
    TopicPartition::new("t", p)
}

pub(super) fn record(value: &str, timestamp_ms: i64) -> Record {
    Record {
        key: None,
        value: Some(Bytes::from(value.to_string())),
        headers: Vec::new(),
        timestamp_ms,
    }
}

pub(super) fn header(pid: i64, epoch: i16, seq: i32, transactional: bool) -> ProducerBatchHeader {
    ProducerBatchHeader {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        transactional,
    }
}

impl World {
    pub fn with(config: ClusterConfig) -> Self {
        let config = ClusterConfig {
            offsets_topic_num_partitions: 3,
            transaction_state_log_num_partitions: 3,
            group_initial_rebalance_delay_ms: 0,
            ..config
        };
        let mut cluster = Cluster::new(3, config);
        let create = Request::CreateTopic {
            name: "t".into(),
            partitions: 2,
            replication_factor: 3,
            config: TopicConfig {
                min_insync_replicas: 2,
                ..TopicConfig::default()
            },
        };
        assert_eq!(
            cluster.handle(0, 1, create),
            Reply::Done(Response::CreateTopic)
        );
        Self {
            cluster,
            env: TestEnv::default(),
            now: 0,
        }
    }

    pub fn new(protocol: TxnProtocol) -> Self {
        Self::with(ClusterConfig {
            transaction_protocol: protocol,
            ..ClusterConfig::default()
        })
    }

    pub fn tick_for(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += TICK_MS;
            self.cluster.tick(self.now, &self.env);
        }
    }

    /// Sends `request` to `broker`, polling a parked answer while ticking.
    pub fn send_to(&mut self, broker: BrokerId, request: Request) -> Response {
        match self.cluster.handle(self.now, broker, request) {
            Reply::Done(r) => r,
            Reply::Parked(token) => {
                let end = self.now + WAIT_MS_MAX;
                loop {
                    if let Some(r) = self.cluster.poll_parked(self.now, &token) {
                        return r;
                    }
                    assert!(
                        self.now < end,
                        "parked request not answered after {WAIT_MS_MAX} ms"
                    );
                    self.tick_for(TICK_MS);
                }
            }
        }
    }

    pub fn txn_coordinator(&self, tid: &str) -> BrokerId {
        self.cluster
            .coordinator_for(tid, CoordinatorKind::Transaction)
            .expect("coordinator online")
    }

    pub fn group_coordinator(&self, group: &str) -> BrokerId {
        self.cluster
            .coordinator_for(group, CoordinatorKind::Group)
            .expect("coordinator online")
    }

    /// A transactional request to the id's coordinator.
    pub fn txn(&mut self, tid: &str, request: Request) -> Response {
        let b = self.txn_coordinator(tid);
        self.send_to(b, request)
    }

    /// InitProducerId for `tid`, retried while CONCURRENT_TRANSACTIONS.
    pub fn init(&mut self, tid: &str) -> (i64, i16) {
        let end = self.now + WAIT_MS_MAX;
        loop {
            let req = Request::InitProducerId {
                transactional_id: Some(tid.into()),
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
            };
            match self.txn(tid, req) {
                Response::InitProducerId {
                    producer_id,
                    producer_epoch,
                } => return (producer_id, producer_epoch),
                Response::Error(KafkaError::ConcurrentTransactions) => self.tick_for(100),
                other => panic!("InitProducerId: {other:?}"),
            }
            assert!(self.now < end, "InitProducerId never succeeded");
        }
    }

    pub fn add(&mut self, tid: &str, (pid, epoch): (i64, i16), tps: &[TopicPartition]) -> Response {
        let req = Request::AddPartitionsToTxn {
            transactional_id: tid.into(),
            producer_id: pid,
            producer_epoch: epoch,
            partitions: tps.to_vec(),
        };
        self.txn(tid, req)
    }

    pub fn end(&mut self, tid: &str, (pid, epoch): (i64, i16), commit: bool) -> Response {
        let req = Request::EndTxn {
            transactional_id: tid.into(),
            producer_id: pid,
            producer_epoch: epoch,
            commit,
        };
        self.txn(tid, req)
    }

    /// Produces one batch with acks=all to the partition's leader.
    pub fn produce(
        &mut self,
        tp: &TopicPartition,
        header: ProducerBatchHeader,
        values: &[&str],
    ) -> Response {
        self.produce_stamped(tp, header, values, self.now as i64)
    }

    /// As [`World::produce`], with the records stamped `timestamp_ms` (a client's wall
    /// clock, which may be off).
    pub fn produce_stamped(
        &mut self,
        tp: &TopicPartition,
        header: ProducerBatchHeader,
        values: &[&str],
        timestamp_ms: i64,
    ) -> Response {
        let leader = self.cluster.leader(tp).expect("partition online");
        let records = values.iter().map(|v| record(v, timestamp_ms)).collect();
        let req = Request::Produce {
            tp: tp.clone(),
            acks: Acks::All,
            timeout_ms: 30_000,
            header,
            records,
        };
        self.send_to(leader, req)
    }

    /// Ticks until no transaction is in Prepare* (markers written and acknowledged).
    pub fn settle(&mut self) {
        let end = self.now + WAIT_MS_MAX;
        while self
            .cluster
            .transactions()
            .txns()
            .values()
            .any(|m| m.state.is_prepare())
        {
            assert!(self.now < end, "markers not written after {WAIT_MS_MAX} ms");
            self.tick_for(TICK_MS);
        }
        self.tick_for(100);
    }

    pub fn state(&self, tid: &str) -> TxnState {
        self.cluster
            .transactions()
            .txn(tid)
            .expect("known id")
            .state
    }

    /// Everything a read_committed consumer gets from `tp` starting at 0, filtered exactly
    /// with the aborted list (`first_offset <= offset < last_offset`).
    pub fn read_committed(&mut self, tp: &TopicPartition) -> Vec<String> {
        self.read(tp, Isolation::ReadCommitted)
    }

    pub fn read(&mut self, tp: &TopicPartition, isolation: Isolation) -> Vec<String> {
        let leader = self.cluster.leader(tp).expect("partition online");
        let req = Request::Fetch {
            isolation,
            partitions: vec![(tp.clone(), 0)],
            max_bytes: u32::MAX,
            partition_max_bytes: u32::MAX,
            min_bytes: 1,
            max_wait_ms: 0,
            current_leader_epochs: Vec::new(),
        };
        let Response::Fetch { partitions } = self.send_to(leader, req) else {
            panic!("fetch failed")
        };
        let (_, fp) = &partitions[0];
        assert!(fp.error.is_none(), "fetch error {:?}", fp.error);
        fp.records
            .iter()
            .filter(|r| {
                !r.transactional
                    || !fp.aborted.iter().any(|a| {
                        a.producer_id == r.producer_id
                            && a.first_offset <= r.offset
                            && r.offset < a.last_offset
                    })
            })
            .map(|r| {
                String::from_utf8(r.record.value.clone().unwrap_or_default().to_vec()).unwrap()
            })
            .collect()
    }

    pub fn lso(&self, tp: &TopicPartition) -> Offset {
        self.cluster.last_stable_offset(tp).expect("online")
    }

    pub fn hw(&self, tp: &TopicPartition) -> Offset {
        self.cluster.high_watermark(tp).expect("online")
    }

    /// Kills broker `b` (process kill) and ticks until the controller moved its leaderships.
    pub fn kill(&mut self, b: BrokerId) {
        self.cluster
            .crash_broker(self.now, b, CrashMode::ProcessKill);
        self.env.down.insert(b);
        self.tick_for(10_000);
    }

    pub fn restart(&mut self, b: BrokerId) {
        self.env.down.remove(&b);
        self.cluster.restart_broker(self.now, b);
        self.tick_for(2_000);
    }
}

/// The produced base offset, panicking on an error.
pub(super) fn offset(r: &Response) -> Offset {
    match r {
        Response::Produce { base_offset, .. } => *base_offset,
        other => panic!("expected a produce answer, got {other:?}"),
    }
}

pub(super) fn err(r: &Response) -> KafkaError {
    match r {
        Response::Error(e) => *e,
        other => panic!("expected an error, got {other:?}"),
    }
}

//! Property tests of the producer state machine and the transaction coordinator against
//! simple reference models (issue 3, deliverable 6).
//!
//! 1. Producer state: a client sends new batches in sequence and retries any of its last
//!    five at random, under epoch bumps; the reference says each batch is in the log
//!    exactly once, in send order, every retry is answered with the original offset, and
//!    a batch with an older epoch is refused with `INVALID_PRODUCER_EPOCH`.
//! 2. Coordinator: random init / add / produce / delayed produce of an earlier epoch /
//!    end / tick / broker kill and restart for two transactional ids. The reference is a
//!    client-side record of every transaction instance, its acknowledged records and its
//!    outcome. After each step: epochs per id never decrease, LSO ≤ HW, and (with KIP-890)
//!    every open transaction on a partition belongs to its producer's current transaction
//!    at the coordinator. At the end (everything healed, timeouts passed, markers written):
//!    read_committed returns every acknowledged record of every committed transaction,
//!    nothing of an aborted one, and LSO = HW.

use super::*;
use crate::kafka::log::PartitionLog;
use crate::kafka::producer_state::Validation;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

// ------------------------------------------------------------- 1. producer state machine

#[derive(Debug, Clone)]
enum PsOp {
    /// A new batch of `count` records.
    New { count: usize },
    /// A retry of the `back`-th most recent batch of the current epoch.
    Retry { back: usize },
    /// The producer bumps its epoch (KIP-360) and restarts sequences at 0.
    Bump,
    /// A batch with an older epoch (a zombie).
    Stale,
}

fn ps_op() -> impl Strategy<Value = PsOp> {
    prop_oneof![
        5 => (1usize..4).prop_map(|count| PsOp::New { count }),
        3 => (0usize..7).prop_map(|back| PsOp::Retry { back }),
        1 => Just(PsOp::Bump),
        1 => Just(PsOp::Stale),
    ]
}

/// Validates and (if valid) appends like the leader does; returns the answer.
fn ps_send(
    log: &mut PartitionLog,
    h: ProducerBatchHeader,
    count: usize,
) -> Result<Offset, KafkaError> {
    match log.producer_state().validate(&h, count)? {
        Validation::Duplicate { first_offset, .. } => Ok(first_offset),
        Validation::Append => {
            let records = (0..count)
                .map(|i| record(&format!("{}-{i}", h.base_sequence), 0))
                .collect();
            Ok(log.append_as_leader(0, h, false, Arc::new(records)).0)
        }
    }
}

fn run_producer_state(ops: Vec<PsOp>) {
    let pid = 7;
    let mut log = PartitionLog::new();
    let (mut epoch, mut next_seq) = (0i16, 0i32);
    // Latest epoch the partition has seen in an appended batch.
    let mut log_epoch = 0i16;
    // Batches of the current epoch: (first seq, count, offset once known).
    let mut sent: Vec<(i32, usize, Offset)> = Vec::new();
    let mut expected_log: Vec<(i16, i32, usize)> = Vec::new();
    for op in ops {
        match op {
            PsOp::New { count } => {
                let at = ps_send(&mut log, header(pid, epoch, next_seq, false), count);
                let at = at.expect("an in-sequence batch is accepted");
                sent.push((next_seq, count, at));
                log_epoch = epoch;
                expected_log.push((epoch, next_seq, count));
                next_seq += count as i32;
            }
            PsOp::Retry { back } if back < sent.len() => {
                let (seq, count, at) = sent[sent.len() - 1 - back];
                let answer = ps_send(&mut log, header(pid, epoch, seq, false), count);
                if back < NUM_RETAINED {
                    assert_eq!(
                        answer,
                        Ok(at),
                        "a retry of a retained batch gets its offset"
                    );
                } else {
                    assert_eq!(answer, Err(KafkaError::OutOfOrderSequenceNumber));
                }
            }
            PsOp::Retry { .. } => {}
            PsOp::Bump => {
                epoch += 1;
                next_seq = 0;
                sent.clear();
            }
            PsOp::Stale if log_epoch > 0 => {
                let answer = ps_send(&mut log, header(pid, log_epoch - 1, 0, false), 1);
                assert_eq!(answer, Err(KafkaError::InvalidProducerEpoch));
            }
            PsOp::Stale => {}
        }
    }
    let actual: Vec<(i16, i32, usize)> = log
        .batches()
        .iter()
        .map(|b| {
            (
                b.header.producer_epoch,
                b.header.base_sequence,
                b.records.len(),
            )
        })
        .collect();
    assert_eq!(actual, expected_log, "each batch exactly once, in order");
}

const NUM_RETAINED: usize = crate::kafka::producer_state::NUM_BATCHES_TO_RETAIN;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn producer_state_appends_each_batch_once_and_answers_retries_with_the_original_offset(
        ops in proptest::collection::vec(ps_op(), 1..60)
    ) {
        run_producer_state(ops);
    }
}

// ------------------------------------------------------------------- 2. the coordinator

#[derive(Debug, Clone)]
enum Op {
    Init(usize),
    Add(usize, u32),
    Produce(usize, u32),
    /// A produce of the latest earlier-epoch instance, delivered late.
    Stale(usize, u32),
    End(usize, bool),
    Tick(u64),
    Kill(BrokerId),
    Restart(BrokerId),
    /// Cuts broker `b` off from the other brokers and the controller.
    Isolate(BrokerId),
    Heal,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0usize..2).prop_map(Op::Init),
        3 => (0usize..2, 0u32..2).prop_map(|(t, p)| Op::Add(t, p)),
        8 => (0usize..2, 0u32..2).prop_map(|(t, p)| Op::Produce(t, p)),
        1 => (0usize..2, 0u32..2).prop_map(|(t, p)| Op::Stale(t, p)),
        3 => (0usize..2, any::<bool>()).prop_map(|(t, c)| Op::End(t, c)),
        2 => (1u64..12_000).prop_map(Op::Tick),
        1 => (1u32..4).prop_map(Op::Kill),
        1 => (1u32..4).prop_map(Op::Restart),
        1 => (1u32..4).prop_map(Op::Isolate),
        1 => Just(Op::Heal),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Open,
    Commit,
    Abort,
}

/// One transaction as the client ran it.
#[derive(Debug)]
struct Instance {
    ids: (i64, i16),
    outcome: Outcome,
    acked: Vec<(u32, String)>,
    unknown: Vec<(u32, String)>,
}

/// The client side of one transactional id, and the reference record.
#[derive(Debug, Default)]
struct Client {
    ids: Option<(i64, i16)>,
    open: Option<usize>,
    added: BTreeSet<u32>,
    broken: bool,
}

struct Run {
    w: World,
    clients: Vec<Client>,
    instances: Vec<Instance>,
    seq: BTreeMap<(i64, i16, u32), i32>,
    next_value: u64,
    last_ids: BTreeMap<String, (i64, i16)>,
}

fn tid(t: usize) -> String {
    format!("tx{t}")
}

impl Run {
    fn send_txn(&mut self, t: usize, request: Request) -> Response {
        match self
            .w
            .cluster
            .coordinator_for(&tid(t), CoordinatorKind::Transaction)
        {
            Some(b) => self.w.send_to(b, request),
            None => Response::Error(KafkaError::CoordinatorNotAvailable),
        }
    }

    fn close(&mut self, t: usize, outcome: Outcome) {
        if let Some(i) = self.clients[t].open.take() {
            if self.instances[i].outcome == Outcome::Open {
                self.instances[i].outcome = outcome;
            }
        }
        self.clients[t].added.clear();
    }

    fn init(&mut self, t: usize) {
        let req = Request::InitProducerId {
            transactional_id: Some(tid(t)),
            transaction_timeout_ms: 10_000,
            producer_id: -1,
            producer_epoch: -1,
        };
        match self.send_txn(t, req) {
            Response::InitProducerId {
                producer_id,
                producer_epoch,
            } => {
                self.close(t, Outcome::Abort);
                self.clients[t].ids = Some((producer_id, producer_epoch));
                self.clients[t].broken = false;
            }
            Response::Error(KafkaError::ConcurrentTransactions) => {
                // Either markers are pending or this init fenced the open transaction.
                self.close(t, Outcome::Abort);
                self.clients[t].broken = true;
            }
            _ => {}
        }
    }

    fn add(&mut self, t: usize, p: u32) {
        if self.clients[t].ids.is_none() || self.clients[t].broken {
            // A producer with no usable id initialises first (as rdkafka's would).
            self.init(t);
        }
        let c = &self.clients[t];
        let Some(ids) = c.ids.filter(|_| !c.broken) else {
            return;
        };
        if c.open.is_none() {
            let inst = Instance {
                ids,
                outcome: Outcome::Open,
                acked: vec![],
                unknown: vec![],
            };
            self.instances.push(inst);
            self.clients[t].open = Some(self.instances.len() - 1);
        }
        let req = Request::AddPartitionsToTxn {
            transactional_id: tid(t),
            producer_id: ids.0,
            producer_epoch: ids.1,
            partitions: vec![tp(p)],
        };
        match self.send_txn(t, req) {
            Response::AddPartitionsToTxn { .. } => {
                self.clients[t].added.insert(p);
            }
            Response::Error(KafkaError::ProducerFenced) => {
                self.close(t, Outcome::Abort);
                self.clients[t].broken = true;
            }
            _ => {}
        }
    }

    /// Produces one record for instance `i` to partition `p`.
    fn produce_for(&mut self, i: usize, p: u32) -> bool {
        let ids = self.instances[i].ids;
        let seq = self.seq.entry((ids.0, ids.1, p)).or_insert(0);
        let h = header(ids.0, ids.1, *seq, true);
        *seq += 1;
        self.next_value += 1;
        let value = format!("v{}", self.next_value);
        let leader = self.w.cluster.leader(&tp(p));
        let answer = match leader {
            Some(b) if self.w.cluster.broker_alive(b) => {
                let records = vec![record(&value, self.w.now as i64)];
                let req = Request::Produce {
                    tp: tp(p),
                    acks: Acks::All,
                    timeout_ms: 5_000,
                    header: h,
                    records,
                };
                self.w.send_to(b, req)
            }
            _ => Response::Error(KafkaError::NotLeaderOrFollower),
        };
        let ok = matches!(answer, Response::Produce { .. });
        let list = if ok {
            &mut self.instances[i].acked
        } else {
            &mut self.instances[i].unknown
        };
        list.push((p, value));
        ok
    }

    fn produce(&mut self, t: usize, p: u32) {
        if !self.clients[t].added.contains(&p) {
            self.add(t, p);
        }
        let c = &self.clients[t];
        let Some(i) = c.open.filter(|_| !c.broken && c.added.contains(&p)) else {
            return;
        };
        if !self.produce_for(i, p) {
            self.clients[t].broken = true;
        }
    }

    fn stale(&mut self, t: usize, p: u32) {
        let Some(current) = self.clients[t].ids else {
            return;
        };
        let earlier = (0..self.instances.len())
            .rev()
            .find(|&i| self.instances[i].ids.0 == current.0 && self.instances[i].ids.1 < current.1);
        if let Some(i) = earlier {
            self.produce_for(i, p);
        }
    }

    fn end(&mut self, t: usize, commit: bool) {
        let c = &self.clients[t];
        let (Some(ids), Some(_)) = (c.ids, c.open) else {
            return;
        };
        let commit = commit && !c.broken;
        let req = Request::EndTxn {
            transactional_id: tid(t),
            producer_id: ids.0,
            producer_epoch: ids.1,
            commit,
        };
        match self.send_txn(t, req) {
            Response::EndTxn => self.close(
                t,
                if commit {
                    Outcome::Commit
                } else {
                    Outcome::Abort
                },
            ),
            Response::EndTxnV5 {
                producer_id,
                producer_epoch,
            } => {
                self.close(
                    t,
                    if commit {
                        Outcome::Commit
                    } else {
                        Outcome::Abort
                    },
                );
                self.clients[t].ids = Some((producer_id, producer_epoch));
            }
            Response::Error(KafkaError::ProducerFenced | KafkaError::InvalidProducerIdMapping) => {
                self.close(t, Outcome::Abort);
                self.clients[t].broken = true;
            }
            _ => {}
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Init(t) => self.init(t),
            Op::Add(t, p) => self.add(t, p),
            Op::Produce(t, p) => self.produce(t, p),
            Op::Stale(t, p) => self.stale(t, p),
            Op::End(t, c) => self.end(t, c),
            Op::Tick(ms) => self.w.tick_for(ms),
            Op::Kill(b) => {
                let alive = (1..=3).filter(|&x| self.w.cluster.broker_alive(x)).count();
                if self.w.cluster.broker_alive(b) && alive == 3 {
                    self.w
                        .cluster
                        .crash_broker(self.w.now, b, CrashMode::ProcessKill);
                    self.w.env.down.insert(b);
                }
            }
            Op::Restart(b) => {
                self.w.env.down.remove(&b);
                self.w.cluster.restart_broker(self.w.now, b);
            }
            Op::Isolate(b) => {
                if self.w.env.no_controller.is_empty() {
                    for o in (1..=3).filter(|&o| o != b) {
                        self.w.env.cut.insert((b.min(o), b.max(o)));
                    }
                    self.w.env.no_controller.insert(b);
                }
            }
            Op::Heal => {
                self.w.env.cut.clear();
                self.w.env.no_controller.clear();
            }
        }
    }

    /// Invariants that hold after every step.
    fn check_step(&mut self, verified: bool) {
        for (t, m) in self.w.cluster.transactions().txns() {
            let ids = (m.producer_id, m.producer_epoch);
            if let Some(last) = self.last_ids.insert(t.clone(), ids) {
                assert!(ids >= last, "epochs of {t} went back: {last:?} -> {ids:?}");
            }
        }
        for p in 0..2 {
            let (Some(hw), Some(lso)) = (
                self.w.cluster.high_watermark(&tp(p)),
                self.w.cluster.last_stable_offset(&tp(p)),
            ) else {
                continue;
            };
            assert!(lso <= hw, "LSO {lso} > HW {hw}");
            if verified {
                self.check_open_txns_belong_to_the_coordinator(p);
            }
        }
    }

    /// KIP-890: no partition holds a transaction its producer's coordinator does not know.
    fn check_open_txns_belong_to_the_coordinator(&self, p: u32) {
        let leader = self.w.cluster.leader(&tp(p)).expect("checked online");
        let state = self
            .w
            .cluster
            .producer_state(&tp(p), leader)
            .expect("replica");
        let txns = self.w.cluster.transactions();
        for pid in state.ongoing_txns().keys() {
            let m = txns
                .transactional_id_of(*pid)
                .and_then(|t| txns.txn(t))
                .expect("known producer");
            let open = matches!(
                m.state,
                TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
            );
            assert!(
                open && m.partitions.contains(&tp(p)),
                "hanging transaction of {pid} on t-{p}: {m:?}"
            );
        }
    }

    /// Heals everything, lets timeouts and markers finish, and compares read_committed
    /// with the reference.
    fn check_end(&mut self) {
        self.w.env.cut.clear();
        self.w.env.no_controller.clear();
        for b in 1..=3 {
            self.w.env.down.remove(&b);
            self.w.cluster.restart_broker(self.w.now, b);
        }
        self.w.tick_for(40_000);
        self.w.settle();
        for p in 0..2 {
            let seen: BTreeSet<String> = self.w.read_committed(&tp(p)).into_iter().collect();
            for inst in &self.instances {
                let acked = inst.acked.iter().filter(|(q, _)| *q == p).map(|(_, v)| v);
                let unknown = inst.unknown.iter().filter(|(q, _)| *q == p).map(|(_, v)| v);
                for v in acked.clone() {
                    let visible = seen.contains(v);
                    let want = inst.outcome == Outcome::Commit;
                    assert_eq!(visible, want, "{v} of {inst:?}");
                }
                if inst.outcome != Outcome::Commit {
                    assert!(
                        unknown.clone().all(|v| !seen.contains(v)),
                        "aborted record visible"
                    );
                }
            }
            assert_eq!(self.w.lso(&tp(p)), self.w.hw(&tp(p)), "LSO stuck on t-{p}");
        }
    }
}

fn run_coordinator(protocol: TxnProtocol, ops: Vec<Op>) {
    let mut run = Run {
        w: World::new(protocol),
        clients: vec![Client::default(), Client::default()],
        instances: Vec::new(),
        seq: BTreeMap::new(),
        next_value: 0,
        last_ids: BTreeMap::new(),
    };
    let verified = protocol >= TxnProtocol::Kip890Part1;
    for op in ops {
        run.step(op);
        run.check_step(verified);
    }
    if verified {
        run.check_end();
    }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn coordinator_with_kip_890_part_1_keeps_read_committed_exact(ops in ops()) {
        run_coordinator(TxnProtocol::Kip890Part1, ops);
    }

    #[test]
    fn coordinator_with_transaction_version_2_keeps_read_committed_exact(ops in ops()) {
        run_coordinator(TxnProtocol::Tv2, ops);
    }

    #[test]
    fn coordinator_before_kip_890_keeps_epochs_monotonic_and_lso_below_hw(ops in ops()) {
        run_coordinator(TxnProtocol::PreKip890, ops);
    }
}

//! Differential conformance of transactions: the same generated operations against real
//! Kafka (one broker, or three with replication factor 3 and `min.insync.replicas` 2;
//! librdkafka's transactional and idempotent producers through eosim's
//! real clients) and against the model (`eosim_sim::kafka::model::Cluster`, driven request
//! by request by [`ModelClient`], a client that speaks the protocol as librdkafka does:
//! InitProducerId, AddPartitionsToTxn before a partition's first record, idempotent
//! sequences per partition, AddOffsetsToTxn + TxnOffsetCommit, EndTxn).
//!
//! Operations, on a topic of [`PARTITIONS`] partitions, with one `transactional.id` per case:
//! - `Send`: a record to a partition inside the current instance's transaction (begun if
//!   none is open);
//! - `SendOffsets`: offsets of the group inside the transaction (generation -1, as Java's
//!   `new ConsumerGroupMetadata(groupId)`);
//! - `Commit` / `Abort`: the end of the open transaction (nothing when none is open);
//! - `Fence`: a new instance of the same `transactional.id` initializes, bumping the epoch
//!   and aborting what the old one left open; the old instance becomes the zombie;
//! - `ZombieSend`: the zombie sends a record (in its old transaction, or a new one);
//! - `IdempotentSend`: a record from a separate idempotent, non-transactional producer;
//! - `Read`: a fresh reader with `isolation.level` reads a partition from 0 to its end;
//! - `Committed`: the group's committed offsets;
//! - `Restart`: broker 1 is killed (SIGKILL) and started again: the coordinator reloads
//!   transactions and offsets from its logs, open transactions go on (one broker only);
//! - `Kill`: the broker a [`Target`] names (the leader of a partition, the transaction
//!   coordinator of the case's `transactional.id`, the group coordinator of its group),
//!   each world finding it itself, is killed (SIGKILL) and stays down; both worlds wait
//!   until the controller has fenced it and moved its leaderships (real: gone from the
//!   metadata, `real_cluster.rs`; model: `ModelWorld::wait_fenced`), then go on with two
//!   brokers, which still meet `min.insync.replicas` 2; `Revive`: it starts again, and
//!   both wait until every ISR is full (three brokers only).
//!
//! With three brokers every case is `ops, Kill, ops, Revive, ops` (one kill per case: a
//! JVM restart costs 10 to 20 s on two cores) and `Restart` is not generated.
//!
//! What is compared: the offset of every acknowledged send, the error class of every failed
//! call ([`TxnErrorClass`]: retriable, abortable, fatal), the records (offset, key, value) and
//! the end (LSO under read_committed, high watermark otherwise) of every read, and the
//! committed offsets. Control records take offsets in both worlds, so a marker the model
//! forgot or added shows as shifted offsets. Every case ends with both isolation levels
//! read on every partition.
//!
//! The agreement rate (cases agreeing / cases run) is printed; a difference fails the test
//! after shrinking, with both worlds' observations.
//!
//! Known, deliberate differences: none so far. Timing is not compared: after an `EndTxn`
//! or a fencing `InitProducerId` the real arm waits until the markers are written (LSO equal
//! to the high watermark on every partition) and the model ticks 500 ms. Nothing is sent
//! between a kill and the end of its failover: a request to a killed broker times out on
//! a real client (connection refused, then metadata refreshed) where the model answers
//! `REQUEST_TIMED_OUT` at once, and the two wait for the controller differently
//! (`broker.session.timeout.ms` 6 s in both, ticks against wall clock); what is compared
//! is what the failover left. Which broker a target names is not compared (Kafka's
//! controller places replicas from a random start, the model from broker 1), so one kill
//! may take other roles with it in one world and not in the other; the observations must
//! not depend on it. No transaction may time out within a case (`transaction.timeout.ms`
//! 60 s, see [`TXN_TIMEOUT_MS`]): the clocks of the two worlds are not comparable.

use super::real_cluster::RealCluster;
use super::real_support::model_world::{real_cluster_config, topic_config, ModelWorld};
use bytes::Bytes;
use eosim::client::real::{RealProducer, RealTransactionalProducer, RealTxnConfig};
use eosim::client::{
    Admin, ConsumerGroupMetadata, Producer, ProducerConfig, ProducerRecord, TransactionalProducer,
    TxnErrorClass,
};
use eosim_sim::kafka::{
    Acks, BrokerId, CoordinatorKind, Isolation, KafkaError, Offset, ProducerBatchHeader, Record,
    Request, Response, TopicPartition,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::Message as _;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Partitions of each case's topic.
pub const PARTITIONS: u32 = 2;
/// `transaction.timeout.ms` of both worlds' transactional producers: far beyond a case,
/// since the worlds' clocks drift apart across a kill (a real failover and JVM restart take
/// 10 to 20 s of wall clock, the model's a few simulated seconds), and a timed-out
/// transaction would be aborted in one world and not in the other. With 10 s the
/// three-broker suite found exactly that (a transaction open across the transaction
/// coordinator's kill aborted on real Kafka only, its corpus' second case).
const TXN_TIMEOUT_MS: u64 = 60_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT_MAX: Duration = Duration::from_secs(40);

/// One generated operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A record to `partition` in the current instance's transaction.
    Send { partition: u32 },
    /// The group's offset for `partition` at a quarter of its high watermark, in the
    /// transaction.
    SendOffsets { partition: u32, quarter: u8 },
    /// Commit the open transaction.
    Commit,
    /// Abort the open transaction.
    Abort,
    /// A new instance of the transactional id initializes; the old one is the zombie.
    Fence,
    /// The zombie sends a record to `partition`.
    ZombieSend { partition: u32 },
    /// A record to `partition` from the idempotent, non-transactional producer.
    IdempotentSend { partition: u32 },
    /// Read `partition` from 0 with read_committed (`committed`) or read_uncommitted.
    Read { partition: u32, committed: bool },
    /// The group's committed offsets.
    Committed,
    /// Broker 1 is killed (SIGKILL: its page cache survives) and started again.
    Restart,
    /// The broker `target` names is killed and stays down (three brokers).
    Kill { target: Target },
    /// The killed broker starts again (three brokers).
    Revive,
}

/// The broker a `Kill` takes down, found by each world in its own cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The leader of the case topic's `partition`.
    Leader { partition: u32 },
    /// The transaction coordinator of the case's `transactional.id`.
    TxnCoordinator,
    /// The group coordinator of the case's group.
    GroupCoordinator,
}

/// A record as read: (offset, key, value).
type ReadRecord = (Offset, Bytes, Bytes);

/// What one operation showed; equal in both worlds or the model is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// An operation that did nothing (an end with no transaction open, a zombie that does
    /// not exist).
    Skipped,
    /// A send: its offset, or the class of its error.
    Sent(Result<Offset, TxnErrorClass>),
    /// A call that returns nothing: commit, abort, send-offsets, init.
    Done(Result<(), TxnErrorClass>),
    /// Records read (offset, key, value) and the end read to.
    Read {
        records: Vec<ReadRecord>,
        end: Offset,
    },
    /// Committed offsets by partition (-1 where none).
    Committed(Vec<(u32, Offset)>),
    /// A broker was killed, with the current instance's transaction open or not.
    Killed { txn_open: bool },
}

/// One operation; `Restart` only when `restarts` (one broker).
fn op_strategy(restarts: bool) -> impl Strategy<Value = Op> {
    let partition = 0..PARTITIONS;
    let restart_weight = u32::from(restarts);
    prop_oneof![
        6 => partition.clone().prop_map(|partition| Op::Send { partition }),
        1 => (partition.clone(), 0u8..=4)
            .prop_map(|(partition, quarter)| Op::SendOffsets { partition, quarter }),
        2 => Just(Op::Commit),
        1 => Just(Op::Abort),
        1 => Just(Op::Fence),
        2 => partition.clone().prop_map(|partition| Op::ZombieSend { partition }),
        2 => partition.clone().prop_map(|partition| Op::IdempotentSend { partition }),
        2 => (partition, any::<bool>())
            .prop_map(|(partition, committed)| Op::Read { partition, committed }),
        1 => Just(Op::Committed),
        restart_weight => Just(Op::Restart),
    ]
}

fn target_strategy() -> impl Strategy<Value = Target> {
    prop_oneof![
        1 => (0..PARTITIONS).prop_map(|partition| Target::Leader { partition }),
        2 => Just(Target::TxnCoordinator),
        1 => Just(Target::GroupCoordinator),
    ]
}

/// A case's operations: up to 19 with one broker; with three, `ops, Kill, ops, Revive,
/// ops` (see the module docs), the kill preceded by a `Send` three times in four (a
/// transaction open across the failover).
fn sequence_strategy(brokers: u32) -> BoxedStrategy<Vec<Op>> {
    use proptest::collection::vec;
    if brokers == 1 {
        return vec(op_strategy(true), 1..20).boxed();
    }
    let open = prop_oneof![3 => (0..PARTITIONS).prop_map(Some), 1 => Just(None)];
    (
        vec(op_strategy(false), 0..8),
        open,
        target_strategy(),
        vec(op_strategy(false), 0..8),
        vec(op_strategy(false), 0..5),
    )
        .prop_map(|(before, open, target, down, after)| {
            let mut ops = before;
            ops.extend(open.map(|partition| Op::Send { partition }));
            ops.push(Op::Kill { target });
            ops.extend(down);
            ops.push(Op::Revive);
            ops.extend(after);
            ops
        })
        .boxed()
}

/// The operations of a case followed by a read of every partition at both isolation levels.
fn with_final_reads(ops: &[Op]) -> Vec<Op> {
    let mut all = ops.to_vec();
    for partition in 0..PARTITIONS {
        for committed in [true, false] {
            all.push(Op::Read {
                partition,
                committed,
            });
        }
    }
    all
}

fn value(i: usize) -> Bytes {
    Bytes::from(format!("op{i}"))
}

fn key(partition: u32) -> Bytes {
    Bytes::from(format!("k{partition}"))
}

/// What one (operation, observation) pair exercised, for the run's tally: the operation's
/// kind and whether it succeeded, failed (with the class) or did nothing.
fn exercised(op: &Op, observed: &Observation) -> String {
    let kind = format!("{op:?}");
    let kind = kind
        .split([' ', '{'])
        .next()
        .unwrap_or_default()
        .to_string();
    if let (Op::Kill { target }, Observation::Killed { txn_open }) = (op, observed) {
        let txn = if *txn_open { "open" } else { "none open" };
        return format!("Kill {target:?}, transaction {txn}");
    }
    let outcome = match observed {
        Observation::Skipped => "skipped".to_string(),
        Observation::Sent(Err(c)) | Observation::Done(Err(c)) => format!("{c:?}"),
        Observation::Read { records, .. } if records.is_empty() => "empty".to_string(),
        _ => "ok".to_string(),
    };
    format!("{kind} {outcome}")
}

/// The name of the suite on `brokers` brokers (its regression corpus is named after it).
pub fn suite(brokers: u32) -> &'static str {
    match brokers {
        1 => "Kafka transactions",
        _ => "Kafka transactions, 3 brokers",
    }
}

/// Runs `cases` generated sequences against the real `cluster` (one or three brokers) and a
/// model of as many brokers; returns (cases agreeing, cases run) and the tally of what the
/// agreeing cases exercised (see [`exercised`]). Panics on the first (shrunk) difference.
pub fn run(cluster: &RealCluster, cases: u32) -> (u32, u32, BTreeMap<String, u32>) {
    let brokers = cluster.brokers();
    let strategy = sequence_strategy(brokers);
    // Shrinking a three-broker case restarts a JVM per step: fewer steps there.
    let shrink = if brokers == 1 { 16 } else { 8 };
    super::real_support::run_differential(suite(brokers), cases, shrink, strategy, |n, ops| {
        let ops = with_final_reads(&ops);
        let real = RealArm::run(cluster, n, &ops);
        // A case that failed half-way must not leave the next one a broker short.
        cluster.revive().map_err(TestCaseError::fail)?;
        let real = real.map_err(TestCaseError::fail)?;
        let model = ModelArm::run(brokers, &ops);
        prop_assert_eq!(&real, &model, "ops: {:?}", ops);
        Ok(ops
            .iter()
            .zip(&model)
            .map(|(op, observed)| exercised(op, observed))
            .collect())
    })
}

// ------------------------------------------------------------------------------- model

/// How librdkafka classes a broker's answer to a transactional call
/// (`rdkafka_txnmgr.c`: `rd_kafka_txn_handle_AddPartitionsToTxn`, `_EndTxn`,
/// `_TxnOffsetCommit`; `rdkafka_idempotence.c` for a produce): fenced epochs are fatal,
/// coordinator moves and loads retriable, everything else abortable.
fn class_of(e: KafkaError) -> TxnErrorClass {
    match e {
        KafkaError::ProducerFenced
        | KafkaError::InvalidProducerEpoch
        | KafkaError::TransactionCoordinatorFenced
        | KafkaError::InvalidProducerIdMapping
        | KafkaError::InvalidTxnState => TxnErrorClass::Fatal,
        KafkaError::CoordinatorLoadInProgress
        | KafkaError::CoordinatorNotAvailable
        | KafkaError::NotCoordinator
        | KafkaError::RequestTimedOut => TxnErrorClass::Retriable,
        _ => TxnErrorClass::Abortable,
    }
}

/// Errors the client retries itself before answering the application (librdkafka retries
/// CONCURRENT_TRANSACTIONS and coordinator loads inside the call).
fn retried_inside(e: KafkaError) -> bool {
    matches!(
        e,
        KafkaError::ConcurrentTransactions
            | KafkaError::CoordinatorLoadInProgress
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::NotCoordinator
    )
}

/// One instance of the transactional id in the model: its producer id and epoch, the
/// open transaction's partitions, and the next sequence per partition.
#[derive(Debug)]
struct Instance {
    producer_id: i64,
    epoch: i16,
    open: bool,
    partitions: BTreeSet<u32>,
    offsets_added: bool,
    sequences: BTreeMap<u32, i32>,
    fatal: bool,
}

/// A protocol-level client of the model, as librdkafka sends the requests.
struct ModelClient<'a> {
    w: &'a mut ModelWorld,
    topic: &'a str,
    tid: &'a str,
    group: &'a str,
}

impl ModelClient<'_> {
    /// Sends `request` again after 100 ms while the answer is one librdkafka retries inside
    /// the call; gives up after 60 tries with the last answer.
    fn call_retrying(&mut self, request: &Request) -> Response {
        let mut response = self.w.call(request.clone());
        for _ in 0..60 {
            match response {
                Response::Error(e) if retried_inside(e) => {
                    self.w.advance(100);
                    response = self.w.call(request.clone());
                }
                _ => break,
            }
        }
        response
    }

    fn init(&mut self) -> Result<Instance, TxnErrorClass> {
        let request = Request::InitProducerId {
            transactional_id: Some(self.tid.into()),
            transaction_timeout_ms: TXN_TIMEOUT_MS,
            producer_id: -1,
            producer_epoch: -1,
        };
        match self.call_retrying(&request) {
            Response::InitProducerId {
                producer_id,
                producer_epoch,
            } => Ok(Instance {
                producer_id,
                epoch: producer_epoch,
                open: false,
                partitions: BTreeSet::new(),
                offsets_added: false,
                sequences: BTreeMap::new(),
                fatal: false,
            }),
            Response::Error(e) => Err(class_of(e)),
            other => panic!("model: InitProducerId answered {other:?}"),
        }
    }

    /// Marks `i` fatal when `class` is.
    fn fail(i: &mut Instance, class: TxnErrorClass) -> TxnErrorClass {
        if class == TxnErrorClass::Fatal {
            i.fatal = true;
        }
        class
    }

    fn send(
        &mut self,
        i: &mut Instance,
        partition: u32,
        value: Bytes,
    ) -> Result<Offset, TxnErrorClass> {
        if i.fatal {
            return Err(TxnErrorClass::Fatal);
        }
        i.open = true;
        let tp = TopicPartition::new(self.topic, partition);
        if !i.partitions.contains(&partition) {
            let request = Request::AddPartitionsToTxn {
                transactional_id: self.tid.into(),
                producer_id: i.producer_id,
                producer_epoch: i.epoch,
                partitions: vec![tp.clone()],
            };
            match self.call_retrying(&request) {
                Response::AddPartitionsToTxn { results } => {
                    if let Some(e) = results.into_iter().find_map(|(_, e)| e) {
                        return Err(Self::fail(i, class_of(e)));
                    }
                }
                Response::Error(e) => return Err(Self::fail(i, class_of(e))),
                other => panic!("model: AddPartitionsToTxn answered {other:?}"),
            }
            i.partitions.insert(partition);
        }
        let sequence = i.sequences.entry(partition).or_insert(0);
        let header = ProducerBatchHeader {
            producer_id: i.producer_id,
            producer_epoch: i.epoch,
            base_sequence: *sequence,
            transactional: true,
        };
        let now = self.w.now() as i64;
        let response = self.w.call(produce(tp, header, partition, value, now));
        match response {
            Response::Produce { base_offset, .. } => {
                *i.sequences.get_mut(&partition).expect("entry made above") += 1;
                Ok(base_offset)
            }
            Response::Error(e) => Err(Self::fail(i, class_of(e))),
            other => panic!("model: Produce answered {other:?}"),
        }
    }

    fn send_offsets(
        &mut self,
        i: &mut Instance,
        offsets: Vec<(TopicPartition, Offset)>,
    ) -> Result<(), TxnErrorClass> {
        if i.fatal {
            return Err(TxnErrorClass::Fatal);
        }
        i.open = true;
        if !i.offsets_added {
            let request = Request::AddOffsetsToTxn {
                transactional_id: self.tid.into(),
                producer_id: i.producer_id,
                producer_epoch: i.epoch,
                group_id: self.group.into(),
            };
            match self.call_retrying(&request) {
                Response::AddOffsetsToTxn => i.offsets_added = true,
                Response::Error(e) => return Err(Self::fail(i, class_of(e))),
                other => panic!("model: AddOffsetsToTxn answered {other:?}"),
            }
        }
        let request = Request::TxnOffsetCommit {
            transactional_id: self.tid.into(),
            group_id: self.group.into(),
            producer_id: i.producer_id,
            producer_epoch: i.epoch,
            generation: -1,
            member_id: String::new(),
            offsets,
        };
        match self.call_retrying(&request) {
            Response::TxnOffsetCommit { results } => {
                match results.into_iter().find_map(|(_, e)| e) {
                    Some(e) => Err(Self::fail(i, class_of(e))),
                    None => Ok(()),
                }
            }
            Response::Error(e) => Err(Self::fail(i, class_of(e))),
            other => panic!("model: TxnOffsetCommit answered {other:?}"),
        }
    }

    fn end(&mut self, i: &mut Instance, commit: bool) -> Result<(), TxnErrorClass> {
        if i.fatal {
            return Err(TxnErrorClass::Fatal);
        }
        let request = Request::EndTxn {
            transactional_id: self.tid.into(),
            producer_id: i.producer_id,
            producer_epoch: i.epoch,
            commit,
        };
        let result = match self.call_retrying(&request) {
            Response::EndTxn => Ok(()),
            Response::EndTxnV5 {
                producer_id,
                producer_epoch,
            } => {
                i.producer_id = producer_id;
                i.epoch = producer_epoch;
                i.sequences.clear();
                Ok(())
            }
            Response::Error(e) => Err(Self::fail(i, class_of(e))),
            other => panic!("model: EndTxn answered {other:?}"),
        };
        if result.is_ok() {
            i.open = false;
            i.partitions.clear();
            i.offsets_added = false;
        }
        self.w.advance(500);
        result
    }
}

/// The model's idempotent, non-transactional producer: id, epoch, next sequence per
/// partition.
type Idempotent = (i64, i16, BTreeMap<u32, i32>);

impl ModelClient<'_> {
    /// A record to `partition` from the idempotent producer (initialized at its first).
    fn idempotent_send(
        &mut self,
        idempotent: &mut Option<Idempotent>,
        partition: u32,
        value: Bytes,
    ) -> Observation {
        let (pid, epoch, sequences) = idempotent.get_or_insert_with(|| {
            match self.w.call(Request::InitProducerId {
                transactional_id: None,
                transaction_timeout_ms: TXN_TIMEOUT_MS,
                producer_id: -1,
                producer_epoch: -1,
            }) {
                Response::InitProducerId {
                    producer_id,
                    producer_epoch,
                } => (producer_id, producer_epoch, BTreeMap::new()),
                other => panic!("model: idempotent InitProducerId answered {other:?}"),
            }
        });
        let sequence = sequences.entry(partition).or_insert(0);
        let header = ProducerBatchHeader {
            producer_id: *pid,
            producer_epoch: *epoch,
            base_sequence: *sequence,
            transactional: false,
        };
        *sequence += 1;
        let tp = TopicPartition::new(self.topic, partition);
        let now = self.w.now() as i64;
        match self.w.call(produce(tp, header, partition, value, now)) {
            Response::Produce { base_offset, .. } => Observation::Sent(Ok(base_offset)),
            Response::Error(e) => Observation::Sent(Err(class_of(e))),
            other => panic!("model: idempotent Produce answered {other:?}"),
        }
    }

    /// The broker `target` names in the model.
    fn target(&self, target: Target) -> BrokerId {
        let c = self.w.cluster();
        let found = match target {
            Target::Leader { partition } => c.leader(&TopicPartition::new(self.topic, partition)),
            Target::TxnCoordinator => c.coordinator_for(self.tid, CoordinatorKind::Transaction),
            Target::GroupCoordinator => c.coordinator_for(self.group, CoordinatorKind::Group),
        };
        found.expect("model: every partition has a leader before a kill")
    }

    /// `Restart`, `Kill` (`down` is the broker it took; `txn_open` whether the current
    /// instance has a transaction open) and `Revive`.
    fn fault(&mut self, op: Op, down: &mut Option<BrokerId>, txn_open: bool) -> Observation {
        match op {
            Op::Restart => {
                self.w.restart(2_000);
                Observation::Skipped
            }
            Op::Kill { .. } if down.is_some() => Observation::Skipped,
            Op::Kill { target } => {
                let b = self.target(target);
                self.w.kill(b);
                self.w.wait_fenced(b);
                *down = Some(b);
                Observation::Killed { txn_open }
            }
            Op::Revive => match down.take() {
                None => Observation::Skipped,
                Some(b) => {
                    self.w.revive(b);
                    Observation::Done(Ok(()))
                }
            },
            other => unreachable!("not a fault: {other:?}"),
        }
    }
}

fn produce(
    tp: TopicPartition,
    header: ProducerBatchHeader,
    partition: u32,
    value: Bytes,
    now: i64,
) -> Request {
    Request::Produce {
        tp,
        acks: Acks::All,
        timeout_ms: 30_000,
        header,
        records: vec![Record {
            key: Some(key(partition)),
            value: Some(value),
            headers: Vec::new(),
            timestamp_ms: now,
        }],
    }
}

/// The model arm of one case.
struct ModelArm;

impl ModelArm {
    fn run(brokers: u32, ops: &[Op]) -> Vec<Observation> {
        let mut w = ModelWorld::with_brokers(brokers, real_cluster_config());
        let (topic, tid, group) = ("t", "tid", "g");
        let mut down: Option<BrokerId> = None;
        w.create_topic(topic, PARTITIONS);
        let mut idempotent: Option<Idempotent> = None;
        let mut c = ModelClient {
            w: &mut w,
            topic,
            tid,
            group,
        };
        let mut current = c.init().expect("model: the first InitProducerId succeeds");
        let mut zombie: Option<Instance> = None;
        let mut out = Vec::new();
        for (n, op) in ops.iter().enumerate() {
            let observed = match *op {
                Op::Send { partition } => {
                    Observation::Sent(c.send(&mut current, partition, value(n)))
                }
                Op::SendOffsets { partition, quarter } => {
                    let tp = TopicPartition::new(topic, partition);
                    let (_, hw) = c.w.read(&tp, 0, Isolation::ReadUncommitted);
                    let offset = hw * Offset::from(quarter) / 4;
                    Observation::Done(c.send_offsets(&mut current, vec![(tp, offset)]))
                }
                Op::Commit | Op::Abort if !current.open => Observation::Skipped,
                Op::Commit => Observation::Done(c.end(&mut current, true)),
                Op::Abort => Observation::Done(c.end(&mut current, false)),
                Op::Fence => match c.init() {
                    Ok(next) => {
                        c.w.advance(500);
                        zombie = Some(std::mem::replace(&mut current, next));
                        Observation::Done(Ok(()))
                    }
                    Err(class) => Observation::Done(Err(class)),
                },
                Op::ZombieSend { partition } => match zombie.as_mut() {
                    None => Observation::Skipped,
                    Some(z) => Observation::Sent(c.send(z, partition, value(n))),
                },
                Op::IdempotentSend { partition } => {
                    c.idempotent_send(&mut idempotent, partition, value(n))
                }
                Op::Read {
                    partition,
                    committed,
                } => {
                    let isolation = isolation(committed);
                    let (records, end) =
                        c.w.read(&TopicPartition::new(topic, partition), 0, isolation);
                    Observation::Read { records, end }
                }
                Op::Committed => Observation::Committed(c.w.committed(group, topic, PARTITIONS)),
                Op::Restart | Op::Kill { .. } | Op::Revive => c.fault(*op, &mut down, current.open),
            };
            out.push(observed);
        }
        out
    }
}

fn isolation(committed: bool) -> Isolation {
    if committed {
        Isolation::ReadCommitted
    } else {
        Isolation::ReadUncommitted
    }
}

// -------------------------------------------------------------------------------- real

/// Watermark readers: read_uncommitted (high watermark) and read_committed (LSO).
fn watermark_readers(bootstrap: &str) -> Result<[BaseConsumer; 2], String> {
    let reader = |level: &str| -> Result<BaseConsumer, String> {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("isolation.level", level)
            .create()
            .map_err(|e| e.to_string())
    };
    Ok([reader("read_uncommitted")?, reader("read_committed")?])
}

/// One real transactional producer instance and whether it has a transaction open.
struct RealInstance {
    producer: RealTransactionalProducer,
    open: bool,
}

/// Real Kafka through eosim's rdkafka clients: a topic, a transactional id and a group per
/// case.
struct RealArm {
    rt: tokio::runtime::Runtime,
    bootstrap: String,
    topic: String,
    tid: String,
    group: String,
    idempotent: Option<RealProducer>,
    /// Watermark readers: read_uncommitted (high watermark) and read_committed (LSO).
    watermarks: [BaseConsumer; 2],
}

impl RealArm {
    /// The broker `target` names in the real cluster.
    fn target(&self, cluster: &RealCluster, target: Target) -> Result<i32, String> {
        match target {
            Target::Leader { partition } => cluster.leader(&self.topic, partition),
            Target::TxnCoordinator => cluster.coordinator(&self.tid, CoordinatorKind::Transaction),
            Target::GroupCoordinator => cluster.coordinator(&self.group, CoordinatorKind::Group),
        }
    }

    /// `Restart`, `Kill` (`txn_open`: whether the current instance has a transaction open)
    /// and `Revive` in the real cluster.
    fn fault(
        &mut self,
        cluster: &RealCluster,
        op: Op,
        txn_open: bool,
    ) -> Result<Observation, String> {
        let observed = match op {
            Op::Restart => {
                cluster.restart(1)?;
                Observation::Skipped
            }
            Op::Kill { .. } if cluster.down().is_some() => return Ok(Observation::Skipped),
            Op::Kill { target } => {
                let b = self.target(cluster, target)?;
                cluster.kill(b)?;
                Observation::Killed { txn_open }
            }
            Op::Revive if cluster.down().is_none() => return Ok(Observation::Skipped),
            Op::Revive => {
                cluster.revive()?;
                Observation::Done(Ok(()))
            }
            other => unreachable!("not a fault: {other:?}"),
        };
        self.reachable()?;
        Ok(observed)
    }

    /// Every partition answers its watermarks again (after a restart or a failover).
    /// The watermark readers are made anew first: librdkafka's metadata requests of a
    /// client that knew the killed broker timed out for 20 s and more after a failover
    /// (seen here), where a new client bootstraps from a live broker at once.
    fn reachable(&mut self) -> Result<(), String> {
        self.watermarks = watermark_readers(&self.bootstrap)?;
        for partition in 0..PARTITIONS {
            self.wait_for(partition, |_, _| true)?;
        }
        Ok(())
    }

    fn run(cluster: &RealCluster, case: u32, ops: &[Op]) -> Result<Vec<Observation>, String> {
        let bootstrap = cluster.bootstrap();
        let rt = super::real_support::runtime();
        let topic = format!("txn-diff-{}-{case}", cluster.brokers());
        let admin =
            eosim::client::real::RealAdmin::new(bootstrap, WAIT_MAX).map_err(|e| e.to_string())?;
        let (replication_factor, config) = topic_config(cluster.brokers());
        rt.block_on(admin.create_topic(&topic, PARTITIONS, replication_factor, config))
            .map_err(|e| format!("create topic {topic}: {e}"))?;
        let watermarks = watermark_readers(bootstrap)?;
        let mut w = RealArm {
            rt,
            bootstrap: bootstrap.into(),
            tid: format!("tid-diff-{}-{case}", cluster.brokers()),
            group: format!("g-txn-diff-{}-{case}", cluster.brokers()),
            topic,
            idempotent: None,
            watermarks,
        };
        w.reachable()?;
        let mut current = w
            .instance()?
            .map_err(|c| format!("first init_transactions: {c:?}"))?;
        let mut zombie: Option<RealInstance> = None;
        let mut out = Vec::new();
        for (n, op) in ops.iter().enumerate() {
            let observed = match *op {
                Op::Send { partition } => Observation::Sent(w.send(&mut current, partition, n)),
                Op::SendOffsets { partition, quarter } => {
                    let (hw, _) = w.wait_for(partition, |_, _| true)?;
                    let offset = hw * Offset::from(quarter) / 4;
                    let tp = TopicPartition::new(&w.topic, partition);
                    Observation::Done(w.send_offsets(&mut current, vec![(tp, offset)]))
                }
                Op::Commit | Op::Abort if !current.open => Observation::Skipped,
                Op::Commit | Op::Abort => {
                    let result = w.end(&mut current, *op == Op::Commit);
                    w.settle()?;
                    Observation::Done(result)
                }
                Op::Fence => match w.instance()? {
                    Ok(next) => {
                        w.settle()?;
                        zombie = Some(std::mem::replace(&mut current, next));
                        Observation::Done(Ok(()))
                    }
                    Err(class) => Observation::Done(Err(class)),
                },
                Op::ZombieSend { partition } => match zombie.as_mut() {
                    None => Observation::Skipped,
                    Some(z) => Observation::Sent(w.send(z, partition, n)),
                },
                Op::IdempotentSend { partition } => {
                    Observation::Sent(w.idempotent_send(partition, n)?)
                }
                Op::Read {
                    partition,
                    committed,
                } => {
                    let (records, end) = w.read(partition, committed)?;
                    Observation::Read { records, end }
                }
                Op::Committed => Observation::Committed(w.committed()?),
                Op::Restart | Op::Kill { .. } | Op::Revive => {
                    w.fault(cluster, *op, current.open)?
                }
            };
            out.push(observed);
        }
        Ok(out)
    }

    /// A new instance of the case's transactional id, initialized (fencing the previous).
    fn instance(&self) -> Result<Result<RealInstance, TxnErrorClass>, String> {
        let mut config = RealTxnConfig::new(&self.tid);
        config.transaction_timeout_ms = TXN_TIMEOUT_MS;
        let producer =
            RealTransactionalProducer::new(&self.bootstrap, config).map_err(|e| e.to_string())?;
        Ok(self
            .rt
            .block_on(producer.init_transactions(CALL_TIMEOUT))
            .map(|()| RealInstance {
                producer,
                open: false,
            })
            .map_err(|e| e.class))
    }

    fn record(&self, partition: u32, n: usize) -> ProducerRecord {
        ProducerRecord {
            topic: self.topic.clone(),
            partition: Some(partition),
            key: Some(key(partition)),
            value: Some(value(n)),
            headers: Vec::new(),
        }
    }

    fn begin(i: &mut RealInstance) -> Result<(), TxnErrorClass> {
        if !i.open {
            i.producer.begin_transaction().map_err(|e| e.class)?;
            i.open = true;
        }
        Ok(())
    }

    fn send(
        &self,
        i: &mut RealInstance,
        partition: u32,
        n: usize,
    ) -> Result<Offset, TxnErrorClass> {
        Self::begin(i)?;
        self.rt
            .block_on(i.producer.send(self.record(partition, n)))
            .map(|d| d.offset)
            .map_err(|e| e.class)
    }

    fn send_offsets(
        &self,
        i: &mut RealInstance,
        offsets: Vec<(TopicPartition, Offset)>,
    ) -> Result<(), TxnErrorClass> {
        Self::begin(i)?;
        let group = ConsumerGroupMetadata {
            group_id: self.group.clone(),
            generation: -1,
            member_id: String::new(),
        };
        self.rt
            .block_on(
                i.producer
                    .send_offsets_to_transaction(&offsets, &group, CALL_TIMEOUT),
            )
            .map_err(|e| e.class)
    }

    fn end(&self, i: &mut RealInstance, commit: bool) -> Result<(), TxnErrorClass> {
        let result = if commit {
            self.rt
                .block_on(i.producer.commit_transaction(CALL_TIMEOUT))
        } else {
            self.rt.block_on(i.producer.abort_transaction(CALL_TIMEOUT))
        };
        if result.is_ok() {
            i.open = false;
        }
        result.map_err(|e| e.class)
    }

    fn idempotent_send(
        &mut self,
        partition: u32,
        n: usize,
    ) -> Result<Result<Offset, TxnErrorClass>, String> {
        if self.idempotent.is_none() {
            let config = ProducerConfig {
                acks: Acks::All,
                enable_idempotence: true,
                ..ProducerConfig::default()
            };
            self.idempotent =
                Some(RealProducer::new(&self.bootstrap, config).map_err(|e| e.to_string())?);
        }
        let producer = self.idempotent.as_ref().expect("made above");
        let record = self.record(partition, n);
        match self.rt.block_on(producer.send(record)) {
            Ok(d) => Ok(Ok(d.offset)),
            Err(e) => Err(format!("idempotent send: {e}")),
        }
    }

    /// (high watermark, LSO) of `partition`.
    fn watermarks(&self, partition: u32) -> Result<(Offset, Offset), String> {
        let timeout = Duration::from_secs(5);
        let mut ends = [0; 2];
        for (end, reader) in ends.iter_mut().zip(&self.watermarks) {
            let (_, high) = reader
                .fetch_watermarks(&self.topic, partition as i32, timeout)
                .map_err(|e| format!("{}-{partition}: watermarks: {e}", self.topic))?;
            *end = high;
        }
        Ok((ends[0], ends[1]))
    }

    /// Waits until `ok(high watermark, LSO)` holds for `partition`, errors retried (a new
    /// topic's leader may not be known yet).
    fn wait_for(
        &self,
        partition: u32,
        ok: impl Fn(Offset, Offset) -> bool,
    ) -> Result<(Offset, Offset), String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < WAIT_MAX {
            match self.watermarks(partition) {
                Ok((hw, lso)) if ok(hw, lso) => return Ok((hw, lso)),
                Ok((hw, lso)) => last = format!("high watermark {hw}, LSO {lso}"),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "{}-{partition}: {last} after {WAIT_MAX:?}",
            self.topic
        ))
    }

    /// Waits until every partition's markers are written: LSO equal to the high watermark.
    fn settle(&self) -> Result<(), String> {
        for partition in 0..PARTITIONS {
            self.wait_for(partition, |hw, lso| hw == lso)?;
        }
        Ok(())
    }

    /// A fresh reader of `partition` from 0 with the isolation level, to the end its
    /// watermark reader gives, stopping when the position reaches it.
    fn read(&self, partition: u32, committed: bool) -> Result<(Vec<ReadRecord>, Offset), String> {
        let (hw, lso) = self.wait_for(partition, |_, _| true)?;
        let end = if committed { lso } else { hw };
        let level = if committed {
            "read_committed"
        } else {
            "read_uncommitted"
        };
        let reader: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", format!("{}-reader", self.group))
            .set("enable.auto.commit", "false")
            .set("isolation.level", level)
            .set("fetch.wait.max.ms", "50")
            .create()
            .map_err(|e| e.to_string())?;
        let mut assignment = rdkafka::TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition as i32, rdkafka::Offset::Beginning)
            .map_err(|e| e.to_string())?;
        reader.assign(&assignment).map_err(|e| e.to_string())?;
        let mut records = Vec::new();
        let started = Instant::now();
        let position = |reader: &BaseConsumer| -> Offset {
            let Ok(tpl) = reader.position() else {
                return -1;
            };
            tpl.find_partition(&self.topic, partition as i32)
                .and_then(|p| p.offset().to_raw())
                .unwrap_or(-1)
        };
        while end > 0 && position(&reader) < end {
            if started.elapsed() > WAIT_MAX {
                return Err(format!(
                    "{}-{partition} ({level}): position {} short of {end} after {WAIT_MAX:?}",
                    self.topic,
                    position(&reader)
                ));
            }
            if let Some(m) = reader.poll(Duration::from_millis(100)) {
                let m = m.map_err(|e| format!("{}-{partition}: read: {e}", self.topic))?;
                records.push((
                    m.offset(),
                    Bytes::copy_from_slice(m.key().unwrap_or_default()),
                    Bytes::copy_from_slice(m.payload().unwrap_or_default()),
                ));
            }
        }
        records.retain(|(offset, _, _)| *offset < end);
        Ok((records, end))
    }

    fn committed(&self) -> Result<Vec<(u32, Offset)>, String> {
        let reader: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", &self.group)
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(|e| e.to_string())?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        for partition in 0..PARTITIONS {
            tpl.add_partition(&self.topic, partition as i32);
        }
        // A new group's coordinator may still be loading: librdkafka hands back
        // NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; retried to the bound.
        let started = Instant::now();
        let committed = loop {
            match reader.committed_offsets(tpl.clone(), Duration::from_secs(10)) {
                Ok(committed) => break committed,
                Err(e) if started.elapsed() < WAIT_MAX => {
                    eprintln!("committed offsets: {e}; retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("committed offsets: {e} after {WAIT_MAX:?}")),
            }
        };
        Ok((0..PARTITIONS)
            .map(|p| {
                let offset = committed
                    .find_partition(&self.topic, p as i32)
                    .and_then(|e| e.offset().to_raw())
                    .filter(|o| *o >= 0)
                    .unwrap_or(-1);
                (p, offset)
            })
            .collect())
    }
}

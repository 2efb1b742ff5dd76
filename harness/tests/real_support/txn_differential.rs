//! Differential conformance of transactions: the same generated operations against real
//! Kafka (one broker, librdkafka's transactional and idempotent producers through eosim's
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
//! - `Restart`: the broker is killed (SIGKILL) and started again: the coordinator reloads
//!   transactions and offsets from its logs, open transactions go on.
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
//! to the high watermark on every partition) and the model ticks 500 ms.

use super::real_support::model_world::ModelWorld;
use bytes::Bytes;
use eosim::client::real::{RealProducer, RealTransactionalProducer, RealTxnConfig};
use eosim::client::{
    Admin, ConsumerGroupMetadata, Producer, ProducerConfig, ProducerRecord, TransactionalProducer,
    TxnErrorClass,
};
use eosim_sim::kafka::{
    Acks, ClusterConfig, Isolation, KafkaError, Offset, ProducerBatchHeader, Record, Request,
    Response, TopicConfig, TopicPartition,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::Message as _;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Partitions of each case's topic.
pub const PARTITIONS: u32 = 2;
/// `transaction.timeout.ms` of both worlds' transactional producers.
const TXN_TIMEOUT_MS: u64 = 10_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT_MAX: Duration = Duration::from_secs(20);

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
    /// The broker is killed (SIGKILL: its page cache survives) and started again.
    Restart,
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
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let partition = 0..PARTITIONS;
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
        1 => Just(Op::Restart),
    ]
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
    let outcome = match observed {
        Observation::Skipped => "skipped".to_string(),
        Observation::Sent(Err(c)) | Observation::Done(Err(c)) => format!("{c:?}"),
        Observation::Read { records, .. } if records.is_empty() => "empty".to_string(),
        _ => "ok".to_string(),
    };
    format!("{kind} {outcome}")
}

/// Runs `cases` generated sequences against the real broker at `bootstrap` and the model;
/// returns (cases agreeing, cases run) and the tally of what the agreeing cases exercised
/// (see [`exercised`]). Panics on the first (shrunk) difference.
///
/// `restart` kills the real broker and starts it again (an `Op::Restart`).
pub fn run(
    bootstrap: &str,
    restart: &(dyn Fn() -> Result<(), String> + Sync),
    cases: u32,
) -> (u32, u32, BTreeMap<String, u32>) {
    let strategy = proptest::collection::vec(op_strategy(), 1..20);
    super::real_support::run_differential("Kafka transactions", cases, 16, strategy, |n, ops| {
        let ops = with_final_reads(&ops);
        let real = RealArm::run(bootstrap, restart, n, &ops).map_err(TestCaseError::fail)?;
        let model = ModelArm::run(&ops);
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
    fn run(ops: &[Op]) -> Vec<Observation> {
        let mut w = ModelWorld::new(ClusterConfig::default());
        let (topic, tid, group) = ("t", "tid", "g");
        w.create_topic(topic, PARTITIONS);
        let mut idempotent: Option<(i64, i16, BTreeMap<u32, i32>)> = None;
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
                    let (pid, epoch, sequences) = idempotent.get_or_insert_with(|| {
                        match c.w.call(Request::InitProducerId {
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
                    let tp = TopicPartition::new(topic, partition);
                    let now = c.w.now() as i64;
                    match c.w.call(produce(tp, header, partition, value(n), now)) {
                        Response::Produce { base_offset, .. } => Observation::Sent(Ok(base_offset)),
                        Response::Error(e) => Observation::Sent(Err(class_of(e))),
                        other => panic!("model: idempotent Produce answered {other:?}"),
                    }
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
                Op::Restart => {
                    c.w.restart(2_000);
                    Observation::Skipped
                }
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
    fn run(
        bootstrap: &str,
        restart: &(dyn Fn() -> Result<(), String> + Sync),
        case: u32,
        ops: &[Op],
    ) -> Result<Vec<Observation>, String> {
        let rt = super::real_support::runtime();
        let topic = format!("txn-diff-{case}");
        let admin =
            eosim::client::real::RealAdmin::new(bootstrap, WAIT_MAX).map_err(|e| e.to_string())?;
        rt.block_on(admin.create_topic(&topic, PARTITIONS, 1, TopicConfig::default()))
            .map_err(|e| format!("create topic {topic}: {e}"))?;
        let watermark_reader = |level: &str| -> Result<BaseConsumer, String> {
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("isolation.level", level)
                .create()
                .map_err(|e| e.to_string())
        };
        let watermarks = [
            watermark_reader("read_uncommitted")?,
            watermark_reader("read_committed")?,
        ];
        let mut w = RealArm {
            rt,
            bootstrap: bootstrap.into(),
            tid: format!("tid-diff-{case}"),
            group: format!("g-txn-diff-{case}"),
            topic,
            idempotent: None,
            watermarks,
        };
        for partition in 0..PARTITIONS {
            w.wait_for(partition, |_, _| true)?;
        }
        let mut current = w
            .instance()?
            .map_err(|c| format!("first init_transactions: {c:?}"))?;
        let mut zombie: Option<RealInstance> = None;
        let mut out = Vec::new();
        for (n, op) in ops.iter().enumerate() {
            let observed = match *op {
                Op::Send { partition } => Observation::Sent(w.send(&mut current, partition, n)),
                Op::SendOffsets { partition, quarter } => {
                    let (hw, _) = w.watermarks(partition)?;
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
                Op::Restart => {
                    restart()?;
                    for partition in 0..PARTITIONS {
                        w.wait_for(partition, |_, _| true)?;
                    }
                    Observation::Skipped
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
        let (hw, lso) = self.watermarks(partition)?;
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

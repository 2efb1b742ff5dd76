//! The facts of a history that every anomaly is inferred from, gathered in one pass.

use super::CheckOptions;
use crate::history::{DorisJobFinal, DorisTxnFinal, History, OpKind, RecordRef, Value};
use eosim_sim::kafka::{Offset, Topic, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// Where an observation of a record's position came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// An acknowledged send (`Send` ok with tp and offset).
    Send,
    /// A consumer poll.
    Poll,
    /// A final `LogState`.
    Log,
    /// A sink `Write`.
    Write,
    /// The final `SinkState`.
    Sink,
}

/// One sighting of record `id` at (`tp`, `offset`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Record id.
    pub id: u64,
    /// Partition.
    pub tp: TopicPartition,
    /// Offset.
    pub offset: Offset,
    /// Index of the op that saw it.
    pub op: usize,
    /// What kind of op.
    pub source: Source,
}

/// An acknowledged send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckedSend {
    /// Index of the `ok` op.
    pub op: usize,
    /// Partition, if the ack named it.
    pub tp: Option<TopicPartition>,
    /// Offset, if the ack named it (not with `acks=0`).
    pub offset: Option<Offset>,
}

/// A partition's final log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalLog {
    /// Index of the `LogState` op.
    pub op: usize,
    /// Records sorted by offset.
    pub records: Vec<RecordRef>,
}

impl FinalLog {
    /// Records with `low < offset < high`.
    pub fn between(&self, low: Offset, high: Offset) -> &[RecordRef] {
        let start = self.records.partition_point(|r| r.offset <= low);
        let end = self.records.partition_point(|r| r.offset < high);
        if start < end {
            &self.records[start..end]
        } else {
            &[]
        }
    }
}

/// An ok poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollOp {
    /// Op index.
    pub op: usize,
    /// Consumer process.
    pub process: String,
    /// Records returned, in order.
    pub records: Vec<RecordRef>,
}

/// An ok sink write, or the final sink state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOp {
    /// Op index.
    pub op: usize,
    /// Sink process.
    pub process: String,
    /// Rows made durable, in order.
    pub rows: Vec<RecordRef>,
}

/// An ok offset commit (or the final committed offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOp {
    /// Op index.
    pub op: usize,
    /// Next offsets to read per partition.
    pub offsets: Vec<(TopicPartition, Offset)>,
}

/// A transaction: its invoke and completion ops, its records and input offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOp {
    /// Transaction number.
    pub id: u64,
    /// Producer process.
    pub process: String,
    /// The producer's `transactional.id`.
    pub transactional_id: String,
    /// Index of the invoke op.
    pub invoke: usize,
    /// Index and kind of the completion, if any (`None`: the process died mid-way, an
    /// unknown outcome like `info`).
    pub completion: Option<(usize, OpKind)>,
    /// Records sent (the completion's list when there is one).
    pub sends: Vec<RecordRef>,
    /// Input offsets sent with the transaction.
    pub offsets: Vec<(TopicPartition, Offset)>,
}

impl TxnOp {
    /// Committed: completed `ok`.
    pub fn committed(&self) -> bool {
        matches!(self.completion, Some((_, OpKind::Ok)))
    }

    /// Certainly aborted: completed `fail`.
    pub fn aborted(&self) -> bool {
        matches!(self.completion, Some((_, OpKind::Fail)))
    }

    /// The ops that are its evidence: invoke and completion.
    pub fn ops(&self) -> Vec<usize> {
        let mut ops = vec![self.invoke];
        ops.extend(self.completion.map(|(op, _)| op));
        ops
    }

    /// `ok`, `fail`, `info` or `unfinished`.
    pub fn outcome(&self) -> &'static str {
        match self.completion {
            Some((_, OpKind::Ok)) => "committed",
            Some((_, OpKind::Fail)) => "aborted",
            Some(_) => "of unknown outcome",
            None => "unfinished",
        }
    }
}

/// What the history says of the transaction a record of a log was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnFate {
    /// No transaction sent it: a plain producer's record.
    NotTransactional,
    /// A transaction that sent it committed: the record is data.
    Committed,
    /// Every transaction that sent it certainly aborted: it is not data, and a consumer
    /// reads it only with `isolation.level=read_uncommitted`.
    Aborted,
    /// Neither: its transaction's outcome is unknown, or it never ended in the history.
    Undecided,
}

/// Where the transactions' sends landed, for [`Analysis::fate`]: acknowledged positions,
/// and the ids of unacknowledged sends by topic. Indexes into [`Analysis::txns`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnSends {
    by_position: BTreeMap<(TopicPartition, Offset), (u64, usize)>,
    unacked: BTreeMap<(Topic, u64), Vec<usize>>,
}

/// A partition's final high watermark and last stable offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalOffsets {
    /// Index of the `PartitionState` op.
    pub op: usize,
    /// High watermark.
    pub high_watermark: Offset,
    /// Last stable offset.
    pub last_stable_offset: Offset,
}

/// The error rows of one Doris load (`LoadErrors`), with its completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadErrorOp {
    /// Op index of the completion.
    pub op: usize,
    /// Its kind (`ok`, `fail`, `info`).
    pub kind: OpKind,
    /// The load's label.
    pub label: String,
    /// The filtered rows.
    pub rows: Vec<RecordRef>,
}

/// The final Doris state (`DorisState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DorisFinal {
    /// Op index.
    pub op: usize,
    /// `SHOW ROUTINE LOAD` of each job.
    pub jobs: Vec<DorisJobFinal>,
    /// Load transactions.
    pub txns: Vec<DorisTxnFinal>,
}

/// What the checkers know about a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Acknowledged sends by id (the first ack if several).
    pub acked: BTreeMap<u64, AckedSend>,
    /// Final logs by partition, each with the records `delete-records` faults removed
    /// before it ([`Value::RecordsDeleted`]) in front: what the log held over the run.
    pub logs: BTreeMap<TopicPartition, FinalLog>,
    /// The records `delete-records` faults removed, by partition, in offset order.
    pub deleted_records: BTreeMap<TopicPartition, Vec<RecordRef>>,
    /// Positions of each id in the final logs.
    pub log_positions: BTreeMap<u64, Vec<(TopicPartition, Offset)>>,
    /// Ok polls in history order.
    pub polls: Vec<PollOp>,
    /// Op indexes of `info` completions per process: Jepsen's process crash, after which the
    /// process's polls start afresh (fault effects, recorded as `info`, excluded).
    pub crashes: BTreeMap<String, Vec<usize>>,
    /// Every sighting of a record's position.
    pub observations: Vec<Observation>,
    /// Ok sink writes in history order.
    pub writes: Vec<WriteOp>,
    /// Op indexes of the sink writes that hold each id and may have applied: `ok` ones and
    /// `info` ones (outcome unknown), in history order. Only the `ok` ones are durable
    /// ([`Analysis::writes`]); these are the witnesses a case cites.
    pub write_witnesses: BTreeMap<u64, Vec<usize>>,
    /// Ok offset commits in history order.
    pub commits: Vec<CommitOp>,
    /// The final sink state (op index, rows in storage order).
    pub sink_state: Option<WriteOp>,
    /// The final committed offsets of the sink's group.
    pub committed_final: Option<CommitOp>,
    /// Topics the sink consumes (empty = every topic with a final log).
    pub sink_topics: BTreeSet<String>,
    /// Transactions in invoke order.
    pub txns: Vec<TxnOp>,
    /// Final read_committed views by partition (`CommittedLogState`).
    pub committed_logs: BTreeMap<TopicPartition, FinalLog>,
    /// Final HW and LSO by partition (`PartitionState`).
    pub final_offsets: BTreeMap<TopicPartition, FinalOffsets>,
    /// Completed Doris load error rows (`LoadErrors`, not `invoke`), in history order.
    pub load_errors: Vec<LoadErrorOp>,
    /// The final Doris state, if recorded.
    pub doris: Option<DorisFinal>,
    /// Where the transactions' records are ([`Analysis::fate`]).
    pub txn_sends: TxnSends,
}

impl Analysis {
    /// Gathers the facts of `history`.
    pub fn new(history: &History, options: &CheckOptions) -> Self {
        let mut a = Analysis {
            sink_topics: options.sink_topics.iter().cloned().collect(),
            ..Analysis::default()
        };
        for op in &history.ops {
            // A fault's effect is recorded as `info` by the process it hit, but is not that
            // process's own indeterminate op: it does not replace the process.
            if op.kind == OpKind::Info && !matches!(op.value, Value::Effect { .. }) {
                a.crashes
                    .entry(op.process.clone())
                    .or_default()
                    .push(op.index);
            }
            if let Value::Txn { .. } = &op.value {
                a.add_txn(op);
                continue;
            }
            if let Value::LoadErrors { label, rows } = &op.value {
                if op.kind != OpKind::Invoke {
                    a.load_errors.push(LoadErrorOp {
                        op: op.index,
                        kind: op.kind,
                        label: label.clone(),
                        rows: rows.clone(),
                    });
                }
                continue;
            }
            if let (Value::DorisState { jobs, txns }, OpKind::Ok) = (&op.value, op.kind) {
                a.doris = Some(DorisFinal {
                    op: op.index,
                    jobs: jobs.clone(),
                    txns: txns.clone(),
                });
                continue;
            }
            if let (Value::Write { rows }, OpKind::Ok | OpKind::Info) = (&op.value, op.kind) {
                for row in rows {
                    a.write_witnesses.entry(row.id).or_default().push(op.index);
                }
            }
            if op.kind != OpKind::Ok {
                continue;
            }
            a.add_ok(op.index, &op.process, &op.value);
        }
        for log in a.logs.values_mut().chain(a.committed_logs.values_mut()) {
            log.records.sort_by_key(|r| r.offset);
        }
        for (tp, log) in &a.logs {
            for r in &log.records {
                a.log_positions
                    .entry(r.id)
                    .or_default()
                    .push((tp.clone(), r.offset));
            }
        }
        a.index_txn_sends();
        a
    }

    fn index_txn_sends(&mut self) {
        let mut index = TxnSends::default();
        for (i, txn) in self.txns.iter().enumerate() {
            for s in &txn.sends {
                if s.offset >= 0 {
                    let position = (s.tp.clone(), s.offset);
                    index.by_position.insert(position, (s.id, i));
                } else {
                    let key = (s.tp.topic, s.id);
                    index.unacked.entry(key).or_default().push(i);
                }
            }
        }
        self.txn_sends = index;
    }

    /// The fate of the transaction that wrote log record `r`: the transaction whose
    /// acknowledged send is at `r`'s position with `r`'s id, else every transaction that
    /// sent `r`'s id to `r`'s topic without an acknowledgement (a send that failed or timed
    /// out may still have been appended). Committed if one of them committed, aborted if
    /// every one certainly aborted, undecided otherwise. Sends to other topics are never
    /// matched: a copy's output transactions do not make its input transactional.
    pub fn fate(&self, r: &RecordRef) -> TxnFate {
        let at = self.txn_sends.by_position.get(&(r.tp.clone(), r.offset));
        let txns: Vec<&TxnOp> = match at {
            Some(&(id, i)) if id == r.id => vec![&self.txns[i]],
            _ => {
                let key = (r.tp.topic, r.id);
                let unacked = self.txn_sends.unacked.get(&key);
                unacked
                    .into_iter()
                    .flatten()
                    .map(|&i| &self.txns[i])
                    .collect()
            }
        };
        if txns.is_empty() {
            TxnFate::NotTransactional
        } else if txns.iter().any(|t| t.committed()) {
            TxnFate::Committed
        } else if txns.iter().all(|t| t.aborted()) {
            TxnFate::Aborted
        } else {
            TxnFate::Undecided
        }
    }

    /// Whether log record `r` must reach a sink that reads its topic: a plain producer's
    /// record or a committed transaction's; not an aborted or undecided one's.
    pub fn expected_in_sink(&self, r: &RecordRef) -> bool {
        matches!(self.fate(r), TxnFate::NotTransactional | TxnFate::Committed)
    }

    fn add_ok(&mut self, op: usize, process: &str, value: &Value) {
        match value {
            Value::Send { id, tp, offset, .. } => {
                let ack = AckedSend {
                    op,
                    tp: tp.clone(),
                    offset: *offset,
                };
                self.acked.entry(*id).or_insert(ack);
                if let (Some(tp), Some(offset)) = (tp, offset) {
                    self.observe(*id, tp, *offset, op, Source::Send);
                }
            }
            Value::Poll { records } => {
                self.observe_all(records, op, Source::Poll);
                let records = records.clone();
                self.polls.push(PollOp {
                    op,
                    process: process.to_string(),
                    records,
                });
            }
            Value::Commit { offsets } => {
                self.commits.push(CommitOp {
                    op,
                    offsets: offsets.clone(),
                });
            }
            Value::Write { rows } => {
                self.observe_all(rows, op, Source::Write);
                let rows = rows.clone();
                self.writes.push(WriteOp {
                    op,
                    process: process.to_string(),
                    rows,
                });
            }
            Value::SinkState { rows } => {
                self.observe_all(rows, op, Source::Sink);
                let rows = rows.clone();
                self.sink_state = Some(WriteOp {
                    op,
                    process: process.to_string(),
                    rows,
                });
            }
            Value::CommittedOffsets { offsets } => {
                self.committed_final = Some(CommitOp {
                    op,
                    offsets: offsets.clone(),
                });
            }
            Value::RecordsDeleted { tp, records, .. } => {
                let deleted = self.deleted_records.entry(tp.clone()).or_default();
                deleted.extend(records.iter().cloned());
            }
            Value::LogState { tp, records } => {
                let mut held = self.deleted_records.get(tp).cloned().unwrap_or_default();
                held.extend(records.iter().cloned());
                self.observe_all(&held, op, Source::Log);
                let log = FinalLog { op, records: held };
                self.logs.insert(tp.clone(), log);
            }
            Value::CommittedLogState { .. } | Value::PartitionState { .. } => {
                self.add_final(op, value)
            }
            // Faults, markers, transactions (see `add_txn`) and the change-data variants
            // (see `checker::cdc`).
            _ => {}
        }
    }

    /// The final state of transactional pipelines: read_committed views, HW and LSO.
    fn add_final(&mut self, op: usize, value: &Value) {
        match value {
            Value::CommittedLogState { tp, records } => {
                let log = FinalLog {
                    op,
                    records: records.clone(),
                };
                self.committed_logs.insert(tp.clone(), log);
            }
            Value::PartitionState {
                tp,
                high_watermark,
                last_stable_offset,
            } => {
                let offsets = FinalOffsets {
                    op,
                    high_watermark: *high_watermark,
                    last_stable_offset: *last_stable_offset,
                };
                self.final_offsets.insert(tp.clone(), offsets);
            }
            _ => {}
        }
    }

    /// A `Txn` op: an invoke opens a transaction, a completion closes the open one with
    /// the same id.
    fn add_txn(&mut self, op: &crate::history::Op) {
        let Value::Txn {
            id,
            transactional_id,
            sends,
            offsets,
        } = &op.value
        else {
            return;
        };
        if op.kind == OpKind::Invoke {
            self.txns.push(TxnOp {
                id: *id,
                process: op.process.clone(),
                transactional_id: transactional_id.clone(),
                invoke: op.index,
                completion: None,
                sends: sends.clone(),
                offsets: offsets.clone(),
            });
            return;
        }
        let open = self
            .txns
            .iter_mut()
            .rev()
            .find(|t| t.id == *id && t.completion.is_none());
        if let Some(txn) = open {
            txn.completion = Some((op.index, op.kind));
            txn.sends = sends.clone();
            txn.offsets = offsets.clone();
        }
    }

    fn observe_all(&mut self, records: &[RecordRef], op: usize, source: Source) {
        for r in records {
            self.observe(r.id, &r.tp, r.offset, op, source);
        }
    }

    fn observe(&mut self, id: u64, tp: &TopicPartition, offset: Offset, op: usize, s: Source) {
        // acks=0 and some clients report offset -1: no position was observed.
        if offset >= 0 {
            let tp = tp.clone();
            self.observations.push(Observation {
                id,
                tp,
                offset,
                op,
                source: s,
            });
        }
    }

    /// Whether the sink consumes `tp`.
    pub fn sink_reads(&self, tp: &TopicPartition) -> bool {
        self.sink_topics.is_empty() || self.sink_topics.contains(tp.topic.as_str())
    }

    /// The error rows accounted for, by source position, with the op that accounts for
    /// each: the `LoadErrors` of loads whose transaction is COMMITTED or VISIBLE in the
    /// final `DorisState` (the rows Doris counted as `errorRows` / `NumberFilteredRows`),
    /// or, without a `DorisState`, of loads completed `ok`. Each label is counted once,
    /// whatever the number of completions recorded for it.
    pub fn accounted_error_rows(&self) -> BTreeMap<(TopicPartition, Offset), usize> {
        let committed: Option<BTreeSet<&str>> = self.doris.as_ref().map(|d| {
            d.txns
                .iter()
                .filter(|t| t.is_committed())
                .map(|t| t.label.as_str())
                .collect()
        });
        let mut seen = BTreeSet::new();
        let mut rows = BTreeMap::new();
        for e in &self.load_errors {
            let counts = match &committed {
                Some(labels) => labels.contains(e.label.as_str()),
                None => e.kind == OpKind::Ok,
            };
            if !counts || !seen.insert(e.label.as_str()) {
                continue;
            }
            for r in &e.rows {
                rows.entry((r.tp.clone(), r.offset)).or_insert(e.op);
            }
        }
        rows
    }

    /// Ids in the final sink state with their number of rows (empty without a sink state).
    pub fn sink_counts(&self) -> BTreeMap<u64, u64> {
        let mut counts = BTreeMap::new();
        for row in self.sink_state.iter().flat_map(|s| s.rows.iter()) {
            *counts.entry(row.id).or_insert(0) += 1;
        }
        counts
    }

    /// The op indexes of the writes that may have put `id` into the sink
    /// ([`Analysis::write_witnesses`]), each once.
    pub fn writes_of(&self, id: u64) -> Vec<usize> {
        let mut ops = self.write_witnesses.get(&id).cloned().unwrap_or_default();
        ops.dedup();
        ops
    }

    /// Whether `process` had an `info` op strictly between op indexes `after` and `before`.
    pub fn crashed_between(&self, process: &str, after: usize, before: usize) -> bool {
        self.crashes
            .get(process)
            .is_some_and(|ops| ops.iter().any(|&i| after < i && i < before))
    }
}

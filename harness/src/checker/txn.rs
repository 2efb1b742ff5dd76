//! Transactional anomalies: what read_committed readers saw of each transaction, judged
//! against the transactions' recorded outcomes and the partitions' final state.
//!
//! A record read at (partition, offset) is attributed to the transaction whose
//! acknowledged send named that position; a record whose send was never acknowledged is
//! attributed by id, to every transaction that sent it.
//!
//! Reads are the final read_committed views (`CommittedLogState`) and polls of topics some
//! transaction wrote to.

use super::analysis::{Analysis, TxnOp};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult};
use crate::history::{History, RecordRef};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// Checks transactional histories: aborted reads, torn transactions, uncommitted reads,
/// lost committed writes, stuck last stable offsets and offsets committed for input whose
/// output was aborted.
#[derive(Debug, Clone, Copy, Default)]
pub struct TxnChecker;

impl AnalysisChecker for TxnChecker {
    fn name(&self) -> &'static str {
        "txn"
    }

    fn check_analysis(
        &self,
        _history: &History,
        options: &CheckOptions,
        a: &Analysis,
    ) -> CheckResult {
        let found = vec![
            (Anomaly::AbortedRead, aborted_read_cases(a)),
            (Anomaly::TornTransaction, torn_transaction_cases(a)),
            (Anomaly::UncommittedRead, uncommitted_read_cases(a)),
            (Anomaly::LostWrite, lost_committed_write_cases(a)),
            (Anomaly::StuckLso, stuck_lso_cases(a)),
            (
                Anomaly::OffsetsForAbortedOutput,
                offsets_for_aborted_output_cases(a),
            ),
        ];
        let mut counts = BTreeMap::new();
        let count = |f: fn(&TxnOp) -> bool| a.txns.iter().filter(|t| f(t)).count() as u64;
        counts.insert("txns-committed".to_string(), count(TxnOp::committed));
        counts.insert("txns-aborted".to_string(), count(TxnOp::aborted));
        counts.insert("txns".to_string(), a.txns.len() as u64);
        let read: usize = a.committed_logs.values().map(|l| l.records.len()).sum();
        counts.insert("read-committed-records".to_string(), read as u64);
        CheckResult::from_cases(found, counts, options)
    }
}

/// Which transactions wrote what: by acknowledged position, and by id.
struct Writers<'a> {
    by_position: BTreeMap<(&'a TopicPartition, Offset), &'a TxnOp>,
    by_id: BTreeMap<u64, Vec<&'a TxnOp>>,
}

impl<'a> Writers<'a> {
    fn new(a: &'a Analysis) -> Self {
        let mut by_position = BTreeMap::new();
        let mut by_id: BTreeMap<u64, Vec<&TxnOp>> = BTreeMap::new();
        for txn in &a.txns {
            for s in &txn.sends {
                if s.offset >= 0 {
                    by_position.insert((&s.tp, s.offset), txn);
                }
                by_id.entry(s.id).or_default().push(txn);
            }
        }
        Self { by_position, by_id }
    }

    /// The transactions a read record belongs to: the one acknowledged at its position,
    /// else every one that sent its id.
    fn of(&self, r: &RecordRef) -> Vec<&'a TxnOp> {
        match self.by_position.get(&(&r.tp, r.offset)) {
            Some(txn)
                if txn
                    .sends
                    .iter()
                    .any(|s| s.id == r.id && s.offset == r.offset) =>
            {
                vec![*txn]
            }
            _ => self.by_id.get(&r.id).cloned().unwrap_or_default(),
        }
    }
}

/// A read_committed read: the op, and the record.
fn reads(a: &Analysis) -> Vec<(usize, &RecordRef)> {
    let txn_topics: BTreeSet<&str> = a
        .txns
        .iter()
        .flat_map(|t| t.sends.iter().map(|s| s.tp.topic.as_str()))
        .collect();
    let mut out: Vec<(usize, &RecordRef)> = Vec::new();
    for poll in &a.polls {
        let records = poll
            .records
            .iter()
            .filter(|r| txn_topics.contains(r.tp.topic.as_str()));
        out.extend(records.map(|r| (poll.op, r)));
    }
    for log in a.committed_logs.values() {
        out.extend(log.records.iter().map(|r| (log.op, r)));
    }
    out
}

/// `aborted-read` (Adya's G1a): a read_committed read returned a record that belongs to a
/// transaction that certainly aborted (completed `fail`): the one acknowledged at the
/// record's position, or, for an unacknowledged record, every transaction that sent it.
pub fn aborted_read_cases(a: &Analysis) -> Vec<Case> {
    let writers = Writers::new(a);
    let mut cases = Vec::new();
    for (op, r) in reads(a) {
        let txns = writers.of(r);
        if txns.is_empty() || !txns.iter().all(|t| t.aborted()) {
            continue;
        }
        let mut ops = vec![op];
        ops.extend(txns.iter().flat_map(|t| t.ops()));
        let ids: Vec<String> = txns.iter().map(|t| t.id.to_string()).collect();
        cases.push(Case {
            ids: vec![r.id],
            tp: Some(r.tp.clone()),
            offsets: vec![r.offset],
            ops,
            text: format!(
                "record {} at {}@{} was read (op {op}) although its transaction {} aborted",
                r.id,
                r.tp,
                r.offset,
                ids.join(", ")
            ),
        });
    }
    cases
}

/// Acknowledged sends of `txn` in partitions with a final read_committed view, split
/// into those the view holds at that position and those it does not.
fn seen_and_missing<'t>(a: &Analysis, txn: &'t TxnOp) -> (Vec<&'t RecordRef>, Vec<&'t RecordRef>) {
    let acked = txn.sends.iter().filter(|s| s.offset >= 0);
    let judged = acked.filter(|s| a.committed_logs.contains_key(&s.tp));
    judged.partition(|s| {
        let log = &a.committed_logs[&s.tp];
        log.records
            .iter()
            .any(|r| r.offset == s.offset && r.id == s.id)
    })
}

/// `torn-transaction`: the final read_committed views hold some but not all acknowledged
/// records of one committed or undecided transaction (atomicity broken: part of it became
/// visible, part did not, as a delayed EndTxn committing the next transaction early does).
pub fn torn_transaction_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for txn in a.txns.iter().filter(|t| !t.aborted()) {
        let (seen, missing) = seen_and_missing(a, txn);
        if seen.is_empty() || missing.is_empty() {
            continue;
        }
        let place = |r: &&RecordRef| format!("{}@{}", r.tp, r.offset);
        let seen_at: Vec<String> = seen.iter().map(place).collect();
        let missing_at: Vec<String> = missing.iter().map(place).collect();
        let mut ops = txn.ops();
        ops.extend(
            missing
                .iter()
                .filter_map(|r| a.committed_logs.get(&r.tp))
                .map(|l| l.op),
        );
        cases.push(Case {
            ids: missing.iter().map(|r| r.id).collect(),
            tp: Some(missing[0].tp.clone()),
            offsets: missing.iter().map(|r| r.offset).collect(),
            ops,
            text: format!(
                "transaction {} ({}) is visible at {} but not at {}",
                txn.id,
                txn.outcome(),
                seen_at.join(", "),
                missing_at.join(", ")
            ),
        });
    }
    cases
}

/// `lost-write` of a transaction: a committed transaction none of whose acknowledged
/// records is in the final read_committed views.
pub fn lost_committed_write_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for txn in a.txns.iter().filter(|t| t.committed()) {
        let (seen, missing) = seen_and_missing(a, txn);
        if !seen.is_empty() || missing.is_empty() {
            continue;
        }
        cases.push(Case {
            ids: missing.iter().map(|r| r.id).collect(),
            tp: Some(missing[0].tp.clone()),
            offsets: missing.iter().map(|r| r.offset).collect(),
            ops: txn.ops(),
            text: format!(
                "committed transaction {} wrote {} record(s), none of them readable after the \
                 drain",
                txn.id,
                missing.len()
            ),
        });
    }
    cases
}

/// `uncommitted-read` (a dirty read): a read_committed poll returned a record of a
/// transaction before that transaction's commit was even requested (the poll's op comes
/// before the transaction's invoke), or of one that never committed.
pub fn uncommitted_read_cases(a: &Analysis) -> Vec<Case> {
    let writers = Writers::new(a);
    let mut cases = Vec::new();
    for poll in &a.polls {
        for r in &poll.records {
            let Some(txn) = writers.by_position.get(&(&r.tp, r.offset)) else {
                continue;
            };
            if txn.invoke < poll.op || txn.aborted() {
                continue;
            }
            cases.push(Case {
                ids: vec![r.id],
                tp: Some(r.tp.clone()),
                offsets: vec![r.offset],
                ops: vec![poll.op, txn.invoke],
                text: format!(
                    "{} read record {} at {}@{} (op {}) before transaction {} asked to commit \
                     (op {})",
                    poll.process, r.id, r.tp, r.offset, poll.op, txn.id, txn.invoke
                ),
            });
        }
    }
    cases
}

/// `stuck-lso`: after the drain and its quiet period a partition's last stable offset is
/// still below its high watermark: a transaction hangs on it (a produce that arrived after
/// its transaction ended, KIP-890) and every read_committed consumer is stalled there.
pub fn stuck_lso_cases(a: &Analysis) -> Vec<Case> {
    a.final_offsets
        .iter()
        .filter(|(_, f)| f.last_stable_offset < f.high_watermark)
        .map(|(tp, f)| Case {
            ids: Vec::new(),
            tp: Some(tp.clone()),
            offsets: vec![f.last_stable_offset, f.high_watermark],
            ops: vec![f.op],
            text: format!(
                "{tp}: last stable offset {} stays below high watermark {} after the drain",
                f.last_stable_offset, f.high_watermark
            ),
        })
        .collect()
}

/// `offsets-for-aborted-output`: the consume-transform-produce group's final committed
/// offset of an input partition is past an input record (final `LogState`) whose output is
/// in no final read_committed view, while some transaction sent that output and aborted:
/// the offsets moved on without the output (a processor not rewound after an abort,
/// cases.md F9). Judged only when the history has read_committed views and transactions.
pub fn offsets_for_aborted_output_cases(a: &Analysis) -> Vec<Case> {
    let (Some(committed), false) = (&a.committed_final, a.committed_logs.is_empty()) else {
        return Vec::new();
    };
    let output: BTreeSet<u64> = a
        .committed_logs
        .values()
        .flat_map(|l| l.records.iter().map(|r| r.id))
        .collect();
    let writers = Writers::new(a);
    let mut cases = Vec::new();
    for (tp, next) in &committed.offsets {
        let Some(log) = a.logs.get(tp) else { continue };
        // Input that is not data (an aborted or undecided upstream transaction's,
        // `Analysis::fate`) has no output to lose: a read_committed group passes it.
        for r in log
            .records
            .iter()
            .filter(|r| r.offset < *next && !output.contains(&r.id))
            .filter(|r| a.expected_in_sink(r))
        {
            let txns = writers.by_id.get(&r.id).cloned().unwrap_or_default();
            let aborted: Vec<&TxnOp> = txns.into_iter().filter(|t| t.aborted()).collect();
            if aborted.is_empty() {
                continue;
            }
            let mut ops = vec![committed.op, log.op];
            ops.extend(aborted.iter().flat_map(|t| t.ops()));
            cases.push(Case {
                ids: vec![r.id],
                tp: Some(tp.clone()),
                offsets: vec![r.offset, *next],
                ops,
                text: format!(
                    "input {} at {tp}@{} is below the committed offset {next} but its output \
                     was only written by aborted transaction {}",
                    r.id, r.offset, aborted[0].id
                ),
            });
        }
    }
    cases
}

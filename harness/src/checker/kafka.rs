//! Kafka-level anomalies: what the producers were told, what the consumers saw and what the
//! partition logs hold after the drain.

use super::analysis::{AckedSend, Analysis, TxnFate};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult, Validity};
use crate::history::{History, OpKind, Value};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// Checks the Kafka layer: lost writes, duplicates, inconsistent offsets, unseen records,
/// nonmonotonic polls and poll skips.
#[derive(Debug, Clone, Copy, Default)]
pub struct KafkaChecker;

impl AnalysisChecker for KafkaChecker {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn check_analysis(
        &self,
        history: &History,
        options: &CheckOptions,
        a: &Analysis,
    ) -> CheckResult {
        let found = vec![
            (Anomaly::LostWrite, lost_write_cases(a)),
            (Anomaly::Unseen, unseen_cases(a)),
            (Anomaly::Duplicate, duplicate_cases(a)),
            (Anomaly::InconsistentOffsets, inconsistent_offsets_cases(a)),
            (Anomaly::NonmonotonicPoll, nonmonotonic_poll_cases(a)),
            (Anomaly::PollSkip, poll_skip_cases(a)),
            (
                Anomaly::NonmonotonicSend,
                nonmonotonic_send_cases(history, a),
            ),
            (Anomaly::SendRejected, send_rejected_cases(history, a)),
        ];
        let unchecked = a.acked.values().filter(|ack| !judgeable(a, ack)).count();
        let mut counts = BTreeMap::new();
        counts.insert("acknowledged-sends".to_string(), a.acked.len() as u64);
        counts.insert("unchecked-acked-sends".to_string(), unchecked as u64);
        let log_records: usize = a.logs.values().map(|l| l.records.len()).sum();
        counts.insert("log-records".to_string(), log_records as u64);
        counts.insert("polls".to_string(), a.polls.len() as u64);
        let polled: usize = a.polls.iter().map(|p| p.records.len()).sum();
        counts.insert("polled-records".to_string(), polled as u64);
        let mut result = CheckResult::from_cases(found, counts, options);
        if a.logs.is_empty() && !a.acked.is_empty() {
            result.validity = result.validity.merge(Validity::Unknown);
            result.error = Some("no final LogState: lost writes cannot be decided".to_string());
        }
        result
    }
}

/// Whether the final log that would hold `ack` is known.
fn judgeable(a: &Analysis, ack: &AckedSend) -> bool {
    match &ack.tp {
        Some(tp) => a.logs.contains_key(tp),
        None => !a.logs.is_empty(),
    }
}

fn at(tp: &Option<TopicPartition>, offset: Option<Offset>) -> String {
    match (tp, offset) {
        (Some(tp), Some(offset)) => format!("{tp}@{offset}"),
        (Some(tp), None) => tp.to_string(),
        _ => "an unknown partition".to_string(),
    }
}

/// `lost-write`: a `Send` completed `ok` (the broker acknowledged it) whose id is in no final
/// `LogState`. Judged only where the final log is known: the acknowledged partition's
/// `LogState`, or any final log when the ack names no partition; other acks are counted as
/// `unchecked-acked-sends`. A send that completed `info` may or may not have happened and is
/// never a lost write.
pub fn lost_write_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for (id, ack) in &a.acked {
        if !judgeable(a, ack) || a.log_positions.contains_key(id) {
            continue;
        }
        let mut ops = vec![ack.op];
        ops.extend(ack.tp.as_ref().and_then(|tp| a.logs.get(tp)).map(|l| l.op));
        cases.push(Case {
            ids: vec![*id],
            tp: ack.tp.clone(),
            offsets: ack.offset.into_iter().collect(),
            ops,
            text: format!(
                "send {id} acknowledged at {} (op {}) is absent from the final log",
                at(&ack.tp, ack.offset),
                ack.op
            ),
        });
    }
    cases
}

/// `send-rejected`: ids whose send completed `fail` (with the error) and that no later
/// send acknowledged and no final log holds. One case per id, naming the error.
pub fn send_rejected_cases(history: &History, a: &Analysis) -> Vec<Case> {
    let mut rejected: BTreeMap<u64, (usize, String)> = BTreeMap::new();
    for op in &history.ops {
        if let (OpKind::Fail, Value::Send { id, .. }) = (op.kind, &op.value) {
            let error = op.error.clone().unwrap_or_else(|| "no error text".into());
            rejected.entry(*id).or_insert((op.index, error));
        }
    }
    rejected
        .into_iter()
        .filter(|(id, _)| !a.acked.contains_key(id) && !a.log_positions.contains_key(id))
        .map(|(id, (op, error))| Case {
            ids: vec![id],
            tp: None,
            offsets: Vec::new(),
            ops: vec![op],
            text: format!("send {id} failed and was never written (op {op}): {error}"),
        })
        .collect()
}

/// `unseen`: a record of the final log that no poll of any process returned, in a topic some
/// poll read from. Informational: a consumer that stopped early or a group that never got
/// the partition also leaves records unseen. A record of an aborted transaction
/// ([`Analysis::fate`]) is not unseen: read_committed consumers skip it by design.
pub fn unseen_cases(a: &Analysis) -> Vec<Case> {
    let polled_topics: BTreeSet<&str> = a
        .polls
        .iter()
        .flat_map(|p| p.records.iter().map(|r| r.tp.topic.as_str()))
        .collect();
    let polled_ids: BTreeSet<u64> = a
        .polls
        .iter()
        .flat_map(|p| p.records.iter().map(|r| r.id))
        .collect();
    let mut cases = Vec::new();
    for (tp, log) in a
        .logs
        .iter()
        .filter(|(tp, _)| polled_topics.contains(tp.topic.as_str()))
    {
        let unpolled = log.records.iter().filter(|r| !polled_ids.contains(&r.id));
        for r in unpolled.filter(|r| a.fate(r) != TxnFate::Aborted) {
            cases.push(Case {
                ids: vec![r.id],
                tp: Some(tp.clone()),
                offsets: vec![r.offset],
                ops: vec![log.op],
                text: format!("record {} at {tp}@{} was never polled", r.id, r.offset),
            });
        }
    }
    cases
}

/// `duplicate`: one id at two or more offsets of the final logs (a producer retry that the
/// broker did not deduplicate).
pub fn duplicate_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for (id, positions) in a.log_positions.iter().filter(|(_, p)| p.len() > 1) {
        let places: Vec<String> = positions
            .iter()
            .map(|(tp, o)| format!("{tp}@{o}"))
            .collect();
        let ops: BTreeSet<usize> = positions.iter().map(|(tp, _)| a.logs[tp].op).collect();
        cases.push(Case {
            ids: vec![*id],
            tp: Some(positions[0].0.clone()),
            offsets: positions.iter().map(|(_, o)| *o).collect(),
            ops: ops.into_iter().collect(),
            text: format!(
                "record {id} is in the final log {} times: {}",
                places.len(),
                places.join(", ")
            ),
        });
    }
    cases
}

/// (process, partition) → its acknowledged sends in invoke order: (id, first offset in the
/// final log, invoke op).
type SendsByProcess<'h> = BTreeMap<(&'h str, TopicPartition), Vec<(u64, Offset, usize)>>;

/// `nonmonotonic-send`: for each producer process and partition, its sends that were
/// acknowledged and are in that partition's final log, in the order the process invoked
/// them (the `invoke` ops of `Send`); each send whose first offset in the final log is
/// above that of a send the process invoked after it (it landed late) is a case, naming
/// it and the latest-invoked such send: one case per late record. First
/// offsets, so that a duplicate of a retried batch whose first attempt was appended keeps
/// its place.
pub fn nonmonotonic_send_cases(history: &History, a: &Analysis) -> Vec<Case> {
    let mut sends: SendsByProcess<'_> = BTreeMap::new();
    for (i, op) in history.ops.iter().enumerate() {
        let (OpKind::Invoke, Value::Send { id, .. }) = (op.kind, &op.value) else {
            continue;
        };
        let Some(ack) = a.acked.get(id) else {
            continue;
        };
        let Some(tp) = &ack.tp else {
            continue;
        };
        let first = a
            .log_positions
            .get(id)
            .and_then(|p| p.iter().filter(|(t, _)| t == tp).map(|(_, o)| *o).min());
        if let Some(offset) = first {
            sends
                .entry((op.process.as_str(), tp.clone()))
                .or_default()
                .push((*id, offset, i));
        }
    }
    let mut cases = Vec::new();
    for ((process, tp), list) in sends {
        // Latest-invoked first, keeping the lowest offset seen: a send above it landed
        // after a send invoked later.
        let mut lowest: Option<(u64, Offset, usize)> = None;
        for (id, offset, op) in list.into_iter().rev() {
            match lowest.filter(|(_, at, _)| offset > *at) {
                Some((later, at, later_op)) => cases.push(Case {
                    ids: vec![id, later],
                    tp: Some(tp.clone()),
                    offsets: vec![offset, at],
                    ops: vec![op, later_op, a.logs[&tp].op],
                    text: format!(
                        "{process} sent record {id} before record {later}, but the log \
                         holds {id} at {tp}@{offset} after {later} at {tp}@{at}"
                    ),
                }),
                None => lowest = Some((id, offset, op)),
            }
        }
    }
    cases.reverse();
    cases
}

/// `inconsistent-offsets`: observations (acks, polls, final logs, sink writes and sink state)
/// disagree on where a record is. Two inferences:
/// 1. one (partition, offset) was seen holding different ids (e.g. an acknowledged offset
///    reused after an unclean leader election);
/// 2. one id was seen at a position the final log does not hold it at, when the final log
///    holds it somewhere; or, when no final log holds it, at two different positions.
///
/// An id the final log holds at several offsets is a `duplicate`, not this.
pub fn inconsistent_offsets_cases(a: &Analysis) -> Vec<Case> {
    // Every observation as (partition, offset, id, op), borrowed and sorted once by
    // position, then again by id: no map per observation (this ran on every history, and
    // its two maps of cloned partitions were the checker's largest cost).
    let mut seen: Vec<Seen<'_>> = a
        .observations
        .iter()
        .map(|o| (&o.tp, o.offset, o.id, o.op))
        .collect();
    seen.sort_unstable();
    seen.dedup();
    let mut cases = Vec::new();
    for at in seen.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1)) {
        let mut ids: Vec<u64> = at.iter().map(|s| s.2).collect();
        ids.dedup();
        if ids.len() < 2 {
            continue;
        }
        let (tp, offset) = (at[0].0, at[0].1);
        let listed: Vec<String> = ids.iter().map(u64::to_string).collect();
        cases.push(Case {
            text: format!("{tp}@{offset} was seen holding ids {}", listed.join(", ")),
            ids,
            tp: Some(tp.clone()),
            offsets: vec![offset],
            ops: sorted_ops(at),
        });
    }
    seen.sort_unstable_by_key(|&(tp, offset, id, op)| (id, tp, offset, op));
    for of_id in seen.chunk_by(|x, y| x.2 == y.2) {
        cases.extend(stray_positions_case(a, of_id));
    }
    cases
}

/// An observation of [`inconsistent_offsets_cases`]: (partition, offset, id, op index).
type Seen<'a> = (&'a TopicPartition, Offset, u64, usize);

/// The op indices of `seen`, sorted, each once.
fn sorted_ops(seen: &[Seen<'_>]) -> Vec<usize> {
    let mut ops: Vec<usize> = seen.iter().map(|s| s.3).collect();
    ops.sort_unstable();
    ops.dedup();
    ops
}

/// Inference 2 of [`inconsistent_offsets_cases`] for the observations of one id, sorted by
/// position.
fn stray_positions_case(a: &Analysis, of_id: &[Seen<'_>]) -> Option<Case> {
    let id = of_id.first()?.2;
    let in_log: &[(TopicPartition, Offset)] = a.log_positions.get(&id).map_or(&[], Vec::as_slice);
    let positions = of_id.chunk_by(|x, y| (x.0, x.1) == (y.0, y.1)).count();
    let stray: Vec<Seen<'_>> = of_id
        .iter()
        .copied()
        .filter(|&(tp, offset, _, _)| {
            if in_log.is_empty() {
                positions > 1
            } else {
                !in_log.iter().any(|(t, o)| t == tp && *o == offset)
            }
        })
        .collect();
    let tp = stray.first()?.0;
    let mut places: Vec<(&TopicPartition, Offset)> = stray.iter().map(|s| (s.0, s.1)).collect();
    places.dedup();
    let listed: Vec<String> = places.iter().map(|(tp, o)| format!("{tp}@{o}")).collect();
    Some(Case {
        ids: vec![id],
        tp: Some(tp.clone()),
        offsets: places.iter().map(|(_, o)| *o).collect(),
        ops: sorted_ops(&stray),
        text: format!(
            "record {id} was seen at {}, not where the final log has it",
            listed.join(", ")
        ),
    })
}

/// A read of one record: (poll op index, offset, id).
type Read = (usize, Offset, u64);

/// Two records one process read from one partition, one after the other.
struct Step {
    process: String,
    tp: TopicPartition,
    prev: Read,
    next: Read,
}

/// Successive reads of each partition by each process, in history order, within and across
/// polls. A process's `info` op (Jepsen's crash: the process is replaced) starts it afresh.
fn poll_steps(a: &Analysis) -> Vec<Step> {
    // Per process: the op of its last poll, and per partition its last read.
    let mut last: BTreeMap<&str, (usize, BTreeMap<&TopicPartition, Read>)> = BTreeMap::new();
    let mut steps = Vec::new();
    for poll in &a.polls {
        let (last_op, seen) = last.entry(poll.process.as_str()).or_default();
        if a.crashed_between(&poll.process, *last_op, poll.op) {
            seen.clear();
        }
        *last_op = poll.op;
        for r in &poll.records {
            let next = (poll.op, r.offset, r.id);
            if let Some(prev) = seen.insert(&r.tp, next) {
                let process = poll.process.clone();
                steps.push(Step {
                    process,
                    tp: r.tp.clone(),
                    prev,
                    next,
                });
            }
        }
    }
    steps
}

/// `nonmonotonic-poll`: one process read a partition at offset `o`, then (in the same or a
/// later poll, with no crash of the process in between) at an offset `≤ o`.
pub fn nonmonotonic_poll_cases(a: &Analysis) -> Vec<Case> {
    poll_steps(a)
        .into_iter()
        .filter(|s| s.next.1 <= s.prev.1)
        .map(|s| Case {
            ids: vec![s.prev.2, s.next.2],
            tp: Some(s.tp.clone()),
            offsets: vec![s.prev.1, s.next.1],
            ops: vec![s.prev.0, s.next.0],
            text: format!(
                "{} read {} at offset {} (op {}) then offset {} (op {})",
                s.process, s.tp, s.prev.1, s.prev.0, s.next.1, s.next.0
            ),
        })
        .collect()
}

/// `poll-skip`: one process read a partition at offset `o`, then next at `p > o`, while the
/// final log holds records strictly between `o` and `p` (offsets are not dense: only records
/// that exist count as skipped; a record of an aborted transaction, [`Analysis::fate`], is
/// not data, and read_committed consumers skip it by design).
pub fn poll_skip_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for s in poll_steps(a).into_iter().filter(|s| s.next.1 > s.prev.1) {
        let Some(log) = a.logs.get(&s.tp) else {
            continue;
        };
        let between = log.between(s.prev.1, s.next.1).iter();
        let skipped: Vec<_> = between.filter(|r| a.fate(r) != TxnFate::Aborted).collect();
        if skipped.is_empty() {
            continue;
        }
        let mut offsets = vec![s.prev.1];
        offsets.extend(skipped.iter().map(|r| r.offset));
        offsets.push(s.next.1);
        cases.push(Case {
            ids: skipped.iter().map(|r| r.id).collect(),
            tp: Some(s.tp.clone()),
            offsets,
            ops: vec![s.prev.0, s.next.0],
            text: format!(
                "{} read {} at offset {} then {}, skipping {} record(s) from offset {}",
                s.process,
                s.tp,
                s.prev.1,
                s.next.1,
                skipped.len(),
                skipped[0].offset
            ),
        });
    }
    cases
}

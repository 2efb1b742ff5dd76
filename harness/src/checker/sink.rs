//! End-to-end anomalies: the final logs of the topics a sink consumes against what the sink
//! wrote, what it holds after the drain, and the offsets its group committed. Records of
//! transactions are judged by their transaction's fate ([`Analysis::fate`]): a committed
//! one's are expected, an aborted one's are forbidden (`aborted-in-sink`), an undecided
//! one's (outcome unknown, or still open when the run ended) neither expected nor
//! forbidden.

use super::analysis::{Analysis, FinalLog, TxnFate};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult, Validity};
use crate::history::History;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// Checks the pipeline end to end: sink losses, duplicates, per-key reordering, and progress
/// recorded ahead of durable data.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkChecker;

impl AnalysisChecker for SinkChecker {
    fn name(&self) -> &'static str {
        "sink"
    }

    fn check_analysis(
        &self,
        _history: &History,
        options: &CheckOptions,
        a: &Analysis,
    ) -> CheckResult {
        // Writes alone do not make a sink pipeline: the JDBC sink records its transactions
        // too, and its pipeline is judged on the table state (`checker::cdc`).
        if !options.sink && a.sink_state.is_none() {
            return CheckResult::default();
        }
        let found = vec![
            (Anomaly::SinkLost, sink_lost_cases(a)),
            (Anomaly::SinkDuplicate, sink_duplicate_cases(a)),
            (Anomaly::SinkReorder, sink_reorder_cases(a)),
            (
                Anomaly::ProgressAheadOfData,
                progress_ahead_of_data_cases(a),
            ),
            (Anomaly::AbortedInSink, aborted_in_sink_cases(a)),
        ];
        let mut result = CheckResult::from_cases(found, counts_of(a), options);
        let missing = if a.sink_state.is_none() {
            Some("no final SinkState: sink losses and duplicates cannot be decided")
        } else if a.logs.is_empty() {
            Some("no final LogState: sink losses cannot be decided")
        } else {
            None
        };
        if let Some(missing) = missing {
            result.validity = result.validity.merge(Validity::Unknown);
            result.error = Some(missing.to_string());
        }
        result
    }
}

fn counts_of(a: &Analysis) -> BTreeMap<String, u64> {
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    for row in a.writes.iter().flat_map(|w| w.rows.iter()) {
        *written.entry(row.id).or_default() += 1;
    }
    let mut counts = BTreeMap::new();
    let sink_rows = a.sink_state.as_ref().map_or(0, |s| s.rows.len());
    counts.insert("sink-rows".to_string(), sink_rows as u64);
    counts.insert("sink-written-rows".to_string(), written.values().sum());
    // Rows written more than once: redelivery, harmless if the target deduplicates.
    let redelivered = written.values().filter(|&&n| n > 1).count();
    counts.insert("sink-redelivered-ids".to_string(), redelivered as u64);
    counts.insert("commits".to_string(), a.commits.len() as u64);
    let errors = a.accounted_error_rows().len() as u64;
    if errors > 0 {
        counts.insert("sink-error-rows".to_string(), errors);
    }
    counts
}

/// `sink-lost`: a record of the final log of a topic the sink consumes (so committed to
/// Kafka) whose id is absent from the final `SinkState`; the case cites the log, the sink
/// state and the writes that may have carried the id. Matched by id, so a record the log
/// holds twice (a `duplicate`) is lost only if the sink holds neither. Nothing is inferred
/// without a final `SinkState`. The final log is read_uncommitted, so it holds the records
/// of aborted transactions too: only the records [`Analysis::expected_in_sink`] are
/// expected (a plain producer's, or a committed transaction's), never an aborted or
/// undecided transaction's.
pub fn sink_lost_cases(a: &Analysis) -> Vec<Case> {
    let Some(sink) = &a.sink_state else {
        return Vec::new();
    };
    let held = a.sink_counts();
    let errors = a.accounted_error_rows();
    let mut cases = Vec::new();
    for (tp, log) in a.logs.iter().filter(|(tp, _)| a.sink_reads(tp)) {
        let absent = log
            .records
            .iter()
            .filter(|r| !held.contains_key(&r.id) && a.expected_in_sink(r));
        for r in absent.filter(|r| !errors.contains_key(&(tp.clone(), r.offset))) {
            cases.push(Case {
                ids: vec![r.id],
                tp: Some(tp.clone()),
                offsets: vec![r.offset],
                ops: with_writes(a, r.id, vec![log.op, sink.op]),
                text: format!(
                    "record {} at {tp}@{} is absent from the sink",
                    r.id, r.offset
                ),
            });
        }
    }
    cases
}

/// `aborted-in-sink`: a row of the final `SinkState`, in a topic the sink consumes, whose
/// record was written by a transaction that certainly aborted ([`Analysis::fate`]): the
/// sink read it with `isolation.level=read_uncommitted` (the Java consumer's default,
/// which Kafka Connect keeps for sink tasks) and loaded data that never existed upstream.
/// A row of an undecided transaction (outcome unknown, or never ended) is not one. The
/// case cites the sink state, the transaction's ops and the writes that carried the id.
pub fn aborted_in_sink_cases(a: &Analysis) -> Vec<Case> {
    let Some(sink) = &a.sink_state else {
        return Vec::new();
    };
    let mut seen = BTreeSet::new();
    let mut cases = Vec::new();
    for row in sink.rows.iter().filter(|r| a.sink_reads(&r.tp)) {
        if !seen.insert((row.tp.clone(), row.offset, row.id)) || a.fate(row) != TxnFate::Aborted {
            continue;
        }
        let txns: Vec<_> = a
            .txns
            .iter()
            .filter(|t| {
                t.sends
                    .iter()
                    .any(|s| s.id == row.id && s.tp.topic == row.tp.topic)
            })
            .collect();
        let mut ops = vec![sink.op];
        ops.extend(txns.iter().flat_map(|t| t.ops()));
        let names: Vec<String> = txns.iter().map(|t| t.id.to_string()).collect();
        cases.push(Case {
            ids: vec![row.id],
            tp: Some(row.tp.clone()),
            offsets: vec![row.offset],
            ops: with_writes(a, row.id, ops),
            text: format!(
                "the sink holds record {} ({}@{}) of aborted transaction {}",
                row.id,
                row.tp,
                row.offset,
                names.join(", ")
            ),
        });
    }
    cases
}

/// `ops` with the writes that may have put `id` into the sink ([`Analysis::writes_of`]),
/// sorted: the witnesses of a lost or duplicated record.
fn with_writes(a: &Analysis, id: u64, mut ops: Vec<usize>) -> Vec<usize> {
    ops.extend(a.writes_of(id));
    ops.sort_unstable();
    ops.dedup();
    ops
}

/// `sink-duplicate`: an id held by more than one row of the final `SinkState`. The case
/// cites the sink state and every write that may have put the id there (`ok` and `info`).
pub fn sink_duplicate_cases(a: &Analysis) -> Vec<Case> {
    let Some(sink) = &a.sink_state else {
        return Vec::new();
    };
    let mut rows: BTreeMap<u64, Vec<(TopicPartition, Offset)>> = BTreeMap::new();
    for row in &sink.rows {
        rows.entry(row.id)
            .or_default()
            .push((row.tp.clone(), row.offset));
    }
    rows.into_iter()
        .filter(|(_, sources)| sources.len() > 1)
        .map(|(id, sources)| Case {
            ids: vec![id],
            tp: Some(sources[0].0.clone()),
            offsets: sources.iter().map(|(_, o)| *o).collect(),
            ops: with_writes(a, id, vec![sink.op]),
            text: format!("record {id} is held {} times by the sink", sources.len()),
        })
        .collect()
}

/// `sink-reorder`: two records of one key and one partition that the final `SinkState` holds
/// in the opposite order of their log offsets (adjacent inversions, first row of each id
/// only; rows without a key promise no order and are skipped). A record's offset is taken
/// from the final log when it is there, else from the row's own source offset.
pub fn sink_reorder_cases(a: &Analysis) -> Vec<Case> {
    let Some(sink) = &a.sink_state else {
        return Vec::new();
    };
    let mut first_rows = BTreeSet::new();
    let mut last: BTreeMap<(&str, TopicPartition), (Offset, u64)> = BTreeMap::new();
    let mut cases = Vec::new();
    for row in &sink.rows {
        let Some(key) = row.key.as_deref() else {
            continue;
        };
        if !first_rows.insert(row.id) {
            continue;
        }
        let (tp, offset) = a
            .log_positions
            .get(&row.id)
            .and_then(|p| p.first().cloned())
            .unwrap_or((row.tp.clone(), row.offset));
        let previous = last.insert((key, tp.clone()), (offset, row.id));
        if let Some((prev_offset, prev_id)) = previous.filter(|(o, _)| *o > offset) {
            cases.push(Case {
                ids: vec![prev_id, row.id],
                tp: Some(tp.clone()),
                offsets: vec![prev_offset, offset],
                ops: vec![sink.op],
                text: format!(
                    "key {key}: the sink holds record {prev_id} ({tp}@{prev_offset}) before \
                     record {} ({tp}@{offset})",
                    row.id
                ),
            });
        }
    }
    cases
}

/// `progress-ahead-of-data`: an offset recorded as consumed while a record below it, in a
/// topic the sink consumes, was not durable in the sink (an error row a Doris load
/// accounted for counts as done with at that load). Two inferences:
/// 1. the final `CommittedOffsets` of a partition is past records of its final log that the
///    final `SinkState` does not hold (one case per partition);
/// 2. an `ok` `Commit` during the run set a partition's offset past a record of its final
///    log that no earlier `ok` `Write` had made durable (one case per commit and partition;
///    only when the history has writes at all). Every `ok` commit counts: the history does
///    not say which group committed, so a scenario with other committing groups should list
///    `sink_topics`.
pub fn progress_ahead_of_data_cases(a: &Analysis) -> Vec<Case> {
    let mut cases = final_progress_cases(a);
    if a.writes.is_empty() {
        return cases;
    }
    let mut first_write: BTreeMap<u64, usize> = BTreeMap::new();
    for w in &a.writes {
        for row in &w.rows {
            first_write.entry(row.id).or_insert(w.op);
        }
    }
    // An accounted error row is done with at its load, as a written row is.
    let error_ids: BTreeMap<(&TopicPartition, Offset), u64> = a
        .logs
        .iter()
        .flat_map(|(tp, log)| log.records.iter().map(move |r| ((tp, r.offset), r.id)))
        .collect();
    for ((tp, offset), op) in a.accounted_error_rows() {
        if let Some(id) = error_ids.get(&(&tp, offset)) {
            let first = first_write.entry(*id).or_insert(op);
            *first = (*first).min(op);
        }
    }
    // A record not expected in the sink (an aborted or undecided transaction's) is done
    // with from the start.
    let not_expected: BTreeSet<u64> = a
        .logs
        .values()
        .flat_map(|log| log.records.iter())
        .filter(|r| !a.expected_in_sink(r))
        .map(|r| r.id)
        .collect();
    let written_at = |id: u64| match not_expected.contains(&id) {
        true => 0,
        false => first_write.get(&id).copied().unwrap_or(usize::MAX),
    };
    // Per partition, the latest first-write op over each prefix of the log in offset order:
    // a commit at op `c` up to offset `n` is ahead iff that maximum below `n` exceeds `c`.
    let mut prefix_max: BTreeMap<&TopicPartition, Vec<usize>> = BTreeMap::new();
    for (tp, log) in a.logs.iter().filter(|(tp, _)| a.sink_reads(tp)) {
        let maxima = log.records.iter().scan(0, |m, r| {
            *m = (*m).max(written_at(r.id));
            Some(*m)
        });
        prefix_max.insert(tp, maxima.collect());
    }
    for commit in &a.commits {
        for (tp, next) in &commit.offsets {
            let (Some(log), Some(maxima)) = (a.logs.get(tp), prefix_max.get(tp)) else {
                continue;
            };
            let below = log.records.partition_point(|r| r.offset < *next);
            if below == 0 || maxima[below - 1] <= commit.op {
                continue;
            }
            let r = log.records[..below]
                .iter()
                .find(|r| written_at(r.id) > commit.op);
            let r = r.expect("prefix maximum names a record written after the commit");
            let when = first_write
                .get(&r.id)
                .map_or("never".to_string(), |op| format!("only at op {op}"));
            cases.push(Case {
                ids: vec![r.id],
                tp: Some(tp.clone()),
                offsets: vec![*next, r.offset],
                ops: first_write
                    .get(&r.id)
                    .map_or(vec![commit.op], |&w| vec![commit.op, w]),
                text: format!(
                    "commit (op {}) moved {tp} to offset {next} while record {} at offset {} \
                     was written {when}",
                    commit.op, r.id, r.offset
                ),
            });
        }
    }
    cases
}

/// Inference 1 of [`progress_ahead_of_data_cases`].
fn final_progress_cases(a: &Analysis) -> Vec<Case> {
    let (Some(committed), Some(sink)) = (&a.committed_final, &a.sink_state) else {
        return Vec::new();
    };
    let held = a.sink_counts();
    let errors = a.accounted_error_rows();
    let mut cases = Vec::new();
    for (tp, next) in committed.offsets.iter().filter(|(tp, _)| a.sink_reads(tp)) {
        let Some(log) = a.logs.get(tp) else { continue };
        let missing: Vec<_> = below(log, *next)
            .filter(|r| !held.contains_key(&r.id) && a.expected_in_sink(r))
            .filter(|r| !errors.contains_key(&(tp.clone(), r.offset)))
            .collect();
        let Some(first) = missing.first() else {
            continue;
        };
        cases.push(Case {
            ids: missing.iter().map(|r| r.id).collect(),
            tp: Some(tp.clone()),
            offsets: vec![*next, first.offset],
            ops: vec![committed.op, sink.op],
            text: format!(
                "final committed offset of {tp} is {next}, past {} record(s) the sink does not \
                 hold, first {} at offset {}",
                missing.len(),
                first.id,
                first.offset
            ),
        });
    }
    cases
}

fn below(log: &FinalLog, next: Offset) -> impl Iterator<Item = &crate::history::RecordRef> {
    log.records.iter().take_while(move |r| r.offset < next)
}

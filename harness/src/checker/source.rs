//! Source connectors: the topic a source connector writes against the source database's
//! change log (pipeline `connect-source`). The topic is the pipeline's target, so its
//! anomalies are the end-to-end ones a sink's are judged by: a change event absent from
//! the topic is `sink-lost`, one held more than once is `sink-duplicate`, each forbidden
//! by the claim as for sinks.
//!
//! The topic is read as its downstream readers read it: with `read_committed` (the final
//! `CommittedLogState`) when the scenario's readers are read_committed, which
//! `connect-source` sets under KIP-618, else the whole log (`LogState`). A history without
//! a final `ChangeLog` is not a source connector's: the checker says nothing about it.

use super::{Anomaly, Case, CheckOptions, CheckResult, Checker};
use crate::history::{History, OpKind, Value};
use eosim_sim::kafka::{Offset, TopicPartition};
use eosim_sim::source_db::ChangeEvent;
use std::collections::BTreeMap;

/// Checks a source connector's topic against its source's change log.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceChecker;

/// The facts the source anomalies are inferred from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SourceAnalysis {
    /// The change log's events and the index of the `ChangeLog` op.
    pub events: Vec<ChangeEvent>,
    /// Index of the `ChangeLog` op.
    pub log_op: usize,
    /// Where each event id is in the topic's judged view, in partition then offset order.
    pub positions: BTreeMap<u64, Vec<(TopicPartition, Offset)>>,
    /// Indexes of the final topic ops read.
    pub view_ops: Vec<usize>,
}

impl SourceAnalysis {
    /// The analysis of `history`; `None` without a final `ChangeLog`. `read_committed`
    /// picks the view: `CommittedLogState` ops, else `LogState` ops.
    pub fn new(history: &History, read_committed: bool) -> Option<Self> {
        let mut a = SourceAnalysis::default();
        let mut found = false;
        for op in history.ops.iter().filter(|op| op.kind == OpKind::Ok) {
            let records = match (&op.value, read_committed) {
                (Value::ChangeLog { events }, _) => {
                    (a.events, a.log_op, found) = (events.clone(), op.index, true);
                    continue;
                }
                (Value::CommittedLogState { records, .. }, true) => records,
                (Value::LogState { records, .. }, false) => records,
                _ => continue,
            };
            a.view_ops.push(op.index);
            for r in records {
                let at = (r.tp.clone(), r.offset);
                a.positions.entry(r.id).or_default().push(at);
            }
        }
        found.then_some(a)
    }
}

/// `sink-lost` for a source connector: a change event of the final `ChangeLog` whose id
/// no record of the topic's judged view carries. One case per event, naming its log
/// position.
pub fn change_event_lost_cases(a: &SourceAnalysis) -> Vec<Case> {
    let mut ops = vec![a.log_op];
    ops.extend(a.view_ops.iter().copied());
    a.events
        .iter()
        .filter(|e| !a.positions.contains_key(&e.id))
        .map(|e| Case {
            ids: vec![e.id],
            tp: None,
            offsets: Vec::new(),
            ops: ops.clone(),
            text: format!(
                "change event {} ({}, txId {}) is absent from the topic",
                e.id, e.position, e.tx_id
            ),
        })
        .collect()
}

/// `sink-duplicate` for a source connector: a change event the topic's judged view holds
/// at more than one offset (a restarted task emitted it again after resuming from an
/// older stored offset). One case per event, naming every position.
pub fn change_event_duplicate_cases(a: &SourceAnalysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for e in &a.events {
        let Some(at) = a.positions.get(&e.id).filter(|at| at.len() > 1) else {
            continue;
        };
        let listed: Vec<String> = at.iter().map(|(tp, o)| format!("{tp}@{o}")).collect();
        cases.push(Case {
            ids: vec![e.id],
            tp: Some(at[0].0.clone()),
            offsets: at.iter().map(|(_, o)| *o).collect(),
            ops: a.view_ops.clone(),
            text: format!(
                "change event {} ({}) is in the topic {} times: {}",
                e.id,
                e.position,
                at.len(),
                listed.join(", ")
            ),
        });
    }
    cases
}

impl Checker for SourceChecker {
    fn name(&self) -> &'static str {
        "source"
    }

    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        let Some(a) = SourceAnalysis::new(history, options.read_committed) else {
            return CheckResult::default();
        };
        if a.view_ops.is_empty() {
            // Without the topic's final state no event can be called lost or duplicated.
            return CheckResult::unknown("no final state of the source connector's topic");
        }
        let lost = change_event_lost_cases(&a);
        let duplicates = change_event_duplicate_cases(&a);
        let mut counts = BTreeMap::new();
        counts.insert("source-events".to_string(), a.events.len() as u64);
        let held: usize = a.positions.values().map(Vec::len).sum();
        counts.insert("source-topic-records".to_string(), held as u64);
        let extra: usize = duplicates.iter().map(|c| c.offsets.len() - 1).sum();
        counts.insert("source-duplicate-records".to_string(), extra as u64);
        counts.insert("source-lost-events".to_string(), lost.len() as u64);
        let found = vec![
            (Anomaly::SinkLost, lost),
            (Anomaly::SinkDuplicate, duplicates),
        ];
        CheckResult::from_cases(found, counts, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{history, rec};
    use crate::checker::{Claim, Validity};
    use eosim_sim::source_db::{ChangeLog, ChangeLogConfig};

    /// A change log of two transactions of two rows: ids 0..4.
    fn change_log() -> Value {
        let log = ChangeLog::generate(ChangeLogConfig {
            transactions: 2,
            rows_per_transaction: 2,
            transaction_interval_ms: 10,
            first_commit_ms: 0,
        });
        Value::ChangeLog {
            events: log.events().to_vec(),
        }
    }

    fn log(ids: &[u64]) -> Value {
        let records = ids.iter().enumerate().map(|(o, &id)| rec(id, o as i64));
        Value::LogState {
            tp: crate::checker::test_support::tp(),
            records: records.collect(),
        }
    }

    fn committed(ids: &[(u64, i64)]) -> Value {
        Value::CommittedLogState {
            tp: crate::checker::test_support::tp(),
            records: ids.iter().map(|&(id, o)| rec(id, o)).collect(),
        }
    }

    fn options(claim: Claim, read_committed: bool) -> CheckOptions {
        CheckOptions {
            read_committed,
            sink: false,
            ..CheckOptions::for_claim(claim)
        }
    }

    #[test]
    fn sink_duplicate_a_restarted_task_emitted_events_again() {
        // The task sent 0..4, crashed after flushing the offset of event 1, and emitted
        // 2 and 3 again after its restart.
        let h = history(vec![
            ("final", OpKind::Ok, change_log()),
            ("final", OpKind::Ok, log(&[0, 1, 2, 3, 2, 3])),
        ]);
        let r = SourceChecker.check(&h, &options(Claim::ExactlyOnce, false));
        assert_eq!(r.validity, Validity::Invalid);
        assert_eq!(r.forbidden, vec![Anomaly::SinkDuplicate]);
        let ids: Vec<u64> = r.anomalies[&Anomaly::SinkDuplicate]
            .iter()
            .flat_map(|c| c.ids.clone())
            .collect();
        assert_eq!(ids, [2, 3]);
        assert_eq!(r.counts["source-duplicate-records"], 2);
        let alo = SourceChecker.check(&h, &options(Claim::AtLeastOnce, false));
        assert_eq!(alo.validity, Validity::Valid, "at least once allows them");
    }

    #[test]
    fn sink_lost_an_event_never_reached_the_topic() {
        let h = history(vec![
            ("final", OpKind::Ok, change_log()),
            ("final", OpKind::Ok, log(&[0, 1, 3])),
        ]);
        let r = SourceChecker.check(&h, &options(Claim::AtLeastOnce, false));
        assert_eq!(r.forbidden, vec![Anomaly::SinkLost]);
        assert_eq!(r.anomalies[&Anomaly::SinkLost][0].ids, [2]);
        assert!(r.anomalies[&Anomaly::SinkLost][0].text.contains("serial 0"));
    }

    #[test]
    fn a_read_committed_view_without_the_aborted_copies_is_valid() {
        // A killed task's open transaction held 2 and 3 (offsets 2, 3, later aborted);
        // the restarted task committed them again at offsets 5 and 6.
        let h = history(vec![
            ("final", OpKind::Ok, change_log()),
            ("final", OpKind::Ok, log(&[0, 1, 2, 3, 2, 3])),
            (
                "final",
                OpKind::Ok,
                committed(&[(0, 0), (1, 1), (2, 5), (3, 6)]),
            ),
        ]);
        let r = SourceChecker.check(&h, &options(Claim::ExactlyOnce, true));
        assert_eq!(r.validity, Validity::Valid, "{r:?}");
        assert_eq!(r.counts["source-topic-records"], 4);
        let uncommitted = SourceChecker.check(&h, &options(Claim::ExactlyOnce, false));
        assert_eq!(
            uncommitted.validity,
            Validity::Invalid,
            "the whole log has them twice"
        );
    }

    #[test]
    fn a_history_without_a_change_log_is_not_judged_and_one_without_a_topic_is_unknown() {
        let plain = history(vec![("final", OpKind::Ok, log(&[0]))]);
        let options = options(Claim::ExactlyOnce, false);
        assert_eq!(
            SourceChecker.check(&plain, &options),
            CheckResult::default()
        );
        let no_topic = history(vec![("final", OpKind::Ok, change_log())]);
        assert_eq!(
            SourceChecker.check(&no_topic, &options).validity,
            Validity::Unknown
        );
    }
}

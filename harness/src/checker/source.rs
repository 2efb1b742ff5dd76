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

use super::{Anomaly, Case, CheckOptions, CheckResult, Checker, Validity};
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
        let mut result = CheckResult::from_cases(found, counts, options);
        if a.view_ops.is_empty() {
            result.validity = result.validity.merge(Validity::Unknown);
            result.error = Some("no final state of the source connector's topic".into());
        }
        result
    }
}

//! Doris anomalies (P4), from the final `DorisState` (`SHOW ROUTINE LOAD`, `SHOW
//! TRANSACTION`), the loads' `LoadErrors` and the final `SinkState` of the table.
//!
//! # Analyses
//! 1. [`routine_load_statistic_cases`]: a job's `Statistic` against the table and the
//!    loads' error rows, as apache/doris counts them (`fe/fe-core/src/main/java/org/
//!    apache/doris/load/routineload/RoutineLoadStatistic.java`, `summary()`:
//!    `loadedRows = totalRows - errorRows - unselectedRows`; the counts are added from
//!    each task transaction's `RLTaskTxnCommitAttachment` in `RoutineLoadJob.updateNumOfData`).
//! 2. [`label_loaded_twice_cases`]: a label held by two committed transactions of one
//!    database (`DatabaseTransactionMgr.beginTransaction` refuses a label in use,
//!    `LabelAlreadyUsedException`).
//!
//! Error rows accounted for (input = visible + error + unselected rows) are judged by
//! `sink-lost` itself ([`super::sink_lost_cases`]): a record neither in the table nor an
//! error row of a committed load is lost. A job left PAUSED, or a PRECOMMITTED
//! transaction never resolved, is a liveness failure: the pipelines report it in their
//! drain's lag, so the run ends `stalled` with that reason.

use super::analysis::{Analysis, DorisFinal};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult};
use crate::history::{DorisJobFinal, History};
use std::collections::BTreeMap;

/// Checks the final Doris state; finds nothing in a history without one.
#[derive(Debug, Clone, Copy, Default)]
pub struct DorisChecker;

impl AnalysisChecker for DorisChecker {
    fn name(&self) -> &'static str {
        "doris"
    }

    fn check_analysis(
        &self,
        _history: &History,
        options: &CheckOptions,
        a: &Analysis,
    ) -> CheckResult {
        let Some(doris) = &a.doris else {
            return CheckResult::default();
        };
        let found = vec![
            (
                Anomaly::RoutineLoadStatistic,
                routine_load_statistic_cases(a),
            ),
            (Anomaly::LabelLoadedTwice, label_loaded_twice_cases(a)),
        ];
        let mut counts = BTreeMap::new();
        counts.insert("doris-txns".to_string(), doris.txns.len() as u64);
        let committed = doris.txns.iter().filter(|t| t.is_committed()).count();
        counts.insert("doris-committed-txns".to_string(), committed as u64);
        CheckResult::from_cases(found, counts, options)
    }
}

/// `routine-load-statistic`: a job's final `Statistic` disagrees with what it loaded.
/// Per job of the final `DorisState`:
/// 1. `totalRows` ≠ `loadedRows` + `errorRows` + `unselectedRows`;
/// 2. `errorRows` ≠ the rows of the `LoadErrors` of the job's committed transactions
///    (each label once);
/// 3. `loadedRows` ≠ the rows of the final `SinkState`, when the job is the only
///    committed loader of its table (a table other loads also fill says nothing about
///    the job alone, and is skipped).
pub fn routine_load_statistic_cases(a: &Analysis) -> Vec<Case> {
    let Some(doris) = &a.doris else {
        return Vec::new();
    };
    let mut cases = Vec::new();
    for job in &doris.jobs {
        let mut case = |text: String, ops: Vec<usize>| {
            cases.push(Case {
                ids: Vec::new(),
                tp: None,
                offsets: Vec::new(),
                ops,
                text: format!("job {}: {text}", job.name),
            })
        };
        let sum = job.loaded_rows + job.error_rows + job.unselected_rows;
        if job.total_rows != sum {
            case(
                format!(
                    "totalRows {} != loadedRows {} + errorRows {} + unselectedRows {}",
                    job.total_rows, job.loaded_rows, job.error_rows, job.unselected_rows
                ),
                vec![doris.op],
            );
        }
        let (errors, error_ops) = job_error_rows(a, doris, job);
        if errors != job.error_rows {
            let mut ops = vec![doris.op];
            ops.extend(error_ops);
            case(
                format!(
                    "errorRows {} but its committed loads filtered {errors} row(s)",
                    job.error_rows
                ),
                ops,
            );
        }
        let sole_loader = doris
            .txns
            .iter()
            .filter(|t| t.is_committed() && t.db == job.db && t.table == job.table)
            .all(|t| t.job.as_deref() == Some(job.name.as_str()));
        if let (true, Some(sink)) = (sole_loader, &a.sink_state) {
            let visible = sink.rows.len() as u64;
            if visible != job.loaded_rows {
                case(
                    format!(
                        "loadedRows {} but {}.{} holds {visible} visible row(s), all loaded \
                         by the job",
                        job.loaded_rows, job.db, job.table
                    ),
                    vec![doris.op, sink.op],
                );
            }
        }
    }
    cases
}

/// The error rows the job's committed loads recorded, and the ops recording them.
fn job_error_rows(a: &Analysis, doris: &DorisFinal, job: &DorisJobFinal) -> (u64, Vec<usize>) {
    let labels: BTreeMap<&str, ()> = doris
        .txns
        .iter()
        .filter(|t| t.is_committed() && t.job.as_deref() == Some(job.name.as_str()))
        .map(|t| (t.label.as_str(), ()))
        .collect();
    let mut seen = BTreeMap::new();
    for e in a
        .load_errors
        .iter()
        .filter(|e| labels.contains_key(e.label.as_str()))
    {
        seen.entry(e.label.as_str())
            .or_insert((e.rows.len() as u64, e.op));
    }
    let rows = seen.values().map(|(n, _)| n).sum();
    (rows, seen.values().map(|(_, op)| *op).collect())
}

/// `label-loaded-twice`: two COMMITTED or VISIBLE transactions of one database with the
/// same label, so one label's data is in the table twice. Doris refuses to begin a load
/// whose label a transaction that is not ABORTED holds; an ABORTED label may be reused,
/// so aborted transactions do not count.
pub fn label_loaded_twice_cases(a: &Analysis) -> Vec<Case> {
    let Some(doris) = &a.doris else {
        return Vec::new();
    };
    let mut by_label: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
    for t in doris.txns.iter().filter(|t| t.is_committed()) {
        by_label
            .entry((t.db.as_str(), t.label.as_str()))
            .or_default()
            .push(t.txn_id);
    }
    by_label
        .into_iter()
        .filter(|(_, txns)| txns.len() > 1)
        .map(|((db, label), txns)| Case {
            ids: Vec::new(),
            tp: None,
            offsets: Vec::new(),
            ops: vec![doris.op],
            text: format!("label {label} of database {db} committed by transactions {txns:?}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{doris_job as job, doris_txn as txn};
    use crate::checker::test_support::{history, log, rec, send, sink};
    use crate::history::{DorisJobFinal, DorisTxnFinal, OpKind, Value};

    fn analysis(txns: Vec<DorisTxnFinal>, jobs: Vec<DorisJobFinal>) -> Analysis {
        let h = history(vec![
            ("producer-0", OpKind::Ok, send(1, Some(0))),
            ("final", OpKind::Ok, log(&[(1, 0)])),
            ("final", OpKind::Ok, sink(&[(1, 0)])),
            ("final", OpKind::Ok, Value::DorisState { jobs, txns }),
        ]);
        Analysis::new(&h, &CheckOptions::default())
    }

    /// An ABORTED transaction frees its label (Doris lets a load reuse it): one aborted
    /// and one VISIBLE transaction of a label are not a label loaded twice.
    #[test]
    fn a_label_reused_after_an_abort_is_not_loaded_twice() {
        let a = analysis(
            vec![txn(1, "l", "ABORTED", None), txn(2, "l", "VISIBLE", None)],
            vec![],
        );
        assert!(label_loaded_twice_cases(&a).is_empty());
        let a = analysis(
            vec![txn(1, "l", "COMMITTED", None), txn(2, "l", "VISIBLE", None)],
            vec![],
        );
        assert_eq!(label_loaded_twice_cases(&a).len(), 1);
    }

    /// A Stream Load into the job's table makes the table's row count say nothing about
    /// the job's loadedRows: only the other equations are checked.
    #[test]
    fn loaded_rows_are_compared_with_the_table_only_when_the_job_is_its_sole_loader() {
        let txns = vec![
            txn(1, "rl", "VISIBLE", Some("job")),
            txn(2, "sl", "VISIBLE", None),
        ];
        let a = analysis(txns, vec![job(5, 5, 0)]);
        assert!(routine_load_statistic_cases(&a).is_empty());
        let a = analysis(
            vec![txn(1, "rl", "VISIBLE", Some("job"))],
            vec![job(5, 5, 0)],
        );
        let cases = routine_load_statistic_cases(&a);
        assert_eq!(cases.len(), 1, "{cases:?}");
        assert!(cases[0].text.contains("loadedRows 5"), "{}", cases[0].text);
    }

    /// The error rows of a load are counted once per label, however many completions
    /// recorded them (a commit retried after an unanswered request).
    #[test]
    fn error_rows_recorded_twice_for_one_label_count_once() {
        let errors = || Value::LoadErrors {
            label: "rl".into(),
            rows: vec![rec(2, 1)],
        };
        let h = history(vec![
            ("task", OpKind::Info, errors()),
            ("task", OpKind::Ok, errors()),
            (
                "final",
                OpKind::Ok,
                Value::DorisState {
                    jobs: vec![job(1, 0, 1)],
                    txns: vec![txn(1, "rl", "VISIBLE", Some("job"))],
                },
            ),
        ]);
        let a = Analysis::new(&h, &CheckOptions::default());
        assert!(routine_load_statistic_cases(&a).is_empty());
        assert_eq!(a.accounted_error_rows().len(), 1);
    }
}

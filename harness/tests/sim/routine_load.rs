//! Doris Routine Load (SPEC.md P4) on field case F7 and a BE crash: the bug switch loses
//! the failed tasks' batches, the right abort keeps every record, a BE crash mid-task loses
//! nothing.

use super::support::{catalogue, run_checked};
use eosim::checker::{Anomaly, Validity};

#[test]
fn f7_progress_from_the_consumer_position_loses_the_aborted_batches() {
    let s = catalogue("p4-f7-progress-from-consumer-position-loses.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(!result.anomalies[&Anomaly::SinkLost].is_empty());
    assert!(!result.anomalies[&Anomaly::ProgressAheadOfData].is_empty());
    assert!(outcome
        .marks
        .contains_key("doris:bug-abort-with-consumer-position"));
}

#[test]
fn f7_an_abort_without_attachment_reloads_the_batch_from_the_committed_offset() {
    let s = catalogue("p4-f7-aborted-task-progress-from-transaction.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(4)
    );
    assert_eq!(outcome.stalled, None);
    assert!(outcome
        .marks
        .contains_key("doris:task-failed-before-commit"));
}

#[test]
fn a_be_crash_mid_task_loses_and_duplicates_nothing() {
    let s = catalogue("p4-be-crash-mid-task.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(4)
    );
    assert_eq!(outcome.stalled, None);
    assert!(outcome.marks.contains_key("doris:be-restart"));
}

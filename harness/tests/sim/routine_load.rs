//! Doris Routine Load (SPEC.md P4) on field case F7, a BE crash and bad input: the bug
//! switch loses the failed tasks' batches, the right abort keeps every record, a BE crash
//! mid-task loses nothing (with one task or two running at once), error rows are accounted
//! for under either `strict_mode`, and a job paused for too many error rows is a stall with
//! its reason.

use super::support::{catalogue, run_checked, run_holding};
use eosim::checker::{Anomaly, Validity};

#[test]
fn f7_progress_from_the_consumer_position_loses_the_aborted_batches() {
    let s = catalogue("p4-f7-progress-from-consumer-position-loses.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(!result.anomalies[&Anomaly::SinkLost].is_empty());
    assert!(!result.anomalies[&Anomaly::ProgressAheadOfData].is_empty());
    // The failed tasks' aborts carried attachments, so the job counted rows it never
    // loaded: SHOW ROUTINE LOAD's loadedRows is above the table's rows.
    assert!(!result.anomalies[&Anomaly::RoutineLoadStatistic].is_empty());
    assert!(outcome
        .marks
        .contains_key("doris:bug-abort-with-consumer-position"));
}

#[test]
fn f7_an_abort_without_attachment_reloads_the_batch_from_the_committed_offset() {
    let (outcome, _) = run_holding("p4-f7-aborted-task-progress-from-transaction.toml", 2);
    assert!(outcome
        .marks
        .contains_key("doris:task-failed-before-commit"));
}

#[test]
fn a_be_crash_mid_task_loses_and_duplicates_nothing() {
    let (outcome, _) = run_holding("p4-be-crash-mid-task.toml", 2);
    assert!(outcome.marks.contains_key("doris:be-restart"));
}

#[test]
fn two_concurrent_tasks_under_be_restarts_load_every_record_once() {
    let (outcome, result) = run_holding("p4-concurrent-tasks-be-restarts.toml", 2);
    assert!(outcome.marks.contains_key("doris:be-restart"));
    assert!(outcome
        .marks
        .contains_key("doris:routine-load-tasks-concurrent"));
    assert_eq!(result.counts.get("sink-rows"), Some(&400));
}

#[test]
fn two_concurrent_tasks_do_not_hide_f7() {
    let s = catalogue("p4-concurrent-tasks-f7-progress-from-consumer-position-loses.toml");
    let (outcome, result) = run_checked(&s, 2);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(!result.anomalies[&Anomaly::SinkLost].is_empty());
    assert!(outcome
        .marks
        .contains_key("doris:routine-load-tasks-concurrent"));
}

/// Runs `file` at `seed`; it must hold, with `errors` error rows accounted for and `rows`
/// rows in the table (of 300 records).
fn holds_with_error_rows(file: &str, seed: u64, errors: u64, rows: u64) {
    let (_, result) = run_holding(file, seed);
    assert_eq!(result.counts.get("sink-error-rows"), Some(&errors));
    assert_eq!(result.counts.get("sink-rows"), Some(&rows));
    assert_eq!(errors + rows, 300);
}

/// Ids 1..300: malformed every 25th (11), over-long user every 40th not otherwise bad
/// (40, 80, 160, 280), bad clickTime every 30th not malformed (8): without strict mode
/// the bad clickTimes load as NULL, so 15 error rows and 285 rows.
#[test]
fn without_strict_mode_malformed_and_too_long_rows_are_error_rows_and_bad_times_null() {
    holds_with_error_rows("p4-bad-records-strict-mode-off.toml", 1, 15, 285);
}

/// As above with strict mode: the 8 bad clickTimes are error rows too.
#[test]
fn with_strict_mode_values_that_do_not_convert_are_error_rows_too() {
    holds_with_error_rows("p4-bad-records-strict-mode-on.toml", 2, 23, 277);
}

#[test]
fn a_job_paused_for_too_many_error_rows_is_a_stall_naming_the_reason() {
    let s = catalogue("p4-max-error-number-exceeded-stalls.toml");
    let (outcome, _) = run_checked(&s, 1);
    let reason = outcome.stalled.expect("the job stays PAUSED: a stall");
    assert!(
        reason.contains("current error rows is more than max error num: 5"),
        "{reason}"
    );
    assert!(outcome
        .marks
        .contains_key("doris:routine-load-too-many-error-rows"));
}

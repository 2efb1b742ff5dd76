//! Pipeline `connect-jdbc` (P2) and the field cases F3–F6: the exact final tables, DLQ
//! contents and task states each case must end with.

use super::support::{catalogue, run_checked as run, run_valid};
use eosim::checker::{check_all, Anomaly, CheckOptions, Claim, Validity};
use eosim::cli::aggregate::check_options;
use eosim::history::{DlqRecord, History, Value};
use eosim::scenario::Scenario;
use std::path::Path;

/// Loads `scenarios/<name>.toml` from the workspace root.
pub fn load(name: &str) -> Scenario {
    catalogue(&format!("{name}.toml"))
}

/// The final table's rows as compact JSON arrays, in primary-key order.
pub fn table(h: &History) -> Vec<String> {
    h.ops
        .iter()
        .rev()
        .find_map(|op| match &op.value {
            Value::TableState { rows, .. } => Some(
                rows.iter()
                    .map(|r| serde_json::Value::Array(r.clone()).to_string())
                    .collect(),
            ),
            _ => None,
        })
        .expect("a final table state")
}

/// The final DLQ records.
pub fn dlq(h: &History) -> Vec<DlqRecord> {
    h.ops
        .iter()
        .find_map(|op| match &op.value {
            Value::DlqState { records, .. } => Some(records.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Final task states (`RUNNING`, `FAILED`...), by task id.
pub fn task_states(h: &History) -> Vec<String> {
    h.ops
        .iter()
        .filter(|op| op.process == "final")
        .filter_map(|op| match &op.value {
            Value::TaskStatus { state, .. } => Some(state.clone()),
            _ => None,
        })
        .collect()
}

/// Final committed offsets, as `(partition, offset)`.
pub fn committed(h: &History) -> Vec<(u32, i64)> {
    h.ops
        .iter()
        .rev()
        .find_map(|op| match &op.value {
            Value::CommittedOffsets { offsets } => {
                Some(offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn upsert_under_worker_kills_and_pauses_ends_with_the_exact_table() {
    let s = load("p2-upsert-worker-crash");
    for seed in 1..=3 {
        let (_, result) = run_valid(&s, seed);
        assert!(result.counts["cdc-events"] >= 300, "{:?}", result.counts);
        assert!(result.counts["cdc-table-rows"] > 0);
        assert!(!result.anomalies.contains_key(&Anomaly::CdcFinalState));
    }
}

/// Rows `[id, v]` for ids `1..=n` with `v = 'a'`, except id 5 = 'b' (F3's right answer).
fn f3_rows() -> Vec<String> {
    (1..=100)
        .map(|i| format!("[{i},\"{}\"]", if i == 5 { "b" } else { "a" }))
        .collect()
}

#[test]
fn f3_upsert_replay_after_the_database_commit_leaves_100_rows_and_a_running_task() {
    let s = load("f3-upsert-crash-between-commit-and-offset-flush");
    let (outcome, _) = run_valid(&s, 1);
    assert_eq!(table(&outcome.history), f3_rows());
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
    assert_eq!(committed(&outcome.history), vec![(0, 101)]);
    let restarted = outcome.history.ops.iter().any(|op| {
        matches!(&op.value,
        Value::TaskStatus { state, .. } if state == "RUNNING")
            && op.time_ns > 9_000_000_000
    });
    assert!(
        restarted,
        "the task ran again after the worker restart (the replay happened)"
    );
}

#[test]
fn f3_insert_mode_replay_fails_on_duplicate_keys_and_the_task_stays_failed() {
    let s = load("f3-insert-crash-between-commit-and-offset-flush");
    let (outcome, result) = run(&s, 1);
    let stall = outcome
        .stalled
        .expect("the pipeline stalls: a liveness violation");
    assert!(
        stall.contains("23505") && stall.contains("Failed"),
        "{stall}"
    );
    assert_eq!(task_states(&outcome.history), vec!["FAILED"]);
    // What was committed before the crash is all there, once.
    assert_eq!(table(&outcome.history), f3_rows());
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}

#[test]
fn f4_tolerance_all_isolates_poison_records_into_the_dlq_and_writes_the_rest_once() {
    let s = load("f4-poison-tolerance-all");
    let (outcome, _) = run_valid(&s, 1);
    let ids: Vec<String> = table(&outcome.history)
        .iter()
        .map(|r| serde_json::from_str::<serde_json::Value>(r).unwrap()[0].to_string())
        .collect();
    assert_eq!(ids, ["1", "2", "3", "5", "7", "9", "10"]);
    let dlq: Vec<(String, String)> = dlq(&outcome.history)
        .iter()
        .map(|r| {
            let h = |k: &str| {
                r.header(&format!("__connect.errors.{k}"))
                    .unwrap_or("")
                    .to_string()
            };
            assert_eq!(h("topic"), "t");
            assert_eq!(h("partition"), "0");
            assert!(!h("exception.message").is_empty());
            (h("offset"), h("stage"))
        })
        .collect();
    let expected = [
        ("3", "VALUE_CONVERTER"),
        ("5", "TASK_PUT"),
        ("7", "TASK_PUT"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(o, s)| (o.to_string(), s.to_string()))
        .collect();
    assert_eq!(dlq, expected);
    let messages: Vec<String> = dlq_messages(&outcome.history);
    assert!(messages[1].contains("23502"), "{messages:?}");
    assert!(messages[2].contains("22001"), "{messages:?}");
    assert_eq!(committed(&outcome.history), vec![(0, 10)]);
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
}

fn dlq_messages(h: &History) -> Vec<String> {
    dlq(h)
        .iter()
        .map(|r| {
            r.header("__connect.errors.exception.message")
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[test]
fn f4_tolerance_none_stops_at_the_first_bad_record_and_skips_nothing() {
    let s = load("f4-poison-tolerance-none");
    let (outcome, result) = run(&s, 1);
    assert!(
        outcome.stalled.is_some(),
        "the task stops: the pipeline stalls"
    );
    assert_eq!(task_states(&outcome.history), vec!["FAILED"]);
    // The whole poll (ids 1..10) was being converted when id 4 failed: nothing was put.
    assert_eq!(table(&outcome.history), Vec::<String>::new());
    assert_eq!(committed(&outcome.history), vec![]);
    let stages: Vec<String> = dlq(&outcome.history)
        .iter()
        .map(|r| r.header("__connect.errors.stage").unwrap_or("").to_string())
        .collect();
    assert_eq!(
        stages,
        ["VALUE_CONVERTER"],
        "the failing record still reaches the DLQ"
    );
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}

#[test]
fn f5_envelope_deletes_and_tombstones_leave_rows_2_prime_3_4() {
    let s = load("f5-tombstones-envelope");
    let (outcome, _) = run_valid(&s, 1);
    assert_eq!(
        table(&outcome.history),
        [r#"[2,"two'"]"#, r#"[3,"three"]"#, r#"[4,"four"]"#]
    );
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
}

#[test]
fn f5_flattened_tombstone_deletes_and_leaves_rows_2_prime_3_4() {
    let s = load("f5-tombstones-flattened");
    let (outcome, _) = run_valid(&s, 1);
    assert_eq!(
        table(&outcome.history),
        [r#"[2,"two'"]"#, r#"[3,"three"]"#, r#"[4,"four"]"#]
    );
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
}

#[test]
fn f6_truncate_honoured_leaves_only_what_came_after_it() {
    let s = load("f6-truncate-honoured");
    let (outcome, _) = run_valid(&s, 1);
    assert_eq!(table(&outcome.history), [r#"[3,"three'"]"#]);
    let stages: Vec<String> = dlq(&outcome.history)
        .iter()
        .map(|r| r.header("__connect.errors.stage").unwrap_or("").to_string())
        .collect();
    assert_eq!(stages, ["TASK_PUT"], "the unknown op goes to the DLQ");
    assert!(dlq_messages(&outcome.history)[0].contains("unknown op 'x'"));
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
}

#[test]
fn f6_truncate_ignored_keeps_every_row_and_op_r_upserts_in_insert_mode() {
    let s = load("f6-truncate-ignored");
    let (outcome, _) = run_valid(&s, 1);
    assert_eq!(
        table(&outcome.history),
        [r#"[1,"one"]"#, r#"[2,"two"]"#, r#"[3,"three'"]"#]
    );
    assert_eq!(task_states(&outcome.history), vec!["RUNNING"]);
}

#[test]
fn f3_insert_without_a_primary_key_duplicates_every_replayed_row() {
    let s = load("f3-insert-without-primary-key");
    let (outcome, result) = run(&s, 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(table(&outcome.history).len(), 200, "ids 1..100, each twice");
    assert_eq!(
        result.validity,
        Validity::Valid,
        "at-least-once allows duplicates"
    );
    let exactly_once = CheckOptions {
        claim: Claim::ExactlyOnce,
        ..check_options(&s)
    };
    let strict = check_all(&outcome.history, &exactly_once);
    assert_eq!(strict.validity, Validity::Invalid);
    assert_eq!(strict.forbidden, vec![Anomaly::CdcDuplicateRow]);
}

#[test]
fn test15_column_types_map_and_values_that_do_not_fit_go_to_the_dlq_with_their_sqlstate() {
    let s = load("p2-test15-column-types");
    let (outcome, _) = run_valid(&s, 1);
    let row = concat!(
        r#"[9007199254740993,12,-7,123456,true,1.5,2.25,-0.5,"2024-02-29","13:45:00+02","#,
        r#""2024-02-29 13:45:00+00","text",{"k":[1,2]}]"#
    );
    assert_eq!(table(&outcome.history), [row]);
    let messages = [
        "SQLSTATE 22003: smallint out of range",
        "SQLSTATE 22008: date/time field value out of range: \"2023-02-30\"",
        "SQLSTATE 22P02: invalid input syntax for type boolean: \"maybe\"",
    ];
    assert_eq!(dlq_messages(&outcome.history), messages);
}

#[test]
fn an_unknown_connector_key_is_a_scenario_error_naming_it() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/f5-tombstones-envelope.toml"),
    )
    .expect("readable");
    let bad = text.replace("\"connection.user\"", "\"connector.user\"");
    let e = Scenario::parse(Path::new("bad.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`connector`") && e.contains("connector.user"),
        "{e}"
    );
    assert!(
        e.contains("connection.user"),
        "a hint names the right key: {e}"
    );
}

#[test]
fn f5_bug_switch_ignoring_tombstones_is_reported_as_a_wrong_final_state() {
    let s = load("f5-bug-ignored-tombstone-loses-delete");
    let (outcome, result) = run(&s, 1);
    assert_eq!(outcome.stalled, None);
    let rows = [
        r#"[1,"one"]"#,
        r#"[2,"two'"]"#,
        r#"[3,"three"]"#,
        r#"[4,"four"]"#,
    ];
    assert_eq!(table(&outcome.history), rows);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.forbidden, vec![Anomaly::CdcFinalState]);
    let text = &result.anomalies[&Anomaly::CdcFinalState][0].text;
    assert!(
        text.contains("[1]") && text.contains("should not exist"),
        "{text}"
    );
}

#[test]
fn a_rolled_back_transaction_is_a_failed_write_with_its_sqlstate_and_drift_is_a_bad_record() {
    let s = catalogue("p2-schema-drift-unknown-column-stalls.toml");
    let outcome = eosim::runner::run_seed(&s, 1);
    let failed: Vec<_> = outcome
        .history
        .ops
        .iter()
        .filter(|op| {
            op.kind == eosim::history::OpKind::Fail && matches!(op.value, Value::Write { .. })
        })
        .collect();
    // Every retry of the batch ends in 42703 and a rollback: a `fail` each, none `ok`.
    assert!(!failed.is_empty());
    assert!(failed
        .iter()
        .all(|op| op.error.as_deref().is_some_and(|e| e.contains("42703"))));
    let ok_writes = outcome.history.ops.iter().filter(|op| {
        op.kind == eosim::history::OpKind::Ok && matches!(op.value, Value::Write { .. })
    });
    assert_eq!(ok_writes.count(), 0);
    let kind = eosim_sim::effects::kind::BAD_RECORD;
    assert_eq!(outcome.scheduled.get(kind), Some(&4));
    assert_eq!(outcome.acted.get(kind), Some(&4));
}

/// A task consumer the group coordinator refuses for good (a session timeout below the
/// broker's `group.min.session.timeout.ms`: `INVALID_SESSION_TIMEOUT`) fails the task, as
/// `WorkerSinkTask.poll` lets the consumer's exception out; it used to retry silently and
/// the run stalled with nothing but lag to show.
#[test]
fn a_task_consumer_refused_by_the_coordinator_fails_the_task() {
    let mut s = load("p2-upsert-worker-crash");
    s.connector
        .insert("consumer.override.session.timeout.ms".into(), "1000".into());
    s.faults.schedule.clear();
    let (outcome, _) = run(&s, 1);
    let stall = outcome.stalled.expect("nothing is ever written: a stall");
    assert!(
        stall.contains("consumer poll failed") && stall.contains("InvalidSessionTimeout"),
        "{stall}"
    );
    assert!(task_states(&outcome.history).iter().all(|s| s == "FAILED"));
}

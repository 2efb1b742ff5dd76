//! The field pairs of a sink (or a Doris Routine Load job) behind a transactional upstream
//! that aborts every third transaction (`scenarios/field/*-aborted-txn*.toml`): at
//! read_uncommitted the sink holds aborted records (`aborted-in-sink`); at read_committed it
//! skips them and holds, with no `sink-lost` (or `cdc-final-state`) for the records it
//! rightly never loaded. Each on a fixed seed, asserting that transactions did abort in it.

use crate::support::{catalogue, run_checked};
use eosim::checker::{Anomaly, CheckResult, Validity};
use eosim::runner::SeedOutcome;

const SEED: u64 = 1;

/// Runs `SEED` of `field/<file>` and checks that aborted transactions happened: some
/// transaction aborted, and every aborted one was planned (`abort_every`).
fn run_with_aborts(file: &str) -> (SeedOutcome, CheckResult) {
    let scenario = catalogue(&format!("field/{file}"));
    let (outcome, result) = run_checked(&scenario, SEED);
    assert_eq!(outcome.stalled, None, "{file}");
    let aborted = result.counts.get("txns-aborted").copied().unwrap_or(0);
    let committed = result.counts.get("txns-committed").copied().unwrap_or(0);
    assert!(
        aborted > 0,
        "{file}: no transaction aborted: {:?}",
        result.counts
    );
    assert!(committed > 0, "{file}: no transaction committed");
    let planned = outcome.marks.get("upstream:planned-abort").copied();
    assert_eq!(
        planned,
        Some(aborted),
        "{file}: an abort that was not planned"
    );
    for wrong in [Anomaly::SinkLost, Anomaly::CdcFinalState] {
        assert!(!result.anomalies.contains_key(&wrong), "{file}: {wrong}");
    }
    (outcome, result)
}

/// The read_uncommitted half: invalid for `aborted-in-sink` alone.
fn assert_loads_aborted(file: &str) -> CheckResult {
    let (_, result) = run_with_aborts(file);
    assert_eq!(result.validity, Validity::Invalid, "{file}");
    assert_eq!(result.forbidden, vec![Anomaly::AbortedInSink], "{file}");
    result
}

/// A record sink's read_uncommitted half: one case per record of the aborted
/// transactions (`transaction_records` each).
fn assert_loads_each_aborted_record(file: &str, transaction_records: u64) {
    let result = assert_loads_aborted(file);
    let cases = result.anomalies[&Anomaly::AbortedInSink].len() as u64;
    assert_eq!(
        cases,
        result.counts["txns-aborted"] * transaction_records,
        "{file}"
    );
}

/// The read_committed half: valid, with the aborted records filtered by the consumer.
fn assert_skips_aborted(file: &str) {
    let (outcome, result) = run_with_aborts(file);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{file}: {:?}",
        result.case_texts(8)
    );
    assert!(
        result.anomalies.is_empty(),
        "{file}: {:?}",
        result.case_texts(8)
    );
    let filtered = "client:consumer-aborted-records-filtered";
    assert!(outcome.marks.contains_key(filtered), "{file}");
}

#[test]
fn a_read_uncommitted_consumer_puts_aborted_records_in_its_sink() {
    assert_loads_each_aborted_record("kafka-read-uncommitted-aborted-txn-corrupts.toml", 10);
}

#[test]
fn a_read_committed_consumer_skips_aborted_records() {
    assert_skips_aborted("kafka-read-committed-skips-aborted-txn.toml");
}

#[test]
fn the_clickhouse_sink_at_connects_default_isolation_loads_aborted_records() {
    assert_loads_each_aborted_record(
        "clickhouse-connect-read-uncommitted-aborted-txn-corrupts.toml",
        10,
    );
}

#[test]
fn the_clickhouse_sink_with_a_read_committed_override_skips_aborted_records() {
    assert_skips_aborted("clickhouse-connect-read-committed-skips-aborted-txn.toml");
}

#[test]
fn the_jdbc_sink_at_connects_default_isolation_applies_aborted_change_events() {
    let file = "jdbc-sink-read-uncommitted-aborted-txn-corrupts.toml";
    let result = assert_loads_aborted(file);
    // One case per partition whose table matches only with the aborted events applied,
    // naming those events.
    let cases = &result.anomalies[&Anomaly::AbortedInSink];
    assert!(
        cases.iter().all(|c| !c.ids.is_empty() && c.tp.is_some()),
        "{cases:?}"
    );
}

#[test]
fn the_jdbc_sink_with_a_read_committed_override_skips_aborted_change_events() {
    assert_skips_aborted("jdbc-sink-read-committed-skips-aborted-txn.toml");
}

#[test]
fn routine_load_at_read_uncommitted_loads_aborted_records() {
    assert_loads_each_aborted_record(
        "doris-routine-load-read-uncommitted-aborted-txn-corrupts.toml",
        10,
    );
}

#[test]
fn routine_load_at_its_default_read_committed_skips_aborted_records() {
    assert_skips_aborted("doris-routine-load-read-committed-skips-aborted-txn.toml");
}

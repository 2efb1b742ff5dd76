//! The Streams processor (pipeline `streams-count`) under faults: what each
//! `processing.guarantee` gives (SPEC P3, models-reference E.5).

use eosim::checker::{check_all, Anomaly, CheckResult, Validity};
use eosim::cli::aggregate::check_options;
use eosim::history::{OpKind, Value};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

fn scenario(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    Scenario::load(&path).expect("catalogue scenario parses")
}

fn inline(text: &str) -> Scenario {
    Scenario::parse(Path::new("inline.toml"), text).expect("test scenario parses")
}

fn run(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "seed {seed} crashed");
    assert_eq!(outcome.stalled, None, "seed {seed} stalled");
    let result = check_all(&outcome.history, &check_options(s));
    (outcome, result)
}

fn assert_holds(file: &str, seeds: u64) {
    let s = scenario(file);
    for seed in 1..=seeds {
        let (_, result) = run(&s, seed);
        assert_eq!(
            result.validity,
            Validity::Valid,
            "seed {seed}: {:?}",
            result.case_texts(8)
        );
    }
}

fn count(outcome: &SeedOutcome, pred: impl Fn(&Value) -> bool) -> usize {
    outcome
        .history
        .ops
        .iter()
        .filter(|op| pred(&op.value))
        .count()
}

#[test]
fn a_single_instance_counts_exactly_without_faults_under_both_guarantees() {
    for guarantee in ["at_least_once", "exactly_once_v2"] {
        let s = inline(&format!(
            r#"
            pipeline = "streams-count"
            claim = "exactly-once"
            [workload]
            records = 150
            produce_interval_ms = 50
            [streams]
            instances = 1
            processing_guarantee = "{guarantee}"
            commit_interval_ms = 1000
            [faults]
            until_ms = 10000
            "#
        ));
        let (outcome, result) = run(&s, 1);
        assert_eq!(
            result.validity,
            Validity::Valid,
            "{guarantee}: {:?}",
            result.case_texts(8)
        );
        assert_eq!(
            result.counts.get("streams-consumed-inputs"),
            Some(&150),
            "{guarantee}"
        );
        assert!(count(&outcome, |v| matches!(v, Value::StreamsOutput { .. })) > 0);
    }
}

#[test]
fn at_least_once_over_counts_after_an_instance_crash() {
    let s = scenario("p3-alo-crash-duplicates-increments.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(result.forbidden.contains(&Anomaly::AggregateOverCount));
    assert!(!result.anomalies.contains_key(&Anomaly::AggregateUnderCount));
    // Replaying the seed reproduces the history bit for bit.
    let again = run_seed(&s, 1);
    assert_eq!(outcome.history.hash(), again.history.hash());
}

#[test]
fn at_least_once_never_under_counts_after_instance_crashes() {
    assert_holds("p3-alo-crash-never-under-counts.toml", 2);
}

#[test]
fn exactly_once_v2_counts_exactly_despite_crashes_mid_commit() {
    assert_holds("p3-eos-crash-mid-commit.toml", 2);
}

#[test]
fn exactly_once_v2_fences_an_instance_paused_past_its_timeouts() {
    let s = scenario("p3-eos-zombie-pause.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let fenced = outcome.history.ops.iter().any(|op| {
        op.process == "streams-0"
            && matches!(&op.value, Value::StreamsRecover { reason, .. }
                if reason.contains("Epoch") || reason.contains("Fenced"))
    });
    assert!(fenced, "the zombie was not fenced by epoch");
}

#[test]
fn at_least_once_zombie_writes_a_stale_count_last_and_under_counts() {
    let s = scenario("p3-alo-zombie-loses-increments.toml");
    let (_, result) = run(&s, 1);
    assert!(
        result.forbidden.contains(&Anomaly::AggregateUnderCount),
        "{:?}",
        result.case_texts(8)
    );
}

#[test]
fn exactly_once_v2_aborts_a_transaction_open_across_a_rebalance() {
    let s = scenario("p3-eos-rebalance-open-txn.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let recovered = count(&outcome, |v| matches!(v, Value::StreamsRecover { .. }));
    assert!(recovered > 0, "no task migration happened");
}

#[test]
fn exactly_once_v2_wipes_a_persistent_store_left_without_checkpoint_by_a_crash() {
    let s = scenario("p3-eos-persistent-store-lost.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let wiped = count(
        &outcome,
        |v| matches!(v, Value::StreamsRestore { store, .. } if store == "persistent-wiped"),
    );
    assert!(wiped > 0, "no corrupted store was wiped");
}

#[test]
fn at_least_once_persistent_store_restores_from_its_checkpoint() {
    let s = scenario("p3-alo-persistent-store.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let from_checkpoint = count(
        &outcome,
        |v| matches!(v, Value::StreamsRestore { store, .. } if store == "persistent+checkpoint"),
    );
    assert!(from_checkpoint > 0, "no store restored from a checkpoint");
}

#[test]
fn exactly_once_v2_counts_exactly_across_coordinator_failover() {
    let s = scenario("p3-eos-coordinator-failover.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let committed = outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::StreamsCommit { .. }));
    assert!(committed.count() > 0);
}

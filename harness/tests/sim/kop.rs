//! The Kafka-on-Pulsar broker flavour (`[cluster] flavour = "kop"`, `eosim_sim::kafka::kop`)
//! under existing pipelines: at-least-once consumers, the transactional copy and the JDBC
//! Connect sink on KoP's pre-2.8 offsets (4096 per entry, 2^44 per ledger), and the
//! transaction-coordinator switch: off, a transactional pipeline stalls with KoP's reason;
//! on, it holds.

use eosim::checker::Validity;
use eosim::history::{OpKind, Value};
use eosim::runner::SeedOutcome;
use eosim::scenario::{FlavourName, Scenario};

use super::support::{catalogue, run_checked};

/// Runs seeds `1..=n` of `s` and asserts each holds (no stall, valid); returns the outcomes.
fn assert_holds(s: &Scenario, n: u64) -> Vec<SeedOutcome> {
    (1..=n)
        .map(|seed| {
            let (outcome, result) = run_checked(s, seed);
            assert_eq!(outcome.stalled, None, "{} seed {seed} stalled", s.name);
            assert_eq!(
                result.validity,
                Validity::Valid,
                "{} seed {seed}: {:?}",
                s.name,
                result.case_texts(8)
            );
            outcome
        })
        .collect()
}

/// Every offset a consumer or copier polled in `outcome`.
fn polled_offsets(outcome: &SeedOutcome) -> Vec<i64> {
    outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok)
        .filter_map(|op| match &op.value {
            Value::Poll { records } => Some(records.iter().map(|r| r.offset).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// `s` on KoP before 2.8 (no index interceptor), its coordinator switched as given.
fn on_kop_pre_index(mut s: Scenario, coordinator: bool) -> Scenario {
    s.cluster.flavour = FlavourName::Kop;
    s.cluster.broker_entry_metadata_interceptors = Some(Vec::new());
    s.cluster.managed_ledger_max_entries_per_ledger = Some(20);
    s.cluster.kafka_transaction_coordinator_enabled = Some(coordinator);
    s
}

#[test]
fn kafka_consume_holds_at_least_once_over_kop_offsets_that_are_4096_apart() {
    let s = catalogue("kop-alo-pre-index-offsets.toml");
    for outcome in assert_holds(&s, 3) {
        let offsets = polled_offsets(&outcome);
        assert!(!offsets.is_empty(), "the consumers polled");
        assert!(
            offsets.iter().any(|&o| o >= 1 << 44),
            "a ledger rolled and the offsets jumped by 2^44"
        );
        assert!(
            outcome.marks.contains_key("kop:entry-gap"),
            "{:?}",
            outcome.marks
        );
        assert!(
            !outcome
                .marks
                .contains_key("kop:transaction-coordinator-disabled"),
            "plain producers and consumers never ask the transaction coordinator"
        );
    }
}

#[test]
fn transactional_copy_with_the_kop_coordinator_disabled_stalls_naming_init_producer_id() {
    let s = catalogue("kop-txn-copy-coordinator-disabled-stalls.toml");
    let (outcome, _) = run_checked(&s, 1);
    let reason = outcome.stalled.as_deref().expect("stalled, never passed");
    assert!(reason.contains("init-producer-id"), "{reason}");
    assert!(
        reason.contains("kafkaTransactionCoordinatorEnabled=false"),
        "{reason}"
    );
    let committed = outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::Txn { .. }))
        .count();
    assert_eq!(committed, 0, "no transaction can start");
}

#[test]
fn transactional_copy_with_the_kop_coordinator_enabled_holds_exactly_once_over_sparse_offsets() {
    let s = catalogue("kop-txn-copy-coordinator-enabled.toml");
    for outcome in assert_holds(&s, 3) {
        assert!(outcome.marks.contains_key("kop:entry-gap"));
        let sink = outcome.history.ops.iter().find_map(|op| match &op.value {
            Value::SinkState { rows } => Some(rows.len()),
            _ => None,
        });
        assert_eq!(sink, Some(100), "every input id once in the output");
    }
}

#[test]
fn connect_jdbc_upsert_holds_exactly_once_on_kop_offsets_under_worker_kills() {
    let s = on_kop_pre_index(catalogue("p2-upsert-worker-crash.toml"), false);
    for outcome in assert_holds(&s, 2) {
        assert!(outcome.marks.contains_key("kop:entry-gap"));
    }
}

#[test]
fn streams_exactly_once_v2_on_kop_with_the_coordinator_disabled_stalls_and_holds_with_it() {
    let off = on_kop_pre_index(catalogue("p3-eos-crash-mid-commit.toml"), false);
    let (outcome, _) = run_checked(&off, 1);
    let reason = outcome.stalled.as_deref().expect("stalled, never passed");
    assert!(
        reason.contains("kafkaTransactionCoordinatorEnabled=false"),
        "{reason}"
    );
    let on = on_kop_pre_index(catalogue("p3-eos-crash-mid-commit.toml"), true);
    assert_holds(&on, 1);
}

//! The `transactional-copy` pipeline: Kafka transactions under faults, and cases.md F8,
//! F9, F10 each holding with its switch off and caught with it on. Each test runs the
//! catalogue's own scenario file, so the catalogue and the tests cannot drift apart.

use eosim::checker::{Anomaly, Validity};
use eosim::history::{OpKind, Value};
use eosim::runner::SeedOutcome;

use super::support::{catalogue as scenario, run_checked as run};

/// Runs seeds `1..=n` and asserts each holds: no stall, valid.
fn assert_holds(file: &str, n: u64) {
    let s = scenario(file);
    for seed in 1..=n {
        let (outcome, result) = run(&s, seed);
        assert_eq!(outcome.stalled, None, "{} seed {seed} stalled", s.name);
        assert_eq!(
            result.validity,
            Validity::Valid,
            "{} seed {seed}: {:?}\nreplay: cargo xtask sim --scenario scenarios/{file} --seed {seed}",
            s.name,
            result.case_texts(8)
        );
    }
}

fn count(outcome: &SeedOutcome, kind: OpKind, pred: fn(&Value) -> bool) -> usize {
    outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == kind && pred(&op.value))
        .count()
}

fn is_txn(value: &Value) -> bool {
    matches!(value, Value::Txn { .. })
}

#[test]
fn transactional_copy_holds_exactly_once_without_faults() {
    let s = scenario("txn-copy-no-faults.toml");
    let (outcome, result) = run(&s, 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    assert!(
        count(&outcome, OpKind::Ok, is_txn) > 0,
        "no transaction committed"
    );
    let sink = outcome.history.ops.iter().find_map(|op| match &op.value {
        Value::SinkState { rows } => Some(rows.len()),
        _ => None,
    });
    assert_eq!(
        sink,
        Some(200),
        "the output's committed view holds every id once"
    );
}

#[test]
fn f9_copier_rewound_after_an_abort_copies_every_input_once() {
    let s = scenario("f9-rewind-on-abort.toml");
    let (outcome, _) = run(&s, 1);
    assert_eq!(
        count(&outcome, OpKind::Fail, is_txn),
        1,
        "the injected abort happened"
    );
    assert_holds("f9-rewind-on-abort.toml", 5);
}

#[test]
fn f9_first_transaction_aborted_before_any_commit_is_redone_from_the_log_start() {
    assert_holds("f9-first-transaction-aborts.toml", 5);
}

#[test]
fn f9_copier_not_rewound_after_an_abort_commits_offsets_past_the_aborted_input() {
    let s = scenario("f9-no-rewind-loses-input.toml");
    for seed in 1..=3 {
        let (_, result) = run(&s, seed);
        assert_eq!(result.validity, Validity::Invalid, "seed {seed} not caught");
        assert!(result.forbidden.contains(&Anomaly::OffsetsForAbortedOutput));
        assert!(result.forbidden.contains(&Anomaly::SinkLost));
    }
}

#[test]
fn zombie_copier_paused_past_its_timeouts_is_fenced() {
    let s = scenario("txn-copy-zombie-pause.toml");
    let mut zombies = 0;
    for seed in 1..=5 {
        let (outcome, result) = run(&s, seed);
        assert_eq!(outcome.stalled, None);
        assert_eq!(
            result.validity,
            Validity::Valid,
            "{:?}",
            result.case_texts(8)
        );
        let ops = &outcome.history.ops;
        let fault = |name: &str| {
            ops.iter()
                .position(|op| matches!(&op.value, Value::Fault { name: n, .. } if n == name))
                .expect("the scenario pauses and resumes copier 0")
        };
        let (paused, resumed) = (fault("pause"), fault("resume"));
        // A zombie: copier 0 was paused holding a polled batch (its last op a poll).
        let last = ops[..paused]
            .iter()
            .rev()
            .find(|op| op.process == "consumer-0");
        if !last.is_some_and(|op| matches!(op.value, Value::Poll { .. })) {
            continue;
        }
        zombies += 1;
        // Its transaction cannot commit once it wakes: the coordinator's timeout abort
        // bumped the epoch, or its generation is gone (KIP-447).
        let first = ops[resumed..]
            .iter()
            .find(|op| op.process == "consumer-0" && op.kind != OpKind::Invoke && is_txn(&op.value))
            .expect("the zombie tried to finish its transaction");
        assert_eq!(first.kind, OpKind::Fail, "seed {seed}: {:?}", first.error);
    }
    assert!(
        zombies > 0,
        "no seed of 1..=5 paused copier 0 mid-transaction"
    );
}

#[test]
fn transactional_copy_survives_crashes_and_partitions() {
    assert_holds("txn-copy-crashes.toml", 3);
}

#[test]
fn transactional_copy_survives_coordinator_failover() {
    assert_holds("txn-copy-coordinator-failover.toml", 2);
}

#[test]
fn transactional_copy_survives_delayed_and_duplicated_requests() {
    assert_holds("txn-copy-messages.toml", 3);
}

/// Seeds `1..=n` of `file` until one is invalid; returns its forbidden anomalies.
fn first_caught(file: &str, n: u64) -> Vec<Anomaly> {
    let s = scenario(file);
    for seed in 1..=n {
        let (_, result) = run(&s, seed);
        if result.validity == Validity::Invalid {
            return result.forbidden;
        }
    }
    panic!("{file}: no seed of 1..={n} was caught");
}

#[test]
fn f8_produce_delayed_past_its_abort_is_rejected_by_partition_verification() {
    assert_holds("f8-delayed-produce-kip890-part1.toml", 3);
}

#[test]
fn f8_produce_delayed_past_its_abort_is_fenced_under_transaction_version_2() {
    assert_holds("f8-delayed-produce-tv2.toml", 3);
}

#[test]
fn f8_produce_delayed_past_its_abort_corrupts_the_output_before_kip_890() {
    let forbidden = first_caught("f8-pre-kip890-late-produce-corrupts-output.toml", 5);
    let known = [
        Anomaly::StuckLso,
        Anomaly::AbortedRead,
        Anomaly::SinkDuplicate,
    ];
    assert!(forbidden.iter().any(|a| known.contains(a)), "{forbidden:?}");
}

#[test]
fn delayed_end_txn_commits_the_next_transaction_early_under_transaction_version_1() {
    let forbidden = first_caught("f8-tv1-late-end-txn-corrupts-next-txn.toml", 5);
    let known = [
        Anomaly::AbortedRead,
        Anomaly::TornTransaction,
        Anomaly::SinkDuplicate,
    ];
    assert!(forbidden.iter().any(|a| known.contains(a)), "{forbidden:?}");
}

#[test]
fn delayed_end_txn_is_fenced_under_transaction_version_2() {
    assert_holds("f8-delayed-end-txn-tv2.toml", 3);
}

#[test]
fn f10_retry_to_a_new_leader_is_deduplicated_by_replicated_producer_state() {
    assert_holds("f10-failover-keeps-producer-state.toml", 3);
}

#[test]
fn f10_retry_to_a_new_leader_without_producer_state_is_appended_twice() {
    let forbidden = first_caught("f10-forgotten-producer-state-duplicates.toml", 5);
    assert!(forbidden.contains(&Anomaly::Duplicate), "{forbidden:?}");
}

//! The Streams processor (pipeline `streams-count`) under faults: what each
//! `processing.guarantee` gives (SPEC P3, models-reference E.5).

use eosim::checker::{Anomaly, CheckResult, Validity};
use eosim::history::{OpKind, Value};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

use super::support::{catalogue as scenario, run_checked};

fn inline(text: &str) -> Scenario {
    Scenario::parse(Path::new("inline.toml"), text).expect("test scenario parses")
}

fn run(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let (outcome, result) = run_checked(s, seed);
    assert_eq!(outcome.stalled, None, "seed {seed} stalled");
    (outcome, result)
}

fn assert_valid(result: &CheckResult, what: &str) {
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{what}: {:?}",
        result.case_texts(8)
    );
}

fn assert_holds(file: &str, seeds: u64) {
    let s = scenario(file);
    for seed in 1..=seeds {
        let (_, result) = run(&s, seed);
        assert_valid(&result, &format!("seed {seed}"));
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

/// One instance under `guarantee`, no faults: `records` input records `interval_ms` apart,
/// committed every `commit_ms`, faults (none) until `until_ms`.
fn single_instance(
    guarantee: &str,
    records: u64,
    interval_ms: u64,
    commit_ms: u64,
    until_ms: u64,
) -> Scenario {
    inline(&format!(
        r#"
        pipeline = "streams-count"
        claim = "exactly-once"
        [workload]
        records = {records}
        produce_interval_ms = {interval_ms}
        [streams]
        instances = 1
        processing_guarantee = "{guarantee}"
        commit_interval_ms = {commit_ms}
        [faults]
        until_ms = {until_ms}
        "#
    ))
}

#[test]
fn a_single_instance_counts_exactly_without_faults_under_both_guarantees() {
    for guarantee in ["at_least_once", "exactly_once_v2"] {
        let s = single_instance(guarantee, 150, 50, 1000, 10_000);
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

/// A commit takes only what processed a record since the last one (`StreamTask.commitNeeded`,
/// `TaskManager.commit`): with input records 500 ms apart and `commit.interval.ms` 100, the
/// idle intervals between them commit nothing, so no commit repeats the offsets of the one
/// before it (under at_least_once it would re-commit them; under exactly_once_v2 it would
/// record an empty commit).
#[test]
fn an_interval_without_a_processed_record_commits_nothing() {
    for guarantee in ["at_least_once", "exactly_once_v2"] {
        let s = single_instance(guarantee, 20, 500, 100, 15_000);
        let (outcome, result) = run(&s, 1);
        assert_valid(&result, guarantee);
        let commits: Vec<&Vec<_>> = (outcome.history.ops.iter())
            .filter(|op| op.kind == OpKind::Ok)
            .filter_map(|op| match &op.value {
                Value::StreamsCommit { offsets, .. } => Some(offsets),
                _ => None,
            })
            .collect();
        assert!(
            commits.len() >= 10,
            "{guarantee}: {} commits",
            commits.len()
        );
        for pair in commits.windows(2) {
            assert_ne!(
                pair[0], pair[1],
                "{guarantee}: a commit repeats the last one"
            );
        }
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
    // Where the pause catches the zombie inside an open transaction (seed 3), its first
    // send after waking is fenced by the epoch the timeout abort bumped; elsewhere its
    // consumer may find its partitions lost first. Every seed must count exactly.
    let s = scenario("p3-eos-zombie-pause.toml");
    let mut fenced_seeds = Vec::new();
    for seed in 1..=3 {
        let (outcome, result) = run(&s, seed);
        assert_valid(&result, &format!("seed {seed}"));
        let fenced = outcome.history.ops.iter().any(|op| {
            op.process == "streams-0"
                && matches!(&op.value, Value::StreamsRecover { reason, .. }
                    if reason.contains("Epoch") || reason.contains("Fenced"))
        });
        if fenced {
            fenced_seeds.push(seed);
        }
    }
    assert!(
        !fenced_seeds.is_empty(),
        "the zombie was never fenced by epoch"
    );
}

#[test]
fn at_least_once_zombie_writes_a_stale_count_last_and_under_counts() {
    let s = scenario("p3-alo-zombie-loses-increments.toml");
    let (_, result) = run(&s, 2);
    assert!(
        result.forbidden.contains(&Anomaly::AggregateUnderCount),
        "{:?}",
        result.case_texts(8)
    );
}

/// How many times instances other than `process` recovered (aborted and reopened their
/// tasks).
fn recoveries_outside(outcome: &SeedOutcome, process: &str) -> usize {
    let ops = outcome
        .history
        .ops
        .iter()
        .filter(|op| op.process != process);
    ops.filter(|op| matches!(op.value, Value::StreamsRecover { .. }))
        .count()
}

/// Runs seeds 1 and 2 of `s`: each valid, no instance but `faulted` ever recovers (aborts
/// and reopens its tasks); the marks both seeds reached.
fn survivors_never_abort(s: &Scenario, faulted: &str) -> std::collections::BTreeSet<String> {
    let mut marks = std::collections::BTreeSet::new();
    for seed in 1..=2 {
        let (outcome, result) = run(s, seed);
        assert_valid(&result, &format!("seed {seed}"));
        let survivors_recovered = recoveries_outside(&outcome, faulted);
        assert_eq!(survivors_recovered, 0, "seed {seed}: a survivor aborted");
        marks.extend(outcome.marks.into_keys());
    }
    marks
}

#[test]
fn exactly_once_v2_commits_a_transaction_open_at_a_revocation_instead_of_aborting_it() {
    // TaskManager.handleRevocation: before rejoining, the open transaction is committed with
    // every task's offsets. Only streams-2 is killed and paused; the others rebalance
    // around it with transactions open and must never abort (the old model's
    // TaskMigrated on every such rebalance), while the paused one loses its partitions.
    let s = scenario("p3-eos-rebalance-open-txn.toml");
    let marks = survivors_never_abort(&s, "streams-2");
    for mark in [
        "streams:revocation-commits-open-txn",
        "streams:suspended-task-resumed",
        "streams:tasks-lost",
    ] {
        assert!(marks.contains(mark), "{mark} not reached: {marks:?}");
    }
    assert!(!marks.contains("streams:task-migrated"), "{marks:?}");
}

#[test]
fn exactly_once_v2_cooperative_rebalances_keep_transactions_of_kept_tasks_open() {
    // KIP-429 under Streams' default protocol: the survivors go on processing while the
    // group rebalances around streams-2, a task that moves is held back by the leader
    // until its owner revoked it, and a transaction of kept tasks goes on into the new
    // generation. Survivors must never abort (a transaction spanning a generation taken
    // for TaskMigrated would), and the eager twin (upgrade.from 2.3) processes nothing
    // during a rebalance.
    let s = scenario("p3-eos-cooperative-rebalance-open-txn.toml");
    assert!(s.streams.cooperative());
    let marks = survivors_never_abort(&s, "streams-2");
    for mark in [
        "streams:cooperative-tasks-held-back",
        "client:cooperative-revoke-partial",
        "streams:processed-during-rebalance",
        "streams:txn-spans-rebalance",
    ] {
        assert!(marks.contains(mark), "{mark} not reached: {marks:?}");
    }
    assert!(
        !marks.contains("streams:suspended-task-resumed"),
        "{marks:?}"
    );
    let eager = scenario("p3-eos-rebalance-open-txn.toml");
    assert!(!eager.streams.cooperative());
    let (outcome, _) = run(&eager, 1);
    assert!(
        !outcome
            .marks
            .contains_key("streams:processed-during-rebalance"),
        "eager processed during a rebalance"
    );
}

#[test]
fn exactly_once_v2_wipes_a_persistent_store_left_without_checkpoint_by_a_crash() {
    let s = scenario("p3-eos-persistent-store-lost.toml");
    let (outcome, result) = run(&s, 1);
    assert_valid(&result, "seed 1");
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
    assert_valid(&result, "seed 1");
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
    assert_valid(&result, "seed 1");
    let committed = outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::StreamsCommit { .. }));
    assert!(committed.count() > 0);
}

/// The restores of one instance's tasks that promoted a standby: (input partition, changelog
/// offset it restored from, records restored).
fn promotions(outcome: &SeedOutcome, process: &str) -> Vec<(u32, i64, usize)> {
    outcome
        .history
        .ops
        .iter()
        .filter(|op| op.process == process)
        .filter_map(|op| match &op.value {
            Value::StreamsRestore {
                tp,
                store,
                from_offset,
                restored,
            } if store == "standby" => Some((tp.partition, *from_offset, *restored)),
            _ => None,
        })
        .collect()
}

#[test]
fn exactly_once_v2_promotes_a_standby_that_restores_only_the_changelog_tail() {
    // A promoted standby restores from its own position, not from 0, and since it read
    // read_committed it carries no record of the killed instance's open transaction: a
    // standby that applied those aborted records would over-count here.
    let s = scenario("p3-eos-standby-promoted.toml");
    for seed in 1..=3 {
        let (outcome, result) = run(&s, seed);
        assert_valid(&result, &format!("seed {seed}"));
        let promoted = promotions(&outcome, "streams-1");
        assert!(!promoted.is_empty(), "seed {seed}: no standby was promoted");
        for (p, from, restored) in promoted {
            assert!(from > 0, "seed {seed}: task {p} restored from 0");
            assert!(
                (restored as i64) < from,
                "seed {seed}: task {p} replayed {restored} records past {from}"
            );
        }
    }
}

#[test]
fn at_least_once_promotes_a_standby_and_never_under_counts() {
    let s = scenario("p3-alo-standby-promoted.toml");
    let (outcome, result) = run(&s, 1);
    assert_valid(&result, "seed 1");
    assert!(!result.anomalies.contains_key(&Anomaly::AggregateUnderCount));
    let promoted = promotions(&outcome, "streams-1");
    assert!(
        promoted.iter().any(|(_, from, _)| *from > 0),
        "{promoted:?}"
    );
}

/// The input partitions `process` opened active tasks for after `after_ns`.
fn opened_after(outcome: &SeedOutcome, process: &str, after_ns: u64) -> Vec<u32> {
    outcome
        .history
        .ops
        .iter()
        .filter(|op| op.process == process && op.time_ns > after_ns)
        .filter_map(|op| match &op.value {
            Value::StreamsRestore { tp, .. } => Some(tp.partition),
            _ => None,
        })
        .collect()
}

#[test]
fn a_restarted_instance_behind_acceptable_recovery_lag_gets_warm_ups_not_actives() {
    // streams-0 dies; streams-1 promotes its standbys and runs every task. streams-0 comes
    // back empty: with acceptable.recovery.lag = 20 it is not caught up on any task, so the
    // assignment keeps every active on streams-1 (which runs them) and gives streams-0
    // standbys and warm-ups; with the default 10000 it is caught up and gets a share.
    let text = |lag: u64| {
        format!(
            r#"
            pipeline = "streams-count"
            claim = "exactly-once"
            [topic]
            partitions = 3
            [workload]
            records = 300
            produce_interval_ms = 50
            session_timeout_ms = 6000
            [streams]
            instances = 2
            processing_guarantee = "exactly_once_v2"
            num_standby_replicas = 1
            acceptable_recovery_lag = {lag}
            [faults]
            until_ms = 30000
            [[faults.schedule]]
            at_ms = 5000
            fault = "kill"
            target = ["streams-0"]
            [[faults.schedule]]
            at_ms = 16000
            fault = "restart"
            target = ["streams-0"]
            "#
        )
    };
    let restart_ns = 16_000_000_000;
    let (outcome, result) = run(&inline(&text(20)), 1);
    assert_valid(&result, "seed 1");
    assert_eq!(
        opened_after(&outcome, "streams-0", restart_ns),
        Vec::<u32>::new()
    );
    assert!(!promotions(&outcome, "streams-1").is_empty());
    let (outcome, result) = run(&inline(&text(10_000)), 1);
    assert_valid(&result, "seed 1");
    assert!(!opened_after(&outcome, "streams-0", restart_ns).is_empty());
}

#[test]
fn exactly_once_v2_in_memory_restart_gets_a_new_transactional_id_and_the_dead_txn_times_out() {
    // Seeds 1..=3 of each file: every seed holds; the abort is seen in some seed (a seed
    // whose kill falls between two transactions leaves nothing to abort).
    let marks = |file: &str| {
        let s = scenario(file);
        let mut hit = std::collections::BTreeSet::new();
        for seed in 1..=3 {
            let (outcome, result) = run(&s, seed);
            assert_valid(&result, &format!("{file} seed {seed}"));
            hit.extend(outcome.marks.into_keys());
        }
        hit
    };
    // A fresh process id per start: the restart does not fence the dead transaction, the
    // coordinator aborts it after transaction.timeout.ms.
    let hit = marks("p3-eos-crash-in-memory-txn-timeout.toml");
    assert!(hit.contains("streams:process-id-fresh"));
    assert!(!hit.contains("streams:process-id-from-state-dir"));
    assert!(hit.contains("kafka:txn-timed-out-aborted"), "{hit:?}");
    assert!(!hit.contains("kafka:txn-fenced-by-init-aborted"), "{hit:?}");
    // The process id survives in the state directory: the restart fences by InitProducerId.
    let hit = marks("p3-eos-crash-persistent-store-fences-by-init.toml");
    assert!(hit.contains("streams:process-id-from-state-dir"));
    assert!(hit.contains("kafka:txn-fenced-by-init-aborted"), "{hit:?}");
}

//! KIP-848's consumer rebalance protocol end to end: catalogue files whose groups run
//! `group.protocol = consumer` hold, with the marks of the paths they rest on, and the
//! KAFKA-16147 field pair tells the pre-fix coordinator from the fixed one on the same seed.

use super::support::{catalogue, run_checked, run_holding};
use eosim::checker::{Anomaly, Validity};
use eosim::runner::SeedOutcome;

/// Every mark of `marks` was hit in `outcome`.
fn assert_marks(outcome: &SeedOutcome, marks: &[&str]) {
    for mark in marks {
        let hit = outcome.marks.contains_key(*mark);
        assert!(hit, "{mark} not hit: {:?}", outcome.marks);
    }
}

/// Kills and restarts in a consumer-protocol sink group: the coordinator fences the dead
/// member, the survivors revoke before the newcomer is given anything, and at-least-once
/// holds.
#[test]
fn a_consumer_protocol_sink_group_revokes_before_reassigning_and_holds_under_restarts() {
    let (outcome, _) = run_holding("alo-kip848-consumer-restarts.toml", 1);
    assert_marks(
        &outcome,
        &[
            "kafka:kip848-member-fenced-session-timeout",
            "kafka:kip848-revocation-requested",
            "kafka:kip848-revocation-acknowledged",
            "kafka:kip848-partitions-withheld-unreleased",
            "client:kip848-reconcile-revoke",
            "client:kip848-reconcile-assign",
        ],
    );
    let classic = outcome
        .marks
        .keys()
        .filter(|m| m.starts_with("kafka:rebalance"));
    assert_eq!(
        classic.count(),
        0,
        "no classic rebalance in a consumer-protocol group"
    );
}

/// Connect sink tasks on the consumer protocol: a revocation is handed to the task, which
/// commits before the member acknowledges; the upsert table ends exact.
#[test]
fn connect_sink_tasks_on_the_consumer_protocol_commit_what_they_revoke_and_hold() {
    let (outcome, _) = run_holding("p2-upsert-worker-crash-kip848.toml", 1);
    assert_marks(
        &outcome,
        &[
            "connect:partitions-revoked-committed",
            "client:kip848-reconcile-revoke",
        ],
    );
}

/// KAFKA-16147: the same seed of the same churn duplicates copies on the pre-fix
/// coordinator (a partition owned by two copiers at once) and holds on the fixed one.
#[test]
fn the_pre_kafka_16147_coordinator_gives_a_partition_to_two_copiers_and_the_fix_does_not() {
    let bug = catalogue("field/kafka-kip848-pre-kafka-16147-two-owners-duplicates.toml");
    let (outcome, result) = run_checked(&bug, 1);
    assert_eq!(
        result.validity,
        Validity::Invalid,
        "{:?}",
        result.case_texts(4)
    );
    assert!(result.anomalies.contains_key(&Anomaly::SinkDuplicate));
    assert!(outcome
        .marks
        .contains_key("kafka:kip848-partition-assigned-to-two-members"));
    let (outcome, _) = run_holding("field/kafka-kip848-kafka-16147-one-owner.toml", 1);
    assert!(outcome
        .marks
        .contains_key("kafka:kip848-pending-partition-given-back"));
    assert!(!outcome
        .marks
        .contains_key("kafka:kip848-partition-assigned-to-two-members"));
}

/// A seed's history does not depend on what ran before it in the process: two runs of
/// seed 1000 of the KAFKA-16147 file hash the same. The consumer protocol's heartbeat loop
/// once `select!`ed without `biased`, and tokio then picks the first branch to poll with a
/// thread-local RNG seeded from a process-wide counter: this seed's two runs differed
/// (replay in a fresh process gave the first run's history, a catalogue run whichever its
/// thread drew).
#[test]
fn a_consumer_protocol_seed_replays_the_same_whatever_ran_before_it() {
    let s = catalogue("field/kafka-kip848-pre-kafka-16147-two-owners-duplicates.toml");
    let first = eosim::runner::run_seed(&s, 1000).history.hash();
    let second = eosim::runner::run_seed(&s, 1000).history.hash();
    assert_eq!(first, second);
}

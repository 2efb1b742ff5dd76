//! Coverage marks fire on the branches they name: each test runs a catalogue scenario that
//! drives a component down its rare branches (a 23505 replay, a DLQ write, a fenced
//! instance, a standby promotion) and asserts the marks of those branches were hit.

use eosim::runner::run_seed;
use std::collections::BTreeMap;

use super::support::catalogue;

/// Runs seeds `1..=seeds` of `scenarios/<file>` (none may crash) and asserts every mark
/// in `marks` was hit in at least one of them.
fn assert_reached(file: &str, seeds: u64, marks: &[&str]) {
    let s = catalogue(file);
    let mut hit: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 1..=seeds {
        let outcome = run_seed(&s, seed);
        assert_eq!(outcome.crashed, None, "{file} seed {seed} crashed");
        for (mark, n) in outcome.marks {
            *hit.entry(mark).or_default() += n;
        }
    }
    for mark in marks {
        assert!(
            hit.contains_key(*mark),
            "{file}: {mark} not hit in seeds 1..={seeds}: {hit:?}"
        );
    }
}

#[test]
fn an_insert_mode_replay_marks_23505_the_rollback_the_retries_and_the_failed_task() {
    assert_reached(
        "f3-insert-crash-between-commit-and-offset-flush.toml",
        1,
        &[
            "postgres:unique-violation",
            "postgres:rollback",
            "jdbc:unique-violation-23505",
            "jdbc:batch-rolled-back",
            "jdbc:batch-retry",
            "jdbc:retries-exhausted",
            "connect:put-retry",
            "connect:task-failed",
        ],
    );
}

#[test]
fn poison_records_under_tolerance_all_mark_the_dlq_write_and_the_tolerated_error() {
    assert_reached(
        "f4-poison-tolerance-all.toml",
        1,
        &[
            "connect:converter-error-tolerated",
            "connect:dlq-write",
            "jdbc:data-error-record-reported",
        ],
    );
}

#[test]
fn a_database_crash_marks_the_ambiguous_commit_and_the_connection_reset() {
    assert_reached(
        "p2-upsert-database-crash.toml",
        3,
        &[
            "jdbc:ambiguous-commit-timeout",
            "jdbc:batch-retry",
            "net:connection-reset",
        ],
    );
}

/// A cut holds what crosses it (TCP): the JDBC workers' batches sent into the partitions
/// cross at a retransmission after the heal, after their calls timed out (ambiguous) and
/// were retried; the final table is still exact (the scenario's claim).
#[test]
fn a_partition_holds_requests_until_a_retransmission_after_the_heal() {
    assert_reached(
        "p2-upsert-partition-worker-database.toml",
        1,
        &[
            "net:held-packet-retransmitted-after-heal",
            "jdbc:ambiguous-commit-timeout",
            "jdbc:batch-retry",
        ],
    );
}

#[test]
fn a_paused_consumer_marks_session_expiry_revocation_and_its_fencing() {
    assert_reached(
        "alo-pause-longer-than-session.toml",
        1,
        &[
            "kafka:session-expired",
            "kafka:rebalance",
            "client:consumer-partitions-revoked",
            "client:consumer-member-fenced",
        ],
    );
}

/// KIP-429 in the sink group: a restarted consumer's rejoin makes the survivors revoke only
/// the partitions that move and rejoin for the hand-over, while they keep polling; no
/// rebalance revokes a survivor's whole assignment, as every eager one does.
#[test]
fn a_cooperative_group_revokes_only_what_moves_and_keeps_polling() {
    let file = "alo-cooperative-sticky-consumer-restarts.toml";
    assert_reached(
        file,
        1,
        &[
            "client:cooperative-revoke-partial",
            "client:cooperative-second-rejoin",
            "client:cooperative-poll-during-rebalance",
        ],
    );
    let outcome = run_seed(&catalogue(file), 1);
    let eager = outcome.marks.get("client:consumer-partitions-revoked");
    assert_eq!(eager, None, "a cooperative member gave up everything");
}

#[test]
fn leader_kills_mark_the_leader_change_and_the_producer_retry() {
    assert_reached(
        "alo-acks-all-leader-failover.toml",
        1,
        &[
            "kafka:leader-change",
            "kafka:isr-shrink",
            "kafka:produce-not-leader",
            "client:producer-retry",
        ],
    );
}

#[test]
fn an_injected_abort_marks_the_client_abort_and_the_copier_rewind() {
    assert_reached(
        "f9-rewind-on-abort.toml",
        1,
        &["client:txn-abort", "copy:rewind-after-abort"],
    );
}

#[test]
fn a_killed_active_marks_the_standby_promotion() {
    assert_reached(
        "p3-eos-standby-promoted.toml",
        2,
        &[
            "streams:standby-promoted",
            "streams:restore-replayed-records",
        ],
    );
}

#[test]
fn a_zombie_streams_instance_marks_its_fencing_and_the_timeout_abort() {
    assert_reached(
        "p3-eos-zombie-pause.toml",
        3,
        &[
            "kafka:txn-timed-out-aborted",
            "client:txn-producer-fenced",
            "streams:producer-fenced",
            "streams:producer-recreated",
        ],
    );
}

#[test]
fn keeper_down_marks_keeper_unavailable_and_a_token_retry_marks_the_dedup_hit() {
    assert_reached(
        "p1-keeper-unavailable-seed-token.toml",
        3,
        &[
            "clickhouse:keeper-unavailable",
            "clickhouse:dedup-hit",
            "connect:put-retry",
        ],
    );
}

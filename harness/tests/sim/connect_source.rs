//! The `connect-source` pipeline: a Debezium source task on a Connect worker killed
//! between two offset flushes. At least once, exactly the change events sent after the
//! last flush are in the topic twice; under KIP-618 every event is there once.

use super::support::{catalogue, run_checked, run_valid};
use eosim::checker::{Anomaly, Validity};
use eosim::history::{History, OpKind, Value};
use eosim::scenario::Scenario;
use eosim_sim::source_db::LogPosition;
use std::collections::{BTreeMap, BTreeSet};

const ALO: &str = "field/connect-source-at-least-once-worker-crash-duplicates.toml";
const EOS: &str = "field/connect-source-kip618-exactly-once-worker-crash.toml";

/// Index of the first `kill` fault of the history.
fn kill_index(h: &History) -> usize {
    let kill = h.ops.iter().find(|op| {
        op.process == "nemesis" && matches!(&op.value, Value::Fault { name, .. } if name == "kill")
    });
    kill.expect("the schedule kills connect-1").index
}

/// The position the last `source-offsets` flush completed before op `before` stored.
fn last_flushed(h: &History, before: usize) -> LogPosition {
    let flush = h.ops[..before]
        .iter()
        .rev()
        .find_map(|op| match (&op.kind, &op.value) {
            (OpKind::Ok, Value::SourceOffsets { offsets, .. }) => Some(offsets.clone()),
            _ => None,
        });
    let offsets = flush.expect("a flush before the kill");
    let offset: serde_json::Value = serde_json::from_str(&offsets[0].1).expect("JSON offset");
    eosim::connect::postgres_source::position_of(&offset).expect("a position")
}

/// Each change event's position, from the final `ChangeLog`.
fn positions(h: &History) -> BTreeMap<u64, LogPosition> {
    let events = h.ops.iter().rev().find_map(|op| match &op.value {
        Value::ChangeLog { events } => Some(events.clone()),
        _ => None,
    });
    let events = events.expect("a final change log");
    events.into_iter().map(|e| (e.id, e.position)).collect()
}

/// The ids whose `send` completed with `kind` (or was invoked, for `Invoke`) before op
/// `before`.
fn sent_before(h: &History, before: usize, kind: OpKind) -> BTreeSet<u64> {
    let sends = h.ops[..before].iter().filter(|op| op.kind == kind);
    sends
        .filter_map(|op| match &op.value {
            Value::Send { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_crash_between_offset_flushes_duplicates_what_was_sent_since_the_last_flush() {
    let s = catalogue(ALO);
    for seed in 1..=3 {
        let (outcome, result) = run_checked(&s, seed);
        assert_eq!(result.validity, Validity::Invalid, "seed {seed}");
        let h = &outcome.history;
        let kill = kill_index(h);
        let flushed = last_flushed(h, kill);
        let at = positions(h);
        let after_flush = |ids: BTreeSet<u64>| -> BTreeSet<u64> {
            ids.into_iter().filter(|id| at[id] > flushed).collect()
        };
        let acked = after_flush(sent_before(h, kill, OpKind::Ok));
        let invoked = after_flush(sent_before(h, kill, OpKind::Invoke));
        let duplicated: BTreeSet<u64> = result.anomalies[&Anomaly::SinkDuplicate]
            .iter()
            .flat_map(|c| c.ids.iter().copied())
            .collect();
        assert!(
            !acked.is_empty(),
            "seed {seed}: sends between the flush and the kill"
        );
        assert!(
            acked.is_subset(&duplicated),
            "seed {seed}: {acked:?} ⊄ {duplicated:?}"
        );
        assert!(
            duplicated.is_subset(&invoked),
            "seed {seed}: {duplicated:?}"
        );
        assert!(
            invoked.len() - acked.len() <= 1,
            "one send at most in flight"
        );
        assert_eq!(
            result.counts["source-duplicate-records"],
            duplicated.len() as u64
        );
        assert_eq!(
            result.counts["source-lost-events"], 0,
            "at least once loses nothing"
        );
        assert!(outcome.marks.contains_key("connect:source-offsets-flushed"));
        assert!(outcome
            .marks
            .contains_key("connect:source-task-resumed-from-offset"));
    }
}

#[test]
fn kip618_under_the_same_crash_has_no_duplicate_and_no_loss() {
    let s = catalogue(EOS);
    for seed in 1..=3 {
        let (outcome, result) = run_valid(&s, seed);
        assert_eq!(result.counts["source-events"], 300);
        assert_eq!(result.counts["source-topic-records"], 300);
        assert_eq!(result.counts["source-duplicate-records"], 0);
        assert_eq!(result.counts["source-lost-events"], 0);
        assert!(!result.anomalies.contains_key(&Anomaly::TornTransaction));
        for mark in [
            "connect:source-transaction-committed",
            "connect:source-task-resumed-from-offset",
        ] {
            assert!(outcome.marks.contains_key(mark), "seed {seed}: {mark}");
        }
    }
}

#[test]
fn an_interval_transaction_boundary_holds_under_the_same_crash() {
    let mut s: Scenario = catalogue(EOS);
    s.connector
        .insert("transaction.boundary".into(), "interval".into());
    s.connector
        .insert("transaction.boundary.interval.ms".into(), "1000".into());
    let (outcome, result) = run_checked(&s, 1);
    assert_eq!(result.validity, Validity::Valid, "{result:?}");
    assert_eq!(result.counts["source-duplicate-records"], 0);
    assert_eq!(result.counts["source-lost-events"], 0);
    let txns = outcome
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::Txn { .. }));
    let poll = run_checked(&catalogue(EOS), 1)
        .0
        .history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::Txn { .. }))
        .count();
    assert!(
        txns.count() < poll,
        "one transaction a second, fewer than one per poll"
    );
}

#[test]
fn at_least_once_without_a_crash_emits_each_event_once() {
    let mut s: Scenario = catalogue(ALO);
    s.faults.schedule.clear();
    s.check.expect = None;
    let (_, result) = run_checked(&s, 1);
    assert_eq!(result.validity, Validity::Valid, "{result:?}");
    assert_eq!(result.counts["source-topic-records"], 300);
}

/// A task that fails (the `task-crash` fault point after a batch) is not a process crash:
/// at least once it still flushes what was acknowledged (`finalOffsetCommit`), so the
/// operator's restart re-emits nothing; under KIP-618 its open transaction is aborted.
#[test]
fn injected_task_failures_restarted_by_the_operator_lose_and_duplicate_nothing() {
    for file in [ALO, EOS] {
        let mut s: Scenario = catalogue(file);
        s.faults.schedule.clear();
        s.check.expect = None;
        s.connect.task_crash_probability = 0.3;
        s.connect.restart_failed_after_ms = 1_000;
        let (outcome, result) = run_valid(&s, 1);
        assert_eq!(result.counts["source-duplicate-records"], 0, "{file}");
        assert!(outcome.marks.contains_key("connect:task-failed"), "{file}");
        assert!(
            outcome.marks.contains_key("connect:task-restarted"),
            "{file}"
        );
    }
}

//! The Streams record cache (`statestore.cache.max.bytes`, `eosim::streams::cache`): what it
//! forwards, when, and that the checkers still judge each guarantee correctly with it.

use eosim::checker::{Anomaly, CheckResult};
use eosim::history::Value;
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

use super::support::{catalogue, run_checked, run_valid};

/// Input records of [`single_instance`].
const RECORDS: usize = 300;
/// Keys of [`single_instance`].
const KEYS: usize = 3;

/// One instance counting 300 records over 3 keys (unwindowed, so each key's updates can
/// collapse for the whole run), produced every 20 ms (6 s), committing every 5 s, with
/// the record cache given in bytes.
fn single_instance(guarantee: &str, cache_max_bytes: u64) -> Scenario {
    let text = format!(
        r#"
        pipeline = "streams-count"
        claim = "exactly-once"
        [workload]
        records = {RECORDS}
        keys = {KEYS}
        produce_interval_ms = 20
        [streams]
        instances = 1
        processing_guarantee = "{guarantee}"
        commit_interval_ms = 5000
        window_size_ms = 0
        "statestore.cache.max.bytes" = {cache_max_bytes}
        [faults]
        until_ms = 10000
        "#
    );
    Scenario::parse(Path::new("inline.toml"), &text).expect("test scenario parses")
}

/// The committed output updates of the run (`streams-updates`).
fn updates(result: &CheckResult) -> u64 {
    result.counts["streams-updates"]
}

/// The records (output and changelog) each commit of the run sent, in order.
fn records_per_commit(outcome: &SeedOutcome) -> Vec<usize> {
    let commits = outcome.history.ops.iter().filter_map(|op| match &op.value {
        Value::StreamsCommit { records, .. } if op.kind == eosim::history::OpKind::Invoke => {
            Some(*records)
        }
        _ => None,
    });
    commits.collect()
}

#[test]
fn a_large_cache_forwards_each_key_once_per_commit_under_both_guarantees() {
    for guarantee in ["at_least_once", "exactly_once_v2"] {
        let s = single_instance(guarantee, 10_485_760);
        let (outcome, result) = run_valid(&s, 1);
        assert_eq!(result.counts["streams-consumed-inputs"], RECORDS as u64);
        // Nothing is evicted from 10 MiB: every update leaves at a commit's flush, one
        // per dirty key (an output and a changelog record each).
        let per_commit = records_per_commit(&outcome);
        assert!(!per_commit.is_empty(), "{guarantee}: no commit");
        assert!(
            per_commit.iter().all(|r| *r <= 2 * KEYS),
            "{guarantee}: a commit sent more than one update per key: {per_commit:?}"
        );
        let sent: usize = per_commit.iter().sum();
        assert_eq!(sent as u64, 2 * updates(&result), "{guarantee}");
        assert!(
            updates(&result) <= (KEYS * per_commit.len()) as u64 && updates(&result) < 20,
            "{guarantee}: {} updates for {RECORDS} inputs over {} commits",
            updates(&result),
            per_commit.len()
        );
        assert!(outcome
            .marks
            .contains_key("streams:cache-flushed-on-commit"));
        assert!(!outcome.marks.contains_key("streams:cache-evicted-dirty"));
    }
}

#[test]
fn a_zero_cache_forwards_every_update_as_it_happens_and_records_no_cache() {
    let s = single_instance("exactly_once_v2", 0);
    let (outcome, result) = run_valid(&s, 1);
    // One update per input, counted 1, 2, ..., n per key (aggregate-sequence holds under
    // its strict rule, which a history without a cache is judged by).
    assert_eq!(updates(&result), RECORDS as u64);
    let window = outcome.history.ops.iter().find_map(|op| match &op.value {
        Value::StreamsWindow {
            cache_max_bytes, ..
        } => Some(*cache_max_bytes),
        _ => None,
    });
    assert_eq!(window, Some(None), "the history reads as before the cache");
    let jsonl = outcome.history.to_jsonl();
    assert!(!jsonl.contains("cache_max_bytes"), "no cache field at 0");
    assert!(!outcome
        .marks
        .contains_key("streams:cache-flushed-on-commit"));
}

#[test]
fn a_cache_smaller_than_the_keys_evicts_and_forwards_between_commits() {
    // 40 windowed keys of about 90 bytes each against 1 KiB (11 entries): the LRU entry is
    // evicted on most puts, and a dirty eviction flushes the whole cache.
    let mut s = single_instance("exactly_once_v2", 1_024);
    s.workload.keys = 40;
    s.streams.window_size_ms = 5_000;
    let (outcome, result) = run_valid(&s, 1);
    assert!(outcome.marks.contains_key("streams:cache-evicted-dirty"));
    let per_commit = records_per_commit(&outcome);
    assert!(
        per_commit.iter().any(|r| *r > 2 * 40),
        "evictions send between commits: {per_commit:?}"
    );
    // Evicting a dirty entry flushes the whole task cache (NamedCache.flush(evicted)), so
    // a cache thrashing over 40 keys forwards almost every update, as without a cache.
    let n = updates(&result);
    assert!(
        n > (RECORDS / 2) as u64 && n <= RECORDS as u64,
        "{n} updates"
    );
}

#[test]
fn exactly_once_v2_with_the_default_cache_counts_exactly_despite_crashes() {
    let s = catalogue("p3-eos-cache-crash.toml");
    assert_eq!(s.streams.cache_max_bytes(), 10_485_760, "Kafka's default");
    for seed in 1..=2 {
        let (outcome, _) = run_valid(&s, seed);
        assert!(outcome
            .marks
            .contains_key("streams:cache-flushed-on-commit"));
        assert!(outcome
            .marks
            .contains_key("streams:restore-replayed-records"));
    }
}

#[test]
fn at_least_once_with_an_evicting_cache_still_over_counts_after_crashes() {
    let s = catalogue("p3-alo-cache-evicts-crash-duplicates-increments.toml");
    let (outcome, result) = run_checked(&s, 1);
    assert!(outcome.marks.contains_key("streams:cache-evicted-dirty"));
    assert!(
        result.forbidden.contains(&Anomaly::AggregateOverCount),
        "{:?}",
        result.case_texts(8)
    );
    // Replaying the seed reproduces the history bit for bit.
    assert_eq!(outcome.history.hash(), run_seed(&s, 1).history.hash());
}

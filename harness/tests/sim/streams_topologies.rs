//! The Streams topologies other than the count (`streams.topology`): the stateless
//! `filter-map-values`, the id-assigning `aggregate-ids` and the `stream-table-join`, each
//! under exactly_once_v2 (holds) and at_least_once (the anomalies its replays cause) with
//! instance crashes.

use eosim::checker::{check_all, Anomaly, CheckOptions, Claim, Validity};
use eosim::cli::aggregate::check_options;
use eosim::history::{StreamsRecord, Value};
use eosim::runner::SeedOutcome;
use eosim::scenario::Scenario;
use eosim::streams::join::parse_joined;
use eosim::streams::stateless::{map_value, output_id, passes_filter};
use eosim_sim::effects::kind;
use std::collections::{BTreeMap, BTreeSet};

use super::support::{catalogue, run_checked, run_valid};

const STATELESS_EOS: &str = "p3-filter-map-values-eos-crash.toml";
const STATELESS_ALO: &str = "p3-filter-map-values-alo-crash-duplicates.toml";
const IDS_EOS: &str = "p3-aggregate-ids-eos-kill-swarm.toml";
const IDS_ALO: &str = "p3-aggregate-ids-alo-kill-swarm-corrupts-ids.toml";
const JOIN_EOS: &str = "p3-stream-table-join-eos-crash.toml";
const JOIN_ALO: &str = "p3-stream-table-join-alo-crash-duplicates.toml";
const JOIN_NO_WAIT: &str = "p3-stream-table-join-idle-disabled-corrupts-joins.toml";
const JOIN_WAIT: &str = "p3-stream-table-join-idle-waits.toml";

/// Every output record the drain read (`streams-records`).
fn output(outcome: &SeedOutcome) -> Vec<StreamsRecord> {
    let ops = outcome.history.ops.iter();
    ops.filter_map(|op| match &op.value {
        Value::StreamsRecords { records, .. } => Some(records.clone()),
        _ => None,
    })
    .flatten()
    .collect()
}

/// The input values by id (`streams-input`, rebuilt as the producers wrote them).
fn input_values(outcome: &SeedOutcome) -> BTreeMap<u64, String> {
    let mut values = BTreeMap::new();
    for op in &outcome.history.ops {
        if let Value::StreamsInput { records, .. } = &op.value {
            for r in records {
                values.insert(r.id, format!("{},{}", r.id, r.timestamp_ms));
            }
        }
    }
    values
}

#[test]
fn exactly_once_v2_writes_each_kept_record_once_mapped_despite_crashes() {
    let s = catalogue(STATELESS_EOS);
    let (outcome, result) = run_valid(&s, 1);
    assert_eq!(
        outcome.acted.get(kind::KILL),
        Some(&2),
        "both instances were killed"
    );
    assert!(outcome
        .marks
        .contains_key("streams:offsets-only-transaction"));
    let inputs = input_values(&outcome);
    assert_eq!(inputs.len(), 400);
    let kept: BTreeSet<u64> = (inputs.iter())
        .filter(|(_, v)| passes_filter(v))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(kept.len(), 266, "ids 0..400 not multiples of 3");
    let records = output(&outcome);
    let ids: Vec<u64> = records.iter().filter_map(|r| output_id(&r.value)).collect();
    assert_eq!(ids.len(), records.len(), "every output value names its id");
    assert_eq!(ids.iter().copied().collect::<BTreeSet<_>>(), kept);
    assert_eq!(ids.len(), kept.len(), "no kept record twice");
    for r in &records {
        let id = output_id(&r.value).expect("parsed above");
        assert_eq!(r.value, map_value(&inputs[&id]), "mapped as mapValues says");
    }
    assert_eq!(result.counts["streams-output-records"], 266);
}

#[test]
fn at_least_once_writes_kept_records_twice_after_a_crash_and_never_a_dropped_one() {
    let s = catalogue(STATELESS_ALO);
    let (outcome, result) = run_checked(&s, 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.forbidden, vec![Anomaly::SinkDuplicate]);
    let records = output(&outcome);
    let mut copies: BTreeMap<u64, u32> = BTreeMap::new();
    for r in &records {
        *copies
            .entry(output_id(&r.value).expect("an id"))
            .or_default() += 1;
    }
    assert_eq!(copies.len(), 266, "every kept id is there, none dropped");
    assert!(copies.keys().all(|id| id % 3 != 0));
    assert!(
        copies.values().any(|n| *n > 1),
        "a crash re-sent kept records"
    );
    assert_duplicates_allowed_at_least_once(&s, &outcome);
}

/// The history of `s` judged at least once: valid, its duplicates reported and allowed.
fn assert_duplicates_allowed_at_least_once(s: &Scenario, outcome: &SeedOutcome) {
    let options = CheckOptions {
        claim: Claim::AtLeastOnce,
        ..check_options(s)
    };
    let result = check_all(&outcome.history, &options);
    let cases = result.case_texts(4);
    assert_eq!(result.validity, Validity::Valid, "{cases:?}");
    assert!(result.anomalies.contains_key(&Anomaly::SinkDuplicate));
}

/// Each output key's ids and each id's keys.
fn ids_and_keys(
    records: &[StreamsRecord],
) -> (
    BTreeMap<String, BTreeSet<u64>>,
    BTreeMap<u64, BTreeSet<String>>,
) {
    let (mut by_key, mut by_id) = (BTreeMap::new(), BTreeMap::new());
    for r in records {
        let id: u64 = r.value.parse().expect("an id");
        by_key
            .entry(r.key.clone())
            .or_insert_with(BTreeSet::new)
            .insert(id);
        by_id
            .entry(id)
            .or_insert_with(BTreeSet::new)
            .insert(r.key.clone());
    }
    (by_key, by_id)
}

#[test]
fn exactly_once_v2_gives_each_key_one_id_of_its_task_under_a_kill_swarm() {
    let s = catalogue(IDS_EOS);
    for seed in 1..=2 {
        let (outcome, _) = run_valid(&s, seed);
        assert!(outcome
            .marks
            .contains_key("streams:restore-replayed-records"));
        let (by_key, by_id) = ids_and_keys(&output(&outcome));
        assert_eq!(by_key.len(), 200, "seed {seed}: every key has an id");
        assert!(by_key.values().all(|ids| ids.len() == 1), "seed {seed}");
        assert!(by_id.values().all(|keys| keys.len() == 1), "seed {seed}");
        // Task p of 3 hands out p, p + 3, ...: the ids of one task share a residue.
        let residues: BTreeSet<u64> = by_id.keys().map(|id| id % 3).collect();
        assert_eq!(residues.len(), 3, "seed {seed}: every task handed out ids");
    }
}

#[test]
fn at_least_once_reuses_ids_and_re_assigns_keys_after_a_torn_flush() {
    let s = catalogue(IDS_ALO);
    // Seed 3: the file's first seed with both anomalies (its regression seed).
    let (outcome, result) = run_checked(&s, 3);
    assert_eq!(outcome.stalled, None);
    assert_eq!(
        result.forbidden,
        vec![Anomaly::IdReassigned, Anomaly::IdReused]
    );
    let (by_key, by_id) = ids_and_keys(&output(&outcome));
    assert!(
        by_key.values().any(|ids| ids.len() > 1),
        "a key with two ids"
    );
    assert!(
        by_id.values().any(|keys| keys.len() > 1),
        "an id of two keys"
    );
    assert!(
        !result.anomalies.contains_key(&Anomaly::MissingAggregate),
        "at least once loses no key"
    );
}

/// The committed table updates the drain read (`streams-table`): key by version.
fn table_keys(outcome: &SeedOutcome) -> BTreeMap<u64, String> {
    let ops = outcome.history.ops.iter();
    ops.filter_map(|op| match &op.value {
        Value::StreamsTable { records, .. } => Some(records.clone()),
        _ => None,
    })
    .flatten()
    .map(|r| (r.id, r.key))
    .collect()
}

/// Each output's stream id, with the number of outputs naming it.
fn joined_copies(records: &[StreamsRecord]) -> BTreeMap<u64, u32> {
    let mut copies = BTreeMap::new();
    for r in records {
        let (id, _) = parse_joined(&r.value).expect("<stream id>,<version>");
        *copies.entry(id).or_default() += 1;
    }
    copies
}

#[test]
fn exactly_once_v2_joins_each_stream_record_once_with_a_committed_version_of_its_key() {
    let s = catalogue(JOIN_EOS);
    let (outcome, result) = run_valid(&s, 1);
    assert_eq!(outcome.acted.get(kind::KILL), Some(&2), "both killed");
    for mark in ["streams:joined", "streams:table-txn-aborted"] {
        assert!(outcome.marks.contains_key(mark), "{mark}");
    }
    let table = table_keys(&outcome);
    // 150 updates in transactions of 5, every third aborted: 10 of 30 transactions.
    assert_eq!(table.len(), 100, "the committed versions");
    let records = output(&outcome);
    assert!(
        records.len() > 300,
        "most stream records joined: {}",
        records.len()
    );
    for r in &records {
        let (_, version) = parse_joined(&r.value).expect("parsed");
        assert_eq!(
            table.get(&version),
            Some(&r.key),
            "{r:?}: a committed version"
        );
    }
    let copies = joined_copies(&records);
    assert!(copies.values().all(|n| *n == 1), "no stream record twice");
    assert_eq!(
        result.counts["streams-output-records"],
        records.len() as u64
    );
}

#[test]
fn at_least_once_joins_stream_records_twice_after_a_crash_and_only_written_versions() {
    let s = catalogue(JOIN_ALO);
    let (outcome, result) = run_checked(&s, 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(result.forbidden, vec![Anomaly::SinkDuplicate]);
    let copies = joined_copies(&output(&outcome));
    assert!(
        copies.values().any(|n| *n > 1),
        "a crash re-sent joined records"
    );
    assert_duplicates_allowed_at_least_once(&s, &outcome);
}

#[test]
fn a_task_waiting_for_the_table_joins_no_superseded_version_and_one_not_waiting_does() {
    // The same run but for max.task.idle.ms: -1 processes a stream record while the update
    // stamped before it is not fetched yet; 2000 waits for it (both forbid stale-join).
    let (outcome, result) = run_checked(&catalogue(JOIN_NO_WAIT), 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(result.forbidden, vec![Anomaly::StaleJoin]);
    assert!(
        !outcome.marks.contains_key("streams:task-idling"),
        "-1 never waits"
    );
    let (outcome, _) = run_valid(&catalogue(JOIN_WAIT), 1);
    for mark in ["streams:task-idling", "streams:enforced-processing"] {
        assert!(outcome.marks.contains_key(mark), "{mark}");
    }
    let copies = joined_copies(&output(&outcome));
    assert_eq!(copies.len(), 400, "every stream record joined, none twice");
    assert!(copies.values().all(|n| *n == 1));
}

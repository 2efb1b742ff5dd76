//! The Streams processor grouping by a new key (`streams.group_by = "id-mod"`): records go
//! through the repartition topic `<application.id>-<store>-repartition`, partitioned by
//! their new key, before the count; each `processing.guarantee` under instance crashes.

use eosim::checker::{Anomaly, Validity};
use eosim::history::{RecordRef, StreamsUpdate, Value};
use eosim::runner::SeedOutcome;
use eosim_sim::kafka::murmur2::partition_for_key;
use std::collections::BTreeMap;

use super::support::{catalogue, run_checked, run_valid};

const ALO: &str = "p3-repartition-alo-crash-duplicates-increments.toml";
const EOS: &str = "p3-repartition-eos-crash.toml";

/// Every repartition record the drain read, with its partition.
fn repartitioned(outcome: &SeedOutcome) -> Vec<RecordRef> {
    let ops = outcome.history.ops.iter();
    ops.filter_map(|op| match &op.value {
        Value::StreamsRepartition { records, .. } => Some(records.clone()),
        _ => None,
    })
    .flatten()
    .collect()
}

/// The input partition of each input id (the `log-state` of the input topic).
fn input_partitions(outcome: &SeedOutcome) -> BTreeMap<u64, u32> {
    let mut partitions = BTreeMap::new();
    for op in &outcome.history.ops {
        if let Value::LogState { records, .. } = &op.value {
            partitions.extend(records.iter().map(|r| (r.id, r.tp.partition)));
        }
    }
    partitions
}

/// The last committed update of each `key@window` of the output.
fn final_counts(outcome: &SeedOutcome) -> BTreeMap<(String, i64), u64> {
    let mut counts = BTreeMap::new();
    for op in &outcome.history.ops {
        if let Value::StreamsOutput { records, .. } = &op.value {
            for StreamsUpdate {
                key,
                window_start_ms,
                count,
                ..
            } in records
            {
                counts.insert((key.clone(), *window_start_ms), *count);
            }
        }
    }
    counts
}

#[test]
fn repartition_records_sit_in_the_partition_of_their_new_key_and_move_between_partitions() {
    let s = catalogue(EOS);
    // Seed 4: an instance purged (30 s after its start or last purge; the kills restart
    // both, so whether one gets there before the input ends depends on the seed).
    let (outcome, _) = run_valid(&s, 4);
    assert!(outcome.marks.contains_key("streams:repartition-write"));
    let records = repartitioned(&outcome);
    let inputs = input_partitions(&outcome);
    assert_eq!(inputs.len(), 400, "every input id was written once");
    let mut moved = 0;
    for r in &records {
        let key = r.key.as_deref().expect("repartition records are keyed");
        assert_eq!(key, format!("g{}", r.id % 3), "the new key of id {}", r.id);
        let partitions = s.topic.partitions;
        assert_eq!(
            r.tp.partition,
            partition_for_key(key.as_bytes(), partitions),
            "{r:?}"
        );
        moved += usize::from(inputs[&r.id] != r.tp.partition);
    }
    // read_committed: no input record reached the repartition topic twice; the purge
    // deleted what every instance had committed by its last purge.
    let mut ids: Vec<u64> = records.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), records.len());
    assert!(outcome.marks.contains_key("streams:repartition-purged"));
    assert!(
        records.len() < 400,
        "purged below the committed offsets: {}",
        records.len()
    );
    assert!(
        moved > records.len() / 4,
        "records changed partition: {moved} of {}",
        records.len()
    );
}

#[test]
fn without_a_purge_every_input_record_sits_once_in_the_repartition_topic() {
    let mut s = catalogue(EOS);
    s.streams.repartition_purge_interval_ms = Some(600_000);
    let (outcome, _) = run_valid(&s, 1);
    assert!(!outcome.marks.contains_key("streams:repartition-purged"));
    let records = repartitioned(&outcome);
    let mut ids: Vec<u64> = records.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((ids.len(), records.len()), (400, 400));
}

#[test]
fn exactly_once_v2_counts_each_new_key_exactly_through_the_repartition_topic_despite_crashes() {
    let s = catalogue(EOS);
    // Whether a kill leaves a transaction open for the coordinator to time out (the
    // restart has a fresh process id, so its init fences nothing) depends on where the
    // kill falls: every seed must count exactly, and some must have had one aborted so.
    let mut timed_out = 0;
    for seed in 1..=4 {
        let (outcome, _) = run_valid(&s, seed);
        timed_out += usize::from(outcome.marks.contains_key("kafka:txn-timed-out-aborted"));
        let counts = final_counts(&outcome);
        assert!(counts
            .keys()
            .all(|(k, _)| ["g0", "g1", "g2"].contains(&k.as_str())));
        assert_eq!(
            counts.values().sum::<u64>(),
            400,
            "seed {seed}: every input counted once"
        );
    }
    assert!(
        timed_out >= 2,
        "{timed_out} of 4 seeds timed a transaction out"
    );
}

#[test]
fn at_least_once_re_writes_repartition_records_after_a_crash_and_over_counts() {
    let mut s = catalogue(ALO);
    // No purge, so that the re-written records are still there to be seen.
    s.streams.repartition_purge_interval_ms = Some(600_000);
    let (outcome, result) = run_checked(&s, 1);
    assert_eq!(outcome.stalled, None);
    assert_eq!(result.validity, Validity::Invalid);
    assert!(result.forbidden.contains(&Anomaly::AggregateOverCount));
    assert!(!result.anomalies.contains_key(&Anomaly::AggregateUnderCount));
    let records = repartitioned(&outcome);
    let mut seen = BTreeMap::new();
    for r in &records {
        *seen.entry(r.id).or_insert(0u32) += 1;
    }
    assert_eq!(
        seen.len(),
        400,
        "no input record is missing from the repartition topic"
    );
    assert!(
        seen.values().any(|n| *n > 1),
        "a crash re-wrote repartition records"
    );
    assert!(final_counts(&outcome).values().sum::<u64>() > 400);
}

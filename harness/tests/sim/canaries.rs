//! Canaries: the bench tests itself (issue 11, item 4). For every fault kind a scenario pair
//! from the catalogue: a deliberately unsafe component that must be caught under that fault
//! (a forbidden anomaly of the expected kind, with the fault having acted), and its safe
//! twin, which must hold under the same fault. For every anomaly the checkers know, a
//! catalogue scenario in which it is reported as forbidden.
//!
//! The tables below are the single list: the README's canary tables are checked against
//! them, and the coverage tests fail when a fault kind ([`kind::ALL`]) or an anomaly
//! ([`Anomaly::ALL`]) has no entry.

use super::support::{catalogue, run_checked};
use eosim::checker::{Anomaly, Validity};
use eosim_sim::effects::kind;
use std::collections::BTreeSet;

/// One fault kind's canary pair, both files in `scenarios/` (or its `field/` library).
struct FaultCanary {
    /// The effect kind ([`kind`]) the pair is about.
    fault: &'static str,
    /// Expected violated: the unsafe component, caught under `fault`.
    unsafe_file: &'static str,
    /// The forbidden anomalies that count as caught (any one of them).
    caught_as: &'static [Anomaly],
    /// Expected to hold under the same fault.
    safe_file: &'static str,
    /// Seeds `1..=seeds` of the unsafe file run here; at least one must catch it (the
    /// smallest count that does, measured: the README gives the rate over 10 seeds).
    seeds: u64,
}

const FAULT_CANARIES: [FaultCanary; 15] = [
    FaultCanary {
        fault: kind::KILL,
        unsafe_file: "p1-clickhouse-restart-seed-duplicates.toml",
        caught_as: &[Anomaly::SinkDuplicate],
        safe_file: "p1-clickhouse-restart-seed-token.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::KILL_LEADER,
        unsafe_file: "acks1-unclean-loses-acked-writes.toml",
        caught_as: &[Anomaly::LostWrite],
        safe_file: "canary-kill-leader-safe.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::PAUSE,
        unsafe_file: "p3-alo-zombie-loses-increments.toml",
        caught_as: &[Anomaly::AggregateUnderCount],
        safe_file: "p3-eos-zombie-pause.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::DELETE_RECORDS,
        unsafe_file: "canary-delete-records-unsafe.toml",
        caught_as: &[Anomaly::SinkLost],
        safe_file: "canary-delete-records-safe.toml",
        seeds: 1,
    },
    FaultCanary {
        fault: kind::ADD_PARTITIONS,
        unsafe_file: "field/kafka-add-partitions-latest-loses.toml",
        caught_as: &[Anomaly::SinkLost],
        safe_file: "field/kafka-add-partitions-earliest.toml",
        seeds: 1,
    },
    FaultCanary {
        fault: kind::PARTITION,
        unsafe_file: "canary-partition-unsafe.toml",
        caught_as: &[Anomaly::AggregateUnderCount],
        safe_file: "canary-partition-safe.toml",
        seeds: 1,
    },
    FaultCanary {
        fault: kind::CLOG,
        unsafe_file: "canary-clog-unsafe.toml",
        caught_as: &[Anomaly::AggregateUnderCount],
        safe_file: "canary-clog-safe.toml",
        seeds: 1,
    },
    FaultCanary {
        fault: kind::DROP_REQUEST,
        unsafe_file: "canary-drop-request-unsafe.toml",
        caught_as: &[Anomaly::OffsetsForAbortedOutput],
        safe_file: "canary-drop-request-safe.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::DROP_RESPONSE,
        unsafe_file: "p1-lost-insert-response-seed-duplicates.toml",
        caught_as: &[Anomaly::SinkDuplicate],
        safe_file: "p1-lost-insert-response-seed-token.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::DUPLICATE,
        unsafe_file: "canary-duplicate-unsafe.toml",
        caught_as: &[Anomaly::Duplicate],
        safe_file: "canary-duplicate-safe.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::DELAY,
        unsafe_file: "canary-delay-unsafe.toml",
        caught_as: &[Anomaly::Duplicate],
        safe_file: "canary-delay-safe.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::CLOCK_JUMP,
        unsafe_file: "clock-jump-back-expires-producer-duplicates.toml",
        caught_as: &[Anomaly::Duplicate],
        safe_file: "clock-jump-within-expiration.toml",
        seeds: 2,
    },
    FaultCanary {
        fault: kind::FAULT_POINT,
        unsafe_file: "p1-crash-points-seed-duplicates.toml",
        caught_as: &[Anomaly::SinkDuplicate],
        safe_file: "p1-crash-points-seed-token.toml",
        seeds: 3,
    },
    FaultCanary {
        fault: kind::BUGGIFY,
        unsafe_file: "f8-pre-kip890-late-produce-corrupts-output.toml",
        caught_as: &[
            Anomaly::StuckLso,
            Anomaly::AbortedRead,
            Anomaly::SinkDuplicate,
        ],
        safe_file: "f8-delayed-produce-kip890-part1.toml",
        seeds: 3,
    },
    FaultCanary {
        fault: kind::BAD_RECORD,
        unsafe_file: "canary-bad-record-unsafe.toml",
        caught_as: &[Anomaly::CdcFinalState],
        safe_file: "f4-poison-tolerance-all.toml",
        seeds: 1,
    },
];

/// An anomaly and the catalogue scenario in which it is reported as forbidden, in one of
/// seeds `1..=seeds`.
struct AnomalyCanary {
    anomaly: Anomaly,
    file: &'static str,
    seeds: u64,
}

const ANOMALY_CANARIES: &[AnomalyCanary] = &[
    AnomalyCanary {
        anomaly: Anomaly::LostWrite,
        file: "acks1-unclean-loses-acked-writes.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::Duplicate,
        file: "canary-duplicate-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::NonmonotonicSend,
        file: "field/kafka-producer-in-flight-5-non-idempotent-reorders.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::InconsistentOffsets,
        file: "acks1-unclean-loses-acked-writes.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::AbortedRead,
        file: "f8-tv1-late-end-txn-corrupts-next-txn.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::OffsetsForAbortedOutput,
        file: "f9-no-rewind-loses-input.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::SinkLost,
        file: "f9-no-rewind-loses-input.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::SinkDuplicate,
        file: "p1-lost-insert-response-seed-duplicates.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::SinkReorder,
        file: "acks1-unclean-loses-acked-writes.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::ProgressAheadOfData,
        file: "amo-commit-before-loses-records.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::AbortedInSink,
        file: "field/kafka-read-uncommitted-aborted-txn-corrupts.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::CdcFinalState,
        file: "f5-bug-ignored-tombstone-loses-delete.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::AggregateUnderCount,
        file: "p3-alo-zombie-loses-increments.toml",
        seeds: 2,
    },
    AnomalyCanary {
        anomaly: Anomaly::SendRejected,
        file: "canary-send-rejected-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::CdcDuplicateRow,
        file: "canary-cdc-duplicate-row-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::CdcDroppedField,
        file: "canary-cdc-dropped-field-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::AggregateOverCount,
        file: "p3-alo-crash-duplicates-increments.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::AggregateSequence,
        file: "canary-aggregate-sequence-unsafe.toml",
        seeds: 2,
    },
    AnomalyCanary {
        anomaly: Anomaly::RoutineLoadStatistic,
        file: "p4-f7-progress-from-consumer-position-loses.toml",
        seeds: 2,
    },
    AnomalyCanary {
        anomaly: Anomaly::NonmonotonicPoll,
        file: "canary-nonmonotonic-poll-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::SinkDuplicate,
        file: "canary-filter-map-values-duplicate-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::IdReused,
        file: "p3-aggregate-ids-alo-kill-swarm-corrupts-ids.toml",
        seeds: 3,
    },
    AnomalyCanary {
        anomaly: Anomaly::IdReassigned,
        file: "canary-id-reassigned-unsafe.toml",
        seeds: 5,
    },
    AnomalyCanary {
        anomaly: Anomaly::UnwrittenTableVersion,
        file: "canary-unwritten-table-version-unsafe.toml",
        seeds: 1,
    },
    AnomalyCanary {
        anomaly: Anomaly::StaleJoin,
        file: "p3-stream-table-join-idle-disabled-corrupts-joins.toml",
        seeds: 1,
    },
];

/// Anomalies no whole-scenario canary catches yet, each with the reason; the coverage test
/// accepts an anomaly only in one of the two tables.
const ANOMALIES_WITHOUT_CANARY: &[(Anomaly, &str)] = &[
    (
        Anomaly::Unseen,
        "informational; every pipeline drains until its consumers caught up, and no knob makes \
         a consumer stop early",
    ),
    (
        Anomaly::PollSkip,
        "forbidden only under manual assignment and every pipeline subscribes",
    ),
    (
        Anomaly::TornTransaction,
        "no catalogue scenario shows it: the transactional copy has no isolation.level knob \
         (read_uncommitted), and the sinks behind a transactional upstream record no \
         read_committed views (they are judged by their sink: aborted-in-sink)",
    ),
    (
        Anomaly::UncommittedRead,
        "no catalogue scenario shows it, for the same reason as torn-transaction",
    ),
    (
        Anomaly::StuckLso,
        "f8-pre-kip890-late-produce-corrupts-output names it, but its seeds 1..=10 show \
         sink-duplicate only (the late produce joins the next transaction)",
    ),
    (
        Anomaly::CdcRegression,
        "informational; no catalogue scenario with a reader (cdc.read_interval_ms) replays \
         an older row version yet",
    ),
    (
        Anomaly::CdcSkipped,
        "needs a DLQ and a record neither applied nor in it; no sink setting drops a record \
         while a DLQ is configured",
    ),
    (
        Anomaly::MissingAggregate,
        "no Streams knob commits input offsets without the output of a key@window",
    ),
    (
        Anomaly::LabelLoadedTwice,
        "the Doris model refuses a label a transaction that is not ABORTED holds \
         (LabelAlreadyExists), and no switch turns that check off; the checker's mutation \
         tests produce it",
    ),
    (
        Anomaly::UnexpectedOutput,
        "no Streams knob makes a topology write a record its filter drops or a value its \
         mapper or aggregator does not compute; the checker's mutation tests produce it",
    ),
    (
        Anomaly::ExtraAggregate,
        "no Streams knob writes output for a key@window without input",
    ),
];

/// Runs seeds `1..=seeds` of `file`; returns the seeds whose forbidden anomalies include
/// one of `anomalies`, and checks in every seed that `fault` (when given) acted.
fn caught_seeds(file: &str, seeds: u64, anomalies: &[Anomaly], fault: Option<&str>) -> Vec<u64> {
    let s = catalogue(file);
    let mut caught = Vec::new();
    for seed in 1..=seeds {
        let (outcome, result) = run_checked(&s, seed);
        if let Some(fault) = fault {
            let acted = outcome.acted.get(fault).copied().unwrap_or(0);
            assert!(acted > 0, "{file} seed {seed}: {fault} never acted");
        }
        if result.forbidden.iter().any(|a| anomalies.contains(a)) {
            caught.push(seed);
        }
    }
    caught
}

/// The fault kind's pair: the unsafe file caught in some seed with the fault acting in
/// every seed, the safe twin valid (no stall) with the fault acting in its first seed.
fn a_canary_pair(fault: &str) {
    let c = FAULT_CANARIES
        .iter()
        .find(|c| c.fault == fault)
        .unwrap_or_else(|| panic!("no canary for {fault}"));
    let caught = caught_seeds(c.unsafe_file, c.seeds, c.caught_as, Some(fault));
    assert!(
        !caught.is_empty(),
        "{}: not caught as {:?} in seeds 1..={}",
        c.unsafe_file,
        c.caught_as,
        c.seeds
    );
    let s = catalogue(c.safe_file);
    let (outcome, result) = run_checked(&s, 1);
    assert_eq!(outcome.stalled, None, "{} seed 1 stalled", c.safe_file);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{} seed 1: {:?}",
        c.safe_file,
        result.case_texts(8)
    );
    let acted = outcome.acted.get(fault).copied().unwrap_or(0);
    assert!(acted > 0, "{} seed 1: {fault} never acted", c.safe_file);
}

#[test]
fn every_fault_kind_has_a_canary_pair_of_catalogue_files() {
    let kinds: BTreeSet<&str> = FAULT_CANARIES.iter().map(|c| c.fault).collect();
    for k in kind::ALL {
        assert!(kinds.contains(k), "fault kind {k} has no canary");
    }
    assert_eq!(
        kinds.len(),
        FAULT_CANARIES.len(),
        "a fault kind listed twice"
    );
    for c in &FAULT_CANARIES {
        let (bad, good) = (catalogue(c.unsafe_file), catalogue(c.safe_file));
        assert_eq!(
            bad.check.expect.as_deref(),
            Some("violated"),
            "{}",
            c.unsafe_file
        );
        assert_ne!(
            good.check.expect.as_deref(),
            Some("violated"),
            "{}",
            c.safe_file
        );
        assert!(!c.caught_as.is_empty(), "{}: caught as nothing", c.fault);
    }
}

#[test]
fn every_anomaly_has_a_canary_or_a_reason() {
    let mut covered: BTreeSet<Anomaly> = ANOMALY_CANARIES.iter().map(|c| c.anomaly).collect();
    for (anomaly, reason) in ANOMALIES_WITHOUT_CANARY {
        assert!(!reason.is_empty(), "{}: no reason", anomaly.name());
        assert!(
            covered.insert(*anomaly),
            "{} in both tables",
            anomaly.name()
        );
    }
    for anomaly in Anomaly::ALL {
        assert!(
            covered.contains(&anomaly),
            "{} has no canary",
            anomaly.name()
        );
    }
}

#[test]
fn every_anomaly_canary_reports_its_anomaly_as_forbidden() {
    for c in ANOMALY_CANARIES {
        let caught = caught_seeds(c.file, c.seeds, &[c.anomaly], None);
        assert!(
            !caught.is_empty(),
            "{}: {} not forbidden in seeds 1..={}",
            c.file,
            c.anomaly.name(),
            c.seeds
        );
    }
}

/// The README's canary tables name the same files as the tables here.
#[test]
fn the_readme_canary_tables_match_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md");
    for c in &FAULT_CANARIES {
        let row = format!(
            "| `{}` | `{}` | `{}` |",
            c.fault,
            c.unsafe_file.trim_end_matches(".toml"),
            c.safe_file.trim_end_matches(".toml")
        );
        assert!(readme.contains(&row), "README lacks the canary row {row}");
    }
    for c in ANOMALY_CANARIES {
        let row = format!(
            "| `{}` | `{}` |",
            c.anomaly.name(),
            c.file.trim_end_matches(".toml")
        );
        assert!(readme.contains(&row), "README lacks the anomaly row {row}");
    }
}

#[test]
fn kill_canary_pair() {
    a_canary_pair(kind::KILL);
}

#[test]
fn kill_leader_canary_pair() {
    a_canary_pair(kind::KILL_LEADER);
}

#[test]
fn pause_canary_pair() {
    a_canary_pair(kind::PAUSE);
}

#[test]
fn partition_canary_pair() {
    a_canary_pair(kind::PARTITION);
}

#[test]
fn clog_canary_pair() {
    a_canary_pair(kind::CLOG);
}

#[test]
fn drop_request_canary_pair() {
    a_canary_pair(kind::DROP_REQUEST);
}

#[test]
fn drop_response_canary_pair() {
    a_canary_pair(kind::DROP_RESPONSE);
}

#[test]
fn duplicate_canary_pair() {
    a_canary_pair(kind::DUPLICATE);
}

#[test]
fn delay_canary_pair() {
    a_canary_pair(kind::DELAY);
}

#[test]
fn clock_jump_canary_pair() {
    a_canary_pair(kind::CLOCK_JUMP);
}

#[test]
fn fault_point_canary_pair() {
    a_canary_pair(kind::FAULT_POINT);
}

#[test]
fn buggify_canary_pair() {
    a_canary_pair(kind::BUGGIFY);
}

#[test]
fn bad_record_canary_pair() {
    a_canary_pair(kind::BAD_RECORD);
}

#[test]
fn delete_records_canary_pair() {
    a_canary_pair(kind::DELETE_RECORDS);
}

#[test]
fn add_partitions_canary_pair() {
    a_canary_pair(kind::ADD_PARTITIONS);
}

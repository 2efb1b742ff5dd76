//! The `kafka-consume` pipeline under faults: what each commit discipline guarantees.

use eosim::checker::{check_all, Anomaly, CheckOptions, Validity};
use eosim::runner::run_seed;
use eosim::scenario::Scenario;
use std::path::Path;

fn scenario(text: &str) -> Scenario {
    Scenario::parse(Path::new("inline.toml"), text).expect("test scenario parses")
}

fn options(s: &Scenario) -> CheckOptions {
    CheckOptions {
        idempotent_producer: false,
        ..CheckOptions::for_claim(s.claim)
    }
}

#[test]
fn at_least_once_consumer_delivers_every_record_without_faults() {
    let s = scenario(
        r#"
        pipeline = "kafka-consume"
        claim = "at-least-once"
        [workload]
        records = 100
        [faults]
        until_ms = 5000
        "#,
    );
    let outcome = run_seed(&s, 1);
    assert_eq!(outcome.crashed, None);
    assert_eq!(outcome.stalled, None);
    let result = check_all(&outcome.history, &options(&s));
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    let sink = outcome
        .history
        .ops
        .iter()
        .find_map(|op| match &op.value {
            eosim::history::Value::SinkState { rows } => Some(rows.len()),
            _ => None,
        })
        .expect("a final sink state");
    assert!(sink >= 100, "sink holds {sink} rows");
    assert!(!result.anomalies.contains_key(&Anomaly::SinkLost));
}

fn catalogue(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    Scenario::load(&path).expect("catalogue scenario parses")
}

fn forbidden_anomalies(s: &Scenario, seed: u64) -> Vec<Anomaly> {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "seed {seed} crashed");
    assert_eq!(outcome.stalled, None, "seed {seed} stalled");
    check_all(&outcome.history, &options(s)).forbidden
}

#[test]
fn replaying_a_seed_with_faults_reproduces_its_history_hash() {
    let s = catalogue("alo-commit-after-acks-all.toml");
    let first = run_seed(&s, 7);
    let second = run_seed(&s, 7);
    assert!(first.history.fault_count() > 0, "the swarm injected faults");
    assert_eq!(first.history.hash(), second.history.hash());
    assert_ne!(first.history.hash(), run_seed(&s, 8).history.hash());
}

#[test]
fn acks_1_with_unclean_election_loses_acknowledged_writes() {
    // Broker-1 leads and is cut off from broker-2, which drops out of the ISR; acks=1
    // writes keep being acknowledged by broker-1 alone. Killing it elects broker-2
    // uncleanly: everything broker-1 acknowledged since the cut is gone.
    let s = catalogue("acks1-unclean-loses-acked-writes.toml");
    let forbidden = forbidden_anomalies(&s, 1);
    assert!(forbidden.contains(&Anomaly::LostWrite), "{forbidden:?}");
}

#[test]
fn at_least_once_holds_when_the_leader_fails_over_under_acks_all() {
    let s = catalogue("alo-acks-all-leader-failover.toml");
    for seed in 1..=3 {
        assert_eq!(forbidden_anomalies(&s, seed), vec![], "seed {seed}");
    }
}

#[test]
fn committing_before_processing_loses_records_when_consumers_crash() {
    // At-most-once: the offset is committed before the sink write is durable, so a kill in
    // that window skips the batch for good. Over a few seeds of consumer kills, at least
    // one loses records and none duplicates.
    let s = catalogue("amo-commit-before-loses-records.toml");
    let mut lost = 0;
    for seed in 1..=10 {
        let forbidden = forbidden_anomalies(&s, seed);
        assert!(
            !forbidden.contains(&Anomaly::SinkDuplicate),
            "seed {seed}: {forbidden:?}"
        );
        lost += usize::from(forbidden.contains(&Anomaly::SinkLost));
    }
    assert!(lost >= 1, "no seed lost a record");
}

/// The group coordinator's process dies while both members' JoinGroups are parked at it
/// (the group waits for a restarted consumer's old member to expire). Its connections are
/// reset, so the consumers see the JoinGroups fail at once, find the new coordinator and
/// rejoin; before, they waited out the JoinGroup timeout (rebalance timeout + 5 s = 305 s)
/// for responses no process would send, and the group went Empty for good.
#[test]
fn consumers_rejoin_after_the_coordinator_dies_during_a_rebalance() {
    let s = scenario(
        r#"
        pipeline = "kafka-consume"
        claim = "at-least-once"
        [workload]
        records = 150
        consumers = 2
        acks = "all"
        commit = "after-processing"
        [faults]
        until_ms = 16000
        # A new member joins while the killed one's member still counts: the group waits in
        # PreparingRebalance for its session (10 s) to run out, JoinGroups parked.
        [[faults.schedule]]
        at_ms = 3000
        fault = "kill"
        target = ["consumer-0"]
        [[faults.schedule]]
        at_ms = 4000
        fault = "restart"
        target = ["consumer-0"]
        # Group `sink` lives on __consumer_offsets partition 37 ("sink".hashCode() % 50),
        # led by broker-2 (round-robin placement: 37 % 3 = 1) until this kill.
        [[faults.schedule]]
        at_ms = 9000
        fault = "kill"
        target = ["broker-2"]
        mode = "process-kill"
        [[faults.schedule]]
        at_ms = 10000
        fault = "restart"
        target = ["broker-2"]
        [drain]
        time_s_max = 60
        "#,
    );
    let outcome = run_seed(&s, 1);
    assert_eq!(outcome.crashed, None);
    assert_eq!(outcome.stalled, None, "the group must form again");
    let result = check_all(&outcome.history, &options(&s));
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
}

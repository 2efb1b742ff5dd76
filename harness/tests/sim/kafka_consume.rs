//! The `kafka-consume` pipeline under faults: what each commit discipline guarantees.

use eosim::checker::{check_all, Anomaly, CheckOptions, Validity};
use eosim::runner::run_seed;
use eosim::scenario::Scenario;
use std::path::Path;

fn scenario(text: &str) -> Scenario {
    Scenario::parse(Path::new("inline.toml"), text).expect("test scenario parses")
}

fn options(s: &Scenario) -> CheckOptions {
    CheckOptions { idempotent_producer: false, ..CheckOptions::for_claim(s.claim) }
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
    assert_eq!(result.validity, Validity::Valid, "{:?}", result.case_texts(8));
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
    assert_eq!(result.validity, Validity::Valid, "{:?}", result.case_texts(8));
}

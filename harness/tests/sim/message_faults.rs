//! Each `messages` fault setting acts on the link it names (issue 11): the link is the
//! client *node's*, not its `0.0.0.0` socket's, so a fault from `producer-0` to `brokers`
//! duplicates, drops and delays that producer's requests. Each test fails when its fault does
//! not act (as three of the four did before the fix): it asserts the fault's consequence in
//! the history and its recorded effects.

use eosim::checker::{check_all, Anomaly, CheckOptions};
use eosim::history::{History, OpKind, Value};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use eosim_sim::effects::kind;
use std::collections::BTreeMap;
use std::path::Path;

/// Faults act from 2 s to 12 s of simulated time.
const FAULT_FROM_MS: u64 = 2_000;
const FAULT_UNTIL_MS: u64 = 12_000;

/// A kafka-consume run: one non-idempotent producer sending a record every 50 ms for 20 s,
/// with `settings` (a `messages` fault's keys) on the link producer-0 → brokers from
/// [`FAULT_FROM_MS`] to [`FAULT_UNTIL_MS`]; none when `settings` is empty.
fn scenario(settings: &str) -> Scenario {
    let faults = if settings.is_empty() {
        String::new()
    } else {
        format!(
            r#"
            [[faults.schedule]]
            at_ms = {FAULT_FROM_MS}
            fault = "messages"
            source = ["producer-0"]
            target = ["brokers"]
            {settings}

            [[faults.schedule]]
            at_ms = {FAULT_UNTIL_MS}
            fault = "heal"
            "#
        )
    };
    let text = format!(
        r#"
        pipeline = "kafka-consume"
        claim = "at-least-once"
        [cluster]
        brokers = 3
        [topic]
        partitions = 2
        replication_factor = 3
        min_insync_replicas = 2
        [workload]
        records = 400
        producers = 1
        consumers = 1
        produce_interval_ms = 50
        acks = "all"
        [faults]
        until_ms = 25000
        {faults}
        "#
    );
    Scenario::parse(Path::new("message-faults.toml"), &text).expect("test scenario parses")
}

fn run(s: &Scenario, seed: u64) -> SeedOutcome {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "seed {seed} crashed");
    outcome
}

fn acted(outcome: &SeedOutcome, effect: &str) -> u64 {
    outcome.acted.get(effect).copied().unwrap_or(0)
}

/// Each producer send that was acknowledged: (invoke time, ok time), ns.
fn acked_sends(history: &History) -> Vec<(u64, u64)> {
    let mut invoked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut out = Vec::new();
    for op in &history.ops {
        let Value::Send { id, .. } = &op.value else {
            continue;
        };
        match op.kind {
            OpKind::Invoke => {
                invoked.entry(*id).or_insert(op.time_ns);
            }
            OpKind::Ok => {
                if let Some(at) = invoked.get(id) {
                    out.push((*at, op.time_ns));
                }
            }
            _ => {}
        }
    }
    out
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

#[test]
fn duplicate_probability_one_makes_a_non_idempotent_producer_write_duplicates() {
    let s = scenario("duplicate_probability = 1.0");
    let outcome = run(&s, 1);
    assert!(
        acted(&outcome, kind::DUPLICATE) > 50,
        "every produce in the window is delivered twice: {:?}",
        outcome.acted
    );
    let options = CheckOptions {
        idempotent_producer: false,
        ..CheckOptions::for_claim(s.claim)
    };
    let result = check_all(&outcome.history, &options);
    let duplicates = result
        .anomalies
        .get(&Anomaly::Duplicate)
        .map_or(0, Vec::len);
    assert!(
        duplicates > 50,
        "each doubled Produce appends its batch twice: {duplicates} duplicate cases"
    );
    // The same scenario without the fault writes each record once.
    let quiet = run(&scenario(""), 1);
    let result = check_all(&quiet.history, &options);
    assert!(!result.anomalies.contains_key(&Anomaly::Duplicate));
    assert_eq!(acted(&quiet, kind::DUPLICATE), 0);
}

#[test]
fn drop_request_probability_one_stalls_the_link_until_the_heal() {
    let s = scenario("drop_request_probability = 1.0");
    let outcome = run(&s, 2);
    assert!(
        acted(&outcome, kind::DROP_REQUEST) > 0,
        "{:?}",
        outcome.acted
    );
    let sends = acked_sends(&outcome.history);
    // Nothing sent after the fault began is acknowledged before the heal (a little slack
    // for requests already in flight when it began).
    let through = sends
        .iter()
        .filter(|(at, ok)| ms(*at) > FAULT_FROM_MS + 500 && ms(*ok) < FAULT_UNTIL_MS)
        .count();
    assert_eq!(
        through, 0,
        "acknowledged through a link that drops every request"
    );
    // After the heal the producer gets through again.
    assert!(
        sends.iter().any(|(_, ok)| ms(*ok) > FAULT_UNTIL_MS),
        "the link works again after the heal"
    );
    // Without the fault, sends made in that window are acknowledged within it.
    let quiet = acked_sends(&run(&scenario(""), 2).history);
    assert!(quiet
        .iter()
        .any(|(at, ok)| ms(*at) > FAULT_FROM_MS + 500 && ms(*ok) < FAULT_UNTIL_MS));
}

/// Median time from invoke to acknowledgement of sends invoked inside the fault window, ms.
fn median_latency_in_window(history: &History) -> u64 {
    let mut latencies: Vec<u64> = acked_sends(history)
        .into_iter()
        .filter(|(at, _)| ms(*at) >= FAULT_FROM_MS && ms(*at) < FAULT_UNTIL_MS - 1_000)
        .map(|(at, ok)| ms(ok - at))
        .collect();
    assert!(
        latencies.len() > 10,
        "enough sends in the window: {}",
        latencies.len()
    );
    latencies.sort_unstable();
    latencies[latencies.len() / 2]
}

#[test]
fn delay_ms_max_moves_the_latency_of_requests_on_the_link() {
    let delayed = run(&scenario("delay_ms_max = 800"), 3);
    // One Produce in flight at a time: a delay of ~400 ms each leaves ~25 in the window.
    assert!(acted(&delayed, kind::DELAY) > 10, "{:?}", delayed.acted);
    let quiet = run(&scenario(""), 3);
    let (with, without) = (
        median_latency_in_window(&delayed.history),
        median_latency_in_window(&quiet.history),
    );
    // Uniform delays in [0, 800] ms add a median of about 400 ms to each Produce.
    assert!(
        with >= without + 200,
        "median send latency {with} ms with delays up to 800 ms, {without} ms without"
    );
}

#[test]
fn drop_response_probability_one_makes_the_producer_retry_applied_sends() {
    let s = scenario("drop_response_probability = 1.0");
    let outcome = run(&s, 4);
    assert!(
        acted(&outcome, kind::DROP_RESPONSE) > 0,
        "{:?}",
        outcome.acted
    );
    let options = CheckOptions {
        idempotent_producer: false,
        ..CheckOptions::for_claim(s.claim)
    };
    let result = check_all(&outcome.history, &options);
    assert!(
        result.anomalies.contains_key(&Anomaly::Duplicate),
        "an applied Produce whose response was lost is retried and lands twice"
    );
}

#[test]
fn every_effect_is_in_the_history_with_its_kind() {
    let s = scenario("duplicate_probability = 0.5\ndelay_ms_max = 100");
    let outcome = run(&s, 5);
    let mut in_history: BTreeMap<String, u64> = BTreeMap::new();
    for op in &outcome.history.ops {
        if let Value::Effect { kind, detail } = &op.value {
            assert_eq!(op.process, "producer-0", "{detail}");
            assert!(
                ms(op.time_ns) >= FAULT_FROM_MS && ms(op.time_ns) <= FAULT_UNTIL_MS + 1_000,
                "an effect outside the fault window: {detail}"
            );
            *in_history.entry(kind.clone()).or_default() += 1;
        }
    }
    assert!(in_history.get(kind::DUPLICATE).copied().unwrap_or(0) > 0);
    assert!(in_history.get(kind::DELAY).copied().unwrap_or(0) > 0);
    assert_eq!(in_history, outcome.acted);
    assert_eq!(outcome.scheduled.get(kind::DUPLICATE), Some(&1));
    assert_eq!(outcome.scheduled.get(kind::DELAY), Some(&1));
}

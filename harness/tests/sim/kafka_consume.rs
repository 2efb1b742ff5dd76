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

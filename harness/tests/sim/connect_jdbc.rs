//! Pipeline `connect-jdbc` (P2) and the field cases F3–F6: the exact final tables, DLQ
//! contents and task states each case must end with.

use eosim::checker::{check_all, Anomaly, CheckResult, Validity};
use eosim::cli::aggregate::check_options;
use eosim::history::{DlqRecord, History, Value};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

/// Loads `scenarios/<name>.toml` from the workspace root.
pub fn load(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(format!("{name}.toml"));
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs one seed and checks it.
pub fn run(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "seed {seed} crashed");
    let result = check_all(&outcome.history, &check_options(s));
    (outcome, result)
}

/// The final table's rows as compact JSON arrays, in primary-key order.
pub fn table(h: &History) -> Vec<String> {
    h.ops
        .iter()
        .rev()
        .find_map(|op| match &op.value {
            Value::TableState { rows, .. } => {
                Some(rows.iter().map(|r| serde_json::Value::Array(r.clone()).to_string()).collect())
            }
            _ => None,
        })
        .expect("a final table state")
}

/// The final DLQ records.
pub fn dlq(h: &History) -> Vec<DlqRecord> {
    h.ops
        .iter()
        .find_map(|op| match &op.value {
            Value::DlqState { records, .. } => Some(records.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Final task states (`RUNNING`, `FAILED`...), by task id.
pub fn task_states(h: &History) -> Vec<String> {
    h.ops
        .iter()
        .filter(|op| op.process == "final")
        .filter_map(|op| match &op.value {
            Value::TaskStatus { state, .. } => Some(state.clone()),
            _ => None,
        })
        .collect()
}

/// Final committed offsets, as `(partition, offset)`.
pub fn committed(h: &History) -> Vec<(u32, i64)> {
    h.ops
        .iter()
        .rev()
        .find_map(|op| match &op.value {
            Value::CommittedOffsets { offsets } => {
                Some(offsets.iter().map(|(tp, o)| (tp.partition, *o)).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn upsert_under_worker_kills_and_pauses_ends_with_the_exact_table() {
    let s = load("p2-upsert-worker-crash");
    for seed in 1..=3 {
        let (outcome, result) = run(&s, seed);
        assert_eq!(outcome.stalled, None, "seed {seed}");
        assert_eq!(result.validity, Validity::Valid, "seed {seed}: {:?}", result.case_texts(8));
        assert!(result.counts["cdc-events"] >= 300, "{:?}", result.counts);
        assert!(result.counts["cdc-table-rows"] > 0);
        assert!(!result.anomalies.contains_key(&Anomaly::CdcFinalState));
    }
}

//! `eosim run --backend native` end to end: the real smoke scenario (a consumer SIGKILLed
//! and restarted mid-run) against a real Kafka broker, judged by the simulation's checkers,
//! with throughput and latency measured. Runs only with `EOSIM_REAL=1`; the skip of the
//! testcontainers backend needs no services.
#![cfg(not(madsim))]

mod real_support;

use eosim::history::Value;
use eosim::real::backend::Backend;
use eosim::real::process::live_groups;
use eosim::real::run::result::scenario_result;
use eosim::real::run::{run_real, RunOptions};
use eosim::report::Verdict;
use eosim::scenario::Scenario;
use real_support::{real_enabled, service_dir, timed};
use std::path::PathBuf;

fn smoke_scenario() -> (PathBuf, Scenario) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/real/kafka-consume-crash.toml");
    let scenario = Scenario::load(&path).expect("the smoke scenario parses");
    (path, scenario)
}

fn options(backend: Backend, dir: &std::path::Path) -> RunOptions {
    RunOptions {
        backend,
        bootstrap_servers: None,
        exe: PathBuf::from(env!("CARGO_BIN_EXE_eosim")),
        dir: dir.to_path_buf(),
        verbose: true,
    }
}

#[test]
fn a_consumer_killed_mid_run_keeps_at_least_once_on_real_kafka() {
    if !real_enabled("a_consumer_killed_mid_run_keeps_at_least_once_on_real_kafka") {
        return;
    }
    let (path, scenario) = smoke_scenario();
    let dir = service_dir("real-run");
    let outcome = timed("real run of the smoke scenario", || {
        run_real(&scenario, &path, &options(Backend::Native, dir.path()))
    });
    let result = scenario_result(
        &scenario,
        &outcome,
        &dir.path().join("history.jsonl"),
        "test",
    );
    eprintln!("{}", serde_json::to_string_pretty(&result).expect("json"));
    assert_eq!(result.verdict, Verdict::Holds, "notes: {:?}", result.notes);
    let faults: Vec<String> = outcome
        .history
        .ops
        .iter()
        .filter_map(|op| match &op.value {
            Value::Fault { name, detail } => Some(format!("{name} {detail}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        faults,
        [
            "kill target=[consumer-0] mode=process-kill",
            "restart target=[consumer-0]"
        ]
    );
    let measured = result
        .measured
        .expect("throughput and latency are measured");
    assert_eq!(measured.records_acked, scenario.workload.records);
    assert!(measured.rows_written >= scenario.workload.records);
    assert!(measured.records_per_s > 0.0 && measured.rows_per_s > 0.0);
    assert!(measured.latency_ms_p50 <= measured.latency_ms_p99);
    assert!(
        result.wall_time_s < 120.0,
        "CI budget: {} s",
        result.wall_time_s
    );
    assert_eq!(live_groups(), Vec::<i32>::new(), "no process left behind");
}

#[test]
fn the_testcontainers_backend_is_reported_skipped_never_passed() {
    let (path, scenario) = smoke_scenario();
    let dir = tempfile::tempdir().expect("temp dir");
    let outcome = run_real(
        &scenario,
        &path,
        &options(Backend::Testcontainers, dir.path()),
    );
    let result = scenario_result(
        &scenario,
        &outcome,
        &dir.path().join("history.jsonl"),
        "test",
    );
    assert_eq!(result.verdict, Verdict::Skipped);
    assert!(
        result.notes[0].starts_with("skipped:"),
        "{:?}",
        result.notes
    );
    assert_eq!(result.seeds, 0);
}

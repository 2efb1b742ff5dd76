//! Report tests: the files written, their rows, and the JSON round trip.

use super::*;
use crate::checker::{check_all, CheckOptions, Claim};
use crate::history::{OpKind, RecordRef};
use eosim_sim::kafka::TopicPartition;

fn temp_dir(name: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("eosim-{name}-{}-{nanos}", std::process::id()))
}

fn rec(id: u64, offset: i64) -> RecordRef {
    RecordRef {
        id,
        key: Some("k".into()),
        tp: TopicPartition::new("t", 0),
        offset,
    }
}

fn fault(name: &str, detail: &str) -> Value {
    Value::Fault {
        name: name.into(),
        detail: detail.into(),
    }
}

/// A sink that lost record 2 after a broker kill; a partition healed after the loss.
fn failing_history() -> History {
    let mut h = History::default();
    h.push(1_000_000, "producer-0", OpKind::Ok, send(1, 0), None);
    h.push(2_000_000, "producer-0", OpKind::Ok, send(2, 1), None);
    h.push(
        12_345_000_000,
        "nemesis",
        OpKind::Invoke,
        fault("kill", "broker-2"),
        None,
    );
    h.push(
        12_346_000_000,
        "nemesis",
        OpKind::Info,
        fault("kill", "broker-2"),
        None,
    );
    h.push(
        13_000_000_000,
        "sink-0",
        OpKind::Ok,
        Value::Write {
            rows: vec![rec(1, 0)],
        },
        None,
    );
    h.push(20_000_000_000, "final", OpKind::Ok, log(), None);
    h.push(
        20_100_000_000,
        "final",
        OpKind::Ok,
        Value::SinkState {
            rows: vec![rec(1, 0)],
        },
        None,
    );
    h.push(
        30_000_000_000,
        "nemesis",
        OpKind::Info,
        fault("partition", "[a] [b]"),
        None,
    );
    h
}

fn send(id: u64, offset: i64) -> Value {
    Value::Send {
        id,
        key: None,
        tp: Some(TopicPartition::new("t", 0)),
        offset: Some(offset),
    }
}

fn log() -> Value {
    Value::LogState {
        tp: TopicPartition::new("t", 0),
        records: vec![rec(1, 0), rec(2, 1)],
    }
}

fn sample_report() -> RunReport {
    let history = failing_history();
    let check = check_all(&history, &CheckOptions::for_claim(Claim::ExactlyOnce));
    let mut violated = ScenarioResult::new("ck-eos-kill", "clickhouse-keepermap", "exactly-once");
    violated.verdict = Verdict::Violated;
    violated.seeds = 200;
    violated.faults_injected = 1312;
    violated.tally(&check);
    violated
        .marks
        .insert("keeper_state_before_reinsert".into(), 7);
    let replay = "cargo xtask sim --scenario ck-eos-kill --seed 17".to_string();
    let path = "reports/ck-eos-kill/17/history.jsonl".to_string();
    violated.counterexample = Some(Counterexample::from_check(
        17, replay, path, &history, &check, 4,
    ));
    let mut holds = ScenarioResult::new("jdbc-upsert", "jdbc-postgres", "exactly-once");
    holds.verdict = Verdict::Holds;
    holds.seeds = 100;
    holds.faults_injected = 400;
    holds
        .notes
        .push("determinism check passed on 10 seeds".into());
    holds.anomalies.insert("send-rejected".into(), 2);
    RunReport {
        run_id: "test-run".into(),
        build: "0123abc".into(),
        started_at: "2026-11-29T18:00:00Z".into(),
        scenarios: vec![violated, holds],
    }
}

#[test]
fn counterexample_names_the_faults_before_the_first_forbidden_anomaly() {
    let report = sample_report();
    let c = report.scenarios[0].counterexample.as_ref().unwrap();
    // The kill is one line (invoke + info); the partition came after the evidence.
    assert_eq!(c.faults, vec!["t=12.345s kill broker-2".to_string()]);
    assert_eq!(
        c.anomalies,
        vec!["sink-lost: record 2 at t-0@1 is absent from the sink"]
    );
    assert_eq!(report.scenarios[0].forbidden_anomalies["sink-lost"], 1);
}

#[test]
fn write_report_writes_the_claims_matrix_and_the_counterexample() {
    let dir = temp_dir("report");
    write_report(&dir, &sample_report()).unwrap();
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    // The forbidden anomaly is not repeated among the others; an informational one of a
    // holding claim is shown beside it.
    let row = "| ck-eos-kill | clickhouse-keepermap | exactly-once | **VIOLATED** | 200 | 1312 \
               | sink-lost ×1 | none | seed 17: `cargo xtask sim --scenario ck-eos-kill --seed 17` |";
    assert!(summary.contains(row), "{summary}");
    let row = "| jdbc-upsert | jdbc-postgres | exactly-once | holds | 100 | 400 | none \
               | send-rejected ×2 | - |";
    assert!(summary.contains(row), "{summary}");
    assert!(
        summary.contains("### ck-eos-kill: **VIOLATED**"),
        "{summary}"
    );
    assert!(summary.contains("- `t=12.345s kill broker-2`"), "{summary}");
    assert!(
        summary.contains("- sink-lost: record 2 at t-0@1 is absent"),
        "{summary}"
    );
    assert!(summary.contains("| ck-eos-kill | `keeper_state_before_reinsert` | 7 |"));
    assert!(
        summary.contains("- jdbc-upsert: determinism check passed"),
        "{summary}"
    );
    assert!(
        !summary.contains("### jdbc-upsert"),
        "a holding claim has no section"
    );
    let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
    assert!(json.contains("\"verdict\": \"violated\""), "{json}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn results_json_round_trips() {
    let dir = temp_dir("round-trip");
    let report = sample_report();
    write_report(&dir, &report).unwrap();
    let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
    let back: RunReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn table_cells_escape_pipes() {
    let mut report = sample_report();
    report.scenarios[1].pipeline = "a|b".into();
    assert!(summary_markdown(&report).contains("| a\\|b |"));
}

#[test]
fn seed_report_writes_history_results_and_every_case() {
    let dir = temp_dir("seed");
    let history = failing_history();
    let check = check_all(&history, &CheckOptions::for_claim(Claim::ExactlyOnce));
    write_seed_report(
        &dir,
        "SEED=17 scenario=ck-eos-kill build=0123abc",
        &history,
        &check,
    )
    .unwrap();
    let text = std::fs::read_to_string(dir.join("history.jsonl")).unwrap();
    assert_eq!(History::from_jsonl(&text).unwrap(), history);
    let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
    assert_eq!(serde_json::from_str::<CheckResult>(&json).unwrap(), check);
    let lost = std::fs::read_to_string(dir.join("anomalies/sink-lost.jsonl")).unwrap();
    assert_eq!(lost.lines().count(), 1);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.starts_with("# SEED=17 scenario=ck-eos-kill"), "{md}");
    assert!(md.contains("validity: **Invalid**"), "{md}");
    assert!(md.contains("## sink-lost (forbidden, 1 case(s))"), "{md}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_shrunk_counterexample_lists_its_faults_and_replay() {
    let mut report = sample_report();
    let shrunk = |faults: Vec<String>, minimal| Shrunk {
        faults_from: 12,
        faults,
        runs: 9,
        minimal,
        scenario_file: "reports/r/ck-eos-kill/17/shrunk.toml".into(),
        replay: "cargo xtask replay --scenario reports/r/ck-eos-kill/17/shrunk.toml --seed 17"
            .into(),
        forbidden: BTreeMap::new(),
    };
    let c = report.scenarios[0].counterexample.as_mut().unwrap();
    c.shrunk = Some(shrunk(vec!["at_ms=4200 kill".into()], true));
    let summary = summary_markdown(&report);
    assert!(summary.contains("Shrunk to 1 of 12 faults in 9 runs (each one needed)"));
    assert!(summary.contains("- `at_ms=4200 kill`"), "{summary}");
    assert!(summary.contains("cargo xtask replay --scenario reports/r/ck-eos-kill/17/shrunk.toml"));
    let c = report.scenarios[0].counterexample.as_mut().unwrap();
    c.shrunk = Some(shrunk(Vec::new(), true));
    assert!(summary_markdown(&report).contains("(the failure needs no fault)"));
    // A BUGGIFY point that acted is a fault the shrinker cannot remove: not "no fault".
    let effect = crate::report::EffectCount {
        scheduled: 1,
        acted: 3,
        seeds_scheduled: 1,
        seeds_acted: 1,
    };
    report.scenarios[0]
        .fault_effects
        .insert("buggify".into(), effect);
    let summary = summary_markdown(&report);
    assert!(
        !summary.contains("(the failure needs no fault)"),
        "{summary}"
    );
    assert!(
        summary
            .contains("no nemesis fault needed; the faults the components arm still act: buggify"),
        "{summary}"
    );
    let c = report.scenarios[0].counterexample.as_mut().unwrap();
    c.shrunk = Some(shrunk(vec!["a".into(), "b".into()], false));
    assert!(summary_markdown(&report).contains("(run budget spent; may shrink further)"));
}

#[test]
fn a_shrunk_counterexample_shows_the_cases_it_keeps_per_forbidden_kind() {
    let mut report = sample_report();
    let cases = |cases_from, cases| ShrunkAnomaly { cases_from, cases };
    let shrunk = Shrunk {
        faults_from: 12,
        faults: vec!["at_ms=4200 kill".into()],
        runs: 9,
        minimal: true,
        scenario_file: "shrunk.toml".into(),
        replay: "cargo xtask replay --scenario shrunk.toml --seed 17".into(),
        forbidden: BTreeMap::from([
            ("progress-ahead-of-data".to_string(), cases(3, 3)),
            ("sink-duplicate".to_string(), cases(0, 2)),
            ("sink-lost".to_string(), cases(1000, 3)),
        ]),
    };
    let c = report.scenarios[0].counterexample.as_mut().unwrap();
    c.shrunk = Some(shrunk.clone());
    let summary = summary_markdown(&report);
    for line in [
        "Forbidden anomalies, cases in the original → in the shrunk run:",
        "- `sink-lost` 1000 → 3 case(s)\n",
        "- `progress-ahead-of-data` 3 → 3 case(s)\n",
        "- `sink-duplicate` 0 → 2 case(s) (not in the original)\n",
    ] {
        assert!(summary.contains(line), "{line:?} missing from {summary}");
    }
    let json = serde_json::to_value(&shrunk).unwrap();
    assert_eq!(json["forbidden"]["sink-lost"]["cases_from"], 1000);
    assert_eq!(json["forbidden"]["sink-lost"]["cases"], 3);
    // A results.json written before the field was recorded still reads, without counts.
    let mut old = json;
    old.as_object_mut().unwrap().remove("forbidden");
    let read: Shrunk = serde_json::from_value(old).unwrap();
    assert!(read.forbidden.is_empty());
    report.scenarios[0].counterexample.as_mut().unwrap().shrunk = Some(read);
    assert!(!summary_markdown(&report).contains("Forbidden anomalies, cases"));
}

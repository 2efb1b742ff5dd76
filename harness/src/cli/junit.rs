//! `--junit PATH`: a run's report as JUnit XML (one test suite, one test case per scenario),
//! so that CI test views list each scenario and show a failing one's seed, forbidden
//! anomalies, shrunk fault schedule and replay command. Written with `quick-junit`.

use super::judge::ledger_class;
use super::output::failure_class;
use super::ExitClass;
use crate::report::{RunReport, ScenarioResult};
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use std::fmt::Write;
use std::path::Path;
use std::time::Duration;

/// The JUnit XML of `report`: a scenario passes when it came out as its file expects
/// (an expected violation passes, with its counterexample in the case's output).
pub fn junit_xml(report: &RunReport) -> Result<String, String> {
    let mut suite = TestSuite::new("eosim sim");
    for s in &report.scenarios {
        suite.add_test_case(test_case(s));
    }
    let mut junit = Report::new(format!(
        "eosim run {} (build {})",
        report.run_id, report.build
    ));
    junit.add_test_suite(suite);
    junit.to_string().map_err(|e| e.to_string())
}

/// Writes [`junit_xml`] to `path`, creating its directory.
pub fn write_junit(path: &Path, report: &RunReport) -> Result<(), String> {
    let xml = junit_xml(report)?;
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, xml))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn test_case(s: &ScenarioResult) -> TestCase {
    let class = ledger_class(s);
    let status = if class == ExitClass::Expected {
        TestCaseStatus::success()
    } else {
        let kind = match class {
            ExitClass::Crash | ExitClass::Config => NonSuccessKind::Error,
            _ => NonSuccessKind::Failure,
        };
        let mut status = TestCaseStatus::non_success(kind);
        let failure = match class {
            ExitClass::NotExercised => "not-exercised",
            _ if s
                .ledger
                .as_ref()
                .is_some_and(|l| !l.determinism_notes.is_empty()) =>
            {
                "nondeterministic"
            }
            _ => failure_class(s.verdict),
        };
        let seed = s
            .counterexample
            .as_ref()
            .map(|c| format!(" seed={}", c.seed));
        status
            .set_type(failure)
            .set_message(format!(
                "scenario={} class={failure}{} verdict={}",
                s.scenario,
                seed.unwrap_or_default(),
                s.verdict.name()
            ))
            .set_description(details(s));
        status
    };
    let mut case = TestCase::new(s.scenario.as_str(), status);
    case.set_classname(format!("eosim.{}.{}", s.pipeline, s.claim))
        .set_time(Duration::from_secs_f64(s.wall_time_s.max(0.0)));
    if class == ExitClass::Expected {
        case.set_system_out(details(s));
    }
    case
}

/// The evidence of a scenario: verdict and seeds, the counterexample's seed, forbidden
/// anomalies, faults, shrunk schedule and replay commands, then the notes.
fn details(s: &ScenarioResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "verdict: {} over {} seeds", s.verdict.name(), s.seeds);
    for (anomaly, cases) in &s.forbidden_anomalies {
        let _ = writeln!(out, "forbidden: {anomaly} ({cases} cases)");
    }
    for line in &s.not_exercised {
        let _ = writeln!(out, "not exercised: {line}");
    }
    if let Some(c) = &s.counterexample {
        let _ = writeln!(out, "seed: {}", c.seed);
        let _ = writeln!(out, "replay: {}", c.replay);
        let _ = writeln!(out, "history: {}", c.history_path);
        for case in &c.anomalies {
            let _ = writeln!(out, "anomaly: {case}");
        }
        let _ = writeln!(out, "faults before the first forbidden anomaly:");
        for fault in &c.faults {
            let _ = writeln!(out, "  {fault}");
        }
        if let Some(shrunk) = &c.shrunk {
            let _ = writeln!(
                out,
                "shrunk schedule ({} of {} faults, {} runs):",
                shrunk.faults.len(),
                shrunk.faults_from,
                shrunk.runs
            );
            for fault in &shrunk.faults {
                let _ = writeln!(out, "  {fault}");
            }
            let _ = writeln!(out, "shrunk replay: {}", shrunk.replay);
        }
    }
    for note in &s.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Counterexample, Ledger, SeedClass, SeedRecord, Verdict};

    fn result(expected: Verdict) -> ScenarioResult {
        let mut r = ScenarioResult::new("p1-x", "clickhouse", "exactly-once");
        r.forbidden_anomalies.insert("sink-duplicate".into(), 3);
        r.counterexample = Some(Counterexample {
            seed: 7,
            replay: "cargo xtask sim --scenario scenarios/p1-x.toml --seed 7".into(),
            faults: vec!["t=1.000s kill worker-0".into()],
            history_path: "r/p1-x/7/history.jsonl".into(),
            anomalies: Vec::new(),
            explanations: Vec::new(),
            shrunk: None,
        });
        let seed = SeedRecord {
            seed: 7,
            class: SeedClass::Invalid,
            hash: "h".into(),
            faults_before_anomaly: 1,
            sim_time_ms: 1,
        };
        r.ledger = Some(Ledger {
            position: 0,
            expected,
            reached: Vec::new(),
            not_exercised_allowed: Vec::new(),
            stall_reason: None,
            seeds: vec![seed],
            shrink_note: None,
            determinism_notes: Vec::new(),
        });
        crate::report::judge::settle(&mut r);
        r
    }

    #[test]
    fn a_violated_claim_expected_to_hold_fails_with_its_seed_and_replay() {
        let report = RunReport {
            run_id: "t".into(),
            build: "b".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            scenarios: vec![result(Verdict::Holds), result(Verdict::Violated)],
        };
        let xml = junit_xml(&report).unwrap();
        let parsed = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        assert_eq!((parsed.tests, parsed.failures), (2, 1), "{xml}");
        let failing = &parsed.test_suites[0].test_cases[0];
        let TestCaseStatus::NonSuccess { description, .. } = &failing.status else {
            panic!("the violated claim passed: {xml}");
        };
        let text = description.as_ref().map(|d| d.as_str()).unwrap_or("");
        assert!(
            text.contains("seed: 7") && text.contains("--seed 7"),
            "{text}"
        );
        assert!(text.contains("forbidden: sink-duplicate"), "{text}");
        let passing = &parsed.test_suites[0].test_cases[1].status;
        assert!(matches!(passing, TestCaseStatus::Success { .. }), "{xml}");
    }
}

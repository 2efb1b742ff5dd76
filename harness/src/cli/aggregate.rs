//! From seed outcomes to a scenario's verdict: run the checkers on each seed's history,
//! classify the seed, then merge the seeds into a [`ScenarioResult`] with a counterexample
//! (the failing seed with the fewest faults before its first forbidden anomaly; ties go to
//! the smallest seed).
//!
pub use super::judge::exit_class;
use crate::checker::{check_all, CheckResult, Validity};
use crate::history::History;
use crate::report::explain::{explain_forbidden, fault_effect_lines, Explanation};
pub use crate::report::judge::{check_options, expected_verdict};
pub use crate::report::SeedClass;
use crate::report::{Counterexample, EffectCount, Ledger, ScenarioResult, SeedRecord, Verdict};
use crate::runner::SeedOutcome;
use crate::scenario::Scenario;
use eosim_sim::nemesis::ScheduledFault;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One seed, judged. Keeps what the scenario result needs, not the history.
#[derive(Debug, Clone)]
pub struct SeedVerdict {
    /// The seed.
    pub seed: u64,
    /// Its class.
    pub class: SeedClass,
    /// The checkers' result.
    pub check: CheckResult,
    /// `history-hash`.
    pub hash: String,
    /// Faults injected (recoveries not counted).
    pub faults: u64,
    /// Fault and recovery lines before the first forbidden anomaly (all, when none).
    pub faults_before_anomaly: Vec<String>,
    /// Faults (recoveries not counted) before the first forbidden anomaly.
    pub faults_before_anomaly_count: u64,
    /// Simulated time, ms.
    pub sim_time_ms: u64,
    /// Coverage marks hit.
    pub marks: BTreeMap<String, u64>,
    /// Faults scheduled per effect kind ([`SeedOutcome::scheduled`]).
    pub scheduled: BTreeMap<String, u64>,
    /// Times each effect kind acted ([`SeedOutcome::acted`]).
    pub acted: BTreeMap<String, u64>,
    /// The faults the seed applied, in time order ([`SeedOutcome::schedule`]).
    pub schedule: Vec<ScheduledFault>,
    /// Its first forbidden cases explained from the history (failing seeds only: the
    /// history is not kept, and a counterexample needs them).
    pub explanations: Vec<Explanation>,
}

/// Checks one seed's history and classifies the seed.
pub fn judge_seed(scenario: &Scenario, outcome: &SeedOutcome) -> SeedVerdict {
    let check = check_all(&outcome.history, &check_options(scenario));
    // A stalled run has not delivered everything yet, so records missing from the sink are
    // inconclusive: the stall is the finding (its anomalies are still listed).
    let class = if let Some(message) = &outcome.crashed {
        SeedClass::Crashed(message.clone())
    } else if let Some(reason) = &outcome.stalled {
        SeedClass::Stalled(reason.clone())
    } else if check.validity == Validity::Invalid {
        SeedClass::Invalid
    } else if check.validity == Validity::Unknown {
        SeedClass::Unknown
    } else {
        SeedClass::Holds
    };
    // By the op that completed the first forbidden case's evidence: a case also cites the
    // writes and acks that came before the faults that broke them.
    let first = crate::report::first_forbidden_op(&check);
    let (faults_before_anomaly, faults_before_anomaly_count) =
        faults_before(&outcome.history, first);
    let explanations = if matches!(class, SeedClass::Invalid | SeedClass::Unknown) {
        explain_forbidden(&outcome.history, &check)
    } else {
        Vec::new()
    };
    SeedVerdict {
        seed: outcome.seed,
        class,
        hash: outcome.history.hash(),
        faults: outcome.history.fault_count() as u64,
        faults_before_anomaly,
        faults_before_anomaly_count,
        sim_time_ms: outcome.sim_time_ms,
        marks: outcome.marks.clone(),
        scheduled: outcome.scheduled.clone(),
        acted: outcome.acted.clone(),
        schedule: outcome.schedule.clone(),
        explanations,
        check,
    }
}

/// Nemesis and fault-effect lines before `limit` (the whole history when `None`), and how
/// many faults (recoveries not counted) there are
/// ([`crate::report::explain::fault_effect_lines`]).
fn faults_before(history: &History, limit: Option<usize>) -> (Vec<String>, u64) {
    let end = limit.unwrap_or(usize::MAX);
    let found = fault_effect_lines(history.ops.iter().take_while(|op| op.index < end));
    (found.lines, found.faults)
}

/// The scenario's verdict: any crash, else any invalid or unknown seed, else any stall.
pub fn scenario_verdict(seeds: &[SeedVerdict]) -> Verdict {
    crate::report::judge::verdict_of(seeds.iter().map(|s| &s.class))
}

/// The counterexample seed: fewest faults before its first forbidden anomaly, then the
/// smallest seed.
pub fn counterexample_seed(seeds: &[SeedVerdict], verdict: Verdict) -> Option<&SeedVerdict> {
    seeds
        .iter()
        .filter(|s| crate::report::judge::matches_verdict(&s.class, verdict))
        .min_by_key(|s| (s.faults_before_anomaly_count, s.seed))
}

/// Where a failing seed's history goes: `<run_dir>/<scenario>/<seed>/history.jsonl`.
pub fn history_path(run_dir: &Path, scenario: &str, seed: u64) -> PathBuf {
    run_dir
        .join(scenario)
        .join(seed.to_string())
        .join("history.jsonl")
}

/// The exact command that replays a seed.
pub fn replay_command(scenario_path: &Path, seed: u64) -> String {
    format!(
        "cargo xtask sim --scenario {} --seed {seed}",
        scenario_path.display()
    )
}

/// Merges judged seeds into the scenario's result, `position` being the scenario's place
/// in the run's list; the result is settled ([`crate::report::judge::settle`]) from its ledger.
pub fn aggregate(
    scenario: &Scenario,
    scenario_path: &Path,
    run_dir: &Path,
    seeds: &[SeedVerdict],
    position: usize,
) -> ScenarioResult {
    let verdict = scenario_verdict(seeds);
    let mut anomalies: BTreeMap<String, u64> = BTreeMap::new();
    let mut forbidden: BTreeMap<String, u64> = BTreeMap::new();
    let mut marks: BTreeMap<String, u64> = BTreeMap::new();
    for s in seeds {
        for (anomaly, cases) in &s.check.anomalies {
            *anomalies.entry(anomaly.name().to_string()).or_default() += cases.len() as u64;
        }
        for anomaly in &s.check.forbidden {
            let cases = s.check.anomalies.get(anomaly).map_or(0, Vec::len) as u64;
            *forbidden.entry(anomaly.name().to_string()).or_default() += cases;
        }
        for (mark, n) in &s.marks {
            *marks.entry(mark.clone()).or_default() += n;
        }
    }
    let counterexample = counterexample_seed(seeds, verdict).map(|s| Counterexample {
        seed: s.seed,
        replay: replay_command(scenario_path, s.seed),
        faults: s.faults_before_anomaly.clone(),
        history_path: history_path(run_dir, &scenario.name, s.seed)
            .display()
            .to_string(),
        anomalies: s.check.case_texts(8),
        explanations: s.explanations.clone(),
        shrunk: None,
    });
    let mut result = ScenarioResult::new(&scenario.name, scenario.pipeline.name(), "");
    result.claim = claim_name(scenario);
    result.faults_injected = seeds.iter().map(|s| s.faults).sum();
    result.anomalies = anomalies;
    result.forbidden_anomalies = forbidden;
    result.marks = marks;
    result.fault_effects = effect_counts(seeds);
    result.counterexample = counterexample;
    result.ledger = Some(ledger(scenario, seeds, position));
    crate::report::judge::settle(&mut result);
    result
}

/// The scenario's rules and every seed's record, in seed order.
fn ledger(scenario: &Scenario, seeds: &[SeedVerdict], position: usize) -> Ledger {
    let mut records: Vec<SeedRecord> = seeds
        .iter()
        .map(|s| SeedRecord {
            seed: s.seed,
            class: s.class.clone(),
            hash: s.hash.clone(),
            faults_before_anomaly: s.faults_before_anomaly_count,
            sim_time_ms: s.sim_time_ms,
        })
        .collect();
    records.sort_by_key(|r| r.seed);
    Ledger {
        position,
        expected: expected_verdict(scenario),
        reached: scenario.check.reached.clone(),
        not_exercised_allowed: scenario.check.not_exercised_allowed.clone(),
        stall_reason: scenario.check.stall_reason.clone(),
        seeds: records,
        shrink_note: None,
        determinism_notes: Vec::new(),
    }
}

/// Scheduled and acted counts per effect kind over `seeds`.
fn effect_counts(seeds: &[SeedVerdict]) -> BTreeMap<String, EffectCount> {
    let mut counts: BTreeMap<String, EffectCount> = BTreeMap::new();
    for s in seeds {
        for (kind, n) in &s.scheduled {
            let c = counts.entry(kind.clone()).or_default();
            c.scheduled += n;
            c.seeds_scheduled += u64::from(*n > 0);
        }
        for (kind, n) in &s.acted {
            let c = counts.entry(kind.clone()).or_default();
            c.acted += n;
            c.seeds_acted += u64::from(*n > 0);
        }
    }
    counts
}

fn claim_name(scenario: &Scenario) -> String {
    serde_json::to_value(scenario.claim)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", scenario.claim))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{Anomaly, Case};
    use crate::cli::ExitClass;

    fn seed(seed: u64, class: SeedClass, faults_before: u64) -> SeedVerdict {
        let mut anomalies = BTreeMap::new();
        let mut forbidden = Vec::new();
        if class == SeedClass::Invalid {
            anomalies.insert(
                Anomaly::LostWrite,
                vec![Case {
                    ids: Vec::new(),
                    tp: None,
                    offsets: Vec::new(),
                    ops: vec![3],
                    text: "x".into(),
                }],
            );
            forbidden.push(Anomaly::LostWrite);
        }
        let validity = if forbidden.is_empty() {
            Validity::Valid
        } else {
            Validity::Invalid
        };
        SeedVerdict {
            seed,
            class,
            check: CheckResult {
                validity,
                anomalies,
                forbidden,
                ..CheckResult::default()
            },
            hash: String::new(),
            faults: faults_before + 1,
            faults_before_anomaly: Vec::new(),
            faults_before_anomaly_count: faults_before,
            sim_time_ms: 1_000,
            marks: BTreeMap::new(),
            scheduled: BTreeMap::new(),
            acted: BTreeMap::new(),
            schedule: Vec::new(),
            explanations: Vec::new(),
        }
    }

    #[test]
    fn the_counterexample_is_the_failing_seed_with_fewest_faults_then_smallest() {
        let seeds = vec![
            seed(1, SeedClass::Holds, 0),
            seed(2, SeedClass::Invalid, 5),
            seed(3, SeedClass::Invalid, 2),
            seed(4, SeedClass::Invalid, 2),
        ];
        let verdict = scenario_verdict(&seeds);
        assert_eq!(verdict, Verdict::Violated);
        assert_eq!(
            counterexample_seed(&seeds, verdict).map(|s| s.seed),
            Some(3)
        );
    }

    fn scenario(expect: &str) -> Scenario {
        let text = format!(
            "pipeline = \"kafka-consume\"\nclaim = \"at-least-once\"\n\
             [check]\nexpect = \"{expect}\"\n"
        );
        Scenario::parse(Path::new("scenarios/x.toml"), &text).expect("parses")
    }

    #[test]
    fn an_expected_violation_exits_zero_and_says_so() {
        let scenario = scenario("violated");
        let seeds = vec![seed(1, SeedClass::Holds, 0), seed(2, SeedClass::Invalid, 1)];
        let result = aggregate(
            &scenario,
            Path::new("scenarios/x.toml"),
            Path::new("r"),
            &seeds,
            0,
        );
        assert_eq!(result.verdict, Verdict::Violated);
        assert_eq!(
            exit_class(&result, expected_verdict(&scenario)),
            ExitClass::Expected
        );
        assert!(result
            .notes
            .iter()
            .any(|n| n.contains("expected: demonstrates a known failure")));
        let counterexample = result.counterexample.expect("a counterexample");
        assert_eq!(
            counterexample.replay,
            "cargo xtask sim --scenario scenarios/x.toml --seed 2"
        );
        assert_eq!(
            Path::new(&counterexample.history_path),
            Path::new("r/x/2/history.jsonl")
        );
        assert_eq!(result.anomalies.get("lost-write"), Some(&1));
    }

    #[test]
    fn an_expected_stall_for_another_reason_than_its_file_names_exits_three() {
        let text = "pipeline = \"kafka-consume\"\nclaim = \"at-least-once\"\n\
                    [check]\nexpect = \"stalled\"\nstall_reason = \"coordinator disabled\"\n";
        let scenario = Scenario::parse(Path::new("scenarios/x.toml"), text).expect("parses");
        let judge = |seeds: &[SeedVerdict]| {
            let result = aggregate(&scenario, Path::new("x"), Path::new("r"), seeds, 0);
            let class = exit_class(&result, expected_verdict(&scenario));
            (result.stalled_otherwise, class)
        };
        let named = seed(1, SeedClass::Stalled("the coordinator disabled".into()), 0);
        let (otherwise, class) = judge(std::slice::from_ref(&named));
        assert!(otherwise.is_empty(), "{otherwise:?}");
        assert_eq!(class, ExitClass::Expected);
        let other = seed(2, SeedClass::Stalled("producers not done".into()), 0);
        let (otherwise, class) = judge(&[named, other]);
        assert_eq!(class, ExitClass::Stalled);
        assert_eq!(otherwise.len(), 1);
        assert!(
            otherwise[0].starts_with("seed 2 stalled, but not for"),
            "{otherwise:?}"
        );
    }

    #[test]
    fn an_expected_violation_that_is_not_found_exits_one() {
        let scenario = scenario("violated");
        let seeds = vec![seed(1, SeedClass::Holds, 0)];
        let result = aggregate(
            &scenario,
            Path::new("scenarios/x.toml"),
            Path::new("r"),
            &seeds,
            0,
        );
        assert_eq!(result.verdict, Verdict::Holds);
        assert_eq!(
            exit_class(&result, expected_verdict(&scenario)),
            ExitClass::Violated
        );
    }

    #[test]
    fn a_violation_of_a_claim_expected_to_hold_exits_one() {
        let scenario = scenario("holds");
        let seeds = vec![seed(1, SeedClass::Invalid, 0)];
        let result = aggregate(
            &scenario,
            Path::new("scenarios/x.toml"),
            Path::new("r"),
            &seeds,
            0,
        );
        assert_eq!(
            exit_class(&result, expected_verdict(&scenario)),
            ExitClass::Violated
        );
    }

    /// A skipped scenario (the real tier could not run it) exits 6, not 0, and any other
    /// outcome beside it outranks it.
    #[test]
    fn a_skipped_scenario_has_its_own_exit_code_below_every_failure() {
        let scenario = scenario("holds");
        let mut result = aggregate(
            &scenario,
            Path::new("scenarios/x.toml"),
            Path::new("r"),
            &[seed(1, SeedClass::Holds, 0)],
            0,
        );
        result.verdict = Verdict::Skipped;
        let class = exit_class(&result, expected_verdict(&scenario));
        assert_eq!(class, ExitClass::Skipped);
        assert_eq!(class as u8, 6);
        assert!(ExitClass::Skipped > ExitClass::Expected);
        assert!(ExitClass::NotExercised > ExitClass::Skipped);
    }

    #[test]
    fn a_crash_outranks_a_violation() {
        let seeds = vec![
            seed(1, SeedClass::Invalid, 0),
            seed(2, SeedClass::Crashed("x".into()), 0),
        ];
        assert_eq!(scenario_verdict(&seeds), Verdict::Crashed);
    }
}

//! Sim/real agreement (`eosim report agreement`, `cargo xtask real-catalogue`): per
//! catalogue file, the simulation's verdict beside the verdicts of N runs of the same file
//! on real services, what each real run injected and what took effect, and every
//! disagreement classified.
//!
//! # Classes, per real run of a file
//! - [`RunClass::Agrees`]: the real verdict is the simulation's (`holds`/`holds`,
//!   `violated`/`violated`, `stalled`/`stalled`), and a real `holds` exercised what it was
//!   meant to.
//! - [`RunClass::RealGap`]: the real tier could not test the file as written: skipped (the
//!   note names what it cannot do), or a `holds` with faults that never acted there (its
//!   `not_exercised` lines, e.g. a message fault the native backend does not inject).
//!   Neither agreement nor disagreement: the file was not tested on real.
//! - [`RunClass::Timing`]: the simulation found a violation (over its seeds; a stall, its
//!   liveness violation, too) and the real run, with its faults acting, held: one wall-clock run did not hit the window the
//!   simulation's schedule hit. Expected for narrow windows; a disagreement all the same.
//! - [`RunClass::Disagrees`]: anything else, above all a real violation the simulation
//!   never found: a model to fix or a real-tier bug, to be explained by hand.
//! - [`RunClass::Crashed`]: the real run crashed (a fault could not be carried out, a
//!   service failed): no verdict.
//!
//! The agreement rate is `Agrees / (Agrees + Timing + Disagrees)`: the runs that tested
//! the file on real services and gave a verdict.

use super::{RunReport, ScenarioResult, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How one real run of a file compares with the simulation ([module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunClass {
    /// Same verdict, exercised.
    Agrees,
    /// The simulation's violation was not hit by the real run.
    Timing,
    /// Any other difference.
    Disagrees,
    /// The real tier could not test the file as written.
    RealGap,
    /// The real run crashed.
    Crashed,
}

impl RunClass {
    /// The kebab-case name (`real-gap`).
    pub fn name(self) -> &'static str {
        match self {
            RunClass::Agrees => "agrees",
            RunClass::Timing => "timing",
            RunClass::Disagrees => "disagrees",
            RunClass::RealGap => "real-gap",
            RunClass::Crashed => "crashed",
        }
    }
}

/// One real run of a file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealRun {
    /// The real run's id (its report dir name).
    pub run_id: String,
    /// Its verdict.
    pub verdict: Verdict,
    /// Its class against the simulation.
    pub class: RunClass,
    /// Faults scheduled / acted per effect kind (`kill: scheduled 1 (1 seeds), acted 1 (1
    /// seeds)`).
    pub effects: Vec<String>,
    /// Why: the skip reason, what was not exercised, the forbidden anomalies seen, or the
    /// crash.
    pub why: Vec<String>,
}

/// One catalogue file: the simulation beside its real runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgreementRow {
    /// Scenario name.
    pub scenario: String,
    /// Pipeline.
    pub pipeline: String,
    /// The simulation's verdict over its seeds.
    pub sim_verdict: Verdict,
    /// Seeds the simulation ran.
    pub sim_seeds: u64,
    /// The simulation's forbidden anomalies, with cases.
    pub sim_forbidden: BTreeMap<String, u64>,
    /// The real runs, in the order given.
    pub real: Vec<RealRun>,
}

/// The agreement of a simulation run and real runs of the same files.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// The simulation run's id.
    pub sim_run: String,
    /// One row per file the simulation ran, in its order.
    pub rows: Vec<AgreementRow>,
    /// Files the real runs ran that the simulation did not (named, not compared).
    pub real_only: Vec<String>,
}

impl Agreement {
    /// Real runs per class, over every row.
    pub fn counts(&self) -> BTreeMap<RunClass, u64> {
        let mut counts = BTreeMap::new();
        for run in self.rows.iter().flat_map(|r| &r.real) {
            *counts.entry(run.class).or_insert(0) += 1;
        }
        counts
    }

    /// `Agrees / (Agrees + Timing + Disagrees)`, `None` when no real run gave a comparable
    /// verdict.
    pub fn rate(&self) -> Option<f64> {
        let c = self.counts();
        let get = |k| c.get(&k).copied().unwrap_or(0);
        let agrees = get(RunClass::Agrees);
        let tested = agrees + get(RunClass::Timing) + get(RunClass::Disagrees);
        (tested > 0).then(|| agrees as f64 / tested as f64)
    }
}

/// Compares `sim` (a simulation run) with `reals` (real runs of some of its files).
pub fn agreement(sim: &RunReport, reals: &[RunReport]) -> Agreement {
    let rows = sim
        .scenarios
        .iter()
        .map(|s| AgreementRow {
            scenario: s.scenario.clone(),
            pipeline: s.pipeline.clone(),
            sim_verdict: s.verdict,
            sim_seeds: s.seeds,
            sim_forbidden: s.forbidden_anomalies.clone(),
            real: reals
                .iter()
                .flat_map(|r| {
                    let of = |x: &&ScenarioResult| x.scenario == s.scenario;
                    r.scenarios
                        .iter()
                        .filter(of)
                        .map(|x| real_run(&r.run_id, s, x))
                })
                .collect(),
        })
        .collect();
    let mut real_only: Vec<String> = reals
        .iter()
        .flat_map(|r| &r.scenarios)
        .filter(|x| !sim.scenarios.iter().any(|s| s.scenario == x.scenario))
        .map(|x| x.scenario.clone())
        .collect();
    real_only.sort();
    real_only.dedup();
    Agreement {
        sim_run: sim.run_id.clone(),
        rows,
        real_only,
    }
}

fn real_run(run_id: &str, sim: &ScenarioResult, real: &ScenarioResult) -> RealRun {
    let effects = real
        .fault_effects
        .iter()
        .map(|(kind, c)| format!("{kind}: {}", c.text()))
        .collect();
    let forbidden = || {
        real.forbidden_anomalies
            .iter()
            .map(|(a, n)| format!("forbidden on real: {a} ({n} cases)"))
            .collect::<Vec<_>>()
    };
    let (class, why) = match (sim.verdict, real.verdict) {
        (_, Verdict::Skipped) => (RunClass::RealGap, real.notes.clone()),
        (_, Verdict::Crashed) => (RunClass::Crashed, real.notes.clone()),
        (_, Verdict::Holds) if !real.not_exercised.is_empty() => {
            (RunClass::RealGap, real.not_exercised.clone())
        }
        (s, r) if s == r => (RunClass::Agrees, forbidden()),
        // A stall is the simulation's liveness violation (a task that stays failed, a
        // drain that never converges): the same window question as a safety violation.
        (Verdict::Violated | Verdict::Stalled, Verdict::Holds) => {
            let seed = sim.counterexample.as_ref().map_or(String::new(), |c| {
                format!(" (the simulation's seed {})", c.seed)
            });
            let why = if real.faults_injected == 0 {
                format!(
                    "the file injects no fault: the violation the simulation found{seed} \
                     comes from the run's own timing, which the real run did not hit"
                )
            } else {
                format!(
                    "the faults acted on real but the run did not hit the window the \
                     simulation found{seed}"
                )
            };
            (RunClass::Timing, vec![why])
        }
        (s, r) => {
            let mut why = vec![format!(
                "simulation {} but real {}: a model to fix or a real-tier bug; explain it",
                s.name(),
                r.name()
            )];
            why.extend(forbidden());
            why.extend(real.stalled_otherwise.iter().cloned());
            (RunClass::Disagrees, why)
        }
    };
    RealRun {
        run_id: run_id.to_string(),
        verdict: real.verdict,
        class,
        effects,
        why,
    }
}

/// `agreement.md`: the table, the counts and the rate.
pub fn agreement_markdown(a: &Agreement) -> String {
    let mut out = format!("# Sim/real agreement\n\nsimulation run `{}`", a.sim_run);
    let counts = a.counts();
    let runs: u64 = counts.values().sum();
    let _ = write!(out, ", {} files, {runs} real runs: ", a.rows.len());
    let parts: Vec<String> = counts
        .iter()
        .map(|(k, n)| format!("{n} {}", k.name()))
        .collect();
    out.push_str(&parts.join(", "));
    match a.rate() {
        Some(r) => {
            let _ = write!(
                out,
                ". Agreement {:.0} % of the runs that tested a file on real services \
                 (agrees / (agrees + timing + disagrees)).\n\n",
                r * 100.0
            );
        }
        None => out.push_str(". No real run tested a file.\n\n"),
    }
    out.push_str(
        "| scenario | pipeline | simulation | real run | real | class | faults on real \
         (scheduled / acted) | why |\n|---|---|---|---|---|---|---|---|\n",
    );
    for row in &a.rows {
        let sim = format!("{} ({} seeds)", row.sim_verdict.name(), row.sim_seeds);
        if row.real.is_empty() {
            let _ = writeln!(
                out,
                "| {} | {} | {sim} | - | not run | - | - | - |",
                row.scenario, row.pipeline
            );
        }
        for run in &row.real {
            let effects = if run.effects.is_empty() {
                "none".to_string()
            } else {
                run.effects.join("; ")
            };
            let _ = writeln!(
                out,
                "| {} | {} | {sim} | {} | {} | {} | {effects} | {} |",
                row.scenario,
                row.pipeline,
                run.run_id,
                run.verdict.name(),
                run.class.name(),
                cell(&run.why.join("; "))
            );
        }
    }
    if !a.real_only.is_empty() {
        let _ = write!(
            out,
            "\nReal runs of files the simulation run did not include (not compared): {}\n",
            a.real_only.join(", ")
        );
    }
    out
}

/// A Markdown table cell: no pipes, no newlines.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{EffectCount, ScenarioResult};

    fn result(name: &str, verdict: Verdict) -> ScenarioResult {
        let mut s = ScenarioResult::new(name, "connect-jdbc", "exactly-once");
        s.verdict = verdict;
        s.seeds = 5;
        s
    }

    fn report(id: &str, scenarios: Vec<ScenarioResult>) -> RunReport {
        RunReport {
            run_id: id.into(),
            build: "b".into(),
            started_at: String::new(),
            scenarios,
        }
    }

    #[test]
    fn each_real_run_is_classified_against_the_simulation() {
        let sim = report(
            "sim",
            vec![
                result("agree", Verdict::Holds),
                result("window", Verdict::Violated),
                result("model-bug", Verdict::Holds),
                result("partition-only", Verdict::Violated),
                result("skipped", Verdict::Holds),
                result("never-run", Verdict::Holds),
                result("stall-window", Verdict::Stalled),
            ],
        );
        let mut acted = result("window", Verdict::Holds);
        acted.faults_injected = 1;
        acted.fault_effects.insert(
            "kill".into(),
            EffectCount {
                scheduled: 1,
                acted: 1,
                seeds_scheduled: 1,
                seeds_acted: 1,
            },
        );
        let mut bug = result("model-bug", Verdict::Violated);
        bug.forbidden_anomalies.insert("duplicate".into(), 3);
        let mut gap = result("partition-only", Verdict::Holds);
        gap.not_exercised
            .push("partition never acted (scheduled 1 times in 1 seeds)".into());
        let mut skipped = result("skipped", Verdict::Skipped);
        skipped
            .notes
            .push("skipped: pipeline x is not supported".into());
        let real = report(
            "real-1",
            vec![
                result("agree", Verdict::Holds),
                acted,
                bug,
                gap,
                skipped,
                result("extra", Verdict::Holds),
                result("stall-window", Verdict::Holds),
            ],
        );
        let a = agreement(&sim, &[real]);
        let class = |name: &str| {
            let row = a.rows.iter().find(|r| r.scenario == name).unwrap();
            row.real.iter().map(|r| r.class).collect::<Vec<_>>()
        };
        assert_eq!(class("agree"), [RunClass::Agrees]);
        assert_eq!(class("window"), [RunClass::Timing]);
        assert_eq!(class("stall-window"), [RunClass::Timing]);
        let why = |name: &str| {
            let row = a.rows.iter().find(|r| r.scenario == name).unwrap();
            row.real[0].why.join("; ")
        };
        assert!(
            why("window").starts_with("the faults acted on real"),
            "{}",
            why("window")
        );
        assert!(
            why("stall-window").starts_with("the file injects no fault"),
            "{}",
            why("stall-window")
        );
        assert_eq!(class("model-bug"), [RunClass::Disagrees]);
        assert_eq!(class("partition-only"), [RunClass::RealGap]);
        assert_eq!(class("skipped"), [RunClass::RealGap]);
        assert_eq!(class("never-run"), []);
        assert_eq!(a.real_only, ["extra"]);
        // 1 agrees of 4 tested (agrees, 2 timing, disagrees); gaps do not count.
        assert!((a.rate().unwrap() - 1.0 / 4.0).abs() < 1e-12);
        let md = agreement_markdown(&a);
        assert!(md.contains("Agreement 25 %"), "{md}");
        assert!(
            md.contains(
                "| model-bug | connect-jdbc | holds (5 seeds) | real-1 | violated | disagrees |"
            ),
            "{md}"
        );
        assert!(
            md.contains("forbidden on real: duplicate (3 cases)"),
            "{md}"
        );
        assert!(
            md.contains("kill: scheduled 1 (1 seeds), acted 1 (1 seeds)"),
            "{md}"
        );
        assert!(
            md.contains("| never-run | connect-jdbc | holds (5 seeds) | - | not run |"),
            "{md}"
        );
    }

    #[test]
    fn no_tested_run_has_no_rate() {
        let sim = report("sim", vec![result("s", Verdict::Holds)]);
        let real = report("r", vec![result("s", Verdict::Skipped)]);
        let a = agreement(&sim, &[real]);
        assert_eq!(a.rate(), None);
        assert!(agreement_markdown(&a).contains("No real run tested a file."));
    }
}

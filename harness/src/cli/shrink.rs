//! Shrinking a counterexample's fault schedule (delta debugging, Zeller's ddmin, on the
//! complement side only), so a failing claim comes with the fewest faults that still break
//! it, as Jepsen and FoundationDB users expect.
//!
//! # How
//! The failing seed's applied faults (explicit and swarm-drawn, [`SeedOutcome::schedule`])
//! become an explicit `[[faults.schedule]]` with the swarm removed. That scenario is run at
//! the same seed; if it still shows one of the original's forbidden anomalies, chunks of
//! the schedule are removed in turn (halves, quarters, ... single faults), keeping every
//! removal after which the seed still fails, until no single fault can go or the run budget
//! is spent. Every candidate is judged by running it, so the result is a verified
//! counterexample: the shrunk scenario file and the seed replay it bit for bit.
//!
//! Dropping the swarm changes what the simulator's random stream is spent on, so the
//! explicit schedule is not guaranteed to fail at the seed where the swarm did; then the
//! shrink reports `not reproduced` and the original counterexample stands alone.
//!
//! A recovery (`restart`, `resume`, `heal`) is a fault like any other here: the drain
//! recovers everything at `faults.until_ms` anyway, so dropping one only lengthens a fault.

use super::aggregate::{judge_seed, SeedClass};
use crate::checker::Anomaly;
use crate::report::Shrunk;
use crate::runner::SeedOutcome;
use crate::scenario::Scenario;
use eosim_sim::nemesis::ScheduledFault;
use std::collections::BTreeSet;
use std::path::Path;

/// What a shrink ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum ShrinkOutcome {
    /// The explicit schedule with every fault did not fail at the seed.
    NotReproduced,
    /// A schedule that still fails, and the runs it took.
    Shrunk {
        /// The smallest failing schedule found.
        schedule: Vec<ScheduledFault>,
        /// Runs spent, the first (the whole schedule) included.
        runs: u32,
        /// Whether ddmin finished (each remaining fault is needed) before the budget.
        minimal: bool,
    },
}

/// `scenario` with its swarm removed and `schedule` as its explicit faults.
pub fn with_schedule(scenario: &Scenario, schedule: &[ScheduledFault]) -> Scenario {
    let mut s = scenario.clone();
    s.faults.swarm = None;
    s.faults.schedule = schedule.to_vec();
    s
}

/// Shrinks `schedule` at `seed`, judging each candidate by running `run(candidate, seed)`:
/// a candidate fails when its seed is invalid with a forbidden anomaly in `target`. At
/// most `runs_max` runs.
pub fn shrink(
    scenario: &Scenario,
    seed: u64,
    schedule: &[ScheduledFault],
    target: &BTreeSet<Anomaly>,
    runs_max: u32,
    run: &dyn Fn(&Scenario, u64) -> SeedOutcome,
) -> ShrinkOutcome {
    let runs = std::cell::Cell::new(0u32);
    let fails = |candidate: &[ScheduledFault]| {
        runs.set(runs.get() + 1);
        let s = with_schedule(scenario, candidate);
        let verdict = judge_seed(&s, &run(&s, seed));
        verdict.class == SeedClass::Invalid
            && verdict.check.forbidden.iter().any(|a| target.contains(a))
    };
    if runs_max == 0 || !fails(schedule) {
        return ShrinkOutcome::NotReproduced;
    }
    let mut current = schedule.to_vec();
    let mut chunks = 2usize;
    let mut minimal = false;
    'outer: while !current.is_empty() {
        let size = current.len().div_ceil(chunks.min(current.len()));
        for start in (0..current.len()).step_by(size) {
            if runs.get() >= runs_max {
                break 'outer;
            }
            let candidate: Vec<ScheduledFault> = current[..start]
                .iter()
                .chain(current.get(start + size..).unwrap_or(&[]))
                .cloned()
                .collect();
            if fails(&candidate) {
                current = candidate;
                chunks = chunks.saturating_sub(1).max(2);
                continue 'outer;
            }
        }
        if size == 1 {
            minimal = true;
            break;
        }
        chunks = (chunks * 2).min(current.len());
    }
    ShrinkOutcome::Shrunk {
        minimal: minimal || current.is_empty(),
        schedule: current,
        runs: runs.get(),
    }
}

/// Writes the shrunk scenario next to the counterexample's history and describes it for
/// the report. `Err` names the file that could not be written.
pub fn record_shrunk(
    scenario: &Scenario,
    original_faults: usize,
    outcome: &ShrinkOutcome,
    file: &Path,
    seed: u64,
) -> Result<Option<Shrunk>, String> {
    let ShrinkOutcome::Shrunk {
        schedule,
        runs,
        minimal,
    } = outcome
    else {
        return Ok(None);
    };
    let shrunk = with_schedule(scenario, schedule);
    let text = shrunk
        .to_toml()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let header = format!(
        "# Shrunk counterexample of scenario `{}` at seed {seed}: {} of {original_faults} \
         faults, found in {runs} runs{}.\n# Replay: cargo xtask replay --scenario {} --seed \
         {seed}\n\n",
        scenario.name,
        schedule.len(),
        if *minimal { "" } else { " (run budget spent)" },
        file.display()
    );
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(file, header + &text).map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Some(Shrunk {
        faults_from: original_faults as u64,
        faults: schedule.iter().map(fault_line).collect(),
        runs: *runs,
        minimal: *minimal,
        scenario_file: file.display().to_string(),
        replay: format!(
            "cargo xtask replay --scenario {} --seed {seed}",
            file.display()
        ),
    }))
}

/// `at_ms=4200 kill target=["worker-0"]`: one fault as a report line.
fn fault_line(f: &ScheduledFault) -> String {
    let value = toml::Value::try_from(&f.fault)
        .map(|v| v.to_string())
        .unwrap_or_else(|e| format!("<{e}>"));
    format!("at_ms={} {}", f.at_ms, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{History, OpKind, Value};
    use eosim_sim::nemesis::Fault;

    fn kill(at_ms: u64, target: &str) -> ScheduledFault {
        ScheduledFault {
            at_ms,
            fault: Fault::Kill {
                target: vec![target.into()],
                mode: eosim_sim::kafka::model::CrashMode::ProcessKill,
            },
        }
    }

    fn scenario() -> Scenario {
        let text = r#"
name = "shrink-unit"
description = "unit test of the shrinker"
pipeline = "kafka-consume"
claim = "at-least-once"
seeds = 10
"#;
        Scenario::parse(Path::new("shrink-unit.toml"), text).expect("a valid scenario")
    }

    /// A fake run whose history loses a record exactly when both `consumer-1` and
    /// `consumer-3` are killed: the shrinker must keep those two and drop the rest.
    fn fake_run(s: &Scenario, seed: u64) -> SeedOutcome {
        let killed = |name: &str| {
            s.faults
                .schedule
                .iter()
                .any(|f| matches!(&f.fault, Fault::Kill { target, .. } if target[0] == name))
        };
        let mut history = History::default();
        let tp = eosim_sim::kafka::TopicPartition::new("t", 0);
        let send = |offset: Option<i64>| Value::Send {
            id: 1,
            key: None,
            tp: offset.map(|_| tp.clone()),
            offset,
        };
        history.push(0, "producer-0", OpKind::Invoke, send(None), None);
        history.push(1, "producer-0", OpKind::Ok, send(Some(0)), None);
        let log = if killed("consumer-1") && killed("consumer-3") {
            Vec::new()
        } else {
            vec![crate::history::RecordRef {
                id: 1,
                key: None,
                tp: tp.clone(),
                offset: 0,
            }]
        };
        let log = Value::LogState {
            tp: tp.clone(),
            records: log,
        };
        history.push(2, "final", OpKind::Ok, log, None);
        SeedOutcome {
            seed,
            history,
            stalled: None,
            crashed: None,
            sim_time_ms: 0,
            marks: Default::default(),
            drawn: Vec::new(),
            schedule: s.faults.schedule.clone(),
        }
    }

    #[test]
    fn ddmin_keeps_exactly_the_faults_the_failure_needs() {
        let schedule: Vec<ScheduledFault> = (0..8)
            .map(|i| kill(1_000 * i, &format!("consumer-{i}")))
            .collect();
        let target: BTreeSet<Anomaly> = Anomaly::ALL.iter().copied().collect();
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &fake_run);
        let ShrinkOutcome::Shrunk {
            schedule: kept,
            minimal,
            runs,
        } = out
        else {
            panic!("the whole schedule fails, so it must shrink: {out:?}");
        };
        assert_eq!(kept, vec![schedule[1].clone(), schedule[3].clone()]);
        assert!(minimal, "ddmin ran to the end within 100 runs");
        assert!(runs < 30, "ddmin on 8 faults took {runs} runs");
    }

    #[test]
    fn a_schedule_that_does_not_fail_is_not_reproduced() {
        let schedule = vec![kill(0, "consumer-1")];
        let target: BTreeSet<Anomaly> = Anomaly::ALL.iter().copied().collect();
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &fake_run);
        assert_eq!(out, ShrinkOutcome::NotReproduced);
    }

    #[test]
    fn the_budget_stops_the_shrink_and_says_so() {
        let schedule: Vec<ScheduledFault> = (0..8)
            .map(|i| kill(1_000 * i, &format!("consumer-{i}")))
            .collect();
        let target: BTreeSet<Anomaly> = Anomaly::ALL.iter().copied().collect();
        let out = shrink(&scenario(), 7, &schedule, &target, 3, &fake_run);
        match out {
            ShrinkOutcome::Shrunk { minimal, runs, .. } => {
                assert!(!minimal);
                assert_eq!(runs, 3);
            }
            other => panic!("expected a partial shrink: {other:?}"),
        }
    }
}

//! Shrinking a counterexample's fault schedule (delta debugging, Zeller's ddmin, on the
//! complement side only), so a failing claim comes with the fewest faults that still break
//! it, as Jepsen and FoundationDB users expect.
//!
//! # How
//! The failing seed's applied faults (explicit and swarm-drawn, [`SeedOutcome::schedule`])
//! become an explicit `[[faults.schedule]]` with the swarm removed. That scenario is run at
//! the same seed; if it still shows every forbidden anomaly kind of the original, chunks of
//! the schedule are removed in turn (halves, quarters, ... single faults), keeping every
//! removal after which the seed still shows them all, until no single fault can go or the
//! run budget is spent. Every candidate is judged by running it, so the result is a verified
//! counterexample: the shrunk scenario file and the seed replay it bit for bit.
//!
//! Keeping every kind, not any one, is what keeps the failure: a run that lost 1000 records
//! (`sink-lost` and `progress-ahead-of-data`) must not shrink to one that only shows the
//! offsets running ahead and loses nothing. The case counts may still fall (fewer faults,
//! fewer losses); the report shows them per kind, original → shrunk.
//!
//! Dropping the swarm changes what the simulator's random stream is spent on, so the
//! explicit schedule is not guaranteed to fail at the seed where the swarm did; then the
//! shrink reports `not reproduced` and the original counterexample stands alone.
//!
//! A recovery (`restart`, `resume`, `heal`) is a fault like any other here: the drain
//! recovers everything at `faults.until_ms` anyway, so dropping one only lengthens a fault.

use super::aggregate::{judge_seed, SeedClass};
use crate::checker::{Anomaly, CheckResult};
use crate::report::{Shrunk, ShrunkAnomaly};
use crate::runner::SeedOutcome;
use crate::scenario::Scenario;
use eosim_sim::nemesis::ScheduledFault;
use std::collections::{BTreeMap, BTreeSet};
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
        /// Cases per forbidden anomaly in the run of `schedule`: every kind of the target,
        /// and any other forbidden kind that run shows.
        forbidden: BTreeMap<Anomaly, u64>,
    },
}

/// Cases per forbidden anomaly `check` found (kinds without a case are absent).
pub fn forbidden_cases(check: &CheckResult) -> BTreeMap<Anomaly, u64> {
    check
        .forbidden
        .iter()
        .map(|a| (*a, check.anomalies.get(a).map_or(0, Vec::len) as u64))
        .filter(|(_, cases)| *cases > 0)
        .collect()
}

/// `scenario` with its swarm removed and `schedule` as its explicit faults.
pub fn with_schedule(scenario: &Scenario, schedule: &[ScheduledFault]) -> Scenario {
    let mut s = scenario.clone();
    s.faults.swarm = None;
    s.faults.schedule = schedule.to_vec();
    s
}

/// Shrinks `schedule` at `seed`, judging each candidate by running `run(candidate, seed)`:
/// a candidate is kept when its seed is invalid with every anomaly of `target` (the
/// original counterexample's forbidden kinds) among its forbidden ones. At most `runs_max`
/// runs; an empty `target` is [`ShrinkOutcome::NotReproduced`] (no failure to keep).
pub fn shrink(
    scenario: &Scenario,
    seed: u64,
    schedule: &[ScheduledFault],
    target: &BTreeSet<Anomaly>,
    runs_max: u32,
    run: &dyn Fn(&Scenario, u64) -> SeedOutcome,
) -> ShrinkOutcome {
    let runs = std::cell::Cell::new(0u32);
    // The candidate's forbidden cases, when it keeps the whole target.
    let keeps = |candidate: &[ScheduledFault]| {
        runs.set(runs.get() + 1);
        let s = with_schedule(scenario, candidate);
        let verdict = judge_seed(&s, &run(&s, seed));
        let forbidden = forbidden_cases(&verdict.check);
        let all = target.iter().all(|a| forbidden.contains_key(a));
        (verdict.class == SeedClass::Invalid && all).then_some(forbidden)
    };
    if runs_max == 0 || target.is_empty() {
        return ShrinkOutcome::NotReproduced;
    }
    let Some(mut forbidden) = keeps(schedule) else {
        return ShrinkOutcome::NotReproduced;
    };
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
            if let Some(kept) = keeps(&candidate) {
                current = candidate;
                forbidden = kept;
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
        forbidden,
    }
}

/// Writes the shrunk scenario next to the counterexample's history and describes it for
/// the report, with its forbidden cases next to `original_forbidden` (the counterexample's,
/// [`forbidden_cases`]). `Err` names the file that could not be written.
pub fn record_shrunk(
    scenario: &Scenario,
    original_faults: usize,
    original_forbidden: &BTreeMap<Anomaly, u64>,
    outcome: &ShrinkOutcome,
    file: &Path,
    seed: u64,
) -> Result<Option<Shrunk>, String> {
    let ShrinkOutcome::Shrunk {
        schedule,
        runs,
        minimal,
        forbidden,
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
        forbidden: compare_cases(original_forbidden, forbidden),
    }))
}

/// Per forbidden anomaly of either run: its cases in the original and in the shrunk run.
fn compare_cases(
    original: &BTreeMap<Anomaly, u64>,
    shrunk: &BTreeMap<Anomaly, u64>,
) -> BTreeMap<String, ShrunkAnomaly> {
    let kinds: BTreeSet<Anomaly> = original.keys().chain(shrunk.keys()).copied().collect();
    kinds
        .into_iter()
        .map(|a| {
            let cases = ShrunkAnomaly {
                cases_from: original.get(&a).copied().unwrap_or(0),
                cases: shrunk.get(&a).copied().unwrap_or(0),
            };
            (a.name().to_string(), cases)
        })
        .collect()
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

    fn killed(s: &Scenario, name: &str) -> bool {
        s.faults
            .schedule
            .iter()
            .any(|f| matches!(&f.fault, Fault::Kill { target, .. } if target[0] == name))
    }

    /// A run of `s` at `seed`: ids `0..sent` acknowledged at offset = id of `t/0`; the final
    /// log holds the ids `in_log` accepts, the sink those of the log `in_sink` accepts.
    fn outcome(
        s: &Scenario,
        seed: u64,
        sent: u64,
        in_log: &dyn Fn(u64) -> bool,
        in_sink: &dyn Fn(u64) -> bool,
    ) -> SeedOutcome {
        let mut history = History::default();
        let tp = eosim_sim::kafka::TopicPartition::new("t", 0);
        let record = |id: u64| crate::history::RecordRef {
            id,
            key: None,
            tp: tp.clone(),
            offset: id as i64,
        };
        let send = |id: u64, offset: Option<i64>| Value::Send {
            id,
            key: None,
            tp: offset.map(|_| tp.clone()),
            offset,
        };
        for id in 0..sent {
            history.push(0, "producer-0", OpKind::Invoke, send(id, None), None);
            history.push(1, "producer-0", OpKind::Ok, send(id, Some(id as i64)), None);
        }
        let log: Vec<u64> = (0..sent).filter(|id| in_log(*id)).collect();
        let records = log.iter().map(|id| record(*id)).collect();
        let rows = log.iter().filter(|id| in_sink(**id)).map(|id| record(*id));
        let log = Value::LogState {
            tp: tp.clone(),
            records,
        };
        history.push(2, "final", OpKind::Ok, log, None);
        let sink = Value::SinkState {
            rows: rows.collect(),
        };
        history.push(3, "final", OpKind::Ok, sink, None);
        SeedOutcome {
            seed,
            history,
            stalled: None,
            crashed: None,
            sim_time_ms: 0,
            marks: Default::default(),
            scheduled: Default::default(),
            acted: Default::default(),
            drawn: Vec::new(),
            schedule: s.faults.schedule.clone(),
        }
    }

    /// A fake run whose history loses an acknowledged record (`lost-write`) exactly when
    /// both `consumer-1` and `consumer-3` are killed: the shrinker must keep those two and
    /// drop the rest.
    fn fake_run(s: &Scenario, seed: u64) -> SeedOutcome {
        let lost = killed(s, "consumer-1") && killed(s, "consumer-3");
        outcome(s, seed, 1, &|_| !lost, &|_| true)
    }

    /// A fake run with two forbidden kinds, each needing its own fault: while `consumer-1`
    /// is killed, Kafka loses as many acknowledged ids as the schedule has faults
    /// (`lost-write`); while `consumer-5` is killed, the sink misses id 15 (`sink-lost`).
    fn two_kind_run(s: &Scenario, seed: u64) -> SeedOutcome {
        let faults = s.faults.schedule.len() as u64;
        let (lose, drop) = (killed(s, "consumer-1"), killed(s, "consumer-5"));
        outcome(s, seed, 16, &|id| !(lose && id < faults), &|id| {
            !(drop && id == 15)
        })
    }

    fn eight_kills() -> Vec<ScheduledFault> {
        (0..8)
            .map(|i| kill(1_000 * i, &format!("consumer-{i}")))
            .collect()
    }

    #[test]
    fn a_schedule_that_keeps_one_forbidden_kind_but_loses_another_is_not_accepted() {
        let schedule = eight_kills();
        let whole = with_schedule(&scenario(), &schedule);
        let original = forbidden_cases(&judge_seed(&whole, &two_kind_run(&whole, 7)).check);
        let expected = BTreeMap::from([(Anomaly::LostWrite, 8), (Anomaly::SinkLost, 1)]);
        assert_eq!(original, expected, "the fixture shows both kinds");
        let target: BTreeSet<Anomaly> = original.keys().copied().collect();
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &two_kind_run);
        let ShrinkOutcome::Shrunk {
            schedule: kept,
            forbidden,
            minimal,
            ..
        } = out
        else {
            panic!("the whole schedule shows both kinds, so it must shrink: {out:?}");
        };
        // Dropping consumer-5's kill keeps lost-write but loses sink-lost: not accepted.
        assert_eq!(kept, vec![schedule[1].clone(), schedule[5].clone()]);
        assert!(minimal);
        let expected = BTreeMap::from([(Anomaly::LostWrite, 2), (Anomaly::SinkLost, 1)]);
        assert_eq!(forbidden, expected, "the shrunk run's cases, kind by kind");
    }

    #[test]
    fn only_the_target_kinds_are_required() {
        let schedule = eight_kills();
        let target = BTreeSet::from([Anomaly::LostWrite]);
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &two_kind_run);
        let ShrinkOutcome::Shrunk {
            schedule: kept,
            forbidden,
            ..
        } = out
        else {
            panic!("expected a shrink: {out:?}");
        };
        assert_eq!(kept, vec![schedule[1].clone()]);
        assert_eq!(forbidden, BTreeMap::from([(Anomaly::LostWrite, 1)]));
    }

    #[test]
    fn an_empty_target_is_not_reproduced_without_a_run() {
        let run = |_: &Scenario, _: u64| -> SeedOutcome { panic!("no run is needed") };
        let out = shrink(&scenario(), 7, &eight_kills(), &BTreeSet::new(), 100, &run);
        assert_eq!(out, ShrinkOutcome::NotReproduced);
    }

    #[test]
    fn the_report_pairs_each_kind_with_its_original_cases() {
        let original =
            BTreeMap::from([(Anomaly::SinkLost, 1000), (Anomaly::ProgressAheadOfData, 3)]);
        let shrunk = BTreeMap::from([
            (Anomaly::SinkLost, 3),
            (Anomaly::ProgressAheadOfData, 3),
            (Anomaly::SinkDuplicate, 2),
        ]);
        let pairs: Vec<(String, u64, u64)> = compare_cases(&original, &shrunk)
            .into_iter()
            .map(|(a, n)| (a, n.cases_from, n.cases))
            .collect();
        let expected = [
            ("progress-ahead-of-data", 3, 3),
            ("sink-duplicate", 0, 2),
            ("sink-lost", 1000, 3),
        ];
        let expected: Vec<(String, u64, u64)> = expected
            .iter()
            .map(|(a, from, to)| (a.to_string(), *from, *to))
            .collect();
        assert_eq!(pairs, expected);
    }

    #[test]
    fn ddmin_keeps_exactly_the_faults_the_failure_needs() {
        let schedule = eight_kills();
        let target = BTreeSet::from([Anomaly::LostWrite]);
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &fake_run);
        let ShrinkOutcome::Shrunk {
            schedule: kept,
            minimal,
            runs,
            ..
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
        let target = BTreeSet::from([Anomaly::LostWrite]);
        let out = shrink(&scenario(), 7, &schedule, &target, 100, &fake_run);
        assert_eq!(out, ShrinkOutcome::NotReproduced);
    }

    #[test]
    fn the_budget_stops_the_shrink_and_says_so() {
        let schedule = eight_kills();
        let target = BTreeSet::from([Anomaly::LostWrite]);
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

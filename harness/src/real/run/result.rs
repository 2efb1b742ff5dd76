//! A real run's outcome as a [`ScenarioResult`]: the same checkers and report as the
//! simulation, with the run reported as its one seed and its measured throughput and latency.

use super::measure::measure;
use super::RealOutcome;
use crate::checker::{check_all, Validity};
use crate::report::judge::{check_options, expected_verdict};
use crate::report::{Counterexample, EffectCount, ScenarioResult, Verdict, REPORT_CASES_MAX};
use crate::scenario::Scenario;
use std::collections::BTreeMap;
use std::path::Path;

/// Judges `outcome` and fills in the scenario's result. `history_path` is where its
/// history was written; `command` re-runs it (not a replay: real runs are not
/// deterministic).
pub fn scenario_result(
    scenario: &Scenario,
    outcome: &RealOutcome,
    history_path: &Path,
    command: &str,
) -> ScenarioResult {
    let claim = serde_json::to_value(scenario.claim)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut result = ScenarioResult::new(&scenario.name, scenario.pipeline.name(), &claim);
    result.wall_time_s = outcome.wall_time_s;
    result.notes = outcome.notes.clone();
    if let Some(reason) = &outcome.skipped {
        result.notes.insert(0, reason.clone());
        return result;
    }
    result.seeds = 1;
    result.notes.insert(
        0,
        format!(
            "real run: one run against real services, reported as one seed (seed {}: it \
             draws the swarm's schedule); times are wall-clock and the run is not \
             reproducible bit for bit",
            outcome.seed
        ),
    );
    let check = check_all(&outcome.history, &check_options(scenario));
    result.tally(&check);
    result.faults_injected = outcome.history.fault_count() as u64;
    result.fault_effects = fault_effects(scenario, &outcome.schedule, &outcome.history);
    // Marks are counted in the workers' own processes, which do not report them: only the
    // fault effects are judged here.
    let (not_exercised, allowed) =
        crate::report::judge::not_exercised(scenario, &result.fault_effects, None);
    result.not_exercised = not_exercised;
    result.notes.extend(
        allowed
            .into_iter()
            .map(|l| format!("allowed not exercised: {l}")),
    );
    // As in the simulation: a stalled run has not delivered everything yet, so records
    // missing from the sink are inconclusive; the stall is the finding.
    result.verdict = if let Some(message) = &outcome.crashed {
        result.notes.push(format!("could not finish: {message}"));
        Verdict::Crashed
    } else if let Some(reason) = &outcome.stalled {
        result.notes.push(format!("stalled: {reason}"));
        Verdict::Stalled
    } else if check.validity != Validity::Valid {
        Verdict::Violated
    } else {
        Verdict::Holds
    };
    if check.validity == Validity::Unknown {
        result
            .notes
            .push("a checker was unknown (not a pass)".into());
    }
    if expected_verdict(scenario) == Verdict::Violated && result.verdict == Verdict::Violated {
        result
            .notes
            .push("expected: demonstrates a known failure".into());
    }
    if matches!(result.verdict, Verdict::Violated | Verdict::Stalled) {
        result.counterexample = Some(Counterexample::from_check(
            outcome.seed,
            command.to_string(),
            history_path.display().to_string(),
            &outcome.history,
            &check,
            REPORT_CASES_MAX,
        ));
    }
    result.measured = measure(&outcome.history, &outcome.put_marks, &outcome.bulk_loads);
    result
}

/// What the real run's faults did: each fault of the run's `schedule` (the file's and the
/// swarm's, before `faults.until_ms`) counts its effect kinds as scheduled
/// (`Fault::effect_kinds`; an armed `[sink.fault_point]` counts once), and each `effect` op
/// of the history as acted. One run is one seed.
fn fault_effects(
    scenario: &Scenario,
    schedule: &[eosim_sim::nemesis::ScheduledFault],
    history: &crate::history::History,
) -> BTreeMap<String, EffectCount> {
    let mut counts: BTreeMap<String, EffectCount> = BTreeMap::new();
    let scheduled = schedule.iter().flat_map(|f| f.fault.effect_kinds());
    let armed = super::fault_point::spec(scenario).map(|_| eosim_sim::effects::kind::FAULT_POINT);
    for kind in scheduled.chain(armed) {
        let c = counts.entry(kind.to_string()).or_default();
        c.scheduled += 1;
        c.seeds_scheduled = 1;
    }
    for op in &history.ops {
        if let crate::history::Value::Effect { kind, .. } = &op.value {
            let c = counts.entry(kind.clone()).or_default();
            c.acted += 1;
            c.seeds_acted = 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{History, OpKind, Value};
    use eosim_sim::kafka::model::CrashMode;
    use eosim_sim::nemesis::{Fault, ScheduledFault};

    /// A swarm's faults are drawn at run time, not written in the file: they count as
    /// scheduled from the run's own schedule (they used to count as acted only).
    #[test]
    fn a_drawn_swarm_schedule_counts_as_scheduled() {
        let text = "name = \"t\"\npipeline = \"kafka-consume\"\nclaim = \"at-least-once\"\n";
        let scenario = Scenario::parse(std::path::Path::new("t.toml"), text).expect("parses");
        let kill = |at_ms| ScheduledFault {
            at_ms,
            fault: Fault::Kill {
                target: vec!["broker-1".into()],
                mode: CrashMode::ProcessKill,
            },
        };
        let mut history = History::default();
        let effect = Value::Effect {
            kind: eosim_sim::effects::kind::KILL.to_string(),
            detail: "broker-1 killed".into(),
        };
        history.push(1, "nemesis", OpKind::Info, effect, None);
        let counts = fault_effects(&scenario, &[kill(1_000), kill(5_000)], &history);
        let kill = &counts[eosim_sim::effects::kind::KILL];
        assert_eq!((kill.scheduled, kill.acted), (2, 1), "{counts:?}");
    }
}

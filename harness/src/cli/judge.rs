//! What both worlds share when judging a scenario: the checker options its file asks for,
//! the verdict it expects, and the exit class of a result. Built in both cfgs: the
//! simulation's aggregation and the real runner use the same functions.

use super::ExitClass;
use crate::checker::{Anomaly, CheckOptions, ProducerAcks};
use crate::report::{EffectCount, ScenarioResult, Verdict};
use crate::scenario::Scenario;
use std::collections::BTreeMap;

/// The checker options a scenario asks for: its claim, acks and `[check]` overrides.
pub fn check_options(scenario: &Scenario) -> CheckOptions {
    let anomalies = |names: &[String]| -> Vec<Anomaly> {
        let known = |n: &String| Anomaly::ALL.into_iter().find(|a| a.name() == n);
        names.iter().filter_map(known).collect()
    };
    let transactional = scenario.pipeline == crate::scenario::Pipeline::TransactionalCopy;
    // streams-count: idempotent input producers; no sink of ids (the Streams checker judges
    // the output's aggregates instead).
    let streams = scenario.pipeline == crate::scenario::Pipeline::StreamsCount;
    CheckOptions {
        claim: scenario.claim,
        acks: match scenario.workload.acks {
            eosim_sim::kafka::Acks::All => ProducerAcks::All,
            eosim_sim::kafka::Acks::Leader => ProducerAcks::Leader,
            eosim_sim::kafka::Acks::None => ProducerAcks::None,
        },
        // kafka-consume's producers run with enable.idempotence=false (a retried batch may
        // land twice); the transactional copy's producers are idempotent, its readers
        // read_committed, and its sink is the output's committed view of the input topic.
        idempotent_producer: transactional || streams,
        read_committed: transactional,
        sink_topics: if transactional {
            vec![scenario.topic.name.clone()]
        } else {
            Vec::new()
        },
        sink: scenario.pipeline.has_record_sink(),
        forbidden: anomalies(&scenario.check.forbidden),
        allowed: anomalies(&scenario.check.allowed),
        ..CheckOptions::for_claim(scenario.claim)
    }
}

/// The verdict the scenario file expects (`check.expect`, default holds).
pub fn expected_verdict(scenario: &Scenario) -> Verdict {
    match scenario.check.expect.as_deref() {
        Some("violated") => Verdict::Violated,
        Some("stalled") => Verdict::Stalled,
        _ => Verdict::Holds,
    }
}

/// The exit class of a scenario's result given what its file expects: a `holds` that left
/// something unexercised ([`ScenarioResult::not_exercised`]) is
/// [`ExitClass::NotExercised`], not a pass.
pub fn exit_class(result: &ScenarioResult, expected: Verdict) -> ExitClass {
    match (result.verdict, expected) {
        (Verdict::Crashed, _) => ExitClass::Crash,
        (Verdict::Holds, Verdict::Holds) if !result.not_exercised.is_empty() => {
            ExitClass::NotExercised
        }
        (Verdict::Stalled, Verdict::Stalled) if !result.stalled_otherwise.is_empty() => {
            ExitClass::Stalled
        }
        (v, e) if v == e => ExitClass::Expected,
        (Verdict::Stalled, _) => ExitClass::Stalled,
        (Verdict::Skipped, _) => ExitClass::Skipped,
        _ => ExitClass::Violated,
    }
}

/// The stalls of `stalls` (`(seed, reason)`) whose reason lacks the scenario's
/// `[check] stall_reason`, one line each; empty when the file names none.
pub fn stalled_otherwise<'a>(
    scenario: &Scenario,
    stalls: impl IntoIterator<Item = (u64, &'a str)>,
) -> Vec<String> {
    let Some(expected) = &scenario.check.stall_reason else {
        return Vec::new();
    };
    stalls
        .into_iter()
        .filter(|(_, reason)| !reason.contains(expected.as_str()))
        .map(|(seed, reason)| format!("seed {seed} stalled, but not for {expected:?}: {reason}"))
        .collect()
}

/// What `scenario`'s runs were meant to exercise and did not: each fault-effect kind that
/// was scheduled but never acted in any seed, and each `[check] reached` mark never hit
/// (`marks` is `None` where marks are not collected, as in real runs: then marks are not
/// judged). Returns `(not exercised, allowed by [check] not_exercised_allowed)`, one line
/// each.
pub fn not_exercised(
    scenario: &Scenario,
    effects: &BTreeMap<String, EffectCount>,
    marks: Option<&BTreeMap<String, u64>>,
) -> (Vec<String>, Vec<String>) {
    let idle = effects
        .iter()
        .filter(|(_, c)| c.scheduled > 0 && c.acted == 0)
        .map(|(kind, c)| {
            let line = format!(
                "{kind} never acted (scheduled {} times in {} seeds)",
                c.scheduled, c.seeds_scheduled
            );
            (kind.clone(), line)
        });
    let unreached = scenario
        .check
        .reached
        .iter()
        .filter(|m| marks.is_some_and(|marks| marks.get(*m).copied().unwrap_or(0) == 0))
        .map(|m| (m.clone(), format!("mark {m} never reached")));
    let (mut bad, mut allowed) = (Vec::new(), Vec::new());
    for (name, line) in idle.chain(unreached) {
        if scenario.check.not_exercised_allowed.contains(&name) {
            allowed.push(line);
        } else {
            bad.push(line);
        }
    }
    (bad, allowed)
}

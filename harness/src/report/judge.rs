//! What both worlds share when judging a scenario: the checker options its file asks for,
//! the verdict it expects, what it left unexercised, and how seeds settle into a verdict.
//! Built in both cfgs: the simulation's aggregation (`cli`) and the real runner use the
//! same functions; the exit classes built on them are the CLI's (`cli::judge`).

use super::{EffectCount, ScenarioResult, SeedClass, SeedRecord, Verdict};
use crate::checker::{Anomaly, CheckOptions, ProducerAcks};
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
    // connect-source: a change event a restarted task emits again is a new send of the
    // same id, not a producer retry, so the log-level `duplicate` stays informational and
    // the source checker judges the topic by the claim (`sink-duplicate`); the topic's
    // aborted copies (KIP-618) are in the read_uncommitted log too.
    let source = scenario.pipeline == crate::scenario::Pipeline::ConnectSource;
    let idempotent =
        !source && (transactional || streams || scenario.workload.enable_idempotence == Some(true));
    let one_in_flight = scenario
        .workload
        .max_in_flight_requests_per_connection
        .unwrap_or(1)
        == 1;
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
        // `[workload] "enable.idempotence" = true` makes kafka-consume's idempotent.
        idempotent_producer: idempotent,
        // Order is kept with idempotence or one request in flight (kafka-consume's default).
        // connect-source re-sends the ids a restarted task emits again, so a process's
        // send order of one id is not unique: `nonmonotonic-send` cannot be judged there.
        producer_order: !source && (idempotent || one_in_flight),
        read_committed: transactional || sink_reads_committed(scenario),
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

/// Whether the sink's consumers read with `isolation.level=read_committed`: `[consumer]`
/// of `kafka-consume`, `[sink] consumer.override.isolation.level` of `clickhouse-sink`,
/// `[connector] consumer.override.isolation.level` of `connect-jdbc`; the topic's readers of
/// `connect-source` when its workers run `exactly.once.source.support=enabled`.
pub fn sink_reads_committed(scenario: &Scenario) -> bool {
    use eosim_sim::kafka::Isolation;
    match scenario.pipeline {
        crate::scenario::Pipeline::KafkaConsume => {
            scenario.consumer.isolation_level.to_isolation() == Isolation::ReadCommitted
        }
        crate::scenario::Pipeline::ClickhouseSink => scenario
            .sink
            .as_ref()
            .is_some_and(|s| s.consumer_isolation() == Isolation::ReadCommitted),
        crate::scenario::Pipeline::ConnectJdbc => scenario
            .connector
            .get("consumer.override.isolation.level")
            .is_some_and(|v| v == "read_committed"),
        // Under KIP-618 the topic's readers read committed records only.
        crate::scenario::Pipeline::ConnectSource => scenario
            .connect
            .worker
            .get("exactly.once.source.support")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("enabled")),
        _ => false,
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

/// The stalled seeds of `seeds` whose reason lacks `expected` (the file's
/// `[check] stall_reason`), one line each; empty when the file names none.
fn stalled_otherwise(expected: Option<&str>, seeds: &[SeedRecord]) -> Vec<String> {
    let Some(expected) = expected else {
        return Vec::new();
    };
    seeds
        .iter()
        .filter_map(|s| match &s.class {
            SeedClass::Stalled(reason) => Some((s.seed, reason)),
            _ => None,
        })
        .filter(|(_, reason)| !reason.contains(expected))
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
    let check = &scenario.check;
    not_exercised_by(&check.reached, &check.not_exercised_allowed, effects, marks)
}

/// [`not_exercised`] from the file's rules themselves: the marks it requires (`reached`)
/// and what it allows to go unexercised (`allowed`).
pub fn not_exercised_by(
    reached: &[String],
    allowed_names: &[String],
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
    let unreached = reached
        .iter()
        .filter(|m| marks.is_some_and(|marks| marks.get(*m).copied().unwrap_or(0) == 0))
        .map(|m| (m.clone(), format!("mark {m} never reached")));
    let (mut bad, mut allowed) = (Vec::new(), Vec::new());
    for (name, line) in idle.chain(unreached) {
        if allowed_names.contains(&name) {
            allowed.push(line);
        } else {
            bad.push(line);
        }
    }
    (bad, allowed)
}

/// A scenario's verdict from its seeds' classes: any crash, else any invalid or unknown
/// seed, else any stall, else holds.
pub fn verdict_of<'a>(classes: impl IntoIterator<Item = &'a SeedClass>) -> Verdict {
    classes
        .into_iter()
        .map(|c| match c {
            SeedClass::Crashed(_) => Verdict::Crashed,
            SeedClass::Invalid | SeedClass::Unknown => Verdict::Violated,
            SeedClass::Stalled(_) => Verdict::Stalled,
            SeedClass::Holds => Verdict::Holds,
        })
        .max_by_key(|v| v.severity())
        .unwrap_or(Verdict::Holds)
}

/// Whether a seed counts towards the scenario's verdict (and may be its counterexample).
pub fn matches_verdict(class: &SeedClass, verdict: Verdict) -> bool {
    match verdict {
        Verdict::Crashed => matches!(class, SeedClass::Crashed(_)),
        Verdict::Violated => matches!(class, SeedClass::Invalid | SeedClass::Unknown),
        Verdict::Stalled => matches!(class, SeedClass::Stalled(_)),
        Verdict::Holds | Verdict::Skipped => false,
    }
}

/// Recomputes from `result`'s ledger and totals everything that follows from them: the
/// verdict, the simulated time, what was not exercised and the notes. One function for a
/// run and for a merge of shards, so both give the same report. A result without a ledger
/// (a real run) is left as it is.
pub fn settle(result: &mut ScenarioResult) {
    let Some(ledger) = &result.ledger else {
        return;
    };
    result.verdict = verdict_of(ledger.seeds.iter().map(|s| &s.class));
    result.seeds = ledger.seeds.len() as u64;
    let sim_time_ms: u64 = ledger.seeds.iter().map(|s| s.sim_time_ms).sum();
    result.sim_time_s = sim_time_ms as f64 / 1_000.0;
    let (not_exercised, allowed) = not_exercised_by(
        &ledger.reached,
        &ledger.not_exercised_allowed,
        &result.fault_effects,
        Some(&result.marks),
    );
    result.not_exercised = not_exercised;
    result.stalled_otherwise = stalled_otherwise(ledger.stall_reason.as_deref(), &ledger.seeds);
    let mut notes = seed_notes(ledger.expected, &ledger.seeds, result.verdict);
    notes.extend(
        allowed
            .into_iter()
            .map(|l| format!("allowed not exercised: {l}")),
    );
    notes.extend(ledger.shrink_note.clone());
    notes.extend(ledger.determinism_notes.iter().cloned());
    result.notes = notes;
}

/// Remarks: expected failures, missed expected failures, the first crash and stall.
fn seed_notes(expected: Verdict, seeds: &[SeedRecord], verdict: Verdict) -> Vec<String> {
    let mut notes = Vec::new();
    if expected == Verdict::Violated && verdict == Verdict::Violated {
        notes.push("expected: demonstrates a known failure".to_string());
    } else if expected == Verdict::Violated && verdict == Verdict::Holds {
        notes.push(format!(
            "expected violated, but the claim held on all {} seeds: the known failure was \
             not reproduced",
            seeds.len()
        ));
    }
    for s in seeds {
        match &s.class {
            SeedClass::Crashed(m) => notes.push(format!("seed {} crashed: {m}", s.seed)),
            SeedClass::Stalled(r) => notes.push(format!("seed {} stalled: {r}", s.seed)),
            SeedClass::Unknown => notes.push(format!("seed {}: a checker was unknown", s.seed)),
            SeedClass::Holds | SeedClass::Invalid => continue,
        }
        // One crash or stall note is enough to start from; the rest are in the seed lines.
        break;
    }
    notes
}

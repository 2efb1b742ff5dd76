// PLACEHOLDER until the checkers branch merges.
//
// Minimal stand-ins for `crate::checker::{check_all, CheckOptions, CheckResult, Validity,
// Anomaly, Case}` and `crate::report::{write_report, RunReport, ScenarioResult, Verdict,
// Counterexample}`, with the signatures the CLI is written against. The lead swaps them for
// the real ones by changing the `use` lines in `cli/aggregate.rs` and `cli/run.rs` and
// deleting this file. The placeholder checker only finds `lost-write` (an acknowledged send
// whose id is not in the sink's final state) and `duplicate` (an id held twice by the sink).
//! Placeholder checker and report types (see the comment at the top of the file).

use crate::checker::Claim;
use crate::history::{History, OpKind, Value};
use eosim_sim::kafka::Acks;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Merged validity: Invalid > Unknown > Valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Validity {
    /// Nothing forbidden was seen.
    Valid,
    /// A forbidden anomaly was seen.
    Invalid,
    /// A checker could not decide.
    Unknown,
}

/// An anomaly, by Jepsen's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Anomaly {
    /// An acknowledged record never reached the sink.
    LostWrite,
    /// A record reached the sink more than once.
    Duplicate,
}

impl Anomaly {
    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Anomaly::LostWrite => "lost-write",
            Anomaly::Duplicate => "duplicate",
        }
    }
}

/// One instance of an anomaly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Indices of the history ops that show it, ascending.
    pub ops: Vec<usize>,
    /// What was seen.
    pub detail: String,
}

/// What the checkers hold a history to.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// The delivery claim.
    pub claim: Claim,
    /// The producers' `acks`.
    pub acks: Acks,
    /// Anomaly names forbidden in addition to the claim's.
    pub forbidden: Vec<String>,
    /// Anomaly names allowed although the claim forbids them.
    pub allowed: Vec<String>,
}

/// The checkers' result for one history.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// Merged validity.
    pub validity: Validity,
    /// Every anomaly seen, forbidden or not, with its cases.
    pub anomalies: BTreeMap<Anomaly, Vec<Case>>,
    /// The anomalies seen that the options forbid.
    pub forbidden: Vec<Anomaly>,
}

/// Runs the (placeholder) checkers over a history.
pub fn check_all(history: &History, options: &CheckOptions) -> CheckResult {
    let mut acked: BTreeMap<u64, usize> = BTreeMap::new();
    let mut held: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for op in &history.ops {
        match &op.value {
            Value::Send { id, .. } if op.kind == OpKind::Ok => {
                acked.entry(*id).or_insert(op.index);
            }
            Value::SinkState { rows } => {
                for row in rows {
                    held.entry(row.id).or_default().push(op.index);
                }
            }
            _ => {}
        }
    }
    let mut anomalies: BTreeMap<Anomaly, Vec<Case>> = BTreeMap::new();
    for (id, index) in &acked {
        if !held.contains_key(id) {
            let case = Case {
                ops: vec![*index],
                detail: format!("id {id} acked, not in sink"),
            };
            anomalies.entry(Anomaly::LostWrite).or_default().push(case);
        }
    }
    for (id, indices) in &held {
        if indices.len() > 1 {
            let first = acked.get(id).copied().unwrap_or(indices[0]);
            let detail = format!("id {id} held {} times", indices.len());
            anomalies.entry(Anomaly::Duplicate).or_default().push(Case {
                ops: vec![first],
                detail,
            });
        }
    }
    let forbidden: Vec<Anomaly> = anomalies
        .keys()
        .copied()
        .filter(|a| is_forbidden(*a, options))
        .collect();
    let validity = if forbidden.is_empty() {
        Validity::Valid
    } else {
        Validity::Invalid
    };
    CheckResult {
        validity,
        anomalies,
        forbidden,
    }
}

fn is_forbidden(anomaly: Anomaly, options: &CheckOptions) -> bool {
    let name = anomaly.name().to_string();
    if options.allowed.contains(&name) {
        return false;
    }
    if options.forbidden.contains(&name) {
        return true;
    }
    match (options.claim, anomaly) {
        (Claim::ExactlyOnce, _) => true,
        (Claim::AtLeastOnce, a) => a == Anomaly::LostWrite,
        (Claim::AtMostOnce, a) => a == Anomaly::Duplicate,
    }
}

/// A scenario's verdict over all its seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every seed's history satisfied the claim.
    Holds,
    /// Some seed showed a forbidden anomaly.
    Violated,
    /// Some seed did not catch up within the drain bound.
    Stalled,
    /// A model or component panicked (STYLE §9: a crash, not an invalid history).
    /// NOTE for the lead: the spec's `Verdict` lists Holds|Violated|Stalled|Skipped; the CLI
    /// needs a crash verdict for exit code 4.
    Crashed,
    /// Not run.
    Skipped,
}

/// The shortest failing seed of a scenario, to replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counterexample {
    /// The seed.
    pub seed: u64,
    /// The exact command that replays it.
    pub replay: String,
    /// The faults injected before the first forbidden anomaly, one line each.
    pub faults: Vec<String>,
    /// Where its history was written.
    pub history_path: PathBuf,
    /// The forbidden anomalies it showed.
    pub anomalies: Vec<String>,
}

/// One scenario's result over all its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Scenario name.
    pub scenario: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Claim name.
    pub claim: String,
    /// Verdict.
    pub verdict: Verdict,
    /// Seeds run.
    pub seeds: u64,
    /// Faults injected over all seeds.
    pub faults_injected: u64,
    /// Cases per anomaly name over all seeds.
    pub anomalies: BTreeMap<String, u64>,
    /// Anomaly names seen that the claim forbids.
    pub forbidden_anomalies: Vec<String>,
    /// Coverage marks hit, summed over seeds.
    pub marks: BTreeMap<String, u64>,
    /// Simulated time over all seeds, s.
    pub sim_time_s: f64,
    /// Wall-clock time over all seeds, s.
    pub wall_time_s: f64,
    /// The shortest failing seed, when one failed.
    pub counterexample: Option<Counterexample>,
    /// Remarks (expected failures, crash messages, stall reasons).
    pub notes: Vec<String>,
}

/// A whole run: every scenario's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run's id (its directory name under `reports/`).
    pub run_id: String,
    /// The build (git sha).
    pub build: String,
    /// Start time, RFC 3339 UTC.
    pub started_at: String,
    /// Results in run order.
    pub scenarios: Vec<ScenarioResult>,
}

/// Writes `results.json` and `summary.md` into `dir`.
///
/// # Errors
/// The I/O error of the first file that could not be written.
pub fn write_report(dir: &Path, report: &RunReport) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("results.json"), json + "\n")?;
    let mut md = format!(
        "# eosim run {}\n\nbuild `{}`, started {}\n\n\
         | scenario | claim | verdict | seeds | faults | anomalies | notes |\n\
         |---|---|---|---|---|---|---|\n",
        report.run_id, report.build, report.started_at
    );
    for s in &report.scenarios {
        let anomalies: BTreeSet<String> = s
            .anomalies
            .iter()
            .map(|(name, n)| format!("{name}: {n}"))
            .collect();
        md.push_str(&format!(
            "| {} | {} | {:?} | {} | {} | {} | {} |\n",
            s.scenario,
            s.claim,
            s.verdict,
            s.seeds,
            s.faults_injected,
            anomalies.into_iter().collect::<Vec<_>>().join(", "),
            s.notes.join("; ")
        ));
    }
    for s in &report.scenarios {
        if let Some(c) = &s.counterexample {
            md.push_str(&format!(
                "\n## {}: counterexample seed {}\n\n`{}`\n\nhistory: `{}`\n",
                s.scenario,
                c.seed,
                c.replay,
                c.history_path.display()
            ));
        }
    }
    std::fs::write(dir.join("summary.md"), md)
}

//! Run reports: `results.json` (every number, machine-readable), `summary.md` (the claims
//! matrix a reader looks at first, then each violated or stalled scenario's counterexample)
//! and `index.html` (the same with filters, and per counterexample a fault timeline and
//! throughput, lag and latency plots from its history, [`html`]).
//!
//! # Sections
//! - [`RunReport`], [`ScenarioResult`], [`Verdict`], [`Counterexample`]: the report's shape,
//!   which is also `results.json`'s.
//! - [`write_report`]: writes the three files.
//! - [`html`], [`plot`], [`timeline`]: `index.html`, its plotters charts, and the data they
//!   draw (fault windows, effects, throughput, lag, latency) computed from a history.
//! - [`write_seed_report`]: one seed's directory (`history.jsonl`, `results.json`,
//!   `anomalies/<anomaly>.jsonl`, `report.md`).
//! - [`fault_lines`], [`first_forbidden_op`], [`Counterexample::from_check`]: build a
//!   counterexample from a failing seed's history and check result.
//! - [`mod@bench`]: the benchmark page (`eosim report bench`).
//! - [`explain`]: a case's witness ops and the faults and effects between them.
//!
//! # Example
//! ```
//! use eosim::report::{write_report, RunReport, ScenarioResult, Verdict};
//! let mut result = ScenarioResult::new("ck-eos-kill", "clickhouse", "exactly-once");
//! result.verdict = Verdict::Holds;
//! result.seeds = 200;
//! let report = RunReport {
//!     run_id: "doc".into(),
//!     build: "abc123".into(),
//!     started_at: "2026-01-01T00:00:00Z".into(),
//!     scenarios: vec![result],
//! };
//! let dir = std::env::temp_dir().join(format!("eosim-report-doc-{}", std::process::id()));
//! write_report(&dir, &report).unwrap();
//! assert!(std::fs::read_to_string(dir.join("summary.md")).unwrap().contains("ck-eos-kill"));
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

pub mod agreement;
pub mod bench;
pub mod explain;
pub mod html;
pub mod judge;
mod ledger;
mod markdown;
pub mod plot;
mod seed;
#[cfg(test)]
mod tests;
pub mod timeline;

pub use ledger::{Ledger, SeedClass, SeedRecord};
pub use markdown::summary_markdown;
pub use seed::{seed_markdown, write_seed_report, REPORT_CASES_MAX};

use crate::checker::CheckResult;
use crate::history::{History, OpKind, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// What a scenario's runs established about its claim. Ordered by severity, as a
/// scenario's seeds decide it: holds < stalled < violated < crashed (skipped lowest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every seed's checkers found nothing the claim forbids.
    Holds,
    /// Some seed's checkers found a forbidden anomaly.
    Violated,
    /// The pipeline made no progress after the faults healed (or the checkers could not
    /// decide because the drain never finished).
    Stalled,
    /// Not run (missing service, unsupported in this world).
    Skipped,
    /// A model or component panicked: a bug in eosim or an invariant the model asserts, not
    /// a verdict on the claim.
    Crashed,
}

impl Verdict {
    /// The lowercase name (`holds`).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Stalled => "stalled",
            Verdict::Skipped => "skipped",
            Verdict::Crashed => "crashed",
        }
    }

    /// How serious the verdict is: a scenario's verdict is its most serious seed's.
    pub fn severity(self) -> u8 {
        match self {
            Verdict::Skipped => 0,
            Verdict::Holds => 1,
            Verdict::Stalled => 2,
            Verdict::Violated => 3,
            Verdict::Crashed => 4,
        }
    }

    /// Markdown that makes a bad verdict stand out: `**VIOLATED**`, `**STALLED**`.
    pub fn markdown(self) -> String {
        match self {
            Verdict::Violated | Verdict::Stalled | Verdict::Crashed => {
                format!("**{}**", self.name().to_uppercase())
            }
            Verdict::Holds | Verdict::Skipped => self.name().to_string(),
        }
    }
}

/// The first failing seed of a scenario, ready to replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Counterexample {
    /// The seed.
    pub seed: u64,
    /// The exact command that replays it (`cargo xtask sim --scenario … --seed …`).
    pub replay: String,
    /// The nemesis ops up to the first forbidden anomaly, as `t=12.345s kill broker-2`.
    pub faults: Vec<String>,
    /// Where the seed's `history.jsonl` was written.
    pub history_path: String,
    /// The first few anomaly case texts, forbidden ones first.
    pub anomalies: Vec<String>,
    /// The first forbidden cases (up to [`explain::EXPLAINED_CASES_MAX`]) explained from the
    /// history: their witness ops and the faults and effects between them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explanations: Vec<explain::Explanation>,
    /// The fault schedule shrunk to what the failure needs (simulation only; `None` when
    /// not tried, not reproduced, or a real run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<Shrunk>,
}

/// A counterexample's fault schedule after shrinking (`cli::shrink`): an explicit schedule
/// that fails at the same seed, written as a scenario file of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shrunk {
    /// Faults (recoveries included) the seed applied before shrinking.
    pub faults_from: u64,
    /// The faults kept, as `at_ms=4200 {fault = "kill", target = ["worker-0"], ...}`.
    pub faults: Vec<String>,
    /// Runs the shrink took, the unshrunk explicit schedule included.
    pub runs: u32,
    /// Whether each kept fault was shown to be needed (false: the run budget ran out).
    pub minimal: bool,
    /// The shrunk scenario file.
    pub scenario_file: String,
    /// The command that replays it.
    pub replay: String,
    /// Forbidden anomalies (kebab-case) of the original or the shrunk run, with their cases
    /// in each: the shrunk run shows every kind the original did (the shrinker keeps no
    /// schedule that loses one), possibly fewer cases; a kind only the shrunk run shows has
    /// `cases_from` 0. Empty in reports written before it was recorded.
    #[serde(default)]
    pub forbidden: BTreeMap<String, ShrunkAnomaly>,
}

/// One forbidden anomaly of a shrunk counterexample: how much of the original's evidence
/// the shrunk run keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShrunkAnomaly {
    /// Cases in the original counterexample's run.
    pub cases_from: u64,
    /// Cases in the shrunk schedule's run.
    pub cases: u64,
}

impl Counterexample {
    /// Builds a counterexample from a seed's history and its check result: the faults that
    /// preceded the first forbidden anomaly ([`first_forbidden_op`]) and up to `cases_max`
    /// case texts.
    pub fn from_check(
        seed: u64,
        replay: String,
        history_path: String,
        history: &History,
        result: &CheckResult,
        cases_max: usize,
    ) -> Self {
        Self {
            seed,
            replay,
            faults: fault_lines(history, first_forbidden_op(result)),
            history_path,
            anomalies: result.case_texts(cases_max),
            explanations: explain::explain_forbidden(history, result),
            shrunk: None,
        }
    }
}

/// One scenario's results over all its seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioResult {
    /// Scenario name.
    pub scenario: String,
    /// Pipeline under test (`clickhouse-keepermap`, `jdbc-postgres`, ...).
    pub pipeline: String,
    /// The claim checked (`exactly-once`, ...).
    pub claim: String,
    /// What the runs established.
    pub verdict: Verdict,
    /// Number of seeds run.
    pub seeds: u64,
    /// Faults injected over all seeds (recoveries not counted).
    pub faults_injected: u64,
    /// Cases per anomaly over all seeds, forbidden or not (kebab-case names).
    pub anomalies: BTreeMap<String, u64>,
    /// Cases per forbidden anomaly over all seeds.
    pub forbidden_anomalies: BTreeMap<String, u64>,
    /// Coverage marks hit, with their hit counts over all seeds.
    pub marks: BTreeMap<String, u64>,
    /// Per fault-effect kind (`kill`, `messages.duplicate`, `fault-point`, see
    /// [`eosim_sim::effects::kind`]), how often it was scheduled and how often it acted,
    /// over all seeds.
    #[serde(default)]
    pub fault_effects: BTreeMap<String, EffectCount>,
    /// What the runs were meant to exercise and did not, one line each
    /// (`messages.duplicate never acted (scheduled 5 times in 5 seeds)`, `mark
    /// connect:task-failed never reached`), less what the file allows
    /// (`[check] not_exercised_allowed`). A `holds` with any is not a pass.
    #[serde(default)]
    pub not_exercised: Vec<String>,
    /// Seeds that stalled for another reason than the one the file expects
    /// (`[check] stall_reason`), one line each; an expected `stalled` with any is not a
    /// pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalled_otherwise: Vec<String>,
    /// Simulated time over all seeds, seconds.
    pub sim_time_s: f64,
    /// Wall-clock time over all seeds, seconds.
    pub wall_time_s: f64,
    /// The first failing seed, for a violated or stalled scenario.
    pub counterexample: Option<Counterexample>,
    /// Anything else a reader should know (skips, unknown verdicts, determinism checks).
    pub notes: Vec<String>,
    /// Throughput and latency measured against real services (`eosim run`); absent for
    /// simulated runs, whose time is not real.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// Every seed's record and the file's rules (simulated runs), so that shard reports
    /// merge ([`Ledger`]); absent for real runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<Ledger>,
}

/// How often faults of one effect kind were scheduled and how often they acted, over a
/// scenario's seeds. `acted` may exceed `scheduled`: one message fault delays many requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectCount {
    /// Faults of this kind scheduled (nemesis schedule, swarm, or armed by a component).
    pub scheduled: u64,
    /// Times a fault of this kind acted.
    pub acted: u64,
    /// Seeds that scheduled at least one.
    pub seeds_scheduled: u64,
    /// Seeds in which at least one acted.
    pub seeds_acted: u64,
}

impl EffectCount {
    /// `scheduled 5 (5 seeds), acted 143 (5 seeds)`.
    pub fn text(&self) -> String {
        format!(
            "scheduled {} ({} seeds), acted {} ({} seeds)",
            self.scheduled, self.seeds_scheduled, self.acted, self.seeds_acted
        )
    }
}

/// What a real run measured, from its history's wall-clock times.
///
/// - `records_per_s`: acknowledged sends over the production span (first send invoked to
///   last send acknowledged), records/s.
/// - `rows_per_s`: rows made durable in the sink over the end-to-end span (first send
///   invoked to last sink write), rows/s; duplicates count, as the database stores them.
///   For Streams, input records whose offsets a successful commit covered.
/// - `latency_ms_*`: per record id, from its send's invoke to the first sink write that
///   holds it, ms; nearest-rank percentiles over the ids that reached the sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Acknowledged records produced per second.
    pub records_per_s: f64,
    /// Rows written into the sink per second.
    pub rows_per_s: f64,
    /// Median end-to-end latency, ms.
    pub latency_ms_p50: f64,
    /// 95th percentile end-to-end latency, ms.
    pub latency_ms_p95: f64,
    /// 99th percentile end-to-end latency, ms.
    pub latency_ms_p99: f64,
    /// Records acknowledged by Kafka.
    pub records_acked: u64,
    /// Rows written into the sink (duplicates included).
    pub rows_written: u64,
    /// Rows per second of time spent inside the sink's `put` (sum of the puts' durations):
    /// the sink's own write rate, what [`Measured::bulk_loads`] compares against; absent
    /// where the sink does not report its puts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_put_rows_per_s: Option<f64>,
    /// What the sink's state store cost inside its puts (the exactly-once ClickHouse sink's
    /// state records), counted apart so the bookkeeping's share of
    /// [`Measured::sink_put_rows_per_s`] is visible; absent for a sink without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_store: Option<StateStoreCost>,
    /// The same rows bulk-loaded into a fresh table in the same run, one entry per method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bulk_loads: Vec<BulkLoad>,
}

/// The state-store calls a sink made inside its puts over a real run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateStoreCost {
    /// State reads.
    pub reads: u64,
    /// State writes.
    pub writes: u64,
    /// Wall time inside those calls, s.
    pub time_s: f64,
    /// That time over the time spent inside `put` (0.6: 60 % of the put time).
    pub put_share: f64,
}

/// One bulk load of the rows the sink wrote, into a fresh table of the same target, after
/// the pipeline (issue 6's ratio of the sink to a bulk load).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkLoad {
    /// The target (`postgres`, `clickhouse`).
    pub target: String,
    /// How: `COPY FROM STDIN`, `one multi-row INSERT`.
    pub method: String,
    /// Rows loaded.
    pub rows: u64,
    /// Wall time of the load, s.
    pub time_s: f64,
    /// Rows per second.
    pub rows_per_s: f64,
    /// The sink's put rate over this one ([`Measured::sink_put_rows_per_s`] / `rows_per_s`):
    /// 0.05 means the sink writes at a twentieth of the bulk load's rate.
    pub sink_ratio: f64,
}

impl ScenarioResult {
    /// The anomalies seen that the claim does not forbid (duplicates under at-least-once,
    /// rejected sends, dropped fields), name → cases: reported beside the forbidden ones so
    /// that nothing the checkers saw is hidden.
    pub fn other_anomalies(&self) -> BTreeMap<String, u64> {
        self.anomalies
            .iter()
            .filter(|(name, _)| !self.forbidden_anomalies.contains_key(*name))
            .map(|(name, n)| (name.clone(), *n))
            .collect()
    }

    /// An empty result (verdict `skipped`, no seeds) to fill in.
    pub fn new(scenario: &str, pipeline: &str, claim: &str) -> Self {
        Self {
            scenario: scenario.to_string(),
            pipeline: pipeline.to_string(),
            claim: claim.to_string(),
            verdict: Verdict::Skipped,
            seeds: 0,
            faults_injected: 0,
            anomalies: BTreeMap::new(),
            forbidden_anomalies: BTreeMap::new(),
            marks: BTreeMap::new(),
            fault_effects: BTreeMap::new(),
            not_exercised: Vec::new(),
            stalled_otherwise: Vec::new(),
            sim_time_s: 0.0,
            wall_time_s: 0.0,
            counterexample: None,
            notes: Vec::new(),
            measured: None,
            ledger: None,
        }
    }

    /// Adds one seed's anomaly case counts (all, and forbidden) to the totals. Seeds, faults,
    /// times, marks and the verdict are the runner's to set.
    pub fn tally(&mut self, result: &CheckResult) {
        for (anomaly, cases) in &result.anomalies {
            let n = cases.len() as u64;
            *self
                .anomalies
                .entry(anomaly.name().to_string())
                .or_default() += n;
            if result.forbidden.contains(anomaly) {
                *self
                    .forbidden_anomalies
                    .entry(anomaly.name().to_string())
                    .or_default() += n;
            }
        }
    }
}

/// One run of the bench: several scenarios, one build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Run identifier (also the report directory's name).
    pub run_id: String,
    /// Git sha of the build.
    pub build: String,
    /// Start time, RFC 3339.
    pub started_at: String,
    /// Results per scenario, in run order.
    pub scenarios: Vec<ScenarioResult>,
}

/// Writes `dir/results.json` (pretty JSON of `report`), `dir/summary.md`
/// ([`summary_markdown`]) and `dir/index.html` ([`html::index_html`], which reads the
/// counterexamples' histories), creating `dir` if needed.
///
/// # Errors
/// Any I/O error creating the directory or writing a file.
pub fn write_report(dir: &Path, report: &RunReport) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(io::Error::other)?;
    std::fs::write(dir.join("results.json"), json + "\n")?;
    std::fs::write(dir.join("summary.md"), summary_markdown(report))?;
    html::write_index(dir, report)
}

/// The op index by which the first forbidden anomaly's evidence was complete: the minimum,
/// over the cases of forbidden anomalies, of the latest op each case cites. `None` when no
/// forbidden anomaly has a case.
pub fn first_forbidden_op(result: &CheckResult) -> Option<usize> {
    result
        .anomalies
        .iter()
        .filter(|(anomaly, _)| result.forbidden.contains(anomaly))
        .flat_map(|(_, cases)| cases.iter().filter_map(|c| c.ops.iter().max().copied()))
        .min()
}

/// `t=12.345s` for a time in ns.
pub fn time_text(time_ns: u64) -> String {
    format!(
        "t={}.{:03}s",
        time_ns / 1_000_000_000,
        (time_ns / 1_000_000) % 1000
    )
}

/// The nemesis ops of `history` at or before op `until` (all when `None`), one line each:
/// `t=12.345s kill broker-2`. An `invoke` immediately completed by the same fault gives one
/// line, the invoke's.
pub fn fault_lines(history: &History, until: Option<usize>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut open: Option<(&str, &str)> = None;
    for op in history
        .ops
        .iter()
        .take_while(|op| until.is_none_or(|u| op.index <= u))
    {
        let Value::Fault { name, detail } = &op.value else {
            continue;
        };
        let this = (name.as_str(), detail.as_str());
        if op.kind != OpKind::Invoke && open == Some(this) {
            open = None;
            continue;
        }
        open = (op.kind == OpKind::Invoke).then_some(this);
        let line = format!("{} {name} {detail}", time_text(op.time_ns));
        lines.push(line.trim_end().to_string());
    }
    lines
}

/// Anomaly (or mark, or effect) counts as `name ×n, …`, or `none` when empty: the text of
/// the report's count cells, in Markdown and HTML alike.
pub fn counts_text(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return "none".to_string();
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|(name, n)| format!("{name} ×{n}"))
        .collect();
    parts.join(", ")
}

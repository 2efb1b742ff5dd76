//! `index.html`: the run report as one self-contained page (inline CSS, JS and SVG; no
//! network), templated with `maud`, which escapes every interpolated value.
//!
//! In order: the claims matrix with filters (verdict, pipeline, text); per violated or
//! stalled scenario its counterexample (fault timeline and, on the same time axis,
//! throughput, lag and latency plots from the seed's `history.jsonl` ([`super::timeline`],
//! [`super::plot`]), the explained forbidden cases, the fault effects and coverage marks,
//! and the seed's history as a searchable table of at most [`HISTORY_ROWS_MAX`] rows); the
//! real tier's measurements where the run has them; every scenario's coverage marks and
//! fault effects.

use super::explain::Explanation;
use super::plot::{series_svgs, timeline_svg};
use super::timeline::{effect_counts, series, timeline};
use super::{counts_text, Counterexample, RunReport, ScenarioResult, Verdict};
use crate::history::text::{format_op, kind_name, value_name};
use crate::history::History;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// History rows shown per counterexample; the page says when the history has more.
pub const HISTORY_ROWS_MAX: usize = 2_000;

/// The page's style sheet.
pub(crate) const CSS: &str = include_str!("assets/index.css");

/// The page's script: the matrix filters and the history search.
const JS: &str = include_str!("assets/index.js");

/// Writes `dir/index.html` for `report` ([`index_html`]).
///
/// # Errors
/// An I/O error writing the file. A counterexample history that cannot be read is not an
/// error: the page says so where its plots would be.
pub fn write_index(dir: &Path, report: &RunReport) -> io::Result<()> {
    std::fs::write(dir.join("index.html"), index_html(dir, report))
}

/// Where a counterexample's history is: `dir/<scenario>/<seed>/history.jsonl` when it is
/// there (a run dir moved or merged keeps its histories beside its report), else the path
/// the report recorded.
fn history_file(dir: &Path, scenario: &str, c: &Counterexample) -> PathBuf {
    let beside = dir
        .join(scenario)
        .join(c.seed.to_string())
        .join("history.jsonl");
    if beside.is_file() {
        beside
    } else {
        PathBuf::from(&c.history_path)
    }
}

/// The text of `index.html` for `report`, whose counterexample histories are read from
/// beside it in `dir` or from their recorded paths.
pub fn index_html(dir: &Path, report: &RunReport) -> String {
    let failing: Vec<(&ScenarioResult, &Counterexample)> = report
        .scenarios
        .iter()
        .filter(|s| matches!(s.verdict, Verdict::Violated | Verdict::Stalled))
        .filter_map(|s| s.counterexample.as_ref().map(|c| (s, c)))
        .collect();
    let real = report.scenarios.iter().any(|s| s.measured.is_some());
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "eosim run " (report.run_id) }
                style { (PreEscaped(CSS)) }
            }
            body data-ready="0" {
                h1 { "eosim run " (report.run_id) }
                p.meta {
                    "build " code { (report.build) } ", started " (report.started_at) ", "
                    (verdict_counts(&report.scenarios))
                }
                nav {
                    a href="#claims" { "claims" } " · "
                    a href="#counterexamples" { "counterexamples (" (failing.len()) ")" }
                    @if real { " · " a href="#measured" { "measured (real services)" } }
                    " · " a href="#coverage" { "coverage" }
                }
                (claims_section(&report.scenarios))
                section #counterexamples {
                    h2 { "Counterexamples" }
                    @if failing.is_empty() { p { "No scenario was violated or stalled." } }
                    @for (n, (s, c)) in failing.iter().enumerate() {
                        (counterexample_section(dir, n, s, c))
                    }
                }
                @if real { (measured_section(&report.scenarios)) }
                (coverage_section(&report.scenarios))
                script { (PreEscaped(JS)) }
            }
        }
    };
    page.into_string()
}

/// `52 scenarios: 30 holds, 20 violated, 2 stalled`.
fn verdict_counts(scenarios: &[ScenarioResult]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in scenarios {
        *counts.entry(s.verdict.name()).or_default() += 1;
    }
    let parts: Vec<String> = counts.iter().map(|(v, n)| format!("{n} {v}")).collect();
    format!("{} scenarios: {}", scenarios.len(), parts.join(", "))
}

/// The anchor of a scenario's counterexample section.
fn anchor(scenario: &str) -> String {
    let safe: String = scenario
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("cx-{safe}")
}

/// Faults scheduled and acted over all seeds, summed over effect kinds.
fn effects_total(s: &ScenarioResult) -> (u64, u64) {
    s.fault_effects
        .values()
        .fold((0, 0), |(a, b), c| (a + c.scheduled, b + c.acted))
}

fn claims_section(scenarios: &[ScenarioResult]) -> Markup {
    let verdicts: BTreeSet<&str> = scenarios.iter().map(|s| s.verdict.name()).collect();
    let pipelines: BTreeSet<&str> = scenarios.iter().map(|s| s.pipeline.as_str()).collect();
    html! {
        section #claims {
            h2 { "Claims" }
            div.filters {
                label { "verdict " select #f-verdict {
                    option value="" { "all" }
                    @for v in &verdicts { option value=(v) { (v) } }
                } }
                label { "pipeline " select #f-pipeline {
                    option value="" { "all" }
                    @for p in &pipelines { option value=(p) { (p) } }
                } }
                label { "search " input #f-text type="search" placeholder="scenario, claim, anomaly…"; }
                span #f-count {}
            }
            table #matrix {
                thead { tr {
                    th { "scenario" } th { "pipeline" } th { "claim" } th { "verdict" }
                    th.num { "seeds" } th.num { "faults" }
                    th.num title="fault effects: scheduled / took effect, over all seeds" {
                        "scheduled / took effect" }
                    th { "forbidden anomalies" } th { "other anomalies seen" } th { "notes" }
                } }
                tbody {
                    @for s in scenarios { (matrix_row(s)) }
                }
            }
        }
    }
}

fn matrix_row(s: &ScenarioResult) -> Markup {
    let (scheduled, acted) = effects_total(s);
    let others = s.other_anomalies();
    let mut notes: Vec<String> = s
        .not_exercised
        .iter()
        .map(|n| format!("not exercised: {n}"))
        .collect();
    notes.extend(
        s.stalled_otherwise
            .iter()
            .map(|n| format!("stalled otherwise: {n}")),
    );
    notes.extend(s.notes.iter().cloned());
    html! {
        tr.scenario-row data-verdict=(s.verdict.name()) data-pipeline=(s.pipeline) {
            td {
                @if s.counterexample.is_some()
                    && matches!(s.verdict, Verdict::Violated | Verdict::Stalled) {
                    a href={ "#" (anchor(&s.scenario)) } { (s.scenario) }
                } @else { (s.scenario) }
            }
            td { (s.pipeline) } td { (s.claim) }
            td { span class={ "verdict v-" (s.verdict.name()) } { (s.verdict.name()) } }
            td.num { (s.seeds) } td.num { (s.faults_injected) }
            td.num { (scheduled) " / " (acted) }
            td { (counts_text(&s.forbidden_anomalies)) }
            td { (counts_text(&others)) }
            td.notes { @for n in &notes { div { (n) } } }
        }
    }
}

fn counterexample_section(dir: &Path, n: usize, s: &ScenarioResult, c: &Counterexample) -> Markup {
    let path = history_file(dir, &s.scenario, c);
    let history = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| History::from_jsonl(&text));
    let axis = if s.measured.is_some() {
        "wall time since the run started (s)"
    } else {
        "simulated time since the run started (s)"
    };
    html! {
        article.cx id=(anchor(&s.scenario)) {
            h3 {
                (s.scenario) ": " span class={ "verdict v-" (s.verdict.name()) } { (s.verdict.name()) }
                " at seed " (c.seed)
            }
            p { "pipeline " (s.pipeline) ", claim " (s.claim) "; forbidden: "
                (counts_text(&s.forbidden_anomalies)) }
            p { "replay: " code { (c.replay) } br; "history: " code { (path.display()) } }
            @if let Some(shrunk) = &c.shrunk {
                p { "shrunk to " (shrunk.faults.len()) " of " (shrunk.faults_from) " faults in "
                    (shrunk.runs) " runs: " code { (shrunk.replay) } }
                @if !shrunk.faults.is_empty() {
                    ul.faults { @for f in &shrunk.faults { li { code { (f) } } } }
                }
            }
            @match &history {
                Ok(h) => (history_parts(n, s, h, axis, &c.explanations, &c.anomalies)),
                Err(e) => p.missing { "No plots: cannot read the history (" (e) ")." },
            }
        }
    }
}

/// The plots, explanations, effects and marks, and the history table of one seed.
fn history_parts(
    n: usize,
    s: &ScenarioResult,
    h: &History,
    axis: &str,
    explanations: &[Explanation],
    anomalies: &[String],
) -> Markup {
    let t = timeline(h);
    let plots = timeline_svg(&t, axis).and_then(|tl| {
        let mut all = vec![tl];
        all.extend(series_svgs(&t, &series(h, t.end_s), axis)?);
        Ok(all)
    });
    let seed_effects = effect_counts(h);
    html! {
        div.plots {
            @match &plots {
                Ok(svgs) => { @for (i, svg) in svgs.iter().enumerate() {
                    div class=(if i == 0 { "plot timeline" } else { "plot" }) { (PreEscaped(svg)) }
                } }
                Err(e) => p.missing { "The plots could not be drawn: " (e.to_string()) },
            }
        }
        h4 { "Forbidden cases explained (witness ops, then the faults and effects between them)" }
        @if explanations.is_empty() { p { "No case was explained." } }
        @for e in explanations {
            div.case { p { (e.case) } pre { @for l in &e.lines { (l) "\n" } } }
        }
        h4 { "Anomaly cases" }
        ul { @for a in anomalies { li { (a) } } }
        div.side {
            div { h4 { "Fault effects" } (effects_table(s, Some(&seed_effects))) }
            div { h4 { "Coverage marks hit (all seeds)" } (marks_table(&s.marks)) }
        }
        h4 { "History" }
        (history_table(n, h))
    }
}

/// The scenario's fault effects over all seeds, with the counterexample seed's own counts
/// when `seed` is given.
fn effects_table(s: &ScenarioResult, seed: Option<&BTreeMap<String, u64>>) -> Markup {
    let empty = BTreeMap::new();
    let in_seed = seed.unwrap_or(&empty);
    let kinds: BTreeSet<&String> = s.fault_effects.keys().chain(in_seed.keys()).collect();
    html! {
        @if kinds.is_empty() { p { "No fault was scheduled and none acted." } }
        @else {
            table.small {
                thead { tr { th { "effect kind" } th.num { "scheduled" } th.num { "took effect" }
                    th.num { "seeds acted" } @if seed.is_some() { th.num { "in this seed" } } } }
                tbody { @for k in kinds {
                    @let c = s.fault_effects.get(k).copied().unwrap_or_default();
                    tr class=(if c.scheduled > 0 && c.acted == 0 { "never-acted" } else { "" }) {
                        td { code { (k) } } td.num { (c.scheduled) } td.num { (c.acted) }
                        td.num { (c.seeds_acted) }
                        @if seed.is_some() { td.num { (in_seed.get(k).copied().unwrap_or(0)) } }
                    }
                } }
            }
        }
    }
}

fn marks_table(marks: &BTreeMap<String, u64>) -> Markup {
    html! {
        @if marks.is_empty() { p { "No mark was hit." } }
        @else {
            table.small {
                thead { tr { th { "mark" } th.num { "hits" } } }
                tbody { @for (m, n) in marks { tr { td { code { (m) } } td.num { (n) } } } }
            }
        }
    }
}

/// The first [`HISTORY_ROWS_MAX`] ops as a table the page's script filters.
fn history_table(n: usize, h: &History) -> Markup {
    let id = format!("history-{n}");
    html! {
        p {
            input.history-filter type="search" data-table=(id) placeholder="filter ops (process, op, id…)";
            " "
            @if h.ops.len() > HISTORY_ROWS_MAX {
                "the first " (HISTORY_ROWS_MAX) " of " (h.ops.len()) " ops (the whole history is in "
                code { "history.jsonl" } ")"
            } @else { "all " (h.ops.len()) " ops" }
            " " span.history-count {}
        }
        div.history-wrap {
            table.history id=(id) {
                thead { tr { th.num { "#" } th.num { "t (s)" } th { "process" } th { "type" }
                    th { "f" } th { "op" } } }
                tbody { @for op in h.ops.iter().take(HISTORY_ROWS_MAX) {
                    @let line = format_op(op);
                    @let body = line.splitn(3, ' ').nth(2).unwrap_or_default();
                    @let f = value_name(&op.value);
                    tr class={ "k-" (kind_name(op.kind)) " f-" (f) } {
                        td.num { (op.index) } td.num { (format!("{:.3}", op.time_ns as f64 / 1e9)) }
                        td { (op.process) } td { (kind_name(op.kind)) } td { (f) } td { (body) }
                    }
                } }
            }
        }
    }
}

/// The real tier's throughput, latency percentiles and bulk-load ratios.
fn measured_section(scenarios: &[ScenarioResult]) -> Markup {
    let measured: Vec<_> = scenarios
        .iter()
        .filter_map(|s| s.measured.as_ref().map(|m| (s, m)))
        .collect();
    html! {
        section #measured {
            h2 { "Measured against real services" }
            table {
                thead { tr { th { "scenario" } th { "verdict" } th.num { "records/s produced" }
                    th.num { "rows/s into the sink" } th.num { "sink put rows/s" }
                    th.num { "latency p50 ms" } th.num { "p95 ms" } th.num { "p99 ms" }
                    th.num { "records acked" } th.num { "rows written" } th.num { "wall time s" } } }
                tbody { @for (s, m) in &measured { tr {
                    td { (s.scenario) } td { (s.verdict.name()) }
                    td.num { (format!("{:.1}", m.records_per_s)) }
                    td.num { (format!("{:.1}", m.rows_per_s)) }
                    td.num { (m.sink_put_rows_per_s.map_or("-".to_string(), |r| format!("{r:.1}"))) }
                    td.num { (format!("{:.1}", m.latency_ms_p50)) }
                    td.num { (format!("{:.1}", m.latency_ms_p95)) }
                    td.num { (format!("{:.1}", m.latency_ms_p99)) }
                    td.num { (m.records_acked) } td.num { (m.rows_written) }
                    td.num { (format!("{:.1}", s.wall_time_s)) }
                } } }
            }
            @if measured.iter().any(|(_, m)| !m.bulk_loads.is_empty()) {
                h3 { "The sink against bulk loads of the same rows" }
                table {
                    thead { tr { th { "scenario" } th { "target" } th { "method" } th.num { "rows" }
                        th.num { "load s" } th.num { "load rows/s" } th.num { "sink / load" } } }
                    tbody { @for (s, m) in &measured { @for b in &m.bulk_loads { tr {
                        td { (s.scenario) } td { (b.target) } td { (b.method) } td.num { (b.rows) }
                        td.num { (format!("{:.3}", b.time_s)) }
                        td.num { (format!("{:.0}", b.rows_per_s)) }
                        td.num { (format!("{:.3}", b.sink_ratio)) }
                    } } } }
                }
            }
        }
    }
}

/// Every scenario's coverage marks and fault effects, one collapsible block each.
fn coverage_section(scenarios: &[ScenarioResult]) -> Markup {
    html! {
        section #coverage {
            h2 { "Coverage marks and fault effects" }
            @for s in scenarios {
                details {
                    summary { (s.scenario) ": " (s.marks.len()) " marks, "
                        (s.fault_effects.len()) " fault-effect kinds" }
                    div.side {
                        div { (effects_table(s, None)) }
                        div { (marks_table(&s.marks)) }
                    }
                }
            }
        }
    }
}

//! `summary.md`: the claims matrix, then a section per violated or stalled scenario, then the
//! coverage marks hit.

use super::{counts_text, RunReport, ScenarioResult, Verdict};
use std::fmt::Write;

/// The text of `summary.md` for `report`.
pub fn summary_markdown(report: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# eosim run {}\n", report.run_id);
    let _ = writeln!(
        out,
        "build `{}`, started {}\n",
        report.build, report.started_at
    );
    claims_matrix(&mut out, &report.scenarios);
    let failing: Vec<&ScenarioResult> = report
        .scenarios
        .iter()
        .filter(|s| matches!(s.verdict, Verdict::Violated | Verdict::Stalled))
        .collect();
    if !failing.is_empty() {
        out.push_str("\n## Violated and stalled claims\n");
        for scenario in failing {
            failing_section(&mut out, scenario);
        }
    }
    notes_section(&mut out, &report.scenarios);
    measured_section(&mut out, &report.scenarios);
    bulk_section(&mut out, &report.scenarios);
    effects_section(&mut out, &report.scenarios);
    marks_section(&mut out, &report.scenarios);
    out
}

/// Per scenario and fault-effect kind, how often faults were scheduled and how often they
/// acted: the evidence that each scheduled fault did something.
fn effects_section(out: &mut String, scenarios: &[ScenarioResult]) {
    out.push_str("\n## Fault effects (scheduled / took effect)\n\n");
    if scenarios.iter().all(|s| s.fault_effects.is_empty()) {
        out.push_str("No fault was scheduled.\n");
        return;
    }
    out.push_str(
        "| scenario | fault effect | scheduled | seeds scheduled | took effect | seeds acted |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for s in scenarios {
        for (kind, c) in &s.fault_effects {
            let acted = if c.scheduled > 0 && c.acted == 0 {
                "**0**".to_string()
            } else {
                c.acted.to_string()
            };
            let _ = writeln!(
                out,
                "| {} | `{}` | {} | {} | {acted} | {} |",
                cell(&s.scenario),
                cell(kind),
                c.scheduled,
                c.seeds_scheduled,
                c.seeds_acted
            );
        }
    }
}

/// Notes of the scenarios that have no section of their own.
fn notes_section(out: &mut String, scenarios: &[ScenarioResult]) {
    let quiet = scenarios.iter().filter(|s| {
        !matches!(s.verdict, Verdict::Violated | Verdict::Stalled) && !s.notes.is_empty()
    });
    for (n, s) in quiet.enumerate() {
        if n == 0 {
            out.push_str("\n## Notes\n\n");
        }
        for note in &s.notes {
            let _ = writeln!(out, "- {}: {note}", s.scenario);
        }
    }
}

/// A table cell: `|` escaped, newlines flattened.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn claims_matrix(out: &mut String, scenarios: &[ScenarioResult]) {
    out.push_str("## Claims\n\n");
    out.push_str(
        "| scenario | pipeline | claim | verdict | seeds | faults | forbidden anomalies \
         | other anomalies seen | counterexample |\n",
    );
    out.push_str("|---|---|---|---|---:|---:|---|---|---|\n");
    for s in scenarios {
        let counterexample = s.counterexample.as_ref().map_or("-".to_string(), |c| {
            format!("seed {}: `{}`", c.seed, cell(&c.replay))
        });
        let others = s.other_anomalies();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&s.scenario),
            cell(&s.pipeline),
            cell(&s.claim),
            verdict_cell(s),
            s.seeds,
            s.faults_injected,
            cell(&counts_text(&s.forbidden_anomalies)),
            cell(&counts_text(&others)),
            counterexample
        );
    }
}

/// The verdict, with what it left unexercised (`holds, **not exercised**: ...`) and the
/// measured throughput beside it for a real run.
fn verdict_cell(s: &ScenarioResult) -> String {
    if !s.stalled_otherwise.is_empty() {
        return format!(
            "{}, **not for the expected reason**: {}",
            s.verdict.markdown(),
            cell(&s.stalled_otherwise.join("; "))
        );
    }
    if !s.not_exercised.is_empty() {
        return format!(
            "{}, **not exercised**: {}",
            s.verdict.markdown(),
            cell(&s.not_exercised.join("; "))
        );
    }
    match &s.measured {
        Some(m) => format!(
            "{} ({:.0} records/s, p99 {:.0} ms)",
            s.verdict.markdown(),
            m.records_per_s,
            m.latency_ms_p99
        ),
        None => s.verdict.markdown(),
    }
}

/// Throughput and latency of the real runs, one row per scenario that has them.
fn measured_section(out: &mut String, scenarios: &[ScenarioResult]) {
    let measured: Vec<_> = scenarios
        .iter()
        .filter_map(|s| s.measured.as_ref().map(|m| (s, m)))
        .collect();
    if measured.is_empty() {
        return;
    }
    out.push_str("\n## Measured (real services)\n\n");
    out.push_str(
        "| scenario | verdict | records/s produced | rows/s into the sink | \
         latency p50 ms | p95 ms | p99 ms | records acked | rows written | wall time s |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (s, m) in measured {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} |",
            cell(&s.scenario),
            s.verdict.markdown(),
            m.records_per_s,
            m.rows_per_s,
            m.latency_ms_p50,
            m.latency_ms_p95,
            m.latency_ms_p99,
            m.records_acked,
            m.rows_written,
            s.wall_time_s
        );
    }
}

/// The sink's put rate beside bulk loads of the same rows, one row per load.
fn bulk_section(out: &mut String, scenarios: &[ScenarioResult]) {
    let loads: Vec<_> = scenarios
        .iter()
        .filter_map(|s| s.measured.as_ref().map(|m| (s, m)))
        .flat_map(|(s, m)| m.bulk_loads.iter().map(move |b| (s, m, b)))
        .collect();
    if loads.is_empty() {
        return;
    }
    out.push_str("\n## Sink against bulk loads (same rows, same run)\n\n");
    out.push_str(
        "| scenario | target | method | rows | load s | load rows/s | sink put rows/s | \
         sink / load |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---:|---:|\n");
    for (s, m, b) in loads {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.3} | {:.0} | {:.0} | {:.3} |",
            cell(&s.scenario),
            cell(&b.target),
            cell(&b.method),
            b.rows,
            b.time_s,
            b.rows_per_s,
            m.sink_put_rows_per_s.unwrap_or(0.0),
            b.sink_ratio
        );
    }
    for (s, m) in scenarios
        .iter()
        .filter_map(|s| Some((s, s.measured.as_ref()?.state_store.as_ref()?)))
    {
        let _ = writeln!(
            out,
            "\n{}: the sink's state store took {} reads and {} writes, {:.3} s, {:.0} % of \
             its put time.",
            cell(&s.scenario),
            m.reads,
            m.writes,
            m.time_s,
            m.put_share * 100.0
        );
    }
}

fn failing_section(out: &mut String, s: &ScenarioResult) {
    let _ = writeln!(out, "\n### {}: {}\n", s.scenario, s.verdict.markdown());
    let _ = writeln!(
        out,
        "pipeline {}, claim {}, {} seed(s), {} fault(s), sim time {:.1} s, wall time {:.1} s\n",
        s.pipeline, s.claim, s.seeds, s.faults_injected, s.sim_time_s, s.wall_time_s
    );
    let _ = writeln!(
        out,
        "Forbidden anomalies: {}  ",
        counts_text(&s.forbidden_anomalies)
    );
    let _ = writeln!(out, "All anomalies: {}\n", counts_text(&s.anomalies));
    if let Some(c) = &s.counterexample {
        let _ = writeln!(
            out,
            "Counterexample: seed {}, history `{}`\n",
            c.seed, c.history_path
        );
        let _ = writeln!(out, "```sh\n{}\n```\n", c.replay);
        out.push_str("Faults and their effects before the first forbidden anomaly:\n\n");
        if c.faults.is_empty() {
            out.push_str("- none\n");
        }
        for line in &c.faults {
            let _ = writeln!(out, "- `{line}`");
        }
        if let Some(shrunk) = &c.shrunk {
            shrunk_section(out, shrunk, &component_faults(s));
        }
        out.push_str("\nAnomaly cases:\n\n");
        for text in &c.anomalies {
            let _ = writeln!(out, "- {text}");
        }
        explanations_section(out, &c.explanations);
    } else {
        out.push_str("No counterexample recorded.\n");
    }
    if !s.notes.is_empty() {
        out.push_str("\nNotes:\n\n");
        for note in &s.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
}

/// Each explained case: its text, then its witnesses and the faults between them as a
/// code block (the lines are history ops, aligned as the terminal shows them).
fn explanations_section(out: &mut String, explanations: &[super::explain::Explanation]) {
    if explanations.is_empty() {
        return;
    }
    out.push_str(
        "\nHow the first forbidden cases came about (witness ops, then the faults and \
                  effects between them):\n",
    );
    for e in explanations {
        let _ = writeln!(out, "\n- {}\n\n  ```text", e.case);
        for line in &e.lines {
            let _ = writeln!(out, "  {line}");
        }
        out.push_str("  ```\n");
    }
}

/// The component-armed fault kinds (fault points, BUGGIFY points, bad records) that acted in
/// the scenario's runs: the shrinker cannot remove them, so a shrink to no nemesis fault does
/// not mean the failure needs no fault.
fn component_faults(s: &ScenarioResult) -> Vec<String> {
    use eosim_sim::effects::kind;
    [kind::FAULT_POINT, kind::BUGGIFY, kind::BAD_RECORD]
        .into_iter()
        .filter(|k| s.fault_effects.get(*k).is_some_and(|c| c.acted > 0))
        .map(str::to_string)
        .collect()
}

/// The shrunk schedule: what the failure needs, and how to replay just that.
/// `component_faults`: what the scenario's components armed and the shrink kept
/// ([`component_faults`]).
fn shrunk_section(out: &mut String, shrunk: &super::Shrunk, component_faults: &[String]) {
    let none_needed = if component_faults.is_empty() {
        " (the failure needs no fault)".to_string()
    } else {
        format!(
            " (no nemesis fault needed; the faults the components arm still act: {})",
            component_faults.join(", ")
        )
    };
    let _ = writeln!(
        out,
        "\nShrunk to {} of {} faults in {} runs{}: `{}`\n",
        shrunk.faults.len(),
        shrunk.faults_from,
        shrunk.runs,
        match (shrunk.minimal, shrunk.faults.is_empty()) {
            (_, true) => none_needed.as_str(),
            (true, false) => " (each one needed)",
            (false, false) => " (run budget spent; may shrink further)",
        },
        shrunk.scenario_file
    );
    let _ = writeln!(out, "```sh\n{}\n```\n", shrunk.replay);
    for line in &shrunk.faults {
        let _ = writeln!(out, "- `{line}`");
    }
    if shrunk.forbidden.is_empty() {
        return;
    }
    out.push_str("\nForbidden anomalies, cases in the original → in the shrunk run:\n\n");
    for (anomaly, n) in &shrunk.forbidden {
        let origin = if n.cases_from == 0 {
            " (not in the original)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "- `{anomaly}` {} → {} case(s){origin}",
            n.cases_from, n.cases
        );
    }
}

fn marks_section(out: &mut String, scenarios: &[ScenarioResult]) {
    out.push_str("\n## Coverage marks hit\n\n");
    if scenarios.iter().all(|s| s.marks.is_empty()) {
        out.push_str("No marks were hit.\n");
        return;
    }
    out.push_str("| scenario | mark | hits |\n|---|---|---:|\n");
    for s in scenarios {
        for (mark, hits) in &s.marks {
            let _ = writeln!(out, "| {} | `{}` | {hits} |", cell(&s.scenario), cell(mark));
        }
    }
}

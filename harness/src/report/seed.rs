//! One seed's directory, `reports/<scenario>/<seed>/`: `history.jsonl`, `results.json` (the
//! check result), `anomalies/<anomaly>.jsonl` (every case) and `report.md` (a few cases per
//! anomaly, forbidden first).

use crate::checker::CheckResult;
use crate::history::History;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

/// Cases per anomaly shown in a seed's `report.md`; the full lists are in `anomalies/`.
pub const REPORT_CASES_MAX: usize = 8;

/// Writes one seed's directory under `dir` (created if needed): `history.jsonl`,
/// `results.json` (pretty JSON of `result`), `anomalies/<anomaly>.jsonl` (one case per line)
/// and `report.md`, headed by `header` (the run's `SEED=… scenario=… build=…` line).
///
/// # Errors
/// Any I/O error creating the directories or writing the files.
pub fn write_seed_report(
    dir: &Path,
    header: &str,
    history: &History,
    result: &CheckResult,
) -> io::Result<()> {
    std::fs::create_dir_all(dir.join("anomalies"))?;
    std::fs::write(dir.join("history.jsonl"), history.to_jsonl())?;
    let json = serde_json::to_string_pretty(result).map_err(io::Error::other)?;
    std::fs::write(dir.join("results.json"), json + "\n")?;
    for (anomaly, cases) in &result.anomalies {
        let mut lines = String::new();
        for case in cases {
            lines.push_str(&serde_json::to_string(case).map_err(io::Error::other)?);
            lines.push('\n');
        }
        std::fs::write(
            dir.join("anomalies").join(format!("{anomaly}.jsonl")),
            lines,
        )?;
    }
    std::fs::write(
        dir.join("report.md"),
        seed_markdown(header, history, result),
    )
}

/// The text of a seed's `report.md`.
pub fn seed_markdown(header: &str, history: &History, result: &CheckResult) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {header}\n");
    let _ = writeln!(out, "validity: **{:?}**  ", result.validity);
    let forbidden: Vec<String> = result.forbidden.iter().map(|a| a.to_string()).collect();
    let forbidden = if forbidden.is_empty() {
        "none".to_string()
    } else {
        forbidden.join(", ")
    };
    let _ = writeln!(out, "forbidden anomalies found: {forbidden}  ");
    let _ = writeln!(
        out,
        "history: {} ops, hash `{}`",
        history.ops.len(),
        history.hash()
    );
    if let Some(error) = &result.error {
        let _ = writeln!(out, "\nundecided: {error}");
    }
    out.push_str("\n## Counts\n\n");
    for (name, n) in &result.counts {
        let _ = writeln!(out, "- {name}: {n}");
    }
    let forbidden_first = result
        .anomalies
        .iter()
        .filter(|(a, _)| result.forbidden.contains(a))
        .chain(
            result
                .anomalies
                .iter()
                .filter(|(a, _)| !result.forbidden.contains(a)),
        );
    for (anomaly, cases) in forbidden_first {
        let status = if result.forbidden.contains(anomaly) {
            "forbidden"
        } else {
            "allowed"
        };
        let _ = writeln!(out, "\n## {anomaly} ({status}, {} case(s))\n", cases.len());
        for case in cases.iter().take(REPORT_CASES_MAX) {
            let _ = writeln!(out, "- {} (ops {:?})", case.text, case.ops);
        }
        if cases.len() > REPORT_CASES_MAX {
            let _ = writeln!(
                out,
                "- … all {} in `anomalies/{anomaly}.jsonl`",
                cases.len()
            );
        }
    }
    out
}

//! The benchmark report (`cargo xtask bench` → `eosim report bench`): one page,
//! `reports/bench/<id>/index.html` with `bench.md` and `bench.json`, that puts side by side
//! the criterion results, the simulator's simulated seconds per wall second per pipeline,
//! the real tier's throughput, and a baseline's figures, flagging regressions.
//!
//! # Inputs
//! - criterion: every `<dir>/**/new/estimates.json` under criterion's output dir
//!   (`target/madsim/criterion`); the benchmark id is the path between `<dir>` and `new`
//!   (`simulator/kafka_100k_records_3_brokers_6_partitions`); the figures are criterion's
//!   `mean` point estimate and its confidence interval (`confidence_interval.lower_bound`,
//!   `upper_bound`, ns).
//! - simulator: a run's `results.json`, `sim_time_s / wall_time_s` summed per pipeline
//!   (wall time is per seed summed, so this is one core's rate).
//! - real tier: a real run's `results.json` (`eosim run`), each scenario's `measured`
//!   records/s and rows/s.
//!
//! # Baseline
//! A baseline is a directory `reports/baseline*/` holding `bench.json`, a [`BenchReport`]
//! as this module writes it (`--save-baseline DIR` writes one from the current figures).
//!
//! # Regressions
//! A criterion benchmark regressed when its mean is more than [`REGRESSION_FRACTION`]
//! above the baseline's *and* its confidence interval lies wholly above the baseline's
//! (beyond the noise both runs measured). A simulator or real-tier rate, one measurement
//! without an interval, regressed when it is more than [`REGRESSION_FRACTION`] below the
//! baseline's.

use super::{RunReport, ScenarioResult};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// The change beyond which a figure counts as a regression: 10 %.
pub const REGRESSION_FRACTION: f64 = 0.10;

/// One criterion benchmark's mean time per iteration, ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriterionEstimate {
    /// `group/function`.
    pub id: String,
    /// Mean, ns.
    pub mean_ns: f64,
    /// Lower bound of the mean's confidence interval, ns.
    pub lower_ns: f64,
    /// Upper bound, ns.
    pub upper_ns: f64,
}

/// Simulated time per wall time of one pipeline over a run's seeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimRate {
    /// Pipeline name.
    pub pipeline: String,
    /// Scenarios of the pipeline in the run.
    pub scenarios: u64,
    /// Simulated time, s.
    pub sim_time_s: f64,
    /// Wall time, s.
    pub wall_time_s: f64,
    /// Simulated seconds per wall second.
    pub sim_s_per_wall_s: f64,
}

/// One real-tier scenario's measured throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RealRate {
    /// Scenario name.
    pub scenario: String,
    /// Acknowledged records produced per second.
    pub records_per_s: f64,
    /// Rows written into the sink per second.
    pub rows_per_s: f64,
    /// The sink's put rate over the fastest bulk load of the same rows in the same run
    /// ([`super::BulkLoad::sink_ratio`]); absent where the run made no bulk load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_ratio: Option<f64>,
}

/// The figures of one bench run: what `bench.json` holds, and a baseline's format.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// The run's id (UTC start time).
    pub id: String,
    /// Git sha of the build.
    pub build: String,
    /// Criterion benchmarks, by id.
    pub criterion: Vec<CriterionEstimate>,
    /// Simulator rates, by pipeline.
    pub sim: Vec<SimRate>,
    /// Real-tier rates, by scenario (empty without a real report).
    #[serde(default)]
    pub real: Vec<RealRate>,
    /// The machine's 1-, 5- and 15-minute load averages when the page was made
    /// (`/proc/loadavg`; absent elsewhere): a figure taken at a load above the core count
    /// is a lower bound, and a regression against a baseline taken idle may be the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_average: Option<[f64; 3]>,
}

/// The load averages of `/proc/loadavg` (Linux), `None` where it cannot be read.
pub fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_load_average(&text)
}

/// The first three fields of a `/proc/loadavg` line (`"0.52 1.10 1.90 1/123 4567"`).
fn parse_load_average(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(str::parse::<f64>);
    let mut next = || fields.next()?.ok();
    Some([next()?, next()?, next()?])
}

/// `load 0.52 / 1.10 / 1.90 (1, 5, 15 min)`, or `load unknown`.
fn load_text(report: &BenchReport) -> String {
    report
        .load_average
        .map_or("load unknown".into(), |[a, b, c]| {
            format!("load {a:.2} / {b:.2} / {c:.2} (1, 5, 15 min)")
        })
}

/// Errors reading the bench inputs.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// serde's message, or what was missing.
        message: String,
    },
}

fn read(path: &Path) -> Result<String, BenchError> {
    std::fs::read_to_string(path).map_err(|source| BenchError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse<T: for<'a> Deserialize<'a>>(path: &Path) -> Result<T, BenchError> {
    serde_json::from_str(&read(path)?).map_err(|e| BenchError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// criterion's `estimates.json`, the part read.
#[derive(Deserialize)]
struct Estimates {
    mean: Estimate,
}

#[derive(Deserialize)]
struct Estimate {
    point_estimate: f64,
    confidence_interval: Interval,
}

#[derive(Deserialize)]
struct Interval {
    lower_bound: f64,
    upper_bound: f64,
}

/// Every benchmark under criterion's output dir `dir`, sorted by id; none when `dir` does
/// not exist.
///
/// # Errors
/// [`BenchError`] for an `estimates.json` that cannot be read or parsed.
pub fn criterion_estimates(dir: &Path) -> Result<Vec<CriterionEstimate>, BenchError> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let file = path.join("estimates.json");
            if path.file_name().is_some_and(|n| n == "new") && file.is_file() {
                let e: Estimates = parse(&file)?;
                let id = d.strip_prefix(dir).unwrap_or(&d).display().to_string();
                found.push(CriterionEstimate {
                    id,
                    mean_ns: e.mean.point_estimate,
                    lower_ns: e.mean.confidence_interval.lower_bound,
                    upper_ns: e.mean.confidence_interval.upper_bound,
                });
            } else if path.file_name().is_some_and(|n| n != "report") {
                stack.push(path);
            }
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

/// Simulated seconds per wall second per pipeline of `report`.
pub fn sim_rates(report: &RunReport) -> Vec<SimRate> {
    let mut per: BTreeMap<&str, (u64, f64, f64)> = BTreeMap::new();
    for s in &report.scenarios {
        let e = per.entry(&s.pipeline).or_default();
        *e = (e.0 + 1, e.1 + s.sim_time_s, e.2 + s.wall_time_s);
    }
    per.into_iter()
        .map(|(pipeline, (n, sim, wall))| SimRate {
            pipeline: pipeline.to_string(),
            scenarios: n,
            sim_time_s: sim,
            wall_time_s: wall,
            sim_s_per_wall_s: if wall > 0.0 { sim / wall } else { 0.0 },
        })
        .collect()
}

/// The measured throughput of each scenario of a real run.
pub fn real_rates(report: &RunReport) -> Vec<RealRate> {
    let measured = |s: &ScenarioResult| {
        s.measured.as_ref().map(|m| RealRate {
            scenario: s.scenario.clone(),
            records_per_s: m.records_per_s,
            rows_per_s: m.rows_per_s,
            bulk_ratio: m
                .bulk_loads
                .iter()
                .map(|b| b.sink_ratio)
                .min_by(f64::total_cmp),
        })
    };
    report.scenarios.iter().filter_map(measured).collect()
}

/// Reads a run's `results.json`.
///
/// # Errors
/// [`BenchError`] when it cannot be read or is not a run report.
pub fn read_run(path: &Path) -> Result<RunReport, BenchError> {
    parse(path)
}

/// Reads a baseline: `dir/bench.json`.
///
/// # Errors
/// [`BenchError`] when it cannot be read or parsed.
pub fn read_baseline(dir: &Path) -> Result<BenchReport, BenchError> {
    parse(&dir.join("bench.json"))
}

/// One figure beside its baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What (`criterion simulator/kafka…`, `sim kafka-consume`, `real <scenario> rows/s`).
    pub what: String,
    /// Its unit (`ms`, `sim s / wall s`, `rows/s`).
    pub unit: &'static str,
    /// The current figure.
    pub now: f64,
    /// The baseline's, when it has one.
    pub baseline: Option<f64>,
    /// Whether it regressed ([module docs](self)).
    pub regressed: bool,
}

impl Comparison {
    /// The change from the baseline, as a fraction of it (`0.12` = 12 % more).
    pub fn change(&self) -> Option<f64> {
        self.baseline
            .filter(|b| *b != 0.0)
            .map(|b| (self.now - b) / b)
    }
}

/// Every figure of `now` beside `baseline`'s, regressions flagged.
pub fn compare(now: &BenchReport, baseline: Option<&BenchReport>) -> Vec<Comparison> {
    let mut out = Vec::new();
    for c in &now.criterion {
        let base = baseline.and_then(|b| b.criterion.iter().find(|x| x.id == c.id));
        let regressed = base.is_some_and(|b| {
            c.mean_ns > b.mean_ns * (1.0 + REGRESSION_FRACTION) && c.lower_ns > b.upper_ns
        });
        out.push(Comparison {
            what: format!("criterion {}", c.id),
            unit: "ms / iteration",
            now: c.mean_ns / 1e6,
            baseline: base.map(|b| b.mean_ns / 1e6),
            regressed,
        });
    }
    let lower_is_worse = |what: String, unit, now: f64, base: Option<f64>| Comparison {
        what,
        unit,
        now,
        baseline: base,
        regressed: base.is_some_and(|b| now < b * (1.0 - REGRESSION_FRACTION)),
    };
    for s in &now.sim {
        let base = baseline
            .and_then(|b| b.sim.iter().find(|x| x.pipeline == s.pipeline))
            .map(|b| b.sim_s_per_wall_s);
        let what = format!("simulator {}", s.pipeline);
        out.push(lower_is_worse(
            what,
            "sim s / wall s",
            s.sim_s_per_wall_s,
            base,
        ));
    }
    for r in &now.real {
        let base = baseline.and_then(|b| b.real.iter().find(|x| x.scenario == r.scenario));
        let what = format!("real {} records/s", r.scenario);
        out.push(lower_is_worse(
            what,
            "records/s",
            r.records_per_s,
            base.map(|b| b.records_per_s),
        ));
        let what = format!("real {} rows/s", r.scenario);
        out.push(lower_is_worse(
            what,
            "rows/s",
            r.rows_per_s,
            base.map(|b| b.rows_per_s),
        ));
        if let Some(ratio) = r.bulk_ratio {
            let what = format!("real {} sink / bulk load", r.scenario);
            out.push(lower_is_worse(
                what,
                "ratio",
                ratio,
                base.and_then(|b| b.bulk_ratio),
            ));
        }
    }
    out
}

/// A figure with three decimals, or four significant digits below 1 (a sink/bulk ratio of
/// 0.0004 must not read 0.000).
fn figure(x: f64) -> String {
    if x == 0.0 || x.abs() >= 1.0 || !x.is_finite() {
        return format!("{x:.3}");
    }
    let decimals = (3 - x.abs().log10().floor() as i32).clamp(3, 12) as usize;
    format!("{x:.decimals$}")
}

fn change_text(c: &Comparison) -> String {
    c.change()
        .map_or("-".into(), |x| format!("{:+.1} %", x * 100.0))
}

/// `bench.md`: the comparison as a Markdown table.
pub fn bench_markdown(now: &BenchReport, baseline: Option<&BenchReport>) -> String {
    let mut out = format!(
        "# eosim bench {}\n\nbuild `{}`, {}",
        now.id,
        now.build,
        load_text(now)
    );
    match baseline {
        Some(b) => {
            let _ = write!(
                out,
                "; baseline {} (build `{}`, {})",
                b.id,
                b.build,
                load_text(b)
            );
        }
        None => out.push_str("; no baseline"),
    }
    out.push_str(
        "\n\n| figure | unit | now | baseline | change | |\n|---|---|---:|---:|---:|---|\n",
    );
    for c in compare(now, baseline) {
        let base = c.baseline.map_or("-".into(), figure);
        let flag = if c.regressed { "**REGRESSION**" } else { "" };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {base} | {} | {flag} |",
            c.what,
            c.unit,
            figure(c.now),
            change_text(&c)
        );
    }
    if now.real.is_empty() {
        out.push_str("\nNo real-tier report: run `cargo xtask bench --real` for its throughput.\n");
    }
    out
}

/// The bench page.
pub fn bench_html(now: &BenchReport, baseline: Option<&BenchReport>) -> String {
    let rows = compare(now, baseline);
    let regressions = rows.iter().filter(|c| c.regressed).count();
    let table: Markup = html! {
        table {
            thead { tr { th { "figure" } th { "unit" } th.num { "now" } th.num { "baseline" }
                th.num { "change" } th { "" } } }
            tbody { @for c in &rows {
                tr class=(if c.regressed { "regressed" } else { "" }) {
                    td { (c.what) } td { (c.unit) } td.num { (figure(c.now)) }
                    td.num { (c.baseline.map_or("-".into(), figure)) }
                    td.num { (change_text(c)) }
                    td { @if c.regressed { strong { "regression" } } }
                }
            } }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "eosim bench " (now.id) }
                style { (PreEscaped(super::html::CSS)) "tr.regressed td { background: #fbe0e0; }" } }
            body {
                h1 { "eosim bench " (now.id) }
                p { "build " code { (now.build) } ", " (load_text(now)) "; "
                    @match baseline {
                        Some(b) => { "baseline " (b.id) " (build " code { (b.build) } ", " (load_text(b)) ")" },
                        None => "no baseline",
                    }
                    "; " (regressions) " regression(s) beyond the noise (criterion: mean more than "
                    (REGRESSION_FRACTION * 100.0) " % slower with disjoint confidence intervals; rates: more than "
                    (REGRESSION_FRACTION * 100.0) " % lower)" }
                (table)
                @if now.real.is_empty() { p { "No real-tier report: run " code { "cargo xtask bench --real" } " for its throughput." } }
            }
        }
    }
    .into_string()
}

/// Writes `dir/index.html`, `dir/bench.md` and `dir/bench.json` (creating `dir`).
///
/// # Errors
/// Any I/O error.
pub fn write_bench(
    dir: &Path,
    now: &BenchReport,
    baseline: Option<&BenchReport>,
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(now).map_err(io::Error::other)?;
    std::fs::write(dir.join("bench.json"), json + "\n")?;
    std::fs::write(dir.join("bench.md"), bench_markdown(now, baseline))?;
    std::fs::write(dir.join("index.html"), bench_html(now, baseline))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimates(mean: f64, lower: f64, upper: f64) -> String {
        format!(
            r#"{{"mean":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":{lower},
            "upper_bound":{upper}}},"point_estimate":{mean},"standard_error":1.0}},
            "median":{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":1.0,
            "upper_bound":2.0}},"point_estimate":1.5,"standard_error":0.1}}}}"#
        )
    }

    fn fixture(dir: &Path, id: &str, json: &str) {
        let new = dir.join(id).join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("estimates.json"), json).unwrap();
        // criterion's own report dirs and the previous run's figures are not benchmarks.
        std::fs::create_dir_all(dir.join(id).join("base")).unwrap();
        std::fs::write(dir.join(id).join("base").join("estimates.json"), json).unwrap();
    }

    #[test]
    fn criterion_estimates_are_read_from_every_new_dir() {
        let dir = std::env::temp_dir().join(format!("eosim-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        fixture(
            &dir,
            "simulator/kafka_100k",
            &estimates(2.0e9, 1.9e9, 2.1e9),
        );
        fixture(&dir, "jdbc_sink/upsert", &estimates(5.0e8, 4.0e8, 6.0e8));
        let found = criterion_estimates(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            found,
            [
                CriterionEstimate {
                    id: "jdbc_sink/upsert".into(),
                    mean_ns: 5.0e8,
                    lower_ns: 4.0e8,
                    upper_ns: 6.0e8
                },
                CriterionEstimate {
                    id: "simulator/kafka_100k".into(),
                    mean_ns: 2.0e9,
                    lower_ns: 1.9e9,
                    upper_ns: 2.1e9
                },
            ]
        );
    }

    fn bench(mean: f64, lower: f64, upper: f64, sim_rate: f64) -> BenchReport {
        BenchReport {
            id: "b".into(),
            build: "x".into(),
            criterion: vec![CriterionEstimate {
                id: "g/f".into(),
                mean_ns: mean,
                lower_ns: lower,
                upper_ns: upper,
            }],
            sim: vec![SimRate {
                pipeline: "kafka-consume".into(),
                scenarios: 1,
                sim_time_s: sim_rate,
                wall_time_s: 1.0,
                sim_s_per_wall_s: sim_rate,
            }],
            real: vec![],
            load_average: None,
        }
    }

    #[test]
    fn a_slower_mean_is_a_regression_only_beyond_the_confidence_intervals() {
        let base = bench(100.0, 95.0, 105.0, 50.0);
        // 20 % slower, intervals disjoint: a regression.
        let slower = compare(&bench(120.0, 110.0, 130.0, 50.0), Some(&base));
        assert!(slower[0].regressed);
        // 20 % slower but the interval reaches into the baseline's: noise.
        let noisy = compare(&bench(120.0, 100.0, 140.0, 50.0), Some(&base));
        assert!(!noisy[0].regressed);
        // Disjoint but only 8 % slower: within the threshold.
        let close = compare(&bench(108.0, 106.0, 110.0, 50.0), Some(&base));
        assert!(!close[0].regressed);
        assert!((slower[0].change().unwrap() - 0.2).abs() < 1e-12);
    }

    #[test]
    fn a_simulator_rate_more_than_ten_percent_lower_is_a_regression() {
        let base = bench(100.0, 95.0, 105.0, 50.0);
        assert!(compare(&bench(100.0, 95.0, 105.0, 44.0), Some(&base))[1].regressed);
        assert!(!compare(&bench(100.0, 95.0, 105.0, 46.0), Some(&base))[1].regressed);
        assert!(!compare(&bench(100.0, 95.0, 105.0, 10.0), None)[1].regressed);
        let md = bench_markdown(&bench(100.0, 95.0, 105.0, 44.0), Some(&base));
        assert!(md.contains("| simulator kafka-consume | sim s / wall s | 44.000 | 50.000 | -12.0 % | **REGRESSION** |"), "{md}");
    }

    #[test]
    fn sim_rates_sum_sim_and_wall_time_per_pipeline() {
        let mut a = ScenarioResult::new("a", "kafka-consume", "at-least-once");
        a.sim_time_s = 60.0;
        a.wall_time_s = 2.0;
        let mut b = a.clone();
        b.sim_time_s = 30.0;
        b.wall_time_s = 1.0;
        let report = RunReport {
            run_id: "r".into(),
            build: "x".into(),
            started_at: String::new(),
            scenarios: vec![a, b],
        };
        let rates = sim_rates(&report);
        assert_eq!(rates.len(), 1);
        assert_eq!(rates[0].scenarios, 2);
        assert_eq!(rates[0].sim_s_per_wall_s, 30.0);
    }

    #[test]
    fn real_rates_take_the_fastest_bulk_load_and_a_lower_ratio_regresses() {
        let bulk = |method: &str, sink_ratio: f64| super::super::BulkLoad {
            target: "postgres".into(),
            method: method.into(),
            rows: 1000,
            time_s: 0.1,
            rows_per_s: 10_000.0,
            sink_ratio,
        };
        let mut s = ScenarioResult::new("p2", "connect-jdbc", "at-least-once");
        s.measured = Some(super::super::Measured {
            records_per_s: 900.0,
            rows_per_s: 800.0,
            latency_ms_p50: 1.0,
            latency_ms_p95: 2.0,
            latency_ms_p99: 3.0,
            records_acked: 1000,
            rows_written: 1000,
            sink_put_rows_per_s: Some(3000.0),
            state_store: None,
            bulk_loads: vec![
                bulk("COPY FROM STDIN", 0.3),
                bulk("one multi-row INSERT", 0.6),
            ],
        });
        let report = RunReport {
            run_id: "r".into(),
            build: "x".into(),
            started_at: String::new(),
            scenarios: vec![
                s,
                ScenarioResult::new("sim-only", "kafka-consume", "at-least-once"),
            ],
        };
        let rates = real_rates(&report);
        assert_eq!(rates.len(), 1, "only measured scenarios are real rates");
        assert_eq!(
            rates[0].bulk_ratio,
            Some(0.3),
            "the ratio to the fastest load"
        );
        let with = |ratio| BenchReport {
            real: vec![RealRate {
                bulk_ratio: Some(ratio),
                ..rates[0].clone()
            }],
            ..BenchReport::default()
        };
        let rows = compare(&with(0.25), Some(&with(0.3)));
        let ratio = rows
            .iter()
            .find(|c| c.unit == "ratio")
            .expect("a ratio row");
        assert!(ratio.regressed, "{ratio:?}");
        assert!(!compare(&with(0.29), Some(&with(0.3)))[2].regressed);
    }

    #[test]
    fn load_averages_are_the_first_three_fields() {
        assert_eq!(
            parse_load_average("0.52 1.10 1.90 1/123 4567\n"),
            Some([0.52, 1.1, 1.9])
        );
        assert_eq!(parse_load_average("0.52 x 1.90"), None);
        assert_eq!(parse_load_average(""), None);
        let report = BenchReport {
            load_average: Some([3.0, 2.5, 2.0]),
            ..BenchReport::default()
        };
        let md = bench_markdown(&report, None);
        assert!(
            md.contains("load 3.00 / 2.50 / 2.00 (1, 5, 15 min); no baseline"),
            "{md}"
        );
    }

    #[test]
    fn small_figures_keep_four_significant_digits() {
        assert_eq!(figure(1238.4567), "1238.457");
        assert_eq!(figure(0.022), "0.02200");
        assert_eq!(figure(0.000_345_67), "0.0003457");
        assert_eq!(figure(0.0), "0.000");
    }
}

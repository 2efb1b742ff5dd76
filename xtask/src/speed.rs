//! `cargo xtask speed`: the README's speed table (issue 15), regenerated with one command.
//!
//! Runs each pipeline's reference scenario with `eosim sim --jobs 1 --shrink-runs-max 0`
//! on the release build, `--runs` times, and prints one Markdown row per scenario from the
//! run whose wall time is the median:
//!
//! - wall per seed: `wall_time_s / seeds` of the scenario's `results.json` (the seeds' own
//!   run and check times, not the report or the determinism recheck), ms;
//! - seeds/s: `seeds / wall_time_s`;
//! - sim-s per wall-s: `sim_time_s / wall_time_s`;
//! - records/s: the file's `[workload] records` (default 300) times the seeds, over
//!   `wall_time_s`;
//! - CPU per seed: the `eosim` process's user + system time (`getrusage(RUSAGE_CHILDREN)`
//!   before and after) over its seeds plus the one the determinism recheck runs again,
//!   ms: the figure to trust on a loaded machine, where wall time also counts waiting.
//!
//! Each scenario runs in its own `eosim sim` process, so one's memory does not slow the
//! next; reports go to `target/speed/`.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One reference scenario per pipeline, the table in its order.
const SCENARIOS: [&str; 5] = [
    "scenarios/alo-commit-after-acks-all.toml",
    "scenarios/txn-copy-crashes.toml",
    "scenarios/p2-upsert-worker-crash.toml",
    "scenarios/p1-crash-points-seed-duplicates.toml",
    "scenarios/p3-eos-swarm.toml",
];

/// `[workload] records` when a file does not set it (`WorkloadSpec`'s default).
const RECORDS_DEFAULT: u64 = 300;

/// Where the runs' reports go.
const OUT_DIR: &str = "target/speed";

/// Options of `cargo xtask speed`.
#[derive(Args)]
pub struct SpeedArgs {
    /// Seeds per scenario and run.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// Runs per scenario; the row is the median run by wall time.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Scenario file; repeat for several. Default: the five of the README's table.
    #[arg(long = "scenario", value_name = "PATH")]
    scenarios: Vec<PathBuf>,
}

/// One scenario's run, from its `results.json`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    seeds: u64,
    sim_time_s: f64,
    wall_time_s: f64,
    /// The process's CPU time (user + system), s.
    cpu_time_s: f64,
}

/// Builds eosim (release), runs every scenario `runs` times and prints the table.
pub fn speed(args: &SpeedArgs) -> Result<u8> {
    if args.runs == 0 || args.seeds == 0 {
        bail!("--runs and --seeds must be at least 1");
    }
    let binary = crate::build_eosim(true)?;
    let scenarios: Vec<PathBuf> = if args.scenarios.is_empty() {
        SCENARIOS.iter().map(PathBuf::from).collect()
    } else {
        args.scenarios.clone()
    };
    let mut rows = Vec::new();
    for path in &scenarios {
        let (name, pipeline, records) = scenario_facts(path)?;
        let mut runs = Vec::new();
        for run in 0..args.runs {
            let out = Path::new(OUT_DIR).join(format!("{name}-{run}"));
            runs.push(run_once(&binary, path, args.seeds, &out)?);
        }
        runs.sort_by(|a, b| a.wall_time_s.total_cmp(&b.wall_time_s));
        let median = runs[runs.len() / 2];
        rows.push(row(&pipeline, &name, records, median));
    }
    println!(
        "| pipeline (scenario, {} seeds) | wall per seed | seeds/s | sim-s per wall-s | \
         records/s | CPU per seed |",
        args.seeds
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    Ok(0)
}

/// The scenario's name, pipeline and `[workload] records`.
fn scenario_facts(path: &Path) -> Result<(String, String, u64)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read scenario {}", path.display()))?;
    let doc: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("a scenario file has a UTF-8 name")?
        .to_string();
    let pipeline = doc
        .get("pipeline")
        .and_then(|p| p.as_str())
        .unwrap_or("kafka-consume")
        .to_string();
    let records = match doc.get("workload").and_then(|w| w.get("records")) {
        None => RECORDS_DEFAULT,
        Some(v) => v
            .as_integer()
            .and_then(|n| u64::try_from(n).ok())
            .with_context(|| format!("{}: workload.records is not a count", path.display()))?,
    };
    Ok((name, pipeline, records))
}

/// Runs `eosim sim` on one scenario and reads its totals.
fn run_once(binary: &Path, scenario: &Path, seeds: u64, out: &Path) -> Result<Run> {
    let mut cmd = Command::new(binary);
    cmd.arg("sim")
        .arg("--scenario")
        .arg(scenario)
        .args(["--seeds", &seeds.to_string()])
        .args(["--jobs", "1", "--shrink-runs-max", "0", "--no-progress"])
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null());
    let cpu_before = children_cpu_s();
    let code = crate::status(&mut cmd)?;
    let cpu_time_s = children_cpu_s() - cpu_before;
    // Exit 1 is a violated scenario: the table measures speed, not the verdict.
    if code > 1 {
        bail!("eosim sim on {} exited {code}", scenario.display());
    }
    let mut run = read_run(&out.join("latest").join("results.json"))?;
    run.cpu_time_s = cpu_time_s;
    Ok(run)
}

/// User + system CPU time of every waited-for child so far, s.
#[cfg(unix)]
fn children_cpu_s() -> f64 {
    // SAFETY: `getrusage` only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(usage.ru_utime) + s(usage.ru_stime)
}

/// Not measured off Unix.
#[cfg(not(unix))]
fn children_cpu_s() -> f64 {
    0.0
}

/// Totals of the one scenario in a `results.json`.
fn read_run(path: &Path) -> Result<Run> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let s = doc
        .get("scenarios")
        .and_then(|s| s.get(0))
        .with_context(|| format!("{} holds no scenario", path.display()))?;
    let number = |key: &str| {
        s.get(key)
            .and_then(serde_json::Value::as_f64)
            .with_context(|| format!("{}: no number `{key}`", path.display()))
    };
    Ok(Run {
        seeds: number("seeds")? as u64,
        sim_time_s: number("sim_time_s")?,
        wall_time_s: number("wall_time_s")?,
        cpu_time_s: 0.0,
    })
}

/// One Markdown row of the table.
fn row(pipeline: &str, name: &str, records: u64, run: Run) -> String {
    let wall = run.wall_time_s.max(1e-9);
    let seeds = run.seeds as f64;
    format!(
        "| {pipeline} (`{name}`) | {:.1} ms | {:.1} | {} | {} | {:.1} ms |",
        wall * 1_000.0 / seeds,
        seeds / wall,
        thousands(run.sim_time_s / wall),
        thousands(records as f64 * seeds / wall),
        run.cpu_time_s * 1_000.0 / (seeds + 1.0),
    )
}

/// `12345.6` as `12,346`.
fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(1_014.4), "1,014");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }

    #[test]
    fn a_row_divides_the_totals_by_the_wall_time() {
        let run = Run {
            seeds: 20,
            sim_time_s: 600.0,
            wall_time_s: 2.0,
            cpu_time_s: 4.2,
        };
        assert_eq!(
            row("kafka-consume", "s", 300, run),
            "| kafka-consume (`s`) | 100.0 ms | 10.0 | 300 | 3,000 | 200.0 ms |"
        );
    }
}

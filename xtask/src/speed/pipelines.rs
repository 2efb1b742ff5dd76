//! The `pipelines` part: each pipeline's reference scenario with `eosim sim --jobs 1
//! --shrink-runs-max 0`, `--runs` times, one Markdown row per scenario from the run whose
//! wall time is the median:
//!
//! - wall per seed: `wall_time_s / seeds` of the scenario's `results.json` (the seeds' own
//!   run and check times, not the report or the determinism recheck), ms;
//! - seeds/s: `seeds / wall_time_s`;
//! - sim-s per wall-s: `sim_time_s / wall_time_s`;
//! - records/s: the records the file produces ([`records`]) times the seeds, over
//!   `wall_time_s`;
//! - CPU per seed: the `eosim` process's user + system time over its seeds plus the one the
//!   determinism recheck runs again, ms: the figure to trust on a loaded machine, where
//!   wall time also counts waiting.

use super::{measure, median_by, stem, thousands, Table};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One reference scenario per pipeline, the table in its order, then Doris's two.
const SCENARIOS: [&str; 7] = [
    "scenarios/alo-commit-after-acks-all.toml",
    "scenarios/txn-copy-crashes.toml",
    "scenarios/p2-upsert-worker-crash.toml",
    "scenarios/p1-crash-points-seed-duplicates.toml",
    "scenarios/p3-eos-swarm.toml",
    "scenarios/p4-kc-eos-worker-kills.toml",
    "scenarios/p4-broker-failover.toml",
];

/// `[workload] records` when a file does not set it (`WorkloadSpec`'s default).
const RECORDS_DEFAULT: u64 = 300;

/// `[cdc] generate`'s `events` when a file does not set it (`GenerateSpec`'s default).
const GENERATED_EVENTS_DEFAULT: u64 = 200;

/// One scenario's run, from its `results.json`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    seeds: u64,
    sim_time_s: f64,
    wall_time_s: f64,
    /// The process's CPU time (user + system), s.
    cpu_time_s: f64,
}

/// Runs every scenario (the default list when `scenarios` is empty) `runs` times; the
/// section with the table.
pub(super) fn measure(
    binary: &Path,
    scenarios: &[PathBuf],
    seeds: u64,
    runs: u32,
    out: &Path,
) -> Result<String> {
    let scenarios: Vec<PathBuf> = if scenarios.is_empty() {
        SCENARIOS.iter().map(PathBuf::from).collect()
    } else {
        scenarios.to_vec()
    };
    let mut table = Table::new(&[
        &format!("pipeline (scenario, {seeds} seeds)"),
        "wall per seed",
        "seeds/s",
        "sim-s per wall-s",
        "records/s",
        "CPU per seed",
    ]);
    for path in &scenarios {
        let (pipeline, records) = scenario_facts(path)?;
        let name = stem(path)?;
        let mut measured = Vec::new();
        for run in 0..runs {
            let dir = out.join(format!("{name}-{run}"));
            measured.push(run_once(binary, path, seeds, &dir)?);
        }
        let median = median_by(&measured, |r| r.wall_time_s);
        table.push(row(&pipeline, &name, records, median));
    }
    Ok(format!(
        "### Pipelines (`eosim sim --seeds {seeds} --jobs 1 --shrink-runs-max 0`, median of \
         {runs} by wall time)\n\n{table}"
    ))
}

/// The scenario's pipeline and the records a seed of it produces.
fn scenario_facts(path: &Path) -> Result<(String, u64)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read scenario {}", path.display()))?;
    let doc: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    let pipeline = doc
        .get("pipeline")
        .and_then(|p| p.as_str())
        .unwrap_or("kafka-consume")
        .to_string();
    let records = records(&doc).with_context(|| format!("{}", path.display()))?;
    Ok((pipeline, records))
}

/// The records a seed of the scenario `doc` produces: its change events under
/// `connect-jdbc` (the listed ones and the generated ones after them), else `[workload]
/// records`.
pub(super) fn records(doc: &toml::Table) -> Result<u64> {
    let count = |v: &toml::Value, key: &str| {
        v.as_integer()
            .and_then(|n| u64::try_from(n).ok())
            .with_context(|| format!("{key} is not a count"))
    };
    if doc.get("pipeline").and_then(toml::Value::as_str) == Some("connect-jdbc") {
        let cdc = doc.get("cdc");
        let listed = cdc
            .and_then(|c| c.get("events"))
            .and_then(toml::Value::as_array)
            .map_or(0, |events| events.len() as u64);
        let generated = match cdc.and_then(|c| c.get("generate")) {
            None => 0,
            Some(g) => match g.get("events") {
                None => GENERATED_EVENTS_DEFAULT,
                Some(v) => count(v, "cdc.generate.events")?,
            },
        };
        return Ok(listed + generated);
    }
    match doc.get("workload").and_then(|w| w.get("records")) {
        None => Ok(RECORDS_DEFAULT),
        Some(v) => count(v, "workload.records"),
    }
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
        .arg(out);
    let cost = measure::run(&mut cmd, &out.join("stdout.txt"))?;
    // Exit 1 is a violated scenario: the table measures speed, not the verdict.
    if cost.code > 1 {
        bail!("eosim sim on {} exited {}", scenario.display(), cost.code);
    }
    let mut run = read_run(&out.join("latest").join("results.json"))?;
    run.cpu_time_s = cost.cpu_s;
    Ok(run)
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
fn row(pipeline: &str, name: &str, records: u64, run: Run) -> Vec<String> {
    let wall = run.wall_time_s.max(1e-9);
    let seeds = run.seeds as f64;
    vec![
        format!("{pipeline} (`{name}`)"),
        format!("{:.1} ms", wall * 1_000.0 / seeds),
        format!("{:.1}", seeds / wall),
        thousands(run.sim_time_s / wall),
        thousands(records as f64 * seeds / wall),
        format!("{:.1} ms", run.cpu_time_s * 1_000.0 / (seeds + 1.0)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_divides_the_totals_by_the_wall_time() {
        let run = Run {
            seeds: 20,
            sim_time_s: 600.0,
            wall_time_s: 2.0,
            cpu_time_s: 4.2,
        };
        assert_eq!(
            row("kafka-consume", "s", 300, run).join(" | "),
            "kafka-consume (`s`) | 100.0 ms | 10.0 | 300 | 3,000 | 200.0 ms"
        );
    }

    fn doc(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn records_are_the_workloads_or_a_change_feeds_events() {
        assert_eq!(records(&doc("pipeline = \"kafka-consume\"")).unwrap(), 300);
        let workload = "pipeline = \"clickhouse-sink\"\n[workload]\nrecords = 20000";
        assert_eq!(records(&doc(workload)).unwrap(), 20_000);
        // connect-jdbc: the listed events, then the generated ones; not `[workload]`.
        let cdc = "pipeline = \"connect-jdbc\"\n[workload]\nrecords = 7\n[cdc]\n\
                   events = [{ key = \"1\" }, { key = \"2\" }]\n\
                   generate = { events = 300, keys = 20 }";
        assert_eq!(records(&doc(cdc)).unwrap(), 302);
        let default = "pipeline = \"connect-jdbc\"\n[cdc]\ngenerate = { keys = 20 }";
        assert_eq!(records(&doc(default)).unwrap(), 200);
        let negative = "[workload]\nrecords = -1";
        assert!(records(&doc(negative)).is_err());
    }

    #[test]
    fn every_default_scenario_exists_and_names_a_pipeline_of_its_own() {
        let root = crate::workspace_root();
        let mut pipelines = std::collections::BTreeSet::new();
        for path in SCENARIOS {
            let (pipeline, _) = scenario_facts(&root.join(path)).unwrap();
            assert!(
                pipelines.insert(pipeline.clone()),
                "{path}: {pipeline} twice"
            );
        }
    }
}

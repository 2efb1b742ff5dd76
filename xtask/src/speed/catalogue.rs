//! The `catalogue` part: every catalogue file (`scenarios/*.toml` and `scenarios/field/`)
//! at `--catalogue-seeds` seeds (plus each file's `regression_seeds`) in one `eosim sim
//! --jobs 1 --shrink-runs-max 0` process: its CPU time per seed run (the determinism
//! rechecks, one per file, counted in as the cost they are), what 100,000 such seeds take on
//! 2 cores, and how the seeds' wall time splits over the pipelines.

use super::{mb, measure, thousands, Table};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The seeds of issue 15's aim (under 10 minutes on the 2 cores).
const AIM_SEEDS: f64 = 100_000.0;

/// The cores of the machines the aim is for.
const AIM_CORES: f64 = 2.0;

/// One pipeline's share of a catalogue run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Share {
    files: u64,
    seeds: u64,
    /// The seeds' own run and check times, s.
    wall_time_s: f64,
}

/// Runs the catalogue at `seeds` seeds per file; the section with its tables.
pub(super) fn measure(binary: &Path, seeds: u64, out: &Path) -> Result<String> {
    let mut cmd = Command::new(binary);
    cmd.args(["sim", "--seeds", &seeds.to_string()])
        .args(["--jobs", "1", "--shrink-runs-max", "0", "--no-progress"])
        .arg("--out")
        .arg(out);
    let cost = measure::run(&mut cmd, &out.join("stdout.txt"))?;
    // Verdicts are not this table's business, but they are worth a line.
    if cost.code != 0 {
        eprintln!(
            "xtask: the catalogue at {seeds} seeds exited {} (see {})",
            cost.code,
            out.join("latest").join("summary.md").display()
        );
    }
    let results = out.join("latest").join("results.json");
    let text = std::fs::read_to_string(&results)
        .with_context(|| format!("cannot read {}", results.display()))?;
    let shares = by_pipeline(&text).with_context(|| format!("{}", results.display()))?;
    Ok(format!(
        "### Catalogue (`eosim sim --seeds {seeds} --jobs 1 --shrink-runs-max 0`, every file, \
         one run)\n\n{}",
        tables(cost, &shares)
    ))
}

/// The totals table and the one by pipeline.
fn tables(cost: measure::Cost, shares: &BTreeMap<String, Share>) -> String {
    let files: u64 = shares.values().map(|s| s.files).sum();
    let run: u64 = shares.values().map(|s| s.seeds).sum();
    let wall: f64 = shares.values().map(|s| s.wall_time_s).sum();
    let per_seed_s = cost.cpu_s / run.max(1) as f64;
    let mut totals = Table::new(&[
        "files",
        "seeds run",
        "CPU, user + system (system)",
        "CPU per seed",
        "100,000 seeds on 2 cores",
        "wall",
        "peak RSS",
        "exit",
    ]);
    totals.push(vec![
        files.to_string(),
        thousands(run as f64),
        format!("{:.1} s ({:.1})", cost.cpu_s, cost.sys_s),
        format!("{:.1} ms", per_seed_s * 1_000.0),
        format!("{:.1} min", projection_min(per_seed_s)),
        format!("{:.1} s", cost.wall_s),
        mb(cost.max_rss_kib as f64),
        cost.code.to_string(),
    ]);
    let mut pipelines = Table::new(&[
        "pipeline",
        "files",
        "seeds",
        "wall per seed",
        "share of the seeds' wall time",
    ]);
    let mut sorted: Vec<_> = shares.iter().collect();
    sorted.sort_by(|a, b| b.1.wall_time_s.total_cmp(&a.1.wall_time_s));
    for (pipeline, share) in sorted {
        pipelines.push(vec![
            pipeline.clone(),
            share.files.to_string(),
            share.seeds.to_string(),
            format!(
                "{:.1} ms",
                share.wall_time_s * 1_000.0 / share.seeds.max(1) as f64
            ),
            format!("{:.0} %", share.wall_time_s * 100.0 / wall.max(1e-9)),
        ]);
    }
    format!("{totals}\n{pipelines}")
}

/// Minutes that [`AIM_SEEDS`] seeds of `per_seed_s` CPU each take on [`AIM_CORES`] cores.
fn projection_min(per_seed_s: f64) -> f64 {
    AIM_SEEDS * per_seed_s / AIM_CORES / 60.0
}

/// Files, seeds and seed wall time per pipeline, from a run's `results.json`.
fn by_pipeline(results: &str) -> Result<BTreeMap<String, Share>> {
    let doc: serde_json::Value = serde_json::from_str(results).context("not JSON")?;
    let scenarios = doc
        .get("scenarios")
        .and_then(serde_json::Value::as_array)
        .context("no `scenarios`")?;
    let mut shares: BTreeMap<String, Share> = BTreeMap::new();
    for s in scenarios {
        let name = s.get("scenario").and_then(serde_json::Value::as_str);
        let field = |key: &str| {
            s.get(key)
                .with_context(|| format!("scenario {name:?}: no `{key}`"))
        };
        let pipeline = field("pipeline")?
            .as_str()
            .context("`pipeline` is a string")?;
        let share = shares.entry(pipeline.to_string()).or_default();
        share.files += 1;
        share.seeds += field("seeds")?.as_u64().context("`seeds` is a count")?;
        share.wall_time_s += field("wall_time_s")?
            .as_f64()
            .context("`wall_time_s` is a number")?;
    }
    Ok(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_projection_spreads_the_seeds_over_two_cores() {
        // 12 ms a seed: 100,000 seeds are 1,200 s of CPU, 600 s on each core.
        assert!((projection_min(0.012) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn scenarios_add_up_per_pipeline() {
        let results = r#"{"scenarios": [
            {"scenario": "a", "pipeline": "streams-count", "seeds": 2, "wall_time_s": 0.2},
            {"scenario": "b", "pipeline": "kafka-consume", "seeds": 3, "wall_time_s": 0.03},
            {"scenario": "c", "pipeline": "streams-count", "seeds": 2, "wall_time_s": 0.1}
        ]}"#;
        let shares = by_pipeline(results).unwrap();
        assert_eq!(shares.len(), 2);
        let streams = shares["streams-count"];
        assert_eq!((streams.files, streams.seeds), (2, 4));
        assert!((streams.wall_time_s - 0.3).abs() < 1e-12);
        assert_eq!(shares["kafka-consume"].seeds, 3);
    }

    #[test]
    fn the_tables_divide_the_processes_cpu_by_every_seed_run() {
        let shares = BTreeMap::from([
            (
                "kafka-consume".to_string(),
                Share {
                    files: 2,
                    seeds: 250,
                    wall_time_s: 1.0,
                },
            ),
            (
                "streams-count".to_string(),
                Share {
                    files: 3,
                    seeds: 750,
                    wall_time_s: 3.0,
                },
            ),
        ]);
        let cost = measure::Cost {
            code: 0,
            cpu_s: 12.0,
            sys_s: 0.5,
            max_rss_kib: 1_000,
            wall_s: 13.0,
        };
        let text = tables(cost, &shares);
        // 12 s over 1,000 seeds: 12 ms each, 10 minutes for 100,000 on 2 cores.
        assert!(
            text.contains(
                "| 5 | 1,000 | 12.0 s (0.5) | 12.0 ms | 10.0 min | 13.0 s | 1.0 MB | 0 |"
            ),
            "{text}"
        );
        // The costlier pipeline first, with its share of the seeds' wall time.
        let streams = text.find("| streams-count | 3 | 750 | 4.0 ms | 75 % |");
        let kafka = text.find("| kafka-consume | 2 | 250 | 4.0 ms | 25 % |");
        assert!(
            streams.is_some() && kafka.is_some() && streams < kafka,
            "{text}"
        );
    }

    #[test]
    fn a_scenario_without_its_pipeline_is_an_error() {
        let results = r#"{"scenarios": [{"scenario": "a", "seeds": 2, "wall_time_s": 0.2}]}"#;
        let e = format!("{:#}", by_pipeline(results).unwrap_err());
        assert!(e.contains("no `pipeline`"), "{e}");
    }
}

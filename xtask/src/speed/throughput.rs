//! The `throughput` part: records through each pipeline at bench size, per CPU-second.
//!
//! Each bench scenario (`benches/scenarios/`, the files the criterion benches read: 20,000
//! records from a batching producer that does not pause between sends, no faults) runs one
//! seed in `eosim soak --seeds 1`, `--runs` times: one process that runs the seed and
//! checks it as `eosim sim` does (the checkers and the history hash; no determinism recheck
//! and no report), so its CPU time is one seed's. madsim runs a seed on one thread, so
//! records over that CPU time are records per second on one core. The row is the run
//! whose CPU time is the median.

use super::{mb, measure, median_by, pipelines, stem, thousands, Table};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// The bench scenarios, with what each stands for in issue 15's aims.
pub(super) const FILES: [(&str, &str); 5] = [
    (
        "benches/scenarios/kafka-consume.toml",
        "Kafka alone, kafka-consume",
    ),
    (
        "benches/scenarios/clickhouse-sink.toml",
        "P1 ClickHouse sink, `seed`",
    ),
    ("benches/scenarios/jdbc-sink.toml", "P2 JDBC sink, upsert"),
    (
        "benches/scenarios/routine-load.toml",
        "P4 Doris Routine Load",
    ),
    (
        "benches/scenarios/streams.toml",
        "P3 Streams, exactly_once_v2",
    ),
];

/// What `eosim soak --seeds 1` printed and what its process cost.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seed {
    sim_time_s: f64,
    /// The seed's run and check, s (`soak classes … wall_time_s=`).
    wall_time_s: f64,
    cost: measure::Cost,
}

/// Runs every bench scenario `runs` times; the section with the table.
pub(super) fn measure(binary: &Path, runs: u32, out: &Path) -> Result<String> {
    let mut table = Table::new(&[
        "pipeline (bench scenario, one seed)",
        "records",
        "simulated",
        "CPU per seed (system)",
        "records per CPU-s (one core)",
        "wall per seed",
        "peak RSS",
    ]);
    for (path, what) in FILES {
        let path = Path::new(path);
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let doc: toml::Table =
            toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
        let records = pipelines::records(&doc).with_context(|| format!("{}", path.display()))?;
        let name = stem(path)?;
        let mut seeds = Vec::new();
        for run in 0..runs {
            let stdout = out.join(format!("{name}-{run}.txt"));
            seeds.push(run_once(binary, path, &stdout)?);
        }
        let median = median_by(&seeds, |s| s.cost.cpu_s);
        table.push(row(what, &name, records, median));
    }
    Ok(format!(
        "### Throughput (`eosim soak --seeds 1` of each `benches/scenarios/*.toml`, median of \
         {runs} by CPU time)\n\n{table}"
    ))
}

/// One `eosim soak --seeds 1` of `scenario`.
fn run_once(binary: &Path, scenario: &Path, stdout: &Path) -> Result<Seed> {
    let mut cmd = Command::new(binary);
    cmd.arg("soak")
        .arg("--scenario")
        .arg(scenario)
        .args(["--seeds", "1", "--every", "1"]);
    let cost = measure::run(&mut cmd, stdout)?;
    if cost.code != 0 {
        bail!("eosim soak on {} exited {}", scenario.display(), cost.code);
    }
    let text = std::fs::read_to_string(stdout)
        .with_context(|| format!("cannot read {}", stdout.display()))?;
    parse(&text, cost).with_context(|| format!("{}: {}", scenario.display(), stdout.display()))
}

/// The seed's figures from `eosim soak`'s output; an error unless the seed held (a stalled
/// or crashed run's speed is not the pipeline's).
fn parse(text: &str, cost: measure::Cost) -> Result<Seed> {
    const CLASSES: &str = "soak classes";
    let line = text
        .lines()
        .rfind(|l| l.starts_with(CLASSES))
        .context("no `soak classes` line")?;
    if measure::field(line, "holds") != Some("1") {
        bail!("the bench seed did not hold: {line}");
    }
    let number =
        |key| measure::number(text, CLASSES, key).with_context(|| format!("no `{key}=` in {line}"));
    Ok(Seed {
        sim_time_s: number("sim_time_s")?,
        wall_time_s: number("wall_time_s")?,
        cost,
    })
}

/// One Markdown row of the table.
fn row(what: &str, name: &str, records: u64, seed: Seed) -> Vec<String> {
    let cpu = seed.cost.cpu_s.max(1e-9);
    vec![
        format!("{what} (`{name}.toml`)"),
        thousands(records as f64),
        format!("{:.1} s", seed.sim_time_s),
        format!("{:.3} s ({:.3})", seed.cost.cpu_s, seed.cost.sys_s),
        thousands(records as f64 / cpu),
        format!("{:.3} s", seed.wall_time_s),
        mb(seed.cost.max_rss_kib as f64),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(cpu_s: f64) -> measure::Cost {
        measure::Cost {
            code: 0,
            cpu_s,
            sys_s: 0.025,
            max_rss_kib: 102_400,
            wall_s: 1.0,
        }
    }

    #[test]
    fn a_held_seed_is_read_from_the_classes_line() {
        let text = "soak seeds=1 rss_kib=90000 seeds_per_s=3.1\n\
                    soak classes crash=0 holds=1 invalid=0 stalled=0 unknown=0 \
                    sim_time_s=4.250 wall_time_s=0.322\n";
        let seed = parse(text, cost(0.4)).unwrap();
        assert_eq!(seed.sim_time_s, 4.25);
        assert_eq!(seed.wall_time_s, 0.322);
        assert_eq!(seed.cost.cpu_s, 0.4);
    }

    #[test]
    fn a_stalled_seed_or_an_old_soak_is_an_error() {
        let stalled = "soak classes crash=0 holds=0 invalid=0 stalled=1 unknown=0 \
                       sim_time_s=120.000 wall_time_s=9.000\n";
        let e = parse(stalled, cost(9.0)).unwrap_err().to_string();
        assert!(e.contains("did not hold"), "{e}");
        // An `eosim` from before the classes line.
        assert!(parse("soak seeds=1 rss_kib=1 seeds_per_s=3.1\n", cost(1.0)).is_err());
    }

    #[test]
    fn a_row_counts_records_per_cpu_second() {
        let seed = Seed {
            sim_time_s: 4.26,
            wall_time_s: 0.2,
            cost: cost(0.125),
        };
        assert_eq!(
            row("P1", "clickhouse-sink", 20_000, seed).join(" | "),
            "P1 (`clickhouse-sink.toml`) | 20,000 | 4.3 s | 0.125 s (0.025) | 160,000 | 0.200 s | \
             104.9 MB"
        );
    }

    #[test]
    fn every_bench_scenario_exists_at_twenty_thousand_records() {
        let root = crate::workspace_root();
        for (path, _) in FILES {
            let text = std::fs::read_to_string(root.join(path)).expect(path);
            let doc: toml::Table = toml::from_str(&text).unwrap();
            assert_eq!(pipelines::records(&doc).unwrap(), 20_000, "{path}");
        }
    }
}

//! `cargo xtask speed`: the README's speed figures (issue 15), measured side by side in one
//! run on the release build and printed as Markdown tables.
//!
//! Four parts, each in `eosim` processes of its own (so one's memory does not slow the
//! next), in this order; `--only` picks some:
//!
//! - `pipelines` ([`pipelines`]): each pipeline's reference scenario, `--seeds` seeds on one
//!   job, `--runs` times: seeds/s, simulated s per wall s, records/s, CPU per seed;
//! - `throughput` ([`throughput`]): one seed of each bench scenario
//!   (`benches/scenarios/*.toml`, 20,000 records, no faults) in `eosim soak`, `--runs`
//!   times: records per CPU-second, on one core;
//! - `memory` ([`memory`]): `eosim soak` over `--soak-seeds` seeds of one scenario: resident
//!   memory after seed 100 and at the end, growth per 1,000 seeds;
//! - `catalogue` ([`catalogue`]): `eosim sim` over every catalogue file at
//!   `--catalogue-seeds` seeds, one job, no shrinking: CPU per seed and what 100,000 seeds
//!   take on the 2 cores.
//!
//! CPU time (user + system) and peak resident memory are each process's own, from
//! `wait4` ([`measure`]): the figures to compare on a loaded machine, where wall time also
//! counts waiting. Reports and outputs go to `target/speed/`; the tables are also written
//! to `target/speed/speed.md`.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod catalogue;
mod measure;
mod memory;
mod pipelines;
mod throughput;

/// Where the runs' reports and outputs go.
const OUT_DIR: &str = "target/speed";

/// The parts of `cargo xtask speed`, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Part {
    /// Each pipeline's reference scenario at `--seeds` seeds.
    Pipelines,
    /// One seed of each bench scenario (20,000 records): records per CPU-second.
    Throughput,
    /// `eosim soak`: resident memory over `--soak-seeds` seeds.
    Memory,
    /// The whole catalogue at `--catalogue-seeds` seeds: CPU per seed.
    Catalogue,
}

/// Options of `cargo xtask speed`.
#[derive(Args)]
pub struct SpeedArgs {
    /// Parts to measure (repeat, or separate with commas). Default: all, in the order
    /// pipelines, throughput, memory, catalogue.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
    /// Seeds per scenario and run (pipelines).
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    /// Runs per scenario (pipelines) and per bench scenario (throughput); each row is the
    /// median run.
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Scenario file of the pipelines part; repeat for several. Default: one per pipeline.
    #[arg(long = "scenario", value_name = "PATH")]
    scenarios: Vec<PathBuf>,
    /// The memory part's scenario. Default: scenarios/p3-eos-swarm.toml.
    #[arg(long, value_name = "PATH")]
    soak_scenario: Option<PathBuf>,
    /// The memory part's seeds (more than 100: the growth is counted from seed 100).
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    soak_seeds: u64,
    /// Seeds per catalogue file (the catalogue part).
    #[arg(long, value_name = "N", default_value_t = 2)]
    catalogue_seeds: u64,
}

/// Builds eosim (release), measures the chosen parts and prints their tables.
pub fn speed(args: &SpeedArgs, rebase: impl Fn(&Path) -> PathBuf) -> Result<u8> {
    if args.runs == 0 || args.seeds == 0 || args.catalogue_seeds == 0 {
        bail!("--runs, --seeds and --catalogue-seeds must be at least 1");
    }
    let parts = chosen(&args.only);
    if parts.contains(&Part::Memory) && args.soak_seeds <= 100 {
        bail!("--soak-seeds must be more than 100 (the growth is counted from seed 100)");
    }
    let binary = crate::build_eosim(true)?;
    std::fs::create_dir_all(OUT_DIR).with_context(|| format!("cannot create {OUT_DIR}"))?;
    let mut report = format!("load average at the start: {}\n", load_average());
    for part in parts {
        let out = Path::new(OUT_DIR).join(format!("{part:?}").to_lowercase());
        let section = match part {
            Part::Pipelines => {
                let scenarios: Vec<PathBuf> = args.scenarios.iter().map(|p| rebase(p)).collect();
                pipelines::measure(&binary, &scenarios, args.seeds, args.runs, &out)?
            }
            Part::Throughput => throughput::measure(&binary, args.runs, &out)?,
            Part::Memory => {
                let scenario = args
                    .soak_scenario
                    .as_deref()
                    .map_or_else(|| PathBuf::from(memory::SCENARIO), &rebase);
                memory::measure(&binary, &scenario, args.soak_seeds, &out)?
            }
            Part::Catalogue => catalogue::measure(&binary, args.catalogue_seeds, &out)?,
        };
        // Each part's tables as soon as they are measured; all of them again at the end.
        println!("{section}");
        report.push_str(&section);
        report.push('\n');
        eprintln!("xtask: load average after {part:?}: {}", load_average());
    }
    let _ = writeln!(report, "load average at the end: {}", load_average());
    let path = Path::new(OUT_DIR).join("speed.md");
    std::fs::write(&path, &report).with_context(|| format!("cannot write {}", path.display()))?;
    println!("{report}");
    eprintln!("xtask: the tables are in {}", path.display());
    Ok(0)
}

/// The parts to run, each once, in [`Part`]'s order; none chosen means all.
fn chosen(only: &[Part]) -> Vec<Part> {
    let mut parts = if only.is_empty() {
        Part::value_variants().to_vec()
    } else {
        only.to_vec()
    };
    parts.sort();
    parts.dedup();
    parts
}

/// `/proc/loadavg`'s 1, 5 and 15 minute load averages, or `unknown`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".to_string(),
        |text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        },
    )
}

/// A Markdown table: a header row and rows of as many cells.
#[derive(Debug, Default)]
struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Self {
        Table {
            header: header.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.header.len(), "a row has a cell per column");
        self.rows.push(row);
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "| {} |", self.header.join(" | "))?;
        writeln!(f, "|{}", "---|".repeat(self.header.len()))?;
        for row in &self.rows {
            writeln!(f, "| {} |", row.join(" | "))?;
        }
        Ok(())
    }
}

/// The element of `items` that is the median by `key` (the upper one of an even count).
///
/// # Panics
/// When `items` is empty.
fn median_by<T: Copy>(items: &[T], key: impl Fn(&T) -> f64) -> T {
    let mut sorted = items.to_vec();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    sorted[sorted.len() / 2]
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

/// KiB as MB (10^6 bytes) with one decimal.
fn mb(kib: f64) -> String {
    format!("{:.1} MB", kib * 1024.0 / 1e6)
}

/// The scenario file's name (its stem).
fn stem(path: &Path) -> Result<String> {
    Ok(path
        .file_stem()
        .and_then(|s| s.to_str())
        .context("a scenario file has a UTF-8 name")?
        .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(1_014.4), "1,014");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-3.0), "0");
    }

    #[test]
    fn mb_counts_kib_in_decimal_megabytes() {
        assert_eq!(mb(100_000.0), "102.4 MB");
        assert_eq!(mb(0.0), "0.0 MB");
    }

    #[test]
    fn the_median_is_the_middle_by_the_key_whatever_the_order() {
        let runs = [(3.0, 'c'), (1.0, 'a'), (2.0, 'b')];
        assert_eq!(median_by(&runs, |r| r.0).1, 'b');
        assert_eq!(median_by(&[(5.0, 'x')], |r| r.0).1, 'x');
        // Of an even count, the upper middle.
        assert_eq!(median_by(&[(4.0, 'd'), (1.0, 'a')], |r| r.0).1, 'd');
    }

    #[test]
    fn parts_run_once_each_in_order_and_none_means_all() {
        assert_eq!(
            chosen(&[]),
            [
                Part::Pipelines,
                Part::Throughput,
                Part::Memory,
                Part::Catalogue
            ]
        );
        assert_eq!(
            chosen(&[Part::Catalogue, Part::Pipelines, Part::Catalogue]),
            [Part::Pipelines, Part::Catalogue]
        );
    }

    #[test]
    fn a_table_prints_as_markdown() {
        let mut t = Table::new(&["a", "b"]);
        t.push(vec!["1".into(), "2".into()]);
        assert_eq!(t.to_string(), "| a | b |\n|---|---|\n| 1 | 2 |\n");
    }
}

//! `eosim report bench`: the benchmark page from criterion's output, a simulation run's
//! `results.json`, a real run's and a baseline ([`crate::report::bench`]).

use super::output::build_id;
use super::rundir::run_stamp;
use super::{config_error, ExitClass};
use crate::report::bench::{
    criterion_estimates, load_average, read_baseline, read_run, real_rates, sim_rates, write_bench,
    BenchReport,
};
use clap::Args;
use std::path::PathBuf;
use std::time::SystemTime;

/// `eosim report bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// criterion's output dir (its `**/new/estimates.json` are read).
    #[arg(long, value_name = "DIR", default_value = "target/madsim/criterion")]
    pub criterion: PathBuf,
    /// A simulation run's results.json (simulated seconds per wall second per pipeline).
    #[arg(long, value_name = "PATH")]
    pub sim: Option<PathBuf>,
    /// A real run's results.json (its measured throughput and bulk-load ratios); without
    /// it the page says the real tier was not measured.
    #[arg(long, value_name = "PATH")]
    pub real: Option<PathBuf>,
    /// The baseline dir (holding bench.json); the page compares against it when present.
    #[arg(long, value_name = "DIR", default_value = "reports/baseline")]
    pub baseline: PathBuf,
    /// Bench report dir; the page goes into `DIR/<id>`.
    #[arg(long, value_name = "DIR", default_value = "reports/bench")]
    pub out: PathBuf,
    /// Also write this run's figures as a baseline here (DIR/bench.json).
    #[arg(long, value_name = "DIR")]
    pub save_baseline: Option<PathBuf>,
}

/// Runs `eosim report bench`; a bad input is a configuration error (exit 2).
pub fn bench_command(args: &BenchArgs) -> ExitClass {
    let mut now = BenchReport {
        id: run_stamp(SystemTime::now()),
        build: build_id(),
        load_average: load_average(),
        ..BenchReport::default()
    };
    match criterion_estimates(&args.criterion) {
        Ok(c) => now.criterion = c,
        Err(e) => return config_error(e),
    }
    if let Some(sim) = &args.sim {
        match read_run(sim) {
            Ok(r) => now.sim = sim_rates(&r),
            Err(e) => return config_error(e),
        }
    }
    if let Some(real) = &args.real {
        match read_run(real) {
            Ok(r) => now.real = real_rates(&r),
            Err(e) => return config_error(e),
        }
    }
    let baseline = if args.baseline.join("bench.json").is_file() {
        match read_baseline(&args.baseline) {
            Ok(b) => Some(b),
            Err(e) => return config_error(e),
        }
    } else {
        None
    };
    let dir = args.out.join(&now.id);
    if let Err(e) = write_bench(&dir, &now, baseline.as_ref()) {
        return config_error(format!("cannot write {}: {e}", dir.display()));
    }
    if let Some(b) = &args.save_baseline {
        if let Err(e) = write_bench(b, &now, None) {
            return config_error(format!("cannot write the baseline {}: {e}", b.display()));
        }
    }
    print!(
        "{}",
        crate::report::bench::bench_markdown(&now, baseline.as_ref())
    );
    println!("bench report: {}", dir.join("index.html").display());
    ExitClass::Expected
}

//! The `eosim` command line: `sim`, `replay` and `determinism` in simulation, `run` against
//! real services.
//!
//! Simulation needs the binary built with `--cfg madsim`, which `cargo xtask sim` does; a
//! binary built without it runs `eosim run` (and the hidden `eosim worker`, one process of
//! a real run) and explains the rest.
//!
//! # Sections
//! - [`Cli`] and [`Command`]: the arguments (clap derive).
//! - [`ExitClass`]: one documented exit code per outcome class.
//! - `aggregate` (under `--cfg madsim`): seed outcomes → a scenario's verdict.
//! - `batch` (under `--cfg madsim`): a run's seeds on `--jobs` threads ([`pool`]), only
//!   this shard's ([`partition`]), corpus seeds first ([`corpus`]).
//! - `run` (under `--cfg madsim`): the subcommands.
//! - [`merge`]: `eosim report merge`, shard reports into one; [`junit`]: `--junit`.
//! - [`mod@bench`]: `eosim report bench`, the benchmark page.
//! - [`output`]: one-line renderings of ops, headers and durations.
//! - [`judge`]: checker options, expected verdict and exit class, shared by both worlds.
//! - [`rundir`]: a run's report directory and `latest`.
//! - `real` (without `--cfg madsim`): `eosim run` and `eosim worker`.

#[cfg(madsim)]
pub mod aggregate;
pub mod agreement;
#[cfg(madsim)]
pub mod batch;
pub mod bench;
pub mod corpus;
pub mod judge;
pub mod junit;
pub mod merge;
pub mod output;
pub mod partition;
pub mod pool;
#[cfg(not(madsim))]
mod real;
#[cfg(madsim)]
mod run;
pub mod rundir;
#[cfg(madsim)]
mod seeds;
#[cfg(madsim)]
mod shrink;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Base seed when `--seed` is not given: seed `i` of a scenario is `DEFAULT_SEED_BASE + i`.
pub const DEFAULT_SEED_BASE: u64 = 1;

/// Exit codes, as `--help` shows them.
const EXIT_CODES_HELP: &str = "Exit codes:
  0  every scenario came out as expected (including expected violations)
  1  a claim expected to hold was violated, an expected violation was not found,
     or a seed did not replay to the same history
  2  configuration error: bad scenario file or arguments
  3  stalled: the pipeline did not catch up within drain.time_s_max
  4  crash: a model or component panicked
When scenarios end differently, the highest code wins.";

/// `eosim`'s arguments.
#[derive(Debug, Parser)]
#[command(after_help = EXIT_CODES_HELP)]
#[command(
    name = "eosim",
    version,
    about = "Deterministic simulation of Kafka → database pipelines"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run scenarios over many seeds and write a report.
    Sim(SimArgs),
    /// Run one seed, print its history op by op, write history.jsonl.
    Replay(SeedArgs),
    /// Run one seed twice and compare the history hashes.
    Determinism(SeedArgs),
    /// Run one scenario for many seeds in this one process and report its resident
    /// memory (VmRSS) as it goes: every seed's nodes and tasks must go with the seed.
    Soak(SoakArgs),
    /// Run scenarios once against real services with real faults and write a report.
    Run(RunArgs),
    /// One process of a real run (started by `eosim run`, not by hand).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// The lossy file system of a real run's machine crashes (started by `eosim run`, not
    /// by hand): mounts `--backing` at `--mount`, unsynced writes held in memory, and
    /// serves `clear-cache`, `stats`, `unmount` on the Unix socket `--control`.
    #[command(hide = true)]
    Lazyfs(LazyfsArgs),
    /// Build the images of `eosim run --backend testcontainers` from Debian's packages
    /// (debootstrap, docker import, docker build; root and a Docker daemon needed).
    Images(ImagesArgs),
    /// Work on written reports.
    #[command(subcommand)]
    Report(ReportCommand),
}

/// `eosim images`'s arguments.
#[derive(Debug, Clone, Args)]
pub struct ImagesArgs {
    /// Rebuild every image, the base too, even when its recipe is current.
    #[arg(long)]
    pub force: bool,
}

/// `eosim report` subcommands.
#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// Merge the reports of the shards of one run (`eosim sim --partition K/N`) into the
    /// report one run over all their seeds gives; exits as that run would.
    Merge(MergeArgs),
    /// Write the benchmark page: criterion results, the simulator's rates and the real
    /// tier's throughput beside a baseline's (`cargo xtask bench` runs it).
    Bench(bench::BenchArgs),
    /// Put a simulation run's verdict per file beside real runs of the same files, each
    /// real run classified (agrees, timing, disagrees, real-gap, crashed), with the
    /// agreement rate (`cargo xtask real-catalogue` runs it).
    Agreement(agreement::AgreementArgs),
}

impl ReportCommand {
    /// Runs the subcommand: the same in both builds (no simulation needed).
    pub fn run(&self) -> ExitClass {
        match self {
            ReportCommand::Merge(args) => merge::merge_command(args),
            ReportCommand::Bench(args) => bench::bench_command(args),
            ReportCommand::Agreement(args) => agreement::agreement_command(args),
        }
    }
}

/// `eosim report merge` arguments.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// A shard's run dir (holding results.json), or a report dir whose `latest` is one.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Report directory; the merged run goes into DIR/RUN_ID, and DIR/latest points at it.
    #[arg(long, value_name = "DIR", default_value = "reports")]
    pub out: PathBuf,
    /// Also write the merged report as JUnit XML here.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Add the merged run's failing seeds to this regression corpus.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
}

/// `eosim run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Where the services come from: native (started here), testcontainers (Docker) or
    /// external (`--bootstrap-servers`).
    #[arg(long, default_value = "native")]
    pub backend: String,
    /// Scenario file; repeat for several. Default: every scenarios/real/*.toml.
    #[arg(long = "scenario", value_name = "PATH")]
    pub scenarios: Vec<PathBuf>,
    /// `bootstrap.servers` of your own Kafka (`--backend external`).
    #[arg(long, value_name = "HOST:PORT,...")]
    pub bootstrap_servers: Option<String>,
    /// Report directory; each run goes into DIR/RUN_ID, and DIR/latest points at it.
    #[arg(long, value_name = "DIR", default_value = "reports/real")]
    pub out: PathBuf,
    /// Seed of the swarm's fault schedule (`[faults.swarm]`), drawn as the simulation draws
    /// a seed's: the same seed gives the same schedule again (the history, of course, not).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `eosim lazyfs` arguments (hidden: the real runner passes them).
#[derive(Debug, Args)]
pub struct LazyfsArgs {
    /// The directory whose content the file system shows and syncs to.
    #[arg(long, value_name = "DIR")]
    pub backing: PathBuf,
    /// Where to mount it (an empty directory).
    #[arg(long, value_name = "DIR")]
    pub mount: PathBuf,
    /// The control socket to create.
    #[arg(long, value_name = "PATH")]
    pub control: PathBuf,
}

/// `eosim worker` arguments (hidden: the real runner passes them).
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// `producer`, `consumer`, `cdc-producer` or `sink-task`.
    #[arg(long)]
    pub role: String,
    /// Scenario file.
    #[arg(long, value_name = "PATH")]
    pub scenario: PathBuf,
    /// Process name in the history.
    #[arg(long)]
    pub name: String,
    /// `bootstrap.servers`.
    #[arg(long)]
    pub bootstrap: String,
    /// The sink's directory.
    #[arg(long, value_name = "DIR")]
    pub sink: PathBuf,
    /// The run's epoch on `CLOCK_MONOTONIC` (the run's clock, shared by every process of
    /// the machine), ns.
    #[arg(long)]
    pub epoch_ns: u64,
    /// First id to send (producers).
    #[arg(long, default_value_t = 0)]
    pub id_from: u64,
    /// One past the last id to send (producers).
    #[arg(long, default_value_t = 0)]
    pub id_to: u64,
    /// A connector key over the scenario's `[connector]` (sink tasks); repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Arm the scenario's `[sink.fault_point]` in this process (sink tasks; the runner
    /// passes it to the first incarnation of `worker-0` only).
    #[arg(long)]
    pub arm_fault_point: bool,
}

/// `eosim sim` arguments.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario file; repeat for several. Default: every scenarios/*.toml.
    #[arg(long = "scenario", value_name = "PATH")]
    pub scenarios: Vec<PathBuf>,
    /// Seeds per scenario. Default: the scenario's `seeds`, or 1 when `--seed` is given.
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Base seed: seed i runs as S + i. Alone, runs exactly seed S.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Report directory; each run goes into DIR/RUN_ID, and DIR/latest points at it.
    #[arg(long, value_name = "DIR", default_value = "reports")]
    pub out: PathBuf,
    /// No progress bars.
    #[arg(long)]
    pub no_progress: bool,
    /// Print every seed's header and history hash, not only failing ones.
    #[arg(long, short)]
    pub verbose: bool,
    /// Runs allowed for shrinking each violated claim's counterexample schedule; 0 turns
    /// shrinking off.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHRINK_RUNS_MAX)]
    pub shrink_runs_max: u32,
    /// Seeds run at once, each on its own thread. Default: the machine's cores. Histories,
    /// verdicts and the report are the same for any N.
    #[arg(long, short, value_name = "N")]
    pub jobs: Option<usize>,
    /// Run only shard K of N of the (scenario, seed) pairs, split by hash as nextest's
    /// `hash:K/N`; `eosim report merge` joins the shards' reports.
    #[arg(long, value_name = "K/N")]
    pub partition: Option<partition::Partition>,
    /// Also write the report as JUnit XML here (one test case per scenario).
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,
    /// Regression corpus: run the seeds in `DIR/<scenario>.seeds` first, and add the seeds
    /// that fail a claim expected to hold.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
}

/// Runs per counterexample shrink unless `--shrink-runs-max` says otherwise: enough for
/// ddmin on about a dozen faults.
pub const DEFAULT_SHRINK_RUNS_MAX: u32 = 24;

/// `eosim soak` arguments.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Scenario file.
    #[arg(long, value_name = "PATH")]
    pub scenario: PathBuf,
    /// Seeds to run, one after another in this process.
    #[arg(long, default_value_t = 1_000)]
    pub seeds: u64,
    /// Base seed: seed i runs as S + i.
    #[arg(long, value_name = "S", default_value_t = DEFAULT_SEED_BASE)]
    pub seed: u64,
    /// Print the resident memory every N seeds (and after seed 100 and the last).
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub every: u64,
}

/// `eosim replay` / `eosim determinism` arguments.
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// Scenario file.
    #[arg(long, value_name = "PATH")]
    pub scenario: PathBuf,
    /// Seed.
    #[arg(long)]
    pub seed: u64,
    /// Where replay writes `<scenario>/<seed>/history.jsonl`.
    #[arg(long, value_name = "DIR", default_value = "reports/replay")]
    pub out: PathBuf,
}

/// A problem that ends a run before or after its scenarios (a bad file, an unwritable
/// report): the message on stderr, exit 2.
fn config_error(message: impl std::fmt::Display) -> ExitClass {
    eprintln!("eosim: error: {message}");
    ExitClass::Config
}

/// The outcome classes and their exit codes. When a run has several, the most serious
/// wins: crash 4 > stalled 3 > config 2 > violated 1 > not exercised 5 > skipped 6 >
/// expected 0
/// ([`ExitClass::rank`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitClass {
    /// 0: every claim came out as expected (including expected violations).
    Expected = 0,
    /// 1: a claim expected to hold was violated, an expected violation was not found, or
    /// a replay was not deterministic.
    Violated = 1,
    /// 2: a bad scenario file or bad arguments.
    Config = 2,
    /// 3: stalled: the pipeline did not catch up within `drain.time_s_max`.
    Stalled = 3,
    /// 4: crash: a model or component panicked.
    Crash = 4,
    /// 5: every claim came out as expected, but a scenario expected to hold left a
    /// scheduled fault kind that never acted, or a required mark never reached (`holds,
    /// not exercised`), and its file does not allow it.
    NotExercised = 5,
    /// 6: every scenario that ran came out as expected, but one was skipped (the real tier
    /// cannot run it, with the reason printed): a run that checked nothing must not look
    /// like a pass to a script.
    Skipped = 6,
}

impl ExitClass {
    /// How serious the class is, for picking a run's exit code among its scenarios'.
    pub fn rank(self) -> u8 {
        match self {
            ExitClass::Expected => 0,
            ExitClass::Skipped => 1,
            ExitClass::NotExercised => 2,
            ExitClass::Violated => 3,
            ExitClass::Config => 4,
            ExitClass::Stalled => 5,
            ExitClass::Crash => 6,
        }
    }
}

impl PartialOrd for ExitClass {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ExitClass {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

impl ExitClass {
    /// The process exit code.
    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}

/// Parses the arguments and runs; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return if usage {
                ExitClass::Config.code()
            } else {
                ExitClass::Expected.code()
            };
        }
    };
    dispatch(cli).code()
}

#[cfg(madsim)]
fn dispatch(cli: Cli) -> ExitClass {
    run::dispatch(cli)
}

#[cfg(not(madsim))]
fn dispatch(cli: Cli) -> ExitClass {
    match cli.command {
        Command::Run(args) => real::run(&args),
        Command::Worker(args) => real::worker(&args),
        Command::Lazyfs(args) => real::lazyfs(&args),
        Command::Images(args) => real::images(&args),
        Command::Report(report) => report.run(),
        _ => {
            eprintln!(
                "eosim: this binary was built without --cfg madsim, so it cannot simulate.\n\
                 Run the scenarios in simulation with `cargo xtask sim` (it builds eosim with\n\
                 RUSTFLAGS=\"--cfg madsim\" in target/madsim). Against real services: \
                 `eosim run --backend native`."
            );
            ExitClass::Config
        }
    }
}

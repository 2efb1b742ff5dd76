//! `cargo xtask`: eosim's scripts, in Rust.
//!
//! # Sections
//! - `cargo xtask sim [--scenario PATH]... [--seeds N] [--seed S] [--release]`: builds the
//!   `eosim` binary under `--cfg madsim` (in its own target dir, `target/madsim`) and runs
//!   `eosim sim` with the same arguments; by default every `scenarios/*.toml`. Ends with a
//!   report in `reports/<run-id>/` (`reports/latest` points at it).
//! - `cargo xtask replay --scenario PATH --seed S` and `cargo xtask determinism ...`: the
//!   `eosim` subcommands of the same names, built the same way.
//! - `cargo xtask soak --scenario PATH [--seeds N] [--every K]`: `eosim soak` (release): one
//!   scenario's seeds in one process, printing its resident memory as it goes.
//! - `cargo xtask test [--junit DIR]`: `cargo test --workspace` (normal cfg), then the
//!   simulation tests under `--cfg madsim`; with `--junit`, through cargo-nextest, one JUnit
//!   file per step in DIR.
//! - `cargo xtask bench [--quick] [--real] [--save-baseline]`: the criterion benches under
//!   `--cfg madsim`, a simulation sample per pipeline, with `--real` the real tier's
//!   throughput, then the bench page beside `reports/baseline`.
//! - `cargo xtask real-catalogue [--runs N] [--seeds S] [--scenario PATH]...`: sim/real
//!   agreement over scenarios/real-catalogue.txt (or the files given).
//! - `cargo xtask report`: prints `reports/latest/summary.md`; `cargo xtask report merge
//!   DIR...` runs `eosim report merge` (shard reports into one).
//! - `cargo xtask speed [--only PART,...] [--runs R] [--seeds N] [--scenario PATH]...`: the
//!   README's speed figures (issue 15), side by side in one run on the release build
//!   (`speed/`): seeds/s, simulated s per wall s and CPU per seed of each pipeline's
//!   reference scenario; records per CPU-second through each pipeline at bench size
//!   (`benches/scenarios/`); resident memory over 1,000 seeds (`eosim soak`); the
//!   catalogue's CPU per seed and what 100,000 seeds take on 2 cores.
//! - `cargo xtask chaos [sim's options]`: the catalogue over many seeds (200 unless
//!   `--seeds`) in release mode; with `--partition K/N`, one shard of a nightly run.
//!
//! Every child's exit code is propagated, so `cargo xtask sim` exits with `eosim`'s codes
//! (0 as expected, 1 violated, 2 config error, 3 stalled, 4 crash; see the README).
//!
//! ## Environment
//! `RUSTFLAGS` set by the caller is kept and `--cfg madsim` appended for simulation builds.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, ExitCode};

mod speed;

/// The target dir of simulation builds, so switching cfgs does not rebuild everything.
const MADSIM_TARGET_DIR: &str = "target/madsim";

/// Seeds per scenario in `cargo xtask chaos`.
const CHAOS_SEEDS: u64 = 200;

#[derive(Parser)]
#[command(
    after_help = "`cargo xtask sim`, `replay` and `determinism` exit with eosim's codes: 0 as \
                  expected, 1 violated, 2 config error, 3 stalled, 4 crash (see the README)."
)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "eosim's build and run scripts"
)]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Run the scenario catalogue (or the given scenarios) in simulation and write a report.
    Sim(SimArgs),
    /// Replay one seed of one scenario, printing its history.
    Replay(SeedArgs),
    /// Run one seed twice and compare the history hashes.
    Determinism(SeedArgs),
    /// One scenario for many seeds in one process (release build), reporting its resident
    /// memory (VmRSS) after seed 100, every `--every` seeds and at the end.
    Soak {
        /// Scenario file.
        #[arg(long, value_name = "PATH")]
        scenario: PathBuf,
        /// Seeds to run.
        #[arg(long, default_value_t = 1_000)]
        seeds: u64,
        /// Print the resident memory every N seeds.
        #[arg(long, value_name = "N", default_value_t = 1_000)]
        every: u64,
    },
    /// Ordinary tests, then the simulation tests under --cfg madsim.
    Test {
        /// Also write JUnit XML, one file per step (`ordinary.xml`, `simulation.xml`,
        /// `model.xml`) into DIR: the steps run under cargo-nextest's `ci` profile
        /// (`.config/nextest.toml`, installed with `cargo install` when missing) and every
        /// step runs even after one fails.
        #[arg(long, value_name = "DIR")]
        junit: Option<PathBuf>,
    },
    /// Criterion benches under --cfg madsim, a one-seed simulation sample per pipeline, with
    /// --real the real tier's throughput, then the bench page
    /// (`reports/bench/<id>/index.html`) beside `reports/baseline`.
    Bench {
        /// A short run: criterion with 10 samples, 1 s warm-up, 3 s measurement.
        #[arg(long)]
        quick: bool,
        /// Also save this run's figures as the baseline (reports/baseline/bench.json).
        #[arg(long)]
        save_baseline: bool,
        /// Also measure the real tier: install and start the services
        /// (.ci/install-real-services), run every scenarios/real/*.toml with `eosim run
        /// --backend native` into reports/bench/real, and put its throughput and bulk-load
        /// ratios on the page.
        #[arg(long)]
        real: bool,
        /// Extra arguments for criterion (after `--`).
        #[arg(last = true)]
        criterion_args: Vec<String>,
    },
    /// Print the latest report's summary; `report merge DIR...` merges shard reports.
    Report {
        /// `merge DIR... [--out DIR] [--junit PATH] [--corpus DIR]`: passed to `eosim
        /// report`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The whole catalogue over many seeds (default 200 per scenario), in release mode.
    Chaos(SimArgs),
    /// The README's speed figures on the release build, as Markdown tables: per pipeline
    /// (`--seeds` seeds of its reference scenario, `--runs` times), throughput at bench size
    /// (`benches/scenarios/`, `--runs` times), memory over `--soak-seeds` seeds, and the
    /// catalogue at `--catalogue-seeds` seeds; `--only` picks some.
    Speed(speed::SpeedArgs),
    /// Check .github/workflows with actionlint (installed with `go install` when missing
    /// and Go is there).
    Actionlint,
    /// The real tier: installs and starts the services (.ci/install-real-services), runs
    /// the model-versus-real suites, then `eosim run --backend native` on every
    /// scenarios/real/*.toml.
    Real,
    /// The images of `eosim run --backend testcontainers`, built from Debian's packages and
    /// the Kafka jars (`eosim images`; the jars are fetched first).
    Images {
        /// Rebuild every image even when its recipe is current.
        #[arg(long)]
        force: bool,
    },
    /// Sim/real agreement: the chosen catalogue files in simulation (release, `--seeds`)
    /// and `--runs` times on real services (`eosim run --backend native`, release), then
    /// `eosim report agreement` (`reports/agreement/<id>/agreement.md`).
    RealCatalogue {
        /// Real runs of each file.
        #[arg(long, default_value_t = 1)]
        runs: u32,
        /// Simulation seeds per file.
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// A catalogue file; repeat for several. Default: every file listed in
        /// scenarios/real-catalogue.txt.
        #[arg(long = "scenario", value_name = "PATH")]
        scenarios: Vec<PathBuf>,
    },
}

#[derive(Args)]
struct SimArgs {
    /// Scenario file; repeat for several. Default: every scenarios/*.toml.
    #[arg(long = "scenario", value_name = "PATH")]
    scenarios: Vec<PathBuf>,
    /// Seeds per scenario. Default: each scenario's `seeds`.
    #[arg(long)]
    seeds: Option<u64>,
    /// Base seed; alone, runs exactly this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Build eosim in release mode.
    #[arg(long)]
    release: bool,
    /// Print every seed's header and history hash, not only failing ones.
    #[arg(long, short)]
    verbose: bool,
    /// No progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Report directory. Default: reports.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Runs allowed for shrinking each counterexample; 0 turns shrinking off. Default:
    /// eosim's.
    #[arg(long, value_name = "N")]
    shrink_runs_max: Option<u32>,
    /// Seeds run at once. Default: the machine's cores.
    #[arg(long, short, value_name = "N")]
    jobs: Option<usize>,
    /// Run only shard K of N (hashed, as nextest's hash:K/N).
    #[arg(long, value_name = "K/N")]
    partition: Option<String>,
    /// Also write the report as JUnit XML here.
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// Regression corpus: its seeds run first, failing seeds are added.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
}

#[derive(Args)]
struct SeedArgs {
    /// Scenario file.
    #[arg(long, value_name = "PATH")]
    scenario: PathBuf,
    /// Seed.
    #[arg(long)]
    seed: u64,
    /// Build eosim in release mode.
    #[arg(long)]
    release: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            // A failed build exits with cargo's code; xtask's own errors with 2.
            ExitCode::from(e.downcast_ref::<ChildFailed>().map_or(2, |c| c.0))
        }
    }
}

/// A child process that had to succeed exited with this code.
#[derive(Debug)]
struct ChildFailed(u8);

impl std::fmt::Display for ChildFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit code {}", self.0)
    }
}

impl std::error::Error for ChildFailed {}

/// Runs a task; returns the exit code to propagate.
fn run(task: Task) -> Result<u8> {
    let root = workspace_root();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    std::env::set_current_dir(&root)
        .with_context(|| format!("cannot enter the workspace root {}", root.display()))?;
    // Paths given relative to where the user stands, made relative to the root again.
    let rebase = |path: &Path| rebase(path, &cwd, &root);
    match task {
        Task::Sim(mut args) => {
            args.scenarios = args.scenarios.iter().map(|p| rebase(p)).collect();
            args.out = args.out.as_deref().map(rebase);
            sim(&args)
        }
        Task::Replay(mut args) => {
            args.scenario = rebase(&args.scenario);
            eosim_seed("replay", &args)
        }
        Task::Determinism(mut args) => {
            args.scenario = rebase(&args.scenario);
            eosim_seed("determinism", &args)
        }
        Task::Soak {
            scenario,
            seeds,
            every,
        } => soak(&rebase(&scenario), seeds, every),
        Task::Test { junit } => test(junit.as_deref()),
        Task::Bench {
            quick,
            save_baseline,
            real,
            criterion_args,
        } => bench(quick, save_baseline, real, &criterion_args),
        Task::Report { args } if args.is_empty() => report(),
        Task::Report { args } => {
            let mut cmd = Command::new(build_eosim(false)?);
            cmd.arg("report").args(args);
            status(&mut cmd)
        }
        Task::Speed(args) => speed::speed(&args, rebase),
        Task::Actionlint => actionlint(),
        Task::Real => real(),
        Task::Images { force } => images(force),
        Task::RealCatalogue {
            runs,
            seeds,
            scenarios,
        } => real_catalogue(runs, seeds, scenarios),
        Task::Chaos(mut args) => {
            args.seeds = args.seeds.or(Some(CHAOS_SEEDS));
            args.release = true;
            args.scenarios = args.scenarios.iter().map(|p| rebase(p)).collect();
            args.out = args.out.as_deref().map(rebase);
            sim(&args)
        }
    }
}

/// `path` as given from `cwd`, expressed from `root` (relative when it lies under it).
fn rebase(path: &Path, cwd: &Path, root: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    // Lexically, without touching the file system: `harness/../scenarios` → `scenarios`.
    let mut absolute = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                absolute.pop();
            }
            Component::CurDir => {}
            other => absolute.push(other),
        }
    }
    match absolute.strip_prefix(root) {
        Ok(relative) => relative.to_path_buf(),
        Err(_) => absolute,
    }
}

/// The workspace root: the parent of this crate's manifest dir.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn sim(args: &SimArgs) -> Result<u8> {
    let binary = build_eosim(args.release)?;
    let mut cmd = Command::new(binary);
    cmd.arg("sim");
    for scenario in &args.scenarios {
        cmd.arg("--scenario").arg(scenario);
    }
    if let Some(seeds) = args.seeds {
        cmd.arg("--seeds").arg(seeds.to_string());
    }
    if let Some(seed) = args.seed {
        cmd.arg("--seed").arg(seed.to_string());
    }
    if let Some(out) = &args.out {
        cmd.arg("--out").arg(out);
    }
    if args.verbose {
        cmd.arg("--verbose");
    }
    if args.no_progress {
        cmd.arg("--no-progress");
    }
    if let Some(n) = args.shrink_runs_max {
        cmd.arg("--shrink-runs-max").arg(n.to_string());
    }
    if let Some(jobs) = args.jobs {
        cmd.arg("--jobs").arg(jobs.to_string());
    }
    if let Some(partition) = &args.partition {
        cmd.arg("--partition").arg(partition);
    }
    if let Some(junit) = &args.junit {
        cmd.arg("--junit").arg(junit);
    }
    if let Some(corpus) = &args.corpus {
        cmd.arg("--corpus").arg(corpus);
    }
    status(&mut cmd)
}

fn real() -> Result<u8> {
    let code = status(Command::new("bash").arg(".ci/install-real-services"))?;
    if code != 0 {
        return Ok(code);
    }
    let mut tests = cargo();
    tests.env("EOSIM_REAL", "1").args(["test", "-p", "eosim"]);
    for suite in REAL_SUITES {
        tests.args(["--test", suite]);
    }
    let tests_code = status(tests.args(["--", "--test-threads=1"]))?;
    let mut run = cargo();
    run.args([
        "run",
        "--quiet",
        "-p",
        "eosim",
        "--",
        "run",
        "--backend",
        "native",
    ]);
    let run_code = status(run.args(["--out", "reports/real"]))?;
    Ok(tests_code.max(run_code))
}

/// `eosim images` after `.ci/install-real-services` (the Kafka image copies its jars).
fn images(force: bool) -> Result<u8> {
    let code = status(Command::new("bash").arg(".ci/install-real-services"))?;
    if code != 0 {
        return Ok(code);
    }
    let mut cmd = cargo();
    cmd.args(["run", "--quiet", "-p", "eosim", "--", "images"]);
    if force {
        cmd.arg("--force");
    }
    status(&mut cmd)
}

/// The default file list of `cargo xtask real-catalogue`.
const REAL_CATALOGUE_LIST: &str = "scenarios/real-catalogue.txt";

/// The paths of a list file: one per line, `#` comments and blank lines skipped.
fn read_list(path: &Path) -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the file list {}", path.display()))?;
    let files: Vec<PathBuf> = list_entries(&text).map(PathBuf::from).collect();
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        anyhow::bail!(
            "{}: no such scenario file {}",
            path.display(),
            missing.display()
        );
    }
    Ok(files)
}

/// The entries of a list file's text.
fn list_entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

fn real_catalogue(runs: u32, seeds: u64, scenarios: Vec<PathBuf>) -> Result<u8> {
    let files = if scenarios.is_empty() {
        read_list(Path::new(REAL_CATALOGUE_LIST))?
    } else {
        scenarios
    };
    let code = status(Command::new("bash").arg(".ci/install-real-services"))?;
    if code != 0 {
        return Ok(code);
    }
    let out = Path::new("reports/agreement");
    // Verdicts are the data here, not a pass or fail: exit codes are not propagated.
    let binary = build_eosim(true)?;
    let mut sim = Command::new(&binary);
    sim.args([
        "sim",
        "--seeds",
        &seeds.to_string(),
        "--no-progress",
        "--out",
    ])
    .arg(out.join("sim"));
    for f in &files {
        sim.arg("--scenario").arg(f);
    }
    status(&mut sim)?;
    let mut agreement = Command::new(&binary);
    agreement
        .args(["report", "agreement", "--out"])
        .arg(out)
        .arg("--sim")
        .arg(out.join("sim"));
    for i in 1..=runs {
        let dir = out.join(format!("real-{i}"));
        let mut run = cargo();
        run.args(["run", "--release", "--quiet", "-p", "eosim", "--", "run"])
            .args(["--backend", "native", "--out"])
            .arg(&dir);
        for f in &files {
            run.arg("--scenario").arg(f);
        }
        status(&mut run)?;
        agreement.arg("--real").arg(dir);
    }
    status(&mut agreement)
}

/// The real tier's suites, as `.ci/run` runs them (`real_containers` says it skipped
/// unless `EOSIM_CONTAINERS=1`, which `.ci/run` sets after starting dockerd).
const REAL_SUITES: [&str; 9] = [
    "real_services",
    "real_kafka",
    "real_run",
    "real_postgres_diff",
    "real_clickhouse",
    "real_txn",
    "real_net",
    "real_bulk",
    "real_containers",
];

/// The actionlint release `cargo xtask actionlint` installs.
const ACTIONLINT: &str = "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12";

fn actionlint() -> Result<u8> {
    let gopath_bin = std::env::var_os("GOPATH")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join("go")))
        .map(|p| p.join("bin").join(exe("actionlint")));
    let found = |p: &Path| Command::new(p).arg("-version").output().is_ok();
    let mut binary = PathBuf::from(exe("actionlint"));
    if !found(&binary) {
        binary = gopath_bin.context("no actionlint on PATH and no GOPATH or HOME")?;
        if !found(&binary) {
            eprintln!("xtask: installing actionlint: go install {ACTIONLINT}");
            let code = status(Command::new("go").args(["install", ACTIONLINT]))?;
            if code != 0 {
                return Err(anyhow::Error::new(ChildFailed(code)).context("go install failed"));
            }
        }
    }
    status(Command::new(binary).arg("-color=false"))
}

fn soak(scenario: &Path, seeds: u64, every: u64) -> Result<u8> {
    let binary = build_eosim(true)?;
    let mut cmd = Command::new(binary);
    cmd.arg("soak")
        .arg("--scenario")
        .arg(scenario)
        .arg("--seeds")
        .arg(seeds.to_string())
        .arg("--every")
        .arg(every.to_string());
    status(&mut cmd)
}

fn eosim_seed(subcommand: &str, args: &SeedArgs) -> Result<u8> {
    let binary = build_eosim(args.release)?;
    let mut cmd = Command::new(binary);
    cmd.arg(subcommand)
        .arg("--scenario")
        .arg(&args.scenario)
        .arg("--seed")
        .arg(args.seed.to_string());
    status(&mut cmd)
}

/// Builds the `eosim` binary under `--cfg madsim` and returns its path.
pub(crate) fn build_eosim(release: bool) -> Result<PathBuf> {
    let mut cmd = cargo_madsim();
    cmd.args(["build", "--package", "eosim", "--bin", "eosim"]);
    if release {
        cmd.arg("--release");
    }
    let code = status(&mut cmd)?;
    if code != 0 {
        return Err(anyhow::Error::new(ChildFailed(code))
            .context("building eosim under --cfg madsim failed"));
    }
    let profile = if release { "release" } else { "debug" };
    Ok(Path::new(MADSIM_TARGET_DIR)
        .join(profile)
        .join(exe("eosim")))
}

fn exe(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}

/// One step of `cargo xtask test`: what it is, whether it builds under `--cfg madsim`, the
/// package selection (cargo's arguments after `test` / `nextest run`), and the name of its
/// JUnit file.
struct TestStep {
    what: &'static str,
    madsim: bool,
    selection: &'static [&'static str],
    junit_name: &'static str,
}

const TEST_STEPS: [TestStep; 3] = [
    TestStep {
        what: "ordinary tests (normal cfg)",
        madsim: false,
        selection: &["--workspace"],
        junit_name: "ordinary.xml",
    },
    TestStep {
        what: "simulation tests (--cfg madsim)",
        madsim: true,
        selection: &["-p", "eosim", "--lib", "--test", "sim"],
        junit_name: "simulation.xml",
    },
    TestStep {
        what: "model tests (--cfg madsim)",
        madsim: true,
        selection: &["-p", "eosim-sim"],
        junit_name: "model.xml",
    },
];

/// Where nextest writes its reports (`[store] dir` in `.config/nextest.toml`): the same
/// for both cfgs, whatever `CARGO_TARGET_DIR` is, so each step's report is copied away
/// before the next step overwrites it.
const NEXTEST_STORE: &str = "target/nextest";

/// The cargo-nextest release `cargo xtask test --junit` installs when none is on the PATH.
const NEXTEST_VERSION: &str = "0.9.151";

/// `cargo xtask test`: the steps of [`TEST_STEPS`] with `cargo test`, stopping at the first
/// failure; with `junit`, with `cargo nextest run --profile ci` (plus `cargo test --doc`,
/// which nextest does not run), every step run and each step's JUnit report
/// ([`NEXTEST_STORE`]`/ci/junit.xml`, removed before each step so a step that wrote none
/// is an error, not a stale copy) copied to `junit/<step>.xml`. Exits with the
/// first failing step's code.
fn test(junit: Option<&Path>) -> Result<u8> {
    if let Some(dir) = junit {
        ensure_nextest()?;
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut first_failure = 0;
    for step in &TEST_STEPS {
        let mut cmd = if step.madsim { cargo_madsim() } else { cargo() };
        match junit {
            None => cmd.arg("test"),
            Some(_) => cmd.args(["nextest", "run", "--profile", "ci"]),
        };
        cmd.args(step.selection);
        eprintln!("xtask: {}: {:?}", step.what, cmd);
        let from = Path::new(NEXTEST_STORE).join("ci").join("junit.xml");
        if junit.is_some() {
            let _ = std::fs::remove_file(&from);
        }
        let code = status(&mut cmd)?;
        if let Some(dir) = junit {
            let to = dir.join(step.junit_name);
            std::fs::copy(&from, &to).with_context(|| {
                format!(
                    "{}: no JUnit report at {} to copy to {}",
                    step.what,
                    from.display(),
                    to.display()
                )
            })?;
            eprintln!("xtask: {}: JUnit in {}", step.what, to.display());
            if !step.madsim {
                eprintln!(
                    "xtask: doc tests (nextest does not run them): cargo test --workspace --doc"
                );
                let doc = status(cargo().args(["test", "--workspace", "--doc"]))?;
                if first_failure == 0 {
                    first_failure = doc;
                }
            }
        }
        if code != 0 {
            eprintln!("xtask: {} failed (exit {code})", step.what);
            if junit.is_none() {
                return Ok(code);
            }
            if first_failure == 0 {
                first_failure = code;
            }
        }
    }
    Ok(first_failure)
}

/// Makes sure `cargo nextest` runs: installs [`NEXTEST_VERSION`] with `cargo install
/// --locked` when it does not.
fn ensure_nextest() -> Result<()> {
    let found = cargo()
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-nextest: cargo install cargo-nextest --version {NEXTEST_VERSION} --locked");
    let code = status(cargo().args([
        "install",
        "cargo-nextest",
        "--version",
        NEXTEST_VERSION,
        "--locked",
    ]))?;
    if code != 0 {
        return Err(
            anyhow::Error::new(ChildFailed(code)).context("cargo install cargo-nextest failed")
        );
    }
    Ok(())
}

/// One holding scenario per pipeline: the simulator's rate sample of `cargo xtask bench`.
const BENCH_SAMPLE: [&str; 6] = [
    "scenarios/alo-commit-after-acks-all.toml",
    "scenarios/txn-copy-no-faults.toml",
    "scenarios/p3-eos-swarm.toml",
    "scenarios/p2-upsert-worker-crash.toml",
    "scenarios/p1-lost-insert-response-seed-token.toml",
    "scenarios/p4-broker-failover.toml",
];

/// criterion's arguments for `cargo xtask bench --quick`.
const QUICK_CRITERION_ARGS: [&str; 6] = [
    "--sample-size",
    "10",
    "--warm-up-time",
    "1",
    "--measurement-time",
    "3",
];

fn bench(quick: bool, save_baseline: bool, real: bool, criterion_args: &[String]) -> Result<u8> {
    let mut cmd = cargo_madsim();
    // criterion resolves a relative CARGO_TARGET_DIR against the bench's own package dir
    // (benches/): an absolute one puts its output where `eosim report bench` reads it.
    cmd.env("CARGO_TARGET_DIR", workspace_root().join(MADSIM_TARGET_DIR));
    // `--benches`: only the criterion targets (the crate's lib tests take no criterion args).
    cmd.args(["bench", "-p", "eosim-benches", "--benches", "--"]);
    if quick {
        cmd.args(QUICK_CRITERION_ARGS);
    }
    let code = status(cmd.args(criterion_args))?;
    if code != 0 {
        return Ok(code);
    }
    // The simulator's rate: one seed of each sample scenario, one job, no shrinking, on the
    // release build as criterion's are. Its verdicts do not matter here (a one-seed `not
    // exercised` is still a rate).
    let binary = build_eosim(true)?;
    let sample_dir = Path::new("reports/bench/sim");
    let mut sim = Command::new(&binary);
    sim.args(["sim", "--seeds", "1", "--jobs", "1", "--no-progress"])
        .args(["--shrink-runs-max", "0", "--out"])
        .arg(sample_dir);
    for scenario in BENCH_SAMPLE {
        sim.arg("--scenario").arg(scenario);
    }
    status(&mut sim)?;
    let mut page = Command::new(&binary);
    page.args(["report", "bench", "--sim"])
        .arg(sample_dir.join("latest").join("results.json"));
    if real {
        let code = status(Command::new("bash").arg(".ci/install-real-services"))?;
        if code != 0 {
            return Ok(code);
        }
        // Verdicts do not matter here either: the rates are measured whatever the claim.
        // The real tier needs the normal cfg (the madsim build has no real backend).
        let real_dir = Path::new("reports/bench/real");
        let mut run = cargo();
        run.args(["run", "--release", "--quiet", "-p", "eosim", "--", "run"])
            .args(["--backend", "native", "--out"])
            .arg(real_dir);
        status(&mut run)?;
        page.arg("--real")
            .arg(real_dir.join("latest").join("results.json"));
    }
    if save_baseline {
        page.args(["--save-baseline", "reports/baseline"]);
    }
    status(&mut page)
}

fn report() -> Result<u8> {
    let summary = Path::new("reports/latest/summary.md");
    let text = std::fs::read_to_string(summary).with_context(|| {
        format!(
            "no report at {}: run `cargo xtask sim` first",
            summary.display()
        )
    })?;
    let dir = std::fs::canonicalize("reports/latest").unwrap_or_else(|_| "reports/latest".into());
    println!("{}\n", dir.display());
    print!("{text}");
    Ok(0)
}

/// `cargo` as the one running xtask, without the variables it set for this process.
fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

/// `cargo` with `--cfg madsim` and the simulation target dir.
fn cargo_madsim() -> Command {
    let mut cmd = cargo();
    let mut flags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !flags.split_whitespace().any(|f| f == "madsim") {
        flags = format!("{flags} --cfg madsim").trim().to_string();
    }
    cmd.env("RUSTFLAGS", flags)
        .env("CARGO_TARGET_DIR", MADSIM_TARGET_DIR);
    cmd
}

/// Runs a child to completion; its exit code, or 128 + signal on Unix like a shell.
pub(crate) fn status(cmd: &mut Command) -> Result<u8> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    if let Some(code) = status.code() {
        return Ok(u8::try_from(code).unwrap_or(1));
    }
    Ok(signal_code(&status))
}

#[cfg(unix)]
fn signal_code(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status
        .signal()
        .map_or(1, |s| u8::try_from(128 + s).unwrap_or(1))
}

#[cfg(not(unix))]
fn signal_code(_status: &std::process::ExitStatus) -> u8 {
    1
}

#[cfg(test)]
mod bench_tests {
    #[test]
    fn every_bench_sample_scenario_exists_and_pipelines_differ() {
        let root = super::workspace_root();
        let mut pipelines = std::collections::BTreeSet::new();
        for path in super::BENCH_SAMPLE {
            let text = std::fs::read_to_string(root.join(path)).expect(path);
            let line = text
                .lines()
                .find(|l| l.starts_with("pipeline"))
                .unwrap_or_else(|| panic!("{path} names its pipeline"));
            assert!(pipelines.insert(line.to_string()), "{path}: {line} twice");
        }
    }

    #[test]
    fn the_real_catalogue_lists_thirty_files_over_the_six_real_pipelines() {
        let root = super::workspace_root();
        let text = std::fs::read_to_string(root.join(super::REAL_CATALOGUE_LIST)).unwrap();
        let files: Vec<&str> = super::list_entries(&text).collect();
        assert!(files.len() >= 30, "{} files", files.len());
        let mut pipelines = std::collections::BTreeSet::new();
        for path in files {
            let text = std::fs::read_to_string(root.join(path)).expect(path);
            let line = text
                .lines()
                .find(|l| l.starts_with("pipeline"))
                .expect(path);
            pipelines.insert(line.to_string());
        }
        // kafka-consume, transactional-copy, connect-jdbc, clickhouse-sink, streams-count,
        // connect-source: every pipeline the real tier runs (Doris needs an image).
        assert_eq!(pipelines.len(), 6, "{pipelines:?}");
    }
}

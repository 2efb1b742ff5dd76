//! The subcommands under `--cfg madsim`: `sim`, `replay`, `determinism`.

use super::aggregate::{expected_verdict, history_path, judge_seed, replay_command, SeedClass};
use super::batch::{run_batch, BatchOptions};
use super::junit::write_junit;
use super::output::{build_id, format_op, seed_header};
use super::pool::default_jobs;
use super::rundir::write_run;
use super::seeds::{run_guarded, seed_block, write_history};
use super::{config_error, Cli, Command, ExitClass, SeedArgs, SimArgs, SoakArgs};
use crate::report::Verdict;
use crate::scenario::Scenario;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where `eosim sim` looks for scenarios when none is given.
const SCENARIO_DIR: &str = "scenarios";
/// The field-case library, under [`SCENARIO_DIR`].
const FIELD_SCENARIO_DIR: &str = "field";

/// Runs the chosen subcommand.
pub(super) fn dispatch(cli: Cli) -> ExitClass {
    match cli.command {
        Command::Sim(args) => sim(&args),
        Command::Replay(args) => replay(&args),
        Command::Determinism(args) => determinism(&args),
        Command::Soak(args) => soak(&args),
        Command::Report(report) => report.run(),
        Command::Run(_) | Command::Worker(_) | Command::Lazyfs(_) | Command::Images(_) => {
            config_error(
                "this binary was built with --cfg madsim, which cannot talk to real services; \
             build it without (`cargo run -p eosim -- run --backend native`)",
            )
        }
    }
}

fn sim(args: &SimArgs) -> ExitClass {
    if args.seeds == Some(0) {
        return config_error("--seeds must be at least 1");
    }
    if args.jobs == Some(0) {
        return config_error("--jobs must be at least 1");
    }
    let scenarios = match load_scenarios(&args.scenarios) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let options = BatchOptions {
        seeds: args.seeds,
        seed: args.seed,
        jobs: args.jobs.unwrap_or_else(default_jobs),
        partition: args.partition,
        shrink_runs_max: args.shrink_runs_max,
        verbose: args.verbose,
        progress: !args.no_progress,
        corpus: args.corpus.clone(),
    };
    let (exit, report) = write_run(&args.out, |run_dir, build| {
        run_batch(&scenarios, &options, run_dir, build)
    });
    match (&args.junit, report) {
        (Some(path), Some(report)) => match write_junit(path, &report) {
            Ok(()) => exit,
            Err(e) => exit.max(config_error(e)),
        },
        _ => exit,
    }
}

/// Loads every scenario before running any, so a bad file fails fast with exit 2.
fn load_scenarios(given: &[PathBuf]) -> Result<Vec<(PathBuf, Scenario)>, String> {
    let paths = if given.is_empty() {
        catalogue()?
    } else {
        given.to_vec()
    };
    let mut names = BTreeSet::new();
    let mut scenarios = Vec::new();
    for path in paths {
        let scenario = Scenario::load(&path).map_err(|e| e.to_string())?;
        if !names.insert(scenario.name.clone()) {
            return Err(format!(
                "{}: scenario name `{}` is used twice",
                path.display(),
                scenario.name
            ));
        }
        scenarios.push((path, scenario));
    }
    Ok(scenarios)
}

/// Every `scenarios/*.toml`, then every `scenarios/field/*.toml` (the field-case library),
/// each sorted.
fn catalogue() -> Result<Vec<PathBuf>, String> {
    let dir = Path::new(SCENARIO_DIR);
    let mut paths = toml_files(dir, true)?;
    paths.extend(toml_files(&dir.join(FIELD_SCENARIO_DIR), false)?);
    if paths.is_empty() {
        return Err(format!("no *.toml scenario in {}/", dir.display()));
    }
    Ok(paths)
}

/// The `*.toml` files of `dir`, sorted; a missing `dir` is an error only if `required`.
fn toml_files(dir: &Path, required: bool) -> Result<Vec<PathBuf>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(_) if !required => return Ok(Vec::new()),
        Err(e) => {
            return Err(format!(
                "cannot read {}/: {e} (run from the workspace root or pass --scenario)",
                dir.display()
            ))
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    Ok(paths)
}

fn replay(args: &SeedArgs) -> ExitClass {
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let build = build_id();
    let outcome = run_guarded(&scenario, args.seed);
    println!(
        "{}",
        seed_header(args.seed, &scenario.name, &build, &outcome.drawn)
    );
    for op in &outcome.history.ops {
        println!("{}", format_op(op));
    }
    let path = history_path(&args.out, &scenario.name, args.seed);
    write_history(&path, &outcome.history);
    let verdict = judge_seed(&scenario, &outcome);
    println!(
        "{}",
        seed_block(&scenario.name, &build, &outcome.drawn, &verdict)
    );
    println!("history: {}", path.display());
    match verdict.class {
        SeedClass::Crashed(_) => ExitClass::Crash,
        SeedClass::Stalled(_) => ExitClass::Stalled,
        SeedClass::Invalid | SeedClass::Unknown
            if expected_verdict(&scenario) != Verdict::Violated =>
        {
            ExitClass::Violated
        }
        _ => ExitClass::Expected,
    }
}

fn determinism(args: &SeedArgs) -> ExitClass {
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let build = build_id();
    let first = run_guarded(&scenario, args.seed);
    let second = run_guarded(&scenario, args.seed);
    println!(
        "{}",
        seed_header(args.seed, &scenario.name, &build, &first.drawn)
    );
    let (a, b) = (first.history.hash(), second.history.hash());
    if a == b && first.drawn == second.drawn {
        println!("history-hash: {a}");
        println!(
            "deterministic: 2 runs, {} ops, same history",
            first.history.ops.len()
        );
        return ExitClass::Expected;
    }
    println!("history-hash: {a} (run 1)");
    println!("history-hash: {b} (run 2)");
    let diverged = first
        .history
        .ops
        .iter()
        .zip(&second.history.ops)
        .find(|(x, y)| x != y);
    match diverged {
        Some((x, y)) => {
            println!("first difference at op {}:", x.index);
            println!("  run 1: {}", format_op(x));
            println!("  run 2: {}", format_op(y));
        }
        None => println!(
            "one history is a prefix of the other ({} vs {} ops) or the drawn parameters differ",
            first.history.ops.len(),
            second.history.ops.len()
        ),
    }
    println!(
        "NONDETERMINISTIC scenario={} seed={} build={build}",
        scenario.name, args.seed
    );
    println!("  replay: {}", replay_command(&args.scenario, args.seed));
    ExitClass::Violated
}

/// Seeds that did not hold that `eosim soak` names one by one (the counts cover the rest).
const SOAK_SEEDS_NAMED_MAX: u64 = 20;

/// `eosim soak`: one scenario's seeds one after another in this process, each judged as
/// `eosim sim` judges it (only its class counted), printing `soak seeds=N rss_kib=…
/// seeds_per_s=…` after seed 100, every `--every` seeds and after the last, then the growth
/// from seed 100 to the last per seed, and last `soak classes crash=… holds=… invalid=…
/// stalled=… unknown=… sim_time_s=… wall_time_s=…`: how the seeds ended (a soak of seeds
/// that stall measures stalls), their simulated time and this loop's wall time. Memory that
/// a seed does not return shows up here. Each of the first [`SOAK_SEEDS_NAMED_MAX`] seeds
/// that did not hold is named as it ends: `soak seed=S class=C replay: cargo xtask sim …`.
fn soak(args: &SoakArgs) -> ExitClass {
    if args.seeds == 0 || args.every == 0 {
        return config_error("--seeds and --every must be at least 1");
    }
    let scenario = match Scenario::load(&args.scenario) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let started = Instant::now();
    let mut at_100 = None;
    let mut last_rss = 0;
    let mut tally = SoakTally::default();
    for n in 1..=args.seeds {
        let seed = args.seed + n - 1;
        let outcome = run_guarded(&scenario, seed);
        let verdict = judge_seed(&scenario, &outcome);
        if tally.count(&verdict.class, verdict.sim_time_ms) {
            let (class, replay) = (verdict.class.name(), replay_command(&args.scenario, seed));
            println!("soak seed={seed} class={class} replay: {replay}");
        }
        drop((outcome, verdict));
        if n == 100 || n % args.every == 0 || n == args.seeds {
            let rss = crate::runner::rss_kib().unwrap_or(0);
            let rate = n as f64 / started.elapsed().as_secs_f64();
            println!("soak seeds={n} rss_kib={rss} seeds_per_s={rate:.1}");
            if n == 100 {
                at_100 = Some(rss);
            }
            last_rss = rss;
        }
    }
    if let Some(base) = at_100.filter(|_| args.seeds > 100) {
        let per_seed = (last_rss as f64 - base as f64) / (args.seeds - 100) as f64;
        let ratio = last_rss as f64 / base.max(1) as f64;
        println!(
            "soak scenario={} rss_kib_after_100={base} rss_kib_after_{}={last_rss} \
             ratio={ratio:.2} growth_kib_per_seed={per_seed:.2}",
            scenario.name, args.seeds
        );
    }
    println!(
        "soak classes {} wall_time_s={:.3}",
        tally.summary(),
        started.elapsed().as_secs_f64()
    );
    ExitClass::Expected
}

/// How `eosim soak`'s seeds ended: seeds per class and their simulated time.
#[derive(Debug)]
struct SoakTally {
    classes: BTreeMap<&'static str, u64>,
    sim_time_ms: u64,
}

impl Default for SoakTally {
    /// Every class at zero, so the summary always names them all.
    fn default() -> Self {
        let classes = [
            SeedClass::Holds,
            SeedClass::Invalid,
            SeedClass::Unknown,
            SeedClass::Stalled(String::new()),
            SeedClass::Crashed(String::new()),
        ];
        Self {
            classes: classes.iter().map(|c| (c.name(), 0)).collect(),
            sim_time_ms: 0,
        }
    }
}

impl SoakTally {
    /// Counts a seed of `class` that ran `sim_time_ms`; whether to name it: it did not
    /// hold and is among the first [`SOAK_SEEDS_NAMED_MAX`] that did not.
    fn count(&mut self, class: &SeedClass, sim_time_ms: u64) -> bool {
        *self.classes.entry(class.name()).or_default() += 1;
        self.sim_time_ms += sim_time_ms;
        let holds = SeedClass::Holds.name();
        let not_held: u64 = self.classes.values().sum::<u64>() - self.classes[holds];
        *class != SeedClass::Holds && not_held <= SOAK_SEEDS_NAMED_MAX
    }

    /// `crash=… holds=… invalid=… stalled=… unknown=… sim_time_s=…`.
    fn summary(&self) -> String {
        let counts: Vec<String> = self
            .classes
            .iter()
            .map(|(c, n)| format!("{c}={n}"))
            .collect();
        let sim_time_s = self.sim_time_ms as f64 / 1e3;
        format!("{} sim_time_s={sim_time_s:.3}", counts.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soak_names_the_first_seeds_that_did_not_hold_and_counts_every_class() {
        let mut tally = SoakTally::default();
        assert!(
            !tally.count(&SeedClass::Holds, 1_000),
            "a seed that held is not named"
        );
        let named: Vec<bool> = (0..SOAK_SEEDS_NAMED_MAX + 2)
            .map(|i| {
                let class = match i % 2 {
                    0 => SeedClass::Stalled("no convergence".into()),
                    _ => SeedClass::Invalid,
                };
                tally.count(&class, 500)
            })
            .collect();
        let first = SOAK_SEEDS_NAMED_MAX as usize;
        assert!(
            named[..first].iter().all(|n| *n),
            "the first ones are named"
        );
        assert!(!named[first..].iter().any(|n| *n), "then only counted");
        assert!(
            !tally.count(&SeedClass::Holds, 0),
            "a seed that held never is"
        );
        assert_eq!(
            tally.summary(),
            "crash=0 holds=2 invalid=11 stalled=11 unknown=0 sim_time_s=12.000"
        );
    }
}

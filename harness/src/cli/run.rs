//! The subcommands under `--cfg madsim`: `sim`, `replay`, `determinism`.

use super::aggregate::{
    aggregate, exit_class, expected_verdict, history_path, judge_seed, replay_command, SeedClass,
    SeedVerdict,
};
use super::output::{build_id, format_op, format_sim_time, seed_header};
use super::rundir::run_scenarios;
use super::shrink::{forbidden_cases, record_shrunk, shrink};
use super::{
    config_error, Cli, Command, ExitClass, SeedArgs, SimArgs, SoakArgs, DEFAULT_SEED_BASE,
};
use crate::checker::Anomaly;
use crate::history::History;
use crate::report::{ScenarioResult, Verdict};
use crate::runner::{run_seed, SeedOutcome};
use crate::scenario::Scenario;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where `eosim sim` looks for scenarios when none is given.
const SCENARIO_DIR: &str = "scenarios";

/// Runs the chosen subcommand.
pub(super) fn dispatch(cli: Cli) -> ExitClass {
    match cli.command {
        Command::Sim(args) => sim(&args),
        Command::Replay(args) => replay(&args),
        Command::Determinism(args) => determinism(&args),
        Command::Soak(args) => soak(&args),
        Command::Run(_) | Command::Worker(_) => config_error(
            "this binary was built with --cfg madsim, which cannot talk to real services; \
             build it without (`cargo run -p eosim -- run --backend native`)",
        ),
    }
}

fn sim(args: &SimArgs) -> ExitClass {
    if args.seeds == Some(0) {
        return config_error("--seeds must be at least 1");
    }
    let scenarios = match load_scenarios(&args.scenarios) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    run_scenarios(&args.out, &scenarios, |path, scenario, run_dir, build| {
        run_scenario(path, scenario, args, run_dir, build)
    })
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

/// Every `scenarios/*.toml`, sorted.
fn catalogue() -> Result<Vec<PathBuf>, String> {
    let dir = Path::new(SCENARIO_DIR);
    let entries = std::fs::read_dir(dir).map_err(|e| {
        format!(
            "cannot read {}/: {e} (run from the workspace root or pass --scenario)",
            dir.display()
        )
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("no *.toml scenario in {}/", dir.display()));
    }
    Ok(paths)
}

/// Seed `i` runs as `base + i`; `--seed S` alone runs exactly S.
fn seed_range(args: &SimArgs, scenario: &Scenario) -> (u64, u64) {
    let base = args.seed.unwrap_or(DEFAULT_SEED_BASE);
    let count = args.seeds.unwrap_or(if args.seed.is_some() {
        1
    } else {
        scenario.seeds
    });
    (base, count)
}

fn run_scenario(
    path: &Path,
    scenario: &Scenario,
    args: &SimArgs,
    run_dir: &Path,
    build: &str,
) -> (ScenarioResult, ExitClass) {
    let (base, count) = seed_range(args, scenario);
    let last = base.saturating_add(count - 1);
    // A single seed is a replay: its own header block says it all.
    let verbose = args.verbose || count == 1;
    if count > 1 {
        let name = &scenario.name;
        println!("SEED={base}..={last} scenario={name} build={build} seeds={count}");
    }
    let bar = progress_bar(&scenario.name, count, !args.no_progress);
    let started = Instant::now();
    let mut seeds = Vec::new();
    for seed in base..=last {
        let outcome = run_guarded(scenario, seed);
        let verdict = judge_seed(scenario, &outcome);
        let failing = verdict.class != SeedClass::Holds;
        if failing {
            write_history(
                &history_path(run_dir, &scenario.name, seed),
                &outcome.history,
            );
        }
        if failing || verbose {
            bar.suspend(|| print_seed(scenario, build, &outcome, &verdict));
        }
        bar.inc(1);
        seeds.push(verdict);
    }
    bar.finish_and_clear();
    let wall_time_s = started.elapsed().as_secs_f64();
    let mut result = aggregate(scenario, path, run_dir, &seeds, wall_time_s);
    if result.verdict == Verdict::Violated && args.shrink_runs_max > 0 {
        shrink_counterexample(scenario, &mut result, &seeds, run_dir, args.shrink_runs_max);
    }
    let mut class = exit_class(&result, expected_verdict(scenario));
    if let Some(note) = recheck_determinism(scenario, path, &result, &seeds) {
        println!("{note}");
        result.notes.push(note);
        class = class.max(ExitClass::Violated);
    }
    print_scenario_end(&result, class);
    (result, class)
}

/// Shrinks the counterexample's fault schedule ([`super::shrink`]) and records the result
/// (or why there is none) in `result`.
fn shrink_counterexample(
    scenario: &Scenario,
    result: &mut ScenarioResult,
    seeds: &[SeedVerdict],
    run_dir: &Path,
    runs_max: u32,
) {
    let Some(counterexample) = result.counterexample.as_mut() else {
        return;
    };
    let Some(seed) = seeds.iter().find(|s| s.seed == counterexample.seed) else {
        return;
    };
    if seed.schedule.is_empty() {
        // Nothing to remove: the failure needs no scheduled fault (fault points, bad input
        // or the pipeline's own timing), which the counterexample already shows.
        return;
    }
    // The shrunk schedule must show every forbidden kind of the original, not just one.
    let original = forbidden_cases(&seed.check);
    let target: BTreeSet<Anomaly> = original.keys().copied().collect();
    let faults = seed.schedule.len();
    println!(
        "  shrinking seed {}: {faults} faults, at most {runs_max} runs",
        seed.seed
    );
    let outcome = shrink(
        scenario,
        seed.seed,
        &seed.schedule,
        &target,
        runs_max,
        &|s, seed| run_guarded(s, seed),
    );
    let file = history_path(run_dir, &scenario.name, seed.seed).with_file_name("shrunk.toml");
    match record_shrunk(scenario, faults, &original, &outcome, &file, seed.seed) {
        Ok(Some(shrunk)) => {
            println!(
                "  shrunk to {} of {} faults in {} runs: {}",
                shrunk.faults.len(),
                shrunk.faults_from,
                shrunk.runs,
                shrunk.replay
            );
            counterexample.shrunk = Some(shrunk);
        }
        Ok(None) => result.notes.push(format!(
            "shrink: seed {}'s {} faults as an explicit schedule (swarm removed) did not show \
             every forbidden anomaly of the original again at that seed, so the \
             counterexample is not shrunk",
            seed.seed, faults
        )),
        Err(e) => result.notes.push(format!("shrink: cannot write {e}")),
    }
}

/// Runs one seed again (the counterexample's, else the first) and compares history hashes,
/// so every replay command printed is known to reproduce. `Some(note)` when they differ.
fn recheck_determinism(
    scenario: &Scenario,
    path: &Path,
    result: &ScenarioResult,
    seeds: &[SeedVerdict],
) -> Option<String> {
    let seed = result.counterexample.as_ref().map(|c| c.seed);
    let first = seeds
        .iter()
        .find(|s| Some(s.seed) == seed)
        .or_else(|| seeds.first())?;
    let again = run_guarded(scenario, first.seed).history.hash();
    if again == first.hash {
        return None;
    }
    Some(format!(
        "NONDETERMINISTIC scenario={} seed={} history-hash: {} then {again}; \
         compare with `cargo xtask determinism --scenario {} --seed {}`",
        scenario.name,
        first.seed,
        first.hash,
        path.display(),
        first.seed
    ))
}

fn progress_bar(name: &str, count: u64, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(count);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} seeds {elapsed}")
        .expect("the progress template is valid")
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(name.to_string());
    bar
}

/// Runs a seed; a panic escaping the runner itself becomes a crash outcome.
fn run_guarded(scenario: &Scenario, seed: u64) -> SeedOutcome {
    let run = std::panic::AssertUnwindSafe(|| run_seed(scenario, seed));
    std::panic::catch_unwind(run).unwrap_or_else(|payload| {
        SeedOutcome::crashed(seed, crate::runner::panic_message(&payload))
    })
}

fn print_seed(scenario: &Scenario, build: &str, outcome: &SeedOutcome, verdict: &SeedVerdict) {
    println!(
        "{}",
        seed_header(outcome.seed, &scenario.name, build, &outcome.drawn)
    );
    let anomalies: Vec<&str> = verdict.check.forbidden.iter().map(|a| a.name()).collect();
    let mut line = format!("  class={} faults={}", verdict.class.name(), verdict.faults);
    if !anomalies.is_empty() {
        line.push_str(&format!(" forbidden={}", anomalies.join(",")));
    }
    match &verdict.class {
        SeedClass::Crashed(m) => line.push_str(&format!(" panic={m:?}")),
        SeedClass::Stalled(r) => line.push_str(&format!(" reason={r:?}")),
        _ => {}
    }
    println!("{line}");
    println!("history-hash: {}", verdict.hash);
}

fn print_scenario_end(result: &ScenarioResult, class: ExitClass) {
    let stats = format!(
        "scenario={} seeds={} faults={} sim_time={}",
        result.scenario,
        result.seeds,
        result.faults_injected,
        format_sim_time(result.sim_time_s)
    );
    let effects = effects_line(result);
    if class == ExitClass::NotExercised {
        println!(
            "FAILED scenario={} class=not-exercised {}: {}",
            result.scenario,
            stats_tail(result),
            result.not_exercised.join("; ")
        );
        println!("{effects}");
        return;
    }
    if class == ExitClass::Expected && result.verdict == Verdict::Holds {
        println!("PASSED {stats}");
        println!("{effects}");
        return;
    }
    println!("{effects}");
    let replay = result
        .counterexample
        .as_ref()
        .map(|c| (c.seed, c.replay.clone()));
    if class == ExitClass::Expected {
        let forbidden: Vec<&str> = result
            .forbidden_anomalies
            .keys()
            .map(String::as_str)
            .collect();
        let forbidden = forbidden.join(",");
        println!(
            "PASSED {stats} verdict={} forbidden={forbidden} \
             (expected: demonstrates a known failure)",
            result.verdict.name()
        );
    } else {
        let failure = match result.verdict {
            Verdict::Violated => "invalid",
            Verdict::Stalled => "stalled",
            Verdict::Crashed => "crash",
            Verdict::Holds => "expected-violation-not-found",
            Verdict::Skipped => "skipped",
        };
        let seed = replay
            .as_ref()
            .map(|(s, _)| format!(" seed={s}"))
            .unwrap_or_default();
        println!(
            "FAILED scenario={} class={failure}{seed} {}",
            result.scenario,
            stats_tail(result)
        );
        for line in &result.stalled_otherwise {
            println!("  {line}");
        }
    }
    if let Some((_, command)) = replay {
        println!("  replay: {command}");
    }
}

/// `  effects: kill 4/4 (scheduled/acted), messages.delay 1/37, ...`: for every effect kind,
/// faults scheduled over all seeds and times they acted.
fn effects_line(result: &ScenarioResult) -> String {
    if result.fault_effects.is_empty() {
        return "  effects (scheduled/acted): none scheduled".to_string();
    }
    let parts: Vec<String> = result
        .fault_effects
        .iter()
        .map(|(kind, c)| format!("{kind} {}/{}", c.scheduled, c.acted))
        .collect();
    format!("  effects (scheduled/acted): {}", parts.join(", "))
}

fn stats_tail(result: &ScenarioResult) -> String {
    format!("seeds={} faults={}", result.seeds, result.faults_injected)
}

fn write_history(path: &Path, history: &History) {
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, history.to_jsonl()));
    if let Err(e) = written {
        eprintln!("eosim: warning: cannot write {}: {e}", path.display());
    }
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
    print_seed(&scenario, &build, &outcome, &verdict);
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

/// `eosim soak`: one scenario's seeds one after another in this process, each judged as
/// `eosim sim` judges it (verdicts not kept), printing `soak seeds=N rss_kib=… seeds_per_s=…`
/// after seed 100, every `--every` seeds and after the last, then the growth from seed 100
/// to the last per seed. Memory that a seed does not return shows up here.
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
    for n in 1..=args.seeds {
        let outcome = run_guarded(&scenario, args.seed + n - 1);
        let verdict = judge_seed(&scenario, &outcome);
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
    ExitClass::Expected
}

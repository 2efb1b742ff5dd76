//! `eosim sim`'s run of many scenarios: every (scenario, seed) pair of the run (less those
//! of other shards under `--partition`, corpus seeds first) on `--jobs` threads
//! ([`super::pool`]), each scenario finished on the calling thread once its last seed is in:
//! its seeds' blocks printed in seed order, its result aggregated, its counterexample shrunk
//! and rechecked, one after another. What a run prints and reports is therefore the same
//! for any `--jobs`, but for wall times and the order of progress lines.

use super::aggregate::{aggregate, history_path, judge_seed, SeedClass, SeedVerdict};
use super::judge::ledger_class;
use super::output::print_scenario_end;
use super::partition::Partition;
use super::pool::run_pool;
use super::seeds::{run_guarded, seed_block, write_history};
use super::shrink::{forbidden_cases, record_shrunk, shrink};
use super::{corpus, ExitClass, DEFAULT_SEED_BASE};
use crate::checker::Anomaly;
use crate::report::judge::settle;
use crate::report::{ScenarioResult, Verdict};
use crate::scenario::Scenario;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// How a batch runs.
#[derive(Debug, Clone, Default)]
pub struct BatchOptions {
    /// Seeds per scenario; `None`: the scenario's `seeds` (1 when `seed` is given).
    pub seeds: Option<u64>,
    /// Base seed: seed i runs as S + i; `None`: [`DEFAULT_SEED_BASE`].
    pub seed: Option<u64>,
    /// Worker threads, at least 1.
    pub jobs: usize,
    /// Only this shard's (scenario, seed) pairs; `None`: all.
    pub partition: Option<Partition>,
    /// Runs per counterexample shrink; 0: no shrinking.
    pub shrink_runs_max: u32,
    /// Print every seed's block, not only failing ones.
    pub verbose: bool,
    /// Draw progress bars.
    pub progress: bool,
    /// The regression corpus: its seeds run first, failing seeds are added to it.
    pub corpus: Option<PathBuf>,
}

/// One seed of one scenario, as a job runs it.
struct Task {
    scenario: usize,
    seed: u64,
}

/// One seed, done.
struct SeedDone {
    verdict: SeedVerdict,
    drawn: Vec<String>,
    wall_time_s: f64,
}

/// Runs `scenarios` as `options` say, writing failing histories under `run_dir`; returns
/// each scenario's result and exit class, in list order. A scenario with no seed in this
/// shard has no result. `Err` when a corpus file cannot be read.
pub fn run_batch(
    scenarios: &[(PathBuf, Scenario)],
    options: &BatchOptions,
    run_dir: &Path,
    build: &str,
) -> Result<Vec<(ScenarioResult, ExitClass)>, String> {
    let mut plans = Vec::new();
    for (_, scenario) in scenarios {
        plans.push(planned_seeds(scenario, options)?);
    }
    let tasks: Vec<Task> = plans
        .iter()
        .enumerate()
        .flat_map(|(i, seeds)| seeds.iter().map(move |&seed| Task { scenario: i, seed }))
        .collect();
    let progress = Progress::new(tasks.len() as u64, options.jobs, options.progress);
    let mut done: Vec<Vec<SeedDone>> = plans.iter().map(|_| Vec::new()).collect();
    let mut results = Vec::new();
    let mut next = 0;
    let work = |job: usize, task: &Task| {
        let (_, scenario) = &scenarios[task.scenario];
        progress.start(job, &scenario.name, task.seed);
        let seed = run_one(scenario, task.seed, run_dir);
        progress.finish(job);
        seed
    };
    run_pool(&tasks, options.jobs, work, |i, seed| {
        done[tasks[i].scenario].push(seed);
        // Scenarios finish in list order, each as soon as its seeds and those before are in.
        while next < plans.len() && done[next].len() == plans[next].len() {
            if !plans[next].is_empty() {
                let seeds = std::mem::take(&mut done[next]);
                let finish = Finish {
                    position: next,
                    path: &scenarios[next].0,
                    scenario: &scenarios[next].1,
                    plan: &plans[next],
                    options,
                    run_dir,
                    build,
                    say: &|line: &str| progress.say(line),
                };
                results.push(finish.run(seeds));
            }
            next += 1;
        }
    });
    progress.clear();
    Ok(results)
}

/// The seeds of `scenario` this run tries, in order: its corpus seeds first, then its
/// `[check] regression_seeds` (unless `--seed` chose the seeds), then `base + i` for each
/// of its seeds; each once, and only those of this shard.
/// Sorted `seeds` as runs of consecutive seeds, `first..=last` each (a lone seed as
/// itself), comma-separated: `1..=5,796` for five seeds and a pinned regression seed.
fn seed_ranges(seeds: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &seed in seeds {
        match runs.last_mut() {
            Some((_, last)) if seed == *last + 1 => *last = seed,
            _ => runs.push((seed, seed)),
        }
    }
    let run = |(first, last): &(u64, u64)| match first == last {
        true => first.to_string(),
        false => format!("{first}..={last}"),
    };
    runs.iter().map(run).collect::<Vec<_>>().join(",")
}

fn planned_seeds(scenario: &Scenario, options: &BatchOptions) -> Result<Vec<u64>, String> {
    let base = options.seed.unwrap_or(DEFAULT_SEED_BASE);
    let count = options.seeds.unwrap_or(if options.seed.is_some() {
        1
    } else {
        scenario.seeds
    });
    let from_corpus = match &options.corpus {
        Some(dir) => corpus::read_seeds(dir, &scenario.name)?,
        None => Vec::new(),
    };
    let range = (0..count).map(|i| base.saturating_add(i));
    let mut seen = BTreeSet::new();
    let in_shard = |seed: &u64| {
        options
            .partition
            .is_none_or(|p| p.contains(&scenario.name, *seed))
    };
    // `--seed S` asks for those seeds only.
    let pinned = match options.seed {
        Some(_) => Vec::new(),
        None => scenario.check.regression_seeds.clone(),
    };
    Ok(from_corpus
        .into_iter()
        .chain(pinned)
        .chain(range)
        .filter(|seed| seen.insert(*seed))
        .filter(in_shard)
        .collect())
}

/// Runs and judges one seed, writing its history when it fails.
fn run_one(scenario: &Scenario, seed: u64, run_dir: &Path) -> SeedDone {
    let started = Instant::now();
    let outcome = run_guarded(scenario, seed);
    let verdict = judge_seed(scenario, &outcome);
    if verdict.class != SeedClass::Holds {
        let path = history_path(run_dir, &scenario.name, seed);
        write_history(&path, &outcome.history);
    }
    SeedDone {
        verdict,
        drawn: outcome.drawn,
        wall_time_s: started.elapsed().as_secs_f64(),
    }
}

/// Finishing one scenario once its seeds are in.
struct Finish<'a> {
    position: usize,
    path: &'a Path,
    scenario: &'a Scenario,
    plan: &'a [u64],
    options: &'a BatchOptions,
    run_dir: &'a Path,
    build: &'a str,
    say: &'a dyn Fn(&str),
}

impl Finish<'_> {
    fn run(&self, mut seeds: Vec<SeedDone>) -> (ScenarioResult, ExitClass) {
        seeds.sort_by_key(|s| s.verdict.seed);
        let (name, build, count) = (&self.scenario.name, self.build, self.plan.len());
        // A single seed is a replay: its own block says it all.
        let verbose = self.options.verbose || count == 1;
        if count > 1 {
            let ran: Vec<u64> = seeds.iter().map(|s| s.verdict.seed).collect();
            let ranges = seed_ranges(&ran);
            let shard = self
                .options
                .partition
                .map(|p| format!(" partition={p}"))
                .unwrap_or_default();
            (self.say)(&format!(
                "SEED={ranges} scenario={name} build={build} seeds={count}{shard}"
            ));
        }
        for s in &seeds {
            if verbose || s.verdict.class != SeedClass::Holds {
                (self.say)(&seed_block(name, build, &s.drawn, &s.verdict));
            }
        }
        let wall_time_s = seeds.iter().map(|s| s.wall_time_s).sum();
        let verdicts: Vec<SeedVerdict> = seeds.into_iter().map(|s| s.verdict).collect();
        let mut result = aggregate(
            self.scenario,
            self.path,
            self.run_dir,
            &verdicts,
            self.position,
        );
        result.wall_time_s = wall_time_s;
        if result.verdict == Verdict::Violated && self.options.shrink_runs_max > 0 {
            self.shrink_counterexample(&mut result, &verdicts);
        }
        if let Some(note) = self.recheck_determinism(&result, &verdicts) {
            (self.say)(&note);
            if let Some(ledger) = result.ledger.as_mut() {
                ledger.determinism_notes.push(note);
            }
        }
        settle(&mut result);
        let class = ledger_class(&result);
        self.keep_in_corpus(&result);
        print_scenario_end(&result, class, self.say);
        (result, class)
    }

    /// Adds the scenario's failing seeds to the corpus, if there is one.
    fn keep_in_corpus(&self, result: &ScenarioResult) {
        let Some(dir) = &self.options.corpus else {
            return;
        };
        let failing = corpus::failing_seeds(result);
        match corpus::add_seeds(dir, &result.scenario, &failing) {
            Ok(0) => {}
            Ok(n) => (self.say)(&format!(
                "  corpus: {n} new failing seeds in {}",
                corpus::corpus_file(dir, &result.scenario).display()
            )),
            Err(e) => eprintln!("eosim: warning: corpus: {e}"),
        }
    }

    /// Shrinks the counterexample's fault schedule ([`super::shrink`]) and records the
    /// result, or why there is none, in `result`.
    fn shrink_counterexample(&self, result: &mut ScenarioResult, seeds: &[SeedVerdict]) {
        let Some(counterexample) = result.counterexample.as_mut() else {
            return;
        };
        let Some(seed) = seeds.iter().find(|s| s.seed == counterexample.seed) else {
            return;
        };
        if seed.schedule.is_empty() {
            // Nothing to remove: the failure needs no scheduled fault (fault points, bad
            // input or the pipeline's own timing), which the counterexample already shows.
            return;
        }
        // The shrunk schedule must show every forbidden kind of the original, not just one.
        let original = forbidden_cases(&seed.check);
        let target: BTreeSet<Anomaly> = original.keys().copied().collect();
        let (faults, runs_max) = (seed.schedule.len(), self.options.shrink_runs_max);
        (self.say)(&format!(
            "  shrinking seed {}: {faults} faults, at most {runs_max} runs",
            seed.seed
        ));
        let run = |s: &Scenario, seed| run_guarded(s, seed);
        let outcome = shrink(
            self.scenario,
            seed.seed,
            &seed.schedule,
            &target,
            runs_max,
            &run,
        );
        let file = history_path(self.run_dir, &self.scenario.name, seed.seed)
            .with_file_name("shrunk.toml");
        let recorded = record_shrunk(self.scenario, faults, &original, &outcome, &file, seed.seed);
        let note = match recorded {
            Ok(Some(shrunk)) => {
                (self.say)(&format!(
                    "  shrunk to {} of {} faults in {} runs: {}",
                    shrunk.faults.len(),
                    shrunk.faults_from,
                    shrunk.runs,
                    shrunk.replay
                ));
                counterexample.shrunk = Some(shrunk);
                None
            }
            Ok(None) => Some(format!(
                "shrink: seed {}'s {} faults as an explicit schedule (swarm removed) did not \
                 show every forbidden anomaly of the original again at that seed, so the \
                 counterexample is not shrunk",
                seed.seed, faults
            )),
            Err(e) => Some(format!("shrink: cannot write {e}")),
        };
        if let Some(ledger) = result.ledger.as_mut() {
            ledger.shrink_note = note;
        }
    }

    /// Runs one seed again (the counterexample's, else the first) and compares history
    /// hashes, so every replay command printed is known to reproduce. `Some(note)` when
    /// they differ.
    fn recheck_determinism(
        &self,
        result: &ScenarioResult,
        seeds: &[SeedVerdict],
    ) -> Option<String> {
        let seed = result.counterexample.as_ref().map(|c| c.seed);
        let first = seeds
            .iter()
            .find(|s| Some(s.seed) == seed)
            .or_else(|| seeds.first())?;
        let again = run_guarded(self.scenario, first.seed).history.hash();
        if again == first.hash {
            return None;
        }
        Some(format!(
            "NONDETERMINISTIC scenario={} seed={} history-hash: {} then {again}; \
             compare with `cargo xtask determinism --scenario {} --seed {}`",
            self.scenario.name,
            first.seed,
            first.hash,
            self.path.display(),
            first.seed
        ))
    }
}

/// The progress display: one bar over every seed of the run, and one line per job saying
/// which seed it runs; lines printed above them. Hidden when disabled.
struct Progress {
    multi: MultiProgress,
    total: ProgressBar,
    jobs: Vec<ProgressBar>,
    enabled: bool,
}

impl Progress {
    fn new(seeds: u64, jobs: usize, enabled: bool) -> Self {
        let target = if enabled {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let multi = MultiProgress::with_draw_target(target);
        let total = multi.add(ProgressBar::new(seeds));
        let style =
            ProgressStyle::with_template("seeds [{bar:30}] {pos}/{len} {elapsed} eta {eta}")
                .expect("the progress template is valid")
                .progress_chars("=> ");
        total.set_style(style);
        let line = ProgressStyle::with_template("  {prefix} {msg}").expect("valid template");
        let jobs = (0..jobs.min(seeds.max(1) as usize))
            .map(|job| {
                let bar = multi.add(ProgressBar::new(1));
                bar.set_style(line.clone());
                bar.set_prefix(format!("job {}", job + 1));
                bar
            })
            .collect();
        Self {
            multi,
            total,
            jobs,
            enabled,
        }
    }

    fn start(&self, job: usize, scenario: &str, seed: u64) {
        if let Some(bar) = self.jobs.get(job) {
            bar.set_message(format!("{scenario} seed {seed}"));
        }
    }

    fn finish(&self, job: usize) {
        if let Some(bar) = self.jobs.get(job) {
            bar.set_message("");
        }
        self.total.inc(1);
    }

    /// Prints `line` on stdout above the bars.
    fn say(&self, line: &str) {
        if self.enabled {
            self.multi.suspend(|| println!("{line}"));
        } else {
            println!("{line}");
        }
    }

    fn clear(&self) {
        for bar in &self.jobs {
            bar.finish_and_clear();
        }
        self.total.finish_and_clear();
        let _ = self.multi.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(check: &str) -> Scenario {
        let text = format!("pipeline = \"kafka-consume\"\nclaim = \"at-least-once\"\n{check}");
        Scenario::parse(Path::new("s.toml"), &text).expect("valid scenario")
    }

    #[test]
    fn the_seed_header_names_runs_of_consecutive_seeds() {
        assert_eq!(seed_ranges(&[1, 2, 3, 4, 5]), "1..=5");
        assert_eq!(seed_ranges(&[1, 2, 3, 4, 5, 796]), "1..=5,796");
        assert_eq!(seed_ranges(&[2, 4, 5]), "2,4..=5");
    }

    #[test]
    fn regression_seeds_run_first_once_unless_the_seed_is_chosen() {
        let s = scenario("seeds = 3\n[check]\nregression_seeds = [796, 2]\n");
        let options = BatchOptions::default();
        let base = DEFAULT_SEED_BASE;
        let expected = vec![796, 2, base, base + 1, base + 2];
        let mut dedup = BTreeSet::new();
        let expected: Vec<u64> = expected.into_iter().filter(|x| dedup.insert(*x)).collect();
        assert_eq!(planned_seeds(&s, &options).unwrap(), expected);
        let chosen = BatchOptions {
            seed: Some(476),
            ..BatchOptions::default()
        };
        assert_eq!(planned_seeds(&s, &chosen).unwrap(), vec![476]);
        let plain = scenario("seeds = 2\n");
        assert_eq!(
            planned_seeds(&plain, &options).unwrap(),
            vec![base, base + 1]
        );
    }
}

//! `eosim report merge DIR...`: the reports of disjoint shards of one run (`eosim sim
//! --partition K/N`, one `results.json` each) merged into the report one run over all
//! their seeds gives. Totals add up; everything that follows from the seeds (verdict,
//! simulated time, what was not exercised, notes) is recomputed from the merged seed
//! ledgers by the same [`settle`] a run uses; the counterexample is the shards' best by the
//! run's own rule (fewest faults before the first forbidden anomaly, then the smallest
//! seed), with the shrink its shard made of it.

use super::judge::ledger_class;
use super::junit::write_junit;
use super::output::print_scenario_end;
use super::rundir::{create_run_dir, publish};
use super::{config_error, corpus, ExitClass, MergeArgs};
use crate::report::judge::{matches_verdict, settle, verdict_of};
use crate::report::{Ledger, RunReport, ScenarioResult};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Reads `DIR/results.json` of each shard directory.
///
/// # Errors
/// A file that cannot be read or parsed, named.
pub fn read_shards(dirs: &[PathBuf]) -> Result<Vec<RunReport>, String> {
    dirs.iter()
        .map(|dir| {
            let file = dir.join("results.json");
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
        })
        .collect()
}

/// Merges shard reports into one, named `run_id`, with the shards' build (`a+b` when they
/// differ) and the earliest start.
///
/// # Errors
/// No shard; a scenario without a seed ledger (a real run, or a report written before
/// ledgers); a scenario whose shards disagree on pipeline, claim, rules or position; a
/// seed that two shards both ran (the shards overlap).
pub fn merge_reports(shards: &[RunReport], run_id: &str) -> Result<RunReport, String> {
    let first = shards.first().ok_or("no shard report to merge")?;
    let mut groups: BTreeMap<&str, Vec<&ScenarioResult>> = BTreeMap::new();
    for shard in shards {
        for s in &shard.scenarios {
            groups.entry(s.scenario.as_str()).or_default().push(s);
        }
    }
    let mut scenarios = groups
        .into_values()
        .map(|parts| merge_scenario(&parts))
        .collect::<Result<Vec<_>, _>>()?;
    scenarios.sort_by_key(|s| s.ledger.as_ref().map_or(usize::MAX, |l| l.position));
    let mut builds: Vec<&str> = shards.iter().map(|s| s.build.as_str()).collect();
    builds.dedup();
    Ok(RunReport {
        run_id: run_id.to_string(),
        build: builds.join("+"),
        started_at: shards
            .iter()
            .map(|s| s.started_at.clone())
            .min()
            .unwrap_or_else(|| first.started_at.clone()),
        scenarios,
    })
}

/// One scenario's shard results merged.
fn merge_scenario(parts: &[&ScenarioResult]) -> Result<ScenarioResult, String> {
    let base = parts[0];
    let ledger_of = |s: &ScenarioResult| {
        s.ledger.clone().ok_or_else(|| {
            format!(
                "scenario `{}` has no seed ledger (a real run, or a report older than \
                 `report merge`): only simulated runs merge",
                s.scenario
            )
        })
    };
    let mut ledger = ledger_of(base)?;
    let mut merged = base.clone();
    for part in &parts[1..] {
        let other = ledger_of(part)?;
        check_same(base, &ledger, part, &other)?;
        add_totals(&mut merged, part);
        ledger.seeds.extend(other.seeds);
        ledger.determinism_notes.extend(other.determinism_notes);
    }
    ledger.seeds.sort_by_key(|s| s.seed);
    if let Some(twice) = ledger.seeds.windows(2).find(|w| w[0].seed == w[1].seed) {
        return Err(format!(
            "scenario `{}`: seed {} is in two shards (run every shard of one --partition N)",
            base.scenario, twice[0].seed
        ));
    }
    let verdict = verdict_of(ledger.seeds.iter().map(|s| &s.class));
    let rank = |s: &ScenarioResult| {
        let c = s.counterexample.as_ref()?;
        let record = s.ledger.as_ref()?.seeds.iter().find(|r| r.seed == c.seed)?;
        matches_verdict(&record.class, verdict).then_some((record.faults_before_anomaly, c.seed))
    };
    let best = parts
        .iter()
        .filter_map(|p| rank(p).map(|r| (r, *p)))
        .min_by_key(|(r, _)| *r);
    merged.counterexample = best.and_then(|(_, p)| p.counterexample.clone());
    ledger.shrink_note = best.and_then(|(_, p)| p.ledger.as_ref()?.shrink_note.clone());
    merged.ledger = Some(ledger);
    settle(&mut merged);
    Ok(merged)
}

/// A scenario's shards must come from one command: same pipeline, claim, rules, place.
fn check_same(
    a: &ScenarioResult,
    la: &Ledger,
    b: &ScenarioResult,
    lb: &Ledger,
) -> Result<(), String> {
    let same = a.pipeline == b.pipeline
        && a.claim == b.claim
        && la.position == lb.position
        && la.expected == lb.expected
        && la.reached == lb.reached
        && la.not_exercised_allowed == lb.not_exercised_allowed;
    if same {
        return Ok(());
    }
    Err(format!(
        "scenario `{}`: the shards disagree on its pipeline, claim, [check] rules or place \
         in the run (were they run from the same command and build?)",
        a.scenario
    ))
}

/// Adds `part`'s totals (counts, marks, effects, wall time) to `merged`.
fn add_totals(merged: &mut ScenarioResult, part: &ScenarioResult) {
    let add = |into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>| {
        for (k, n) in from {
            *into.entry(k.clone()).or_default() += n;
        }
    };
    add(&mut merged.anomalies, &part.anomalies);
    add(&mut merged.forbidden_anomalies, &part.forbidden_anomalies);
    add(&mut merged.marks, &part.marks);
    for (kind, c) in &part.fault_effects {
        let m = merged.fault_effects.entry(kind.clone()).or_default();
        m.scheduled += c.scheduled;
        m.acted += c.acted;
        m.seeds_scheduled += c.seeds_scheduled;
        m.seeds_acted += c.seeds_acted;
    }
    merged.faults_injected += part.faults_injected;
    merged.wall_time_s += part.wall_time_s;
}

/// The run dirs given on the command line, with `DIR/latest` followed when `DIR` holds
/// no `results.json` itself (so `reports/shard-1` works as well as its run dir).
pub fn shard_dirs(given: &[PathBuf]) -> Vec<PathBuf> {
    given
        .iter()
        .map(|dir| {
            let latest = dir.join("latest");
            if !dir.join("results.json").exists() && latest.join("results.json").exists() {
                latest
            } else {
                dir.to_path_buf()
            }
        })
        .collect()
}

/// `eosim report merge`: reads the shards, writes the merged report (with the shards'
/// failing histories and shrunk scenarios copied in) as a run of its own under `--out`,
/// prints each scenario's closing lines, and exits as one run over all the seeds would.
pub fn merge_command(args: &MergeArgs) -> ExitClass {
    let dirs = shard_dirs(&args.dirs);
    let shards = match read_shards(&dirs) {
        Ok(s) => s,
        Err(e) => return config_error(e),
    };
    let (run_id, run_dir) = match create_run_dir(&args.out) {
        Ok(r) => r,
        Err(e) => {
            let out = args.out.display();
            return config_error(format!("cannot create a run dir in {out}: {e}"));
        }
    };
    let mut report = match merge_reports(&shards, &run_id) {
        Ok(r) => r,
        Err(e) => return config_error(e),
    };
    for (dir, shard) in dirs.iter().zip(&shards) {
        if let Err(e) = copy_dirs(dir, &run_dir) {
            eprintln!(
                "eosim: warning: cannot copy {}'s histories: {e}",
                dir.display()
            );
        }
        rebase_paths(&mut report, &shard.run_id, &run_dir);
    }
    let mut exit = ExitClass::Expected;
    for s in &report.scenarios {
        let class = ledger_class(s);
        print_scenario_end(s, class, &|line| println!("{line}"));
        exit = exit.max(class);
        if let Some(corpus_dir) = &args.corpus {
            if let Err(e) = corpus::add_seeds(corpus_dir, &s.scenario, &corpus::failing_seeds(s)) {
                eprintln!("eosim: warning: corpus: {e}");
            }
        }
    }
    println!(
        "merged {} shards: {} scenarios, {} seeds",
        shards.len(),
        report.scenarios.len(),
        report.scenarios.iter().map(|s| s.seeds).sum::<u64>()
    );
    if let Err(e) = publish(&args.out, &run_dir, &report) {
        return config_error(e);
    }
    if let Some(path) = &args.junit {
        if let Err(e) = write_junit(path, &report) {
            return config_error(e);
        }
    }
    exit
}

/// Copies every directory under `from` (a shard's `<scenario>/<seed>/` histories and
/// shrunk scenarios) into `to`.
fn copy_dirs(from: &Path, to: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dirs(&entry.path(), &target)?;
        } else if !is_report_file(&entry) {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The shard's own report files, which the merged report replaces.
fn is_report_file(entry: &std::fs::DirEntry) -> bool {
    let name = entry.file_name();
    name == "results.json" || name == "summary.md"
}

/// Counterexample paths inside shard run `run_id`'s dir, pointed at the copies in
/// `run_dir`.
fn rebase_paths(report: &mut RunReport, run_id: &str, run_dir: &Path) {
    let marker = format!("{run_id}/");
    let rebase = |path: &str| -> Option<String> {
        let (_, rest) = path.split_once(&marker)?;
        Some(run_dir.join(rest).display().to_string())
    };
    for c in report
        .scenarios
        .iter_mut()
        .filter_map(|s| s.counterexample.as_mut())
    {
        if let Some(p) = rebase(&c.history_path) {
            c.history_path = p;
        }
        if let Some(shrunk) = c.shrunk.as_mut() {
            if let Some(p) = rebase(&shrunk.scenario_file) {
                shrunk.replay = shrunk.replay.replace(&shrunk.scenario_file, &p);
                shrunk.scenario_file = p;
            }
        }
    }
}

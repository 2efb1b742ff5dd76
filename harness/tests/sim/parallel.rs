//! `eosim sim --jobs N` and `--partition K/N`: a sample of the catalogue run on one thread,
//! on three, and as two shards merged must give the same report, seed for seed (history
//! hashes, classes), verdict for verdict, counterexample for counterexample, shrink for
//! shrink. Only wall times may differ.

use eosim::cli::batch::{run_batch, BatchOptions};
use eosim::cli::merge::merge_reports;
use eosim::cli::partition::Partition;
use eosim::report::{RunReport, ScenarioResult, SeedClass, Verdict};
use std::path::{Path, PathBuf};

/// Kafka consume with an expected lost write (shrunk), a duplicate canary (shrunk), the
/// ClickHouse sink's crash points (no schedule to shrink) and a safe twin that holds.
const SAMPLE: [&str; 4] = [
    "amo-commit-before-loses-records.toml",
    "canary-duplicate-unsafe.toml",
    "p1-crash-points-seed-duplicates.toml",
    "canary-duplicate-safe.toml",
];

const SEEDS: u64 = 4;

fn sample() -> Vec<(PathBuf, eosim::scenario::Scenario)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    SAMPLE
        .iter()
        .map(|f| {
            (
                PathBuf::from("scenarios").join(f),
                super::support::catalogue(f),
            )
        })
        .inspect(|(p, _)| assert!(root.join(p.file_name().unwrap()).exists()))
        .collect()
}

/// Runs the sample into `<tmp>/<name>` and returns its results with wall times zeroed and
/// the run dir replaced by `RUN`, so that runs in different dirs compare.
fn run(name: &str, jobs: usize, partition: Option<Partition>) -> Vec<ScenarioResult> {
    let dir = std::env::temp_dir().join(format!("eosim-parallel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = BatchOptions {
        seeds: Some(SEEDS),
        jobs,
        partition,
        shrink_runs_max: 6,
        ..BatchOptions::default()
    };
    let results = run_batch(&sample(), &options, &dir, "test").expect("the sample runs");
    let results = results.into_iter().map(|(r, _)| r).collect();
    let results = normalised(results, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    results
}

fn normalised(results: Vec<ScenarioResult>, dir: &Path) -> Vec<ScenarioResult> {
    let json = serde_json::to_string(&results).unwrap();
    let json = json.replace(&dir.display().to_string(), "RUN");
    let mut results: Vec<ScenarioResult> = serde_json::from_str(&json).unwrap();
    for r in &mut results {
        r.wall_time_s = 0.0;
    }
    results
}

#[test]
fn one_job_three_jobs_and_two_merged_shards_give_the_same_report() {
    let one = run("j1", 1, None);
    assert_eq!(one.len(), SAMPLE.len());
    // The sample is worth comparing: hashes per seed, a shrunk counterexample, a hold.
    for r in &one {
        let ledger = r.ledger.as_ref().expect("a simulated run keeps a ledger");
        assert_eq!(ledger.seeds.len() as u64, SEEDS, "{}", r.scenario);
        assert!(
            ledger.seeds.iter().all(|s| s.hash.len() == 64),
            "{}",
            r.scenario
        );
    }
    assert!(one.iter().any(|r| r
        .counterexample
        .as_ref()
        .is_some_and(|c| c.shrunk.is_some())));
    assert!(one.iter().any(|r| r.verdict == Verdict::Holds));
    assert!(one
        .iter()
        .flat_map(|r| &r.ledger.as_ref().unwrap().seeds)
        .any(|s| s.class == SeedClass::Invalid));

    let three = run("j3", 3, None);
    assert_eq!(one, three, "--jobs 3 changed the report");

    let shards: Vec<RunReport> = (1..=2)
        .map(|k| RunReport {
            run_id: format!("shard-{k}"),
            build: "test".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            scenarios: run(&format!("s{k}"), 2, Some(format!("{k}/2").parse().unwrap())),
        })
        .collect();
    // The split is real: some scenario has seeds in both shards.
    let split = shards[0]
        .scenarios
        .iter()
        .any(|a| shards[1].scenarios.iter().any(|b| b.scenario == a.scenario));
    assert!(split, "no scenario was split between the two shards");
    let merged = merge_reports(&shards, "merged").expect("the shards merge");
    assert_eq!(
        one, merged.scenarios,
        "two merged shards differ from one run"
    );
}

/// Every `tokio::select!` of the simulated code (`sim/src`, `harness/src`) starts with
/// `biased;`: unbiased, tokio polls the branches in an order drawn from a thread-local RNG
/// seeded from a process-wide counter, so a seed's history would depend on the thread it
/// ran on and what ran before it in the process (CONTRIBUTING, "Determinism").
#[test]
fn every_select_in_the_simulated_code_is_biased() {
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["sim/src", "harness/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    let mut selects = 0;
    let mut unbiased = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("source file");
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("//") || !line.contains("select! {") {
                continue;
            }
            selects += 1;
            // The first line of the macro's body that is not a comment.
            let first = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("//"));
            if first != Some("biased;") {
                unbiased.push(format!("{}:{}", path.display(), i + 1));
            }
        }
    }
    assert!(
        selects >= 6,
        "the scan found {selects} select!s: is it reading the sources?"
    );
    assert!(
        unbiased.is_empty(),
        "select! without `biased;`: {unbiased:?}"
    );
}

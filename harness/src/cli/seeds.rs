//! One seed as the subcommands run it: guarded against panics, its header block printed,
//! its history written.

use super::aggregate::{SeedClass, SeedVerdict};
use super::output::seed_header;
use crate::history::History;
use crate::runner::{run_seed, SeedOutcome};
use crate::scenario::Scenario;
use std::path::Path;

/// Runs a seed; a panic escaping the runner itself becomes a crash outcome.
pub fn run_guarded(scenario: &Scenario, seed: u64) -> SeedOutcome {
    let run = std::panic::AssertUnwindSafe(|| run_seed(scenario, seed));
    std::panic::catch_unwind(run).unwrap_or_else(|payload| {
        SeedOutcome::crashed(seed, crate::runner::panic_message(&payload))
    })
}

/// A seed's block: its header (`SEED=… scenario=… build=…` and the drawn swarm parameters),
/// its class, faults and forbidden anomalies, and its `history-hash`.
pub fn seed_block(scenario: &str, build: &str, drawn: &[String], verdict: &SeedVerdict) -> String {
    let mut block = seed_header(verdict.seed, scenario, build, drawn);
    let anomalies: Vec<&str> = verdict.check.forbidden.iter().map(|a| a.name()).collect();
    block.push_str(&format!(
        "\n  class={} faults={}",
        verdict.class.name(),
        verdict.faults
    ));
    if !anomalies.is_empty() {
        block.push_str(&format!(" forbidden={}", anomalies.join(",")));
    }
    match &verdict.class {
        SeedClass::Crashed(m) => block.push_str(&format!(" panic={m:?}")),
        SeedClass::Stalled(r) => block.push_str(&format!(" reason={r:?}")),
        _ => {}
    }
    block.push_str(&format!("\nhistory-hash: {}", verdict.hash));
    block
}

/// Writes `history` as JSON lines to `path` (creating its directory); a warning on stderr
/// when it cannot.
pub fn write_history(path: &Path, history: &History) {
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::write(path, history.to_jsonl()));
    if let Err(e) = written {
        eprintln!("eosim: warning: cannot write {}: {e}", path.display());
    }
}

//! What the simulation tests share: catalogue scenarios by file name, and one seed run and
//! checked with the scenario's own check options.

use eosim::checker::{check_all, CheckResult, Validity};
use eosim::cli::aggregate::check_options;
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

/// The catalogue's `scenarios/<file>` (so a test and the catalogue cannot drift apart).
pub fn catalogue(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `seed` of `s` (it must not crash) and checks its history.
pub fn run_checked(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "{} seed {seed} crashed", s.name);
    let result = check_all(&outcome.history, &check_options(s));
    (outcome, result)
}

/// Runs the catalogue's `file` at `seed` and checks it; it must hold (valid, not stalled).
pub fn run_holding(file: &str, seed: u64) -> (SeedOutcome, CheckResult) {
    let s = catalogue(file);
    let (outcome, result) = run_checked(&s, seed);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(4)
    );
    assert_eq!(outcome.stalled, None);
    (outcome, result)
}

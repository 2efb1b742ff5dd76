//! Benches live in benches/; this lib holds what several of them share.

/// Runs one seed of `scenario` and returns its simulated time, ms.
///
/// # Panics
/// When the run stalled: a bench of a run that never caught up measures nothing.
#[cfg(madsim)]
pub fn run_unstalled(scenario: &eosim::scenario::Scenario, seed: u64) -> u64 {
    let outcome = eosim::runner::run_seed(scenario, seed);
    assert!(
        outcome.stalled.is_none(),
        "bench run stalled: {:?}",
        outcome.stalled
    );
    outcome.sim_time_ms
}

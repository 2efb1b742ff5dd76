//! Benches live in benches/; this lib holds what several of them share, the allocator
//! among it: each bench links this crate (`use eosim_benches as _;` where it uses nothing
//! else of it).

/// The allocator the `eosim` binary runs with (`harness/src/bin/eosim.rs`: mimalloc), so a
/// bench measures what a run costs there, not glibc's malloc (a third of the simulator
/// bench's instructions under it: `_int_malloc`, `_int_free`, and `realloc`'s copies).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

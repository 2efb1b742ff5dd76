//! Benches live in benches/; this lib holds what several of them share: the allocator, and
//! the bench scenarios of `benches/scenarios/` (which `cargo xtask speed` runs too). Each
//! bench links this crate (`use eosim_benches as _;` where it uses nothing else of it).

use eosim::scenario::Scenario;
use std::path::{Path, PathBuf};

/// The allocator the `eosim` binary runs with (`harness/src/bin/eosim.rs`: mimalloc), so a
/// bench measures what a run costs there, not glibc's malloc (a third of the simulator
/// bench's instructions under it: `_int_malloc`, `_int_free`, and `realloc`'s copies).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The bench scenarios' folder, `benches/scenarios/` (its README says which bench reads
/// which file).
pub fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

/// The bench scenario `benches/scenarios/<file>`, with each `(section, key, value)` of
/// `set` written over the file's: how a bench case differs from the file (another sink
/// variant, another processing guarantee).
///
/// # Panics
/// When the file cannot be read, is not TOML, or with `set` is not a valid scenario: a
/// bench of nothing measures nothing.
pub fn bench_scenario(file: &str, set: &[(&str, &str, toml::Value)]) -> Scenario {
    let path = scenario_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut table: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{} is not TOML: {e}", path.display()));
    for (section, key, value) in set {
        table
            .entry(*section)
            .or_insert_with(|| toml::Table::new().into())
            .as_table_mut()
            .unwrap_or_else(|| panic!("{}: `{section}` is not a section", path.display()))
            .insert((*key).to_string(), value.clone());
    }
    let text = toml::to_string(&table).expect("a TOML table prints");
    Scenario::parse(&path, &text).unwrap_or_else(|e| panic!("bench scenario: {e}"))
}

/// Runs one seed of `scenario` and returns its simulated time, ms.
///
/// # Panics
/// When the run stalled: a bench of a run that never caught up measures nothing.
#[cfg(madsim)]
pub fn run_unstalled(scenario: &Scenario, seed: u64) -> u64 {
    let outcome = eosim::runner::run_seed(scenario, seed);
    assert!(
        outcome.stalled.is_none(),
        "bench run stalled: {:?}",
        outcome.stalled
    );
    outcome.sim_time_ms
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim::streams::ProcessingGuarantee;

    #[test]
    fn every_bench_scenario_parses_at_bench_size() {
        let mut files = 0;
        for entry in std::fs::read_dir(scenario_dir()).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if let Some(stem) = name.strip_suffix(".toml") {
                let s = bench_scenario(&name, &[]);
                let records = s
                    .cdc
                    .generate
                    .as_ref()
                    .map_or(s.workload.records, |g| g.events);
                assert_eq!(records, 20_000, "{name}");
                assert_eq!(s.workload.produce_interval_ms, 0, "{name}: unpaced");
                assert_eq!(s.name, stem);
                files += 1;
            }
        }
        assert_eq!(files, 5);
    }

    #[test]
    fn a_set_key_replaces_the_files_and_keeps_the_rest() {
        let file = bench_scenario("streams.toml", &[]);
        assert_eq!(
            file.streams.processing_guarantee,
            ProcessingGuarantee::ExactlyOnceV2
        );
        let set = bench_scenario(
            "streams.toml",
            &[
                ("streams", "processing_guarantee", "at_least_once".into()),
                ("streams", "num_standby_replicas", 1.into()),
            ],
        );
        assert_eq!(
            set.streams.processing_guarantee,
            ProcessingGuarantee::AtLeastOnce
        );
        assert_eq!(set.streams.num_standby_replicas, 1);
        assert_eq!(set.workload, file.workload);
        assert_eq!(set.streams.statestore_cache_max_bytes, Some(0));
    }

    #[test]
    #[should_panic(expected = "bench scenario")]
    fn a_key_the_scenario_does_not_know_is_refused() {
        bench_scenario("streams.toml", &[("streams", "no_such_key", 1.into())]);
    }
}

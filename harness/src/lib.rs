//! # eosim: the harness
//!
//! The systems under test and everything that drives and judges them: client traits with a
//! simulated implementation, workloads, the history they record, checkers, the simulation
//! runner, reports and the `eosim` CLI.
//!
//! # Sections
//! - [`client`]: producer, consumer and admin traits shaped after rdkafka, and their
//!   simulated implementation (under `--cfg madsim`).
//! - [`connect`]: the Kafka Connect sink task contract and worker.
//! - [`sinks`]: sink connectors under test.
//! - [`sink_consumer`]: the consumer of `kafka-consume` (poll, write into a sink, commit),
//!   shared by the simulation and the real tier.
//! - [`copier`]: the consume-transform-produce copier of `transactional-copy` (Kafka
//!   transactions, KIP-447), shared by the simulation and the real tier.
//! - [`upstream`]: the transactional upstream producer of the sink pipelines (`[workload]
//!   "transactional.id"`, some transactions aborted on purpose), shared by the simulation
//!   and the real tier.
//! - [`streams`]: a Kafka Streams-style processor: topology, tasks, state stores,
//!   changelogs, `processing.guarantee`.
//! - [`scenario`]: scenario files (TOML): pipeline, workload, faults, claim.
//! - `workload` (under `--cfg madsim`): the components under test on the Kafka layer and
//!   their generators.
//! - [`marks`]: coverage marks (`mark!`) that runs collect per seed.
//! - [`history`]: operations as invoke then ok / fail / info, nemesis faults among them.
//! - [`checker`]: pure functions from a history to a verdict, with Jepsen's anomaly names.
//! - `world` (under `--cfg madsim`): the simulated world of one run: named nodes, what
//!   the nemesis did to them, the history recorder.
//! - `runner` (under `--cfg madsim`): runs a scenario for a seed in the simulator.
//! - [`report`]: `results.json` and `summary.md`.
//! - [`cli`]: the `eosim` command line (`sim`, `replay`, `determinism`).
//!
//! # Layers
//! Imports go one way, from the top of this list down: `cli`; `runner`, `real`, `report`;
//! `workload`, `world`, and what a scenario builds (`copier`, `upstream`,
//! `sink_consumer`); `scenario` (it reads each component's configuration); `checker`; the
//! components (`connect`, `sinks`, `streams`); `history`; `client`. A component never reads
//! a scenario: the scenario builds its configuration (`Scenario::processor_config`,
//! `scenario::cdc_events`). A unit test fails on any circle.
#![deny(missing_docs)]

pub mod checker;
pub mod cli;
pub mod client;
pub mod connect;
pub mod copier;
pub mod history;
pub mod marks;
pub use eosim_sim::mark;
#[cfg(not(madsim))]
pub mod real;
pub mod report;
#[cfg(madsim)]
pub mod runner;
pub mod scenario;
pub mod sink_consumer;
pub mod sinks;
pub mod streams;
#[cfg(test)]
mod test_support;
pub mod upstream;
#[cfg(madsim)]
pub mod workload;
#[cfg(madsim)]
pub mod world;

/// Whether `value` is its type's default: serde's `skip_serializing_if` for configuration
/// keys a scenario file leaves out when they have their default (`scenario`, `streams`).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

#[cfg(test)]
mod tests {
    /// The crate's top-level modules import one another in one direction (the layers of
    /// the README's Architecture section: `client` ← `history` ← the components
    /// (`connect`, `sinks`, `streams`) ← `checker` ← `scenario` ← what a scenario builds
    /// (`copier`, `upstream`, `sink_consumer`, `workload`, `world`) ← `runner`, `real`,
    /// `report` ← `cli`): a `crate::<module>` path (or a `super::` chain that climbs to the
    /// crate root) outside comments and unit tests is an import, and a circle fails with
    /// its modules named.
    #[test]
    fn the_top_level_modules_import_one_another_without_a_circle() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let modules = crate::test_support::modules_in(&dir, &["lib", "bin", "test_support"], true);
        if let Some(circle) = crate::test_support::import_circle(&modules, "crate::") {
            panic!("import circle: {}", circle.join(" -> "));
        }
        let names: Vec<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
        assert!(
            names.contains(&"scenario") && names.contains(&"workload"),
            "{names:?}"
        );
    }
}

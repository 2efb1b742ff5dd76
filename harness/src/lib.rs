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
//! - `runner` (under `--cfg madsim`): runs a scenario for a seed in the simulator.
//! - [`report`]: `results.json` and `summary.md`.
//! - [`cli`]: the `eosim` command line (`sim`, `replay`, `determinism`).
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

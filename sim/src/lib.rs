//! # eosim-sim: the simulated world
//!
//! Pure, deterministic models of the systems eosim's pipelines talk to, the madsim nodes
//! that serve them over the simulated network, and the nemesis that breaks them.
//!
//! # Sections
//! - [`kafka`]: the Kafka model (`kafka::model::Cluster`, a pure state machine) and, under
//!   `--cfg madsim`, the broker nodes serving it.
//! - [`clickhouse`]: the ClickHouse model (MergeTree tables, insert deduplication,
//!   KeeperMap) and the Keeper model, with their nodes under `--cfg madsim`.
//! - [`doris`]: the Doris model (FE, BE, load transactions and labels, Stream Load,
//!   Routine Load jobs).
//! - [`source_db`]: a source database's change log (transactions of row events at LSN
//!   positions), read by the `connect-source` pipeline's CDC source task.
//! - `net` (under `--cfg madsim`): eosim's RPC over madsim's network, with message-level
//!   faults (drop, delay, duplicate, lose a response after the request was applied).
//! - `deadline` (under `--cfg madsim`): a timeout with one timer however often it is
//!   polled (madsim adds one per pending poll).
//! - [`nemesis`]: fault kinds and schedules, shared by the simulation and the reports.
//! - [`effects`]: what each fault did, recorded where it acted (fault-effect accounting).
//! - [`marks`]: coverage marks on the rare branches of every model and component.
//!
//! Layers, bottom up: models (no I/O, no clock of their own) ← services (madsim nodes) ←
//! clients (in `eosim`, the harness crate).
#![deny(missing_docs)]

pub mod clickhouse;
#[cfg(madsim)]
pub mod clock;
mod coded;
#[cfg(madsim)]
pub mod deadline;
pub mod doris;
pub mod effects;
pub mod kafka;
pub mod marks;
pub mod nemesis;
#[cfg(madsim)]
pub mod net;
pub mod postgres;
pub mod source_db;

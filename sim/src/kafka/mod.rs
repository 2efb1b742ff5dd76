//! The Kafka model: topics, partitions, replication, consumer groups.
//!
//! [`model::Cluster`] is a pure state machine: `handle(now, broker, request) -> Reply`
//! for client requests and `tick(now, env)` for what brokers and the controller do on their
//! own (follower fetches, ISR changes, elections, session expiry). `service` serves it from
//! madsim broker nodes. Behaviour follows `shared/models-reference.md` sections A–D:
//! [`producer_state`] is the partition side of idempotence and transactions (B, C.6),
//! [`txn`] the transaction coordinator (C). [`kop`] is the Kafka-on-Pulsar flavour: its
//! offset scheme and its transaction-coordinator switch.

pub mod group;
pub mod kop;
pub mod log;
pub mod model;
pub mod murmur2;
mod partition;
pub mod producer_state;
#[cfg(madsim)]
pub mod service;
#[cfg(test)]
mod tests;
pub mod txn;
#[cfg(test)]
mod txn_tests;
pub mod types;
pub mod versioned;

pub use types::*;

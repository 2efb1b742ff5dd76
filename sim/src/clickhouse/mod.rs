//! The ClickHouse model: MergeTree-family tables built from inserted blocks, insert
//! deduplication, ReplacingMergeTree and FINAL, KeeperMap tables, and the Keeper they
//! live in.
//!
//! # Sections
//! - [`types`]: column types, JSON conversion, table definitions, settings, version
//!   profiles (18.16, 23.7, 23.11+, 25.9+).
//! - [`model::ClickHouse`]: the server as a pure state machine (inserts cut into blocks
//!   and parts, block ids, the deduplication window, SELECT and FINAL).
//! - [`keeper::Keeper`]: a linearizable znode tree with versions, `multi`, sessions and
//!   ephemeral nodes.
//! - [`keeper_map`]: the KeeperMap engine over Keeper.
//! - [`protocol`]: the clickhouse node's requests and responses, and
//!   [`model::ClickHouse::handle`], which serves them against local models.
//! - `service` (under `--cfg madsim`): the `clickhouse` node (10.0.6.1:8123) and the
//!   `keeper` node (10.0.6.2:9181).
//!
//! Behaviour follows `shared/models-reference.md` section F.
//!
//! ```
//! use eosim_sim::clickhouse::{model::{ClickHouse, ServerConfig}, types::*};
//! let mut ch = ClickHouse::new(VersionProfile::V23_7, ServerConfig::default());
//! ch.create_table(TableDef::kafka2ck()).unwrap();
//! let rows = vec![serde_json::json!({"id": 1, "name": "a"})];
//! ch.insert(0, &Insert::new("kafka2ck", rows.clone())).unwrap();
//! ch.insert(0, &Insert::new("kafka2ck", rows)).unwrap();
//! // Plain MergeTree does not deduplicate by default: the retry is stored twice.
//! assert_eq!(ch.select("kafka2ck", false).unwrap().len(), 2);
//! ```

pub mod error;
pub mod keeper;
pub mod keeper_map;
pub mod model;
pub mod protocol;
#[cfg(madsim)]
pub mod service;
pub mod types;

pub use error::{ChError, ErrorCode};

#[cfg(all(test, madsim))]
mod service_tests;
#[cfg(test)]
mod tests;

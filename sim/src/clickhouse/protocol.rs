//! The clickhouse node's requests and responses, and [`ClickHouse::handle`]: the same
//! requests served synchronously against local models (for tests of components without
//! the simulator; the madsim node in `service` serves them over the network).

use super::error::ChError;
use super::keeper::Keeper;
use super::keeper_map::{self, KeeperMapTable, VersionedRow};
use super::model::{ClickHouse, InsertSummary};
use super::types::{Engine, Insert, Row, TableDef};
use serde::{Deserialize, Serialize};

/// A request to the clickhouse node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChRequest {
    /// `CREATE TABLE` (KeeperMap tables also get their Keeper paths).
    CreateTable(TableDef),
    /// `INSERT ... FORMAT JSONEachRow` into any table.
    Insert(Insert),
    /// `SELECT * FROM table [FINAL]`.
    Select {
        /// Table.
        table: String,
        /// `FINAL`.
        final_: bool,
    },
    /// `SELECT * FROM <KeeperMap table> WHERE key = <key>`, with the row's version.
    KeeperMapGet {
        /// Table.
        table: String,
        /// The key (JSON, converted to the key column's type).
        key: serde_json::Value,
    },
    /// Write one KeeperMap row only if its version is `expected_version` (`None`: only
    /// if the key is new). See [`keeper_map::put_if_version`].
    KeeperMapPutIfVersion {
        /// Table.
        table: String,
        /// The row (JSON object).
        row: serde_json::Value,
        /// Expected version.
        expected_version: Option<i32>,
    },
}

/// A successful answer of the clickhouse node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChResponse {
    /// Done (CREATE TABLE).
    Ok,
    /// A MergeTree-family INSERT ran.
    Inserted(InsertSummary),
    /// A KeeperMap INSERT wrote this many keys.
    KeysWritten(usize),
    /// SELECT result.
    Rows(Vec<Row>),
    /// A KeeperMap get.
    Got(Option<VersionedRow>),
    /// A conditional write succeeded with this new version.
    Version(i32),
}

/// The clickhouse node's answer.
pub type ChReply = Result<ChResponse, ChError>;

impl ClickHouse {
    /// Serves `request` at `now_ms` with `keeper` as the Keeper of KeeperMap tables. The
    /// whole INSERT runs at once (use [`ClickHouse::insert_prefix`] for a partial one).
    ///
    /// # Errors
    /// The ClickHouse error the request raises.
    pub fn handle(&mut self, now_ms: u64, keeper: &mut Keeper, request: ChRequest) -> ChReply {
        match request {
            ChRequest::CreateTable(def) => {
                let name = def.name.clone();
                self.create_table(def)?;
                if let Ok(table) = KeeperMapTable::resolve(self, &name) {
                    keeper_map::create_paths(keeper, &table)?;
                }
                Ok(ChResponse::Ok)
            }
            ChRequest::Insert(insert) => {
                if self.is_keeper_map(&insert.table) {
                    keeper_map::insert(self, keeper, &insert).map(ChResponse::KeysWritten)
                } else {
                    self.insert(now_ms, &insert).map(ChResponse::Inserted)
                }
            }
            ChRequest::Select { table, final_ } => {
                if self.is_keeper_map(&table) {
                    keeper_map::select(self, keeper, &table).map(ChResponse::Rows)
                } else {
                    self.select(&table, final_).map(ChResponse::Rows)
                }
            }
            ChRequest::KeeperMapGet { table, key } => {
                keeper_map::get(self, keeper, &table, &key).map(ChResponse::Got)
            }
            ChRequest::KeeperMapPutIfVersion {
                table,
                row,
                expected_version,
            } => keeper_map::put_if_version(self, keeper, &table, &row, expected_version)
                .map(ChResponse::Version),
        }
    }

    /// Whether `table` exists and is a KeeperMap table.
    pub fn is_keeper_map(&self, table: &str) -> bool {
        self.table(table)
            .is_some_and(|d| matches!(d.engine, Engine::KeeperMap { .. }))
    }
}

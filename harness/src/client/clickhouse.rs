//! ClickHouse and KeeperMap client traits in ClickHouse's own terms: `INSERT` (JSONEachRow,
//! with settings such as `insert_deduplication_token`), `SELECT`, and the KeeperMap
//! operations a state store needs (a keyed get with the row's Keeper version, a
//! strict-mode `ALTER TABLE ... UPDATE ... WHERE`, and the versioned Keeper write it is made
//! of).
//!
//! The simulated implementation is `client::sim::clickhouse::SimClickHouse`; the
//! real ones are `client::real::RealClickHouse` (the `clickhouse` crate over HTTP) and
//! `client::real::ClickHouseWithZooKeeper` (KeeperMap tables kept in ZooKeeper, for
//! servers without KeeperMap such as Debian's 18.16).

use async_trait::async_trait;
use eosim_sim::clickhouse::keeper_map::VersionedRow;
use eosim_sim::clickhouse::model::InsertSummary;
use eosim_sim::clickhouse::types::{Insert, Row, TableDef, Value as ChValue};
use eosim_sim::clickhouse::ChError;

/// How a ClickHouse call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChClientError {
    /// The server answered with an exception: the request was refused or failed as
    /// ClickHouse says (an `UNKNOWN_STATUS_OF_INSERT`, 319, may still have applied).
    #[error("{0}")]
    Server(ChError),
    /// No answer within `timeout_ms`: the request may or may not have been applied.
    #[error("no answer from {what} within {timeout_ms} ms")]
    Timeout {
        /// The request.
        what: String,
        /// The client's timeout, ms.
        timeout_ms: u64,
    },
}

impl ChClientError {
    /// Whether the request may have been applied although it failed (a timeout, or
    /// ClickHouse's `UNKNOWN_STATUS_OF_INSERT`).
    pub fn is_ambiguous(&self) -> bool {
        match self {
            ChClientError::Timeout { .. } => true,
            ChClientError::Server(e) => e.code.number() == 319,
        }
    }
}

/// A ClickHouse server.
#[async_trait]
pub trait ClickHouse: Send + Sync {
    /// `CREATE TABLE` (a table that exists is an error, `TABLE_ALREADY_EXISTS`).
    ///
    /// # Errors
    /// [`ChClientError`].
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError>;

    /// `INSERT INTO table FORMAT JSONEachRow` with the insert's settings. Into a KeeperMap
    /// table the rows are written as one Keeper `multi` (non-strict: blind overwrite).
    ///
    /// # Errors
    /// [`ChClientError`]; an ambiguous error leaves any prefix of the insert's blocks
    /// applied.
    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError>;

    /// `SELECT * FROM table [FINAL]`, rows in column order.
    ///
    /// # Errors
    /// [`ChClientError`].
    async fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChClientError>;
}

/// KeeperMap tables used as a linearizable key-value store (models-reference F.5).
#[async_trait]
pub trait KeeperMap: Send + Sync {
    /// `SELECT * FROM table WHERE key = <key>`, with the row's Keeper version.
    ///
    /// # Errors
    /// [`ChClientError`] (`KEEPER_EXCEPTION` while Keeper is unreachable).
    async fn get(
        &self,
        table: &str,
        key: serde_json::Value,
    ) -> Result<Option<VersionedRow>, ChClientError>;

    /// Keeper's versioned write of `row`'s znode: only if its key's current version is
    /// `expected_version` (`None`: only if the key is new). Returns the new version.
    ///
    /// This is the Keeper request ClickHouse itself sends inside a strict-mode mutation
    /// ([`update_where`](Self::update_where)); a ClickHouse client cannot send it, because
    /// no statement takes a Keeper version from the client. A component that stands for a
    /// ClickHouse client uses `update_where` (or a strict-mode INSERT) instead.
    ///
    /// # Errors
    /// [`ChClientError`]; `KEEPER_EXCEPTION` with `BadVersion` or `NodeExists` when the
    /// condition fails (nothing changed).
    async fn put_if_version(
        &self,
        table: &str,
        row: serde_json::Value,
        expected_version: Option<i32>,
    ) -> Result<i32, ChClientError>;

    /// `ALTER TABLE table UPDATE <row's other columns> WHERE <key column> = key AND
    /// <column> = equals SETTINGS keeper_map_strict_mode = 1`, where `row` holds every
    /// column (its key column equal to `key`) and `column` is a column's position in the
    /// table.
    ///
    /// As `StorageKeeperMap::mutate` runs it (ClickHouse PR #48293, 23.4; the KeeperMap
    /// docs: with `keeper_map_strict_mode` "fetching and updating data will succeed only
    /// if it's executed atomically"): the server reads the key's row with its Keeper
    /// version, evaluates the WHERE, and writes the matching row with a set conditional on
    /// the version it read. A row that does not match is left alone and the statement
    /// still succeeds: ClickHouse does not say how many rows an `ALTER ... UPDATE`
    /// changed, so a caller that needs to know reads the row back. The default runs the
    /// server's two steps as two calls, [`get`](Self::get) then
    /// [`put_if_version`](Self::put_if_version) with the version read: they interleave
    /// with other writers as the server's two Keeper requests do.
    ///
    /// # Errors
    /// [`ChClientError`]; `KEEPER_EXCEPTION` with `BadVersion` when the row changed
    /// between the server's read and its write (nothing changed).
    async fn update_where(
        &self,
        table: &str,
        key: serde_json::Value,
        row: serde_json::Value,
        column: usize,
        equals: &ChValue,
    ) -> Result<(), ChClientError> {
        let Some(current) = self.get(table, key).await? else {
            return Ok(());
        };
        if current.row.get(column) != Some(equals) {
            return Ok(());
        }
        self.put_if_version(table, row, Some(current.version))
            .await
            .map(drop)
    }
}

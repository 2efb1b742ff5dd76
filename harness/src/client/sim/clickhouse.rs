//! The simulated ClickHouse client: RPC to the `clickhouse` node
//! ([`eosim_sim::clickhouse::service::serve_clickhouse`]) over eosim's network layer, so
//! the nemesis' kills, pauses, partitions and message faults between a task's node and the
//! clickhouse node apply to it.

use crate::client::clickhouse::{ChClientError, ClickHouse, KeeperMap};
use async_trait::async_trait;
use eosim_sim::clickhouse::keeper_map::VersionedRow;
use eosim_sim::clickhouse::model::InsertSummary;
use eosim_sim::clickhouse::service::{clickhouse_addr, ChReply, ChRequest, ChResponse};
use eosim_sim::clickhouse::types::{Insert, Row, TableDef};
use madsim::net::Endpoint;
use std::sync::Arc;
use std::time::Duration;

/// A client of the simulated clickhouse node; cloning shares the endpoint.
#[derive(Clone)]
pub struct SimClickHouse {
    endpoint: Arc<Endpoint>,
    timeout_ms: u64,
}

impl SimClickHouse {
    /// Binds a client endpoint on the current node; each request waits at most
    /// `timeout_ms` (the Java client's `socket_timeout`).
    ///
    /// # Errors
    /// The bind failed (the node is shutting down).
    pub async fn connect(timeout_ms: u64) -> std::io::Result<Self> {
        let endpoint = Endpoint::bind("0.0.0.0:0").await?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
            timeout_ms,
        })
    }

    async fn call(&self, request: ChRequest) -> Result<ChResponse, ChClientError> {
        let what = request_name(&request).to_string();
        let timeout = Duration::from_millis(self.timeout_ms);
        let reply: ChReply =
            eosim_sim::net::call(&self.endpoint, clickhouse_addr(), request, timeout)
                .await
                .map_err(|_| ChClientError::Timeout {
                    what,
                    timeout_ms: self.timeout_ms,
                })?;
        reply.map_err(ChClientError::Server)
    }
}

fn request_name(request: &ChRequest) -> &'static str {
    match request {
        ChRequest::CreateTable(_) => "CREATE TABLE",
        ChRequest::Insert(_) => "INSERT",
        ChRequest::Select { .. } => "SELECT",
        ChRequest::KeeperMapGet { .. } => "KeeperMap get",
        ChRequest::KeeperMapPutIfVersion { .. } => "KeeperMap put_if_version",
    }
}

fn unexpected(what: &str, response: ChResponse) -> ! {
    panic!("clickhouse node answered {what} with {response:?}")
}

#[async_trait]
impl ClickHouse for SimClickHouse {
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError> {
        match self.call(ChRequest::CreateTable(def)).await? {
            ChResponse::Ok => Ok(()),
            other => unexpected("CREATE TABLE", other),
        }
    }

    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError> {
        match self.call(ChRequest::Insert(insert)).await? {
            ChResponse::Inserted(summary) => Ok(summary),
            ChResponse::KeysWritten(n) => Ok(InsertSummary {
                blocks_total: 1,
                blocks_applied: usize::from(n > 0),
                ..InsertSummary::default()
            }),
            other => unexpected("INSERT", other),
        }
    }

    async fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChClientError> {
        let request = ChRequest::Select {
            table: table.to_string(),
            final_,
        };
        match self.call(request).await? {
            ChResponse::Rows(rows) => Ok(rows),
            other => unexpected("SELECT", other),
        }
    }
}

#[async_trait]
impl KeeperMap for SimClickHouse {
    async fn get(
        &self,
        table: &str,
        key: serde_json::Value,
    ) -> Result<Option<VersionedRow>, ChClientError> {
        let request = ChRequest::KeeperMapGet {
            table: table.to_string(),
            key,
        };
        match self.call(request).await? {
            ChResponse::Got(row) => Ok(row),
            other => unexpected("KeeperMap get", other),
        }
    }

    async fn put_if_version(
        &self,
        table: &str,
        row: serde_json::Value,
        expected_version: Option<i32>,
    ) -> Result<i32, ChClientError> {
        let request = ChRequest::KeeperMapPutIfVersion {
            table: table.to_string(),
            row,
            expected_version,
        };
        match self.call(request).await? {
            ChResponse::Version(v) => Ok(v),
            other => unexpected("KeeperMap put_if_version", other),
        }
    }
}

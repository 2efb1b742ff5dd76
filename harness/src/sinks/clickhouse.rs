//! The ClickHouse exactly-once sink of SPEC.md P1 (seed 000_6c41da7abcfb71c0), as a
//! [`SinkTask`](crate::connect::task::SinkTask).
//!
//! # Model
//! One state record per topic-partition in a KeeperMap table (`{min_offset, max_offset,
//! BEFORE|AFTER}`, plus the owner that wrote it). For each batch the task reads the record,
//! classifies the batch against it ([`plan::decide`]) and runs the plan's steps: set
//! BEFORE, insert, set AFTER, drop, or report to the dead-letter queue through the errant
//! record reporter. A case the variant does not cover fails the task
//! ([`ConnectError::Fatal`]) unless `tolerateStateMismatch=true`, which then drops what is
//! at or below the stored max and inserts the rest as a new batch.
//!
//! # Run by the Connect worker
//! The worker (`connect::worker`) polls, converts and calls `put`; the task keeps what it
//! accepted per partition until its plan ran, and returns from `pre_commit` only offsets
//! whose records are handled (inserted, dropped as already in, or reported). After a `put`
//! that handled records it calls `request_commit` on its [`SinkTaskContext`], so the
//! worker commits after every batch. The real connector does not: it leaves commits to
//! `offset.flush.interval.ms` (60 s by default) and relies on its state record to absorb
//! the larger redelivery. eosim commits per batch so the committed offset tracks the
//! state record and the field cases read as cases.md states them (F1: B starts from the
//! committed offset 100); the KeeperMap record, not the commit, decides what is inserted.
//!
//! # Fencing (variant `seed+token+fencing`)
//! Built from what ClickHouse offers a client (KeeperMap exposes no client-versioned
//! write): the state record carries its `owner`, and every write is conditional on it.
//! - `open` claims each partition: a record that does not exist is created by an INSERT
//!   with `keeper_map_strict_mode=1` (an existing key fails it: `KEEPER_EXCEPTION`, node
//!   exists); an existing one is taken over by `ALTER TABLE connect_state UPDATE owner =
//!   '<me>' WHERE key = '<tp>' AND owner = '<owner read>'` in strict mode
//!   ([`KeeperMap::update_where`]), then read back.
//! - every state write is `ALTER TABLE connect_state UPDATE min_offset = .., max_offset =
//!   .., state = .. WHERE key = '<tp>' AND owner = '<me>'` in strict mode, read back: a
//!   record that names another owner means this task was fenced.
//! - before an insert the task reads the record and checks the owner (a read, then the
//!   insert: not atomic, as nothing in ClickHouse makes an insert conditional on a
//!   KeeperMap row).
//!
//! When a state write or an insert finds another owner's record, the task drops what it
//! holds of the partition and rewinds it through [`SinkTaskContext::offset`] to the first
//! record it had not handled, as a sink does for records it could not write. If the
//! consumer group takes the partition away, `close` forgets it; if the task gets its
//! records again, it claims the partition anew before planning them.
//!
//! # Fault points
//! Between every two steps the task calls [`SinkHooks::fault_point`] with one of
//! [`FAULT_POINTS`] (and hits the coverage mark `fault-point:<name>`), so a scenario can
//! crash or stall the task at exactly that boundary, buggify-style.
//!
//! # Configuration (clickhouse-kafka-connect's names)
//! `exactlyOnce` (must be `true`), `hostname`, `port`, `database`, `username`, `password`,
//! `errors.tolerance`, `tolerateStateMismatch`; eosim's own: `variant` (see
//! [`plan::Variant`]), `table` (default `kafka2ck`), `state.table` (default
//! `connect_state`), `max_insert_block_size` (a ClickHouse insert setting).

pub mod plan;

use crate::client::clickhouse::{ChClientError, ClickHouse, KeeperMap};
use crate::connect::task::{ConnectError, SinkRecord, SinkTaskContext};
use crate::mark;
use async_trait::async_trait;
use eosim_sim::clickhouse::types::{Column, ColumnType, Insert, TableDef, Value as ChValue};
use eosim_sim::clickhouse::ErrorCode;
use eosim_sim::kafka::{Offset, TopicPartition};
use plan::{Phase, Range, StateRecord, Variant};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The step boundaries of the state machine, in order.
pub const FAULT_POINTS: [&str; 5] = [
    "before-before",
    "between-before-and-insert",
    "mid-insert",
    "between-insert-and-after",
    "after-after",
];

/// `connector.class` of the sink (clickhouse-kafka-connect's).
pub const CONNECTOR_CLASS: &str = "com.clickhouse.kafka.connect.ClickHouseSinkConnector";

/// The sink's own connector keys, besides Connect's framework keys.
pub const KEYS: &[&str] = &[
    "exactlyOnce",
    "hostname",
    "port",
    "database",
    "username",
    "password",
    "tolerateStateMismatch",
    "variant",
    "table",
    "state.table",
    "max_insert_block_size",
    "min_insert_block_size_rows",
    "min_insert_block_size_bytes",
];

/// The sink's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClickHouseSinkConfig {
    /// `exactlyOnce`.
    pub exactly_once: bool,
    /// `hostname`.
    pub hostname: String,
    /// `port`.
    pub port: u16,
    /// `database`.
    pub database: String,
    /// `username`.
    pub username: String,
    /// `password`.
    pub password: String,
    /// `errors.tolerance` is `all` (`ClickHouseSinkConfig.isErrorsTolerance`): what
    /// `doLogic` throws (not retriable) sends the partition's records to the errant record
    /// reporter and `put` goes on, instead of failing the task.
    pub errors_tolerance_all: bool,
    /// Whether the worker gives the task an errant record reporter: Connect creates one
    /// only when `errors.deadletterqueue.topic.name` is set or `errors.log.enable=true`
    /// (apache/kafka `SinkConnectorConfig.enableErrantRecordReporter`, used by
    /// `Worker.createWorkerErrantRecordReporter`); without one
    /// `context.errantRecordReporter()` is null and the connector reports to
    /// `devNullErrorReporter()` (`ClickHouseSinkTask.createErrorReporter`): the records
    /// are dropped silently.
    pub errant_reporter: bool,
    /// `tolerateStateMismatch`.
    pub tolerate_state_mismatch: bool,
    /// The state machine variant.
    pub variant: Variant,
    /// The target table.
    pub table: String,
    /// The KeeperMap state table.
    pub state_table: String,
    /// `max_insert_block_size` for data inserts.
    pub max_insert_block_size: Option<usize>,
    /// `min_insert_block_size_rows` for data inserts (squashing; 0 with `_bytes` 0: off).
    pub min_insert_block_size_rows: Option<u64>,
    /// `min_insert_block_size_bytes` for data inserts.
    pub min_insert_block_size_bytes: Option<u64>,
}

impl ClickHouseSinkConfig {
    /// Reads the connector properties.
    ///
    /// ## Default values
    /// `hostname=clickhouse`, `port=8123`, `database=default`, `username=default`,
    /// `password=` (empty), `errors.tolerance=none`, `tolerateStateMismatch=false`, no
    /// errant record reporter (Connect's `errors.deadletterqueue.topic.name` empty and
    /// `errors.log.enable=false`),
    /// `variant=seed`, `table=kafka2ck`, `state.table=connect_state`.
    ///
    /// # Errors
    /// [`ConnectError::Fatal`] naming the property that is malformed, or
    /// `exactlyOnce` not `true` (this task implements only the exactly-once mode).
    pub fn from_props(props: &BTreeMap<String, String>) -> Result<Self, ConnectError> {
        let get = |k: &str, d: &str| props.get(k).cloned().unwrap_or_else(|| d.to_string());
        let flag = |k: &str| match get(k, "false").as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(ConnectError::Fatal(format!(
                "{k}: expected true|false, got {other}"
            ))),
        };
        let variant: Variant = serde_json::from_value(json!(get("variant", "seed")))
            .map_err(|e| ConnectError::Fatal(format!("variant: {e}")))?;
        let port = get("port", "8123");
        let config = Self {
            exactly_once: flag("exactlyOnce")?,
            hostname: get("hostname", "clickhouse"),
            port: port
                .parse()
                .map_err(|_| ConnectError::Fatal(format!("port: {port}")))?,
            database: get("database", "default"),
            username: get("username", "default"),
            password: get("password", ""),
            errors_tolerance_all: match get("errors.tolerance", "none").trim() {
                t if t.eq_ignore_ascii_case("all") => true,
                t if t.eq_ignore_ascii_case("none") => false,
                other => {
                    return Err(ConnectError::Fatal(format!(
                        "errors.tolerance: expected none|all, got {other}"
                    )))
                }
            },
            errant_reporter: !get("errors.deadletterqueue.topic.name", "")
                .trim()
                .is_empty()
                || flag("errors.log.enable")?,
            tolerate_state_mismatch: flag("tolerateStateMismatch")?,
            variant,
            table: get("table", "kafka2ck"),
            state_table: get("state.table", "connect_state"),
            max_insert_block_size: props
                .get("max_insert_block_size")
                .and_then(|v| v.parse().ok()),
            min_insert_block_size_rows: props
                .get("min_insert_block_size_rows")
                .and_then(|v| v.parse().ok()),
            min_insert_block_size_bytes: props
                .get("min_insert_block_size_bytes")
                .and_then(|v| v.parse().ok()),
        };
        if !config.exactly_once {
            return Err(ConnectError::Fatal(
                "exactlyOnce: only `true` is implemented".into(),
            ));
        }
        Ok(config)
    }
}

/// The KeeperMap state table: `connect_state(key String, min_offset Int64, max_offset
/// Int64, state String, owner String) ENGINE=KeeperMap('/eosim_connect_state') PRIMARY
/// KEY(key)`.
pub fn state_table_def(name: &str) -> TableDef {
    let columns = vec![
        Column::new("key", ColumnType::String),
        Column::new("min_offset", ColumnType::Int64),
        Column::new("max_offset", ColumnType::Int64),
        Column::new("state", ColumnType::String),
        Column::new("owner", ColumnType::String),
    ];
    TableDef::keeper_map(name, columns, &format!("/eosim_{name}"), "key")
}

/// Creates the target table `target` and the KeeperMap state table `state_table` unless
/// they exist, as the connector's documentation asks its user to before starting it.
///
/// # Errors
/// [`ConnectError::Retriable`] when ClickHouse or Keeper is unreachable; fatal for a
/// definition the server refuses.
pub async fn create_tables<C: ClickHouse>(
    client: &C,
    target: TableDef,
    state_table: &str,
) -> Result<(), ConnectError> {
    for def in [target, state_table_def(state_table)] {
        match client.create_table(def).await {
            Ok(()) => {}
            Err(ChClientError::Server(e)) if e.code == ErrorCode::TableAlreadyExists => {}
            Err(e) => return Err(connect_error(&e)),
        }
    }
    Ok(())
}

/// What the task lets its runner observe and break.
#[async_trait]
pub trait SinkHooks: Send + Sync {
    /// Called at each step boundary ([`FAULT_POINTS`]); may crash or stall the task.
    async fn fault_point(&self, point: &'static str);
    /// An insert of `rows` (read from `tp`) into the target is about to be sent.
    fn inserting(&self, tp: &TopicPartition, rows: &[serde_json::Value]);
    /// The insert of `rows` (read from `tp`) into the target returned `result`
    /// ([`ChClientError::is_ambiguous`] tells an unknown outcome from a refusal).
    fn inserted(
        &self,
        tp: &TopicPartition,
        rows: &[serde_json::Value],
        result: &Result<(), ChClientError>,
    );
}

/// Hooks that do nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

#[async_trait]
impl SinkHooks for NoHooks {
    async fn fault_point(&self, _point: &'static str) {}
    fn inserting(&self, _tp: &TopicPartition, _rows: &[serde_json::Value]) {}
    fn inserted(
        &self,
        _tp: &TopicPartition,
        _rows: &[serde_json::Value],
        _result: &Result<(), ChClientError>,
    ) {
    }
}

/// A state record as read, with its owner (`None`s: no record).
#[derive(Debug, Clone, Default, PartialEq)]
struct Stored {
    record: Option<StateRecord>,
    owner: Option<String>,
}

/// Why a partition's steps stopped.
enum Stop {
    /// The task must report this to the worker.
    Connect(ConnectError),
    /// Another owner wrote the state record: this task no longer owns the partition.
    Fenced,
}

impl From<ChClientError> for Stop {
    fn from(e: ChClientError) -> Self {
        Stop::Connect(connect_error(&e))
    }
}

/// Retriable for what a retry can fix (timeouts, Keeper, read-only, unknown status);
/// fatal otherwise (a row the table refuses).
pub fn connect_error(e: &ChClientError) -> ConnectError {
    let retriable = match e {
        ChClientError::Timeout { .. } => true,
        ChClientError::Server(s) => matches!(
            s.code,
            ErrorCode::KeeperException
                | ErrorCode::TableIsReadOnly
                | ErrorCode::UnknownStatusOfInsert
                | ErrorCode::NoZookeeper
        ),
    };
    if retriable {
        ConnectError::Retriable(e.to_string())
    } else {
        ConnectError::Fatal(e.to_string())
    }
}

/// The sink task over a ClickHouse client `C`.
pub struct ClickHouseSinkTask<C> {
    config: ClickHouseSinkConfig,
    client: C,
    owner: String,
    hooks: Arc<dyn SinkHooks>,
    /// Records accepted by `put` and not yet inserted, dropped or reported.
    pending: BTreeMap<TopicPartition, Vec<SinkRecord>>,
    /// Next offset per partition whose records are all handled.
    committable: BTreeMap<TopicPartition, Offset>,
    /// Fencing: partitions another owner took; their next records re-claim them.
    fenced: BTreeSet<TopicPartition>,
    /// The worker's context (given by `initialize`): rewinds and commit requests.
    context: SinkTaskContext,
}

impl<C: ClickHouse + KeeperMap> ClickHouseSinkTask<C> {
    /// A task named `owner` (unique per task instance) writing through `client`.
    pub fn new(
        config: ClickHouseSinkConfig,
        client: C,
        owner: String,
        hooks: Arc<dyn SinkHooks>,
    ) -> Self {
        Self {
            config,
            client,
            owner,
            hooks,
            pending: BTreeMap::new(),
            committable: BTreeMap::new(),
            fenced: BTreeSet::new(),
            context: SinkTaskContext::new(),
        }
    }

    fn key(tp: &TopicPartition) -> String {
        format!("{}-{}", tp.topic, tp.partition)
    }

    async fn read_state(&self, tp: &TopicPartition) -> Result<Stored, ChClientError> {
        let got = self
            .client
            .get(&self.config.state_table, json!(Self::key(tp)))
            .await?;
        let Some(got) = got else {
            return Ok(Stored::default());
        };
        let int = |i: usize| match &got.row[i] {
            ChValue::Int(v) => *v,
            other => panic!("state column {i} is Int64, found {other:?}"),
        };
        let text = |i: usize| match &got.row[i] {
            ChValue::String(s) => s.clone(),
            other => panic!("state column {i} is String, found {other:?}"),
        };
        let phase = match text(3).as_str() {
            "BEFORE" => Some(Phase::Before),
            "AFTER" => Some(Phase::After),
            _ => None,
        };
        let record = phase.map(|phase| StateRecord {
            range: Range::new(int(1), int(2)),
            phase,
        });
        Ok(Stored {
            record,
            owner: Some(text(4)),
        })
    }

    /// Fencing: whether `seen` is still this task's record (it names this owner).
    fn still_owner(&self, seen: &Stored) -> bool {
        seen.owner.as_deref() == Some(self.owner.as_str())
    }

    fn state_row(
        &self,
        tp: &TopicPartition,
        record: Option<StateRecord>,
        owner: &str,
    ) -> serde_json::Value {
        let (min, max, state) = match record {
            Some(r) => (r.range.min, r.range.max, r.phase.name()),
            None => (-1, -1, "NONE"),
        };
        json!({"key": Self::key(tp), "min_offset": min, "max_offset": max,
               "state": state, "owner": owner})
    }

    /// Stores `record`: a blind KeeperMap INSERT, or (fencing) a strict-mode `ALTER TABLE
    /// ... UPDATE ... WHERE key = .. AND owner = '<me>'` read back.
    async fn write_state(
        &mut self,
        tp: &TopicPartition,
        record: Option<StateRecord>,
    ) -> Result<(), Stop> {
        let row = self.state_row(tp, record, &self.owner);
        let table = self.config.state_table.clone();
        if !self.config.variant.fenced() {
            self.client.insert(Insert::new(&table, vec![row])).await?;
            return Ok(());
        }
        let me = ChValue::String(self.owner.clone());
        let key = json!(Self::key(tp));
        let updated = self
            .client
            .update_where(&table, key, row, OWNER_COLUMN, &me)
            .await;
        match updated {
            Ok(()) => {}
            Err(ChClientError::Server(e)) if e.keeper_error.is_some_and(is_condition) => {
                // The record changed between the server's read and its write.
                mark!("fencing:state-write-conflict");
            }
            Err(e) => return Err(e.into()),
        }
        let seen = self.read_state(tp).await?;
        if !self.still_owner(&seen) {
            mark!("fencing:state-write-refused");
            return Err(Stop::Fenced);
        }
        if seen.record != record {
            // Ours, but not what we wrote: the write conflicted with our own earlier one.
            return Err(Stop::Connect(ConnectError::Retriable(format!(
                "{tp}: state write not applied"
            ))));
        }
        Ok(())
    }

    /// Fencing: takes ownership of `tp`: a strict-mode INSERT of a new record, or a
    /// strict-mode update of the owner conditional on the owner read; then a read-back.
    async fn claim(&mut self, tp: &TopicPartition) -> Result<(), ConnectError> {
        let table = self.config.state_table.clone();
        let seen = self.read_state(tp).await.map_err(|e| connect_error(&e))?;
        let row = self.state_row(tp, seen.record, &self.owner);
        let written = match &seen.owner {
            None => {
                let mut insert = Insert::new(&table, vec![row]);
                insert.settings.keeper_map_strict_mode = Some(true);
                self.client.insert(insert).await.map(drop)
            }
            Some(owner) => {
                let seen_owner = ChValue::String(owner.clone());
                let key = json!(Self::key(tp));
                let update = self
                    .client
                    .update_where(&table, key, row, OWNER_COLUMN, &seen_owner);
                update.await
            }
        };
        match written {
            Ok(()) => {}
            Err(ChClientError::Server(e)) if e.keeper_error.is_some_and(is_condition) => {}
            Err(e) => return Err(connect_error(&e)),
        }
        let now = self.read_state(tp).await.map_err(|e| connect_error(&e))?;
        if !self.still_owner(&now) {
            mark!("fencing:claim-raced");
            return Err(ConnectError::Retriable(format!("{tp}: claim raced")));
        }
        Ok(())
    }
}

/// The position of `owner` in [`state_table_def`].
const OWNER_COLUMN: usize = 4;

fn is_condition(e: eosim_sim::clickhouse::keeper::KeeperError) -> bool {
    use eosim_sim::clickhouse::keeper::KeeperError;
    matches!(
        e,
        KeeperError::BadVersion | KeeperError::NodeExists | KeeperError::NoNode
    )
}

mod run;

#[cfg(test)]
mod tests;

//! The JDBC sink into PostgreSQL (and PostgreSQL-compatible warehouses such as ADBPG),
//! with the configuration of the seed's `Adb4PgSinkConnector` (a fork of Confluent's
//! `JdbcSinkConnector`).
//!
//! # Behaviour
//! - Records are Debezium envelopes or flattened rows ([`crate::connect::debezium`]).
//! - `put` writes all its records in one database transaction
//!   ([`PostgresClient::execute_batch`]), one statement per record (two for an update that
//!   changes the key): Confluent's `JdbcDbWriter.write` runs on a connection with
//!   autocommit off, flushes `batch.size` records at a time (`executeBatch`) and commits
//!   once at the end of the `put` (confluentinc/kafka-connect-jdbc
//!   `sink/JdbcDbWriter.java`). `batch.size` thus only splits the statements of that one
//!   transaction, which the model sends in one request.
//! - `writeMode` (the fork's key; Confluent's `JdbcSinkConnector` calls it `insert.mode`,
//!   and either is accepted): `insert`: `c` and flattened rows are plain `INSERT`s (a
//!   replayed record fails with `23505`), `u` is `UPDATE ... WHERE pk = before's key`.
//!   `upsert`:
//!   `INSERT ... ON CONFLICT (pk) DO UPDATE SET <other columns> = EXCLUDED.<column>`, and
//!   a `u` whose key changes first deletes the old key. `op=r` is always an upsert.
//! - `d` deletes by `before`'s key; a tombstone deletes by the record key when
//!   `delete.enabled=true` and is skipped otherwise; `t` truncates when
//!   `truncate.enabled=true` (Debezium JDBC sink's name) and is skipped otherwise.
//! - A statement failing with a data error (SQLSTATE class `22`, `23502` not-null) names
//!   its record: it is reported through the errant-record reporter (KIP-610) with its
//!   SQLSTATE and message, and the put's transaction is retried without it. An unknown `op`
//!   is reported the same way. With `errors.tolerance=none` the reporter fails the task.
//! - Any other database error (`23505` in insert mode, a timeout, a lost connection) is
//!   retried `max.retries` times as a `RetriableException`, asking the worker through
//!   `SinkTaskContext::timeout(retry.backoff.ms)` to redeliver the same records that much
//!   later (`JdbcSinkTask.put`; the worker keeps polling meanwhile); then the task fails.
//! - `auto.create=true` creates the table from `col.names`, `col.types` and `pk.fields`
//!   before the task's first write, once per task (`DbStructure.createOrAmendIfNecessary`
//!   and its cached `TableDefinitions`); `open` does nothing, as Confluent's task does not
//!   override it.
//!
//! - Bug switch (cases.md F5): `eosim.bug.ignore.tombstones=true` skips tombstones even
//!   with `delete.enabled=true`, as the faulty sink did; the change-data checker, which
//!   reads the configuration's intent, then reports the row that was never deleted.
//!
//! ## Default values
//! `writeMode` / `insert.mode` insert, `batch.size` 3000, `auto.create` false, `delete.enabled` false,
//! `truncate.enabled` false, `max.retries` 10, `retry.backoff.ms` 3000.

use crate::client::postgres::{PgClientError, PostgresClient};
use crate::connect::config::{self, ConfigError};
use crate::connect::debezium::{key_of, key_row, parse_change, Change, JsonRow};
use crate::connect::task::{
    ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
};
use crate::history::refs::id_of;
use crate::history::RecordRef;
use crate::sinks::{completion, NoWriteLog, WriteLog};
use async_trait::async_trait;
use eosim_sim::kafka::{Offset, TopicPartition};
use eosim_sim::postgres::{
    Column, ColumnType, CreateTable, Insert, OnConflict, SqlState, Statement, Value,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The connector classes this sink answers to.
pub const CONNECTOR_CLASSES: &[&str] = &[
    "io.confluent.connect.jdbc.Adb4PgSinkConnector",
    "io.confluent.connect.jdbc.JdbcSinkConnector",
];

/// The sink's own configuration keys.
pub const KEYS: &[&str] = &[
    "connection.url",
    "connection.user",
    "connection.password",
    "col.names",
    "col.types",
    "pk.fields",
    "target.tablename",
    "table.name.format",
    "batch.size",
    "writeMode",
    "insert.mode",
    "auto.create",
    "delete.enabled",
    "truncate.enabled",
    "max.retries",
    "retry.backoff.ms",
    "eosim.bug.ignore.tombstones",
];

/// `writeMode` (the seed's `Adb4PgSinkConnector`), or `insert.mode` under its name in
/// Confluent's `JdbcSinkConfig` (`INSERT_MODE_CONFIG`, default `insert`; its third value
/// `update` is not modelled and refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Plain `INSERT` (the seed's default): at-least-once.
    Insert,
    /// `INSERT ... ON CONFLICT DO UPDATE`: idempotent with a primary key.
    Upsert,
}

/// The sink's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct JdbcSinkConfig {
    /// `connection.url` (`jdbc:postgresql://host:port/db`).
    pub connection_url: String,
    /// `connection.user`.
    pub connection_user: String,
    /// The target table: `target.tablename`, else `table.name.format` with `${topic}`
    /// replaced by the first topic.
    pub table: String,
    /// `col.names`; empty = the record's fields.
    pub col_names: Vec<String>,
    /// `col.types`, parsed, one per `col.names` entry.
    pub col_types: Vec<ColumnType>,
    /// `pk.fields`.
    pub pk_fields: Vec<String>,
    /// `batch.size`: records per `executeBatch` within a put's one transaction.
    pub batch_size: usize,
    /// `writeMode`, or Confluent's `insert.mode`.
    pub write_mode: WriteMode,
    /// `auto.create`.
    pub auto_create: bool,
    /// `delete.enabled`: tombstones delete.
    pub delete_enabled: bool,
    /// `truncate.enabled`: `op=t` truncates.
    pub truncate_enabled: bool,
    /// `max.retries`.
    pub max_retries: u32,
    /// `retry.backoff.ms`.
    pub retry_backoff_ms: u64,
    /// Bug switch `eosim.bug.ignore.tombstones` (cases.md F5's reported outcome "row 1
    /// never deleted"): tombstones are skipped even with `delete.enabled=true`.
    pub bug_ignore_tombstones: bool,
}

/// The write mode from `writeMode` and Confluent's `insert.mode`
/// (confluentinc/kafka-connect-jdbc `sink/JdbcSinkConfig.java`, `InsertMode`): either
/// key, or both if they agree; `insert` when neither is set.
fn parse_write_mode(raw: &BTreeMap<String, String>) -> Result<WriteMode, ConfigError> {
    let mode = |key: &str, value: &str| match value {
        "insert" => Ok(WriteMode::Insert),
        "upsert" => Ok(WriteMode::Upsert),
        other => Err(config::invalid(key, other, "insert or upsert")),
    };
    let write_mode = raw
        .get("writeMode")
        .map(|v| mode("writeMode", v))
        .transpose()?;
    let insert_mode = raw
        .get("insert.mode")
        .map(|v| mode("insert.mode", v))
        .transpose()?;
    match (write_mode, insert_mode) {
        (Some(w), Some(i)) if w != i => Err(config::invalid(
            "insert.mode",
            config::get(raw, "insert.mode", ""),
            &format!(
                "the same mode as writeMode ({}), or only one of the two keys",
                config::get(raw, "writeMode", "")
            ),
        )),
        (w, i) => Ok(w.or(i).unwrap_or(WriteMode::Insert)),
    }
}

fn list(raw: &BTreeMap<String, String>, key: &str) -> Vec<String> {
    config::get(raw, key, "")
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

impl JdbcSinkConfig {
    /// Parses the sink's keys of a connector configuration.
    ///
    /// # Errors
    /// A missing `connection.url`, an unknown `writeMode` or `insert.mode` (or both set to
    /// different modes), a `col.types` entry that is not a type, `col.names` and
    /// `col.types` of different lengths, no table name.
    pub fn parse(raw: &BTreeMap<String, String>, topics: &[String]) -> Result<Self, ConfigError> {
        let connection_url = config::get(raw, "connection.url", "").to_string();
        if !connection_url.starts_with("jdbc:postgresql://") {
            let expected = "jdbc:postgresql://host:port/database";
            return Err(config::invalid("connection.url", &connection_url, expected));
        }
        let col_names = list(raw, "col.names");
        let col_types = parse_types(raw)?;
        if !col_types.is_empty() && col_types.len() != col_names.len() {
            let expected = format!("{} types, one per col.names entry", col_names.len());
            return Err(config::invalid(
                "col.types",
                config::get(raw, "col.types", ""),
                &expected,
            ));
        }
        let write_mode = parse_write_mode(raw)?;
        let topic = topics.first().cloned().unwrap_or_default();
        let format = config::get(raw, "table.name.format", "${topic}").replace("${topic}", &topic);
        let table = config::get(raw, "target.tablename", &format).to_string();
        let batch_size: usize = config::number(raw, "batch.size", "3000")?;
        if batch_size == 0 {
            return Err(config::invalid("batch.size", "0", "at least 1"));
        }
        Ok(Self {
            connection_url,
            connection_user: config::get(raw, "connection.user", "").to_string(),
            table,
            col_names,
            col_types,
            pk_fields: list(raw, "pk.fields"),
            batch_size,
            write_mode,
            auto_create: config::boolean(raw, "auto.create", "false")?,
            delete_enabled: config::boolean(raw, "delete.enabled", "false")?,
            truncate_enabled: config::boolean(raw, "truncate.enabled", "false")?,
            max_retries: config::number(raw, "max.retries", "10")?,
            retry_backoff_ms: config::number(raw, "retry.backoff.ms", "3000")?,
            bug_ignore_tombstones: config::boolean(raw, "eosim.bug.ignore.tombstones", "false")?,
        })
    }

    /// The `CREATE TABLE IF NOT EXISTS` that `auto.create` runs.
    pub fn create_table(&self) -> Statement {
        let columns = self
            .col_names
            .iter()
            .zip(&self.col_types)
            .map(|(n, t)| Column::new(n.clone(), *t))
            .collect();
        Statement::CreateTable(CreateTable {
            name: self.table.clone(),
            columns,
            primary_key: self.pk_fields.clone(),
            if_not_exists: true,
        })
    }
}

/// `col.types`, each through [`ColumnType::parse`]; the seed's `doublepericision` typo is
/// read as `double precision` and `timestamp` as `timestamp with time zone` (the model has
/// no zone-less timestamp).
fn parse_types(raw: &BTreeMap<String, String>) -> Result<Vec<ColumnType>, ConfigError> {
    list(raw, "col.types")
        .iter()
        .map(|t| {
            let name = match t.to_ascii_lowercase().as_str() {
                "doublepericision" | "doubleprecision" => "double precision".to_string(),
                "timestamp" => "timestamp with time zone".to_string(),
                _ => t.clone(),
            };
            ColumnType::parse(&name)
                .map_err(|e| config::invalid("col.types", t, &format!("a type ({})", e.message)))
        })
        .collect()
}

/// A record as the history knows it: its `eosim.id` header, key text, source position.
fn record_ref(record: &SinkRecord) -> RecordRef {
    RecordRef {
        id: id_of(&record.headers),
        key: record.key.as_ref().map(|k| match k {
            serde_json::Value::String(s) => s.clone(),
            // The bytes `Display` prints, without its fmt machinery (a hot path).
            other => serde_json::to_string(other).expect("JSON values serialize"),
        }),
        tp: record.tp.clone(),
        offset: record.offset,
    }
}

/// What a database error means for the record that caused it.
fn is_data_error(code: SqlState) -> bool {
    code.code().starts_with("22") || code == SqlState::NotNullViolation
}

/// The sink task.
pub struct JdbcSinkTask {
    config: JdbcSinkConfig,
    client: Box<dyn PostgresClient>,
    retries_left: u32,
    /// The table's definition is known (`DbStructure`'s `TableDefinitions` cache): created
    /// or found by this task's first write, not looked up again while the task lives.
    table_known: bool,
    writes: Arc<dyn WriteLog>,
    context: Option<SinkTaskContext>,
}

impl JdbcSinkTask {
    /// A task writing through `client`, reporting its write attempts nowhere.
    pub fn new(config: JdbcSinkConfig, client: Box<dyn PostgresClient>) -> Self {
        let retries_left = config.max_retries;
        Self {
            config,
            client,
            retries_left,
            table_known: false,
            writes: Arc::new(NoWriteLog),
            context: None,
        }
    }

    /// The same task reporting each put's transaction to `writes`: its records by
    /// `eosim.id` header and source position, completed `ok` (committed), `fail` (the
    /// server refused a statement or the transaction rolled back: `23505`, a data error,
    /// a lost connection before the request left) or `info` (a timeout: the `COMMIT` may
    /// have been applied).
    pub fn with_write_log(mut self, writes: Arc<dyn WriteLog>) -> Self {
        self.writes = writes;
        self
    }

    fn columns_of<'a>(&'a self, row: &'a JsonRow) -> Vec<String> {
        if self.config.col_names.is_empty() {
            row.keys().cloned().collect()
        } else {
            self.config.col_names.clone()
        }
    }

    fn insert(&self, row: &JsonRow, upsert: bool) -> Statement {
        let columns = self.columns_of(row);
        if row.keys().any(|k| !columns.contains(k)) {
            // Schema drift under fixed `col.names`: the new field is not written.
            crate::mark!("jdbc:field-dropped-fixed-columns");
        }
        let values = columns
            .iter()
            .map(|c| row.get(c).map_or(Value::Null, Value::from_json))
            .collect();
        let on_conflict = if upsert && !self.config.pk_fields.is_empty() {
            let set = columns
                .iter()
                .filter(|c| !self.config.pk_fields.contains(c))
                .cloned();
            OnConflict::DoUpdate {
                conflict_target: self.config.pk_fields.clone(),
                set: set.collect(),
            }
        } else {
            OnConflict::None
        };
        Statement::Insert(Insert {
            table: self.config.table.clone(),
            columns,
            rows: vec![values],
            on_conflict,
        })
    }

    fn key_values(&self, row: &JsonRow) -> Result<Vec<Value>, String> {
        let pk = &self.config.pk_fields;
        if pk.is_empty() {
            return Err("pk.fields is empty: cannot update or delete by key".into());
        }
        pk.iter()
            .map(|f| match row.get(f) {
                Some(v) if !v.is_null() => Ok(Value::from_json(v)),
                _ => Err(format!("key field `{f}` is missing or null")),
            })
            .collect()
    }

    fn delete(&self, row: &JsonRow) -> Result<Statement, String> {
        let where_pk = self.key_values(row)?;
        Ok(Statement::Delete {
            table: self.config.table.clone(),
            where_pk,
        })
    }

    /// The statements one record becomes (none for a skipped tombstone or truncate).
    ///
    /// # Errors
    /// Why the record cannot be applied (it is then an errant record).
    pub fn statements(&self, record: &SinkRecord) -> Result<Vec<Statement>, String> {
        let upsert = self.config.write_mode == WriteMode::Upsert;
        let change = parse_change(record.key.as_ref(), record.value.as_ref())?;
        let statements = match change {
            Change::Create { after } | Change::Row { row: after } => {
                vec![self.insert(&after, upsert)]
            }
            Change::Read { after } => vec![self.insert(&after, true)],
            Change::Update { before, after } => self.update(before.as_ref(), &after, upsert)?,
            Change::Delete { before } => {
                crate::mark!("jdbc:delete-applied");
                vec![self.delete(&before)?]
            }
            Change::Tombstone { key }
                if self.config.delete_enabled && !self.config.bug_ignore_tombstones =>
            {
                crate::mark!("jdbc:tombstone-delete");
                let row = key
                    .as_ref()
                    .and_then(|k| key_row(k, &self.config.pk_fields))
                    .ok_or("a tombstone without a usable record key")?;
                vec![self.delete(&row)?]
            }
            Change::Tombstone { .. } => {
                crate::mark!("jdbc:tombstone-skipped");
                Vec::new()
            }
            Change::Truncate if self.config.truncate_enabled => {
                crate::mark!("jdbc:truncate-applied");
                vec![Statement::Truncate {
                    table: self.config.table.clone(),
                }]
            }
            Change::Truncate => {
                crate::mark!("jdbc:truncate-skipped");
                Vec::new()
            }
        };
        Ok(statements)
    }

    fn update(
        &self,
        before: Option<&JsonRow>,
        after: &JsonRow,
        upsert: bool,
    ) -> Result<Vec<Statement>, String> {
        let pk = &self.config.pk_fields;
        let old_key = before.and_then(|b| key_of(b, pk));
        let key_changes = old_key.is_some() && old_key != key_of(after, pk);
        if upsert {
            let mut out = Vec::new();
            if key_changes {
                out.push(self.delete(before.expect("old_key came from before"))?);
            }
            out.push(self.insert(after, true));
            return Ok(out);
        }
        let target = if old_key.is_some() {
            before.expect("checked")
        } else {
            after
        };
        let where_pk = self.key_values(target)?;
        let set = self
            .columns_of(after)
            .into_iter()
            .map(|c| {
                let v = after.get(&c).map_or(Value::Null, Value::from_json);
                (c, v)
            })
            .collect();
        Ok(vec![Statement::Update {
            table: self.config.table.clone(),
            set,
            where_pk,
        }])
    }

    /// `JdbcDbWriter.write`: the put's records in one transaction, reporting and dropping
    /// errant records until it commits.
    async fn write(
        &mut self,
        mut chunk: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        loop {
            let mut statements = Vec::new();
            let mut owner = Vec::new();
            let mut errant = None;
            for (i, record) in chunk.iter().enumerate() {
                match self.statements(record) {
                    Ok(s) => {
                        owner.extend(std::iter::repeat_n(i, s.len()));
                        statements.extend(s);
                    }
                    Err(e) => {
                        errant = Some((i, e));
                        break;
                    }
                }
            }
            if let Some((i, error)) = errant {
                let record = chunk.remove(i);
                reporter.report(&record, &error)?;
                continue;
            }
            if statements.is_empty() {
                return Ok(());
            }
            self.ensure_table().await?;
            let rows: Vec<RecordRef> = chunk.iter().map(record_ref).collect();
            self.writes.invoked(&rows);
            let result = self.client.execute_batch(statements).await;
            let (kind, error) = completion(&result, PgClientError::is_ambiguous);
            self.writes.completed(&rows, kind, error);
            match result {
                Ok(_) => {
                    self.retries_left = self.config.max_retries;
                    return Ok(());
                }
                Err(PgClientError::Db {
                    index: Some(index),
                    error,
                }) if is_data_error(error.code) && index < owner.len() => {
                    crate::mark!("jdbc:batch-rolled-back");
                    crate::mark!("jdbc:data-error-record-reported");
                    let record = chunk.remove(owner[index]);
                    let text = format!("SQLSTATE {}: {}", error.code.code(), error.message);
                    reporter.report(&record, &text)?;
                }
                Err(e) => return Err(self.retry_or_fail(e).await),
            }
        }
    }

    /// `auto.create` as Confluent's `JdbcDbWriter.write` does it through
    /// `DbStructure.createOrAmendIfNecessary` (confluentinc/kafka-connect-jdbc
    /// `sink/DbStructure.java`): before the first statement of the task's first write, a
    /// `CREATE TABLE IF NOT EXISTS`; the definition is then cached for the task's life, so
    /// later writes, and partitions opened by a rebalance, cost no round trip.
    ///
    /// # Errors
    /// A failed `CREATE` is retried or fails the task as a failed write is.
    async fn ensure_table(&mut self) -> Result<(), ConnectError> {
        if self.table_known || !self.config.auto_create {
            return Ok(());
        }
        match self.client.execute(self.config.create_table()).await {
            Ok(_) => {
                self.table_known = true;
                Ok(())
            }
            Err(e) => Err(self.retry_or_fail(e).await),
        }
    }

    async fn retry_or_fail(&mut self, error: PgClientError) -> ConnectError {
        mark_write_error(&error);
        if self.retries_left == 0 {
            crate::mark!("jdbc:retries-exhausted");
            return ConnectError::Fatal(format!(
                "Exceeded max retries ({}) writing to {}: {error}",
                self.config.max_retries, self.config.table
            ));
        }
        self.retries_left -= 1;
        crate::mark!("jdbc:batch-retry");
        match &self.context {
            Some(context) => context.timeout(self.config.retry_backoff_ms),
            // Outside a worker nothing redelivers later: wait here instead.
            None => tokio::time::sleep(Duration::from_millis(self.config.retry_backoff_ms)).await,
        }
        ConnectError::Retriable(error.to_string())
    }
}

/// Coverage marks of a failed batch write: a server error rolled the whole transaction
/// back (23505 and 40P01 named), a timeout left its commit's outcome unknown.
fn mark_write_error(error: &PgClientError) {
    match error {
        PgClientError::Db { error, .. } => {
            crate::mark!("jdbc:batch-rolled-back");
            match error.code {
                SqlState::UniqueViolation => crate::mark!("jdbc:unique-violation-23505"),
                SqlState::DeadlockDetected => crate::mark!("jdbc:deadlock-40p01"),
                _ => {}
            }
        }
        PgClientError::Timeout { .. } => crate::mark!("jdbc:ambiguous-commit-timeout"),
        PgClientError::Connection(_) => crate::mark!("jdbc:connection-lost"),
    }
}

#[async_trait]
impl SinkTask for JdbcSinkTask {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = Some(context);
    }

    /// Nothing: Confluent's `JdbcSinkTask` does not override `open`, so a rebalance costs
    /// the task no round trip to the database (the table is created by the first `put`).
    async fn open(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }

    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        if records.is_empty() {
            return Ok(());
        }
        self.write(records, reporter).await
    }

    /// Everything `put` accepted is committed already: the offsets go as they are.
    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        Ok(offsets.clone())
    }

    async fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }
}

/// Validates a JDBC sink connector's whole configuration: the framework keys, the
/// connector class, and the sink's own keys.
///
/// # Errors
/// The first unknown key, bad value or missing required key.
pub fn parse_connector(
    raw: &BTreeMap<String, String>,
) -> Result<crate::connect::config::ConnectorConfig, ConfigError> {
    let config = crate::connect::config::ConnectorConfig::parse(raw, KEYS)?;
    if !CONNECTOR_CLASSES.contains(&config.connector_class.as_str()) {
        let expected = format!("one of {}", CONNECTOR_CLASSES.join(", "));
        return Err(config::invalid(
            "connector.class",
            &config.connector_class,
            &expected,
        ));
    }
    JdbcSinkConfig::parse(raw, &config.topics)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_config() -> BTreeMap<String, String> {
        let pairs = [
            ("name", "adb4pg-jdbc-sink"),
            ("topics", "server1.dbo.t1"),
            (
                "connector.class",
                "io.confluent.connect.jdbc.Adb4PgSinkConnector",
            ),
            ("connection.url", "jdbc:postgresql://10.0.5.1:5432/db"),
            ("connection.user", "u"),
            ("connection.password", "p"),
            ("col.names", "a,b,c,d,e,f,g"),
            (
                "col.types",
                "integer,bigint,smallint,real,doublepericision,timestamp,varchar",
            ),
            ("pk.fields", "a"),
            ("schemas.enable", "false"),
            ("target.tablename", "t1"),
            ("tasks.max", "1"),
            ("auto.create", "false"),
            ("table.name.format", "t1"),
            ("batch.size", "1"),
            ("value.converter.schemas.enable", "false"),
            (
                "value.converter",
                "org.apache.kafka.connect.json.JsonConverter",
            ),
        ];
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_seed_configuration_parses() {
        let raw = seed_config();
        let c = parse_connector(&raw).expect("the seed's configuration is valid");
        assert_eq!(c.group_id(), "connect-adb4pg-jdbc-sink");
        let s = JdbcSinkConfig::parse(&raw, &c.topics).unwrap();
        assert_eq!(s.col_types[4], ColumnType::DoublePrecision);
        assert_eq!(s.write_mode, WriteMode::Insert);
    }

    /// Confluent's `insert.mode` sets the write mode as `writeMode` does; both keys must
    /// agree, and `update` (Confluent's third mode) is refused by name.
    #[test]
    fn insert_mode_is_confluents_name_for_the_write_mode() {
        let topics = vec!["server1.dbo.t1".to_string()];
        let with = |pairs: &[(&str, &str)]| {
            let mut raw = seed_config();
            for (k, v) in pairs {
                raw.insert(k.to_string(), v.to_string());
            }
            JdbcSinkConfig::parse(&raw, &topics)
        };
        let upsert = with(&[("insert.mode", "upsert")]).unwrap();
        assert_eq!(upsert.write_mode, WriteMode::Upsert);
        let both = with(&[("insert.mode", "upsert"), ("writeMode", "upsert")]).unwrap();
        assert_eq!(both.write_mode, WriteMode::Upsert);
        let insert = with(&[("insert.mode", "insert")]).unwrap();
        assert_eq!(insert.write_mode, WriteMode::Insert);
        let clash = with(&[("insert.mode", "upsert"), ("writeMode", "insert")]).unwrap_err();
        assert!(clash.to_string().contains("insert.mode"), "{clash}");
        assert!(clash.to_string().contains("writeMode (insert)"), "{clash}");
        let update = with(&[("insert.mode", "update")]).unwrap_err();
        assert!(update.to_string().contains("insert.mode"), "{update}");
        assert!(update.to_string().contains("insert or upsert"), "{update}");
    }

    /// Counts the transactions (`execute_batch` calls) and their statements.
    #[derive(Default, Clone)]
    struct CountingPg {
        transactions: Arc<std::sync::Mutex<Vec<usize>>>,
        creates: Arc<std::sync::atomic::AtomicUsize>,
    }

    #[async_trait]
    impl PostgresClient for CountingPg {
        async fn execute(
            &mut self,
            statement: Statement,
        ) -> Result<eosim_sim::postgres::Reply, PgClientError> {
            assert!(
                matches!(statement, Statement::CreateTable(_)),
                "{statement:?}"
            );
            self.creates
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(eosim_sim::postgres::Reply::Affected(0))
        }

        async fn execute_batch(
            &mut self,
            statements: Vec<Statement>,
        ) -> Result<Vec<eosim_sim::postgres::Reply>, PgClientError> {
            self.transactions.lock().unwrap().push(statements.len());
            Ok(Vec::new())
        }
    }

    struct NoReports;

    impl ErrantRecordReporter for NoReports {
        fn report(&mut self, _: &SinkRecord, e: &str) -> Result<(), ConnectError> {
            Err(ConnectError::Fatal(e.to_string()))
        }
    }

    /// Confluent's `JdbcDbWriter.write`: autocommit off, one commit per `put`, whatever
    /// `batch.size` (which only splits the statements inside that transaction).
    #[test]
    fn a_put_is_one_transaction_whatever_the_batch_size() {
        let (mut task, pg) = counting_task("batch.size", "2");
        let transactions = pg.transactions;
        let mut reporter = NoReports;
        at_once(task.put(records(5), &mut reporter).as_mut()).expect("put");
        assert_eq!(*transactions.lock().unwrap(), vec![5]);
    }

    /// A task on the seed configuration with `key = value`, over a [`CountingPg`] whose
    /// counters the caller keeps.
    fn counting_task(key: &str, value: &str) -> (JdbcSinkTask, CountingPg) {
        let mut raw = seed_config();
        raw.insert(key.into(), value.into());
        let topics = vec!["server1.dbo.t1".to_string()];
        let config = JdbcSinkConfig::parse(&raw, &topics).unwrap();
        let pg = CountingPg::default();
        (JdbcSinkTask::new(config, Box::new(pg.clone())), pg)
    }

    fn records(n: i64) -> Vec<SinkRecord> {
        (0..n)
            .map(|i| SinkRecord {
                tp: TopicPartition::new("server1.dbo.t1", 0),
                offset: i,
                key: None,
                value: Some(serde_json::json!({"a": i, "b": 1})),
                headers: Vec::new(),
                timestamp_ms: 0,
            })
            .collect()
    }

    /// Runs `f`'s future to its end: the fake client answers at once, so one poll with a
    /// no-op waker finishes it.
    fn at_once<T>(f: std::pin::Pin<&mut (dyn std::future::Future<Output = T> + Send + '_)>) -> T {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("waited on nothing"),
        }
    }

    /// `auto.create` as `DbStructure.createOrAmendIfNecessary`: `open` costs no round trip
    /// (Confluent's task does not override it, so a rebalance reaches no database), the
    /// first write creates the table, later writes and opens do not again.
    #[test]
    fn auto_create_runs_once_at_the_first_write_not_at_open() {
        let (mut task, pg) = counting_task("auto.create", "true");
        let (transactions, creates) = (pg.transactions, pg.creates);
        let tp = [TopicPartition::new("server1.dbo.t1", 0)];
        at_once(task.open(&tp).as_mut()).expect("open");
        assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 0);
        let mut reporter = NoReports;
        at_once(task.put(records(2), &mut reporter).as_mut()).expect("put");
        at_once(task.open(&tp).as_mut()).expect("open again");
        at_once(task.put(records(3), &mut reporter).as_mut()).expect("put");
        assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(*transactions.lock().unwrap(), vec![2, 3]);
    }

    #[test]
    fn an_unknown_key_is_named() {
        let mut raw = seed_config();
        raw.insert("connector.url".into(), "x".into());
        let e = parse_connector(&raw).unwrap_err().to_string();
        assert!(
            e.contains("connector.url") && e.contains("connection.url"),
            "{e}"
        );
    }
}

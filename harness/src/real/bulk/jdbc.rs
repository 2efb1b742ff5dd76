//! The JDBC sink beside PostgreSQL's bulk loads of the same rows, in one run (issue 15,
//! item 4): [`jdbc_sink_vs_bulk`] feeds a fresh [`JdbcSinkTask`] over the real client as a
//! Connect worker does (`batch_rows` records per `put`, Connect's `max.poll.records` is
//! 500 by default; `batch.size` at its default 3000, so one `executeBatch` per put), then
//! loads the same rows by `COPY ... FROM STDIN` and by one multi-row `INSERT` into fresh
//! tables of the same columns and no primary key ([`pg_bulk_loads`], also what a real P2
//! run compares its puts with).
//!
//! The records are flattened rows `{"id", "v", "name"}`: in `insert` mode every id is new
//! (`INSERT`s), in `upsert` mode ids repeat over `keys` keys (`INSERT ... ON CONFLICT (id)
//! DO UPDATE`), as P2's change events do. The JDBC sink keeps no state store: its
//! [`BulkRatio::state_reads`] and `state_writes` are 0.

use super::{BulkError, BulkRatio, KeptReports};
use crate::client::postgres::PostgresClient;
use crate::client::real::postgres::sql;
use crate::client::real::RealPostgres;
use crate::connect::task::{SinkRecord, SinkTask};
use crate::report::BulkLoad;
use crate::sinks::jdbc::{JdbcSinkConfig, JdbcSinkTask, WriteMode};
use eosim_sim::kafka::{Offset, TopicPartition};
use eosim_sim::postgres::{Column, CreateTable, Insert, OnConflict, Reply, Row, Statement, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// What [`jdbc_sink_vs_bulk`] loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JdbcLoad {
    /// The target table (the bulk loads go into `<table>_bulk_copy` and
    /// `<table>_bulk_insert`); all three are dropped first.
    pub table: String,
    /// `insert` or `upsert`.
    pub mode: WriteMode,
    /// Records (rows) loaded each way.
    pub rows: u64,
    /// Distinct ids in `upsert` mode (record `i` has id `i % keys`); ignored in `insert`
    /// mode, where every id is new.
    pub keys: u64,
    /// Records per `put`.
    pub batch_rows: u64,
    /// pgJDBC's `reWriteBatchedInserts` for the sink's client.
    pub rewrite_batched_inserts: bool,
}

/// The columns of the loaded rows (`id bigint, v bigint, name text`).
fn columns() -> Vec<Column> {
    use eosim_sim::postgres::ColumnType;
    vec![
        Column::new("id", ColumnType::BigInt),
        Column::new("v", ColumnType::BigInt),
        Column::new("name", ColumnType::Text),
    ]
}

/// Record `i`: `{"id": i or i % keys, "v": i, "name": "r<i>"}`.
fn record(load: &JdbcLoad, tp: &TopicPartition, i: u64) -> SinkRecord {
    let id = match load.mode {
        WriteMode::Insert => i,
        WriteMode::Upsert => i % load.keys.max(1),
    };
    SinkRecord {
        tp: tp.clone(),
        offset: i as Offset,
        key: Some(serde_json::json!({ "id": id })),
        value: Some(serde_json::json!({"id": id, "v": i, "name": format!("r{i}")})),
        headers: Vec::new(),
        timestamp_ms: 0,
    }
}

fn row_of(r: &SinkRecord) -> Row {
    let v = r.value.as_ref().expect("built with a value");
    vec![
        Value::from_json(&v["id"]),
        Value::from_json(&v["v"]),
        Value::from_json(&v["name"]),
    ]
}

fn sink_config(load: &JdbcLoad) -> Result<JdbcSinkConfig, BulkError> {
    let mode = match load.mode {
        WriteMode::Insert => "insert",
        WriteMode::Upsert => "upsert",
    };
    let raw: BTreeMap<String, String> = [
        (
            "connection.url",
            "jdbc:postgresql://127.0.0.1:5432/postgres",
        ),
        ("col.names", "id,v,name"),
        ("col.types", "bigint,bigint,text"),
        ("pk.fields", "id"),
        ("target.tablename", load.table.as_str()),
        ("auto.create", "true"),
        ("insert.mode", mode),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    JdbcSinkConfig::parse(&raw, &[]).map_err(|e| BulkError::Setup(e.to_string()))
}

/// Loads `load.rows` records through a fresh JDBC sink task writing through `sink`, then
/// the same rows by `COPY` and by one `INSERT` through `admin`; returns the sink's rate
/// beside each. The sink's table is checked by `count(*)` (its rows, or its keys in
/// `upsert` mode).
///
/// # Errors
/// [`BulkError`]: a failed statement, put or load, or a count that is off.
pub async fn jdbc_sink_vs_bulk(
    admin: &mut RealPostgres,
    sink: RealPostgres,
    load: &JdbcLoad,
) -> Result<Vec<BulkRatio>, BulkError> {
    let t = &load.table;
    for name in [
        t.clone(),
        format!("{t}_bulk_copy"),
        format!("{t}_bulk_insert"),
    ] {
        let drop = format!("DROP TABLE IF EXISTS {}", sql::ident(&name));
        admin.run_sql(&drop).await.map_err(pg)?;
    }
    let sink = sink.with_rewrite_batched_inserts(load.rewrite_batched_inserts);
    let mut task = JdbcSinkTask::new(sink_config(load)?, Box::new(sink));
    let tp = TopicPartition::new(t, 0);
    let mut reports = KeptReports::default();
    let mut rows = Vec::with_capacity(load.rows as usize);
    let started = Instant::now();
    for first in (0..load.rows).step_by(load.batch_rows.max(1) as usize) {
        let last = (first + load.batch_rows).min(load.rows);
        let batch: Vec<SinkRecord> = (first..last).map(|i| record(load, &tp, i)).collect();
        rows.extend(batch.iter().map(row_of));
        task.put(batch, &mut reports).await?;
    }
    let sink_time_s = started.elapsed().as_secs_f64();
    let expected = match load.mode {
        WriteMode::Insert => load.rows,
        WriteMode::Upsert => load.rows.min(load.keys.max(1)),
    };
    let found = admin.select(t).await.map_err(pg)?.rows.len() as u64;
    if found != expected || !reports.0.is_empty() {
        let (table, loaded) = (t.clone(), expected);
        return Err(BulkError::Count {
            table,
            found,
            loaded,
        });
    }
    let loads = pg_bulk_loads(admin, t, columns(), rows)
        .await
        .map_err(BulkError::Setup)?;
    let mode = format!("{:?}", load.mode).to_lowercase();
    Ok(loads
        .into_iter()
        .map(|b| BulkRatio {
            target: "postgres".into(),
            method: format!(
                "JDBC sink ({mode}, reWriteBatchedInserts={}) vs {}",
                load.rewrite_batched_inserts, b.method
            ),
            rows: load.rows,
            batch_rows: load.batch_rows,
            sink_rows_per_s: load.rows as f64 / sink_time_s.max(1e-9),
            bulk_rows_per_s: b.rows_per_s,
            state_reads: 0,
            state_writes: 0,
            state_time_s: 0.0,
            sink_time_s,
        })
        .collect())
}

fn pg(e: crate::client::postgres::PgClientError) -> BulkError {
    BulkError::Setup(format!("postgres: {e}"))
}

fn fresh_table(name: &str, columns: Vec<Column>) -> Statement {
    Statement::CreateTable(CreateTable {
        name: name.to_string(),
        columns,
        primary_key: Vec::new(),
        if_not_exists: false,
    })
}

/// A bulk load of `rows` into `target` by `method` that took `time_s` s (its `sink_ratio`
/// is filled in once the sink's rate is known).
pub fn timed_load(target: &str, method: &str, rows: u64, time_s: f64) -> BulkLoad {
    BulkLoad {
        target: target.into(),
        method: method.into(),
        rows,
        time_s,
        rows_per_s: if time_s > 0.0 {
            rows as f64 / time_s
        } else {
            0.0
        },
        sink_ratio: 0.0,
    }
}

fn load(method: &str, rows: u64, started: Instant) -> BulkLoad {
    timed_load("postgres", method, rows, started.elapsed().as_secs_f64())
}

/// Loads `rows` into two fresh tables `<table>_bulk_copy` and `<table>_bulk_insert` of
/// `columns` and no primary key (the versions of one key are separate rows there): once
/// by `COPY ... FROM STDIN` (tokio-postgres `copy_in`, text format), once by one
/// multi-row `INSERT`; each load's rate is its rows over its wall time.
///
/// # Errors
/// The statement that failed, with the server's error.
pub async fn pg_bulk_loads(
    client: &mut RealPostgres,
    table: &str,
    columns: Vec<Column>,
    rows: Vec<Row>,
) -> Result<Vec<BulkLoad>, String> {
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let (copy_table, insert_table) = (format!("{table}_bulk_copy"), format!("{table}_bulk_insert"));
    for t in [&copy_table, &insert_table] {
        let create = fresh_table(t, columns.clone());
        client
            .execute(create)
            .await
            .map_err(|e| format!("{t}: {e}"))?;
    }
    let started = Instant::now();
    let copied = client
        .copy_in(&copy_table, &names, &rows)
        .await
        .map_err(|e| format!("COPY into {copy_table}: {e}"))?;
    let copy = load("COPY FROM STDIN", copied, started);
    let insert = Statement::Insert(Insert {
        table: insert_table.clone(),
        columns: names,
        rows,
        on_conflict: OnConflict::None,
    });
    let started = Instant::now();
    let inserted = client
        .execute(insert)
        .await
        .map_err(|e| format!("INSERT into {insert_table}: {e}"))?;
    let n = match inserted {
        Reply::Affected(n) => n,
        Reply::Rows { rows, .. } => rows.len() as u64,
    };
    Ok(vec![copy, load("one multi-row INSERT", n, started)])
}

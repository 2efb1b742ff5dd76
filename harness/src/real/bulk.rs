//! Bulk-load ratios (issue 6, "done when"): rows/s into a real target through a sink task,
//! beside a bulk load of the same rows in the same run, as a ratio.
//!
//! [`clickhouse_sink_vs_bulk`]: the ClickHouse exactly-once sink task
//! ([`ClickHouseSinkTask`], variant `seed`) over the real clients, fed batches as a
//! Connect worker would (`batch_rows` records per `put`, Connect's `max.poll.records` is
//! 500 by default, then `preCommit`), beside one `INSERT ... FORMAT JSONEachRow` of all
//! the rows into a twin table. Each sink batch costs a state read, two state writes
//! (ZooKeeper) and one INSERT, so the ratio shows what the exactly-once bookkeeping and
//! small inserts cost against ClickHouse's preferred bulk shape; the state store's share
//! is counted apart ([`BulkRatio::state_time_s`], from the client's
//! [`StoreMeter`](crate::client::real::meter::StoreMeter)).
//!
//! [`jdbc::jdbc_sink_vs_bulk`]: the JDBC sink task over the real PostgreSQL client, in
//! `insert` or `upsert` mode, beside `COPY` and one multi-row `INSERT` of the same rows.

pub mod jdbc;

use crate::client::clickhouse::{ChClientError, ClickHouse};
use crate::client::real::clickhouse::quote_ident;
use crate::client::real::{ClickHouseWithZooKeeper, RealClickHouse};
use crate::connect::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask};
use crate::sinks::clickhouse::{create_tables, ClickHouseSinkConfig, ClickHouseSinkTask, NoHooks};
use eosim_sim::clickhouse::types::{Insert, TableDef};
use eosim_sim::kafka::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// One measurement: the same rows through a sink and as one bulk load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkRatio {
    /// The target (`clickhouse 18.16.1`, ...).
    pub target: String,
    /// The sink and the bulk load compared (`ClickHouse sink (seed) vs one INSERT`).
    pub method: String,
    /// Rows loaded each way.
    pub rows: u64,
    /// Records per sink batch (`put`).
    pub batch_rows: u64,
    /// Rows per second through the sink task (its state-store calls included).
    pub sink_rows_per_s: f64,
    /// Rows per second of the bulk load.
    pub bulk_rows_per_s: f64,
    /// State-store reads the sink made (0 for a sink without one, such as JDBC).
    pub state_reads: u64,
    /// State-store writes the sink made.
    pub state_writes: u64,
    /// Wall time the sink spent in its state-store calls, s.
    pub state_time_s: f64,
    /// Wall time the sink took for all its rows, s.
    pub sink_time_s: f64,
}

impl BulkRatio {
    /// `sink_rows_per_s / bulk_rows_per_s` (1.0 = as fast as the bulk load).
    pub fn ratio(&self) -> f64 {
        if self.bulk_rows_per_s > 0.0 {
            self.sink_rows_per_s / self.bulk_rows_per_s
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for BulkRatio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {} rows, sink {:.0} rows/s (batches of {}), bulk load {:.0} rows/s, \
             ratio {:.3}",
            self.target,
            self.method,
            self.rows,
            self.sink_rows_per_s,
            self.batch_rows,
            self.bulk_rows_per_s,
            self.ratio()
        )?;
        if self.state_reads + self.state_writes > 0 {
            let share = self.state_time_s / self.sink_time_s.max(1e-9);
            write!(
                f,
                "; state store: {} reads, {} writes, {:.3} s ({:.0} % of the sink's time)",
                self.state_reads,
                self.state_writes,
                self.state_time_s,
                share * 100.0
            )?;
        }
        Ok(())
    }
}

/// Why a measurement failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BulkError {
    /// ClickHouse or ZooKeeper refused or did not answer.
    #[error("{0}")]
    Client(#[from] ChClientError),
    /// The sink task failed.
    #[error("sink task: {0}")]
    Task(#[from] ConnectError),
    /// Setting up or bulk-loading failed (the statement and the server's error).
    #[error("{0}")]
    Setup(String),
    /// The table does not hold what was loaded.
    #[error("{table} holds {found} rows after loading {loaded}")]
    Count {
        /// The table.
        table: String,
        /// Rows it holds.
        found: u64,
        /// Rows loaded.
        loaded: u64,
    },
}

/// An errant-record reporter that keeps what it is told (`errors.tolerance=all`).
#[derive(Debug, Default)]
pub struct KeptReports(pub Vec<(TopicPartition, Offset, String)>);

impl ErrantRecordReporter for KeptReports {
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
        self.0
            .push((record.tp.clone(), record.offset, error.to_string()));
        Ok(())
    }
}

/// The pipeline's record for offset `offset` of `tp`: `{"id": offset, "name": "r<offset>"}`
/// (with one partition the simulated producer's id is the offset).
pub fn seed_record(tp: &TopicPartition, offset: Offset) -> SinkRecord {
    SinkRecord {
        tp: tp.clone(),
        offset,
        key: None,
        value: Some(serde_json::json!({"id": offset, "name": format!("r{offset}")})),
        headers: Vec::new(),
        timestamp_ms: 0,
    }
}

async fn expect_count(ch: &ClickHouseWithZooKeeper, table: &str, n: u64) -> Result<(), BulkError> {
    let found = ch.clickhouse.count(table).await?;
    if found != n {
        let table = table.to_string();
        return Err(BulkError::Count {
            table,
            found,
            loaded: n,
        });
    }
    Ok(())
}

/// Loads `rows` (JSON objects) as one INSERT into a fresh table `def` (dropped first if
/// it exists), checked by `count()`; returns the rows loaded and the INSERT's wall time, s.
///
/// # Errors
/// [`BulkError`].
pub async fn one_insert(
    ch: &RealClickHouse,
    def: TableDef,
    rows: Vec<serde_json::Value>,
) -> Result<(u64, f64), BulkError> {
    let table = def.name.clone();
    ch.execute(&format!("DROP TABLE IF EXISTS {}", quote_ident(&table)))
        .await?;
    ch.create_table(def).await?;
    let n = rows.len() as u64;
    let started = Instant::now();
    ch.insert(Insert::new(&table, rows)).await?;
    let time_s = started.elapsed().as_secs_f64();
    let found = ch.count(&table).await?;
    if found != n {
        return Err(BulkError::Count {
            table,
            found,
            loaded: n,
        });
    }
    Ok((n, time_s))
}

/// Loads `rows` seed records through a fresh sink task into `<prefix>_sink` (state in
/// `<prefix>_state`, topic `<prefix>`), then the same rows as one INSERT into
/// `<prefix>_bulk`; both tables are dropped first. Each load is checked by `count()`.
///
/// # Errors
/// [`BulkError`].
pub async fn clickhouse_sink_vs_bulk(
    ch: &ClickHouseWithZooKeeper,
    prefix: &str,
    rows: u64,
    batch_rows: u64,
) -> Result<BulkRatio, BulkError> {
    let (sink_table, bulk_table) = (format!("{prefix}_sink"), format!("{prefix}_bulk"));
    ch.clickhouse
        .execute(&format!(
            "DROP TABLE IF EXISTS {}",
            quote_ident(&sink_table)
        ))
        .await?;
    let props = BTreeMap::from([
        ("exactlyOnce".to_string(), "true".to_string()),
        ("table".to_string(), sink_table.clone()),
        ("state.table".to_string(), format!("{prefix}_state")),
    ]);
    let config = ClickHouseSinkConfig::from_props(&props)?;
    let mut task = ClickHouseSinkTask::new(config, ch.clone(), "bulk#1".into(), Arc::new(NoHooks));
    let mut def = TableDef::kafka2ck();
    def.name = sink_table.clone();
    create_tables(ch, def.clone(), &format!("{prefix}_state")).await?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let tp = TopicPartition::new(format!("{prefix}-{stamp}"), 0);
    task.open(std::slice::from_ref(&tp)).await?;
    let mut reports = KeptReports::default();
    let before = ch.meter.reading();
    let started = Instant::now();
    for first in (0..rows).step_by(batch_rows.max(1) as usize) {
        let last = (first + batch_rows).min(rows);
        let batch = (first..last)
            .map(|o| seed_record(&tp, o as Offset))
            .collect();
        task.put(batch, &mut reports).await?;
        task.pre_commit(&BTreeMap::from([(tp.clone(), last as Offset)]))
            .await?;
    }
    let (sink_time_s, state) = (
        started.elapsed().as_secs_f64(),
        ch.meter.reading().since(before),
    );
    expect_count(ch, &sink_table, rows).await?;
    def.name = bulk_table.clone();
    let all = (0..rows).map(|o| seed_record(&tp, o as Offset).value.expect("set"));
    let (loaded, time_s) = one_insert(&ch.clickhouse, def, all.collect()).await?;
    let bulk_rows_per_s = loaded as f64 / time_s.max(1e-9);
    Ok(BulkRatio {
        target: format!("clickhouse {}", ch.clickhouse.version().await?),
        method: "ClickHouse sink (seed) vs one INSERT (JSONEachRow)".into(),
        rows,
        batch_rows,
        sink_rows_per_s: rows as f64 / sink_time_s.max(1e-9),
        bulk_rows_per_s,
        state_reads: state.reads,
        state_writes: state.writes,
        state_time_s: state.busy_ns as f64 / 1e9,
        sink_time_s,
    })
}

//! The Doris cluster as a pure state machine: one FE (catalog, transaction manager,
//! Routine Load jobs) and its BEs (load channels, committed rowsets, published tablets).
//!
//! # What survives a crash
//! - FE ([`Doris::restart_fe`]): everything in the edit log survives (tables,
//!   transactions and labels, jobs with their progress and statistics); the Routine Load
//!   task lists are memory only and go, and RUNNING jobs come back NEED_SCHEDULE.
//! - BE ([`Doris::restart_be`]): a load channel's rows not yet committed are lost (their
//!   transaction can no longer commit: [`DorisError::BackendUnavailable`]); committed
//!   rowsets and published versions are on disk and stay.
//!
//! # Loads
//! Every load is a transaction: [`Doris::begin`] (FE; label checked), [`Doris::write`]
//! (BE; JSON converted by the [`LoadSpec`], error rows counted), then
//! [`Doris::commit`] or [`Doris::precommit`] + [`Doris::commit_prepared`] (FE), or
//! [`Doris::abort`]. [`Doris::tick`] runs the FE daemons: transaction timeouts, label
//! expiry, publish of COMMITTED transactions (VISIBLE: readable by [`Doris::select`],
//! READ COMMITTED), the Routine Load schedulers. Stream Load in `stream_load.rs`, Routine
//! Load tasks in `fe_routine_load.rs`.

use super::error::DorisError;
use super::routine_load::RoutineLoadJob;
use super::txn::{
    BeginTxn, TransactionState, TransactionStatus, TxnManager, LABEL_KEEP_MAX_MS,
    PRECOMMIT_TIMEOUT_MS,
};
use super::types::{Converted, KeysType, LoadSpec, Row, RowError, TableDef};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

/// Cluster settings.
///
/// ## Default values
/// `label_keep_max_ms` 3 days (`label_keep_max_second`), `precommit_timeout_ms` 3600 s
/// (`stream_load_default_precommit_timeout_second`), one BE, `group_commit_interval_ms`
/// 10000 and `group_commit_data_bytes` 64 MiB (the table properties' defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DorisConfig {
    /// `label_keep_max_second`, in ms.
    pub label_keep_max_ms: u64,
    /// `stream_load_default_precommit_timeout_second`, in ms: a PRECOMMITTED transaction
    /// older than this is aborted.
    pub precommit_timeout_ms: u64,
    /// Number of BEs (for Routine Load's task division).
    pub be_count: usize,
    /// The tables' `group_commit_interval_ms`: an internal group commit load commits this
    /// long after it began (see [`super::group_commit`]).
    pub group_commit_interval_ms: u64,
    /// The tables' `group_commit_data_bytes`: or once it holds this many bytes.
    pub group_commit_data_bytes: u64,
}

impl Default for DorisConfig {
    fn default() -> Self {
        Self {
            label_keep_max_ms: LABEL_KEEP_MAX_MS,
            precommit_timeout_ms: PRECOMMIT_TIMEOUT_MS,
            be_count: 1,
            group_commit_interval_ms: super::group_commit::GROUP_COMMIT_INTERVAL_MS,
            group_commit_data_bytes: super::group_commit::GROUP_COMMIT_DATA_BYTES,
        }
    }
}

/// The FE's journaled state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Frontend {
    /// db → table → definition.
    pub databases: BTreeMap<String, BTreeMap<String, TableDef>>,
    /// The transaction manager.
    pub txns: TxnManager,
    /// Routine Load jobs by id.
    pub jobs: BTreeMap<u64, RoutineLoadJob>,
    /// Last job id given.
    pub next_job_id: u64,
    /// Last task id given (task ids stand for Doris' UUIDs: never reused).
    pub next_task_id: u64,
}

/// One load's rows on the BE.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Rowset {
    rows: Vec<Row>,
}

/// A table's published data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Tablet {
    version: u64,
    /// DUPLICATE KEY: every row in load order.
    rows: Vec<Row>,
    /// UNIQUE KEY: key (JSON text) → the winning row.
    by_key: BTreeMap<String, Row>,
}

/// The BEs' state (one data set: tablets are not split across BEs here).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Backend {
    /// Load channels: txn → rows written, not yet committed (memory).
    staged: BTreeMap<u64, Rowset>,
    /// Transactions whose load channel a BE restart lost.
    pub(super) lost: BTreeSet<u64>,
    /// Group commit: the tables' open internal loads (memory) and the `async_mode` WAL
    /// (disk).
    pub group_commit: super::group_commit::GroupCommitState,
    /// Committed rowsets waiting for publish (disk).
    committed: BTreeMap<u64, Rowset>,
    /// (db, table) → published data (disk).
    tablets: BTreeMap<(String, String), Tablet>,
}

impl Backend {
    /// Appends `rows` to the load channel of `txn_id` (opened if it is not).
    pub(super) fn stage(&mut self, txn_id: u64, rows: Vec<Row>) {
        self.staged.entry(txn_id).or_default().rows.extend(rows);
    }
}

/// Counts of one [`Doris::write`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSummary {
    /// Inputs read.
    pub total_rows: u64,
    /// Rows written into the transaction.
    pub loaded_rows: u64,
    /// Error rows (filtered).
    pub filtered_rows: u64,
    /// Bytes read.
    pub received_bytes: u64,
    /// The first error rows (index in the input, reason), at most [`ERROR_ROWS_KEPT`].
    pub errors: Vec<(usize, RowError)>,
}

/// How many error rows a write reports in detail (Doris writes them to its `ErrorURL` log).
pub const ERROR_ROWS_KEPT: usize = 4096;

/// The cluster.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Doris {
    /// Settings.
    pub config: DorisConfig,
    /// FE.
    pub fe: Frontend,
    /// BEs.
    pub be: Backend,
}

impl Doris {
    /// An empty cluster.
    pub fn new(config: DorisConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// `CREATE DATABASE IF NOT EXISTS`.
    pub fn create_database(&mut self, db: &str) {
        self.fe.databases.entry(db.into()).or_default();
    }

    /// `CREATE TABLE`.
    ///
    /// # Errors
    /// Unknown database, existing table, bad definition.
    pub fn create_table(&mut self, db: &str, def: TableDef) -> Result<(), DorisError> {
        def.validate()?;
        let tables = self
            .fe
            .databases
            .get_mut(db)
            .ok_or_else(|| DorisError::UnknownDatabase(db.into()))?;
        if tables.contains_key(&def.name) {
            return Err(DorisError::TableExists(def.name));
        }
        self.be
            .tablets
            .insert((db.into(), def.name.clone()), Tablet::default());
        tables.insert(def.name.clone(), def);
        Ok(())
    }

    /// The definition of `db.table`.
    ///
    /// # Errors
    /// Unknown database or table.
    pub fn table(&self, db: &str, table: &str) -> Result<&TableDef, DorisError> {
        self.fe
            .databases
            .get(db)
            .ok_or_else(|| DorisError::UnknownDatabase(db.into()))?
            .get(table)
            .ok_or_else(|| DorisError::UnknownTable(table.into()))
    }

    /// Begins a load transaction (FE).
    ///
    /// # Errors
    /// Unknown table, [`DorisError::LabelAlreadyExists`].
    pub fn begin(&mut self, now_ms: u64, req: BeginTxn) -> Result<u64, DorisError> {
        self.table(&req.db, &req.table)?;
        self.fe.txns.begin(now_ms, req)
    }

    /// The transaction `txn_id` (`SHOW TRANSACTION WHERE ID = ...`).
    pub fn transaction(&self, txn_id: u64) -> Option<&TransactionState> {
        self.fe.txns.get(txn_id)
    }

    /// The latest transaction of `label` (`SHOW TRANSACTION WHERE LABEL = ...`).
    pub fn transaction_by_label(&self, db: &str, label: &str) -> Option<&TransactionState> {
        self.fe.txns.by_label(db, label)
    }

    /// Writes `inputs` (JSON texts) into PREPARE transaction `txn_id` on the BE, converted
    /// by `spec`; error rows are counted, not written.
    ///
    /// # Errors
    /// The transaction is not PREPARE; its load channel was lost; bad `spec`.
    pub fn write(
        &mut self,
        txn_id: u64,
        spec: &LoadSpec,
        inputs: &[String],
    ) -> Result<WriteSummary, DorisError> {
        let txn = self.fe.txns.prepared(txn_id, "load")?;
        if self.be.lost.contains(&txn_id) {
            return Err(lost_channel(txn_id));
        }
        let def = self.table(&txn.db, &txn.table)?.clone();
        let (summary, rows) = convert_rows(&def, spec, inputs)?;
        self.be.stage(txn_id, rows);
        Ok(summary)
    }

    /// PREPARE → COMMITTED (FE), with a Routine Load attachment; the BE's load channel
    /// becomes a committed rowset.
    ///
    /// # Errors
    /// Not PREPARE; the load channel was lost on a BE restart.
    pub fn commit(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        attachment: Option<super::routine_load::RlTaskTxnCommitAttachment>,
    ) -> Result<(), DorisError> {
        self.fe.txns.prepared(txn_id, "commit")?;
        if self.be.lost.contains(&txn_id) {
            crate::mark!("doris:commit-lost-channel");
            return Err(lost_channel(txn_id));
        }
        self.fe.txns.commit(now_ms, txn_id, attachment)?;
        let rowset = self.be.staged.remove(&txn_id).unwrap_or_default();
        self.be.committed.insert(txn_id, rowset);
        Ok(())
    }

    /// PREPARE → PRECOMMITTED: the rows are a committed rowset on the BE, invisible until
    /// [`Doris::commit_prepared`].
    ///
    /// # Errors
    /// As [`Doris::commit`].
    pub fn precommit(&mut self, now_ms: u64, txn_id: u64) -> Result<(), DorisError> {
        self.fe.txns.prepared(txn_id, "precommit")?;
        if self.be.lost.contains(&txn_id) {
            return Err(lost_channel(txn_id));
        }
        self.fe.txns.precommit(now_ms, txn_id)?;
        let rowset = self.be.staged.remove(&txn_id).unwrap_or_default();
        self.be.committed.insert(txn_id, rowset);
        Ok(())
    }

    /// PRECOMMITTED → COMMITTED.
    ///
    /// # Errors
    /// See [`TxnManager::commit_prepared`].
    pub fn commit_prepared(&mut self, now_ms: u64, txn_id: u64) -> Result<(), DorisError> {
        self.fe.txns.commit_prepared(now_ms, txn_id)
    }

    /// Aborts `txn_id` with `reason`; its rows are dropped.
    ///
    /// # Errors
    /// Not found, or already COMMITTED/VISIBLE.
    pub fn abort(&mut self, now_ms: u64, txn_id: u64, reason: &str) -> Result<(), DorisError> {
        self.fe.txns.abort(now_ms, txn_id, reason, None)?;
        self.drop_rows(txn_id);
        Ok(())
    }

    pub(super) fn drop_rows(&mut self, txn_id: u64) {
        self.be.staged.remove(&txn_id);
        self.be.committed.remove(&txn_id);
        self.be.lost.remove(&txn_id);
    }

    /// Publishes every COMMITTED transaction in commit order (the BEs must be up): each
    /// gets the table's next version and becomes VISIBLE. Returns the ids published.
    pub fn publish(&mut self, now_ms: u64) -> Vec<u64> {
        let ids = self.fe.txns.committed();
        for txn_id in &ids {
            let txn = self.fe.txns.get(*txn_id).expect("committed txn");
            let key = (txn.db.clone(), txn.table.clone());
            let def = self.table(&key.0, &key.1).expect("table of a txn").clone();
            let rowset = self.be.committed.remove(txn_id).unwrap_or_default();
            let tablet = self.be.tablets.entry(key).or_default();
            tablet.version += 1;
            let version = tablet.version;
            apply(tablet, &def.keys, rowset.rows);
            self.fe.txns.make_visible(now_ms, *txn_id, version);
        }
        ids
    }

    /// `SELECT * FROM db.table`: the VISIBLE data (READ COMMITTED); UNIQUE KEY tables show
    /// one row per key, ordered by key.
    ///
    /// # Errors
    /// Unknown database or table.
    pub fn select(&self, db: &str, table: &str) -> Result<Vec<Row>, DorisError> {
        let def = self.table(db, table)?;
        let tablet = self.be.tablets.get(&(db.into(), table.into()));
        let Some(tablet) = tablet else {
            return Ok(Vec::new());
        };
        Ok(match def.keys {
            KeysType::Duplicate(_) => tablet.rows.clone(),
            KeysType::Unique { .. } => tablet.by_key.values().cloned().collect(),
        })
    }

    /// The FE daemons at `now_ms`: transaction timeouts (Routine Load tasks told), label
    /// expiry, publish when `be_alive`, the Routine Load schedulers.
    pub fn tick(&mut self, now_ms: u64, be_alive: bool) {
        let keep = self.config.label_keep_max_ms;
        let precommit = self.config.precommit_timeout_ms;
        for txn_id in self.fe.txns.expire(now_ms, keep, precommit) {
            self.drop_rows(txn_id);
            self.on_task_txn_aborted(now_ms, txn_id, None, super::txn::TIMEOUT_REASON);
        }
        if be_alive {
            self.flush_group_commits(now_ms);
            self.replay_wals(now_ms);
            self.publish(now_ms);
        }
        self.schedule_routine_load(now_ms, if be_alive { self.config.be_count } else { 0 });
    }

    /// An FE restart: the journal replayed, memory-only state gone.
    pub fn restart_fe(&mut self) {
        crate::mark!("doris:fe-restart");
        for job in self.fe.jobs.values_mut() {
            *job = job.recovered();
        }
    }

    /// A BE restart: load channels lost (their transactions cannot commit); committed
    /// rowsets and tablets stay.
    pub fn restart_be(&mut self) {
        crate::mark!("doris:be-restart");
        self.be.group_commit.on_restart();
        let lost: Vec<u64> = self.be.staged.keys().copied().collect();
        self.be.staged.clear();
        for txn_id in lost {
            let prepared = self
                .fe
                .txns
                .get(txn_id)
                .is_some_and(|t| t.status == TransactionStatus::Prepare);
            if prepared {
                self.be.lost.insert(txn_id);
            }
        }
    }
}

/// Converts `inputs` (JSON texts) into rows of `def` by `spec`, counting error rows (the
/// first [`ERROR_ROWS_KEPT`] in detail) instead of writing them.
///
/// # Errors
/// A `spec` that does not fit `def`.
pub(super) fn convert_rows(
    def: &TableDef,
    spec: &LoadSpec,
    inputs: &[String],
) -> Result<(WriteSummary, Vec<Row>), DorisError> {
    spec.validate(def)?;
    let mut summary = WriteSummary::default();
    let mut rows = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        summary.total_rows += 1;
        summary.received_bytes += input.len() as u64;
        let converted: Converted = spec.convert(def, input);
        match converted {
            Ok(row) => {
                summary.loaded_rows += 1;
                rows.push(row);
            }
            Err(e) => {
                crate::mark!("doris:error-row");
                summary.filtered_rows += 1;
                if summary.errors.len() < ERROR_ROWS_KEPT {
                    summary.errors.push((i, e));
                }
            }
        }
    }
    Ok((summary, rows))
}

pub(super) fn lost_channel(txn_id: u64) -> DorisError {
    DorisError::BackendUnavailable(format!(
        "txn {txn_id}: its load channel was lost with a BE restart"
    ))
}

/// Applies a published rowset: DUPLICATE appends; UNIQUE (merge-on-write) replaces the
/// key's row unless the stored row's sequence value is greater.
fn apply(tablet: &mut Tablet, keys: &KeysType, rows: Vec<Row>) {
    match keys {
        KeysType::Duplicate(_) => tablet.rows.extend(rows),
        KeysType::Unique { keys, sequence_col } => {
            for row in rows {
                let key: Vec<&Value> = keys.iter().map(|k| &row[k]).collect();
                let key = serde_json::to_string(&key).expect("JSON values serialize");
                let older_wins = match (sequence_col, tablet.by_key.get(&key)) {
                    (Some(seq), Some(old)) => compare(&old[seq], &row[seq]) == Ordering::Greater,
                    _ => false,
                };
                if older_wins {
                    crate::mark!("doris:sequence-col-kept-older");
                } else {
                    tablet.by_key.insert(key, row);
                }
            }
        }
    }
}

/// Orders sequence values: NULL first, then numbers, then strings (datetimes compare as
/// their normalized text).
fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Less,
        (_, Value::Null) => Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}

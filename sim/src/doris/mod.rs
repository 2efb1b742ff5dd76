//! The Apache Doris model: FE and BE, load transactions with labels, DUPLICATE KEY and
//! UNIQUE KEY (merge-on-write) tables, Stream Load with two-phase commit, and Routine
//! Load jobs whose progress moves with their tasks' transactions.
//!
//! # Sections
//! - [`types`]: tables, column types, `COLUMNS(...)` / `jsonpaths` / `strict_mode`
//!   conversion of JSON input into rows or error rows.
//! - [`txn`]: the FE's transaction manager (labels, PREPARE → PRECOMMITTED → COMMITTED →
//!   VISIBLE / ABORTED, timeouts, label expiry).
//! - [`model::Doris`]: the cluster as a pure state machine (FE journal, BE load channels,
//!   committed rowsets, published tablets; FE and BE restarts).
//! - [`stream_load`]: Stream Load and `_stream_load_2pc`.
//! - [`group_commit`]: the `group_commit` header's internal loads and WAL.
//! - [`routine_load`]: job properties, states, progress (`KafkaProgress`), statistics
//!   (`SHOW ROUTINE LOAD`), task division.
//! - [`fe_routine_load`]: the FE's schedulers and transaction callbacks for Routine Load.
//! - [`protocol`]: the nodes' requests and responses, served synchronously by the model.
//! - `service` (under `--cfg madsim`): the `doris-fe` (10.0.7.1:9030) and `doris-be`
//!   (10.0.7.2:8040) nodes.
//!
//! # Models reference: Doris (P4)
//! Sources are cited per item in each module (apache/doris `fe/fe-core`: `transaction/`
//! `TransactionStatus`, `GlobalTransactionMgr`, `DatabaseTransactionMgr`,
//! `TransactionState`; `load/routineload/` `RoutineLoadJob`, `KafkaRoutineLoadJob`,
//! `RoutineLoadTaskInfo`, `KafkaTaskInfo`, `KafkaProgress`, `RLTaskTxnCommitAttachment`,
//! `ScheduleRule`; `httpv2/rest/` `StreamLoadAction`; `common/LabelAlreadyUsedException`;
//! the Doris manual's Data Model, Strict Mode, Stream Load and Routine Load pages).
//!
//! Modelled:
//! - Every load is a transaction with a label unique per database: a label held by a
//!   transaction that is not ABORTED is refused (`LabelAlreadyExists`, with the existing
//!   job's status); an ABORTED label may be reused; final transactions and their labels
//!   are forgotten after `label_keep_max_second` (3 days).
//! - PREPARE → (PRECOMMITTED) → COMMITTED → VISIBLE, or ABORTED; publish between commit
//!   and visibility (a [`model::Doris::tick`] with the BE up); reads see VISIBLE data only
//!   (READ COMMITTED); PREPARE transactions past their timeout are aborted
//!   (`timeout by txn manager`), PRECOMMITTED ones after
//!   `stream_load_default_precommit_timeout_second` (3600 s), as
//!   `TransactionState.isTimeout` does.
//! - DUPLICATE KEY keeps every row; UNIQUE KEY merge-on-write keeps the last version of a
//!   key, or with `function_column.sequence_col` the greatest sequence value.
//! - Conversion: `COLUMNS` by name, `jsonpaths` (`$.a.b`), `strict_mode` (off: a failed
//!   conversion is NULL; on: an error row), NULL into NOT NULL and over-long VARCHAR are
//!   error rows in both modes, malformed JSON is an error row; error rows are counted in
//!   every summary, never dropped silently; Stream Load's `max_filter_ratio`.
//! - Routine Load: the `CREATE ROUTINE LOAD` properties, task division, the task's
//!   transaction committing its attachment so data and progress move together, commits
//!   of tasks the FE dropped refused, `afterAborted` moving progress only with an
//!   attachment, job states with pause reasons (`max_error_number`), auto-resume of
//!   task-side pauses, `SHOW ROUTINE LOAD` (Statistic, Progress as next − 1, Lag).
//! - Crashes: an FE restart keeps its journal (tables, transactions, labels, jobs,
//!   progress, statistics) and loses the task lists (RUNNING jobs return NEED_SCHEDULE,
//!   since RUNNING is never journaled); a BE restart loses the rows of load channels not
//!   yet committed (those transactions can no longer commit) and keeps committed rowsets
//!   and published versions.
//!
//! - Label lookups: `SHOW TRANSACTION FROM db WHERE LABEL = ...` and `... LIKE
//!   'prefix%'` (each label's latest transaction), the second being how the Doris Kafka
//!   connector (`StreamLoadWriter.fetchLabel2Status`, pipeline `doris-sink`, harness
//!   `sinks::doris`) recovers its progress from VISIBLE labels; `_stream_load_2pc` is served
//!   by the FE (the real BE forwards it there).
//! - Group commit ([`group_commit`]): `sync_mode` / `async_mode` Stream Loads sharing one
//!   internal load per table, the `async_mode` WAL replayed after a BE restart and
//!   truncated by a BE machine crash.
//!
//! Not modelled (and why): SQL text (requests are typed); partitions, buckets, tablets
//! and replicas (one data set per table: a load is wholly applied or not, which is what
//! the pipelines' claims rest on); several FEs and master election (an FE restart stands
//! for a master switch: the new master replays the same journal, which BDB JE replicates to
//! a quorum before a write is acknowledged, so a switch loses nothing a restart keeps);
//! WHERE /
//! column expressions in `COLUMNS` (`unselectedRows` is always 0); AGGREGATE KEY tables
//! and merge-on-read UNIQUE; types beyond the ones in [`types::ColumnType`]; Doris' lower
//! bounds on `max_batch_rows` / `max_batch_size` (scaled-down runs need small batches);
//! the BE's own Kafka consumer: a Routine Load task is executed by the harness against the
//! simulated broker with its Kafka client, as the layering demands.
//!
//! ```
//! use eosim_sim::doris::{model::*, txn::*, types::*};
//! let mut d = Doris::new(DorisConfig::default());
//! d.create_database("db");
//! d.create_table("db", TableDef::clicklog()).unwrap();
//! let begin = |label: &str| BeginTxn {
//!     db: "db".into(), table: "clicklog".into(), label: label.into(),
//!     source: LoadSource::StreamLoad { two_phase: false }, timeout_ms: 600_000,
//! };
//! let txn = d.begin(0, begin("l1")).unwrap();
//! let row = r#"{"clickTime":"2023-01-01 00:00:00","type":"webset","id":"a","user":"u1"}"#;
//! d.write(txn, &LoadSpec::default(), &[row.to_string()]).unwrap();
//! d.commit(1, txn, None).unwrap();
//! assert!(d.select("db", "clicklog").unwrap().is_empty()); // COMMITTED, not yet VISIBLE
//! d.tick(2, true);
//! assert_eq!(d.select("db", "clicklog").unwrap().len(), 1);
//! assert!(d.begin(3, begin("l1")).is_err()); // the label is taken
//! ```

pub mod error;
pub mod fe_routine_load;
pub mod group_commit;
pub mod model;
pub mod protocol;
pub mod routine_load;
#[cfg(madsim)]
pub mod service;
pub mod stream_load;
pub mod txn;
pub mod types;

pub use error::DorisError;

#[cfg(test)]
mod group_commit_tests;
#[cfg(all(test, madsim))]
mod service_tests;
#[cfg(test)]
mod tests;

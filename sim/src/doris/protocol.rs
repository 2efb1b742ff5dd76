//! The doris-fe and doris-be nodes' requests and responses, and their synchronous
//! dispatch against the model ([`Doris::handle_fe`], [`Doris::handle_be`]); the madsim
//! nodes in `service` add what crosses the network (the FE needs the BE for reads,
//! commits and publish; the BE needs the FE for Stream Load and writes).

use super::error::DorisError;
use super::fe_routine_load::{CreateRoutineLoad, TaskAssignment};
use super::model::{Doris, WriteSummary};
use super::routine_load::{RlTaskTxnCommitAttachment, ShowRoutineLoad};
use super::stream_load::{StreamLoad, StreamLoadResponse, TxnOperation};
use super::txn::{TransactionState, TransactionStatus};
use super::types::{LoadSpec, Row, TableDef};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A request to the FE (MySQL protocol statements and the FE's HTTP API, typed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FeRequest {
    /// `CREATE DATABASE IF NOT EXISTS`.
    CreateDatabase(String),
    /// `CREATE TABLE db.t`.
    CreateTable {
        /// Database.
        db: String,
        /// Definition.
        def: TableDef,
    },
    /// `SELECT * FROM db.table` (VISIBLE data).
    Select {
        /// Database.
        db: String,
        /// Table.
        table: String,
    },
    /// `CREATE ROUTINE LOAD`, with the topic's partitions as the FE fetched them.
    CreateRoutineLoad {
        /// The statement.
        req: Box<CreateRoutineLoad>,
        /// The topic's partitions.
        partitions: Vec<i32>,
    },
    /// `SHOW ROUTINE LOAD FOR db.name`.
    ShowRoutineLoad {
        /// Database.
        db: String,
        /// Job name.
        name: String,
    },
    /// `PAUSE` / `RESUME` / `STOP ROUTINE LOAD FOR db.name`.
    AlterRoutineLoad {
        /// Database.
        db: String,
        /// Job name.
        name: String,
        /// `PAUSE`, `RESUME` or `STOP`.
        verb: String,
    },
    /// The partitions' latest offsets for `Lag`.
    UpdateLatestOffsets {
        /// Job.
        job_id: u64,
        /// Partition → latest offset.
        latest: BTreeMap<i32, i64>,
    },
    /// A task executor asks for work.
    TakeTask,
    /// A task's commit with its attachment.
    CommitTask {
        /// Transaction.
        txn_id: u64,
        /// Attachment.
        attachment: RlTaskTxnCommitAttachment,
    },
    /// A task's abort.
    AbortTask {
        /// Transaction.
        txn_id: u64,
        /// Reason.
        reason: String,
        /// The attachment, when the batch was read.
        attachment: Option<RlTaskTxnCommitAttachment>,
        /// Pause the job (auto-resumable).
        pause: bool,
    },
    /// `_stream_load_2pc`.
    StreamLoad2pc {
        /// Database.
        db: String,
        /// Transaction.
        txn_id: u64,
        /// Commit or abort.
        op: TxnOperation,
    },
    /// `SHOW TRANSACTION FROM db WHERE LABEL = ...`.
    ShowTransaction {
        /// Database.
        db: String,
        /// Label.
        label: String,
    },
    /// `SHOW TRANSACTION FROM db WHERE LABEL LIKE 'prefix%'`: each matching label's
    /// latest transaction.
    ShowTransactionsLike {
        /// Database.
        db: String,
        /// The labels' common prefix.
        label_prefix: String,
    },
}

/// The FE's successful answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FeResponse {
    /// Done.
    Ok,
    /// Rows.
    Rows(Vec<Row>),
    /// A created job's id.
    JobId(u64),
    /// `SHOW ROUTINE LOAD`.
    RoutineLoad(Box<ShowRoutineLoad>),
    /// A task, or none to run now.
    Task(Option<Box<TaskAssignment>>),
    /// `SHOW TRANSACTION`.
    Transaction(Option<Box<TransactionState>>),
    /// `SHOW TRANSACTION ... LIKE`: `Label` and `TransactionStatus` of each row, by label.
    Transactions(Vec<(String, TransactionStatus)>),
}

/// A request to a BE.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BeRequest {
    /// Write JSON inputs into a PREPARE transaction (a load channel).
    Write {
        /// Transaction.
        txn_id: u64,
        /// Conversion.
        spec: LoadSpec,
        /// JSON texts.
        inputs: Vec<String>,
    },
    /// Stream Load (the BE coordinates it with the FE).
    StreamLoad(StreamLoad),
    /// Liveness probe (the FE's heartbeat).
    Ping,
}

/// A BE's successful answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BeResponse {
    /// A write's counts.
    Written(WriteSummary),
    /// A Stream Load's answer (its failures are in its `Status`).
    StreamLoaded(StreamLoadResponse),
    /// Alive.
    Pong,
}

/// The FE's answer.
pub type FeReply = Result<FeResponse, DorisError>;
/// A BE's answer.
pub type BeReply = Result<BeResponse, DorisError>;

impl Doris {
    /// Serves an FE request at `now_ms`.
    ///
    /// # Errors
    /// The FE's error for it.
    pub fn handle_fe(&mut self, now_ms: u64, request: FeRequest) -> FeReply {
        use FeResponse as R;
        match request {
            FeRequest::CreateDatabase(db) => {
                self.create_database(&db);
                Ok(R::Ok)
            }
            FeRequest::CreateTable { db, def } => self.create_table(&db, def).map(|_| R::Ok),
            FeRequest::Select { db, table } => self.select(&db, &table).map(R::Rows),
            FeRequest::CreateRoutineLoad { req, partitions } => {
                self.create_routine_load(*req, &partitions).map(R::JobId)
            }
            FeRequest::ShowRoutineLoad { db, name } => self
                .show_routine_load(&db, &name)
                .map(|s| R::RoutineLoad(Box::new(s))),
            FeRequest::AlterRoutineLoad { db, name, verb } => match verb.as_str() {
                "PAUSE" => self.pause_routine_load(now_ms, &db, &name),
                "RESUME" => self.resume_routine_load(now_ms, &db, &name),
                "STOP" => self.stop_routine_load(now_ms, &db, &name),
                _ => Err(DorisError::Analysis(format!("unknown verb {verb}"))),
            }
            .map(|_| R::Ok),
            FeRequest::UpdateLatestOffsets { job_id, latest } => {
                self.update_latest_offsets(job_id, latest);
                Ok(R::Ok)
            }
            FeRequest::TakeTask => Ok(R::Task(self.take_task(now_ms).map(Box::new))),
            FeRequest::CommitTask { txn_id, attachment } => {
                self.commit_task(now_ms, txn_id, attachment).map(|_| R::Ok)
            }
            FeRequest::AbortTask {
                txn_id,
                reason,
                attachment,
                pause,
            } => self
                .abort_task(now_ms, txn_id, &reason, attachment, pause)
                .map(|_| R::Ok),
            FeRequest::StreamLoad2pc { db, txn_id, op } => {
                self.stream_load_2pc(now_ms, &db, txn_id, op).map(|_| R::Ok)
            }
            FeRequest::ShowTransaction { db, label } => Ok(R::Transaction(
                self.transaction_by_label(&db, &label)
                    .cloned()
                    .map(Box::new),
            )),
            FeRequest::ShowTransactionsLike { db, label_prefix } => Ok(R::Transactions(
                self.fe
                    .txns
                    .by_label_prefix(&db, &label_prefix)
                    .into_iter()
                    .map(|t| (t.label.clone(), t.status))
                    .collect(),
            )),
        }
    }

    /// Serves a BE request at `now_ms`.
    ///
    /// # Errors
    /// The BE's error for it.
    pub fn handle_be(&mut self, now_ms: u64, request: BeRequest) -> BeReply {
        match request {
            BeRequest::Write {
                txn_id,
                spec,
                inputs,
            } => self.write(txn_id, &spec, &inputs).map(BeResponse::Written),
            BeRequest::StreamLoad(req) => {
                Ok(BeResponse::StreamLoaded(self.stream_load(now_ms, req)))
            }
            BeRequest::Ping => Ok(BeResponse::Pong),
        }
    }
}

impl FeRequest {
    /// Whether serving it needs a live BE (reads, commits: the tablets and load channels
    /// are there).
    pub fn needs_be(&self) -> bool {
        matches!(
            self,
            Self::Select { .. } | Self::CommitTask { .. } | Self::StreamLoad2pc { .. }
        )
    }
}

//! Doris errors, worded as the FE reports them (`errCode = 2, detailMessage = ...` in the
//! MySQL protocol, `msg` in a Stream Load response), so a client can match them as the
//! Doris connectors do (`ResponseUtil.isCommitted` in apache/doris-flink-connector).

use super::txn::TransactionStatus;
use serde::{Deserialize, Serialize};

/// A Doris error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum DorisError {
    /// A label in use by a transaction that is not ABORTED
    /// (`org.apache.doris.common.LabelAlreadyUsedException`); Stream Load reports it as
    /// `Status: "Label Already Exists"` with `ExistingJobStatus`.
    #[error("Label [{label}] has already been used, relate to txn [{txn_id}]")]
    LabelAlreadyExists {
        /// The label.
        label: String,
        /// The transaction that holds it.
        txn_id: u64,
        /// `RUNNING` (PREPARE), `PRECOMMITTED` or `FINISHED` (COMMITTED, VISIBLE).
        existing_job_status: String,
    },
    /// No transaction with this id (`DatabaseTransactionMgr.commitTransaction`).
    #[error("transaction [{0}] not found.")]
    TxnNotFound(u64),
    /// Commit of an ABORTED transaction.
    #[error("transaction [{txn_id}] is already aborted. abort reason: {reason}")]
    TxnAlreadyAborted {
        /// Transaction.
        txn_id: u64,
        /// Why it was aborted (`User Abort`, `timeout by txn manager`, ...).
        reason: String,
    },
    /// A 2PC operation on a transaction that is not PRECOMMITTED
    /// (`transaction [n] is prepare, not pre-committed.` and its siblings).
    #[error("transaction [{txn_id}] is {state}, not pre-committed.")]
    TxnNotPrecommitted {
        /// Transaction.
        txn_id: u64,
        /// `prepare`, `already committed`, `already visible`.
        state: String,
    },
    /// A state change the transaction's status does not allow (abort of a COMMITTED
    /// transaction: `transaction's state is already COMMITTED, could not abort`).
    #[error("transaction [{txn_id}]'s state is already {status:?}, could not {op}")]
    TxnStateInvalid {
        /// Transaction.
        txn_id: u64,
        /// Its status.
        status: TransactionStatus,
        /// `commit`, `abort`, `load`.
        op: String,
    },
    /// A Routine Load task's commit after the FE dropped the task (timeout, pause, FE
    /// restart): `RoutineLoadJob.executeBeforeCheck`.
    #[error("txn {txn_id} could not be COMMITTED while task {label} has been aborted.")]
    TaskAborted {
        /// Transaction.
        txn_id: u64,
        /// The task's label.
        label: String,
    },
    /// Stream Load or Routine Load task filtered more rows than allowed.
    #[error("[DATA_QUALITY_ERROR]too many filtered rows: {filtered} of {total}")]
    TooManyFilteredRows {
        /// Rows filtered (error rows).
        filtered: u64,
        /// Rows read.
        total: u64,
    },
    /// Unknown database (`ERR_BAD_DB_ERROR`, 1049).
    #[error("Unknown database '{0}'")]
    UnknownDatabase(String),
    /// Unknown table (`ERR_BAD_TABLE_ERROR`, 1051).
    #[error("Unknown table '{0}'")]
    UnknownTable(String),
    /// `CREATE TABLE` of an existing table (`ERR_TABLE_EXISTS_ERROR`, 1050).
    #[error("Table '{0}' already exists")]
    TableExists(String),
    /// A bad DDL or job definition: names what and why.
    #[error("{0}")]
    Analysis(String),
    /// No Routine Load job of this name in the database.
    #[error("Job [{0}] does not exist")]
    JobNotFound(String),
    /// A job state change `RoutineLoadJob.checkStateTransform` refuses.
    #[error("Could not transform {from} to {to}")]
    JobStateTransform {
        /// The job's state.
        from: String,
        /// The requested one.
        to: String,
    },
    /// The BE holding the data is down or unreachable (a load channel or publish failed).
    #[error("no available backend: {0}")]
    BackendUnavailable(String),
}

impl DorisError {
    /// Whether a client may read this error on `commit` as "the transaction is in":
    /// the Doris connectors' `ResponseUtil.isCommitted` accepts `already visible` and
    /// `already committed`.
    pub fn means_committed(&self) -> bool {
        matches!(self, Self::TxnNotPrecommitted { state, .. } if state.starts_with("already"))
    }
}

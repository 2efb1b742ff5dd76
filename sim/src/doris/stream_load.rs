//! Stream Load (`PUT /api/{db}/{table}/_stream_load`) and its second phase
//! (`PUT /api/{db}/_stream_load_2pc`), answered as `StreamLoadAction` /
//! `StreamLoad2PCAction` answer: a JSON body with `TxnId`, `Label`, `Status`
//! (`Success`, `Label Already Exists` with `ExistingJobStatus`, `Fail`), `Message`,
//! `NumberTotalRows`, `NumberLoadedRows`, `NumberFilteredRows`, `LoadBytes`.
//!
//! A `group_commit` header other than `off_mode` on a load without label and two-phase
//! commit runs it in its table's group commit internal load ([`super::group_commit`]).
//!
//! `max_filter_ratio` (default 0): a load whose filtered / total rows exceed it is
//! aborted (`[DATA_QUALITY_ERROR]too many filtered rows`). With `two_phase_commit: true`
//! a successful load ends PRECOMMITTED; otherwise COMMITTED, then VISIBLE at the next
//! publish (the real action waits for the publish up to a timeout and says
//! `Publish Timeout` when it did not come; here the caller ticks the model).

use super::error::DorisError;
use super::group_commit::GroupCommitMode;
use super::model::{Doris, WriteSummary};
use super::txn::{BeginTxn, LoadSource, STREAM_LOAD_TIMEOUT_MS, USER_ABORT_REASON};
use super::types::LoadSpec;
use serde::{Deserialize, Serialize};

/// A Stream Load request (the headers that matter, and the body as JSON lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamLoad {
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// `label` header (`None`: the FE makes one).
    pub label: Option<String>,
    /// `columns`, `jsonpaths`, `strict_mode` (`format: json`, `read_json_by_line: true`).
    pub spec: LoadSpec,
    /// `max_filter_ratio`.
    pub max_filter_ratio: f64,
    /// `two_phase_commit`.
    pub two_phase_commit: bool,
    /// `group_commit` (see [`super::group_commit`]; `Off` when the header is absent).
    #[serde(default)]
    pub group_commit: GroupCommitMode,
    /// The body: one JSON object per line.
    pub lines: Vec<String>,
}

/// `Status` of a Stream Load answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamLoadStatus {
    /// `Success`.
    Success,
    /// `Label Already Exists`, with `ExistingJobStatus`.
    LabelAlreadyExists(String),
    /// `Fail`.
    Fail,
}

/// A Stream Load answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamLoadResponse {
    /// `TxnId` (0 when none began).
    pub txn_id: u64,
    /// `Label`.
    pub label: String,
    /// `Status`.
    pub status: StreamLoadStatus,
    /// `Message`.
    pub message: String,
    /// `NumberTotalRows`.
    pub number_total_rows: u64,
    /// `NumberLoadedRows`.
    pub number_loaded_rows: u64,
    /// `NumberFilteredRows`.
    pub number_filtered_rows: u64,
    /// `LoadBytes`.
    pub load_bytes: u64,
    /// `GroupCommit`: the load ran in a group commit internal load.
    #[serde(default)]
    pub group_commit: bool,
}

impl StreamLoadResponse {
    /// An answer for `label` that says `Fail` with nothing counted and no transaction yet
    /// (`group_commit`: whether the load runs in a group commit internal load).
    pub(super) fn failed(label: String, group_commit: bool) -> Self {
        Self {
            txn_id: 0,
            label,
            status: StreamLoadStatus::Fail,
            message: String::new(),
            number_total_rows: 0,
            number_loaded_rows: 0,
            number_filtered_rows: 0,
            load_bytes: 0,
            group_commit,
        }
    }

    /// Takes the counts of `summary` and applies `max_filter_ratio`.
    ///
    /// # Errors
    /// [`DorisError::TooManyFilteredRows`] when filtered / total rows exceed it.
    pub(super) fn count(
        &mut self,
        summary: &WriteSummary,
        max_filter_ratio: f64,
    ) -> Result<(), DorisError> {
        self.number_total_rows = summary.total_rows;
        self.number_loaded_rows = summary.loaded_rows;
        self.number_filtered_rows = summary.filtered_rows;
        self.load_bytes = summary.received_bytes;
        let ratio = summary.filtered_rows as f64 / summary.total_rows.max(1) as f64;
        if ratio > max_filter_ratio {
            crate::mark!("doris:stream-load-too-many-filtered");
            return Err(DorisError::TooManyFilteredRows {
                filtered: summary.filtered_rows,
                total: summary.total_rows,
            });
        }
        Ok(())
    }
}

/// `txn_operation` of `_stream_load_2pc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnOperation {
    /// `commit`.
    Commit,
    /// `abort`.
    Abort,
}

impl Doris {
    /// Runs one Stream Load at `now_ms`.
    pub fn stream_load(&mut self, now_ms: u64, req: StreamLoad) -> StreamLoadResponse {
        if req.group_commit != GroupCommitMode::Off {
            if req.label.is_none() && !req.two_phase_commit {
                return self.group_commit_load(now_ms, &req);
            }
            crate::mark!("doris:group-commit-bypassed");
        }
        let label = req
            .label
            .clone()
            .unwrap_or_else(|| format!("stream_load_{}", self.fe.txns.all().count() + 1));
        let mut resp = StreamLoadResponse::failed(label.clone(), false);
        let begin = BeginTxn {
            db: req.db.clone(),
            table: req.table.clone(),
            label,
            source: LoadSource::StreamLoad {
                two_phase: req.two_phase_commit,
            },
            timeout_ms: STREAM_LOAD_TIMEOUT_MS,
        };
        match self.begin(now_ms, begin) {
            Ok(txn_id) => resp.txn_id = txn_id,
            Err(DorisError::LabelAlreadyExists {
                existing_job_status,
                ..
            }) => {
                resp.message = format!("Label [{}] has already been used.", resp.label);
                resp.status = StreamLoadStatus::LabelAlreadyExists(existing_job_status);
                return resp;
            }
            Err(e) => {
                resp.message = e.to_string();
                return resp;
            }
        }
        if let Err(e) = self.load_and_finish(now_ms, &req, &mut resp) {
            let _ = self.abort(now_ms, resp.txn_id, &e.to_string());
            resp.message = e.to_string();
            resp.status = StreamLoadStatus::Fail;
        }
        resp
    }

    fn load_and_finish(
        &mut self,
        now_ms: u64,
        req: &StreamLoad,
        resp: &mut StreamLoadResponse,
    ) -> Result<(), DorisError> {
        let summary = self.write(resp.txn_id, &req.spec, &req.lines)?;
        resp.count(&summary, req.max_filter_ratio)?;
        if req.two_phase_commit {
            self.precommit(now_ms, resp.txn_id)?;
        } else {
            self.commit(now_ms, resp.txn_id, None)?;
        }
        resp.status = StreamLoadStatus::Success;
        resp.message = "OK".into();
        Ok(())
    }

    /// `_stream_load_2pc`: commits or aborts PRECOMMITTED `txn_id` of `db`.
    ///
    /// # Errors
    /// The FE's messages: `transaction [n] not found.`, `is already aborted`,
    /// `is prepare / already committed / already visible, not pre-committed.`
    pub fn stream_load_2pc(
        &mut self,
        now_ms: u64,
        db: &str,
        txn_id: u64,
        op: TxnOperation,
    ) -> Result<(), DorisError> {
        let in_db = self.fe.txns.get(txn_id).is_some_and(|t| t.db == db);
        if !in_db {
            return Err(DorisError::TxnNotFound(txn_id));
        }
        self.fe.txns.check_precommitted(txn_id)?;
        match op {
            TxnOperation::Commit => self.commit_prepared(now_ms, txn_id),
            TxnOperation::Abort => {
                crate::mark!("doris:stream-load-2pc-abort");
                self.abort(now_ms, txn_id, USER_ABORT_REASON)
            }
        }
    }
}

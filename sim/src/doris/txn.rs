//! The FE's transaction manager: labels, transaction states, timeouts, label expiry.
//!
//! Sources (apache/doris, `fe/fe-core/src/main/java/org/apache/doris/transaction/`):
//! `TransactionStatus` (UNKNOWN, PREPARE, COMMITTED, VISIBLE, ABORTED, PRECOMMITTED;
//! VISIBLE and ABORTED are final), `GlobalTransactionMgr` / `DatabaseTransactionMgr`
//! (`beginTransaction` checks the label: a label held by a transaction that is not ABORTED
//! raises `LabelAlreadyUsedException`; `commitTransaction` and `commitPreparedTransaction`
//! with the messages of [`DorisError`]; `removeExpiredAndTimeoutTxns` aborts PREPARE
//! transactions past their timeout with reason `timeout by txn manager` and forgets final
//! transactions, and so their labels, after `label_keep_max_second`), `TransactionState`
//! (prepare/commit/finish times, reason, `TxnCommitAttachment`).
//!
//! Everything here is in the FE's journal (the edit log): an FE restart keeps it.

use super::error::DorisError;
use super::routine_load::RlTaskTxnCommitAttachment;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `label_keep_max_second` default: 3 days.
pub const LABEL_KEEP_MAX_MS: u64 = 3 * 24 * 3600 * 1000;
/// Stream Load's default `timeout`: 600 s (`stream_load_default_timeout_second`).
pub const STREAM_LOAD_TIMEOUT_MS: u64 = 600_000;
/// `stream_load_default_precommit_timeout_second` default: 3600 s, after which the FE
/// aborts a PRECOMMITTED transaction (`TransactionState.isTimeout`).
pub const PRECOMMIT_TIMEOUT_MS: u64 = 3_600_000;
/// The abort reason of a transaction past its timeout.
pub const TIMEOUT_REASON: &str = "timeout by txn manager";
/// The abort reason of a user abort (`_stream_load_2pc` with `txn_operation: abort`).
pub const USER_ABORT_REASON: &str = "User Abort";

/// `org.apache.doris.transaction.TransactionStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TransactionStatus {
    /// Begun; data being written.
    Prepare,
    /// 2PC: data written, waiting for commit or abort.
    Precommitted,
    /// Committed; publish to the BE pending: not yet readable.
    Committed,
    /// Published: readable.
    Visible,
    /// Aborted.
    Aborted,
}

impl TransactionStatus {
    /// VISIBLE or ABORTED (`isFinalStatus`).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Visible | Self::Aborted)
    }
}

/// What began a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadSource {
    /// Stream Load (`two_phase_commit`).
    StreamLoad {
        /// `two_phase_commit: true`.
        two_phase: bool,
    },
    /// A Routine Load task.
    RoutineLoad {
        /// The job.
        job_id: u64,
        /// The task.
        task_id: u64,
    },
}

/// `TransactionState`: one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransactionState {
    /// Transaction id (increasing).
    pub txn_id: u64,
    /// Database.
    pub db: String,
    /// Table loaded.
    pub table: String,
    /// Label.
    pub label: String,
    /// Status.
    pub status: TransactionStatus,
    /// What began it.
    pub source: LoadSource,
    /// Begin time, ms.
    pub prepare_time_ms: u64,
    /// Commit (or precommit) time, ms.
    pub commit_time_ms: Option<u64>,
    /// VISIBLE or ABORTED time, ms.
    pub finish_time_ms: Option<u64>,
    /// Timeout, ms: a PREPARE transaction older than this is aborted.
    pub timeout_ms: u64,
    /// Abort reason.
    pub reason: String,
    /// The Routine Load attachment recorded with the commit (or the abort).
    pub attachment: Option<RlTaskTxnCommitAttachment>,
    /// The table version the publish gave it.
    pub version: Option<u64>,
}

/// The transaction manager of all databases.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TxnManager {
    next_txn_id: u64,
    txns: BTreeMap<u64, TransactionState>,
    /// (db, label) → transactions that used it, oldest first.
    labels: BTreeMap<(String, String), Vec<u64>>,
}

/// What [`TxnManager::begin`] needs.
#[derive(Debug, Clone)]
pub struct BeginTxn {
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// Label.
    pub label: String,
    /// Source.
    pub source: LoadSource,
    /// Timeout, ms.
    pub timeout_ms: u64,
}

impl TxnManager {
    /// Begins a transaction at `now_ms`.
    ///
    /// # Errors
    /// [`DorisError::LabelAlreadyExists`] when a transaction that is not ABORTED holds
    /// the label in this database.
    pub fn begin(&mut self, now_ms: u64, req: BeginTxn) -> Result<u64, DorisError> {
        let key = (req.db.clone(), req.label.clone());
        if let Some(holder) = self.label_holder(&key) {
            crate::mark!("doris:label-already-exists");
            return Err(DorisError::LabelAlreadyExists {
                label: req.label,
                txn_id: holder.txn_id,
                existing_job_status: existing_job_status(holder.status).into(),
            });
        }
        self.next_txn_id += 1;
        let txn_id = self.next_txn_id;
        self.labels.entry(key).or_default().push(txn_id);
        let state = TransactionState {
            txn_id,
            db: req.db,
            table: req.table,
            label: req.label,
            status: TransactionStatus::Prepare,
            source: req.source,
            prepare_time_ms: now_ms,
            commit_time_ms: None,
            finish_time_ms: None,
            timeout_ms: req.timeout_ms,
            reason: String::new(),
            attachment: None,
            version: None,
        };
        self.txns.insert(txn_id, state);
        Ok(txn_id)
    }

    fn label_holder(&self, key: &(String, String)) -> Option<&TransactionState> {
        let ids = self.labels.get(key)?;
        ids.iter()
            .filter_map(|id| self.txns.get(id))
            .find(|t| t.status != TransactionStatus::Aborted)
    }

    /// The transaction `txn_id`.
    pub fn get(&self, txn_id: u64) -> Option<&TransactionState> {
        self.txns.get(&txn_id)
    }

    /// The latest transaction of `label` in `db` (`SHOW TRANSACTION WHERE LABEL = ...`).
    pub fn by_label(&self, db: &str, label: &str) -> Option<&TransactionState> {
        let ids = self.labels.get(&(db.to_string(), label.to_string()))?;
        ids.last().and_then(|id| self.txns.get(id))
    }

    /// The latest transaction of every label of `db` that starts with `prefix`, by label
    /// (`SHOW TRANSACTION FROM db WHERE LABEL LIKE 'prefix%'`, which the Doris Kafka
    /// connector's `StreamLoadWriter.fetchLabel2Status` runs).
    pub fn by_label_prefix(&self, db: &str, prefix: &str) -> Vec<&TransactionState> {
        let start = (db.to_string(), prefix.to_string());
        self.labels
            .range(start..)
            .take_while(|((d, label), _)| d == db && label.starts_with(prefix))
            .filter_map(|(_, ids)| ids.last().and_then(|id| self.txns.get(id)))
            .collect()
    }

    /// Every transaction still remembered, by id.
    pub fn all(&self) -> impl Iterator<Item = &TransactionState> {
        self.txns.values()
    }

    /// A PREPARE transaction, for writing or committing.
    ///
    /// # Errors
    /// Not found, aborted, or in another state.
    pub fn prepared(&self, txn_id: u64, op: &str) -> Result<&TransactionState, DorisError> {
        let txn = self
            .txns
            .get(&txn_id)
            .ok_or(DorisError::TxnNotFound(txn_id))?;
        match txn.status {
            TransactionStatus::Prepare => Ok(txn),
            TransactionStatus::Aborted => Err(DorisError::TxnAlreadyAborted {
                txn_id,
                reason: txn.reason.clone(),
            }),
            status => Err(DorisError::TxnStateInvalid {
                txn_id,
                status,
                op: op.into(),
            }),
        }
    }

    /// PREPARE → PRECOMMITTED (Stream Load's first phase).
    ///
    /// # Errors
    /// As [`TxnManager::prepared`].
    pub fn precommit(&mut self, now_ms: u64, txn_id: u64) -> Result<(), DorisError> {
        self.prepared(txn_id, "precommit")?;
        let txn = self.txns.get_mut(&txn_id).expect("checked above");
        txn.status = TransactionStatus::Precommitted;
        txn.commit_time_ms = Some(now_ms);
        Ok(())
    }

    /// PREPARE → COMMITTED (one-phase) with the Routine Load `attachment`.
    ///
    /// # Errors
    /// As [`TxnManager::prepared`].
    pub fn commit(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        attachment: Option<RlTaskTxnCommitAttachment>,
    ) -> Result<(), DorisError> {
        self.prepared(txn_id, "commit")?;
        let txn = self.txns.get_mut(&txn_id).expect("checked above");
        txn.status = TransactionStatus::Committed;
        txn.commit_time_ms = Some(now_ms);
        txn.attachment = attachment;
        Ok(())
    }

    /// Checks that `txn_id` is PRECOMMITTED (the second phase's precondition).
    ///
    /// # Errors
    /// `transaction [n] is prepare / already committed / already visible, not
    /// pre-committed.`, already aborted, not found.
    pub fn check_precommitted(&self, txn_id: u64) -> Result<(), DorisError> {
        let txn = self
            .txns
            .get(&txn_id)
            .ok_or(DorisError::TxnNotFound(txn_id))?;
        let state = match txn.status {
            TransactionStatus::Precommitted => return Ok(()),
            TransactionStatus::Aborted => {
                return Err(DorisError::TxnAlreadyAborted {
                    txn_id,
                    reason: txn.reason.clone(),
                })
            }
            TransactionStatus::Prepare => "prepare",
            TransactionStatus::Committed => "already committed",
            TransactionStatus::Visible => "already visible",
        };
        Err(DorisError::TxnNotPrecommitted {
            txn_id,
            state: state.into(),
        })
    }

    /// PRECOMMITTED → COMMITTED (`_stream_load_2pc`, `txn_operation: commit`).
    ///
    /// # Errors
    /// As [`TxnManager::check_precommitted`].
    pub fn commit_prepared(&mut self, now_ms: u64, txn_id: u64) -> Result<(), DorisError> {
        self.check_precommitted(txn_id)?;
        let txn = self.txns.get_mut(&txn_id).expect("checked above");
        txn.status = TransactionStatus::Committed;
        txn.commit_time_ms = Some(now_ms);
        Ok(())
    }

    /// PREPARE or PRECOMMITTED → ABORTED with `reason` (and, for a Routine Load task the
    /// BE aborted, the attachment it reported).
    ///
    /// # Errors
    /// Not found; `TxnStateInvalid` for COMMITTED/VISIBLE; aborting an ABORTED
    /// transaction is a no-op.
    pub fn abort(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        reason: &str,
        attachment: Option<RlTaskTxnCommitAttachment>,
    ) -> Result<(), DorisError> {
        let txn = self
            .txns
            .get_mut(&txn_id)
            .ok_or(DorisError::TxnNotFound(txn_id))?;
        match txn.status {
            TransactionStatus::Prepare | TransactionStatus::Precommitted => {
                txn.status = TransactionStatus::Aborted;
                txn.finish_time_ms = Some(now_ms);
                txn.reason = reason.into();
                txn.attachment = attachment;
                Ok(())
            }
            TransactionStatus::Aborted => Ok(()),
            status => Err(DorisError::TxnStateInvalid {
                txn_id,
                status,
                op: "abort".into(),
            }),
        }
    }

    /// COMMITTED → VISIBLE with table `version` (the publish succeeded on the BE).
    pub fn make_visible(&mut self, now_ms: u64, txn_id: u64, version: u64) {
        let txn = self.txns.get_mut(&txn_id).expect("publish of a known txn");
        assert_eq!(
            txn.status,
            TransactionStatus::Committed,
            "publish of {txn_id}"
        );
        txn.status = TransactionStatus::Visible;
        txn.finish_time_ms = Some(now_ms);
        txn.version = Some(version);
    }

    /// COMMITTED transactions waiting for publish, in commit order (= id order here).
    pub fn committed(&self) -> Vec<u64> {
        let mut ids: Vec<(u64, u64)> = self
            .txns
            .values()
            .filter(|t| t.status == TransactionStatus::Committed)
            .map(|t| (t.commit_time_ms.unwrap_or(0), t.txn_id))
            .collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// `removeExpiredAndTimeoutTxns` at `now_ms`: aborts the transactions past their
    /// timeout (returned) as `TransactionState.isTimeout` decides: PREPARE ones older than
    /// their timeout, PRECOMMITTED ones precommitted more than `precommit_timeout_ms` ago
    /// (`stream_load_default_precommit_timeout_second`); forgets final ones older than
    /// `label_keep_ms`.
    pub fn expire(
        &mut self,
        now_ms: u64,
        label_keep_ms: u64,
        precommit_timeout_ms: u64,
    ) -> Vec<u64> {
        let timed_out: Vec<u64> = self
            .txns
            .values()
            .filter(|t| match t.status {
                TransactionStatus::Prepare => {
                    now_ms.saturating_sub(t.prepare_time_ms) > t.timeout_ms
                }
                TransactionStatus::Precommitted => {
                    let since = t.commit_time_ms.unwrap_or(t.prepare_time_ms);
                    now_ms.saturating_sub(since) > precommit_timeout_ms
                }
                _ => false,
            })
            .map(|t| t.txn_id)
            .collect();
        for id in &timed_out {
            if self.txns[id].status == TransactionStatus::Precommitted {
                crate::mark!("doris:precommitted-timeout");
            }
            crate::mark!("doris:txn-timeout");
            self.abort(now_ms, *id, TIMEOUT_REASON, None)
                .expect("PREPARE and PRECOMMITTED abort");
        }
        let expired: Vec<u64> = self
            .txns
            .values()
            .filter(|t| {
                t.finish_time_ms
                    .is_some_and(|f| now_ms.saturating_sub(f) > label_keep_ms)
            })
            .map(|t| t.txn_id)
            .collect();
        for id in expired {
            let txn = self.txns.remove(&id).expect("listed above");
            let key = (txn.db, txn.label);
            if let Some(ids) = self.labels.get_mut(&key) {
                ids.retain(|i| *i != id);
                if ids.is_empty() {
                    self.labels.remove(&key);
                }
            }
        }
        timed_out
    }
}

/// `LabelAlreadyUsedException`'s job status: RUNNING, PRECOMMITTED or FINISHED.
fn existing_job_status(status: TransactionStatus) -> &'static str {
    match status {
        TransactionStatus::Prepare => "RUNNING",
        TransactionStatus::Precommitted => "PRECOMMITTED",
        _ => "FINISHED",
    }
}

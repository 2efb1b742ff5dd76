//! Group commit: Stream Loads with a `group_commit` header (`sync_mode`, `async_mode`)
//! share one internal load per table instead of a transaction each.
//!
//! Sources: the Doris manual's Group Commit page (`docs/data-operate/import/
//! group-commit-manual.md`, apache/doris-website), apache/doris `be/src/olap/wal/`
//! (`wal_writer.cpp`, `wal_table.cpp`) and `be/src/runtime/group_commit_mgr.cpp`.
//!
//! Modelled:
//! - A Stream Load with `group_commit: sync_mode | async_mode`, no `label` and no
//!   `two_phase_commit` joins its table's open internal load (a transaction labelled
//!   `group_commit_<n>`, begun by the first such load); the answer says `GroupCommit:
//!   true` and carries the internal label and `TxnId`. A load that sets a label or
//!   two-phase commit is not grouped and runs as an ordinary Stream Load (the manual's
//!   Limitations), with mark `doris:group-commit-bypassed`.
//! - The internal load commits once it is `group_commit_interval_ms` old or holds
//!   `group_commit_data_bytes` (table properties, 10 s and 64 MiB by default), at the
//!   FE's next tick with the BE up; it is then published like any load.
//! - `sync_mode`: the user's load is answered when the internal load is VISIBLE (the
//!   service waits; [`Doris::group_commit_outcome`]), or fails with it.
//! - `async_mode`: the user's load is answered at once, after its rows are appended to the
//!   internal load's WAL on the BE. A BE restart loses the internal load's load channel,
//!   but the WAL is on disk: the BE replays it as `WalTable::_replay_wal_internal` does
//!   (abort the original transaction by label, then load the WAL's rows under the same
//!   label; a label already COMMITTED or VISIBLE counts as replayed). A committed
//!   internal load deletes its WAL.
//! - `WalWriter::append_blocks` writes without fsync, so a machine crash of the BE
//!   ([`Doris::crash_be_machine`]) keeps of each WAL only a prefix (what the OS had written
//!   back): acknowledged `async_mode` rows can be lost.
//! - `max_filter_ratio` is applied per user load (the manual: it holds while the internal
//!   load has fewer than `group_commit_memory_rows_for_max_filter_ratio`, 10000, rows,
//!   which every scaled-down run stays under).
//!
//! Not modelled: `async_mode` falling back to `sync_mode` when the WAL disk fills;
//! several BEs (one internal load per table); schema-change blocking; `INSERT INTO
//! VALUES` and HTTP Stream (only Stream Load is served); the replay's retry back-off.

use super::error::DorisError;
use super::model::{convert_rows, Doris};
use super::stream_load::{StreamLoad, StreamLoadResponse, StreamLoadStatus};
use super::txn::{BeginTxn, LoadSource, TransactionStatus, STREAM_LOAD_TIMEOUT_MS};
use super::types::Row;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `group_commit_interval_ms` default (table property), ms.
pub const GROUP_COMMIT_INTERVAL_MS: u64 = 10_000;
/// `group_commit_data_bytes` default (table property), bytes.
pub const GROUP_COMMIT_DATA_BYTES: u64 = 64 * 1024 * 1024;
/// Prefix of the internal loads' labels.
pub const GROUP_COMMIT_LABEL_PREFIX: &str = "group_commit_";

/// The Stream Load `group_commit` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum GroupCommitMode {
    /// `off_mode` (or no header): one transaction per load.
    #[default]
    Off,
    /// `sync_mode`: grouped, answered when the internal load is visible.
    Sync,
    /// `async_mode`: grouped, answered once written to the WAL.
    Async,
}

impl GroupCommitMode {
    /// Parses `off_mode`, `sync_mode` or `async_mode` (case-insensitive, trimmed, as the
    /// connector's `ConfigCheckUtils.validateGroupCommitMode` normalizes it).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off_mode" => Some(Self::Off),
            "sync_mode" => Some(Self::Sync),
            "async_mode" => Some(Self::Async),
            _ => None,
        }
    }

    /// The header value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off_mode",
            Self::Sync => "sync_mode",
            Self::Async => "async_mode",
        }
    }
}

/// A table's open internal load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct OpenLoad {
    txn_id: u64,
    label: String,
    began_ms: u64,
    bytes: u64,
}

/// One internal load's WAL file (`<wal_id>_<label>`): the rows of the `async_mode`
/// loads it acknowledged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Wal {
    db: String,
    table: String,
    rows: Vec<Row>,
}

/// The BE's group commit state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GroupCommitState {
    /// (db, table) → its open internal load (memory).
    open: BTreeMap<(String, String), OpenLoad>,
    /// Internal label → WAL (disk).
    wal: BTreeMap<String, Wal>,
    /// Internal loads begun so far (their labels' numbers).
    began: u64,
}

impl GroupCommitState {
    /// A BE restart: the open internal loads (memory) are gone, the WALs stay and are
    /// replayed.
    pub(super) fn on_restart(&mut self) {
        self.open.clear();
    }

    /// Rows in WALs not yet committed or replayed.
    pub fn wal_rows(&self) -> usize {
        self.wal.values().map(|w| w.rows.len()).sum()
    }

    /// What is still to become visible: `N group commit internal load(s) open` and `M
    /// WAL row(s) not yet committed`, or `None` when nothing is (a drain waits for it:
    /// acknowledged `async_mode` rows are visible only after the commit).
    pub fn pending(&self) -> Option<String> {
        let (open, rows) = (self.open.len(), self.wal_rows());
        (open > 0 || rows > 0).then(|| {
            format!(
                "{open} group commit internal load(s) open, {rows} WAL row(s) not yet committed"
            )
        })
    }
}

impl Doris {
    /// Runs `req` (its `group_commit` not `Off`, no label, no two-phase commit) in its
    /// table's open internal load at `now_ms`, beginning one when there is none.
    pub(super) fn group_commit_load(
        &mut self,
        now_ms: u64,
        req: &StreamLoad,
    ) -> StreamLoadResponse {
        let mut resp = StreamLoadResponse::failed(String::new(), true);
        if let Err(e) = self.group_commit_rows(now_ms, req, &mut resp) {
            resp.status = StreamLoadStatus::Fail;
            resp.message = e.to_string();
        }
        resp
    }

    fn group_commit_rows(
        &mut self,
        now_ms: u64,
        req: &StreamLoad,
        resp: &mut StreamLoadResponse,
    ) -> Result<(), DorisError> {
        let def = self.table(&req.db, &req.table)?.clone();
        let (summary, rows) = convert_rows(&def, &req.spec, &req.lines)?;
        resp.count(&summary, req.max_filter_ratio)?;
        let open = self.open_load(now_ms, &req.db, &req.table)?;
        resp.txn_id = open.txn_id;
        resp.label = open.label.clone();
        if req.group_commit == GroupCommitMode::Async {
            crate::mark!("doris:group-commit-async-acknowledged");
            let wal = self.be.group_commit.wal.entry(open.label.clone());
            let wal = wal.or_insert_with(|| Wal {
                db: req.db.clone(),
                table: req.table.clone(),
                rows: Vec::new(),
            });
            wal.rows.extend(rows.iter().cloned());
        } else {
            crate::mark!("doris:group-commit-sync-joined");
        }
        let key = (req.db.clone(), req.table.clone());
        let entry = self
            .be
            .group_commit
            .open
            .get_mut(&key)
            .expect("just opened");
        entry.bytes += summary.received_bytes;
        self.be.stage(open.txn_id, rows);
        resp.status = StreamLoadStatus::Success;
        resp.message = "OK".into();
        Ok(())
    }

    /// The open internal load of `db.table`, begun if there is none or the last one can no
    /// longer take rows (aborted by a timeout, its channel lost).
    fn open_load(&mut self, now_ms: u64, db: &str, table: &str) -> Result<OpenLoad, DorisError> {
        let key = (db.to_string(), table.to_string());
        if let Some(open) = self.be.group_commit.open.get(&key) {
            let usable = self.fe.txns.prepared(open.txn_id, "load").is_ok()
                && !self.be.lost.contains(&open.txn_id);
            if usable {
                return Ok(open.clone());
            }
            self.be.group_commit.open.remove(&key);
        }
        self.be.group_commit.began += 1;
        let label = format!("{GROUP_COMMIT_LABEL_PREFIX}{}", self.be.group_commit.began);
        let txn_id = self.begin(
            now_ms,
            BeginTxn {
                db: db.into(),
                table: table.into(),
                label: label.clone(),
                source: LoadSource::StreamLoad { two_phase: false },
                timeout_ms: STREAM_LOAD_TIMEOUT_MS,
            },
        )?;
        let open = OpenLoad {
            txn_id,
            label,
            began_ms: now_ms,
            bytes: 0,
        };
        self.be.group_commit.open.insert(key, open.clone());
        Ok(open)
    }

    /// Where a `sync_mode` load of internal transaction `txn_id` stands: `None` while the
    /// internal load is open or not yet visible, `Some(Ok)` once VISIBLE, `Some(Err)`
    /// with the reason once it is ABORTED, unknown or its load channel was lost.
    pub fn group_commit_outcome(&self, txn_id: u64) -> Option<Result<(), String>> {
        if self.be.lost.contains(&txn_id) {
            return Some(Err(format!(
                "group commit txn {txn_id}: its load channel was lost with a BE restart"
            )));
        }
        let Some(txn) = self.fe.txns.get(txn_id) else {
            return Some(Err(format!("transaction [{txn_id}] not found.")));
        };
        match txn.status {
            TransactionStatus::Visible => Some(Ok(())),
            TransactionStatus::Aborted => Some(Err(txn.reason.clone())),
            _ => None,
        }
    }

    /// Commits every internal load that is `group_commit_interval_ms` old or holds
    /// `group_commit_data_bytes` (the BE must be up). A committed load's WAL is deleted;
    /// one that cannot commit is aborted and its WAL, if any, replayed.
    pub(super) fn flush_group_commits(&mut self, now_ms: u64) {
        let (interval, size) = (
            self.config.group_commit_interval_ms,
            self.config.group_commit_data_bytes,
        );
        let due: Vec<(String, String)> = self
            .be
            .group_commit
            .open
            .iter()
            .filter(|(_, o)| now_ms.saturating_sub(o.began_ms) >= interval || o.bytes >= size)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let open = self.be.group_commit.open.remove(&key).expect("due load");
            match self.commit(now_ms, open.txn_id, None) {
                Ok(()) => {
                    crate::mark!("doris:group-commit-committed");
                    self.be.group_commit.wal.remove(&open.label);
                }
                Err(e) => {
                    crate::mark!("doris:group-commit-internal-load-failed");
                    let _ = self.abort(now_ms, open.txn_id, &e.to_string());
                }
            }
        }
    }

    /// Replays every WAL that belongs to no open internal load (left by a BE restart or a
    /// failed internal load), as `WalTable::_replay_wal_internal`: abort the original
    /// transaction by label, then load the rows under the same label and commit. A label
    /// already COMMITTED or VISIBLE means the rows are in: the WAL is deleted.
    pub(super) fn replay_wals(&mut self, now_ms: u64) {
        let open: Vec<&String> = self
            .be
            .group_commit
            .open
            .values()
            .map(|o| &o.label)
            .collect();
        let orphans: Vec<String> = self
            .be
            .group_commit
            .wal
            .keys()
            .filter(|label| !open.contains(label))
            .cloned()
            .collect();
        for label in orphans {
            let wal = self.be.group_commit.wal[&label].clone();
            let holder = self
                .fe
                .txns
                .by_label(&wal.db, &label)
                .map(|t| (t.txn_id, t.status));
            match holder {
                Some((_, TransactionStatus::Committed | TransactionStatus::Visible)) => {
                    crate::mark!("doris:group-commit-wal-already-committed");
                    self.be.group_commit.wal.remove(&label);
                    continue;
                }
                Some((txn_id, TransactionStatus::Prepare | TransactionStatus::Precommitted)) => {
                    let reason = format!("relay wal with label {label}");
                    let _ = self.abort(now_ms, txn_id, &reason);
                }
                _ => {}
            }
            let begin = BeginTxn {
                db: wal.db.clone(),
                table: wal.table.clone(),
                label: label.clone(),
                source: LoadSource::StreamLoad { two_phase: false },
                timeout_ms: STREAM_LOAD_TIMEOUT_MS,
            };
            let Ok(txn_id) = self.begin(now_ms, begin) else {
                continue;
            };
            self.be.stage(txn_id, wal.rows);
            if self.commit(now_ms, txn_id, None).is_ok() {
                crate::mark!("doris:group-commit-wal-replayed");
                self.be.group_commit.wal.remove(&label);
            } else {
                let _ = self.abort(now_ms, txn_id, "relay wal failed");
            }
        }
    }

    /// A machine crash of the BE (power loss): WAL appends are not fsynced
    /// (`WalWriter::append_blocks`), so each WAL keeps only the prefix `keep(len)` of its
    /// `len` rows says (anything from 0 to all: what the OS had written back). Returns
    /// the rows lost. The restart that follows is [`Doris::restart_be`].
    pub fn crash_be_machine(&mut self, mut keep: impl FnMut(usize) -> usize) -> usize {
        let mut lost = 0;
        for wal in self.be.group_commit.wal.values_mut() {
            let kept = keep(wal.rows.len()).min(wal.rows.len());
            lost += wal.rows.len() - kept;
            wal.rows.truncate(kept);
        }
        if lost > 0 {
            crate::mark!("doris:group-commit-wal-lost-unsynced");
        }
        lost
    }
}

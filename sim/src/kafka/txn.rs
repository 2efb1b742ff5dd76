//! The transaction coordinator (models-reference C.1–C.5, C.8, C.9; KIP-98, KIP-360,
//! KIP-588, KIP-890).
//!
//! One [`TransactionCoordinator`] holds the metadata of every `transactional.id` of the
//! cluster ([`TxnMetadata`]: producer id, epoch, state, partitions, timeout, timestamps).
//! The cluster model checks that the receiving broker leads the id's `__transaction_state`
//! partition (else `NOT_COORDINATOR` / `COORDINATOR_NOT_AVAILABLE`) and hands the request
//! here. Every transition is also appended to `__transaction_state` and a broker that
//! starts leading a partition of it reloads the ids of that partition from its own log
//! (`model::coordinator_log`): a clean move keeps the metadata, a lost log tail rolls it
//! back, and a Prepare* transaction has its markers sent again ([`TransactionCoordinator::restore`]).
//! The append takes no time, so there is never a pending transition and
//! `PrepareEpochFence` is passed through in one step.
//!
//! Markers are written by the cluster in [`crate::kafka::model::Cluster::tick`]: for each
//! transaction in `PrepareCommit`/`PrepareAbort` and each of its partitions still pending,
//! the cluster appends a control batch at the partition leader
//! ([`TransactionCoordinator::marker_appended`]) and, once the leader's HW passes it,
//! acknowledges it ([`TransactionCoordinator::marker_acknowledged`]); the last
//! acknowledgement moves the transaction to `CompleteCommit`/`CompleteAbort`.
//!
//! # Errors per request (C.3–C.5)
//! - InitProducerId: `INVALID_TRANSACTION_TIMEOUT` (timeout 0 or over
//!   `transaction.max.timeout.ms`); `CONCURRENT_TRANSACTIONS` while Prepare* (markers
//!   pending) and, after fencing an Ongoing transaction (epoch bump, abort started), on the
//!   request that fenced it; `PRODUCER_FENCED` when a KIP-360 re-init names another
//!   producer id, or (Empty / Complete*) an epoch that is neither the current nor the last
//!   one. An init without an expected epoch resets the last epoch to -1, so a fenced
//!   instance cannot pass for a retry of it.
//! - AddPartitionsToTxn / AddOffsetsToTxn: `INVALID_PRODUCER_ID_MAPPING` (unknown id or
//!   another producer id), `PRODUCER_FENCED` (epoch ≠ current), `CONCURRENT_TRANSACTIONS`
//!   (Prepare*).
//! - EndTxn: `INVALID_PRODUCER_ID_MAPPING`, `PRODUCER_FENCED`, `CONCURRENT_TRANSACTIONS`
//!   (retry while its own Prepare* runs), `INVALID_TXN_STATE` (Empty, or the other outcome
//!   than the one in progress/completed); a retry after completion answers NONE. TV2: a
//!   request with the previous epoch is a retry, one with the current epoch in
//!   Prepare*/Complete* is `INVALID_TXN_STATE`.

use super::types::*;
use super::versioned::Versioned;
use std::collections::{BTreeMap, BTreeSet};

/// First producer id handed out (ids are cluster-wide and never reused).
pub const FIRST_PRODUCER_ID: i64 = 1000;
/// Epoch at which a bump hands out a new producer id instead (`Short.MaxValue - 1`).
pub const PRODUCER_EPOCH_MAX: i16 = i16::MAX - 1;

/// Coordinator-side state of a transactional id (`TransactionState`, C.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum TxnState {
    /// No transaction in progress.
    Empty,
    /// Partitions added; data may be written.
    Ongoing,
    /// EndTxn(commit) accepted; COMMIT markers being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing InitProducerId; ABORT markers being written.
    PrepareAbort,
    /// Every COMMIT marker written.
    CompleteCommit,
    /// Every ABORT marker written.
    CompleteAbort,
    /// Expired (`transactional.id.expiration.ms`); the id is then removed.
    Dead,
    /// In-memory epoch bump before a coordinator-initiated abort.
    PrepareEpochFence,
}

impl TxnState {
    /// The states a transition into `self` may start from (C.2, `TransactionState.java`).
    pub fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// PrepareCommit or PrepareAbort: markers are being written.
    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// Where a marker of a transaction stands on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerProgress {
    /// Not appended yet (or lost with a truncation).
    Unwritten,
    /// Appended by the leader of `leader_epoch` at `offset`; waiting for the HW.
    Appended {
        /// Leader epoch of the appending leader.
        leader_epoch: i32,
        /// Offset of the control batch.
        offset: Offset,
    },
}

/// What the coordinator knows of one `transactional.id` (`TransactionMetadata`, C.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    /// Current producer id.
    pub producer_id: i64,
    /// Current epoch.
    pub producer_epoch: i16,
    /// Epoch before the last client-driven bump (KIP-360 retries, TV2 EndTxn retries); -1
    /// after a fence.
    pub last_producer_epoch: i16,
    /// `transaction.timeout.ms` of the producer.
    pub timeout_ms: u64,
    /// State.
    pub state: TxnState,
    /// Partitions of the current (or completing) transaction.
    pub partitions: BTreeSet<TopicPartition>,
    /// `txnStartTimestamp`: when the first partition was added.
    pub start_ms: TimeMs,
    /// `txnLastUpdateTimestamp`.
    pub last_update_ms: TimeMs,
    /// Prepare* only: markers not yet acknowledged.
    pub pending_markers: BTreeMap<TopicPartition, MarkerProgress>,
}

/// A marker the cluster should write: `(transactional id, partition, producer id, epoch,
/// commit)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerTask {
    /// The transactional id.
    pub transactional_id: String,
    /// The partition.
    pub tp: TopicPartition,
    /// Producer id the marker carries.
    pub producer_id: i64,
    /// Epoch the marker carries.
    pub producer_epoch: i16,
    /// COMMIT (true) or ABORT.
    pub commit: bool,
    /// Where the marker stands.
    pub progress: MarkerProgress,
}

/// The transaction coordinators of the cluster. See the module docs.
#[derive(Debug)]
pub struct TransactionCoordinator {
    config: ClusterConfig,
    /// Counted changes: the coordinator log copies them out only after one
    /// ([`TransactionCoordinator::txns_version`]).
    txns: Versioned<String, TxnMetadata>,
    by_producer_id: BTreeMap<i64, String>,
    next_producer_id: i64,
    next_timeout_scan_ms: TimeMs,
    next_expiry_scan_ms: TimeMs,
}

fn error(e: KafkaError) -> Response {
    Response::Error(e)
}

mod requests;

impl TransactionCoordinator {
    /// No transactional ids yet.
    pub fn new(config: ClusterConfig) -> Self {
        let timeout_scan = config.transaction_abort_timed_out_transaction_cleanup_interval_ms;
        let expiry_scan = config.transaction_remove_expired_transaction_cleanup_interval_ms;
        Self {
            config,
            txns: Versioned::new(),
            by_producer_id: BTreeMap::new(),
            next_producer_id: FIRST_PRODUCER_ID,
            next_timeout_scan_ms: timeout_scan,
            next_expiry_scan_ms: expiry_scan,
        }
    }

    /// The metadata of `transactional_id`, if known.
    pub fn txn(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.txns.get(transactional_id)
    }

    /// Every transactional id and its metadata.
    pub fn txns(&self) -> &BTreeMap<String, TxnMetadata> {
        &self.txns
    }

    /// The count of changes to [`txns`](Self::txns) so far (every mutable access counts):
    /// an unchanged version means unchanged metadata.
    pub fn txns_version(&self) -> u64 {
        self.txns.version()
    }

    /// The transactional id currently owning `producer_id`, if any.
    pub fn transactional_id_of(&self, producer_id: i64) -> Option<&str> {
        self.by_producer_id.get(&producer_id).map(String::as_str)
    }

    fn allocate_producer_id(&mut self) -> i64 {
        let pid = self.next_producer_id;
        self.next_producer_id += 1;
        pid
    }

    /// Moves `tid` to `to`, asserting the transition is legal (C.2).
    fn transition(&mut self, now: TimeMs, tid: &str, to: TxnState) {
        let m = self.txns.get_mut(tid).expect("transition of a known id");
        assert!(
            to.valid_previous().contains(&m.state),
            "illegal transaction transition {:?} -> {to:?} for {tid}",
            m.state
        );
        m.state = to;
        m.last_update_ms = now;
    }

    /// Bumps the epoch of `tid` (a new producer id on exhaustion); asserts epochs only grow
    /// for one producer id.
    fn bump_epoch(&mut self, tid: &str) {
        let m = self.txns.get(tid).expect("bump of a known id");
        if m.producer_epoch >= PRODUCER_EPOCH_MAX {
            let old = m.producer_id;
            let pid = self.allocate_producer_id();
            self.by_producer_id.remove(&old);
            self.by_producer_id.insert(pid, tid.to_string());
            let m = self.txns.get_mut(tid).expect("known");
            (m.producer_id, m.producer_epoch, m.last_producer_epoch) = (pid, 0, -1);
            return;
        }
        let m = self.txns.get_mut(tid).expect("known");
        let old = m.producer_epoch;
        m.producer_epoch += 1;
        assert!(m.producer_epoch > old, "producer epochs only grow");
    }

    /// Starts writing the markers of `tid`'s transaction (→ Prepare*). A transaction with no
    /// partitions completes at once.
    fn prepare(&mut self, now: TimeMs, tid: &str, commit: bool) {
        let to = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        self.transition(now, tid, to);
        let m = self.txns.get_mut(tid).expect("known");
        m.pending_markers = m
            .partitions
            .iter()
            .map(|tp| (tp.clone(), MarkerProgress::Unwritten))
            .collect();
        if m.pending_markers.is_empty() {
            self.complete(now, tid);
        }
    }

    /// Every marker acknowledged: Prepare* → Complete*, partitions cleared.
    fn complete(&mut self, now: TimeMs, tid: &str) {
        let m = self.txns.get(tid).expect("known");
        assert!(
            m.pending_markers.is_empty(),
            "complete only after every marker"
        );
        let to = match m.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            other => panic!("complete from {other:?}"),
        };
        self.transition(now, tid, to);
        self.txns.get_mut(tid).expect("known").partitions.clear();
    }

    /// Coordinator-initiated abort (timeout or fencing InitProducerId, C.3, C.8): epoch bump
    /// through PrepareEpochFence, then PrepareAbort with the new epoch. The old producer can
    /// no longer recover with its last epoch.
    fn fence_and_abort(&mut self, now: TimeMs, tid: &str) {
        self.transition(now, tid, TxnState::PrepareEpochFence);
        self.bump_epoch(tid);
        self.txns.get_mut(tid).expect("known").last_producer_epoch = -1;
        self.prepare(now, tid, false);
    }

    /// Time-driven work at `now`: every
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms` Ongoing transactions
    /// older than their timeout are aborted (C.8); every
    /// `transaction.remove.expired.transaction.cleanup.interval.ms` idle ids expire. Only
    /// ids for which `acting` holds (a broker acts as their coordinator: the work is that
    /// coordinator's scheduler's) are looked at.
    pub fn tick(&mut self, now: TimeMs, acting: &dyn Fn(&str) -> bool) {
        if now >= self.next_timeout_scan_ms {
            let timed_out: Vec<String> = self
                .txns
                .iter()
                .filter(|(t, _)| acting(t))
                .filter(|(_, m)| m.state == TxnState::Ongoing)
                .filter(|(_, m)| m.start_ms.saturating_add(m.timeout_ms) < now)
                .map(|(t, _)| t.clone())
                .collect();
            for tid in timed_out {
                crate::mark!("kafka:txn-timed-out-aborted");
                self.fence_and_abort(now, &tid);
            }
            let interval = self
                .config
                .transaction_abort_timed_out_transaction_cleanup_interval_ms;
            self.next_timeout_scan_ms = now + interval.max(1);
        }
        if now >= self.next_expiry_scan_ms {
            self.expire(now, acting);
            let interval = self
                .config
                .transaction_remove_expired_transaction_cleanup_interval_ms;
            self.next_expiry_scan_ms = now + interval.max(1);
        }
    }

    /// `transactional.id.expiration.ms`: Empty/Complete* ids idle that long become Dead and
    /// are removed; their producer id is then unknown (`INVALID_PRODUCER_ID_MAPPING`).
    fn expire(&mut self, now: TimeMs, acting: &dyn Fn(&str) -> bool) {
        let expiration_ms = self.config.transactional_id_expiration_ms;
        let expired: Vec<String> = self
            .txns
            .iter()
            .filter(|(t, _)| acting(t))
            .filter(|(_, m)| TxnState::Dead.valid_previous().contains(&m.state))
            .filter(|(_, m)| m.last_update_ms.saturating_add(expiration_ms) < now)
            .map(|(t, _)| t.clone())
            .collect();
        for tid in expired {
            crate::mark!("kafka:transactional-id-expired");
            self.transition(now, &tid, TxnState::Dead);
            let m = self.txns.remove(&tid).expect("known");
            self.by_producer_id.remove(&m.producer_id);
        }
    }

    /// Sets `tid`'s metadata as a coordinator loading its partition finds it (`None`: not
    /// in the log). A Prepare* transaction gets every marker to write again: which markers
    /// were written is not logged.
    pub fn restore(&mut self, tid: &str, metadata: Option<TxnMetadata>) {
        if let Some(old) = self.txns.remove(tid) {
            self.by_producer_id.remove(&old.producer_id);
        }
        let Some(mut m) = metadata else { return };
        m.pending_markers = if m.state.is_prepare() {
            let unwritten = |tp: &TopicPartition| (tp.clone(), MarkerProgress::Unwritten);
            m.partitions.iter().map(unwritten).collect()
        } else {
            BTreeMap::new()
        };
        self.by_producer_id.insert(m.producer_id, tid.to_string());
        self.txns.insert(tid.to_string(), m);
    }

    /// The markers still to write or acknowledge, in transactional-id and partition order.
    pub fn marker_tasks(&self) -> Vec<MarkerTask> {
        let mut out = Vec::new();
        for (tid, m) in self.txns.iter().filter(|(_, m)| m.state.is_prepare()) {
            for (tp, progress) in &m.pending_markers {
                out.push(MarkerTask {
                    transactional_id: tid.clone(),
                    tp: tp.clone(),
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    commit: m.state == TxnState::PrepareCommit,
                    progress: *progress,
                });
            }
        }
        out
    }

    /// The cluster appended (or must re-append, `Unwritten`) the marker of `tid` on `tp`.
    pub fn marker_appended(&mut self, tid: &str, tp: &TopicPartition, progress: MarkerProgress) {
        if let Some(slot) = self
            .txns
            .get_mut(tid)
            .and_then(|m| m.pending_markers.get_mut(tp))
        {
            *slot = progress;
        }
    }

    /// The marker of `tid` on `tp` is replicated below the HW (WriteTxnMarkers answered);
    /// the last one completes the transaction.
    pub fn marker_acknowledged(&mut self, now: TimeMs, tid: &str, tp: &TopicPartition) {
        let Some(m) = self.txns.get_mut(tid) else {
            return;
        };
        if m.pending_markers.remove(tp).is_some() && m.pending_markers.is_empty() {
            self.complete(now, tid);
        }
    }
}

//! Coordinator state as appends to the internal topics (models-reference C.1, D.6; issue 12
//! item 10).
//!
//! Kafka's coordinators keep their state in their partition's log: the transaction
//! coordinator writes a `TransactionLogValue` per state transition to
//! `__transaction_state` (`TransactionStateManager.appendTransactionToLog`), the group
//! coordinator an `OffsetCommitValue` per committed offset to `__consumer_offsets`
//! (`GroupMetadataManager.storeOffsets`, `OffsetCommitValue` in 4.x's
//! `GroupCoordinatorRecordHelpers`), both with `acks=-1`: the request is answered once the
//! record is on every in-sync replica. A broker that becomes the partition's leader loads
//! the state from its own log (`loadTransactionsForTxnTopicPartition`,
//! `CoordinatorLoader`), keeping the last value per key; a transaction found in
//! `PrepareCommit` / `PrepareAbort` has its markers sent again
//! (`TransactionMarkerChannelManager.addTxnMarkersToSend` from the load callback), since
//! which markers were written is not logged.
//!
//! The model keeps the coordinators' state in memory as before and makes the log the
//! truth behind it:
//! - after every transaction or group request and transactional produce, and every tick,
//!   each transactional id whose logged view changed (producer id, epochs, state,
//!   partitions, timeout, timestamps; not which markers are acknowledged) and each
//!   committed offset that changed is appended as one record to its internal partition's
//!   acting leader and copied at once to the followers in that leader's ISR (the
//!   synchronous stand-in for `acks=-1`);
//! - when another broker (or epoch) starts leading an internal partition, the state of
//!   every key of that partition is reloaded from the new leader's log. A clean election
//!   finds every record there and changes nothing but the markers' progress; a log that
//!   lost its tail (a machine crash of every replica before the flush, an unclean
//!   election) rolls offsets and transactions back.
//!
//! # Deliberate simplifications
//! - Appends take no time, and a follower in the ISR that is cut off from its leader gets
//!   the record too (Kafka would wait until the ISR shrank). A dead follower does not.
//! - A state with no acting leader (partition offline, or its leader not yet aware) stays
//!   in memory only, and is rolled back if the next leader's log lacks it.
//! - Group membership, generations, and KIP-447 pending transactional offsets are not
//!   logged: they survive a move. The record values live in a side table; the log record's
//!   value is its index.

use super::{Cluster, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC};
use crate::kafka::group::CommittedOffset;
use crate::kafka::murmur2::coordinator_partition_for;
use crate::kafka::partition::Partition;
use crate::kafka::txn::TxnMetadata;
use crate::kafka::types::*;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One coordinator record (`TransactionLogValue`, `OffsetCommitValue`); `None` is a
/// tombstone (an expired transactional id).
#[derive(Debug, Clone)]
enum StateRecord {
    Txn {
        transactional_id: String,
        metadata: Option<TxnMetadata>,
    },
    Offset {
        group_id: String,
        tp: TopicPartition,
        committed: CommittedOffset,
    },
}

/// The side table of records and what each key's last logged value is.
#[derive(Debug, Default)]
pub(super) struct CoordinatorLog {
    records: Vec<StateRecord>,
    logged_txns: BTreeMap<String, TxnMetadata>,
    /// Per group, per partition.
    logged_offsets: BTreeMap<String, BTreeMap<TopicPartition, CommittedOffset>>,
    /// Per internal topic and partition, the (leader, epoch) whose log the in-memory state
    /// reflects.
    loaded: BTreeMap<&'static str, Vec<Option<(BrokerId, i32)>>>,
    /// The [`TransactionCoordinator::txns_version`] every change up to which is logged:
    /// while it stands, the next sync has nothing to scan. `None` until a sync logged every
    /// change it found (one with no acting leader to append to is tried again).
    ///
    /// [`TransactionCoordinator::txns_version`]: crate::kafka::txn::TransactionCoordinator::txns_version
    synced_txns: Option<u64>,
    /// The same for [`GroupCoordinator::offsets_version`].
    ///
    /// [`GroupCoordinator::offsets_version`]: crate::kafka::group::GroupCoordinator::offsets_version
    synced_offsets: Option<(usize, u64)>,
}

/// Whether `a` and `b` log the same `TransactionLogValue` (marker progress is not logged).
fn same_logged_txn(a: &TxnMetadata, b: &TxnMetadata) -> bool {
    a.producer_id == b.producer_id
        && a.producer_epoch == b.producer_epoch
        && a.last_producer_epoch == b.last_producer_epoch
        && a.timeout_ms == b.timeout_ms
        && a.state == b.state
        && a.partitions == b.partitions
        && a.start_ms == b.start_ms
        && a.last_update_ms == b.last_update_ms
}

/// The acting leader of an internal partition and its epoch: the controller's leader,
/// `alive`, aware that it leads in the current epoch.
fn acting_leader(p: &Partition, alive: &dyn Fn(BrokerId) -> bool) -> Option<(BrokerId, i32)> {
    let leader = p.leader?;
    let r = p.replica(leader)?;
    (alive(leader) && r.believes_leader() && r.view_epoch == p.leader_epoch)
        .then_some((leader, p.leader_epoch))
}

impl Cluster {
    /// [`acting_leader`] of the internal partition `tp`.
    fn acting_leader_of(&self, tp: &TopicPartition) -> Option<(BrokerId, i32)> {
        acting_leader(self.partition(tp)?, &|b| self.state(b).alive)
    }

    /// The broker acting as `transactional_id`'s coordinator, if any: the acting leader of
    /// its `__transaction_state` partition. Only it runs the coordinator's own work
    /// (markers, timeouts, expiry) on the state it loaded.
    pub(super) fn acting_coordinator(&self, transactional_id: &str) -> Option<BrokerId> {
        let tp = self.coordinator_partition(transactional_id, CoordinatorKind::Transaction);
        self.acting_leader_of(&tp).map(|(b, _)| b)
    }

    /// Appends `record` at `tp`'s acting leader and copies it to the followers of its ISR;
    /// `false` (nothing written) without an acting leader.
    fn append_state_record(
        &mut self,
        now: TimeMs,
        tp: &TopicPartition,
        record: StateRecord,
    ) -> bool {
        let Some((leader, _)) = self.acting_leader_of(tp) else {
            return false;
        };
        let index = self.coordinator_log.records.len() as u64;
        self.coordinator_log.records.push(record);
        let value = Record {
            key: None,
            value: Some(Bytes::copy_from_slice(&index.to_le_bytes())),
            headers: Vec::new(),
            timestamp_ms: now as i64,
        };
        let alive: Vec<bool> = self.brokers.iter().map(|b| b.alive).collect();
        let p = self.partition_mut(tp).expect("internal topics exist");
        p.touch();
        p.append_replicated_now(leader, Arc::new(vec![value]), &|b| alive[(b - 1) as usize]);
        true
    }

    /// Appends a record for every transactional id and committed offset whose logged value
    /// changed since it was last written (see the module docs). A coordinator whose state
    /// has not been touched since a sync that logged all of it is not scanned (its change
    /// counter, [`crate::kafka::versioned`]).
    pub(super) fn sync_coordinator_log(&mut self, now: TimeMs) {
        let txns = self.txns.txns_version();
        if self.coordinator_log.synced_txns != Some(txns) {
            let all = self.sync_txn_records(now);
            self.coordinator_log.synced_txns = all.then_some(txns);
        }
        let offsets = self.groups.offsets_version();
        if self.coordinator_log.synced_offsets != Some(offsets) {
            let all = self.sync_offset_records(now);
            self.coordinator_log.synced_offsets = all.then_some(offsets);
        }
    }

    /// Logs every transactional id whose logged view changed; whether every one was
    /// (`false`: one had no acting leader).
    fn sync_txn_records(&mut self, now: TimeMs) -> bool {
        let log = &self.coordinator_log.logged_txns;
        let mut changed: Vec<(String, Option<TxnMetadata>)> = Vec::new();
        for (tid, m) in self.txns.txns() {
            if !log.get(tid).is_some_and(|l| same_logged_txn(l, m)) {
                changed.push((tid.clone(), Some(m.clone())));
            }
        }
        for tid in log.keys().filter(|t| self.txns.txn(t).is_none()) {
            changed.push((tid.clone(), None));
        }
        let mut all = true;
        for (tid, metadata) in changed {
            let tp = self.coordinator_partition(&tid, CoordinatorKind::Transaction);
            let record = StateRecord::Txn {
                transactional_id: tid.clone(),
                metadata: metadata.clone(),
            };
            if self.append_state_record(now, &tp, record) {
                let logged = &mut self.coordinator_log.logged_txns;
                match metadata {
                    Some(m) => logged.insert(tid, m),
                    None => logged.remove(&tid),
                };
            } else {
                all = false;
            }
        }
        all
    }

    /// Logs every committed offset that changed; whether every one was (`false`: one had no
    /// acting leader).
    fn sync_offset_records(&mut self, now: TimeMs) -> bool {
        let log = &self.coordinator_log.logged_offsets;
        let logged = |g: &str, tp: &TopicPartition| log.get(g).and_then(|m| m.get(tp));
        let changed: Vec<(String, TopicPartition, CommittedOffset)> = self
            .groups
            .committed_offsets()
            .filter(|(g, tp, c)| logged(g, tp) != Some(*c))
            .map(|(g, tp, c)| (g.to_string(), tp.clone(), *c))
            .collect();
        let mut all = true;
        for (group_id, tp, committed) in changed {
            let state_tp = self.coordinator_partition(&group_id, CoordinatorKind::Group);
            let record = StateRecord::Offset {
                group_id: group_id.clone(),
                tp: tp.clone(),
                committed,
            };
            if self.append_state_record(now, &state_tp, record) {
                let logged = &mut self.coordinator_log.logged_offsets;
                logged.entry(group_id).or_default().insert(tp, committed);
            } else {
                all = false;
            }
        }
        all
    }

    /// Reloads every internal partition whose acting leader (or its epoch) changed since
    /// its state was last loaded or written (see the module docs). Returns, per
    /// `__transaction_state` partition, whether a broker acts as its coordinator.
    ///
    /// A partition quiet since an earlier tick is skipped: the reload of that tick already
    /// saw its acting leader, which has not changed since (see
    /// [`Partition::quiet_since_before`]).
    pub(super) fn reload_moved_coordinators(&mut self, now: TimeMs) -> Vec<bool> {
        let mut moved: Vec<(TopicPartition, BrokerId, u32)> = Vec::new();
        let mut acting_txn =
            Vec::with_capacity(self.topics[TRANSACTION_STATE_TOPIC].partitions.len());
        let brokers = &self.brokers;
        let alive = |b: BrokerId| brokers[(b - 1) as usize].alive;
        for topic in [TRANSACTION_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC] {
            let txn_state = topic == TRANSACTION_STATE_TOPIC;
            let partitions = &self.topics[topic].partitions;
            let loaded = self.coordinator_log.loaded.entry(topic).or_default();
            loaded.resize(partitions.len(), None);
            for (i, p) in partitions.iter().enumerate() {
                if p.quiet_since_before(now) {
                    debug_assert_eq!(acting_leader(p, &alive), loaded[i], "a quiet partition");
                    if txn_state {
                        acting_txn.push(loaded[i].is_some());
                    }
                    continue;
                }
                let acting = acting_leader(p, &alive);
                if txn_state {
                    acting_txn.push(acting.is_some());
                }
                let Some(acting) = acting else {
                    continue;
                };
                if loaded[i]
                    .replace(acting)
                    .is_some_and(|before| before != acting)
                {
                    let count = partitions.len() as u32;
                    moved.push((TopicPartition::new(topic, i as u32), acting.0, count));
                }
            }
        }
        for (tp, leader, count) in moved {
            self.reload(&tp, leader, count);
        }
        acting_txn
    }

    /// The last record per key in `leader`'s log of `tp`.
    fn fold_log(&self, tp: &TopicPartition, leader: BrokerId) -> Vec<StateRecord> {
        let r = self
            .partition(tp)
            .and_then(|p| p.replica(leader))
            .expect("the acting leader has a replica");
        let mut out = Vec::new();
        for batch in r.log.batches().iter().filter(|b| !b.control) {
            for record in batch.records.iter() {
                let Some(value) = &record.value else { continue };
                let Ok(bytes) = <[u8; 8]>::try_from(value.as_ref()) else {
                    continue;
                };
                let index = u64::from_le_bytes(bytes) as usize;
                out.push(self.coordinator_log.records[index].clone());
            }
        }
        out
    }

    /// Loads `tp`'s coordinator state from `leader`'s log; `count` is the internal topic's
    /// partition count.
    fn reload(&mut self, tp: &TopicPartition, leader: BrokerId, count: u32) {
        crate::mark!("kafka:coordinator-state-reloaded");
        let on_partition = |key: &str| coordinator_partition_for(key, count) == tp.partition;
        let mut txns: BTreeMap<String, Option<TxnMetadata>> = BTreeMap::new();
        let mut offsets: BTreeMap<(String, TopicPartition), CommittedOffset> = BTreeMap::new();
        for record in self.fold_log(tp, leader) {
            match record {
                StateRecord::Txn {
                    transactional_id,
                    metadata,
                } => {
                    txns.insert(transactional_id, metadata);
                }
                StateRecord::Offset {
                    group_id,
                    tp,
                    committed,
                } => {
                    offsets.insert((group_id, tp), committed);
                }
            }
        }
        if tp.topic == TRANSACTION_STATE_TOPIC {
            self.reload_txns(&on_partition, txns);
        } else {
            self.reload_offsets(&on_partition, offsets);
        }
    }

    fn reload_txns(
        &mut self,
        on_partition: &dyn Fn(&str) -> bool,
        mut loaded: BTreeMap<String, Option<TxnMetadata>>,
    ) {
        let known: Vec<String> = self
            .txns
            .txns()
            .keys()
            .filter(|t| on_partition(t))
            .cloned()
            .collect();
        for tid in known {
            loaded.entry(tid).or_insert(None);
        }
        for (tid, metadata) in loaded {
            let now_known = self.txns.txn(&tid);
            let same = match (now_known, &metadata) {
                (Some(a), Some(b)) => same_logged_txn(a, b),
                (None, None) => true,
                _ => false,
            };
            if !same {
                crate::mark!("kafka:coordinator-txn-state-rolled-back");
            }
            if metadata.as_ref().is_some_and(|m| m.state.is_prepare()) {
                crate::mark!("kafka:txn-markers-resent-after-load");
            }
            match &metadata {
                Some(m) => self
                    .coordinator_log
                    .logged_txns
                    .insert(tid.clone(), m.clone()),
                None => self.coordinator_log.logged_txns.remove(&tid),
            };
            self.txns.restore(&tid, metadata);
        }
    }

    fn reload_offsets(
        &mut self,
        on_partition: &dyn Fn(&str) -> bool,
        loaded: BTreeMap<(String, TopicPartition), CommittedOffset>,
    ) {
        let mut keys: Vec<(String, TopicPartition)> = self
            .groups
            .committed_offsets()
            .filter(|(g, _, _)| on_partition(g))
            .map(|(g, tp, _)| (g.to_string(), tp.clone()))
            .collect();
        keys.extend(loaded.keys().cloned());
        keys.sort();
        keys.dedup();
        for (group_id, tp) in keys {
            let committed = loaded.get(&(group_id.clone(), tp.clone())).copied();
            if self.groups.committed_offset(&group_id, &tp) != committed {
                crate::mark!("kafka:committed-offset-rolled-back");
            }
            let logged = self.coordinator_log.logged_offsets.entry(group_id.clone());
            let logged = logged.or_default();
            match committed {
                Some(c) => logged.insert(tp.clone(), c),
                None => logged.remove(&tp),
            };
            self.groups.restore_offset(&group_id, &tp, committed);
        }
    }
}

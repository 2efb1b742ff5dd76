//! KIP-447 additions to the group coordinator: `TxnOffsetCommit` with the consumer's
//! generation, offsets pending until the transaction's marker, and `OffsetFetch` with
//! `require_stable` (models-reference C.7).

use super::{CommittedOffset, Group, GroupCoordinator};
use crate::kafka::types::*;

impl GroupCoordinator {
    /// `TxnOffsetCommit` after the cluster checked the producer (C.7). A KIP-848 group
    /// checks the member epoch (`ConsumerGroup.validateOffsetCommit`, transactional). A
    /// classic group's is validated like an
    /// OffsetCommit with the transactional flag (generation and member must match, so a
    /// consumer rebalanced out is fenced; no REBALANCE_IN_PROGRESS in CompletingRebalance),
    /// then stored as pending for `producer_id`. A group that does not exist is created for
    /// a member-less commit (generation < 0), else `ILLEGAL_GENERATION`.
    pub fn txn_offset_commit(
        &mut self,
        group_id: &str,
        producer_id: i64,
        generation: i32,
        member_id: &str,
        offsets: Vec<(TopicPartition, Offset)>,
    ) -> Response {
        let consumer = self.validate_consumer_offset_commit(group_id, member_id, generation, true);
        if let Some(Err(e)) = consumer {
            return Response::Error(e);
        }
        if consumer.is_none() && !self.groups.contains_key(group_id) && generation >= 0 {
            return Response::Error(KafkaError::IllegalGeneration);
        }
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(Group::new);
        if consumer.is_none() {
            if let Err(e) = group.validate_offset_commit(member_id, generation, true) {
                return Response::Error(e);
            }
        }
        let pending = group.pending_txn_offsets.entry(producer_id).or_default();
        let mut results = Vec::with_capacity(offsets.len());
        for (tp, offset) in offsets {
            pending.insert(tp.clone(), offset);
            results.push((tp, None));
        }
        Response::TxnOffsetCommit { results }
    }

    /// The marker of `producer_id`'s transaction reached the `__consumer_offsets` partition
    /// of the groups for which `on_partition` holds: on COMMIT their pending offsets become
    /// the committed offsets, on ABORT they are dropped.
    pub fn complete_txn_offsets(
        &mut self,
        now: TimeMs,
        producer_id: i64,
        commit: bool,
        on_partition: &dyn Fn(&str) -> bool,
    ) {
        for (group_id, group) in self.groups.iter_mut() {
            if !on_partition(group_id) {
                continue;
            }
            let Some(pending) = group.pending_txn_offsets.remove(&producer_id) else {
                continue;
            };
            if commit {
                for (tp, offset) in pending {
                    let committed = CommittedOffset {
                        offset,
                        commit_time_ms: now,
                    };
                    group.offsets.insert(tp, committed);
                }
            }
        }
    }

    /// Whether `group_id` has transactional offsets pending for `tp` (the `offsets_pending`
    /// guard of `OffsetFetch` with `require_stable`).
    pub fn offsets_pending(&self, group_id: &str, tp: &TopicPartition) -> bool {
        self.groups
            .get(group_id)
            .is_some_and(|g| g.pending_txn_offsets.values().any(|p| p.contains_key(tp)))
    }

    /// `OffsetFetch` with `require_stable = true`: `UNSTABLE_OFFSET_COMMIT` (88) while any
    /// asked partition (every partition with pending offsets, when `partitions` is empty)
    /// has transactional offsets pending; otherwise the plain OffsetFetch answer.
    pub fn fetch_stable(&self, group_id: &str, partitions: Vec<TopicPartition>) -> Response {
        let unstable = match self.groups.get(group_id) {
            None => false,
            Some(g) if partitions.is_empty() => {
                g.pending_txn_offsets.values().any(|p| !p.is_empty())
            }
            Some(_) => partitions
                .iter()
                .any(|tp| self.offsets_pending(group_id, tp)),
        };
        if unstable {
            return Response::Error(KafkaError::UnstableOffsetCommit);
        }
        self.fetch(group_id, partitions)
    }
}

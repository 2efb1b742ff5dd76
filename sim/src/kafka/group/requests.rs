//! The six group requests: validation in Kafka's order, then the group's state machine.

use super::rebalance::JoinMetadata;
use super::{error, CommittedOffset, Group, GroupCoordinator, GroupState, MEMBER_ID_PREFIX};
use crate::kafka::model::Reply;
use crate::kafka::types::*;
use std::collections::BTreeMap;

impl GroupCoordinator {
    /// JoinGroup (Kafka's `classicGroupJoin`): a dynamic member without an id is handed
    /// one (`MEMBER_ID_REQUIRED`, KIP-394); a static one without an id joins at once, or
    /// replaces its instance's old member ([`Group::replace_static_member`]).
    pub(super) fn join(
        &mut self,
        now: TimeMs,
        group_id: String,
        member_id: String,
        mut meta: JoinMetadata,
    ) -> Reply {
        if self.consumer_group_busy(&group_id) {
            crate::mark!("kafka:kip848-mixed-group-refused");
            return error(KafkaError::GroupIdNotFound);
        }
        let config = &self.config;
        if meta.session_timeout_ms < config.group_min_session_timeout_ms
            || meta.session_timeout_ms > config.group_max_session_timeout_ms
        {
            return error(KafkaError::InvalidSessionTimeout);
        }
        if !self.groups.contains_key(&group_id) {
            if !member_id.is_empty() {
                return error(KafkaError::UnknownMemberId);
            }
            self.groups.insert(group_id.clone(), Group::new());
        }
        let group = self.groups.get_mut(&group_id).expect("created above");
        if group.state == GroupState::Dead {
            return error(KafkaError::UnknownMemberId);
        }
        if !group.supports_protocols(&meta.protocols.names) {
            return error(KafkaError::InconsistentGroupProtocol);
        }
        meta.topics.sort();
        meta.topics.dedup();
        let token = if member_id.is_empty() {
            let prefix = meta.instance_id.as_deref().map(|i| format!("{i}-"));
            let new_id = format!(
                "{}{}",
                prefix.as_deref().unwrap_or(MEMBER_ID_PREFIX),
                self.next_member_number
            );
            self.next_member_number += 1;
            let instance = meta.instance_id.clone();
            match instance.and_then(|i| group.static_member(&i).map(str::to_string)) {
                Some(old_id) => {
                    let parked = &mut self.parked;
                    match group.replace_static_member(now, &old_id, &new_id, meta, parked, config) {
                        Ok(token) => token,
                        Err(response) => return Reply::Done(response),
                    }
                }
                None if meta.instance_id.is_some() => {
                    group.add_member(now, &new_id, meta, &mut self.parked, config)
                }
                None => {
                    // KIP-394: hand out an id; the member counts as pending until it rejoins.
                    let expiry_ms = now + meta.session_timeout_ms;
                    group.pending_members.insert(new_id.clone(), expiry_ms);
                    return Reply::Done(Response::MemberIdRequired { member_id: new_id });
                }
            }
        } else if group.pending_members.remove(&member_id).is_some() {
            group.add_member(now, &member_id, meta, &mut self.parked, config)
        } else if group.is_fenced(&member_id, meta.instance_id.as_deref()) {
            crate::mark!("kafka:static-member-fenced");
            return error(KafkaError::FencedInstanceId);
        } else if group.members.contains_key(&member_id) {
            match group.rejoin(now, &member_id, meta, &mut self.parked, config) {
                Ok(token) => token,
                Err(response) => return Reply::Done(response),
            }
        } else {
            return error(KafkaError::UnknownMemberId);
        };
        group.try_complete_join(now, &mut self.parked, config);
        self.parked.reply(token)
    }

    /// SyncGroup (Kafka's `classicGroupSync`): followers park until the leader's arrives.
    pub(super) fn sync(
        &mut self,
        now: TimeMs,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: BTreeMap<String, Vec<TopicPartition>>,
    ) -> Reply {
        let Some(group) = self.groups.get_mut(group_id) else {
            return error(KafkaError::UnknownMemberId);
        };
        if group.state == GroupState::Dead || !group.members.contains_key(member_id) {
            return error(KafkaError::UnknownMemberId);
        }
        if generation != group.generation {
            return error(KafkaError::IllegalGeneration);
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => error(KafkaError::UnknownMemberId),
            GroupState::PreparingRebalance => error(KafkaError::RebalanceInProgress),
            GroupState::Stable => {
                group.pending_sync.remove(member_id);
                group
                    .members
                    .get_mut(member_id)
                    .expect("checked")
                    .last_heartbeat_ms = now;
                let assignment = group
                    .assignments
                    .get(member_id)
                    .cloned()
                    .unwrap_or_default();
                Reply::Done(Response::SyncGroup { assignment })
            }
            GroupState::CompletingRebalance => {
                let token = self.parked.park();
                let member = group.members.get_mut(member_id).expect("checked");
                member.last_heartbeat_ms = now;
                if let Some(old) = member.sync_token.replace(token) {
                    let response = Response::Error(KafkaError::RebalanceInProgress);
                    self.parked.answer(old, response, now);
                }
                group.pending_sync.remove(member_id);
                if group.leader.as_deref() == Some(member_id) {
                    group.assign(now, assignments, &mut self.parked);
                }
                self.parked.reply(token)
            }
        }
    }

    /// Heartbeat (Kafka's `classicGroupHeartbeat`; NONE during CompletingRebalance as the
    /// implementation does, whatever its comment says).
    pub(super) fn heartbeat(
        &mut self,
        now: TimeMs,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Response {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Response::Error(KafkaError::UnknownMemberId);
        };
        if group.state == GroupState::Dead {
            return Response::Error(KafkaError::CoordinatorNotAvailable);
        }
        let Some(member) = group.members.get_mut(member_id) else {
            return Response::Error(KafkaError::UnknownMemberId);
        };
        if generation != group.generation {
            return Response::Error(KafkaError::IllegalGeneration);
        }
        match group.state {
            GroupState::Empty | GroupState::Dead => Response::Error(KafkaError::UnknownMemberId),
            GroupState::PreparingRebalance => {
                member.last_heartbeat_ms = now;
                Response::Error(KafkaError::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                member.last_heartbeat_ms = now;
                Response::Heartbeat
            }
        }
    }

    /// LeaveGroup: the member is removed and the group rebalances.
    pub(super) fn leave(&mut self, now: TimeMs, group_id: &str, member_id: &str) -> Response {
        let Some(group) = self.groups.get_mut(group_id) else {
            return Response::Error(KafkaError::UnknownMemberId);
        };
        if group.state == GroupState::Dead {
            return Response::Error(KafkaError::CoordinatorNotAvailable);
        }
        if group.pending_members.remove(member_id).is_some() {
            group.try_complete_join(now, &mut self.parked, &self.config);
            return Response::LeaveGroup;
        }
        if !group.members.contains_key(member_id) {
            return Response::Error(KafkaError::UnknownMemberId);
        }
        group.remove_member(now, member_id, &mut self.parked);
        group.member_removed(now, &mut self.parked, &self.config);
        Response::LeaveGroup
    }

    /// OffsetCommit (non-transactional). A group that does not exist is created (Empty) for
    /// a simple commit with generation < 0, else ILLEGAL_GENERATION (Kafka before
    /// OffsetCommit v9). Offsets are durable: they stand for `__consumer_offsets`.
    pub(super) fn commit(
        &mut self,
        now: TimeMs,
        group_id: &str,
        generation: i32,
        member_id: &str,
        offsets: Vec<(TopicPartition, Offset)>,
    ) -> Response {
        match self.validate_consumer_offset_commit(group_id, member_id, generation, false) {
            Some(Err(e)) => return Response::Error(e),
            Some(Ok(())) => {
                let group = self
                    .groups
                    .entry(group_id.to_string())
                    .or_insert_with(Group::new);
                group.store_offsets(now, offsets);
                return Response::OffsetCommit;
            }
            None => {}
        }
        if !self.groups.contains_key(group_id) {
            if generation >= 0 {
                return Response::Error(KafkaError::IllegalGeneration);
            }
            self.groups.insert(group_id.to_string(), Group::new());
        }
        let group = self.groups.get_mut(group_id).expect("exists");
        if let Err(e) = group.validate_offset_commit(member_id, generation, false) {
            return Response::Error(e);
        }
        group.store_offsets(now, offsets);
        Response::OffsetCommit
    }

    /// OffsetFetch: the committed offset of each partition, -1 where none; every committed
    /// offset of the group when `partitions` is empty (Kafka's "all topics" form).
    pub(super) fn fetch(&self, group_id: &str, partitions: Vec<TopicPartition>) -> Response {
        let Some(group) = self.groups.get(group_id) else {
            let offsets = partitions.into_iter().map(|tp| (tp, -1)).collect();
            return Response::OffsetFetch { offsets };
        };
        let offsets = if partitions.is_empty() {
            group
                .offsets
                .iter()
                .map(|(tp, c)| (tp.clone(), c.offset))
                .collect()
        } else {
            partitions
                .into_iter()
                .map(|tp| {
                    let offset = group.offsets.get(&tp).map_or(-1, |c| c.offset);
                    (tp, offset)
                })
                .collect()
        };
        Response::OffsetFetch { offsets }
    }
}

impl Group {
    /// Stores committed offsets (they stand for `__consumer_offsets` records).
    fn store_offsets(&mut self, now: TimeMs, offsets: Vec<(TopicPartition, Offset)>) {
        for (tp, offset) in offsets {
            let committed = CommittedOffset {
                offset,
                commit_time_ms: now,
            };
            self.offsets.insert(tp, committed);
        }
    }

    /// Kafka's `ClassicGroup.validateOffsetCommit`. `transactional` is for KIP-447's
    /// TxnOffsetCommit (a later issue): it skips the member-less check and the
    /// CompletingRebalance rejection, so a zombie is still fenced by its generation.
    pub(super) fn validate_offset_commit(
        &self,
        member_id: &str,
        generation: i32,
        transactional: bool,
    ) -> Result<(), KafkaError> {
        if self.state == GroupState::Dead {
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        if generation < 0 && self.state == GroupState::Empty {
            // A simple (admin or manually assigned) consumer's commit to an empty group.
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() {
            if !self.members.contains_key(member_id) {
                return Err(KafkaError::UnknownMemberId);
            }
            if generation != self.generation {
                return Err(KafkaError::IllegalGeneration);
            }
        } else if !transactional && self.state != GroupState::Empty {
            return Err(KafkaError::UnknownMemberId);
        }
        if !transactional && self.state == GroupState::CompletingRebalance {
            return Err(KafkaError::RebalanceInProgress);
        }
        Ok(())
    }
}

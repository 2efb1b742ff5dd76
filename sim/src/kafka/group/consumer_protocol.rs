//! KIP-848, the consumer rebalance protocol, at the coordinator: `ConsumerGroupHeartbeat`
//! with group, target assignment and member epochs, and the per-member reconciliation that
//! hands a partition to its new owner only once its previous owner has revoked it.
//! Sources: KIP-848; apache/kafka `group-coordinator/.../GroupMetadataManager.java`
//! (`consumerGroupHeartbeat`, `throwIfConsumerGroupMemberEpochIsInvalid`,
//! `consumerGroupFenceMember`, the session and rebalance timers),
//! `modern/consumer/CurrentAssignmentBuilder.java`, `modern/TargetAssignmentBuilder.java`,
//! `modern/consumer/ConsumerGroup.java` (`validateOffsetCommit`).
//!
//! # Epochs
//! - The **group epoch** moves when a member joins, leaves or is fenced, changes its
//!   subscription or assignor, or a subscribed topic's partition count changes.
//! - The **target assignment epoch** catches up with it on the next heartbeat: the server
//!   assignor (`super::server_assignor`) computes every member's target.
//! - A **member epoch** reaches the target epoch once the member has revoked what its
//!   target no longer holds. Its states ([`MemberState`]): `Stable` (reconciled),
//!   `UnrevokedPartitions` (it keeps its epoch and must stop owning the partitions pending
//!   revocation: the acknowledgement is their absence from the owned partitions its
//!   heartbeat reports), `UnreleasedPartitions` (at the target epoch, but some target
//!   partitions are still owned, assigned or pending revocation, by another member; they
//!   are withheld until released).
//!
//! # Timers
//! - Session: a member silent for `group.consumer.session.timeout.ms` is fenced.
//! - Rebalance: a member that entered `UnrevokedPartitions` and has not acknowledged
//!   within its rebalance timeout (the client's `max.poll.interval.ms`) is fenced.
//!   Fencing removes the member (its partitions become free) and bumps the group epoch.
//!
//! # Refused here, by name
//! - Static membership (`group.instance.id`, leave epoch -2): `INVALID_REQUEST`.
//! - Mixed groups: a `ConsumerGroupHeartbeat` to a classic group with members, or a
//!   `JoinGroup` to a consumer group with members, gets `GROUP_ID_NOT_FOUND` (Kafka 3.7's
//!   answer, "Group %s is not a consumer group"; Kafka 4.x converts groups online under
//!   `group.consumer.migration.policy`, not modelled). An empty group of either protocol
//!   becomes the other's on its first request.
//! - Regular-expression subscriptions, rack awareness, `group.consumer.max.size`.
//!
//! # Fixes modelled
//! - KAFKA-19449: a target partition in the member's own pending revocation is not
//!   "unreleased".
//! - KAFKA-19233: a known member heartbeating with epoch 0 is taken back, not fenced.
//! - KAFKA-19974: leaving `UnrevokedPartitions` for another revocation keeps the member
//!   epoch; any other way out takes the target epoch.
//! - KAFKA-16147: the partition epochs are replaced whole on every member update; the
//!   code before the fix is the switch [`ClusterConfig::kip848_partition_epochs`].
//!
//! # Simplifications
//! - Member ids are `consumer-<n>` from the coordinator's counter (Kafka: a random UUID,
//!   or since KIP-1082 one the client makes).
//! - The coordinator reads partition counts from the controller's metadata at each
//!   heartbeat (Kafka: its metadata image, refreshed on change).
//! - The whole group is durable: Kafka writes every member, target and current assignment
//!   as `__consumer_offsets` records, so a new coordinator loads it entirely and restarts
//!   the timers ([`super::GroupCoordinator::reload`]).

pub use super::server_assignor::SERVER_ASSIGNORS;
use super::server_assignor::{self, Target};
use super::{GroupCoordinator, GroupState, MEMBER_ID_PREFIX};
use crate::kafka::types::*;
use std::collections::{BTreeMap, BTreeSet};

/// The member epoch of a leaving dynamic member (`LEAVE_GROUP_MEMBER_EPOCH`).
pub const LEAVE_MEMBER_EPOCH: i32 = -1;
/// The member epoch of a leaving static member (`LEAVE_GROUP_STATIC_MEMBER_EPOCH`).
pub const LEAVE_STATIC_MEMBER_EPOCH: i32 = -2;

/// A consumer-protocol member's reconciliation state (`MemberState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum MemberState {
    /// Its current assignment is its target, at the target assignment epoch.
    Stable,
    /// It must revoke `pending_revocation` before it moves on; its epoch stays.
    UnrevokedPartitions,
    /// At the target epoch, waiting for other members to release target partitions.
    UnreleasedPartitions,
}

/// A consumer-protocol member as tests and checkers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberView {
    /// The member's epoch.
    pub member_epoch: i32,
    /// Its reconciliation state.
    pub state: MemberState,
    /// What it may own now (its current assignment).
    pub assigned: BTreeSet<TopicPartition>,
    /// What it must still revoke.
    pub pending_revocation: BTreeSet<TopicPartition>,
}

#[derive(Debug, Clone)]
pub(super) struct ConsumerMember {
    member_epoch: i32,
    previous_member_epoch: i32,
    state: MemberState,
    assigned: BTreeSet<TopicPartition>,
    pending_revocation: BTreeSet<TopicPartition>,
    topics: Vec<String>,
    server_assignor: Option<String>,
    rebalance_timeout_ms: u64,
    last_heartbeat_ms: TimeMs,
    /// Set while `UnrevokedPartitions`: when the member is fenced if it has not revoked.
    revocation_deadline_ms: Option<TimeMs>,
}

/// One consumer-protocol group. Its committed offsets live in the classic `Group` of the
/// same id, which stays Empty.
#[derive(Debug, Clone, Default)]
pub(super) struct ConsumerGroup {
    /// `currentPartitionEpoch`: the epoch of the member owning each partition (assigned or
    /// pending revocation); a target partition absent here is free to assign.
    partition_epochs: BTreeMap<TopicPartition, i32>,
    /// How `partition_epochs` is kept ([`ClusterConfig::kip848_partition_epochs`]).
    bookkeeping: PartitionEpochBookkeeping,
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    target: Target,
    /// Partition counts of the subscribed topics at the last epoch bump.
    subscription_metadata: BTreeMap<String, u32>,
}

fn error(e: KafkaError) -> Response {
    Response::Error(e)
}

impl GroupCoordinator {
    /// `ConsumerGroupHeartbeat` at `now` (KIP-848). `partition_count` gives a topic's
    /// partition count (`None`: no such topic). Errors: `INVALID_REQUEST` (static member),
    /// `UNSUPPORTED_ASSIGNOR`, `GROUP_ID_NOT_FOUND` (unknown group with a non-zero epoch,
    /// or a classic group with members), `UNKNOWN_MEMBER_ID`, `FENCED_MEMBER_EPOCH`.
    pub fn consumer_group_heartbeat(
        &mut self,
        now: TimeMs,
        request: ConsumerGroupHeartbeatRequest,
        partition_count: &dyn Fn(&str) -> Option<u32>,
    ) -> Response {
        let r = request;
        if r.instance_id.is_some() || r.member_epoch == LEAVE_STATIC_MEMBER_EPOCH {
            return error(KafkaError::InvalidRequest);
        }
        if let Some(name) = &r.server_assignor {
            if !SERVER_ASSIGNORS.contains(&name.as_str()) {
                return error(KafkaError::UnsupportedAssignor);
            }
        }
        let classic_busy = self
            .groups
            .get(&r.group_id)
            .is_some_and(|g| g.state != GroupState::Empty);
        if classic_busy {
            crate::mark!("kafka:kip848-mixed-group-refused");
            return error(KafkaError::GroupIdNotFound);
        }
        if r.member_epoch == 0 && !self.consumer_groups.contains_key(&r.group_id) {
            let group = ConsumerGroup {
                bookkeeping: self.config.kip848_partition_epochs,
                ..ConsumerGroup::default()
            };
            self.consumer_groups.insert(r.group_id.clone(), group);
        }
        let Some(group) = self.consumer_groups.get_mut(&r.group_id) else {
            return error(KafkaError::GroupIdNotFound);
        };
        if r.member_epoch == LEAVE_MEMBER_EPOCH {
            return group.leave(&r.member_id);
        }
        let member_id = if r.member_id.is_empty() {
            self.next_member_number += 1;
            format!("{MEMBER_ID_PREFIX}{}", self.next_member_number - 1)
        } else {
            r.member_id.clone()
        };
        let changed = match group.join_or_validate(now, &member_id, &r) {
            Ok(changed) => changed,
            Err(e) => return error(e),
        };
        group.maybe_update_target(changed, partition_count);
        group.reconcile(now, &member_id, Some(&r.owned));
        let member = &group.members[&member_id];
        Response::ConsumerGroupHeartbeat {
            member_id,
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: self.config.group_consumer_heartbeat_interval_ms,
            assignment: member.assigned.iter().cloned().collect(),
        }
    }

    /// The consumer-protocol group `group_id`'s epochs `(group, target assignment)`, if it
    /// exists.
    pub fn consumer_group_epochs(&self, group_id: &str) -> Option<(i32, i32)> {
        let g = self.consumer_groups.get(group_id)?;
        Some((g.group_epoch, g.assignment_epoch))
    }

    /// The members of consumer-protocol group `group_id` by member id (empty if none).
    pub fn consumer_group_members(&self, group_id: &str) -> BTreeMap<String, ConsumerMemberView> {
        let members = self.consumer_groups.get(group_id).map(|g| &g.members);
        (members.into_iter().flatten())
            .map(|(id, m)| {
                let view = ConsumerMemberView {
                    member_epoch: m.member_epoch,
                    state: m.state,
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                };
                (id.clone(), view)
            })
            .collect()
    }

    /// Whether `group_id` is a consumer-protocol group with members (a classic JoinGroup
    /// is then refused). An empty one is forgotten, so the classic protocol may take the
    /// id (Kafka deletes an empty consumer group a classic member joins).
    pub(super) fn consumer_group_busy(&mut self, group_id: &str) -> bool {
        match self.consumer_groups.get(group_id) {
            Some(g) if !g.members.is_empty() => true,
            Some(_) => {
                self.consumer_groups.remove(group_id);
                false
            }
            None => false,
        }
    }

    /// OffsetCommit / TxnOffsetCommit validation for a consumer-protocol group
    /// (`ConsumerGroup.validateOffsetCommit`); `None` when `group_id` is not one.
    /// `generation` carries the member epoch (OffsetCommit v9's `GenerationIdOrMemberEpoch`).
    pub(super) fn validate_consumer_offset_commit(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        transactional: bool,
    ) -> Option<Result<(), KafkaError>> {
        let group = self.consumer_groups.get(group_id)?;
        if generation < 0 && group.members.is_empty() {
            return Some(Ok(()));
        }
        if transactional && generation < 0 && member_id.is_empty() {
            return Some(Ok(()));
        }
        let Some(member) = group.members.get(member_id) else {
            return Some(Err(KafkaError::UnknownMemberId));
        };
        if generation != member.member_epoch {
            crate::mark!("kafka:kip848-stale-member-epoch-commit");
            return Some(Err(KafkaError::StaleMemberEpoch));
        }
        Some(Ok(()))
    }

    /// The consumer groups' timers at `now`: session and rebalance (revocation) timeouts.
    pub(super) fn tick_consumer_groups(&mut self, now: TimeMs) {
        let session_ms = self.config.group_consumer_session_timeout_ms;
        for group in self.consumer_groups.values_mut() {
            group.expire(now, session_ms);
        }
    }

    /// A new coordinator loaded the consumer groups `moved` names: everything is in their
    /// records, so only the timers restart (`GroupMetadataManager.onLoaded`).
    pub(super) fn reload_consumer_groups(&mut self, now: TimeMs, moved: &dyn Fn(&str) -> bool) {
        for (group_id, group) in self.consumer_groups.iter_mut() {
            if !moved(group_id) {
                continue;
            }
            for m in group.members.values_mut() {
                m.last_heartbeat_ms = now;
                if m.revocation_deadline_ms.is_some() {
                    m.revocation_deadline_ms = Some(now + m.rebalance_timeout_ms);
                }
            }
        }
    }
}

impl ConsumerGroup {
    /// A leave (epoch -1): the member goes, the group epoch moves.
    fn leave(&mut self, member_id: &str) -> Response {
        if !self.members.contains_key(member_id) {
            return error(KafkaError::UnknownMemberId);
        }
        crate::mark!("kafka:kip848-member-left");
        self.remove_member(member_id);
        Response::ConsumerGroupHeartbeat {
            member_id: member_id.to_string(),
            member_epoch: LEAVE_MEMBER_EPOCH,
            heartbeat_interval_ms: 0,
            assignment: Vec::new(),
        }
    }

    /// Removes a member (left or fenced): its partitions' epochs go, the group epoch moves.
    fn remove_member(&mut self, member_id: &str) {
        let member = self.members.remove(member_id).expect("a member");
        for tp in member.assigned.iter().chain(&member.pending_revocation) {
            self.partition_epochs.remove(tp);
        }
        self.target.remove(member_id);
        self.group_epoch += 1;
    }

    /// `ConsumerGroup.maybeUpdatePartitionEpoch` for a member whose current assignment went
    /// from `old` (assigned, pending revocation) to its present one, by
    /// [`PartitionEpochBookkeeping`].
    fn update_partition_epochs(&mut self, member_id: &str, old: [&BTreeSet<TopicPartition>; 2]) {
        let member = &self.members[member_id];
        let new = [&member.assigned, &member.pending_revocation];
        let epoch = member.member_epoch;
        let epochs = &mut self.partition_epochs;
        match self.bookkeeping {
            PartitionEpochBookkeeping::Kafka16147 => {
                for tp in old.into_iter().flatten() {
                    epochs.remove(tp);
                }
                for tp in new.into_iter().flatten() {
                    epochs.insert(tp.clone(), epoch);
                }
            }
            PartitionEpochBookkeeping::PreKafka16147 => {
                for (before, after) in old.into_iter().zip(new) {
                    if before == after {
                        continue;
                    }
                    for tp in before {
                        epochs.remove(tp);
                    }
                    for tp in after {
                        epochs.insert(tp.clone(), epoch);
                    }
                }
                if new.into_iter().flatten().any(|tp| !epochs.contains_key(tp)) {
                    crate::mark!("kafka:kip848-partition-epoch-lost");
                }
            }
        }
    }

    /// Creates the member (epoch 0) or checks its epoch
    /// (`throwIfConsumerGroupMemberEpochIsInvalid`, with KAFKA-19233's epoch-0 rejoin), then takes the request's subscription,
    /// assignor and rebalance timeout. `Ok(true)`: a new member, or a changed subscription
    /// or assignor (`hasMemberSubscriptionChanged`): the group epoch must move.
    fn join_or_validate(
        &mut self,
        now: TimeMs,
        member_id: &str,
        r: &ConsumerGroupHeartbeatRequest,
    ) -> Result<bool, KafkaError> {
        let mut topics = r.topics.clone();
        topics.sort();
        topics.dedup();
        match self.members.get(member_id) {
            None if r.member_epoch != 0 => return Err(KafkaError::UnknownMemberId),
            None => {
                crate::mark!("kafka:kip848-member-joined");
                let member = ConsumerMember {
                    member_epoch: 0,
                    previous_member_epoch: 0,
                    state: MemberState::Stable,
                    assigned: BTreeSet::new(),
                    pending_revocation: BTreeSet::new(),
                    topics: Vec::new(),
                    server_assignor: None,
                    rebalance_timeout_ms: r.rebalance_timeout_ms,
                    last_heartbeat_ms: now,
                    revocation_deadline_ms: None,
                };
                self.members.insert(member_id.to_string(), member);
            }
            // KAFKA-19233 (apache/kafka#21305): a known member that rejoins with epoch 0
            // (after FENCED_MEMBER_EPOCH) is taken back as it is; before, it was fenced
            // again until its session expired.
            Some(_) if r.member_epoch == 0 => crate::mark!("kafka:kip848-member-rejoined"),
            Some(m) if r.member_epoch > m.member_epoch => {
                crate::mark!("kafka:kip848-fenced-member-epoch");
                return Err(KafkaError::FencedMemberEpoch);
            }
            Some(m) if r.member_epoch < m.member_epoch => {
                // A lost response: the previous epoch with a subset of the assignment.
                let subset = r.owned.iter().all(|tp| m.assigned.contains(tp));
                if r.member_epoch != m.previous_member_epoch || !subset {
                    crate::mark!("kafka:kip848-fenced-member-epoch");
                    return Err(KafkaError::FencedMemberEpoch);
                }
            }
            Some(_) => {}
        }
        let member = self.members.get_mut(member_id).expect("present");
        let changed = member.topics != topics || member.server_assignor != r.server_assignor;
        member.topics = topics;
        member.server_assignor = r.server_assignor.clone();
        member.rebalance_timeout_ms = r.rebalance_timeout_ms;
        member.last_heartbeat_ms = now;
        Ok(changed)
    }

    /// Bumps the group epoch once when `changed` (the member's subscription) or a
    /// subscribed topic's partition count changed, then recomputes the target if the group
    /// epoch is ahead of it (`updateTargetAssignment`).
    fn maybe_update_target(
        &mut self,
        changed: bool,
        partition_count: &dyn Fn(&str) -> Option<u32>,
    ) {
        let topics: BTreeSet<&String> = self.members.values().flat_map(|m| &m.topics).collect();
        let metadata: BTreeMap<String, u32> = (topics.into_iter())
            .filter_map(|t| partition_count(t).map(|n| (t.clone(), n)))
            .collect();
        if changed || metadata != self.subscription_metadata {
            self.subscription_metadata = metadata;
            self.group_epoch += 1;
        }
        if self.group_epoch <= self.assignment_epoch {
            return;
        }
        let assignor =
            server_assignor::preferred(self.members.values().map(|m| m.server_assignor.as_deref()));
        let subscriptions: BTreeMap<String, Vec<String>> = (self.members.iter())
            .map(|(id, m)| (id.clone(), m.topics.clone()))
            .collect();
        let counts = &self.subscription_metadata;
        self.target = server_assignor::assign(assignor, &subscriptions, counts, &self.target);
        self.assignment_epoch = self.group_epoch;
    }

    /// Whether target partition `tp` is still owned by a member other than `member`: it has
    /// a partition epoch and is not `member`'s own pending revocation (KAFKA-19449).
    fn unreleased(&self, tp: &TopicPartition, member: &ConsumerMember) -> bool {
        self.partition_epochs.contains_key(tp) && !member.pending_revocation.contains(tp)
    }

    /// Whether a member other than `member_id` holds `tp` (assigned or pending revocation).
    fn held_by_another(&self, tp: &TopicPartition, member_id: &str) -> bool {
        (self.members.iter())
            .filter(|(id, _)| id.as_str() != member_id)
            .any(|(_, m)| m.assigned.contains(tp) || m.pending_revocation.contains(tp))
    }

    /// `CurrentAssignmentBuilder.computeNextAssignment` for `member_id` towards its target:
    /// `(state, epoch, assigned, pending revocation)`. What it owns and the target drops is
    /// to be revoked first, at `next_epoch` (unless `owned` shows it already gone); else it
    /// moves to the target epoch with every target partition no other member still holds.
    fn next_assignment(
        &self,
        member_id: &str,
        next_epoch: i32,
        owned: Option<&[TopicPartition]>,
    ) -> (
        MemberState,
        i32,
        BTreeSet<TopicPartition>,
        BTreeSet<TopicPartition>,
    ) {
        let member = &self.members[member_id];
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let mut assigned: BTreeSet<TopicPartition> =
            member.assigned.intersection(&target).cloned().collect();
        let revoke: BTreeSet<TopicPartition> =
            member.assigned.difference(&target).cloned().collect();
        let owns_any = owned.is_none_or(|o| o.iter().any(|tp| revoke.contains(tp)));
        if !revoke.is_empty() && owns_any {
            return (
                MemberState::UnrevokedPartitions,
                next_epoch,
                assigned,
                revoke,
            );
        }
        let mut state = MemberState::Stable;
        for tp in target.difference(&assigned.clone()) {
            if self.unreleased(tp, member) {
                state = MemberState::UnreleasedPartitions;
                continue;
            }
            if self.held_by_another(tp, member_id) {
                // Only with the pre-KAFKA-16147 bookkeeping: the epoch was lost.
                crate::mark!("kafka:kip848-partition-assigned-to-two-members");
            }
            assigned.insert(tp.clone());
        }
        (state, self.assignment_epoch, assigned, BTreeSet::new())
    }

    /// `CurrentAssignmentBuilder.build` for `member_id`, whose heartbeat reported `owned`
    /// (`None`: unknown, as an incremental request without the field). Sets or clears its
    /// rebalance timer when it enters or leaves `UnrevokedPartitions`.
    fn reconcile(&mut self, now: TimeMs, member_id: &str, owned: Option<&[TopicPartition]>) {
        let member = &self.members[member_id];
        let owns_any = |set: &BTreeSet<TopicPartition>| {
            owned.is_none_or(|o| o.iter().any(|tp| set.contains(tp)))
        };
        let next_epoch = match member.state {
            MemberState::Stable if member.member_epoch == self.assignment_epoch => return,
            MemberState::Stable | MemberState::UnreleasedPartitions => member.member_epoch,
            MemberState::UnrevokedPartitions => {
                if owns_any(&member.pending_revocation) {
                    return;
                }
                crate::mark!("kafka:kip848-revocation-acknowledged");
                // KAFKA-19974 (apache/kafka#21107): a member that must revoke again keeps its
                // epoch (it was bumped by one before), so a partition has one owner per epoch.
                member.member_epoch
            }
        };
        let old_sets = [member.assigned.clone(), member.pending_revocation.clone()];
        let before = (member.state, member.member_epoch, old_sets[1].clone());
        let rebalance_timeout_ms = member.rebalance_timeout_ms;
        let (state, epoch, assigned, pending) = self.next_assignment(member_id, next_epoch, owned);
        if state == MemberState::UnreleasedPartitions {
            crate::mark!("kafka:kip848-partitions-withheld-unreleased");
        }
        let member = self.members.get_mut(member_id).expect("present");
        if epoch != member.member_epoch {
            member.previous_member_epoch = member.member_epoch;
        }
        member.member_epoch = epoch;
        member.state = state;
        member.assigned = assigned;
        member.pending_revocation = pending;
        if state != MemberState::UnrevokedPartitions {
            member.revocation_deadline_ms = None;
        } else if before != (state, epoch, member.pending_revocation.clone()) {
            crate::mark!("kafka:kip848-revocation-requested");
            member.revocation_deadline_ms = Some(now + rebalance_timeout_ms);
        }
        if old_sets[1].iter().any(|tp| member.assigned.contains(tp)) {
            // The target changed back before the member acknowledged (KAFKA-16147's path).
            crate::mark!("kafka:kip848-pending-partition-given-back");
        }
        self.update_partition_epochs(member_id, [&old_sets[0], &old_sets[1]]);
        if self.bookkeeping == PartitionEpochBookkeeping::Kafka16147 {
            self.assert_single_owner();
        }
    }

    /// No partition is owned (assigned or pending revocation) by two members.
    fn assert_single_owner(&self) {
        let mut seen = BTreeSet::new();
        for m in self.members.values() {
            for tp in m.assigned.iter().chain(&m.pending_revocation) {
                assert!(
                    seen.insert(tp),
                    "partition {tp} owned by two consumer-group members"
                );
            }
        }
    }

    /// Fences members silent past the session timeout, and members that did not revoke
    /// before their rebalance timeout (`consumerGroupFenceMember`).
    fn expire(&mut self, now: TimeMs, session_ms: u64) {
        let fenced: Vec<(String, &'static str)> = (self.members.iter())
            .filter_map(|(id, m)| {
                if now >= m.last_heartbeat_ms + session_ms {
                    Some((id.clone(), "kafka:kip848-member-fenced-session-timeout"))
                } else if m.revocation_deadline_ms.is_some_and(|d| now >= d) {
                    Some((id.clone(), "kafka:kip848-member-fenced-rebalance-timeout"))
                } else {
                    None
                }
            })
            .collect();
        for (member_id, mark) in fenced {
            crate::marks::hit(mark);
            self.remove_member(&member_id);
        }
    }
}

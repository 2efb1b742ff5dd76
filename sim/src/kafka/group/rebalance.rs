//! One group's state machine: joining, rebalancing, expiry. The request handlers in
//! `requests.rs` validate and then call these.

use super::{Group, GroupRecord, GroupState, InitialDelay, Member, Parked};
use crate::kafka::types::*;
use crate::kafka::versioned::Versioned;
use std::collections::{BTreeMap, BTreeSet};

/// What a JoinGroup carries about the member.
pub(super) struct JoinMetadata {
    /// `group.instance.id`: `Some` for a static member.
    pub instance_id: Option<String>,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    /// Sorted and deduplicated.
    pub topics: Vec<String>,
    pub protocols: GroupProtocols,
}

impl Group {
    pub(super) fn new() -> Self {
        Self {
            state: GroupState::Empty,
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            pending_members: BTreeMap::new(),
            join_deadline_ms: 0,
            initial_delay: None,
            pending_sync: BTreeSet::new(),
            sync_deadline_ms: 0,
            assignments: BTreeMap::new(),
            protocol: String::new(),
            offsets: Versioned::new(),
            pending_txn_offsets: BTreeMap::new(),
            record: None,
        }
    }

    /// Writes the group's metadata record (see [`GroupCoordinator::reload`]).
    ///
    /// [`GroupCoordinator::reload`]: super::GroupCoordinator::reload
    fn write_record(&mut self) {
        let mut members = self.members.clone();
        for m in members.values_mut() {
            m.join_token = None;
            m.sync_token = None;
        }
        self.record = Some(GroupRecord {
            generation: self.generation,
            leader: self.leader.clone(),
            members,
            assignments: self.assignments.clone(),
        });
    }

    /// Becomes what the last metadata record says (see [`GroupCoordinator::reload`]).
    ///
    /// [`GroupCoordinator::reload`]: super::GroupCoordinator::reload
    pub(super) fn reload(&mut self, now: TimeMs, parked: &mut Parked) {
        crate::mark!("kafka:group-reloaded-from-records");
        for member in self.members.values() {
            for token in [member.join_token, member.sync_token].into_iter().flatten() {
                parked.answer(token, Response::Error(KafkaError::NotCoordinator), now);
            }
        }
        let record = self.record.clone().unwrap_or(GroupRecord {
            generation: 0,
            leader: None,
            members: BTreeMap::new(),
            assignments: BTreeMap::new(),
        });
        self.generation = record.generation;
        self.leader = record.leader;
        self.members = record.members;
        for m in self.members.values_mut() {
            m.last_heartbeat_ms = now;
        }
        self.assignments = record.assignments;
        self.state = match self.members.is_empty() {
            true => GroupState::Empty,
            false => GroupState::Stable,
        };
        self.pending_members.clear();
        self.pending_sync.clear();
        self.initial_delay = None;
    }

    /// The largest rebalance timeout of the members (Kafka's `rebalanceTimeoutMs`).
    fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
    }

    /// A member that was handed its id joins: it becomes a member awaiting join.
    pub(super) fn add_member(
        &mut self,
        now: TimeMs,
        member_id: &str,
        meta: JoinMetadata,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) -> u64 {
        let token = parked.park();
        let member = Member {
            instance_id: meta.instance_id,
            session_timeout_ms: meta.session_timeout_ms,
            rebalance_timeout_ms: meta.rebalance_timeout_ms,
            topics: meta.topics,
            protocols: meta.protocols,
            last_heartbeat_ms: now,
            join_token: Some(token),
            sync_token: None,
        };
        self.members.insert(member_id.to_string(), member);
        if self.leader.is_none() {
            self.leader = Some(member_id.to_string());
        }
        match self.state {
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(now, parked, config)
            }
            GroupState::PreparingRebalance => {
                if let Some(delay) = self.initial_delay.as_mut() {
                    delay.new_member_added = true;
                }
            }
            GroupState::Dead => unreachable!("a dead group accepts no members"),
        }
        token
    }

    /// A known member sends JoinGroup again. `Err(response)` answers at once (same
    /// metadata during CompletingRebalance, or a follower in Stable: the current
    /// generation); `Ok(token)` parks it for the rebalance.
    pub(super) fn rejoin(
        &mut self,
        now: TimeMs,
        member_id: &str,
        meta: JoinMetadata,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) -> Result<u64, Response> {
        let is_leader = self.leader.as_deref() == Some(member_id);
        let member = self
            .members
            .get_mut(member_id)
            .expect("rejoin of a known member");
        // Kafka compares the protocols and their metadata (`ClassicGroupMember.matches`).
        let changed = member.topics != meta.topics || member.protocols != meta.protocols;
        member.session_timeout_ms = meta.session_timeout_ms;
        member.rebalance_timeout_ms = meta.rebalance_timeout_ms;
        member.topics = meta.topics;
        member.protocols = meta.protocols;
        member.last_heartbeat_ms = now;
        let rebalance = match self.state {
            GroupState::PreparingRebalance => false,
            GroupState::CompletingRebalance => changed,
            GroupState::Stable => changed || is_leader,
            GroupState::Empty | GroupState::Dead => {
                return Err(Response::Error(KafkaError::UnknownMemberId))
            }
        };
        if self.state != GroupState::PreparingRebalance && !rebalance {
            return Err(self.join_response(member_id, false));
        }
        let token = self.park_join(now, member_id, parked);
        if rebalance {
            self.prepare_rebalance(now, parked, config);
        }
        Ok(token)
    }

    /// The member id of static member `instance_id`, if it is in the group.
    pub(super) fn static_member(&self, instance_id: &str) -> Option<&str> {
        let mut members = self.members.iter();
        let found = members.find(|(_, m)| m.instance_id.as_deref() == Some(instance_id));
        found.map(|(id, _)| id.as_str())
    }

    /// Kafka's `ClassicGroup.isStaticMemberFenced`: `instance_id` belongs to another member
    /// id than `member_id`.
    pub(super) fn is_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        let current = instance_id.and_then(|i| self.static_member(i));
        current.is_some_and(|id| id != member_id)
    }

    /// A static member rejoined with an unknown member id (Kafka's
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`): `new_id` takes `old_id`'s place,
    /// assignment and leadership, with `meta`'s protocols and timeouts; `old_id`'s parked
    /// requests get `FENCED_INSTANCE_ID` (`ClassicGroup.replaceStaticMember`). Stable with
    /// the selected protocol unchanged: answered at once in the current generation,
    /// `Err(response)` as [`ClusterConfig::static_member_rejoin`] says. CompletingRebalance:
    /// a rebalance (the leader may be assigning to the old id). PreparingRebalance: parked
    /// with the others. `Ok(token)` is the parked JoinGroup.
    pub(super) fn replace_static_member(
        &mut self,
        now: TimeMs,
        old_id: &str,
        new_id: &str,
        meta: JoinMetadata,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) -> Result<u64, Response> {
        crate::mark!("kafka:static-member-replaced");
        let old_leader = self.leader.clone();
        let mut member = self.members.remove(old_id).expect("a static member's id");
        let held = [member.join_token.take(), member.sync_token.take()];
        for token in held.into_iter().flatten() {
            parked.answer(token, Response::Error(KafkaError::FencedInstanceId), now);
        }
        member.session_timeout_ms = meta.session_timeout_ms;
        member.rebalance_timeout_ms = meta.rebalance_timeout_ms;
        member.topics = meta.topics;
        member.protocols = meta.protocols;
        member.last_heartbeat_ms = now;
        self.members.insert(new_id.to_string(), member);
        if let Some(assignment) = self.assignments.remove(old_id) {
            self.assignments.insert(new_id.to_string(), assignment);
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.to_string());
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.to_string());
        }
        match self.state {
            GroupState::Stable if self.select_protocol() == self.protocol => {
                self.write_record();
                let is_leader = self.leader.as_deref() == Some(new_id);
                Err(match config.static_member_rejoin {
                    StaticMemberRejoin::Kip814 => self.join_response(new_id, is_leader),
                    StaticMemberRejoin::PreKip814 => {
                        if is_leader {
                            crate::mark!("kafka:static-leader-answered-as-follower");
                        }
                        Response::JoinGroup {
                            generation: self.generation,
                            member_id: new_id.to_string(),
                            leader: old_leader.expect("a Stable group has a leader"),
                            protocol: self.protocol.clone(),
                            members: BTreeMap::new(),
                            owned: BTreeMap::new(),
                            skip_assignment: false,
                        }
                    }
                })
            }
            GroupState::Stable | GroupState::CompletingRebalance => {
                let token = self.park_join(now, new_id, parked);
                self.prepare_rebalance(now, parked, config);
                Ok(token)
            }
            GroupState::PreparingRebalance => Ok(self.park_join(now, new_id, parked)),
            GroupState::Empty | GroupState::Dead => {
                unreachable!("a group with a static member is neither Empty nor Dead")
            }
        }
    }

    /// Parks `member_id`'s JoinGroup; an earlier parked one gets REBALANCE_IN_PROGRESS (the
    /// client gave up on it and sent a new one).
    fn park_join(&mut self, now: TimeMs, member_id: &str, parked: &mut Parked) -> u64 {
        let token = parked.park();
        let member = self.members.get_mut(member_id).expect("known member");
        if let Some(old) = member.join_token.replace(token) {
            parked.answer(old, Response::Error(KafkaError::RebalanceInProgress), now);
        }
        token
    }

    /// Whether a member offering `names` may join (Kafka's `supportsProtocols`): an empty
    /// group takes any non-empty offer, else one name must be offered by every member.
    pub(super) fn supports_protocols(&self, names: &[String]) -> bool {
        if self.members.is_empty() {
            return !names.is_empty();
        }
        names.iter().any(|n| self.offered_by_all(n))
    }

    fn offered_by_all(&self, name: &String) -> bool {
        self.members
            .values()
            .all(|m| m.protocols.names.contains(name))
    }

    /// The assignor of the generation (Kafka's `selectProtocol`): among the names every
    /// member offers, each member votes for the first it lists; most votes wins, a tie
    /// goes to the name first in the leader's list.
    fn select_protocol(&self) -> String {
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for member in self.members.values() {
            let vote = member
                .protocols
                .names
                .iter()
                .find(|n| self.offered_by_all(n));
            if let Some(name) = vote {
                *votes.entry(name).or_default() += 1;
            }
        }
        let leader = self.leader.as_ref().and_then(|l| self.members.get(l));
        let order = leader
            .map(|m| m.protocols.names.clone())
            .unwrap_or_default();
        let mut best: Option<(&String, usize)> = None;
        for name in &order {
            let count = votes.get(name).copied().unwrap_or(0);
            if count > 0 && best.is_none_or(|(_, b)| count > b) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.clone()).unwrap_or_default()
    }

    /// The JoinGroup response of the current generation for `member_id`; only the leader
    /// gets the members, their topics and what they own. `skip_assignment`: KIP-814's flag
    /// for a returning static leader.
    fn join_response(&self, member_id: &str, skip_assignment: bool) -> Response {
        let leader = self
            .leader
            .clone()
            .expect("a group with members has a leader");
        let is_leader = leader == member_id;
        let members = self.members.iter().filter(|_| is_leader);
        Response::JoinGroup {
            generation: self.generation,
            member_id: member_id.to_string(),
            leader,
            protocol: self.protocol.clone(),
            members: members
                .clone()
                .map(|(id, m)| (id.clone(), m.topics.clone()))
                .collect(),
            owned: members
                .map(|(id, m)| (id.clone(), m.protocols.owned.clone()))
                .collect(),
            skip_assignment,
        }
    }

    /// Moves to PreparingRebalance (Kafka's `prepareRebalance`): parked SyncGroups get
    /// REBALANCE_IN_PROGRESS, the assignment is forgotten, the join deadline is set.
    pub(super) fn prepare_rebalance(
        &mut self,
        now: TimeMs,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) {
        for member in self.members.values_mut() {
            if let Some(token) = member.sync_token.take() {
                parked.answer(token, Response::Error(KafkaError::RebalanceInProgress), now);
            }
        }
        self.assignments.clear();
        self.pending_sync.clear();
        let rebalance_timeout_ms = self.rebalance_timeout_ms();
        self.initial_delay = if self.state == GroupState::Empty {
            let delay_ms = config.group_initial_rebalance_delay_ms;
            Some(InitialDelay {
                window_end_ms: now + delay_ms,
                remaining_ms: rebalance_timeout_ms.saturating_sub(delay_ms),
                new_member_added: false,
            })
        } else {
            None
        };
        self.join_deadline_ms = now + rebalance_timeout_ms;
        self.state = GroupState::PreparingRebalance;
    }

    /// Ends the join phase if it is due: the initial delay ran out, or every known member
    /// rejoined (and no handed-out id is pending), or the rebalance timeout passed.
    pub(super) fn try_complete_join(
        &mut self,
        now: TimeMs,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if let Some(delay) = self.initial_delay.as_mut() {
            if now >= delay.window_end_ms && delay.new_member_added && delay.remaining_ms > 0 {
                let extension_ms = config
                    .group_initial_rebalance_delay_ms
                    .min(delay.remaining_ms);
                delay.window_end_ms += extension_ms;
                delay.remaining_ms -= extension_ms;
                delay.new_member_added = false;
            }
            if now < delay.window_end_ms {
                return;
            }
        } else {
            let all_joined = self.members.values().all(|m| m.join_token.is_some())
                && self.pending_members.is_empty();
            if !all_joined && now < self.join_deadline_ms {
                return;
            }
        }
        self.complete_join(now, parked);
    }

    /// Removes members that did not rejoin, starts the next generation and answers every
    /// parked JoinGroup (Kafka's `completeClassicGroupJoin` and `initNextGeneration`).
    fn complete_join(&mut self, now: TimeMs, parked: &mut Parked) {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.join_token.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for member_id in gone {
            crate::mark!("kafka:member-removed-join-timeout");
            self.remove_member(now, &member_id, parked);
        }
        let previous_generation = self.generation;
        if previous_generation > 0 {
            crate::mark!("kafka:rebalance");
        }
        self.generation += 1;
        assert!(
            self.generation > previous_generation,
            "generations only increase"
        );
        self.initial_delay = None;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.assignments.clear();
            self.write_record();
            return;
        }
        self.state = GroupState::CompletingRebalance;
        self.protocol = self.select_protocol();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in &ids {
            let response = self.join_response(member_id, false);
            let member = self.members.get_mut(member_id).expect("listed member");
            let token = member
                .join_token
                .take()
                .expect("every remaining member rejoined");
            member.last_heartbeat_ms = now;
            parked.answer(token, response, now);
        }
        self.pending_sync = ids.into_iter().collect();
        self.sync_deadline_ms = now + self.rebalance_timeout_ms();
    }

    /// Removes a member; its parked requests get UNKNOWN_MEMBER_ID. A new leader is the
    /// smallest remaining member id. The caller decides whether the group rebalances.
    pub(super) fn remove_member(&mut self, now: TimeMs, member_id: &str, parked: &mut Parked) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        for token in [member.join_token, member.sync_token].into_iter().flatten() {
            parked.answer(token, Response::Error(KafkaError::UnknownMemberId), now);
        }
        self.pending_sync.remove(member_id);
        self.assignments.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
    }

    /// After a member left or expired (Kafka's `removeMemberAndUpdateGroup`): a settled
    /// group rebalances; a rebalance in progress may now be complete (or empty).
    pub(super) fn member_removed(
        &mut self,
        now: TimeMs,
        parked: &mut Parked,
        config: &ClusterConfig,
    ) {
        if matches!(
            self.state,
            GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(now, parked, config);
        }
        self.try_complete_join(now, parked, config);
    }

    /// Time-driven removals: handed-out ids never used, members silent for longer than
    /// their session timeout (unless awaiting join or sync), and members that did not send
    /// SyncGroup before the pending-sync deadline.
    pub(super) fn expire(&mut self, now: TimeMs, parked: &mut Parked, config: &ClusterConfig) {
        self.pending_members.retain(|_, expiry_ms| now < *expiry_ms);
        let silent: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.join_token.is_none() && m.sync_token.is_none())
            .filter(|(_, m)| now >= m.last_heartbeat_ms + m.session_timeout_ms)
            .map(|(id, _)| id.clone())
            .collect();
        for member_id in silent {
            crate::mark!("kafka:session-expired");
            self.remove_member(now, &member_id, parked);
            self.member_removed(now, parked, config);
        }
        let syncing = matches!(
            self.state,
            GroupState::CompletingRebalance | GroupState::Stable
        );
        if syncing && !self.pending_sync.is_empty() && now >= self.sync_deadline_ms {
            let late: Vec<String> = self.pending_sync.iter().cloned().collect();
            for member_id in late {
                crate::mark!("kafka:member-removed-sync-timeout");
                self.remove_member(now, &member_id, parked);
            }
            self.prepare_rebalance(now, parked, config);
        }
    }

    /// The leader's SyncGroup: stores the assignment (members missing from it get none,
    /// unknown ids are ignored), moves to Stable and answers every parked SyncGroup.
    pub(super) fn assign(
        &mut self,
        now: TimeMs,
        mut assignments: BTreeMap<String, Vec<TopicPartition>>,
        parked: &mut Parked,
    ) {
        self.assignments = self
            .members
            .keys()
            .map(|id| (id.clone(), assignments.remove(id).unwrap_or_default()))
            .collect();
        self.state = GroupState::Stable;
        self.write_record();
        for (member_id, member) in self.members.iter_mut() {
            if let Some(token) = member.sync_token.take() {
                let assignment = self.assignments[member_id].clone();
                parked.answer(token, Response::SyncGroup { assignment }, now);
            }
        }
    }
}

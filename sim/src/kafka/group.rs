//! Group coordinators: membership, generations, rebalances, committed offsets. The classic
//! protocol is here and in `rebalance.rs` / `requests.rs`; KIP-848's consumer protocol
//! (`ConsumerGroupHeartbeat`, [`GroupCoordinator::consumer_group_heartbeat`]) is in
//! [`consumer_protocol`], its server-side assignors in `server_assignor.rs`. A group id is
//! of one protocol at a time (mixed membership is refused, see [`consumer_protocol`]). Behaviour follows `shared/models-reference.md` section D, which paraphrases
//! Kafka's `ClassicGroup.java` and `GroupMetadataManager.java`.
//!
//! # Shape
//! One [`GroupCoordinator`] holds every group of the cluster; the cluster model checks that
//! the receiving broker is the coordinator and delegates the six group requests to
//! [`GroupCoordinator::handle`]. Committed offsets live here; each is also a
//! `__consumer_offsets` record, reloaded from the new leader's log after a coordinator move
//! (`model::coordinator_log`), so a lost log tail rolls them back. Membership survives a
//! move only as far as the group's last metadata record says
//! ([`GroupCoordinator::reload`]): Kafka writes one when the leader's SyncGroup completes a
//! generation and when a join phase leaves the group empty, nowhere else, and a new
//! coordinator loads the group from its records (apache/kafka
//! `group-coordinator/.../GroupMetadataManager.java`, `completeClassicGroupJoin`,
//! `classicGroupSyncToLeader`, `replay`).
//!
//! # States ([`GroupState`])
//! - `Empty`: no members. A JoinGroup starts the first rebalance, delayed by
//!   `group.initial.rebalance.delay.ms` (extended while new members keep arriving, up to
//!   the rebalance timeout, like Kafka's `InitialDelayedJoin`).
//! - `PreparingRebalance`: JoinGroups park until every known member rejoined or the
//!   rebalance timeout (the largest `rebalance_timeout_ms` of the members) passed; members
//!   that did not rejoin are removed. Then the generation increments.
//! - `CompletingRebalance`: the leader got the members and their topics; followers' SyncGroups
//!   park until the leader's SyncGroup brings the assignment.
//! - `Stable`: SyncGroup returns the member's assignment; heartbeats answer NONE.
//! - `Dead`: unreachable for now (offset expiry is not modelled); handled per the table.
//!
//! Parked JoinGroup/SyncGroup requests get a token ([`ParkToken::Group`]); the service
//! re-asks with [`GroupCoordinator::poll_parked`] after each tick.
//!
//! # Deliberate simplifications
//! - Member ids are `consumer-<n>` (static members: `<group.instance.id>-<n>`), numbered
//!   per coordinator (no UUIDs: determinism).
//! - Static membership (KIP-345) as `GroupMetadataManager.classicGroupJoinNewStaticMember`
//!   and `updateStaticMemberThenRebalanceOrCompleteJoin` do it: a static member joins
//!   without `MEMBER_ID_REQUIRED`; one that comes back with an unknown member id (a
//!   restart) takes its old member id's place, assignment and leadership, in a Stable group
//!   without a rebalance (what the response says then is
//!   [`ClusterConfig::static_member_rejoin`], KIP-814), in CompletingRebalance by starting
//!   one; its old id's parked requests get `FENCED_INSTANCE_ID`. A JoinGroup whose member
//!   id is not the instance's current one gets `FENCED_INSTANCE_ID`. Only JoinGroup carries
//!   the instance id here: a replaced member's SyncGroup, Heartbeat and OffsetCommit get
//!   `UNKNOWN_MEMBER_ID` (Kafka's `FENCED_INSTANCE_ID`), which cannot matter while a
//!   process's old incarnation is always dead when it restarts, as in every fault here.
//!   Static members expire by session timeout as others do and never send LeaveGroup.
//! - No `group.max.size`, no offset retention.
//!   Protocol negotiation is Kafka's (`ClassicGroup.supportsProtocols`, `selectProtocol`);
//!   a member's subscription metadata (owned partitions, generation) is relayed, not read.
//! - OffsetCommit does not count as a heartbeat.

use super::model::{ParkToken, Reply};
use super::types::*;
use super::versioned::Versioned;
use std::collections::{BTreeMap, BTreeSet};

#[cfg(test)]
mod tests;

/// Prefix of the member ids the coordinator hands out with `MEMBER_ID_REQUIRED`.
pub const MEMBER_ID_PREFIX: &str = "consumer-";

/// How long an answered parked request waits to be collected before it is forgotten, in ms.
/// Longer than any request timeout a client uses, so only abandoned answers are dropped.
const PARKED_READY_TTL_MS: u64 = 600_000;

/// Upper bound on parked slots; a model queue must be bounded.
const PARKED_SLOTS_MAX: usize = 100_000;

/// The state of a classic consumer group (Kafka's `ClassicGroupState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum GroupState {
    /// No members; offsets may exist.
    Empty,
    /// Waiting for members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    /// Everyone has an assignment.
    Stable,
    /// Gone (offsets expired); not reached by the current model.
    Dead,
}

/// A committed offset as `__consumer_offsets` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Next offset to read.
    pub offset: Offset,
    /// When it was committed, in ms (for offset retention, later).
    pub commit_time_ms: TimeMs,
}

#[derive(Debug, Clone)]
struct Member {
    /// `group.instance.id` of a static member (KIP-345); `None` for a dynamic one.
    instance_id: Option<String>,
    session_timeout_ms: u64,
    rebalance_timeout_ms: u64,
    /// Subscribed topics, sorted and deduplicated.
    topics: Vec<String>,
    /// The assignors offered and the subscription metadata, relayed to the leader.
    protocols: GroupProtocols,
    last_heartbeat_ms: TimeMs,
    /// A parked JoinGroup ("awaiting join"); exempts the member from session expiry.
    join_token: Option<u64>,
    /// A parked SyncGroup ("awaiting sync"); exempts the member from session expiry.
    sync_token: Option<u64>,
}

/// Kafka's `InitialDelayedJoin`: the first rebalance of an empty group waits a window and
/// extends it while new members keep arriving, at most up to the rebalance timeout.
#[derive(Debug, Clone, Copy)]
struct InitialDelay {
    window_end_ms: TimeMs,
    remaining_ms: u64,
    new_member_added: bool,
}

#[derive(Debug, Clone)]
struct Group {
    state: GroupState,
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// KIP-394: ids handed out with MEMBER_ID_REQUIRED and not joined yet, with the time
    /// at which they are forgotten (session timeout after being handed out).
    pending_members: BTreeMap<String, TimeMs>,
    /// PreparingRebalance: when the join phase ends whoever rejoined.
    join_deadline_ms: TimeMs,
    initial_delay: Option<InitialDelay>,
    /// Members of the current generation that have not sent SyncGroup yet (KAFKA-13293's
    /// pending sync); removed when `sync_deadline_ms` passes.
    pending_sync: BTreeSet<String>,
    sync_deadline_ms: TimeMs,
    /// The leader's assignment of the current generation (Stable only).
    assignments: BTreeMap<String, Vec<TopicPartition>>,
    /// The assignor selected for the current generation (`protocolName`).
    protocol: String,
    /// Counted changes: the coordinator log copies them out only after one
    /// ([`GroupCoordinator::offsets_version`]).
    offsets: Versioned<TopicPartition, CommittedOffset>,
    /// KIP-447: offsets committed inside transactions, by producer id, invisible until the
    /// COMMIT marker reaches the group's `__consumer_offsets` partition
    /// (`pendingTransactionalOffsets`).
    pending_txn_offsets: BTreeMap<i64, BTreeMap<TopicPartition, Offset>>,
    /// The group's last metadata record (`GroupMetadataValue`), what a new coordinator
    /// loads; `None` before the first.
    record: Option<GroupRecord>,
}

/// A group metadata record: the generation, its leader, members (no parked requests) and
/// their assignments.
#[derive(Debug, Clone)]
struct GroupRecord {
    generation: i32,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    assignments: BTreeMap<String, Vec<TopicPartition>>,
}

/// A parked request: still waiting, or answered and waiting to be collected.
#[derive(Debug, Clone)]
enum Slot {
    Waiting,
    Ready {
        response: Response,
        ready_at_ms: TimeMs,
    },
}

/// Parked JoinGroup and SyncGroup requests, numbered by the coordinator.
#[derive(Debug, Default)]
struct Parked {
    slots: BTreeMap<u64, Slot>,
    next_token: u64,
}

impl Parked {
    fn park(&mut self) -> u64 {
        assert!(
            self.slots.len() < PARKED_SLOTS_MAX,
            "too many parked group requests"
        );
        let token = self.next_token;
        self.next_token += 1;
        self.slots.insert(token, Slot::Waiting);
        token
    }

    fn answer(&mut self, token: u64, response: Response, now: TimeMs) {
        let slot = self
            .slots
            .get_mut(&token)
            .expect("answered token is parked");
        assert!(
            matches!(slot, Slot::Waiting),
            "a parked request is answered once"
        );
        *slot = Slot::Ready {
            response,
            ready_at_ms: now,
        };
    }

    /// The response if ready (and forgets the token), `None` while waiting.
    fn take(&mut self, token: u64) -> Option<Response> {
        match self.slots.get(&token) {
            Some(Slot::Waiting) => None,
            Some(Slot::Ready { .. }) => match self.slots.remove(&token) {
                Some(Slot::Ready { response, .. }) => Some(response),
                _ => unreachable!("checked above"),
            },
            // Forgotten after PARKED_READY_TTL_MS: the client rejoins, which is safe.
            None => Some(Response::Error(KafkaError::RebalanceInProgress)),
        }
    }

    /// A reply for a freshly parked token: `Done` if it was answered at once.
    fn reply(&mut self, token: u64) -> Reply {
        match self.slots.get(&token) {
            Some(Slot::Ready { .. }) => Reply::Done(self.take(token).expect("ready")),
            _ => Reply::Parked(ParkToken::Group(token)),
        }
    }

    fn forget_old(&mut self, now: TimeMs) {
        self.slots.retain(|_, slot| match slot {
            Slot::Waiting => true,
            Slot::Ready { ready_at_ms, .. } => now < *ready_at_ms + PARKED_READY_TTL_MS,
        });
    }
}

fn error(e: KafkaError) -> Reply {
    Reply::Done(Response::Error(e))
}

/// The state of every consumer group in the cluster. See the module docs.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: ClusterConfig,
    groups: BTreeMap<String, Group>,
    next_member_number: u64,
    parked: Parked,
    /// KIP-848 groups by id; their committed offsets stay in `groups`.
    consumer_groups: BTreeMap<String, consumer_protocol::ConsumerGroup>,
}

pub mod consumer_protocol;
mod rebalance;
mod requests;
mod server_assignor;
mod txn;

impl GroupCoordinator {
    /// No groups yet.
    pub fn new(config: ClusterConfig) -> Self {
        Self {
            config,
            groups: BTreeMap::new(),
            next_member_number: 1,
            parked: Parked::default(),
            consumer_groups: BTreeMap::new(),
        }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Every committed offset of every group: `(group id, partition, offset)`, in order.
    pub fn committed_offsets(
        &self,
    ) -> impl Iterator<Item = (&str, &TopicPartition, &CommittedOffset)> {
        self.groups
            .iter()
            .flat_map(|(g, group)| group.offsets.iter().map(move |(tp, c)| (g.as_str(), tp, c)))
    }

    /// The count of changes to the committed offsets so far, as (groups, changes summed
    /// over them): an unchanged value means unchanged offsets. Groups are never removed, and
    /// a new one has no offsets yet.
    pub fn offsets_version(&self) -> (usize, u64) {
        let changes = self.groups.values().map(|g| g.offsets.version()).sum();
        (self.groups.len(), changes)
    }

    /// `group_id`'s committed offset of `tp`, if any.
    pub fn committed_offset(&self, group_id: &str, tp: &TopicPartition) -> Option<CommittedOffset> {
        self.groups.get(group_id)?.offsets.get(tp).copied()
    }

    /// Sets `group_id`'s committed offset of `tp` as a coordinator loading its partition
    /// finds it (`None`: not in the log), creating the group (Empty) if needed.
    pub fn restore_offset(
        &mut self,
        group_id: &str,
        tp: &TopicPartition,
        committed: Option<CommittedOffset>,
    ) {
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(Group::new);
        match committed {
            Some(c) => group.offsets.insert(tp.clone(), c),
            None => group.offsets.remove(tp),
        };
    }

    /// Handles one of the six group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
    /// OffsetCommit, OffsetFetch) at time `now`. JoinGroup and SyncGroup may park.
    ///
    /// # Panics
    /// On any other request: the cluster model routes only group requests here.
    pub fn handle(&mut self, now: TimeMs, request: Request) -> Reply {
        let reply = match request {
            Request::JoinGroup {
                group_id,
                member_id,
                group_instance_id,
                session_timeout_ms,
                rebalance_timeout_ms,
                topics,
                protocols,
            } => {
                let meta = rebalance::JoinMetadata {
                    instance_id: group_instance_id,
                    session_timeout_ms,
                    rebalance_timeout_ms,
                    topics,
                    protocols,
                };
                return self.join(now, group_id, member_id, meta);
            }
            Request::SyncGroup {
                group_id,
                generation,
                member_id,
                assignments,
            } => {
                return self.sync(now, &group_id, generation, &member_id, assignments);
            }
            Request::Heartbeat {
                group_id,
                generation,
                member_id,
            } => self.heartbeat(now, &group_id, generation, &member_id),
            Request::LeaveGroup {
                group_id,
                member_id,
            } => self.leave(now, &group_id, &member_id),
            Request::OffsetCommit {
                group_id,
                generation,
                member_id,
                offsets,
            } => self.commit(now, &group_id, generation, &member_id, offsets),
            Request::OffsetFetch {
                group_id,
                partitions,
            } => self.fetch(&group_id, partitions),
            other => panic!("not a group request: {other:?}"),
        };
        Reply::Done(reply)
    }

    /// Re-asks a parked JoinGroup or SyncGroup (`ParkToken::Group(token)`): its response
    /// once answered (then the token is forgotten), `None` while it still waits. Runs
    /// [`GroupCoordinator::tick`] at `now` first, so time-driven completions are never
    /// missed (ticking twice at the same time changes nothing).
    pub fn poll_parked(&mut self, now: TimeMs, token: u64) -> Option<Response> {
        self.tick(now);
        self.parked.take(token)
    }

    /// Advances time-driven behaviour to `now`: pending-member and session expiry, the
    /// pending-sync deadline, the initial rebalance delay and the rebalance timeout.
    pub fn tick(&mut self, now: TimeMs) {
        for group in self.groups.values_mut() {
            group.expire(now, &mut self.parked, &self.config);
            group.try_complete_join(now, &mut self.parked, &self.config);
        }
        self.tick_consumer_groups(now);
        self.parked.forget_old(now);
    }

    /// The coordinator of the groups `moved` names moved to another broker (a new leader of
    /// their `__consumer_offsets` partition): each is what its last metadata record says,
    /// as Kafka's new coordinator loads it (`GroupMetadataManager.replay` builds the group
    /// from its `GroupMetadataValue`, Stable with members or Empty, and `onLoaded`
    /// restarts every member's session timer): a generation whose join phase completed
    /// but whose leader never synced, a rebalance in progress, handed-out member ids and
    /// pending syncs are gone. A KIP-848 group is loaded whole (Kafka records every member
    /// and assignment), its timers restarted. Parked JoinGroup and SyncGroup requests are answered
    /// NOT_COORDINATOR (their connection died with the old coordinator: the client looks
    /// the coordinator up again). Committed and pending transactional offsets stay.
    pub fn reload(&mut self, now: TimeMs, moved: &dyn Fn(&str) -> bool) {
        for (group_id, group) in self.groups.iter_mut() {
            if moved(group_id) {
                group.reload(now, &mut self.parked);
            }
        }
        self.reload_consumer_groups(now, moved);
    }

    /// The state of group `group_id`, if it exists.
    pub fn state(&self, group_id: &str) -> Option<GroupState> {
        self.groups.get(group_id).map(|g| g.state)
    }

    /// The current generation of group `group_id`, if it exists.
    pub fn generation(&self, group_id: &str) -> Option<i32> {
        self.groups.get(group_id).map(|g| g.generation)
    }

    /// The member ids of group `group_id`, sorted (empty if the group does not exist).
    pub fn members(&self, group_id: &str) -> Vec<String> {
        self.groups
            .get(group_id)
            .map(|g| g.members.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The committed offsets of group `group_id` (empty if none).
    pub fn committed(&self, group_id: &str) -> BTreeMap<TopicPartition, CommittedOffset> {
        self.groups
            .get(group_id)
            .map(|g| BTreeMap::clone(&g.offsets))
            .unwrap_or_default()
    }
}

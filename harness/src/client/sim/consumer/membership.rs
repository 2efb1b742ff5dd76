//! The consumer's side of the classic group protocol: finding the coordinator, the join loop
//! (JoinGroup offering the `partition.assignment.strategy` assignors with what the member
//! owns, SyncGroup with the leader's assignment by the selected one) and the heartbeat task.
//!
//! The join loop and the heartbeats run as tasks of their own on the consumer's node, as
//! Java's heartbeat thread drives the network client between polls: a rebalance progresses
//! while the application is busy, and a paused node stops both.

use super::sticky::cooperative_sticky_assign;
use super::{backoff, unexpected, Deadline, JOIN_GROUP_TIMEOUT_EXTRA_MS, RETRY_BACKOFF_MS};
use crate::client::sim::conn::{request_name, Connection};
use crate::client::{AssignmentStrategy, ClientError, ConsumerConfig};
use eosim_sim::kafka::{
    BrokerId, CoordinatorKind, GroupProtocols, KafkaError, OwnedPartitions, Request, Response,
    TopicPartition,
};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::{sleep, Instant};

/// Kafka's `RangeAssignor`: per topic, the subscribed members sorted by member id and the
/// partitions in order; each member gets `n / m` consecutive partitions and the first
/// `n % m` members one more. `members` maps member id to subscribed topics;
/// `partition_counts` has the partition count of every known topic (topics without
/// metadata are skipped, as in Kafka). Every member appears in the result.
pub fn range_assign(
    members: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let mut assignment: BTreeMap<String, Vec<TopicPartition>> =
        members.keys().map(|m| (m.clone(), Vec::new())).collect();
    for (topic, &n) in partition_counts {
        // BTreeMap keys are already sorted by member id.
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(m, _)| m)
            .collect();
        let m = subscribers.len() as u32;
        if m == 0 {
            continue;
        }
        for (i, member) in (0u32..).zip(subscribers) {
            let start = (n / m) * i + i.min(n % m);
            let length = n / m + u32::from(i < n % m);
            let partitions = (start..start + length).map(|p| TopicPartition::new(topic, p));
            assignment
                .get_mut(member)
                .expect("listed member")
                .extend(partitions);
        }
    }
    assignment
}

/// The leader's assignment as a boxed future (member id → partitions).
pub type AssignmentFuture<'a> =
    Pin<Box<dyn Future<Output = BTreeMap<String, Vec<TopicPartition>>> + Send + 'a>>;

/// An assignment strategy in place of [`range_assign`], after Java's
/// `ConsumerPartitionAssignor`: `on_join` stands where `subscriptionUserData` is asked for
/// (before every JoinGroup), `assign` is the leader's `assign`. The simulated JoinGroup and
/// SyncGroup carry no user data, so an implementation keeps what its members would put in
/// them (Kafka Streams' `SubscriptionInfo` / `AssignmentInfo`) itself.
pub trait GroupAssignor: Send + Sync {
    /// The protocol name the JoinGroup offers (`ConsumerPartitionAssignor.name()`), the only
    /// one: a member with an assignor of its own offers no other.
    fn name(&self) -> &'static str;
    /// Whether `supportedProtocols()` lists COOPERATIVE besides EAGER: the consumer then
    /// follows the cooperative protocol (KIP-429), as `ConsumerCoordinator` picks the
    /// highest protocol its assignors share. Eager only unless an assignor says so.
    fn cooperative(&self) -> bool {
        false
    }
    /// Called before each JoinGroup with the member id it carries (empty on the first).
    fn on_join(&self, member_id: &str);
    /// The leader's assignment of `generation`: `members` maps member id to subscribed
    /// topics, `owned` to what each member still owns as it joins (empty under the eager
    /// protocol), `partition_counts` has every known topic's partition count; `conn` is
    /// the leader's connection for what else it needs to look up (end offsets).
    fn assign<'a>(
        &'a self,
        conn: &'a Connection,
        generation: i32,
        members: &'a BTreeMap<String, Vec<String>>,
        owned: &'a BTreeMap<String, OwnedPartitions>,
        partition_counts: &'a BTreeMap<String, u32>,
    ) -> AssignmentFuture<'a>;
}

/// Group membership as the coordinator last told it.
#[derive(Debug)]
pub(super) struct Membership {
    pub coordinator: Option<BrokerId>,
    /// Empty until the coordinator hands one out (MEMBER_ID_REQUIRED).
    pub member_id: String,
    /// -1 outside a generation.
    pub generation: i32,
    /// Joined and synced: heartbeats run and commits carry the generation.
    pub stable: bool,
    /// The group asked for a rejoin (REBALANCE_IN_PROGRESS, a fenced generation, a new
    /// subscription); the next `poll` rejoins.
    pub rejoin_needed: bool,
    /// When `poll` was last called (for `max.poll.interval.ms`).
    pub last_poll: Instant,
    /// The partition count of every topic the group subscribes to as this member's last
    /// assignment saw it, `None` for a topic its metadata did not have, while it is the
    /// group's leader (Java's `ConsumerCoordinator.assignmentSnapshot`, compared whole with
    /// each new `metadataSnapshot`; `None` for every other member, `onJoinComplete`). See
    /// `SimConsumer::maybe_refresh_metadata`.
    pub assignment_snapshot: Option<BTreeMap<String, Option<u32>>>,
    /// KIP-848 (`group.protocol = consumer`): what the heartbeat task and the poll thread
    /// exchange; `generation` is then the member epoch.
    pub kip848: super::kip848::Kip848Membership,
}

impl Membership {
    /// Java's reaction to a group error from the coordinator.
    pub fn on_error(&mut self, e: KafkaError) {
        match e {
            KafkaError::UnknownMemberId => {
                crate::mark!("client:consumer-member-fenced");
                self.reset()
            }
            KafkaError::IllegalGeneration => {
                crate::mark!("client:consumer-member-fenced");
                self.generation = -1;
                self.stable = false;
                self.rejoin_needed = true;
            }
            KafkaError::RebalanceInProgress => {
                crate::mark!("client:consumer-rebalance-seen");
                self.rejoin_needed = true
            }
            KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress => self.coordinator = None,
            _ => {}
        }
    }

    /// Whether the generation or the member id was reset (Java's `Generation.NO_GENERATION`
    /// test in `ConsumerCoordinator.onJoinPrepare`): whatever the member owns is lost.
    pub fn generation_lost(&self) -> bool {
        self.generation < 0 || self.member_id.is_empty()
    }

    /// Forgets the member id and generation (UNKNOWN_MEMBER_ID, leaving, poll timeout).
    pub fn reset(&mut self) {
        self.member_id.clear();
        self.generation = -1;
        self.stable = false;
        self.rejoin_needed = true;
    }
}

/// A finished rebalance: the generation joined and this member's assignment.
#[derive(Debug)]
pub(super) struct Joined {
    pub generation: i32,
    pub assignment: Vec<TopicPartition>,
}

/// What a JoinGroup answered with a generation.
struct JoinResult {
    generation: i32,
    member_id: String,
    leader: String,
    protocol: String,
    members: BTreeMap<String, Vec<String>>,
    owned: BTreeMap<String, OwnedPartitions>,
    /// KIP-814: a returning static leader keeps the group's assignment.
    skip_assignment: bool,
}

/// What the consumer, its join loop and its heartbeat task share. Cloning shares it.
#[derive(Clone)]
pub(super) struct GroupClient {
    pub conn: Connection,
    pub config: ConsumerConfig,
    membership: Arc<Mutex<Membership>>,
    /// `None`: the range assignor.
    pub assignor: Option<Arc<dyn GroupAssignor>>,
    /// Wakes the KIP-848 heartbeat task for an immediate heartbeat (an acknowledgement).
    pub heartbeat_now: Arc<tokio::sync::Notify>,
}

impl GroupClient {
    pub fn new(conn: Connection, config: ConsumerConfig) -> Self {
        let membership = Membership {
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            stable: false,
            rejoin_needed: false,
            last_poll: Instant::now(),
            assignment_snapshot: None,
            kip848: Default::default(),
        };
        Self {
            conn,
            config,
            membership: Arc::new(Mutex::new(membership)),
            assignor: None,
            heartbeat_now: Arc::new(tokio::sync::Notify::new()),
        }
    }

    pub fn membership(&self) -> MutexGuard<'_, Membership> {
        self.membership.lock().expect("membership lock")
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// The group coordinator, found with FindCoordinator (retried on retriable errors,
    /// asking the bootstrap brokers in turn) if unknown.
    pub async fn ensure_coordinator(&self, deadline: &Deadline) -> Result<BrokerId, ClientError> {
        loop {
            if let Some(broker) = self.membership().coordinator {
                return Ok(broker);
            }
            if deadline.expired() {
                return Err(deadline.timeout("FindCoordinator"));
            }
            let key = self.config.group_id.clone();
            let request = Request::FindCoordinator {
                key,
                kind: CoordinatorKind::Group,
            };
            let timeout = deadline.cap(self.request_timeout());
            match self.conn.request_any(request, timeout).await {
                Ok(Response::FindCoordinator { broker }) => {
                    self.membership().coordinator = Some(broker);
                    return Ok(broker);
                }
                Ok(Response::Error(e)) if e.is_retriable() => backoff(deadline).await,
                Ok(Response::Error(e)) => return Err(ClientError::Kafka(e)),
                Ok(other) => return Err(unexpected("FindCoordinator", &other)),
                // The next bootstrap broker is asked on the next turn.
                Err(_) => {}
            }
        }
    }

    /// Sends `request` to the coordinator, re-finding it on coordinator errors and
    /// timeouts, until `deadline`. Other responses (errors included) are returned.
    pub async fn coordinator_request(
        &self,
        request: Request,
        deadline: &Deadline,
    ) -> Result<Response, ClientError> {
        loop {
            if deadline.expired() {
                return Err(deadline.timeout(request_name(&request)));
            }
            let coordinator = self.ensure_coordinator(deadline).await?;
            let timeout = deadline.cap(self.request_timeout());
            match self
                .conn
                .request(coordinator, request.clone(), timeout)
                .await
            {
                Ok(Response::Error(e)) if is_coordinator_error(e) => {
                    self.membership().on_error(e);
                    backoff(deadline).await;
                }
                Ok(response) => return Ok(response),
                Err(_) => self.membership().coordinator = None,
            }
        }
    }

    /// The join loop, run as its own task: JoinGroup (again after MEMBER_ID_REQUIRED),
    /// SyncGroup with the leader's assignment, until the member is stable in a generation
    /// or a fatal error. It keeps trying while the coordinator cannot be reached, as Java
    /// does; the polls waiting for it have their own deadlines. `owned` is what the member
    /// keeps while it rejoins (cooperative; empty under the eager protocol).
    ///
    /// `Ok(None)`: a JoinGroup, SyncGroup or heartbeat answer reset the generation or the
    /// member id while the member still owned partitions. Java's `resetStateAndRejoin` then
    /// sets `needsJoinPrepare`, and the next turn of `joinGroupIfNeeded` runs
    /// `onJoinPrepare` again, which gives every owned partition up as lost
    /// (`invokePartitionsLost`) before the next JoinGroup; the consumer does that and starts
    /// a new join loop owning nothing.
    pub async fn rebalance(
        self,
        topics: Vec<String>,
        owned: Vec<TopicPartition>,
    ) -> Result<Option<Joined>, ClientError> {
        loop {
            if !owned.is_empty() && self.membership().generation_lost() {
                crate::mark!("client:consumer-generation-lost-mid-rebalance");
                return Ok(None);
            }
            let deadline = Deadline::after(self.request_timeout());
            let coordinator = match self.ensure_coordinator(&deadline).await {
                Ok(coordinator) => coordinator,
                Err(ClientError::Timeout { .. }) => continue,
                Err(e) => return Err(e),
            };
            let Some(join) = self.join(coordinator, &topics, &owned).await? else {
                continue;
            };
            if let Some(joined) = self.sync(coordinator, join).await? {
                return Ok(Some(joined));
            }
        }
    }

    /// Java bounds a JoinGroup by the rebalance timeout plus 5 s
    /// (`AbstractCoordinator.sendJoinGroupRequest`, `JOIN_GROUP_TIMEOUT_LAPSE`); a SyncGroup
    /// goes out with the client's default `request.timeout.ms`
    /// ([`GroupClient::request_timeout`]; `sendSyncGroupRequest` is a plain `client.send`).
    fn rebalance_request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.max_poll_interval_ms + JOIN_GROUP_TIMEOUT_EXTRA_MS)
    }

    /// The protocols a JoinGroup offers: the assignor's name, or the configured strategies'
    /// in order; each with `owned` and the member's generation (Java's
    /// `ConsumerCoordinator.metadata`).
    fn protocols(&self, owned: &[TopicPartition]) -> GroupProtocols {
        let names = match &self.assignor {
            Some(a) => vec![a.name().to_string()],
            None => (self.config.partition_assignment_strategy.iter())
                .map(|s| s.name().to_string())
                .collect(),
        };
        let owned = OwnedPartitions {
            partitions: owned.to_vec(),
            generation: self.membership().generation,
        };
        GroupProtocols { names, owned }
    }

    /// One JoinGroup; `None` to try again.
    async fn join(
        &self,
        coordinator: BrokerId,
        topics: &[String],
        owned: &[TopicPartition],
    ) -> Result<Option<JoinResult>, ClientError> {
        if let Some(assignor) = &self.assignor {
            let member_id = self.membership().member_id.clone();
            assignor.on_join(&member_id);
        }
        // Before the request: its `membership()` guard lives to the end of the statement.
        let protocols = self.protocols(owned);
        let request = Request::JoinGroup {
            group_id: self.config.group_id.clone(),
            member_id: self.membership().member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
            session_timeout_ms: self.config.session_timeout_ms,
            rebalance_timeout_ms: self.config.max_poll_interval_ms,
            topics: topics.to_vec(),
            protocols,
        };
        let timeout = self.rebalance_request_timeout();
        match self.conn.request(coordinator, request, timeout).await {
            Ok(Response::MemberIdRequired { member_id }) => {
                self.membership().member_id = member_id;
                Ok(None)
            }
            Ok(Response::JoinGroup {
                generation,
                member_id,
                leader,
                protocol,
                members,
                owned,
                skip_assignment,
            }) => Ok(Some(JoinResult {
                generation,
                member_id,
                leader,
                protocol,
                members,
                owned,
                skip_assignment,
            })),
            Ok(Response::Error(e)) => self.on_rebalance_error(e).await.map(|()| None),
            Ok(other) => Err(unexpected("JoinGroup", &other)),
            // Java marks the coordinator unknown when a request to it times out.
            Err(_) => {
                self.membership().coordinator = None;
                Ok(None)
            }
        }
    }

    /// One SyncGroup (the leader's with its assignment); on success the member is stable in
    /// the generation and heartbeats start.
    async fn sync(
        &self,
        coordinator: BrokerId,
        join: JoinResult,
    ) -> Result<Option<Joined>, ClientError> {
        let (assignments, snapshot) = if join.leader != join.member_id {
            (BTreeMap::new(), None)
        } else if join.skip_assignment {
            // Java's `onLeaderElected` with `skipAssignment`: no assignment, but the
            // leader's `assignmentSnapshot` is taken, so it rejoins on a partition change.
            crate::mark!("client:consumer-static-leader-skips-assignment");
            let counts = self.partition_counts(&join.members).await;
            (BTreeMap::new(), Some(snapshot_of(&join.members, &counts)))
        } else {
            let (assignments, counts) = self.leader_assignment(&join).await;
            (assignments, Some(snapshot_of(&join.members, &counts)))
        };
        let request = Request::SyncGroup {
            group_id: self.config.group_id.clone(),
            generation: join.generation,
            member_id: join.member_id.clone(),
            assignments,
        };
        match self
            .conn
            // `request.timeout.ms`, not the rebalance timeout: a lost SyncGroup answer is
            // retried after 30 s, not after `max.poll.interval.ms` (5 min under Streams).
            .request(coordinator, request, self.request_timeout())
            .await
        {
            Ok(Response::SyncGroup { assignment }) => {
                let mut m = self.membership();
                m.member_id = join.member_id;
                m.generation = join.generation;
                m.stable = true;
                m.rejoin_needed = false;
                m.assignment_snapshot = snapshot;
                Ok(Some(Joined {
                    generation: join.generation,
                    assignment,
                }))
            }
            Ok(Response::Error(e)) => self.on_rebalance_error(e).await.map(|()| None),
            Ok(other) => Err(unexpected("SyncGroup", &other)),
            Err(_) => {
                self.membership().coordinator = None;
                Ok(None)
            }
        }
    }

    /// A JoinGroup or SyncGroup error: adjust membership and back off, or give up.
    async fn on_rebalance_error(&self, e: KafkaError) -> Result<(), ClientError> {
        match e {
            KafkaError::InvalidSessionTimeout | KafkaError::InconsistentGroupProtocol => Err(
                ClientError::Fatal(format!("the group coordinator refused the member: {e}")),
            ),
            _ => {
                self.membership().on_error(e);
                sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                Ok(())
            }
        }
    }

    /// The leader's assignment by the selected protocol ([`range_assign`],
    /// [`cooperative_sticky_assign`] or the [`GroupAssignor`]'s) over the members'
    /// subscriptions, with partition counts from fresh metadata (topics whose metadata
    /// cannot be had are skipped); and those counts, the leader's `assignmentSnapshot`.
    async fn leader_assignment(
        &self,
        join: &JoinResult,
    ) -> (BTreeMap<String, Vec<TopicPartition>>, BTreeMap<String, u32>) {
        let members = &join.members;
        let partition_counts = self.partition_counts(members).await;
        let assignments = match &self.assignor {
            Some(a) => {
                let owned = &join.owned;
                a.assign(
                    &self.conn,
                    join.generation,
                    members,
                    owned,
                    &partition_counts,
                )
                .await
            }
            None if join.protocol == AssignmentStrategy::CooperativeSticky.name() => {
                cooperative_sticky_assign(members, &join.owned, &partition_counts)
            }
            None => range_assign(members, &partition_counts),
        };
        (assignments, partition_counts)
    }

    /// The partition count of every topic `members` subscribe to, from fresh metadata
    /// (topics whose metadata cannot be had are left out).
    async fn partition_counts(
        &self,
        members: &BTreeMap<String, Vec<String>>,
    ) -> BTreeMap<String, u32> {
        let topics: BTreeSet<String> = members.values().flatten().cloned().collect();
        let topics: Vec<String> = topics.into_iter().collect();
        let _ = self
            .conn
            .refresh_metadata(&topics, self.request_timeout())
            .await;
        topics
            .iter()
            .filter_map(|t| self.conn.partition_count(t).map(|n| (t.clone(), n)))
            .collect()
    }

    /// Java's heartbeat thread: every `heartbeat.interval.ms` while stable, a Heartbeat
    /// (finding the coordinator first if it became unknown); a `max.poll.interval.ms`
    /// without `poll` makes the member leave the group.
    pub async fn heartbeat_loop(self) {
        let interval = Duration::from_millis(self.config.heartbeat_interval_ms.max(1));
        let max_poll_interval = Duration::from_millis(self.config.max_poll_interval_ms);
        loop {
            sleep(interval).await;
            if !self.membership().stable {
                continue;
            }
            // Java's heartbeat thread looks the coordinator up again when it is unknown;
            // without that a stable member would go silent and be expired.
            let deadline = Deadline::after(self.request_timeout());
            let Ok(coordinator) = self.ensure_coordinator(&deadline).await else {
                continue;
            };
            let (member_id, generation, poll_overdue) = {
                let m = self.membership();
                if !m.stable {
                    continue;
                }
                let overdue = m.last_poll.elapsed() > max_poll_interval;
                (m.member_id.clone(), m.generation, overdue)
            };
            let group_id = self.config.group_id.clone();
            if poll_overdue {
                crate::mark!("client:consumer-max-poll-interval-exceeded");
                self.membership().reset();
                self.leave_group(coordinator, member_id).await;
                continue;
            }
            let request = Request::Heartbeat {
                group_id,
                generation,
                member_id: member_id.clone(),
            };
            let result = self
                .conn
                .request(coordinator, request, self.request_timeout())
                .await;
            let mut m = self.membership();
            if m.member_id != member_id || m.generation != generation {
                continue;
            }
            match result {
                Ok(Response::Error(e)) => m.on_error(e),
                Ok(_) => {}
                Err(_) => m.coordinator = None,
            }
        }
    }
}

impl GroupClient {
    /// LeaveGroup for `member_id` (Java's `AbstractCoordinator.maybeLeaveGroup` on close
    /// or an expired poll timer), answer ignored. A static member (`group.instance.id`)
    /// sends none: only its session timeout removes it (KIP-345), so a restart within it
    /// keeps its partitions without a rebalance. Nothing for an empty `member_id`.
    pub async fn leave_group(&self, coordinator: BrokerId, member_id: String) {
        if member_id.is_empty() {
            return;
        }
        if self.config.group_instance_id.is_some() {
            crate::mark!("client:consumer-static-member-leaves-no-group");
            return;
        }
        let request = Request::LeaveGroup {
            group_id: self.config.group_id.clone(),
            member_id,
        };
        let _ = self
            .conn
            .request(coordinator, request, self.request_timeout())
            .await;
    }
}

/// The leader's `assignmentSnapshot`: every topic `members` subscribe to, with its count
/// from `counts` or `None` where the metadata had none (Java's `MetadataSnapshot` leaves
/// such a topic out, so its later appearance makes the snapshots differ).
fn snapshot_of(
    members: &BTreeMap<String, Vec<String>>,
    counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, Option<u32>> {
    let topics: BTreeSet<&String> = members.values().flatten().collect();
    (topics.into_iter())
        .map(|t| (t.clone(), counts.get(t).copied()))
        .collect()
}

fn is_coordinator_error(e: KafkaError) -> bool {
    matches!(
        e,
        KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress
    )
}

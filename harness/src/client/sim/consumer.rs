//! The simulated group consumer, shaped after Kafka's Java `KafkaConsumer` with the classic
//! group protocol and the eager range assignor.
//!
//! # What happens where
//! - [`Consumer::subscribe`] finds the group coordinator (FindCoordinator, retried on
//!   COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) and starts the heartbeat task.
//! - [`Consumer::poll`] does what Java's `poll` does, in order: (re)join the group if needed
//!   (eager: revoke everything first, then JoinGroup / SyncGroup; the leader computes the
//!   range assignment), position new partitions (OffsetFetch, then `auto.offset.reset` via
//!   ListOffsets where nothing is committed), hand out buffered records, else fetch from
//!   each partition's leader. At most `max.poll.records` per call; the rest stays buffered.
//! - A background task on the consumer's madsim node heartbeats every
//!   `heartbeat.interval.ms` while the member is in a stable group, like Java's heartbeat
//!   thread. A paused node pauses the task too, so a paused consumer stops heartbeating
//!   and is removed after `session.timeout.ms`, as in Kafka. If `poll` is not called within
//!   `max.poll.interval.ms` the task leaves the group (Java's poll timeout).
//! - [`Consumer::commit`] sends OffsetCommit with the current generation; ILLEGAL_GENERATION,
//!   UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS become [`ClientError::CommitFailed`] and the
//!   next `poll` rejoins.
//!
//! # read_committed
//! The model hides control records, so the client cannot see ABORT markers the way Java's
//! `CompletedFetch` does. Approximation: a transactional record is dropped when the fetch
//! response lists an aborted transaction of its producer id with `first_offset ≤ offset`.
//! This is exact unless one producer id has an aborted and a later committed transaction
//! in the same fetched range; then the committed records are dropped too (visible as lost
//! records in a history). The fix is for the fetch response to carry abort-marker offsets.
//!
//! # Not modelled
//! Auto-commit (ConsumerConfig has no `enable.auto.commit`), cooperative rebalancing,
//! static membership, fetch sessions, concurrent fetches to several leaders (they are sent
//! one after the other).

use super::conn::{needs_metadata_refresh, request_name, Connection};
use crate::client::{AutoOffsetReset, ClientError, ConsumedRecord, Consumer, ConsumerConfig};
use async_trait::async_trait;
use eosim_sim::kafka::{
    AbortedTxn, BrokerId, CoordinatorKind, FetchPartition, FetchedRecord, Isolation, KafkaError,
    Offset, OffsetSpec, Request, Response, TopicPartition,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

/// Java's `default.api.timeout.ms`: the bound on `commit`, in ms.
pub const DEFAULT_API_TIMEOUT_MS: u64 = 60_000;
/// Java's `retry.backoff.ms`: the pause before retrying a failed coordinator call, in ms.
const RETRY_BACKOFF_MS: u64 = 100;
/// Java waits this much longer than the rebalance timeout for JoinGroup, in ms.
const JOIN_GROUP_TIMEOUT_EXTRA_MS: u64 = 5_000;

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

/// A point in simulated time a call must finish by, with the bound it came from.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    bound_ms: u64,
}

impl Deadline {
    fn after(bound: Duration) -> Self {
        Self {
            at: Instant::now() + bound,
            bound_ms: bound.as_millis() as u64,
        }
    }

    fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    fn expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// `limit`, cut to what is left.
    fn cap(&self, limit: Duration) -> Duration {
        limit.min(self.remaining())
    }

    fn timeout(&self, what: impl Into<String>) -> ClientError {
        ClientError::Timeout {
            what: what.into(),
            timeout_ms: self.bound_ms,
        }
    }
}

/// Group membership, shared between the consumer and its heartbeat task.
#[derive(Debug)]
struct Membership {
    coordinator: Option<BrokerId>,
    /// Empty until the coordinator hands one out (MEMBER_ID_REQUIRED).
    member_id: String,
    /// -1 outside a generation.
    generation: i32,
    /// Joined and synced: heartbeats run and commits carry the generation.
    stable: bool,
    /// The group asked for a rejoin (REBALANCE_IN_PROGRESS, a fenced generation, a new
    /// subscription); the next `poll` rejoins.
    rejoin_needed: bool,
    /// When `poll` was last called (for `max.poll.interval.ms`).
    last_poll: Instant,
}

impl Membership {
    /// Java's reaction to a group error from the coordinator.
    fn on_error(&mut self, e: KafkaError) {
        match e {
            KafkaError::UnknownMemberId => {
                self.member_id.clear();
                self.generation = -1;
                self.stable = false;
                self.rejoin_needed = true;
            }
            KafkaError::IllegalGeneration => {
                self.generation = -1;
                self.stable = false;
                self.rejoin_needed = true;
            }
            KafkaError::RebalanceInProgress => self.rejoin_needed = true,
            KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress => self.coordinator = None,
            _ => {}
        }
    }

    /// Forgets the member id and generation (LeaveGroup, close, poll timeout).
    fn reset(&mut self) {
        self.member_id.clear();
        self.generation = -1;
        self.stable = false;
        self.rejoin_needed = true;
    }
}

type SharedMembership = Arc<Mutex<Membership>>;

/// Which rebalance request is in flight.
#[derive(Debug)]
enum Step {
    Join,
    Sync { generation: i32, member_id: String },
}

/// A JoinGroup or SyncGroup sent from its own task, so that it survives the poll that
/// sent it.
struct InFlight {
    step: Step,
    coordinator: BrokerId,
    task: JoinHandle<Result<Response, ClientError>>,
}

fn lock(membership: &SharedMembership) -> MutexGuard<'_, Membership> {
    membership.lock().expect("membership lock")
}

/// A group consumer on the simulated cluster. See the module docs.
pub struct SimConsumer {
    conn: Connection,
    config: ConsumerConfig,
    /// Subscribed topics, sorted; empty before `subscribe`.
    topics: Vec<String>,
    membership: SharedMembership,
    heartbeat_task: Option<JoinHandle<()>>,
    /// A JoinGroup or SyncGroup still waiting for its response.
    in_flight: Option<InFlight>,
    assignment: Vec<TopicPartition>,
    /// Next offset to fetch of each positioned partition.
    positions: BTreeMap<TopicPartition, Offset>,
    /// Assigned partitions whose committed offset is still to be fetched.
    needs_committed: BTreeSet<TopicPartition>,
    /// Partitions to position by `auto.offset.reset`.
    needs_reset: BTreeSet<TopicPartition>,
    buffer: VecDeque<ConsumedRecord>,
}

impl SimConsumer {
    /// A consumer of group `config.group_id` over `conn`. Nothing is sent before
    /// [`Consumer::subscribe`].
    pub fn new(conn: Connection, config: ConsumerConfig) -> Self {
        let membership = Membership {
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            stable: false,
            rejoin_needed: false,
            last_poll: Instant::now(),
        };
        Self {
            conn,
            config,
            topics: Vec::new(),
            membership: Arc::new(Mutex::new(membership)),
            heartbeat_task: None,
            in_flight: None,
            assignment: Vec::new(),
            positions: BTreeMap::new(),
            needs_committed: BTreeSet::new(),
            needs_reset: BTreeSet::new(),
            buffer: VecDeque::new(),
        }
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.request_timeout_ms)
    }

    /// The group coordinator, found with FindCoordinator if unknown.
    async fn ensure_coordinator(&self, deadline: &Deadline) -> Result<BrokerId, ClientError> {
        loop {
            if let Some(broker) = lock(&self.membership).coordinator {
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
            match self
                .conn
                .request_any(request, deadline.cap(self.request_timeout()))
                .await
            {
                Ok(Response::FindCoordinator { broker }) => {
                    lock(&self.membership).coordinator = Some(broker);
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
    async fn coordinator_request(
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
                    lock(&self.membership).on_error(e);
                    backoff(deadline).await;
                }
                Ok(response) => return Ok(response),
                Err(_) => lock(&self.membership).coordinator = None,
            }
        }
    }

    /// Eager: forget every partition, its position and buffered records (Java's
    /// `onJoinPrepare` revoking all partitions).
    fn revoke_all(&mut self) {
        self.assignment.clear();
        self.positions.clear();
        self.needs_committed.clear();
        self.needs_reset.clear();
        self.buffer.clear();
    }

    /// Rejoins the group if it asked for it or we are not in a stable generation. A
    /// JoinGroup or SyncGroup still waiting when `deadline` passes stays in flight and a
    /// later poll picks up its response, as Java's consumer keeps its request futures.
    async fn ensure_active_group(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        let joined = {
            let m = lock(&self.membership);
            m.stable && !m.rejoin_needed
        };
        if joined {
            return Ok(());
        }
        self.revoke_all();
        lock(&self.membership).stable = false;
        loop {
            if deadline.expired() {
                return Err(deadline.timeout("JoinGroup"));
            }
            let mut in_flight = match self.in_flight.take() {
                Some(in_flight) => in_flight,
                None => self.send_join(deadline).await?,
            };
            let Ok(joined) = tokio::time::timeout(deadline.remaining(), &mut in_flight.task).await
            else {
                self.in_flight = Some(in_flight);
                return Err(deadline.timeout("JoinGroup"));
            };
            let result = joined.unwrap_or_else(|e| Err(ClientError::Fatal(e.to_string())));
            if self.on_rebalance_response(in_flight, result).await? {
                return Ok(());
            }
        }
    }

    /// Starts a JoinGroup with the member id we have (empty the first time).
    async fn send_join(&self, deadline: &Deadline) -> Result<InFlight, ClientError> {
        let coordinator = self.ensure_coordinator(deadline).await?;
        let request = Request::JoinGroup {
            group_id: self.config.group_id.clone(),
            member_id: lock(&self.membership).member_id.clone(),
            session_timeout_ms: self.config.session_timeout_ms,
            rebalance_timeout_ms: self.config.max_poll_interval_ms,
            topics: self.topics.clone(),
        };
        Ok(self.send_rebalance_request(coordinator, Step::Join, request))
    }

    /// Sends `request` from its own task, bounded like Java's JoinGroup / SyncGroup
    /// (rebalance timeout plus 5 s).
    fn send_rebalance_request(
        &self,
        coordinator: BrokerId,
        step: Step,
        request: Request,
    ) -> InFlight {
        let conn = self.conn.clone();
        let limit_ms = self.config.max_poll_interval_ms + JOIN_GROUP_TIMEOUT_EXTRA_MS;
        let timeout = Duration::from_millis(limit_ms);
        let task = tokio::spawn(async move { conn.request(coordinator, request, timeout).await });
        InFlight {
            step,
            coordinator,
            task,
        }
    }

    /// Handles a JoinGroup or SyncGroup response. `Ok(true)` once the member is stable
    /// with its assignment; `Ok(false)` to go on (a SyncGroup may now be in flight).
    async fn on_rebalance_response(
        &mut self,
        in_flight: InFlight,
        result: Result<Response, ClientError>,
    ) -> Result<bool, ClientError> {
        let coordinator = in_flight.coordinator;
        let response = match result {
            Ok(response) => response,
            // Java marks the coordinator unknown when a request to it times out.
            Err(_) => {
                lock(&self.membership).coordinator = None;
                return Ok(false);
            }
        };
        match (in_flight.step, response) {
            (Step::Join, Response::MemberIdRequired { member_id }) => {
                lock(&self.membership).member_id = member_id;
                Ok(false)
            }
            (
                Step::Join,
                Response::JoinGroup {
                    generation,
                    member_id,
                    leader,
                    members,
                },
            ) => {
                let assignments = if leader == member_id {
                    self.leader_assignment(&members).await
                } else {
                    BTreeMap::new()
                };
                let request = Request::SyncGroup {
                    group_id: self.config.group_id.clone(),
                    generation,
                    member_id: member_id.clone(),
                    assignments,
                };
                let step = Step::Sync {
                    generation,
                    member_id,
                };
                self.in_flight = Some(self.send_rebalance_request(coordinator, step, request));
                Ok(false)
            }
            (
                Step::Sync {
                    generation,
                    member_id,
                },
                Response::SyncGroup { assignment },
            ) => {
                self.install_assignment(generation, member_id, assignment);
                Ok(true)
            }
            (_, Response::Error(e)) => self.on_rebalance_error(e).await.map(|()| false),
            (_, other) => Err(unexpected("JoinGroup/SyncGroup", &other)),
        }
    }

    /// The member is stable in `generation`; its new partitions await their positions.
    fn install_assignment(
        &mut self,
        generation: i32,
        member_id: String,
        mut assignment: Vec<TopicPartition>,
    ) {
        {
            let mut m = lock(&self.membership);
            m.member_id = member_id;
            m.generation = generation;
            m.stable = true;
            m.rejoin_needed = false;
        }
        assignment.sort();
        self.needs_committed = assignment.iter().cloned().collect();
        self.assignment = assignment;
    }

    /// A JoinGroup or SyncGroup error: adjust membership and back off, or give up.
    async fn on_rebalance_error(&self, e: KafkaError) -> Result<(), ClientError> {
        match e {
            KafkaError::InvalidSessionTimeout | KafkaError::InconsistentGroupProtocol => Err(
                ClientError::Fatal(format!("the group coordinator refused the member: {e}")),
            ),
            _ => {
                lock(&self.membership).on_error(e);
                sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
                Ok(())
            }
        }
    }

    /// The leader's range assignment over the members' subscriptions, with partition
    /// counts from fresh metadata (topics whose metadata cannot be had are skipped). The
    /// refresh has its own request timeout: a poll's deadline must not starve it.
    async fn leader_assignment(
        &self,
        members: &BTreeMap<String, Vec<String>>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let topics: BTreeSet<String> = members.values().flatten().cloned().collect();
        let topics: Vec<String> = topics.into_iter().collect();
        let _ = self
            .conn
            .refresh_metadata(&topics, self.request_timeout())
            .await;
        let partition_counts = topics
            .iter()
            .filter_map(|t| self.conn.partition_count(t).map(|n| (t.clone(), n)))
            .collect();
        range_assign(members, &partition_counts)
    }

    /// Positions newly assigned partitions: committed offsets first, then
    /// `auto.offset.reset`. Failures leave partitions unpositioned for the next poll.
    async fn update_positions(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        if !self.needs_committed.is_empty() {
            let partitions: Vec<TopicPartition> = self.needs_committed.iter().cloned().collect();
            let request = Request::OffsetFetch {
                group_id: self.config.group_id.clone(),
                partitions,
            };
            if let Ok(Response::OffsetFetch { offsets }) =
                self.coordinator_request(request, deadline).await
            {
                for (tp, offset) in offsets {
                    if !self.needs_committed.remove(&tp) {
                        continue;
                    }
                    if offset >= 0 {
                        self.positions.insert(tp, offset);
                    } else {
                        self.needs_reset.insert(tp);
                    }
                }
            }
        }
        self.reset_positions(deadline).await
    }

    /// `auto.offset.reset` for every partition in `needs_reset`, via ListOffsets to its
    /// leader.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] under `auto.offset.reset=none` (Java's
    /// `NoOffsetForPartitionException` / `OffsetOutOfRangeException`).
    async fn reset_positions(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        let Some(tp) = self.needs_reset.first().cloned() else {
            return Ok(());
        };
        let spec = match self.config.auto_offset_reset {
            AutoOffsetReset::Earliest => OffsetSpec::Earliest,
            AutoOffsetReset::Latest => OffsetSpec::Latest(self.config.isolation_level),
            AutoOffsetReset::None => {
                let why = format!("no valid offset for {tp} and auto.offset.reset=none");
                return Err(ClientError::Fatal(why));
            }
        };
        for tp in self.needs_reset.clone() {
            let Some(leader) = self.leader_of(&tp, deadline).await else {
                continue;
            };
            let request = Request::ListOffsets {
                tp: tp.clone(),
                spec,
            };
            let timeout = deadline.cap(self.request_timeout());
            match self.conn.request(leader, request, timeout).await {
                Ok(Response::ListOffsets { offset }) => {
                    self.needs_reset.remove(&tp);
                    self.positions.insert(tp, offset);
                }
                Ok(Response::Error(e)) if needs_metadata_refresh(e) => {
                    self.conn.invalidate(&tp.topic)
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The leader of `tp`, refreshing metadata once if it is not cached.
    async fn leader_of(&self, tp: &TopicPartition, deadline: &Deadline) -> Option<BrokerId> {
        if let Some(leader) = self.conn.leader(tp) {
            return Some(leader);
        }
        let timeout = deadline.cap(self.request_timeout());
        let _ = self.conn.refresh_metadata(&self.topics, timeout).await;
        self.conn.leader(tp)
    }

    /// One round of fetches: positioned partitions grouped by leader, one Fetch each.
    async fn fetch_once(&mut self, deadline: &Deadline) {
        let mut by_leader: BTreeMap<BrokerId, Vec<(TopicPartition, Offset)>> = BTreeMap::new();
        let mut leaderless = false;
        for (tp, &offset) in &self.positions {
            match self.conn.leader(tp) {
                Some(leader) => by_leader
                    .entry(leader)
                    .or_default()
                    .push((tp.clone(), offset)),
                None => leaderless = true,
            }
        }
        if leaderless {
            let timeout = deadline.cap(self.request_timeout());
            let _ = self.conn.refresh_metadata(&self.topics, timeout).await;
        }
        // A fetch may outlive a short poll, as Java's in-flight fetches do, up to
        // request.timeout.ms.
        let wait = Duration::from_millis(self.config.fetch_max_wait_ms);
        let timeout = deadline.remaining().max(wait).min(self.request_timeout());
        for (leader, partitions) in by_leader {
            let request = Request::Fetch {
                isolation: self.config.isolation_level,
                partitions: partitions.clone(),
                max_bytes: self.config.fetch_max_bytes,
                partition_max_bytes: self.config.max_partition_fetch_bytes,
                max_wait_ms: self
                    .config
                    .fetch_max_wait_ms
                    .min(deadline.remaining().as_millis() as u64),
            };
            match self.conn.request(leader, request, timeout).await {
                Ok(Response::Fetch {
                    partitions: results,
                }) => {
                    let requested: BTreeMap<_, _> = partitions.into_iter().collect();
                    for (tp, result) in results {
                        if let Some(&offset) = requested.get(&tp) {
                            self.on_fetched(tp, offset, result);
                        }
                    }
                }
                Ok(Response::Error(e)) if needs_metadata_refresh(e) => partitions
                    .iter()
                    .for_each(|(tp, _)| self.conn.invalidate(&tp.topic)),
                _ => {}
            }
        }
    }

    /// One partition's fetch result, if the partition is still at the fetched offset.
    fn on_fetched(&mut self, tp: TopicPartition, fetch_offset: Offset, result: FetchPartition) {
        if self.positions.get(&tp) != Some(&fetch_offset) {
            return;
        }
        match result.error {
            Some(KafkaError::OffsetOutOfRange) => {
                self.positions.remove(&tp);
                self.needs_reset.insert(tp);
            }
            Some(e) if needs_metadata_refresh(e) => self.conn.invalidate(&tp.topic),
            Some(_) => {}
            None => {
                let mut next = result.next_fetch_offset.max(fetch_offset);
                let records = match self.config.isolation_level {
                    Isolation::ReadCommitted => drop_aborted(result.records, &result.aborted),
                    Isolation::ReadUncommitted => result.records,
                };
                for fetched in records.into_iter().filter(|r| r.offset >= fetch_offset) {
                    next = next.max(fetched.offset + 1);
                    self.buffer.push_back(consumed(&tp, fetched));
                }
                self.positions.insert(tp, next);
            }
        }
    }

    /// Up to `max.poll.records` buffered records.
    fn drain(&mut self) -> Vec<ConsumedRecord> {
        let n = self.buffer.len().min(self.config.max_poll_records.max(1));
        self.buffer.drain(..n).collect()
    }

    fn abort_tasks(&mut self) {
        if let Some(task) = self.heartbeat_task.take() {
            task.abort();
        }
        if let Some(in_flight) = self.in_flight.take() {
            in_flight.task.abort();
        }
    }

    fn start_heartbeats(&mut self) {
        if self.heartbeat_task.is_none() {
            let task = heartbeat_loop(
                self.conn.clone(),
                self.config.clone(),
                self.membership.clone(),
            );
            self.heartbeat_task = Some(tokio::spawn(task));
        }
    }
}

#[async_trait]
impl Consumer for SimConsumer {
    async fn subscribe(&mut self, topics: &[String]) -> Result<(), ClientError> {
        let mut topics = topics.to_vec();
        topics.sort();
        topics.dedup();
        self.topics = topics;
        {
            let mut m = lock(&self.membership);
            m.rejoin_needed = true;
            m.last_poll = Instant::now();
        }
        self.start_heartbeats();
        self.ensure_coordinator(&Deadline::after(self.request_timeout()))
            .await
            .map(|_| ())
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumedRecord>, ClientError> {
        let deadline = Deadline::after(timeout);
        lock(&self.membership).last_poll = Instant::now();
        loop {
            if !self.topics.is_empty() {
                match self.ensure_active_group(&deadline).await {
                    Ok(()) => self.update_positions(&deadline).await?,
                    // Java's poll returns empty when the group is not ready in time.
                    Err(ClientError::Timeout { .. }) => return Ok(Vec::new()),
                    Err(e) => return Err(e),
                }
            }
            if !self.buffer.is_empty() {
                return Ok(self.drain());
            }
            if deadline.expired() {
                return Ok(Vec::new());
            }
            self.fetch_once(&deadline).await;
            if self.buffer.is_empty() {
                backoff(&deadline).await;
            }
        }
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, Offset)]) -> Result<(), ClientError> {
        if offsets.is_empty() {
            // Java's commitSync sends nothing for an empty map.
            return Ok(());
        }
        let (member_id, generation) = {
            let m = lock(&self.membership);
            if !m.stable {
                // Java: "the consumer is not part of an active group".
                let e = if m.member_id.is_empty() {
                    KafkaError::UnknownMemberId
                } else {
                    KafkaError::RebalanceInProgress
                };
                return Err(ClientError::CommitFailed(e));
            }
            (m.member_id.clone(), m.generation)
        };
        let request = Request::OffsetCommit {
            group_id: self.config.group_id.clone(),
            generation,
            member_id,
            offsets: offsets.to_vec(),
        };
        let deadline = Deadline::after(Duration::from_millis(DEFAULT_API_TIMEOUT_MS));
        match self.coordinator_request(request, &deadline).await? {
            Response::OffsetCommit => Ok(()),
            Response::Error(
                e @ (KafkaError::IllegalGeneration
                | KafkaError::UnknownMemberId
                | KafkaError::RebalanceInProgress),
            ) => {
                let mut m = lock(&self.membership);
                m.on_error(e);
                m.stable = false;
                m.rejoin_needed = true;
                Err(ClientError::CommitFailed(e))
            }
            Response::Error(e) => Err(ClientError::Kafka(e)),
            other => Err(unexpected("OffsetCommit", &other)),
        }
    }

    fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.clone()
    }

    async fn close(&mut self) {
        self.abort_tasks();
        self.revoke_all();
        let (coordinator, member_id) = {
            let mut m = lock(&self.membership);
            let left = (m.coordinator, m.member_id.clone());
            m.reset();
            m.rejoin_needed = false;
            left
        };
        if let (Some(coordinator), false) = (coordinator, member_id.is_empty()) {
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
}

impl Drop for SimConsumer {
    fn drop(&mut self) {
        self.abort_tasks();
    }
}

/// Java's heartbeat thread: every `heartbeat.interval.ms` while stable, a Heartbeat; a
/// `max.poll.interval.ms` without `poll` makes the member leave the group.
async fn heartbeat_loop(conn: Connection, config: ConsumerConfig, membership: SharedMembership) {
    let interval = Duration::from_millis(config.heartbeat_interval_ms.max(1));
    let request_timeout = Duration::from_millis(config.request_timeout_ms);
    let max_poll_interval = Duration::from_millis(config.max_poll_interval_ms);
    loop {
        sleep(interval).await;
        let (coordinator, member_id, generation, poll_overdue) = {
            let m = lock(&membership);
            let Some(coordinator) = m.coordinator.filter(|_| m.stable) else {
                continue;
            };
            let overdue = m.last_poll.elapsed() > max_poll_interval;
            (coordinator, m.member_id.clone(), m.generation, overdue)
        };
        let group_id = config.group_id.clone();
        if poll_overdue {
            lock(&membership).reset();
            let request = Request::LeaveGroup {
                group_id,
                member_id,
            };
            let _ = conn.request(coordinator, request, request_timeout).await;
            continue;
        }
        let request = Request::Heartbeat {
            group_id,
            generation,
            member_id: member_id.clone(),
        };
        let result = conn.request(coordinator, request, request_timeout).await;
        let mut m = lock(&membership);
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

/// Drops the transactional records of aborted transactions: a record whose producer id
/// has an aborted entry with `first_offset ≤ offset` (see the module docs for where this
/// approximates Java's `CompletedFetch`).
fn drop_aborted(records: Vec<FetchedRecord>, aborted: &[AbortedTxn]) -> Vec<FetchedRecord> {
    records
        .into_iter()
        .filter(|r| {
            !(r.transactional
                && aborted
                    .iter()
                    .any(|a| a.producer_id == r.producer_id && a.first_offset <= r.offset))
        })
        .collect()
}

fn consumed(tp: &TopicPartition, fetched: FetchedRecord) -> ConsumedRecord {
    ConsumedRecord {
        tp: tp.clone(),
        offset: fetched.offset,
        key: fetched.record.key,
        value: fetched.record.value,
        headers: fetched.record.headers,
    }
}

fn is_coordinator_error(e: KafkaError) -> bool {
    matches!(
        e,
        KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress
    )
}

async fn backoff(deadline: &Deadline) {
    sleep(deadline.cap(Duration::from_millis(RETRY_BACKOFF_MS))).await;
}

fn unexpected(api: &str, response: &Response) -> ClientError {
    ClientError::Fatal(format!("unexpected {api} response {response:?}"))
}

#[cfg(test)]
mod tests;

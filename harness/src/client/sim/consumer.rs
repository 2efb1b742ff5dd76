//! The simulated group consumer, shaped after Kafka's Java `KafkaConsumer` with the classic
//! group protocol: the eager range assignor, or the cooperative sticky one (KIP-429).
//!
//! # What happens where
//! - [`Consumer::subscribe`] finds the group coordinator (FindCoordinator, retried on
//!   COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR) and starts the heartbeat task.
//! - [`Consumer::poll`] does what Java's `poll` does, in order: (re)join the group if needed
//!   (eager: revoke everything first; see "Cooperative" below), position new partitions
//!   (OffsetFetch, then `auto.offset.reset` via ListOffsets where nothing is committed),
//!   hand out buffered records, else fetch from each partition's leader. At most
//!   `max.poll.records` per call; the rest stays buffered.
//! - Fetches are long polls, as Java's `Fetcher` sends them (`AbstractFetch.sendFetches`):
//!   one Fetch in flight per leader at most (`nodesWithPendingFetchRequests`), with
//!   `fetch.max.wait.ms` and `fetch.min.bytes`, sent concurrently to every leader with
//!   fetchable partitions and kept in flight across polls; a poll returns as soon as one
//!   brings records, or at its own timeout, and takes the answers that arrived meanwhile.
//!   An answer is used only for a partition still at the fetched offset (Java's
//!   `FetchCollector` drops a fetch whose position moved). After an empty long poll the
//!   next Fetch goes out at once; after an error, after `retry.backoff.ms`.
//! - The join loop (JoinGroup, SyncGroup, the leader's [`range_assign`] or
//!   [`cooperative_sticky_assign`], whichever protocol the coordinator selected from the
//!   members' `partition.assignment.strategy` lists) runs as a task of its own, so a
//!   rebalance progresses between polls and a poll's timeout does not abandon a JoinGroup
//!   (Java's heartbeat thread drives the network client the same way). A poll waits for it
//!   at most until its own timeout and then returns empty (eager).
//! - Each poll first fetches the subscribed topics' metadata again once it is older than
//!   `metadata.max.age.ms`; the group's leader rejoins when a topic's partition count
//!   changed since its last assignment (`SimConsumer::maybe_refresh_metadata`), and the
//!   added partitions are positioned by `auto.offset.reset` like any without a commit.
//! - A heartbeat task sends Heartbeat every `heartbeat.interval.ms` while the member is in
//!   a stable group, like Java's heartbeat thread. Both tasks run on the consumer's madsim
//!   node: a paused node stops heartbeating and is removed after `session.timeout.ms`, as
//!   in Kafka. If `poll` is not called within `max.poll.interval.ms` the heartbeat task
//!   leaves the group (Java's poll timeout).
//! - With [`Consumer::listen_for_revocations`] (Kafka Connect's `WorkerSinkTask` passes a
//!   `ConsumerRebalanceListener`), a poll that has to rejoin while it owns partitions first
//!   returns empty and leaves a [`Revocation`] (Java calls `onPartitionsRevoked`, or
//!   `onPartitionsLost` when the generation was already reset, from
//!   `ConsumerCoordinator.onJoinPrepare`, before JoinGroup): the partitions stay assigned
//!   and commits carry the old generation, which the coordinator accepts while the group is
//!   preparing the rebalance. The next poll revokes and rejoins.
//! - [`Consumer::pause`] stops fetching a partition and holds back its buffered records; a
//!   rebalance forgets the pause (Java's `SubscriptionState`).
//! - [`Consumer::commit`] sends OffsetCommit with the current generation; ILLEGAL_GENERATION,
//!   UNKNOWN_MEMBER_ID and REBALANCE_IN_PROGRESS become [`ClientError::CommitFailed`] and the
//!   next `poll` rejoins. It retries coordinator errors and timeouts for
//!   `default.api.timeout.ms`, then reports [`ClientError::Timeout`].
//!
//! # Cooperative
//! When `partition.assignment.strategy` lists only `CooperativeStickyAssignor`
//! ([`ConsumerConfig::cooperative`]), or the member's own [`GroupAssignor`] supports the
//! COOPERATIVE protocol (Kafka Streams' does by default), the consumer follows
//! `ConsumerCoordinator`'s COOPERATIVE branches (Kafka 3.x
//! `clients/.../consumer/internals/ConsumerCoordinator.java`):
//! - `onJoinPrepare` revokes nothing (the subscription does not change here) unless the
//!   generation was lost, which loses everything as under eager. The JoinGroup carries the
//!   owned partitions and the generation (`ConsumerProtocolSubscription` v1/v2).
//! - While the join loop runs, polls go on fetching and returning the owned partitions
//!   (Java's `poll` does not wait for the join); commits are refused meanwhile, as Java's
//!   `RebalanceInProgressException` is, since the member is not stable.
//! - `onJoinComplete`: owned partitions missing from the new assignment are revoked (with a
//!   listener, handed out as a [`Revocation`] of just those, still assigned and committable
//!   in the new generation until the next poll), the others keep their positions, buffered
//!   records and pauses; if any were revoked the member rejoins (`requestRejoin`), and that
//!   second rebalance gives the partitions to their new owners.
//!
//! # Consumer protocol (KIP-848)
//! With `group.protocol = consumer` ([`ConsumerConfig::group_protocol`]) the join loop, the
//! assignors and the classic heartbeat task are not used: a `ConsumerGroupHeartbeat` task
//! brings the assignment the coordinator computed and each poll reconciles it, revoking
//! before assigning (module `kip848`, after Java's `AsyncKafkaConsumer` and
//! `ConsumerMembershipManager`); commits carry the member epoch.
//!
//! # read_committed
//! The model hides control records, so the client cannot see ABORT markers the way Java's
//! `CompletedFetch` does; instead each aborted-transaction entry of the fetch response
//! carries the offset of its ABORT marker (`last_offset`). A transactional record is
//! dropped when an entry of its producer id has `first_offset ≤ offset < last_offset`:
//! exact, since one producer's transactions never overlap on a partition. Committed
//! offsets are fetched with `require_stable` (OffsetFetchStable, KIP-447), so a partition
//! whose offsets a transaction has pending is positioned only once that transaction ended.
//!
//! # Not modelled
//! Auto-commit inside the client (ConsumerConfig has no `enable.auto.commit`: the
//! kafka-consume workload commits from its poll loop as Java's
//! `maybeAutoCommitOffsetsAsync` does, `workload::kafka_consume`), static membership, fetch
//! sessions (KIP-227: every Fetch names its partitions) and the leader's
//! `validateCooperativeAssignment`.

use super::conn::{needs_metadata_refresh, Connection};
use crate::client::{
    AutoOffsetReset, ClientError, ConsumedRecord, Consumer, ConsumerConfig, ConsumerGroupMetadata,
    GroupProtocol, Revocation,
};
use async_trait::async_trait;
use eosim_sim::kafka::{
    BrokerId, FetchPartition, FetchedRecord, Isolation, KafkaError, Offset, OffsetSpec, Request,
    Response, TopicPartition,
};
use membership::{GroupClient, Joined};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep, Instant};

mod kip848;
mod membership;
mod sticky;
#[cfg(test)]
mod tests;
mod truncation;

pub use membership::{range_assign, AssignmentFuture, GroupAssignor};
pub use sticky::cooperative_sticky_assign;

/// Java's `default.api.timeout.ms`: the bound on `commit`, in ms.
pub const DEFAULT_API_TIMEOUT_MS: u64 = 60_000;
/// Java's `retry.backoff.ms`: the pause before retrying a failed coordinator call, in ms.
const RETRY_BACKOFF_MS: u64 = 100;
/// A Fetch's RPC timeout beyond twice its `max_wait_ms`, in ms. Java waits
/// `request.timeout.ms` (30 s) for a Fetch; the model gives up after about one long poll
/// and fetches again. Chosen when eosim's network lost what a cut carried (until
/// 2026-12-07); now a Fetch held by a cut still reaches the broker after the heal, an extra
/// read whose answer nobody waits for. Waiting 30 s as Java does changes every scenario
/// that pauses or cuts a broker, so it is left for a change that re-checks them.
const FETCH_TIMEOUT_EXTRA_MS: u64 = RETRY_BACKOFF_MS;
/// Java waits this much longer than the rebalance timeout for JoinGroup, in ms.
const JOIN_GROUP_TIMEOUT_EXTRA_MS: u64 = 5_000;

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

/// A Fetch's answer, sent by its task to the consumer.
struct FetchDone {
    leader: BrokerId,
    partitions: Vec<(TopicPartition, Offset)>,
    result: Result<Response, ClientError>,
}

/// A group consumer on the simulated cluster. See the module docs.
pub struct SimConsumer {
    group: GroupClient,
    /// Subscribed topics, sorted; empty before `subscribe`.
    topics: Vec<String>,
    /// When the leader may next ask again for a topic its assignment found no metadata for
    /// (`retry.backoff.ms` after the last ask; see `maybe_refresh_metadata`).
    metadata_retry_at: Option<Instant>,
    heartbeat_task: Option<JoinHandle<()>>,
    /// The join loop of a rebalance in progress.
    rebalance_task: Option<JoinHandle<Result<Option<Joined>, ClientError>>>,
    assignment: Vec<TopicPartition>,
    /// Next offset to fetch of each positioned partition.
    positions: BTreeMap<TopicPartition, Offset>,
    /// Assigned partitions whose committed offset is still to be fetched.
    needs_committed: BTreeSet<TopicPartition>,
    /// Partitions to position by `auto.offset.reset`.
    needs_reset: BTreeSet<TopicPartition>,
    buffer: VecDeque<ConsumedRecord>,
    /// The positions' leader epochs, for log-truncation detection (KIP-320).
    epochs: truncation::PositionEpochs,
    /// Paused partitions: not fetched, their buffered records held back.
    paused: BTreeSet<TopicPartition>,
    /// Whether the application listens for revocations.
    listening: bool,
    /// A revocation was handed out for the rejoin about to happen: the next poll rejoins.
    revocation_handed_out: bool,
    /// The revocation handed out and not taken yet.
    revocation: Option<Revocation>,
    /// Cooperative: a new assignment held back while its [`Revocation`] is handed out; the
    /// next poll applies it.
    pending_assignment: Option<Vec<TopicPartition>>,
    /// Cooperative: the last assignment revoked partitions, so the next rejoin is the
    /// second phase that hands them over.
    second_phase: bool,
    /// Leaders with a Fetch in flight, and its task.
    in_flight: BTreeMap<BrokerId, JoinHandle<()>>,
    fetch_tx: mpsc::UnboundedSender<FetchDone>,
    fetch_rx: mpsc::UnboundedReceiver<FetchDone>,
}

impl SimConsumer {
    /// A consumer of group `config.group_id` over `conn`. Nothing is sent before
    /// [`Consumer::subscribe`].
    pub fn new(conn: Connection, config: ConsumerConfig) -> Self {
        let (fetch_tx, fetch_rx) = mpsc::unbounded_channel();
        Self {
            group: GroupClient::new(conn, config),
            topics: Vec::new(),
            metadata_retry_at: None,
            heartbeat_task: None,
            rebalance_task: None,
            assignment: Vec::new(),
            positions: BTreeMap::new(),
            needs_committed: BTreeSet::new(),
            needs_reset: BTreeSet::new(),
            buffer: VecDeque::new(),
            epochs: truncation::PositionEpochs::default(),
            paused: BTreeSet::new(),
            listening: false,
            revocation_handed_out: false,
            revocation: None,
            pending_assignment: None,
            second_phase: false,
            in_flight: BTreeMap::new(),
            fetch_tx,
            fetch_rx,
        }
    }

    /// As [`SimConsumer::new`], with `assignor` in place of the range assignor when this
    /// member leads a rebalance, and told of every JoinGroup.
    pub fn with_assignor(
        conn: Connection,
        config: ConsumerConfig,
        assignor: std::sync::Arc<dyn GroupAssignor>,
    ) -> Self {
        let mut consumer = Self::new(conn, config);
        consumer.group.assignor = Some(assignor);
        consumer
    }

    /// Eager: forget every partition, its position and buffered records (Java's
    /// `onJoinPrepare` revoking all partitions).
    fn revoke_all(&mut self) {
        self.assignment.clear();
        self.positions.clear();
        self.needs_committed.clear();
        self.needs_reset.clear();
        self.buffer.clear();
        self.epochs.clear();
        self.paused.clear();
    }

    /// Whether this member follows the cooperative protocol: by its assignor's supported
    /// protocols ([`GroupAssignor::cooperative`], Streams') or else by
    /// `partition.assignment.strategy`.
    fn cooperative(&self) -> bool {
        match &self.group.assignor {
            Some(assignor) => assignor.cooperative(),
            None => self.group.config.cooperative(),
        }
    }

    /// Whether the member speaks KIP-848's consumer protocol (`group.protocol = consumer`).
    fn kip848(&self) -> bool {
        self.group.config.group_protocol == GroupProtocol::Consumer
    }

    /// Whether the generation or member id was reset: owned partitions are lost.
    fn generation_lost(&self) -> bool {
        self.group.membership().generation_lost()
    }

    /// Java's periodic metadata update and the leader's check in
    /// `ConsumerCoordinator.rejoinNeededOrPending`: once the subscribed topics' cached
    /// metadata is older than `metadata.max.age.ms` it is fetched again, and the member
    /// that made the group's last assignment rejoins when its `assignmentSnapshot` differs
    /// from the metadata now (`MetadataSnapshot.matches`): a topic's partition count
    /// changed, so partitions added to it (KIP-195) get owners, or a topic its assignment
    /// found no metadata for has some now, so its partitions get owners at all. A leader
    /// whose snapshot misses a topic asks for it every `retry.backoff.ms`, as Java's
    /// `Metadata` retries a topic that came back with an error. Only the leader watches;
    /// until it looks, nobody reads the added partitions. Other topics not cached yet are
    /// left to the fetch path, which asks for them itself.
    async fn maybe_refresh_metadata(&mut self, deadline: &Deadline) {
        let conn = &self.group.conn;
        let max_age = Duration::from_millis(self.group.config.metadata_max_age_ms);
        let aged =
            |t: &String| conn.partition_count(t).is_some() && conn.metadata_expired(t, max_age);
        // The topics the leader's snapshot names beyond this member's subscription (other
        // members'), and whether it lacks the metadata of one; nothing for a follower.
        let (others, missing): (Vec<String>, bool) =
            match &self.group.membership().assignment_snapshot {
                Some(snapshot) => (
                    (snapshot.keys())
                        .filter(|t| !self.topics.contains(t))
                        .cloned()
                        .collect(),
                    snapshot.values().any(Option::is_none),
                ),
                None => (Vec::new(), false),
            };
        let watched = || -> Vec<String> { self.topics.iter().chain(&others).cloned().collect() };
        if self.topics.iter().chain(&others).any(aged) {
            let timeout = self.group.request_timeout().min(deadline.remaining());
            let _ = conn.refresh_metadata(&watched(), timeout).await;
        } else if !missing {
            return;
        } else if self.metadata_retry_at.is_none_or(|at| Instant::now() >= at) {
            // Java's `Metadata` asks again in the background (`NetworkClient`), not within
            // this poll's time: the answer lands in the shared cache for a later poll.
            self.metadata_retry_at = Some(Instant::now() + Duration::from_millis(RETRY_BACKOFF_MS));
            let (conn, topics, timeout) = (conn.clone(), watched(), self.group.request_timeout());
            tokio::spawn(async move {
                let _ = conn.refresh_metadata(&topics, timeout).await;
            });
        }
        let mut m = self.group.membership();
        let changed = m.assignment_snapshot.as_ref().is_some_and(|snapshot| {
            (snapshot.iter()).any(|(t, &n)| conn.partition_count(t).is_some_and(|c| Some(c) != n))
        });
        if changed {
            crate::mark!("client:consumer-leader-rejoins-on-partition-count-change");
            m.assignment_snapshot = None;
            m.rejoin_needed = true;
        }
    }

    /// Whether the group wants this member to (re)join and no join loop runs yet.
    fn rejoin_due(&self) -> bool {
        let m = self.group.membership();
        self.rebalance_task.is_none() && (!m.stable || m.rejoin_needed)
    }

    /// Java's `onJoinPrepare` with a rebalance listener: before the first rejoin that would
    /// revoke partitions, leave a [`Revocation`] of the whole assignment (eager) and report
    /// that this poll must return now. Lost when the generation or member id was reset;
    /// under the cooperative protocol only then, as nothing else is revoked before
    /// JoinGroup.
    fn hand_out_revocation(&mut self) -> bool {
        if !self.listening
            || self.revocation_handed_out
            || self.assignment.is_empty()
            || !self.rejoin_due()
        {
            return false;
        }
        let lost = self.generation_lost();
        if self.cooperative() && !lost {
            return false;
        }
        crate::mark!(if lost {
            "client:consumer-partitions-lost-handed-out"
        } else {
            "client:consumer-revocation-handed-out"
        });
        self.revocation = Some(Revocation {
            partitions: self.assignment.clone(),
            lost,
        });
        self.revocation_handed_out = true;
        true
    }

    /// Rejoins the group if it asked for it or we are not in a stable generation: starts
    /// the join loop if none runs and waits for it until `deadline`. Eager: everything is
    /// revoked first. Cooperative (KIP-429): the owned partitions are kept and go on being
    /// fetched while the join loop runs (Java's `poll` does not wait for the join), and the
    /// new assignment revokes only what moved ([`SimConsumer::on_joined`]).
    ///
    /// # Errors
    /// [`ClientError::Timeout`] while the rebalance goes on; the join loop's fatal errors.
    async fn ensure_active_group(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        if let Some(assignment) = self.pending_assignment.take() {
            // The revocation was handed out by the previous poll.
            self.apply_assignment(assignment);
        }
        if self.rebalance_task.is_none() {
            let joined = {
                let m = self.group.membership();
                m.stable && !m.rejoin_needed
            };
            if joined {
                return Ok(());
            }
            self.start_rebalance();
        }
        let keeps_fetching = self.cooperative() && !self.assignment.is_empty();
        let task = self.rebalance_task.as_mut().expect("started above");
        if keeps_fetching && !task.is_finished() {
            return Ok(());
        }
        let Ok(finished) = tokio::time::timeout(deadline.remaining(), task).await else {
            return Err(deadline.timeout("rebalance"));
        };
        self.rebalance_task = None;
        let joined = finished.map_err(|e| ClientError::Fatal(format!("join loop: {e}")))??;
        let Some(joined) = joined else {
            // The generation was lost mid-rebalance: the next poll gives the partitions up
            // as lost (`hand_out_revocation`) or revokes them before it rejoins
            // (`start_rebalance`), as Java's `onJoinPrepare` does.
            return Err(deadline.timeout("rebalance"));
        };
        let mut assignment = joined.assignment;
        assignment.sort();
        tracing::debug!(generation = joined.generation, ?assignment, "assigned");
        self.on_joined(assignment);
        Ok(())
    }

    /// Java's `onJoinPrepare` and `initiateJoinGroup`: revokes everything (eager, or when
    /// the generation was lost) or nothing (cooperative), then starts the join loop with
    /// what is still owned.
    fn start_rebalance(&mut self) {
        if self.cooperative() && !self.generation_lost() {
            if self.second_phase {
                crate::mark!("client:cooperative-second-rejoin");
            }
        } else {
            if !self.assignment.is_empty() {
                crate::mark!("client:consumer-partitions-revoked");
            }
            self.revoke_all();
        }
        self.second_phase = false;
        self.revocation_handed_out = false;
        self.revocation = None;
        self.group.membership().stable = false;
        let task = (self.group.clone()).rebalance(self.topics.clone(), self.assignment.clone());
        self.rebalance_task = Some(tokio::spawn(task));
    }

    /// Java's `onJoinComplete`. Eager: the assignment replaces the empty one. Cooperative:
    /// owned partitions no longer assigned are revoked (with a listener, handed out as a
    /// [`Revocation`] first, the new assignment applied by the next poll) and, if any were,
    /// the member rejoins (`requestRejoin`) so the next generation can hand them over.
    fn on_joined(&mut self, assignment: Vec<TopicPartition>) {
        let revoked: Vec<TopicPartition> = (self.assignment.iter())
            .filter(|tp| !assignment.contains(tp))
            .cloned()
            .collect();
        if self.cooperative() && !revoked.is_empty() {
            crate::mark!(if revoked.len() < self.assignment.len() {
                "client:cooperative-revoke-partial"
            } else {
                "client:consumer-partitions-revoked"
            });
            self.group.membership().rejoin_needed = true;
            self.second_phase = true;
            if self.listening {
                crate::mark!("client:consumer-revocation-handed-out");
                self.revocation = Some(Revocation {
                    partitions: revoked,
                    lost: false,
                });
                self.revocation_handed_out = true;
                self.pending_assignment = Some(assignment);
                return;
            }
        }
        self.apply_assignment(assignment);
    }

    /// Takes `assignment` (sorted): partitions it drops lose their position, buffered
    /// records and pause; those kept keep theirs (Java's `assignFromSubscribed`); new ones
    /// are positioned from their committed offsets.
    fn apply_assignment(&mut self, assignment: Vec<TopicPartition>) {
        for tp in self.assignment.iter().filter(|tp| !assignment.contains(tp)) {
            self.positions.remove(tp);
            self.needs_committed.remove(tp);
            self.needs_reset.remove(tp);
            self.epochs.forget(tp);
            self.paused.remove(tp);
        }
        self.buffer.retain(|r| assignment.contains(&r.tp));
        let added = assignment.iter().filter(|tp| !self.assignment.contains(tp));
        self.needs_committed.extend(added.cloned());
        self.assignment = assignment;
    }

    /// Positions newly assigned partitions: committed offsets first, then
    /// `auto.offset.reset`. Failures leave partitions unpositioned for the next poll.
    async fn update_positions(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        if !self.needs_committed.is_empty() {
            let partitions: Vec<TopicPartition> = self.needs_committed.iter().cloned().collect();
            let group_id = self.group.config.group_id.clone();
            let stable = self.group.config.isolation_level == Isolation::ReadCommitted;
            let request = offset_fetch(group_id, partitions, stable);
            if let Ok(Response::OffsetFetch { offsets }) =
                self.group.coordinator_request(request, deadline).await
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
        let spec = match self.group.config.auto_offset_reset {
            AutoOffsetReset::Earliest => {
                crate::mark!("client:consumer-offset-reset-earliest");
                OffsetSpec::Earliest
            }
            AutoOffsetReset::Latest => {
                crate::mark!("client:consumer-offset-reset-latest");
                OffsetSpec::Latest(self.group.config.isolation_level)
            }
            AutoOffsetReset::None => {
                crate::mark!("client:consumer-no-offset-for-partition");
                let why = format!(
                    "NoOffsetForPartitionException: undefined offset with no reset policy \
                     for partition {tp} (auto.offset.reset=none)"
                );
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
            let timeout = deadline.cap(self.group.request_timeout());
            match self.group.conn.request(leader, request, timeout).await {
                Ok(Response::ListOffsets { offset }) => {
                    self.needs_reset.remove(&tp);
                    self.positions.insert(tp, offset);
                }
                Ok(Response::Error(e)) if needs_metadata_refresh(e) => {
                    self.group.conn.invalidate(&tp.topic)
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The leader of `tp`, refreshing metadata once if it is not cached.
    async fn leader_of(&self, tp: &TopicPartition, deadline: &Deadline) -> Option<BrokerId> {
        if let Some(leader) = self.group.conn.leader(tp) {
            return Some(leader);
        }
        self.refresh_metadata(deadline).await;
        self.group.conn.leader(tp)
    }

    /// Refreshes the subscribed (or manually assigned) topics' metadata; a failure leaves
    /// the cache as it was.
    async fn refresh_metadata(&self, deadline: &Deadline) {
        let timeout = deadline.cap(self.group.request_timeout());
        let mut topics = self.topics.clone();
        if topics.is_empty() {
            topics = self
                .assignment
                .iter()
                .map(|tp| tp.topic.to_string())
                .collect();
            topics.dedup();
        }
        let _ = self.group.conn.refresh_metadata(&topics, timeout).await;
    }

    /// Manual assignment (Java's `KafkaConsumer.assign`, librdkafka's `assign`): no group
    /// membership; each partition starts at its offset in `partitions`, or, for `None`,
    /// where `auto.offset.reset` puts it at the next poll. Replaces any earlier assignment.
    pub fn assign(&mut self, partitions: &[(TopicPartition, Option<Offset>)]) {
        self.revoke_all();
        for (tp, offset) in partitions {
            self.assignment.push(tp.clone());
            match offset {
                Some(o) => {
                    self.positions.insert(tp.clone(), *o);
                }
                None => {
                    self.needs_reset.insert(tp.clone());
                }
            }
        }
    }

    /// The offset of the next record a poll returns for `tp` (Java's `position`): the first
    /// buffered record's, else the next offset to fetch, which is past control records and
    /// aborted records already skipped (offsets are not dense). `None` while unpositioned.
    pub fn position(&self, tp: &TopicPartition) -> Option<Offset> {
        let buffered = self.buffer.iter().find(|r| &r.tp == tp).map(|r| r.offset);
        buffered.or_else(|| self.positions.get(tp).copied())
    }

    fn fetch_request(&self, partitions: Vec<(TopicPartition, Offset)>) -> Request {
        let config = &self.group.config;
        Request::Fetch {
            isolation: config.isolation_level,
            current_leader_epochs: self.epochs.current_leader_epochs(&partitions),
            partitions,
            max_bytes: config.fetch_max_bytes,
            partition_max_bytes: config.max_partition_fetch_bytes,
            min_bytes: config.fetch_min_bytes,
            max_wait_ms: config.fetch_max_wait_ms,
        }
    }

    /// Sends a long-poll Fetch to every leader of fetchable (positioned, not paused)
    /// partitions that has none in flight, after validating positions against a changed
    /// leader (KIP-320). The answers arrive on `fetch_rx`.
    ///
    /// # Errors
    /// As [`SimConsumer::validate_positions`].
    async fn send_fetches(&mut self, deadline: &Deadline) -> Result<(), ClientError> {
        self.validate_positions(deadline).await?;
        let mut by_leader: BTreeMap<BrokerId, Vec<(TopicPartition, Offset)>> = BTreeMap::new();
        let mut leaderless = false;
        for (tp, &offset) in self
            .positions
            .iter()
            .filter(|(tp, _)| !self.paused.contains(tp))
        {
            match self.group.conn.leader(tp) {
                Some(leader) if self.in_flight.contains_key(&leader) => {}
                Some(leader) => by_leader
                    .entry(leader)
                    .or_default()
                    .push((tp.clone(), offset)),
                None => leaderless = true,
            }
        }
        if leaderless {
            self.refresh_metadata(deadline).await;
        }
        let config = &self.group.config;
        let timeout = Duration::from_millis(config.fetch_max_wait_ms * 2 + FETCH_TIMEOUT_EXTRA_MS)
            .min(self.group.request_timeout());
        for (leader, partitions) in by_leader {
            let request = self.fetch_request(partitions.clone());
            let (conn, tx) = (self.group.conn.clone(), self.fetch_tx.clone());
            // Boxed: the request's future is large, and the spawn would otherwise copy it
            // into the task (a tenth of the catalogue's samples were such copies).
            let task = tokio::spawn(Box::pin(async move {
                let result = conn.request(leader, request, timeout).await;
                // The consumer may be gone; its answer is then of no use.
                let _ = tx.send(FetchDone {
                    leader,
                    partitions,
                    result,
                });
            }));
            self.in_flight.insert(leader, task);
        }
        Ok(())
    }

    /// Takes one Fetch's answer; returns whether it failed (the next Fetch then waits
    /// `retry.backoff.ms`).
    fn on_fetch_done(&mut self, done: FetchDone) -> bool {
        self.in_flight.remove(&done.leader);
        match done.result {
            Ok(Response::Fetch {
                partitions: results,
            }) => {
                let requested: BTreeMap<_, _> = done.partitions.into_iter().collect();
                let mut failed = false;
                for (tp, result) in results {
                    failed |= result.error.is_some();
                    if let Some(&offset) = requested.get(&tp) {
                        self.on_fetched(tp, offset, result);
                    }
                }
                failed
            }
            Ok(Response::Error(e)) if needs_metadata_refresh(e) => {
                done.partitions
                    .iter()
                    .for_each(|(tp, _)| self.group.conn.invalidate(&tp.topic));
                true
            }
            _ => true,
        }
    }

    /// One partition's fetch result, if the partition is still at the fetched offset.
    fn on_fetched(&mut self, tp: TopicPartition, fetch_offset: Offset, result: FetchPartition) {
        if self.positions.get(&tp) != Some(&fetch_offset) {
            return;
        }
        match result.error {
            Some(KafkaError::OffsetOutOfRange) => {
                // Below the log start (deleted records) or past the log end (truncated):
                // reset by `auto.offset.reset` (`Fetcher.handleOffsetOutOfRange`).
                crate::mark!("client:consumer-fetch-offset-out-of-range");
                self.positions.remove(&tp);
                self.needs_reset.insert(tp);
            }
            Some(e) if needs_metadata_refresh(e) => self.group.conn.invalidate(&tp.topic),
            Some(_) => {}
            None => {
                let mut next = result.next_fetch_offset.max(fetch_offset);
                let last_epoch = result.records.last().map(|r| r.leader_epoch);
                let records = match self.group.config.isolation_level {
                    Isolation::ReadCommitted => {
                        let fetched = result.records.len();
                        let kept = drop_aborted(result.records, &result.aborted);
                        if kept.len() < fetched {
                            // Aborted data was in the log and is skipped (Java's
                            // `CompletedFetch` with the fetch's aborted transactions).
                            crate::mark!("client:consumer-aborted-records-filtered");
                        }
                        kept
                    }
                    Isolation::ReadUncommitted => result.records,
                };
                for fetched in records.into_iter().filter(|r| r.offset >= fetch_offset) {
                    next = next.max(fetched.offset + 1);
                    self.buffer.push_back(consumed(&tp, fetched));
                }
                self.epochs.consumed(&tp, next, last_epoch);
                self.positions.insert(tp, next);
            }
        }
    }

    /// Whether a buffered record of a partition not paused is there to return.
    fn has_deliverable(&self) -> bool {
        self.buffer.iter().any(|r| !self.paused.contains(&r.tp))
    }

    /// Up to `max.poll.records` buffered records of partitions not paused, in order; the
    /// paused partitions' records stay buffered.
    fn drain(&mut self) -> Vec<ConsumedRecord> {
        let max = self.group.config.max_poll_records.max(1);
        if self.paused.is_empty() {
            // The first `max` in order; the rest stay where they are (no copy of the
            // buffer per poll: a fetch can buffer many times `max.poll.records`).
            let n = max.min(self.buffer.len());
            return self.buffer.drain(..n).collect();
        }
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(self.buffer.len());
        while let Some(r) = self.buffer.pop_front() {
            if out.len() < max && !self.paused.contains(&r.tp) {
                out.push(r);
            } else {
                kept.push_back(r);
            }
        }
        self.buffer = kept;
        out
    }

    fn abort_tasks(&mut self) {
        for (_, task) in std::mem::take(&mut self.in_flight) {
            task.abort();
        }
        if let Some(task) = self.heartbeat_task.take() {
            task.abort();
        }
        if let Some(task) = self.rebalance_task.take() {
            task.abort();
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
        if let Some(task) = self.rebalance_task.take() {
            // The running join loop carries the old subscription.
            task.abort();
        }
        {
            let mut m = self.group.membership();
            m.rejoin_needed = true;
            m.last_poll = Instant::now();
        }
        if self.kip848() {
            // The heartbeat carries the subscription: a new one restarts the task.
            if let Some(task) = self.heartbeat_task.take() {
                task.abort();
            }
            let task = self
                .group
                .clone()
                .kip848_heartbeat_loop(self.topics.clone());
            self.heartbeat_task = Some(tokio::spawn(task));
        } else if self.heartbeat_task.is_none() {
            let task = self.group.clone().heartbeat_loop();
            self.heartbeat_task = Some(tokio::spawn(task));
        }
        let deadline = Deadline::after(self.group.request_timeout());
        self.group.ensure_coordinator(&deadline).await.map(|_| ())
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumedRecord>, ClientError> {
        let deadline = Deadline::after(timeout);
        self.group.membership().last_poll = Instant::now();
        let mut failed = false;
        loop {
            if !self.topics.is_empty() && self.kip848() {
                if self.reconcile()? {
                    return Ok(Vec::new());
                }
                self.update_positions(&deadline).await?;
            } else if !self.topics.is_empty() {
                self.maybe_refresh_metadata(&deadline).await;
                if self.hand_out_revocation() {
                    return Ok(Vec::new());
                }
                match self.ensure_active_group(&deadline).await {
                    // A cooperative revocation was handed out.
                    Ok(()) if self.pending_assignment.is_some() => return Ok(Vec::new()),
                    Ok(()) => self.update_positions(&deadline).await?,
                    // Java's poll returns empty when the group is not ready in time.
                    Err(ClientError::Timeout { .. }) => return Ok(Vec::new()),
                    Err(e) => return Err(e),
                }
            } else {
                // Manual assignment: partitions without a start offset.
                self.reset_positions(&deadline).await?;
            }
            while let Ok(done) = self.fetch_rx.try_recv() {
                failed |= self.on_fetch_done(done);
            }
            if self.has_deliverable() {
                if self.rebalance_task.is_some() {
                    // Cooperative: owned partitions are processed while the group rebalances.
                    crate::mark!("client:cooperative-poll-during-rebalance");
                }
                return Ok(self.drain());
            }
            if deadline.expired() {
                return Ok(Vec::new());
            }
            if std::mem::take(&mut failed) {
                backoff(&deadline).await;
                continue;
            }
            self.send_fetches(&deadline).await?;
            if self.in_flight.is_empty() {
                backoff(&deadline).await;
                continue;
            }
            if let Ok(Some(done)) =
                tokio::time::timeout(deadline.remaining(), self.fetch_rx.recv()).await
            {
                failed = self.on_fetch_done(done);
            }
        }
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, Offset)]) -> Result<(), ClientError> {
        if offsets.is_empty() {
            // Java's commitSync sends nothing for an empty map.
            return Ok(());
        }
        let (member_id, generation) = {
            let m = self.group.membership();
            if !m.stable {
                // Java: "the consumer is not part of an active group".
                let e = if m.member_id.is_empty() {
                    KafkaError::UnknownMemberId
                } else {
                    KafkaError::RebalanceInProgress
                };
                crate::mark!("client:consumer-commit-refused-not-in-group");
                return Err(ClientError::CommitFailed(e));
            }
            (m.member_id.clone(), m.generation)
        };
        let request = Request::OffsetCommit {
            group_id: self.group.config.group_id.clone(),
            generation,
            member_id,
            offsets: offsets.to_vec(),
        };
        let deadline = Deadline::after(Duration::from_millis(DEFAULT_API_TIMEOUT_MS));
        match self.group.coordinator_request(request, &deadline).await? {
            Response::OffsetCommit => Ok(()),
            Response::Error(
                e @ (KafkaError::StaleMemberEpoch
                | KafkaError::FencedMemberEpoch
                | KafkaError::UnknownMemberId),
            ) if self.kip848() => {
                crate::mark!(match e {
                    KafkaError::StaleMemberEpoch => "client:kip848-commit-stale-member-epoch",
                    _ => "client:consumer-commit-fenced",
                });
                self.group.membership().on_kip848_error(e);
                Err(ClientError::CommitFailed(e))
            }
            Response::Error(
                e @ (KafkaError::IllegalGeneration
                | KafkaError::UnknownMemberId
                | KafkaError::RebalanceInProgress),
            ) => {
                crate::mark!("client:consumer-commit-fenced");
                let mut m = self.group.membership();
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

    fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        let m = self.group.membership();
        (m.stable && !m.member_id.is_empty()).then(|| ConsumerGroupMetadata {
            group_id: self.group.config.group_id.clone(),
            generation: m.generation,
            member_id: m.member_id.clone(),
        })
    }

    fn listen_for_revocations(&mut self) -> bool {
        self.listening = true;
        true
    }

    fn take_revocation(&mut self) -> Option<Revocation> {
        self.revocation.take()
    }

    /// Java's `pause`: an unassigned partition is refused (`IllegalStateException`).
    fn pause(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        if let Some(tp) = partitions.iter().find(|tp| !self.assignment.contains(tp)) {
            return Err(ClientError::Fatal(format!("pause: {tp} is not assigned")));
        }
        self.paused.extend(partitions.iter().cloned());
        Ok(())
    }

    fn resume(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        if let Some(tp) = partitions.iter().find(|tp| !self.assignment.contains(tp)) {
            return Err(ClientError::Fatal(format!("resume: {tp} is not assigned")));
        }
        for tp in partitions {
            self.paused.remove(tp);
        }
        Ok(())
    }

    fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<(), ClientError> {
        if !self.assignment.contains(tp) {
            return Err(ClientError::Fatal(format!("seek: {tp} is not assigned")));
        }
        self.needs_committed.remove(tp);
        self.needs_reset.remove(tp);
        self.buffer.retain(|r| &r.tp != tp);
        self.positions.insert(tp.clone(), offset);
        Ok(())
    }

    async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
        let group_id = self.group.config.group_id.clone();
        let request = offset_fetch(group_id, partitions.to_vec(), true);
        let deadline = Deadline::after(Duration::from_millis(DEFAULT_API_TIMEOUT_MS));
        loop {
            match self
                .group
                .coordinator_request(request.clone(), &deadline)
                .await?
            {
                Response::OffsetFetch { offsets } => return Ok(offsets),
                // A transaction's offsets are pending: wait until it ends (Java retries).
                Response::Error(KafkaError::UnstableOffsetCommit) if !deadline.expired() => {
                    backoff(&deadline).await
                }
                Response::Error(e) => return Err(ClientError::Kafka(e)),
                other => return Err(unexpected("OffsetFetch", &other)),
            }
        }
    }

    async fn close(&mut self) {
        self.abort_tasks();
        self.revoke_all();
        if self.kip848() {
            self.group.kip848_leave().await;
        }
        let (coordinator, member_id) = {
            let mut m = self.group.membership();
            let left = (m.coordinator, m.member_id.clone());
            m.reset();
            m.rejoin_needed = false;
            left
        };
        match coordinator {
            Some(coordinator) if !self.kip848() => {
                self.group.leave_group(coordinator, member_id).await
            }
            _ => {}
        }
    }
}

impl Drop for SimConsumer {
    fn drop(&mut self) {
        self.abort_tasks();
    }
}

pub use eosim_sim::kafka::drop_aborted;

/// OffsetFetch for `partitions`; with `require_stable` (read_committed) the KIP-447
/// variant, which answers UNSTABLE_OFFSET_COMMIT while a transaction has offsets pending.
fn offset_fetch(group_id: String, partitions: Vec<TopicPartition>, stable: bool) -> Request {
    if stable {
        Request::OffsetFetchStable {
            group_id,
            partitions,
        }
    } else {
        Request::OffsetFetch {
            group_id,
            partitions,
        }
    }
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

async fn backoff(deadline: &Deadline) {
    sleep(deadline.cap(Duration::from_millis(RETRY_BACKOFF_MS))).await;
}

fn unexpected(api: &str, response: &Response) -> ClientError {
    ClientError::Fatal(format!("unexpected {api} response {response:?}"))
}

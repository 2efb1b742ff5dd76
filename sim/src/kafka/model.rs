//! The Kafka cluster as one pure state machine.
//!
//! One [`Cluster`] holds every broker's replicas of every partition, the controller's view
//! (leaders, ISR, leader epochs, fenced brokers) and the group coordinators' state. Broker
//! nodes call [`Cluster::handle`] with their own id; what a broker does unasked (follower
//! fetches, ISR shrink and expand, the controller's elections, session expiry) happens in
//! [`Cluster::tick`], which the service calls every few simulated milliseconds.
//!
//! Requests that Kafka parks (acks=all produce waiting for the high watermark, Fetch
//! waiting for `fetch.min.bytes`, JoinGroup waiting for the rebalance, SyncGroup waiting
//! for the leader) return [`Reply::Parked`];
//! the service re-asks with [`Cluster::poll_parked`] after every tick until it gets a
//! response or its own timeout fires.
//!
//! # Sections
//! - Replication (models-reference A.1–A.6): `partition.rs` holds one partition's
//!   controller state and replicas; `log.rs` one replica's log. A broker acts on what it
//!   believes: views are refreshed only over a working controller link, so a partitioned
//!   ex-leader keeps accepting acks=1 writes (A.2).
//! - Controller (KRaft): brokers that run and reach the controller heartbeat at every tick;
//!   one silent for more than `broker.session.timeout.ms` is fenced: it leaves every ISR
//!   (unless it is the last member) and its leaderships move by election. A restarted broker
//!   re-registers and is handled as an unclean shutdown (fenced, then unfenced): it comes
//!   back as a follower outside the ISR, truncates, catches up and rejoins.
//! - Requests: Produce, Fetch, ListOffsets, Metadata, CreateTopics, FindCoordinator here;
//!   the six group requests are checked for the coordinator and handed to the
//!   [`GroupCoordinator`].
//! - Idempotence and transactions (models-reference B, C): every replica's log carries its
//!   [`crate::kafka::producer_state::ProducerState`], applied on every append (leader and
//!   follower) and rebuilt on truncation, so it travels with replication. Produce validates
//!   against it (B.3) and, for a batch opening a transaction, against the coordinator as
//!   [`TxnProtocol`] says (C.9). InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and
//!   EndTxn go to the [`crate::kafka::txn::TransactionCoordinator`] on the leader of the
//!   id's `__transaction_state` partition; TxnOffsetCommit and `OffsetFetchStable` to the
//!   group coordinator (KIP-447). Markers are written in [`Cluster::tick`]
//!   (`model/transactions.rs`). Read_committed fetches stop at the LSO and list the aborted
//!   transactions of the range ([`AbortedTxn`]).
//!
//! # Example
//! ```
//! use eosim_sim::kafka::model::{Cluster, Reply};
//! use eosim_sim::kafka::*;
//! let mut cluster = Cluster::new(3, ClusterConfig::default());
//! let create = Request::CreateTopic {
//!     name: "t".into(), partitions: 1, replication_factor: 3, config: TopicConfig::default(),
//! };
//! assert_eq!(cluster.handle(0, 1, create), Reply::Done(Response::CreateTopic));
//! assert_eq!(cluster.leader(&TopicPartition::new("t", 0)), Some(1));
//! ```

use super::group::GroupCoordinator;
use super::log::{batch_size_bytes, PartitionLog, OS_WRITEBACK_INTERVAL_MS};
use super::murmur2::coordinator_partition_for;
use super::partition::{Partition, Reach};
use super::producer_state::Validation;
use super::txn::TransactionCoordinator;
use super::types::*;
use std::collections::BTreeMap;
use std::sync::Arc;

mod coordinator_log;
mod transactions;

/// Name of the internal topic holding group metadata and committed offsets.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Name of the internal topic holding transaction coordinator state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// How long after its deadline an unpolled parked produce is kept.
const PARKED_PRODUCE_RETENTION_MS: u64 = 60_000;
/// `transaction.state.log.min.isr` default (2), capped at the topic's replication factor.
const TRANSACTION_STATE_MIN_ISR: u32 = 2;

/// What the environment tells the model at a tick: which brokers run and which links work.
/// The nemesis owns these facts; the model only reads them.
pub trait Env {
    /// Whether broker `b` runs (not killed, not paused).
    fn broker_up(&self, b: BrokerId) -> bool;
    /// Whether `from` can reach `to` (a follower fetching from its leader, say).
    fn link_up(&self, from: BrokerId, to: BrokerId) -> bool;
    /// Whether broker `b` can reach the KRaft controller quorum (for its heartbeats).
    fn controller_link_up(&self, b: BrokerId) -> bool;
    /// Whether every broker runs and every link among brokers and between a broker and the
    /// controller works: then every question above answers yes, and the model skips
    /// asking them one by one (it samples the environment on every tick). `false` when
    /// unknown: the model then asks each question.
    fn all_up(&self) -> bool {
        false
    }
}

/// How a broker dies (models-reference A.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashMode {
    /// The process dies; the page cache survives: its log is intact up to its LEO.
    ProcessKill,
    /// The machine dies (power loss): each log keeps a prefix ending anywhere between what
    /// is on disk and its LEO (the page cache is gone; the OS may have written back part of
    /// the rest). Kafka does not fsync per write (`log.flush.interval.messages` and
    /// `log.flush.scheduler.interval.ms` default to `Long.MAX_VALUE`), so what is on disk is
    /// what the OS wrote back ([`crate::kafka::log::OS_DIRTY_EXPIRE_MS`]): the cut may lie
    /// below the high watermark, and a correlated crash of every replica can lose acks=all
    /// writes. See [`Cluster::crash_broker_with`].
    MachineCrash,
}

/// A parked request, to be completed by [`Cluster::poll_parked`]. Each owner numbers its
/// own tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParkToken {
    /// An acks=all produce waiting for the high watermark (numbered by the cluster).
    Produce(u64),
    /// A Fetch waiting for `fetch.min.bytes` or `fetch.max.wait.ms` (`DelayedFetch`,
    /// numbered by the cluster with the produces).
    Fetch(u64),
    /// A JoinGroup or SyncGroup waiting for the rebalance (numbered by the group coordinator).
    Group(u64),
}

/// The answer to a request: now, or once the cluster has moved on.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The response.
    Done(Response),
    /// Ask again with [`Cluster::poll_parked`] after the next tick.
    Parked(ParkToken),
}

/// The controller's record of one broker.
#[derive(Debug, Clone)]
struct BrokerState {
    /// Process runs (false between `crash_broker` and `restart_broker`).
    alive: bool,
    /// Fenced by the controller: leads nothing, may not join an ISR.
    fenced: bool,
    last_heartbeat_ms: TimeMs,
    /// Restarted and not yet re-registered with the controller.
    needs_registration: bool,
    /// The metadata this broker answers Metadata and FindCoordinator from while it cannot
    /// reach the controller: the image as of its last tick with a working controller link
    /// (KRaft brokers serve their own replay of the metadata log, `KRaftMetadataCache`, and
    /// replay it again from disk after a restart). `None` while it follows the controller.
    stale_metadata: Option<MetadataImage>,
}

/// One broker's image of the cluster metadata: every topic (internal flag, partitions) and
/// the unfenced brokers.
#[derive(Debug, Clone)]
struct MetadataImage {
    topics: BTreeMap<String, (bool, Vec<PartitionMetadata>)>,
    brokers: Vec<BrokerId>,
}

/// One topic: configuration and partitions.
#[derive(Debug, Clone)]
struct Topic {
    config: TopicConfig,
    internal: bool,
    partitions: Vec<Partition>,
}

/// An acks=all produce waiting for the HW.
#[derive(Debug, Clone)]
struct PendingProduce {
    tp: TopicPartition,
    broker: BrokerId,
    leader_epoch: i32,
    base_offset: Offset,
    last_offset: Offset,
    deadline_ms: TimeMs,
}

/// A Fetch parked until `min_bytes` are readable below the HW (read_uncommitted) or LSO
/// (read_committed), a partition fails, or `deadline_ms` (`DelayedFetch`).
#[derive(Debug, Clone)]
struct PendingFetch {
    broker: BrokerId,
    isolation: Isolation,
    partitions: Vec<(TopicPartition, Offset)>,
    current_leader_epochs: BTreeMap<TopicPartition, i32>,
    /// `(max_bytes, partition_max_bytes)`.
    limits: (u32, u32),
    min_bytes: u32,
    deadline_ms: TimeMs,
}

/// The whole Kafka cluster. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    broker_count: u32,
    groups: GroupCoordinator,
    txns: TransactionCoordinator,
    next_producer_expiry_scan_ms: TimeMs,
    brokers: Vec<BrokerState>,
    topics: BTreeMap<String, Topic>,
    pending: BTreeMap<u64, PendingProduce>,
    pending_fetches: BTreeMap<u64, PendingFetch>,
    next_token: u64,
    hold_hw_under_min_isr: bool,
    /// The environment as sampled at the previous tick, and a counter of its changes.
    env_sample: Option<EnvSample>,
    env_epoch: u64,
    fast_paths: bool,
    /// Next wake-up of the OS writeback, and of the `kafka-log-flusher` task.
    next_writeback_ms: TimeMs,
    next_log_flush_ms: TimeMs,
    /// Requests answered by closing the connection (KoP with its transaction coordinator
    /// off), per API, with the broker's reason: a stall they cause can name it.
    closed_connections: BTreeMap<&'static str, (u64, &'static str)>,
    /// The coordinators' records in `__transaction_state` / `__consumer_offsets`.
    coordinator_log: coordinator_log::CoordinatorLog,
}

/// Per-broker up / controller / fenced flags and the link matrix, as sampled for a tick.
type EnvSample = (Vec<bool>, Vec<bool>, Vec<bool>, Vec<bool>);

fn error(e: KafkaError) -> Reply {
    Reply::Done(Response::Error(e))
}

/// Kafka's deterministic round-robin placement (`AdminUtils.assignReplicasToBrokersRackUnaware`
/// with start index and replica shift fixed at 0): partition `p`'s first replica is broker
/// `p mod n`, the others follow with a shift that grows every `n` partitions.
pub fn assign_replicas(
    brokers: &[BrokerId],
    partitions: u32,
    replication_factor: u32,
) -> Vec<Vec<BrokerId>> {
    let n = brokers.len();
    assert!(
        replication_factor as usize <= n,
        "replication factor <= broker count"
    );
    let mut shift = 0usize;
    (0..partitions as usize)
        .map(|p| {
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = p % n;
            let mut replicas = vec![brokers[first]];
            for j in 0..(replication_factor as usize).saturating_sub(1) {
                let s = 1 + (shift + j) % (n - 1);
                replicas.push(brokers[(first + s) % n]);
            }
            replicas
        })
        .collect()
}

impl Cluster {
    /// A cluster of `broker_count` brokers with ids `1..=broker_count`, no user topics, and
    /// the internal topics `__consumer_offsets` (`offsets_topic_num_partitions` partitions)
    /// and `__transaction_state` (`transaction_state_log_num_partitions`), both with
    /// replication factor `min(offsets_topic_replication_factor, broker_count)`.
    pub fn new(broker_count: u32, config: ClusterConfig) -> Self {
        assert!(broker_count >= 1, "a cluster has at least one broker");
        let groups = GroupCoordinator::new(config.clone());
        let txns = TransactionCoordinator::new(config.clone());
        let next_producer_expiry_scan_ms = config.producer_id_expiration_check_interval_ms;
        let brokers = (0..broker_count)
            .map(|_| BrokerState {
                alive: true,
                fenced: false,
                last_heartbeat_ms: 0,
                needs_registration: false,
                stale_metadata: None,
            })
            .collect();
        let mut cluster = Self {
            config,
            broker_count,
            groups,
            txns,
            next_producer_expiry_scan_ms,
            brokers,
            topics: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_fetches: BTreeMap::new(),
            next_token: 0,
            hold_hw_under_min_isr: true,
            env_sample: None,
            env_epoch: 0,
            fast_paths: true,
            next_writeback_ms: OS_WRITEBACK_INTERVAL_MS,
            next_log_flush_ms: 0,
            closed_connections: BTreeMap::new(),
            coordinator_log: Default::default(),
        };
        cluster.next_log_flush_ms = cluster.config.log_flush_scheduler_interval_ms;
        let partitions = cluster.config.offsets_topic_num_partitions.max(1);
        let rf = cluster
            .config
            .offsets_topic_replication_factor
            .clamp(1, broker_count);
        let offsets = TopicConfig::default();
        cluster.create_topic_unchecked(0, CONSUMER_OFFSETS_TOPIC, partitions, rf, offsets, true);
        let txn = TopicConfig {
            min_insync_replicas: TRANSACTION_STATE_MIN_ISR,
            ..TopicConfig::default()
        };
        let partitions = cluster.config.transaction_state_log_num_partitions.max(1);
        cluster.create_topic_unchecked(0, TRANSACTION_STATE_TOPIC, partitions, rf, txn, true);
        cluster
    }

    /// The configuration the cluster was built with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Number of brokers.
    pub fn broker_count(&self) -> u32 {
        self.broker_count
    }

    /// Chooses the high-watermark rule under min ISR. `true` (default, Kafka 3.7+,
    /// KAFKA-15583 / KIP-966): the HW does not advance while the ISR is smaller than
    /// `min.insync.replicas`. `false`: the pre-3.7 rule, under which acks=all requests can
    /// complete with `NOT_ENOUGH_REPLICAS_AFTER_APPEND`.
    pub fn set_hold_hw_under_min_isr(&mut self, hold: bool) {
        self.hold_hw_under_min_isr = hold;
    }

    /// Turns the quiet-partition fast path of [`Cluster::tick`] off (tests compare runs with
    /// and without it; results must be identical).
    #[doc(hidden)]
    pub fn set_fast_paths(&mut self, on: bool) {
        self.fast_paths = on;
    }

    fn state(&self, b: BrokerId) -> &BrokerState {
        assert!(
            b >= 1 && b <= self.broker_count,
            "broker {b} out of 1..={}",
            self.broker_count
        );
        &self.brokers[(b - 1) as usize]
    }

    fn partition(&self, tp: &TopicPartition) -> Option<&Partition> {
        self.topics
            .get(tp.topic.as_str())?
            .partitions
            .get(tp.partition as usize)
    }

    /// Handles a client request arriving at broker `broker` at time `now`. Produce, Fetch
    /// and ListOffsets act on what `broker` believes (it must believe it leads the
    /// partition, else `NOT_LEADER_OR_FOLLOWER`); Metadata and FindCoordinator answer from
    /// `broker`'s metadata image (stale while it cannot reach the controller), CreateTopic
    /// from the controller's state. A Fetch parks while fewer than `min_bytes` are
    /// readable (see [`Cluster::poll_parked`]). A crashed broker
    /// answers nothing in reality; the service must not route requests to it, and the model
    /// answers `REQUEST_TIMED_OUT` if it does.
    pub fn handle(&mut self, now: TimeMs, broker: BrokerId, request: Request) -> Reply {
        if !self.state(broker).alive {
            return error(KafkaError::RequestTimedOut);
        }
        let api = api_of(&request);
        let coordinator_work = changes_coordinator_state(&request);
        let reply = self.dispatch(now, broker, request);
        if coordinator_work {
            self.sync_coordinator_log(now);
        }
        if let Reply::Done(Response::Error(e)) = &reply {
            mark_error(api, *e);
        }
        reply
    }

    fn dispatch(&mut self, now: TimeMs, broker: BrokerId, request: Request) -> Reply {
        match request {
            Request::Metadata { topics } => Reply::Done(self.metadata(now, broker, topics)),
            Request::CreateTopic {
                name,
                partitions,
                replication_factor,
                config,
            } => Reply::Done(self.create_topic(now, name, partitions, replication_factor, config)),
            Request::Produce {
                tp,
                acks,
                timeout_ms,
                header,
                records,
            } => self.produce(now, broker, tp, acks, timeout_ms, header, records),
            Request::Fetch {
                isolation,
                partitions,
                max_bytes,
                partition_max_bytes,
                min_bytes,
                max_wait_ms,
                current_leader_epochs,
            } => self.park_fetch(
                now,
                PendingFetch {
                    broker,
                    isolation,
                    partitions,
                    current_leader_epochs: current_leader_epochs.into_iter().collect(),
                    limits: (max_bytes, partition_max_bytes),
                    min_bytes,
                    deadline_ms: now.saturating_add(max_wait_ms),
                },
            ),
            Request::ListOffsets { tp, spec } => Reply::Done(self.list_offsets(broker, &tp, spec)),
            Request::DeleteRecords { tp, before } => {
                Reply::Done(self.delete_records_at(broker, &tp, before))
            }
            Request::OffsetsForLeaderEpoch {
                tp,
                current_leader_epoch,
                leader_epoch,
            } => Reply::Done(self.offsets_for_leader_epoch(
                broker,
                &tp,
                current_leader_epoch,
                leader_epoch,
            )),
            Request::FindCoordinator { key, kind } => {
                Reply::Done(self.find_coordinator(broker, &key, kind))
            }
            Request::InitProducerId { .. }
            | Request::AddPartitionsToTxn { .. }
            | Request::AddOffsetsToTxn { .. }
            | Request::EndTxn { .. } => match self.config.flavour.transaction_coordinator_refusal()
            {
                // KoP: `getTransactionCoordinator()` throws and `channelRead` closes the
                // connection (kop.rs).
                Some(reason) => {
                    crate::mark!("kop:transaction-coordinator-disabled");
                    let seen = self.closed_connections.entry(api_of(&request));
                    seen.or_insert((0, reason)).0 += 1;
                    Reply::Done(Response::ConnectionClosed {
                        reason: reason.to_string(),
                    })
                }
                None => Reply::Done(self.txn_request(now, broker, request)),
            },
            Request::TxnOffsetCommit { .. } | Request::OffsetFetchStable { .. } => {
                Reply::Done(self.txn_group_request(now, broker, request))
            }
            group_request => self.group_request(now, broker, group_request),
        }
    }

    /// Re-asks a parked request; `None` while it is still waiting. A produce completes when
    /// its broker's HW passes the batch (NONE, or `NOT_ENOUGH_REPLICAS_AFTER_APPEND` when
    /// the ISR is then below min ISR), with `NOT_LEADER_OR_FOLLOWER` once the broker no
    /// longer leads in the request's epoch, or with `REQUEST_TIMED_OUT` once `now` passes
    /// the request's timeout (the batch stays in the log and may still commit).
    ///
    /// A Fetch completes, with what is readable then, once `min_bytes` are readable, a
    /// partition answers an error (this broker no longer leads it, the offset is out of
    /// range, an epoch is fenced), or `now` reaches `max_wait_ms` after it arrived
    /// (`DelayedFetch.tryComplete` and `onComplete`, apache/kafka
    /// `core/src/main/scala/kafka/server/DelayedFetch.scala`).
    ///
    /// A token that already completed, or was forgotten long after its deadline (a broker
    /// killed while the request waited never polls again), answers `REQUEST_TIMED_OUT`.
    pub fn poll_parked(&mut self, now: TimeMs, token: &ParkToken) -> Option<Response> {
        match *token {
            ParkToken::Group(t) => self.groups.poll_parked(now, t),
            ParkToken::Fetch(n) => {
                let Some(pending) = self.pending_fetches.get(&n) else {
                    return Some(Response::Error(KafkaError::RequestTimedOut));
                };
                let response = self.try_complete_fetch(now, pending);
                if response.is_some() {
                    if now >= pending.deadline_ms {
                        crate::mark!("kafka:fetch-long-poll-expired");
                    } else {
                        crate::mark!("kafka:fetch-long-poll-satisfied");
                    }
                    self.pending_fetches.remove(&n);
                }
                response
            }
            ParkToken::Produce(n) => {
                let Some(pending) = self.pending.get(&n) else {
                    // Completed already, or dropped long after its deadline (see `tick`).
                    return Some(Response::Error(KafkaError::RequestTimedOut));
                };
                let response = self.check_pending(now, pending);
                if response.is_some() {
                    self.pending.remove(&n);
                }
                response
            }
        }
    }

    /// `DelayedProduce.tryComplete` / `Partition.checkEnoughReplicasReachOffset`.
    fn check_pending(&self, now: TimeMs, pending: &PendingProduce) -> Option<Response> {
        let p = self
            .partition(&pending.tp)
            .expect("topics are never deleted");
        let r = p
            .replica(pending.broker)
            .expect("the produce was accepted by a replica");
        if !r.believes_leader() || r.view_epoch != pending.leader_epoch {
            return Some(Response::Error(KafkaError::NotLeaderOrFollower));
        }
        if r.log.high_watermark() > pending.last_offset {
            if r.view_isr.len() < p.min_isr {
                crate::mark!("kafka:produce-not-enough-replicas-after-append");
                return Some(Response::Error(KafkaError::NotEnoughReplicasAfterAppend));
            }
            return Some(Response::Produce {
                base_offset: pending.base_offset,
                log_append_time_ms: -1,
            });
        }
        if now >= pending.deadline_ms {
            crate::mark!("kafka:produce-timed-out-waiting-for-isr");
            return Some(Response::Error(KafkaError::RequestTimedOut));
        }
        None
    }

    /// Advances what brokers and the controller do on their own up to `now`: controller
    /// heartbeats, fencing and elections; brokers learning the controller's decisions;
    /// follower fetches with truncation; ISR shrink and expand; leader HW; group timers.
    pub fn tick(&mut self, now: TimeMs, env: &dyn Env) {
        // Asked once per broker and tick, in broker order, before anything acts on it (nothing
        // in a tick starts or stops a broker, so the answers hold for the whole tick).
        let all_up = env.all_up();
        let linked = self.controller_links(env, all_up);
        self.follow_metadata(&linked);
        self.controller_tick(now, &linked);
        let mut reach = self.reach(now, env, linked, all_up);
        // Compared in place, copied only when it changed (the model ticks every ms).
        let same = self
            .env_sample
            .as_ref()
            .is_some_and(|(up, controller, fenced, links)| {
                *up == reach.up
                    && *controller == reach.controller
                    && *fenced == reach.fenced
                    && *links == reach.links
            });
        if !same {
            self.env_epoch += 1;
            self.env_sample = Some((
                reach.up.clone(),
                reach.controller.clone(),
                reach.fenced.clone(),
                reach.links.clone(),
            ));
        }
        reach.env_epoch = self.env_epoch;
        for topic in self.topics.values_mut() {
            for p in &mut topic.partitions {
                p.tick(&reach);
            }
        }
        // Parked produces nobody polled long after their deadline (their broker was killed
        // while they waited) are dropped, so the map stays bounded.
        let retention_ms = PARKED_PRODUCE_RETENTION_MS;
        self.pending
            .retain(|_, p| now <= p.deadline_ms.saturating_add(retention_ms));
        self.pending_fetches
            .retain(|_, p| now <= p.deadline_ms.saturating_add(retention_ms));
        self.groups.tick(now);
        let acting = self.reload_moved_coordinators(now);
        let count = acting.len() as u32;
        self.txns.tick(now, &|tid| {
            acting[coordinator_partition_for(tid, count) as usize]
        });
        self.write_markers(now, env);
        self.sync_coordinator_log(now);
        self.expire_producers(now);
        self.flush_logs(now);
    }

    /// What puts logs on disk over time (A.10): the OS writeback every
    /// [`OS_WRITEBACK_INTERVAL_MS`] on every machine (a killed process's page cache is
    /// written back too), and the `kafka-log-flusher` task every
    /// `log.flush.scheduler.interval.ms` on running brokers (`LogManager.flushDirtyLogs`:
    /// a log last flushed `log.flush.interval.ms` ago or more is fsynced).
    fn flush_logs(&mut self, now: TimeMs) {
        let writeback = now >= self.next_writeback_ms;
        let flusher = now >= self.next_log_flush_ms;
        if !writeback && !flusher {
            return;
        }
        let scheduler_ms = self.config.log_flush_scheduler_interval_ms.max(1);
        let flush_ms = self.config.log_flush_interval_ms.unwrap_or(scheduler_ms);
        let alive: Vec<bool> = self.brokers.iter().map(|b| b.alive).collect();
        for topic in self.topics.values_mut() {
            // Durability is not part of what a quiet partition's fast path keeps (no
            // `touch`).
            for p in &mut topic.partitions {
                for r in &mut p.replicas {
                    if writeback {
                        r.log.os_writeback();
                    }
                    if flusher && alive[(r.broker - 1) as usize] {
                        r.log.flush_if_due(now, flush_ms);
                    }
                }
            }
        }
        if writeback {
            self.next_writeback_ms = now + OS_WRITEBACK_INTERVAL_MS;
        }
        if flusher {
            self.next_log_flush_ms = now.saturating_add(scheduler_ms);
        }
    }

    /// Per broker: it runs (alive in the model and up in the environment) and reaches the
    /// controller; `all_up` is this tick's [`Env::all_up`].
    fn controller_links(&self, env: &dyn Env, all_up: bool) -> Vec<bool> {
        (1..=self.broker_count)
            .map(|b| {
                self.state(b).alive && (all_up || env.broker_up(b) && env.controller_link_up(b))
            })
            .collect()
    }

    /// Samples the environment once for this tick; `controller` is this tick's
    /// [`Cluster::controller_links`], `all_up` this tick's [`Env::all_up`].
    fn reach(&self, now: TimeMs, env: &dyn Env, controller: Vec<bool>, all_up: bool) -> Reach {
        let ids = 1..=self.broker_count;
        let up: Vec<bool> = ids
            .clone()
            .map(|b| self.state(b).alive && (all_up || env.broker_up(b)))
            .collect();
        let links = ids
            .clone()
            .flat_map(|a| ids.clone().map(move |b| (a, b)))
            .map(|(a, b)| all_up || env.link_up(a, b))
            .collect();
        Reach {
            now,
            up,
            controller,
            fenced: self.brokers.iter().map(|s| s.fenced).collect(),
            links,
            lag_max_ms: self.config.replica_lag_time_max_ms,
            hold_hw_under_min_isr: self.hold_hw_under_min_isr,
            env_epoch: self.env_epoch,
            fast_paths: self.fast_paths,
        }
    }

    /// Each broker that reaches the controller follows its metadata; one that lost it keeps
    /// the image it had (see `BrokerState::stale_metadata`).
    /// `linked` is this tick's [`Cluster::controller_links`].
    fn follow_metadata(&mut self, linked: &[bool]) {
        for b in 1..=self.broker_count {
            let i = (b - 1) as usize;
            if linked[i] {
                self.brokers[i].stale_metadata = None;
            } else if self.brokers[i].stale_metadata.is_none() {
                crate::mark!("kafka:broker-metadata-stale");
                self.brokers[i].stale_metadata = Some(self.metadata_image());
            }
        }
    }

    /// The controller's metadata as an image.
    fn metadata_image(&self) -> MetadataImage {
        let describe = |t: &Topic| -> Vec<PartitionMetadata> {
            t.partitions
                .iter()
                .enumerate()
                .map(|(i, p)| PartitionMetadata {
                    partition: i as u32,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    replicas: p.assignment(),
                    isr: p.isr.clone(),
                })
                .collect()
        };
        MetadataImage {
            topics: self
                .topics
                .iter()
                .map(|(n, t)| (n.clone(), (t.internal, describe(t))))
                .collect(),
            brokers: self.unfenced_brokers(),
        }
    }

    /// Broker `broker`'s image: its stale one, or the controller's.
    fn image_at(&self, broker: BrokerId) -> MetadataImage {
        match &self.state(broker).stale_metadata {
            Some(image) => image.clone(),
            None => self.metadata_image(),
        }
    }

    /// Heartbeats, registrations of restarted brokers, fencing after
    /// `broker.session.timeout.ms` of silence, unfencing (`BrokerHeartbeatManager`);
    /// `linked` is this tick's [`Cluster::controller_links`].
    fn controller_tick(&mut self, now: TimeMs, linked: &[bool]) {
        for b in 1..=self.broker_count {
            let i = (b - 1) as usize;
            let st = &self.brokers[i];
            if linked[i] {
                if st.needs_registration {
                    // A new incarnation: the old one shut down uncleanly
                    // (`ReplicationControlManager.handleBrokerUncleanShutdown`).
                    self.brokers[i].needs_registration = false;
                    if !self.brokers[i].fenced {
                        self.set_fenced(now, b, true);
                    }
                }
                self.brokers[i].last_heartbeat_ms = now;
                if self.brokers[i].fenced {
                    self.set_fenced(now, b, false);
                }
            } else if !st.fenced
                && now.saturating_sub(st.last_heartbeat_ms) > self.config.broker_session_timeout_ms
            {
                self.set_fenced(now, b, true);
            }
        }
    }

    /// The controller fences or unfences `b` and elects where that leaves a partition
    /// without a leader. A `__consumer_offsets` partition that gets a new leader moves its
    /// groups' coordinator, which loads them from their records
    /// ([`GroupCoordinator::reload`]).
    fn set_fenced(&mut self, now: TimeMs, b: BrokerId, fence: bool) {
        self.brokers[(b - 1) as usize].fenced = fence;
        let brokers = &self.brokers;
        let fenced = |x: BrokerId| brokers[(x - 1) as usize].fenced;
        let mut moved = Vec::new();
        for (name, topic) in self.topics.iter_mut() {
            let unclean = topic.config.unclean_leader_election_enable;
            for (i, p) in topic.partitions.iter_mut().enumerate() {
                let before = p.leader;
                match fence {
                    true => p.on_broker_fenced(b, &fenced, unclean),
                    false => p.on_broker_unfenced(b, &fenced, unclean),
                }
                mark_leader_change(name, before, p.leader);
                if name == CONSUMER_OFFSETS_TOPIC && p.leader.is_some() && p.leader != before {
                    moved.push(i as u32);
                }
            }
        }
        if moved.is_empty() {
            return;
        }
        let count = self.topics[CONSUMER_OFFSETS_TOPIC].partitions.len() as u32;
        self.groups.reload(now, &|group| {
            moved.contains(&coordinator_partition_for(group, count))
        });
    }

    /// Broker `broker` dies, as [`Cluster::crash_broker_with`] with a machine crash keeping
    /// of each log only what is on disk (the most a power loss can take).
    pub fn crash_broker(&mut self, now: TimeMs, broker: BrokerId, mode: CrashMode) -> u64 {
        self.crash_broker_with(now, broker, mode, &mut |durable, _| durable)
    }

    /// Broker `broker` dies. Its replicas keep their logs (`ProcessKill`: the page cache
    /// survives) or, for a `MachineCrash`, each keeps the prefix ending at
    /// `cut(durable_offset, log_end_offset)` (clamped to that range; the nemesis draws it
    /// at random), possibly below its HW: recovery then truncates the log there
    /// (`LogLoader`) and the replica reconciles with the leader by leader epoch when it
    /// rejoins. The controller notices only through missing heartbeats
    /// (`broker.session.timeout.ms`). Returns the offsets the crash cut from the broker's
    /// logs (0 for a `ProcessKill`), what the fault-effect accounting reports it lost.
    pub fn crash_broker_with(
        &mut self,
        now: TimeMs,
        broker: BrokerId,
        mode: CrashMode,
        cut: &mut dyn FnMut(Offset, Offset) -> Offset,
    ) -> u64 {
        let _ = now;
        let _ = self.state(broker);
        self.brokers[(broker - 1) as usize].alive = false;
        let mut lost = 0;
        if mode == CrashMode::MachineCrash {
            for topic in self.topics.values_mut() {
                for p in &mut topic.partitions {
                    if let Some(j) = p.index_of(broker) {
                        p.touch();
                        let log = &mut p.replicas[j].log;
                        let hw = log.high_watermark();
                        let point = cut(log.durable_offset(), log.log_end_offset());
                        lost += log.crash_to(point);
                        if log.log_end_offset() < hw {
                            crate::mark!("kafka:machine-crash-lost-below-hw");
                        }
                    }
                }
            }
        }
        if lost > 0 {
            crate::mark!("kafka:machine-crash-lost-unflushed-tail");
        }
        lost
    }

    /// DeleteRecords (KIP-107, `Admin.deleteRecords`) of `tp` before `before` (`None`: its
    /// HW), applied at once at the partition's leader (`Partition::delete_records`): an
    /// operator's or a retention job's action, so no network link stands in its way.
    /// Returns `(old log start, new log start)`.
    ///
    /// # Errors
    /// `UNKNOWN_TOPIC_OR_PARTITION`, and the leader's errors: `LEADER_NOT_AVAILABLE`,
    /// `NOT_LEADER_OR_FOLLOWER`, `OFFSET_OUT_OF_RANGE` past the HW.
    pub fn delete_records(
        &mut self,
        tp: &TopicPartition,
        before: Option<Offset>,
    ) -> Result<(Offset, Offset), KafkaError> {
        let alive: Vec<bool> = self.brokers.iter().map(|b| b.alive).collect();
        let p = self
            .partition_mut(tp)
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let moved = p.delete_records(before, &|b| alive[(b - 1) as usize])?;
        if moved.1 > moved.0 {
            crate::mark!("kafka:delete-records-moved-log-start");
        }
        Ok(moved)
    }

    /// The log start offset of the current leader's replica; `None` while offline.
    pub fn log_start_offset(&self, tp: &TopicPartition) -> Option<Offset> {
        Some(self.partition(tp)?.leader_replica()?.log.log_start_offset())
    }

    /// Broker `broker` starts again and recovers from its log: it forgets what it knew of
    /// leaders and ISRs, re-registers with the controller at its next heartbeat (handled as
    /// an unclean shutdown of the previous incarnation) and rejoins as a follower. A no-op
    /// for a broker that runs.
    pub fn restart_broker(&mut self, now: TimeMs, broker: BrokerId) {
        let _ = now;
        let i = (broker - 1) as usize;
        if self.state(broker).alive {
            return;
        }
        self.brokers[i].alive = true;
        self.brokers[i].needs_registration = true;
        for topic in self.topics.values_mut() {
            for p in &mut topic.partitions {
                if let Some(j) = p.index_of(broker) {
                    p.touch();
                    p.replicas[j].forget_views();
                }
            }
        }
    }
}

/// Request handlers.
impl Cluster {
    /// `CreateTopics` at the controller: `TOPIC_ALREADY_EXISTS`, `INVALID_PARTITIONS` for 0
    /// partitions, `INVALID_REPLICATION_FACTOR` when it is 0 or exceeds the unfenced brokers.
    fn create_topic(
        &mut self,
        now: TimeMs,
        name: String,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
    ) -> Response {
        if self.topics.contains_key(&name) {
            return Response::Error(KafkaError::TopicAlreadyExists);
        }
        if partitions == 0 {
            return Response::Error(KafkaError::InvalidPartitions);
        }
        let live = self.unfenced_brokers().len() as u32;
        if replication_factor == 0 || replication_factor > live {
            return Response::Error(KafkaError::InvalidReplicationFactor);
        }
        self.create_topic_unchecked(now, &name, partitions, replication_factor, config, false);
        Response::CreateTopic
    }

    fn create_topic_unchecked(
        &mut self,
        now: TimeMs,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
        internal: bool,
    ) {
        let brokers = self.unfenced_brokers();
        let partitions = assign_replicas(&brokers, partitions, replication_factor)
            .iter()
            .map(|assignment| self.new_partition(assignment, &config, now))
            .collect();
        self.topics.insert(
            name.to_string(),
            Topic {
                config,
                internal,
                partitions,
            },
        );
    }

    /// A new, empty partition on `assignment` (its first replica leads), with the
    /// cluster's log settings.
    fn new_partition(
        &self,
        assignment: &[BrokerId],
        config: &TopicConfig,
        now: TimeMs,
    ) -> Partition {
        let mut p = Partition::new(assignment, config.min_insync_replicas, now);
        p.keep_producer_state = self.config.producer_state_survives_failover;
        let scheme = self.config.flavour.offset_scheme();
        for r in &mut p.replicas {
            let messages = self.config.log_flush_interval_messages;
            r.log.set_flush_interval_messages(messages);
            r.log.set_offset_scheme(scheme);
        }
        p
    }

    /// `CreatePartitions` at the controller (KIP-195; `Admin.createPartitions` with
    /// `NewPartitions.increaseTo(count)`, `kafka-topics.sh --alter --partitions`; KRaft's
    /// `ReplicationControlManager.createPartitions`): `topic` grows to `count` partitions.
    /// The new ones are placed on the unfenced brokers as a new topic's are
    /// ([`assign_replicas`], continuing its layout), with the topic's replication factor and
    /// configuration, and start empty with their whole replica set in sync. The existing
    /// partitions, their logs and leaders are untouched; what changes is what clients see
    /// once they fetch metadata again: keys map to `murmur2 % count`, and a group's leader
    /// assigns the new partitions (which, without a committed offset, start where
    /// `auto.offset.reset` says). Returns the partition counts before and after.
    ///
    /// # Errors
    /// UNKNOWN_TOPIC_OR_PARTITION for an unknown topic; INVALID_PARTITIONS when `count` is
    /// not above the current count (Kafka: "Topic already has N partition(s)." / "The topic
    /// T currently has N partition(s); M would not be an increase."); INVALID_REPLICATION_FACTOR
    /// when fewer brokers are unfenced than the topic has replicas per partition.
    pub fn create_partitions(
        &mut self,
        now: TimeMs,
        topic: &str,
        count: u32,
    ) -> Result<(u32, u32), KafkaError> {
        let t = self
            .topics
            .get(topic)
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let old = t.partitions.len() as u32;
        if count <= old {
            return Err(KafkaError::InvalidPartitions);
        }
        let replication_factor = t.partitions.first().map_or(1, |p| p.replicas.len()) as u32;
        let config = t.config.clone();
        let brokers = self.unfenced_brokers();
        if replication_factor as usize > brokers.len() {
            return Err(KafkaError::InvalidReplicationFactor);
        }
        let added: Vec<Partition> = assign_replicas(&brokers, count, replication_factor)
            [old as usize..]
            .iter()
            .map(|assignment| self.new_partition(assignment, &config, now))
            .collect();
        let t = self.topics.get_mut(topic).expect("looked up above");
        t.partitions.extend(added);
        crate::mark!("kafka:partitions-added");
        Ok((old, count))
    }

    fn unfenced_brokers(&self) -> Vec<BrokerId> {
        (1..=self.broker_count)
            .filter(|&b| !self.state(b).fenced)
            .collect()
    }

    /// `Metadata` as broker `broker` knows it (its image, see
    /// `BrokerState::stale_metadata`: the controller's state unless the broker lost the
    /// controller). Every non-internal topic when `topics` is `None`; named topics
    /// otherwise, internal ones included. An unknown topic is left out of the map (Kafka
    /// answers it with `UNKNOWN_TOPIC_OR_PARTITION`; the response shape has no per-topic
    /// error, so callers see it missing), unless `auto_create_topics_enable` creates it.
    /// Brokers: the unfenced ones.
    fn metadata(&mut self, now: TimeMs, broker: BrokerId, topics: Option<Vec<String>>) -> Response {
        if self.config.auto_create_topics_enable {
            // `auto.create.topics.enable`: a named unknown topic is created with
            // `num.partitions=1` and `default.replication.factor=1` (Kafka's defaults).
            for name in topics.iter().flatten() {
                if !self.topics.contains_key(name) && !self.unfenced_brokers().is_empty() {
                    self.create_topic_unchecked(now, name, 1, 1, TopicConfig::default(), false);
                }
            }
        }
        let image = self.image_at(broker);
        let map = match topics {
            None => image
                .topics
                .into_iter()
                .filter(|(_, (internal, _))| !internal)
                .map(|(n, (_, p))| (n, p))
                .collect(),
            Some(names) => {
                let mut all = image.topics;
                names
                    .into_iter()
                    .filter_map(|n| all.remove(&n).map(|(_, p)| (n, p)))
                    .collect()
            }
        };
        Response::Metadata {
            brokers: image.brokers,
            topics: map,
        }
    }

    /// `Produce` of one batch (A.2–A.4, B.3, C.6, C.9). Validation order: leadership,
    /// size, min ISR, the records' `CreateTime` against the leader's clock
    /// (`INVALID_TIMESTAMP`, [`timestamp_out_of_range`]), then the producer state
    /// (duplicate → the original offsets, older epoch → `INVALID_PRODUCER_EPOCH`, sequence
    /// gap → `OUT_OF_ORDER_SEQUENCE_NUMBER`, non-transactional batch inside an open
    /// transaction → `INVALID_TXN_STATE`), then for a transactional batch opening a
    /// transaction on the partition the protocol's check (see [`TxnProtocol`]).
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &mut self,
        now: TimeMs,
        broker: BrokerId,
        tp: TopicPartition,
        acks: Acks,
        timeout_ms: u64,
        header: ProducerBatchHeader,
        records: Vec<Record>,
    ) -> Reply {
        let (i, validation, opens_txn) =
            match self.produce_checks(now, broker, &tp, acks, &header, &records) {
                Ok(checked) => checked,
                Err(e) => return error(e),
            };
        let deadline_ms = now.saturating_add(timeout_ms);
        if let Validation::Duplicate {
            first_offset,
            last_offset,
        } = validation
        {
            crate::mark!("kafka:duplicate-batch");
            return self.answer(
                now,
                (tp, broker, i),
                acks,
                (first_offset, last_offset),
                deadline_ms,
            );
        }
        if opens_txn {
            if let Err(e) = self.check_txn_produce(now, &tp, &header) {
                return error(e);
            }
        }
        let offsets = self.append_produce(now, &tp, i, header, records);
        self.answer(now, (tp, broker, i), acks, offsets, deadline_ms)
    }

    /// The checks of a produce before anything changes: the leader replica's index, the
    /// producer-state verdict, and whether the batch opens a transaction on the partition.
    fn produce_checks(
        &self,
        now: TimeMs,
        broker: BrokerId,
        tp: &TopicPartition,
        acks: Acks,
        header: &ProducerBatchHeader,
        records: &[Record],
    ) -> Result<(usize, Validation, bool), KafkaError> {
        let topic = self
            .topics
            .get(tp.topic.as_str())
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let p = topic
            .partitions
            .get(tp.partition as usize)
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let i = p
            .index_of(broker)
            .filter(|&i| p.replicas[i].believes_leader())
            .ok_or(KafkaError::NotLeaderOrFollower)?;
        if records.is_empty() {
            return Err(KafkaError::CorruptMessage);
        }
        if batch_size_bytes(records) > topic.config.max_message_bytes {
            return Err(KafkaError::MessageTooLarge);
        }
        if acks == Acks::All && p.replicas[i].view_isr.len() < p.min_isr {
            return Err(KafkaError::NotEnoughReplicas);
        }
        let window = (
            self.config.log_message_timestamp_before_max_ms,
            self.config.log_message_timestamp_after_max_ms,
        );
        if records
            .iter()
            .any(|r| timestamp_out_of_range(now, r.timestamp_ms, window))
        {
            crate::mark!("kafka:produce-invalid-timestamp");
            return Err(KafkaError::InvalidTimestamp);
        }
        let state = p.replicas[i].log.producer_state();
        let validation = state.validate(header, records.len())?;
        let opens_txn = header.transactional
            && header.producer_id >= 0
            && state.ongoing_txn_first_offset(header.producer_id).is_none();
        Ok((i, validation, opens_txn))
    }

    /// A transactional batch that would open a transaction on `tp` (C.9): accepted as is
    /// before KIP-890, verified with the coordinator under part 1, added to the
    /// transaction implicitly under TV2.
    fn check_txn_produce(
        &mut self,
        now: TimeMs,
        tp: &TopicPartition,
        header: &ProducerBatchHeader,
    ) -> Result<(), KafkaError> {
        let (pid, epoch) = (header.producer_id, header.producer_epoch);
        if self.config.transaction_protocol != TxnProtocol::PreKip890 {
            // The leader must reach the producer's coordinator; Kafka answers produce with
            // the retriable NOT_ENOUGH_REPLICAS when it cannot (KIP-890 part 1).
            let tid = self.txns.transactional_id_of(pid);
            let coordinator =
                tid.and_then(|t| self.coordinator_for(t, CoordinatorKind::Transaction));
            if tid.is_some() && !coordinator.is_some_and(|b| self.state(b).alive) {
                return Err(KafkaError::NotEnoughReplicas);
            }
        }
        match self.config.transaction_protocol {
            TxnProtocol::PreKip890 => {
                // Accepted whatever the coordinator knows: a batch outside every ongoing
                // transaction of its producer (a produce delayed past its abort) opens one
                // at the partition that no marker will close, or joins the next (F8).
                if self.txns.verify_produce(pid, epoch, tp).is_err() {
                    crate::mark!("kafka:produce-outside-coordinator-txn");
                }
                Ok(())
            }
            TxnProtocol::Kip890Part1 => self.txns.verify_produce(pid, epoch, tp),
            TxnProtocol::Tv2 => self.txns.add_partition_implicitly(now, pid, epoch, tp),
        }
    }

    /// Appends a validated batch at replica `i` (the leader) and re-evaluates the HW.
    fn append_produce(
        &mut self,
        now: TimeMs,
        tp: &TopicPartition,
        i: usize,
        header: ProducerBatchHeader,
        records: Vec<Record>,
    ) -> (Offset, Offset) {
        let reach = Reach {
            now,
            up: Vec::new(),
            controller: Vec::new(),
            fenced: self.brokers.iter().map(|s| s.fenced).collect(),
            links: Vec::new(),
            lag_max_ms: self.config.replica_lag_time_max_ms,
            hold_hw_under_min_isr: self.hold_hw_under_min_isr,
            env_epoch: 0,
            fast_paths: false,
        };
        let p = self.partition_mut(tp).expect("checked by produce_checks");
        let epoch = p.replicas[i].view_epoch;
        p.touch();
        let offsets = p.replicas[i]
            .log
            .append_as_leader(epoch, header, false, Arc::new(records));
        // A local append re-evaluates the HW (a single-replica ISR commits at once).
        p.maybe_increment_hw(i, &reach);
        offsets
    }

    /// The produce answer for an appended (or duplicate) batch at `offsets`: at once for
    /// acks 0 and 1, parked until the HW passes it for acks=all.
    fn answer(
        &mut self,
        now: TimeMs,
        (tp, broker, i): (TopicPartition, BrokerId, usize),
        acks: Acks,
        (base_offset, last_offset): (Offset, Offset),
        deadline_ms: TimeMs,
    ) -> Reply {
        let produced = |base_offset| {
            Reply::Done(Response::Produce {
                base_offset,
                log_append_time_ms: -1,
            })
        };
        match acks {
            Acks::None => produced(-1),
            Acks::Leader => produced(base_offset),
            Acks::All => {
                let p = self.partition(&tp).expect("checked");
                let leader_epoch = p.replicas[i].view_epoch;
                let pending = PendingProduce {
                    tp,
                    broker,
                    leader_epoch,
                    base_offset,
                    last_offset,
                    deadline_ms,
                };
                self.park(now, pending)
            }
        }
    }

    fn partition_mut(&mut self, tp: &TopicPartition) -> Option<&mut Partition> {
        self.topics
            .get_mut(tp.topic.as_str())?
            .partitions
            .get_mut(tp.partition as usize)
    }

    /// Parks an acks=all produce (`DelayedProduce`), unless it can complete at once.
    fn park(&mut self, now: TimeMs, pending: PendingProduce) -> Reply {
        if let Some(response) = self.check_pending(now, &pending) {
            return Reply::Done(response);
        }
        let token = self.next_token;
        self.next_token += 1;
        self.pending.insert(token, pending);
        Reply::Parked(ParkToken::Produce(token))
    }

    /// Parks a Fetch (`ReplicaManager.fetchMessages`: it answers at once when
    /// `max_wait_ms` is 0, nothing is asked, a partition fails or `min_bytes` are
    /// readable), unless it can complete at once.
    fn park_fetch(&mut self, now: TimeMs, pending: PendingFetch) -> Reply {
        if let Some(response) = self.try_complete_fetch(now, &pending) {
            return Reply::Done(response);
        }
        crate::mark!("kafka:fetch-parked");
        let token = self.next_token;
        self.next_token += 1;
        self.pending_fetches.insert(token, pending);
        Reply::Parked(ParkToken::Fetch(token))
    }

    /// The parked fetch's response if it may complete now, else `None`.
    fn try_complete_fetch(&self, now: TimeMs, pending: &PendingFetch) -> Option<Response> {
        let (response, readable_bytes, failed) = self.fetch(
            pending.broker,
            pending.isolation,
            &pending.partitions,
            &pending.current_leader_epochs,
            pending.limits,
        );
        let done = pending.partitions.is_empty()
            || failed
            || readable_bytes >= u64::from(pending.min_bytes)
            || now >= pending.deadline_ms;
        done.then_some(response)
    }

    /// `Fetch` from a consumer (A.9). Batches are whole: a partition returns batches while
    /// they fit `partition_max_bytes` and the response's remaining `max_bytes`, except that
    /// the first batch of the response is always returned (KIP-74). Control batches take
    /// part in the limits and move `next_fetch_offset` but yield no records. Returns the
    /// response, the bytes it carries (control batches included, as `DelayedFetch`
    /// counts log bytes), and whether any partition failed.
    fn fetch(
        &self,
        broker: BrokerId,
        isolation: Isolation,
        partitions: &[(TopicPartition, Offset)],
        current_leader_epochs: &BTreeMap<TopicPartition, i32>,
        (max_bytes, partition_max_bytes): (u32, u32),
    ) -> (Response, u64, bool) {
        let mut budget = FetchBudget {
            left_bytes: max_bytes as u64,
            partition_max_bytes,
            any: false,
            read_bytes: 0,
        };
        let mut failed = false;
        let partitions = partitions
            .iter()
            .map(|(tp, offset)| {
                let epoch = current_leader_epochs.get(tp).copied();
                let at = (*offset, epoch);
                let result = self.fetch_partition(broker, tp, at, isolation, &mut budget);
                failed |= result.error.is_some();
                (tp.clone(), result)
            })
            .collect();
        (Response::Fetch { partitions }, budget.read_bytes, failed)
    }

    fn fetch_partition(
        &self,
        broker: BrokerId,
        tp: &TopicPartition,
        (offset, current_leader_epoch): (Offset, Option<i32>),
        isolation: Isolation,
        budget: &mut FetchBudget,
    ) -> FetchPartition {
        let failed = |e: KafkaError| FetchPartition {
            error: Some(e),
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: Vec::new(),
            aborted: Vec::new(),
            next_fetch_offset: offset,
        };
        let Some(p) = self.partition(tp) else {
            return failed(KafkaError::UnknownTopicOrPartition);
        };
        let r = match leader_replica_in_epoch(p, broker, current_leader_epoch) {
            Ok(r) => r,
            Err(e) => return failed(e),
        };
        let log = &r.log;
        let (hw, lso, leo) = (
            log.high_watermark(),
            log.last_stable_offset(),
            log.log_end_offset(),
        );
        assert!(lso <= hw, "LSO <= HW");
        assert!(hw <= leo, "HW <= LEO");
        if offset < log.log_start_offset() || offset > leo {
            return failed(KafkaError::OffsetOutOfRange);
        }
        let limit = match isolation {
            Isolation::ReadUncommitted => hw,
            Isolation::ReadCommitted => lso,
        };
        let mut out = failed(KafkaError::OffsetOutOfRange);
        out.error = None;
        (out.high_watermark, out.last_stable_offset) = (hw, lso);
        out.log_start_offset = log.log_start_offset();
        read_batches(log, offset, limit, budget, &mut out);
        if isolation == Isolation::ReadCommitted {
            out.aborted = aborted_in_range(log, offset, out.next_fetch_offset);
            if lso < hw && out.next_fetch_offset == lso {
                crate::mark!("kafka:lso-held-by-open-txn");
            }
            if !out.aborted.is_empty() {
                crate::mark!("kafka:fetch-lists-aborted-txns");
            }
        }
        assert!(
            out.records.iter().all(|f| f.offset < limit),
            "fetch returns only offsets < HW/LSO"
        );
        out
    }

    /// `ListOffsets` at the leader: earliest = log start, latest = HW (read_uncommitted) or
    /// LSO (read_committed).
    fn list_offsets(&self, broker: BrokerId, tp: &TopicPartition, spec: OffsetSpec) -> Response {
        let Some(p) = self.partition(tp) else {
            return Response::Error(KafkaError::UnknownTopicOrPartition);
        };
        let Some(r) = p.replica(broker).filter(|r| r.believes_leader()) else {
            return Response::Error(KafkaError::NotLeaderOrFollower);
        };
        let offset = match spec {
            OffsetSpec::Earliest => r.log.log_start_offset(),
            OffsetSpec::Latest(Isolation::ReadUncommitted) => r.log.high_watermark(),
            OffsetSpec::Latest(Isolation::ReadCommitted) => r.log.last_stable_offset(),
        };
        Response::ListOffsets { offset }
    }

    /// `DeleteRecords` sent to `broker` (KIP-107, `ReplicaManager.deleteRecords`): refused
    /// with `NOT_LEADER_OR_FOLLOWER` unless `broker` believes it leads `tp`, else
    /// [`Cluster::delete_records`] up to `before`.
    fn delete_records_at(
        &mut self,
        broker: BrokerId,
        tp: &TopicPartition,
        before: Offset,
    ) -> Response {
        let Some(p) = self.partition(tp) else {
            return Response::Error(KafkaError::UnknownTopicOrPartition);
        };
        if !p.replica(broker).is_some_and(|r| r.believes_leader()) {
            return Response::Error(KafkaError::NotLeaderOrFollower);
        }
        match self.delete_records(tp, Some(before)) {
            Ok((_, low_watermark)) => Response::DeleteRecords { low_watermark },
            Err(e) => Response::Error(e),
        }
    }

    /// `OffsetsForLeaderEpoch` from a consumer (`Partition.fetchOffsetForLeaderEpoch` with
    /// `fetchOnlyFromLeader`, KIP-320): at the leader of `current_leader_epoch`, where
    /// `leader_epoch` ends in its log ([`PartitionLog::end_offset_for_epoch`]), -1 / -1
    /// when it knows no such epoch.
    fn offsets_for_leader_epoch(
        &self,
        broker: BrokerId,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Response {
        let Some(p) = self.partition(tp) else {
            return Response::Error(KafkaError::UnknownTopicOrPartition);
        };
        let r = match leader_replica_in_epoch(p, broker, Some(current_leader_epoch)) {
            Ok(r) => r,
            Err(e) => return Response::Error(e),
        };
        let (leader_epoch, end_offset) =
            r.log.end_offset_for_epoch(leader_epoch).unwrap_or((-1, -1));
        Response::OffsetsForLeaderEpoch {
            leader_epoch,
            end_offset,
        }
    }

    /// The internal partition owning `key` and its topic name.
    fn coordinator_partition(&self, key: &str, kind: CoordinatorKind) -> TopicPartition {
        let topic = match kind {
            CoordinatorKind::Group => CONSUMER_OFFSETS_TOPIC,
            CoordinatorKind::Transaction => TRANSACTION_STATE_TOPIC,
        };
        let count = self.topics[topic].partitions.len() as u32;
        TopicPartition::new(topic, coordinator_partition_for(key, count))
    }

    /// `FindCoordinator` at broker `broker`: the leader, in its metadata image, of
    /// partition `Utils.abs(key.hashCode()) % partitions` of `__consumer_offsets` /
    /// `__transaction_state`; `COORDINATOR_NOT_AVAILABLE` while that partition is offline
    /// there. A broker cut off from the controller names the coordinator it last knew.
    fn find_coordinator(&self, broker: BrokerId, key: &str, kind: CoordinatorKind) -> Response {
        let tp = self.coordinator_partition(key, kind);
        let leader = match &self.state(broker).stale_metadata {
            Some(image) => image
                .topics
                .get(tp.topic.as_str())
                .and_then(|(_, p)| p.get(tp.partition as usize))
                .and_then(|p| p.leader),
            None => self.leader(&tp),
        };
        match leader {
            Some(broker) => Response::FindCoordinator { broker },
            None => Response::Error(KafkaError::CoordinatorNotAvailable),
        }
    }

    /// The six group requests and KIP-848's ConsumerGroupHeartbeat (whose coordinator reads
    /// the controller's partition counts): `COORDINATOR_NOT_AVAILABLE` while the group's partition of
    /// `__consumer_offsets` is offline, `NOT_COORDINATOR` at a broker that does not lead
    /// that partition in the controller's current epoch, else handed to the group
    /// coordinator. The rule is the transactions' (`check_coordinator`): in Kafka 4.x every
    /// group request, Heartbeat included, is a `CoordinatorRuntime.scheduleWriteOperation`
    /// on the `__consumer_offsets` partition (`GroupCoordinatorService`), answered only once
    /// its records commit, and a deposed leader cannot commit (its write fails with
    /// `NOT_LEADER_OR_FOLLOWER`, which `CoordinatorOperationExceptionHelper` answers as
    /// `NOT_COORDINATOR`). So a zombie coordinator that still believes it leads changes
    /// nothing. Simplifications: the refusal is immediate (Kafka may first wait up to
    /// `offsets.commit.timeout.ms` and answer `COORDINATOR_NOT_AVAILABLE`), and OffsetFetch,
    /// a read of the zombie's last committed state in Kafka, is refused too.
    fn group_request(&mut self, now: TimeMs, broker: BrokerId, request: Request) -> Reply {
        let group_id = match &request {
            Request::JoinGroup { group_id, .. }
            | Request::SyncGroup { group_id, .. }
            | Request::Heartbeat { group_id, .. }
            | Request::LeaveGroup { group_id, .. }
            | Request::OffsetCommit { group_id, .. }
            | Request::OffsetFetch { group_id, .. } => group_id.clone(),
            Request::ConsumerGroupHeartbeat(r) => r.group_id.clone(),
            other => unreachable!("not a group request: {other:?}"),
        };
        if let Err(e) = self.check_coordinator(now, broker, &group_id, CoordinatorKind::Group) {
            if e == KafkaError::NotCoordinator
                && self.believes_coordinator(broker, &group_id, CoordinatorKind::Group)
            {
                crate::mark!("kafka:group-request-at-deposed-coordinator");
            }
            return error(e);
        }
        match request {
            Request::ConsumerGroupHeartbeat(r) => {
                // Disjoint fields: the coordinator reads the topics' partition counts.
                let topics = &self.topics;
                let count = |t: &str| topics.get(t).map(|t| t.partitions.len() as u32);
                Reply::Done(self.groups.consumer_group_heartbeat(now, r, &count))
            }
            request => self.groups.handle(now, request),
        }
    }

    /// Appends a control batch (a transaction marker, `WriteTxnMarkers`) at the partition's
    /// leader: one record, one offset, never returned to applications (A.7). The hook the
    /// transactions module uses; returns the marker's offset, or `NOT_LEADER_OR_FOLLOWER`
    /// while the partition is offline.
    pub fn append_control_batch(
        &mut self,
        tp: &TopicPartition,
        header: ProducerBatchHeader,
        marker: Record,
    ) -> Result<Offset, KafkaError> {
        let topic = self
            .topics
            .get_mut(tp.topic.as_str())
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let p = topic
            .partitions
            .get_mut(tp.partition as usize)
            .ok_or(KafkaError::UnknownTopicOrPartition)?;
        let leader = p.leader.ok_or(KafkaError::NotLeaderOrFollower)?;
        let i = p.index_of(leader).expect("the leader is a replica");
        p.touch();
        let r = &mut p.replicas[i];
        if !r.believes_leader() {
            return Err(KafkaError::NotLeaderOrFollower);
        }
        let stored = r
            .log
            .producer_state()
            .entry(header.producer_id)
            .map(|e| e.epoch);
        if stored.is_some_and(|e| e > header.producer_epoch) {
            // `ProducerAppendInfo.checkProducerEpoch` for origin COORDINATOR.
            return Err(KafkaError::InvalidProducerEpoch);
        }
        let epoch = r.view_epoch;
        let (base, last) = r
            .log
            .append_as_leader(epoch, header, true, Arc::new(vec![marker]));
        assert!(base == last, "a control batch takes exactly one offset");
        let batch = r.log.batches().last().expect("just appended");
        assert!(batch.control, "marker appended as a control batch");
        Ok(base)
    }
}

/// Whether a produced record's `CreateTime` `timestamp_ms` lies outside the leader's window
/// `[now - before_max_ms, now + after_max_ms]` (`(before_max_ms, after_max_ms)`, the
/// `log.message.timestamp.*.max.ms` pair): Kafka's `LogValidator.recordHasInvalidTimestamp`
/// (`storage/.../log/LogValidator.java`), which fails the whole batch with
/// `INVALID_TIMESTAMP`. A producer's wall clock stepped ahead (a `clock-jump`) stamps such
/// records. Computed wide, so `Long.MAX_VALUE` never overflows.
pub fn timestamp_out_of_range(
    now: TimeMs,
    timestamp_ms: i64,
    (before_max_ms, after_max_ms): (u64, u64),
) -> bool {
    let (now, ts) = (i128::from(now), i128::from(timestamp_ms));
    now - ts > i128::from(before_max_ms) || ts - now > i128::from(after_max_ms)
}

/// The coverage mark of a controller decision that moved partition `tp` of `topic` from
/// leader `before` to `after`: a coordinator move for the internal topics, a leader change
/// for the others.
fn mark_leader_change(topic: &str, before: Option<BrokerId>, after: Option<BrokerId>) {
    if after.is_none() || after == before {
        return;
    }
    crate::mark!(match topic {
        CONSUMER_OFFSETS_TOPIC => "kafka:group-coordinator-move",
        TRANSACTION_STATE_TOPIC => "kafka:txn-coordinator-move",
        _ => "kafka:leader-change",
    });
}

/// Whether handling `request` may change a coordinator's state, so its records must be
/// appended before the answer: the transaction and group requests, and a transactional
/// produce (KIP-890's implicit AddPartitionsToTxn).
fn changes_coordinator_state(request: &Request) -> bool {
    request.coordinator_key().is_some()
        || matches!(request, Request::Produce { header, .. } if header.transactional)
}

/// The request's API, as far as [`mark_error`] tells them apart.
fn api_of(request: &Request) -> &'static str {
    match request {
        Request::Produce { .. } => "produce",
        Request::EndTxn { .. } => "end-txn",
        Request::InitProducerId { .. } => "init-producer-id",
        Request::AddPartitionsToTxn { .. } | Request::AddOffsetsToTxn { .. } => "add-to-txn",
        Request::TxnOffsetCommit { .. } => "txn-offset-commit",
        Request::OffsetFetchStable { .. } => "offset-fetch-stable",
        Request::OffsetCommit { .. } => "offset-commit",
        Request::JoinGroup { .. }
        | Request::SyncGroup { .. }
        | Request::Heartbeat { .. }
        | Request::ConsumerGroupHeartbeat(_) => "group",
        _ => "other",
    }
}

/// Coverage marks of the rare error answers an exactly-once argument rests on: a fenced
/// produce or EndTxn, a sequence gap, a refused commit, a fenced group member.
fn mark_error(api: &str, e: KafkaError) {
    use KafkaError as K;
    let name = match (api, e) {
        ("produce", K::InvalidProducerEpoch | K::ProducerFenced) => "kafka:produce-fenced",
        ("produce", K::OutOfOrderSequenceNumber) => "kafka:out-of-order-sequence",
        ("produce", K::NotEnoughReplicas) => "kafka:produce-not-enough-replicas",
        ("produce", K::InvalidTxnState) => "kafka:produce-invalid-txn-state",
        ("produce", K::NotLeaderOrFollower) => "kafka:produce-not-leader",
        ("produce", K::MessageTooLarge) => "kafka:produce-message-too-large",
        ("end-txn", K::ProducerFenced | K::InvalidProducerEpoch) => "kafka:end-txn-fenced",
        ("end-txn", K::InvalidTxnState) => "kafka:end-txn-invalid-txn-state",
        (_, K::ConcurrentTransactions) => "kafka:concurrent-transactions",
        ("init-producer-id" | "add-to-txn" | "txn-offset-commit", K::ProducerFenced) => {
            "kafka:txn-request-fenced"
        }
        ("offset-commit" | "txn-offset-commit" | "group", K::IllegalGeneration) => {
            "kafka:illegal-generation"
        }
        ("offset-commit" | "txn-offset-commit" | "group", K::UnknownMemberId) => {
            "kafka:unknown-member-id"
        }
        ("offset-fetch-stable", K::UnstableOffsetCommit) => "kafka:unstable-offset-commit",
        (_, K::NotCoordinator) => "kafka:not-coordinator",
        _ => "",
    };
    if !name.is_empty() {
        crate::mark!(name);
    }
    if matches!(api, "offset-commit" | "txn-offset-commit")
        && matches!(
            e,
            K::IllegalGeneration | K::UnknownMemberId | K::RebalanceInProgress | K::InvalidTxnState
        )
    {
        crate::mark!(&format!("kafka:{api}-refused"));
    }
}

/// The aborted transactions of `log` overlapping `[from, to)` (`collectAbortedTxns`, C.10):
/// their marker is at or after `from` and their first offset before `to`.
fn aborted_in_range(log: &PartitionLog, from: Offset, to: Offset) -> Vec<AbortedTxn> {
    if to <= from {
        return Vec::new();
    }
    let index = log.producer_state().aborted_index();
    let start = index.partition_point(|a| a.last_offset < from);
    index[start..]
        .iter()
        .filter(|a| a.first_offset < to)
        .map(|a| AbortedTxn {
            producer_id: a.producer_id,
            first_offset: a.first_offset,
            last_offset: a.last_offset,
        })
        .collect()
}

/// `broker`'s replica of `p` if it believes it leads (`Partition.getLocalLog` with
/// `requireLeader`), checked first against the client's `currentLeaderEpoch` when one is
/// given (`checkCurrentLeaderEpoch`, KIP-320): an older one is `FENCED_LEADER_EPOCH`, a
/// newer one `UNKNOWN_LEADER_EPOCH` (this broker has not learned it yet).
fn leader_replica_in_epoch(
    p: &Partition,
    broker: BrokerId,
    current_leader_epoch: Option<i32>,
) -> Result<&super::partition::Replica, KafkaError> {
    let r = p.replica(broker).ok_or(KafkaError::NotLeaderOrFollower)?;
    match current_leader_epoch {
        Some(e) if e < r.view_epoch => return Err(KafkaError::FencedLeaderEpoch),
        Some(e) if e > r.view_epoch => return Err(KafkaError::UnknownLeaderEpoch),
        _ => {}
    }
    if !r.believes_leader() {
        return Err(KafkaError::NotLeaderOrFollower);
    }
    Ok(r)
}

/// Byte limits of one fetch response.
struct FetchBudget {
    left_bytes: u64,
    partition_max_bytes: u32,
    /// Whether any batch was returned yet (KIP-74: the first one always is).
    any: bool,
    /// Bytes of the batches returned so far.
    read_bytes: u64,
}

/// Copies whole batches below `limit` from `offset` on into `out`, within the fetch's byte
/// budget (KIP-74: the response's first batch goes even over the limits). Control batches
/// count and move `next_fetch_offset` but yield no records.
fn read_batches(
    log: &PartitionLog,
    offset: Offset,
    limit: Offset,
    budget: &mut FetchBudget,
    out: &mut FetchPartition,
) {
    let mut partition_bytes = 0u64;
    for batch in &log.batches()[log.batch_index_from(offset)..] {
        if batch.last_offset >= limit {
            break;
        }
        let size = batch.size_bytes as u64;
        let fits = partition_bytes + size <= budget.partition_max_bytes as u64
            && size <= budget.left_bytes;
        if budget.any && !fits {
            break;
        }
        budget.any = true;
        budget.left_bytes = budget.left_bytes.saturating_sub(size);
        budget.read_bytes += size;
        partition_bytes += size;
        if !batch.control {
            let first = (offset - batch.base_offset).max(0) as usize;
            for (k, record) in batch.records.iter().enumerate().skip(first) {
                out.records.push(FetchedRecord {
                    offset: batch.base_offset + k as Offset,
                    record: record.clone(),
                    producer_id: batch.header.producer_id,
                    transactional: batch.header.transactional,
                    leader_epoch: batch.leader_epoch,
                });
            }
        }
        out.next_fetch_offset = batch.last_offset + 1;
    }
}

/// Introspection for tests, checkers and the runner. All of it reads the controller's
/// current leader (and its replica) unless a broker is named.
impl Cluster {
    /// User topics (internal `__consumer_offsets` / `__transaction_state` excluded), sorted.
    pub fn topics(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter(|(_, t)| !t.internal)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Number of partitions of `topic`, `None` if unknown.
    pub fn partition_count(&self, topic: &str) -> Option<u32> {
        self.topics.get(topic).map(|t| t.partitions.len() as u32)
    }

    /// Current leader as the controller sees it; `None` while offline or unknown.
    pub fn leader(&self, tp: &TopicPartition) -> Option<BrokerId> {
        self.partition(tp)?.leader
    }

    /// Current leader epoch as the controller sees it.
    pub fn leader_epoch(&self, tp: &TopicPartition) -> Option<i32> {
        Some(self.partition(tp)?.leader_epoch)
    }

    /// Replica assignment in preference order (empty if unknown).
    pub fn replicas(&self, tp: &TopicPartition) -> Vec<BrokerId> {
        self.partition(tp)
            .map(|p| p.assignment())
            .unwrap_or_default()
    }

    /// Committed ISR as the controller sees it (empty if unknown).
    pub fn isr(&self, tp: &TopicPartition) -> Vec<BrokerId> {
        self.partition(tp)
            .map(|p| p.isr.clone())
            .unwrap_or_default()
    }

    /// The requests the brokers answered by closing the connection, one line per API
    /// (`init-producer-id x12: <reason>`), in API order; empty under Kafka.
    pub fn closed_connections(&self) -> Vec<String> {
        self.closed_connections
            .iter()
            .map(|(api, (n, reason))| format!("{api} x{n}: {reason}"))
            .collect()
    }

    /// HW of the current leader's replica; `None` while offline or unknown.
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<Offset> {
        Some(self.partition(tp)?.leader_replica()?.log.high_watermark())
    }

    /// LSO of the current leader's replica; `None` while offline or unknown.
    pub fn last_stable_offset(&self, tp: &TopicPartition) -> Option<Offset> {
        Some(
            self.partition(tp)?
                .leader_replica()?
                .log
                .last_stable_offset(),
        )
    }

    /// LEO of `broker`'s replica; `None` if it holds none.
    pub fn log_end_offset(&self, tp: &TopicPartition, broker: BrokerId) -> Option<Offset> {
        Some(self.partition(tp)?.replica(broker)?.log.log_end_offset())
    }

    /// HW as `broker`'s replica knows it; `None` if it holds none.
    pub fn replica_high_watermark(&self, tp: &TopicPartition, broker: BrokerId) -> Option<Offset> {
        Some(self.partition(tp)?.replica(broker)?.log.high_watermark())
    }

    /// `(base_offset, last_offset, leader_epoch)` of every batch in `broker`'s replica, for
    /// comparing replicas; empty if it holds none.
    pub fn replica_batches(
        &self,
        tp: &TopicPartition,
        broker: BrokerId,
    ) -> Vec<(Offset, Offset, i32)> {
        let Some(r) = self.partition(tp).and_then(|p| p.replica(broker)) else {
            return Vec::new();
        };
        r.log
            .batches()
            .iter()
            .map(|b| (b.base_offset, b.last_offset, b.leader_epoch))
            .collect()
    }

    /// The current leader's data records from its log start to its HW, in offset order
    /// (control records left out); empty while offline.
    pub fn records(&self, tp: &TopicPartition) -> Vec<(Offset, Record)> {
        self.records_with_headers(tp)
            .into_iter()
            .map(|(o, r, _)| (o, r))
            .collect()
    }

    /// Like [`Cluster::records`], with each record's batch producer header.
    pub fn records_with_headers(
        &self,
        tp: &TopicPartition,
    ) -> Vec<(Offset, Record, ProducerBatchHeader)> {
        let Some(r) = self.partition(tp).and_then(|p| p.leader_replica()) else {
            return Vec::new();
        };
        let (start, hw) = (r.log.log_start_offset(), r.log.high_watermark());
        let mut out = Vec::new();
        for batch in r.log.batches().iter().take_while(|b| b.last_offset < hw) {
            if batch.control {
                continue;
            }
            for (k, record) in batch.records.iter().enumerate() {
                let offset = batch.base_offset + k as Offset;
                if offset >= start {
                    out.push((offset, record.clone(), batch.header));
                }
            }
        }
        out
    }

    /// Whether broker `b`'s process runs (not between crash and restart).
    pub fn broker_alive(&self, b: BrokerId) -> bool {
        self.state(b).alive
    }

    /// Whether the controller has fenced broker `b`.
    pub fn broker_fenced(&self, b: BrokerId) -> bool {
        self.state(b).fenced
    }

    /// The broker that leads the internal partition owning `key` (the coordinator
    /// `FindCoordinator` would name); `None` while that partition is offline.
    pub fn coordinator_for(&self, key: &str, kind: CoordinatorKind) -> Option<BrokerId> {
        self.leader(&self.coordinator_partition(key, kind))
    }

    /// Committed offsets of group `group_id` as `(partition, next offset to read)`, in
    /// partition order; empty if none.
    pub fn committed_offsets(&self, group_id: &str) -> Vec<(TopicPartition, Offset)> {
        self.groups
            .committed(group_id)
            .into_iter()
            .map(|(tp, c)| (tp, c.offset))
            .collect()
    }

    /// The group coordinators, for introspection (states, generations, members).
    pub fn groups(&self) -> &GroupCoordinator {
        &self.groups
    }

    /// Number of acks=all produces still parked.
    pub fn parked_produce_count(&self) -> usize {
        self.pending.len()
    }

    /// A fingerprint of what the parked produces wait on: their count, and each one's
    /// partition's replicas' log end offsets and high watermarks. Unchanged across a tick,
    /// that tick moved none of them closer (the ticker then waits for a write or its idle
    /// interval rather than ticking every ms while a dead ISR member holds the HW back).
    pub fn parked_produce_fingerprint(&self) -> u64 {
        let mut f = self.pending.len() as u64;
        for pending in self.pending.values() {
            let Some(p) = self.partition(&pending.tp) else {
                continue;
            };
            for r in &p.replicas {
                let (leo, hw) = (r.log.log_end_offset(), r.log.high_watermark());
                f = f.wrapping_mul(31).wrapping_add(leo as u64);
                f = f.wrapping_mul(31).wrapping_add(hw as u64);
            }
        }
        f
    }

    /// Number of Fetches still parked.
    pub fn parked_fetch_count(&self) -> usize {
        self.pending_fetches.len()
    }
}

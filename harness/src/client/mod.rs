//! Client traits in Kafka's own terms, shaped after rdkafka's `FutureProducer` and
//! `BaseConsumer` so that a component written against them runs unchanged on the real client
//! (the real implementation comes with the real-services tier).
//!
//! The simulated implementation (`sim`, under `--cfg madsim`) talks to the model's broker
//! nodes over eosim's RPC layer.

use async_trait::async_trait;
use bytes::Bytes;
use eosim_sim::kafka::{Acks, Isolation, KafkaError, Offset, TopicConfig, TopicPartition};
use std::time::Duration;

pub mod clickhouse;
pub mod postgres;
#[cfg(not(madsim))]
pub mod real;
pub mod sends;
#[cfg(madsim)]
pub mod sim;

/// Errors a client call can end with. `is_ambiguous` says whether the operation may still
/// have taken effect (a history records those as `info`, never `fail`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The broker answered with a Kafka error.
    #[error("broker error {0}")]
    Kafka(KafkaError),
    /// No answer in time (`delivery.timeout.ms`, `request.timeout.ms`, ...): outcome unknown.
    #[error("timed out after {timeout_ms} ms: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The bound that expired, in ms.
        timeout_ms: u64,
    },
    /// A commit failed because the group moved on (Java's `CommitFailedException`:
    /// ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS on commit).
    #[error("commit failed: {0}")]
    CommitFailed(KafkaError),
    /// The client cannot go on (fenced, misconfigured).
    #[error("fatal: {0}")]
    Fatal(String),
}

impl ClientError {
    /// Whether the operation may have taken effect although it reported an error.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            ClientError::Timeout { .. } => true,
            ClientError::Kafka(e) => matches!(
                e,
                KafkaError::RequestTimedOut | KafkaError::NotEnoughReplicasAfterAppend
            ),
            ClientError::CommitFailed(_) | ClientError::Fatal(_) => false,
        }
    }
}

/// A record to produce (rdkafka's `FutureRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Target topic.
    pub topic: String,
    /// Explicit partition; `None` uses the default partitioner (murmur2 of the key).
    pub partition: Option<u32>,
    /// Key bytes.
    pub key: Option<Bytes>,
    /// Value bytes; `None` is a tombstone.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<(String, Bytes)>,
}

/// Where a produced record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Partition index.
    pub partition: u32,
    /// Offset, or -1 under acks=0.
    pub offset: Offset,
}

/// Producer settings, with the Java/librdkafka names.
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerConfig {
    /// `acks`. Default all.
    pub acks: Acks,
    /// `enable.idempotence`. Default true in Java (false in librdkafka).
    pub enable_idempotence: bool,
    /// `request.timeout.ms`. Default 30000.
    pub request_timeout_ms: u64,
    /// `delivery.timeout.ms`. Default 120000.
    pub delivery_timeout_ms: u64,
    /// `retries`. Default `u32::MAX`.
    pub retries: u32,
    /// `retry.backoff.ms`. Default 100.
    pub retry_backoff_ms: u64,
    /// `max.block.ms`: how long `send` waits for the topic's metadata before it fails.
    /// Default here 0 (one metadata request, then the error), not Java's 60000: the
    /// workloads' producers keep the behaviour their scenarios were calibrated with; Connect's
    /// DLQ producer sets Connect's value. librdkafka has no counterpart (a record waits in
    /// its queue within `delivery.timeout.ms`), so the real producer ignores it.
    pub max_block_ms: u64,
    /// `linger.ms`: how long a batch waits for more records after its first, ms. Default
    /// here 0; Kafka's is 5 since 4.0 (KIP-1030), 0 before. See
    /// [`batching`](Self::batching).
    pub linger_ms: u64,
    /// `batch.size`: a batch's bytes limit (the broker model's sizes, see
    /// `client::sim::accumulator`). Default 16384 (Kafka's).
    pub batch_size: u32,
    /// `max.in.flight.requests.per.connection`: Produce requests in flight per broker.
    /// Default here 1; Kafka's is 5 (at most 5 with `enable.idempotence`).
    pub max_in_flight_requests_per_connection: u32,
    /// `metadata.max.age.ms`: the age after which a topic's cached metadata (its partition
    /// count above all) is fetched again before the next record is partitioned, ms.
    /// Default 300000 (Java's). A partition added to the topic is written to only after
    /// such a refresh (or one forced by an error).
    pub metadata_max_age_ms: u64,
}

impl ProducerConfig {
    /// Whether records go through the accumulator (`linger.ms` > 0 or more than one
    /// request in flight). eosim's defaults (`linger.ms=0`, one in flight) keep the shape
    /// its workloads were calibrated with: every awaited `send` is one Produce request of
    /// one record, as before batching existed, whatever Kafka's own defaults
    /// (`linger.ms=5`, `batch.size=16384`, `max.in.flight.requests.per.connection=5`).
    pub fn batching(&self) -> bool {
        self.linger_ms > 0 || self.max_in_flight_requests_per_connection > 1
    }
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            acks: Acks::All,
            enable_idempotence: true,
            request_timeout_ms: 30_000,
            delivery_timeout_ms: 120_000,
            retries: u32::MAX,
            retry_backoff_ms: 100,
            max_block_ms: 0,
            linger_ms: 0,
            batch_size: 16_384,
            max_in_flight_requests_per_connection: 1,
            metadata_max_age_ms: METADATA_MAX_AGE_MS,
        }
    }
}

/// The delivery report of one record handed to [`Producer::send_async`] (Java's
/// `Future<RecordMetadata>`, rdkafka's `DeliveryFuture`): resolves once the record's batch
/// was acknowledged (offset = the batch's base offset + the record's index in it), failed,
/// or its outcome became unknown ([`ClientError::is_ambiguous`], the same for every record
/// of the batch).
pub struct DeliveryFuture(
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Delivery, ClientError>> + Send>>,
);

impl DeliveryFuture {
    /// A report from any future.
    pub fn new(
        future: impl std::future::Future<Output = Result<Delivery, ClientError>> + Send + 'static,
    ) -> Self {
        Self(Box::pin(future))
    }

    /// A report that is already known.
    pub fn ready(result: Result<Delivery, ClientError>) -> Self {
        Self::new(std::future::ready(result))
    }
}

impl std::future::Future for DeliveryFuture {
    type Output = Result<Delivery, ClientError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for DeliveryFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeliveryFuture")
    }
}

/// What [`Producer::send_with_callback`] runs with a record's outcome (Java's `Callback`).
pub type DeliveryCallback = Box<dyn FnOnce(Result<Delivery, ClientError>) + Send>;

/// What [`TransactionalProducer::send_with_callback`] runs with a record's outcome.
pub type TxnDeliveryCallback = Box<dyn FnOnce(Result<Delivery, TxnError>) + Send>;

/// A producer (rdkafka's `FutureProducer`, Java's `KafkaProducer`).
#[async_trait]
pub trait Producer: Send + Sync {
    /// Sends one record and waits for its delivery report.
    ///
    /// # Errors
    /// The last error after retries ran out or `delivery.timeout.ms` expired.
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, ClientError>;

    /// Hands one record to the producer and returns its delivery report without waiting
    /// for it (Java's `KafkaProducer.send(record)` returning a `Future`, rdkafka's
    /// `FutureProducer::send_result`), so many records can be outstanding and batched
    /// (`linger.ms`, `batch.size`, `max.in.flight.requests.per.connection`). The default,
    /// for producers without a queue, delivers inside this call.
    ///
    /// # Errors
    /// When the record cannot be queued (its topic's metadata could not be had within
    /// `max.block.ms`, say); delivery errors come through the report.
    async fn send_async(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        Ok(DeliveryFuture::ready(self.send(record).await))
    }

    /// Hands one record to the producer and runs `callback` with its outcome once known
    /// (Java's `KafkaProducer.send(record, callback)`); an error before the record is
    /// queued goes to `callback` too, as Java's `doSend` hands it to the callback. The
    /// default awaits [`Producer::send_async`]'s report in a task of its own.
    async fn send_with_callback(&self, record: ProducerRecord, callback: DeliveryCallback) {
        match self.send_async(record).await {
            Ok(report) => {
                tokio::spawn(async move { callback(report.await) });
            }
            Err(e) => callback(Err(e)),
        }
    }

    /// Sends every queued record now, lingering or not, and waits until each has its
    /// delivery report (Java's `KafkaProducer.flush`). The default has nothing queued.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when records are still undelivered after `timeout`.
    async fn flush(&self, timeout: Duration) -> Result<(), ClientError> {
        let _ = timeout;
        Ok(())
    }
}

/// What `auto.offset.reset` does when a group has no committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoOffsetReset {
    /// Start at the log start offset.
    Earliest,
    /// Start at the end (Kafka's default).
    #[default]
    Latest,
    /// Fail.
    None,
}

/// `isolation.level`, as Kafka spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsolationLevel {
    /// Every record up to the high watermark, aborted transactions' included (Kafka's
    /// default).
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset, aborted transactions' records filtered out (KIP-98).
    ReadCommitted,
}

impl IsolationLevel {
    /// The model's isolation.
    pub fn to_isolation(self) -> Isolation {
        match self {
            Self::ReadUncommitted => Isolation::ReadUncommitted,
            Self::ReadCommitted => Isolation::ReadCommitted,
        }
    }
}

/// Consumer settings, with the Java/librdkafka names.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id` (KIP-345): `Some` makes the consumer a static member, which
    /// sends no LeaveGroup on close and takes its old place in the group when it restarts
    /// within `session.timeout.ms`. Default `None` (dynamic).
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms`. Default 45000 (KIP-735).
    pub session_timeout_ms: u64,
    /// `heartbeat.interval.ms`. Default 3000.
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms`. Default 300000; also the rebalance timeout.
    pub max_poll_interval_ms: u64,
    /// `max.poll.records`. Default 500.
    pub max_poll_records: usize,
    /// `fetch.max.bytes`. Default 52428800.
    pub fetch_max_bytes: u32,
    /// `max.partition.fetch.bytes`. Default 1048576.
    pub max_partition_fetch_bytes: u32,
    /// `fetch.max.wait.ms`: how long the broker holds a Fetch for `fetch.min.bytes`, ms.
    /// Default 500.
    pub fetch_max_wait_ms: u64,
    /// `fetch.min.bytes`: the bytes a Fetch waits for. Default 1.
    pub fetch_min_bytes: u32,
    /// `isolation.level`. Default read_uncommitted.
    pub isolation_level: Isolation,
    /// `auto.offset.reset`. Default latest.
    pub auto_offset_reset: AutoOffsetReset,
    /// `request.timeout.ms`. Default 30000.
    pub request_timeout_ms: u64,
    /// `partition.assignment.strategy`, most preferred first. Default Kafka 3.x/4.x's
    /// `[RangeAssignor, CooperativeStickyAssignor]`: range is chosen, eagerly, as long as
    /// every member lists it first; the consumer follows the cooperative protocol only when
    /// every listed assignor supports it ([`ConsumerConfig::cooperative`]).
    pub partition_assignment_strategy: Vec<AssignmentStrategy>,
    /// `metadata.max.age.ms`: the age after which the subscribed topics' metadata is
    /// fetched again, ms. Default 300000 (Java's). The group leader that finds a topic's
    /// partition count changed since its last assignment rejoins, so the added partitions
    /// get owners (`ConsumerCoordinator.rejoinNeededOrPending`).
    pub metadata_max_age_ms: u64,
    /// `group.protocol`: the classic rebalance protocol (Kafka's default) or KIP-848's
    /// consumer protocol, where the coordinator assigns and each member reconciles through
    /// `ConsumerGroupHeartbeat` (`session_timeout_ms`, `heartbeat_interval_ms` and
    /// `partition_assignment_strategy` are then unused: the broker's settings rule).
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor` (KIP-848): the server-side assignor this member asks for,
    /// `uniform` or `range`; `None`: the broker's default (`uniform`). Consumer protocol only.
    pub group_remote_assignor: Option<String>,
}

/// `group.protocol` (KIP-848, `ConsumerConfig.GROUP_PROTOCOL_CONFIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat, the leader member assigns (Kafka's default).
    #[default]
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat: the coordinator assigns, members reconcile.
    Consumer,
}

/// Java's `metadata.max.age.ms` default (`CommonClientConfigs.DEFAULT_METADATA_MAX_AGE_MS`
/// is 5 minutes), for producers and consumers alike, ms.
pub const METADATA_MAX_AGE_MS: u64 = 300_000;

/// One assignor of `partition.assignment.strategy` (Java's `ConsumerPartitionAssignor`
/// classes in `org.apache.kafka.clients.consumer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AssignmentStrategy {
    /// `RangeAssignor` (`range`): eager only.
    Range,
    /// `CooperativeStickyAssignor` (`cooperative-sticky`, KIP-429): sticky, and supports
    /// both the cooperative and the eager protocol.
    CooperativeSticky,
}

impl AssignmentStrategy {
    /// What [`AssignmentStrategy::parse_list`] accepts, for error messages.
    pub const EXPECTED: &'static str = "a comma-separated list of \
        org.apache.kafka.clients.consumer.RangeAssignor (range) and \
        org.apache.kafka.clients.consumer.CooperativeStickyAssignor (cooperative-sticky)";

    /// The assignor's `name()`, the protocol name a JoinGroup offers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Range => "range",
            Self::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// Parses a comma-separated `partition.assignment.strategy` (Java's list type): each
    /// entry a class name (`org.apache.kafka.clients.consumer.RangeAssignor`,
    /// `...CooperativeStickyAssignor`) or a short name (`range`, `cooperative-sticky`).
    ///
    /// # Errors
    /// An empty list, or an entry naming another assignor, with what was expected.
    pub fn parse_list(value: &str) -> Result<Vec<Self>, String> {
        let mut list = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let short = entry.strip_prefix("org.apache.kafka.clients.consumer.");
            let strategy = match short.unwrap_or(entry) {
                "RangeAssignor" | "range" => Self::Range,
                "CooperativeStickyAssignor" | "cooperative-sticky" => Self::CooperativeSticky,
                _ => return Err(format!("expected {}, found {entry:?}", Self::EXPECTED)),
            };
            if !list.contains(&strategy) {
                list.push(strategy);
            }
        }
        if list.is_empty() {
            return Err(format!("expected {}, found none", Self::EXPECTED));
        }
        Ok(list)
    }
}

impl ConsumerConfig {
    /// Kafka's defaults for group `group_id`.
    pub fn new(group_id: impl Into<String>) -> Self {
        Self {
            group_id: group_id.into(),
            group_instance_id: None,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            max_poll_records: 500,
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            fetch_max_wait_ms: 500,
            fetch_min_bytes: 1,
            isolation_level: Isolation::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Latest,
            request_timeout_ms: 30_000,
            partition_assignment_strategy: vec![
                AssignmentStrategy::Range,
                AssignmentStrategy::CooperativeSticky,
            ],
            metadata_max_age_ms: METADATA_MAX_AGE_MS,
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
        }
    }

    /// Whether the consumer follows the cooperative protocol (KIP-429): the highest
    /// protocol every configured assignor supports (`ConsumerCoordinator`'s constructor),
    /// so only when every entry is `CooperativeStickyAssignor`.
    pub fn cooperative(&self) -> bool {
        !self.partition_assignment_strategy.is_empty()
            && self
                .partition_assignment_strategy
                .iter()
                .all(|s| *s == AssignmentStrategy::CooperativeSticky)
    }
}

/// A consumed record (rdkafka's `BorrowedMessage`, owned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Where it was read.
    pub tp: TopicPartition,
    /// Its offset.
    pub offset: Offset,
    /// Key bytes.
    pub key: Option<Bytes>,
    /// Value bytes; `None` is a tombstone.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<(String, Bytes)>,
}

/// The next offset to read per partition after `records` (what a commit of the batch
/// sends: Kafka's committed offset is the next record to read), sorted by partition.
pub fn next_offsets(records: &[ConsumedRecord]) -> Vec<(TopicPartition, Offset)> {
    let mut next: std::collections::BTreeMap<TopicPartition, Offset> = Default::default();
    for r in records {
        let entry = next.entry(r.tp.clone()).or_insert(r.offset + 1);
        *entry = (*entry).max(r.offset + 1);
    }
    next.into_iter().collect()
}

/// Partitions a group consumer is about to give up, handed to the application before the
/// consumer rejoins (what Java's `ConsumerRebalanceListener` is told from
/// `ConsumerCoordinator.onJoinPrepare`): while it is pending the partitions are still
/// assigned and the generation still valid, so the application can commit their offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    /// The partitions given up, sorted: every assigned one under the eager protocol (and
    /// when lost); under the cooperative one (KIP-429), only those the new assignment
    /// moved to another member.
    pub partitions: Vec<TopicPartition>,
    /// `onPartitionsLost` rather than `onPartitionsRevoked`: the member's generation or
    /// member id was already reset (fenced, expired, left on a poll timeout), so a commit
    /// cannot succeed and must not be tried.
    pub lost: bool,
}

/// A group consumer (rdkafka's `BaseConsumer` with `subscribe`).
#[async_trait]
pub trait Consumer: Send {
    /// Subscribes to `topics`; the group assigns partitions with the assignor its members'
    /// `partition.assignment.strategy` lists select (range unless every member lists only
    /// cooperative-sticky).
    ///
    /// # Errors
    /// When the coordinator cannot be reached.
    async fn subscribe(&mut self, topics: &[String]) -> Result<(), ClientError>;

    /// Returns up to `max.poll.records` records, waiting at most `timeout`. Heartbeats,
    /// rebalances and position resets happen inside, as in Kafka's consumer.
    ///
    /// # Errors
    /// Fatal consumer errors (an `auto.offset.reset=none` miss, say).
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumedRecord>, ClientError>;

    /// Commits `offsets` (next offset to read) synchronously for the current generation.
    ///
    /// # Errors
    /// [`ClientError::CommitFailed`] when the group rebalanced; a timeout is ambiguous.
    async fn commit(&mut self, offsets: &[(TopicPartition, Offset)]) -> Result<(), ClientError>;

    /// The partitions currently assigned to this member.
    fn assignment(&self) -> Vec<TopicPartition>;

    /// The group, generation and member id to hand to
    /// [`TransactionalProducer::send_offsets_to_transaction`] (rdkafka's
    /// `Consumer::group_metadata`, KIP-447); `None` outside a stable generation.
    fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        None
    }

    /// Moves the fetch position of an assigned partition to `offset`, dropping records
    /// buffered for it (rdkafka's `seek`).
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when `tp` is not assigned or seeking is not supported.
    fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<(), ClientError> {
        let _ = offset;
        Err(ClientError::Fatal(format!("seek to {tp} is not supported")))
    }

    /// The group's committed offsets of `partitions` (-1 where none), as rdkafka's
    /// `committed_offsets`, asking the coordinator with `require_stable` semantics.
    ///
    /// # Errors
    /// A timeout or the coordinator's error.
    async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
        let _ = partitions;
        Err(ClientError::Fatal(
            "committed offsets are not supported".into(),
        ))
    }

    /// Asks the consumer to hand out revocations (a rebalance listener, Java's
    /// `subscribe(topics, listener)`): from now on, when `poll` has to rejoin while it owns
    /// partitions, that poll returns no records and leaves a [`Revocation`] for
    /// [`take_revocation`](Self::take_revocation), and only the next `poll` revokes and
    /// rejoins. Returns whether the consumer supports it; the default does not, and then
    /// the application learns of a revocation only from [`assignment`](Self::assignment)
    /// after the rejoin.
    fn listen_for_revocations(&mut self) -> bool {
        false
    }

    /// The revocation the last `poll` left, taken (see
    /// [`listen_for_revocations`](Self::listen_for_revocations)).
    fn take_revocation(&mut self) -> Option<Revocation> {
        None
    }

    /// Stops fetching `partitions` (Java's `pause`): `poll` returns none of their records
    /// (fetched ones stay buffered) while the member stays in the group. A rebalance
    /// forgets the pause, as Java's subscription state does.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when pausing is not supported.
    fn pause(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        let _ = partitions;
        Err(ClientError::Fatal("pause is not supported".into()))
    }

    /// Fetches `partitions` again after [`pause`](Self::pause) (Java's `resume`).
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when pausing is not supported.
    fn resume(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        let _ = partitions;
        Err(ClientError::Fatal("resume is not supported".into()))
    }

    /// Leaves the group.
    async fn close(&mut self);
}

/// A consumer's group identity as a transaction needs it to commit offsets (KIP-447): the
/// group coordinator fences a commit whose generation or member id is stale.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// Generation the member joined in.
    pub generation: i32,
    /// Member id the coordinator assigned.
    pub member_id: String,
}

/// How a failed transactional call leaves the producer, as librdkafka classes its
/// `RDKafkaError` (and Java its exceptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnErrorClass {
    /// The call may be retried as is (`rd_kafka_error_is_retriable`): a timeout or a
    /// coordinator that moved. The transaction is still open.
    Retriable,
    /// The transaction must be aborted (`rd_kafka_error_txn_requires_abort`); the producer
    /// stays usable after `abort_transaction`.
    Abortable,
    /// The producer is unusable (`rd_kafka_error_is_fatal`): fenced by a newer instance
    /// (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or misused; it must be recreated.
    Fatal,
}

/// The error of a [`TransactionalProducer`] call: the API, the class and the underlying
/// client error. `is_ambiguous` says whether the operation may still have taken effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{api}: {class:?}: {cause}")]
pub struct TxnError {
    /// The call that failed (`commit_transaction`, ...).
    pub api: &'static str,
    /// How the producer is left.
    pub class: TxnErrorClass,
    /// What happened.
    pub cause: ClientError,
}

impl TxnError {
    /// An error of `class` from `api`.
    pub fn new(api: &'static str, class: TxnErrorClass, cause: ClientError) -> Self {
        Self { api, class, cause }
    }

    /// rdkafka's `is_retriable`.
    pub fn is_retriable(&self) -> bool {
        self.class == TxnErrorClass::Retriable
    }

    /// rdkafka's `txn_requires_abort`.
    pub fn txn_requires_abort(&self) -> bool {
        self.class == TxnErrorClass::Abortable
    }

    /// rdkafka's `is_fatal`.
    pub fn is_fatal(&self) -> bool {
        self.class == TxnErrorClass::Fatal
    }

    /// Whether the operation may have taken effect (a timeout on the way).
    pub fn is_ambiguous(&self) -> bool {
        self.cause.is_ambiguous()
    }
}

/// The transactional producer a component asks its host for (the copier of
/// `transactional-copy`, a Connect source task under `exactly.once.support`, the
/// transactional upstream): what the host's [`TransactionalProducer`] is created with.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnSettings {
    /// `transactional.id` (the copier's is `copier-<i>`).
    pub transactional_id: String,
    /// `transaction.timeout.ms`, ms.
    pub transaction_timeout_ms: u64,
    /// The idempotent producer settings underneath.
    pub producer: ProducerConfig,
}

/// A transactional producer, shaped after rdkafka's `Producer` transaction methods
/// (`init_transactions` ... `abort_transaction`) and Java's `KafkaProducer` (KIP-98,
/// KIP-447). Every record sent between `begin_transaction` and `commit_transaction` is
/// visible to read_committed consumers together with the offsets sent with it, or not at
/// all.
///
/// # Errors
/// Every call fails with a [`TxnError`] whose class says what to do next: retry the call,
/// abort the transaction, or drop the producer.
#[async_trait]
pub trait TransactionalProducer: Send + Sync {
    /// Registers `transactional.id` with its coordinator (InitProducerId): fences older
    /// instances by bumping the epoch, and completes (aborts) a transaction they left open.
    async fn init_transactions(&self, timeout: Duration) -> Result<(), TxnError>;

    /// Starts a transaction (local only, as in Kafka).
    fn begin_transaction(&self) -> Result<(), TxnError>;

    /// Sends one record inside the open transaction, adding its partition to the
    /// transaction first (AddPartitionsToTxn), and waits for its delivery.
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, TxnError>;

    /// Hands one record to the open transaction and runs `callback` with its outcome once
    /// known (Java's `KafkaProducer.send(record, callback)` inside a transaction, as
    /// Streams' `RecordCollectorImpl.send` calls it); an error before the record is queued
    /// goes to `callback` too. A failed delivery leaves the transaction to be aborted
    /// ([`TxnErrorClass::Abortable`], or fatal when fenced). [`Self::commit_transaction`]
    /// delivers every queued record before it commits. The default delivers inside this
    /// call ([`Self::send`]).
    async fn send_with_callback(&self, record: ProducerRecord, callback: TxnDeliveryCallback) {
        callback(self.send(record).await);
    }

    /// Sends every queued record now and waits until each has its outcome (Java's
    /// `KafkaProducer.flush`, which Streams calls before every commit). The default has
    /// nothing queued.
    ///
    /// # Errors
    /// A retriable [`ClientError::Timeout`] when records are still undelivered after
    /// `timeout`; a delivery's own error goes to its callback, not here.
    async fn flush(&self, timeout: Duration) -> Result<(), TxnError> {
        let _ = timeout;
        Ok(())
    }

    /// Adds the consumer's offsets (next offsets to read) to the transaction
    /// (AddOffsetsToTxn, then TxnOffsetCommit with the group's generation and member id).
    /// Offsets below 0 are dropped first, and with none left the call does nothing and
    /// succeeds, sending no request (librdkafka's `rd_kafka_send_offsets_to_transaction`:
    /// "nothing was consumed, this is not an error"; the Java producer skips an empty map
    /// too), so an empty commit is never checked against the group's generation.
    async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, Offset)],
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<(), TxnError>;

    /// Commits the transaction (EndTxn commit). Returns once the coordinator has decided;
    /// read_committed consumers see the records after the markers are written.
    async fn commit_transaction(&self, timeout: Duration) -> Result<(), TxnError>;

    /// Aborts the transaction (EndTxn abort); after an abortable error, the only way on.
    async fn abort_transaction(&self, timeout: Duration) -> Result<(), TxnError>;
}

/// Admin calls (rdkafka's `AdminClient`).
#[async_trait]
pub trait Admin: Send + Sync {
    /// Creates a topic.
    ///
    /// # Errors
    /// `TopicAlreadyExists`, `InvalidReplicationFactor`, or a timeout.
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
    ) -> Result<(), ClientError>;
}

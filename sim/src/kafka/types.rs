//! Wire-level vocabulary of the Kafka model: requests, responses, records and error codes.
//!
//! The shapes follow Kafka's protocol (Produce v9+, Fetch v12+, the classic group protocol)
//! reduced to what eosim's clients need. Error codes are Kafka's own numbers
//! (`clients/.../common/protocol/Errors.java`), so a component sees the same error classes
//! from the model as from a real broker through rdkafka.

use crate::coded::coded_enum;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// A broker's node id (`node.id` in KRaft), 1-based in eosim's worlds.
pub type BrokerId = u32;
/// A position in a partition log. Offsets are not dense: control records take offsets too.
pub type Offset = i64;
/// Simulated time in milliseconds since the start of the run.
pub type TimeMs = u64;

/// A topic name, interned: each distinct name is allocated once per process and never
/// freed, so a `Topic` is a `Copy` pointer and a [`TopicPartition`] costs no allocation to
/// build, clone or drop (the models, clients and histories copy topic-partitions per
/// record).
///
/// It compares, orders, hashes, prints (`Display` and `Debug`) and serializes exactly as
/// the name's `String` did, so maps keyed by it iterate in the same order and histories
/// hash the same. Processes name a handful of topics, so the interned names stay small.
#[derive(Clone, Copy)]
pub struct Topic(&'static str);

impl Topic {
    /// The interned name `name` (interned on first use; later calls find it).
    pub fn new(name: &str) -> Self {
        static INTERNED: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        // A panic while the lock was held cannot leave the set half-written (insert of
        // a leaked `&str` only), so a poisoned set is still good.
        let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = interned.get(name) {
            return Self(known);
        }
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        interned.insert(leaked);
        Self(leaked)
    }

    /// The name.
    pub fn as_str(&self) -> &'static str {
        self.0
    }
}

// Equality, order and hash are the name's; since every name is interned once, two topics
// are equal exactly when their pointers are, which spares the string comparison on the
// equal topics that `TopicPartition` keys mostly compare (the order of different names is
// still the names' order).
impl PartialEq for Topic {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Topic {}

impl PartialOrd for Topic {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Topic {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if self == other {
            std::cmp::Ordering::Equal
        } else {
            self.0.cmp(other.0)
        }
    }
}

impl std::hash::Hash for Topic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl std::ops::Deref for Topic {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl std::borrow::Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        self.0
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.0, f)
    }
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.0, f)
    }
}

/// Any borrowed name: `&str`, `&String`, `&&String`, `&Topic`...
impl<T: AsRef<str> + ?Sized> From<&T> for Topic {
    fn from(name: &T) -> Self {
        Self::new(name.as_ref())
    }
}

impl From<String> for Topic {
    fn from(name: String) -> Self {
        Self::new(&name)
    }
}

impl From<Box<str>> for Topic {
    fn from(name: Box<str>) -> Self {
        Self::new(&name)
    }
}

impl From<std::borrow::Cow<'_, str>> for Topic {
    fn from(name: std::borrow::Cow<'_, str>) -> Self {
        Self::new(&name)
    }
}

impl From<Topic> for String {
    fn from(topic: Topic) -> Self {
        topic.0.to_owned()
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for Topic {
    fn eq(&self, other: &String) -> bool {
        self.0 == other.as_str()
    }
}

impl PartialEq<Topic> for str {
    fn eq(&self, other: &Topic) -> bool {
        self == other.0
    }
}

impl PartialEq<Topic> for &str {
    fn eq(&self, other: &Topic) -> bool {
        *self == other.0
    }
}

impl PartialEq<Topic> for String {
    fn eq(&self, other: &Topic) -> bool {
        self.as_str() == other.0
    }
}

impl Serialize for Topic {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for Topic {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::new(&name))
    }
}

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    /// Topic name (interned: copying it copies a pointer).
    pub topic: Topic,
    /// Partition index, 0-based.
    pub partition: u32,
}

impl TopicPartition {
    /// Builds a topic-partition; `topic` is interned (see [`Topic`]).
    pub fn new(topic: impl Into<Topic>, partition: u32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A record as a producer hands it over (key, value, headers, timestamp).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Record key; `None` is a null key.
    pub key: Option<Bytes>,
    /// Record value; `None` is a tombstone.
    pub value: Option<Bytes>,
    /// Headers in order, duplicates allowed (as in Kafka).
    pub headers: Vec<(String, Bytes)>,
    /// Create time in ms.
    pub timestamp_ms: i64,
}

/// `acks` of a produce request (KIP-679 made `all` the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Acks {
    /// `acks=0`: no response is awaited; the offset is reported as -1.
    None,
    /// `acks=1`: the leader's local append is acknowledged.
    Leader,
    /// `acks=all` / `-1`: acknowledged once the high watermark passes the batch.
    All,
}

/// Idempotence / transaction header of a produced batch (KIP-98). `producer_id = -1` means
/// a plain, non-idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerBatchHeader {
    /// Producer id, or -1.
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence of the batch's first record, or -1.
    pub base_sequence: i32,
    /// Whether the batch belongs to a transaction.
    pub transactional: bool,
}

impl ProducerBatchHeader {
    /// The header of a non-idempotent batch.
    pub const NONE: Self = Self {
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        transactional: false,
    };
}

/// `isolation.level` of a fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Isolation {
    /// Up to the high watermark, aborted records included (Kafka's default).
    #[default]
    ReadUncommitted,
    /// Up to the last stable offset, aborted records filtered by the client.
    ReadCommitted,
}

/// Which kind of coordinator `FindCoordinator` looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorKind {
    /// Group coordinator (`__consumer_offsets`).
    Group,
    /// Transaction coordinator (`__transaction_state`).
    Transaction,
}

/// Per-topic configuration, with Kafka's names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// `min.insync.replicas`. Default 1.
    pub min_insync_replicas: u32,
    /// `unclean.leader.election.enable`. Default false.
    pub unclean_leader_election_enable: bool,
    /// `max.message.bytes` of a record batch. Default 1048588.
    pub max_message_bytes: u32,
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            max_message_bytes: 1_048_588,
        }
    }
}

/// Broker-wide configuration, with Kafka's names. Times in ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// `replica.lag.time.max.ms`. Default 30000 (KIP-537).
    pub replica_lag_time_max_ms: u64,
    /// `broker.session.timeout.ms`: how long the controller waits before fencing a silent
    /// broker and moving its leaderships. Default 9000.
    pub broker_session_timeout_ms: u64,
    /// `group.initial.rebalance.delay.ms`. Default 3000; eosim scenarios often set 0.
    pub group_initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`. Default 6000.
    pub group_min_session_timeout_ms: u64,
    /// `group.max.session.timeout.ms`. Default 1800000.
    pub group_max_session_timeout_ms: u64,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets`, over which
    /// groups are spread by `abs(groupId.hashCode()) % n` (`GroupCoordinator.partitionFor`).
    /// Default 50, Kafka's (`GroupCoordinatorConfig.OFFSETS_TOPIC_PARTITIONS_DEFAULT`).
    pub offsets_topic_num_partitions: u32,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state`, over
    /// which transactional ids are spread the same way (`TransactionStateManager.partitionFor`).
    /// Default 50, Kafka's (`TransactionLogConfig.TRANSACTIONS_TOPIC_PARTITIONS_DEFAULT`).
    pub transaction_state_log_num_partitions: u32,
    /// How long a broker that became leader of a `__consumer_offsets` or
    /// `__transaction_state` partition loads it before its coordinator answers, ms: until
    /// then every group or transaction request for a key of that partition gets
    /// `COORDINATOR_LOAD_IN_PROGRESS` (Kafka 4.x `CoordinatorRuntime`: a coordinator in
    /// state LOADING fails writes with `CoordinatorLoadInProgressException`; the 3.x
    /// `GroupMetadataManager.loadGroupsAndOffsets` / `TransactionStateManager.
    /// loadTransactionsForTxnTopicPartition` likewise). In Kafka the load replays the
    /// partition and takes from milliseconds to minutes with its size; the model takes a
    /// fixed time. A topic's first leaders have nothing to load. Default 0: instant, as
    /// eosim modelled it before (so the catalogue's histories keep it); the loaded state is
    /// the model's own (not rebuilt from the partition's records).
    pub coordinator_load_ms: u64,
    /// `offsets.topic.replication.factor`. Default 3 (capped at the broker count).
    pub offsets_topic_replication_factor: u32,
    /// `auto.create.topics.enable`. Default true in Kafka; eosim defaults to false so that
    /// a typo in a scenario is an error, not a new topic.
    pub auto_create_topics_enable: bool,
    /// Whether a broker rebuilds producer state on failover (true in every real Kafka;
    /// false is the F10 bug switch: a new leader starts with no producer state, so a retried
    /// batch it had replicated is appended again, cases.md F10).
    pub producer_state_survives_failover: bool,
    /// Which transaction protocol the brokers speak (models-reference C.9). Default
    /// [`TxnProtocol::Kip890Part1`] (Kafka 3.6–3.9 with
    /// `transaction.partition.verification.enable=true`).
    pub transaction_protocol: TxnProtocol,
    /// How the group coordinator answers a restarted static member. Default
    /// [`StaticMemberRejoin::Kip814`] (Kafka 3.2+).
    pub static_member_rejoin: StaticMemberRejoin,
    /// `transaction.max.timeout.ms`: InitProducerId with a larger timeout gets
    /// `INVALID_TRANSACTION_TIMEOUT`. Default 900000.
    pub transaction_max_timeout_ms: u64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how often the
    /// coordinator looks for timed-out transactions. Default 10000.
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// `transactional.id.expiration.ms`: idle Empty/Complete* transactional ids are removed.
    /// Default 604800000 (7 days).
    pub transactional_id_expiration_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`. Default 3600000.
    pub transaction_remove_expired_transaction_cleanup_interval_ms: u64,
    /// `producer.id.expiration.ms` (KIP-854): partition producer state without an open
    /// transaction and older than this (by batch timestamps) is dropped. Default 86400000.
    pub producer_id_expiration_ms: u64,
    /// `producer.id.expiration.check.interval.ms`. Default 600000.
    pub producer_id_expiration_check_interval_ms: u64,
    /// `log.message.timestamp.before.max.ms` (KIP-937): a produced record whose
    /// `CreateTime` is more than this behind the leader's clock fails its batch with
    /// `INVALID_TIMESTAMP` (`LogValidator.validateTimestamp`). Default `Long.MAX_VALUE`.
    pub log_message_timestamp_before_max_ms: u64,
    /// `log.message.timestamp.after.max.ms` (KIP-937): the same for a `CreateTime` more
    /// than this ahead of the leader's clock. Default 3600000, Kafka 4.0's
    /// (`ServerLogConfigs.LOG_MESSAGE_TIMESTAMP_AFTER_MAX_MS_DEFAULT` in 4.1.1; 3.6–3.9 had
    /// `Long.MAX_VALUE`): a producer whose clock runs more than an hour ahead has every
    /// send refused.
    pub log_message_timestamp_after_max_ms: u64,
    /// `log.flush.interval.messages`: a replica fsyncs its log once an append leaves this
    /// many messages unflushed (`UnifiedLog.append`). Default `Long.MAX_VALUE`: never.
    pub log_flush_interval_messages: u64,
    /// `log.flush.interval.ms`: the log flusher fsyncs a log this long after its last
    /// flush. `None` (Kafka's default) means `log.flush.scheduler.interval.ms`.
    pub log_flush_interval_ms: Option<u64>,
    /// `log.flush.scheduler.interval.ms`: how often the `kafka-log-flusher` task runs
    /// (`LogManager.startup`). Default `Long.MAX_VALUE`: never, so by default Kafka never
    /// fsyncs on its own and only the OS writeback puts data on disk.
    pub log_flush_scheduler_interval_ms: u64,
    /// Which broker speaks the protocol: Apache Kafka (default) or Kafka-on-Pulsar with
    /// its offset scheme and transaction-coordinator switch ([`super::kop`]).
    pub flavour: super::kop::Flavour,
    /// `group.consumer.session.timeout.ms` (KIP-848): a consumer-protocol member silent
    /// for this long is fenced. Default 45000.
    pub group_consumer_session_timeout_ms: u64,
    /// `group.consumer.heartbeat.interval.ms` (KIP-848): the interval the coordinator
    /// tells consumer-protocol members to heartbeat at. Default 5000.
    pub group_consumer_heartbeat_interval_ms: u64,
    /// KIP-848 partition-epoch bookkeeping. Default [`PartitionEpochBookkeeping::Kafka16147`].
    pub kip848_partition_epochs: PartitionEpochBookkeeping,
}

/// Kafka's `Long.MAX_VALUE`, the "never" of the `log.flush.*` settings.
pub const LONG_MAX_VALUE: u64 = i64::MAX as u64;

/// The transaction protocol generation (models-reference C.9, KIP-890).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TxnProtocol {
    /// Before KIP-890 (Kafka ≤ 3.5, or `transaction.partition.verification.enable=false`):
    /// a transactional produce from a producer with no open transaction on the partition
    /// opens one there, whatever the coordinator knows. A produce delayed past its
    /// transaction's abort marker hangs the partition (LSO stuck); one delayed into the next
    /// transaction of the same epoch joins it (cases.md F8).
    PreKip890,
    /// KIP-890 part 1 (3.6+): such a produce is checked with the coordinator
    /// (`AddPartitionsToTxn` `verifyOnly`) and rejected with `INVALID_TXN_STATE` unless the
    /// partition is in the producer's ongoing transaction of that epoch. F8(a) is fixed,
    /// F8(b) is not (same epoch, partition legitimately in the next transaction).
    #[default]
    Kip890Part1,
    /// Transaction version 2 (KIP-890 part 2, Kafka 4.0): part 1, plus EndTxn bumps the
    /// epoch of every transaction (markers carry the new epoch; the EndTxn answer is
    /// [`Response::EndTxnV5`]), and the partition leader adds a partition to the
    /// transaction implicitly on its first transactional produce. A late produce or EndTxn
    /// of an earlier transaction carries an older epoch and is fenced.
    Tv2,
}

/// What the coordinator answers a static member (`group.instance.id`) that rejoins with an
/// unknown member id, i.e. after a restart, while the group is Stable (KIP-814,
/// KAFKA-13435).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StaticMemberRejoin {
    /// Before KIP-814 (brokers before 3.2, or clients sending JoinGroup v8 or older):
    /// the member takes its old member id's place and assignment without a rebalance, and
    /// the response names the *old* member id as leader (`GroupCoordinator.
    /// doUnknownJoinGroup`: "always returning the old leader id so that the current leader
    /// won't assume itself as a leader"). A restarted leader so believes it follows, and no
    /// member watches the topics' partition counts any more: partitions added later are
    /// never assigned (KAFKA-13435).
    PreKip814,
    /// KIP-814 (Kafka 3.2+, JoinGroup v9): the response names the new member id as leader,
    /// carries the members and `skip_assignment = true`; the client skips the assignment
    /// but keeps its leader's metadata snapshot (`ConsumerCoordinator.onLeaderElected`), so
    /// it rejoins when a partition count changes.
    #[default]
    Kip814,
}

/// How the KIP-848 coordinator keeps each partition's owner epoch (`ConsumerGroup.
/// currentPartitionEpoch`, which decides whether a target partition is free to assign)
/// when a member's current assignment changes (KAFKA-16147).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PartitionEpochBookkeeping {
    /// Before KAFKA-16147 (Kafka 3.7 before January 2024, apache/kafka PR #15212):
    /// `maybeUpdatePartitionEpoch` replaced the assigned partitions' epochs, then the
    /// pending-revocation partitions' epochs, each only if that set changed. A member
    /// whose partition pending revocation is given back to it (assigned {}, pending {p} →
    /// assigned {p}, pending {}) first records p as assigned, then removes p with the old
    /// pending set: p looks free while the member owns it, and the next member whose target
    /// holds p gets it at once, so two members own p at the same time.
    #[serde(rename = "pre-kafka-16147")]
    PreKafka16147,
    /// The fix (every Kafka release with KIP-848 GA): the old member's assigned and
    /// pending partitions are removed first, then the new member's added.
    #[default]
    #[serde(rename = "kafka-16147")]
    Kafka16147,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            replica_lag_time_max_ms: 30_000,
            broker_session_timeout_ms: 9_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            offsets_topic_num_partitions: 50,
            transaction_state_log_num_partitions: 50,
            coordinator_load_ms: 0,
            offsets_topic_replication_factor: 3,
            auto_create_topics_enable: false,
            producer_state_survives_failover: true,
            transaction_protocol: TxnProtocol::default(),
            static_member_rejoin: StaticMemberRejoin::default(),
            transaction_max_timeout_ms: 900_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transactional_id_expiration_ms: 604_800_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            producer_id_expiration_ms: 86_400_000,
            producer_id_expiration_check_interval_ms: 600_000,
            log_message_timestamp_before_max_ms: LONG_MAX_VALUE,
            log_message_timestamp_after_max_ms: 3_600_000,
            log_flush_interval_messages: LONG_MAX_VALUE,
            log_flush_interval_ms: None,
            log_flush_scheduler_interval_ms: LONG_MAX_VALUE,
            flavour: super::kop::Flavour::Kafka,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            kip848_partition_epochs: PartitionEpochBookkeeping::Kafka16147,
        }
    }
}

coded_enum! {
    /// Kafka protocol error codes the model returns (`Errors.java`); `code()` gives the
    /// number.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[allow(missing_docs)]
    pub enum KafkaError: i16 {
        OffsetOutOfRange = 1,
        CorruptMessage = 2,
        UnknownTopicOrPartition = 3,
        LeaderNotAvailable = 5,
        NotLeaderOrFollower = 6,
        RequestTimedOut = 7,
        MessageTooLarge = 10,
        /// A record's `CreateTime` outside the leader's `log.message.timestamp.before.max.ms` /
        /// `after.max.ms` window (32); not retriable.
        InvalidTimestamp = 32,
        CoordinatorLoadInProgress = 14,
        CoordinatorNotAvailable = 15,
        NotCoordinator = 16,
        NotEnoughReplicas = 19,
        NotEnoughReplicasAfterAppend = 20,
        IllegalGeneration = 22,
        InconsistentGroupProtocol = 23,
        UnknownMemberId = 25,
        InvalidSessionTimeout = 26,
        RebalanceInProgress = 27,
        TopicAlreadyExists = 36,
        InvalidPartitions = 37,
        InvalidReplicationFactor = 38,
        OutOfOrderSequenceNumber = 45,
        DuplicateSequenceNumber = 46,
        InvalidProducerEpoch = 47,
        InvalidTxnState = 48,
        InvalidProducerIdMapping = 49,
        InvalidTransactionTimeout = 50,
        ConcurrentTransactions = 51,
        TransactionCoordinatorFenced = 52,
        ProducerFenced = 90,
        UnknownProducerId = 59,
        FencedLeaderEpoch = 74,
        UnknownLeaderEpoch = 75,
        MemberIdRequired = 79,
        FencedInstanceId = 82,
        TransactionAbortable = 120,
        UnstableOffsetCommit = 88,
        /// KIP-848: a `ConsumerGroupHeartbeat` with a non-zero epoch to a group that does not
        /// exist, or any group request to a group of the other protocol (69).
        GroupIdNotFound = 69,
        /// A request the coordinator refuses as malformed or unsupported by the model (42).
        InvalidRequest = 42,
        /// KIP-848: the member's epoch is ahead of the coordinator's, or behind it in a way no
        /// lost response explains; the member must give up its partitions and rejoin (110).
        FencedMemberEpoch = 110,
        /// KIP-848: `group.remote.assignor` names an assignor the broker does not have (112).
        UnsupportedAssignor = 112,
        /// KIP-848: an OffsetCommit whose member epoch is not the member's current one (113).
        StaleMemberEpoch = 113,
    }
}

impl KafkaError {
    /// The error with Kafka's numeric `code`, if the model knows it (the inverse of
    /// [`KafkaError::code`]).
    pub fn from_code(code: i16) -> Option<Self> {
        Self::ALL.iter().copied().find(|e| e.code() == code)
    }

    /// Whether Kafka marks the error retriable (`RetriableException` subclasses).
    pub fn is_retriable(self) -> bool {
        use KafkaError::*;
        matches!(
            self,
            CorruptMessage
                | UnknownTopicOrPartition
                | LeaderNotAvailable
                | NotLeaderOrFollower
                | RequestTimedOut
                | CoordinatorLoadInProgress
                | CoordinatorNotAvailable
                | NotCoordinator
                | NotEnoughReplicas
                | NotEnoughReplicasAfterAppend
                | ConcurrentTransactions
                | UnstableOffsetCommit
                | FencedLeaderEpoch
                | UnknownLeaderEpoch
        )
    }
}

impl std::fmt::Display for KafkaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}({})", self, self.code())
    }
}

/// A record as a fetch returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchedRecord {
    /// The record's offset in its partition.
    pub offset: Offset,
    /// The record.
    pub record: Record,
    /// Producer id of its batch (-1 for plain batches), so a read_committed client can
    /// filter aborted transactions.
    pub producer_id: i64,
    /// Whether its batch was transactional.
    pub transactional: bool,
    /// `partitionLeaderEpoch` of its batch: the epoch of the leader that appended it, which
    /// a consumer keeps as its position's epoch to detect log truncation (KIP-320).
    pub leader_epoch: i32,
}

/// An aborted transaction as listed in a read_committed fetch response: Kafka's transaction
/// index entry (`AbortedTxn`: producer id, first offset, last offset).
///
/// Exact client-side filtering: a fetched record with `transactional == true` is aborted
/// iff some entry has its `producer_id` and `first_offset <= offset < last_offset`.
/// Transactions of one producer id never overlap on a partition, and every data record of
/// an aborted transaction lies in that range (the ABORT marker at `last_offset` closes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    /// Producer id of the aborted transaction.
    pub producer_id: i64,
    /// Offset of its first record in this partition.
    pub first_offset: Offset,
    /// Offset of its ABORT control record (the transaction's last offset here).
    pub last_offset: Offset,
}

/// Per-partition part of a fetch response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchPartition {
    /// Error for this partition, if any (records empty then).
    pub error: Option<KafkaError>,
    /// High watermark as the leader knows it.
    pub high_watermark: Offset,
    /// Last stable offset.
    pub last_stable_offset: Offset,
    /// Log start offset.
    pub log_start_offset: Offset,
    /// Records at or after the requested offset (control records excluded, but their
    /// offsets are skipped: `next_fetch_offset` says where to continue).
    pub records: Vec<FetchedRecord>,
    /// Aborted transactions overlapping the returned range (read_committed only).
    pub aborted: Vec<AbortedTxn>,
    /// Where the next fetch of this partition should start (past control records too).
    pub next_fetch_offset: Offset,
}

/// What a read_committed client keeps of fetched records: drops the transactional records
/// of aborted transactions, a record whose producer id has an aborted entry with
/// `first_offset ≤ offset < last_offset` (the ABORT marker's offset), as Java's
/// `CompletedFetch` (`clients/.../consumer/internals/CompletedFetch.java`) does with the
/// markers themselves. Shared by the simulated consumer and the model-versus-real suites.
pub fn drop_aborted(records: Vec<FetchedRecord>, aborted: &[AbortedTxn]) -> Vec<FetchedRecord> {
    records
        .into_iter()
        .filter(|r| {
            !(r.transactional
                && aborted.iter().any(|a| {
                    a.producer_id == r.producer_id
                        && a.first_offset <= r.offset
                        && r.offset < a.last_offset
                }))
        })
        .collect()
}

/// Partition metadata as `Metadata` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMetadata {
    /// Partition index.
    pub partition: u32,
    /// Current leader, `None` while offline.
    pub leader: Option<BrokerId>,
    /// Current leader epoch.
    pub leader_epoch: i32,
    /// Replica assignment in preference order.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
}

/// `ListOffsets` target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffsetSpec {
    /// Log start offset.
    Earliest,
    /// High watermark (read_uncommitted) or LSO (read_committed).
    Latest(Isolation),
}

/// The assignor names a JoinGroup offers and the subscription metadata it carries, which
/// the classic group coordinator stores and relays to the leader without reading it
/// (Kafka's `JoinGroupRequestProtocol` entries, each with a `ConsumerProtocolSubscription`
/// as its metadata; the consumer puts the same subscription under every name).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GroupProtocols {
    /// Assignor names (`ConsumerPartitionAssignor.name()`: `range`, `cooperative-sticky`,
    /// Streams' `stream`), most preferred first. The coordinator picks one every member
    /// offers (`ClassicGroup.selectProtocol`); none in common is
    /// INCONSISTENT_GROUP_PROTOCOL.
    pub names: Vec<String>,
    /// What the member owns as it joins.
    pub owned: OwnedPartitions,
}

impl GroupProtocols {
    /// `names`, owning nothing, outside a generation (a first join, or an eager one).
    pub fn offering(names: &[&str]) -> Self {
        Self {
            names: names.iter().map(|n| n.to_string()).collect(),
            owned: OwnedPartitions {
                partitions: Vec::new(),
                generation: -1,
            },
        }
    }
}

/// The ownership part of a `ConsumerProtocolSubscription`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OwnedPartitions {
    /// `ownedPartitions` (subscription v1, KIP-429): the partitions the member still holds
    /// as it joins, sorted; always empty under the eager protocol, which revokes first.
    pub partitions: Vec<TopicPartition>,
    /// `generationId` (subscription v2, KIP-792): the generation the member last joined,
    /// -1 for none. The sticky assignors trust only the owners of the highest one.
    pub generation: i32,
}

/// `ConsumerGroupHeartbeat`'s fields (KIP-848, `ConsumerGroupHeartbeatRequest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerGroupHeartbeatRequest {
    /// `group.id`.
    pub group_id: String,
    /// Empty to join as a new member (the coordinator names it).
    pub member_id: String,
    /// 0 to join, -1 to leave, -2 for a static member's leave; else the member's epoch.
    pub member_epoch: i32,
    /// `group.instance.id`: refused by the model (no KIP-848 static membership here).
    pub instance_id: Option<String>,
    /// The member's `max.poll.interval.ms`: how long it may take to revoke, ms.
    pub rebalance_timeout_ms: u64,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// `group.remote.assignor` (`uniform` or `range`); `None`: the broker's default.
    pub server_assignor: Option<String>,
    /// The partitions the member owns now (`TopicPartitions`): the acknowledgement of a
    /// revocation is their absence.
    pub owned: Vec<TopicPartition>,
}

/// A request to a broker. Each variant names the Kafka API it stands for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Request {
    /// `Metadata`: every topic when `topics` is `None`.
    Metadata { topics: Option<Vec<String>> },
    /// `CreateTopics` (admin).
    CreateTopic {
        name: String,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
    },
    /// `Produce` of one batch to one partition.
    Produce {
        tp: TopicPartition,
        acks: Acks,
        timeout_ms: u64,
        header: ProducerBatchHeader,
        records: Vec<Record>,
    },
    /// `Fetch` from a consumer. `current_leader_epochs` holds the `currentLeaderEpoch` the
    /// client knows for some of the partitions (KIP-320); a partition not listed is fetched
    /// without the check (Kafka's -1). The broker holds it up to `max_wait_ms`
    /// (`fetch.max.wait.ms`) until `min_bytes` (`fetch.min.bytes`) are readable; 0 answers
    /// at once.
    Fetch {
        isolation: Isolation,
        partitions: Vec<(TopicPartition, Offset)>,
        max_bytes: u32,
        partition_max_bytes: u32,
        min_bytes: u32,
        max_wait_ms: u64,
        current_leader_epochs: Vec<(TopicPartition, i32)>,
    },
    /// `OffsetsForLeaderEpoch` from a consumer validating its position (KIP-320): the end
    /// offset of `leader_epoch` in the leader's log, asked of the leader of
    /// `current_leader_epoch`.
    OffsetsForLeaderEpoch {
        tp: TopicPartition,
        current_leader_epoch: i32,
        leader_epoch: i32,
    },
    /// `ListOffsets`.
    ListOffsets {
        tp: TopicPartition,
        spec: OffsetSpec,
    },
    /// `DeleteRecords` (KIP-107) from a client's admin (Kafka Streams purging a repartition
    /// topic, `TaskManager.maybePurgeCommittedRecords`), asked of the leader of `tp`: its
    /// log start offset rises to `before`.
    DeleteRecords { tp: TopicPartition, before: Offset },
    /// `FindCoordinator`.
    FindCoordinator { key: String, kind: CoordinatorKind },
    /// `JoinGroup` (classic protocol; the leader client computes the assignment with the
    /// assignor the coordinator selected from the members' `protocols`).
    JoinGroup {
        group_id: String,
        member_id: String,
        /// `group.instance.id` (KIP-345, JoinGroup v5+): `Some` makes the member static.
        group_instance_id: Option<String>,
        session_timeout_ms: u64,
        rebalance_timeout_ms: u64,
        topics: Vec<String>,
        protocols: GroupProtocols,
    },
    /// `SyncGroup`; the leader sends the assignment, followers an empty map.
    SyncGroup {
        group_id: String,
        generation: i32,
        member_id: String,
        assignments: BTreeMap<String, Vec<TopicPartition>>,
    },
    /// `Heartbeat`.
    Heartbeat {
        group_id: String,
        generation: i32,
        member_id: String,
    },
    /// `LeaveGroup`.
    LeaveGroup { group_id: String, member_id: String },
    /// `OffsetCommit`; generation -1 and empty member id for a simple (admin) commit.
    OffsetCommit {
        group_id: String,
        generation: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// `OffsetFetch`.
    OffsetFetch {
        group_id: String,
        partitions: Vec<TopicPartition>,
    },
    /// `ConsumerGroupHeartbeat` (KIP-848, the consumer rebalance protocol): joins with
    /// `member_epoch` 0 (and an empty `member_id`: the coordinator names the member),
    /// heartbeats and acknowledges with the current epoch and what the member owns, leaves
    /// with -1 (-2 for a static member). The model's client always sends the full request
    /// (Kafka's client sends unchanged fields as null; the coordinator treats a full
    /// request the same way). `group::consumer_protocol` has the coordinator's side.
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    /// `InitProducerId` (KIP-98, KIP-360): a new producer id, or with a `transactional_id`
    /// the id of that transactional id with its epoch bumped (fencing older instances).
    /// `producer_id`/`producer_epoch` are -1 on first init, the current ones on a re-init.
    InitProducerId {
        transactional_id: Option<String>,
        transaction_timeout_ms: u64,
        producer_id: i64,
        producer_epoch: i16,
    },
    /// `AddPartitionsToTxn` (to the transaction coordinator).
    AddPartitionsToTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<TopicPartition>,
    },
    /// `AddOffsetsToTxn`: adds the group's `__consumer_offsets` partition to the transaction.
    AddOffsetsToTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        group_id: String,
    },
    /// `TxnOffsetCommit` (to the group coordinator), with the consumer's generation and member
    /// id (KIP-447) so a zombie's commit is fenced.
    TxnOffsetCommit {
        transactional_id: String,
        group_id: String,
        producer_id: i64,
        producer_epoch: i16,
        generation: i32,
        member_id: String,
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// `EndTxn`: commit (`commit = true`) or abort.
    EndTxn {
        transactional_id: String,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    },
    /// `OffsetFetch` with `require_stable = true` (KIP-447; Java consumers in read_committed):
    /// `UNSTABLE_OFFSET_COMMIT` (88, retriable) while any asked partition has transactional
    /// offsets pending; otherwise as [`Request::OffsetFetch`].
    OffsetFetchStable {
        group_id: String,
        partitions: Vec<TopicPartition>,
    },
}

impl Request {
    /// The coordinator a request is for: `(transactional id, Transaction)` for
    /// InitProducerId with an id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn;
    /// `(group id, Group)` for the six group requests, TxnOffsetCommit and
    /// OffsetFetchStable (KIP-447); `None` for the rest (a non-transactional
    /// InitProducerId included).
    pub fn coordinator_key(&self) -> Option<(&str, CoordinatorKind)> {
        match self {
            Request::JoinGroup { group_id, .. }
            | Request::SyncGroup { group_id, .. }
            | Request::Heartbeat { group_id, .. }
            | Request::LeaveGroup { group_id, .. }
            | Request::OffsetCommit { group_id, .. }
            | Request::OffsetFetch { group_id, .. }
            | Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest { group_id, .. })
            | Request::OffsetFetchStable { group_id, .. }
            | Request::TxnOffsetCommit { group_id, .. } => Some((group_id, CoordinatorKind::Group)),
            Request::InitProducerId {
                transactional_id: Some(t),
                ..
            }
            | Request::AddPartitionsToTxn {
                transactional_id: t,
                ..
            }
            | Request::AddOffsetsToTxn {
                transactional_id: t,
                ..
            }
            | Request::EndTxn {
                transactional_id: t,
                ..
            } => Some((t, CoordinatorKind::Transaction)),
            _ => None,
        }
    }
}

/// A broker's answer. `Error` is a request-level error; per-partition errors live inside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Response {
    Metadata {
        brokers: Vec<BrokerId>,
        topics: BTreeMap<String, Vec<PartitionMetadata>>,
    },
    CreateTopic,
    /// Base offset of the appended (or, for a duplicate, the original) batch; -1 for acks=0.
    Produce {
        base_offset: Offset,
        log_append_time_ms: i64,
    },
    Fetch {
        partitions: Vec<(TopicPartition, FetchPartition)>,
    },
    ListOffsets {
        offset: Offset,
    },
    /// `DeleteRecords`: the partition's low watermark (log start offset) after it.
    DeleteRecords {
        low_watermark: Offset,
    },
    /// `OffsetsForLeaderEpoch`: the largest epoch ≤ the requested one the leader knows and
    /// where it ends; both -1 (`UNDEFINED_EPOCH`, `UNDEFINED_EPOCH_OFFSET`) when the leader
    /// knows none.
    OffsetsForLeaderEpoch {
        leader_epoch: i32,
        end_offset: Offset,
    },
    FindCoordinator {
        broker: BrokerId,
    },
    JoinGroup {
        generation: i32,
        member_id: String,
        leader: String,
        /// The assignor the coordinator selected (`protocolName`), for every member.
        protocol: String,
        /// Members and the topics they subscribe to; filled for the leader only.
        members: BTreeMap<String, Vec<String>>,
        /// Members' owned partitions as their JoinGroup carried them; leader only.
        owned: BTreeMap<String, OwnedPartitions>,
        /// `SkipAssignment` (KIP-814, JoinGroup v9): a static leader that rejoined a Stable
        /// group is told it leads, gets the members, and must not assign (the group keeps
        /// its assignment), but watches metadata as a leader does.
        skip_assignment: bool,
    },
    /// `JoinGroup` answered with `MEMBER_ID_REQUIRED` (79, KIP-394): the client rejoins with
    /// the member id the coordinator assigned.
    MemberIdRequired {
        member_id: String,
    },
    SyncGroup {
        assignment: Vec<TopicPartition>,
    },
    /// `ConsumerGroupHeartbeat` (KIP-848): the member's id and epoch (-1 after a leave),
    /// how long to wait before the next heartbeat (ms), and the partitions the member may
    /// own now (its current assignment, not the target: partitions still owned by their
    /// previous owners are withheld).
    ConsumerGroupHeartbeat {
        member_id: String,
        member_epoch: i32,
        heartbeat_interval_ms: u64,
        assignment: Vec<TopicPartition>,
    },
    Heartbeat,
    LeaveGroup,
    OffsetCommit,
    /// Committed offsets; -1 where none.
    OffsetFetch {
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// The producer id and epoch to use.
    InitProducerId {
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Per-partition result of `AddPartitionsToTxn` (`None` = added).
    AddPartitionsToTxn {
        results: Vec<(TopicPartition, Option<KafkaError>)>,
    },
    AddOffsetsToTxn,
    /// Per-partition result of `TxnOffsetCommit` (`None` = pending until EndTxn).
    TxnOffsetCommit {
        results: Vec<(TopicPartition, Option<KafkaError>)>,
    },
    EndTxn,
    /// `EndTxn` v5 answer under transaction version 2 (KIP-890 part 2): the producer id and
    /// the bumped epoch the producer must use from its next transaction on (sequences
    /// restart at 0 with a new epoch).
    EndTxnV5 {
        producer_id: i64,
        producer_epoch: i16,
    },
    Error(KafkaError),
    /// No response: the broker closed the connection (KoP answers a transaction request
    /// with its coordinator disabled this way, [`super::kop`]). `reason` is what the broker
    /// logged; the client only sees the connection go.
    ConnectionClosed {
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::{KafkaError, Topic};
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    #[test]
    fn topics_compare_order_and_hash_as_their_names() {
        let names = [
            "events",
            "out",
            "__consumer_offsets",
            "",
            "events-2",
            "b",
            "a",
        ];
        let hash = |h: &dyn Fn(&mut DefaultHasher)| {
            let mut hasher = DefaultHasher::new();
            h(&mut hasher);
            hasher.finish()
        };
        for a in names {
            for b in names {
                let (ta, tb) = (Topic::new(a), Topic::new(&String::from(b)));
                assert_eq!(ta == tb, a == b, "{a} == {b}");
                assert_eq!(ta.cmp(&tb), a.cmp(b), "{a} cmp {b}");
                assert_eq!(ta.partial_cmp(&tb), a.partial_cmp(b), "{a} partial_cmp {b}");
            }
            assert_eq!(
                hash(&|h| Topic::new(a).hash(h)),
                hash(&|h| a.hash(h)),
                "{a}"
            );
        }
    }

    #[test]
    fn every_known_error_code_maps_back_to_its_error_and_codes_are_distinct() {
        for &e in KafkaError::ALL {
            assert_eq!(KafkaError::from_code(e.code()), Some(e), "{e}");
        }
        let mut codes: Vec<i16> = KafkaError::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), KafkaError::ALL.len());
        assert_eq!(KafkaError::from_code(0), None);
    }
}

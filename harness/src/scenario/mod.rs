//! Scenario files (TOML): which pipeline runs on which cluster, under which workload and
//! faults, and which delivery claim the checkers hold it to.
//!
//! ```toml
//! name = "alo-commit-after-acks-all"
//! pipeline = "kafka-consume"          # the component under test
//! claim = "at-least-once"
//!
//! [cluster]
//! brokers = 3
//!
//! [topic]
//! name = "events"
//! partitions = 3
//! replication_factor = 3
//! min_insync_replicas = 2
//!
//! [workload]
//! records = 300
//! commit = "after-processing"
//!
//! [faults]
//! swarm = { kinds = ["kill", "pause", "partition"] }
//! ```
//!
//! Every key is checked: an unknown key, a wrong type or a missing value is a
//! [`ScenarioError`] naming the file, the key path and what was expected. So is a section
//! the pipeline does not read (`[sink]` in a `transactional-copy` scenario): each
//! pipeline-specific section is allowed only under the pipelines [`SECTION_READERS`] lists
//! for it, so a dead section cannot pass for configuration.

pub mod cdc_events;
pub mod clickhouse;
pub mod consumer;
pub mod doris_sink;
pub mod producer;
pub mod routine_load;
mod streams;

use crate::checker::Claim;
use crate::client::IsolationLevel;
use crate::is_default;
use eosim_sim::kafka::kop::{Flavour, KopConfig};
use eosim_sim::kafka::{
    Acks, ClusterConfig, PartitionEpochBookkeeping, StaticMemberRejoin, TxnProtocol,
};
use eosim_sim::nemesis::{
    is_group, DeleteBefore, DeletePoint, Fault, ScheduledFault, Swarm, NODE_GROUPS,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A scenario file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TOML is malformed or a key has the wrong shape.
    #[error("{file}: key `{key}`: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Dotted key path (`faults.schedule[2].at_ms`), or `<root>`.
        key: String,
        /// What was wrong and what was expected.
        message: String,
    },
}

/// The component under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pipeline {
    /// Producers write ids into a topic; a consumer group copies them into an in-memory
    /// sink, committing offsets before or after the write (`workload.commit`).
    KafkaConsume,
    /// P2: a producer writes change events (Debezium envelopes or flattened rows); Kafka
    /// Connect workers run the JDBC sink into PostgreSQL (`[connect]`, `[connector]`,
    /// `[postgres]`, `[cdc]`).
    ConnectJdbc,
    /// The ClickHouse exactly-once sink of P1 (`[sink]`, see [`clickhouse`]).
    ClickhouseSink,
    /// Producers write ids into the input topic (`[topic]`); copier processes (the
    /// `consumers`) read it with read_committed and copy each record into the output topic
    /// inside a transaction together with their input offsets (`[copy]`).
    TransactionalCopy,
    /// A Kafka Streams-style processor (`streams-i` nodes) counting input records per key
    /// in tumbling windows, with state stores, changelogs and `processing.guarantee`
    /// (`[streams]`).
    StreamsCount,
    /// P4: a producer writes the seed's clicklog JSON records; a Doris Routine Load job
    /// (`doris-fe`, `doris-be`) loads them into `clicklog` (`[routine_load]`, see
    /// [`routine_load`]).
    RoutineLoad,
    /// P4: a producer writes the seed's clicklog JSON records; Kafka Connect workers run
    /// the Doris Kafka connector into `db.clicklog` on `doris-fe` / `doris-be`
    /// (`[connect]`, `[connector]`, `[doris]`, see [`crate::sinks::doris`]).
    DorisSink,
    /// A source database's change log (`[source]`) read by Kafka Connect workers running
    /// a Debezium PostgreSQL source connector into the scenario's topic, at least once or
    /// under KIP-618's exactly-once source support (`[connect]`, `[connector]`, see
    /// [`crate::connect::source_config`]).
    ConnectSource,
}

impl Pipeline {
    /// The kebab-case name, as in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Pipeline::KafkaConsume => "kafka-consume",
            Pipeline::ConnectJdbc => "connect-jdbc",
            Pipeline::ClickhouseSink => "clickhouse-sink",
            Pipeline::TransactionalCopy => "transactional-copy",
            Pipeline::StreamsCount => "streams-count",
            Pipeline::RoutineLoad => "routine-load",
            Pipeline::DorisSink => "doris-sink",
            Pipeline::ConnectSource => "connect-source",
        }
    }

    /// Whether the pipeline's target is a record sink judged by `SinkChecker` (a final
    /// `SinkState`); change-data pipelines are judged by `CdcChecker` and Streams
    /// aggregates by `StreamsChecker` instead.
    pub fn has_record_sink(self) -> bool {
        !matches!(
            self,
            Pipeline::ConnectJdbc | Pipeline::StreamsCount | Pipeline::ConnectSource
        )
    }
}

/// `[copy]`: the transactional consume-transform-produce copy (pipeline
/// `transactional-copy`).
///
/// ## Default values
/// `output_topic = "output"`, `records_per_transaction_max = 10`,
/// `transaction_timeout_ms = 10000` (Kafka Streams' EOS default), `rewind_on_abort = true`,
/// `abort_transactions = []`, `process_ms = 0`, `buggify_produce_delay_probability = 0`,
/// `buggify_end_txn_delay_probability = 0`, `buggify_delay_ms = 0`, `group.protocol =
/// "classic"`, `isolation.level = "read_committed"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CopySpec {
    /// Output topic; same partition count and replication as `[topic]`.
    pub output_topic: String,
    /// Records copied per transaction at most (the copiers' `max.poll.records`).
    pub records_per_transaction_max: usize,
    /// The copiers' `transaction.timeout.ms`.
    pub transaction_timeout_ms: u64,
    /// After an abort, seek back to the group's committed offsets (the right behaviour);
    /// `false` is the F9 bug switch: the consumer goes on past the aborted input.
    pub rewind_on_abort: bool,
    /// Transactions each copier aborts on purpose (an injected produce error), by their
    /// 0-based number within the copier process.
    pub abort_transactions: Vec<u64>,
    /// Time the transform takes per record before it is sent, ms: a copier spends it
    /// inside its open transaction.
    pub process_ms: u64,
    /// Probability that a transactional Produce is held in the network `buggify_delay_ms`
    /// (it arrives after the copier gave up on it: cases.md F8).
    pub buggify_produce_delay_probability: f64,
    /// Probability that an EndTxn is held in the network `buggify_delay_ms` (the copier
    /// retries it and moves on; the late one arrives during the next transaction:
    /// KAFKA-17754).
    pub buggify_end_txn_delay_probability: f64,
    /// How long a held request waits, ms.
    pub buggify_delay_ms: u64,
    /// `group.protocol` of the copiers' consumers: `classic` (default) or `consumer`
    /// (KIP-848: the coordinator assigns, a copier revokes a partition only between
    /// transactions, and the offsets it sends to a transaction carry its member epoch).
    #[serde(
        rename = "group.protocol",
        skip_serializing_if = "consumer::is_classic"
    )]
    pub group_protocol: crate::client::GroupProtocol,
    /// `isolation.level` of the copiers' consumers: `"read_committed"` (the default here,
    /// unlike the Java consumer's `read_uncommitted`: KIP-98's consume-transform-produce
    /// loop and Kafka Streams under exactly_once_v2 set it, and Kafka's design docs list it
    /// among the three requirements of exactly-once processing, KAFKA-17671) or
    /// `"read_uncommitted"`, with which a copier also copies the records of aborted
    /// upstream transactions (`[workload] "transactional.id"`).
    #[serde(
        rename = "isolation.level",
        skip_serializing_if = "consumer::is_read_committed"
    )]
    pub isolation_level: IsolationLevel,
}

impl Default for CopySpec {
    fn default() -> Self {
        Self {
            output_topic: "output".into(),
            records_per_transaction_max: 10,
            transaction_timeout_ms: 10_000,
            rewind_on_abort: true,
            abort_transactions: Vec::new(),
            process_ms: 0,
            buggify_produce_delay_probability: 0.0,
            buggify_end_txn_delay_probability: 0.0,
            buggify_delay_ms: 0,
            group_protocol: crate::client::GroupProtocol::Classic,
            isolation_level: IsolationLevel::ReadCommitted,
        }
    }
}

/// When the consumer commits relative to writing a batch into the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CommitMode {
    /// Write, then commit: a crash replays (at-least-once).
    #[default]
    AfterProcessing,
    /// Commit, then write: a crash skips (at-most-once).
    BeforeProcessing,
}

/// `[cluster]`: brokers and their configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Number of brokers. Default 3.
    #[serde(default = "default_brokers")]
    pub brokers: u32,
    /// `replica.lag.time.max.ms`. Default 30000.
    #[serde(default = "default_replica_lag")]
    pub replica_lag_time_max_ms: u64,
    /// `broker.session.timeout.ms`. Default 9000.
    #[serde(default = "default_broker_session")]
    pub broker_session_timeout_ms: u64,
    /// `group.initial.rebalance.delay.ms`. Default 0 in eosim (3000 in Kafka) to keep runs
    /// short; set it to test the delay. Real brokers are started with it too.
    #[serde(default)]
    pub group_initial_rebalance_delay_ms: u64,
    /// The brokers' transaction protocol (models-reference C.9): `"pre-kip890"`,
    /// `"kip890-part1"` (default; Kafka 3.6–3.9) or `"tv2"` (Kafka 4.0). `pre-kip890` is
    /// the F8 switch: a produce delayed past its transaction's end hangs the partition or
    /// joins the next transaction.
    #[serde(default)]
    pub transaction_protocol: TxnProtocol,
    /// What the group coordinator tells a static member (`[consumer] "group.instance.id"`)
    /// that restarted: `"kip814"` (default; Kafka 3.2+: a restarted leader is told it
    /// leads, skips the assignment and keeps watching partition counts) or `"pre-kip814"`,
    /// the KAFKA-13435 switch: it is told the old member id leads, follows, and partitions
    /// added later are never assigned.
    #[serde(default, skip_serializing_if = "is_default")]
    pub static_member_rejoin: StaticMemberRejoin,
    /// Whether a new leader knows the producer state of what it replicated (every real
    /// Kafka). Default true; false is the F10 switch: a retried batch is appended twice.
    #[serde(default = "default_true")]
    pub producer_state_survives_failover: bool,
    /// `producer.id.expiration.ms` (KIP-854): a producer whose last batch's max timestamp
    /// (the client's wall clock) is older than this is forgotten. Default 86400000 (1 day).
    #[serde(default = "default_producer_id_expiration")]
    pub producer_id_expiration_ms: u64,
    /// `producer.id.expiration.check.interval.ms`: how often brokers look. Default 600000.
    #[serde(default = "default_producer_id_expiration_check")]
    pub producer_id_expiration_check_interval_ms: u64,
    /// `log.flush.interval.messages`: a replica fsyncs its log once an append leaves this
    /// many messages unflushed. Default 9223372036854775807 (`Long.MAX_VALUE`, never): a
    /// machine crash then loses whatever the OS had not yet written back. 1 fsyncs every
    /// append, on the leader and on every follower.
    #[serde(default = "default_log_flush_interval_messages")]
    pub log_flush_interval_messages: u64,
    /// `log.flush.interval.ms`: the log flusher fsyncs a log this long after its last
    /// flush. Default unset (= `log_flush_scheduler_interval_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_flush_interval_ms: Option<u64>,
    /// `log.flush.scheduler.interval.ms`: how often the log flusher runs; it only acts if
    /// this is set. Default 9223372036854775807 (never).
    #[serde(default = "default_log_flush_scheduler_interval")]
    pub log_flush_scheduler_interval_ms: u64,
    /// `log.message.timestamp.before.max.ms` (KIP-937): a record whose `CreateTime` is
    /// further behind the leader's clock fails its batch with `INVALID_TIMESTAMP`, ms.
    /// Default 9223372036854775807 (`Long.MAX_VALUE`, never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_message_timestamp_before_max_ms: Option<u64>,
    /// `log.message.timestamp.after.max.ms` (KIP-937): the same for a `CreateTime` further
    /// ahead, ms. Default 3600000 (Kafka 4.0's; 3.x had `Long.MAX_VALUE`): a producer whose
    /// clock was stepped more than an hour ahead has its sends refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_message_timestamp_after_max_ms: Option<u64>,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets`, which decide
    /// which broker coordinates each group. Default 50 (Kafka's).
    #[serde(default = "default_offsets_topic_num_partitions")]
    pub offsets_topic_num_partitions: u32,
    /// `transaction.state.log.num.partitions`: partitions of `__transaction_state`, which
    /// decide which broker coordinates each transactional id. Default 50 (Kafka's).
    #[serde(default = "default_transaction_state_log_num_partitions")]
    pub transaction_state_log_num_partitions: u32,
    /// How long a new leader of a `__consumer_offsets` / `__transaction_state` partition
    /// loads it, answering `COORDINATOR_LOAD_IN_PROGRESS` meanwhile, ms
    /// (`eosim_sim::kafka::ClusterConfig::coordinator_load_ms`). Not a Kafka setting: the
    /// time Kafka's load takes grows with the partition. Default 0 (instant).
    #[serde(default)]
    pub coordinator_load_ms: u64,
    /// `group.consumer.session.timeout.ms` (KIP-848): a consumer-protocol member
    /// (`[consumer] "group.protocol" = "consumer"`) silent this long is fenced, ms.
    /// Default 45000 (Kafka's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_consumer_session_timeout_ms: Option<u64>,
    /// `group.consumer.heartbeat.interval.ms` (KIP-848): the heartbeat interval the
    /// coordinator gives consumer-protocol members, ms. Default 5000 (Kafka's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_consumer_heartbeat_interval_ms: Option<u64>,
    /// How the KIP-848 coordinator tracks which member owns a partition: `"kafka-16147"`
    /// (default; every release with KIP-848 GA) or `"pre-kafka-16147"`, the KAFKA-16147
    /// switch (Kafka 3.7 before the fix): a partition pending revocation that is given
    /// back to its member loses its owner epoch, and the next member whose target holds
    /// it gets it while the first still consumes it.
    #[serde(default, skip_serializing_if = "is_default")]
    pub kip848_partition_epochs: PartitionEpochBookkeeping,
    /// Which broker speaks the Kafka protocol: `"kafka"` (default) or `"kop"`
    /// (Kafka-on-Pulsar, `eosim_sim::kafka::kop`: offsets from Pulsar entry positions and a
    /// transaction-coordinator switch; everything else as Kafka).
    #[serde(default)]
    pub flavour: FlavourName,
    /// KoP's `kafkaTransactionCoordinatorEnabled` (only with `flavour = "kop"`). Default
    /// false, as in KoP: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
    /// close the connection, so transactional and idempotent producers cannot start.
    #[serde(
        default,
        rename = "kafkaTransactionCoordinatorEnabled",
        skip_serializing_if = "Option::is_none"
    )]
    pub kafka_transaction_coordinator_enabled: Option<bool>,
    /// Pulsar's `brokerEntryMetadataInterceptors` (only with `flavour = "kop"`). Default
    /// `["org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"]`, KoP's
    /// documented setup (offsets from the broker entry index); `[]` gives KoP's pre-2.8
    /// offsets, `ledgerId << 44 | entryId << 12 | batchIndex`.
    #[serde(
        default,
        rename = "brokerEntryMetadataInterceptors",
        skip_serializing_if = "Option::is_none"
    )]
    pub broker_entry_metadata_interceptors: Option<Vec<String>>,
    /// Pulsar's `managedLedgerMaxEntriesPerLedger` (only with `flavour = "kop"`): entries
    /// before a ledger rolls over, which under pre-2.8 offsets jumps by 2^44. Default 50000.
    #[serde(
        default,
        rename = "managedLedgerMaxEntriesPerLedger",
        skip_serializing_if = "Option::is_none"
    )]
    pub managed_ledger_max_entries_per_ledger: Option<u64>,
}

/// `[cluster] flavour`: the broker behind the Kafka protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlavourName {
    /// Apache Kafka.
    #[default]
    Kafka,
    /// Kafka-on-Pulsar (streamnative/kop).
    Kop,
}

/// Pulsar's broker entry metadata interceptors (`org.apache.pulsar.common.intercept`).
const KNOWN_INTERCEPTORS: [&str; 2] = [
    eosim_sim::kafka::kop::APPEND_INDEX_METADATA_INTERCEPTOR,
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor",
];

fn default_log_flush_interval_messages() -> u64 {
    ClusterConfig::default().log_flush_interval_messages
}

fn default_offsets_topic_num_partitions() -> u32 {
    ClusterConfig::default().offsets_topic_num_partitions
}

fn default_transaction_state_log_num_partitions() -> u32 {
    ClusterConfig::default().transaction_state_log_num_partitions
}

fn default_log_flush_scheduler_interval() -> u64 {
    ClusterConfig::default().log_flush_scheduler_interval_ms
}

fn default_producer_id_expiration() -> u64 {
    ClusterConfig::default().producer_id_expiration_ms
}

fn default_producer_id_expiration_check() -> u64 {
    ClusterConfig::default().producer_id_expiration_check_interval_ms
}

fn default_true() -> bool {
    true
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            brokers: default_brokers(),
            replica_lag_time_max_ms: default_replica_lag(),
            broker_session_timeout_ms: default_broker_session(),
            group_initial_rebalance_delay_ms: 0,
            transaction_protocol: TxnProtocol::default(),
            static_member_rejoin: StaticMemberRejoin::default(),
            producer_state_survives_failover: true,
            producer_id_expiration_ms: default_producer_id_expiration(),
            producer_id_expiration_check_interval_ms: default_producer_id_expiration_check(),
            log_flush_interval_messages: default_log_flush_interval_messages(),
            log_flush_interval_ms: None,
            log_flush_scheduler_interval_ms: default_log_flush_scheduler_interval(),
            log_message_timestamp_before_max_ms: None,
            log_message_timestamp_after_max_ms: None,
            offsets_topic_num_partitions: default_offsets_topic_num_partitions(),
            transaction_state_log_num_partitions: default_transaction_state_log_num_partitions(),
            coordinator_load_ms: 0,
            group_consumer_session_timeout_ms: None,
            group_consumer_heartbeat_interval_ms: None,
            kip848_partition_epochs: PartitionEpochBookkeeping::default(),
            flavour: FlavourName::Kafka,
            kafka_transaction_coordinator_enabled: None,
            broker_entry_metadata_interceptors: None,
            managed_ledger_max_entries_per_ledger: None,
        }
    }
}

impl ClusterSpec {
    /// The model's configuration.
    pub fn to_config(&self) -> ClusterConfig {
        let defaults = ClusterConfig::default();
        ClusterConfig {
            replica_lag_time_max_ms: self.replica_lag_time_max_ms,
            broker_session_timeout_ms: self.broker_session_timeout_ms,
            group_initial_rebalance_delay_ms: self.group_initial_rebalance_delay_ms,
            offsets_topic_replication_factor: self.brokers.min(3),
            transaction_protocol: self.transaction_protocol,
            static_member_rejoin: self.static_member_rejoin,
            producer_state_survives_failover: self.producer_state_survives_failover,
            producer_id_expiration_ms: self.producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms: self.producer_id_expiration_check_interval_ms,
            log_flush_interval_messages: self.log_flush_interval_messages,
            log_flush_interval_ms: self.log_flush_interval_ms,
            log_flush_scheduler_interval_ms: self.log_flush_scheduler_interval_ms,
            log_message_timestamp_before_max_ms: (self.log_message_timestamp_before_max_ms)
                .unwrap_or(defaults.log_message_timestamp_before_max_ms),
            log_message_timestamp_after_max_ms: (self.log_message_timestamp_after_max_ms)
                .unwrap_or(defaults.log_message_timestamp_after_max_ms),
            offsets_topic_num_partitions: self.offsets_topic_num_partitions,
            transaction_state_log_num_partitions: self.transaction_state_log_num_partitions,
            coordinator_load_ms: self.coordinator_load_ms,
            flavour: self.flavour(),
            group_consumer_session_timeout_ms: (self.group_consumer_session_timeout_ms)
                .unwrap_or(defaults.group_consumer_session_timeout_ms),
            group_consumer_heartbeat_interval_ms: (self.group_consumer_heartbeat_interval_ms)
                .unwrap_or(defaults.group_consumer_heartbeat_interval_ms),
            kip848_partition_epochs: self.kip848_partition_epochs,
            ..defaults
        }
    }

    /// The model's broker flavour: KoP's defaults where a KoP key is not set.
    pub fn flavour(&self) -> Flavour {
        match self.flavour {
            FlavourName::Kafka => Flavour::Kafka,
            FlavourName::Kop => {
                let d = KopConfig::default();
                Flavour::Kop(KopConfig {
                    kafka_transaction_coordinator_enabled: self
                        .kafka_transaction_coordinator_enabled
                        .unwrap_or(d.kafka_transaction_coordinator_enabled),
                    broker_entry_metadata_interceptors: self
                        .broker_entry_metadata_interceptors
                        .clone()
                        .unwrap_or(d.broker_entry_metadata_interceptors),
                    managed_ledger_max_entries_per_ledger: self
                        .managed_ledger_max_entries_per_ledger
                        .unwrap_or(d.managed_ledger_max_entries_per_ledger),
                })
            }
        }
    }

    /// `Err((key, message))` for a KoP key without `flavour = "kop"` or a bad KoP value.
    fn check_flavour(&self) -> Result<(), (String, String)> {
        let kop_keys = [
            (
                "kafkaTransactionCoordinatorEnabled",
                self.kafka_transaction_coordinator_enabled.is_some(),
            ),
            (
                "brokerEntryMetadataInterceptors",
                self.broker_entry_metadata_interceptors.is_some(),
            ),
            (
                "managedLedgerMaxEntriesPerLedger",
                self.managed_ledger_max_entries_per_ledger.is_some(),
            ),
        ];
        for (key, set) in kop_keys {
            ensure(
                !set || self.flavour == FlavourName::Kop,
                &format!("cluster.{key}"),
                "a Kafka-on-Pulsar setting: expected flavour = \"kop\" in [cluster]".into(),
            )?;
        }
        for name in self.broker_entry_metadata_interceptors.iter().flatten() {
            ensure(
                KNOWN_INTERCEPTORS.contains(&name.as_str()),
                "cluster.brokerEntryMetadataInterceptors",
                format!("unknown interceptor {name:?}; expected one of {KNOWN_INTERCEPTORS:?}"),
            )?;
        }
        ensure(
            self.managed_ledger_max_entries_per_ledger != Some(0),
            "cluster.managedLedgerMaxEntriesPerLedger",
            "expected at least 1, found 0".into(),
        )
    }
}

fn default_brokers() -> u32 {
    3
}
fn default_replica_lag() -> u64 {
    30_000
}
fn default_broker_session() -> u64 {
    9_000
}

/// `[topic]`: the topic the workload writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    /// Topic name. Default `events`.
    #[serde(default = "default_topic")]
    pub name: String,
    /// Partition count. Default 3.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Replication factor. Default 3.
    #[serde(default = "default_replication")]
    pub replication_factor: u32,
    /// `min.insync.replicas`. Default 1 (Kafka's default).
    #[serde(default = "default_min_isr")]
    pub min_insync_replicas: u32,
    /// `unclean.leader.election.enable`. Default false.
    #[serde(default)]
    pub unclean_leader_election_enable: bool,
    /// `max.message.bytes`: the largest record batch the topic takes, bytes; a larger one
    /// is refused with `MESSAGE_TOO_LARGE`. Default 1048588 (Kafka's).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: u32,
}

impl Default for TopicSpec {
    fn default() -> Self {
        Self {
            name: default_topic(),
            partitions: default_partitions(),
            replication_factor: default_replication(),
            min_insync_replicas: default_min_isr(),
            unclean_leader_election_enable: false,
            max_message_bytes: default_max_message_bytes(),
        }
    }
}

impl TopicSpec {
    /// This topic's partitions, 0 to `partitions - 1`.
    pub fn topic_partitions(&self) -> Vec<eosim_sim::kafka::TopicPartition> {
        self.partitions_of(&self.name)
    }

    /// Partitions 0 to `partitions - 1` of `topic`: an output topic laid out as this one
    /// (the copy's and the Streams application's outputs have the input's partitions).
    pub fn partitions_of(&self, topic: &str) -> Vec<eosim_sim::kafka::TopicPartition> {
        (0..self.partitions)
            .map(|p| eosim_sim::kafka::TopicPartition::new(topic.to_string(), p))
            .collect()
    }

    /// The model's (and the admin client's) topic configuration.
    pub fn to_config(&self) -> eosim_sim::kafka::TopicConfig {
        eosim_sim::kafka::TopicConfig {
            min_insync_replicas: self.min_insync_replicas,
            unclean_leader_election_enable: self.unclean_leader_election_enable,
            max_message_bytes: self.max_message_bytes,
        }
    }
}

fn default_max_message_bytes() -> u32 {
    eosim_sim::kafka::TopicConfig::default().max_message_bytes
}

fn default_topic() -> String {
    "events".into()
}
fn default_partitions() -> u32 {
    3
}
fn default_replication() -> u32 {
    3
}
fn default_min_isr() -> u32 {
    1
}

/// `[workload]`: what producers and consumers do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Records to produce in all. Default 300.
    #[serde(default = "default_records")]
    pub records: u64,
    /// Distinct keys (`k0`..). Default 10.
    #[serde(default = "default_keys")]
    pub keys: u32,
    /// Producer processes. Default 1.
    #[serde(default = "default_one")]
    pub producers: u32,
    /// Consumer processes in the sink's group. Default 2.
    #[serde(default = "default_two")]
    pub consumers: u32,
    /// Pause between two sends of one producer, ms. Default 20.
    #[serde(default = "default_produce_interval")]
    pub produce_interval_ms: u64,
    /// When the producers send their first record, ms of simulated time after the start
    /// (`kafka-consume` only: its consumers can join and position first). Default 0.
    #[serde(default)]
    pub produce_start_ms: u64,
    /// Producer `acks`: `"all"`, `"1"` or `"0"`. Default all.
    #[serde(default = "default_acks", with = "acks_serde")]
    pub acks: Acks,
    /// Producer `retries`. Default 5 (Kafka: unbounded, within delivery.timeout.ms).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Producer `request.timeout.ms`. Default 5000.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_ms: u64,
    /// Consumer `session.timeout.ms`. Default 10000.
    #[serde(default = "default_session_timeout")]
    pub session_timeout_ms: u64,
    /// Consumer `max.poll.records`. Default 50.
    #[serde(default = "default_max_poll_records")]
    pub max_poll_records: usize,
    /// When the consumer commits. Default after-processing.
    #[serde(default)]
    pub commit: CommitMode,
    /// Simulated time a sink write takes before it is durable, ms. Default 10. A crash in
    /// this window is what separates at-least-once from at-most-once.
    #[serde(default = "default_sink_write")]
    pub sink_write_ms: u64,
    /// The input producer's `transactional.id` (`ProducerConfig.TRANSACTIONAL_ID_CONFIG`):
    /// set, the upstream producer writes its records in Kafka transactions
    /// ([`crate::upstream`]: in simulation, and on the real tier for `kafka-consume`,
    /// `connect-jdbc` and `clickhouse-sink`); producer `i` of several uses
    /// `<transactional.id>-<i>`. Every pipeline with an input producer takes it
    /// ([`UPSTREAM_TXN_PIPELINES`]: all but `connect-source`, whose input is a database's
    /// change log); under `streams-count` it is the stream topic's producer, not the join's
    /// table producer (`[streams] table_abort_every`). Default unset: not transactional.
    #[serde(
        default,
        rename = "transactional.id",
        skip_serializing_if = "Option::is_none"
    )]
    pub transactional_id: Option<String>,
    /// The transactional producer's `transaction.timeout.ms`, ms. Default 60000 (Kafka's).
    #[serde(
        default,
        rename = "transaction.timeout.ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub transaction_timeout_ms: Option<u64>,
    /// Records per upstream transaction (with `transactional.id`). Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_records: Option<u64>,
    /// Which upstream transactions abort (with `transactional.id`): the run's transaction
    /// number `n` (0-based, in the order the producers begin them) aborts when
    /// `(n + 1) % abort_every == 0`, so 3 aborts every third. 0 aborts none. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_every: Option<u64>,
    /// The input producer's `linger.ms`, ms ([`producer`]). Default unset: 0.
    #[serde(default, rename = "linger.ms", skip_serializing_if = "Option::is_none")]
    pub linger_ms: Option<u64>,
    /// The input producer's `batch.size`, bytes ([`producer`]). Default unset: 16384.
    #[serde(
        default,
        rename = "batch.size",
        skip_serializing_if = "Option::is_none"
    )]
    pub batch_size: Option<u32>,
    /// The input producer's `max.in.flight.requests.per.connection` ([`producer`]).
    /// Default unset: 1.
    #[serde(
        default,
        rename = "max.in.flight.requests.per.connection",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_in_flight_requests_per_connection: Option<u32>,
    /// The input producer's `delivery.timeout.ms`, ms ([`producer`]): how long a record
    /// may take, its retries included, before its send fails. Default unset:
    /// `request_timeout_ms × (retries + 1)` for the retrying producers (`kafka-consume`,
    /// `connect-jdbc`), `linger.ms + request_timeout_ms` for the one-attempt ones.
    #[serde(
        default,
        rename = "delivery.timeout.ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub delivery_timeout_ms: Option<u64>,
    /// The input producer's `metadata.max.age.ms`, ms ([`producer`]): how old the topic's
    /// metadata may get before it is fetched again, so that partitions added to the topic
    /// are written to. Default unset: 300000 (Kafka's).
    #[serde(
        default,
        rename = "metadata.max.age.ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata_max_age_ms: Option<u64>,
    /// The input producer's `enable.idempotence` ([`producer`]). Default unset: the
    /// pipeline's own (false for `kafka-consume`).
    #[serde(
        default,
        rename = "enable.idempotence",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_idempotence: Option<bool>,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        toml::from_str("").expect("every workload key has a default")
    }
}

fn default_records() -> u64 {
    300
}
fn default_keys() -> u32 {
    10
}
fn default_one() -> u32 {
    1
}
fn default_two() -> u32 {
    2
}
fn default_produce_interval() -> u64 {
    20
}
fn default_acks() -> Acks {
    Acks::All
}
fn default_retries() -> u32 {
    5
}
fn default_request_timeout() -> u64 {
    5_000
}
fn default_session_timeout() -> u64 {
    10_000
}
fn default_sink_write() -> u64 {
    10
}
fn default_max_poll_records() -> usize {
    50
}

mod acks_serde {
    use eosim_sim::kafka::Acks;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(acks: &Acks, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match acks {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        })
    }

    /// `acks` as Kafka spells it: the strings "0", "1", "all" ("-1"), or the integers
    /// 0, 1, -1.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Number(i64),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Acks, D::Error> {
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("acks must be \"0\", \"1\" or \"all\" (or 0, 1, -1)")
        })?;
        let text = match raw {
            Raw::Text(text) => text,
            Raw::Number(n) => n.to_string(),
        };
        match text.as_str() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(serde::de::Error::custom(format!(
                "acks must be \"0\", \"1\" or \"all\" (or 0, 1, -1), found \"{other}\""
            ))),
        }
    }
}

/// `[[faults.schedule]]` entries, read as `at_ms` plus a [`Fault`].
///
/// [`ScheduledFault`] flattens the fault into itself and also denies unknown fields, a
/// combination serde does not support (every fault key is then "unknown"); reading each
/// entry as a table, taking `at_ms` out and reading the rest as a `Fault` (which denies
/// unknown keys itself) gives the same strictness, and the `faults.schedule[i]` key path.
mod schedule_serde {
    use eosim_sim::nemesis::{Fault, ScheduledFault};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer};

    struct Entry(ScheduledFault);

    impl<'de> Deserialize<'de> for Entry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let mut table = toml::Table::deserialize(d)?;
            let at_ms = table
                .remove("at_ms")
                .ok_or_else(|| D::Error::missing_field("at_ms"))?;
            let at_ms = u64::deserialize(at_ms).map_err(|e| {
                D::Error::custom(format!("at_ms: {}", super::humanize(e.message())))
            })?;
            let fault = Fault::deserialize(toml::Value::Table(table))
                .map_err(|e| D::Error::custom(super::humanize(e.message())))?;
            Ok(Entry(ScheduledFault { at_ms, fault }))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ScheduledFault>, D::Error> {
        let entries = Vec::<Entry>::deserialize(d)?;
        Ok(entries.into_iter().map(|Entry(fault)| fault).collect())
    }
}

/// `[faults]`: an explicit schedule, a swarm, or both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Faults at fixed times.
    #[serde(default, deserialize_with = "schedule_serde::deserialize")]
    pub schedule: Vec<ScheduledFault>,
    /// Random faults drawn per seed.
    #[serde(default)]
    pub swarm: Option<Swarm>,
    /// When faults stop and the heal-and-drain phase begins, ms. Default 60000.
    #[serde(default = "default_faults_until")]
    pub until_ms: u64,
}

fn default_faults_until() -> u64 {
    60_000
}

/// `[drain]`: the heal-and-drain phase at the end of every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSpec {
    /// How long the pipeline has to catch up after healing, s of simulated time; past it
    /// the verdict is `stalled`. Default 120.
    #[serde(default = "default_drain_time")]
    pub time_s_max: u64,
}

impl Default for DrainSpec {
    fn default() -> Self {
        Self {
            time_s_max: default_drain_time(),
        }
    }
}

fn default_drain_time() -> u64 {
    120
}

/// `[check]`: overrides of what the claim forbids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Anomaly names (kebab-case) forbidden in addition to the claim's.
    #[serde(default)]
    pub forbidden: Vec<String>,
    /// Anomaly names allowed although the claim forbids them.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// The verdict this scenario is expected to reach (`holds`, `violated` or `stalled`), when the
    /// scenario exists to show a known failure. The run reports what it found either way;
    /// the test suite compares.
    #[serde(default)]
    pub expect: Option<String>,
    /// Coverage marks (`kafka:leader-change`, `connect:task-failed`; see
    /// `eosim_sim::marks`) the claim rests on: a run in which one was never hit, in any
    /// seed, is reported as not exercised.
    #[serde(default)]
    pub reached: Vec<String>,
    /// Fault-effect kinds (`messages.delay`) and marks allowed not to act or be reached,
    /// each on purpose (a scenario showing that a fault is harmless when it cannot act).
    #[serde(default)]
    pub not_exercised_allowed: Vec<String>,
    /// With `expect = "stalled"`: text every stalled seed's reason must contain
    /// (`"kafkaTransactionCoordinatorEnabled=false"`), so the scenario shows the stall it
    /// names and not any stall. A seed stalled for another reason fails the run (exit 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_reason: Option<String>,
    /// Seeds known to refute the claim (a counterexample found at scale, too rare for a few
    /// seeds to meet), run before the scenario's own seeds in every batch run, as a
    /// regression corpus's seeds are (`eosim sim --corpus`). A model change that alters the
    /// seed's history can lose the counterexample: `expect = "violated"` then fails and a
    /// new seed must be found (`eosim sim --seeds 1000`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regression_seeds: Vec<u64>,
}

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name; defaults to the file stem.
    #[serde(default)]
    pub name: String,
    /// One line saying what the scenario shows.
    #[serde(default)]
    pub description: String,
    /// The component under test.
    pub pipeline: Pipeline,
    /// The delivery claim the checkers hold it to.
    pub claim: Claim,
    /// Seeds to run by default. Default 20.
    #[serde(default = "default_seeds")]
    pub seeds: u64,
    /// Brokers.
    #[serde(default)]
    pub cluster: ClusterSpec,
    /// Topic.
    #[serde(default)]
    pub topic: TopicSpec,
    /// Workload.
    #[serde(default)]
    pub workload: WorkloadSpec,
    /// Faults.
    #[serde(default)]
    pub faults: FaultSpec,
    /// Heal and drain.
    #[serde(default)]
    pub drain: DrainSpec,
    /// The transactional copy (pipeline `transactional-copy` only).
    #[serde(default)]
    pub copy: CopySpec,
    /// The Streams processor (pipeline `streams-count` only): its keys in
    /// [`StreamsSpec`](crate::streams::StreamsSpec), Kafka's names where Kafka has one
    /// (`"statestore.cache.max.bytes"`, or its deprecated `"cache.max.bytes.buffering"` but
    /// not both: refused naming the file and `streams.cache.max.bytes.buffering`), and
    /// `topology` ([`TopologyKind`](crate::streams::TopologyKind): `"count"`,
    /// `"filter-map-values"`, `"aggregate-ids"`; a value it cannot combine with, such as
    /// `group_by = "id-mod"` beside `"aggregate-ids"`, refused naming the file and the key).
    #[serde(default)]
    pub streams: crate::streams::StreamsSpec,
    /// Checker overrides.
    #[serde(default)]
    pub check: CheckSpec,
    /// Kafka Connect workers (pipeline `connect-jdbc`; `clickhouse-sink` on the real
    /// backend).
    #[serde(default)]
    pub connect: ConnectSpec,
    /// The connector's configuration, Kafka Connect's keys → string values (pipeline
    /// `connect-jdbc`; on the real backend also the base of `clickhouse-sink`'s); validated
    /// by the connector class.
    #[serde(default)]
    pub connector: BTreeMap<String, String>,
    /// The PostgreSQL target (pipeline `connect-jdbc`).
    #[serde(default)]
    pub postgres: PostgresSpec,
    /// The change events to produce (pipeline `connect-jdbc`).
    #[serde(default)]
    pub cdc: CdcSpec,
    /// `[sink]` of a `clickhouse-sink` scenario.
    #[serde(default)]
    pub sink: Option<clickhouse::ClickHouseSinkSpec>,
    /// `[routine_load]` of a `routine-load` scenario.
    #[serde(default)]
    pub routine_load: routine_load::RoutineLoadSpec,
    /// `[consumer]` of a `kafka-consume` scenario: the sink group's consumers.
    #[serde(default)]
    pub consumer: consumer::ConsumerSpec,
    /// `[doris]` of a `doris-sink` scenario: the FE's configuration.
    #[serde(default)]
    pub doris: doris_sink::DorisSpec,
    /// `[source]` of a `connect-source` scenario: the source database's change log.
    #[serde(default)]
    pub source: SourceSpec,
}

/// `[source]`: the change log of the source database a `connect-source` pipeline reads
/// ([`eosim_sim::source_db`]): transaction `t` commits at `t * transaction_interval_ms`
/// and writes `rows_per_transaction` rows, one change event each.
///
/// ## Default values
/// `transactions = 100`, `rows_per_transaction = 3`, `transaction_interval_ms = 50`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// Committed transactions (at least 1).
    #[serde(default = "default_source_transactions")]
    pub transactions: u64,
    /// Rows each transaction writes (at least 1).
    #[serde(default = "default_rows_per_transaction")]
    pub rows_per_transaction: u32,
    /// Time between two commits, ms (the database's write rate).
    #[serde(default = "default_transaction_interval_ms")]
    pub transaction_interval_ms: u64,
}

impl Default for SourceSpec {
    fn default() -> Self {
        toml::from_str("").expect("every source key has a default")
    }
}

impl SourceSpec {
    /// The change log's shape.
    pub fn log_config(&self) -> eosim_sim::source_db::ChangeLogConfig {
        eosim_sim::source_db::ChangeLogConfig {
            transactions: self.transactions,
            rows_per_transaction: self.rows_per_transaction,
            transaction_interval_ms: self.transaction_interval_ms,
            first_commit_ms: 0,
        }
    }
}

fn default_source_transactions() -> u64 {
    100
}
fn default_rows_per_transaction() -> u32 {
    3
}
fn default_transaction_interval_ms() -> u64 {
    50
}

/// `[connect]`: the worker group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectSpec {
    /// Worker processes `connect-1..=connect-<workers>`. Default 2.
    #[serde(default = "default_two")]
    pub workers: u32,
    /// Worker configuration, Kafka Connect's keys (`offset.flush.interval.ms`,
    /// `offset.flush.timeout.ms`, `session.timeout.ms` and `heartbeat.interval.ms` of the
    /// worker group, `scheduled.rebalance.max.delay.ms`, `task.shutdown.graceful.timeout.ms`,
    /// `group.id`). The task consumers keep the consumer's own session timeout (45 s)
    /// unless `[connector]` sets `consumer.override.session.timeout.ms`.
    #[serde(default)]
    pub worker: BTreeMap<String, String>,
    /// An operator restarts FAILED tasks through the control API once they have been
    /// failed this long, ms; 0 = nobody acts (Connect's behaviour). Default 0.
    #[serde(default)]
    pub restart_failed_after_ms: u64,
    /// Fault point: probability that a task throws right after a successful `put` (a
    /// task crash). Default 0.
    #[serde(default)]
    pub task_crash_probability: f64,
    /// When the operator creates the connector, ms after the start (so a case can have
    /// all its events in the topic before the first poll). Default 0.
    #[serde(default)]
    pub connector_create_at_ms: u64,
}

impl Default for ConnectSpec {
    fn default() -> Self {
        toml::from_str("").expect("every connect key has a default")
    }
}

/// `[postgres]`: the target database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSpec {
    /// A table the DBA creates before the connector starts (else `auto.create`).
    #[serde(default)]
    pub table: Option<TableSpec>,
    /// The JDBC client's socket timeout, ms. Default 5000.
    #[serde(default = "default_request_timeout")]
    pub client_timeout_ms: u64,
    /// The server's `synchronous_commit`: `"on"` (default), `"off"`, `"local"`,
    /// `"remote_write"` or `"remote_apply"`. Under `"off"` a crash of the server loses the
    /// transactions committed since the WAL writer's last cycle (the model's
    /// `DbConfig::synchronous_commit`; the real server gets the same setting).
    #[serde(default)]
    pub synchronous_commit: SynchronousCommit,
    /// The server's `wal_writer_delay`, ms: 1 to 10,000 (PostgreSQL's range). Default 200.
    #[serde(default = "default_wal_writer_delay")]
    pub wal_writer_delay_ms: u64,
}

fn default_wal_writer_delay() -> u64 {
    200
}

/// PostgreSQL's `synchronous_commit` values
/// (<https://www.postgresql.org/docs/current/runtime-config-wal.html#GUC-SYNCHRONOUS-COMMIT>).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SynchronousCommit {
    /// Wait for the local WAL flush (and synchronous standbys, if any).
    #[default]
    On,
    /// Answer at once; the WAL writer flushes within `wal_writer_delay`.
    Off,
    /// Wait for the local WAL flush only.
    Local,
    /// With synchronous standbys, wait for their write; locally as `local`.
    RemoteWrite,
    /// With synchronous standbys, wait for their apply; locally as `local`.
    RemoteApply,
}

impl SynchronousCommit {
    /// The setting's text, as `postgresql.conf` and `SET` take it.
    pub fn as_str(self) -> &'static str {
        match self {
            SynchronousCommit::On => "on",
            SynchronousCommit::Off => "off",
            SynchronousCommit::Local => "local",
            SynchronousCommit::RemoteWrite => "remote_write",
            SynchronousCommit::RemoteApply => "remote_apply",
        }
    }
}

impl Default for PostgresSpec {
    fn default() -> Self {
        toml::from_str("").expect("every postgres key has a default")
    }
}

impl PostgresSpec {
    /// The PostgreSQL model's settings: `synchronous_commit` and `wal_writer_delay_ms`,
    /// with the WAL writer's cycles falling `wal_writer_phase_ms` into its period (the
    /// pipeline draws it from the seed; a real server's phase is wherever its WAL writer
    /// started). No synchronous standbys are modelled, so every value but `off` waits for
    /// the local flush.
    pub fn db_config(&self, wal_writer_phase_ms: u64) -> eosim_sim::postgres::DbConfig {
        eosim_sim::postgres::DbConfig {
            synchronous_commit: self.synchronous_commit != SynchronousCommit::Off,
            wal_writer_delay_ms: self.wal_writer_delay_ms,
            wal_writer_phase_ms,
            ..Default::default()
        }
    }
}

/// `[postgres.table]`: `CREATE TABLE name (columns..., PRIMARY KEY (primary_key...))`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// Table name.
    pub name: String,
    /// Columns as `"<name> <type>[ not null]"` (`"note varchar(10)"`).
    pub columns: Vec<String>,
    /// Primary-key columns; empty for none.
    #[serde(default)]
    pub primary_key: Vec<String>,
}

impl TableSpec {
    /// `CREATE TABLE IF NOT EXISTS name (columns..., PRIMARY KEY (primary_key...))`, as the
    /// DBA runs it before the connector starts: each column `"<name> <type>[ not null]"`
    /// (a type the model does not know becomes `text`), for the PostgreSQL model and for
    /// the real server alike.
    pub fn create_statement(&self) -> eosim_sim::postgres::Statement {
        use eosim_sim::postgres::{Column, ColumnType, CreateTable, Statement};
        let columns = self
            .columns
            .iter()
            .map(|spec| {
                let lower = spec.to_ascii_lowercase();
                let not_null = lower.trim_end().ends_with("not null");
                let body = if not_null {
                    &spec[..lower.rfind("not null").expect("found")]
                } else {
                    spec
                };
                let (name, ty) = body.trim().split_once(' ').unwrap_or((body.trim(), "text"));
                let ty = ColumnType::parse(ty).unwrap_or(ColumnType::Text);
                let column = Column::new(name, ty);
                if not_null {
                    column.not_null()
                } else {
                    column
                }
            })
            .collect();
        Statement::CreateTable(CreateTable {
            name: self.name.clone(),
            columns,
            primary_key: self.primary_key.clone(),
            if_not_exists: true,
        })
    }
}

/// `[cdc]`: which change events the producer writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CdcSpec {
    /// Explicit events, produced in order (`{ key = '{"id":1}', value = '...' }`; a
    /// missing value is a tombstone, a missing key a null key).
    #[serde(default)]
    pub events: Vec<EventSpec>,
    /// Generated events, after the explicit ones.
    #[serde(default)]
    pub generate: Option<GenerateSpec>,
    /// A reader selects the target table this often, ms, recording what it saw (for
    /// regressions); 0 = no reader. Default 0.
    #[serde(default)]
    pub read_interval_ms: u64,
}

/// One explicit event: key and value as raw text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    /// Key text; absent = null key.
    #[serde(default)]
    pub key: Option<String>,
    /// Value text; absent = tombstone.
    #[serde(default)]
    pub value: Option<String>,
}

/// `[cdc.generate]`: Debezium envelopes over table `(id bigint, v bigint, name text)`,
/// keys `0..keys`: a `c` for an absent key, else `u` or `d`; `v` is the event id, so
/// every version of a row is distinct.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSpec {
    /// Events to generate. Default 200.
    #[serde(default = "default_generated_events")]
    pub events: u64,
    /// Distinct keys. Default 10.
    #[serde(default = "default_keys")]
    pub keys: u32,
    /// Probability that an event on an existing key is a delete. Default 0.1.
    #[serde(default = "default_delete_probability")]
    pub delete_probability: f64,
}

fn default_generated_events() -> u64 {
    200
}
fn default_delete_probability() -> f64 {
    0.1
}

fn default_seeds() -> u64 {
    20
}

impl WorkloadSpec {
    /// An idempotent producer's settings from `[workload]`: its acks, request timeout and
    /// retries, `delivery.timeout.ms` = request timeout × (retries + 1) (the simulated
    /// pipelines' input producers and the Streams instances).
    pub fn idempotent_producer_config(&self) -> crate::client::ProducerConfig {
        crate::client::ProducerConfig {
            acks: self.acks,
            enable_idempotence: true,
            request_timeout_ms: self.request_timeout_ms,
            delivery_timeout_ms: self.request_timeout_ms * (u64::from(self.retries) + 1),
            retries: self.retries,
            ..crate::client::ProducerConfig::default()
        }
    }
}

impl Scenario {
    /// Parses scenario text; `file` is only used in errors and for the default name.
    ///
    /// # Errors
    /// [`ScenarioError::Invalid`] with the key path and what was expected; syntax errors
    /// also give the line and column.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ScenarioError> {
        let deserializer = toml::Deserializer::new(text);
        let mut scenario: Scenario =
            serde_path_to_error::deserialize(deserializer).map_err(|e| {
                let key = e.path().to_string();
                let inner = e.into_inner();
                let mut message = humanize(inner.message().trim());
                if let Some(span) = inner.span() {
                    let (line, column) = line_column(text, span.start);
                    message = format!("{message} (at line {line}, column {column})");
                }
                ScenarioError::Invalid {
                    file: file.to_path_buf(),
                    key: if key == "." { "<root>".into() } else { key },
                    message,
                }
            })?;
        scenario.check_sections(file, text)?;
        if scenario.name.is_empty() {
            scenario.name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        scenario.validate(file)?;
        Ok(scenario)
    }

    /// Reads and parses a scenario file.
    ///
    /// # Errors
    /// [`ScenarioError::Io`] or [`ScenarioError::Invalid`].
    pub fn load(file: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(file).map_err(|source| ScenarioError::Io {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(file, &text)
    }

    /// The scenario as scenario-file text that [`Scenario::parse`] reads back to the same
    /// value: every key written out, except the sections its pipeline does not read (their
    /// defaults would be refused, [`SECTION_READERS`]).
    ///
    /// # Errors
    /// A value TOML cannot hold (not expected for a parsed scenario).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        let mut table = toml::Table::try_from(self)?;
        for (section, readers) in SECTION_READERS {
            if !readers.contains(&self.pipeline) {
                table.remove(section);
            }
        }
        toml::to_string(&table)
    }

    /// Refuses a pipeline-specific section (see [`SECTION_READERS`]) that the scenario's
    /// pipeline does not read: serde would fill it in and the run would never look at it.
    /// Presence is taken from the TOML text, so a section written with its default values
    /// is refused too.
    fn check_sections(&self, file: &Path, text: &str) -> Result<(), ScenarioError> {
        // The text already deserialized, so it is valid TOML.
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ScenarioError::Invalid {
                    file: file.to_path_buf(),
                    key: "<root>".into(),
                    message: humanize(e.message()),
                })?;
        let unread = SECTION_READERS.iter().find(|(section, readers)| {
            table.contains_key(*section) && !readers.contains(&self.pipeline)
        });
        let Some((section, readers)) = unread else {
            return Ok(());
        };
        let names: Vec<&str> = readers.iter().map(|p| p.name()).collect();
        Err(ScenarioError::Invalid {
            file: file.to_path_buf(),
            key: (*section).to_string(),
            message: format!(
                "section `[{section}]` is not read by pipeline `{}`; it is read by: {}",
                self.pipeline.name(),
                names.join(", ")
            ),
        })
    }

    /// Checks what serde cannot: relations between keys, ranges, node names.
    fn validate(&self, file: &Path) -> Result<(), ScenarioError> {
        let checks = [
            self.check_cluster(),
            self.check_workload(),
            self.check_connect(),
            self.streams.check(),
            (self.streams).check_copartitioned(&self.topic.name, self.topic.partitions),
            self.check_faults(),
        ];
        let first = checks
            .into_iter()
            .find_map(Result::err)
            .or_else(|| self.check_check().err());
        match first {
            None => Ok(()),
            Some((key, message)) => Err(ScenarioError::Invalid {
                file: file.to_path_buf(),
                key,
                message,
            }),
        }
    }

    fn check_cluster(&self) -> Result<(), (String, String)> {
        self.cluster.check_flavour()?;
        let (brokers, topic) = (self.cluster.brokers, &self.topic);
        ensure(
            (1..=9).contains(&brokers),
            "cluster.brokers",
            format!("expected 1..=9 brokers, found {brokers}"),
        )?;
        let internal = [
            (
                "cluster.offsets_topic_num_partitions",
                self.cluster.offsets_topic_num_partitions,
            ),
            (
                "cluster.transaction_state_log_num_partitions",
                self.cluster.transaction_state_log_num_partitions,
            ),
        ];
        for (key, n) in internal {
            // Kafka's configs are `atLeast(1)`.
            ensure(n >= 1, key, "expected at least 1 partition, found 0".into())?;
        }
        ensure(
            topic.replication_factor >= 1 && topic.replication_factor <= brokers,
            "topic.replication_factor",
            format!(
                "expected 1..={brokers} (at most the {brokers} brokers of [cluster]), found {}",
                topic.replication_factor
            ),
        )?;
        ensure(
            topic.min_insync_replicas >= 1 && topic.min_insync_replicas <= topic.replication_factor,
            "topic.min_insync_replicas",
            format!(
                "expected 1..={} (at most topic.replication_factor), found {}",
                topic.replication_factor, topic.min_insync_replicas
            ),
        )?;
        ensure(
            topic.partitions >= 1,
            "topic.partitions",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            !topic.name.is_empty(),
            "topic.name",
            "expected a non-empty name".into(),
        )
    }

    fn check_workload(&self) -> Result<(), (String, String)> {
        let w = &self.workload;
        ensure(
            self.seeds >= 1,
            "seeds",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.records >= 1,
            "workload.records",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.keys >= 1,
            "workload.keys",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.produce_start_ms == 0 || self.pipeline == Pipeline::KafkaConsume,
            "workload.produce_start_ms",
            format!(
                "read only by pipeline `kafka-consume`, not `{}`",
                self.pipeline.name()
            ),
        )?;
        ensure(
            w.producers >= 1,
            "workload.producers",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.consumers >= 1,
            "workload.consumers",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.max_poll_records >= 1,
            "workload.max_poll_records",
            "expected at least 1, found 0".into(),
        )?;
        self.consumer.check()?;
        (self.consumer).check_group_protocol(w.session_timeout_ms, default_session_timeout())?;
        let copy_protocol = self.copy.group_protocol;
        consumer::check_session_timeout(
            copy_protocol,
            w.session_timeout_ms,
            default_session_timeout(),
        )?;
        producer::check(self)?;
        self.check_upstream_txn()?;
        self.check_sink_consumer()
    }

    /// The transactional upstream keys: only with `transactional.id`, only for the
    /// pipelines whose upstream producer can be transactional, in range.
    fn check_upstream_txn(&self) -> Result<(), (String, String)> {
        let w = &self.workload;
        let dependent = [
            ("workload.transaction.timeout.ms", w.transaction_timeout_ms),
            ("workload.transaction_records", w.transaction_records),
            ("workload.abort_every", w.abort_every),
        ];
        let Some(id) = &w.transactional_id else {
            let set = dependent.iter().find(|(_, v)| v.is_some());
            return match set {
                Some((key, _)) => Err((
                    key.to_string(),
                    "only with workload.transactional.id".into(),
                )),
                None => Ok(()),
            };
        };
        ensure(
            UPSTREAM_TXN_PIPELINES.contains(&self.pipeline),
            "workload.transactional.id",
            format!(
                "the upstream producer of pipeline `{}` cannot be transactional; it can in: {}",
                self.pipeline.name(),
                UPSTREAM_TXN_PIPELINES.map(Pipeline::name).join(", ")
            ),
        )?;
        ensure(
            !id.is_empty(),
            "workload.transactional.id",
            "expected a non-empty id".into(),
        )?;
        ensure(
            w.transaction_records != Some(0),
            "workload.transaction_records",
            "expected at least 1, found 0".into(),
        )?;
        ensure(
            w.transaction_timeout_ms != Some(0),
            "workload.transaction.timeout.ms",
            "expected at least 1 ms, found 0".into(),
        )
    }

    /// The consumer overrides of `[sink]` take the values Kafka's consumer takes.
    fn check_sink_consumer(&self) -> Result<(), (String, String)> {
        let Some(sink) = &self.sink else {
            return Ok(());
        };
        let checks = [
            (
                "sink.consumer.override.isolation.level",
                &sink.isolation_level,
                &["read_uncommitted", "read_committed"][..],
            ),
            (
                "sink.consumer.override.auto.offset.reset",
                &sink.auto_offset_reset,
                &["earliest", "latest", "none"][..],
            ),
        ];
        for (key, value, allowed) in checks {
            let Some(value) = value else { continue };
            ensure(
                allowed.contains(&value.as_str()),
                key,
                format!("expected one of {allowed:?}, found {value:?}"),
            )?;
        }
        // The connector configuration as Connect gets it: its parser judges the consumer
        // overrides together (KIP-848's refusals, the assignment strategies).
        let props = sink.connector_props(&self.topic.name, "clickhouse", 8123);
        let parsed =
            crate::connect::config::ConnectorConfig::parse(&props, crate::sinks::clickhouse::KEYS);
        parsed
            .map(|_| ())
            .map_err(|e| ("sink".to_string(), e.to_string()))
    }

    fn check_faults(&self) -> Result<(), (String, String)> {
        for (i, scheduled) in self.faults.schedule.iter().enumerate() {
            let key = format!("faults.schedule[{i}]");
            self.check_fault(&key, &scheduled.fault)?;
        }
        let Some(swarm) = &self.faults.swarm else {
            return Ok(());
        };
        ensure(
            !swarm.kinds.is_empty(),
            "faults.swarm.kinds",
            "expected at least one fault kind".into(),
        )?;
        for (i, target) in swarm.targets.iter().enumerate() {
            self.check_node(&format!("faults.swarm.targets[{i}]"), target)?;
        }
        ensure(
            swarm.interval_ms_min <= swarm.interval_ms_max,
            "faults.swarm.interval_ms_min",
            format!(
                "expected at most interval_ms_max ({})",
                swarm.interval_ms_max
            ),
        )?;
        ensure(
            swarm.duration_ms_min <= swarm.duration_ms_max,
            "faults.swarm.duration_ms_min",
            format!(
                "expected at most duration_ms_max ({})",
                swarm.duration_ms_max
            ),
        )
    }

    fn check_fault(&self, key: &str, fault: &Fault) -> Result<(), (String, String)> {
        let nodes: Vec<(&str, &String)> = match fault {
            Fault::Kill { target, .. }
            | Fault::Restart { target }
            | Fault::Pause { target }
            | Fault::Resume { target }
            | Fault::Clog { target }
            | Fault::ClockJump { target, .. } => target.iter().map(|t| ("target", t)).collect(),
            Fault::Partition { source, target, .. } | Fault::Messages { source, target, .. } => {
                let source = source.iter().map(|t| ("source", t));
                source.chain(target.iter().map(|t| ("target", t))).collect()
            }
            Fault::KillLeader {
                topic, partition, ..
            } => return self.check_topic_partition(key, topic, Some(*partition)),
            Fault::DeleteRecords {
                topic,
                partition,
                before,
                group,
            } => return self.check_delete_records(key, topic, *partition, *before, group),
            Fault::AddPartitions { topic, count } => {
                return self.check_add_partitions(key, topic, *count)
            }
            Fault::Heal => Vec::new(),
        };
        for (field, node) in nodes {
            self.check_node(&format!("{key}.{field}"), node)?;
        }
        Ok(())
    }

    /// The `connect-jdbc` sections: the connector configuration parses (an unknown key is
    /// an error naming it) and reads the scenario's topic.
    fn check_connect(&self) -> Result<(), (String, String)> {
        if self.pipeline == Pipeline::DorisSink {
            return self.check_doris_sink();
        }
        if self.pipeline == Pipeline::ConnectSource {
            return self.check_connect_source();
        }
        if self.pipeline != Pipeline::ConnectJdbc {
            return Ok(());
        }
        self.check_connector(crate::sinks::jdbc::parse_connector)?;
        let delay = self.postgres.wal_writer_delay_ms;
        ensure(
            (1..=10_000).contains(&delay),
            "postgres.wal_writer_delay_ms",
            format!("{delay}: PostgreSQL takes 1 to 10000 ms"),
        )?;
        ensure(
            !self.cdc.events.is_empty() || self.cdc.generate.is_some(),
            "cdc",
            "expected cdc.events or cdc.generate".into(),
        )
    }

    /// `[connect]` and `[connector]` of a simulated Connect pipeline: 1..=9 workers whose
    /// keys parse, and a connector configuration that `parse` (the connector class's
    /// validation) accepts and that reads the scenario's topic.
    fn check_connector(
        &self,
        parse: fn(
            &BTreeMap<String, String>,
        ) -> Result<
            crate::connect::config::ConnectorConfig,
            crate::connect::config::ConfigError,
        >,
    ) -> Result<(), (String, String)> {
        ensure(
            (1..=9).contains(&self.connect.workers),
            "connect.workers",
            format!("expected 1..=9 workers, found {}", self.connect.workers),
        )?;
        if let Err(e) = crate::connect::config::WorkerConfig::parse(&self.connect.worker) {
            return Err(("connect.worker".into(), e.to_string()));
        }
        let config =
            parse(&self.connector).map_err(|e| ("connector".to_string(), e.to_string()))?;
        ensure(
            config.topics == [self.topic.name.clone()],
            "connector.topics",
            format!("expected the scenario's topic \"{}\"", self.topic.name),
        )
    }

    /// The `connect-source` sections: the workers (their `exactly.once.source.support`
    /// among their keys), the connector ([`crate::connect::source_config`]: its unknown
    /// keys, `required` exactly-once on a worker without it, `transaction.boundary =
    /// "connector"`) writing to the scenario's topic, and a non-empty `[source]` log.
    fn check_connect_source(&self) -> Result<(), (String, String)> {
        let worker = crate::connect::config::WorkerConfig::parse(&self.connect.worker)
            .map_err(|e| ("connect.worker".to_string(), e.to_string()))?;
        let parse = |raw: &BTreeMap<String, String>| {
            crate::connect::source_config::parse_connector(raw, &worker)
        };
        ensure(
            (1..=9).contains(&self.connect.workers),
            "connect.workers",
            format!("expected 1..=9 workers, found {}", self.connect.workers),
        )?;
        let config =
            parse(&self.connector).map_err(|e| ("connector".to_string(), e.to_string()))?;
        ensure(
            config.topics == [self.topic.name.clone()],
            "connector.topic.prefix",
            format!(
                "expected `topic.prefix` and `table.include.list` to name the scenario's topic \
                 \"{}\" (the connector writes `<topic.prefix>.<table>`, here \"{}\")",
                self.topic.name, config.topics[0]
            ),
        )?;
        let s = &self.source;
        for (key, n) in [
            ("source.transactions", s.transactions),
            (
                "source.rows_per_transaction",
                u64::from(s.rows_per_transaction),
            ),
        ] {
            ensure(n >= 1, key, "expected at least 1, found 0".into())?;
        }
        ensure(
            self.topic.name != worker.offset_storage_topic,
            "topic.name",
            "expected a topic other than the worker's offset.storage.topic".into(),
        )
    }

    /// The `doris-sink` sections: the workers, the connector configuration (its unknown
    /// keys and contradictions named, [`crate::sinks::doris::parse_connector`]) reading
    /// the scenario's topic into the table the pipeline creates (`db.clicklog`).
    fn check_doris_sink(&self) -> Result<(), (String, String)> {
        self.check_connector(crate::sinks::doris::parse_connector)?;
        let sink = crate::sinks::doris::DorisSinkConfig::parse(&self.connector)
            .map_err(|e| ("connector".to_string(), e.to_string()))?;
        ensure(
            sink.database == "db",
            "connector.doris.database",
            format!(
                "expected \"db\" (the database the pipeline creates), found \"{}\"",
                sink.database
            ),
        )?;
        let table = sink.table_of(&self.topic.name);
        ensure(
            table == "clicklog",
            "connector.doris.topic2table.map",
            format!(
                "expected topic \"{}\" mapped to \"clicklog\" (the table the pipeline creates), found \"{table}\"",
                self.topic.name
            ),
        )?;
        ensure(
            self.doris.stream_load_default_precommit_timeout_second >= 1,
            "doris.stream_load_default_precommit_timeout_second",
            "expected at least 1".into(),
        )?;
        ensure(
            self.doris.group_commit_interval_ms >= 1,
            "doris.group_commit_interval_ms",
            "expected at least 1".into(),
        )?;
        ensure(
            self.doris.group_commit_data_bytes >= 1,
            "doris.group_commit_data_bytes",
            "expected at least 1".into(),
        )
    }

    /// `kill-leader` names a partition of the scenario's topics (`[topic]`, and
    /// `copy.output_topic` for `transactional-copy`) or of the internal topics
    /// `__consumer_offsets` / `__transaction_state` (50 partitions each): killing the leader
    /// of the latter moves a group or transaction coordinator.
    /// `delete-records`: in `kafka-consume`, on the scenario's topic (and a partition of
    /// it, when set), an offset not below 0, and `group` exactly when
    /// `before = "committed"`.
    fn check_delete_records(
        &self,
        key: &str,
        topic: &str,
        partition: Option<u32>,
        before: DeleteBefore,
        group: &Option<String>,
    ) -> Result<(), (String, String)> {
        self.ensure_kafka_consume_fault(
            key,
            "delete-records",
            "its checker counts the deleted records with the log; the change-data checker of \
             `connect-jdbc` would not see deleted change events",
        )?;
        ensure(
            topic == self.topic.name,
            &format!("{key}.topic"),
            format!(
                "expected \"{}\" (Kafka refuses DeleteRecords on its internal topics: \
                 \"Cannot delete records of internal topic\", ReplicaManager.deleteRecords)",
                self.topic.name
            ),
        )?;
        self.check_topic_partition(key, topic, partition)?;
        if let DeleteBefore::Offset(offset) = before {
            ensure(
                offset >= 0,
                &format!("{key}.before"),
                format!(
                    "expected an offset >= 0, \"high-watermark\" or \"committed\", found {offset}"
                ),
            )?;
        }
        let committed = before == DeleteBefore::Named(DeletePoint::Committed);
        ensure(
            committed == group.is_some(),
            &format!("{key}.group"),
            if committed {
                "before = \"committed\" needs the consumer group whose committed offsets \
                 bound the deletion (kafka-consume's is \"sink\")"
                    .into()
            } else {
                "read only with before = \"committed\"".into()
            },
        )
    }

    /// `Err` at `<key>.fault` unless the pipeline is `kafka-consume`, the only one that
    /// runs `fault`, for the reason `why`.
    fn ensure_kafka_consume_fault(
        &self,
        key: &str,
        fault: &str,
        why: &str,
    ) -> Result<(), (String, String)> {
        ensure(
            self.pipeline == Pipeline::KafkaConsume,
            &format!("{key}.fault"),
            format!(
                "{fault} runs in pipeline `kafka-consume` only ({why}), not `{}`",
                self.pipeline.name()
            ),
        )
    }

    /// `add-partitions`: the pipeline is `kafka-consume` (the others' drains and final
    /// reads cover the partitions the file declares), `topic` is the scenario's topic and
    /// `count` is above `[topic] partitions`.
    fn check_add_partitions(
        &self,
        key: &str,
        topic: &str,
        count: u32,
    ) -> Result<(), (String, String)> {
        self.ensure_kafka_consume_fault(
            key,
            "add-partitions",
            "its drain and final read follow the topic's partitions as the cluster has them",
        )?;
        ensure(
            topic == self.topic.name,
            &format!("{key}.topic"),
            format!(
                "expected the scenario's topic {:?}, found {topic:?}",
                self.topic.name
            ),
        )?;
        ensure(
            count > self.topic.partitions,
            &format!("{key}.count"),
            format!(
                "expected more than the topic's {} partitions (Kafka only adds partitions), \
                 found {count}",
                self.topic.partitions
            ),
        )
    }

    /// A fault's `topic` (and `partition`, when set) name a partition of the scenario's
    /// topics or of Kafka's internal ones.
    fn check_topic_partition(
        &self,
        key: &str,
        topic: &str,
        partition: Option<u32>,
    ) -> Result<(), (String, String)> {
        let mut topics = vec![(self.topic.name.as_str(), self.topic.partitions)];
        if self.pipeline == Pipeline::TransactionalCopy {
            topics.push((self.copy.output_topic.as_str(), self.topic.partitions));
        }
        let changelog = self.streams.changelog_topic();
        if self.pipeline == Pipeline::StreamsCount {
            topics.push((self.streams.output_topic.as_str(), self.topic.partitions));
            if self.streams.stateful() {
                topics.push((changelog.as_str(), self.topic.partitions));
            }
        }
        topics.push(("__consumer_offsets", 50));
        topics.push(("__transaction_state", 50));
        let Some(&(_, partitions)) = topics.iter().find(|(name, _)| *name == topic) else {
            let names: Vec<String> = topics.iter().map(|(n, _)| format!("\"{n}\"")).collect();
            return Err((
                format!("{key}.topic"),
                format!("expected one of {}", names.join(", ")),
            ));
        };
        let Some(partition) = partition else {
            return Ok(());
        };
        ensure(
            partition < partitions,
            &format!("{key}.partition"),
            format!("expected 0..{partitions}, found {partition}"),
        )
    }

    /// A node name (`broker-1`..`broker-<brokers>`, `producer-0`.., `consumer-0`..) or a
    /// group ([`NODE_GROUPS`]).
    fn check_node(&self, key: &str, node: &str) -> Result<(), (String, String)> {
        if is_group(node) {
            return Ok(());
        }
        let doris_node = matches!(node, "doris-fe" | "doris-be" | "operator");
        if self.pipeline == Pipeline::RoutineLoad && doris_node {
            return Ok(());
        }
        if self.pipeline == Pipeline::DorisSink {
            let workers = self.connect.workers;
            let known = match node.strip_prefix("connect-").map(str::parse::<u32>) {
                Some(Ok(n)) => (1..=workers).contains(&n),
                _ => doris_node,
            };
            if known {
                return Ok(());
            }
        }
        if self.pipeline == Pipeline::ConnectSource {
            let workers = self.connect.workers;
            let known = match node.strip_prefix("connect-").map(str::parse::<u32>) {
                Some(Ok(n)) => (1..=workers).contains(&n),
                _ => node == "operator",
            };
            if known {
                return Ok(());
            }
        }
        if self.pipeline == Pipeline::ConnectJdbc {
            let workers = self.connect.workers;
            let known = match node.strip_prefix("connect-").map(str::parse::<u32>) {
                Some(Ok(n)) => (1..=workers).contains(&n),
                _ => ["postgres", "reader", "operator"].contains(&node),
            };
            if known {
                return Ok(());
            }
        }
        if let Some(Ok(n)) = node.strip_prefix("streams-").map(str::parse::<u32>) {
            let instances = self.streams.instances;
            return ensure(
                n < instances,
                key,
                format!(
                    "unknown node \"{node}\": expected streams-0..=streams-{}",
                    instances - 1
                ),
            );
        }
        let (brokers, w) = (self.cluster.brokers, &self.workload);
        let known = match node
            .rsplit_once('-')
            .map(|(kind, n)| (kind, n.parse::<u32>()))
        {
            Some(("broker", Ok(n))) => (1..=brokers).contains(&n),
            Some(("producer", Ok(n))) => n < w.producers,
            Some(("consumer", Ok(n))) => n < w.consumers,
            Some(("worker", Ok(n))) => n < self.sink.as_ref().map_or(0, |s| s.tasks),
            _ => matches!(node, "clickhouse" | "keeper") && self.sink.is_some(),
        };
        ensure(
            known,
            key,
            format!(
                "unknown node \"{node}\": expected one of {}, broker-1..=broker-{brokers}, \
                 producer-0..=producer-{}, consumer-0..=consumer-{} (with [sink]: clickhouse, \
                 keeper, worker-i)",
                NODE_GROUPS.join(", "),
                w.producers - 1,
                w.consumers - 1
            ),
        )
    }

    fn check_check(&self) -> Result<(), (String, String)> {
        let expect = self.check.expect.as_deref();
        ensure(
            matches!(
                expect,
                None | Some("holds") | Some("violated") | Some("stalled")
            ),
            "check.expect",
            format!(
                "expected \"holds\" or \"violated\" (or \"stalled\" for a liveness failure), \
                 found \"{}\"",
                expect.unwrap_or("")
            ),
        )?;
        ensure(
            self.check.stall_reason.is_none() || expect == Some("stalled"),
            "check.stall_reason",
            "only with check.expect = \"stalled\"".into(),
        )?;
        for (field, names) in [
            ("forbidden", &self.check.forbidden),
            ("allowed", &self.check.allowed),
        ] {
            for (i, name) in names.iter().enumerate() {
                let known = crate::checker::Anomaly::ALL
                    .iter()
                    .any(|a| a.name() == name);
                let names: Vec<&str> = crate::checker::Anomaly::ALL
                    .iter()
                    .map(|a| a.name())
                    .collect();
                ensure(
                    known,
                    &format!("check.{field}[{i}]"),
                    format!("expected one of {}, found \"{name}\"", names.join(", ")),
                )?;
            }
        }
        Ok(())
    }
}

/// The pipeline-specific top-level sections and the pipelines that read them, in the
/// simulation (`workload/*.rs`) or in the real runner (`real/run/`); a scenario whose
/// pipeline is not listed for a section it carries is refused ([`Scenario::parse`]).
///
/// The sections not listed (`[cluster]`, `[topic]`, `[workload]`, `[faults]`, `[drain]`,
/// `[check]`) are read by every pipeline. `clickhouse-sink` reads `[connect]` (`worker`,
/// `restart_failed_after_ms`) and `[connector]` (the base its connector keys are set over)
/// only in the real runner's sink tasks; in the simulation its workers run with Connect's
/// defaults and a connector built from `[sink]` alone.
pub const SECTION_READERS: [(&str, &[Pipeline]); 11] = [
    ("copy", &[Pipeline::TransactionalCopy]),
    ("streams", &[Pipeline::StreamsCount]),
    (
        "connect",
        &[
            Pipeline::ConnectJdbc,
            Pipeline::ClickhouseSink,
            Pipeline::DorisSink,
            Pipeline::ConnectSource,
        ],
    ),
    (
        "connector",
        &[
            Pipeline::ConnectJdbc,
            Pipeline::ClickhouseSink,
            Pipeline::DorisSink,
            Pipeline::ConnectSource,
        ],
    ),
    ("source", &[Pipeline::ConnectSource]),
    ("doris", &[Pipeline::DorisSink]),
    ("postgres", &[Pipeline::ConnectJdbc]),
    ("cdc", &[Pipeline::ConnectJdbc]),
    ("sink", &[Pipeline::ClickhouseSink]),
    ("routine_load", &[Pipeline::RoutineLoad]),
    ("consumer", &[Pipeline::KafkaConsume]),
];

/// The pipelines whose upstream producer may be transactional (`[workload]
/// "transactional.id"`, [`crate::upstream`]).
pub const UPSTREAM_TXN_PIPELINES: [Pipeline; 7] = [
    Pipeline::KafkaConsume,
    Pipeline::ClickhouseSink,
    Pipeline::ConnectJdbc,
    Pipeline::RoutineLoad,
    Pipeline::DorisSink,
    Pipeline::TransactionalCopy,
    Pipeline::StreamsCount,
];

/// `Err((key, message))` unless `condition` holds.
fn ensure(condition: bool, key: &str, message: String) -> Result<(), (String, String)> {
    if condition {
        Ok(())
    } else {
        Err((key.to_string(), message))
    }
}

/// Serde's Rust type names in words a scenario author uses.
fn humanize(message: &str) -> String {
    message
        .replace("expected u64", "expected a whole number >= 0")
        .replace("expected u32", "expected a whole number >= 0")
        .replace("expected usize", "expected a whole number >= 0")
        .replace("expected f64", "expected a number")
        .replace('\n', "; ")
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

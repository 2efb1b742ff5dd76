//! A Kafka Streams-style processor: a small topology API, tasks per input partition spread
//! over instances by the consumer group, state stores with changelog topics, and
//! `processing.guarantee` = `at_least_once` or `exactly_once_v2` (models-reference E.5).
//!
//! # Sections
//! - [`topology`]: `StreamsBuilder::stream(topic) → filter / map_values → group_by_key |
//!   group_by(selector) → windowed_by → count(store) → to_stream().to(topic)`, the seed's
//!   per-key count in 5-second tumbling windows as [`topology::windowed_count`]; `group_by`
//!   adds a repartition topic (`[streams] group_by = "id-mod"`, [`GroupBy`]).
//! - [`stateless`], [`ids`]: the functions of the other topologies (`[streams] topology`,
//!   [`TopologyKind`]): the stateless `filter` → `mapValues` → `to`, and the `aggregate`
//!   that assigns each key an id from a sequence kept in its store.
//! - [`join`]: the stream-table join (`topology = "stream-table-join"`): the table topic
//!   materialised per task, with the topic itself as the store's changelog.
//! - [`store`]: key-value state stores, in memory or "persistent" (a disk outside the
//!   process, keyed by instance, that keeps only what was flushed).
//! - [`cache`]: the record cache in front of the stores (`statestore.cache.max.bytes`):
//!   updates of a key collapse until an eviction or a commit flushes them downstream.
//! - [`processor`]: the processing and commit loop of one instance over the client traits
//!   and a host (clock, history, producers, changelog restore): tasks, restore, commit
//!   under each guarantee.
//! - `instance` (simulation only): the simulated host of one instance (`streams-i`); the
//!   real one is `real::run::streams_instance`.
//! - [`assignor`]: Streams' high-availability task assignment (KIP-441): actives, standbys
//!   (`num.standby.replicas`) and warm-ups from each instance's reported changelog lags.
//! - `partition_assignor` (simulation only): Streams' assignor in the consumer group: what
//!   each member reports, the leader's assignment, the cooperative hand-over (KIP-429).
//! - `standby` (simulation only): the standby tasks an instance keeps from the changelog
//!   (read_committed under exactly_once_v2), promoted to active by restoring only the tail
//!   past their position.
//! - `restore` (simulation only): the simulated restore consumer (Fetch at the leader), up
//!   to the log end offset.
//! - [`StreamsSpec`]: the `[streams]` section of a scenario.
//!
//! # Example
//! ```
//! use eosim::streams::topology::{StreamsBuilder, TimeWindows};
//! let topology = StreamsBuilder::stream("events")
//!     .filter(|r| !r.key.is_empty())
//!     .group_by_key()
//!     .windowed_by(TimeWindows::of_size_ms(5_000))
//!     .count("windowed-counts-store")
//!     .to_stream()
//!     .to("counts");
//! assert_eq!(topology.changelog_topic("app"), "app-windowed-counts-store-changelog");
//! ```

pub mod assignor;
pub mod cache;
pub mod collector;
pub mod ids;
pub mod join;
pub mod processor;
pub mod stateless;
pub mod store;
pub mod topology;

#[cfg(madsim)]
pub mod instance;
#[cfg(madsim)]
pub mod partition_assignor;
#[cfg(madsim)]
pub mod restore;
#[cfg(madsim)]
pub mod standby;

use crate::client::IsolationLevel;
use crate::is_default;
use serde::{Deserialize, Serialize};

/// The id and event time (ms) an input record of `streams-count` carries in its value
/// `<id>,<timestamp_ms>`: `u64::MAX` and -1 where unreadable.
pub fn input_id_and_time(value: &str) -> (u64, i64) {
    let (id, ts) = value.split_once(',').unwrap_or((value, ""));
    (id.parse().unwrap_or(u64::MAX), ts.parse().unwrap_or(-1))
}

/// An output record (`key@windowStart → count`, as text) at `offset` as the checker's
/// update; `None` when it does not parse.
pub fn output_update(
    key: Option<&str>,
    value: Option<&str>,
    offset: eosim_sim::kafka::Offset,
) -> Option<crate::history::StreamsUpdate> {
    let (key, window_start_ms) = topology::split_store_key(key?)?;
    let count = value?.parse().ok()?;
    Some(crate::history::StreamsUpdate {
        key,
        window_start_ms,
        count,
        offset,
    })
}

/// `processing.guarantee`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ProcessingGuarantee {
    /// Flush output and changelog, then commit offsets: a crash replays (double counting).
    #[default]
    #[serde(rename = "at_least_once")]
    AtLeastOnce,
    /// One transaction per commit: output, changelog and offsets (KIP-447).
    #[serde(rename = "exactly_once_v2")]
    ExactlyOnceV2,
}

impl ProcessingGuarantee {
    /// Kafka's spelling.
    pub fn name(self) -> &'static str {
        match self {
            ProcessingGuarantee::AtLeastOnce => "at_least_once",
            ProcessingGuarantee::ExactlyOnceV2 => "exactly_once_v2",
        }
    }

    /// `commit.interval.ms` default: 30000, or 100 under exactly-once.
    pub fn default_commit_interval_ms(self) -> u64 {
        match self {
            ProcessingGuarantee::AtLeastOnce => 30_000,
            ProcessingGuarantee::ExactlyOnceV2 => 100,
        }
    }
}

/// `topology`: which topology family the application runs, named after the Kafka Streams
/// DSL calls that build it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    /// `groupByKey() | groupBy(..)` → `windowedBy(..)` → `count()` → `toStream().to(..)`:
    /// the count per key (and window) in a state store with a changelog
    /// ([`topology::windowed_count`]). Every catalogue file written before this key.
    #[default]
    Count,
    /// `filter(..)` → `mapValues(..)` → `to(..)`: stateless, no store and no changelog
    /// ([`topology::filter_map_values`]; the predicate and mapper are
    /// [`stateless::passes_filter`] and [`stateless::mapped_value`]). Under
    /// exactly_once_v2 every input record the filter keeps reaches the output once.
    FilterMapValues,
    /// `groupByKey()` → `aggregate(..)` whose aggregator gives each key seen for the first
    /// time the next id of a sequence kept in the same store, then `toStream().to(..)`:
    /// `key → id` ([`topology::aggregate_ids`], [`ids`]).
    AggregateIds,
    /// `stream(input).join(table(table_topic))` → `to(..)`: each stream record joined with
    /// the current value of its key in a table materialised from
    /// [`StreamsSpec::table_topic`], an inner join (no table value, no output;
    /// [`topology::stream_table_join`], [`join`]).
    StreamTableJoin,
}

impl TopologyKind {
    /// The scenario spelling (`"count"`, `"filter-map-values"`, `"aggregate-ids"`,
    /// `"stream-table-join"`).
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Count => "count",
            TopologyKind::FilterMapValues => "filter-map-values",
            TopologyKind::AggregateIds => "aggregate-ids",
            TopologyKind::StreamTableJoin => "stream-table-join",
        }
    }
}

/// `group_by`: how the topology groups the input before counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBy {
    /// `groupByKey()` on the input key `k<id % keys>`: one sub-topology, no repartition.
    #[default]
    InputKey,
    /// `groupBy((key, value) -> "g" + id % group_by_keys)`: the new key is `g<n>` with `n`
    /// the id field of the value `<id>,<timestamp_ms>` modulo
    /// [`StreamsSpec::group_by_keys`]. Records of one input key spread over several new
    /// keys and so over several partitions: the topology repartitions through
    /// `<application_id>-<store_name>-repartition` (`topology` module docs).
    IdMod,
}

/// Where a task's state store lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// Lost with the process: every task start restores the whole changelog.
    #[default]
    InMemory,
    /// On a disk that survives a restart with what was flushed at the last commit and a
    /// checkpoint (changelog offset); under exactly_once_v2 the checkpoint is only kept on a
    /// clean close, so a crash wipes the store (models-reference E.5).
    Persistent,
}

/// `[streams]`: the processor of pipeline `streams-count`.
///
/// ## Default values
/// `application_id = "counts"`, `instances = 2`, `processing_guarantee = "at_least_once"`,
/// `commit_interval_ms` = 30000 (100 under `exactly_once_v2`), `store = "in-memory"`,
/// `store_name = "windowed-counts-store"`, `window_size_ms = 5000`,
/// `output_topic = "counts"`, `transaction_timeout_ms = 10000`, `session_timeout_ms` =
/// `workload.session_timeout_ms`, `max_poll_records = 50`, `max_poll_interval_ms = 300000`,
/// `process_ms = 0`,
/// `num_standby_replicas = 0`, `acceptable_recovery_lag = 10000`, `max_warmup_replicas = 2`,
/// no `upgrade_from` (the cooperative protocol), `"statestore.cache.max.bytes"` = 10485760
/// (Kafka's 10 MiB; [`cache::DEFAULT_CACHE_MAX_BYTES`]), `group_by = "input-key"`,
/// `group_by_keys = 3`, `"repartition.purge.interval.ms"` = 30000, `topology = "count"`,
/// `table_topic = "table"`, `table_partitions` = `topic.partitions`, `table_records = 100`,
/// `table_interval_ms = 100`, no `table_abort_every` (an idempotent table producer),
/// `table_event_time_lag_ms = 0`, no `"max.task.idle.ms"` (no buffering), no
/// `"consumer.isolation.level"` (read_committed under exactly_once_v2, read_uncommitted
/// under at_least_once).
///
/// The group leader runs Streams' high-availability assignment ([`assignor`]); with
/// `num_standby_replicas` above 0 instances also keep standby copies of stores (in memory
/// only, whatever `store` says).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamsSpec {
    /// The topology family ([`TopologyKind`]): `"count"` (the default), `"filter-map-values"`,
    /// `"aggregate-ids"` or `"stream-table-join"`. The latter three take no `group_by`
    /// (refused by [`StreamsSpec::check`]); `"filter-map-values"` has no store, so no
    /// changelog, no standbys (`num_standby_replicas` above 0 is refused) and no record
    /// cache; `"stream-table-join"` reads `table_topic` as well, its store's changelog, and
    /// takes no standbys either.
    #[serde(skip_serializing_if = "is_default")]
    pub topology: TopologyKind,
    /// `application.id`: the consumer group, the prefix of internal topics and of
    /// `transactional.id`s.
    pub application_id: String,
    /// Processor instances (`streams-0`..).
    pub instances: u32,
    /// `processing.guarantee`.
    pub processing_guarantee: ProcessingGuarantee,
    /// `commit.interval.ms`; `None` = Kafka's default for the guarantee.
    pub commit_interval_ms: Option<u64>,
    /// The state store kind.
    pub store: StoreKind,
    /// The state store's name (the changelog is `<application_id>-<store_name>-changelog`).
    pub store_name: String,
    /// Tumbling window size, ms; 0 = an unwindowed count.
    pub window_size_ms: i64,
    /// The output topic (same partition count and replication as `[topic]`).
    pub output_topic: String,
    /// Producer `transaction.timeout.ms` under exactly_once_v2 (Streams' default 10000).
    pub transaction_timeout_ms: u64,
    /// Consumer `session.timeout.ms`; `None` = `workload.session_timeout_ms`.
    pub session_timeout_ms: Option<u64>,
    /// Consumer `max.poll.records`.
    pub max_poll_records: usize,
    /// Consumer `max.poll.interval.ms` (also the member's rebalance timeout). Streams
    /// leaves the consumer's default, 300000 (apache/kafka `StreamsConfig`
    /// `CONSUMER_DEFAULT_OVERRIDES` sets max.poll.records, auto.offset.reset,
    /// enable.auto.commit and the group protocol, not this).
    pub max_poll_interval_ms: u64,
    /// Simulated processing time per record, ms (spent inside an open transaction).
    pub process_ms: u64,
    /// `num.standby.replicas`: standby copies of each task's store on other instances.
    pub num_standby_replicas: u32,
    /// `acceptable.recovery.lag`: changelog records within which an instance's copy of a
    /// store counts as caught up for the assignment of the active task.
    pub acceptable_recovery_lag: u64,
    /// `max.warmup.replicas`: warm-up standbys one assignment may add.
    pub max_warmup_replicas: u32,
    /// `upgrade.from`: the version a rolling upgrade comes from. `None` (Streams' default)
    /// rebalances with the cooperative protocol (KIP-429); 2.3 and older force the eager
    /// one ([`UpgradeFrom::forces_eager`]).
    pub upgrade_from: Option<UpgradeFrom>,
    /// `statestore.cache.max.bytes` (KIP-770), bytes, at least 0: the record cache of an
    /// instance's stream thread ([`cache`]). `None` = Kafka's default, 10485760 (10 MiB);
    /// 0 forwards every update of the aggregate as it happens (the behaviour of every
    /// catalogue file written before the cache, which set 0). Read with
    /// [`StreamsSpec::cache_max_bytes`].
    #[serde(
        rename = "statestore.cache.max.bytes",
        skip_serializing_if = "Option::is_none"
    )]
    pub statestore_cache_max_bytes: Option<u64>,
    /// `cache.max.bytes.buffering`, the name before Kafka 3.4 (deprecated by KIP-770), as
    /// an alias of `statestore.cache.max.bytes`. Setting both is refused
    /// ([`StreamsSpec::check`]): Kafka would warn and take the new one
    /// (`StreamsConfig.getTotalCacheSize`), a silent choice a scenario should not rely on.
    #[serde(
        rename = "cache.max.bytes.buffering",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_max_bytes_buffering: Option<u64>,
    /// How records are grouped for the count ([`GroupBy`]): `"input-key"` (no repartition)
    /// or `"id-mod"` (re-keyed to `g<id % group_by_keys>` through a repartition topic with
    /// the input's partition count, as Streams sizes it after its source,
    /// `RepartitionTopics.setRepartitionTopicMetadataNumberOfPartitions`).
    #[serde(skip_serializing_if = "is_default")]
    pub group_by: GroupBy,
    /// The number of new keys under `group_by = "id-mod"`, at least 1 (refused otherwise by
    /// [`StreamsSpec::check`]); unused under `"input-key"`.
    #[serde(skip_serializing_if = "is_default_group_by_keys")]
    pub group_by_keys: u32,
    /// `repartition.purge.interval.ms`, ms: how often, at the earliest, an instance purges
    /// the repartition topic below its committed offsets with DeleteRecords after a commit
    /// (`TaskManager.maybePurgeCommittedRecords`). `None` = Kafka's default 30000 (read
    /// with [`StreamsSpec::repartition_purge_interval_ms`]); unused without repartition.
    #[serde(
        rename = "repartition.purge.interval.ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub repartition_purge_interval_ms: Option<u64>,
    /// `topology = "stream-table-join"`: the table topic, written by process
    /// `table-producer` with keyed updates `k<n % keys> → n` (`n` the update's version,
    /// unique over the run) and read by the application as `builder.table(table_topic)`.
    /// The topic is also the store's changelog (`topology.optimization = "all"`,
    /// [`join`]). Every `table_*` key is refused under the other topologies.
    #[serde(skip_serializing_if = "is_default_table_topic")]
    pub table_topic: String,
    /// The table topic's partition count; `None` = `topic.partitions`. A join needs both
    /// inputs co-partitioned: any other count is refused naming both keys
    /// ([`StreamsSpec::check_copartitioned`]), as Streams refuses the topology
    /// (`CopartitionedTopicsEnforcer`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_partitions: Option<u32>,
    /// Table updates the table producer writes, one every `table_interval_ms` from the
    /// start; at least 1 under the join.
    #[serde(skip_serializing_if = "is_default_table_records")]
    pub table_records: u64,
    /// Pause between two table updates, ms.
    #[serde(skip_serializing_if = "is_default_table_interval_ms")]
    pub table_interval_ms: u64,
    /// When set (at least 1), the table producer writes in transactions of
    /// [`join::TABLE_TRANSACTION_RECORDS`] updates (`transactional.id` `table-producer`) and
    /// aborts transaction `n` (0-based) when `(n + 1) % table_abort_every == 0`: its
    /// versions were never written, so a join must never output them. Unset: an
    /// idempotent producer, no transactions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_abort_every: Option<u64>,
    /// How far, ms, the table producer stamps an update's event time before its send: the
    /// update happened `table_event_time_lag_ms` before it reaches the table topic (a
    /// table fed from another system's log), so a stream record of a later event time may
    /// be fetched first. Default 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub table_event_time_lag_ms: u64,
    /// `max.task.idle.ms` (KIP-353, KIP-695), ms, under the stream-table join only: set, a
    /// task buffers its two partitions' records and processes the one with the lowest
    /// event time first (`PartitionGroup.nextRecord`); while one partition has nothing
    /// buffered, -1 processes the other at once and `n` ≥ 1 waits up to `n` ms of the
    /// task's clock for it (`PartitionGroup.readyToProcess`, enforced processing after).
    /// Kafka's default 0 (wait only while the fetched lag says data is there) is refused:
    /// the client trait reports no lag. Unset: no buffering, records processed in the
    /// order the consumer returns them ([`StreamsSpec::check`]).
    #[serde(rename = "max.task.idle.ms", skip_serializing_if = "Option::is_none")]
    pub max_task_idle_ms: Option<i64>,
    /// `consumer.isolation.level` (StreamsConfig's `consumer.` prefix, which
    /// `getCommonConsumerConfigs` passes to the main, restore and standby consumers alike):
    /// under at_least_once Streams leaves the Java consumer's default, `"read_uncommitted"`,
    /// so a transactional input's aborted records are processed (`[workload]
    /// "transactional.id"`); `"read_committed"` skips them. Under exactly_once_v2 Streams
    /// forces read_committed (`CONSUMER_EOS_OVERRIDES`) and ignores a user's
    /// read_uncommitted with a warning (`checkIfUnexpectedUserSpecifiedConsumerConfig`),
    /// which [`StreamsSpec::check`] refuses instead. Unset: the guarantee's default.
    #[serde(
        rename = "consumer.isolation.level",
        skip_serializing_if = "Option::is_none"
    )]
    pub consumer_isolation_level: Option<IsolationLevel>,
    /// `producer.linger.ms` (StreamsConfig's `producer.` prefix): how long the instances'
    /// producers let a batch wait for more records, ms. Unset: Streams' 100
    /// ([`STREAMS_PRODUCER_LINGER_MS`]). 0 sends each batch as soon as the sender gets to
    /// it, so an update's changelog record often leaves in another request than the
    /// sequence entry or output record before it (what a kill can then split).
    #[serde(rename = "producer.linger.ms", skip_serializing_if = "Option::is_none")]
    pub producer_linger_ms: Option<u64>,
    /// `producer.batch.size`, bytes (the broker model's record sizes,
    /// `client::sim::accumulator`). Unset: the producer's 16384.
    #[serde(
        rename = "producer.batch.size",
        skip_serializing_if = "Option::is_none"
    )]
    pub producer_batch_size: Option<u32>,
}

/// `linger.ms` of a Streams instance's producers: Streams overrides the producer's default
/// with 100 (`StreamsConfig.PRODUCER_DEFAULT_OVERRIDES`, apache/kafka trunk 4.0), under
/// either guarantee (`PRODUCER_EOS_OVERRIDES` starts from it).
pub const STREAMS_PRODUCER_LINGER_MS: u64 = 100;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_default_table_topic(t: &str) -> bool {
    t == DEFAULT_TABLE_TOPIC
}

fn is_default_table_records(n: &u64) -> bool {
    *n == DEFAULT_TABLE_RECORDS
}

fn is_default_table_interval_ms(n: &u64) -> bool {
    *n == DEFAULT_TABLE_INTERVAL_MS
}

/// `table_topic`'s default.
const DEFAULT_TABLE_TOPIC: &str = "table";
/// `table_records`' default.
const DEFAULT_TABLE_RECORDS: u64 = 100;
/// `table_interval_ms`' default.
const DEFAULT_TABLE_INTERVAL_MS: u64 = 100;

fn is_default_group_by_keys(n: &u32) -> bool {
    *n == DEFAULT_GROUP_BY_KEYS
}

/// `group_by_keys`' default.
const DEFAULT_GROUP_BY_KEYS: u32 = 3;

/// The values `upgrade.from` accepts (apache/kafka `streams/.../internals/
/// UpgradeFromValues.java`, trunk 4.0 `1eb7644`), oldest first.
pub const UPGRADE_FROM_VALUES: [&str; 24] = [
    "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0", "1.1", "2.0", "2.1", "2.2", "2.3", "2.4", "2.5",
    "2.6", "2.7", "2.8", "3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8",
];

/// One of [`UPGRADE_FROM_VALUES`]; any other string is refused when the scenario is read
/// (Java throws `IllegalArgumentException: Unknown configuration value for parameter
/// 'upgrade.from'`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UpgradeFrom(String);

impl TryFrom<String> for UpgradeFrom {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        match UPGRADE_FROM_VALUES.contains(&value.as_str()) {
            true => Ok(Self(value)),
            false => Err(format!(
                "unknown upgrade_from {value:?}: expected one of {}",
                UPGRADE_FROM_VALUES.join(", ")
            )),
        }
    }
}

impl From<UpgradeFrom> for String {
    fn from(value: UpgradeFrom) -> Self {
        value.0
    }
}

impl UpgradeFrom {
    /// Whether this version makes Streams rebalance eagerly: 0.10.0 to 2.3, which predate
    /// the cooperative protocol (`AssignorConfiguration.rebalanceProtocol`).
    pub fn forces_eager(&self) -> bool {
        let last_eager = UPGRADE_FROM_VALUES.iter().position(|v| *v == "2.3");
        UPGRADE_FROM_VALUES.iter().position(|v| *v == self.0) <= last_eager
    }
}

impl Default for StreamsSpec {
    fn default() -> Self {
        Self {
            topology: TopologyKind::Count,
            application_id: "counts".into(),
            instances: 2,
            processing_guarantee: ProcessingGuarantee::AtLeastOnce,
            commit_interval_ms: None,
            store: StoreKind::InMemory,
            store_name: "windowed-counts-store".into(),
            window_size_ms: 5_000,
            output_topic: "counts".into(),
            transaction_timeout_ms: 10_000,
            session_timeout_ms: None,
            max_poll_records: 50,
            max_poll_interval_ms: 300_000,
            process_ms: 0,
            num_standby_replicas: 0,
            acceptable_recovery_lag: 10_000,
            max_warmup_replicas: 2,
            upgrade_from: None,
            statestore_cache_max_bytes: None,
            cache_max_bytes_buffering: None,
            group_by: GroupBy::InputKey,
            group_by_keys: DEFAULT_GROUP_BY_KEYS,
            repartition_purge_interval_ms: None,
            table_topic: DEFAULT_TABLE_TOPIC.into(),
            table_partitions: None,
            table_records: DEFAULT_TABLE_RECORDS,
            table_interval_ms: DEFAULT_TABLE_INTERVAL_MS,
            table_abort_every: None,
            table_event_time_lag_ms: 0,
            max_task_idle_ms: None,
            consumer_isolation_level: None,
            producer_linger_ms: None,
            producer_batch_size: None,
        }
    }
}

impl StreamsSpec {
    /// `commit.interval.ms` in effect.
    pub fn commit_interval_ms(&self) -> u64 {
        self.commit_interval_ms
            .unwrap_or_else(|| self.processing_guarantee.default_commit_interval_ms())
    }

    /// The record cache of the application, bytes: `statestore.cache.max.bytes`, else
    /// `cache.max.bytes.buffering`, else Kafka's default 10485760.
    pub fn cache_max_bytes(&self) -> u64 {
        (self.statestore_cache_max_bytes)
            .or(self.cache_max_bytes_buffering)
            .unwrap_or(cache::DEFAULT_CACHE_MAX_BYTES)
    }

    /// `repartition.purge.interval.ms` in effect: the scenario's, else Kafka's 30000
    /// (`StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG`).
    pub fn repartition_purge_interval_ms(&self) -> u64 {
        self.repartition_purge_interval_ms.unwrap_or(30_000)
    }

    /// The cache size as the history records it (`Value::StreamsWindow`): `None` for 0.
    pub fn recorded_cache_max_bytes(&self) -> Option<u64> {
        Some(self.cache_max_bytes()).filter(|c| *c > 0)
    }

    /// The cache budget of one stream thread: [`cache_max_bytes`](Self::cache_max_bytes)
    /// divided among [`cache::STREAM_THREADS`] (`KafkaStreams.getCacheSizePerThread`).
    pub fn thread_cache(&self) -> cache::ThreadCache {
        cache::ThreadCache {
            max_bytes: self.cache_max_bytes() / cache::STREAM_THREADS,
        }
    }

    /// The consumers' isolation, main, restore and standby alike: read_committed under
    /// exactly_once_v2, else `"consumer.isolation.level"`, else the Java consumer's
    /// read_uncommitted (StreamsConfig `getCommonConsumerConfigs`).
    pub fn isolation(&self) -> eosim_sim::kafka::Isolation {
        use eosim_sim::kafka::Isolation;
        match (self.processing_guarantee, self.consumer_isolation_level) {
            (ProcessingGuarantee::ExactlyOnceV2, _) => Isolation::ReadCommitted,
            (_, Some(level)) => level.to_isolation(),
            (_, None) => Isolation::ReadUncommitted,
        }
    }

    /// What serde cannot check: the cache size given under one name only, at least one
    /// new key under `group_by = "id-mod"`.
    ///
    /// # Errors
    /// The key path and what was wrong.
    pub fn check(&self) -> Result<(), (String, String)> {
        self.check_topology()?;
        if self.processing_guarantee == ProcessingGuarantee::ExactlyOnceV2
            && self.consumer_isolation_level == Some(IsolationLevel::ReadUncommitted)
        {
            return Err((
                "streams.consumer.isolation.level".into(),
                "exactly_once_v2 reads read_committed: Streams ignores a user's \
                 read_uncommitted with a warning (StreamsConfig CONSUMER_EOS_OVERRIDES); \
                 leave it out or set \"read_committed\""
                    .into(),
            ));
        }
        if self.group_by == GroupBy::IdMod && self.group_by_keys == 0 {
            return Err((
                "streams.group_by_keys".into(),
                "expected at least 1 under group_by = \"id-mod\" (the new key is \
                 g<id % group_by_keys>)"
                    .into(),
            ));
        }
        if let (Some(new), Some(old)) = (
            self.statestore_cache_max_bytes,
            self.cache_max_bytes_buffering,
        ) {
            return Err((
                "streams.cache.max.bytes.buffering".into(),
                format!(
                    "the deprecated name of `statestore.cache.max.bytes` (KIP-770): set one, \
                     not both (found {old} here and {new} there)"
                ),
            ));
        }
        Ok(())
    }

    /// The keys a topology other than the count refuses: `group_by` (only the count
    /// groups by a new key) and, for the stateless one, standbys (no store to copy).
    fn check_topology(&self) -> Result<(), (String, String)> {
        let name = self.topology.name();
        if self.topology != TopologyKind::Count && self.group_by != GroupBy::InputKey {
            return Err((
                "streams.group_by".into(),
                format!(
                    "only topology = \"count\" groups by a new key; topology = \"{name}\" \
                     reads the input key (leave group_by out or set \"input-key\")"
                ),
            ));
        }
        if self.topology == TopologyKind::FilterMapValues && self.num_standby_replicas > 0 {
            return Err((
                "streams.num_standby_replicas".into(),
                "expected 0 under topology = \"filter-map-values\": a stateless topology has \
                 no store, so no standby task to keep"
                    .into(),
            ));
        }
        match self.topology {
            TopologyKind::StreamTableJoin => self.check_join()?,
            _ => self.check_no_table_key()?,
        }
        self.check_max_task_idle_ms()
    }

    /// `max.task.idle.ms`: only a join has two inputs to synchronise; -1 or at least 1.
    fn check_max_task_idle_ms(&self) -> Result<(), (String, String)> {
        let Some(ms) = self.max_task_idle_ms else {
            return Ok(());
        };
        let why = match (self.topology, ms) {
            (TopologyKind::StreamTableJoin, -1) => return Ok(()),
            (TopologyKind::StreamTableJoin, 1..) => return Ok(()),
            (TopologyKind::StreamTableJoin, 0) => {
                "0 (Kafka's default) waits for empty partitions only while the consumer's \
                 fetched lag says data is there (KIP-695); the client trait reports no lag, \
                 so it is not modelled: set -1 or a wait of at least 1 ms"
            }
            (TopologyKind::StreamTableJoin, _) => "expected -1 or at least 1",
            _ => "only topology = \"stream-table-join\" has two inputs to synchronise",
        };
        Err((
            "streams.max.task.idle.ms".into(),
            format!("{why} (found {ms})"),
        ))
    }

    /// The keys the stream-table join refuses: no standbys (a standby of a source-topic
    /// changelog reads only up to the committed offsets, `StoreChangelogReader`'s limit
    /// offsets, which the standby here does not model), at least one table update, a
    /// table abort period of at least 1, a table topic other than the input and output.
    fn check_join(&self) -> Result<(), (String, String)> {
        let fail = |key: &str, why: String| Err((format!("streams.{key}"), why));
        if self.num_standby_replicas > 0 {
            return fail(
                "num_standby_replicas",
                "expected 0 under topology = \"stream-table-join\": standbys of a table \
                 restored from its source topic are not modelled"
                    .into(),
            );
        }
        if self.table_records == 0 {
            return fail("table_records", "expected at least 1 table update".into());
        }
        if self.table_abort_every == Some(0) {
            return fail(
                "table_abort_every",
                "expected at least 1 (leave it out for a non-transactional table)".into(),
            );
        }
        if self.table_topic == self.output_topic || self.table_topic.is_empty() {
            return fail(
                "table_topic",
                format!(
                    "expected a topic name other than output_topic, found {:?}",
                    self.table_topic
                ),
            );
        }
        Ok(())
    }

    /// Outside the join, no `table_*` key: only the stream-table join has a table.
    fn check_no_table_key(&self) -> Result<(), (String, String)> {
        let set = [
            ("table_topic", self.table_topic != DEFAULT_TABLE_TOPIC),
            ("table_partitions", self.table_partitions.is_some()),
            ("table_records", self.table_records != DEFAULT_TABLE_RECORDS),
            (
                "table_interval_ms",
                self.table_interval_ms != DEFAULT_TABLE_INTERVAL_MS,
            ),
            ("table_abort_every", self.table_abort_every.is_some()),
            ("table_event_time_lag_ms", self.table_event_time_lag_ms > 0),
        ];
        match set.into_iter().find(|(_, set)| *set) {
            Some((key, _)) => Err((
                format!("streams.{key}"),
                format!(
                    "only topology = \"stream-table-join\" reads a table; topology = \"{}\" \
                     has none (leave {key} out)",
                    self.topology.name()
                ),
            )),
            None => Ok(()),
        }
    }

    /// The table topic's partition count in effect: `table_partitions`, else
    /// `topic_partitions` (the stream topic's).
    pub fn table_partitions(&self, topic_partitions: u32) -> u32 {
        self.table_partitions.unwrap_or(topic_partitions)
    }

    /// Under the stream-table join, whether the table topic is co-partitioned with the
    /// stream topic of `topic_partitions` partitions and named apart from it, as
    /// `CopartitionedTopicsEnforcer.enforce` requires of a join's source topics (Streams
    /// throws `TopologyException: Topics not co-partitioned`); Ok for other topologies.
    ///
    /// # Errors
    /// `streams.table_partitions` naming `topic.partitions` and both counts; or
    /// `streams.table_topic` when it is the stream topic `topic_name`.
    pub fn check_copartitioned(
        &self,
        topic_name: &str,
        topic_partitions: u32,
    ) -> Result<(), (String, String)> {
        if self.topology != TopologyKind::StreamTableJoin {
            return Ok(());
        }
        if self.table_topic == topic_name {
            return Err((
                "streams.table_topic".into(),
                format!("expected a topic other than the stream topic `topic.name` ({topic_name})"),
            ));
        }
        let table = self.table_partitions(topic_partitions);
        if table != topic_partitions {
            return Err((
                "streams.table_partitions".into(),
                format!(
                    "the join's inputs must be co-partitioned: streams.table_partitions = \
                     {table}, topic.partitions = {topic_partitions} (leave table_partitions out \
                     or set it to topic.partitions)"
                ),
            ));
        }
        Ok(())
    }

    /// Whether the topology has a state store and its changelog (not the stateless
    /// `"filter-map-values"`).
    pub fn stateful(&self) -> bool {
        self.topology != TopologyKind::FilterMapValues
    }

    /// Whether the group rebalances with the cooperative protocol: Streams' assignor lists
    /// COOPERATIVE among its supported protocols unless `upgrade.from` forces eager
    /// (`StreamsPartitionAssignor.supportedProtocols`).
    pub fn cooperative(&self) -> bool {
        !self
            .upgrade_from
            .as_ref()
            .is_some_and(UpgradeFrom::forces_eager)
    }

    /// The assignor settings of this spec.
    pub fn assignor_config(&self) -> assignor::AssignorConfig {
        assignor::AssignorConfig {
            num_standby_replicas: self.num_standby_replicas,
            acceptable_recovery_lag: self.acceptable_recovery_lag,
            max_warmup_replicas: self.max_warmup_replicas,
        }
    }

    /// `<application.id>-<store>-changelog`; under the stream-table join the table topic,
    /// which is the table store's changelog (`topology.optimization = "all"`, [`join`]).
    pub fn changelog_topic(&self) -> String {
        match self.topology {
            TopologyKind::StreamTableJoin => self.table_topic.clone(),
            _ => format!("{}-{}-changelog", self.application_id, self.store_name),
        }
    }

    /// The repartition topic `<application_id>-<store_name>-repartition` under
    /// `group_by = "id-mod"`, else `None`.
    pub fn repartition_topic(&self) -> Option<String> {
        (self.group_by != GroupBy::InputKey)
            .then(|| format!("{}-{}-repartition", self.application_id, self.store_name))
    }

    /// The grouping key of an input record with `key` and value `<id>,<timestamp_ms>`
    /// under [`group_by`](Self::group_by): the input key, or `g<id % group_by_keys>` (an
    /// unreadable id groups as `g?`).
    pub fn grouping_key(&self, key: &str, value: &str) -> String {
        match self.group_by {
            GroupBy::InputKey => key.to_string(),
            GroupBy::IdMod => match input_id_and_time(value).0 {
                u64::MAX => "g?".to_string(),
                id => format!("g{}", id % u64::from(self.group_by_keys.max(1))),
            },
        }
    }

    /// The topology the scenario runs from `input` (of `partitions` partitions) to
    /// `output_topic` ([`topology`](Self::topology)): by default the count per grouping key
    /// ([`group_by`](Self::group_by)) in tumbling windows of `window_size_ms` (unwindowed
    /// when 0).
    pub fn topology(&self, input: &str, partitions: u32) -> topology::Topology {
        let (store, size, output) = (&self.store_name, self.window_size_ms, &self.output_topic);
        match (self.topology, self.group_by) {
            (TopologyKind::FilterMapValues, _) => topology::filter_map_values(input, output),
            (TopologyKind::AggregateIds, _) => {
                topology::aggregate_ids(input, store, partitions, output)
            }
            (TopologyKind::StreamTableJoin, _) => {
                topology::stream_table_join(input, &self.table_topic, store, output)
            }
            (TopologyKind::Count, GroupBy::InputKey) => {
                topology::windowed_count(input, store, size, output)
            }
            (TopologyKind::Count, GroupBy::IdMod) => {
                let spec = self.clone();
                let selector =
                    move |r: &topology::StreamRecord| spec.grouping_key(&r.key, &r.value);
                topology::windowed_count_by(input, selector, store, size, output)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(toml_text: &str) -> Result<StreamsSpec, toml::de::Error> {
        toml::from_str(toml_text)
    }

    #[test]
    fn streams_rebalance_cooperatively_unless_upgrade_from_is_2_3_or_older() {
        assert!(StreamsSpec::default().cooperative());
        for (version, cooperative) in [("0.10.0", false), ("2.3", false), ("2.4", true)] {
            let s = spec(&format!("upgrade_from = {version:?}")).expect("a known version");
            assert_eq!(s.cooperative(), cooperative, "upgrade_from = {version}");
        }
        assert!(spec("upgrade_from = \"3.8\"").unwrap().cooperative());
    }

    #[test]
    fn the_cache_defaults_to_kafka_s_10_mib_and_accepts_the_deprecated_name() {
        assert_eq!(StreamsSpec::default().cache_max_bytes(), 10_485_760);
        let s = spec("\"statestore.cache.max.bytes\" = 0").unwrap();
        assert_eq!((s.cache_max_bytes(), s.thread_cache().max_bytes), (0, 0));
        let s = spec("\"cache.max.bytes.buffering\" = 4096").unwrap();
        assert_eq!(s.cache_max_bytes(), 4_096);
        assert_eq!(s.check(), Ok(()));
        let both = "\"statestore.cache.max.bytes\" = 1\n\"cache.max.bytes.buffering\" = 2";
        let (key, message) = spec(both).unwrap().check().unwrap_err();
        assert_eq!(key, "streams.cache.max.bytes.buffering");
        assert!(message.contains("set one, not both"), "{message}");
        let e = spec("\"statestore.cache.max.bytes\" = -1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("statestore.cache.max.bytes"), "{e}");
    }

    #[test]
    fn group_by_id_mod_re_keys_through_a_repartition_topic_and_needs_a_key() {
        let s = StreamsSpec::default();
        assert_eq!(
            (s.repartition_topic(), s.grouping_key("k1", "4,0")),
            (None, "k1".into())
        );
        let s = spec("group_by = \"id-mod\"\ngroup_by_keys = 3").unwrap();
        let topic = "counts-windowed-counts-store-repartition";
        assert_eq!(s.repartition_topic().as_deref(), Some(topic));
        assert_eq!(
            s.topology("in", 3).repartition_topic("counts").as_deref(),
            Some(topic)
        );
        assert_eq!(s.grouping_key("k1", "4,0"), "g1");
        assert_eq!(s.grouping_key("k1", "x"), "g?");
        let (key, _) = spec("group_by = \"id-mod\"\ngroup_by_keys = 0")
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(key, "streams.group_by_keys");
        let e = spec("group_by = \"value\"").unwrap_err().to_string();
        assert!(e.contains("input-key") && e.contains("id-mod"), "{e}");
    }

    #[test]
    fn the_topology_key_picks_the_family_and_refuses_what_it_cannot_run() {
        assert_eq!(StreamsSpec::default().topology, TopologyKind::Count);
        let s = spec("topology = \"filter-map-values\"").unwrap();
        assert_eq!(s.check(), Ok(()));
        assert!(!s.stateful() && !s.topology("in", 3).stateful());
        let s = spec("topology = \"aggregate-ids\"").unwrap();
        assert!(s.stateful() && s.topology("in", 3).stateful());
        let (key, why) = spec("topology = \"aggregate-ids\"\ngroup_by = \"id-mod\"")
            .unwrap()
            .check()
            .unwrap_err();
        assert_eq!(key, "streams.group_by");
        assert!(why.contains("aggregate-ids"), "{why}");
        let standbys = "topology = \"filter-map-values\"\nnum_standby_replicas = 1";
        let (key, _) = spec(standbys).unwrap().check().unwrap_err();
        assert_eq!(key, "streams.num_standby_replicas");
        let e = spec("topology = \"join\"").unwrap_err().to_string();
        assert!(
            e.contains("filter-map-values") && e.contains("aggregate-ids"),
            "{e}"
        );
    }

    #[test]
    fn the_stream_table_join_reads_its_table_topic_as_the_changelog_and_refuses_the_rest() {
        let s = spec("topology = \"stream-table-join\"").unwrap();
        assert_eq!(s.check(), Ok(()));
        assert_eq!(
            s.changelog_topic(),
            "table",
            "the source topic is the changelog"
        );
        assert_eq!(s.topology("in", 3).table_topic(), Some("table"));
        assert_eq!(StreamsSpec::default().topology("in", 3).table_topic(), None);
        let refused = [
            ("num_standby_replicas = 1", "streams.num_standby_replicas"),
            ("table_records = 0", "streams.table_records"),
            ("table_abort_every = 0", "streams.table_abort_every"),
            ("table_topic = \"counts\"", "streams.table_topic"),
            ("group_by = \"id-mod\"", "streams.group_by"),
            ("\"max.task.idle.ms\" = 0", "streams.max.task.idle.ms"),
        ];
        for (line, key) in refused {
            let text = format!("topology = \"stream-table-join\"\n{line}");
            assert_eq!(spec(&text).unwrap().check().unwrap_err().0, key, "{line}");
        }
    }

    #[test]
    fn a_join_s_table_must_be_co_partitioned_with_the_stream_topic() {
        let s = spec("topology = \"stream-table-join\"\ntable_partitions = 2").unwrap();
        let (key, why) = s.check_copartitioned("in", 3).unwrap_err();
        assert_eq!(key, "streams.table_partitions");
        assert!(why.contains("topic.partitions = 3"), "{why}");
        assert_eq!(s.check_copartitioned("in", 2), Ok(()));
        let (key, _) = s.check_copartitioned("table", 2).unwrap_err();
        assert_eq!(key, "streams.table_topic");
        for idle in [-1, 1, 2_000] {
            let text = format!("topology = \"stream-table-join\"\n\"max.task.idle.ms\" = {idle}");
            assert_eq!(spec(&text).unwrap().check(), Ok(()), "{idle}");
        }
        // Outside the join: no second input to wait for, no table.
        for (text, key, why) in [
            (
                "\"max.task.idle.ms\" = 100",
                "max.task.idle.ms",
                "two inputs",
            ),
            (
                "table_partitions = 2",
                "table_partitions",
                "topology = \"count\" has none",
            ),
            (
                "table_abort_every = 2",
                "table_abort_every",
                "leave table_abort_every out",
            ),
        ] {
            let (found, message) = spec(text).unwrap().check().unwrap_err();
            assert_eq!(found, format!("streams.{key}"));
            assert!(message.contains(why), "{message}");
        }
        let count = spec("table_partitions = 2").unwrap();
        assert_eq!(
            count.check_copartitioned("in", 3),
            Ok(()),
            "only the join reads it"
        );
    }

    #[test]
    fn an_unknown_upgrade_from_is_refused_with_the_values_accepted() {
        let e = spec("upgrade_from = \"2.9\"").unwrap_err().to_string();
        assert!(e.contains("unknown upgrade_from \"2.9\""), "{e}");
        assert!(e.contains("2.3, 2.4"), "{e}");
    }
}

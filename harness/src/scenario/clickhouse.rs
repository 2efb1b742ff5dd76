//! `[sink]` of a `clickhouse-sink` scenario: the ClickHouse exactly-once sink's variant,
//! tables, Connect-side settings, and an armed fault point.
//!
//! The sink runs as a Kafka Connect connector: `tasks` worker nodes `worker-i` run one
//! herder's workers, and the connector has `tasks.max = tasks`, so each worker runs one
//! task while all are up; partitions move between tasks by the consumer group.
//!
//! ```toml
//! [sink]
//! variant = "seed"           # seed, connector-current, seed+token, seed+token+fencing
//! tolerateStateMismatch = false         # the connector's keys, under their names
//! "errors.tolerance" = "all"            # none | all
//! "errors.deadletterqueue.topic.name" = ""   # default <name>-dlq under all; "" = none
//! "errors.log.enable" = false
//! "offset.flush.interval.ms" = 60000     # the workers'; also the retriable-put redelivery
//! tasks = 2                             # worker nodes and tasks.max
//! batch_records_max = 100               # or "consumer.override.max.poll.records"
//! "consumer.override.group.protocol" = "classic"   # or consumer (KIP-848)
//! non_replicated_deduplication_window = 3
//! engine = "replicated-merge-tree"      # or merge-tree (the seed's)
//! clickhouse_version = "23.11"          # 23.7 (the seed's), 23.11, 25.9
//! [sink.fault_point]
//! point = "between-before-and-insert"   # or "enumerate": point and hit drawn from the seed
//! action = "pause"                      # crash | pause | crash-clickhouse
//! hit = 2
//! ```

use crate::connect::config::JSON_CONVERTER;
use crate::sinks::clickhouse::plan::Variant;
use crate::sinks::clickhouse::CONNECTOR_CLASS;
use eosim_sim::clickhouse::types::{Engine, TableDef, VersionProfile};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The ClickHouse server version whose defaults the model follows; KeeperMap needs 23.x.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum ClickHouseVersion {
    /// 23.7, the seed's: `replicated_deduplication_window` 100.
    #[default]
    #[serde(rename = "23.7")]
    V23_7,
    /// 23.11 to 25.8: `replicated_deduplication_window` 1000.
    #[serde(rename = "23.11")]
    V23_11,
    /// 25.9 and later: `replicated_deduplication_window` 10000.
    #[serde(rename = "25.9")]
    V25_9,
}

impl ClickHouseVersion {
    /// The model's profile of this version.
    pub fn profile(self) -> VersionProfile {
        match self {
            Self::V23_7 => VersionProfile::V23_7,
            Self::V23_11 => VersionProfile::V23_11,
            Self::V25_9 => VersionProfile::V25_9,
        }
    }
}

/// The target table's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TargetEngine {
    /// `MergeTree` (the seed's table): dedup only with `non_replicated_deduplication_window`.
    #[default]
    MergeTree,
    /// `ReplicatedMergeTree`: dedup window `replicated_deduplication_window`.
    ReplicatedMergeTree,
}

/// What an armed fault point does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPointAction {
    /// Kill the task's worker node; restart it `restart_after_ms` later.
    #[default]
    Crash,
    /// Pause the task's worker node (SIGSTOP) for `stall_ms`: a zombie when longer than
    /// the session timeout.
    Pause,
    /// Kill the clickhouse node `kill_after_ms_max` (drawn 1..=max) after the point, so an
    /// insert sent right after it is cut between blocks; restart `restart_after_ms` later.
    CrashClickhouse,
}

/// `[sink.fault_point]`: one buggify-style fault point armed for the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPointSpec {
    /// A name of `sinks::clickhouse::FAULT_POINTS`, or `enumerate`: seed `s` arms point
    /// `s % 5` at hit `1 + (s / 5) % hits_max`, with `crash-clickhouse` for `mid-insert`
    /// and `crash` elsewhere.
    pub point: String,
    /// Action (ignored under `enumerate`). Default crash.
    #[serde(default)]
    pub action: FaultPointAction,
    /// Which hit of the point (counted over every task) fires, 1-based. Default 1. On the
    /// real backend hits are counted in one process, `worker-0`'s first incarnation, the
    /// only one armed (`real::run::fault_point`).
    #[serde(default = "one")]
    pub hit: u64,
    /// Under `enumerate`: how many different hits to cycle through. Default 3.
    #[serde(default = "three")]
    pub hits_max: u64,
    /// Pause length, ms. Default 30000.
    #[serde(default = "thirty_s")]
    pub stall_ms: u64,
    /// Down time before the restart, ms. Default 3000.
    #[serde(default = "three_s")]
    pub restart_after_ms: u64,
    /// Upper bound of the delay before a `crash-clickhouse` kill, ms. Default 8.
    #[serde(default = "eight")]
    pub kill_after_ms_max: u64,
}

/// `[sink]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClickHouseSinkSpec {
    /// State machine variant. Default `seed`.
    #[serde(default = "seed")]
    pub variant: Variant,
    /// Connector name (group `connect-<name>`). Default `ck-sink`.
    #[serde(default = "connector_name")]
    pub name: String,
    /// Worker nodes `worker-0..`, and the connector's `tasks.max`. Default 2.
    #[serde(default = "two")]
    pub tasks: u32,
    /// `consumer.override.max.poll.records` (accepted under that name too). Default 100.
    #[serde(default = "hundred", alias = "consumer.override.max.poll.records")]
    pub batch_records_max: usize,
    /// F2, redelivery with other batch boundaries: when an armed `crash` fault point kills
    /// a worker, the operator puts the connector's configuration again with this
    /// `consumer.override.max.poll.records` while the worker is down, so the tasks restart
    /// (as on any Connect configuration change) polling batches of this size. Default: none.
    #[serde(default)]
    pub redelivery_batch_records_max: Option<usize>,
    /// `session.timeout.ms` of the worker group and of the task consumers; workers
    /// heartbeat every third of it. Default 10000.
    #[serde(default = "ten_s")]
    pub session_timeout_ms: u64,
    /// `consumer.override.max.poll.interval.ms` (accepted under that name too). Default
    /// 300000.
    #[serde(default = "five_min", alias = "consumer.override.max.poll.interval.ms")]
    pub max_poll_interval_ms: u64,
    /// The workers' `offset.flush.interval.ms`, ms. Besides the periodic commit it bounds
    /// how long a batch whose `put` threw a `RetriableException` waits for redelivery: the
    /// connector sets no `context.timeout`, so `WorkerSinkTask` polls its paused partitions
    /// until the next commit is due. Default 60000 (Connect's).
    #[serde(default = "sixty_s", rename = "offset.flush.interval.ms")]
    pub offset_flush_interval_ms: u64,
    /// When the operator posts the connector, ms after the start (to let the topic fill
    /// up); the tables are created before. Default 0.
    #[serde(default)]
    pub start_after_ms: u64,
    /// The ClickHouse client's request timeout, ms. Default 5000.
    #[serde(default = "five_s")]
    pub request_timeout_ms: u64,
    /// `max_insert_block_size` of data inserts. Default: the server's.
    #[serde(default)]
    pub max_insert_block_size: Option<usize>,
    /// `min_insert_block_size_rows` of data inserts: the server squashes parsed blocks up
    /// to this many rows (about a million by default), so a small batch is one part
    /// whatever `max_insert_block_size` says. Set it and `min_insert_block_size_bytes` to 0
    /// for one part per `max_insert_block_size` rows. Default: the server's.
    #[serde(default)]
    pub min_insert_block_size_rows: Option<u64>,
    /// `min_insert_block_size_bytes` of data inserts (see above). Default: the server's.
    #[serde(default)]
    pub min_insert_block_size_bytes: Option<u64>,
    /// Target engine. Default merge-tree.
    #[serde(default)]
    pub engine: TargetEngine,
    /// The server version whose defaults apply (the Replicated window). Default 23.7.
    #[serde(default)]
    pub clickhouse_version: ClickHouseVersion,
    /// `non_replicated_deduplication_window` of a MergeTree target. Default: off.
    #[serde(default)]
    pub non_replicated_deduplication_window: Option<u64>,
    /// `replicated_deduplication_window` of a Replicated target. Default: the version's.
    #[serde(default)]
    pub replicated_deduplication_window: Option<u64>,
    /// `cleanup_delay_period` of a Replicated target, ms: how often the cleanup thread
    /// trims its block ids to the window (until then older ids still deduplicate).
    /// Default: the server's 30 s.
    #[serde(default)]
    pub cleanup_delay_period_ms: Option<u64>,
    /// `tolerateStateMismatch` (the connector's name; `tolerate_state_mismatch` is
    /// accepted too). Default false.
    #[serde(
        default,
        rename = "tolerateStateMismatch",
        alias = "tolerate_state_mismatch"
    )]
    pub tolerate_state_mismatch: bool,
    /// `errors.tolerance` (`errors_tolerance` is accepted too): `none` or `all`. Default
    /// all.
    #[serde(
        default = "all",
        rename = "errors.tolerance",
        alias = "errors_tolerance"
    )]
    pub errors_tolerance: String,
    /// `errors.deadletterqueue.topic.name`. Default: `<name>-dlq` (context headers on)
    /// under `errors.tolerance=all`, none otherwise; `""` for none. Without it and without
    /// `errors.log.enable` Connect gives the task no errant record reporter and what the
    /// connector reports is dropped silently.
    #[serde(default, rename = "errors.deadletterqueue.topic.name")]
    pub errors_deadletterqueue_topic_name: Option<String>,
    /// `errors.log.enable`. Default false.
    #[serde(default, rename = "errors.log.enable")]
    pub errors_log_enable: bool,
    /// `consumer.override.isolation.level` of the task consumers: `read_uncommitted`
    /// (Kafka's and Connect's default: records of aborted transactions are delivered to
    /// `put`) or `read_committed`. Default: unset (read_uncommitted).
    #[serde(
        default,
        rename = "consumer.override.isolation.level",
        skip_serializing_if = "Option::is_none"
    )]
    pub isolation_level: Option<String>,
    /// `consumer.override.auto.offset.reset` of the task consumers: `earliest` (Connect's
    /// default for sink tasks), `latest` or `none`. Default: unset (earliest).
    #[serde(
        default,
        rename = "consumer.override.auto.offset.reset",
        skip_serializing_if = "Option::is_none"
    )]
    pub auto_offset_reset: Option<String>,
    /// `consumer.override.partition.assignment.strategy` of the task consumers (Kafka's
    /// class names or `range` / `cooperative-sticky`, comma-separated, as
    /// `connect::config` reads them). Default: unset (Kafka's list, eager).
    #[serde(
        default,
        rename = "consumer.override.partition.assignment.strategy",
        skip_serializing_if = "Option::is_none"
    )]
    pub partition_assignment_strategy: Option<String>,
    /// `consumer.override.group.protocol` of the task consumers: `classic` (default) or
    /// `consumer` (KIP-848: the coordinator assigns). Under `consumer` the task consumers
    /// take no `session.timeout.ms` / `heartbeat.interval.ms` override (Java's
    /// `ConsumerConfig` refuses them; the broker's `group.consumer.*` decide, `[cluster]
    /// group_consumer_*`), so `session_timeout_ms` is then the worker group's only.
    #[serde(
        default,
        rename = "consumer.override.group.protocol",
        skip_serializing_if = "Option::is_none"
    )]
    pub group_protocol: Option<String>,
    /// `consumer.override.group.remote.assignor` (`uniform` / `range`; the consumer
    /// protocol only). Default: unset (the broker's first, `uniform`).
    #[serde(
        default,
        rename = "consumer.override.group.remote.assignor",
        skip_serializing_if = "Option::is_none"
    )]
    pub group_remote_assignor: Option<String>,
    /// An armed fault point.
    #[serde(default)]
    pub fault_point: Option<FaultPointSpec>,
}

impl ClickHouseSinkSpec {
    /// The task consumers' isolation: `consumer.override.isolation.level`, else Kafka's
    /// read_uncommitted (Connect's `Worker.baseConsumerConfigs` does not set it).
    pub fn consumer_isolation(&self) -> eosim_sim::kafka::Isolation {
        match self.isolation_level.as_deref() {
            Some("read_committed") => eosim_sim::kafka::Isolation::ReadCommitted,
            _ => eosim_sim::kafka::Isolation::ReadUncommitted,
        }
    }

    /// The dead-letter queue topic the connector is configured with (see
    /// [`Self::errors_deadletterqueue_topic_name`]).
    pub fn dlq_topic(&self) -> Option<String> {
        match &self.errors_deadletterqueue_topic_name {
            Some(topic) if topic.trim().is_empty() => None,
            Some(topic) => Some(topic.clone()),
            None => (self.errors_tolerance == "all").then(|| format!("{}-dlq", self.name)),
        }
    }

    /// The connector's configuration as posted to Connect, for a ClickHouse at
    /// `hostname:port` (HTTP) reading `topic`: Connect's keys (`tasks.max` = `tasks`,
    /// `consumer.override.max.poll.records` = `batch_records_max`,
    /// `consumer.override.max.poll.interval.ms`, `consumer.override.session.timeout.ms` =
    /// `session_timeout_ms` with heartbeats every third of it: a task consumer does not take
    /// the worker group's `session.timeout.ms`), JsonConverter without schemas,
    /// `errors.tolerance`, the dead-letter queue of [`Self::dlq_topic`] with context headers,
    /// `errors.log.enable`, then the sink's own keys (`exactlyOnce`, `variant`,
    /// `tolerateStateMismatch`, the insert settings). One builder for both backends, so the
    /// simulated and the real connector cannot drift apart; each adds only how it reaches its
    /// services.
    pub fn connector_props(
        &self,
        topic: &str,
        hostname: &str,
        port: u16,
    ) -> BTreeMap<String, String> {
        let heartbeat_ms = (self.session_timeout_ms / 3).max(100);
        let mut p: BTreeMap<String, String> = [
            ("name", self.name.clone()),
            ("connector.class", CONNECTOR_CLASS.into()),
            ("topics", topic.to_string()),
            ("tasks.max", self.tasks.to_string()),
            ("key.converter", JSON_CONVERTER.into()),
            ("value.converter", JSON_CONVERTER.into()),
            ("key.converter.schemas.enable", "false".into()),
            ("value.converter.schemas.enable", "false".into()),
            (
                "consumer.override.max.poll.records",
                self.batch_records_max.to_string(),
            ),
            (
                "consumer.override.max.poll.interval.ms",
                self.max_poll_interval_ms.to_string(),
            ),
            ("errors.tolerance", self.errors_tolerance.clone()),
            ("exactlyOnce", "true".into()),
            ("hostname", hostname.to_string()),
            ("port", port.to_string()),
            (
                "tolerateStateMismatch",
                self.tolerate_state_mismatch.to_string(),
            ),
            ("variant", self.variant.name().into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.errors_log_enable {
            p.insert("errors.log.enable".into(), "true".into());
        }
        if self.group_protocol.as_deref() != Some("consumer") {
            let session = ("session.timeout.ms", self.session_timeout_ms.to_string());
            let heartbeat = ("heartbeat.interval.ms", heartbeat_ms.to_string());
            for (key, value) in [session, heartbeat] {
                p.insert(format!("consumer.override.{key}"), value);
            }
        }
        let consumer_overrides = [
            ("consumer.override.isolation.level", &self.isolation_level),
            (
                "consumer.override.auto.offset.reset",
                &self.auto_offset_reset,
            ),
            (
                "consumer.override.partition.assignment.strategy",
                &self.partition_assignment_strategy,
            ),
            ("consumer.override.group.protocol", &self.group_protocol),
            (
                "consumer.override.group.remote.assignor",
                &self.group_remote_assignor,
            ),
        ];
        for (key, value) in consumer_overrides {
            if let Some(value) = value {
                p.insert(key.into(), value.clone());
            }
        }
        if let Some(topic) = self.dlq_topic() {
            p.insert("errors.deadletterqueue.topic.name".into(), topic);
            let headers = "errors.deadletterqueue.context.headers.enable";
            p.insert(headers.into(), "true".into());
        }
        for (key, value) in self.insert_setting_props() {
            p.insert(key.into(), value);
        }
        p
    }

    /// The ClickHouse insert settings of `[sink]` that are set, as the connector's
    /// properties (`max_insert_block_size`, `min_insert_block_size_rows`, `_bytes`).
    pub fn insert_setting_props(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(n) = self.max_insert_block_size {
            out.push(("max_insert_block_size", n.to_string()));
        }
        if let Some(n) = self.min_insert_block_size_rows {
            out.push(("min_insert_block_size_rows", n.to_string()));
        }
        if let Some(n) = self.min_insert_block_size_bytes {
            out.push(("min_insert_block_size_bytes", n.to_string()));
        }
        out
    }

    /// The seed's target table with the scenario's engine and dedup settings.
    pub fn target_table(&self) -> TableDef {
        let mut def = TableDef::kafka2ck();
        if self.engine == TargetEngine::ReplicatedMergeTree {
            def.engine = Engine::ReplicatedMergeTree;
        }
        def.settings.non_replicated_deduplication_window = self.non_replicated_deduplication_window;
        def.settings.replicated_deduplication_window = self.replicated_deduplication_window;
        if self.cleanup_delay_period_ms.is_some() {
            def.settings.cleanup_delay_period_ms = self.cleanup_delay_period_ms;
        }
        def
    }
}

impl Default for ClickHouseSinkSpec {
    fn default() -> Self {
        toml::from_str("").expect("every sink key has a default")
    }
}

fn seed() -> Variant {
    Variant::Seed
}
fn connector_name() -> String {
    "ck-sink".into()
}
fn one() -> u64 {
    1
}
fn two() -> u32 {
    2
}
fn three() -> u64 {
    3
}
fn eight() -> u64 {
    8
}
fn hundred() -> usize {
    100
}
fn three_s() -> u64 {
    3_000
}
fn five_s() -> u64 {
    5_000
}
fn ten_s() -> u64 {
    10_000
}
fn thirty_s() -> u64 {
    30_000
}
fn sixty_s() -> u64 {
    60_000
}

fn five_min() -> u64 {
    300_000
}
fn all() -> String {
    "all".into()
}

//! A Kafka Streams-style processor: a small topology API, tasks per input partition spread
//! over instances by the consumer group, state stores with changelog topics, and
//! `processing.guarantee` = `at_least_once` or `exactly_once_v2` (models-reference E.5).
//!
//! # Sections
//! - [`topology`]: `StreamsBuilder::stream(topic) → filter / map_values → group_by_key →
//!   windowed_by → count(store) → to_stream().to(topic)`, the seed's per-key count in
//!   5-second tumbling windows as [`topology::windowed_count`].
//! - [`store`]: key-value state stores, in memory or "persistent" (a disk outside the
//!   process, keyed by instance, that keeps only what was flushed).
//! - [`processor`]: the processing and commit loop of one instance over the client traits
//!   and a host (clock, history, producers, changelog restore): tasks, restore, commit
//!   under each guarantee.
//! - `instance` (simulation only): the simulated host of one instance (`streams-i`); the
//!   real one is `real::run::streams_instance`.
//! - [`assignor`]: Streams' high-availability task assignment (KIP-441): actives, standbys
//!   (`num.standby.replicas`) and warm-ups from each instance's reported changelog lags.
//! - `standby` (simulation only): the group leader's Streams assignor over the consumer
//!   group and the standby tasks an instance keeps from the changelog (read_committed under
//!   exactly_once_v2), promoted to active by restoring only the tail past their position.
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
pub mod processor;
pub mod store;
pub mod topology;

#[cfg(madsim)]
pub mod instance;
#[cfg(madsim)]
pub mod restore;
#[cfg(madsim)]
pub mod standby;

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
/// `num_standby_replicas = 0`, `acceptable_recovery_lag = 10000`, `max_warmup_replicas = 2`.
///
/// With `num_standby_replicas = 0` (Streams' default) the group uses the range assignor, as
/// before standbys existed here; above 0 the leader runs Streams' high-availability
/// assignment ([`assignor`]) and instances keep standby copies of stores (in memory only,
/// whatever `store` says).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamsSpec {
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
}

impl Default for StreamsSpec {
    fn default() -> Self {
        Self {
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
        }
    }
}

impl StreamsSpec {
    /// `commit.interval.ms` in effect.
    pub fn commit_interval_ms(&self) -> u64 {
        self.commit_interval_ms
            .unwrap_or_else(|| self.processing_guarantee.default_commit_interval_ms())
    }

    /// The assignor settings of this spec.
    pub fn assignor_config(&self) -> assignor::AssignorConfig {
        assignor::AssignorConfig {
            num_standby_replicas: self.num_standby_replicas,
            acceptable_recovery_lag: self.acceptable_recovery_lag,
            max_warmup_replicas: self.max_warmup_replicas,
        }
    }

    /// `<application.id>-<store>-changelog`.
    pub fn changelog_topic(&self) -> String {
        format!("{}-{}-changelog", self.application_id, self.store_name)
    }

    /// The topology the scenario runs: count per key in tumbling windows of
    /// `window_size_ms` (unwindowed when 0), from `input` to `output_topic`.
    pub fn topology(&self, input: &str) -> topology::Topology {
        topology::windowed_count(
            input,
            &self.store_name,
            self.window_size_ms,
            &self.output_topic,
        )
    }
}

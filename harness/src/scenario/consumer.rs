//! `[consumer]` of a `kafka-consume` scenario: the sink group's consumer configuration,
//! under the Java consumer's names (`ConsumerConfig`).
//!
//! ```toml
//! [consumer]
//! "isolation.level" = "read_committed"   # read_uncommitted (default) | read_committed
//! "auto.offset.reset" = "earliest"       # earliest (this pipeline's) | latest | none
//! "enable.auto.commit" = true            # default false: the workload commits itself
//! "auto.commit.interval.ms" = 5000
//! "max.poll.interval.ms" = 300000
//! "fetch.min.bytes" = 1                  # a Fetch waits at the broker for this many bytes
//! "fetch.max.wait.ms" = 500              # ... or this long (DelayedFetch)
//! # Kafka's class names or short names, comma-separated, most preferred first. The default
//! # is Kafka 3.x/4.x's "RangeAssignor,CooperativeStickyAssignor" (range, eager);
//! # "cooperative-sticky" alone makes the consumers cooperative (KIP-429).
//! "partition.assignment.strategy" = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
//! "metadata.max.age.ms" = 300000          # ms: the group leader sees added partitions then
//! "group.instance.id" = "sink"           # static members (KIP-345): consumer-0 is "sink-consumer-0"
//! "group.protocol" = "consumer"          # classic (default) | consumer (KIP-848)
//! "group.remote.assignor" = "range"      # consumer protocol only: uniform (default) | range
//! ```
//!
//! With `"group.protocol" = "consumer"` the coordinator assigns (KIP-848) and the keys of
//! the classic protocol are refused as Java's `ConsumerConfig` refuses them when set
//! (`checkUnsupportedConfigsPostProcess`): `partition.assignment.strategy`, and
//! `session.timeout.ms` (`[workload] session_timeout_ms` other than its default; the
//! broker's `[cluster] group_consumer_session_timeout_ms` rules, and its
//! `group_consumer_heartbeat_interval_ms` the heartbeats). `group.instance.id` is refused
//! too: the model has no KIP-848 static membership. Under `classic`,
//! `group.remote.assignor` is refused, as Java does.
//!
//! `max.poll.records` is `[workload] max_poll_records` (default 50 here, 500 in Kafka) and
//! `session.timeout.ms` is `[workload] session_timeout_ms`, as before this section existed.
//! The other sink pipelines set their consumers elsewhere, under their own components'
//! names: `connect-jdbc` in `[connector]` and `clickhouse-sink` in `[sink]`
//! (`consumer.override.isolation.level`, `consumer.override.auto.offset.reset`,
//! `consumer.override.max.poll.records`, `consumer.override.max.poll.interval.ms`), and
//! `routine-load` in `[routine_load.properties]` (`property.isolation.level`,
//! `property.kafka_default_offsets`).

use super::Scenario;
use crate::client::{
    AssignmentStrategy, AutoOffsetReset, ConsumerConfig, GroupProtocol, IsolationLevel,
};
use eosim_sim::kafka::group::consumer_protocol::SERVER_ASSIGNORS;
use serde::{Deserialize, Serialize};

/// The consumer group of `kafka-consume`'s sink consumers.
pub const SINK_GROUP: &str = "sink";

/// The real tier's `kafka-consume` consumers' `fetch.max.wait.ms` where `[consumer]` sets
/// none, ms: shorter than Kafka's 500, so the end-to-end latency a real run measures is the
/// pipeline's, not the broker's wait for more bytes.
pub const REAL_FETCH_MAX_WAIT_MS: u64 = 100;

impl Scenario {
    /// The `kafka-consume` sink consumers' configuration, in simulation and on the real
    /// tier alike: group [`SINK_GROUP`], this pipeline's `auto.offset.reset = earliest`,
    /// `[workload]`'s `session_timeout_ms` (heartbeats a third of it), `max_poll_records`
    /// and `request_timeout_ms`, then every key of `[consumer]` ([`ConsumerSpec::apply`]).
    /// `process` is the consumer's process name (`consumer-<n>`), which its
    /// `group.instance.id` ends with.
    pub fn sink_consumer_config(&self, process: &str) -> ConsumerConfig {
        let w = &self.workload;
        let mut config = ConsumerConfig::new(SINK_GROUP);
        config.auto_offset_reset = AutoOffsetReset::Earliest;
        config.session_timeout_ms = w.session_timeout_ms;
        config.heartbeat_interval_ms = (w.session_timeout_ms / 3).max(100);
        config.max_poll_records = w.max_poll_records;
        config.request_timeout_ms = w.request_timeout_ms;
        self.consumer.apply(&mut config);
        config.group_instance_id = self.consumer.instance_id(process);
        config
    }
}

/// Whether `level` is `read_committed` (for `skip_serializing_if` where that is the
/// default).
pub fn is_read_committed(level: &IsolationLevel) -> bool {
    *level == IsolationLevel::ReadCommitted
}

/// `[consumer]`.
///
/// ## Default values
/// `partition.assignment.strategy` = Kafka's `RangeAssignor, CooperativeStickyAssignor`,
/// `isolation.level = "read_uncommitted"` (Kafka's), `auto.offset.reset = "earliest"`
/// (this pipeline's own setting, made before the consumers start; Kafka's default is
/// `latest`), `enable.auto.commit = false` (the workload commits per `[workload] commit`;
/// Kafka's default is true), `auto.commit.interval.ms = 5000`, `max.poll.interval.ms =
/// 300000`, `fetch.min.bytes = 1`, `fetch.max.wait.ms = 500`, `metadata.max.age.ms =
/// 300000` and `group.protocol = "classic"` (Kafka's); `group.remote.assignor` unset (the
/// broker's `uniform`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsumerSpec {
    /// `isolation.level`.
    #[serde(rename = "isolation.level")]
    pub isolation_level: IsolationLevel,
    /// `auto.offset.reset`: where a consumer starts on a partition its group has no
    /// committed offset for. `none` fails the poll with Java's
    /// `NoOffsetForPartitionException`; the consumer keeps failing, and the run stalls
    /// with that reason.
    #[serde(rename = "auto.offset.reset")]
    pub auto_offset_reset: AutoOffsetReset,
    /// `enable.auto.commit`: commit the positions of everything earlier polls returned,
    /// from inside `poll`, once `auto.commit.interval.ms` has passed since the last auto
    /// commit (Java's `ConsumerCoordinator.maybeAutoCommitOffsetsAsync`). The workload then
    /// makes no commits of its own.
    #[serde(rename = "enable.auto.commit")]
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms`, ms.
    #[serde(rename = "auto.commit.interval.ms")]
    pub auto_commit_interval_ms: u64,
    /// `max.poll.interval.ms`, ms: a member that does not poll for this long leaves the
    /// group (its partitions move); also the rebalance timeout.
    #[serde(rename = "max.poll.interval.ms")]
    pub max_poll_interval_ms: u64,
    /// `fetch.min.bytes`: the broker holds a Fetch until this many bytes are readable
    /// (below the HW, or the LSO at read_committed), or `fetch.max.wait.ms` passed. 0 and 1
    /// answer as soon as anything is readable.
    #[serde(rename = "fetch.min.bytes")]
    pub fetch_min_bytes: u32,
    /// `fetch.max.wait.ms`, ms: the longest the broker holds a Fetch. 0 answers at once
    /// (the consumer then fetches in a tight loop, as Java's does). `None`: Kafka's 500 in
    /// simulation; the real tier's workers then use [`REAL_FETCH_MAX_WAIT_MS`].
    #[serde(rename = "fetch.max.wait.ms", skip_serializing_if = "Option::is_none")]
    pub fetch_max_wait_ms: Option<u64>,
    /// `partition.assignment.strategy` as written (see [`AssignmentStrategy::parse_list`]);
    /// `None`: Kafka's default, `RangeAssignor` then `CooperativeStickyAssignor`.
    #[serde(
        rename = "partition.assignment.strategy",
        skip_serializing_if = "Option::is_none"
    )]
    pub partition_assignment_strategy: Option<String>,
    /// `metadata.max.age.ms`, ms: how old the subscribed topic's metadata may get before
    /// the consumer fetches it again; the group's leader rejoins when the partition count
    /// changed, so partitions added to the topic are assigned only then.
    #[serde(rename = "metadata.max.age.ms")]
    pub metadata_max_age_ms: u64,
    /// `group.instance.id` (KIP-345): the consumers become static members, process
    /// `consumer-<n>` with instance id `<this>-consumer-<n>` (each member needs its own, as
    /// Kafka Streams suffixes its threads' consumers, `StreamThread.create`). A static member
    /// sends no LeaveGroup when it stops, and one restarted within `session.timeout.ms`
    /// takes its old place and partitions without a rebalance; what the coordinator tells
    /// a restarted leader is `[cluster] static_member_rejoin` (KIP-814). `None`: dynamic
    /// members (Kafka's default).
    #[serde(rename = "group.instance.id", skip_serializing_if = "Option::is_none")]
    pub group_instance_id: Option<String>,
    /// `group.protocol`: `classic` (default, Kafka's) or `consumer` (KIP-848: the
    /// coordinator assigns through `ConsumerGroupHeartbeat`, members reconcile; see the
    /// module docs for the keys it refuses).
    #[serde(rename = "group.protocol", skip_serializing_if = "is_classic")]
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor` (KIP-848, consumer protocol only): `uniform` or `range`.
    /// `None`: the broker's default, `uniform`.
    #[serde(
        rename = "group.remote.assignor",
        skip_serializing_if = "Option::is_none"
    )]
    pub group_remote_assignor: Option<String>,
}

/// `Err((key, message))` when `[workload] session_timeout_ms` (the consumers'
/// `session.timeout.ms`) is set away from `default_ms` under `protocol = consumer`: Java's
/// `ConsumerConfig` refuses `session.timeout.ms` there; the broker's
/// `group.consumer.session.timeout.ms` applies (`[cluster] group_consumer_session_timeout_ms`).
pub(super) fn check_session_timeout(
    protocol: GroupProtocol,
    session_timeout_ms: u64,
    default_ms: u64,
) -> Result<(), (String, String)> {
    super::ensure(
        protocol == GroupProtocol::Classic || session_timeout_ms == default_ms,
        "workload.session_timeout_ms",
        "is not supported when group.protocol is consumer (session.timeout.ms, which Java's \
         ConsumerConfig refuses: the broker's cluster.group_consumer_session_timeout_ms \
         applies)"
            .into(),
    )
}

/// Whether `protocol` is the default, classic (for `skip_serializing_if`).
pub(super) fn is_classic(protocol: &GroupProtocol) -> bool {
    *protocol == GroupProtocol::Classic
}

impl Default for ConsumerSpec {
    fn default() -> Self {
        Self {
            isolation_level: IsolationLevel::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Earliest,
            enable_auto_commit: false,
            auto_commit_interval_ms: 5_000,
            max_poll_interval_ms: 300_000,
            fetch_min_bytes: 1,
            fetch_max_wait_ms: None,
            partition_assignment_strategy: None,
            metadata_max_age_ms: crate::client::METADATA_MAX_AGE_MS,
            group_instance_id: None,
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
        }
    }
}

impl ConsumerSpec {
    /// Sets this section's keys on `config`.
    pub fn apply(&self, config: &mut ConsumerConfig) {
        config.isolation_level = self.isolation_level.to_isolation();
        config.auto_offset_reset = self.auto_offset_reset;
        config.max_poll_interval_ms = self.max_poll_interval_ms;
        config.fetch_min_bytes = self.fetch_min_bytes;
        if let Some(ms) = self.fetch_max_wait_ms {
            config.fetch_max_wait_ms = ms;
        }
        config.metadata_max_age_ms = self.metadata_max_age_ms;
        if let Some(list) = self.assignment_strategy() {
            config.partition_assignment_strategy = list;
        }
        config.group_protocol = self.group_protocol;
        config.group_remote_assignor = self.group_remote_assignor.clone();
    }

    /// `Err((key, message))` for a key `group.protocol` rules out (Java's
    /// `ConsumerConfig.checkUnsupportedConfigsPostProcess`, and what the model lacks);
    /// `session_timeout_ms` is `[workload] session_timeout_ms`, `default_ms` its default.
    pub(super) fn check_group_protocol(
        &self,
        session_timeout_ms: u64,
        default_ms: u64,
    ) -> Result<(), (String, String)> {
        let consumer = self.group_protocol == GroupProtocol::Consumer;
        let refused = |key: &str, set: bool, protocol: &str, why: &str| {
            super::ensure(
                !set,
                key,
                format!("is not supported when group.protocol is {protocol} ({why})"),
            )
        };
        let java = "Java's ConsumerConfig refuses it";
        refused(
            "consumer.group.remote.assignor",
            !consumer && self.group_remote_assignor.is_some(),
            "classic",
            java,
        )?;
        let strategy = self.partition_assignment_strategy.is_some();
        let why = "the coordinator assigns under KIP-848; set group.remote.assignor";
        refused(
            "consumer.partition.assignment.strategy",
            consumer && strategy,
            "consumer",
            why,
        )?;
        check_session_timeout(self.group_protocol, session_timeout_ms, default_ms)?;
        let why = "eosim models no KIP-848 static membership";
        refused(
            "consumer.group.instance.id",
            consumer && self.group_instance_id.is_some(),
            "consumer",
            why,
        )?;
        if let Some(name) = &self.group_remote_assignor {
            super::ensure(
                SERVER_ASSIGNORS.contains(&name.as_str()),
                "consumer.group.remote.assignor",
                format!("expected one of {SERVER_ASSIGNORS:?} (the brokers' group.consumer.assignors), found {name:?}"),
            )?;
        }
        Ok(())
    }

    /// Consumer process `process`'s `group.instance.id`, if the consumers are static.
    pub fn instance_id(&self, process: &str) -> Option<String> {
        let prefix = self.group_instance_id.as_deref()?;
        Some(format!("{prefix}-{process}"))
    }

    /// `partition.assignment.strategy` parsed; `None` when unset or invalid ([`Self::check`]
    /// refuses the latter when the file is read).
    fn assignment_strategy(&self) -> Option<Vec<AssignmentStrategy>> {
        let value = self.partition_assignment_strategy.as_deref()?;
        AssignmentStrategy::parse_list(value).ok()
    }

    /// `Err((key, message))` for a value Kafka would refuse.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        super::ensure(
            self.auto_commit_interval_ms >= 1,
            "consumer.auto.commit.interval.ms",
            "expected at least 1 ms, found 0".into(),
        )?;
        super::ensure(
            self.max_poll_interval_ms >= 1,
            "consumer.max.poll.interval.ms",
            "expected at least 1 ms, found 0".into(),
        )?;
        if let Some(id) = &self.group_instance_id {
            // Kafka's `JoinGroupRequest.validateGroupInstanceId` (the topic-name rules).
            let valid = !id.is_empty()
                && id.len() <= 249
                && id != "."
                && id != ".."
                && (id.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            super::ensure(
                valid,
                "consumer.group.instance.id",
                format!(
                    "expected 1 to 249 characters of [a-zA-Z0-9._-], not \".\" or \"..\" \
                     (Kafka's JoinGroupRequest.validateGroupInstanceId), found {id:?}"
                ),
            )?;
        }
        if let Some(value) = &self.partition_assignment_strategy {
            let key = "consumer.partition.assignment.strategy";
            AssignmentStrategy::parse_list(value).map_err(|e| (key.to_string(), e))?;
        }
        Ok(())
    }
}

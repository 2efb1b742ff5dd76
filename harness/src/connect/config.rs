//! Connector and worker configuration, with the keys Kafka Connect itself uses
//! (`ConnectorConfig`, `SinkConnectorConfig`, `DistributedConfig`, `WorkerConfig`).
//!
//! Configurations arrive as string maps, as over Connect's REST API; every key is checked:
//! an unknown key, a bad value or a missing required key is a [`ConfigError`] naming it.
//!
//! ## Default values
//! `tasks.max` 1, `errors.tolerance` none, `errors.retry.timeout` 0,
//! `errors.retry.delay.max.ms` 60000, `errors.deadletterqueue.topic.name` "" (none),
//! `errors.deadletterqueue.context.headers.enable` false, `value.converter.schemas.enable`
//! true, `consumer.override.isolation.level` read_uncommitted,
//! `consumer.override.auto.offset.reset` earliest (`Worker.baseConsumerConfigs` sets it
//! before the overrides; the consumer's own default is latest),
//! `consumer.override.max.poll.records` 500, `consumer.override.max.poll.interval.ms`
//! 300000, `consumer.override.session.timeout.ms` and
//! `consumer.override.fetch.max.wait.ms` 500, `consumer.override.fetch.min.bytes` 1,
//! `consumer.override.heartbeat.interval.ms` unset (the consumer's own 45000 and 3000:
//! a task consumer does not take the worker group's `session.timeout.ms`, as
//! `Worker.baseConsumerConfigs` passes only `consumer.`-prefixed worker keys and the
//! connector's `consumer.override.` keys); worker: `offset.flush.interval.ms` 60000,
//! `offset.flush.timeout.ms` 5000, `session.timeout.ms` 10000, `heartbeat.interval.ms`
//! 3000, `scheduled.rebalance.max.delay.ms` 300000, `task.shutdown.graceful.timeout.ms`
//! 5000. `consumer.override.group.protocol` classic (KIP-848's `consumer` refuses the
//! classic protocol's consumer keys, as Java does), `consumer.override.group.remote.assignor`
//! unset (the broker's `uniform`).

use crate::client::{AssignmentStrategy, AutoOffsetReset, GroupProtocol};
use eosim_sim::kafka::Isolation;
use std::collections::BTreeMap;

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key no component knows.
    #[error("unknown configuration key `{key}`{hint}")]
    UnknownKey {
        /// The key.
        key: String,
        /// A suggestion, with its leading text, or empty.
        hint: String,
    },
    /// A key's value does not parse or is out of range.
    #[error("invalid value `{value}` for `{key}`: {expected}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// A required key is absent.
    #[error("missing required configuration `{0}`")]
    Missing(String),
}

/// Framework keys of a sink connector (`ConnectorConfig` and `SinkConnectorConfig`).
pub const FRAMEWORK_KEYS: &[&str] = &[
    "name",
    "connector.class",
    "topics",
    "tasks.max",
    "key.converter",
    "value.converter",
    "key.converter.schemas.enable",
    "value.converter.schemas.enable",
    "schemas.enable",
    "errors.tolerance",
    "errors.retry.timeout",
    "errors.retry.delay.max.ms",
    "errors.log.enable",
    "errors.log.include.messages",
    "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.topic.replication.factor",
    "errors.deadletterqueue.context.headers.enable",
    "consumer.override.isolation.level",
    "consumer.override.auto.offset.reset",
    "consumer.override.max.poll.records",
    "consumer.override.max.poll.interval.ms",
    "consumer.override.session.timeout.ms",
    "consumer.override.heartbeat.interval.ms",
    "consumer.override.partition.assignment.strategy",
    "consumer.override.fetch.max.wait.ms",
    "consumer.override.fetch.min.bytes",
    "consumer.override.group.protocol",
    "consumer.override.group.remote.assignor",
];

/// Converter classes the worker knows.
pub const JSON_CONVERTER: &str = "org.apache.kafka.connect.json.JsonConverter";
/// `StringConverter`: the key or value as a JSON string.
pub const STRING_CONVERTER: &str = "org.apache.kafka.connect.storage.StringConverter";

/// `errors.tolerance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tolerance {
    /// `none`: the first error fails the task.
    None,
    /// `all`: failing records are skipped (and sent to the DLQ when one is configured).
    All,
}

/// A sink connector's framework configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorConfig {
    /// `name`.
    pub name: String,
    /// `connector.class`.
    pub connector_class: String,
    /// `topics`, split on commas.
    pub topics: Vec<String>,
    /// `tasks.max`.
    pub tasks_max: u32,
    /// `key.converter`: JsonConverter or StringConverter.
    pub key_converter: String,
    /// `value.converter`.
    pub value_converter: String,
    /// `key.converter.schemas.enable` (default true).
    pub key_schemas_enable: bool,
    /// `value.converter.schemas.enable` (default true; the seed's top-level
    /// `schemas.enable` is taken as a fallback for both).
    pub value_schemas_enable: bool,
    /// `errors.tolerance`.
    pub tolerance: Tolerance,
    /// `errors.retry.timeout`, ms; -1 forever.
    pub retry_timeout_ms: i64,
    /// `errors.retry.delay.max.ms`.
    pub retry_delay_max_ms: u64,
    /// `errors.deadletterqueue.topic.name`; `None` when empty.
    pub dlq_topic: Option<String>,
    /// `errors.deadletterqueue.topic.replication.factor`.
    pub dlq_replication_factor: u32,
    /// `errors.deadletterqueue.context.headers.enable`.
    pub dlq_context_headers: bool,
    /// `consumer.override.isolation.level`.
    pub isolation_level: Isolation,
    /// `consumer.override.auto.offset.reset`: where a task consumer starts on a partition
    /// its group has no committed offset for (`none`: the task fails with
    /// `NoOffsetForPartitionException`).
    pub auto_offset_reset: AutoOffsetReset,
    /// `consumer.override.max.poll.records`.
    pub max_poll_records: usize,
    /// `consumer.override.max.poll.interval.ms`.
    pub max_poll_interval_ms: u64,
    /// `consumer.override.session.timeout.ms`; `None`: the consumer's default.
    pub session_timeout_ms: Option<u64>,
    /// `consumer.override.heartbeat.interval.ms`; `None`: the consumer's default.
    pub heartbeat_interval_ms: Option<u64>,
    /// `consumer.override.partition.assignment.strategy`; `None`: the consumer's default
    /// (`RangeAssignor, CooperativeStickyAssignor`: range, eager).
    pub partition_assignment_strategy: Option<Vec<AssignmentStrategy>>,
    /// `consumer.override.fetch.max.wait.ms`: how long the broker may hold a Fetch for
    /// `fetch.min.bytes`, ms.
    pub fetch_max_wait_ms: u64,
    /// `consumer.override.fetch.min.bytes`.
    pub fetch_min_bytes: u32,
    /// `consumer.override.group.protocol`: `classic` (default) or `consumer` (KIP-848).
    pub group_protocol: GroupProtocol,
    /// `consumer.override.group.remote.assignor` (consumer protocol only).
    pub group_remote_assignor: Option<String>,
    /// Every key as given (the sink reads its own keys from here).
    pub raw: BTreeMap<String, String>,
}

/// Reads `key` of `raw`, or `default`.
pub fn get<'a>(raw: &'a BTreeMap<String, String>, key: &str, default: &'a str) -> &'a str {
    raw.get(key).map_or(default, String::as_str)
}

/// Parses `key` as a number.
///
/// # Errors
/// [`ConfigError::InvalidValue`].
pub fn number<T: std::str::FromStr>(
    raw: &BTreeMap<String, String>,
    key: &str,
    default: &str,
) -> Result<T, ConfigError> {
    let value = get(raw, key, default);
    value
        .trim()
        .parse()
        .map_err(|_| invalid(key, value, "a whole number"))
}

/// Parses `key` as a number when it is set.
///
/// # Errors
/// [`ConfigError::InvalidValue`].
pub fn optional_number<T: std::str::FromStr>(
    raw: &BTreeMap<String, String>,
    key: &str,
) -> Result<Option<T>, ConfigError> {
    raw.get(key)
        .map(|value| {
            value
                .trim()
                .parse()
                .map_err(|_| invalid(key, value, "a whole number"))
        })
        .transpose()
}

/// Parses `key` as a boolean (`true` / `false`, any case).
///
/// # Errors
/// [`ConfigError::InvalidValue`].
pub fn boolean(
    raw: &BTreeMap<String, String>,
    key: &str,
    default: &str,
) -> Result<bool, ConfigError> {
    let value = get(raw, key, default);
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(invalid(key, value, "true or false")),
    }
}

/// An [`ConfigError::InvalidValue`].
pub fn invalid(key: &str, value: &str, expected: &str) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// Checks that every key of `raw` is in one of `known`.
///
/// # Errors
/// [`ConfigError::UnknownKey`] for the first unknown key (in key order), with a hint for
/// the seed's `connector.url`-style misspellings.
pub fn check_keys(raw: &BTreeMap<String, String>, known: &[&[&str]]) -> Result<(), ConfigError> {
    for key in raw.keys() {
        if known.iter().any(|list| list.contains(&key.as_str())) {
            continue;
        }
        let hint = match key.strip_prefix("connector.") {
            Some(rest) if ["url", "user", "password"].contains(&rest) => {
                format!(" (did you mean `connection.{rest}`?)")
            }
            _ => String::new(),
        };
        return Err(ConfigError::UnknownKey {
            key: key.clone(),
            hint,
        });
    }
    Ok(())
}

impl ConnectorConfig {
    /// Parses the framework keys of `raw`; `sink_keys` are the keys the connector class
    /// accepts besides them.
    ///
    /// # Errors
    /// The first unknown key, bad value or missing required key.
    pub fn parse(raw: &BTreeMap<String, String>, sink_keys: &[&str]) -> Result<Self, ConfigError> {
        check_keys(raw, &[FRAMEWORK_KEYS, sink_keys])?;
        let required = |key: &str| {
            raw.get(key)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or(ConfigError::Missing(key.into()))
        };
        let topics: Vec<String> = required("topics")?
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        let tasks_max: u32 = number(raw, "tasks.max", "1")?;
        if tasks_max == 0 {
            return Err(invalid("tasks.max", "0", "at least 1"));
        }
        let schemas_default = get(raw, "schemas.enable", "true").to_string();
        let converter = |key: &str| -> Result<String, ConfigError> {
            let v = get(raw, key, JSON_CONVERTER);
            if v == JSON_CONVERTER || v == STRING_CONVERTER {
                Ok(v.to_string())
            } else {
                Err(invalid(
                    key,
                    v,
                    &format!("{JSON_CONVERTER} or {STRING_CONVERTER}"),
                ))
            }
        };
        let dlq = get(raw, "errors.deadletterqueue.topic.name", "")
            .trim()
            .to_string();
        Ok(Self {
            name: required("name")?,
            connector_class: required("connector.class")?,
            topics,
            tasks_max,
            key_converter: converter("key.converter")?,
            value_converter: converter("value.converter")?,
            key_schemas_enable: boolean(raw, "key.converter.schemas.enable", &schemas_default)?,
            value_schemas_enable: boolean(raw, "value.converter.schemas.enable", &schemas_default)?,
            tolerance: parse_tolerance(raw)?,
            retry_timeout_ms: number(raw, "errors.retry.timeout", "0")?,
            retry_delay_max_ms: number(raw, "errors.retry.delay.max.ms", "60000")?,
            dlq_topic: (!dlq.is_empty()).then_some(dlq),
            dlq_replication_factor: number(
                raw,
                "errors.deadletterqueue.topic.replication.factor",
                "3",
            )?,
            dlq_context_headers: boolean(
                raw,
                "errors.deadletterqueue.context.headers.enable",
                "false",
            )?,
            isolation_level: parse_isolation(raw)?,
            auto_offset_reset: parse_auto_offset_reset(raw)?,
            max_poll_records: number(raw, "consumer.override.max.poll.records", "500")?,
            max_poll_interval_ms: number(raw, "consumer.override.max.poll.interval.ms", "300000")?,
            session_timeout_ms: optional_number(raw, "consumer.override.session.timeout.ms")?,
            heartbeat_interval_ms: optional_number(raw, "consumer.override.heartbeat.interval.ms")?,
            partition_assignment_strategy: parse_assignment_strategy(raw)?,
            fetch_max_wait_ms: number(raw, "consumer.override.fetch.max.wait.ms", "500")?,
            fetch_min_bytes: number(raw, "consumer.override.fetch.min.bytes", "1")?,
            group_protocol: parse_group_protocol(raw)?,
            group_remote_assignor: raw.get("consumer.override.group.remote.assignor").cloned(),
            raw: raw.clone(),
        })
    }

    /// The consumer group of the connector's tasks: `connect-<name>` (`SinkUtils`).
    pub fn group_id(&self) -> String {
        format!("connect-{}", self.name)
    }
}

fn parse_tolerance(raw: &BTreeMap<String, String>) -> Result<Tolerance, ConfigError> {
    match get(raw, "errors.tolerance", "none") {
        "none" => Ok(Tolerance::None),
        "all" => Ok(Tolerance::All),
        other => Err(invalid("errors.tolerance", other, "none or all")),
    }
}

fn parse_isolation(raw: &BTreeMap<String, String>) -> Result<Isolation, ConfigError> {
    match get(raw, "consumer.override.isolation.level", "read_uncommitted") {
        "read_uncommitted" => Ok(Isolation::ReadUncommitted),
        "read_committed" => Ok(Isolation::ReadCommitted),
        other => Err(invalid(
            "consumer.override.isolation.level",
            other,
            "read_uncommitted or read_committed",
        )),
    }
}

fn parse_auto_offset_reset(raw: &BTreeMap<String, String>) -> Result<AutoOffsetReset, ConfigError> {
    let key = "consumer.override.auto.offset.reset";
    match get(raw, key, "earliest") {
        "earliest" => Ok(AutoOffsetReset::Earliest),
        "latest" => Ok(AutoOffsetReset::Latest),
        "none" => Ok(AutoOffsetReset::None),
        other => Err(invalid(key, other, "earliest, latest or none")),
    }
}

fn parse_assignment_strategy(
    raw: &BTreeMap<String, String>,
) -> Result<Option<Vec<AssignmentStrategy>>, ConfigError> {
    let key = "consumer.override.partition.assignment.strategy";
    raw.get(key)
        .map(|v| {
            AssignmentStrategy::parse_list(v)
                .map_err(|_| invalid(key, v, AssignmentStrategy::EXPECTED))
        })
        .transpose()
}

/// `consumer.override.group.protocol`, with the keys Java's `ConsumerConfig` refuses
/// beside it (`checkUnsupportedConfigsPostProcess`): under `consumer` (KIP-848) the
/// classic protocol's `session.timeout.ms`, `heartbeat.interval.ms` and
/// `partition.assignment.strategy`; under `classic`, `group.remote.assignor`. A remote
/// assignor must be one the model's brokers have.
fn parse_group_protocol(raw: &BTreeMap<String, String>) -> Result<GroupProtocol, ConfigError> {
    let key = "consumer.override.group.protocol";
    let protocol = match get(raw, key, "classic") {
        "classic" => GroupProtocol::Classic,
        "consumer" => GroupProtocol::Consumer,
        other => return Err(invalid(key, other, "classic or consumer")),
    };
    let refused: &[&str] = match protocol {
        GroupProtocol::Classic => &["group.remote.assignor"],
        GroupProtocol::Consumer => &[
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "partition.assignment.strategy",
        ],
    };
    let name = get(raw, key, "classic");
    for refused in refused {
        let refused = format!("consumer.override.{refused}");
        if let Some(value) = raw.get(&refused) {
            let why =
                format!("not supported when group.protocol is {name} (Java's ConsumerConfig)");
            return Err(invalid(&refused, value, &why));
        }
    }
    let assignors = eosim_sim::kafka::group::consumer_protocol::SERVER_ASSIGNORS;
    let assignor_key = "consumer.override.group.remote.assignor";
    match raw.get(assignor_key) {
        Some(name) if !assignors.contains(&name.as_str()) => {
            Err(invalid(assignor_key, name, "uniform or range"))
        }
        _ => Ok(protocol),
    }
}

/// Worker keys (`DistributedConfig`, `WorkerConfig`) the simulated worker honours.
pub const WORKER_KEYS: &[&str] = &[
    "group.id",
    "offset.flush.interval.ms",
    "offset.flush.timeout.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "scheduled.rebalance.max.delay.ms",
    "task.shutdown.graceful.timeout.ms",
    "exactly.once.source.support",
    "offset.storage.topic",
];

/// A worker's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// `group.id` of the worker group. Default `connect-cluster`.
    pub group_id: String,
    /// `offset.flush.interval.ms`. Default 60000.
    pub offset_flush_interval_ms: u64,
    /// `offset.flush.timeout.ms`. Default 5000.
    pub offset_flush_timeout_ms: u64,
    /// `session.timeout.ms` of the worker group (not of the task consumers). Default 10000.
    pub session_timeout_ms: u64,
    /// `heartbeat.interval.ms`. Default 3000.
    pub heartbeat_interval_ms: u64,
    /// `scheduled.rebalance.max.delay.ms`. Default 300000 (KIP-415).
    pub scheduled_rebalance_max_delay_ms: u64,
    /// `task.shutdown.graceful.timeout.ms`: how long a stopped task may take to commit and
    /// close before it is cancelled (`Worker.awaitStopTask`). Default 5000.
    pub task_shutdown_graceful_timeout_ms: u64,
    /// `exactly.once.source.support` (KIP-618): whether source tasks run transactionally.
    /// Default disabled.
    pub exactly_once_source_support: super::source_config::ExactlyOnceSourceSupport,
    /// `offset.storage.topic`: where source tasks store their offsets. Default
    /// `connect-offsets`.
    pub offset_storage_topic: String,
}

impl WorkerConfig {
    /// Parses a worker's string map.
    ///
    /// # Errors
    /// The first unknown key or bad value.
    pub fn parse(raw: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        check_keys(raw, &[WORKER_KEYS])?;
        Ok(Self {
            group_id: get(raw, "group.id", "connect-cluster").to_string(),
            offset_flush_interval_ms: number(raw, "offset.flush.interval.ms", "60000")?,
            offset_flush_timeout_ms: number(raw, "offset.flush.timeout.ms", "5000")?,
            session_timeout_ms: number(raw, "session.timeout.ms", "10000")?,
            heartbeat_interval_ms: number(raw, "heartbeat.interval.ms", "3000")?,
            scheduled_rebalance_max_delay_ms: number(
                raw,
                "scheduled.rebalance.max.delay.ms",
                "300000",
            )?,
            task_shutdown_graceful_timeout_ms: number(
                raw,
                "task.shutdown.graceful.timeout.ms",
                "5000",
            )?,
            exactly_once_source_support: super::source_config::ExactlyOnceSourceSupport::parse(
                get(raw, "exactly.once.source.support", "disabled"),
            )?,
            offset_storage_topic: get(raw, "offset.storage.topic", "connect-offsets").to_string(),
        })
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self::parse(&BTreeMap::new()).expect("every worker key has a default")
    }
}

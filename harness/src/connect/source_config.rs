//! A source connector's configuration: Kafka Connect's source keys (`SourceConnectorConfig`,
//! KIP-618's `exactly.once.support` and `transaction.boundary`) and the keys of the
//! Debezium PostgreSQL connector the `connect-source` pipeline models
//! (`io.debezium.connector.postgresql.PostgresConnector`, `PostgresConnectorConfig`).
//!
//! Every key is checked as for sinks ([`super::config`]): an unknown key, a bad value or a
//! missing required key is a [`ConfigError`] naming it.
//!
//! ## Default values
//! `tasks.max` 1 (Debezium's PostgreSQL connector runs one task; more is refused),
//! `exactly.once.support` requested, `transaction.boundary` poll,
//! `transaction.boundary.interval.ms` the worker's `offset.flush.interval.ms`,
//! `table.include.list` `public.orders`, `max.batch.size` 2048, `poll.interval.ms` 500
//! (Debezium's), key and value converters `JsonConverter`.
//!
//! `transaction.boundary=connector` is refused as Connect refuses it for a connector that
//! cannot define transactions (Debezium's connectors do not implement
//! `SourceConnector.canDefineTransactionBoundaries`, KIP-618).

use super::config::{check_keys, get, invalid, number, ConfigError, ConnectorConfig, WorkerConfig};
use eosim_sim::kafka::Isolation;
use std::collections::BTreeMap;

/// The connector class modelled.
pub const POSTGRES_CONNECTOR: &str = "io.debezium.connector.postgresql.PostgresConnector";

/// Framework keys of a source connector (`ConnectorConfig`, `SourceConnectorConfig`).
pub const SOURCE_FRAMEWORK_KEYS: &[&str] = &[
    "name",
    "connector.class",
    "tasks.max",
    "key.converter",
    "value.converter",
    "key.converter.schemas.enable",
    "value.converter.schemas.enable",
    "exactly.once.support",
    "transaction.boundary",
    "transaction.boundary.interval.ms",
];

/// Debezium PostgreSQL keys accepted; the `database.*` and `plugin.name` ones are read by a
/// real connector only (the model has no connection to open).
pub const POSTGRES_KEYS: &[&str] = &[
    "topic.prefix",
    "table.include.list",
    "max.batch.size",
    "poll.interval.ms",
    "plugin.name",
    "slot.name",
    "database.hostname",
    "database.port",
    "database.user",
    "database.password",
    "database.dbname",
];

/// KIP-618's `exactly.once.support` of a connector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactlyOnceSupport {
    /// `requested` (default): exactly-once if the worker has it enabled.
    Requested,
    /// `required`: refused unless the worker runs `exactly.once.source.support=enabled`.
    Required,
}

/// KIP-618's `transaction.boundary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionBoundary {
    /// `poll` (default): one transaction per non-empty `poll()` batch.
    Poll,
    /// `interval`: one transaction every `transaction.boundary.interval.ms`.
    Interval,
}

/// The worker's `exactly.once.source.support` (KIP-618, `DistributedConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactlyOnceSourceSupport {
    /// `disabled` (default): source tasks run at least once (`WorkerSourceTask`).
    Disabled,
    /// `preparing`: the rolling-upgrade step; tasks still run at least once.
    Preparing,
    /// `enabled`: source tasks run transactionally (`ExactlyOnceWorkerSourceTask`).
    Enabled,
}

impl ExactlyOnceSourceSupport {
    /// Parses the worker key's value.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `exactly.once.source.support`.
    pub fn parse(value: &str) -> Result<Self, ConfigError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "disabled" => Ok(Self::Disabled),
            "preparing" => Ok(Self::Preparing),
            "enabled" => Ok(Self::Enabled),
            _ => Err(invalid(
                "exactly.once.source.support",
                value,
                "disabled, preparing or enabled",
            )),
        }
    }
}

/// A Debezium PostgreSQL source connector's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConnectorConfig {
    /// The framework part, as the herder stores it; `topics` holds the one destination
    /// topic, `<topic.prefix>.<table.include.list>`.
    pub framework: ConnectorConfig,
    /// `topic.prefix`: the logical server name, the source partition `{"server": ...}`.
    pub topic_prefix: String,
    /// `table.include.list`: the one captured table, `schema.table`.
    pub table: String,
    /// `max.batch.size`: records per `poll()`.
    pub max_batch_size: usize,
    /// `poll.interval.ms`: the wait after an empty poll, ms.
    pub poll_interval_ms: u64,
    /// `exactly.once.support`.
    pub exactly_once_support: ExactlyOnceSupport,
    /// `transaction.boundary`.
    pub transaction_boundary: TransactionBoundary,
    /// `transaction.boundary.interval.ms`, when set.
    pub transaction_boundary_interval_ms: Option<u64>,
}

impl SourceConnectorConfig {
    /// Parses `raw` (Connect's and Debezium's keys).
    ///
    /// # Errors
    /// The first unknown key, bad value or missing required key.
    pub fn parse(raw: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        check_keys(raw, &[SOURCE_FRAMEWORK_KEYS, POSTGRES_KEYS])?;
        let class = raw.get("connector.class").map(String::as_str).unwrap_or("");
        if class != POSTGRES_CONNECTOR {
            return Err(invalid("connector.class", class, POSTGRES_CONNECTOR));
        }
        let prefix = get(raw, "topic.prefix", "").trim().to_string();
        if prefix.is_empty() {
            return Err(ConfigError::Missing("topic.prefix".into()));
        }
        let table = get(raw, "table.include.list", "public.orders")
            .trim()
            .to_string();
        if table.split('.').count() != 2 || table.contains(',') {
            return Err(invalid(
                "table.include.list",
                &table,
                "one table as schema.table",
            ));
        }
        let framework = framework_config(raw, &format!("{prefix}.{table}"))?;
        if framework.tasks_max != 1 {
            let n = framework.tasks_max.to_string();
            return Err(invalid(
                "tasks.max",
                &n,
                "1 (PostgresConnector runs one task)",
            ));
        }
        let max_batch_size: usize = number(raw, "max.batch.size", "2048")?;
        if max_batch_size == 0 {
            return Err(invalid("max.batch.size", "0", "at least 1"));
        }
        Ok(Self {
            framework,
            topic_prefix: prefix,
            table,
            max_batch_size,
            poll_interval_ms: number(raw, "poll.interval.ms", "500")?,
            exactly_once_support: parse_support(raw)?,
            transaction_boundary: parse_boundary(raw)?,
            transaction_boundary_interval_ms: super::config::optional_number(
                raw,
                "transaction.boundary.interval.ms",
            )?,
        })
    }

    /// Connect's validation against the worker (`AbstractHerder.validateConnectorConfig`
    /// for KIP-618): `exactly.once.support=required` needs
    /// `exactly.once.source.support=enabled` on the worker.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `exactly.once.support`.
    pub fn check_worker(&self, worker: &WorkerConfig) -> Result<(), ConfigError> {
        let enabled = worker.exactly_once_source_support == ExactlyOnceSourceSupport::Enabled;
        if self.exactly_once_support == ExactlyOnceSupport::Required && !enabled {
            return Err(invalid(
                "exactly.once.support",
                "required",
                "requested, or a worker with exactly.once.source.support=enabled",
            ));
        }
        Ok(())
    }

    /// Whether this connector's tasks run transactionally on `worker` (KIP-618): the
    /// worker's [`exactly_once`].
    pub fn exactly_once(&self, worker: &WorkerConfig) -> bool {
        exactly_once(worker)
    }

    /// The interval of `transaction.boundary=interval`, ms: the key, else the worker's
    /// `offset.flush.interval.ms` (KIP-618).
    pub fn boundary_interval_ms(&self, worker: &WorkerConfig) -> u64 {
        self.transaction_boundary_interval_ms
            .unwrap_or(worker.offset_flush_interval_ms)
    }

    /// The destination topic.
    pub fn topic(&self) -> &str {
        &self.framework.topics[0]
    }
}

/// The framework part of a source connector: `ConnectorConfig` read from `raw`'s framework
/// keys with `topics` set to `topic` (the herder keeps connectors in one shape), and `raw`
/// kept whole.
fn framework_config(
    raw: &BTreeMap<String, String>,
    topic: &str,
) -> Result<ConnectorConfig, ConfigError> {
    let mut framework: BTreeMap<String, String> = raw
        .iter()
        .filter(|(k, _)| SOURCE_FRAMEWORK_KEYS.contains(&k.as_str()))
        .filter(|(k, _)| !k.starts_with("exactly.once") && !k.starts_with("transaction."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    framework.insert("topics".into(), topic.to_string());
    let mut config = ConnectorConfig::parse(&framework, &[])?;
    config.raw = raw.clone();
    Ok(config)
}

fn parse_support(raw: &BTreeMap<String, String>) -> Result<ExactlyOnceSupport, ConfigError> {
    match get(raw, "exactly.once.support", "requested") {
        "requested" => Ok(ExactlyOnceSupport::Requested),
        "required" => Ok(ExactlyOnceSupport::Required),
        other => Err(invalid(
            "exactly.once.support",
            other,
            "requested or required",
        )),
    }
}

fn parse_boundary(raw: &BTreeMap<String, String>) -> Result<TransactionBoundary, ConfigError> {
    match get(raw, "transaction.boundary", "poll") {
        "poll" => Ok(TransactionBoundary::Poll),
        "interval" => Ok(TransactionBoundary::Interval),
        "connector" => Err(invalid(
            "transaction.boundary",
            "connector",
            "poll or interval (PostgresConnector cannot define transaction boundaries)",
        )),
        other => Err(invalid(
            "transaction.boundary",
            other,
            "poll, interval or connector",
        )),
    }
}

/// The framework's KIP-618 settings of a source connector's `raw` configuration, as the
/// worker reads them whatever the connector class: `transaction.boundary` and
/// `transaction.boundary.interval.ms`.
///
/// # Errors
/// A bad value of either key.
pub fn transaction_settings(
    raw: &BTreeMap<String, String>,
) -> Result<(TransactionBoundary, Option<u64>), ConfigError> {
    let interval = super::config::optional_number(raw, "transaction.boundary.interval.ms")?;
    Ok((parse_boundary(raw)?, interval))
}

/// The herder's parser for this connector class: [`SourceConnectorConfig::parse`], then
/// [`SourceConnectorConfig::check_worker`] against `worker`.
///
/// # Errors
/// As those two.
pub fn parse_connector(
    raw: &BTreeMap<String, String>,
    worker: &WorkerConfig,
) -> Result<ConnectorConfig, ConfigError> {
    let config = SourceConnectorConfig::parse(raw)?;
    config.check_worker(worker)?;
    Ok(config.framework)
}

/// Whether `worker` runs its source tasks exactly once (KIP-618:
/// `exactly.once.source.support=enabled`).
pub fn exactly_once(worker: &WorkerConfig) -> bool {
    worker.exactly_once_source_support == ExactlyOnceSourceSupport::Enabled
}

/// How `worker`'s source tasks read the offsets topic: read_committed under KIP-618 (the
/// offsets a task's committed transactions stored), read_uncommitted otherwise.
pub fn offsets_isolation(worker: &WorkerConfig) -> Isolation {
    match exactly_once(worker) {
        true => Isolation::ReadCommitted,
        false => Isolation::ReadUncommitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut raw: BTreeMap<String, String> = [
            ("name", "inventory"),
            ("connector.class", POSTGRES_CONNECTOR),
            ("topic.prefix", "db1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (k, v) in extra {
            raw.insert(k.to_string(), v.to_string());
        }
        raw
    }

    #[test]
    fn the_destination_topic_is_the_prefix_and_the_table() {
        let c = SourceConnectorConfig::parse(&raw(&[])).expect("valid");
        assert_eq!(c.topic(), "db1.public.orders");
        assert_eq!(c.transaction_boundary, TransactionBoundary::Poll);
        assert_eq!(c.max_batch_size, 2048);
        assert_eq!(
            c.framework.raw.get("topic.prefix").map(String::as_str),
            Some("db1")
        );
    }

    #[test]
    fn bad_keys_are_named() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[("transaction.boundary", "connector")],
                "transaction.boundary",
            ),
            (
                &[("exactly.once.support", "always")],
                "exactly.once.support",
            ),
            (&[("tasks.max", "2")], "tasks.max"),
            (&[("max.batch.size", "x")], "max.batch.size"),
            (&[("topic.prefixx", "a")], "topic.prefixx"),
        ];
        for (extra, key) in cases {
            let e = SourceConnectorConfig::parse(&raw(extra)).expect_err(key);
            assert!(e.to_string().contains(key), "{e}");
        }
        let mut no_prefix = raw(&[]);
        no_prefix.remove("topic.prefix");
        assert_eq!(
            SourceConnectorConfig::parse(&no_prefix),
            Err(ConfigError::Missing("topic.prefix".into()))
        );
    }

    #[test]
    fn required_exactly_once_needs_an_enabled_worker() {
        let required = raw(&[("exactly.once.support", "required")]);
        let disabled = WorkerConfig::default();
        let e = parse_connector(&required, &disabled).expect_err("disabled worker");
        assert!(e.to_string().contains("exactly.once.support"), "{e}");
        let enabled = WorkerConfig {
            exactly_once_source_support: ExactlyOnceSourceSupport::Enabled,
            ..WorkerConfig::default()
        };
        assert!(parse_connector(&required, &enabled).is_ok());
    }
}

//! Connect's plugin loading for the real runner: a connector configuration to its sink
//! task over the real clients, chosen by `connector.class`.
//!
//! - `io.confluent.connect.jdbc.JdbcSinkConnector` and `...Adb4PgSinkConnector`:
//!   [`JdbcSinkTask`] over [`RealPostgres`] (`connection.url`, `connection.user`,
//!   `connection.password`; `[postgres] client_timeout_ms` as the socket timeout).
//! - `com.clickhouse.kafka.connect.ClickHouseSinkConnector`:
//!   [`ClickHouseSinkTask`](crate::sinks::clickhouse::ClickHouseSinkTask) over
//!   [`ClickHouseWithZooKeeper`](crate::client::real::ClickHouseWithZooKeeper)
//!   (`hostname`, `port`, `eosim.zookeeper.connect`; see
//!   [`clickhouse_sink`](super::clickhouse_sink)).
//!
//! Anything else is an error naming the class and the ones known.

use crate::client::real::meter::StoreMeter;
use crate::client::real::RealPostgres;
use crate::connect::config::ConnectorConfig;
use crate::connect::task::SinkTask;
use crate::scenario::Scenario;
use crate::sinks::clickhouse::SinkHooks;
use crate::sinks::jdbc::{self, JdbcSinkConfig, JdbcSinkTask};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The ClickHouse sink's connector class (clickhouse-kafka-connect).
pub use crate::sinks::clickhouse::CONNECTOR_CLASS as CLICKHOUSE_CONNECTOR_CLASS;

/// Validates a connector's whole configuration for its class (framework keys and the
/// sink's own keys).
///
/// # Errors
/// A class no real sink answers to, or the configuration's first bad key.
pub fn connector_config(raw: &BTreeMap<String, String>) -> Result<ConnectorConfig, String> {
    let class = raw.get("connector.class").map(String::as_str).unwrap_or("");
    if jdbc::CONNECTOR_CLASSES.contains(&class) {
        return jdbc::parse_connector(raw).map_err(|e| format!("connector config: {e}"));
    }
    if class == CLICKHOUSE_CONNECTOR_CLASS {
        return super::clickhouse_sink::connector_config(raw);
    }
    Err(unknown_class(class))
}

fn unknown_class(class: &str) -> String {
    let mut known: Vec<&str> = jdbc::CONNECTOR_CLASSES.to_vec();
    known.push(CLICKHOUSE_CONNECTOR_CLASS);
    format!(
        "connector.class {class:?}: no real sink task for it (known: {})",
        known.join(", ")
    )
}

/// The sink task `config` names, over real clients; `scenario` gives the client settings
/// the connector keys do not (`[postgres] client_timeout_ms`); `hooks` are the ClickHouse
/// sink's fault points ([`super::fault_point::RealHooks`]; other classes have none);
/// `meter` counts the task's state-store calls (the ClickHouse sink's; the JDBC sink has
/// no state store and leaves it at zero).
///
/// # Errors
/// An unknown or not yet wired class, or a sink configuration that does not parse.
pub fn real_sink_task(
    config: &ConnectorConfig,
    scenario: &Scenario,
    hooks: Arc<dyn SinkHooks>,
    meter: Arc<StoreMeter>,
) -> Result<Box<dyn SinkTask>, String> {
    let class = config.connector_class.as_str();
    if jdbc::CONNECTOR_CLASSES.contains(&class) {
        let sink = JdbcSinkConfig::parse(&config.raw, &config.topics).map_err(|e| e.to_string())?;
        let password = config
            .raw
            .get("connection.password")
            .map_or("", String::as_str);
        let client = RealPostgres::from_jdbc(
            &sink.connection_url,
            &sink.connection_user,
            password,
            scenario.postgres.client_timeout_ms,
        )
        .map_err(|e| e.to_string())?;
        return Ok(Box::new(JdbcSinkTask::new(sink, Box::new(client))));
    }
    if class == CLICKHOUSE_CONNECTOR_CLASS {
        return super::clickhouse_sink::real_sink_task(config, hooks, meter);
    }
    Err(unknown_class(class))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::clickhouse::NoHooks;

    fn raw(class: &str) -> BTreeMap<String, String> {
        [
            ("name", "s"),
            ("connector.class", class),
            ("topics", "t"),
            (
                "connection.url",
                "jdbc:postgresql://127.0.0.1:5432/postgres",
            ),
            ("pk.fields", "id"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn the_jdbc_and_clickhouse_classes_build_tasks_and_others_are_refused() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios/p2-upsert-worker-crash.toml");
        let scenario = Scenario::load(&path).expect("scenario parses");
        let config = connector_config(&raw(jdbc::CONNECTOR_CLASSES[1])).expect("jdbc parses");
        assert!(real_sink_task(&config, &scenario, Arc::new(NoHooks), Arc::default()).is_ok());
        let mut ch = raw(CLICKHOUSE_CONNECTOR_CLASS);
        ch.remove("connection.url");
        ch.remove("pk.fields");
        ch.insert("exactlyOnce".into(), "true".into());
        ch.insert("eosim.zookeeper.connect".into(), "127.0.0.1:2181".into());
        let config = connector_config(&ch).expect("clickhouse parses");
        assert!(real_sink_task(&config, &scenario, Arc::new(NoHooks), Arc::default()).is_ok());
        ch.insert("pk.fields".into(), "id".into());
        let e = connector_config(&ch).unwrap_err();
        assert!(e.contains("pk.fields"), "{e}");
        let e = connector_config(&raw("x.Y")).unwrap_err();
        assert!(e.contains("x.Y") && e.contains("JdbcSinkConnector"), "{e}");
    }
}

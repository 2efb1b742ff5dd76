//! The ClickHouse sink as a Connect connector: its configuration from `[sink]`, the plugin
//! factory the workers load it with, and the operator who creates the tables and the
//! connector.

use super::hooks::Hooks;
use super::{target_table, Context};
use crate::client::sim::clickhouse::SimClickHouse;
use crate::connect::config::{self, ConfigError, ConnectorConfig, WorkerConfig};
use crate::connect::herder::ConfigParser;
use crate::connect::task::SinkTask;
use crate::connect::worker::{SinkFactory, TaskRun};
use crate::history::{OpKind, Value};
use crate::sinks::clickhouse::{
    create_tables, ClickHouseSinkConfig, ClickHouseSinkTask, CONNECTOR_CLASS, KEYS,
};
use eosim_sim::clock::now_ns;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The connector's configuration as posted to the herder, from the scenario's `[sink]`
/// ([`ClickHouseSinkSpec::connector_props`]) for the simulated `clickhouse:8123`.
///
/// [`ClickHouseSinkSpec::connector_props`]: crate::scenario::clickhouse::ClickHouseSinkSpec::connector_props
pub fn connector_props(ctx: &Context) -> BTreeMap<String, String> {
    ctx.spec
        .connector_props(&ctx.scenario.topic.name, "clickhouse", 8123)
}

/// The dead-letter queue topic ([`ClickHouseSinkSpec::dlq_topic`]: `<name>-dlq` under
/// `errors.tolerance=all` unless the scenario sets another or none).
///
/// [`ClickHouseSinkSpec::dlq_topic`]: crate::scenario::clickhouse::ClickHouseSinkSpec::dlq_topic
pub fn dlq_topic(ctx: &Context) -> Option<String> {
    ctx.spec.dlq_topic()
}

/// The worker configuration: `session.timeout.ms` from `[sink]` (the worker group's; the
/// task consumers get it through [`connector_props`]), heartbeats every third of it; Connect's defaults otherwise
/// (offsets are committed when the task asks, after each batch).
pub fn worker_config(ctx: &Context) -> WorkerConfig {
    let session_timeout_ms = ctx.spec.session_timeout_ms;
    WorkerConfig {
        session_timeout_ms,
        heartbeat_interval_ms: (session_timeout_ms / 3).max(100),
        offset_flush_interval_ms: ctx.spec.offset_flush_interval_ms,
        ..WorkerConfig::default()
    }
}

/// Validates a connector configuration: Connect's keys plus the sink's ([`KEYS`]), the
/// connector class, and the sink's own values.
pub fn parser() -> ConfigParser {
    Arc::new(|raw| {
        let config = ConnectorConfig::parse(raw, KEYS)?;
        if config.connector_class != CONNECTOR_CLASS {
            let class = &config.connector_class;
            return Err(config::invalid("connector.class", class, CONNECTOR_CLASS));
        }
        ClickHouseSinkConfig::from_props(raw).map_err(|e| ConfigError::InvalidValue {
            key: "(clickhouse sink)".into(),
            value: e.to_string(),
            expected: "a valid ClickHouse sink configuration".into(),
        })?;
        Ok(config)
    })
}

/// The plugin: a [`ClickHouseSinkTask`] per run, whose owner name is `<worker>#<n>` (`n`
/// counts the task starts on that worker) and whose fault points and inserts go to the
/// run's [`Hooks`]. Its ClickHouse client lives on the worker's node.
pub fn factory(ctx: Context) -> SinkFactory {
    Arc::new(move |config: &ConnectorConfig, run: &TaskRun| {
        let (ctx, raw, worker) = (ctx.clone(), config.raw.clone(), run.worker.clone());
        Box::pin(async move {
            let sink = ClickHouseSinkConfig::from_props(&raw).map_err(|e| e.to_string())?;
            let client = SimClickHouse::connect(ctx.spec.request_timeout_ms)
                .await
                .map_err(|e| e.to_string())?;
            let incarnation = {
                let mut shared = ctx.shared();
                let n = shared.incarnations.entry(worker.clone()).or_default();
                *n += 1;
                *n
            };
            let owner = format!("{worker}#{incarnation}");
            let hooks = Arc::new(Hooks::new(ctx, worker));
            let task = ClickHouseSinkTask::new(sink, client, owner, hooks);
            Ok(Box::new(task) as Box<dyn SinkTask>)
        })
    })
}

/// Posts `raw` (a new connector, or with `update` a new configuration of it: `PUT
/// /connectors/{name}/config`) and records it, ok or failed with the herder's error.
pub fn post_config(ctx: &Context, raw: BTreeMap<String, String>, update: bool) {
    let posted = if update {
        ctx.herder.update_connector_config(&raw)
    } else {
        ctx.herder.create_connector(&raw)
    };
    let (kind, error) = match posted {
        Ok(()) => (OpKind::Ok, None),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    };
    let value = Value::ConnectorConfig {
        connector: ctx.spec.name.clone(),
        config: raw,
    };
    ctx.recorder
        .record(now_ns(), "operator", kind, value, error);
}

/// The operator: creates the target and KeeperMap state tables (the connector's
/// documentation has its user create them), then the connector at `start_after_ms`.
pub async fn operator_process(ctx: Context) {
    let Ok(client) = SimClickHouse::connect(ctx.spec.request_timeout_ms).await else {
        return;
    };
    let state_table = ClickHouseSinkConfig::from_props(&connector_props(&ctx))
        .map_or_else(|_| "connect_state".to_string(), |c| c.state_table);
    while create_tables(&client, target_table(&ctx.spec), &state_table)
        .await
        .is_err()
    {
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
    let start_ms = ctx.spec.start_after_ms;
    let now_ms = now_ns() / 1_000_000;
    if start_ms > now_ms {
        madsim::time::sleep(Duration::from_millis(start_ms - now_ms)).await;
    }
    post_config(&ctx, connector_props(&ctx), false);
}

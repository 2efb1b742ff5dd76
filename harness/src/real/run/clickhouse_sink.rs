//! The `clickhouse-sink` pipeline (SPEC.md P1) in a real run: Debian's ClickHouse 18.16
//! and a ZooKeeper it is configured with, the ClickHouse exactly-once sink task
//! ([`ClickHouseSinkTask`]) in `eosim worker --role sink-task` processes over the real
//! clients, its state record kept in ZooKeeper directly
//! ([`crate::client::real::zookeeper`]: 18.16 has no KeeperMap).
//!
//! # What runs
//! - Services: ZooKeeper, then ClickHouse with a `<zookeeper>` section (Replicated
//!   targets); the target table (`[sink]`'s engine and windows,
//!   [`ClickHouseSinkSpec::target_table`]) and the state table are created before the
//!   workers start.
//! - Workers: `producer-i` send ids as the simulated producer does (`{"id": id, "name":
//!   "r<id>"}` to partition `id % partitions`, no key, the id also in header `eosim.id`);
//!   `connect-1..=tasks` run one sink task each in group `connect-<name>`.
//! - The connector: built from `[sink]` by the simulation's own builder
//!   ([`ClickHouseSinkSpec::connector_props`]: clickhouse-kafka-connect's keys, Connect's
//!   `consumer.override.*`, `errors.tolerance`, the dead-letter queue, created here as the
//!   simulated cluster creates it), plus `ssl=false` and two of eosim's: `eosim.zookeeper.connect` (where the state lives) and
//!   `eosim.request.timeout.ms` (`request_timeout_ms`).
//! - Final state, as the simulated pipeline records it: `LogState` per partition,
//!   `SinkState` (the table's rows mapped back to log records by `name`, a name the log
//!   does not hold as offset -1), `DlqState` (with a DLQ), `CommittedOffsets` of
//!   `connect-<name>`.
//!
//! - `[sink.fault_point]` with action `crash` at a named point: `worker-0`'s first
//!   incarnation ends itself at the armed hit and the runner starts it again
//!   `restart_after_ms` later ([`super::fault_point`]; hits counted in that process).
//!
//! # Not run here (skipped, with the reason)
//! Variants that need `insert_deduplication_token` (22.2+), a MergeTree target with
//! `non_replicated_deduplication_window` (21.x+), the simulation-only fault-point forms
//! (`enumerate`, `pause`, `crash-clickhouse`) and `redelivery_batch_records_max`.

use super::blocking::block_on;
use super::cluster::LogRecord;
use super::connect_state::{
    create_dlq_topic, dlq_state, source_and_offsets, task_states, FinalState,
};
use crate::client::clickhouse::ClickHouse;
use crate::client::real::clickhouse::RealClickHouseConfig;
use crate::client::real::meter::StoreMeter;
use crate::client::real::zookeeper::{ClickHouseWithZooKeeper, ZkKeeperMapConfig};
use crate::client::ProducerRecord;
use crate::connect::config::ConnectorConfig;
use crate::connect::task::SinkTask;
use crate::history::refs::{id_of, ID_HEADER};
use crate::history::{History, RecordRef, Value};
use crate::real::bulk::jdbc::timed_load;
use crate::real::bulk::one_insert;
use crate::real::container::Runtime;
use crate::real::net::proxy::{Framing, Proxy};
use crate::real::provision::{ClickHouse as ChServer, ZooKeeper};
use crate::real::scratch::start_in;
use crate::report::BulkLoad;
use crate::scenario::clickhouse::ClickHouseSinkSpec;
use crate::scenario::Scenario;
use crate::sinks::clickhouse::{ClickHouseSinkConfig, ClickHouseSinkTask, SinkHooks, KEYS};
use eosim_sim::clickhouse::types::{TableDef, Value as ChValue};
use eosim_sim::kafka::TopicPartition;
use std::collections::BTreeMap;
use std::sync::Arc;

/// eosim's key: ZooKeeper's `host:port`, where the state table lives.
pub const ZOOKEEPER_KEY: &str = "eosim.zookeeper.connect";

/// eosim's key: the ClickHouse client's request timeout, ms (default 30000).
pub const TIMEOUT_KEY: &str = "eosim.request.timeout.ms";

/// The sink's own keys on the real backend: the sink's ([`KEYS`]), `ssl` (accepted,
/// plain HTTP is used) and the two above.
pub fn sink_keys() -> Vec<&'static str> {
    let mut keys = KEYS.to_vec();
    keys.extend(["ssl", ZOOKEEPER_KEY, TIMEOUT_KEY]);
    keys
}

/// The scenario's `[sink]` (its defaults when absent).
pub fn spec(scenario: &Scenario) -> ClickHouseSinkSpec {
    scenario.sink.clone().unwrap_or_default()
}

/// Why this backend cannot run a `clickhouse-sink` scenario, if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    let s = spec(scenario);
    if s.variant.uses_token() {
        return Some(format!(
            "skipped: variant {} needs insert_deduplication_token (ClickHouse 22.2+); the \
             native backend's ClickHouse is Debian's 18.16",
            s.variant.name()
        ));
    }
    if s.non_replicated_deduplication_window.is_some() {
        return Some(
            "skipped: non_replicated_deduplication_window needs ClickHouse 21.x or later \
             (PR #22514); the native backend's ClickHouse is Debian's 18.16"
                .into(),
        );
    }
    if let Some(why) = s
        .fault_point
        .as_ref()
        .and_then(super::fault_point::unsupported)
    {
        return Some(why);
    }
    if s.redelivery_batch_records_max.is_some() {
        return Some("skipped: [sink] redelivery_batch_records_max is simulation-only".into());
    }
    None
}

/// The consumer group of the sink's tasks.
pub fn group(scenario: &Scenario) -> String {
    format!("connect-{}", spec(scenario).name)
}

/// The connector's keys for a ClickHouse at `127.0.0.1:<http_port>` and ZooKeeper at
/// `zookeeper`; see the module docs.
pub fn connector_raw(
    scenario: &Scenario,
    http_port: u16,
    zookeeper: &str,
) -> BTreeMap<String, String> {
    let s = spec(scenario);
    let mut raw = s.connector_props(&scenario.topic.name, "127.0.0.1", http_port);
    raw.insert("ssl".into(), "false".into());
    raw.insert(ZOOKEEPER_KEY.into(), zookeeper.to_string());
    raw.insert(TIMEOUT_KEY.into(), s.request_timeout_ms.to_string());
    raw
}

/// Validates the connector's whole configuration (framework and sink keys).
///
/// # Errors
/// The first bad key.
pub fn connector_config(raw: &BTreeMap<String, String>) -> Result<ConnectorConfig, String> {
    let config =
        ConnectorConfig::parse(raw, &sink_keys()).map_err(|e| format!("connector: {e}"))?;
    ClickHouseSinkConfig::from_props(raw).map_err(|e| format!("connector: {e}"))?;
    Ok(config)
}

/// The clients of the ClickHouse and ZooKeeper `raw` names; ZooKeeper's calls are bounded
/// by the connector's request timeout too (at most the stand-in's 10 s).
///
/// # Errors
/// A port or timeout that is not a number, no `eosim.zookeeper.connect`.
pub fn clients(raw: &BTreeMap<String, String>) -> Result<ClickHouseWithZooKeeper, String> {
    let sink = ClickHouseSinkConfig::from_props(raw).map_err(|e| e.to_string())?;
    let zookeeper = raw
        .get(ZOOKEEPER_KEY)
        .ok_or_else(|| format!("{ZOOKEEPER_KEY}: required on the real backend"))?;
    let mut ch = RealClickHouseConfig::new(&format!("http://{}:{}", sink.hostname, sink.port));
    ch.database = sink.database;
    ch.user = sink.username;
    ch.password = sink.password;
    if let Some(t) = raw.get(TIMEOUT_KEY) {
        ch.timeout_ms = t.parse().map_err(|_| format!("{TIMEOUT_KEY}: {t}"))?;
    }
    // The connector's KeeperMap queries go to ClickHouse over HTTP, so its request timeout
    // bounds them as it bounds an INSERT (ClickHouse itself waits for Keeper up to its
    // `operation_timeout_ms`, 10 s, the stand-in's default).
    let mut zk = ZkKeeperMapConfig::new(zookeeper);
    zk.timeout_ms = zk.timeout_ms.min(ch.timeout_ms);
    Ok(ClickHouseWithZooKeeper::new(ch, zk))
}

/// The sink task of `config` over the real clients, owner `<process>-<pid>` (unique per
/// process, so a restarted worker is a new owner, as a new task instance is), its fault
/// points answered by `hooks`, its state-store calls counted by `meter`.
///
/// # Errors
/// As [`clients`].
pub fn real_sink_task(
    config: &ConnectorConfig,
    hooks: Arc<dyn SinkHooks>,
    meter: Arc<StoreMeter>,
) -> Result<Box<dyn SinkTask>, String> {
    let sink = ClickHouseSinkConfig::from_props(&config.raw).map_err(|e| e.to_string())?;
    let mut client = clients(&config.raw)?;
    client.meter = meter;
    let owner = format!("{}-{}", config.name, std::process::id());
    let task = ClickHouseSinkTask::new(sink, client, owner, hooks);
    Ok(Box::new(task))
}

/// `kafka2ck`'s rows mapped to log records by `name` (`r<id>`); see the module docs.
pub fn sink_rows(
    rows: &[Vec<ChValue>],
    by_name: &BTreeMap<String, RecordRef>,
    topic: &str,
) -> Vec<RecordRef> {
    let name_col = TableDef::kafka2ck()
        .column_index("name")
        .expect("kafka2ck.name");
    rows.iter()
        .map(|row| {
            let name = match &row[name_col] {
                ChValue::String(name) => name.clone(),
                other => format!("{other:?}"),
            };
            by_name.get(&name).cloned().unwrap_or_else(|| RecordRef {
                id: name.trim_start_matches('r').parse().unwrap_or(u64::MAX),
                key: None,
                tp: TopicPartition::new(topic.to_string(), 0),
                offset: -1,
            })
        })
        .collect()
}

/// Creates the target and the state table (either may exist), as the simulated operator
/// does ([`crate::sinks::clickhouse::create_tables`]).
///
/// # Errors
/// ClickHouse's or ZooKeeper's error.
pub async fn create_tables(
    client: &ClickHouseWithZooKeeper,
    spec: &ClickHouseSinkSpec,
) -> Result<(), String> {
    crate::sinks::clickhouse::create_tables(client, spec.target_table(), "connect_state")
        .await
        .map_err(|e| format!("clickhouse: CREATE TABLE: {e}"))
}

/// ZooKeeper and ClickHouse started for a `clickhouse-sink` run.
pub struct ChServices {
    /// ClickHouse (dropped first).
    pub ch: ChServer,
    /// ZooKeeper.
    pub zk: ZooKeeper,
    /// What the nemesis did to ClickHouse (`clickhouse`).
    pub ch_state: crate::real::provision::ServiceState,
    /// What the nemesis did to ZooKeeper (`keeper`).
    pub zk_state: crate::real::provision::ServiceState,
    /// The message-fault proxy in front of ZooKeeper when the scenario has `messages`
    /// faults on `keeper` ([`crate::real::net::proxy`]): ClickHouse and the connector
    /// reach ZooKeeper through it ([`ChServices::zk_connect`]).
    pub zk_proxy: Option<Proxy>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl ChServices {
    /// Starts ZooKeeper, then ClickHouse configured with it.
    ///
    /// # Errors
    /// A service that does not come up (naming its log).
    pub fn start() -> Result<Self, String> {
        ChServices::start_on(Runtime::Native, None)
    }

    /// [`start`](Self::start) on `runtime` (child processes or containers); with
    /// `keeper_proxy = Some(seed)` a message-fault proxy (its dice seeded with `seed`)
    /// goes in front of ZooKeeper before ClickHouse starts, so every client of ZooKeeper
    /// reaches it through the proxy.
    ///
    /// # Errors
    /// As [`start`](Self::start), and a proxy that cannot bind a port.
    pub fn start_on(runtime: Runtime, keeper_proxy: Option<u64>) -> Result<Self, String> {
        let (zk, zk_dir) = start_in("zookeeper", |dir| {
            ZooKeeper::start_on(dir, runtime).map_err(|e| e.to_string())
        })?;
        let zk_proxy = keeper_proxy
            .map(|seed| Proxy::in_front_of("keeper", zk.port(), seed, Framing::ZooKeeper))
            .transpose()?;
        let zk_connect = zk_connect(&zk, zk_proxy.as_ref());
        let (ch, ch_dir) = start_in("clickhouse", |dir| {
            ChServer::start_on(dir, Some(&zk_connect), runtime).map_err(|e| e.to_string())
        })?;
        Ok(Self {
            ch,
            zk,
            ch_state: Default::default(),
            zk_state: Default::default(),
            zk_proxy,
            _dirs: (zk_dir, ch_dir),
        })
    }

    /// ZooKeeper's `host:port` as its clients reach it: the proxy's when there is one.
    pub fn zk_connect(&self) -> String {
        zk_connect(&self.zk, self.zk_proxy.as_ref())
    }
}

/// `zk`'s `host:port`, or `proxy`'s in front of it.
fn zk_connect(zk: &ZooKeeper, proxy: Option<&Proxy>) -> String {
    match proxy {
        Some(p) => format!("127.0.0.1:{}", p.port()),
        None => zk.connect_string(),
    }
}

/// The record of id `id`, as the simulated producer sends it: value `{"id": id, "name":
/// "r<id>"}` on partition `id % partitions`, no key; the id also in header `eosim.id`.
pub fn row_record(scenario: &Scenario, id: u64) -> (Option<String>, ProducerRecord) {
    let value = serde_json::json!({"id": id, "name": format!("r{id}")}).to_string();
    let record = ProducerRecord {
        topic: scenario.topic.name.clone(),
        partition: Some((id % u64::from(scenario.topic.partitions.max(1))) as u32),
        key: None,
        value: Some(bytes::Bytes::from(value)),
        headers: vec![(ID_HEADER.to_string(), bytes::Bytes::from(id.to_string()))],
    };
    (None, record)
}

/// The services of a `clickhouse-sink` run and the connector writing into them.
pub struct ChTarget {
    /// ClickHouse and ZooKeeper.
    pub services: ChServices,
    /// The connector as the tasks run it ([`connector_raw`]).
    pub connector: ConnectorConfig,
    /// `[sink]`.
    pub spec: ClickHouseSinkSpec,
    /// The message-fault proxy in front of ClickHouse's HTTP port when the scenario has
    /// `messages` faults on `clickhouse` ([`crate::real::net::proxy`]): the connector's
    /// `port` is the proxy's.
    pub proxy: Option<Proxy>,
}

impl ChTarget {
    /// Starts the services, creates the tables and the dead-letter queue topic (on the
    /// cluster at `bootstrap`).
    ///
    /// # Errors
    /// A service that does not come up (naming its log), a table or topic that cannot be
    /// created.
    pub fn setup(
        scenario: &Scenario,
        bootstrap: &str,
        seed: u64,
        runtime: Runtime,
    ) -> Result<Self, String> {
        let keeper_proxy = super::needs::messages_on(scenario, "keeper").then_some(seed);
        let services = ChServices::start_on(runtime, keeper_proxy)?;
        let http_port = services.ch.http_port();
        let proxy = super::needs::messages_on(scenario, "clickhouse")
            .then(|| Proxy::in_front_of("clickhouse", http_port, seed, Framing::Alternating))
            .transpose()?;
        let port = proxy.as_ref().map_or(http_port, Proxy::port);
        let raw = connector_raw(scenario, port, &services.zk_connect());
        let connector = connector_config(&raw)?;
        let spec = spec(scenario);
        let client = clients(&raw)?;
        block_on(create_tables(&client, &spec))??;
        create_dlq_topic(bootstrap, scenario, &connector)?;
        Ok(Self {
            services,
            connector,
            spec,
            proxy,
        })
    }

    /// One INSERT of the rows the log carries into a fresh twin of the target.
    fn bulk_load(
        &self,
        log: &BTreeMap<TopicPartition, Vec<LogRecord>>,
    ) -> Result<BulkLoad, String> {
        let rows: Vec<serde_json::Value> = log
            .values()
            .flatten()
            .filter_map(|r| serde_json::from_str(r.value.as_deref()?).ok())
            .collect();
        let mut def = self.spec.target_table();
        def.name = format!("{}_bulk_insert", def.name);
        let client = clients(&self.connector.raw)?;
        let (rows, time_s) = block_on(one_insert(&client.clickhouse, def, rows))?
            .map_err(|e| format!("bulk load: {e}"))?;
        Ok(timed_load(
            "clickhouse",
            "one INSERT (JSONEachRow)",
            rows,
            time_s,
        ))
    }
}

/// The final state of a `clickhouse-sink` run, as the simulated pipeline records it (see
/// the module docs), and the bulk load of the same rows (`Err`: why there is none, a note).
///
/// # Errors
/// A final read that failed.
pub fn final_state(
    t: &ChTarget,
    scenario: &Scenario,
    bootstrap: &str,
    history: &History,
) -> Result<FinalState, String> {
    let (log, offsets) = source_and_offsets(bootstrap, scenario, &t.connector.group_id())?;
    let client = clients(&t.connector.raw)?;
    let table = t.spec.target_table().name;
    let rows = block_on(client.select(&table, false))?
        .map_err(|e| format!("clickhouse: final read of {table}: {e}"))?;
    let mut values = Vec::new();
    let mut by_name = BTreeMap::new();
    for (tp, records) in &log {
        let refs: Vec<RecordRef> = records
            .iter()
            .map(|r| r.record_ref(tp, id_of(&r.headers)))
            .collect();
        for r in &refs {
            by_name
                .entry(format!("r{}", r.id))
                .or_insert_with(|| r.clone());
        }
        values.push(Value::LogState {
            tp: tp.clone(),
            records: refs,
        });
    }
    let rows = sink_rows(&rows, &by_name, &scenario.topic.name);
    values.push(Value::SinkState { rows });
    if let Some(topic) = &t.connector.dlq_topic {
        values.push(dlq_state(bootstrap, topic)?);
    }
    values.push(Value::CommittedOffsets { offsets });
    values.extend(task_states(history).into_values());
    Ok(FinalState {
        values,
        bulk_loads: t.bulk_load(&log).map(|load| vec![load]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::clickhouse::CONNECTOR_CLASS;

    fn scenario(sink: &str) -> Scenario {
        let text = format!(
            "name = \"t\"\npipeline = \"clickhouse-sink\"\nclaim = \"exactly-once\"\n\
             [topic]\npartitions = 2\n[sink]\n{sink}"
        );
        toml::from_str(&text).expect("scenario parses")
    }

    /// The real connector gets the simulated one's dead-letter queue: before the two shared
    /// a builder, the real one had none, and `errors.tolerance=all` dropped what the
    /// simulated connector reported.
    #[test]
    fn errors_tolerance_all_routes_to_the_same_dead_letter_queue_as_the_simulation() {
        let s = scenario("\"errors.tolerance\" = \"all\"\n");
        let config = connector_config(&connector_raw(&s, 8123, "127.0.0.1:2181")).unwrap();
        let expected = format!("{}-dlq", spec(&s).name);
        assert_eq!(config.dlq_topic.as_deref(), Some(expected.as_str()));
        let sim = spec(&s).connector_props(&s.topic.name, "clickhouse", 8123);
        let real = connector_raw(&s, 8123, "127.0.0.1:2181");
        let transport = ["hostname", "ssl", ZOOKEEPER_KEY, TIMEOUT_KEY];
        let differing: Vec<&String> = real
            .keys()
            .chain(sim.keys())
            .filter(|k| !transport.contains(&k.as_str()) && real.get(*k) != sim.get(*k))
            .collect();
        assert!(
            differing.is_empty(),
            "real and simulated connector differ in {differing:?}"
        );
    }

    #[test]
    fn the_connector_is_built_from_sink_and_validates() {
        let s = scenario("batch_records_max = 30\nmax_insert_block_size = 10\n");
        let raw = connector_raw(&s, 8123, "127.0.0.1:2181");
        let config = connector_config(&raw).expect("validates");
        assert_eq!(config.connector_class, CONNECTOR_CLASS);
        assert_eq!(config.max_poll_records, 30);
        assert_eq!(config.group_id(), group(&s));
        let sink = ClickHouseSinkConfig::from_props(&raw).unwrap();
        assert_eq!((sink.port, sink.max_insert_block_size), (8123, Some(10)));
        let hooks = Arc::new(crate::sinks::clickhouse::NoHooks);
        assert!(real_sink_task(&config, hooks, Arc::default()).is_ok());
        assert_eq!(unsupported(&s), None);
    }

    #[test]
    fn token_variants_and_simulation_only_keys_are_skipped_with_the_reason() {
        for variant in ["seed+token", "seed+token+fencing"] {
            let why = unsupported(&scenario(&format!("variant = \"{variant}\"\n"))).unwrap();
            assert!(why.contains("insert_deduplication_token") && why.contains("18.16"));
        }
        let window = unsupported(&scenario("non_replicated_deduplication_window = 3\n"));
        assert!(window
            .unwrap()
            .contains("non_replicated_deduplication_window"));
        let point = "[sink.fault_point]\npoint = \"mid-insert\"\n";
        assert_eq!(unsupported(&scenario(point)), None);
        let pause = format!("{point}action = \"pause\"\n");
        assert!(unsupported(&scenario(&pause))
            .unwrap()
            .contains("simulation-only"));
    }

    #[test]
    fn table_rows_map_to_log_records_by_name() {
        let tp = TopicPartition::new("t", 1);
        let known = RecordRef {
            id: 3,
            key: None,
            tp: tp.clone(),
            offset: 1,
        };
        let by_name = BTreeMap::from([("r3".to_string(), known.clone())]);
        let rows = vec![
            vec![ChValue::UInt(3), ChValue::String("r3".into())],
            vec![ChValue::UInt(9), ChValue::String("r9".into())],
        ];
        let got = sink_rows(&rows, &by_name, "t");
        assert_eq!(got[0], known);
        assert_eq!((got[1].id, got[1].offset), (9, -1));
    }
}

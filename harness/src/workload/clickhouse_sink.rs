//! Pipeline `clickhouse-sink`: Kafka → the ClickHouse exactly-once sink (SPEC.md P1).
//!
//! # Model
//! - Nodes: `clickhouse` (10.0.6.1) and `keeper` (10.0.6.2) serving one
//!   [`ClickHouseWorld`] (`clickhouse_version`'s profile, 23.7 by default);
//!   `producer-0` writes ids `0..records` as JSON `{"id": id, "name": "r<id>"}` to
//!   partition `id % partitions` (so with one partition offset = id), acks=all, no
//!   retries (a retried send could land twice and blur offset-level exactly-once);
//!   `worker-i` (10.0.4.(i+1)), `i < tasks`, are Kafka Connect workers
//!   (`connect::worker`) of one herder; `operator` (10.0.9.3) creates the
//!   target and KeeperMap state tables, then posts the connector (class
//!   `com.clickhouse.kafka.connect.ClickHouseSinkConnector`, `tasks.max = tasks`) at
//!   `start_after_ms`; `fault-supervisor` (10.0.9.2) carries out armed fault points.
//! - The target table is the seed's `kafka2ck(id UInt8, name String)`: `id` wraps past
//!   255 as JSONEachRow does, so a row's identity is its `name`.
//! - The sink task runs in the worker's `WorkerSinkTask` loop, as the JDBC sink does: one
//!   consumer per task in group `connect-<name>`, JsonConverter (schemas off), `put`
//!   retried while it answers `Retriable`, a commit of what `pre_commit` returns after
//!   every batch (the task requests it), the worker's dead-letter queue `<name>-dlq` with
//!   Connect's context headers (`errors.tolerance=all`). A `Fatal` answer leaves the task
//!   FAILED in the herder until its worker restarts (no operator restarts it).
//!
//! # Ops recorded
//! `send` per id; the operator's connector configurations; task status changes; `write`
//! per insert attempt (the rows it carried, offset unknown): invoke before it is sent,
//! then `ok`, `fail` (ClickHouse refused it) or `info` (a timeout or
//! `UNKNOWN_STATUS_OF_INSERT`: it may have applied), with the error text; `commit`
//! invoke/ok/fail/info; nemesis `fault`s and a `fault-point` effect for the fault point
//! that fires. Final: `LogState` per partition, `SinkState` (the table's rows mapped back
//! to log positions by name), `DlqState` (with a DLQ), `CommittedOffsets` of
//! `connect-<name>`, and each task's status.
//!
//! # Analyses
//! The standard checkers: `sink-lost` (a record of the log missing from the table,
//! including records sent to the DLQ: F2's right answer has an empty DLQ),
//! `sink-duplicate` (a record held twice).

mod connector;
mod hooks;

use super::one_attempt_producer;
use super::upstream_txn::{self, UpstreamTxn};
use super::{node_ip, Pipeline};
use crate::client::sim::conn::Connection;
use crate::client::ProducerRecord;
use crate::connect::config::WorkerConfig;
use crate::connect::herder::Herder;
use crate::connect::worker::{dlq_state, final_task_status, worker_process, WorkerRuntime};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::scenario::clickhouse::ClickHouseSinkSpec;
use crate::scenario::{Scenario, TopicSpec};
use crate::world::World;
use bytes::Bytes;
use eosim_sim::clickhouse::keeper::Keeper;
use eosim_sim::clickhouse::model::{ClickHouse, ServerConfig};
use eosim_sim::clickhouse::service::{
    clickhouse_ip, keeper_ip, serve_clickhouse, serve_keeper, ClickHouseWorld,
};
use eosim_sim::clickhouse::types::{ColumnType, TableDef, Value as ChValue};
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::task::NodeId;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// State shared by the processes of one run.
#[derive(Default)]
pub struct Shared {
    /// Next id the producer sends (a restarted producer goes on from it).
    pub next_id: u64,
    /// Producer done.
    pub produced: bool,
    /// Node ids by name (filled in `start`).
    pub nodes: BTreeMap<String, NodeId>,
    /// Hits per fault point, over every task.
    pub point_hits: BTreeMap<String, u64>,
    /// Whether the armed fault point fired.
    pub fired: bool,
    /// Task starts, per worker (owner names `worker-i#n`).
    pub incarnations: BTreeMap<String, u64>,
}

/// Everything a process needs.
#[derive(Clone)]
pub struct Context {
    /// The scenario.
    pub scenario: Arc<Scenario>,
    /// `[sink]`.
    pub spec: Arc<ClickHouseSinkSpec>,
    /// The history.
    pub recorder: Recorder,
    /// ClickHouse and Keeper models.
    pub ch: ClickHouseWorld,
    /// Shared state.
    pub shared: Arc<Mutex<Shared>>,
    /// The Connect herder of the `worker-i` nodes.
    pub herder: Herder,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    pub upstream: Option<UpstreamTxn>,
}

impl Context {
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("shared lock")
    }

    /// The consumer group of the connector's tasks.
    pub fn group(&self) -> String {
        format!("connect-{}", self.spec.name)
    }
}

/// The seed's target table with the scenario's engine and dedup settings.
pub fn target_table(spec: &ClickHouseSinkSpec) -> TableDef {
    spec.target_table()
}

/// The producer: ids `0..records` as JSON, one partition each by `id % partitions`, one
/// attempt each ([`super::one_attempt_producer`], batching with `[workload]`'s keys).
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    if let Some(upstream) = &ctx.upstream {
        return txn_producer_process(&ctx, upstream, conn, name).await;
    }
    let take_id = |mark_done: bool| {
        let mut shared = ctx.shared();
        if shared.next_id >= w.records {
            shared.produced |= mark_done;
            return None;
        }
        shared.next_id += 1;
        Some(shared.next_id - 1)
    };
    let recorder = ctx.clone();
    let record = move |kind, value, error| recorder.record(&name, kind, value, error);
    let done = || ctx.shared().produced = true;
    one_attempt_producer(conn, w, take_id, |id| id_record(&ctx, id), record, done).await;
}

/// The record of `id`: JSON `{"id": id, "name": "r<id>"}` to partition `id % partitions`.
fn id_record(ctx: &Context, id: u64) -> ProducerRecord {
    let partition = (id % u64::from(ctx.scenario.topic.partitions)) as u32;
    ProducerRecord {
        topic: ctx.scenario.topic.name.clone(),
        partition: Some(partition),
        key: None,
        value: Some(Bytes::from(id_value(id))),
        headers: Vec::new(),
    }
}

/// The value of record `id`: `{"id":<id>,"name":"r<id>"}`, the text of
/// `json!({"id": id, "name": format!("r{id}")})` written out (keys in order, nothing to
/// escape) without building a JSON map per record.
fn id_value(id: u64) -> String {
    format!(r#"{{"id":{id},"name":"r{id}"}}"#)
}

/// The producer of a transactional upstream ([`super::upstream_txn`]): the same records
/// as [`producer_process`]'s, in transactions. Done once the last transaction ended.
async fn txn_producer_process(
    ctx: &Context,
    upstream: &UpstreamTxn,
    conn: Connection,
    name: String,
) {
    let mut session = upstream.session(conn, &name).await;
    let next = || {
        let id = {
            let mut shared = ctx.shared();
            let id = shared.next_id;
            let more = id < ctx.scenario.workload.records;
            shared.next_id += u64::from(more);
            more.then_some(id)
        }?;
        Some((id, None, id_record(ctx, id)))
    };
    session
        .send_all(next, ctx.scenario.workload.produce_interval_ms)
        .await;
    ctx.shared().produced = true;
}

/// The `clickhouse-sink` pipeline.
pub struct ClickhouseSink {
    ctx: Context,
}

impl ClickhouseSink {
    /// The pipeline of `scenario`, recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let spec = Arc::new(scenario.sink.clone().unwrap_or_default());
        let version = spec.clickhouse_version.profile();
        let server = ClickHouse::new(version, ServerConfig::default());
        let ch = ClickHouseWorld::new(server, Keeper::new());
        let shared = Arc::default();
        let herder = Herder::new(WorkerConfig::default(), connector::parser());
        let upstream = UpstreamTxn::of(&scenario, &recorder);
        let mut ctx = Context {
            scenario,
            spec,
            recorder,
            ch,
            shared,
            herder,
            upstream,
        };
        ctx.herder = Herder::new(connector::worker_config(&ctx), connector::parser());
        Self { ctx }
    }

    fn runtime(&self, world: &World) -> WorkerRuntime {
        WorkerRuntime {
            herder: self.ctx.herder.clone(),
            brokers: world.broker_count(),
            recorder: self.ctx.recorder.clone(),
            factory: connector::factory(self.ctx.clone()),
            task_crash_probability: 0.0,
            source: None,
        }
    }
}

impl Pipeline for ClickhouseSink {
    /// The input topic and, under `errors.tolerance=all`, the one-partition DLQ topic.
    fn topics(&self) -> Vec<TopicSpec> {
        let t = &self.ctx.scenario.topic;
        let mut topics = vec![t.clone()];
        if let Some(name) = connector::dlq_topic(&self.ctx) {
            topics.push(TopicSpec {
                name,
                partitions: 1,
                ..t.clone()
            });
        }
        topics
    }

    fn start(&mut self, world: &mut World) {
        if hooks::armed(&self.ctx).is_some() {
            // The seed's fault point is scheduled: it must fire to count as exercised.
            eosim_sim::effects::arm(eosim_sim::effects::kind::FAULT_POINT);
        }
        let ch = self.ctx.ch.clone();
        world.add_node("keeper", keeper_ip(), move || serve_keeper(ch.clone()));
        let ch = self.ctx.ch.clone();
        world.add_node("clickhouse", clickhouse_ip(), move || {
            serve_clickhouse(ch.clone())
        });
        world.add_node("fault-supervisor", node_ip(9, 2), || async {
            std::future::pending::<()>().await
        });
        let ctx = self.ctx.clone();
        world.add_node("operator", node_ip(9, 3), move || {
            connector::operator_process(ctx.clone())
        });
        let ctx = self.ctx.clone();
        world.add_node("producer-0", node_ip(2, 1), move || {
            producer_process(ctx.clone(), "producer-0".into())
        });
        let rt = self.runtime(world);
        for i in 0..self.ctx.spec.tasks {
            let (rt, name) = (rt.clone(), format!("worker-{i}"));
            world.add_node(&name.clone(), node_ip(4, i as u8 + 1), move || {
                worker_process(rt.clone(), name.clone())
            });
        }
        let mut shared = self.ctx.shared();
        for name in world.names() {
            if let Some((id, _)) = world.node(&name) {
                shared.nodes.insert(name, id);
            }
        }
    }

    /// Unfinished: the producer, partitions whose committed offset (group
    /// `connect-<name>`) is behind the high watermark, a connector the herder refused, and
    /// tasks the herder has FAILED.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.shared().produced {
            lag.push("producer not done".to_string());
        }
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let now_ms = world.kafka.now_ms();
        let transactional = self
            .ctx
            .upstream
            .as_ref()
            .map(|_| self.ctx.spec.consumer_isolation());
        lag.extend(upstream_txn::group_lag(
            &mut cluster,
            now_ms,
            self.ctx.scenario.topic.topic_partitions(),
            &self.ctx.group(),
            transactional,
        ));
        let name = &self.ctx.spec.name;
        if self.ctx.herder.status(name).is_none() {
            lag.push(format!(
                "connector {name} not created (see the operator's op)"
            ));
            return lag;
        }
        lag.extend(self.ctx.herder.failed_task_lines(name));
        lag
    }

    fn record_final(&self, world: &World) {
        let t = now_ns();
        let mut by_name: BTreeMap<String, RecordRef> = BTreeMap::new();
        let cluster = world.kafka.cluster.lock().expect("cluster lock");
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let records: Vec<RecordRef> = cluster
                .records(&tp)
                .into_iter()
                .map(|(offset, record)| record_ref(&tp, offset, &record.value))
                .collect();
            for r in &records {
                by_name
                    .entry(format!("r{}", r.id))
                    .or_insert_with(|| r.clone());
            }
            let value = Value::LogState { tp, records };
            self.ctx
                .recorder
                .record(t, "final", OpKind::Ok, value, None);
        }
        let dlq = connector::dlq_topic(&self.ctx).map(|topic| {
            let tp = TopicPartition::new(&topic, 0);
            dlq_state(&cluster, &topic, |r| record_ref(&tp, 0, &r.value).id)
        });
        let offsets = cluster.committed_offsets(&self.ctx.group());
        drop(cluster);
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        let rows = self.table_rows(&by_name);
        let rec = |value| {
            self.ctx
                .recorder
                .record(t, "final", OpKind::Ok, value, None);
        };
        rec(Value::SinkState { rows });
        if let Some(dlq) = dlq {
            rec(dlq);
        }
        rec(Value::CommittedOffsets { offsets });
        for value in final_task_status(&self.ctx.herder, &self.ctx.spec.name) {
            rec(value);
        }
    }
}

impl ClickhouseSink {
    /// The target table's rows, each mapped to the log record of the same name.
    fn table_rows(&self, by_name: &BTreeMap<String, RecordRef>) -> Vec<RecordRef> {
        let server = self.ctx.ch.server.lock().expect("clickhouse lock");
        let rows = server.select("kafka2ck", false).unwrap_or_default();
        let name_col = TableDef::kafka2ck()
            .column_index("name")
            .expect("kafka2ck.name");
        assert_eq!(
            TableDef::kafka2ck().columns[name_col].ty,
            ColumnType::String
        );
        rows.iter()
            .map(|row| match &row[name_col] {
                ChValue::String(name) => by_name.get(name).cloned().unwrap_or_else(|| {
                    let id = name.trim_start_matches('r').parse().unwrap_or(u64::MAX);
                    let tp = TopicPartition::new(&self.ctx.scenario.topic.name, 0);
                    RecordRef {
                        id,
                        key: None,
                        tp,
                        offset: -1,
                    }
                }),
                other => panic!("kafka2ck.name holds {other:?}"),
            })
            .collect()
    }
}

/// The `id` of a JSON object's text as `serde_json::from_slice::<Value>(bytes).ok()?
/// .get("id")?.as_u64()` reads it (the last `id` of the object; `None` for text that is not
/// JSON, not an object or has no unsigned `id`), without building the object's map: every
/// value is still parsed as a [`serde_json::Value`], so what fails to parse is the same.
fn json_id(bytes: &[u8]) -> Option<u64> {
    use serde::de::{Deserializer, MapAccess, Visitor};
    /// Visits an object's entries, keeping the last `id`.
    struct IdVisitor;
    impl<'de> Visitor<'de> for IdVisitor {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
            let mut id = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                let value: serde_json::Value = map.next_value()?;
                if key == "id" {
                    id = Some(value.as_u64());
                }
            }
            Ok(id.flatten())
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let id = de.deserialize_map(IdVisitor).ok()?;
    de.end().ok()?;
    id
}

fn record_ref(tp: &TopicPartition, offset: Offset, value: &Option<Bytes>) -> RecordRef {
    let id = value.as_deref().and_then(json_id).unwrap_or(u64::MAX);
    RecordRef {
        id,
        key: None,
        tp: tp.clone(),
        offset,
    }
}

#[cfg(test)]
mod tests {
    use super::{id_value, json_id};

    #[test]
    fn id_value_is_the_text_of_its_json_object() {
        for id in [0, 7, 12_345, u64::MAX] {
            let built = serde_json::json!({"id": id, "name": format!("r{id}")}).to_string();
            assert_eq!(id_value(id), built);
        }
    }

    #[test]
    fn json_id_reads_what_the_parsed_object_holds() {
        let through_value = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .ok()
                .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
        };
        let texts = [
            r#"{"id":5,"name":"r5"}"#,
            r#"{"name":"r5","id":6}"#,
            r#"{"id":1,"id":2}"#,
            r#"{"id":1,"id":"x"}"#,
            r#"{"id":-1}"#,
            r#"{"id":1.5}"#,
            r#"{"\u0069d":9}"#,
            r#"{"id":3,"name":"\ud800"}"#,
            r#"{"id":3} x"#,
            r#"{"id":3"#,
            r#"[{"id":4}]"#,
            "17",
            "",
            "not json",
        ];
        for text in texts {
            assert_eq!(json_id(text.as_bytes()), through_value(text), "{text}");
        }
        assert_eq!(json_id(b"{\"id\":3,\"n\":\"\xff\"}"), None, "invalid UTF-8");
    }
}

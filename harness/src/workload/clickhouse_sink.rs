//! Pipeline `clickhouse-sink`: Kafka → the ClickHouse exactly-once sink (SPEC.md P1).
//!
//! # Model
//! - Nodes: `clickhouse` (10.0.6.1) and `keeper` (10.0.6.2) serving one
//!   [`ClickHouseWorld`] (23.7 profile); `producer-0` writes ids `0..records` as JSON
//!   `{"id": id, "name": "r<id>"}` to partition `id % partitions` (so with one partition
//!   offset = id), acks=all, no retries (a retried send could land twice and blur
//!   offset-level exactly-once); `worker-i` (10.0.4.(i+1)) each run one sink task;
//!   `fault-supervisor` (10.0.9.2) carries out armed fault points.
//! - The target table is the seed's `kafka2ck(id UInt8, name String)`: `id` wraps past
//!   255 as JSONEachRow does, so a row's identity is its `name`.
//! - **Stand-in worker loop** (until the Connect worker of branch `connect` lands): per
//!   task one consumer in group `connect-<name>`, poll → JSON conversion (a value that is
//!   not JSON goes to the DLQ) → `put` (retried while it answers `Retriable`) →
//!   `pre_commit` → commit what it returned. A `Fatal` answer leaves the task FAILED until
//!   its node restarts. Marked `STAND-IN` below so it is easy to replace.
//!
//! # Ops recorded
//! `send` per id; `poll` ok per non-empty poll; `write` ok per insert that returned
//! success (the rows it carried); `commit` invoke/ok/fail/info; nemesis `fault`s for fault
//! points that fire. Final: `LogState` per partition, `SinkState` (the table's rows mapped
//! back to log positions by name), `CommittedOffsets` of `connect-<name>`.
//!
//! # Analyses
//! The standard checkers: `sink-lost` (a record of the log missing from the table,
//! including records sent to the DLQ), `sink-duplicate` (a record held twice).

mod hooks;
mod task_loop;

use super::Pipeline;
use crate::client::sim::conn::Connection;
use crate::client::sim::producer::SimProducer;
use crate::client::{Producer, ProducerConfig, ProducerRecord};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::runner::world::{now_ns, World};
use crate::scenario::clickhouse::ClickHouseSinkSpec;
use crate::scenario::{Scenario, TopicSpec};
use bytes::Bytes;
use eosim_sim::clickhouse::keeper::Keeper;
use eosim_sim::clickhouse::model::{ClickHouse, ServerConfig};
use eosim_sim::clickhouse::service::{
    clickhouse_ip, keeper_ip, serve_clickhouse, serve_keeper, ClickHouseWorld,
};
use eosim_sim::clickhouse::types::{ColumnType, TableDef, Value as ChValue, VersionProfile};
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::task::NodeId;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Tasks that failed, with the reason (until their node restarts).
    pub failed: BTreeMap<String, String>,
    /// Records reported to the dead-letter queue: (tp, offset, reason).
    pub dlq: Vec<(TopicPartition, Offset, String)>,
    /// Task incarnations, per worker (owner names `worker-i#n`).
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

/// The producer: ids `0..records` as JSON, one partition each by `id % partitions`.
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    let config = ProducerConfig {
        acks: w.acks,
        enable_idempotence: false,
        request_timeout_ms: w.request_timeout_ms,
        delivery_timeout_ms: w.request_timeout_ms,
        retries: 0,
        ..ProducerConfig::default()
    };
    let producer = SimProducer::new(conn, config);
    let partitions = ctx.scenario.topic.partitions;
    loop {
        let id = {
            let mut shared = ctx.shared();
            if shared.next_id >= w.records {
                shared.produced = true;
                return;
            }
            shared.next_id += 1;
            shared.next_id - 1
        };
        let partition = (id % u64::from(partitions)) as u32;
        let tp = TopicPartition::new(ctx.scenario.topic.name.clone(), partition);
        let invoke = Value::Send {
            id,
            key: None,
            tp: Some(tp.clone()),
            offset: None,
        };
        ctx.record(&name, OpKind::Invoke, invoke, None);
        let value = serde_json::json!({"id": id, "name": format!("r{id}")}).to_string();
        let record = ProducerRecord {
            topic: tp.topic.clone(),
            partition: Some(partition),
            key: None,
            value: Some(Bytes::from(value)),
            headers: Vec::new(),
        };
        let (kind, offset, error) = match producer.send(record).await {
            Ok(d) => (OpKind::Ok, Some(d.offset), None),
            Err(e) if e.is_ambiguous() => (OpKind::Info, None, Some(e.to_string())),
            Err(e) => (OpKind::Fail, None, Some(e.to_string())),
        };
        ctx.record(
            &name,
            kind,
            Value::Send {
                id,
                key: None,
                tp: Some(tp),
                offset,
            },
            error,
        );
        madsim::time::sleep(Duration::from_millis(w.produce_interval_ms)).await;
    }
}

/// The `clickhouse-sink` pipeline.
pub struct ClickhouseSink {
    ctx: Context,
}

impl ClickhouseSink {
    /// The pipeline of `scenario`, recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let spec = Arc::new(scenario.sink.clone().unwrap_or_default());
        let server = ClickHouse::new(VersionProfile::V23_7, ServerConfig::default());
        let ch = ClickHouseWorld::new(server, Keeper::new());
        let shared = Arc::default();
        Self {
            ctx: Context {
                scenario,
                spec,
                recorder,
                ch,
                shared,
            },
        }
    }

    fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        let topic = &self.ctx.scenario.topic;
        (0..topic.partitions).map(|p| TopicPartition::new(topic.name.clone(), p))
    }
}

impl Pipeline for ClickhouseSink {
    fn topics(&self) -> Vec<TopicSpec> {
        vec![self.ctx.scenario.topic.clone()]
    }

    fn start(&mut self, world: &mut World) {
        let ch = self.ctx.ch.clone();
        world.add_node("keeper", keeper_ip(), move || serve_keeper(ch.clone()));
        let ch = self.ctx.ch.clone();
        world.add_node("clickhouse", clickhouse_ip(), move || {
            serve_clickhouse(ch.clone())
        });
        world.add_node(
            "fault-supervisor",
            IpAddr::V4(Ipv4Addr::new(10, 0, 9, 2)),
            || async { std::future::pending::<()>().await },
        );
        let (ctx, name) = (self.ctx.clone(), "producer-0".to_string());
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));
        world.add_node(&name, ip, move || {
            producer_process(ctx.clone(), "producer-0".into())
        });
        for i in 0..self.ctx.spec.tasks {
            let name = format!("worker-{i}");
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 4, i as u8 + 1));
            let (ctx, n) = (self.ctx.clone(), name.clone());
            world.add_node(&name, ip, move || {
                task_loop::task_process(ctx.clone(), n.clone())
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
    /// `connect-<name>`) is behind the high watermark, and failed tasks.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.shared().produced {
            lag.push("producer not done".to_string());
        }
        let cluster = world.kafka.cluster.lock().expect("cluster lock");
        let committed: BTreeMap<TopicPartition, Offset> = cluster
            .committed_offsets(&self.ctx.group())
            .into_iter()
            .collect();
        for tp in self.partitions() {
            let hw = cluster.high_watermark(&tp).unwrap_or(0);
            let c = committed.get(&tp).copied().unwrap_or(0);
            if c < hw {
                lag.push(format!("{tp}: committed {c} < high watermark {hw}"));
            }
        }
        for (task, reason) in &self.ctx.shared().failed {
            lag.push(format!("task {task} FAILED: {reason}"));
        }
        lag
    }

    fn record_final(&self, world: &World) {
        let t = now_ns();
        let mut by_name: BTreeMap<String, RecordRef> = BTreeMap::new();
        let cluster = world.kafka.cluster.lock().expect("cluster lock");
        for tp in self.partitions() {
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
        let offsets = cluster.committed_offsets(&self.ctx.group());
        drop(cluster);
        let rows = self.table_rows(&by_name);
        let recorder = &self.ctx.recorder;
        recorder.record(t, "final", OpKind::Ok, Value::SinkState { rows }, None);
        recorder.record(
            t,
            "final",
            OpKind::Ok,
            Value::CommittedOffsets { offsets },
            None,
        );
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
                    let tp = TopicPartition::new(self.ctx.scenario.topic.name.clone(), 0);
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

fn record_ref(tp: &TopicPartition, offset: Offset, value: &Option<Bytes>) -> RecordRef {
    let id = value
        .as_ref()
        .and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok())
        .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
        .unwrap_or(u64::MAX);
    RecordRef {
        id,
        key: None,
        tp: tp.clone(),
        offset,
    }
}

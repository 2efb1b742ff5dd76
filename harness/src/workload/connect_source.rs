//! Pipeline `connect-source`: a source database's change log → Kafka Connect workers
//! running a Debezium PostgreSQL source connector → the scenario's topic, at least once
//! (`WorkerSourceTask`) or exactly once (KIP-618, `ExactlyOnceWorkerSourceTask`).
//!
//! # Model
//! - The source database is the change log of `[source]` ([`eosim_sim::source_db`]), a model
//!   outside every node: it survives every fault, and the task reads it in-process (the
//!   replication connection is not modelled).
//! - `operator` (10.0.9.5) creates the connector (`[connector]`) at
//!   `connect.connector_create_at_ms`, then restarts FAILED tasks after
//!   `connect.restart_failed_after_ms` (when set); `connect-1..n` (10.0.4.i) are Connect
//!   workers with `[connect] worker`'s keys (`exactly.once.source.support`,
//!   `offset.flush.interval.ms`, ...), running the connector's one task
//!   ([`crate::connect::postgres_source`], [`crate::connect::source_worker`]).
//! - The offsets topic (`offset.storage.topic`, `connect-offsets` by default) is created
//!   with one partition and the scenario topic's replication; Connect's is compacted with
//!   25 partitions, which changes nothing a reader of the last offset per key sees.
//!
//! # Ops recorded
//! The operator's `connector-config` (and `restart-task`); `task-status` on every start and
//! failure; per record `send` invoke / ok (its id from the `eosim.id` header); at least
//! once: `source-offsets` per offset flush; exactly once: `txn` per transaction. Final:
//! the `ChangeLog` (every event of the source database), each partition's `LogState`
//! (read_uncommitted), `PartitionState` and `CommittedLogState` (read_committed), each
//! task's status.
//!
//! # Analyses
//! The source checker ([`crate::checker`]'s `source`): each change event in the topic
//! once (`sink-duplicate` when more, forbidden unless the claim is at-least-once;
//! `sink-lost` when absent, forbidden unless at-most-once), judged on the read_committed
//! view when the workers run KIP-618, on the whole log otherwise; the Kafka checker (lost
//! acknowledged sends) and, under KIP-618, the transaction checker (aborted reads, torn
//! transactions, a stuck LSO). The drain waits until the stored offsets cover the last
//! event of the log and, under KIP-618, every LSO reached its HW; a FAILED task is named in
//! the lag.

use super::records::{read_committed, LsoGrace, LSO_GRACE_EXTRA_MS};
use super::{add_connect_workers, node_ip, restart_failed_tasks, Pipeline};
use crate::connect::config::{ConnectorConfig, WorkerConfig};
use crate::connect::herder::{ConfigParser, Herder};
use crate::connect::postgres_source::{position_of, PostgresSourceTask};
use crate::connect::source_config::{parse_connector, SourceConnectorConfig};
use crate::connect::source_task::{parse_offset_key, SourceTask};
use crate::connect::source_worker::{SourceFactory, SourceRuntime};
use crate::connect::worker::{final_task_status, TaskRun, WorkerRuntime};
use crate::history::refs::text;
use crate::history::refs::ID_HEADER;
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::world::World;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{Record, TopicPartition};
use eosim_sim::source_db::{ChangeLog, LogPosition};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything a process needs.
#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    herder: Herder,
    connector: SourceConnectorConfig,
    worker: WorkerConfig,
    log: Arc<ChangeLog>,
    /// The drain's wait for the topic's LSOs (KIP-618).
    lso_grace: Arc<Mutex<LsoGrace>>,
}

impl Context {
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    fn exactly_once(&self) -> bool {
        self.connector.exactly_once(&self.worker)
    }
}

/// Creates the connector at `connector_create_at_ms`, then watches for FAILED tasks.
async fn operator_process(ctx: Context) {
    let name = "operator";
    let at_ms = ctx.scenario.connect.connector_create_at_ms;
    let now_ms = now_ns() / 1_000_000;
    if at_ms > now_ms {
        madsim::time::sleep(Duration::from_millis(at_ms - now_ms)).await;
    }
    let raw = ctx.scenario.connector.clone();
    let connector = ctx.connector.framework.name.clone();
    let (kind, error) = match ctx.herder.create_connector(&raw) {
        Ok(()) => (OpKind::Ok, None),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    };
    let value = Value::ConnectorConfig {
        connector: connector.clone(),
        config: raw,
    };
    ctx.record(name, kind, value, error);
    let after_ms = ctx.scenario.connect.restart_failed_after_ms;
    let record = |value| ctx.record(name, OpKind::Ok, value, None);
    restart_failed_tasks(&ctx.herder, &connector, after_ms, record).await;
}

/// The `connect-source` pipeline.
pub struct ConnectSource {
    ctx: Context,
}

impl ConnectSource {
    /// The pipeline of `scenario` (validated at load), recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let worker = WorkerConfig::parse(&scenario.connect.worker).expect("validated at load");
        let connector = SourceConnectorConfig::parse(&scenario.connector).expect("validated");
        let parse_worker = worker.clone();
        let parser: ConfigParser = Arc::new(move |raw| parse_connector(raw, &parse_worker));
        let log = Arc::new(ChangeLog::generate(scenario.source.log_config()));
        let ctx = Context {
            herder: Herder::new(worker.clone(), parser),
            scenario,
            recorder,
            connector,
            worker,
            log,
            lso_grace: Arc::default(),
        };
        Self { ctx }
    }

    fn runtime(&self, world: &World) -> WorkerRuntime {
        let log = self.ctx.log.clone();
        let factory: SourceFactory = Arc::new(move |config: &ConnectorConfig, _: &TaskRun| {
            let c = SourceConnectorConfig::parse(&config.raw).map_err(|e| e.to_string())?;
            let task = PostgresSourceTask::of_connector(log.clone(), &c);
            Ok(Box::new(task) as Box<dyn SourceTask>)
        });
        let no_sink: crate::connect::worker::SinkFactory = Arc::new(|_, _| {
            Box::pin(async { Err("a source pipeline has no sink plugin".to_string()) })
        });
        WorkerRuntime {
            herder: self.ctx.herder.clone(),
            brokers: world.broker_count(),
            recorder: self.ctx.recorder.clone(),
            factory: no_sink,
            task_crash_probability: self.ctx.scenario.connect.task_crash_probability,
            source: Some(SourceRuntime {
                factory,
                txn_ids: Arc::default(),
            }),
        }
    }

    /// The offsets topic's one partition.
    fn offsets_tp(&self) -> TopicPartition {
        TopicPartition::new(&self.ctx.worker.offset_storage_topic, 0)
    }

    /// The last position the offsets topic stores for the connector's partition, read as
    /// a read_committed consumer would (a transaction's offsets count once committed).
    fn stored_position(&self, cluster: &mut Cluster, now_ms: u64) -> Option<LogPosition> {
        let records = read_committed(cluster, now_ms, &self.offsets_tp()).ok()?;
        let name = &self.ctx.connector.framework.name;
        let mut last = None;
        for r in records {
            let key = text(&r.record.key);
            let Some((owner, _)) = key.as_deref().and_then(parse_offset_key) else {
                continue;
            };
            let value = text(&r.record.value).and_then(|v| serde_json::from_str(&v).ok());
            if &owner == name {
                last = value.and_then(|v| position_of(&v).ok());
            }
        }
        last
    }

    fn record_final_op(&self, value: Value) {
        self.ctx.record("final", OpKind::Ok, value, None);
    }
}

/// The id a record carries in its `eosim.id` header; `u64::MAX` without one.
fn id_of(record: &Record) -> u64 {
    record
        .headers
        .iter()
        .find(|(k, _)| k == ID_HEADER)
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(u64::MAX)
}

impl Pipeline for ConnectSource {
    fn topics(&self) -> Vec<TopicSpec> {
        let topic = self.ctx.scenario.topic.clone();
        let offsets = TopicSpec {
            name: self.ctx.worker.offset_storage_topic.clone(),
            partitions: 1,
            ..topic.clone()
        };
        vec![topic, offsets]
    }

    fn start(&mut self, world: &mut World) {
        let ctx = self.ctx.clone();
        world.add_node("operator", node_ip(9, 5), move || {
            operator_process(ctx.clone())
        });
        let rt = self.runtime(world);
        add_connect_workers(world, &rt, self.ctx.scenario.connect.workers);
    }

    /// Unfinished: the stored offsets behind the log's last event, FAILED tasks, and
    /// under KIP-618 partitions whose LSO is below the HW (within [`LsoGrace`]).
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let stored = self.stored_position(&mut cluster, now_ms);
        let last = self.ctx.log.last_position();
        if stored < last {
            let stored = stored.map_or("nothing".to_string(), |p| p.to_string());
            let last = last.map(|p| p.to_string()).unwrap_or_default();
            lag.push(format!(
                "stored source offset {stored} < last change event {last}"
            ));
        }
        lag.extend(
            self.ctx
                .herder
                .failed_task_lines(&self.ctx.connector.framework.name),
        );
        if self.ctx.exactly_once() {
            let grace_ms = 60_000 + LSO_GRACE_EXTRA_MS;
            let outputs = self.ctx.scenario.topic.topic_partitions();
            let now = (now_ms, now_ns());
            let mut grace = self.ctx.lso_grace.lock().expect("lso grace");
            grace.output_lag(&mut cluster, now, &outputs, grace_ms, &mut lag);
        }
        lag
    }

    fn record_final(&self, world: &World) {
        let events = self.ctx.log.events().to_vec();
        self.record_final_op(Value::ChangeLog { events });
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let as_ref = |offset, r: &Record| RecordRef {
                id: id_of(r),
                key: text(&r.key),
                tp: tp.clone(),
                offset,
            };
            let records = cluster
                .records(&tp)
                .iter()
                .map(|(o, r)| as_ref(*o, r))
                .collect();
            self.record_final_op(Value::LogState {
                tp: tp.clone(),
                records,
            });
            self.record_final_op(Value::PartitionState {
                tp: tp.clone(),
                high_watermark: cluster.high_watermark(&tp).unwrap_or(-1),
                last_stable_offset: cluster.last_stable_offset(&tp).unwrap_or(-1),
            });
            let Ok(fetched) = read_committed(&mut cluster, now_ms, &tp) else {
                continue;
            };
            let records = fetched
                .iter()
                .map(|f| as_ref(f.offset, &f.record))
                .collect();
            self.record_final_op(Value::CommittedLogState {
                tp: tp.clone(),
                records,
            });
        }
        drop(cluster);
        for value in final_task_status(&self.ctx.herder, &self.ctx.connector.framework.name) {
            self.record_final_op(value);
        }
    }
}

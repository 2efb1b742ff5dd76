//! Pipeline `doris-sink`: Kafka → Kafka Connect → the Doris Kafka connector → Doris
//! (SPEC.md P4, the connector path; [`crate::sinks::doris`]).
//!
//! # Model
//! - Nodes: `doris-fe` (10.0.7.1) and `doris-be` (10.0.7.2) serving one [`DorisWorld`]
//!   whose FE aborts PRECOMMITTED transactions after `[doris]
//!   stream_load_default_precommit_timeout_second`; `operator` (10.0.9.5) creates database
//!   `db` and the seed's `clicklog` table (as [`super::routine_load`] does), then posts
//!   `[connector]` to the herder; `connect-1..n` (10.0.4.i) are Connect workers
//!   ([`crate::connect::worker`]) with `[connect] worker`'s keys, running
//!   `DorisSinkTask`s whose Doris client lives on the worker's node; `producer-0`
//!   (10.0.2.1) writes ids `0..records` as the seed's clicklog JSON to partition
//!   `id % partitions`, one attempt each.
//! - A row's identity is its `id` column.
//!
//! # Ops recorded
//! `send` per id; the operator's `connector-config`; `task-status` on every start and
//! failure; `write` per Stream Load (its rows; ok, fail or info); `commit` per offset
//! commit of group `connect-<name>`. Final: `LogState` per partition, `SinkState` (the
//! table's VISIBLE rows mapped back to log positions by id), `CommittedOffsets` of the
//! Connect group, `DorisState` (every transaction and its label), each task's status.
//!
//! # Analyses
//! The standard sink checkers (`sink-lost`, `sink-duplicate` under an exactly-once claim,
//! `progress-ahead-of-data`: Connect's committed offsets past rows the table does not
//! hold) and the Doris checker (`label-loaded-twice`). The drain waits for the producer,
//! for committed offsets at the high watermarks, and for every PRECOMMITTED transaction to
//! be committed or to time out; a FAILED task is named in the lag, so a run that never
//! catches up stalls with it.

use super::routine_load::{
    add_doris_nodes, clicklog_json, doris_state, log_and_table_state, produce_clicklog,
    transactions_lag, DB,
};
use super::upstream_txn::{self, UpstreamTxn};
use super::{add_connect_workers, node_ip, HistoryWriteLog, Pipeline};
use crate::client::sim::doris::SimDoris;
use crate::connect::config::{ConnectorConfig, WorkerConfig};
use crate::connect::herder::{ConfigParser, Herder};
use crate::connect::worker::{final_task_status, SinkFactory, TaskRun, WorkerRuntime};
use crate::history::{OpKind, Recorder, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::sinks::doris::task::DorisSinkTask;
use crate::sinks::doris::{parse_connector, DorisSinkConfig};
use crate::world::World;
use eosim_sim::clock::now_ns;
use eosim_sim::doris::model::{Doris, DorisConfig};
use eosim_sim::doris::service::{DorisWorld, FeRequest};
use eosim_sim::doris::types::TableDef;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Everything a process needs.
#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    doris: DorisWorld,
    herder: Herder,
    connector: ConnectorConfig,
    next_id: Arc<Mutex<(u64, bool)>>,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    upstream: Option<UpstreamTxn>,
}

/// Creates `db` and `clicklog` (retrying until the FE answers), then the connector.
async fn operator_process(ctx: Context) {
    let Ok(doris) = SimDoris::connect(ctx.scenario.workload.request_timeout_ms).await else {
        return;
    };
    let steps = [
        FeRequest::CreateDatabase(DB.into()),
        FeRequest::CreateTable {
            db: DB.into(),
            def: TableDef::clicklog(),
        },
    ];
    for step in steps {
        while doris.fe(step.clone()).await.is_err() {
            madsim::time::sleep(Duration::from_millis(500)).await;
            if ctx.doris.lock().table(DB, "clicklog").is_ok() {
                break;
            }
        }
    }
    let raw = ctx.scenario.connector.clone();
    let (kind, error) = match ctx.herder.create_connector(&raw) {
        Ok(()) => (OpKind::Ok, None),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    };
    let value = Value::ConnectorConfig {
        connector: ctx.connector.name.clone(),
        config: raw,
    };
    ctx.recorder
        .record(now_ns(), "operator", kind, value, error);
}

/// The `doris-sink` pipeline.
pub struct DorisSink {
    ctx: Context,
}

impl DorisSink {
    /// The pipeline of `scenario` (validated at load), recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let connector = parse_connector(&scenario.connector).expect("validated at load");
        let worker = WorkerConfig::parse(&scenario.connect.worker).expect("validated at load");
        let parser: ConfigParser = Arc::new(parse_connector);
        let config = DorisConfig {
            precommit_timeout_ms: scenario.doris.stream_load_default_precommit_timeout_second
                * 1_000,
            group_commit_interval_ms: scenario.doris.group_commit_interval_ms,
            group_commit_data_bytes: scenario.doris.group_commit_data_bytes,
            ..DorisConfig::default()
        };
        let upstream = UpstreamTxn::of(&scenario, &recorder);
        let ctx = Context {
            upstream,
            doris: DorisWorld::new(Doris::new(config)),
            herder: Herder::new(worker, parser),
            scenario,
            recorder,
            connector,
            next_id: Arc::default(),
        };
        Self { ctx }
    }

    fn runtime(&self, world: &World) -> WorkerRuntime {
        let timeout_ms = self.ctx.scenario.workload.request_timeout_ms;
        let recorder = self.ctx.recorder.clone();
        let factory: SinkFactory = Arc::new(move |config: &ConnectorConfig, run: &TaskRun| {
            let (raw, recorder, worker) =
                (config.raw.clone(), recorder.clone(), run.worker.clone());
            Box::pin(async move {
                let sink = DorisSinkConfig::parse(&raw).map_err(|e| e.to_string())?;
                let client = SimDoris::connect(timeout_ms)
                    .await
                    .map_err(|e| e.to_string())?;
                let writes = Arc::new(HistoryWriteLog {
                    recorder,
                    process: worker,
                });
                let task = DorisSinkTask::new(sink, client).with_write_log(writes);
                Ok(Box::new(task) as Box<dyn crate::connect::task::SinkTask>)
            })
        });
        WorkerRuntime {
            herder: self.ctx.herder.clone(),
            brokers: world.broker_count(),
            recorder: self.ctx.recorder.clone(),
            factory,
            task_crash_probability: self.ctx.scenario.connect.task_crash_probability,
            source: None,
        }
    }
}

impl Pipeline for DorisSink {
    fn topics(&self) -> Vec<TopicSpec> {
        vec![self.ctx.scenario.topic.clone()]
    }

    fn start(&mut self, world: &mut World) {
        add_doris_nodes(world, &self.ctx.doris, Vec::new());
        let ctx = self.ctx.clone();
        world.add_node("operator", node_ip(9, 5), move || {
            operator_process(ctx.clone())
        });
        let rt = self.runtime(world);
        add_connect_workers(world, &rt, self.ctx.scenario.connect.workers);
        let ctx = self.ctx.clone();
        world.add_node("producer-0", node_ip(2, 1), move || {
            let ctx = ctx.clone();
            async move {
                let (scenario, recorder) = (&ctx.scenario, &ctx.recorder);
                let upstream = ctx.upstream.as_ref();
                produce_clicklog(scenario, recorder, &ctx.next_id, upstream, clicklog_json).await;
            }
        });
    }

    /// Unfinished: the producer, partitions whose committed offset (group
    /// `connect-<name>`) is behind the high watermark, unfinished transactions
    /// (PRECOMMITTED, or COMMITTED and not yet VISIBLE), and FAILED tasks.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.next_id.lock().expect("next id").1 {
            lag.push("producer not done".to_string());
        }
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let isolation = self.ctx.upstream.as_ref();
        let isolation = isolation.map(|_| self.ctx.connector.isolation_level);
        lag.extend(upstream_txn::group_lag(
            &mut cluster,
            now_ms,
            self.ctx.scenario.topic.topic_partitions(),
            &self.ctx.connector.group_id(),
            isolation,
        ));
        drop(cluster);
        lag.extend(transactions_lag(&self.ctx.doris.lock()));
        lag.extend(self.ctx.herder.failed_task_lines(&self.ctx.connector.name));
        lag
    }

    fn record_final(&self, world: &World) {
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        let t = now_ns();
        let rec = |value| {
            self.ctx
                .recorder
                .record(t, "final", OpKind::Ok, value, None)
        };
        let doris = self.ctx.doris.lock();
        for value in log_and_table_state(world, &doris, &self.ctx.scenario.topic) {
            rec(value);
        }
        let offsets = {
            let cluster = world.kafka.cluster.lock().expect("cluster lock");
            cluster.committed_offsets(&self.ctx.connector.group_id())
        };
        rec(Value::CommittedOffsets { offsets });
        rec(doris_state(&doris));
        for value in final_task_status(&self.ctx.herder, &self.ctx.connector.name) {
            rec(value);
        }
    }
}

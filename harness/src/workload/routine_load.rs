//! Pipeline `routine-load`: Kafka → Doris Routine Load (SPEC.md P4).
//!
//! # Model
//! - Nodes: `doris-fe` (10.0.7.1) and `doris-be` (10.0.7.2) serving one [`DorisWorld`];
//!   the BE node also runs `[routine_load] executors` task executor loops
//!   ([`crate::sinks::doris_routine_load`]), so a BE crash kills its running tasks and a
//!   partition between the BE and the brokers cuts their consumers; `operator` (10.0.9.4)
//!   creates database `db`, the seed's table `clicklog(clickTime DATETIME, type String, id
//!   VARCHAR(100), user VARCHAR(100), city VARCHAR(50)) DUPLICATE KEY(clickTime, type)`
//!   and the job `CREATE ROUTINE LOAD db.clicklog_job ON clicklog COLUMNS(clickTime, id,
//!   type, user) PROPERTIES(...) FROM KAFKA(...)`; `producer-0` (10.0.2.1) writes ids
//!   `0..records` as the seed's JSON `{clickTime, type, id, user}` to partition
//!   `id % partitions`, acks=all, no retries.
//! - A row's identity is its `id` column.
//!
//! - Behind a transactional upstream (`[workload] "transactional.id"`), `producer-0`
//!   writes the same records in the transactions of [`super::upstream_txn`]; the job's
//!   `property.isolation.level` decides whether its tasks see the aborted ones.
//!
//! # Ops recorded
//! `send` per id (behind a transactional upstream, with its `txn` ops); per task commit a `write` (the rows loaded) and a `commit` (the
//! partitions' next offsets) with the commit's outcome (`ok`, `fail` when the FE refused
//! it, `info` when unanswered); with the F7 bug switch, a `commit` of the offsets a failed
//! task's abort moved; beside a commit's `write`, a `load-errors` of the rows the task
//! filtered (malformed JSON, values that do not fit, see `[routine_load] *_every`).
//! Final: `LogState` per partition, `SinkState` (the table's VISIBLE rows mapped back to
//! log positions by id), `CommittedOffsets` (the job's progress), `DorisState` (`SHOW
//! ROUTINE LOAD`, the transactions).
//!
//! # Analyses
//! The standard sink checkers: `sink-lost` (a record neither in the table nor an error
//! row of a committed task), `sink-duplicate`, and `progress-ahead-of-data` (the job's
//! progress past records the table does not hold); the Doris checker
//! (`routine-load-statistic`, `label-loaded-twice`). The drain's lag lines make a job
//! stuck PAUSED (with its `ReasonOfStateChanged`), progress that never reaches the high
//! watermark, or a PRECOMMITTED transaction never resolved, a stall with its reason.

use super::one_attempt_producer;
use super::upstream_txn::{self, UpstreamTxn};
use super::{node_ip, Pipeline};
use crate::client::sim::conn::Connection;
use crate::client::sim::doris::SimDoris;
use crate::client::ProducerRecord;
use crate::history::{DorisJobFinal, DorisTxnFinal, OpKind, RecordRef, Recorder, Value};
use crate::scenario::routine_load::RoutineLoadSpec;
use crate::scenario::{Scenario, TopicSpec};
use crate::sinks::doris_routine_load::{executor_process, id_of, record_ref, ExecutorConfig};
use crate::world::World;
use bytes::Bytes;
use eosim_sim::clock::now_ns;
use eosim_sim::doris::fe_routine_load::CreateRoutineLoad;
use eosim_sim::doris::model::{Doris, DorisConfig};
use eosim_sim::doris::routine_load::{JobState, KafkaOffset};
use eosim_sim::doris::service::{be_ip, fe_ip, serve_be, serve_fe, DorisWorld, FeRequest};
use eosim_sim::doris::txn::{LoadSource, TransactionStatus};
use eosim_sim::doris::types::{LoadSpec, TableDef};
use eosim_sim::kafka::model::CrashMode;
use eosim_sim::kafka::TopicPartition;
use madsim::rand::Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The job's database, table and name.
pub const DB: &str = "db";
/// The job's name.
pub const JOB: &str = "clicklog_job";

/// Everything a process needs.
#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    spec: Arc<RoutineLoadSpec>,
    recorder: Recorder,
    doris: DorisWorld,
    next_id: Arc<Mutex<(u64, bool)>>,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    upstream: Option<UpstreamTxn>,
}

impl Context {
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }
}

/// The seed's clicklog record for `id` (the JSON a `producer-0` sends).
pub fn clicklog_json(id: u64) -> String {
    let second = id % 60;
    let minute = (id / 60) % 60;
    serde_json::json!({
        "clickTime": format!("2023-05-01 10:{minute:02}:{second:02}"),
        "type": "webset",
        "id": id.to_string(),
        "user": format!("user{}", id % 100),
    })
    .to_string()
}

async fn producer_process(ctx: Context) {
    let spec = ctx.spec.clone();
    let json = move |id| spec.record_json(id, &clicklog_json(id));
    let upstream = ctx.upstream.as_ref();
    produce_clicklog(&ctx.scenario, &ctx.recorder, &ctx.next_id, upstream, json).await;
}

/// `producer-0` of the P4 pipelines: sends ids `0..records` (`json(id)` as the value, no
/// key) to partition `id % partitions` of `[topic]`, one attempt each
/// ([`super::one_attempt_producer`], batching with `[workload]`'s keys), recording a `send`
/// per id; `next_id` holds the next id and, once all are sent (and, behind a
/// transactional `upstream`, the last transaction ended), `true`. With `upstream` the
/// records go through its transactional [`super::upstream_txn::Session`] instead, which
/// records the sends and the transactions.
pub(crate) async fn produce_clicklog(
    scenario: &Scenario,
    recorder: &Recorder,
    next_id: &Mutex<(u64, bool)>,
    upstream: Option<&UpstreamTxn>,
    json: impl Fn(u64) -> String,
) {
    let w = &scenario.workload;
    let Ok(conn) = Connection::open(scenario.cluster.brokers).await else {
        return;
    };
    let record_of = |id: u64| ProducerRecord {
        topic: scenario.topic.name.clone(),
        partition: Some((id % u64::from(scenario.topic.partitions)) as u32),
        key: None,
        value: Some(Bytes::from(json(id))),
        headers: Vec::new(),
    };
    let take_id = |mark_done: bool| {
        let mut next = next_id.lock().expect("next id");
        if next.0 >= w.records {
            next.1 |= mark_done;
            return None;
        }
        next.0 += 1;
        Some(next.0 - 1)
    };
    let done = || next_id.lock().expect("next id").1 = true;
    if let Some(upstream) = upstream {
        let mut session = upstream.session(conn, "producer-0").await;
        let next = || take_id(false).map(|id| (id, None, record_of(id)));
        session.send_all(next, w.produce_interval_ms).await;
        return done();
    }
    let r = recorder.clone();
    let record = move |kind, value, error| {
        r.record(now_ns(), "producer-0", kind, value, error);
    };
    one_attempt_producer(conn, w, take_id, record_of, record, done).await;
}

/// Creates the database, the table and the job, retrying until the FE answers.
async fn operator_process(ctx: Context) {
    let Ok(doris) = SimDoris::connect(ctx.scenario.workload.request_timeout_ms).await else {
        return;
    };
    let topic = &ctx.scenario.topic;
    let props = match ctx.spec.props(&topic.name, ctx.scenario.cluster.brokers) {
        Ok(p) => p,
        Err(e) => {
            let value = Value::ConnectorConfig {
                connector: JOB.into(),
                config: ctx.spec.properties.clone(),
            };
            return ctx.record("operator", OpKind::Fail, value, Some(e.to_string()));
        }
    };
    let create = CreateRoutineLoad {
        name: JOB.into(),
        db: DB.into(),
        table: "clicklog".into(),
        spec: LoadSpec {
            columns: ctx.spec.columns.clone(),
            ..LoadSpec::default()
        },
        props,
    };
    let partitions: Vec<i32> = (0..topic.partitions as i32).collect();
    let steps = [
        FeRequest::CreateDatabase(DB.into()),
        FeRequest::CreateTable {
            db: DB.into(),
            def: TableDef::clicklog(),
        },
        FeRequest::CreateRoutineLoad {
            req: Box::new(create),
            partitions,
        },
    ];
    for step in steps {
        while doris.fe(step.clone()).await.is_err() {
            madsim::time::sleep(Duration::from_millis(500)).await;
            if ctx.doris.lock().fe.jobs.values().any(|j| j.name == JOB) {
                break;
            }
        }
    }
}

/// Adds the Doris nodes of the P4 pipelines serving `doris`: `doris-fe` ([`fe_ip`],
/// [`serve_fe`]) and `doris-be` ([`be_ip`], [`serve_be`]), whose every incarnation first
/// spawns one Routine Load task executor per entry of `executors` ([`executor_process`];
/// none for the Doris connector's pipeline), so that a BE crash kills its running tasks.
pub(crate) fn add_doris_nodes(
    world: &mut World,
    doris: &DorisWorld,
    executors: Vec<ExecutorConfig>,
) {
    let d = doris.clone();
    world.add_node("doris-fe", fe_ip(), move || serve_fe(d.clone()));
    let d = doris.clone();
    world.add_node("doris-be", be_ip(), move || {
        let (d, executors) = (d.clone(), executors.clone());
        async move {
            for cfg in executors {
                madsim::task::spawn(executor_process(cfg));
            }
            serve_be(d).await
        }
    });
    let d = doris.clone();
    world.on_kill(Box::new(move |name, _ip, mode| {
        if name != "doris-be" || mode != CrashMode::MachineCrash {
            return None;
        }
        // A power loss keeps of each WAL a prefix (what the OS had written back).
        let mut rng = madsim::rand::thread_rng();
        let lost = d.lock().crash_be_machine(|len| rng.gen_range(0..=len));
        (lost > 0).then(|| format!("doris-be lost {lost} unsynced group commit WAL rows"))
    }));
}

/// The `routine-load` pipeline.
pub struct RoutineLoad {
    ctx: Context,
}

impl RoutineLoad {
    /// The pipeline of `scenario`, recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let spec = Arc::new(scenario.routine_load.clone());
        let doris = DorisWorld::new(Doris::new(DorisConfig::default()));
        let upstream = UpstreamTxn::of(&scenario, &recorder);
        let ctx = Context {
            scenario,
            spec,
            recorder,
            doris,
            next_id: Arc::default(),
            upstream,
        };
        Self { ctx }
    }

    fn executor(&self, world: &World, i: usize) -> ExecutorConfig {
        ExecutorConfig {
            brokers: world.broker_count(),
            recorder: self.ctx.recorder.clone(),
            process: format!("doris-be/task-{i}"),
            task_fail_probability: self.ctx.spec.task_fail_probability,
            progress_from_consumer_position: self.ctx.spec.progress_from_consumer_position,
            request_timeout_ms: self.ctx.scenario.workload.request_timeout_ms,
        }
    }
}

impl Pipeline for RoutineLoad {
    fn topics(&self) -> Vec<TopicSpec> {
        vec![self.ctx.scenario.topic.clone()]
    }

    fn start(&mut self, world: &mut World) {
        let executors: Vec<ExecutorConfig> = (0..self.ctx.spec.executors)
            .map(|i| self.executor(world, i))
            .collect();
        add_doris_nodes(world, &self.ctx.doris, executors);
        let ctx = self.ctx.clone();
        world.add_node("operator", node_ip(9, 4), move || {
            operator_process(ctx.clone())
        });
        let ctx = self.ctx.clone();
        world.add_node("producer-0", node_ip(2, 1), move || {
            producer_process(ctx.clone())
        });
    }

    /// Unfinished: the producer, a job not created or not running (PAUSED with its
    /// reason), a partition whose progress is behind its high watermark (behind a
    /// transactional upstream: behind the end of what the job's isolation level reads,
    /// [`upstream_txn::lag_of`]), transactions committed but not yet visible.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.next_id.lock().expect("next id").1 {
            lag.push("producer not done".to_string());
        }
        let doris = self.ctx.doris.lock();
        let Some(job) = doris.fe.jobs.values().find(|j| j.name == JOB) else {
            lag.push(format!("routine load job {JOB} not created"));
            return lag;
        };
        if !matches!(job.state, JobState::Running | JobState::NeedSchedule) {
            let reason = job.pause_reason.as_ref().map_or("", |r| r.msg.as_str());
            lag.push(format!("job {JOB} is {:?}: {reason}", job.state));
        }
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let isolation = self.ctx.upstream.as_ref();
        let isolation = isolation.map(|_| job.props.isolation_level.kafka());
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let next = match job.progress.get(&(tp.partition as i32)) {
                Some(KafkaOffset::Next(n)) => *n,
                _ => 0,
            };
            if let Some(isolation) = isolation {
                lag.extend(upstream_txn::lag_of(
                    &mut cluster,
                    now_ms,
                    &tp,
                    isolation,
                    next,
                ));
                continue;
            }
            let hw = cluster.high_watermark(&tp).unwrap_or(0);
            if next < hw {
                lag.push(format!("{tp}: job progress {next} < high watermark {hw}"));
            }
        }
        lag.extend(transactions_lag(&doris));
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
        for value in log_and_table_state(world, &self.ctx.doris.lock(), &self.ctx.scenario.topic) {
            rec(value);
        }
        let doris = self.ctx.doris.lock();
        let topic = &self.ctx.scenario.topic.name;
        let offsets = doris
            .fe
            .jobs
            .values()
            .filter(|j| j.name == JOB)
            .flat_map(|j| j.progress.iter())
            .filter_map(|(p, o)| match o {
                KafkaOffset::Next(n) => Some((TopicPartition::new(topic.as_str(), *p as u32), *n)),
                _ => None,
            })
            .collect();
        rec(Value::CommittedOffsets { offsets });
        rec(doris_state(&doris));
    }
}

/// The final `LogState` of every partition of `topic`, then the `SinkState` of
/// `db.clicklog`: its VISIBLE rows, each mapped back to the log record of its `id` (offset
/// -1 when no record has it).
pub fn log_and_table_state(world: &World, doris: &Doris, topic: &TopicSpec) -> Vec<Value> {
    let mut values = Vec::new();
    let mut by_id: BTreeMap<u64, RecordRef> = BTreeMap::new();
    let cluster = world.kafka.cluster.lock().expect("cluster lock");
    for tp in topic.topic_partitions() {
        let records: Vec<RecordRef> = cluster
            .records(&tp)
            .into_iter()
            .map(|(offset, r)| record_ref(&tp, offset, r.value.as_deref()))
            .collect();
        for r in &records {
            by_id.entry(r.id).or_insert_with(|| r.clone());
        }
        values.push(Value::LogState { tp, records });
    }
    drop(cluster);
    let rows = doris.select(DB, "clicklog").unwrap_or_default();
    let rows = rows
        .iter()
        .map(|row| {
            let id = row.get("id").and_then(id_of).unwrap_or(u64::MAX);
            by_id.get(&id).cloned().unwrap_or_else(|| RecordRef {
                id,
                key: None,
                tp: TopicPartition::new(&topic.name, 0),
                offset: -1,
            })
        })
        .collect();
    values.push(Value::SinkState { rows });
    values
}

/// The lag lines of unfinished transactions: PRECOMMITTED ones ([`precommitted_lag`]) and
/// COMMITTED ones not yet published, and group commit loads not yet committed.
pub fn transactions_lag(doris: &Doris) -> Vec<String> {
    let mut lag: Vec<String> = precommitted_lag(doris).into_iter().collect();
    lag.extend(doris.be.group_commit.pending());
    let pending = doris.fe.txns.committed().len();
    if pending > 0 {
        lag.push(format!(
            "{pending} COMMITTED transaction(s) not yet VISIBLE"
        ));
    }
    lag
}

/// The lag line of PRECOMMITTED transactions still waiting for their second phase (a
/// liveness failure when the drain ends with it: the run is stalled, naming them).
pub fn precommitted_lag(doris: &Doris) -> Option<String> {
    let labels: Vec<&str> = doris
        .fe
        .txns
        .all()
        .filter(|t| t.status == TransactionStatus::Precommitted)
        .map(|t| t.label.as_str())
        .collect();
    let shown: Vec<&str> = labels.iter().take(4).copied().collect();
    (!labels.is_empty()).then(|| {
        format!(
            "{} PRECOMMITTED transaction(s) never committed or aborted: {}",
            labels.len(),
            shown.join(", ")
        )
    })
}

/// The FE's final state: `SHOW ROUTINE LOAD` of every job, every remembered transaction.
pub fn doris_state(doris: &Doris) -> Value {
    let jobs = doris
        .fe
        .jobs
        .values()
        .map(|j| {
            let s = &j.statistic;
            DorisJobFinal {
                name: j.name.clone(),
                db: j.db.clone(),
                table: j.table.clone(),
                state: status_text(&j.state),
                reason: j.pause_reason.as_ref().map(|r| r.msg.clone()),
                total_rows: s.total_rows,
                loaded_rows: s.loaded_rows,
                error_rows: s.error_rows,
                unselected_rows: s.unselected_rows,
                committed_task_num: s.committed_task_num,
                aborted_task_num: s.aborted_task_num,
            }
        })
        .collect();
    let txns = doris
        .fe
        .txns
        .all()
        .map(|t| DorisTxnFinal {
            txn_id: t.txn_id,
            db: t.db.clone(),
            table: t.table.clone(),
            label: t.label.clone(),
            status: status_text(&t.status),
            job: match &t.source {
                LoadSource::RoutineLoad { job_id, .. } => {
                    doris.fe.jobs.get(job_id).map(|j| j.name.clone())
                }
                LoadSource::StreamLoad { .. } => None,
            },
        })
        .collect();
    Value::DorisState { jobs, txns }
}

/// A status enum as Doris prints it (its SCREAMING_SNAKE_CASE serde name).
fn status_text(status: &impl serde::Serialize) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

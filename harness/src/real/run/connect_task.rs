//! One Kafka Connect sink task as an `eosim worker --role sink-task` process of a real run:
//! the loop of [`crate::connect::sink_loop`] (Connect's `WorkerSinkTask`, shared with the
//! simulation) over rdkafka and the real database clients, so that a kill of the process
//! is a real SIGKILL of a worker and its task.
//!
//! # What it runs
//! - The connector: the scenario's `[connector]` with the runner's `--set KEY=VALUE`
//!   overrides (where the real services are: `connection.url`), validated for its class
//!   and built by [`plugins::real_sink_task`].
//! - Worker settings from `[connect] worker` (`offset.flush.interval.ms`, ...); the task
//!   consumer joins group `connect-<name>` from `earliest` without auto-commit, and
//!   commits what `pre_commit` returns every `offset.flush.interval.ms`.
//! - Task id: `connect-<i>` runs task `i - 1`. One process is one worker with one task:
//!   the group spreads the partitions over the processes alive, as Connect spreads tasks
//!   over workers (so `connect.workers` processes stand for `tasks.max` tasks).
//!
//! # Output
//! Ops on stdout as the other roles print them: `task-status` RUNNING at the start and
//! FAILED with its trace when the task fails (the process then exits non-zero, and stays
//! down: Connect does not restart a failed task by itself), `commit` invoke/ok/fail/info.
//! With `--arm-fault-point` the ClickHouse sink's armed fault point ends the process at
//! once with exit [`FAULT_POINT_EXIT_CODE`](super::fault_point::FAULT_POINT_EXIT_CODE)
//! after printing its `kill` op: a crash, which the runner restarts ([`super::fault_point`]).
//! Each successful `put` is also appended to `<sink>/<name>.puts.jsonl` ([`PutMark`]):
//! what was written when, for the throughput and latency of the run, not for the
//! checkers (the target's contents are read from the database after the drain).

use super::plugins;
use super::worker_spec::{Emit, WorkerSpec};
use crate::client::real::meter::StoreMeter;
use crate::client::real::{RealConsumer, RealProducer};
use crate::client::Consumer;
use crate::connect::config::WorkerConfig;
use crate::connect::sink_loop::TaskHost;
use crate::connect::sink_loop::{
    dlq_producer_config, task_consumer_config, SinkTaskLoop, TaskExit,
};
use crate::connect::task::{
    ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
};
use crate::history::refs::id_of;
use crate::history::{OpKind, Value};
use crate::real::clock::run_clock_ns;
use async_trait::async_trait;
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One successful `put`: when it started and ended (ns since the run's epoch), the ids
/// (header `eosim.id`) of the records it wrote, errant ones left out, and what its state
/// store cost (the ClickHouse sink's state records; zero for the JDBC sink, which keeps
/// none).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PutMark {
    /// When `put` was called.
    pub start_ns: u64,
    /// When it returned `Ok`.
    pub end_ns: u64,
    /// Ids of the records written.
    pub ids: Vec<u64>,
    /// State-store reads inside the put.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub state_reads: u64,
    /// State-store writes inside the put.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub state_writes: u64,
    /// Wall time of those calls, ns.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub state_ns: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The process as a [`TaskHost`]: the run's clock since its epoch, ops on stdout (the
/// sink task's and the source task's, [`super::source_instance`]), and the `task-crash`
/// fault point of `[connect] task_crash_probability`.
pub(super) struct RealHost {
    emit: Emit,
    /// `[connect] task_crash_probability`.
    crash_probability: f64,
    /// The task, as the fault's target: `<connector>-<task>`.
    target: String,
}

impl RealHost {
    /// The host of task `task` of `connector`, crashing at its fault point with
    /// `crash_probability` (`[connect] task_crash_probability`).
    pub(super) fn new(emit: Emit, crash_probability: f64, connector: &str, task: u32) -> Self {
        Self {
            emit,
            crash_probability,
            target: format!("{connector}-{task}"),
        }
    }
}

impl TaskHost for RealHost {
    fn now_ms(&self) -> u64 {
        self.emit.now_ns() / 1_000_000
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.emit.op(kind, value, error);
    }

    /// As the simulated worker's (`connect/worker.rs`): after a successful `put` (or a
    /// source batch), the task throws with this probability, drawn here from the OS's
    /// randomness (a real run is not reproducible anyway), and the fault is recorded as
    /// the simulation records it. The runner then restarts the FAILED task as the
    /// operator does (`[connect] restart_failed_after_ms`) or leaves it FAILED.
    fn crash_point(&self) -> Result<(), String> {
        let p = self.crash_probability;
        if p > 0.0 && madsim::rand::thread_rng().gen_bool(p.min(1.0)) {
            let fault = Value::Fault {
                name: "task-crash".into(),
                detail: format!("target=[{}] on {}", self.target, self.emit.name),
            };
            self.emit.op(OpKind::Info, fault, None);
            return Err("injected task crash (fault point after put)".into());
        }
        Ok(())
    }
}

/// The task's own reporter wrapped, to leave errant records out of the [`PutMark`].
struct Counting<'a> {
    inner: &'a mut dyn ErrantRecordReporter,
    reported: BTreeSet<(TopicPartition, Offset)>,
}

impl ErrantRecordReporter for Counting<'_> {
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
        self.reported.insert((record.tp.clone(), record.offset));
        self.inner.report(record, error)
    }
}

/// A sink task whose successful `put`s are appended to a [`PutMark`] file, with what its
/// clients' [`StoreMeter`] counted during each.
struct Metered {
    inner: Box<dyn SinkTask>,
    file: std::fs::File,
    epoch_ns: u64,
    meter: Arc<StoreMeter>,
}

#[async_trait]
impl SinkTask for Metered {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.inner.initialize(context);
    }

    async fn open(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        self.inner.open(partitions).await
    }

    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        if records.is_empty() {
            // Connect's empty `put` of every iteration: nothing to meter.
            return self.inner.put(records, reporter).await;
        }
        let start_ns = run_clock_ns().saturating_sub(self.epoch_ns);
        let ids: Vec<(TopicPartition, Offset, u64)> = records
            .iter()
            .map(|r| (r.tp.clone(), r.offset, id_of(&r.headers)))
            .collect();
        let mut counting = Counting {
            inner: reporter,
            reported: BTreeSet::new(),
        };
        let before = self.meter.reading();
        self.inner.put(records, &mut counting).await?;
        let state = self.meter.reading().since(before);
        let mark = PutMark {
            start_ns,
            end_ns: run_clock_ns().saturating_sub(self.epoch_ns),
            ids: ids
                .into_iter()
                .filter(|(tp, o, _)| !counting.reported.contains(&(tp.clone(), *o)))
                .map(|(_, _, id)| id)
                .collect(),
            state_reads: state.reads,
            state_writes: state.writes,
            state_ns: state.busy_ns,
        };
        let mut line = serde_json::to_string(&mark).expect("marks serialize");
        line.push('\n');
        // Measurement only: a lost line costs a data point, never a verdict.
        let _ = self.file.write_all(line.as_bytes());
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        self.inner.pre_commit(offsets).await
    }

    async fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        self.inner.close(partitions).await
    }
}

/// The put-mark file of worker `name` under `sink_dir`.
pub fn puts_path(sink_dir: &Path, name: &str) -> std::path::PathBuf {
    sink_dir.join(format!("{name}.puts.jsonl"))
}

/// The task id of process `connect-<i>`: `i - 1`; of `worker-<i>` (the ClickHouse sink's
/// processes, named as its simulated nodes): `i`; 0 for another name.
pub fn task_id(name: &str) -> u32 {
    if let Some(i) = name.strip_prefix("worker-") {
        return i.parse().unwrap_or(0);
    }
    name.strip_prefix("connect-")
        .and_then(|i| i.parse::<u32>().ok())
        .map_or(0, |i| i.saturating_sub(1))
}

/// The connector's configuration: `[connector]` with the runner's overrides.
pub fn connector_raw(spec: &WorkerSpec) -> BTreeMap<String, String> {
    let mut raw = spec.scenario.connector.clone();
    raw.extend(spec.connector_sets.iter().cloned());
    raw
}

/// A `task-status` op's value: `state` (RUNNING, FAILED with its trace) of `connector`'s
/// task `task`.
pub(super) fn status(connector: &str, task: u32, state: &str, trace: Option<String>) -> Value {
    Value::TaskStatus {
        connector: connector.to_string(),
        task,
        state: state.into(),
        trace,
    }
}

/// The emitter of task process `spec`, with task `task` of `connector` recorded `RUNNING`
/// (what the herder reports when a task starts; a sink task and a source task alike).
pub(super) fn start_running(spec: &WorkerSpec, connector: &str, task: u32) -> Emit {
    let emit = Emit {
        name: spec.name.clone(),
        epoch_ns: spec.epoch_ns,
    };
    emit.op(OpKind::Ok, status(connector, task, "RUNNING", None), None);
    emit
}

/// Runs the task until it fails (then `Err` with its trace: the process exits non-zero) or
/// the process is killed.
///
/// # Errors
/// A connector configuration that does not validate, a client that cannot be created, the
/// task's failure.
pub async fn run_sink_task(spec: &WorkerSpec) -> Result<(), String> {
    let config = plugins::connector_config(&connector_raw(spec))?;
    let mut wc = WorkerConfig::parse(&spec.scenario.connect.worker)
        .map_err(|e| format!("[connect] worker: {e}"))?;
    // A clickhouse-sink's workers take `[sink] offset.flush.interval.ms`, as the
    // simulated ones do (`workload/clickhouse_sink/connector.rs`, `worker_config`): it
    // also bounds when a batch whose put threw a RetriableException is redelivered.
    if let Some(sink) = spec.scenario.sink.as_ref() {
        wc.offset_flush_interval_ms = sink.offset_flush_interval_ms;
    }
    let task = task_id(&spec.name);
    let emit = start_running(spec, &config.name, task);
    let trace = match start(spec, &config, &wc, task, &emit).await {
        Ok(mut task_loop) => {
            let exit = task_loop.run().await;
            task_loop.close_consumer().await;
            match exit {
                TaskExit::Failed(trace) => trace,
                // Nothing stops this process's loop but a kill.
                TaskExit::Stopped => "stopped".to_string(),
            }
        }
        Err(e) => e,
    };
    let failed = status(&config.name, task, "FAILED", Some(trace.clone()));
    emit.op(OpKind::Ok, failed, None);
    Err(format!("task {}-{task} failed: {trace}", config.name))
}

type RealTaskLoop = SinkTaskLoop<RealConsumer, RealHost>;

async fn start(
    spec: &WorkerSpec,
    config: &crate::connect::config::ConnectorConfig,
    wc: &WorkerConfig,
    task: u32,
    emit: &Emit,
) -> Result<RealTaskLoop, String> {
    let hooks = std::sync::Arc::new(super::fault_point::RealHooks::new(spec));
    let meter = Arc::new(StoreMeter::default());
    let sink = plugins::real_sink_task(config, &spec.scenario, hooks, meter.clone())?;
    let path = puts_path(&spec.sink_dir, &spec.name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let sink = Box::new(Metered {
        inner: sink,
        file,
        epoch_ns: spec.epoch_ns,
        meter,
    });
    let mut consumer = RealConsumer::new(&spec.bootstrap, task_consumer_config(config, wc))
        .map_err(|e| format!("task consumer: {e}"))?;
    while let Err(e) = consumer.subscribe(&config.topics).await {
        eprintln!("{}: subscribe: {e}; retrying", spec.name);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let dlq = match &config.dlq_topic {
        Some(_) => Some(
            RealProducer::new(&spec.bootstrap, dlq_producer_config())
                .map_err(|e| format!("dead-letter queue producer: {e}"))?,
        ),
        None => None,
    };
    let crash_probability = spec.scenario.connect.task_crash_probability;
    let host = RealHost::new(emit.clone(), crash_probability, &config.name, task);
    Ok(SinkTaskLoop::new(
        host,
        task,
        config.clone(),
        wc,
        sink,
        consumer,
        dlq,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_i_runs_task_i_minus_one() {
        assert_eq!(task_id("connect-1"), 0);
        assert_eq!(task_id("connect-3"), 2);
        assert_eq!(task_id("worker-0"), 0);
        assert_eq!(task_id("worker-2"), 2);
    }

    /// The real task's fault point: never without `task_crash_probability`, always at 1.
    #[test]
    fn the_task_crash_point_fires_with_its_probability() {
        let emit = Emit {
            name: "connect-1".into(),
            epoch_ns: 0,
        };
        let never = RealHost::new(emit.clone(), 0.0, "sink", 0);
        assert!((0..1000).all(|_| never.crash_point().is_ok()));
        let always = RealHost::new(emit, 1.0, "sink", 0);
        let err = always.crash_point().expect_err("crashes");
        assert!(err.contains("injected task crash"), "{err}");
    }
}

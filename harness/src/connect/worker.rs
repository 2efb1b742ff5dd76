//! Worker processes and the `WorkerSinkTask` loop (`models-reference.md` E.1–E.3).
//!
//! # A worker ([`worker_process`])
//! Registers with the [`Herder`], then every `heartbeat.interval.ms`: heartbeats, runs
//! the leader's rebalance, stops the tasks it no longer owns (moved, restarted, deleted,
//! reconfigured) and starts the ones it owns that are not running. Tasks run as madsim
//! tasks on the worker's node, so a kill or pause of the node takes them with it.
//!
//! A stop is graceful, as `Worker.stopAndAwaitTask` does it: the task is told to stop
//! ([`StopSignal`], `WorkerTask.stop`), finishes its iteration, commits and closes every
//! partition and leaves the group (see [`super::sink_loop`]); if it has not ended within
//! `task.shutdown.graceful.timeout.ms` it is cancelled (aborted: no further commit). The
//! next run of the same task on this worker starts only once the old one ended. A kill of
//! the node is a crash: nothing is committed and the group notices after
//! `session.timeout.ms`.
//!
//! # A sink task ([`run_task`])
//! The connector's [`SinkFactory`] builds the task for its [`TaskRun`] (worker name, task
//! id, run number), so a plugin can name each start (the ClickHouse sink's fencing owner
//! `worker-i#n`) and open its connections on the worker's node. Then the loop of
//! [`super::sink_loop`] (shared with the real runner) runs on the simulated clients: one
//! consumer in group `connect-<name>` (`auto.offset.reset=earliest`, no auto-commit,
//! `isolation.level`, `max.poll.records` and `max.poll.interval.ms` from the
//! `consumer.override.` keys), a DLQ producer when configured, and the `task-crash` fault
//! point after `put`. A task whose loop ends closes its consumer (its partitions move to
//! the connector's other tasks); one that failed stays FAILED.
//!
//! # A source task
//! With a [`super::source_worker::SourceRuntime`] in the [`WorkerRuntime`] every task is a
//! source task instead: [`super::source_worker::run_source_task`] starts it (KIP-618's
//! producer initialization, the offsets topic read to its end) and runs
//! [`super::source_loop`]; the same herder, heartbeats, stops and kills apply.
//!
//! Not modelled: `errors.retry.timeout` (the JsonConverter raises no retriable errors; the
//! key is validated and kept).

use super::config::ConnectorConfig;
use super::herder::{Assignment, Herder, TaskState};
use super::sink_loop::{
    dlq_producer_config, task_consumer_config, SinkTaskLoop, StopSignal, TaskExit, TaskHost,
};
use super::task::SinkTask;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::Consumer;
use crate::history::{DlqRecord, OpKind, Recorder, Value};
use eosim_sim::kafka::TopicPartition;
use madsim::rand::Rng;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The loop of one task on the simulated clients.
type SimTaskLoop = SinkTaskLoop<SimConsumer, SimHost>;

/// A task this worker runs: its run number, madsim task and stop signal.
type RunningTask = (u64, JoinHandle<()>, StopSignal);

/// Which run of which task a [`SinkFactory`] builds: the worker it starts on, the task id
/// and the herder's run number (bumped on every start or move of the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRun {
    /// The worker process's name (`connect-1`, `worker-0`).
    pub worker: String,
    /// The task id within its connector.
    pub task: u32,
    /// The herder's run number of this start.
    pub run: u64,
}

/// What a [`SinkFactory`] returns: a future of the task, or the reason it cannot be built
/// (the task then goes FAILED). A future, because a plugin may open connections first.
pub type SinkFuture = Pin<Box<dyn Future<Output = Result<Box<dyn SinkTask>, String>>>>;

/// Builds a connector's sink task for one run (Connect's plugin loading, then the task's
/// `start`).
pub type SinkFactory = Arc<dyn Fn(&ConnectorConfig, &TaskRun) -> SinkFuture + Send + Sync>;

/// What every worker process shares.
#[derive(Clone)]
pub struct WorkerRuntime {
    /// The herder (config and status topics).
    pub herder: Herder,
    /// Number of brokers (bootstrap list).
    pub brokers: u32,
    /// The history.
    pub recorder: Recorder,
    /// Sink plugins.
    pub factory: SinkFactory,
    /// Fault point: probability that a task throws right after a successful `put` (a task
    /// crash), or right after a source task's batch was sent; 0 outside fault scenarios.
    pub task_crash_probability: f64,
    /// Source plugins: with them every connector's tasks run as source tasks
    /// ([`super::source_worker`]); `None` for the sink pipelines.
    pub source: Option<super::source_worker::SourceRuntime>,
}

fn now_ms() -> u64 {
    madsim::time::TimeHandle::current().elapsed().as_millis() as u64
}

impl WorkerRuntime {
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        let t = madsim::time::TimeHandle::current().elapsed().as_nanos() as u64;
        self.recorder.record(t, process, kind, value, error);
    }
}

/// A worker process named `name`: runs until its node is killed.
pub async fn worker_process(rt: WorkerRuntime, name: String) {
    rt.herder.register(&name, now_ms());
    let wc = rt.herder.worker_config().clone();
    let interval = Duration::from_millis(wc.heartbeat_interval_ms.max(100));
    let mut running: BTreeMap<(String, u32), RunningTask> = BTreeMap::new();
    let mut stopping: BTreeMap<(String, u32), JoinHandle<()>> = BTreeMap::new();
    loop {
        if !rt.herder.heartbeat(&name, now_ms()) {
            rt.herder.register(&name, now_ms());
        }
        rt.herder.rebalance(now_ms());
        let owned = rt.herder.assignments(&name);
        let gone: Vec<(String, u32)> = running
            .iter()
            .filter(|(key, (run, _, _))| {
                !owned
                    .iter()
                    .any(|a| (&a.connector, a.task) == (&key.0, key.1) && a.run == *run)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            let (_, handle, stop) = running.remove(&key).expect("listed above");
            stop.stop();
            let grace_ms = wc.task_shutdown_graceful_timeout_ms;
            stopping.insert(key, tokio::task::spawn_local(await_stop(handle, grace_ms)));
        }
        running.retain(|_, (_, handle, _)| !handle.is_finished());
        stopping.retain(|_, watchdog| !watchdog.is_finished());
        for a in owned.iter().filter(|a| a.state == TaskState::Unassigned) {
            let key = (a.connector.clone(), a.task);
            if running.contains_key(&key) || stopping.contains_key(&key) {
                continue;
            }
            let stop = StopSignal::default();
            let task = run_task(rt.clone(), name.clone(), a.clone(), stop.clone());
            running.insert(key, (a.run, tokio::task::spawn_local(task), stop));
        }
        tokio::time::sleep(interval).await;
    }
}

/// `Worker.awaitStopTask`: waits up to `grace_ms` for a stopped task to end, then cancels
/// it (aborts its madsim task).
async fn await_stop(mut handle: JoinHandle<()>, grace_ms: u64) {
    let grace = Duration::from_millis(grace_ms);
    if tokio::time::timeout(grace, &mut handle).await.is_err() {
        crate::mark!("connect:task-cancelled-after-graceful-timeout");
        handle.abort();
    }
}

/// Runs one task until it fails (then records FAILED), is stopped through `stop` (then
/// ends after its closing commit) or is aborted.
pub async fn run_task(rt: WorkerRuntime, worker: String, a: Assignment, stop: StopSignal) {
    let Some(config) = rt.herder.connector_config(&a.connector) else {
        return;
    };
    if !rt
        .herder
        .set_state(&a.connector, a.task, a.run, TaskState::Running, None)
    {
        return;
    }
    rt.record(&worker, OpKind::Ok, status_value(&a, "RUNNING", None), None);
    let run = TaskRun {
        worker: worker.clone(),
        task: a.task,
        run: a.run,
    };
    if let Some(source) = rt.source.clone() {
        let task = super::source_worker::run_source_task(&rt, &source, &worker, &a, &run, stop);
        if let Err(trace) = task.await {
            fail(&rt, &worker, &a, trace);
        }
        return;
    }
    let sink = match (rt.factory)(&config, &run).await {
        Ok(sink) => sink,
        Err(e) => return fail(&rt, &worker, &a, e),
    };
    let task = match start_task(rt.clone(), worker.clone(), a.clone(), config, sink).await {
        Ok(t) => t,
        Err(e) => return fail(&rt, &worker, &a, e),
    };
    let mut task = task.stopped_by(stop);
    let exit = task.run().await;
    task.close_consumer().await;
    if let TaskExit::Failed(trace) = exit {
        fail(&rt, &worker, &a, trace);
    }
}

fn status_value(a: &Assignment, state: &str, trace: Option<String>) -> Value {
    Value::TaskStatus {
        connector: a.connector.clone(),
        task: a.task,
        state: state.into(),
        trace,
    }
}

fn fail(rt: &WorkerRuntime, worker: &str, a: &Assignment, trace: String) {
    let applied = rt.herder.set_state(
        &a.connector,
        a.task,
        a.run,
        TaskState::Failed,
        Some(trace.clone()),
    );
    if applied {
        crate::mark!("connect:task-failed");
        rt.record(
            worker,
            OpKind::Ok,
            status_value(a, "FAILED", Some(trace)),
            None,
        );
    }
}

/// The final `TaskStatus` of every task of `connector` as the herder's status endpoint
/// reports it (`RUNNING`, `FAILED` with its trace, ...), one op value each.
pub fn final_task_status(herder: &Herder, connector: &str) -> Vec<Value> {
    herder
        .status(connector)
        .unwrap_or_default()
        .into_iter()
        .map(|s| Value::TaskStatus {
            connector: connector.to_string(),
            task: s.id,
            state: format!("{:?}", s.state).to_uppercase(),
            trace: s.trace,
        })
        .collect()
}

/// The final `DlqState` of a one-partition dead-letter queue `topic`: each record with its
/// headers as text and the id `id_of` finds in it (the original's id).
pub fn dlq_state(
    cluster: &eosim_sim::kafka::model::Cluster,
    topic: &str,
    id_of: impl Fn(&eosim_sim::kafka::Record) -> u64,
) -> Value {
    let tp = TopicPartition::new(topic, 0);
    let records = cluster
        .records(&tp)
        .into_iter()
        .map(|(offset, r)| DlqRecord {
            id: id_of(&r),
            tp: tp.clone(),
            offset,
            headers: r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect(),
        });
    Value::DlqState {
        topic: topic.to_string(),
        records: records.collect(),
    }
}

/// The simulated worker as a [`TaskHost`]: madsim's clock, the shared recorder, and the
/// `task-crash` fault point drawn from madsim's RNG.
pub(super) struct SimHost {
    pub(super) rt: WorkerRuntime,
    pub(super) worker: String,
    pub(super) a: Assignment,
}

impl TaskHost for SimHost {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.rt.record(&self.worker, kind, value, error);
    }

    fn crash_point(&self) -> Result<(), String> {
        let p = self.rt.task_crash_probability;
        if p > 0.0 && madsim::rand::thread_rng().gen_bool(p.min(1.0)) {
            let detail = format!(
                "target=[{}-{}] on {}",
                self.a.connector, self.a.task, self.worker
            );
            let fault = Value::Fault {
                name: "task-crash".into(),
                detail,
            };
            self.rt.record("nemesis", OpKind::Info, fault, None);
            return Err("injected task crash (fault point after put)".into());
        }
        Ok(())
    }
}

/// A task's loop on the simulated clients: its consumer subscribed (retrying every
/// 500 ms), its DLQ producer when one is configured.
async fn start_task(
    rt: WorkerRuntime,
    worker: String,
    a: Assignment,
    config: ConnectorConfig,
    sink: Box<dyn SinkTask>,
) -> Result<SimTaskLoop, String> {
    let wc = rt.herder.worker_config().clone();
    let conn = Connection::open(rt.brokers)
        .await
        .map_err(|e| e.to_string())?;
    let mut consumer = SimConsumer::new(conn.clone(), task_consumer_config(&config, &wc));
    while consumer.subscribe(&config.topics).await.is_err() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let dlq = config
        .dlq_topic
        .as_ref()
        .map(|_| SimProducer::new(conn, dlq_producer_config()));
    let task = a.task;
    let host = SimHost { rt, worker, a };
    Ok(SinkTaskLoop::new(
        host, task, config, &wc, sink, consumer, dlq,
    ))
}

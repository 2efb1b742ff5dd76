//! Worker processes and the `WorkerSinkTask` loop (`models-reference.md` E.1–E.3).
//!
//! # A worker ([`worker_process`])
//! Registers with the [`Herder`], then every `heartbeat.interval.ms`: heartbeats, runs
//! the leader's rebalance, stops the tasks it no longer owns (moved, restarted, deleted)
//! and starts the ones it owns that are not running. Tasks run as madsim tasks on the
//! worker's node, so a kill or pause of the node takes them with it.
//!
//! # A sink task ([`run_task`])
//! The connector's [`SinkFactory`] builds the task for its [`TaskRun`] (worker name, task
//! id, run number), so a plugin can name each start (the ClickHouse sink's fencing owner
//! `worker-i#n`) and open its connections on the worker's node. One consumer in group
//! `connect-<name>` (`auto.offset.reset=earliest`, no auto-commit, `isolation.level`,
//! `max.poll.records` and `max.poll.interval.ms` from the `consumer.override.` keys).
//! Each iteration: commit if `offset.flush.interval.ms` has passed (`pre_commit` bounded by
//! `offset.flush.timeout.ms`, then a synchronous commit of what it returned, within the
//! current assignment and never past what `put` accepted); poll; on an assignment change
//! `close` the revoked and `open` the new partitions (a revocation here comes after the
//! consumer already rejoined, so it is handled like a loss: no commit); convert each
//! record (errors are the converter stage: `errors.tolerance`, DLQ); `put` the batch.
//! A `Retriable` error from `put` redelivers the same batch; a `Fatal` one fails the task,
//! which then closes its consumer (its partitions move to the connector's other tasks)
//! and stays FAILED. Errant records reported from `put` are written to the DLQ before the
//! batch's offsets count as processed, so a commit never passes an unreported record.
//!
//!
//! The task's [`SinkTaskContext`] (given by `initialize` before anything else): seeks it
//! asks for are applied before the next poll and right after `open` (`WorkerSinkTask.rewind`:
//! records already polled of a rewound partition are dropped, its current offset becomes
//! the seek's), a `request_commit` commits at the next iteration, and its assignment is
//! updated before `open`.
//!
//! Not modelled: pausing partitions during retries (the batch is retried without
//! polling), seeking back after a failed `pre_commit`, `errors.retry.timeout` (the
//! JsonConverter raises no retriable errors; the key is validated and kept).

use super::config::{ConnectorConfig, Tolerance};
use super::converter::Converter;
use super::herder::{Assignment, Herder, TaskState};
use super::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext};
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::{
    AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord,
};
use crate::history::{DlqRecord, OpKind, Recorder, Value};
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

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
    /// crash); 0 outside fault scenarios.
    pub task_crash_probability: f64,
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
    let interval = Duration::from_millis(rt.herder.worker_config().heartbeat_interval_ms.max(100));
    let mut running: BTreeMap<(String, u32), (u64, JoinHandle<()>)> = BTreeMap::new();
    loop {
        if !rt.herder.heartbeat(&name, now_ms()) {
            rt.herder.register(&name, now_ms());
        }
        rt.herder.rebalance(now_ms());
        let owned = rt.herder.assignments(&name);
        running.retain(|key, (run, handle)| {
            let keep = owned
                .iter()
                .any(|a| (&a.connector, a.task) == (&key.0, key.1) && a.run == *run);
            if !keep {
                handle.abort();
            }
            keep && !handle.is_finished()
        });
        for a in owned.iter().filter(|a| a.state == TaskState::Unassigned) {
            let key = (a.connector.clone(), a.task);
            if running.contains_key(&key) {
                continue;
            }
            let handle = tokio::task::spawn_local(run_task(rt.clone(), name.clone(), a.clone()));
            running.insert(key, (a.run, handle));
        }
        tokio::time::sleep(interval).await;
    }
}

/// Runs one task until it fails (then records FAILED) or is aborted.
pub async fn run_task(rt: WorkerRuntime, worker: String, a: Assignment) {
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
    let sink = match (rt.factory)(&config, &run).await {
        Ok(sink) => sink,
        Err(e) => return fail(&rt, &worker, &a, e),
    };
    let mut task =
        match WorkerSinkTask::start(rt.clone(), worker.clone(), a.clone(), config, sink).await {
            Ok(t) => t,
            Err(e) => return fail(&rt, &worker, &a, e),
        };
    let trace = task.run().await;
    task.consumer.close().await;
    fail(&rt, &worker, &a, trace);
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
        rt.record(
            worker,
            OpKind::Ok,
            status_value(a, "FAILED", Some(trace)),
            None,
        );
    }
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

/// A failed record on its way to the dead-letter queue.
struct ErrantRecord {
    original: ConsumedRecord,
    stage: &'static str,
    class_name: String,
    exception_class: &'static str,
    message: String,
}

/// KIP-610's reporter for `put`: collects reports; the worker writes them to the DLQ
/// before it counts the batch as processed.
struct PutReporter<'a> {
    tolerance: Tolerance,
    originals: &'a BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
    class_name: String,
    reports: Vec<ErrantRecord>,
}

impl ErrantRecordReporter for PutReporter<'_> {
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
        if let Some(original) = self.originals.get(&(record.tp.clone(), record.offset)) {
            self.reports.push(ErrantRecord {
                original: original.clone(),
                stage: "TASK_PUT",
                class_name: self.class_name.clone(),
                exception_class: "org.apache.kafka.connect.errors.ConnectException",
                message: error.to_string(),
            });
        }
        match self.tolerance {
            Tolerance::All => Ok(()),
            Tolerance::None => Err(ConnectError::Fatal(format!(
                "Tolerance exceeded in error handler: {} offset {}: {error}",
                record.tp, record.offset
            ))),
        }
    }
}

/// One running sink task: its consumer, DLQ producer, and offsets.
struct WorkerSinkTask {
    rt: WorkerRuntime,
    worker: String,
    a: Assignment,
    config: ConnectorConfig,
    sink: Box<dyn SinkTask>,
    context: SinkTaskContext,
    consumer: SimConsumer,
    dlq: Option<SimProducer>,
    key_converter: Converter,
    value_converter: Converter,
    assigned: BTreeSet<TopicPartition>,
    current: BTreeMap<TopicPartition, Offset>,
    next_commit_ms: u64,
}

impl WorkerSinkTask {
    async fn start(
        rt: WorkerRuntime,
        worker: String,
        a: Assignment,
        config: ConnectorConfig,
        mut sink: Box<dyn SinkTask>,
    ) -> Result<Self, String> {
        let context = SinkTaskContext::new();
        sink.initialize(context.clone());
        let wc = rt.herder.worker_config().clone();
        let conn = Connection::open(rt.brokers)
            .await
            .map_err(|e| e.to_string())?;
        let mut cc = ConsumerConfig::new(config.group_id());
        cc.auto_offset_reset = AutoOffsetReset::Earliest;
        cc.session_timeout_ms = wc.session_timeout_ms;
        cc.heartbeat_interval_ms = wc
            .heartbeat_interval_ms
            .min(wc.session_timeout_ms / 3)
            .max(100);
        cc.max_poll_records = config.max_poll_records;
        cc.max_poll_interval_ms = config.max_poll_interval_ms;
        cc.isolation_level = config.isolation_level;
        cc.request_timeout_ms = 5_000;
        let mut consumer = SimConsumer::new(conn.clone(), cc);
        while consumer.subscribe(&config.topics).await.is_err() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let dlq_config = ProducerConfig {
            enable_idempotence: false,
            request_timeout_ms: 5_000,
            delivery_timeout_ms: 30_000,
            ..ProducerConfig::default()
        };
        let dlq = config
            .dlq_topic
            .as_ref()
            .map(|_| SimProducer::new(conn, dlq_config));
        let converter = |class: &str, schemas_enable| Converter {
            class: class.into(),
            schemas_enable,
        };
        Ok(Self {
            key_converter: converter(&config.key_converter, config.key_schemas_enable),
            value_converter: converter(&config.value_converter, config.value_schemas_enable),
            next_commit_ms: now_ms() + wc.offset_flush_interval_ms,
            rt,
            worker,
            a,
            config,
            sink,
            context,
            consumer,
            dlq,
            assigned: BTreeSet::new(),
            current: BTreeMap::new(),
        })
    }

    /// The task's iterations; returns the failure that ends it.
    async fn run(&mut self) -> String {
        loop {
            if let Err(e) = self.iteration().await {
                return e;
            }
        }
    }

    async fn iteration(&mut self) -> Result<(), String> {
        if self.context.take_commit_request() || now_ms() >= self.next_commit_ms {
            self.commit().await;
            self.next_commit_ms =
                now_ms() + self.rt.herder.worker_config().offset_flush_interval_ms;
        }
        self.rewind();
        let records = match self.consumer.poll(Duration::from_millis(500)).await {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(());
            }
        };
        self.on_assignment().await?;
        let rewound = self.rewind();
        let records: Vec<ConsumedRecord> = records
            .into_iter()
            .filter(|r| !rewound.contains(&r.tp))
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        let (batch, processed, originals) = self.convert(records).await?;
        if !batch.is_empty() {
            self.put(batch, &originals).await?;
        }
        for (tp, offset) in processed
            .into_iter()
            .filter(|(tp, _)| self.assigned.contains(tp))
        {
            self.current.insert(tp, offset);
        }
        self.crash_point()
    }

    /// The `task-crash` fault point after a successful `put`.
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

    /// Calls `close` and `open` when the consumer's assignment changed.
    async fn on_assignment(&mut self) -> Result<(), String> {
        let now: BTreeSet<TopicPartition> = self.consumer.assignment().into_iter().collect();
        if now == self.assigned {
            return Ok(());
        }
        let revoked: Vec<TopicPartition> = self.assigned.difference(&now).cloned().collect();
        let added: Vec<TopicPartition> = now.difference(&self.assigned).cloned().collect();
        if !revoked.is_empty() {
            let _ = self.sink.close(&revoked).await;
            for tp in &revoked {
                self.current.remove(tp);
            }
        }
        self.assigned = now;
        self.context.set_assignment(self.assigned.clone());
        if !added.is_empty() {
            loop {
                match self.sink.open(&added).await {
                    Ok(()) => break,
                    Err(ConnectError::Retriable(_)) => {
                        tokio::time::sleep(Duration::from_millis(1_000)).await;
                    }
                    Err(ConnectError::Fatal(e)) => return Err(e),
                }
            }
        }
        Ok(())
    }

    /// Applies the seeks the task asked for through its context (`WorkerSinkTask.rewind`):
    /// the consumer seeks each assigned partition, whose current offset becomes the seek's.
    /// Returns the partitions rewound.
    fn rewind(&mut self) -> BTreeSet<TopicPartition> {
        let mut rewound = BTreeSet::new();
        for (tp, offset) in self.context.take_offsets() {
            if self.assigned.contains(&tp) && self.consumer.seek(&tp, offset).is_ok() {
                self.current.insert(tp.clone(), offset);
                rewound.insert(tp);
            }
        }
        rewound
    }

    /// Converts records (the converter stage), returning the batch for `put`, the next
    /// offsets they account for (failed records included, as Connect's `origOffsets`),
    /// and the originals by position.
    #[allow(clippy::type_complexity)]
    async fn convert(
        &mut self,
        records: Vec<ConsumedRecord>,
    ) -> Result<
        (
            Vec<SinkRecord>,
            BTreeMap<TopicPartition, Offset>,
            BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
        ),
        String,
    > {
        let mut batch = Vec::new();
        let mut processed = BTreeMap::new();
        let mut originals = BTreeMap::new();
        for r in records {
            processed.insert(r.tp.clone(), r.offset + 1);
            let key = self.key_converter.to_connect_data(r.key.as_ref());
            let value = self.value_converter.to_connect_data(r.value.as_ref());
            let (stage, converted) = match (key, value) {
                (Err(e), _) => ("KEY_CONVERTER", Err(e)),
                (_, Err(e)) => ("VALUE_CONVERTER", Err(e)),
                (Ok(k), Ok(v)) => ("", Ok((k, v))),
            };
            match converted {
                Ok((key, value)) => {
                    originals.insert((r.tp.clone(), r.offset), r.clone());
                    batch.push(SinkRecord {
                        tp: r.tp,
                        offset: r.offset,
                        key,
                        value,
                        headers: r.headers,
                        timestamp_ms: 0,
                    });
                }
                Err(message) => {
                    let class_name = if stage == "KEY_CONVERTER" {
                        self.key_converter.class.clone()
                    } else {
                        self.value_converter.class.clone()
                    };
                    let exception_class = "org.apache.kafka.connect.errors.DataException";
                    let errant = ErrantRecord {
                        original: r,
                        stage,
                        class_name,
                        exception_class,
                        message,
                    };
                    self.report_converter_error(errant).await?;
                }
            }
        }
        Ok((batch, processed, originals))
    }

    /// A converter-stage failure: to the DLQ when one is configured (also under
    /// tolerance none, as Connect does), then skipped (`all`) or fatal (`none`).
    async fn report_converter_error(&mut self, errant: ErrantRecord) -> Result<(), String> {
        let text = format!(
            "Tolerance exceeded in error handler: stage {} {} offset {}: {}",
            errant.stage, errant.original.tp, errant.original.offset, errant.message
        );
        self.write_dlq(vec![errant]).await;
        match self.config.tolerance {
            Tolerance::All => Ok(()),
            Tolerance::None => Err(text),
        }
    }

    /// `put` with redelivery of the same batch on `Retriable`.
    async fn put(
        &mut self,
        batch: Vec<SinkRecord>,
        originals: &BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
    ) -> Result<(), String> {
        loop {
            let mut reporter = PutReporter {
                tolerance: self.config.tolerance,
                originals,
                class_name: self.config.connector_class.clone(),
                reports: Vec::new(),
            };
            let result = self.sink.put(batch.clone(), &mut reporter).await;
            let reports = std::mem::take(&mut reporter.reports);
            self.write_dlq(reports).await;
            match result {
                Ok(()) => return Ok(()),
                Err(ConnectError::Retriable(_)) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(ConnectError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// Writes errant records to the DLQ (when configured), with Connect's context headers
    /// when `errors.deadletterqueue.context.headers.enable=true`.
    async fn write_dlq(&self, errant: Vec<ErrantRecord>) {
        let (Some(producer), Some(topic)) = (&self.dlq, &self.config.dlq_topic) else {
            return;
        };
        for e in errant {
            let mut headers = e.original.headers.clone();
            if self.config.dlq_context_headers {
                headers.extend(self.context_headers(&e));
            }
            let record = ProducerRecord {
                topic: topic.clone(),
                partition: None,
                key: e.original.key.clone(),
                value: e.original.value.clone(),
                headers,
            };
            // DeadLetterQueueReporter logs a failed send and goes on.
            let _ = producer.send(record).await;
        }
    }

    fn context_headers(&self, e: &ErrantRecord) -> Vec<(String, Bytes)> {
        let o = &e.original;
        let pairs = [
            ("topic", o.tp.topic.clone()),
            ("partition", o.tp.partition.to_string()),
            ("offset", o.offset.to_string()),
            ("connector.name", self.config.name.clone()),
            ("task.id", self.a.task.to_string()),
            ("stage", e.stage.to_string()),
            ("class.name", e.class_name.clone()),
            ("exception.class.name", e.exception_class.to_string()),
            ("exception.message", e.message.clone()),
            (
                "exception.stacktrace",
                format!("{}: {}", e.exception_class, e.message),
            ),
        ];
        pairs
            .into_iter()
            .map(|(k, v)| (format!("__connect.errors.{k}"), Bytes::from(v)))
            .collect()
    }

    /// The offset commit: `pre_commit` within `offset.flush.timeout.ms`, then a
    /// synchronous commit of what it returned (within the assignment, never past `put`).
    async fn commit(&mut self) {
        if self.current.is_empty() {
            return;
        }
        let timeout = Duration::from_millis(self.rt.herder.worker_config().offset_flush_timeout_ms);
        let Ok(Ok(offsets)) =
            tokio::time::timeout(timeout, self.sink.pre_commit(&self.current)).await
        else {
            return;
        };
        let offsets: Vec<(TopicPartition, Offset)> = offsets
            .into_iter()
            .filter(|(tp, o)| self.current.get(tp).is_some_and(|c| o <= c))
            .filter(|(tp, _)| self.assigned.contains(tp))
            .collect();
        if offsets.is_empty() {
            return;
        }
        let value = || Value::Commit {
            offsets: offsets.clone(),
        };
        self.rt.record(&self.worker, OpKind::Invoke, value(), None);
        let (kind, error) = match self.consumer.commit(&offsets).await {
            Ok(()) => (OpKind::Ok, None),
            Err(e) if e.is_ambiguous() => (OpKind::Info, Some(e.to_string())),
            Err(e) => (OpKind::Fail, Some(e.to_string())),
        };
        self.rt.record(&self.worker, kind, value(), error);
    }
}

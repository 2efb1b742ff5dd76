//! Kafka Connect's `WorkerSinkTask` loop, written once over the client traits so that the
//! simulated worker (`connect::worker`, under `--cfg madsim`) and the real runner's
//! sink-task process (`real::run::connect_task`) run the same code.
//!
//! # One iteration ([`SinkTaskLoop::run`])
//! Commit if `offset.flush.interval.ms` has passed or the task asked for it (`pre_commit`
//! bounded by `offset.flush.timeout.ms`, then a synchronous commit of what it returned,
//! within the current assignment and never past what `put` accepted); apply the task's
//! seeks; poll; on an assignment change `close` the revoked and `open` the new partitions
//! (a revocation here comes after the consumer already rejoined, so it is handled like a
//! loss: no commit); convert each record (errors are the converter stage:
//! `errors.tolerance`, DLQ); `put` the batch. A `Retriable` error from `put` redelivers the
//! same batch; a `Fatal` one ends the loop with its text. Errant records reported from
//! `put` are written to the DLQ before the batch's offsets count as processed, so a commit
//! never passes an unreported record.
//!
//! Where the loop runs is a [`TaskHost`]: its clock (ms since the run's start), where its
//! ops go (the history), and the `task-crash` fault point after a successful `put`.

use super::config::{ConnectorConfig, Tolerance, WorkerConfig};
use super::converter::Converter;
use super::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext};
use crate::client::{
    AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord,
};
use crate::history::{OpKind, Value};
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Where a task loop runs: the simulated worker or a real process.
pub trait TaskHost: Send {
    /// Time since the run's start, ms (the simulator's clock, or the wall clock).
    fn now_ms(&self) -> u64;

    /// Records an op of the task's worker process.
    fn record(&self, kind: OpKind, value: Value, error: Option<String>);

    /// The `task-crash` fault point after a successful `put`: `Err` ends the task with
    /// that text. The default never crashes.
    ///
    /// # Errors
    /// The injected crash's text.
    fn crash_point(&self) -> Result<(), String> {
        Ok(())
    }
}

/// The task consumer's configuration: group `connect-<name>`, `earliest`, no auto-commit
/// (the clients never auto-commit), the worker's session and heartbeat settings, and the
/// connector's `consumer.override.*` keys.
pub fn task_consumer_config(config: &ConnectorConfig, wc: &WorkerConfig) -> ConsumerConfig {
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
    cc
}

/// The dead-letter queue producer's configuration (Connect's defaults for its DLQ
/// producer, without idempotence).
pub fn dlq_producer_config() -> ProducerConfig {
    ProducerConfig {
        enable_idempotence: false,
        request_timeout_ms: 5_000,
        delivery_timeout_ms: 30_000,
        ..ProducerConfig::default()
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

/// KIP-610's reporter for `put`: collects reports; the loop writes them to the DLQ
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

/// What [`SinkTaskLoop::convert`] hands on: the batch for `put`, the next offsets the
/// records account for, and the originals by position.
type Converted = (
    Vec<SinkRecord>,
    BTreeMap<TopicPartition, Offset>,
    BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
);

/// One running sink task: its consumer, DLQ producer, and offsets.
pub struct SinkTaskLoop<C: Consumer, P: Producer, H: TaskHost> {
    host: H,
    task: u32,
    config: ConnectorConfig,
    flush_interval_ms: u64,
    flush_timeout_ms: u64,
    sink: Box<dyn SinkTask>,
    context: SinkTaskContext,
    consumer: C,
    dlq: Option<P>,
    key_converter: Converter,
    value_converter: Converter,
    assigned: BTreeSet<TopicPartition>,
    current: BTreeMap<TopicPartition, Offset>,
    next_commit_ms: u64,
}

impl<C: Consumer, P: Producer, H: TaskHost> SinkTaskLoop<C, P, H> {
    /// Task `task` of the connector `config`, on a `consumer` already subscribed to its
    /// topics, with `dlq` when `errors.deadletterqueue.topic.name` is set. Initializes
    /// the task with its [`SinkTaskContext`]; the first commit is due one
    /// `offset.flush.interval.ms` from now.
    pub fn new(
        host: H,
        task: u32,
        config: ConnectorConfig,
        wc: &WorkerConfig,
        mut sink: Box<dyn SinkTask>,
        consumer: C,
        dlq: Option<P>,
    ) -> Self {
        let context = SinkTaskContext::new();
        sink.initialize(context.clone());
        let converter = |class: &str, schemas_enable| Converter {
            class: class.into(),
            schemas_enable,
        };
        Self {
            key_converter: converter(&config.key_converter, config.key_schemas_enable),
            value_converter: converter(&config.value_converter, config.value_schemas_enable),
            next_commit_ms: host.now_ms() + wc.offset_flush_interval_ms,
            flush_interval_ms: wc.offset_flush_interval_ms,
            flush_timeout_ms: wc.offset_flush_timeout_ms,
            host,
            task,
            config,
            sink,
            context,
            consumer,
            dlq,
            assigned: BTreeSet::new(),
            current: BTreeMap::new(),
        }
    }

    /// The task's iterations; returns the failure that ends it.
    pub async fn run(&mut self) -> String {
        loop {
            if let Err(e) = self.iteration().await {
                return e;
            }
        }
    }

    /// Closes the task's consumer (its partitions move to the group's other members).
    pub async fn close_consumer(&mut self) {
        self.consumer.close().await;
    }

    async fn iteration(&mut self) -> Result<(), String> {
        if self.context.take_commit_request() || self.host.now_ms() >= self.next_commit_ms {
            self.commit().await;
            self.next_commit_ms = self.host.now_ms() + self.flush_interval_ms;
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
        self.host.crash_point()
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
            crate::mark!("connect:partitions-revoked");
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
                        crate::mark!("connect:open-retry");
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

    /// Converts records (the converter stage): the batch for `put`, the next offsets they
    /// account for (failed records included, as Connect's `origOffsets`), and the
    /// originals by position.
    async fn convert(&mut self, records: Vec<ConsumedRecord>) -> Result<Converted, String> {
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
            Tolerance::All => {
                crate::mark!("connect:converter-error-tolerated");
                Ok(())
            }
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
                    crate::mark!("connect:put-retry");
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
            crate::mark!("connect:dlq-write");
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
            ("task.id", self.task.to_string()),
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
        let timeout = Duration::from_millis(self.flush_timeout_ms);
        let Ok(Ok(offsets)) =
            tokio::time::timeout(timeout, self.sink.pre_commit(&self.current)).await
        else {
            crate::mark!("connect:offset-commit-skipped-pre-commit-failed");
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
        self.host.record(OpKind::Invoke, value(), None);
        let (kind, error) = match self.consumer.commit(&offsets).await {
            Ok(()) => (OpKind::Ok, None),
            Err(e) if e.is_ambiguous() => (OpKind::Info, Some(e.to_string())),
            Err(e) => (OpKind::Fail, Some(e.to_string())),
        };
        if kind != OpKind::Ok {
            crate::mark!("connect:offset-commit-failed");
        }
        self.host.record(kind, value(), error);
    }
}

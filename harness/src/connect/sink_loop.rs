//! Kafka Connect's `WorkerSinkTask` loop, written once over the client traits so that the
//! simulated worker (`connect::worker`, under `--cfg madsim`) and the real runner's
//! sink-task process (`real::run::connect_task`) run the same code. Source followed:
//! apache/kafka `connect/runtime/src/main/java/org/apache/kafka/connect/runtime/
//! WorkerSinkTask.java` (3.x).
//!
//! # One iteration ([`SinkTaskLoop::run`])
//! Commit if `offset.flush.interval.ms` has passed or the task asked for it; apply the
//! task's seeks (`rewind`); poll; hand a pending revocation to the task (below); `open` new
//! partitions; convert each record (errors are the converter stage: `errors.tolerance`,
//! DLQ) into the batch; `put` the batch, empty or not (Java `poll` → `deliverMessages`).
//!
//! # Commits (`commitOffsets`)
//! Wait for the DLQ futures of the partitions committed ([`super::errant`]), call
//! `pre_commit` with the current offsets (unbounded, as Java calls it on the task thread),
//! then commit what it returned within what `put` accepted, over the last committed offsets
//! of those partitions; nothing is sent when that is unchanged. A periodic commit is bounded
//! by `offset.flush.timeout.ms` (Java's async commit, timed out in `iteration`: an expired
//! one is `info`, ambiguous); a closing commit is `commitSync` (the consumer's own
//! `default.api.timeout.ms`). A failing `pre_commit` skips the commit and, unless closing,
//! seeks the partitions back to their last committed offsets (`commitOffsets` catch), so
//! their records are delivered again. Last committed offsets start at a partition's first
//! position (its first record's offset, `onPartitionsAssigned`'s `consumer.position`) and
//! follow commits and the task's seeks.
//!
//! # Retriable `put` (`deliverMessages`)
//! A [`ConnectError::Retriable`] keeps the batch, pauses every assigned partition and goes
//! on polling, so the task stays in its group; the batch is redelivered after one poll of
//! `min(time to the next commit, SinkTaskContext::timeout)`, and the partitions resume once
//! a `put` succeeds. A `Fatal` error fails the task.
//!
//! # Rebalances (`HandleRebalance`)
//! The loop asks its consumer to hand out revocations ([`Consumer::listen_for_revocations`]):
//! before the consumer rejoins (Java: `ConsumerCoordinator.onJoinPrepare`, eager protocol)
//! the loop commits the revoked partitions as on close (`pre_commit`, `close`, synchronous
//! commit) and drops their part of the batch; lost partitions (the generation was already
//! reset) are closed without a commit and their DLQ futures dropped. A consumer that cannot
//! hand them out (see `client::real`) shows the revocation only in its assignment
//! after the rejoin, which is handled as a loss.
//!
//! # Stop and failure (`execute`)
//! Every exit of the loop, a [`StopSignal`] (the herder's `WorkerTask.stop`) or a failure of
//! an iteration (a fatal `put`, tolerance exceeded, an errant record that could not be
//! written), runs `closeAllPartitions`: the closing commit of every partition. A task that
//! failed before its loop (building the task, subscribing) commits nothing. The caller then
//! closes the consumer ([`SinkTaskLoop::close_consumer`], LeaveGroup). A kill of the process
//! runs none of this.
//!
//! Where the loop runs is a [`TaskHost`]: its clock (ms since the run's start), where its
//! ops go (the history), and the `task-crash` fault point after a successful `put` of
//! records (not after an empty one).

use super::config::{ConnectorConfig, Tolerance, WorkerConfig};
use super::converter::Converter;
use super::errant::{DlqQueue, DlqTarget, ErrantRecord, PutReporter};
use super::task::{ConnectError, SinkRecord, SinkTask, SinkTaskContext};
use crate::client::{ClientError, ConsumedRecord, Consumer, ConsumerConfig, Producer, Revocation};
use crate::history::{OpKind, Value};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use super::errant::dlq_producer_config;

/// The longest single poll, ms: the loop looks at its [`StopSignal`] at least this often
/// (Java wakes a polling consumer up instead).
const POLL_MAX_MS: u64 = 500;

/// Where a task loop runs: the simulated worker or a real process.
pub trait TaskHost: Send {
    /// Time since the run's start, ms (the simulator's clock, or the wall clock).
    fn now_ms(&self) -> u64;

    /// Records an op of the task's worker process.
    fn record(&self, kind: OpKind, value: Value, error: Option<String>);

    /// The `task-crash` fault point after a successful `put`: `Err` is the task throwing
    /// with that text before the batch counts as delivered. The default never crashes.
    ///
    /// # Errors
    /// The injected crash's text.
    fn crash_point(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Asks a running task loop to stop gracefully (the herder's `WorkerTask.stop`); the loop
/// sees it between iterations. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<AtomicBool>);

impl StopSignal {
    /// Asks the loop to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How a task loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskExit {
    /// Stopped through its [`StopSignal`].
    Stopped,
    /// Failed with this trace (the task goes FAILED).
    Failed(String),
}

/// The task consumer's configuration (`Worker.baseConsumerConfigs`): group `connect-<name>`,
/// `auto.offset.reset` earliest unless overridden, no auto-commit (the clients never auto-commit), the consumer's own
/// `session.timeout.ms` (45 s, KIP-735) and `heartbeat.interval.ms` (3 s) defaults, not
/// the worker group's, and the connector's `consumer.override.*` keys (`group.protocol`
/// among them: KIP-848's consumer protocol).
pub fn task_consumer_config(config: &ConnectorConfig, _wc: &WorkerConfig) -> ConsumerConfig {
    let mut cc = ConsumerConfig::new(config.group_id());
    cc.auto_offset_reset = config.auto_offset_reset;
    if let Some(ms) = config.session_timeout_ms {
        cc.session_timeout_ms = ms;
    }
    if let Some(ms) = config.heartbeat_interval_ms {
        cc.heartbeat_interval_ms = ms;
    }
    cc.max_poll_records = config.max_poll_records;
    cc.max_poll_interval_ms = config.max_poll_interval_ms;
    cc.isolation_level = config.isolation_level;
    if let Some(strategy) = &config.partition_assignment_strategy {
        cc.partition_assignment_strategy = strategy.clone();
    }
    cc.fetch_max_wait_ms = config.fetch_max_wait_ms;
    cc.fetch_min_bytes = config.fetch_min_bytes;
    cc.group_protocol = config.group_protocol;
    cc.group_remote_assignor = config.group_remote_assignor.clone();
    cc.request_timeout_ms = 5_000;
    cc
}

/// The batch being delivered (Java's `messageBatch`), the next offsets its records account
/// for (`origOffsets`, converter failures included) and the originals by position.
#[derive(Default)]
struct Batch {
    records: Vec<SinkRecord>,
    processed: BTreeMap<TopicPartition, Offset>,
    originals: BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
}

impl Batch {
    /// Drops what came from `partitions` (revoked: the next owner reads it again).
    fn forget(&mut self, partitions: &[TopicPartition]) {
        self.records.retain(|r| !partitions.contains(&r.tp));
        self.processed.retain(|tp, _| !partitions.contains(tp));
        self.originals.retain(|(tp, _), _| !partitions.contains(tp));
    }
}

/// One running sink task: its consumer, DLQ producer, and offsets.
pub struct SinkTaskLoop<C: Consumer, H: TaskHost> {
    host: H,
    config: ConnectorConfig,
    flush_interval_ms: u64,
    flush_timeout_ms: u64,
    sink: Box<dyn SinkTask>,
    context: SinkTaskContext,
    consumer: C,
    dlq: Option<DlqQueue>,
    key_converter: Converter,
    value_converter: Converter,
    stop: StopSignal,
    assigned: BTreeSet<TopicPartition>,
    current: BTreeMap<TopicPartition, Offset>,
    last_committed: BTreeMap<TopicPartition, Offset>,
    batch: Batch,
    /// Paused for redelivery (`pausedForRedelivery`), with the time the batch is due again
    /// once the first poll after the failure fixed it.
    redelivery: Option<Option<u64>>,
    next_commit_ms: u64,
}

impl<C: Consumer, H: TaskHost> SinkTaskLoop<C, H> {
    /// Task `task` of the connector `config`, on a `consumer` already subscribed to its
    /// topics, with `dlq` when `errors.deadletterqueue.topic.name` is set (its sender starts
    /// on the current runtime). Initializes the task with its [`SinkTaskContext`]; the first
    /// commit is due one `offset.flush.interval.ms` from now.
    pub fn new<P: Producer + 'static>(
        host: H,
        task: u32,
        config: ConnectorConfig,
        wc: &WorkerConfig,
        mut sink: Box<dyn SinkTask>,
        mut consumer: C,
        dlq: Option<P>,
    ) -> Self {
        let context = SinkTaskContext::new();
        sink.initialize(context.clone());
        if !consumer.listen_for_revocations() {
            crate::mark!("connect:revocations-seen-after-rejoin");
        }
        let converter = |class: &str, schemas_enable| Converter {
            class: class.into(),
            schemas_enable,
        };
        let dlq = dlq.zip(config.dlq_topic.clone()).map(|(producer, topic)| {
            let target = DlqTarget {
                topic,
                context_headers: config.dlq_context_headers,
                connector: config.name.clone(),
                task,
            };
            DlqQueue::start(producer, target)
        });
        Self {
            key_converter: converter(&config.key_converter, config.key_schemas_enable),
            value_converter: converter(&config.value_converter, config.value_schemas_enable),
            next_commit_ms: host.now_ms() + wc.offset_flush_interval_ms,
            flush_interval_ms: wc.offset_flush_interval_ms,
            flush_timeout_ms: wc.offset_flush_timeout_ms,
            host,
            config,
            sink,
            context,
            consumer,
            dlq,
            stop: StopSignal::default(),
            assigned: BTreeSet::new(),
            current: BTreeMap::new(),
            last_committed: BTreeMap::new(),
            batch: Batch::default(),
            redelivery: None,
        }
    }

    /// The same loop, stopped gracefully by `stop`.
    pub fn stopped_by(mut self, stop: StopSignal) -> Self {
        self.stop = stop;
        self
    }

    /// The task's iterations until it is stopped or fails, then the closing commit of every
    /// partition (`execute`'s `closeAllPartitions`).
    pub async fn run(&mut self) -> TaskExit {
        let exit = loop {
            if self.stop.is_stopped() {
                crate::mark!("connect:task-stopped-gracefully");
                break TaskExit::Stopped;
            }
            if let Err(e) = self.iteration().await {
                break TaskExit::Failed(e);
            }
        };
        let mut partitions: BTreeSet<TopicPartition> = self.current.keys().cloned().collect();
        partitions.extend(self.assigned.iter().cloned());
        let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
        if let Err(e) = self.commit_offsets(true, &partitions).await {
            crate::mark!("connect:closing-commit-failed");
            if exit == TaskExit::Stopped {
                return TaskExit::Failed(e);
            }
        }
        exit
    }

    /// Closes the task's consumer (LeaveGroup: its partitions move to the group's other
    /// members at once).
    pub async fn close_consumer(&mut self) {
        self.consumer.close().await;
    }

    async fn iteration(&mut self) -> Result<(), String> {
        if self.context.take_commit_request() || self.host.now_ms() >= self.next_commit_ms {
            let assigned: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
            self.commit_offsets(false, &assigned).await?;
            self.next_commit_ms = self.host.now_ms() + self.flush_interval_ms;
        }
        self.rewind();
        let timeout = self.poll_timeout();
        let records = match self.consumer.poll(timeout).await {
            Ok(r) => r,
            // `WorkerSinkTask.poll` lets the consumer's unrecoverable exceptions (an
            // `InvalidSessionTimeout` join, `NoOffsetForPartition` under
            // auto.offset.reset=none) out of `execute`: the task fails. Anything else the
            // consumer retries inside its own poll.
            Err(ClientError::Fatal(e)) => {
                crate::mark!("connect:task-failed-consumer-poll");
                return Err(format!("consumer poll failed: {e}"));
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Ok(());
            }
        };
        if let Some(revocation) = self.consumer.take_revocation() {
            return self.on_revocation(revocation).await;
        }
        self.on_assignment().await?;
        let rewound = self.rewind();
        let records: Vec<ConsumedRecord> = records
            .into_iter()
            .filter(|r| !rewound.contains(&r.tp) && self.assigned.contains(&r.tp))
            .collect();
        self.convert(records).await?;
        if self.delivery_due() {
            self.deliver().await?;
        }
        Ok(())
    }

    /// This poll's timeout: at most [`POLL_MAX_MS`], the time to the next commit, the
    /// task's `timeout`; paused for redelivery, the time the batch is due again, fixed at
    /// the first poll after the failure as `now + min(to next commit, timeout)`.
    fn poll_timeout(&mut self) -> Duration {
        let now = self.host.now_ms();
        let asked = self.context.take_timeout();
        let to_commit = self.next_commit_ms.saturating_sub(now);
        if let Some(due @ None) = &mut self.redelivery {
            *due = Some(now + asked.map_or(to_commit, |t| t.min(to_commit)));
        }
        let mut ms = POLL_MAX_MS.min(to_commit);
        if let Some(t) = asked {
            ms = ms.min(t);
        }
        if let Some(Some(due)) = self.redelivery {
            ms = ms.min(due.saturating_sub(now));
        }
        Duration::from_millis(ms)
    }

    /// Whether `put` runs this iteration: always outside a redelivery pause, even with an
    /// empty batch (Java's `poll` calls `deliverMessages` after every poll, so a task sees
    /// `put` with no records and may flush by time, as the Doris connector's
    /// `buffer.flush.time` does); paused, once the kept batch (empty when an empty `put`
    /// failed) is due again.
    fn delivery_due(&self) -> bool {
        match self.redelivery {
            None => true,
            Some(Some(due)) => self.host.now_ms() >= due,
            Some(None) => false,
        }
    }

    /// The partitions the consumer is about to revoke (`onPartitionsRevoked`: the closing
    /// commit) or lost (`onPartitionsLost`: `close` only); their part of the batch goes.
    ///
    /// # Errors
    /// The closing commit's failure (Java rethrows it from `poll`: the task fails).
    async fn on_revocation(&mut self, revocation: Revocation) -> Result<(), String> {
        let partitions = revocation.partitions;
        crate::mark!("connect:partitions-revoked");
        if revocation.lost {
            crate::mark!("connect:partitions-lost");
            self.close_lost(&partitions).await;
        } else {
            crate::mark!("connect:partitions-revoked-committed");
            self.commit_offsets(true, &partitions).await?;
        }
        self.forget(&partitions);
        // Eager: everything; cooperative (KIP-429): only what moved.
        for tp in &partitions {
            self.assigned.remove(tp);
        }
        self.context.set_assignment(self.assigned.clone());
        Ok(())
    }

    /// `close` of partitions lost without a commit; their DLQ futures are dropped.
    async fn close_lost(&mut self, partitions: &[TopicPartition]) {
        let _ = self.sink.close(partitions).await;
        if let Some(dlq) = &mut self.dlq {
            dlq.cancel_futures(partitions);
        }
    }

    /// Forgets the offsets and batched records of `partitions`; a batch left empty is no
    /// longer waiting for redelivery.
    fn forget(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.current.remove(tp);
            self.last_committed.remove(tp);
        }
        self.batch.forget(partitions);
        if self.batch.records.is_empty() {
            self.redelivery = None;
        }
    }

    /// Calls `open` when the consumer's assignment grew; partitions gone without a
    /// revocation handed out (the rejoin already happened) are handled as lost. A batch
    /// still waiting for redelivery keeps every partition paused (`onPartitionsAssigned`).
    async fn on_assignment(&mut self) -> Result<(), String> {
        let now: BTreeSet<TopicPartition> = self.consumer.assignment().into_iter().collect();
        if now == self.assigned {
            return Ok(());
        }
        let revoked: Vec<TopicPartition> = self.assigned.difference(&now).cloned().collect();
        let added: Vec<TopicPartition> = now.difference(&self.assigned).cloned().collect();
        if !revoked.is_empty() {
            crate::mark!("connect:partitions-revoked");
            crate::mark!("connect:partitions-revoked-after-rejoin");
            self.close_lost(&revoked).await;
            self.forget(&revoked);
        }
        self.assigned = now;
        self.context.set_assignment(self.assigned.clone());
        if self.redelivery.is_some() {
            self.pause_all();
        }
        if !added.is_empty() {
            self.open(&added).await?;
        }
        Ok(())
    }

    async fn open(&mut self, added: &[TopicPartition]) -> Result<(), String> {
        loop {
            match self.sink.open(added).await {
                Ok(()) => return Ok(()),
                Err(ConnectError::Retriable(_)) => {
                    crate::mark!("connect:open-retry");
                    tokio::time::sleep(Duration::from_millis(1_000)).await;
                }
                Err(ConnectError::Fatal(e)) => return Err(e),
            }
        }
    }

    fn pause_all(&mut self) {
        let all: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
        // Every partition is assigned, so the consumer cannot refuse.
        let _ = self.consumer.pause(&all);
    }

    /// Applies the seeks the task asked for through its context (`WorkerSinkTask.rewind`):
    /// the consumer seeks each assigned partition, whose current and last committed offsets
    /// become the seek's. Returns the partitions rewound.
    fn rewind(&mut self) -> BTreeSet<TopicPartition> {
        let mut rewound = BTreeSet::new();
        for (tp, offset) in self.context.take_offsets() {
            if self.assigned.contains(&tp) && self.consumer.seek(&tp, offset).is_ok() {
                self.current.insert(tp.clone(), offset);
                self.last_committed.insert(tp.clone(), offset);
                rewound.insert(tp);
            }
        }
        rewound
    }

    /// Converts records (the converter stage) into the batch: the next offsets they account
    /// for (failed records included, as Connect's `origOffsets`) and the originals by
    /// position. A partition's first record gives its first position.
    async fn convert(&mut self, records: Vec<ConsumedRecord>) -> Result<(), String> {
        for r in records {
            self.batch.processed.insert(r.tp.clone(), r.offset + 1);
            self.last_committed.entry(r.tp.clone()).or_insert(r.offset);
            let key = self.key_converter.to_connect_data(r.key.as_ref());
            let value = self.value_converter.to_connect_data(r.value.as_ref());
            let (stage, converted) = match (key, value) {
                (Err(e), _) => ("KEY_CONVERTER", Err(e)),
                (_, Err(e)) => ("VALUE_CONVERTER", Err(e)),
                (Ok(k), Ok(v)) => ("", Ok((k, v))),
            };
            match converted {
                Ok((key, value)) => {
                    self.batch
                        .originals
                        .insert((r.tp.clone(), r.offset), r.clone());
                    self.batch.records.push(SinkRecord {
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
                    self.report_converter_error(errant)?;
                }
            }
        }
        Ok(())
    }

    /// A converter-stage failure: to the DLQ when one is configured (also under
    /// tolerance none, as Connect does; nothing waits for it), then skipped (`all`) or
    /// fatal (`none`).
    fn report_converter_error(&mut self, errant: ErrantRecord) -> Result<(), String> {
        let text = format!(
            "Tolerance exceeded in error handler: stage {} {} offset {}: {}",
            errant.stage, errant.original.tp, errant.original.offset, errant.message
        );
        if let Some(dlq) = &mut self.dlq {
            dlq.report(errant, false);
        }
        match self.config.tolerance {
            Tolerance::All => {
                crate::mark!("connect:converter-error-tolerated");
                Ok(())
            }
            Tolerance::None => Err(text),
        }
    }

    /// `deliverMessages`: `put` the batch. Its errant records go to the DLQ, their futures
    /// kept for the next commit. On success the batch's offsets become current and paused
    /// partitions resume; `Retriable` keeps the batch and pauses every partition.
    async fn deliver(&mut self) -> Result<(), String> {
        let mut reporter = PutReporter {
            tolerance: self.config.tolerance,
            originals: &self.batch.originals,
            class_name: self.config.connector_class.clone(),
            reports: Vec::new(),
        };
        let result = self
            .sink
            .put(self.batch.records.clone(), &mut reporter)
            .await;
        let reports = std::mem::take(&mut reporter.reports);
        if let Some(dlq) = &mut self.dlq {
            for errant in reports {
                dlq.report(errant, true);
            }
        }
        match result {
            Ok(()) => {
                if !self.batch.records.is_empty() {
                    self.host.crash_point()?;
                }
                let batch = std::mem::take(&mut self.batch);
                let assigned = &self.assigned;
                let processed = batch.processed.into_iter();
                self.current
                    .extend(processed.filter(|(tp, _)| assigned.contains(tp)));
                if self.redelivery.take().is_some() {
                    crate::mark!("connect:redelivered-after-pause");
                    let all: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
                    let _ = self.consumer.resume(&all);
                }
                Ok(())
            }
            Err(ConnectError::Retriable(_)) => {
                crate::mark!("connect:put-retry");
                if self.redelivery.is_none() {
                    crate::mark!("connect:paused-for-redelivery");
                    self.pause_all();
                }
                self.redelivery = Some(None);
                Ok(())
            }
            Err(ConnectError::Fatal(e)) => Err(e),
        }
    }

    /// `commitOffsets` of `partitions` (see the module docs); `closing` also calls `close`
    /// and commits synchronously.
    ///
    /// # Errors
    /// An errant record that could not be written.
    async fn commit_offsets(
        &mut self,
        closing: bool,
        partitions: &[TopicPartition],
    ) -> Result<(), String> {
        if let Some(dlq) = &mut self.dlq {
            dlq.await_futures(partitions).await?;
        }
        let requested: BTreeMap<TopicPartition, Offset> = self
            .current
            .iter()
            .filter(|(tp, _)| partitions.contains(tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let last: BTreeMap<TopicPartition, Offset> = self
            .last_committed
            .iter()
            .filter(|(tp, _)| requested.contains_key(tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let provided = if requested.is_empty() {
            Ok(BTreeMap::new())
        } else {
            self.sink.pre_commit(&requested).await
        };
        if closing {
            let _ = self.sink.close(partitions).await;
        }
        let provided = match provided {
            Ok(provided) => provided,
            Err(_) => {
                self.on_pre_commit_failed(closing, &last);
                return Ok(());
            }
        };
        let mut committable = last.clone();
        for (tp, offset) in provided {
            if requested.get(&tp).is_some_and(|&c| offset <= c) {
                committable.insert(tp, offset);
            }
        }
        if provided_nothing_new(&committable, &last) {
            return Ok(());
        }
        self.send_commit(closing, committable).await;
        Ok(())
    }

    /// A throwing `pre_commit`: no commit; unless closing, the partitions seek back to their
    /// last committed offsets, which become current again.
    fn on_pre_commit_failed(&mut self, closing: bool, last: &BTreeMap<TopicPartition, Offset>) {
        crate::mark!("connect:offset-commit-skipped-pre-commit-failed");
        if closing {
            return;
        }
        for (tp, &offset) in last {
            if self.consumer.seek(tp, offset).is_ok() {
                crate::mark!("connect:pre-commit-failed-rewound");
                self.current.insert(tp.clone(), offset);
            }
        }
    }

    /// Sends the commit, recorded as invoke and ok / fail / info; a periodic one is bounded
    /// by `offset.flush.timeout.ms`. What committed becomes the last committed offsets.
    async fn send_commit(&mut self, closing: bool, committable: BTreeMap<TopicPartition, Offset>) {
        let offsets: Vec<(TopicPartition, Offset)> = committable.into_iter().collect();
        let value = || Value::Commit {
            offsets: offsets.clone(),
        };
        self.host.record(OpKind::Invoke, value(), None);
        let result = if closing {
            Some(self.consumer.commit(&offsets).await)
        } else {
            let bound = Duration::from_millis(self.flush_timeout_ms);
            tokio::time::timeout(bound, self.consumer.commit(&offsets))
                .await
                .ok()
        };
        let (kind, error) = match result {
            Some(Ok(())) => {
                self.last_committed.extend(offsets.iter().cloned());
                (OpKind::Ok, None)
            }
            Some(Err(e)) if e.is_ambiguous() => (OpKind::Info, Some(e.to_string())),
            Some(Err(e)) => (OpKind::Fail, Some(e.to_string())),
            None => {
                crate::mark!("connect:offset-commit-timed-out");
                let text = format!("Commit of offsets timed out ({} ms)", self.flush_timeout_ms);
                (OpKind::Info, Some(text))
            }
        };
        if kind != OpKind::Ok {
            crate::mark!("connect:offset-commit-failed");
        }
        self.host.record(kind, value(), error);
    }
}

/// Java skips a commit whose offsets equal the last committed ones ("no change since last
/// commit"), and one the task opted out of (nothing returned from `preCommit`).
fn provided_nothing_new(
    committable: &BTreeMap<TopicPartition, Offset>,
    last: &BTreeMap<TopicPartition, Offset>,
) -> bool {
    committable.is_empty() || committable == last
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::AutoOffsetReset;

    fn connector(extra: &[(&str, &str)]) -> ConnectorConfig {
        let mut raw: BTreeMap<String, String> =
            [("name", "c"), ("connector.class", "x"), ("topics", "t")]
                .into_iter()
                .chain(extra.iter().copied())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        raw.insert("tasks.max".into(), "1".into());
        ConnectorConfig::parse(&raw, &[]).expect("valid")
    }

    /// KIP-735 and `Worker.baseConsumerConfigs`: a task consumer keeps the consumer's own
    /// session timeout and heartbeat (45 s, 3 s), not the worker group's (10 s), unless the
    /// connector overrides them.
    #[test]
    fn task_consumers_keep_the_consumer_session_timeout_unless_overridden() {
        let wc = WorkerConfig::default();
        assert_eq!(wc.session_timeout_ms, 10_000);
        let cc = task_consumer_config(&connector(&[]), &wc);
        assert_eq!(
            (cc.session_timeout_ms, cc.heartbeat_interval_ms),
            (45_000, 3_000)
        );
        let overridden = connector(&[
            ("consumer.override.session.timeout.ms", "12000"),
            ("consumer.override.heartbeat.interval.ms", "4000"),
        ]);
        let cc = task_consumer_config(&overridden, &wc);
        assert_eq!(
            (cc.session_timeout_ms, cc.heartbeat_interval_ms),
            (12_000, 4_000)
        );
        let bad = [
            ("name", "c"),
            ("connector.class", "x"),
            ("topics", "t"),
            ("consumer.override.session.timeout.ms", "soon"),
        ];
        let raw = bad
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = ConnectorConfig::parse(&raw, &[]).unwrap_err().to_string();
        assert!(e.contains("consumer.override.session.timeout.ms"), "{e}");
    }

    /// `consumer.override.group.protocol = consumer` (KIP-848) and its remote assignor reach
    /// the task consumer; the classic protocol's keys beside it, and a remote assignor
    /// under `classic`, are refused by name as Java's `ConsumerConfig` refuses them.
    #[test]
    fn task_consumers_take_the_group_protocol_and_refuse_what_it_rules_out() {
        use crate::client::GroupProtocol;
        let wc = WorkerConfig::default();
        assert_eq!(
            task_consumer_config(&connector(&[]), &wc).group_protocol,
            GroupProtocol::Classic
        );
        let kip848 = connector(&[
            ("consumer.override.group.protocol", "consumer"),
            ("consumer.override.group.remote.assignor", "range"),
        ]);
        let cc = task_consumer_config(&kip848, &wc);
        assert_eq!(cc.group_protocol, GroupProtocol::Consumer);
        assert_eq!(cc.group_remote_assignor.as_deref(), Some("range"));
        let refused = [
            (
                Some("consumer"),
                "consumer.override.session.timeout.ms",
                "10000",
            ),
            (
                Some("consumer"),
                "consumer.override.heartbeat.interval.ms",
                "1000",
            ),
            (
                Some("consumer"),
                "consumer.override.partition.assignment.strategy",
                "range",
            ),
            (None, "consumer.override.group.remote.assignor", "uniform"),
            (
                Some("consumer"),
                "consumer.override.group.remote.assignor",
                "sticky",
            ),
            (
                Some("streams"),
                "consumer.override.group.protocol",
                "streams",
            ),
        ];
        for (protocol, key, value) in refused {
            let mut raw: BTreeMap<String, String> = [("name", "c"), ("connector.class", "x")]
                .into_iter()
                .chain([("topics", "t"), (key, value)])
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            if let Some(protocol) = protocol {
                raw.insert("consumer.override.group.protocol".into(), protocol.into());
            }
            let e = ConnectorConfig::parse(&raw, &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    /// `consumer.override.fetch.max.wait.ms` and `consumer.override.fetch.min.bytes` reach
    /// the task consumer, with the consumer's defaults (500 ms, 1 byte) when unset.
    #[test]
    fn task_consumers_take_the_fetch_overrides() {
        let wc = WorkerConfig::default();
        let cc = task_consumer_config(&connector(&[]), &wc);
        assert_eq!((cc.fetch_max_wait_ms, cc.fetch_min_bytes), (500, 1));
        let overridden = connector(&[
            ("consumer.override.fetch.max.wait.ms", "2000"),
            ("consumer.override.fetch.min.bytes", "4096"),
        ]);
        let cc = task_consumer_config(&overridden, &wc);
        assert_eq!((cc.fetch_max_wait_ms, cc.fetch_min_bytes), (2_000, 4_096));
    }

    /// `Worker.baseConsumerConfigs` puts `auto.offset.reset=earliest` before the connector's
    /// overrides: a task consumer starts at the log start unless the connector says
    /// otherwise, and a value the consumer does not know is refused by name.
    #[test]
    fn task_consumers_start_earliest_unless_the_connector_overrides_it() {
        let wc = WorkerConfig::default();
        let cc = task_consumer_config(&connector(&[]), &wc);
        assert_eq!(cc.auto_offset_reset, AutoOffsetReset::Earliest);
        for (value, expected) in [
            ("latest", AutoOffsetReset::Latest),
            ("none", AutoOffsetReset::None),
        ] {
            let c = connector(&[("consumer.override.auto.offset.reset", value)]);
            assert_eq!(task_consumer_config(&c, &wc).auto_offset_reset, expected);
        }
        let raw = [
            ("name", "c"),
            ("connector.class", "x"),
            ("topics", "t"),
            ("consumer.override.auto.offset.reset", "smallest"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = ConnectorConfig::parse(&raw, &[]).unwrap_err().to_string();
        assert!(e.contains("consumer.override.auto.offset.reset"), "{e}");
        assert!(e.contains("earliest, latest or none"), "{e}");
    }

    /// `consumer.override.partition.assignment.strategy` reaches the task consumer, under
    /// Kafka's class names or the short ones; the default is the consumer's (range first,
    /// eager), and another assignor is refused by name.
    #[test]
    fn task_consumers_take_the_assignment_strategy_override() {
        use crate::client::AssignmentStrategy::{CooperativeSticky, Range};
        let wc = WorkerConfig::default();
        let cc = task_consumer_config(&connector(&[]), &wc);
        assert_eq!(
            cc.partition_assignment_strategy,
            vec![Range, CooperativeSticky]
        );
        assert!(!cc.cooperative());
        let key = "consumer.override.partition.assignment.strategy";
        for value in [
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
            "cooperative-sticky",
        ] {
            let cc = task_consumer_config(&connector(&[(key, value)]), &wc);
            assert_eq!(cc.partition_assignment_strategy, vec![CooperativeSticky]);
            assert!(cc.cooperative());
        }
        let raw = [
            ("name", "c"),
            ("connector.class", "x"),
            ("topics", "t"),
            (key, "org.apache.kafka.clients.consumer.RoundRobinAssignor"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let e = ConnectorConfig::parse(&raw, &[]).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("RoundRobinAssignor"), "{e}");
        assert!(e.contains("CooperativeStickyAssignor"), "{e}");
    }

    /// Connect's DLQ producer retries a report until it is written.
    #[test]
    fn the_dlq_producer_never_gives_up() {
        let p = dlq_producer_config();
        assert_eq!(p.delivery_timeout_ms, i32::MAX as u64);
        assert!(!p.enable_idempotence);
        assert_eq!(p.acks, eosim_sim::kafka::Acks::All);
    }
}

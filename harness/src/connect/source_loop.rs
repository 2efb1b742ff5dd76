//! The worker's source task loop over the client traits: Kafka Connect's
//! `AbstractWorkerSourceTask` with its two delivery modes, `WorkerSourceTask`
//! (at-least-once) and `ExactlyOnceWorkerSourceTask` (KIP-618, KAFKA-10000).
//!
//! # One iteration (`AbstractWorkerSourceTask.execute`)
//! `poll()` the task; an empty batch waits `poll.interval.ms`. Each record is converted
//! (`JsonConverter`, schemas disabled), submitted ([`SubmittedRecords`]) and sent, each send
//! awaited in order (the worker's producer has one request in flight); its
//! acknowledgement acknowledges the submission. Then the `task-crash` fault point
//! ([`TaskHost::crash_point`]).
//!
//! # At-least-once (`exactly.once.source.support` disabled or preparing)
//! Every `offset.flush.interval.ms` (`SourceTaskOffsetCommitter`) the committable offsets
//! (`SubmittedRecords.committableOffsets`: acknowledged prefixes only) are written to
//! `offset.storage.topic` by the offset store's own producer, each send bounded by
//! `offset.flush.timeout.ms`; a failed flush keeps them for the next one
//! (`OffsetStorageWriter.cancelFlush`). A graceful stop flushes once more
//! (`WorkerSourceTask.finalOffsetCommit`). A crash loses what was sent since the last
//! flush from the stored offsets: the next run emits it again (duplicates). A task that
//! fails (an exception, the `task-crash` fault point) still flushes what was acknowledged
//! (`WorkerSourceTask.finalOffsetCommit`): only a crash of the process re-emits.
//!
//! # Exactly-once (`exactly.once.source.support=enabled`, KIP-618)
//! The task's producer is transactional (`transactional.id = <group.id>-<connector>-<task>`,
//! `Worker.taskTransactionalId`), initialized before the task starts, which fences any
//! older producer of the task and aborts its open transaction. A transaction begins with
//! the first record after a commit; at its boundary (`transaction.boundary=poll`: after
//! each non-empty batch; `interval`: once `transaction.boundary.interval.ms` passed) the
//! committable offsets are sent to the offsets topic *in the same transaction*, then it
//! commits. Any error in a transaction aborts it (unless the producer was fenced) and
//! fails the task, as `ExactlyOnceWorkerSourceTask` does; the next run resumes from the
//! committed offsets, which match the committed records exactly.
//!
//! # Ops recorded (through [`TaskHost::record`])
//! `send` invoke / ok (partition and offset) / fail or info per record, the record's id
//! taken from its `eosim.id` header; at-least-once: `source-offsets` invoke / ok / info per
//! flush; exactly-once: `txn` invoke (every record sent and the offsets) then ok / fail /
//! info, as the transactional copier records it.

use super::sink_loop::{StopSignal, TaskExit, TaskHost};
use super::source_config::TransactionBoundary;
use super::source_task::{offset_key, SourceRecord, SourceTask};
use super::submitted::SubmittedRecords;
use crate::client::{Producer, ProducerRecord, TransactionalProducer};
use crate::history::{OpKind, RecordRef, Value};
use bytes::Bytes;
use eosim_sim::kafka::TopicPartition;
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How a source task's records and offsets reach Kafka.
pub enum SourceDelivery<P, T> {
    /// `WorkerSourceTask`: a plain producer for the records and the offset store's own
    /// producer for the offsets topic.
    AtLeastOnce {
        /// The task's producer.
        producer: P,
        /// The offset store's producer (`KafkaOffsetBackingStore`).
        offsets: P,
    },
    /// `ExactlyOnceWorkerSourceTask`: one transactional producer, initialized.
    ExactlyOnce {
        /// The task's transactional producer.
        producer: T,
        /// Its `transactional.id`.
        transactional_id: String,
        /// `transaction.boundary`.
        boundary: TransactionBoundary,
        /// `transaction.boundary.interval.ms` (used with `interval`).
        interval_ms: u64,
    },
}

/// What a source task loop is configured with, besides its clients.
#[derive(Debug, Clone)]
pub struct SourceLoopConfig {
    /// The connector's name (the offsets' key).
    pub connector: String,
    /// The task id.
    pub task: u32,
    /// `offset.storage.topic`.
    pub offsets_topic: String,
    /// `offset.flush.interval.ms`.
    pub flush_interval_ms: u64,
    /// `offset.flush.timeout.ms`.
    pub flush_timeout_ms: u64,
    /// Bound on one transactional call (commit, abort), ms.
    pub txn_call_timeout_ms: u64,
}

/// The records of the open transaction.
#[derive(Debug, Default)]
struct OpenTxn {
    sends: Vec<RecordRef>,
}

/// One task's loop. See the module docs.
pub struct SourceTaskLoop<H, P, T> {
    host: H,
    config: SourceLoopConfig,
    task: Box<dyn SourceTask>,
    delivery: SourceDelivery<P, T>,
    submitted: SubmittedRecords,
    /// Committable offsets not stored yet: partition text → (partition, offset).
    pending: BTreeMap<String, (Json, Json)>,
    next_commit_ms: u64,
    txn: Option<OpenTxn>,
    txn_ids: Arc<AtomicU64>,
    stop: StopSignal,
}

impl<H, P, T> SourceTaskLoop<H, P, T>
where
    H: TaskHost,
    P: Producer,
    T: TransactionalProducer,
{
    /// A loop of the started `task`; `txn_ids` hands out run-unique transaction numbers.
    pub fn new(
        host: H,
        config: SourceLoopConfig,
        task: Box<dyn SourceTask>,
        delivery: SourceDelivery<P, T>,
        txn_ids: Arc<AtomicU64>,
        stop: StopSignal,
    ) -> Self {
        let next_commit_ms = host.now_ms() + commit_interval_ms(&config, &delivery);
        Self {
            host,
            config,
            task,
            delivery,
            submitted: SubmittedRecords::new(),
            pending: BTreeMap::new(),
            next_commit_ms,
            txn: None,
            txn_ids,
            stop,
        }
    }

    /// Runs until stopped (then stores offsets a last time) or failed.
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
        self.final_offset_commit(exit).await
    }

    /// `finalOffsetCommit`: at least once, the acknowledged offsets are flushed whether the
    /// task stopped or failed (`WorkerSourceTask`: only dispatched records are tracked);
    /// exactly once, a stopped task commits its open transaction and a failed one aborts it
    /// (`ExactlyOnceWorkerSourceTask`).
    async fn final_offset_commit(&mut self, exit: TaskExit) -> TaskExit {
        let exactly_once = matches!(self.delivery, SourceDelivery::ExactlyOnce { .. });
        match &exit {
            TaskExit::Failed(trace) if exactly_once => {
                if self.txn.is_some() {
                    self.abort(trace.clone()).await;
                }
                exit
            }
            TaskExit::Failed(_) => {
                let _ = self.commit().await;
                exit
            }
            TaskExit::Stopped => match self.commit().await {
                Ok(()) => exit,
                Err(e) => TaskExit::Failed(e),
            },
        }
    }

    async fn iteration(&mut self) -> Result<(), String> {
        let now = self.host.now_ms();
        let records = self.task.poll(now).map_err(|e| e.to_string())?;
        if records.is_empty() {
            self.maybe_commit(false).await?;
            let wait = self.task.poll_interval_ms().max(1);
            tokio::time::sleep(Duration::from_millis(wait)).await;
            return Ok(());
        }
        for record in records {
            self.send(record).await?;
        }
        self.host.crash_point()?;
        self.maybe_commit(true).await
    }

    /// Stores offsets when the mode's boundary is reached: a flush interval, or a
    /// transaction boundary (`poll` after a batch: `batch_sent`).
    async fn maybe_commit(&mut self, batch_sent: bool) -> Result<(), String> {
        let now = self.host.now_ms();
        let due = match &self.delivery {
            SourceDelivery::ExactlyOnce {
                boundary: TransactionBoundary::Poll,
                ..
            } => batch_sent,
            _ => now >= self.next_commit_ms,
        };
        if !due {
            return Ok(());
        }
        self.next_commit_ms = now + commit_interval_ms(&self.config, &self.delivery);
        self.commit().await
    }

    /// Flushes the offsets (at-least-once) or commits the open transaction.
    async fn commit(&mut self) -> Result<(), String> {
        let found = self.submitted.committable_offsets();
        for (partition, offset) in found.offsets {
            let parsed: Json = serde_json::from_str(&partition).unwrap_or(Json::Null);
            self.pending.insert(partition, (parsed, offset));
        }
        match &self.delivery {
            SourceDelivery::AtLeastOnce { .. } => {
                self.flush_offsets().await;
                Ok(())
            }
            SourceDelivery::ExactlyOnce { .. } => self.commit_transaction().await,
        }
    }

    /// Sends one record, recording it; submits it and acknowledges it once sent.
    async fn send(&mut self, record: SourceRecord) -> Result<(), String> {
        let (produced, id, key) = to_producer_record(&record);
        let partition = record.source_partition.to_string();
        let submitted = self.submitted.submit(&partition, record.source_offset);
        let invoke = Value::Send {
            id,
            key: key.clone(),
            tp: None,
            offset: None,
        };
        self.host.record(OpKind::Invoke, invoke, None);
        let topic = produced.topic.clone();
        let result = match &self.delivery {
            SourceDelivery::AtLeastOnce { producer, .. } => producer
                .send(produced)
                .await
                .map_err(|e| (e.is_ambiguous(), e.to_string())),
            SourceDelivery::ExactlyOnce { producer, .. } => {
                if self.txn.is_none() {
                    producer.begin_transaction().map_err(|e| e.to_string())?;
                    self.txn = Some(OpenTxn::default());
                }
                producer
                    .send(produced)
                    .await
                    .map_err(|e| (e.is_ambiguous(), e.to_string()))
            }
        };
        match result {
            Ok(d) => {
                let tp = TopicPartition::new(topic, d.partition);
                let sent = RecordRef {
                    id,
                    key: key.clone(),
                    tp: tp.clone(),
                    offset: d.offset,
                };
                if let Some(txn) = &mut self.txn {
                    txn.sends.push(sent);
                }
                let ok = Value::Send {
                    id,
                    key,
                    tp: Some(tp),
                    offset: Some(d.offset),
                };
                self.host.record(OpKind::Ok, ok, None);
                self.submitted.ack(&submitted);
                Ok(())
            }
            Err((ambiguous, error)) => {
                let kind = if ambiguous {
                    OpKind::Info
                } else {
                    OpKind::Fail
                };
                let value = Value::Send {
                    id,
                    key,
                    tp: None,
                    offset: None,
                };
                self.host.record(kind, value, Some(error.clone()));
                let trace = format!("Unrecoverable exception from producer send callback: {error}");
                if self.txn.is_some() {
                    self.abort(trace.clone()).await;
                }
                Err(trace)
            }
        }
    }

    /// The at-least-once offset flush: each pending offset to the offsets topic, recorded
    /// as one `source-offsets` op; what did not make it stays pending.
    async fn flush_offsets(&mut self) {
        let SourceDelivery::AtLeastOnce { offsets, .. } = &self.delivery else {
            return;
        };
        if self.pending.is_empty() {
            return;
        }
        let value = self.offsets_value();
        self.host.record(OpKind::Invoke, value.clone(), None);
        let bound = Duration::from_millis(self.config.flush_timeout_ms);
        for (partition, offset) in self.pending.values() {
            let record = offsets_record(&self.config, partition, offset);
            let error = match tokio::time::timeout(bound, offsets.send(record)).await {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("offset flush timed out after {} ms", bound.as_millis()),
            };
            crate::mark!("connect:source-offset-flush-failed");
            self.host.record(OpKind::Info, value, Some(error));
            return;
        }
        crate::mark!("connect:source-offsets-flushed");
        self.host.record(OpKind::Ok, value, None);
        self.pending.clear();
    }

    /// Commits the open transaction with the pending offsets in it.
    async fn commit_transaction(&mut self) -> Result<(), String> {
        let SourceDelivery::ExactlyOnce { producer, .. } = &self.delivery else {
            return Ok(());
        };
        if self.txn.is_none() {
            return Ok(());
        }
        for (partition, offset) in self.pending.values() {
            let record = offsets_record(&self.config, partition, offset);
            if let Err(e) = producer.send(record).await {
                let trace = format!("failed to send offsets in the transaction: {e}");
                self.abort(trace.clone()).await;
                return Err(trace);
            }
        }
        let value = self.txn_value();
        self.host.record(OpKind::Invoke, value.clone(), None);
        let timeout = Duration::from_millis(self.config.txn_call_timeout_ms);
        match producer.commit_transaction(timeout).await {
            Ok(()) => {
                crate::mark!("connect:source-transaction-committed");
                self.host.record(OpKind::Ok, value, None);
                self.txn = None;
                self.pending.clear();
                Ok(())
            }
            Err(e) => {
                self.host.record(OpKind::Info, value, Some(e.to_string()));
                self.txn = None;
                Err(format!("failed to commit the source transaction: {e}"))
            }
        }
    }

    /// Aborts the open transaction after `error` (a fenced producer is not asked) and
    /// records it failed; its records and offsets are no longer data.
    async fn abort(&mut self, error: String) {
        let SourceDelivery::ExactlyOnce { producer, .. } = &self.delivery else {
            return;
        };
        let value = self.txn_value();
        self.host.record(OpKind::Invoke, value.clone(), None);
        let timeout = Duration::from_millis(self.config.txn_call_timeout_ms);
        crate::mark!("connect:source-transaction-aborted");
        match producer.abort_transaction(timeout).await {
            Ok(()) => self.host.record(OpKind::Fail, value, Some(error)),
            Err(e) => self
                .host
                .record(OpKind::Info, value, Some(format!("{error}; abort: {e}"))),
        }
        self.txn = None;
        self.pending.clear();
        self.submitted.clear();
    }

    fn offsets_value(&self) -> Value {
        let offsets = self
            .pending
            .iter()
            .map(|(p, (_, o))| (p.clone(), o.to_string()))
            .collect();
        Value::SourceOffsets {
            connector: self.config.connector.clone(),
            task: self.config.task,
            offsets,
        }
    }

    fn txn_value(&self) -> Value {
        let SourceDelivery::ExactlyOnce {
            transactional_id, ..
        } = &self.delivery
        else {
            unreachable!("only exactly-once tasks have transactions");
        };
        let sends = self
            .txn
            .as_ref()
            .map(|t| t.sends.clone())
            .unwrap_or_default();
        Value::Txn {
            id: self.txn_ids.fetch_add(1, Ordering::SeqCst),
            transactional_id: transactional_id.clone(),
            sends,
            offsets: Vec::new(),
        }
    }
}

/// The interval between flushes (at-least-once) or `interval` transaction boundaries, ms.
fn commit_interval_ms<P, T>(config: &SourceLoopConfig, delivery: &SourceDelivery<P, T>) -> u64 {
    match delivery {
        SourceDelivery::ExactlyOnce { interval_ms, .. } => *interval_ms,
        SourceDelivery::AtLeastOnce { .. } => config.flush_interval_ms,
    }
}

/// `record` converted (`JsonConverter`, schemas disabled), with the id of its `eosim.id`
/// header (`u64::MAX` without one) and its key as text.
fn to_producer_record(record: &SourceRecord) -> (ProducerRecord, u64, Option<String>) {
    let id = record
        .headers
        .iter()
        .find(|(k, _)| k == crate::history::refs::ID_HEADER)
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(u64::MAX);
    let key = record.key.as_ref().map(Json::to_string);
    let produced = ProducerRecord {
        topic: record.topic.clone(),
        partition: None,
        key: key.clone().map(Bytes::from),
        value: record.value.as_ref().map(|v| Bytes::from(v.to_string())),
        headers: record.headers.clone(),
    };
    (produced, id, key)
}

/// The offsets-topic record of `partition`'s `offset` (`KafkaOffsetBackingStore`).
fn offsets_record(config: &SourceLoopConfig, partition: &Json, offset: &Json) -> ProducerRecord {
    ProducerRecord {
        topic: config.offsets_topic.clone(),
        partition: None,
        key: Some(Bytes::from(offset_key(&config.connector, partition))),
        value: Some(Bytes::from(offset.to_string())),
        headers: Vec::new(),
    }
}

//! Errant records and the dead-letter queue of a sink task (KIP-298 and KIP-610).
//!
//! # The DLQ producer ([`dlq_producer_config`])
//! Connect builds it from `Worker.baseProducerConfigs` (apache/kafka
//! `connect/runtime/.../Worker.java`, `sinkTaskReporters`): `acks=all`,
//! `enable.idempotence=false`, `max.in.flight.requests.per.connection=1`,
//! `max.block.ms = Long.MAX_VALUE` and `delivery.timeout.ms = Integer.MAX_VALUE`, so a
//! report waits for metadata and is retried until it is written
//! ("these settings will execute infinite retries on retriable exceptions").
//!
//! # Reports ([`DlqQueue`])
//! `DeadLetterQueueReporter.report` hands the record to the producer and returns its future;
//! the task goes on. Records leave one at a time in the order reported (one in flight). A
//! report from `put` (KIP-610's `WorkerErrantRecordReporter`) keeps its future by partition,
//! and `WorkerSinkTask.commitOffsets` waits for the futures of the partitions it commits
//! (`awaitFutures`) before it calls `preCommit`; a failed future fails the task. Partitions
//! lost in a rebalance drop theirs (`cancelFutures`). A converter-stage report
//! (`RetryWithToleranceOperator.execute`) drops its future: nothing waits for it.

use super::task::{ConnectError, ErrantRecordReporter, SinkRecord};
use crate::client::{ConsumedRecord, Producer, ProducerConfig, ProducerRecord};
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

use super::config::Tolerance;

/// Java's `Integer.MAX_VALUE`, the DLQ producer's `delivery.timeout.ms`, in ms.
pub const DLQ_DELIVERY_TIMEOUT_MS: u64 = i32::MAX as u64;

/// The dead-letter queue producer's configuration: Connect's `baseProducerConfigs`
/// (`acks=all`, no idempotence, `delivery.timeout.ms` = `Integer.MAX_VALUE`), the producer's
/// own `request.timeout.ms` default (30 s), `max.block.ms` without end.
pub fn dlq_producer_config() -> ProducerConfig {
    ProducerConfig {
        enable_idempotence: false,
        delivery_timeout_ms: DLQ_DELIVERY_TIMEOUT_MS,
        // Java: Long.MAX_VALUE; ~25 days is as endless for a run and keeps time finite.
        max_block_ms: DLQ_DELIVERY_TIMEOUT_MS,
        ..ProducerConfig::default()
    }
}

/// A failed record on its way to the dead-letter queue.
#[derive(Debug, Clone)]
pub struct ErrantRecord {
    /// The record as consumed.
    pub original: ConsumedRecord,
    /// `KEY_CONVERTER`, `VALUE_CONVERTER` or `TASK_PUT`.
    pub stage: &'static str,
    /// The class that failed (converter or connector class).
    pub class_name: String,
    /// The exception's class.
    pub exception_class: &'static str,
    /// The exception's message.
    pub message: String,
}

/// Where a task's DLQ reports and their headers come from.
#[derive(Debug, Clone)]
pub struct DlqTarget {
    /// `errors.deadletterqueue.topic.name`.
    pub topic: String,
    /// `errors.deadletterqueue.context.headers.enable`.
    pub context_headers: bool,
    /// The connector's name.
    pub connector: String,
    /// The task id.
    pub task: u32,
}

/// One report in the producer's queue, and where to say it was written (`true`) or failed.
type Queued = (ProducerRecord, Option<oneshot::Sender<bool>>);

/// The DLQ producer of one task, sending in the background in report order, with the
/// futures of `put`-stage reports by partition. See the module docs.
pub struct DlqQueue {
    target: DlqTarget,
    tx: mpsc::UnboundedSender<Queued>,
    pending: BTreeMap<TopicPartition, Vec<oneshot::Receiver<bool>>>,
}

impl DlqQueue {
    /// Starts the sender of `producer` (a task on the current runtime and node, so a kill
    /// of the node ends it with the worker). It ends when the queue is dropped and empty.
    pub fn start<P: Producer + 'static>(producer: P, target: DlqTarget) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Queued>();
        let producer = Arc::new(producer);
        tokio::spawn(async move {
            while let Some((record, done)) = rx.recv().await {
                // DeadLetterQueueReporter logs a failed send; only a future tells the task.
                let written = producer.send(record).await.is_ok();
                if !written {
                    crate::mark!("connect:dlq-write-failed");
                }
                if let Some(done) = done {
                    let _ = done.send(written);
                }
            }
        });
        Self {
            target,
            tx,
            pending: BTreeMap::new(),
        }
    }

    /// Queues `errant`; with `keep_future` (a `put`-stage report) its future is kept for
    /// [`await_futures`](Self::await_futures).
    pub fn report(&mut self, errant: ErrantRecord, keep_future: bool) {
        let mut headers = errant.original.headers.clone();
        if self.target.context_headers {
            headers.extend(self.context_headers(&errant));
        }
        let record = ProducerRecord {
            topic: self.target.topic.clone(),
            partition: None,
            key: errant.original.key.clone(),
            value: errant.original.value.clone(),
            headers,
        };
        crate::mark!("connect:dlq-write");
        let done = keep_future.then(|| {
            let (done, future) = oneshot::channel();
            self.pending
                .entry(errant.original.tp.clone())
                .or_default()
                .push(future);
            done
        });
        // The sender ends only with the queue, so the send cannot fail.
        let _ = self.tx.send((record, done));
    }

    /// `WorkerErrantRecordReporter.awaitFutures`: waits until every kept report of
    /// `partitions` is written.
    ///
    /// # Errors
    /// A report that could not be written (the task must fail).
    pub async fn await_futures(&mut self, partitions: &[TopicPartition]) -> Result<(), String> {
        for tp in partitions {
            for future in self.pending.remove(tp).unwrap_or_default() {
                crate::mark!("connect:commit-awaited-errant-record");
                if future.await != Ok(true) {
                    return Err(format!(
                        "Encountered an error while awaiting an errant record future's \
                         completion ({tp})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// `WorkerErrantRecordReporter.cancelFutures`: forgets the kept reports of `partitions`
    /// (the records are still sent).
    pub fn cancel_futures(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.pending.remove(tp);
        }
    }

    fn context_headers(&self, e: &ErrantRecord) -> Vec<(String, Bytes)> {
        let o = &e.original;
        let pairs = [
            ("topic", o.tp.topic.to_string()),
            ("partition", o.tp.partition.to_string()),
            ("offset", o.offset.to_string()),
            ("connector.name", self.target.connector.clone()),
            ("task.id", self.target.task.to_string()),
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
}

/// KIP-610's reporter for `put`: collects reports; the loop queues them to the DLQ, keeping
/// their futures for the next commit of their partitions.
pub struct PutReporter<'a> {
    /// `errors.tolerance`.
    pub tolerance: Tolerance,
    /// The batch's records as consumed, by position.
    pub originals: &'a BTreeMap<(TopicPartition, Offset), ConsumedRecord>,
    /// The connector class (the report's `class.name`).
    pub class_name: String,
    /// What was reported.
    pub reports: Vec<ErrantRecord>,
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

#[cfg(all(test, madsim))]
mod tests {
    use super::*;
    use crate::client::{ClientError, Delivery};
    use async_trait::async_trait;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// A producer whose sends complete once `open` is set (`Ok`), or fail at once with
    /// `fail`.
    struct Gated {
        open: Arc<AtomicBool>,
        fail: bool,
    }

    #[async_trait]
    impl Producer for Gated {
        async fn send(&self, _record: ProducerRecord) -> Result<Delivery, ClientError> {
            if self.fail {
                return Err(ClientError::Fatal("record too large".into()));
            }
            while !self.open.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Delivery {
                partition: 0,
                offset: 0,
            })
        }
    }

    fn errant(partition: u32) -> ErrantRecord {
        ErrantRecord {
            original: ConsumedRecord {
                tp: TopicPartition::new("t", partition),
                offset: 3,
                key: None,
                value: None,
                headers: Vec::new(),
            },
            stage: "TASK_PUT",
            class_name: "x".into(),
            exception_class: "e",
            message: "bad".into(),
        }
    }

    fn target() -> DlqTarget {
        DlqTarget {
            topic: "dlq".into(),
            context_headers: false,
            connector: "c".into(),
            task: 0,
        }
    }

    /// `WorkerErrantRecordReporter.awaitFutures`: a commit of a partition waits until its
    /// put-stage reports are written; other partitions and converter-stage reports (whose
    /// futures Connect drops) do not wait; a report that failed fails the wait.
    #[test]
    fn a_commit_waits_for_the_put_stage_reports_of_its_partitions() {
        let runtime = madsim::runtime::Runtime::new();
        runtime.block_on(async {
            let open = Arc::new(AtomicBool::new(false));
            let producer = Gated {
                open: open.clone(),
                fail: false,
            };
            let mut queue = DlqQueue::start(producer, target());
            queue.report(errant(0), true);
            queue.report(errant(1), false);
            let p0 = [TopicPartition::new("t", 0)];
            let p1 = [TopicPartition::new("t", 1)];
            let bound = Duration::from_secs(5);
            assert!(tokio::time::timeout(bound, queue.await_futures(&p1))
                .await
                .is_ok());
            let waited = tokio::time::timeout(bound, queue.await_futures(&p0)).await;
            assert!(waited.is_err(), "p0's report is not written yet");
            queue.report(errant(0), true);
            open.store(true, Ordering::SeqCst);
            let written = tokio::time::timeout(bound, queue.await_futures(&p0)).await;
            assert_eq!(written, Ok(Ok(())));
            let failing = Gated { open, fail: true };
            let mut queue = DlqQueue::start(failing, target());
            queue.report(errant(0), true);
            assert!(
                queue.await_futures(&p0).await.is_err(),
                "a failed report fails"
            );
        });
    }
}

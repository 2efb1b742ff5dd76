//! The sink task contract, after Kafka Connect's `org.apache.kafka.connect.sink.SinkTask`
//! (open / put / flush / preCommit / close) and KIP-610's errant-record reporter.
//!
//! The worker owns the consumer: it polls, converts each record (the converter stage, where
//! `errors.tolerance` applies), hands batches to [`SinkTask::put`], and commits to the
//! connector's consumer group (`connect-<name>`) what [`SinkTask::pre_commit`] returns,
//! every `offset.flush.interval.ms`. A task written against this trait runs unchanged under
//! every fault the nemesis injects; where it keeps its own progress (KeeperMap, a database
//! table) it returns the offsets it wants committed from `pre_commit`, or none.

use async_trait::async_trait;
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// A record after the converter stage (`JsonConverter`): key and value as JSON, `None` for
/// a null key or a tombstone value.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkRecord {
    /// Where it was read.
    pub tp: TopicPartition,
    /// Its Kafka offset.
    pub offset: Offset,
    /// Converted key.
    pub key: Option<serde_json::Value>,
    /// Converted value; `None` is a tombstone.
    pub value: Option<serde_json::Value>,
    /// Record headers, raw.
    pub headers: Vec<(String, Bytes)>,
    /// Record timestamp, ms.
    pub timestamp_ms: i64,
}

/// How a task call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// Connect's `RetriableException`: the worker retries the same batch (within
    /// `errors.retry.timeout`), the task stays RUNNING.
    #[error("retriable: {0}")]
    Retriable(String),
    /// Any other exception: the task goes FAILED and stays there until restarted.
    #[error("{0}")]
    Fatal(String),
}

/// KIP-610's `ErrantRecordReporter`: a task reports a record it cannot write (a value that
/// does not fit its column, say) and goes on; the worker routes it to the dead-letter queue
/// when `errors.tolerance=all` and a DLQ is configured, or fails the task when
/// `errors.tolerance=none`.
pub trait ErrantRecordReporter: Send {
    /// Reports `record` with the error that stopped it, stage `TASK_PUT`.
    ///
    /// # Errors
    /// [`ConnectError::Fatal`] when tolerance is `none`: the task must stop.
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError>;
}

/// A sink task: one instance per task, given partitions by the worker's consumer group.
#[async_trait]
pub trait SinkTask: Send {
    /// Called after a rebalance assigned `partitions` (Connect's `open`).
    ///
    /// # Errors
    /// A failure fails the task.
    async fn open(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError>;

    /// Writes a batch (Connect's `put`). Records are in offset order per partition.
    ///
    /// # Errors
    /// [`ConnectError::Retriable`] to be called again with the same batch;
    /// [`ConnectError::Fatal`] to fail the task.
    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError>;

    /// Called before the worker commits offsets (Connect's `preCommit`, whose default calls
    /// `flush`): makes what `put` accepted durable and returns the offsets (next to read)
    /// that may be committed; an empty map commits nothing.
    ///
    /// # Errors
    /// A failure skips this commit; the task keeps running.
    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError>;

    /// Called before a rebalance takes `partitions` away, and on stop (Connect's `close`).
    ///
    /// # Errors
    /// Logged; the rebalance goes on.
    async fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError>;
}

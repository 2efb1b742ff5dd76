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
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

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

/// What a task asked of its worker through [`SinkTaskContext`], and what the worker tells it.
#[derive(Debug, Default)]
struct ContextState {
    assignment: BTreeSet<TopicPartition>,
    offsets: BTreeMap<TopicPartition, Offset>,
    commit_requested: bool,
    timeout_ms: Option<u64>,
}

/// Kafka Connect's `SinkTaskContext`: the task's handle on its worker. Cloning shares it
/// (the task keeps one, the worker another), as the Java task keeps its `context` field.
///
/// [`offset`](Self::offset) / [`offsets`](Self::offsets) ask the worker to seek the task's
/// consumer before its next poll (`WorkerSinkTask.rewind`): records already fetched of those
/// partitions are dropped and the offsets become the task's current ones.
/// [`request_commit`](Self::request_commit) asks for an offset commit (`preCommit`, then
/// a commit) at the next iteration instead of at `offset.flush.interval.ms`.
/// [`timeout`](Self::timeout) bounds the worker's next poll, so that a batch refused with
/// [`ConnectError::Retriable`] is redelivered that much later (Connect's
/// `SinkTaskContext.timeout`, which Confluent's `JdbcSinkTask` sets to `retry.backoff.ms`).
/// [`assignment`](Self::assignment) is the partitions the task owns now (set before `open`).
#[derive(Debug, Clone, Default)]
pub struct SinkTaskContext {
    state: Arc<Mutex<ContextState>>,
}

impl SinkTaskContext {
    /// A context with nothing assigned and nothing requested.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, ContextState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Resets the consumer position of `tp` to `offset` (next to read) before the next poll.
    pub fn offset(&self, tp: TopicPartition, offset: Offset) {
        self.lock().offsets.insert(tp, offset);
    }

    /// [`offset`](Self::offset) for each entry of `offsets`.
    pub fn offsets(&self, offsets: BTreeMap<TopicPartition, Offset>) {
        self.lock().offsets.extend(offsets);
    }

    /// Asks the worker to commit offsets as soon as it can (Connect's `requestCommit`).
    pub fn request_commit(&self) {
        self.lock().commit_requested = true;
    }

    /// Bounds the worker's next poll to `timeout_ms` (Connect's `timeout(long)`): a batch
    /// refused with [`ConnectError::Retriable`] is redelivered after it.
    pub fn timeout(&self, timeout_ms: u64) {
        self.lock().timeout_ms = Some(timeout_ms);
    }

    /// The partitions currently assigned to this task.
    pub fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.lock().assignment.clone()
    }

    /// Worker side: records the task's new assignment, forgetting seeks of partitions it
    /// lost (Java's `context.offsets` only hold assigned partitions after a rebalance).
    pub fn set_assignment(&self, assignment: BTreeSet<TopicPartition>) {
        let mut state = self.lock();
        state.offsets.retain(|tp, _| assignment.contains(tp));
        state.assignment = assignment;
    }

    /// Worker side: the seeks asked for since the last call, cleared.
    pub fn take_offsets(&self) -> BTreeMap<TopicPartition, Offset> {
        std::mem::take(&mut self.lock().offsets)
    }

    /// Worker side: the [`timeout`](Self::timeout) asked for since the last call, cleared
    /// (Java resets it to -1 once a poll used it).
    pub fn take_timeout(&self) -> Option<u64> {
        self.lock().timeout_ms.take()
    }

    /// Worker side: whether a commit was requested since the last call, cleared.
    pub fn take_commit_request(&self) -> bool {
        std::mem::take(&mut self.lock().commit_requested)
    }
}

/// A sink task: one instance per task, given partitions by the worker's consumer group.
#[async_trait]
pub trait SinkTask: Send {
    /// Called once, before anything else, with the task's [`SinkTaskContext`] (Connect's
    /// `initialize`). The default ignores it: a task that never seeks nor requests commits
    /// needs nothing from its worker.
    fn initialize(&mut self, context: SinkTaskContext) {
        let _ = context;
    }

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
    /// A failure skips this commit; the task keeps running, its partitions seeked back to
    /// their last committed offsets (unless the task is closing).
    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError>;

    /// Called before a rebalance takes `partitions` away (after `pre_commit`, before their
    /// last commit), when they were lost, and on stop or failure (Connect's `close`).
    ///
    /// # Errors
    /// Logged; the rebalance goes on.
    async fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: u32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn a_clone_shares_seeks_and_commit_requests_and_taking_clears_them() {
        let worker = SinkTaskContext::new();
        let task = worker.clone();
        worker.set_assignment([tp(0), tp(1)].into_iter().collect());
        assert_eq!(task.assignment().len(), 2);
        task.offset(tp(0), 5);
        task.offsets([(tp(1), 7), (tp(0), 3)].into_iter().collect());
        task.request_commit();
        task.timeout(3_000);
        assert_eq!(worker.take_timeout(), Some(3_000));
        assert_eq!(worker.take_timeout(), None);
        assert_eq!(
            worker.take_offsets(),
            [(tp(0), 3), (tp(1), 7)].into_iter().collect()
        );
        assert!(worker.take_offsets().is_empty());
        assert!(worker.take_commit_request());
        assert!(!worker.take_commit_request());
    }

    #[test]
    fn a_new_assignment_drops_seeks_of_lost_partitions() {
        let ctx = SinkTaskContext::new();
        ctx.set_assignment([tp(0), tp(1)].into_iter().collect());
        ctx.offsets([(tp(0), 1), (tp(1), 2)].into_iter().collect());
        ctx.set_assignment([tp(1)].into_iter().collect());
        assert_eq!(ctx.take_offsets(), [(tp(1), 2)].into_iter().collect());
    }
}

//! Histories in Jepsen's shape: every operation is recorded as an `invoke`, then completed
//! by `ok` (it happened), `fail` (it certainly did not) or `info` (unknown: a timeout, a
//! lost response). Nemesis faults are operations too, by the process `nemesis`.
//!
//! A history is written as `history.jsonl`, one [`Op`] per line; its SHA-256 over that text
//! is the run's `history-hash`, which a replay of the same (scenario, seed, build) must
//! reproduce.

pub mod refs;
pub mod text;

use crate::client::{ClientError, Delivery};
use eosim_sim::kafka::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The phase of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// The operation started.
    Invoke,
    /// It took effect.
    Ok,
    /// It certainly did not take effect.
    Fail,
    /// Its outcome is unknown.
    Info,
}

/// A record as the history knows it: the unique id the workload gave it, its key, and where
/// Kafka put it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RecordRef {
    /// Unique id carried in the record's value.
    pub id: u64,
    /// Record key, as text.
    pub key: Option<String>,
    /// Topic-partition it was read from or written to.
    pub tp: TopicPartition,
    /// Its offset.
    pub offset: Offset,
}

/// An input record of a Streams application as the checker needs it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamsInputRecord {
    /// Unique id carried in the value.
    pub id: u64,
    /// Record key.
    pub key: String,
    /// Event time carried in the value, ms.
    pub timestamp_ms: i64,
    /// Offset in its partition.
    pub offset: Offset,
}

/// One KTable update a Streams application wrote: `key@window_start_ms → count`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamsUpdate {
    /// Grouping key.
    pub key: String,
    /// Window start, ms (0 for an unwindowed aggregate).
    pub window_start_ms: i64,
    /// The aggregate value.
    pub count: u64,
    /// Offset in the output partition.
    pub offset: Offset,
}

/// One output record of a Streams topology other than the count (`[streams] topology`):
/// key and value as text, as a read_committed reader sees them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamsRecord {
    /// Record key.
    pub key: String,
    /// Record value: `<id>,<timestamp_ms>,<id²>` for `filter-map-values`, the key's id for
    /// `aggregate-ids`.
    pub value: String,
    /// Offset in the output partition.
    pub offset: Offset,
}

/// What an operation did, with its arguments (on invoke) or results (on completion).
/// The variant name is Jepsen's `:f`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Value {
    /// A produce. On invoke `tp` and `offset` are unknown; on ok they are filled in.
    Send {
        /// Unique record id.
        id: u64,
        /// Key.
        key: Option<String>,
        /// Partition, once known.
        tp: Option<TopicPartition>,
        /// Offset, once known.
        offset: Option<Offset>,
    },
    /// A consumer poll and the records it returned, in order.
    Poll {
        /// Records returned.
        records: Vec<RecordRef>,
    },
    /// An offset commit (next offsets to read).
    Commit {
        /// Committed offsets.
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// Rows a sink made durable in its target, in order.
    Write {
        /// Rows written.
        rows: Vec<RecordRef>,
    },
    /// The final contents of the sink's target after the drain, in storage order.
    SinkState {
        /// Rows held.
        rows: Vec<RecordRef>,
    },
    /// The final committed offsets of the sink's consumer group after the drain.
    CommittedOffsets {
        /// Offsets per partition; absent partitions have none.
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// The final contents of a partition log up to its high watermark after the drain, read
    /// with read_uncommitted.
    LogState {
        /// Partition.
        tp: TopicPartition,
        /// Records in offset order.
        records: Vec<RecordRef>,
    },
    /// Records a `delete-records` fault removed from a partition's log (the nemesis
    /// records it when the log start moved): below the new `log_start_offset`, in offset
    /// order. They were in the log, so the checkers count them with the partition's final
    /// `LogState` (acknowledged and written, not lost by Kafka); a sink that never read
    /// them lost them.
    RecordsDeleted {
        /// Partition.
        tp: TopicPartition,
        /// The log start offset after the deletion.
        log_start_offset: Offset,
        /// The records deleted, in offset order.
        records: Vec<RecordRef>,
    },
    /// A transaction of a transactional producer (Jepsen's `:txn`): invoked when the
    /// producer calls `commit_transaction` (or aborts), with every record it sent and the
    /// input offsets it added; completed `ok` (committed), `fail` (certainly aborted) or
    /// `info` (outcome unknown). Records whose send failed are listed too: a failed send
    /// may still have been appended, and belongs to this transaction if it was.
    Txn {
        /// Unique transaction number within the run.
        id: u64,
        /// The producer's `transactional.id`.
        transactional_id: String,
        /// Records sent in it; `tp`/`offset` are those of the acknowledgement, offset -1
        /// when the send was not acknowledged.
        sends: Vec<RecordRef>,
        /// Input offsets (next offsets to read) sent with `send_offsets_to_transaction`.
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// The end state of a partition after the drain: its high watermark and last stable
    /// offset. An LSO below the HW after the quiet period is a transaction left hanging.
    PartitionState {
        /// Partition.
        tp: TopicPartition,
        /// High watermark.
        high_watermark: Offset,
        /// Last stable offset.
        last_stable_offset: Offset,
    },
    /// The final contents of a partition as a read_committed consumer reads it from offset
    /// 0 after the drain: below the LSO, aborted transactions filtered out.
    CommittedLogState {
        /// Partition.
        tp: TopicPartition,
        /// Records in offset order.
        records: Vec<RecordRef>,
    },
    /// The final input of a Streams application after the drain (read_uncommitted, up to
    /// the HW of one input partition), each record with the event time it carries.
    StreamsInput {
        /// Input partition.
        tp: TopicPartition,
        /// Records in offset order.
        records: Vec<StreamsInputRecord>,
    },
    /// The final table topic of a Streams stream-table join (`streams.topology =
    /// "stream-table-join"`) after the drain, read read_committed from offset 0 of one
    /// partition: each update's version (`id`), key, event time and offset. What a join
    /// may have read of the table.
    StreamsTable {
        /// Table topic partition.
        tp: TopicPartition,
        /// Updates in offset order.
        records: Vec<StreamsInputRecord>,
    },
    /// The final repartition topic of a Streams application grouping by a new key
    /// (`streams.group_by = "id-mod"`) after the drain, read read_committed from offset 0 of
    /// one partition: each record's input id and its new key, so that a reader can see
    /// that records sit in the partition of their new key.
    StreamsRepartition {
        /// Repartition topic partition.
        tp: TopicPartition,
        /// Records in offset order (`key` = the new key).
        records: Vec<RecordRef>,
    },
    /// The final output of a Streams application after the drain, read read_committed from
    /// offset 0 of one output partition: KTable changelog updates `key@windowStart → count`.
    StreamsOutput {
        /// Output partition.
        tp: TopicPartition,
        /// Updates in offset order.
        records: Vec<StreamsUpdate>,
    },
    /// The window size of a Streams topology (0 = unwindowed) and its record cache,
    /// recorded once at the end so that the checker maps input to windows and judges the
    /// sequence of updates as the processor produces them.
    StreamsWindow {
        /// Tumbling window size, ms.
        window_size_ms: i64,
        /// The record cache of a stream thread (`statestore.cache.max.bytes`), bytes;
        /// absent when 0 (every update forwarded), so such histories read as before it.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        cache_max_bytes: Option<u64>,
    },
    /// The topology family of a Streams application other than the count (`[streams]
    /// topology`: `filter-map-values`, `aggregate-ids`), recorded once at the end in place
    /// of `streams-window`, so that the checker judges its output as that topology writes it.
    StreamsTopology {
        /// The scenario spelling of the family.
        topology: String,
    },
    /// The final output of a Streams topology other than the count after the drain, read
    /// read_committed from offset 0 of one output partition.
    StreamsRecords {
        /// Output partition.
        tp: TopicPartition,
        /// Records in offset order.
        records: Vec<StreamsRecord>,
    },
    /// A commit of a Streams instance: under `at_least_once` the offsets it committed after
    /// flushing; under `exactly_once_v2` one transaction (output, changelog, offsets).
    StreamsCommit {
        /// `processing.guarantee`.
        guarantee: String,
        /// Output and changelog records sent in it.
        records: usize,
        /// Input offsets (next offsets to read).
        offsets: Vec<(TopicPartition, Offset)>,
    },
    /// A Streams instance closed every task dirty after an error (TaskMigratedException,
    /// a failed send or commit): under `exactly_once_v2` its transaction was aborted (or
    /// its producer recreated) and its stores wiped.
    StreamsRecover {
        /// What went wrong.
        reason: String,
        /// Input partitions of the tasks closed.
        tasks: Vec<u32>,
    },
    /// A Streams task (one input partition) started on an instance: its store restored.
    StreamsRestore {
        /// Input partition of the task.
        tp: TopicPartition,
        /// `in-memory` or `persistent`; `+checkpoint` when a local checkpoint was used.
        store: String,
        /// Changelog offset the restore started from.
        from_offset: Offset,
        /// Changelog records replayed into the store.
        restored: usize,
    },
    /// A fault or a recovery by the nemesis.
    Fault {
        /// Fault name (`kill`, `partition`, `heal`, ...).
        name: String,
        /// Targets and parameters, human-readable.
        detail: String,
    },
    /// What a fault did, once each time it acted ([`eosim_sim::effects`]): `kind` is the
    /// effect kind (`messages.duplicate`, `kill`, `fault-point`), `detail` what happened
    /// (`Produce to broker-2 delivered twice`). Recorded as `info` by the process it acted
    /// on.
    Effect {
        /// Effect kind, [`eosim_sim::effects::kind`].
        kind: String,
        /// What it did, human-readable.
        detail: String,
    },
    /// The error rows of one Doris load (Doris' `NumberFilteredRows` / a Routine Load
    /// task's `filteredRows`): input rows the load read and filtered (malformed JSON, a
    /// value that does not fit its column), by source position. Recorded beside the
    /// load's `write`, with the same completion, only when the load has any. Accounted
    /// (not lost) when the load's transaction is VISIBLE in the final [`Value::DorisState`].
    LoadErrors {
        /// The load's label.
        label: String,
        /// The filtered rows' source positions (`id` from the record, `u64::MAX` when it
        /// carries none).
        rows: Vec<RecordRef>,
    },
    /// The Doris FE's final state after the drain: `SHOW ROUTINE LOAD` of every job and
    /// every remembered load transaction (`SHOW TRANSACTION`).
    DorisState {
        /// Routine Load jobs.
        jobs: Vec<DorisJobFinal>,
        /// Load transactions, by id.
        txns: Vec<DorisTxnFinal>,
    },
    /// A marker: the heal-and-drain phase started.
    Drain,
    /// A connector was created through the control API with this configuration.
    ConnectorConfig {
        /// Connector name.
        connector: String,
        /// Its configuration, Kafka Connect's keys.
        config: BTreeMap<String, String>,
    },
    /// A task changed state (`RUNNING`, `FAILED`, ...), as a worker saw it.
    TaskStatus {
        /// Connector name.
        connector: String,
        /// Task id.
        task: u32,
        /// New state, as Connect's REST API spells it.
        state: String,
        /// The failure's text, for `FAILED`.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        trace: Option<String>,
    },
    /// An operator restarted a task through the control API.
    RestartTask {
        /// Connector name.
        connector: String,
        /// Task id.
        task: u32,
    },
    /// The final contents of a source partition up to its high watermark, with keys and
    /// values as text (what a change-data checker replays).
    SourceLog {
        /// Partition.
        tp: TopicPartition,
        /// Records in offset order.
        records: Vec<SourceRecord>,
    },
    /// A source task stored offsets in the offsets topic outside a transaction (Connect's
    /// offset flush, `OffsetStorageWriter`; at-least-once source tasks): invoked with the
    /// offsets, then ok (all written) or info (the flush failed or timed out; they stay
    /// pending for the next flush).
    SourceOffsets {
        /// Connector name.
        connector: String,
        /// Task id.
        task: u32,
        /// Source partition → offset, both as JSON text.
        offsets: Vec<(String, String)>,
    },
    /// The final change log of the source database a source connector reads
    /// (`connect-source`), every event in log order: what the topic must hold.
    ChangeLog {
        /// The events.
        events: Vec<eosim_sim::source_db::ChangeEvent>,
    },
    /// A reader's `SELECT * ... ORDER BY pk` of a target table during the run.
    TableRead {
        /// Table name.
        table: String,
        /// Column names.
        columns: Vec<String>,
        /// Rows, each value as JSON.
        rows: Vec<Vec<serde_json::Value>>,
    },
    /// The final contents of a target table after the drain.
    TableState {
        /// Table name.
        table: String,
        /// Column names.
        columns: Vec<String>,
        /// Rows, each value as JSON.
        rows: Vec<Vec<serde_json::Value>>,
    },
    /// The final contents of a dead-letter queue topic after the drain.
    DlqState {
        /// Topic name.
        topic: String,
        /// Records in partition then offset order.
        records: Vec<DlqRecord>,
    },
}

/// One Routine Load job in a final [`Value::DorisState`]: `SHOW ROUTINE LOAD`'s `State`,
/// `ReasonOfStateChanged` and `Statistic` (apache/doris `RoutineLoadStatistic.summary`:
/// `loadedRows = totalRows - errorRows - unselectedRows`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DorisJobFinal {
    /// Job name.
    pub name: String,
    /// Database.
    pub db: String,
    /// Target table.
    pub table: String,
    /// `State` (`RUNNING`, `PAUSED`, ...).
    pub state: String,
    /// `ReasonOfStateChanged`, when paused or cancelled.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// `totalRows`.
    pub total_rows: u64,
    /// `loadedRows`.
    pub loaded_rows: u64,
    /// `errorRows`.
    pub error_rows: u64,
    /// `unselectedRows`.
    pub unselected_rows: u64,
    /// `committedTaskNum`.
    pub committed_task_num: u64,
    /// `abortedTaskNum`.
    pub aborted_task_num: u64,
}

/// One load transaction in a final [`Value::DorisState`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DorisTxnFinal {
    /// `TransactionId`.
    pub txn_id: u64,
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// `Label`.
    pub label: String,
    /// `TransactionStatus` (`PREPARE`, `PRECOMMITTED`, `COMMITTED`, `VISIBLE`, `ABORTED`).
    pub status: String,
    /// The Routine Load job that began it; `None` for a Stream Load.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job: Option<String>,
}

impl DorisTxnFinal {
    /// COMMITTED or VISIBLE: its rows are (or will be, at the next publish) in the table.
    pub fn is_committed(&self) -> bool {
        self.status == "COMMITTED" || self.status == "VISIBLE"
    }
}

/// A source record as text: the id the workload gave it (header `eosim.id`), its offset,
/// key and value (`None` = null; a value that is not UTF-8 is shown lossily).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// Unique id.
    pub id: u64,
    /// Offset.
    pub offset: Offset,
    /// Key text.
    pub key: Option<String>,
    /// Value text; `None` is a tombstone.
    pub value: Option<String>,
}

/// A dead-letter queue record: the original record's id and its headers (the
/// `__connect.errors.*` context among them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DlqRecord {
    /// The original record's id (its `eosim.id` header), `u64::MAX` without one.
    pub id: u64,
    /// Where the DLQ record is.
    pub tp: TopicPartition,
    /// Its offset in the DLQ.
    pub offset: Offset,
    /// Headers as text, in order.
    pub headers: Vec<(String, String)>,
}

impl DlqRecord {
    /// The value of header `name`, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the send of one record ended, as the history records it: the op kind (`Ok`
/// written, `Info` outcome unknown, `Fail` certainly not written), the delivery when
/// written, and the error's text otherwise.
pub fn send_outcome(
    result: Result<Delivery, ClientError>,
) -> (OpKind, Option<Delivery>, Option<String>) {
    match result {
        Ok(d) => (OpKind::Ok, Some(d), None),
        Err(e) if e.is_ambiguous() => (OpKind::Info, None, Some(e.to_string())),
        Err(e) => (OpKind::Fail, None, Some(e.to_string())),
    }
}

/// The `send` op of record `id` (key `key`) as invoked: partition and offset not known yet.
pub fn send_invoked(id: u64, key: Option<String>) -> Value {
    Value::Send {
        id,
        key,
        tp: None,
        offset: None,
    }
}

/// The completion of the `send` of record `id` (key `key`) to `topic`, simulated and real
/// producers alike: the op kind and error of [`send_outcome`], and the [`Value::Send`] with
/// the partition and offset when written (acks=0 reports offset -1: written, offset
/// unknown).
pub fn send_completion(
    topic: &str,
    id: u64,
    key: Option<String>,
    result: Result<Delivery, ClientError>,
) -> (OpKind, Value, Option<String>) {
    let (kind, delivery, error) = send_outcome(result);
    let (tp, offset) = match delivery {
        Some(d) => (
            Some(TopicPartition::new(topic, d.partition)),
            Some(d.offset).filter(|o| *o >= 0),
        ),
        None => (None, None),
    };
    (
        kind,
        Value::Send {
            id,
            key,
            tp,
            offset,
        },
        error,
    )
}

impl Value {
    /// One line for the change-data variants (`None` for the others).
    pub fn connect_text(&self) -> Option<String> {
        let text = match self {
            Value::ConnectorConfig { connector, config } => {
                format!("connector-config {connector} keys={}", config.len())
            }
            Value::TaskStatus {
                connector,
                task,
                state,
                trace,
            } => {
                let trace = trace
                    .as_deref()
                    .map(|t| format!(" trace={t}"))
                    .unwrap_or_default();
                format!("task-status {connector}-{task} {state}{trace}")
            }
            Value::RestartTask { connector, task } => format!("restart-task {connector}-{task}"),
            Value::SourceLog { tp, records } => format!("source-log tp={tp} n={}", records.len()),
            Value::SourceOffsets {
                connector,
                task,
                offsets,
            } => {
                let offsets: Vec<String> =
                    offsets.iter().map(|(p, o)| format!("{p}={o}")).collect();
                format!("source-offsets {connector}-{task} {}", offsets.join(" "))
            }
            Value::ChangeLog { events } => format!("change-log n={}", events.len()),
            Value::TableRead { table, rows, .. } => {
                format!("table-read {table} rows={}", rows.len())
            }
            Value::TableState { table, rows, .. } => {
                format!("table-state {table} rows={}", rows.len())
            }
            Value::DlqState { topic, records } => {
                let ids: Vec<String> = records.iter().map(|r| r.id.to_string()).collect();
                format!("dlq-state {topic} ids=[{}]", ids.join(","))
            }
            _ => return None,
        };
        Some(text)
    }
}

/// One line of a history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history, 0-based.
    pub index: usize,
    /// Simulated time, ns since the run's start.
    pub time_ns: u64,
    /// Who did it: `producer-0`, `consumer-1`, `nemesis`, `checker`...
    pub process: String,
    /// Phase.
    #[serde(rename = "type")]
    pub kind: OpKind,
    /// What and with which values.
    #[serde(flatten)]
    pub value: Value,
    /// Error text of a `fail` or `info`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// An ordered list of operations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Operations in the order they happened.
    pub ops: Vec<Op>,
}

impl History {
    /// Appends an operation and returns its index.
    pub fn push(
        &mut self,
        time_ns: u64,
        process: &str,
        kind: OpKind,
        value: Value,
        error: Option<String>,
    ) -> usize {
        let index = self.ops.len();
        self.ops.push(Op {
            index,
            time_ns,
            process: process.to_string(),
            kind,
            value,
            error,
        });
        index
    }

    /// The history as JSON lines.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for op in &self.ops {
            out.push_str(&serde_json::to_string(op).expect("ops serialize"));
            out.push('\n');
        }
        out
    }

    /// Parses JSON lines.
    ///
    /// # Errors
    /// The line number and serde's message for the first bad line.
    pub fn from_jsonl(text: &str) -> Result<Self, String> {
        let mut ops = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            ops.push(serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?);
        }
        Ok(Self { ops })
    }

    /// SHA-256 of [`History::to_jsonl`], in hex: the run's `history-hash`. The same bytes
    /// are hashed op by op as they are serialized, without building the whole text.
    pub fn hash(&self) -> String {
        /// `io::Write` into a running digest.
        struct Hashing(Sha256);
        impl std::io::Write for Hashing {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        // Buffered: serde_json writes many small fragments per op, each a digest update.
        let mut digest = std::io::BufWriter::with_capacity(1 << 16, Hashing(Sha256::new()));
        for op in &self.ops {
            serde_json::to_writer(&mut digest, op).expect("ops serialize");
            std::io::Write::write_all(&mut digest, b"\n").expect("hashing cannot fail");
        }
        let Ok(Hashing(digest)) = digest.into_inner() else {
            unreachable!("hashing cannot fail")
        };
        hex::encode(digest.finalize())
    }

    /// Number of nemesis faults (recoveries such as `heal` or `restart` not counted).
    pub fn fault_count(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| match &op.value {
                Value::Fault { name, .. } => !is_recovery(name),
                _ => false,
            })
            .count()
    }
}

/// Whether a nemesis op name is a recovery rather than a fault.
pub fn is_recovery(name: &str) -> bool {
    matches!(
        name,
        "heal" | "restart" | "resume" | "repair" | "unclog" | "release" | "clock-reset"
    )
}

/// A shared recorder handed to every process of a simulation. Cloning shares the history.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<History>>,
}

impl Recorder {
    /// Records an op at `time_ns`.
    pub fn record(
        &self,
        time_ns: u64,
        process: &str,
        kind: OpKind,
        value: Value,
        error: Option<String>,
    ) -> usize {
        self.inner
            .lock()
            .expect("recorder lock")
            .push(time_ns, process, kind, value, error)
    }

    /// Makes room for at least `additional` more ops, so a long history is not copied
    /// over and over as it grows (a run of 20,000 records records about 40,000 ops).
    pub fn reserve(&self, additional: usize) {
        self.inner
            .lock()
            .expect("recorder lock")
            .ops
            .reserve(additional);
    }

    /// The history so far, moved out: the recorder holds an empty history afterwards, and
    /// what is recorded later starts a new one at index 0. A run takes its history once,
    /// when nothing more is recorded (a copy of a long history cost about 4 % of a seed's
    /// CPU).
    pub fn take(&self) -> History {
        std::mem::take(&mut *self.inner.lock().expect("recorder lock"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_the_sha256_of_the_jsonl_text() {
        let mut h = History::default();
        h.push(
            1,
            "nemesis",
            OpKind::Info,
            Value::Fault {
                name: "kill".into(),
                detail: "broker-1 \"quoted\" ünïcode".into(),
            },
            None,
        );
        h.push(
            2,
            "producer-0",
            OpKind::Fail,
            Value::Fault {
                name: "heal".into(),
                detail: String::new(),
            },
            Some("timed out".into()),
        );
        let whole = hex::encode(Sha256::digest(h.to_jsonl().as_bytes()));
        assert_eq!(h.hash(), whole);
        assert_eq!(
            History::default().hash(),
            hex::encode(Sha256::digest(b"")),
            "an empty history hashes the empty text"
        );
    }
}

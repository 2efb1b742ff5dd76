//! The Routine Load task executor: the BE's side of a Routine Load task (Doris'
//! `be/src/runtime/routine_load/routine_load_task_executor.cpp` and its Kafka data
//! consumer), written against eosim's clients: it asks the FE for a task, consumes one
//! batch with the Kafka consumer client (manual assignment at the task's offsets, the
//! job's `property.isolation.level` and `property.group.id`), writes it into the task's
//! transaction on the BE, and commits the transaction with the attachment whose
//! next offsets are the consumer's positions after the batch (never "last offset + 1":
//! offsets are not dense). It runs on the `doris-be` node, so a BE crash kills the task.
//!
//! A batch ends at `max_batch_rows` rows, `max_batch_size` bytes or `max_batch_interval`
//! seconds, whichever comes first. A batch with no record is aborted with an attachment
//! that moves nothing (Doris: `all partitions have no load data`).
//!
//! # Fault point and bug switch (cases.md F7)
//! With probability `task_fail_probability` a task fails after consuming its batch and
//! before its commit (`doris:task-failed-before-commit`); it aborts its transaction. The
//! right abort carries no attachment, so the FE moves nothing and the renewed task reads
//! the batch again. `progress_from_consumer_position` is the F7 bug: the abort carries the
//! consumer's position as if the batch had been read into the table, and the FE moves the
//! job's progress past rows it never loaded.

use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::doris::{DorisClientError, SimDoris};
use crate::client::{AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use eosim_sim::clock::now_ns;
use eosim_sim::doris::fe_routine_load::TaskAssignment;
use eosim_sim::doris::routine_load::{KafkaOffset, RlTaskTxnCommitAttachment};
use eosim_sim::doris::service::{BeRequest, BeResponse, FeRequest, FeResponse};
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::rand::Rng;
use std::collections::BTreeMap;
use std::time::Duration;

/// How the executor runs.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Kafka brokers in the cluster.
    pub brokers: u32,
    /// The history.
    pub recorder: Recorder,
    /// Process name in the history.
    pub process: String,
    /// Probability that a task fails after consuming its batch (fault point).
    pub task_fail_probability: f64,
    /// F7's bug switch: a failed task's abort carries the consumer position.
    pub progress_from_consumer_position: bool,
    /// The Doris client's request timeout, ms.
    pub request_timeout_ms: u64,
}

/// Maps a consumed record to the record id its JSON `id` field carries. A value that is
/// not JSON (the workload's malformed records are a record cut short) is searched for the
/// text `"id":"<digits>"` so that it keeps its identity in the history; `u64::MAX` when
/// neither finds one.
pub fn record_ref(tp: &TopicPartition, offset: Offset, value: Option<&[u8]>) -> RecordRef {
    let id = value
        .and_then(|v| {
            serde_json::from_slice::<serde_json::Value>(v)
                .ok()
                .and_then(|v| v.get("id").and_then(id_of))
                .or_else(|| id_in_text(&String::from_utf8_lossy(v)))
        })
        .unwrap_or(u64::MAX);
    RecordRef {
        id,
        key: None,
        tp: tp.clone(),
        offset,
    }
}

/// The digits after the first `"id":"` of `text`, as a record id.
fn id_in_text(text: &str) -> Option<u64> {
    let rest = &text[text.find("\"id\":\"")? + 6..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A clicklog `id` (a string or a number) as a record id.
pub fn id_of(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

/// Runs tasks until the node dies: take a task, run it, repeat.
pub async fn executor_process(cfg: ExecutorConfig) {
    let Ok(doris) = SimDoris::connect(cfg.request_timeout_ms).await else {
        return;
    };
    loop {
        match doris.fe(FeRequest::TakeTask).await {
            Ok(FeResponse::Task(Some(task))) => run_task(&cfg, &doris, *task).await,
            _ => madsim::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

struct Batch {
    records: Vec<ConsumedRecord>,
    next_offsets: BTreeMap<i32, i64>,
    bytes: u64,
    elapsed_ms: u64,
}

async fn consume(cfg: &ExecutorConfig, task: &TaskAssignment) -> Option<Batch> {
    let conn = Connection::open(cfg.brokers).await.ok()?;
    let props = &task.props;
    let group = props
        .group_id
        .clone()
        .unwrap_or_else(|| format!("doris-rl-{}", task.job_id));
    let mut config = ConsumerConfig::new(group);
    config.isolation_level = props.isolation_level.kafka();
    let mut assignment = Vec::new();
    for (p, offset) in &task.offsets {
        let tp = TopicPartition::new(&props.kafka_topic, *p as u32);
        let start = match offset {
            KafkaOffset::Next(n) => Some(*n),
            KafkaOffset::Beginning | KafkaOffset::End => None,
        };
        if *offset == KafkaOffset::Beginning {
            config.auto_offset_reset = AutoOffsetReset::Earliest;
        }
        assignment.push((tp, start));
    }
    let mut consumer = SimConsumer::new(conn, config);
    consumer.assign(&assignment);
    let started = madsim::time::Instant::now();
    let interval = Duration::from_secs(props.max_batch_interval_s);
    let rows_max = props.max_batch_rows as usize;
    let mut records: Vec<ConsumedRecord> = Vec::new();
    let mut bytes = 0u64;
    while records.len() < rows_max && bytes < props.max_batch_size {
        let left = interval.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        let polled = consumer.poll(left.min(Duration::from_secs(1))).await.ok()?;
        for r in polled {
            bytes += r.value.as_ref().map_or(0, |v| v.len() as u64);
            records.push(r);
        }
    }
    let mut next_offsets = BTreeMap::new();
    // Records past the row limit go back: the next task reads them from their offset.
    let over = records.split_off(records.len().min(rows_max));
    for (tp, _) in &assignment {
        let first_over = over.iter().find(|r| &r.tp == tp).map(|r| r.offset);
        if let Some(next) = first_over.or_else(|| consumer.position(tp)) {
            next_offsets.insert(tp.partition as i32, next);
        }
    }
    consumer.close().await;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    Some(Batch {
        records,
        next_offsets,
        bytes,
        elapsed_ms,
    })
}

fn attachment(task: &TaskAssignment, batch: &Batch, filtered: u64) -> RlTaskTxnCommitAttachment {
    RlTaskTxnCommitAttachment {
        job_id: task.job_id,
        task_id: task.task_id,
        total_rows: batch.records.len() as u64,
        filtered_rows: filtered,
        unselected_rows: 0,
        received_bytes: batch.bytes,
        task_execution_time_ms: batch.elapsed_ms.max(1),
        next_offsets: batch.next_offsets.clone(),
    }
}

/// Aborts the task's transaction; whether the FE answered that it did.
async fn abort(
    doris: &SimDoris,
    task: &TaskAssignment,
    reason: &str,
    a: Option<RlTaskTxnCommitAttachment>,
) -> bool {
    let req = FeRequest::AbortTask {
        txn_id: task.txn_id,
        reason: reason.into(),
        attachment: a,
        pause: false,
    };
    doris.fe(req).await.is_ok()
}

async fn run_task(cfg: &ExecutorConfig, doris: &SimDoris, task: TaskAssignment) {
    let Some(batch) = consume(cfg, &task).await else {
        // Kafka unreachable: Doris aborts the task and pauses the job (auto-resumable).
        let req = FeRequest::AbortTask {
            txn_id: task.txn_id,
            reason: "failed to get kafka partition meta".into(),
            attachment: None,
            pause: true,
        };
        let _ = doris.fe(req).await;
        return;
    };
    if batch.records.is_empty() {
        let a = attachment(&task, &batch, 0);
        abort(doris, &task, "all partitions have no load data", Some(a)).await;
        return;
    }
    let inputs: Vec<String> = batch
        .records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).into_owned())
        .collect();
    let write = BeRequest::Write {
        txn_id: task.txn_id,
        spec: task.spec.clone(),
        inputs,
    };
    let summary = match doris.be(write).await {
        Ok(BeResponse::Written(s)) => s,
        Ok(_) | Err(_) => {
            abort(doris, &task, "load channel failed", None).await;
            return;
        }
    };
    let fails = cfg.task_fail_probability > 0.0
        && madsim::rand::thread_rng().gen_bool(cfg.task_fail_probability.min(1.0));
    if fails {
        eosim_sim::mark!("doris:task-failed-before-commit");
        return fail_task(cfg, doris, &task, &batch, summary.filtered_rows).await;
    }
    let loaded: Vec<usize> = loaded_indices(batch.records.len(), &summary.errors);
    let errors: Vec<usize> = summary.errors.iter().map(|(i, _)| *i).collect();
    let rows = Rows {
        loaded: &loaded,
        errors: &errors,
    };
    commit(cfg, doris, &task, &batch, rows, summary.filtered_rows).await;
}

fn loaded_indices(n: usize, errors: &[(usize, eosim_sim::doris::types::RowError)]) -> Vec<usize> {
    (0..n)
        .filter(|i| !errors.iter().any(|(e, _)| e == i))
        .collect()
}

async fn fail_task(
    cfg: &ExecutorConfig,
    doris: &SimDoris,
    task: &TaskAssignment,
    batch: &Batch,
    filtered: u64,
) {
    if !cfg.progress_from_consumer_position {
        abort(doris, task, "task failed before commit", None).await;
        return;
    }
    eosim_sim::mark!("doris:bug-abort-with-consumer-position");
    let a = attachment(task, batch, filtered);
    let offsets = commit_offsets(task, &a);
    let rec = |kind, error| {
        let value = Value::Commit {
            offsets: offsets.clone(),
        };
        cfg.recorder
            .record(now_ns(), &cfg.process, kind, value, error);
    };
    // The FE records the attachment's offsets as the job's progress: a commit of progress
    // without the rows.
    rec(OpKind::Invoke, None);
    if abort(doris, task, "task failed before commit", Some(a)).await {
        rec(OpKind::Ok, None);
    } else {
        rec(OpKind::Info, Some("abort unanswered".into()));
    }
}

fn commit_offsets(
    task: &TaskAssignment,
    a: &RlTaskTxnCommitAttachment,
) -> Vec<(TopicPartition, Offset)> {
    a.next_offsets
        .iter()
        .map(|(p, o)| (TopicPartition::new(&task.props.kafka_topic, *p as u32), *o))
        .collect()
}

/// The batch's rows by outcome: indexes loaded, indexes filtered as error rows.
#[derive(Clone, Copy)]
struct Rows<'a> {
    loaded: &'a [usize],
    errors: &'a [usize],
}

fn refs(batch: &Batch, indexes: &[usize]) -> Vec<RecordRef> {
    indexes
        .iter()
        .map(|&i| {
            let r = &batch.records[i];
            record_ref(&r.tp, r.offset, r.value.as_deref())
        })
        .collect()
}

/// The commit: one transaction for the rows, the error rows and the progress, so the
/// history records the `write`, the `load-errors` (when there are any) and the `commit`
/// with the same outcome.
async fn commit(
    cfg: &ExecutorConfig,
    doris: &SimDoris,
    task: &TaskAssignment,
    batch: &Batch,
    indexes: Rows<'_>,
    filtered: u64,
) {
    let rows = refs(batch, indexes.loaded);
    let errors = refs(batch, indexes.errors);
    let label = task.label.clone();
    let a = attachment(task, batch, filtered);
    let offsets = commit_offsets(task, &a);
    let rec = |kind, error: Option<String>| {
        let t = now_ns();
        let write = Value::Write { rows: rows.clone() };
        cfg.recorder
            .record(t, &cfg.process, kind, write, error.clone());
        if !errors.is_empty() {
            let value = Value::LoadErrors {
                label: label.clone(),
                rows: errors.clone(),
            };
            cfg.recorder
                .record(t, &cfg.process, kind, value, error.clone());
        }
        let commit = Value::Commit {
            offsets: offsets.clone(),
        };
        cfg.recorder.record(t, &cfg.process, kind, commit, error);
    };
    rec(OpKind::Invoke, None);
    let req = FeRequest::CommitTask {
        txn_id: task.txn_id,
        attachment: a,
    };
    match doris.fe(req).await {
        Ok(_) => rec(OpKind::Ok, None),
        Err(e @ DorisClientError::Doris(_)) => {
            rec(OpKind::Fail, Some(e.to_string()));
            abort(doris, task, &e.to_string(), None).await;
        }
        Err(e) => rec(OpKind::Info, Some(e.to_string())),
    }
}

//! A source task's start on a simulated worker (`Worker.startSourceTask`,
//! `ExactlyOnceWorkerSourceTask.initializeAndStart`), then its loop
//! ([`super::source_loop`]) on the simulated clients.
//!
//! # Start
//! 1. The connector's [`SourceFactory`] builds the task for its [`TaskRun`].
//! 2. Exactly-once (`exactly.once.source.support=enabled`): the task's transactional
//!    producer (`transactional.id = <group.id>-<connector>-<task>`) is initialized, retried
//!    every 500 ms until it is: InitProducerId fences the task's older producer and
//!    aborts its open transaction, so the offsets read next are final.
//! 3. The offsets topic (`offset.storage.topic`) is read to its end (ListOffsets, then
//!    fetches from offset 0; read_committed under exactly-once, as KIP-618's offset
//!    reader, else read_uncommitted), keeping the last offset stored per source
//!    partition of this connector (a null value deletes it), retried every 500 ms.
//! 4. The task starts with those offsets, then the loop runs until stopped or failed.
//!
//! A kill of the worker node takes the task with it mid-way: at-least-once, nothing since
//! the last flush is stored; exactly-once, its open transaction stays open until the next
//! run's InitProducerId (or the transaction timeout) aborts it.

use super::config::ConnectorConfig;
use super::herder::Assignment;
use super::sink_loop::{StopSignal, TaskExit};
use super::source_config::{transaction_settings, ExactlyOnceSourceSupport};
use super::source_loop::{SourceDelivery, SourceLoopConfig, SourceTaskLoop};
use super::source_task::{parse_offset_key, SourceTask, StoredOffsets};
use super::worker::{SimHost, TaskRun, WorkerRuntime};
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::{Consumer, ConsumerConfig, ProducerConfig, TransactionalProducer};
use eosim_sim::kafka::{Isolation, OffsetSpec, Request, Response, TopicPartition};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// Builds a connector's source task for one run (plugin loading and the task's
/// configuration); `Err` fails the task.
pub type SourceFactory =
    Arc<dyn Fn(&ConnectorConfig, &TaskRun) -> Result<Box<dyn SourceTask>, String> + Send + Sync>;

/// What the workers of a source pipeline share.
#[derive(Clone)]
pub struct SourceRuntime {
    /// Source plugins.
    pub factory: SourceFactory,
    /// Run-unique numbers of the transactions the tasks record.
    pub txn_ids: Arc<AtomicU64>,
}

/// A bound on one request or transactional call of the start, ms.
const CALL_TIMEOUT_MS: u64 = 5_000;
/// Connect's source producers never give up on a record (`delivery.timeout.ms` =
/// `Integer.MAX_VALUE`, `Worker.baseProducerConfigs`), ms.
const SOURCE_DELIVERY_TIMEOUT_MS: u64 = i32::MAX as u64;

type SimLoop = SourceTaskLoop<SimHost, SimProducer, SimTransactionalProducer>;

/// Runs one source task until it is stopped or fails.
///
/// # Errors
/// The trace of a failed task (it goes FAILED).
pub async fn run_source_task(
    rt: &WorkerRuntime,
    source: &SourceRuntime,
    worker: &str,
    a: &Assignment,
    run: &TaskRun,
    stop: StopSignal,
) -> Result<(), String> {
    let config = rt
        .herder
        .connector_config(&a.connector)
        .ok_or_else(|| format!("no connector {}", a.connector))?;
    let mut task = (source.factory)(&config, run)?;
    let conn = Connection::open(rt.brokers)
        .await
        .map_err(|e| e.to_string())?;
    let wc = rt.herder.worker_config().clone();
    let exactly_once = wc.exactly_once_source_support == ExactlyOnceSourceSupport::Enabled;
    let delivery = match exactly_once {
        true => exactly_once_delivery(&conn, &config, a, &wc, &stop).await?,
        false => at_least_once_delivery(&conn),
    };
    let isolation = match exactly_once {
        true => Isolation::ReadCommitted,
        false => Isolation::ReadUncommitted,
    };
    let topic = &wc.offset_storage_topic;
    let offsets = loop {
        match read_offsets(&conn, topic, isolation, &a.connector).await {
            Ok(offsets) => break offsets,
            Err(e) => tracing::debug!(%e, "reading the offsets topic"),
        }
        if stop.is_stopped() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    task.start(&offsets).map_err(|e| e.to_string())?;
    let loop_config = SourceLoopConfig {
        connector: a.connector.clone(),
        task: a.task,
        offsets_topic: topic.clone(),
        flush_interval_ms: wc.offset_flush_interval_ms,
        flush_timeout_ms: wc.offset_flush_timeout_ms,
        txn_call_timeout_ms: CALL_TIMEOUT_MS,
    };
    let host = SimHost {
        rt: rt.clone(),
        worker: worker.to_string(),
        a: a.clone(),
    };
    let ids = source.txn_ids.clone();
    let mut task_loop: SimLoop = SourceTaskLoop::new(host, loop_config, task, delivery, ids, stop);
    match task_loop.run().await {
        TaskExit::Stopped => Ok(()),
        TaskExit::Failed(trace) => Err(trace),
    }
}

/// The producer settings of Connect's source tasks: acks=all, idempotent, never giving up.
fn source_producer_config() -> ProducerConfig {
    ProducerConfig {
        delivery_timeout_ms: SOURCE_DELIVERY_TIMEOUT_MS,
        max_block_ms: 60_000,
        ..ProducerConfig::default()
    }
}

fn at_least_once_delivery(
    conn: &Connection,
) -> SourceDelivery<SimProducer, SimTransactionalProducer> {
    SourceDelivery::AtLeastOnce {
        producer: SimProducer::new(conn.clone(), source_producer_config()),
        offsets: SimProducer::new(conn.clone(), source_producer_config()),
    }
}

/// The task's transactional producer, initialized (retried every 500 ms until it is, or
/// until the task is stopped).
async fn exactly_once_delivery(
    conn: &Connection,
    config: &ConnectorConfig,
    a: &Assignment,
    wc: &super::config::WorkerConfig,
    stop: &StopSignal,
) -> Result<SourceDelivery<SimProducer, SimTransactionalProducer>, String> {
    let (boundary, interval) = transaction_settings(&config.raw).map_err(|e| e.to_string())?;
    let transactional_id = format!("{}-{}-{}", wc.group_id, a.connector, a.task);
    let mut txn_config = TxnProducerConfig::new(transactional_id.clone());
    txn_config.producer = source_producer_config();
    let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
    loop {
        let producer = SimTransactionalProducer::new(conn.clone(), txn_config.clone());
        match producer.init_transactions(timeout).await {
            Ok(()) => {
                return Ok(SourceDelivery::ExactlyOnce {
                    producer,
                    transactional_id,
                    boundary,
                    interval_ms: interval.unwrap_or(wc.offset_flush_interval_ms),
                })
            }
            Err(e) => tracing::debug!(%e, "init_transactions of a source task"),
        }
        if stop.is_stopped() {
            return Err("stopped before its producer was initialized".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads `topic` to its end with `isolation` and returns the last offset stored per
/// source partition of `connector` (`KafkaBasedLog.readToEnd`).
///
/// # Errors
/// Metadata, ListOffsets or a fetch failed, or the end was not reached in 100 polls.
async fn read_offsets(
    conn: &Connection,
    topic: &str,
    isolation: Isolation,
    connector: &str,
) -> Result<StoredOffsets, String> {
    let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
    conn.refresh_metadata(&[topic.to_string()], timeout)
        .await
        .map_err(|e| e.to_string())?;
    let partitions = conn.partition_count(topic).ok_or("no metadata")?;
    let mut ends = Vec::new();
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        let leader = conn
            .leader(&tp)
            .ok_or_else(|| format!("{tp} has no leader"))?;
        let spec = OffsetSpec::Latest(isolation);
        let request = Request::ListOffsets {
            tp: tp.clone(),
            spec,
        };
        match conn.request(leader, request, timeout).await {
            Ok(Response::ListOffsets { offset }) => ends.push((tp, offset)),
            other => return Err(format!("ListOffsets of {tp}: {other:?}")),
        }
    }
    let mut config = ConsumerConfig::new("");
    config.isolation_level = isolation;
    let mut consumer = SimConsumer::new(conn.clone(), config);
    let start: Vec<(TopicPartition, Option<i64>)> =
        ends.iter().map(|(tp, _)| (tp.clone(), Some(0))).collect();
    consumer.assign(&start);
    let mut offsets = StoredOffsets::new();
    for _ in 0..100 {
        let at_end = ends
            .iter()
            .all(|(tp, end)| consumer.position(tp).is_some_and(|p| p >= *end));
        if at_end {
            consumer.close().await;
            return Ok(offsets);
        }
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .map_err(|e| e.to_string())?;
        for r in records {
            let key = r
                .key
                .as_ref()
                .map(|k| String::from_utf8_lossy(k).into_owned());
            let Some((owner, partition)) = key.as_deref().and_then(parse_offset_key) else {
                continue;
            };
            if owner != connector {
                continue;
            }
            let value = r
                .value
                .as_ref()
                .and_then(|v| serde_json::from_slice(v).ok());
            match value {
                Some(offset) => offsets.insert(partition.to_string(), offset),
                None => offsets.remove(&partition.to_string()),
            };
        }
    }
    consumer.close().await;
    Err(format!("{topic} not read to its end in 100 polls"))
}

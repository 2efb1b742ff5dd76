//! A source task's start on a simulated worker (`Worker.startSourceTask`,
//! `ExactlyOnceWorkerSourceTask.initializeAndStart`), then its loop
//! ([`super::source_loop`]) on the simulated clients.
//!
//! The start itself (the KIP-618 producer's InitProducerId, then the offsets topic read to
//! its end) is [`super::source_start`], shared with the real tier's source worker; this
//! module gives it the simulated clients (`SimSourceClients`: a connection's producers
//! and an offsets read by ListOffsets and fetches) and the simulated worker as its host.
//!
//! A kill of the worker node takes the task with it mid-way: at-least-once, nothing since
//! the last flush is stored; exactly-once, its open transaction stays open until the next
//! run's InitProducerId (or the transaction timeout) aborts it.

use super::config::ConnectorConfig;
use super::herder::Assignment;
use super::sink_loop::{StopSignal, TaskExit};
use super::source_start::{start_source_task, SourceClients, SourceStart, CALL_TIMEOUT_MS};
use super::source_task::{apply_offset_record, SourceTask, StoredOffsets};
use super::worker::{SimHost, TaskRun, WorkerRuntime};
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::TxnSettings;
use crate::client::{Consumer, ConsumerConfig, ProducerConfig};
use async_trait::async_trait;
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

/// The simulated clients of one task run: its connection's producers and offsets reads.
struct SimSourceClients {
    conn: Connection,
}

#[async_trait]
impl SourceClients for SimSourceClients {
    type Producer = SimProducer;
    type Txn = SimTransactionalProducer;

    fn producer(&self, config: ProducerConfig) -> Result<SimProducer, String> {
        Ok(SimProducer::new(self.conn.clone(), config))
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<SimTransactionalProducer, String> {
        let mut config = TxnProducerConfig::new(settings.transactional_id.clone());
        config.transaction_timeout_ms = settings.transaction_timeout_ms;
        config.producer = settings.producer.clone();
        Ok(SimTransactionalProducer::new(self.conn.clone(), config))
    }

    async fn read_offsets(
        &self,
        topic: &str,
        isolation: Isolation,
        connector: &str,
    ) -> Result<StoredOffsets, String> {
        read_offsets(&self.conn, topic, isolation, connector).await
    }
}

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
    let task = (source.factory)(&config, run)?;
    let conn = Connection::open(rt.brokers)
        .await
        .map_err(|e| e.to_string())?;
    let wc = rt.herder.worker_config().clone();
    let host = SimHost {
        rt: rt.clone(),
        worker: worker.to_string(),
        a: a.clone(),
    };
    let start = SourceStart {
        worker: &wc,
        connector: &config,
        task: a.task,
        txn_ids: source.txn_ids.clone(),
        stop,
    };
    let clients = SimSourceClients { conn };
    let Some(mut task_loop) = start_source_task(&clients, host, start, task).await? else {
        return Ok(());
    };
    match task_loop.run().await {
        TaskExit::Stopped => Ok(()),
        TaskExit::Failed(trace) => Err(trace),
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
            apply_offset_record(
                &mut offsets,
                connector,
                r.key.as_deref(),
                r.value.as_deref(),
            );
        }
    }
    consumer.close().await;
    Err(format!("{topic} not read to its end in 100 polls"))
}

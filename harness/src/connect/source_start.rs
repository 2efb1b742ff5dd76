//! A source task's start over the client traits (`Worker.startSourceTask`,
//! `ExactlyOnceWorkerSourceTask.initializeAndStart`), shared by the simulated worker
//! (`source_worker`, under `--cfg madsim`) and the real tier's source worker
//! process (`real::run::source_instance`): each side gives its clients
//! ([`SourceClients`]) and its host, this builds the loop of [`super::source_loop`].
//!
//! # Start
//! 1. Exactly-once (`exactly.once.source.support=enabled`): the task's transactional
//!    producer (`transactional.id = <group.id>-<connector>-<task>`) is initialized, retried
//!    every 500 ms until it is: InitProducerId fences the task's older producer and
//!    aborts its open transaction, so the offsets read next are final. At least once: the
//!    task's producer and the offset store's producer.
//! 2. The offsets topic (`offset.storage.topic`) is read to its end
//!    ([`SourceClients::read_offsets`]: read_committed under exactly-once, as KIP-618's
//!    offset reader, else read_uncommitted), keeping the last offset stored per source
//!    partition of this connector ([`super::source_task::apply_offset_record`]), retried
//!    every 500 ms.
//! 3. The task starts with those offsets; the loop is returned, not run.

use super::config::{ConnectorConfig, WorkerConfig};
use super::sink_loop::{StopSignal, TaskHost};
use super::source_config::{exactly_once, offsets_isolation, transaction_settings};
use super::source_loop::{SourceDelivery, SourceLoopConfig, SourceTaskLoop};
use super::source_task::{SourceTask, StoredOffsets};
use crate::client::TxnSettings;
use crate::client::{Producer, ProducerConfig, TransactionalProducer};
use async_trait::async_trait;
use eosim_sim::kafka::Isolation;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A bound on one request or transactional call of the start, ms.
pub const CALL_TIMEOUT_MS: u64 = 5_000;
/// Connect's source producers never give up on a record (`delivery.timeout.ms` =
/// `Integer.MAX_VALUE`, `Worker.baseProducerConfigs`), ms.
const SOURCE_DELIVERY_TIMEOUT_MS: u64 = i32::MAX as u64;
/// Kafka's default `transaction.timeout.ms`, which Connect's task producers keep.
const SOURCE_TRANSACTION_TIMEOUT_MS: u64 = 60_000;
/// Between two attempts of a start step (InitProducerId, the offsets read), ms.
const START_RETRY_MS: u64 = 500;

/// The clients a worker starts a source task with: the simulated ones or rdkafka.
#[async_trait]
pub trait SourceClients: Send + Sync {
    /// The at-least-once producers.
    type Producer: Producer;
    /// The exactly-once producer.
    type Txn: TransactionalProducer;

    /// A producer with `config`.
    ///
    /// # Errors
    /// The client library refuses the configuration.
    fn producer(&self, config: ProducerConfig) -> Result<Self::Producer, String>;

    /// A transactional producer with `settings`, not yet initialized.
    ///
    /// # Errors
    /// The client library refuses the configuration.
    fn txn_producer(&self, settings: &TxnSettings) -> Result<Self::Txn, String>;

    /// The offsets topic `topic` read to its end with `isolation`: the last offset stored
    /// per source partition of `connector` (`KafkaBasedLog.readToEnd`).
    ///
    /// # Errors
    /// Metadata, offsets or a fetch failed, or the end was not reached in time.
    async fn read_offsets(
        &self,
        topic: &str,
        isolation: Isolation,
        connector: &str,
    ) -> Result<StoredOffsets, String>;
}

/// Which task of which connector is started, and how.
pub struct SourceStart<'a> {
    /// The worker's configuration (`[connect] worker`).
    pub worker: &'a WorkerConfig,
    /// The connector's configuration.
    pub connector: &'a ConnectorConfig,
    /// The task id.
    pub task: u32,
    /// Run-unique numbers of the transactions the task records.
    pub txn_ids: Arc<AtomicU64>,
    /// The worker's stop request.
    pub stop: StopSignal,
}

/// The producer settings of Connect's source tasks: acks=all, idempotent, never giving up.
pub fn source_producer_config() -> ProducerConfig {
    ProducerConfig {
        delivery_timeout_ms: SOURCE_DELIVERY_TIMEOUT_MS,
        max_block_ms: 60_000,
        ..ProducerConfig::default()
    }
}

/// The task's `transactional.id` under KIP-618: `<group.id>-<connector>-<task>`
/// (`Worker.taskTransactionalId`).
pub fn task_transactional_id(worker: &WorkerConfig, connector: &str, task: u32) -> String {
    format!("{}-{connector}-{task}", worker.group_id)
}

/// The source task loop of `task` on `clients` and `host`, started (see the module docs);
/// `None` when the worker was stopped while it read the offsets.
///
/// # Errors
/// The trace of a task that fails at its start (it goes FAILED).
pub async fn start_source_task<C: SourceClients, H: TaskHost>(
    clients: &C,
    host: H,
    start: SourceStart<'_>,
    mut task: Box<dyn SourceTask>,
) -> Result<Option<SourceTaskLoop<H, C::Producer, C::Txn>>, String> {
    let wc = start.worker;
    let delivery = match exactly_once(wc) {
        true => exactly_once_delivery(clients, &start).await?,
        false => SourceDelivery::AtLeastOnce {
            producer: clients.producer(source_producer_config())?,
            offsets: clients.producer(source_producer_config())?,
        },
    };
    let isolation = offsets_isolation(wc);
    let topic = &wc.offset_storage_topic;
    let name = &start.connector.name;
    let offsets = loop {
        match clients.read_offsets(topic, isolation, name).await {
            Ok(offsets) => break offsets,
            Err(e) => tracing::debug!(%e, "reading the offsets topic"),
        }
        if start.stop.is_stopped() {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(START_RETRY_MS)).await;
    };
    task.start(&offsets).map_err(|e| e.to_string())?;
    let loop_config = SourceLoopConfig {
        connector: name.clone(),
        task: start.task,
        offsets_topic: topic.clone(),
        flush_interval_ms: wc.offset_flush_interval_ms,
        flush_timeout_ms: wc.offset_flush_timeout_ms,
        txn_call_timeout_ms: CALL_TIMEOUT_MS,
    };
    Ok(Some(SourceTaskLoop::new(
        host,
        loop_config,
        task,
        delivery,
        start.txn_ids,
        start.stop,
    )))
}

/// The task's transactional producer, initialized (retried every 500 ms until it is, or
/// until the task is stopped).
async fn exactly_once_delivery<C: SourceClients>(
    clients: &C,
    start: &SourceStart<'_>,
) -> Result<SourceDelivery<C::Producer, C::Txn>, String> {
    let (wc, config) = (start.worker, start.connector);
    let (boundary, interval) = transaction_settings(&config.raw).map_err(|e| e.to_string())?;
    let transactional_id = task_transactional_id(wc, &config.name, start.task);
    let settings = TxnSettings {
        transactional_id: transactional_id.clone(),
        transaction_timeout_ms: SOURCE_TRANSACTION_TIMEOUT_MS,
        producer: source_producer_config(),
    };
    let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
    loop {
        let producer = clients.txn_producer(&settings)?;
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
        if start.stop.is_stopped() {
            return Err("stopped before its producer was initialized".into());
        }
        tokio::time::sleep(Duration::from_millis(START_RETRY_MS)).await;
    }
}

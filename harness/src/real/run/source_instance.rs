//! One Kafka Connect source task as an `eosim worker --role source-task` process of a real
//! run (pipeline `connect-source`, [`super::connect_source`]): the start of
//! [`crate::connect::source_start`] and the loop of [`crate::connect::source_loop`]
//! (`WorkerSourceTask`, or KIP-618's `ExactlyOnceWorkerSourceTask`), both shared with the
//! simulation, over rdkafka, so that a kill of the process is a real SIGKILL of a worker
//! and its task.
//!
//! # What it runs
//! - The connector: the scenario's `[connector]` (a Debezium PostgreSQL source), validated
//!   against `[connect] worker` as the herder validates it; `connect-<i>` runs task `i - 1`.
//! - Its task reads the change log of `[source]`, generated in the process from the
//!   scenario alone ([`ChangeLog::generate`]), so every incarnation reads the same events
//!   at the same times since the run's epoch: the source database is the simulation's
//!   model on the real tier too (see [`super::connect_source`]).
//! - At least once: an idempotent producer for the records and one for the offsets topic.
//!   Exactly once: librdkafka's transactional producer, `transactional.id =
//!   <group.id>-<connector>-<task>`, initialized before the offsets are read (which aborts
//!   what a killed incarnation left open).
//! - The stored offsets: the offsets topic read from offset 0 ([`stored_offsets`]),
//!   read_committed under KIP-618.
//!
//! # Output
//! Ops on stdout as the sink task prints them: `task-status` RUNNING at the start and
//! FAILED with its trace when the task fails (the process then exits non-zero), `send`
//! invoke / ok per record, `source-offsets` per flush (at least once), `txn` per
//! transaction (exactly once). Transactions are numbered from the process's start in ns
//! since the run's epoch, one up per transaction: a later incarnation starts seconds
//! later, so numbers of two incarnations never meet.

use super::connect_source::stored_offsets;
use super::connect_task::{connector_raw, start_running, status, task_id, RealHost};
use super::copier_instance::real_txn_producer;
use super::worker_spec::WorkerSpec;
use crate::client::real::{RealProducer, RealTransactionalProducer};
use crate::client::ProducerConfig;
use crate::client::TxnSettings;
use crate::connect::config::WorkerConfig;
use crate::connect::postgres_source::PostgresSourceTask;
use crate::connect::sink_loop::{StopSignal, TaskExit};
use crate::connect::source_config::{parse_connector, SourceConnectorConfig};
use crate::connect::source_start::{start_source_task, SourceClients, SourceStart};
use crate::connect::source_task::StoredOffsets;
use crate::history::OpKind;
use async_trait::async_trait;
use eosim_sim::kafka::Isolation;
use eosim_sim::source_db::ChangeLog;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// rdkafka clients on the run's brokers.
struct RealSourceClients {
    bootstrap: String,
}

#[async_trait]
impl SourceClients for RealSourceClients {
    type Producer = RealProducer;
    type Txn = RealTransactionalProducer;

    fn producer(&self, config: ProducerConfig) -> Result<RealProducer, String> {
        RealProducer::new(&self.bootstrap, config).map_err(|e| format!("producer: {e}"))
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<RealTransactionalProducer, String> {
        real_txn_producer(&self.bootstrap, settings)
    }

    async fn read_offsets(
        &self,
        topic: &str,
        isolation: Isolation,
        connector: &str,
    ) -> Result<StoredOffsets, String> {
        let (bootstrap, topic, connector) = (
            self.bootstrap.clone(),
            topic.to_string(),
            connector.to_string(),
        );
        // librdkafka's base consumer blocks: off the runtime's workers.
        tokio::task::spawn_blocking(move || {
            stored_offsets(&bootstrap, &topic, isolation, &connector)
        })
        .await
        .map_err(|e| format!("offsets read: {e}"))?
    }
}

/// Runs the task until it fails (then `Err` with its trace: the process exits non-zero) or
/// the process is killed.
///
/// # Errors
/// A connector or worker configuration that does not validate, a client that cannot be
/// created, the task's failure.
pub async fn run_source_worker(spec: &WorkerSpec) -> Result<(), String> {
    let wc = WorkerConfig::parse(&spec.scenario.connect.worker)
        .map_err(|e| format!("[connect] worker: {e}"))?;
    let config = parse_connector(&connector_raw(spec), &wc).map_err(|e| e.to_string())?;
    let source = SourceConnectorConfig::parse(&config.raw).map_err(|e| e.to_string())?;
    let task = task_id(&spec.name);
    let emit = start_running(spec, &config.name, task);
    let log = Arc::new(ChangeLog::generate(spec.scenario.source.log_config()));
    let clients = RealSourceClients {
        bootstrap: spec.bootstrap.clone(),
    };
    let start = SourceStart {
        worker: &wc,
        connector: &config,
        task,
        txn_ids: Arc::new(AtomicU64::new(emit.now_ns())),
        // Nothing stops this process's task but a kill or its failure.
        stop: StopSignal::default(),
    };
    let crash_probability = spec.scenario.connect.task_crash_probability;
    let host = RealHost::new(emit.clone(), crash_probability, &config.name, task);
    let source_task = Box::new(PostgresSourceTask::of_connector(log, &source));
    let trace = match start_source_task(&clients, host, start, source_task).await {
        Ok(Some(mut task_loop)) => match task_loop.run().await {
            TaskExit::Failed(trace) => trace,
            TaskExit::Stopped => "stopped".to_string(),
        },
        Ok(None) => "stopped".to_string(),
        Err(e) => e,
    };
    let failed = status(&config.name, task, "FAILED", Some(trace.clone()));
    emit.op(OpKind::Ok, failed, None);
    Err(format!("task {}-{task} failed: {trace}", config.name))
}

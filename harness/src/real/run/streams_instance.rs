//! One Streams instance as an `eosim worker --role streams` process of a real run: the loop
//! of [`crate::streams::processor`] (shared with the simulation) over rdkafka, so that a
//! kill of the process is a real SIGKILL of an instance.
//!
//! # What it runs
//! - `streams-<i>` is instance `i`: consumer group `streams.application_id` with
//!   librdkafka's range assignor over the input topic (one active task per assigned
//!   partition). Standby tasks need Streams' own assignor, which rdkafka cannot take:
//!   scenarios with `num_standby_replicas > 0` are skipped by the runner.
//! - exactly_once_v2: [`RealTransactionalProducer`] with `transactional.id =
//!   <application.id>-streams-<i>`; the group metadata of each transaction is librdkafka's
//!   generation and member id (`RealConsumer::group_metadata`). at_least_once: the
//!   idempotent [`RealProducer`].
//! - Stores restored on task start by [`RealChangelogReader`]: a consumer of its own,
//!   assigned the changelog partition at the restore offset, read_committed under
//!   exactly_once_v2, up to the high watermark asked when the restore starts. Persistent
//!   stores (`streams.store = "persistent"`) flush, with their checkpoints and the process
//!   id, into `<sink>/streams-state/` ([`Disk::in_dir`]), which outlives the process: a
//!   restarted instance reads back its process id (so its `transactional.id`) and its
//!   stores as the simulation's do.
//!
//! # Output
//! Ops on stdout as the other roles print them (`streams-restore`, `streams-commit`,
//! `streams-recover`), process name `streams-<i>`.

use super::worker_spec::{Emit, WorkerSpec};
use crate::client::real::{RealConsumer, RealProducer, RealTransactionalProducer, RealTxnConfig};
use crate::client::{
    AssignmentStrategy, AutoOffsetReset, Consumer, ConsumerConfig, ProducerConfig,
};
use crate::history::{OpKind, Value};
use crate::streams::processor::{self, ChangelogReader, Processor, Restored, StreamsHost};
use crate::streams::store::{changelog_entry, Disk, KeyValueStore};
use async_trait::async_trait;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::time::{Duration, Instant};

/// How long one restore may take before it fails (the task is reopened on the next loop).
const RESTORE_TIMEOUT_MS: u64 = 60_000;
/// One poll of the restore consumer, ms.
const RESTORE_POLL_MS: u64 = 100;

/// The process as a [`StreamsHost`]: the wall clock since the run's epoch, ops on stdout,
/// rdkafka producers.
struct RealStreamsHost {
    emit: Emit,
    bootstrap: String,
}

#[async_trait]
impl StreamsHost for RealStreamsHost {
    type Producer = RealProducer;
    type Txn = RealTransactionalProducer;

    fn now_ns(&self) -> u64 {
        self.emit.now_ns()
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.emit.op(kind, value, error);
    }

    fn producer(&self, config: ProducerConfig) -> Result<RealProducer, String> {
        RealProducer::new(&self.bootstrap, config).map_err(|e| format!("producer: {e}"))
    }

    fn txn_producer(
        &self,
        transactional_id: String,
        transaction_timeout_ms: u64,
        config: ProducerConfig,
    ) -> Result<RealTransactionalProducer, String> {
        let config = RealTxnConfig {
            transactional_id,
            transaction_timeout_ms,
            producer: config,
        };
        RealTransactionalProducer::new(&self.bootstrap, config)
            .map_err(|e| format!("transactional producer: {e}"))
    }
}

/// The restore consumer of a real instance: a fresh rdkafka consumer per restore, assigned
/// (no group membership, no commits) at the restore offset.
pub struct RealChangelogReader {
    bootstrap: String,
    group_id: String,
    request_timeout_ms: u64,
}

#[async_trait]
impl ChangelogReader for RealChangelogReader {
    async fn restore(
        &mut self,
        tp: &TopicPartition,
        from: Offset,
        isolation: Isolation,
        store: &mut KeyValueStore,
    ) -> Result<Restored, String> {
        let mut config = ConsumerConfig::new(self.group_id.clone());
        config.isolation_level = isolation;
        config.auto_offset_reset = AutoOffsetReset::Earliest;
        config.request_timeout_ms = self.request_timeout_ms;
        let mut consumer = RealConsumer::new(&self.bootstrap, config)
            .map_err(|e| format!("restore consumer of {tp}: {e}"))?;
        let result = restore_with(&mut consumer, tp, from, store).await;
        consumer.close().await;
        result
    }
}

/// Replays `tp` from `from` up to its high watermark as of now into `store`.
async fn restore_with(
    consumer: &mut RealConsumer,
    tp: &TopicPartition,
    from: Offset,
    store: &mut KeyValueStore,
) -> Result<Restored, String> {
    let end = consumer
        .high_watermark(tp)
        .await
        .map_err(|e| format!("restore of {tp}: end offset: {e}"))?;
    let mut restored = Restored {
        records: 0,
        end_offset: from,
    };
    if from >= end {
        return Ok(restored);
    }
    consumer
        .assign(&[(tp.clone(), from)])
        .map_err(|e| format!("restore of {tp}: assign: {e}"))?;
    let deadline = Instant::now() + Duration::from_millis(RESTORE_TIMEOUT_MS);
    while restored.end_offset < end {
        if Instant::now() >= deadline {
            return Err(format!(
                "restore of {tp}: at {} of {end} after {RESTORE_TIMEOUT_MS} ms",
                restored.end_offset
            ));
        }
        let poll = Duration::from_millis(RESTORE_POLL_MS);
        let records = consumer.poll(poll).await.map_err(|e| e.to_string())?;
        for r in records.into_iter().filter(|r| r.tp == *tp) {
            if let Some((key, count)) = changelog_entry(r.key.as_deref(), r.value.as_deref()) {
                store.put(key, count);
                restored.records += 1;
            }
            restored.end_offset = restored.end_offset.max(r.offset + 1);
        }
        // The position passes transaction markers, which no record reports.
        let position = consumer.position(tp).unwrap_or(from);
        restored.end_offset = restored.end_offset.max(position);
    }
    Ok(restored)
}

/// The instance number of process `streams-<i>`.
///
/// # Errors
/// Another name.
pub fn instance_index(name: &str) -> Result<u32, String> {
    name.strip_prefix("streams-")
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| format!("--name {name:?}: a streams instance is named streams-<i>"))
}

/// Runs the instance until the process is killed.
///
/// # Errors
/// A name that is not `streams-<i>`, a consumer that cannot be created.
pub async fn run_streams(spec: &WorkerSpec) -> Result<(), String> {
    let s = &spec.scenario;
    // Persistent stores flush into the run's directory, which outlives the process (the
    // instance's `state.dir`); in-memory stores never touch it.
    let disk = Disk::in_dir(spec.sink_dir.join("streams-state"));
    let mut cfg = s.processor_config(instance_index(&spec.name)?, disk);
    let started_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let process_id = processor::initialize_process_id(&cfg, started_ns);
    cfg.process_id = process_id.id;
    // In the worker's log, so a run shows which incarnation read its id back.
    let whence = match process_id.from_state_dir {
        true => "read from the state directory",
        false => "fresh",
    };
    eprintln!("{}: process id {} ({whence})", spec.name, cfg.process_id);
    // The protocol Streams rebalances with (KIP-429 unless `upgrade_from` says eager), on
    // librdkafka's own assignors: `cooperative-sticky` hands a moved partition over in a
    // follow-up rebalance, as `StreamsPartitionAssignor` does, but knows no tasks, standbys
    // or lags (the run's notes say so).
    let mut consumer_config = cfg.consumer_config();
    if cfg.cooperative {
        consumer_config.partition_assignment_strategy = vec![AssignmentStrategy::CooperativeSticky];
    }
    let mut consumer = RealConsumer::new(&spec.bootstrap, consumer_config)
        .map_err(|e| format!("consumer: {e}"))?;
    let topics = vec![cfg.topology.source.clone()];
    while let Err(e) = consumer.subscribe(&topics).await {
        eprintln!("{}: subscribe: {e}; retrying", spec.name);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let host = RealStreamsHost {
        emit: Emit {
            name: spec.name.clone(),
            epoch_ns: spec.epoch_ns,
        },
        bootstrap: spec.bootstrap.clone(),
    };
    let reader = RealChangelogReader {
        bootstrap: spec.bootstrap.clone(),
        group_id: format!("{}-restore-{}", s.streams.application_id, cfg.index),
        request_timeout_ms: cfg.producer.request_timeout_ms,
    };
    let writer = processor::new_writer(&cfg, &host).await;
    let mut instance = Processor::new(cfg, host, consumer, reader, writer);
    loop {
        instance.step().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_i_is_instance_i() {
        assert_eq!(instance_index("streams-0"), Ok(0));
        assert_eq!(instance_index("streams-3"), Ok(3));
        assert!(instance_index("consumer-0").is_err());
    }
}

//! One process of the `kafka-consume` pipeline on the real clients: what `eosim worker`
//! runs, as a child of the real runner, so that a kill is a real SIGKILL.
//!
//! # Model
//! The consumer runs the loop the simulated one runs ([`crate::sink_consumer`]) over
//! [`RealConsumer`]; the producers send as the simulated ones do (`workload::kafka_consume`,
//! built only under `--cfg madsim`) over [`RealProducer`], with the same op shapes.
//! Differences, on purpose:
//! - Ids: producer `i` owns the range `[id_from, id_to)` instead of asking a shared
//!   generator; the runner restarts a killed producer from the id after the last one it
//!   invoked (an id cut short by the kill stays an `invoke` with no completion, as in the
//!   simulation).
//! - A transactional upstream (`[workload] "transactional.id"`): the producers run the
//!   session of [`crate::upstream`] instead ([`super::upstream_instance`]).
//! - Sink: an append-only JSON-lines file per consumer process under `--sink DIR`, one line
//!   per batch ([`SinkBatch`]), `fsync`ed before the `write` op is printed: the "database",
//!   which survives the worker's SIGKILL. A torn last line (a kill inside `write`) is not
//!   durable and is skipped when the runner reads the sink.
//!
//! # Output
//! One history [`crate::history::Op`] per line on stdout (JSON, `index` 0: the runner merges
//! and numbers them), `time_ns` since `--epoch-ns` (on the machine's monotonic clock,
//! [`crate::real::clock::run_clock_ns`], which every process of the run shares).
//! Diagnostics go to stderr, which the runner sends to the worker's log file.

use super::worker_spec::{Emit, Role, SinkBatch, WorkerSpec, REAL_EVENTS_SEED};
use crate::client::real::{RealConsumer, RealProducer};
use crate::client::sends::Sends;
use crate::client::{ProducerConfig, ProducerRecord};
use crate::history::refs::ID_HEADER;
use crate::history::{send_completion, send_invoked, OpKind, RecordRef, Value};
use crate::real::clock::run_clock_ns;
use crate::scenario::cdc_events::{build_events, Event};
use crate::scenario::Pipeline;
use crate::sink_consumer::{self, SinkHost};
use async_trait::async_trait;
use bytes::Bytes;
use madsim::rand::rngs::StdRng;
use madsim::rand::SeedableRng;
use std::io::Write;
use std::time::Duration;

/// Runs the worker to its end: a producer until its range is sent, a consumer forever.
///
/// # Errors
/// A client that cannot be created, or a sink file that cannot be opened or written.
pub fn run_worker(spec: WorkerSpec) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("{}: tokio runtime: {e}", spec.name))?;
    match spec.role {
        Role::Producer if spec.scenario.pipeline == Pipeline::ClickhouseSink => {
            runtime.block_on(producer(&spec, |id| {
                super::clickhouse_sink::row_record(&spec.scenario, id)
            }))
        }
        Role::Producer if spec.scenario.pipeline == Pipeline::StreamsCount => {
            runtime.block_on(producer(&spec, |id| streams_input_record(&spec, id)))
        }
        Role::Producer => runtime.block_on(producer(&spec, |id| id_record(&spec, id))),
        Role::CdcProducer => {
            let mut rng = StdRng::seed_from_u64(REAL_EVENTS_SEED);
            let events = build_events(&spec.scenario, &mut rng);
            runtime.block_on(producer(&spec, |id| event_record(&spec, &events, id)))
        }
        Role::Consumer => runtime.block_on(consumer(&spec)),
        Role::SinkTask => runtime.block_on(super::connect_task::run_sink_task(&spec)),
        Role::Streams => runtime.block_on(super::streams_instance::run_streams(&spec)),
        Role::Copier => runtime.block_on(super::copier_instance::run_copier(&spec)),
        Role::SourceTask => runtime.block_on(super::source_instance::run_source_worker(&spec)),
    }
}

/// `kafka-consume`'s record for `id`: key `k<id % keys>`, value the id.
fn id_record(spec: &WorkerSpec, id: u64) -> (Option<String>, ProducerRecord) {
    let key = format!("k{}", id % u64::from(spec.scenario.workload.keys.max(1)));
    let record = ProducerRecord {
        topic: spec.scenario.topic.name.clone(),
        partition: None,
        key: Some(Bytes::from(key.clone())),
        value: Some(Bytes::from(id.to_string())),
        headers: Vec::new(),
    };
    (Some(key), record)
}

/// `streams-count`'s input record for `id`, as the simulated producer sends it: key
/// `k<id % keys>`, value `<id>,<timestamp_ms>` with the send's time since the run's epoch
/// as event time.
fn streams_input_record(spec: &WorkerSpec, id: u64) -> (Option<String>, ProducerRecord) {
    let (key, mut record) = id_record(spec, id);
    let timestamp_ms = run_clock_ns().saturating_sub(spec.epoch_ns) / 1_000_000;
    record.value = Some(Bytes::from(format!("{id},{timestamp_ms}")));
    (key, record)
}

/// `connect-jdbc`'s record for event `id`, as the simulated producer sends it: the id in
/// header `eosim.id`, a null key (a truncate) on partition 0.
fn event_record(spec: &WorkerSpec, events: &[Event], id: u64) -> (Option<String>, ProducerRecord) {
    let e = &events[id as usize];
    let record = ProducerRecord {
        topic: spec.scenario.topic.name.clone(),
        partition: e.key.is_none().then_some(0),
        key: e.key.clone().map(Bytes::from),
        value: e.value.clone().map(Bytes::from),
        headers: vec![(ID_HEADER.to_string(), Bytes::from(e.id.to_string()))],
    };
    (e.key.clone(), record)
}

/// The input producer's configuration, as the simulated pipeline builds it: the Streams
/// pipeline's is idempotent with `[workload]`'s batching keys
/// ([`crate::scenario::WorkloadSpec::streams_input_producer_config`]), transactional-copy's
/// idempotent ([`crate::scenario::WorkloadSpec::idempotent_producer_config`]),
/// clickhouse-sink's make one attempt per batch
/// ([`crate::scenario::WorkloadSpec::one_attempt_producer_config`]), kafka-consume's and
/// connect-jdbc's retry ([`crate::scenario::WorkloadSpec::retrying_producer_config`]); each
/// with `[workload]`'s batching keys, which librdkafka applies itself.
fn producer_config(spec: &WorkerSpec) -> ProducerConfig {
    let w = &spec.scenario.workload;
    match spec.scenario.pipeline {
        Pipeline::StreamsCount => w.streams_input_producer_config(),
        Pipeline::TransactionalCopy => w.idempotent_producer_config(),
        Pipeline::ClickhouseSink => w.one_attempt_producer_config(),
        _ => w.retrying_producer_config(),
    }
}

/// Sends the ids `[id_from, id_to)`, each as `make(id)` gives it (its key for the
/// history, and the record), one every `produce_interval_ms`: each awaited in turn, or,
/// with `[workload]`'s batching keys (`linger.ms`, `max.in.flight.requests.per.connection`),
/// left queued in librdkafka, which batches and pipelines them, each completion recorded
/// when its delivery report arrives ([`Sends`]). At the end it flushes and waits for every
/// report.
///
/// With `[workload] "transactional.id"` the same records go out in Kafka transactions
/// instead ([`super::upstream_instance::txn_producer`]).
async fn producer(
    spec: &WorkerSpec,
    make: impl Fn(u64) -> (Option<String>, ProducerRecord),
) -> Result<(), String> {
    if let Some(upstream) = crate::upstream::UpstreamConfig::of_scenario(&spec.scenario) {
        return super::upstream_instance::txn_producer(spec, upstream, make).await;
    }
    let w = &spec.scenario.workload;
    let config = producer_config(spec);
    let mut sends = Sends::new(&config, w.request_timeout_ms);
    let producer = RealProducer::new(&spec.bootstrap, config)
        .map_err(|e| format!("{}: producer: {e}", spec.name))?;
    let emit = Emit {
        name: spec.name.clone(),
        epoch_ns: spec.epoch_ns,
    };
    // `[workload] produce_start_ms` (kafka-consume): the consumers join and position first.
    if w.produce_start_ms > 0 {
        tokio::time::sleep(Duration::from_millis(w.produce_start_ms)).await;
    }
    for id in spec.id_from..spec.id_to {
        let (key, record) = make(id);
        emit.op(OpKind::Invoke, send_invoked(id, key.clone()), None);
        let (emit, topic) = (emit.clone(), spec.scenario.topic.name.clone());
        sends
            .send(&producer, record, move |result| {
                let (kind, value, error) = send_completion(&topic, id, key, result);
                emit.op(kind, value, error);
            })
            .await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
    sends.finish(&producer).await;
    Ok(())
}

/// The sink's file for one consumer process, opened for appending.
fn open_sink(spec: &WorkerSpec) -> Result<std::fs::File, String> {
    let path = spec.sink_dir.join(format!("{}.jsonl", spec.name));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("{}: sink {}: {e}", spec.name, path.display()))
}

/// The sink consumers' configuration as the simulation builds it
/// ([`crate::scenario::Scenario::sink_consumer_config`]), with the real tier's
/// `fetch.max.wait.ms` where `[consumer]` sets none.
fn real_consumer_config(spec: &WorkerSpec) -> crate::client::ConsumerConfig {
    let mut config = spec.scenario.sink_consumer_config(&spec.name);
    if spec.scenario.consumer.fetch_max_wait_ms.is_none() {
        config.fetch_max_wait_ms = crate::scenario::consumer::REAL_FETCH_MAX_WAIT_MS;
    }
    config
}

/// A consumer process's host: ops on stdout, the sink an append-only file `fsync`ed per
/// batch ([`SinkBatch`] lines), errors to stderr (the worker's log).
struct RealSinkHost {
    emit: Emit,
    sink: std::fs::File,
}

#[async_trait]
impl SinkHost for RealSinkHost {
    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.emit.op(kind, value, error);
    }

    async fn write(&mut self, rows: &[RecordRef]) -> Result<(), String> {
        let batch = SinkBatch {
            time_ns: self.emit.now_ns(),
            rows: rows.to_vec(),
        };
        let mut line = serde_json::to_string(&batch).expect("rows serialize");
        line.push('\n');
        (self.sink.write_all(line.as_bytes()))
            .and_then(|()| self.sink.sync_data())
            .map_err(|e| format!("{}: sink write: {e}", self.emit.name))
    }

    fn poll_failed(&self, error: &str) {
        eprintln!("{}: poll: {error}", self.emit.name);
    }

    fn commit_failed(&self, error: &str) {
        eprintln!("{}: commit: {error}", self.emit.name);
    }
}

/// A consumer process: the loop of [`crate::sink_consumer`] (shared with the simulation)
/// over rdkafka, writing into its sink file.
async fn consumer(spec: &WorkerSpec) -> Result<(), String> {
    let consumer = RealConsumer::new(&spec.bootstrap, real_consumer_config(spec))
        .map_err(|e| format!("{}: consumer: {e}", spec.name))?;
    let mut host = RealSinkHost {
        emit: Emit {
            name: spec.name.clone(),
            epoch_ns: spec.epoch_ns,
        },
        sink: open_sink(spec)?,
    };
    sink_consumer::run(&mut host, consumer, &spec.scenario).await
}

//! Workloads: the processes of a pipeline and the shared generator they draw operations
//! from, behind one [`Pipeline`] trait the runner drives.
//!
//! [`kafka_consume`]: producers write unique ids into a topic; a consumer group copies them
//! into an in-memory sink (a durable store outside every process), committing before or after
//! each write.
//!
//! [`connect_jdbc`]: change events through Kafka Connect workers and the JDBC sink into
//! PostgreSQL (P2).
//!
//! [`clickhouse_sink`]: the ClickHouse exactly-once sink with its KeeperMap state (P1).
//!
//! [`routine_load`]: Doris Routine Load from Kafka into the seed's `clicklog` (P4).
//!
//! [`doris_sink`]: the Doris Kafka connector on Connect workers into the same table (P4).
//!
//! [`connect_source`]: a source database's change log through Kafka Connect workers
//! running a Debezium source connector into a topic, at least once or under KIP-618.
//!
//! [`transactional_copy`]: producers write ids into an input topic; copiers consume them
//! read_committed and copy them to an output topic in transactions with their offsets.
//!
//! [`upstream_txn`]: the transactional upstream producer `kafka-consume`,
//! `clickhouse-sink`, `connect-jdbc`, `routine-load` and `doris-sink` use with `[workload]
//! "transactional.id"`.

pub mod clickhouse_sink;
pub mod connect_jdbc;
pub mod connect_source;
pub mod doris_sink;
pub mod kafka_consume;
pub mod records;
pub mod routine_load;
pub mod streams_count;
pub mod streams_table;
pub mod transactional_copy;
pub mod upstream_txn;

use crate::client::sim::conn::Connection;
use crate::client::sim::producer::SimProducer;
use crate::client::ProducerRecord;
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::scenario::{Pipeline as PipelineKind, Scenario, TopicSpec};
use crate::sinks::WriteLog;
use crate::world::World;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

/// A pipeline as the runner drives it: topics to create, processes to start, how far it is
/// from done during the drain, and what to record as the final state.
pub trait Pipeline {
    /// Topics to create before any process starts.
    fn topics(&self) -> Vec<TopicSpec>;
    /// Adds the pipeline's nodes to the world.
    fn start(&mut self, world: &mut World);
    /// What is still unfinished, one line each; empty once the pipeline caught up.
    fn lag(&self, world: &World) -> Vec<String>;
    /// Records the final state (logs, sink, committed offsets) as process `final`.
    fn record_final(&self, world: &World);
}

/// The input producer loop of the sink pipelines that make one attempt per send
/// (clickhouse-sink, routine-load, doris-sink; [`crate::scenario::WorkloadSpec::one_attempt_producer_config`]): takes ids
/// with `take_id` until it returns `None`, sends `record_of(id)` (which names its partition)
/// and records a `send` invoke and its outcome (ok with the offset, info when ambiguous,
/// fail) through `record`, one id every `produce_interval_ms`.
///
/// Without batching each send is awaited, and `take_id(true)` is asked, so the caller marks
/// the producer done the moment the ids run out. With `[workload]`'s batching keys
/// ([`crate::scenario::producer`]) the sends stay queued in the producer's accumulator, each
/// outcome recorded when its delivery report arrives, `take_id(false)` is asked, and
/// `done` runs once every report is in.
pub(crate) async fn one_attempt_producer(
    conn: Connection,
    w: &crate::scenario::WorkloadSpec,
    mut take_id: impl FnMut(bool) -> Option<u64>,
    record_of: impl Fn(u64) -> ProducerRecord,
    record: impl Fn(OpKind, Value, Option<String>) + Clone + Send + 'static,
    done: impl FnOnce(),
) {
    let config = w.one_attempt_producer_config();
    let mut sends = crate::client::sends::Sends::new(&config, w.request_timeout_ms);
    let producer = SimProducer::new(conn, config);
    while let Some(id) = take_id(!sends.queued()) {
        let produced = record_of(id);
        let partition = produced.partition.expect("record_of names the partition");
        let tp = TopicPartition::new(&produced.topic, partition);
        record(OpKind::Invoke, id_send(id, tp.clone(), None), None);
        let record = record.clone();
        sends
            .send(&producer, produced, move |result| {
                let (kind, delivery, error) = crate::history::send_outcome(result);
                record(kind, id_send(id, tp, delivery.map(|d| d.offset)), error);
            })
            .await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
    if sends.queued() {
        sends.finish(&producer).await;
        done();
    }
}

/// The `send` op of id `id` (no key) to `tp`.
fn id_send(id: u64, tp: TopicPartition, offset: Option<Offset>) -> Value {
    Value::Send {
        id,
        key: None,
        tp: Some(tp),
        offset,
    }
}

/// The simulated address `10.0.<subnet>.<host>` of a workload node. Subnets: 2 producers,
/// 3 consumers and copiers, 4 Connect workers and Streams instances, 6 readers, 9 operators
/// and supervisors.
pub(crate) fn node_ip(subnet: u8, host: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, subnet, host))
}

/// Adds `count` nodes `<prefix>-0` .. `<prefix>-<count - 1>` at `10.0.<subnet>.1` onwards,
/// in that order; node `i` (named `name`) runs `process(name, i)` at each start.
pub(crate) fn add_numbered_nodes<F, Fut>(
    world: &mut World,
    prefix: &str,
    count: u32,
    subnet: u8,
    process: F,
) where
    F: Fn(String, u32) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    for i in 0..count {
        let name = format!("{prefix}-{i}");
        let (process, n) = (process.clone(), name.clone());
        world.add_node(&name, node_ip(subnet, i as u8 + 1), move || {
            process(n.clone(), i)
        });
    }
}

/// Adds the Connect worker nodes `connect-1..=connect-<workers>` (10.0.4.i), each running
/// [`worker_process`](crate::connect::worker::worker_process) on `rt`.
pub(crate) fn add_connect_workers(
    world: &mut World,
    rt: &crate::connect::worker::WorkerRuntime,
    workers: u32,
) {
    for i in 1..=workers {
        let (rt, name) = (rt.clone(), format!("connect-{i}"));
        world.add_node(&name.clone(), node_ip(4, i as u8), move || {
            crate::connect::worker::worker_process(rt.clone(), name.clone())
        });
    }
}

/// The operator's watch over `connector` (`[connect] restart_failed_after_ms`): every
/// second, restarts each task FAILED for `after_ms` through the control API and records a
/// `restart-task` op with `record`; returns at once when `after_ms` is 0 (nobody acts,
/// Connect's behaviour).
pub(crate) async fn restart_failed_tasks(
    herder: &crate::connect::herder::Herder,
    connector: &str,
    after_ms: u64,
    record: impl Fn(Value),
) {
    if after_ms == 0 {
        return;
    }
    let mut failed_since: std::collections::BTreeMap<u32, u64> = Default::default();
    loop {
        madsim::time::sleep(Duration::from_millis(1_000)).await;
        let now_ms = now_ns() / 1_000_000;
        for t in herder.status(connector).unwrap_or_default() {
            if t.state != crate::connect::herder::TaskState::Failed {
                failed_since.remove(&t.id);
                continue;
            }
            let since = *failed_since.entry(t.id).or_insert(now_ms);
            if now_ms - since >= after_ms && herder.restart_task(connector, t.id).is_ok() {
                failed_since.remove(&t.id);
                record(Value::RestartTask {
                    connector: connector.to_string(),
                    task: t.id,
                });
            }
        }
    }
}

/// The pipeline a scenario names.
pub fn pipeline_for(scenario: Arc<Scenario>, recorder: Recorder) -> Box<dyn Pipeline> {
    match scenario.pipeline {
        PipelineKind::KafkaConsume => {
            Box::new(kafka_consume::KafkaConsume::new(scenario, recorder))
        }
        PipelineKind::ConnectJdbc => Box::new(connect_jdbc::ConnectJdbc::new(scenario, recorder)),
        PipelineKind::ClickhouseSink => {
            Box::new(clickhouse_sink::ClickhouseSink::new(scenario, recorder))
        }
        PipelineKind::TransactionalCopy => Box::new(transactional_copy::TransactionalCopy::new(
            scenario, recorder,
        )),
        PipelineKind::StreamsCount => {
            Box::new(streams_count::StreamsCount::new(scenario, recorder))
        }
        PipelineKind::RoutineLoad => Box::new(routine_load::RoutineLoad::new(scenario, recorder)),
        PipelineKind::DorisSink => Box::new(doris_sink::DorisSink::new(scenario, recorder)),
        PipelineKind::ConnectSource => {
            Box::new(connect_source::ConnectSource::new(scenario, recorder))
        }
    }
}

/// A sink's [`WriteLog`] into the run's history: each attempt a `write` invoke by
/// `process`, completed `ok` / `fail` / `info` with the error text.
#[derive(Debug, Clone)]
pub struct HistoryWriteLog {
    /// The run's history.
    pub recorder: Recorder,
    /// The process that writes (`worker-0`, `connect-1`).
    pub process: String,
}

impl WriteLog for HistoryWriteLog {
    fn invoked(&self, rows: &[RecordRef]) {
        let value = Value::Write {
            rows: rows.to_vec(),
        };
        let process = &self.process;
        self.recorder
            .record(now_ns(), process, OpKind::Invoke, value, None);
    }

    fn completed(&self, rows: &[RecordRef], kind: OpKind, error: Option<String>) {
        let value = Value::Write {
            rows: rows.to_vec(),
        };
        self.recorder
            .record(now_ns(), &self.process, kind, value, error);
    }
}

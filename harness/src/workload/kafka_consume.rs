//! Pipeline `kafka-consume`: produce unique ids, consume them into a sink.
//!
//! # Model
//! - The generator hands out ids `0..records`, each once, to whichever producer process asks
//!   (Jepsen's generator lives outside the processes: a restarted producer takes the next
//!   id, and an id whose send was cut short by a kill stays an `invoke` with no completion).
//! - Record: key `k{id % keys}`, value the id in decimal. Partition: murmur2 of the key.
//! - Consumers of group `sink` (`auto.offset.reset=earliest`) run the loop of
//!   [`crate::sink_consumer`], shared with the real tier: per batch write then commit
//!   (`after-processing`), commit then write (`before-processing`), or write and let a
//!   later poll auto-commit (`enable.auto.commit`). The sink is a store outside the
//!   consumer processes, so it survives their crashes.
//!
//! # Ops recorded
//! `send` invoke/ok/fail/info per id (and `txn` ops with a transactional upstream,
//! [`super::upstream_txn`]); `poll` ok per non-empty poll; `write` ok per batch
//! written; `commit` invoke/ok/fail/info. After the drain, process `final` records the log,
//! the sink and the committed offsets.

use super::records::{id_record, send_id_queued, IdHandout};
use super::upstream_txn::{self, UpstreamTxn};
use super::{add_numbered_nodes, Pipeline};
use crate::client::sends::Sends;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::history::refs::{parse_id, text};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::sink_consumer::{self, SinkHost};
use crate::world::World;
use async_trait::async_trait;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::TopicPartition;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::scenario::consumer::SINK_GROUP;

/// State shared by the processes of one run.
#[derive(Debug, Default)]
pub struct Shared {
    /// The ids the producer processes take.
    ids: IdHandout,
    /// The sink's rows, in write order.
    pub sink: Vec<RecordRef>,
    /// The last error a consumer's poll returned (a stall's reason).
    pub poll_error: Option<String>,
    /// The last error a commit returned (a stall's reason).
    pub commit_error: Option<String>,
}

/// Everything a process needs.
#[derive(Clone)]
pub struct Context {
    /// The scenario.
    pub scenario: Arc<Scenario>,
    /// The history.
    pub recorder: Recorder,
    /// Generator and sink.
    pub shared: Arc<Mutex<Shared>>,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    pub upstream: Option<UpstreamTxn>,
}

impl Context {
    /// The next id for `process`, or `None` when the generator is empty; then the process
    /// counts as idle unless `keep_active` (it still awaits delivery reports, and calls
    /// [`Context::release`] once they are in).
    fn take_id(&self, process: &str, keep_active: bool) -> Option<u64> {
        let records = self.scenario.workload.records;
        let mut shared = self.shared.lock().expect("shared lock");
        shared.ids.take(process, records, keep_active)
    }

    /// `process` went idle: every send it made has its completion recorded.
    fn release(&self, process: &str) {
        self.shared
            .lock()
            .expect("shared lock")
            .ids
            .release(process);
    }

    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    /// Whether every id was handed out and every producer went idle.
    pub fn producers_done(&self) -> bool {
        let shared = self.shared.lock().expect("shared lock");
        shared.ids.done(self.scenario.workload.records)
    }
}

/// A producer process: sends ids from the generator until it is empty.
pub async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    if w.produce_start_ms > 0 {
        madsim::time::sleep(Duration::from_millis(w.produce_start_ms)).await;
    }
    if let Some(upstream) = &ctx.upstream {
        return txn_producer_process(&ctx, upstream, conn, name).await;
    }
    let config = w.retrying_producer_config();
    // Awaited one by one, or queued when the producer batches (`[workload] "linger.ms"`,
    // `"max.in.flight.requests.per.connection"`, [`crate::scenario::producer`]): each
    // completion recorded when its report arrives, the process active until the last.
    let mut sends = Sends::new(&config, w.request_timeout_ms);
    let producer = SimProducer::new(conn, config);
    while let Some(id) = ctx.take_id(&name, sends.queued()) {
        let (ctx2, name2) = (ctx.clone(), name.clone());
        let topic = &ctx.scenario.topic.name;
        send_id_queued(
            &producer,
            &mut sends,
            topic,
            w.keys,
            id,
            move |kind, value, error| ctx2.record(&name2, kind, value, error),
        )
        .await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
    sends.finish(&producer).await;
    ctx.release(&name);
}

/// A producer process of a transactional upstream ([`super::upstream_txn`]): the same
/// records as [`producer_process`]'s, in transactions.
async fn txn_producer_process(
    ctx: &Context,
    upstream: &UpstreamTxn,
    conn: Connection,
    name: String,
) {
    let w = &ctx.scenario.workload;
    let mut session = upstream.session(conn, &name).await;
    let next = || {
        let id = ctx.take_id(&name, false)?;
        let (key, record) = id_record(&ctx.scenario.topic.name, w.keys, id);
        Some((id, Some(key), record))
    };
    session.send_all(next, w.produce_interval_ms).await;
}

/// A consumer's simulated host: ops into the run's history, the sink a store outside the
/// nodes (it survives their crashes), errors kept as a stall's reason.
struct SimSinkHost {
    ctx: Context,
    name: String,
}

#[async_trait]
impl SinkHost for SimSinkHost {
    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.ctx.record(&self.name, kind, value, error);
    }

    async fn write(&mut self, rows: &[RecordRef]) -> Result<(), String> {
        let mut shared = self.ctx.shared.lock().expect("shared lock");
        shared.sink.extend(rows.iter().cloned());
        Ok(())
    }

    fn poll_failed(&self, error: &str) {
        self.ctx.shared.lock().expect("shared lock").poll_error = Some(error.to_string());
    }

    fn commit_failed(&self, error: &str) {
        self.ctx.shared.lock().expect("shared lock").commit_error = Some(error.to_string());
    }
}

/// A consumer process: the loop of [`crate::sink_consumer`], forever.
pub async fn consumer_process(ctx: Context, name: String) {
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    let consumer = SimConsumer::new(conn, ctx.scenario.sink_consumer_config(&name));
    let scenario = Arc::clone(&ctx.scenario);
    let mut host = SimSinkHost { ctx, name };
    let result = sink_consumer::run(&mut host, consumer, &scenario).await;
    result.expect("the simulated sink takes every write");
}

/// `topic`'s partitions as the cluster has them now: those the scenario declares, and any
/// an `add-partitions` fault added.
fn topic_partitions(cluster: &Cluster, topic: &str) -> Vec<TopicPartition> {
    let count = cluster.partition_count(topic).unwrap_or(0);
    (0..count).map(|p| TopicPartition::new(topic, p)).collect()
}

/// The `kafka-consume` pipeline.
pub struct KafkaConsume {
    ctx: Context,
}

impl KafkaConsume {
    /// The pipeline of `scenario`, recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        Self {
            ctx: Context {
                upstream: UpstreamTxn::of(&scenario, &recorder),
                scenario,
                recorder,
                shared: Arc::default(),
            },
        }
    }
}

impl Pipeline for KafkaConsume {
    fn topics(&self) -> Vec<TopicSpec> {
        vec![self.ctx.scenario.topic.clone()]
    }

    fn start(&mut self, world: &mut World) {
        let w = &self.ctx.scenario.workload;
        let ctx = self.ctx.clone();
        add_numbered_nodes(world, "producer", w.producers, 2, move |name, _| {
            producer_process(ctx.clone(), name)
        });
        let ctx = self.ctx.clone();
        add_numbered_nodes(world, "consumer", w.consumers, 3, move |name, _| {
            consumer_process(ctx.clone(), name)
        });
    }

    /// Unfinished: producers still holding ids, and partitions whose committed offset
    /// (group `sink`) is behind the high watermark.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.producers_done() {
            lag.push("producers not done".to_string());
        }
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let isolation = self.ctx.scenario.consumer.isolation_level.to_isolation();
        let now_ms = world.kafka.now_ms();
        let transactional = self.ctx.upstream.as_ref().map(|_| isolation);
        let partitions = topic_partitions(&cluster, &self.ctx.scenario.topic.name);
        lag.extend(upstream_txn::group_lag(
            &mut cluster,
            now_ms,
            partitions,
            SINK_GROUP,
            transactional,
        ));
        if lag.len() > usize::from(!self.ctx.producers_done()) {
            // Why it is behind, when it is: the consumers' last errors.
            let shared = self.ctx.shared.lock().expect("shared lock");
            if let Some(e) = &shared.poll_error {
                lag.push(format!("last poll error: {e}"));
            }
            if let Some(e) = &shared.commit_error {
                lag.push(format!("last commit error: {e}"));
            }
            drop(shared);
            let groups = cluster.groups();
            lag.push(format!(
                "group {SINK_GROUP}: state {:?}, generation {:?}, members {:?}",
                groups.state(SINK_GROUP),
                groups.generation(SINK_GROUP),
                groups.members(SINK_GROUP)
            ));
        }
        lag
    }

    fn record_final(&self, world: &World) {
        let t = now_ns();
        let cluster = world.kafka.cluster.lock().expect("cluster lock");
        for tp in topic_partitions(&cluster, &self.ctx.scenario.topic.name) {
            let records = cluster
                .records(&tp)
                .into_iter()
                .map(|(offset, record)| RecordRef {
                    id: parse_id(&record.value),
                    key: text(&record.key),
                    tp: tp.clone(),
                    offset,
                })
                .collect();
            let value = Value::LogState { tp, records };
            self.ctx
                .recorder
                .record(t, "final", OpKind::Ok, value, None);
        }
        let offsets = cluster.committed_offsets(SINK_GROUP);
        drop(cluster);
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        let rows = self.ctx.shared.lock().expect("shared lock").sink.clone();
        let recorder = &self.ctx.recorder;
        recorder.record(t, "final", OpKind::Ok, Value::SinkState { rows }, None);
        recorder.record(
            t,
            "final",
            OpKind::Ok,
            Value::CommittedOffsets { offsets },
            None,
        );
    }
}

//! Pipeline `transactional-copy`: a consume-transform-produce copy with Kafka transactions
//! (the loop of Kafka Streams under `exactly_once_v2`, models-reference E.5).
//!
//! # Model
//! - Producers (`producer-i`, idempotent) write ids `0..records` into the input topic
//!   (`[topic]`): key `k{id % keys}`, value the id in decimal. With `[workload]
//!   "transactional.id"` they write them in transactions, some aborted on purpose
//!   ([`super::upstream_txn`]): the copiers must copy only the committed ones, which they
//!   do reading read_committed (`[copy] "isolation.level"`, the default).
//! - Copiers (`consumer-i`, group `copier`): the loop of [`crate::copier`], shared with
//!   the real tier, on a simulated consumer and transactional producer (whose BUGGIFY
//!   points, `copy.buggify_*`, hold Produce or EndTxn requests in the network).
//!
//! # Ops recorded
//! `send` invoke/ok/fail/info per input id (and the upstream's `txn` ops); the copiers'
//! `poll` and `txn` ops ([`crate::copier`]).
//! After the drain, process `final` records: each input partition's `LogState`, the group's
//! `CommittedOffsets`, each output partition's `PartitionState` (HW, LSO) and
//! `CommittedLogState` (a read_committed read from offset 0), and the output's committed
//! view as the `SinkState`, each row named by the input position of its id.
//!
//! # Analyses
//! 1. Kafka checker on the input (lost writes, duplicates: idempotence is on).
//! 2. Sink checker on the output's committed view: each input id exactly once, per-key order;
//!    behind a transactional upstream, none of an aborted upstream transaction
//!    (`aborted-in-sink`).
//! 3. Transaction checker: aborted reads, torn transactions, stuck LSO, offsets committed
//!    for input whose output was aborted.

use super::records::{id_record, read_committed, send_id, IdHandout, LsoGrace, LSO_GRACE_EXTRA_MS};
use super::upstream_txn::{self, UpstreamTxn};
use super::{add_numbered_nodes, Pipeline};
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnBuggify, TxnProducerConfig};
use crate::client::ProducerConfig;
use crate::client::TxnSettings;
use crate::copier::{self, CopierConfig, CopierHost, COPY_GROUP};
use crate::history::refs::{named_by_input, parse_id, text};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::world::World;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// State shared by the processes of one run.
#[derive(Debug, Default)]
struct Shared {
    /// The ids the producer processes take.
    ids: IdHandout,
    next_txn: u64,
    /// The drain's wait for the output's LSOs.
    lso_grace: LsoGrace,
}

/// Everything a process needs.
#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    shared: Arc<Mutex<Shared>>,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    upstream: Option<UpstreamTxn>,
}

impl Context {
    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("shared lock")
    }

    fn take_id(&self, process: &str) -> Option<u64> {
        let records = self.scenario.workload.records;
        self.shared().ids.take(process, records, false)
    }

    fn next_txn(&self) -> u64 {
        let mut shared = self.shared();
        shared.next_txn += 1;
        shared.next_txn - 1
    }

    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    fn producers_done(&self) -> bool {
        self.shared().ids.done(self.scenario.workload.records)
    }

    fn producer_config(&self) -> ProducerConfig {
        self.scenario.workload.idempotent_producer_config()
    }
}

/// An input producer: sends ids from the generator with an idempotent producer, or in the
/// transactions of the upstream's session.
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    if let Some(upstream) = &ctx.upstream {
        let mut session = upstream.session(conn, &name).await;
        let next = || {
            let id = ctx.take_id(&name)?;
            let (key, record) = id_record(&ctx.scenario.topic.name, w.keys, id);
            Some((id, Some(key), record))
        };
        return session.send_all(next, w.produce_interval_ms).await;
    }
    let producer = SimProducer::new(conn, ctx.producer_config());
    while let Some(id) = ctx.take_id(&name) {
        let topic = &ctx.scenario.topic.name;
        send_id(&producer, topic, w.keys, id, |kind, value, error| {
            ctx.record(&name, kind, value, error)
        })
        .await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
}

/// A copier's simulated host: ops into the run's history, transactions numbered by the
/// run, producers on the copier's connection with the scenario's BUGGIFY points.
struct SimCopierHost {
    ctx: Context,
    name: String,
    conn: Connection,
}

impl CopierHost for SimCopierHost {
    type Txn = SimTransactionalProducer;

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.ctx.record(&self.name, kind, value, error);
    }

    fn next_txn(&self) -> u64 {
        self.ctx.next_txn()
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<SimTransactionalProducer, String> {
        let copy = &self.ctx.scenario.copy;
        let config = TxnProducerConfig {
            transactional_id: settings.transactional_id.clone(),
            transaction_timeout_ms: settings.transaction_timeout_ms,
            producer: settings.producer.clone(),
            buggify: TxnBuggify {
                produce_delay_probability: copy.buggify_produce_delay_probability,
                end_txn_delay_probability: copy.buggify_end_txn_delay_probability,
                delay_ms: copy.buggify_delay_ms,
            },
        };
        Ok(SimTransactionalProducer::new(self.conn.clone(), config))
    }
}

/// Copier `index` (`consumer-<index>`), on the shared loop.
async fn copier_process(ctx: Context, name: String, index: u32) {
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    let config = CopierConfig::of_scenario(&ctx.scenario, index);
    let consumer = SimConsumer::new(conn.clone(), config.consumer.clone());
    let host = SimCopierHost { ctx, name, conn };
    copier::run(&host, consumer, &config).await;
}

/// The `transactional-copy` pipeline.
pub struct TransactionalCopy {
    ctx: Context,
}

impl TransactionalCopy {
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

    /// The output topic's partitions (laid out as the input's).
    fn output(&self) -> Vec<TopicPartition> {
        let scenario = &self.ctx.scenario;
        scenario.topic.partitions_of(&scenario.copy.output_topic)
    }
}

impl Pipeline for TransactionalCopy {
    fn topics(&self) -> Vec<TopicSpec> {
        let input = self.ctx.scenario.topic.clone();
        let output = TopicSpec {
            name: self.ctx.scenario.copy.output_topic.clone(),
            ..input.clone()
        };
        vec![input, output]
    }

    fn start(&mut self, world: &mut World) {
        let copy = &self.ctx.scenario.copy;
        let points = [
            copy.buggify_produce_delay_probability,
            copy.buggify_end_txn_delay_probability,
        ];
        // Each BUGGIFY point that can fire must hold a request to count as exercised; the
        // net layer records each hold (`call_delayed`).
        for _ in points.iter().filter(|&&p| p > 0.0) {
            eosim_sim::effects::arm(eosim_sim::effects::kind::BUGGIFY);
        }
        let w = &self.ctx.scenario.workload;
        let ctx = self.ctx.clone();
        add_numbered_nodes(world, "producer", w.producers, 2, move |name, _| {
            producer_process(ctx.clone(), name)
        });
        let ctx = self.ctx.clone();
        add_numbered_nodes(world, "consumer", w.consumers, 3, move |name, i| {
            copier_process(ctx.clone(), name, i)
        });
    }

    /// Unfinished: producers holding ids; input partitions whose committed offset (group
    /// `copier`) is behind the HW, or behind a transactional upstream behind the end of
    /// what the copiers read ([`upstream_txn::committed_lag`]); output partitions not
    /// readable or whose LSO is below the HW ([`LsoGrace`]: a stuck LSO past the grace is
    /// not lag but a finding, `stuck-lso`).
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.producers_done() {
            lag.push("producers not done".to_string());
        }
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let isolation = self.ctx.scenario.copy.isolation_level.to_isolation();
        let transactional = self.ctx.upstream.as_ref().map(|_| isolation);
        lag.extend(upstream_txn::group_lag(
            &mut cluster,
            world.kafka.now_ms(),
            self.ctx.scenario.topic.topic_partitions(),
            COPY_GROUP,
            transactional,
        ));
        let grace_ms = self.ctx.scenario.copy.transaction_timeout_ms + LSO_GRACE_EXTRA_MS;
        let now = (world.kafka.now_ms(), now_ns());
        let outputs = self.output();
        (self.ctx.shared().lso_grace).output_lag(&mut cluster, now, &outputs, grace_ms, &mut lag);
        lag
    }

    fn record_final(&self, world: &World) {
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let input_position = self.record_input(&cluster);
        let offsets = cluster.committed_offsets(COPY_GROUP);
        self.record(Value::CommittedOffsets { offsets });
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        let mut sink = Vec::new();
        for tp in self.output() {
            let high_watermark = cluster.high_watermark(&tp).unwrap_or(-1);
            let last_stable_offset = cluster.last_stable_offset(&tp).unwrap_or(-1);
            let tp2 = tp.clone();
            self.record(Value::PartitionState {
                tp: tp2,
                high_watermark,
                last_stable_offset,
            });
            let Ok(fetched) = read_committed(&mut cluster, now_ms, &tp) else {
                // The drain waits until every output partition is readable; a partition
                // that is not has no committed view, and the checkers judge without it.
                continue;
            };
            let records: Vec<RecordRef> = fetched
                .into_iter()
                .map(|r| RecordRef {
                    id: parse_id(&r.record.value),
                    key: text(&r.record.key),
                    tp: tp.clone(),
                    offset: r.offset,
                })
                .collect();
            sink.extend(named_by_input(&records, &input_position));
            self.record(Value::CommittedLogState { tp, records });
        }
        self.record(Value::SinkState { rows: sink });
    }
}

impl TransactionalCopy {
    /// Records a final-state op.
    fn record(&self, value: Value) {
        self.ctx
            .recorder
            .record(now_ns(), "final", OpKind::Ok, value, None);
    }

    /// Records each input partition's `LogState`; returns where each id first is.
    fn record_input(&self, cluster: &Cluster) -> BTreeMap<u64, (TopicPartition, Offset)> {
        let mut input_position = BTreeMap::new();
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let mut records = Vec::new();
            for (offset, r) in cluster.records(&tp) {
                let id = parse_id(&r.value);
                input_position.entry(id).or_insert((tp.clone(), offset));
                records.push(RecordRef {
                    id,
                    key: text(&r.key),
                    tp: tp.clone(),
                    offset,
                });
            }
            self.record(Value::LogState { tp, records });
        }
        input_position
    }
}

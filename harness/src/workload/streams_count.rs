//! Pipeline `streams-count`: the seed's Kafka Streams application (SPEC P3), a count per key
//! in tumbling windows with a state store, its changelog and `processing.guarantee`.
//!
//! # Model
//! - Producers (`producer-i`, idempotent) write ids `0..records` into the input topic
//!   (`[topic]`): key `k{id % keys}`, value `<id>,<timestamp_ms>` with the send's simulated
//!   time as event time. With `[workload] "transactional.id"` they write them in
//!   transactions, some aborted on purpose ([`super::upstream_txn`]): read_committed
//!   instances (exactly_once_v2, or `[streams] "consumer.isolation.level"`) skip the
//!   aborted records, read_uncommitted ones (at_least_once's default) process them.
//! - Instances (`streams-i`, [`crate::streams::instance`]) form the consumer group
//!   `streams.application_id`; one task per input partition, one state store per task
//!   (`streams.store`), its changelog `<application_id>-<store_name>-changelog` with the
//!   input's partition count, output `key@windowStart → count` to `streams.output_topic`.
//!   Under `streams.group_by = "id-mod"` the key counted is `g<id % group_by_keys>`, through
//!   the repartition topic `<application_id>-<store_name>-repartition` (the input's
//!   partition count), whose committed offsets the drain also waits for.
//! - Persistent stores live on a [`Disk`] outside the processes, keyed by instance.
//! - Under `streams.topology = "stream-table-join"` process `table-producer`
//!   ([`streams_table`]) writes keyed updates to `streams.table_topic` (the input's
//!   partition count), which the instances subscribe to as well; the drain also waits for
//!   the table partitions' committed offsets to pass their last committed record.
//!
//! # Ops recorded
//! `send` per input id (and the upstream's `txn` ops); per instance `streams-restore` per task opened and
//! `streams-commit` invoke/ok/fail/info per commit. After the drain, process `final`
//! records `streams-window`, each input partition's `log-state` and `streams-input`, the
//! group's `committed-offsets`, each repartition partition's `streams-repartition` (under
//! `group_by = "id-mod"`, read from its log start: the instances purge it) and each output
//! partition's `streams-output` (read_committed from offset 0). `streams-input` carries
//! each record's grouping key. Under `streams.topology` other than `"count"`, the final
//! state has `streams-topology` instead of `streams-window` and `streams-records` (keys and
//! values as text) instead of `streams-output`; the join adds each table partition read
//! read_committed as `streams-table` (version, key, offset per update).
//!
//! # Analyses
//! 1. Kafka checker on the input (lost writes, duplicates).
//! 2. Streams checker: final value per `key@window` against the true count of the input
//!    below the committed offsets (under-count, over-count, missing, extra), and under
//!    exactly-once the committed updates of each `key@window` must read 1, 2, ..., n.
//! 3. Under `topology = "filter-map-values"` or `"aggregate-ids"`, the records checker
//!    (`checker::streams_records`) instead: each kept input once and mapped, or one id per
//!    key and one key per id; under `"stream-table-join"` each joined stream record once
//!    with a committed version of its key (`checker::streams_join`).

use super::records::{
    read_committed, read_committed_from, send_queued, IdHandout, LsoGrace, LSO_GRACE_EXTRA_MS,
};
use super::upstream_txn::{self, UpstreamTxn};
use super::{add_numbered_nodes, node_ip, streams_table, Pipeline};
use crate::client::sends::Sends;
use crate::client::sim::conn::Connection;
use crate::client::sim::producer::SimProducer;
use crate::client::ProducerRecord;
use crate::history::refs::text;
use crate::history::{
    OpKind, RecordRef, Recorder, StreamsInputRecord, StreamsRecord, StreamsUpdate, Value,
};
use crate::scenario::{Scenario, TopicSpec};
use crate::streams::instance::{self, InstanceContext};
use crate::streams::partition_assignor::Board;
use crate::streams::store::Disk;
use crate::streams::{input_id_and_time, output_update, StreamsSpec, TopologyKind};
use crate::world::World;
use bytes::Bytes;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{FetchedRecord, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Shared {
    /// The ids the producer processes take.
    ids: IdHandout,
    /// The drain's wait for the output's LSOs.
    lso_grace: LsoGrace,
}

#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    shared: Arc<Mutex<Shared>>,
    disk: Disk,
    board: Board,
    /// The table producer's versions (`topology = "stream-table-join"`).
    table_ids: streams_table::TableIds,
    /// The transactional upstream of the input, with `[workload] "transactional.id"`.
    upstream: Option<UpstreamTxn>,
}

impl Context {
    /// The next id for `process` ([`IdHandout::take`]); `keep_active` while its queued
    /// sends still await their reports.
    fn take_id(&self, process: &str, keep_active: bool) -> Option<u64> {
        let records = self.scenario.workload.records;
        self.shared
            .lock()
            .expect("shared lock")
            .ids
            .take(process, records, keep_active)
    }

    fn producers_done(&self) -> bool {
        let table_done = !self.joins() || streams_table::done(&self.table_ids, &self.scenario);
        let ids = &self.shared.lock().expect("shared lock").ids;
        ids.done(self.scenario.workload.records) && table_done
    }

    /// Whether the topology is the stream-table join (a table topic and its producer).
    fn joins(&self) -> bool {
        self.scenario.streams.topology == TopologyKind::StreamTableJoin
    }

    fn instance(&self, index: u32) -> InstanceContext {
        let s = &self.scenario;
        InstanceContext {
            processor: s.processor_config(index, self.disk.clone()),
            brokers: s.cluster.brokers,
            board: self.board.clone(),
            recorder: self.recorder.clone(),
        }
    }
}

/// Input record `id`: key `k{id % keys}`, value `<id>,<event time ms>` with the simulated
/// time now as event time.
fn input_record(ctx: &Context, id: u64) -> (String, ProducerRecord) {
    let key = format!("k{}", id % u64::from(ctx.scenario.workload.keys.max(1)));
    let timestamp_ms = now_ns() / 1_000_000;
    let record = ProducerRecord {
        topic: ctx.scenario.topic.name.clone(),
        partition: None,
        key: Some(Bytes::from(key.clone())),
        value: Some(Bytes::from(format!("{id},{timestamp_ms}"))),
        headers: Vec::new(),
    };
    (key, record)
}

/// An input producer: ids from the generator, event time = send time; with `[workload]
/// "transactional.id"` in the transactions of the upstream's session.
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    if let Some(upstream) = &ctx.upstream {
        let mut session = upstream.session(conn, &name).await;
        let next = || {
            let id = ctx.take_id(&name, false)?;
            let (key, record) = input_record(&ctx, id);
            Some((id, Some(key), record))
        };
        return session.send_all(next, w.produce_interval_ms).await;
    }
    let config = w.streams_input_producer_config();
    let mut sends = Sends::new(&config, w.request_timeout_ms);
    let producer = SimProducer::new(conn, config);
    // Queued sends keep the process active until their reports are in.
    let queued = sends.queued();
    while let Some(id) = ctx.take_id(&name, queued) {
        let (ctx2, name2) = (ctx.clone(), name.clone());
        let record = move |kind, value, error| {
            ctx2.recorder.record(now_ns(), &name2, kind, value, error);
        };
        send_queued(&producer, &mut sends, id, input_record(&ctx, id), record).await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
    sends.finish(&producer).await;
    if queued {
        ctx.shared.lock().expect("shared lock").ids.release(&name);
    }
}

/// The `streams-count` pipeline.
pub struct StreamsCount {
    ctx: Context,
}

impl StreamsCount {
    /// The pipeline of `scenario`, recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let ctx = Context {
            upstream: UpstreamTxn::of(&scenario, &recorder),
            scenario,
            recorder,
            shared: Arc::default(),
            disk: Disk::default(),
            board: Board::default(),
            table_ids: streams_table::TableIds::default(),
        };
        Self { ctx }
    }

    fn record(&self, value: Value) {
        self.ctx
            .recorder
            .record(now_ns(), "final", OpKind::Ok, value, None);
    }
}

impl Pipeline for StreamsCount {
    fn topics(&self) -> Vec<TopicSpec> {
        let input = self.ctx.scenario.topic.clone();
        let streams = &self.ctx.scenario.streams;
        let output = TopicSpec {
            name: streams.output_topic.clone(),
            ..input.clone()
        };
        let changelog = TopicSpec {
            name: streams.changelog_topic(),
            ..input.clone()
        };
        let repartition = streams.repartition_topic().map(|name| TopicSpec {
            name,
            ..input.clone()
        });
        // Under the join the changelog is the table topic (`StreamsSpec::changelog_topic`),
        // co-partitioned with the input (`StreamsSpec::check_copartitioned`).
        let mut topics = vec![input, output];
        topics.extend(streams.stateful().then_some(changelog));
        topics.extend(repartition);
        topics
    }

    fn start(&mut self, world: &mut World) {
        let ctx = self.ctx.clone();
        let producers = self.ctx.scenario.workload.producers;
        add_numbered_nodes(world, "producer", producers, 2, move |name, _| {
            producer_process(ctx.clone(), name)
        });
        if self.ctx.joins() {
            let ip = node_ip(2, 200);
            let (scenario, ids) = (self.ctx.scenario.clone(), self.ctx.table_ids.clone());
            world.add_node(streams_table::TABLE_PRODUCER, ip, move || {
                streams_table::run(scenario.clone(), ids.clone())
            });
        }
        for i in 0..self.ctx.scenario.streams.instances {
            let ip = node_ip(4, i as u8 + 1);
            let instance = self.ctx.instance(i);
            world.add_node(&instance.processor.name(), ip, move || {
                instance::run(instance.clone())
            });
        }
    }

    /// Unfinished: producers holding ids; input partitions whose committed offset is behind
    /// the HW; repartition partitions whose committed offset is below their last committed
    /// record; output partitions not readable, or with LSO below HW ([`LsoGrace`]).
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.producers_done() {
            lag.push("producers not done".to_string());
        }
        let group = &self.ctx.scenario.streams.application_id;
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let committed: BTreeMap<TopicPartition, Offset> =
            cluster.committed_offsets(group).into_iter().collect();
        let transactional =
            (self.ctx.upstream.as_ref()).map(|_| self.ctx.scenario.streams.isolation());
        lag.extend(upstream_txn::committed_lag(
            &mut cluster,
            world.kafka.now_ms(),
            self.ctx.scenario.topic.topic_partitions(),
            &committed,
            transactional,
        ));
        // The repartition topic (purged by the instances) and the join's table topic
        // (whose last records may be an aborted transaction's, which read_committed tasks
        // never pass): behind when the committed offset is below the last record read
        // read_committed from the log start.
        let streams = &self.ctx.scenario.streams;
        let table = self.ctx.joins().then(|| streams.table_topic.clone());
        let now_ms = world.kafka.now_ms();
        for topic in streams.repartition_topic().into_iter().chain(table) {
            for tp in self.ctx.scenario.topic.partitions_of(&topic) {
                let c = committed.get(&tp).copied().unwrap_or(0);
                match read_from_log_start(&mut cluster, now_ms, &tp) {
                    Ok(fetched) => match fetched.last().map(|r| r.offset + 1) {
                        Some(end) if c < end => {
                            lag.push(format!("{tp}: committed {c} < last record + 1 {end}"))
                        }
                        _ => {}
                    },
                    Err(e) => lag.push(format!("{tp}: not readable: {e:?}")),
                }
            }
        }
        let outputs =
            (self.ctx.scenario.topic).partitions_of(&self.ctx.scenario.streams.output_topic);
        let grace_ms = self.ctx.scenario.streams.transaction_timeout_ms + LSO_GRACE_EXTRA_MS;
        let now = (world.kafka.now_ms(), now_ns());
        let mut shared = self.ctx.shared.lock().expect("shared lock");
        (shared.lso_grace).output_lag(&mut cluster, now, &outputs, grace_ms, &mut lag);
        lag
    }

    fn record_final(&self, world: &World) {
        let now_ms = world.kafka.now_ms();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let streams = &self.ctx.scenario.streams;
        self.record(topology_value(streams));
        for tp in self.ctx.scenario.topic.topic_partitions() {
            self.record_input(&cluster, tp);
        }
        if self.ctx.joins() {
            for tp in self.ctx.scenario.topic.partitions_of(&streams.table_topic) {
                let Ok(fetched) = read_committed(&mut cluster, now_ms, &tp) else {
                    continue; // the drain waits for the table's committed offsets
                };
                let records = fetched.iter().map(table_update).collect();
                self.record(Value::StreamsTable { tp, records });
            }
        }
        let offsets = cluster.committed_offsets(&streams.application_id);
        self.record(Value::CommittedOffsets { offsets });
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        if let Some(topic) = streams.repartition_topic() {
            for tp in self.ctx.scenario.topic.partitions_of(&topic) {
                let Ok(fetched) = read_from_log_start(&mut cluster, now_ms, &tp) else {
                    continue; // the drain waits for readability
                };
                let records = fetched.iter().map(|r| repartitioned(&tp, r)).collect();
                self.record(Value::StreamsRepartition { tp, records });
            }
        }
        for tp in self.ctx.scenario.topic.partitions_of(&streams.output_topic) {
            let Ok(fetched) = read_committed(&mut cluster, now_ms, &tp) else {
                continue; // the drain waits for readability; the checker judges without
            };
            self.record(output_value(streams, tp, &fetched));
        }
    }
}

impl StreamsCount {
    /// Records an input partition as `log-state` (for the Kafka checker) and
    /// `streams-input` (grouping keys and event times for the Streams checker: the input
    /// key, or under `streams.group_by = "id-mod"` the new key the topology counts).
    fn record_input(&self, cluster: &Cluster, tp: TopicPartition) {
        let mut refs = Vec::new();
        let mut inputs = Vec::new();
        for (offset, r) in cluster.records(&tp) {
            let value = text(&r.value).unwrap_or_default();
            let (id, timestamp_ms) = input_id_and_time(&value);
            let key = text(&r.key);
            refs.push(RecordRef {
                id,
                key: key.clone(),
                tp: tp.clone(),
                offset,
            });
            let key = (self.ctx.scenario.streams).grouping_key(&key.unwrap_or_default(), &value);
            inputs.push(StreamsInputRecord {
                id,
                key,
                timestamp_ms,
                offset,
            });
        }
        self.record(Value::LogState {
            tp: tp.clone(),
            records: refs,
        });
        self.record(Value::StreamsInput {
            tp,
            records: inputs,
        });
    }
}

/// A partition read_committed from its log start: a repartition partition (the instances
/// purge it below their committed offsets) or a join's table partition.
fn read_from_log_start(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
) -> Result<Vec<FetchedRecord>, String> {
    let from = cluster.log_start_offset(tp).unwrap_or(0);
    read_committed_from(cluster, now_ms, tp, from)
}

/// A repartition record as its input id, new key and place.
fn repartitioned(tp: &TopicPartition, r: &FetchedRecord) -> RecordRef {
    let value = text(&r.record.value).unwrap_or_default();
    RecordRef {
        id: input_id_and_time(&value).0,
        key: text(&r.record.key),
        tp: tp.clone(),
        offset: r.offset,
    }
}

fn update(r: &FetchedRecord) -> Option<StreamsUpdate> {
    let (key, value) = (text(&r.record.key), text(&r.record.value));
    output_update(key.as_deref(), value.as_deref(), r.offset)
}

/// What the final state says of the topology: `streams-window` (window size, cache) for
/// the count, as before the other families; `streams-topology` for the others.
fn topology_value(streams: &StreamsSpec) -> Value {
    match streams.topology {
        TopologyKind::Count => Value::StreamsWindow {
            window_size_ms: streams.window_size_ms,
            cache_max_bytes: streams.recorded_cache_max_bytes(),
        },
        other => Value::StreamsTopology {
            topology: other.name().to_string(),
        },
    }
}

/// An output partition as its topology writes it: `streams-output` (`key@window → count`
/// updates) for the count, `streams-records` (keys and values as text) for the others.
fn output_value(streams: &StreamsSpec, tp: TopicPartition, fetched: &[FetchedRecord]) -> Value {
    match streams.topology {
        TopologyKind::Count => Value::StreamsOutput {
            tp,
            records: fetched.iter().filter_map(update).collect(),
        },
        _ => Value::StreamsRecords {
            tp,
            records: fetched.iter().map(output_record).collect(),
        },
    }
}

/// A table record read back as its version (`id`), key, event time and offset.
fn table_update(r: &FetchedRecord) -> StreamsInputRecord {
    let value = text(&r.record.value).unwrap_or_default();
    let (id, timestamp_ms) = input_id_and_time(&value);
    StreamsInputRecord {
        id,
        key: text(&r.record.key).unwrap_or_default(),
        timestamp_ms,
        offset: r.offset,
    }
}

fn output_record(r: &FetchedRecord) -> StreamsRecord {
    StreamsRecord {
        key: text(&r.record.key).unwrap_or_default(),
        value: text(&r.record.value).unwrap_or_default(),
        offset: r.offset,
    }
}

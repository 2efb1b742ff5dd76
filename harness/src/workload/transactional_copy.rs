//! Pipeline `transactional-copy`: a consume-transform-produce copy with Kafka transactions
//! (the loop of Kafka Streams under `exactly_once_v2`, models-reference E.5).
//!
//! # Model
//! - Producers (`producer-i`, idempotent) write ids `0..records` into the input topic
//!   (`[topic]`): key `k{id % keys}`, value the id in decimal.
//! - Copiers (`consumer-i`, group `copier`, read_committed, `auto.offset.reset=earliest`)
//!   each own a transactional producer with `transactional.id = copier-i` (stable across
//!   restarts, so a restarted copier fences its zombie by epoch). Per poll of at most
//!   `copy.records_per_transaction_max` records: begin, send each record unchanged to the
//!   output topic (the transform is the identity on key and value, so output ids are input
//!   ids), `send_offsets_to_transaction` with the group's generation, commit.
//! - On any error before the commit request the transaction is aborted (and the producer
//!   recreated when the error is fatal); on a commit error the producer is recreated,
//!   since the outcome is unknown and only a new epoch settles it. Then, with
//!   `copy.rewind_on_abort` (the default), the consumer seeks back to the group's committed
//!   offsets; without it (the F9 bug) it reads on past the aborted input.
//!
//! # Ops recorded
//! `send` invoke/ok/fail/info per input id; `poll` ok per copier poll; `txn` invoke (at the
//! commit or abort request, with every record sent and the offsets) then ok (committed),
//! fail (certainly aborted: no commit was requested, or the abort succeeded) or info.
//! After the drain, process `final` records: each input partition's `LogState`, the group's
//! `CommittedOffsets`, each output partition's `PartitionState` (HW, LSO) and
//! `CommittedLogState` (a read_committed read from offset 0), and the output's committed
//! view as the `SinkState`, each row named by the input position of its id.
//!
//! # Analyses
//! 1. Kafka checker on the input (lost writes, duplicates: idempotence is on).
//! 2. Sink checker on the output's committed view: each input id exactly once, per-key order.
//! 3. Transaction checker: aborted reads, torn transactions, stuck LSO, offsets committed
//!    for input whose output was aborted.

use super::records::{
    next_offsets, parse_id, read_committed, record_ref, send_id, text, IdHandout, LsoGrace,
    LSO_GRACE_EXTRA_MS,
};
use super::Pipeline;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnBuggify, TxnProducerConfig};
use crate::client::{
    AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig, ProducerConfig, ProducerRecord,
    TransactionalProducer, TxnError,
};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::runner::world::{now_ns, World};
use crate::scenario::{Scenario, TopicSpec};
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The consumer group of the copiers.
pub const COPY_GROUP: &str = "copier";
/// The copiers' `max.poll.interval.ms` (and rebalance timeout), ms.
const COPIER_MAX_POLL_INTERVAL_MS: u64 = 20_000;

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

    /// Bound on one transactional call (init, offsets, commit, abort).
    fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.scenario.workload.request_timeout_ms * 3)
    }

    fn producer_config(&self) -> ProducerConfig {
        self.scenario.workload.idempotent_producer_config()
    }
}

/// An input producer: sends ids from the generator with an idempotent producer.
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    let producer = SimProducer::new(conn, ctx.producer_config());
    while let Some(id) = ctx.take_id(&name) {
        let topic = &ctx.scenario.topic.name;
        send_id(&producer, topic, w.keys, id, |kind, value, error| {
            ctx.record(&name, kind, value, error)
        })
        .await;
        madsim::time::sleep(Duration::from_millis(w.produce_interval_ms)).await;
    }
}

/// A transactional producer for copier `index`, initialized (retried until it is).
async fn new_txn_producer(
    ctx: &Context,
    conn: &Connection,
    index: u32,
) -> SimTransactionalProducer {
    let mut config = TxnProducerConfig::new(format!("copier-{index}"));
    config.transaction_timeout_ms = ctx.scenario.copy.transaction_timeout_ms;
    config.producer = ctx.producer_config();
    let copy = &ctx.scenario.copy;
    config.buggify = TxnBuggify {
        produce_delay_probability: copy.buggify_produce_delay_probability,
        end_txn_delay_probability: copy.buggify_end_txn_delay_probability,
        delay_ms: copy.buggify_delay_ms,
    };
    loop {
        let producer = SimTransactionalProducer::new(conn.clone(), config.clone());
        match producer.init_transactions(ctx.call_timeout()).await {
            Ok(()) => return producer,
            Err(e) => tracing::debug!(%e, "init_transactions"),
        }
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
}

fn consumer_config(ctx: &Context) -> ConsumerConfig {
    let w = &ctx.scenario.workload;
    let mut config = ConsumerConfig::new(COPY_GROUP);
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.isolation_level = Isolation::ReadCommitted;
    config.session_timeout_ms = w.session_timeout_ms;
    config.heartbeat_interval_ms = (w.session_timeout_ms / 3).max(100);
    config.max_poll_records = ctx.scenario.copy.records_per_transaction_max;
    config.request_timeout_ms = w.request_timeout_ms;
    // The rebalance timeout, which also bounds a JoinGroup: a lost JoinGroup (message
    // faults drop requests outright, where TCP would retransmit) is retried after 25 s
    // instead of Java's default 305 s, within the drain's bound.
    config.max_poll_interval_ms = COPIER_MAX_POLL_INTERVAL_MS;
    config.group_protocol = ctx.scenario.copy.group_protocol;
    config
}

/// A copier: poll, copy in a transaction with the offsets, commit; forever.
async fn copier_process(ctx: Context, name: String, index: u32) {
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    let mut consumer = SimConsumer::new(conn.clone(), consumer_config(&ctx));
    let topics = vec![ctx.scenario.topic.name.clone()];
    while consumer.subscribe(&topics).await.is_err() {
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
    let mut producer = new_txn_producer(&ctx, &conn, index).await;
    let mut local_txn = 0u64;
    loop {
        let records = match consumer.poll(Duration::from_millis(200)).await {
            Ok(records) if !records.is_empty() => records,
            _ => continue,
        };
        let rows: Vec<RecordRef> = records.iter().map(record_ref).collect();
        ctx.record(&name, OpKind::Ok, Value::Poll { records: rows }, None);
        let inject = ctx.scenario.copy.abort_transactions.contains(&local_txn);
        local_txn += 1;
        let outcome = copy_batch(&ctx, &name, &producer, &consumer, &records, inject).await;
        if outcome == Outcome::Committed {
            continue;
        }
        if outcome == Outcome::Recreate {
            crate::mark!("copy:producer-recreated");
            producer = new_txn_producer(&ctx, &conn, index).await;
        }
        if ctx.scenario.copy.rewind_on_abort {
            crate::mark!("copy:rewind-after-abort");
            rewind(&mut consumer).await;
        }
    }
}

/// How a copied batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    /// Aborted; the producer is usable.
    Aborted,
    /// The producer must be recreated (fatal error, or an EndTxn of unknown outcome).
    Recreate,
}

/// One transaction: begin, send every record, add the offsets, commit; records the `txn`
/// op. An error before the commit request aborts.
async fn copy_batch(
    ctx: &Context,
    name: &str,
    producer: &SimTransactionalProducer,
    consumer: &SimConsumer,
    records: &[ConsumedRecord],
    inject_abort: bool,
) -> Outcome {
    let id = ctx.next_txn();
    let transactional_id = name.replace("consumer", "copier");
    let offsets = next_offsets(records);
    let (sends, mut failed) = match producer.begin_transaction() {
        Ok(()) => send_records(ctx, producer, records).await,
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut error = failed.as_ref().map(ToString::to_string);
    if error.is_none() && inject_abort {
        error = Some("injected produce error".to_string());
    }
    if error.is_none() {
        match consumer.group_metadata() {
            Some(group) => {
                let result = producer
                    .send_offsets_to_transaction(&offsets, &group, ctx.call_timeout())
                    .await;
                if let Err(e) = result {
                    error = Some(e.to_string());
                    failed = Some(e);
                }
            }
            None => error = Some("no stable group generation".to_string()),
        }
    }
    let value = Value::Txn {
        id,
        transactional_id,
        sends,
        offsets,
    };
    ctx.record(name, OpKind::Invoke, value.clone(), None);
    if let Some(error) = error {
        let fatal = failed.as_ref().is_some_and(TxnError::is_fatal);
        return abort(ctx, name, producer, value, error, fatal).await;
    }
    match producer.commit_transaction(ctx.call_timeout()).await {
        Ok(()) => {
            ctx.record(name, OpKind::Ok, value, None);
            Outcome::Committed
        }
        Err(e) => {
            ctx.record(name, OpKind::Info, value, Some(e.to_string()));
            Outcome::Recreate
        }
    }
}

/// Aborts the transaction `value` after `error` and records it `fail`: no commit was
/// requested, so it can only abort. A fenced producer is not asked to abort.
async fn abort(
    ctx: &Context,
    name: &str,
    producer: &SimTransactionalProducer,
    value: Value,
    error: String,
    fatal: bool,
) -> Outcome {
    let abort = match fatal {
        true => Err("not aborted: the producer is fenced".to_string()),
        false => producer
            .abort_transaction(ctx.call_timeout())
            .await
            .map_err(|e| e.to_string()),
    };
    let error = match &abort {
        Ok(()) => error,
        Err(why) => format!("{error}; abort: {why}"),
    };
    ctx.record(name, OpKind::Fail, value, Some(error));
    if abort.is_ok() {
        Outcome::Aborted
    } else {
        Outcome::Recreate
    }
}

/// Sends each record unchanged to the output topic until one fails; returns what was
/// sent (offset -1 where unacknowledged) and the error.
async fn send_records(
    ctx: &Context,
    producer: &SimTransactionalProducer,
    records: &[ConsumedRecord],
) -> (Vec<RecordRef>, Option<TxnError>) {
    let topic = ctx.scenario.copy.output_topic.clone();
    let mut sends = Vec::new();
    for r in records {
        madsim::time::sleep(Duration::from_millis(ctx.scenario.copy.process_ms)).await;
        let record = ProducerRecord {
            topic: topic.clone(),
            partition: None,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: Vec::new(),
        };
        let (id, key) = (parse_id(&r.value), text(&r.key));
        match producer.send(record).await {
            Ok(d) => {
                let tp = TopicPartition::new(topic.clone(), d.partition);
                sends.push(RecordRef {
                    id,
                    key,
                    tp,
                    offset: d.offset,
                });
            }
            Err(e) => {
                let tp = TopicPartition::new(topic.clone(), 0);
                sends.push(RecordRef {
                    id,
                    key,
                    tp,
                    offset: -1,
                });
                return (sends, Some(e));
            }
        }
    }
    (sends, None)
}

/// Seeks every assigned partition back to the group's committed offset (0 where none).
async fn rewind(consumer: &mut SimConsumer) {
    let assignment = consumer.assignment();
    if assignment.is_empty() {
        return;
    }
    let Ok(committed) = consumer.committed(&assignment).await else {
        // The next poll after a rejoin positions from the committed offsets anyway; until
        // then, drop what is buffered by seeking every partition to its start.
        for tp in &assignment {
            let _ = consumer.seek(tp, 0);
        }
        return;
    };
    for (tp, offset) in committed {
        let _ = consumer.seek(&tp, offset.max(0));
    }
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
        for i in 0..w.producers {
            let name = format!("producer-{i}");
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 2, i as u8 + 1));
            let (ctx, n) = (self.ctx.clone(), name.clone());
            world.add_node(&name, ip, move || producer_process(ctx.clone(), n.clone()));
        }
        for i in 0..w.consumers {
            let name = format!("consumer-{i}");
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 3, i as u8 + 1));
            let (ctx, n) = (self.ctx.clone(), name.clone());
            world.add_node(&name, ip, move || copier_process(ctx.clone(), n.clone(), i));
        }
    }

    /// Unfinished: producers holding ids; input partitions whose committed offset (group
    /// `copier`) is behind the HW; output partitions not readable or whose LSO is below the
    /// HW ([`LsoGrace`]: a stuck LSO past the grace is not lag but a finding,
    /// `stuck-lso`).
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.producers_done() {
            lag.push("producers not done".to_string());
        }
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let committed: BTreeMap<TopicPartition, Offset> =
            cluster.committed_offsets(COPY_GROUP).into_iter().collect();
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let hw = cluster.high_watermark(&tp).unwrap_or(0);
            let c = committed.get(&tp).copied().unwrap_or(0);
            if c < hw {
                lag.push(format!("{tp}: committed {c} < high watermark {hw}"));
            }
        }
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
            for r in &records {
                let (tp, offset) = input_position
                    .get(&r.id)
                    .cloned()
                    .unwrap_or((r.tp.clone(), r.offset));
                sink.push(RecordRef {
                    id: r.id,
                    key: r.key.clone(),
                    tp,
                    offset,
                });
            }
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

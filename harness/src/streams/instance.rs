//! One simulated processor instance (`streams-i`, one stream thread): a member of the
//! consumer group `application.id`, running one task per assigned input partition.
//!
//! The loop itself is [`super::processor`]'s, shared with the real tier; this module is its
//! simulated host: the sim clients on one [`Connection`], the simulator's clock, the
//! history, the Fetch-based changelog restore ([`super::restore`]), the Streams assignor
//! ([`super::partition_assignor`]) and the standby tasks ([`super::standby`]).

use super::assignor::TaskOffset;
use super::partition_assignor::{Board, StreamsAssignor};
use super::processor::{
    self, ChangelogReader, Processor, ProcessorConfig, Restored, StandbyTask, StreamsHost,
};
use super::restore::restore;
use super::standby;
use super::store::KeyValueStore;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::{Consumer, ConsumerGroupMetadata, ProducerConfig};
use crate::history::{OpKind, Recorder, Value};
use async_trait::async_trait;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::{Isolation, Offset, Request, Response, TopicPartition};

/// Bound on one DeleteRecords of a repartition partition, ms.
const DELETE_RECORDS_TIMEOUT_MS: u64 = 5_000;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an instance needs from the run.
#[derive(Clone)]
pub struct InstanceContext {
    /// The loop's settings (index, `[streams]`, topology, consumer and producer
    /// settings, disks); its process id is drawn when the instance starts.
    pub processor: ProcessorConfig,
    /// Number of brokers.
    pub brokers: u32,
    /// The group's Streams user data.
    pub board: Board,
    /// The history.
    pub recorder: Recorder,
}

/// The simulated host of an instance.
struct SimHost {
    name: String,
    conn: Connection,
    board: Board,
    recorder: Recorder,
    /// What this instance reports to the Streams assignor at its next JoinGroup.
    report: Arc<Mutex<BTreeMap<u32, TaskOffset>>>,
}

#[async_trait]
impl StreamsHost for SimHost {
    type Producer = SimProducer;
    type Txn = SimTransactionalProducer;

    fn now_ns(&self) -> u64 {
        now_ns()
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder
            .record(now_ns(), &self.name, kind, value, error);
    }

    fn producer(&self, config: ProducerConfig) -> Result<SimProducer, String> {
        Ok(SimProducer::new(self.conn.clone(), config))
    }

    fn txn_producer(
        &self,
        transactional_id: String,
        transaction_timeout_ms: u64,
        config: ProducerConfig,
    ) -> Result<SimTransactionalProducer, String> {
        let mut txn = TxnProducerConfig::new(transactional_id);
        txn.transaction_timeout_ms = transaction_timeout_ms;
        txn.producer = config;
        Ok(SimTransactionalProducer::new(self.conn.clone(), txn))
    }

    fn assigned_standbys(&self, group: &ConsumerGroupMetadata) -> Option<BTreeSet<u32>> {
        self.board.standbys(group.generation, &group.member_id)
    }

    async fn update_standbys(
        &self,
        topic: &str,
        isolation: Isolation,
        standbys: &mut BTreeMap<u32, StandbyTask>,
    ) {
        standby::update(&self.conn, topic, isolation, standbys).await;
    }

    async fn delete_records(&self, tp: &TopicPartition, before: Offset) -> Result<Offset, String> {
        let timeout = Duration::from_millis(DELETE_RECORDS_TIMEOUT_MS);
        let leader = self.conn.leader(tp).ok_or("no leader known")?;
        let request = Request::DeleteRecords {
            tp: tp.clone(),
            before,
        };
        match self.conn.request(leader, request, timeout).await {
            Ok(Response::DeleteRecords { low_watermark }) => Ok(low_watermark),
            Ok(other) => Err(format!("{other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }

    fn publish_report(&self, report: BTreeMap<u32, TaskOffset>) {
        *self.report.lock().expect("report lock") = report;
    }
}

/// The restore consumer of a simulated instance: Fetch requests on its connection.
struct SimChangelogReader {
    conn: Connection,
}

#[async_trait]
impl ChangelogReader for SimChangelogReader {
    async fn restore(
        &mut self,
        tp: &TopicPartition,
        from: Offset,
        isolation: Isolation,
        store: &mut KeyValueStore,
    ) -> Result<Restored, String> {
        restore(&self.conn, tp, from, isolation, store).await
    }
}

/// Runs instance `ctx` forever (until its node is killed).
pub async fn run(ctx: InstanceContext) {
    let Ok(conn) = Connection::open(ctx.brokers).await else {
        return;
    };
    let mut cfg = ctx.processor.clone();
    cfg.process_id = processor::initialize_process_id(&cfg, now_ns()).id;
    let report = Arc::new(Mutex::new(BTreeMap::new()));
    let mut consumer = new_consumer(&ctx, &cfg, &conn, &report);
    let mut topics = vec![cfg.topology.source.clone()];
    topics.extend(cfg.topology.repartition_topic(&cfg.spec.application_id));
    topics.extend(cfg.topology.table_topic().map(str::to_string));
    while consumer.subscribe(&topics).await.is_err() {
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
    let host = SimHost {
        name: ctx.processor.name(),
        conn: conn.clone(),
        board: ctx.board.clone(),
        recorder: ctx.recorder.clone(),
        report,
    };
    let writer = processor::new_writer(&cfg, &host).await;
    let reader = SimChangelogReader { conn };
    let mut instance = Processor::new(cfg, host, consumer, reader, writer);
    loop {
        instance.step().await;
    }
}

/// The instance's consumer, with the Streams assignor (cooperative unless `upgrade_from`
/// forces eager).
fn new_consumer(
    ctx: &InstanceContext,
    cfg: &ProcessorConfig,
    conn: &Connection,
    report: &Arc<Mutex<BTreeMap<u32, TaskOffset>>>,
) -> SimConsumer {
    let assignor = StreamsAssignor {
        board: ctx.board.clone(),
        report: report.clone(),
        process_id: cfg.process_id.clone(),
        source: cfg.topology.source.clone(),
        repartition: cfg.topology.repartition_topic(&cfg.spec.application_id),
        table: cfg.topology.table_topic().map(str::to_string),
        changelog: cfg.spec.changelog_topic(),
        config: cfg.spec.assignor_config(),
        cooperative: cfg.cooperative,
    };
    SimConsumer::with_assignor(conn.clone(), cfg.consumer_config(), Arc::new(assignor))
}

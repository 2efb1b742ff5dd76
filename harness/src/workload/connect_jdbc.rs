//! Pipeline `connect-jdbc` (P2): change events through Kafka Connect's JDBC sink into
//! PostgreSQL.
//!
//! # Model
//! - Events: the scenario's explicit `[cdc] events` then `[cdc.generate]` ones, each with
//!   a unique id carried in header `eosim.id` (poison records have no other place for it).
//!   The generator hands them out in order to producer processes (a restarted producer
//!   takes the next one); keyed partitioning by murmur2 of the key text.
//! - Nodes: `postgres` (10.0.5.1) serving the PostgreSQL model; `operator` (10.0.9.2)
//!   creates `[postgres.table]` and the connector through the control API, then restarts
//!   FAILED tasks when `connect.restart_failed_after_ms` > 0; `connect-1..n` (10.0.4.i)
//!   worker processes; `producer-i` (10.0.2.(i+1)); `reader` (10.0.6.1) when
//!   `cdc.read_interval_ms` > 0.
//! - A kill of `postgres` crashes the model (sessions and open transactions lost,
//!   committed rows kept); a kill of a client node ends its sessions.
//!
//! # Ops recorded
//! `send` invoke/ok/fail/info per event; `connector-config` once; `task-status` on every
//! start and failure; `write` per transaction of the sink (its records, invoke then
//! ok/fail/info, see [`JdbcSinkTask::with_write_log`]); `commit` invoke/ok/fail/info per
//! offset commit; `restart-task`; `table-read` when the reader sees a change; a
//! `bad-record` effect per explicit event built to be bad
//! (`cdc_events::bad_record_reason`) as it is sent. After the drain, process `final`
//! records per source partition `log-state` and `source-log`, then `table-state`,
//! `dlq-state` (with a DLQ), `committed-offsets` and every task's `task-status`.

use super::records::IdHandout;
use super::upstream_txn::{self, UpstreamTxn};
use super::{add_connect_workers, node_ip, HistoryWriteLog, Pipeline};
use crate::client::postgres::{value_to_json, PostgresClient};
use crate::client::sends::Sends;
use crate::client::sim::conn::Connection;
use crate::client::sim::postgres::SimPostgres;
use crate::client::sim::producer::SimProducer;
use crate::client::ProducerRecord;
use crate::connect::config::{ConnectorConfig, WorkerConfig};
use crate::connect::herder::{ConfigParser, Herder};
use crate::connect::worker::{dlq_state, final_task_status, SinkFactory, TaskRun, WorkerRuntime};
use crate::history::refs::text;
use crate::history::refs::{id_of, ID_HEADER};
use crate::history::send_outcome;
use crate::history::{OpKind, RecordRef, Recorder, SourceRecord, Value};
use crate::scenario::cdc_events::{bad_record_reason, build_events, Event};
use crate::scenario::{PostgresSpec, Scenario, SynchronousCommit, TopicSpec};
use crate::sinks::jdbc::{parse_connector, JdbcSinkConfig, JdbcSinkTask};
use crate::world::World;
use bytes::Bytes;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::TopicPartition;
use eosim_sim::postgres::service::{postgres_ip, serve_postgres, PostgresWorld};
use eosim_sim::postgres::Database;
use madsim::rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
struct Shared {
    /// Indexes into `Context::events`.
    events: IdHandout,
}

/// Everything a process of the pipeline needs.
#[derive(Clone)]
struct Context {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    events: Arc<Vec<Event>>,
    shared: Arc<Mutex<Shared>>,
    herder: Herder,
    pg: PostgresWorld,
    /// Shared: every record's delivery callback holds a clone of the context.
    connector: Arc<ConnectorConfig>,
    sink: Arc<JdbcSinkConfig>,
    /// The transactional upstream, with `[workload] "transactional.id"`.
    upstream: Option<UpstreamTxn>,
}

impl Context {
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    /// The next event for `process`, or `None` when all are handed out; then the process
    /// counts as idle unless `keep_active` (it still awaits delivery reports, and calls
    /// [`Context::release`] once they are in).
    fn take_event(&self, process: &str, keep_active: bool) -> Option<Event> {
        let total = self.events.len() as u64;
        let mut shared = self.shared.lock().expect("shared lock");
        let i = shared.events.take(process, total, keep_active)?;
        Some(self.events[i as usize].clone())
    }

    /// `process` has every delivery report in: it is idle.
    fn release(&self, process: &str) {
        self.shared
            .lock()
            .expect("shared lock")
            .events
            .release(process);
    }

    fn producers_done(&self) -> bool {
        let shared = self.shared.lock().expect("shared lock");
        shared.events.done(self.events.len() as u64)
    }
}

/// A producer process: sends the change events in order, each awaited, or with
/// `[workload]`'s batching keys ([`crate::scenario::producer`]) queued in the producer's
/// accumulator, each outcome recorded when its delivery report arrives.
async fn producer_process(ctx: Context, name: String) {
    let w = &ctx.scenario.workload;
    let Ok(conn) = Connection::open(ctx.scenario.cluster.brokers).await else {
        return;
    };
    if let Some(upstream) = &ctx.upstream {
        return txn_producer_process(&ctx, upstream, conn, name).await;
    }
    let config = w.retrying_producer_config();
    let mut sends = Sends::new(&config, w.request_timeout_ms);
    let producer = SimProducer::new(conn, config);
    while let Some(e) = ctx.take_event(&name, sends.queued()) {
        let invoke = Value::Send {
            id: e.id,
            key: e.key.clone(),
            tp: None,
            offset: None,
        };
        ctx.record(&name, OpKind::Invoke, invoke, None);
        let record = event_record(&ctx, &name, &e);
        let (ctx, name) = (ctx.clone(), name.clone());
        sends
            .send(&producer, record, move |result| {
                record_event_send(&ctx, &name, e, result)
            })
            .await;
        crate::client::sends::pace(w.produce_interval_ms).await;
    }
    if sends.queued() {
        sends.finish(&producer).await;
        ctx.release(&name);
    }
}

/// Records the outcome of the send of event `e` ([`send_outcome`]), with its partition
/// and offset when written.
fn record_event_send(
    ctx: &Context,
    name: &str,
    e: Event,
    result: Result<crate::client::Delivery, crate::client::ClientError>,
) {
    let (kind, delivery, error) = send_outcome(result);
    let topic = &ctx.scenario.topic.name;
    let value = Value::Send {
        id: e.id,
        key: e.key,
        tp: delivery.map(|d| TopicPartition::new(topic.as_str(), d.partition)),
        offset: delivery.map(|d| d.offset),
    };
    ctx.record(name, kind, value, error);
}

/// Event `e` as the record `process` sends; a `bad-record` effect when it is built to be
/// bad (`cdc_events::bad_record_reason`).
fn event_record(ctx: &Context, process: &str, e: &Event) -> ProducerRecord {
    if let Some(reason) = bad_record_reason(&ctx.scenario, e) {
        let detail = format!("event {} sent: {reason}", e.id);
        eosim_sim::effects::record(eosim_sim::effects::kind::BAD_RECORD, process, detail);
    }
    ProducerRecord {
        topic: ctx.scenario.topic.name.clone(),
        // A null key (a truncate event) goes to partition 0, where the table's other
        // events of a single-partition topic are.
        partition: e.key.is_none().then_some(0),
        key: e.key.clone().map(Bytes::from),
        value: e.value.clone().map(Bytes::from),
        headers: vec![(ID_HEADER.to_string(), Bytes::from(e.id.to_string()))],
    }
}

/// A producer of a transactional upstream ([`super::upstream_txn`]): the same events as
/// [`producer_process`]'s, in transactions.
async fn txn_producer_process(
    ctx: &Context,
    upstream: &UpstreamTxn,
    conn: Connection,
    name: String,
) {
    let mut session = upstream.session(conn, &name).await;
    let next = || {
        let e = ctx.take_event(&name, false)?;
        Some((e.id, e.key.clone(), event_record(ctx, &name, &e)))
    };
    session
        .send_all(next, ctx.scenario.workload.produce_interval_ms)
        .await;
}

/// The operator: creates the table and the connector, then restarts FAILED tasks.
async fn operator_process(ctx: Context) {
    let name = "operator";
    if let Some(table) = &ctx.scenario.postgres.table {
        let mut client = SimPostgres::new(ctx.scenario.postgres.client_timeout_ms);
        while client.execute(table.create_statement()).await.is_err() {
            madsim::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let at_ms = ctx.scenario.connect.connector_create_at_ms;
    let now_ms = now_ns() / 1_000_000;
    if at_ms > now_ms {
        madsim::time::sleep(Duration::from_millis(at_ms - now_ms)).await;
    }
    let raw = ctx.scenario.connector.clone();
    if ctx.herder.create_connector(&raw).is_ok() {
        let value = Value::ConnectorConfig {
            connector: ctx.connector.name.clone(),
            config: raw,
        };
        ctx.record(name, OpKind::Ok, value, None);
    }
    let after_ms = ctx.scenario.connect.restart_failed_after_ms;
    let record = |value| ctx.record(name, OpKind::Ok, value, None);
    super::restart_failed_tasks(&ctx.herder, &ctx.connector.name, after_ms, record).await;
}

/// The reader: selects the table every `cdc.read_interval_ms`, recording changes.
async fn reader_process(ctx: Context) {
    let mut client = SimPostgres::new(ctx.scenario.postgres.client_timeout_ms);
    let mut last = None;
    loop {
        madsim::time::sleep(Duration::from_millis(ctx.scenario.cdc.read_interval_ms)).await;
        let Ok(rows) = client.select(&ctx.sink.table).await else {
            continue;
        };
        let json: Vec<Vec<serde_json::Value>> = rows
            .rows
            .iter()
            .map(|r| r.iter().map(value_to_json).collect())
            .collect();
        if last.as_ref() == Some(&json) {
            continue;
        }
        last = Some(json.clone());
        let value = Value::TableRead {
            table: ctx.sink.table.clone(),
            columns: rows.columns,
            rows: json,
        };
        ctx.record("reader", OpKind::Ok, value, None);
    }
}

/// The `connect-jdbc` pipeline.
pub struct ConnectJdbc {
    ctx: Context,
}

impl ConnectJdbc {
    /// The pipeline of `scenario` (validated at load), recording into `recorder`.
    pub fn new(scenario: Arc<Scenario>, recorder: Recorder) -> Self {
        let connector = parse_connector(&scenario.connector).expect("validated at load");
        let sink =
            JdbcSinkConfig::parse(&scenario.connector, &connector.topics).expect("validated");
        let worker = WorkerConfig::parse(&scenario.connect.worker).expect("validated at load");
        let parser: ConfigParser = Arc::new(parse_connector);
        let upstream = UpstreamTxn::of(&scenario, &recorder);
        let db_config = |spec: &PostgresSpec| {
            // The WAL writer's phase matters only to asynchronous commits; drawn only for
            // them, so other scenarios' seeds draw what they drew before.
            let phase = match spec.synchronous_commit {
                SynchronousCommit::Off => {
                    let delay = spec.wal_writer_delay_ms;
                    madsim::rand::thread_rng().gen_range(0..delay)
                }
                _ => 0,
            };
            spec.db_config(phase)
        };
        let pg = PostgresWorld::new(Database::new(db_config(&scenario.postgres)));
        let ctx = Context {
            events: Arc::new(build_events(&scenario, &mut madsim::rand::thread_rng())),
            scenario,
            recorder,
            shared: Arc::default(),
            herder: Herder::new(worker, parser),
            pg,
            connector: Arc::new(connector),
            sink: Arc::new(sink),
            upstream,
        };
        Self { ctx }
    }

    fn runtime(&self, world: &World) -> WorkerRuntime {
        let timeout_ms = self.ctx.scenario.postgres.client_timeout_ms;
        let recorder = self.ctx.recorder.clone();
        let factory: SinkFactory = Arc::new(move |config: &ConnectorConfig, run: &TaskRun| {
            let sink = JdbcSinkConfig::parse(&config.raw, &config.topics);
            let writes = Arc::new(HistoryWriteLog {
                recorder: recorder.clone(),
                process: run.worker.clone(),
            });
            Box::pin(std::future::ready(sink.map_err(|e| e.to_string()).map(
                |sink| {
                    let client = Box::new(SimPostgres::new(timeout_ms));
                    Box::new(JdbcSinkTask::new(sink, client).with_write_log(writes)) as _
                },
            )))
        });
        WorkerRuntime {
            herder: self.ctx.herder.clone(),
            brokers: world.broker_count(),
            recorder: self.ctx.recorder.clone(),
            factory,
            task_crash_probability: self.ctx.scenario.connect.task_crash_probability,
            source: None,
        }
    }
}

impl Pipeline for ConnectJdbc {
    fn topics(&self) -> Vec<TopicSpec> {
        let mut topics = vec![self.ctx.scenario.topic.clone()];
        if let Some(dlq) = &self.ctx.connector.dlq_topic {
            let t = &self.ctx.scenario.topic;
            let replication_factor = self
                .ctx
                .connector
                .dlq_replication_factor
                .min(t.replication_factor);
            topics.push(TopicSpec {
                name: dlq.clone(),
                partitions: 1,
                replication_factor,
                ..t.clone()
            });
        }
        topics
    }

    fn start(&mut self, world: &mut World) {
        for e in self.ctx.events.iter() {
            if bad_record_reason(&self.ctx.scenario, e).is_some() {
                // Each planned bad record must be produced to count as exercised.
                eosim_sim::effects::arm(eosim_sim::effects::kind::BAD_RECORD);
            }
        }
        let pg = self.ctx.pg.clone();
        world.add_node("postgres", postgres_ip(), move || {
            serve_postgres(pg.clone())
        });
        let pg = self.ctx.pg.clone();
        world.on_kill(Box::new(move |name, ip, _mode| {
            let (sessions, commits, whose) = if name == "postgres" {
                let crashed = pg.crash();
                (crashed.sessions, crashed.commits, "postgres lost")
            } else {
                (pg.client_gone(ip), 0, "postgres ended")
            };
            let mut lost = Vec::new();
            if sessions > 0 {
                lost.push(format!(
                    "{whose} {sessions} sessions (their open transactions rolled back)"
                ));
            }
            if commits > 0 {
                lost.push(format!(
                    "postgres lost {commits} committed transaction(s) the WAL writer had not \
                     flushed (synchronous_commit=off)"
                ));
            }
            (!lost.is_empty()).then(|| lost.join(", "))
        }));
        let ctx = self.ctx.clone();
        world.add_node("operator", node_ip(9, 2), move || {
            operator_process(ctx.clone())
        });
        let rt = self.runtime(world);
        add_connect_workers(world, &rt, self.ctx.scenario.connect.workers);
        for i in 0..self.ctx.scenario.workload.producers {
            let (ctx, name) = (self.ctx.clone(), format!("producer-{i}"));
            world.add_node(&name.clone(), node_ip(2, i as u8 + 1), move || {
                producer_process(ctx.clone(), name.clone())
            });
        }
        if self.ctx.scenario.cdc.read_interval_ms > 0 {
            let ctx = self.ctx.clone();
            world.add_node("reader", node_ip(6, 1), move || reader_process(ctx.clone()));
        }
    }

    /// Unfinished: events not yet produced, partitions whose committed offset (group
    /// `connect-<name>`) is behind the high watermark, and then every task's state.
    fn lag(&self, world: &World) -> Vec<String> {
        let mut lag = Vec::new();
        if !self.ctx.producers_done() {
            lag.push("producers not done".to_string());
        }
        let group = self.ctx.connector.group_id();
        let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
        let now_ms = world.kafka.now_ms();
        let transactional = self
            .ctx
            .upstream
            .as_ref()
            .map(|_| self.ctx.connector.isolation_level);
        lag.extend(upstream_txn::group_lag(
            &mut cluster,
            now_ms,
            self.ctx.scenario.topic.topic_partitions(),
            &group,
            transactional,
        ));
        if !lag.is_empty() {
            for t in self
                .ctx
                .herder
                .status(&self.ctx.connector.name)
                .unwrap_or_default()
            {
                let trace = t.trace.map(|t| format!(": {t}")).unwrap_or_default();
                lag.push(format!(
                    "task {}-{} {:?} on {:?}{trace}",
                    self.ctx.connector.name, t.id, t.state, t.worker_id
                ));
            }
        }
        lag
    }

    fn record_final(&self, world: &World) {
        let t = now_ns();
        let rec = |value: Value| {
            self.ctx
                .recorder
                .record(t, "final", OpKind::Ok, value, None)
        };
        let cluster = world.kafka.cluster.lock().expect("cluster lock");
        for tp in self.ctx.scenario.topic.topic_partitions() {
            let records = cluster.records(&tp);
            let refs = records.iter().map(|(offset, r)| RecordRef {
                id: id_of(&r.headers),
                key: text(&r.key),
                tp: tp.clone(),
                offset: *offset,
            });
            rec(Value::LogState {
                tp: tp.clone(),
                records: refs.collect(),
            });
            let source = records.iter().map(|(offset, r)| SourceRecord {
                id: id_of(&r.headers),
                offset: *offset,
                key: text(&r.key),
                value: text(&r.value),
            });
            rec(Value::SourceLog {
                tp,
                records: source.collect(),
            });
        }
        rec(self.table_state());
        if let Some(topic) = &self.ctx.connector.dlq_topic {
            rec(dlq_state(&cluster, topic, |r| id_of(&r.headers)));
        }
        let offsets = cluster.committed_offsets(&self.ctx.connector.group_id());
        drop(cluster);
        if let Some(upstream) = &self.ctx.upstream {
            upstream.record_final();
        }
        rec(Value::CommittedOffsets { offsets });
        for value in final_task_status(&self.ctx.herder, &self.ctx.connector.name) {
            rec(value);
        }
    }
}

impl ConnectJdbc {
    fn table_state(&self) -> Value {
        let db = self.ctx.pg.db.lock().expect("database lock");
        let name = self.ctx.sink.table.clone();
        let Some(table) = db.table(&name) else {
            return Value::TableState {
                table: name,
                columns: Vec::new(),
                rows: Vec::new(),
            };
        };
        let columns = table.columns.iter().map(|c| c.name.clone()).collect();
        let rows = table
            .rows()
            .map(|r| r.iter().map(value_to_json).collect())
            .collect();
        Value::TableState {
            table: name,
            columns,
            rows,
        }
    }
}

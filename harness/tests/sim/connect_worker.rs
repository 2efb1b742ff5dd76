//! The Connect worker's `SinkTaskContext`: a task that rewinds a partition through
//! `offset` reads it again from there, and `request_commit` commits long before
//! `offset.flush.interval.ms` (60 s by default). Then `WorkerSinkTask`'s commits on stop
//! and revocation, its paused redelivery of a retriable batch, the rewind after a throwing
//! `preCommit`, the unbounded `preCommit`, and the DLQ producer that never gives up, each
//! with a [`ScriptedSink`].

use async_trait::async_trait;
use bytes::Bytes;
use eosim::client::sim::{admin::SimAdmin, conn::Connection, producer::SimProducer};
use eosim::client::{Admin, Producer, ProducerConfig, ProducerRecord};
use eosim::connect::config::{ConnectorConfig, WorkerConfig};
use eosim::connect::herder::{ConfigParser, Herder};
use eosim::connect::task::{
    ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
};
use eosim::connect::worker::{worker_process, SinkFactory, TaskRun, WorkerRuntime};
use eosim::world::World;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::{ClusterConfig, Offset, TopicConfig, TopicPartition};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOPIC: &str = "events";
const RECORDS: i64 = 10;

/// Positions, in the order seen.
type Positions = Vec<(TopicPartition, Offset)>;
type Seen = Arc<Mutex<Positions>>;

/// Records what it is given; once it saw offset 5 of partition 0 it rewinds that
/// partition to 2 and asks for a commit; commits what it saw.
struct RewindingSink {
    context: Option<SinkTaskContext>,
    seen: Seen,
    rewound: bool,
}

#[async_trait]
impl SinkTask for RewindingSink {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = Some(context);
    }

    async fn open(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        let ctx = self.context.as_ref().expect("initialized before open");
        assert!(partitions.iter().all(|tp| ctx.assignment().contains(tp)));
        Ok(())
    }

    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        _reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        for r in records {
            if !self.rewound && r.tp.partition == 0 && r.offset >= 5 {
                self.rewound = true;
                let ctx = self.context.as_ref().expect("initialized");
                ctx.offset(r.tp.clone(), 2);
                ctx.request_commit();
            }
            self.seen.lock().expect("lock").push((r.tp, r.offset));
        }
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        Ok(offsets.clone())
    }

    async fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }
}

fn ip(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, a, b))
}

/// Creates the topic (2 partitions) and writes `RECORDS` JSON records to each; creates the
/// one-partition topic `dlq`.
async fn produce() {
    let conn = Connection::open(1).await.expect("connection");
    let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
    admin
        .create_topic(TOPIC, 2, 1, TopicConfig::default())
        .await
        .expect("create topic");
    admin
        .create_topic("dlq", 1, 1, TopicConfig::default())
        .await
        .expect("create the dead-letter queue");
    let producer = SimProducer::new(conn, ProducerConfig::default());
    for i in 0..RECORDS * 2 {
        let record = ProducerRecord {
            topic: TOPIC.into(),
            partition: Some((i % 2) as u32),
            key: None,
            value: Some(Bytes::from(format!("{{\"id\":{i}}}"))),
            headers: Vec::new(),
        };
        producer.send(record).await.expect("send");
    }
}

fn worker_runtime(world: &World, seen: Seen) -> WorkerRuntime {
    let parser: ConfigParser = Arc::new(|raw| ConnectorConfig::parse(raw, &[]));
    let factory: SinkFactory = Arc::new(move |_config: &ConnectorConfig, _: &TaskRun| {
        let sink = RewindingSink {
            context: None,
            seen: seen.clone(),
            rewound: false,
        };
        Box::pin(std::future::ready(Ok(Box::new(sink) as _)))
    });
    WorkerRuntime {
        herder: Herder::new(WorkerConfig::default(), parser),
        brokers: world.broker_count(),
        recorder: world.recorder.clone(),
        factory,
        task_crash_probability: 0.0,
        source: None,
    }
}

/// Runs one worker with the rewinding sink for 20 s; returns what the sink saw and the
/// committed offsets of its group.
fn run_worker() -> (Positions, Positions) {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let seen = Seen::default();
        let rt = worker_runtime(&world, seen.clone());
        world.add_node("producer", ip(2, 1), produce);
        let raw: BTreeMap<String, String> = [
            ("name", "rewind"),
            ("connector.class", "Rewinding"),
            ("topics", TOPIC),
            ("value.converter.schemas.enable", "false"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        madsim::time::sleep(Duration::from_secs(3)).await;
        rt.herder.create_connector(&raw).expect("connector");
        world.add_node("connect-1", ip(4, 1), move || {
            worker_process(rt.clone(), "connect-1".into())
        });
        madsim::time::sleep(Duration::from_secs(20)).await;
        let committed = world
            .kafka
            .cluster
            .lock()
            .expect("cluster")
            .committed_offsets("connect-rewind");
        let seen = seen.lock().expect("lock").clone();
        (seen, committed)
    })
}

#[test]
fn offset_rewinds_the_partition_and_request_commit_commits_before_the_flush_interval() {
    let (seen, committed) = run_worker();
    let of = |p: u32| -> Vec<Offset> {
        seen.iter()
            .filter(|(tp, _)| tp.partition == p)
            .map(|(_, o)| *o)
            .collect()
    };
    let p0 = of(0);
    let resumed = p0
        .iter()
        .rposition(|&o| o == 2)
        .expect("partition 0 read again from 2");
    assert_eq!(
        p0[resumed..],
        (2..RECORDS).collect::<Vec<_>>()[..],
        "{p0:?}"
    );
    assert!(p0[..resumed].starts_with(&[0, 1, 2, 3, 4, 5]), "{p0:?}");
    assert_eq!(
        of(1),
        (0..RECORDS).collect::<Vec<_>>(),
        "partition 1 untouched"
    );
    // The requested commit ran within 20 s, well before offset.flush.interval.ms (60 s).
    assert!(
        !committed.is_empty(),
        "request_commit committed: {committed:?}"
    );
}

/// What a [`ScriptedSink`] does besides recording.
#[derive(Debug, Clone, Copy, Default)]
struct Script {
    /// `put` throws a RetriableException until this sim time, ms, asking for a 1 s
    /// redelivery (`SinkTaskContext::timeout`).
    retriable_until_ms: u64,
    /// The first `pre_commit` with offsets throws.
    fail_first_pre_commit: bool,
    /// `pre_commit` takes this long, ms.
    pre_commit_ms: u64,
    /// `put` reports offset 3 of partition 0 as errant, and cuts its worker's node off the
    /// network (madsim clog) as it does.
    report_and_clog: bool,
    /// `put` does not request a commit: offsets wait for `offset.flush.interval.ms`.
    no_commit_request: bool,
}

/// What the scripted sinks of a run did, shared by every task and run.
#[derive(Debug, Default)]
struct Log {
    /// Sim time (ms) of every `put` call and whether it succeeded.
    attempts: Vec<(u64, bool)>,
    /// Records of successful puts.
    delivered: Positions,
    /// `pre_commit` calls so far.
    pre_commits: u32,
    /// The worker's node.
    worker: Option<madsim::task::NodeId>,
    /// When `report_and_clog` cut the worker's node off, ms.
    clogged: Option<u64>,
}

type SharedLog = Arc<Mutex<Log>>;

fn sim_ms() -> u64 {
    madsim::time::TimeHandle::current().elapsed().as_millis() as u64
}

/// A sink that records what it is given and follows its [`Script`].
struct ScriptedSink {
    context: Option<SinkTaskContext>,
    log: SharedLog,
    script: Script,
}

#[async_trait]
impl SinkTask for ScriptedSink {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = Some(context);
    }

    async fn open(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }

    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        let now = sim_ms();
        if now < self.script.retriable_until_ms {
            self.log.lock().expect("lock").attempts.push((now, false));
            self.context.as_ref().expect("initialized").timeout(1_000);
            return Err(ConnectError::Retriable("database busy".into()));
        }
        let mut log = self.log.lock().expect("lock");
        log.attempts.push((now, true));
        for r in records {
            let errant = r.tp.partition == 0 && r.offset == 3;
            if self.script.report_and_clog && errant && log.clogged.is_none() {
                reporter.report(&r, "value out of range")?;
                let node = log.worker.expect("the worker's node is known");
                madsim::net::NetSim::current().clog_node(node);
                log.clogged = Some(now);
            }
            log.delivered.push((r.tp, r.offset));
        }
        if !self.script.no_commit_request {
            self.context.as_ref().expect("initialized").request_commit();
        }
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        let first = {
            let mut log = self.log.lock().expect("lock");
            log.pre_commits += 1;
            log.pre_commits == 1
        };
        madsim::time::sleep(Duration::from_millis(self.script.pre_commit_ms)).await;
        if first && self.script.fail_first_pre_commit {
            return Err(ConnectError::Fatal("flush failed".into()));
        }
        Ok(offsets.clone())
    }

    async fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }
}

/// What a scripted run ended with.
struct Outcome {
    log: Log,
    committed: Positions,
    /// Records in topic `dlq`.
    dlq_records: usize,
}

/// One worker running connector `scripted` (`tasks.max` and `extra` keys) over the
/// 2-partition topic; `act` runs on the test's own task 10 s after the start (the herder
/// at hand); the run lasts `secs`.
fn run_scripted(
    script: Script,
    extra: &[(&str, &str)],
    act: fn(&Herder, &SharedLog),
    secs: u64,
) -> Outcome {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    runtime.block_on(async move {
        let kafka = KafkaWorld::new(Cluster::new(1, ClusterConfig::default()));
        let mut world = World::new(kafka, 1);
        world.add_kafka();
        let log = SharedLog::default();
        let parser: ConfigParser = Arc::new(|raw| ConnectorConfig::parse(raw, &[]));
        let factory_log = log.clone();
        let factory: SinkFactory = Arc::new(move |_: &ConnectorConfig, _: &TaskRun| {
            let sink = ScriptedSink {
                context: None,
                log: factory_log.clone(),
                script,
            };
            Box::pin(std::future::ready(Ok(Box::new(sink) as _)))
        });
        let rt = WorkerRuntime {
            herder: Herder::new(WorkerConfig::default(), parser),
            brokers: world.broker_count(),
            recorder: world.recorder.clone(),
            factory,
            task_crash_probability: 0.0,
            source: None,
        };
        world.add_node("producer", ip(2, 1), produce);
        let mut raw: BTreeMap<String, String> = [
            ("name", "scripted"),
            ("connector.class", "Scripted"),
            ("topics", TOPIC),
            ("value.converter.schemas.enable", "false"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        raw.extend(extra);
        madsim::time::sleep(Duration::from_secs(3)).await;
        rt.herder.create_connector(&raw).expect("connector");
        let herder = rt.herder.clone();
        world.add_node("connect-1", ip(4, 1), move || {
            worker_process(rt.clone(), "connect-1".into())
        });
        log.lock().expect("lock").worker = world.node("connect-1").map(|(id, _)| id);
        madsim::time::sleep(Duration::from_secs(7)).await;
        act(&herder, &log);
        madsim::time::sleep(Duration::from_secs(secs - 10)).await;
        let cluster = world.kafka.cluster.lock().expect("cluster");
        let committed = cluster.committed_offsets("connect-scripted");
        let dlq_records = cluster.records(&TopicPartition::new("dlq", 0)).len();
        drop(cluster);
        let log = std::mem::take(&mut *log.lock().expect("lock"));
        Outcome {
            log,
            committed,
            dlq_records,
        }
    })
}

/// Each record of both partitions delivered by a successful `put` exactly once.
fn assert_delivered_once(delivered: &Positions) {
    let mut sorted = delivered.clone();
    sorted.sort();
    let expected: Positions = (0..2)
        .flat_map(|p| (0..RECORDS).map(move |o| (TopicPartition::new(TOPIC, p), o)))
        .collect();
    assert_eq!(sorted, expected, "delivered once each: {delivered:?}");
}

fn full_commit() -> Positions {
    (0..2)
        .map(|p| (TopicPartition::new(TOPIC, p), RECORDS))
        .collect()
}

/// Connect's graceful stop and its rebalance listener (`WorkerSinkTask.execute` →
/// `closeAllPartitions`, `HandleRebalance.onPartitionsRevoked`): with nothing committed yet
/// (`offset.flush.interval.ms` is 60 s), restarting task 1 at 10 s stops it with a closing
/// commit and a LeaveGroup, task 0 commits its partition before it rejoins, and no record
/// is delivered twice. Before, the stop was an abort and the revocation came after the
/// rejoin: both partitions were read again from the start once the aborted member expired.
#[test]
fn a_restarted_task_and_its_rebalanced_sibling_commit_before_giving_up_partitions() {
    let restart = |herder: &Herder, _: &SharedLog| {
        herder.restart_task("scripted", 1).expect("task 1 exists");
    };
    let script = Script {
        no_commit_request: true,
        ..Script::default()
    };
    let outcome = run_scripted(script, &[("tasks.max", "2")], restart, 62);
    assert_delivered_once(&outcome.log.delivered);
    assert_eq!(outcome.committed, full_commit());
    eosim_sim::marks::assert_hit(&[
        "connect:task-stopped-gracefully",
        "connect:partitions-revoked-committed",
        "client:consumer-revocation-handed-out",
    ]);
}

/// `WorkerSinkTask.deliverMessages`: a RetriableException pauses the partitions and the
/// task keeps polling, redelivering the same batch one `SinkTaskContext::timeout` (1 s)
/// later, so with `max.poll.interval.ms` = 8 s and 20 s of refusals the consumer stays in
/// the group and nothing is read twice. Before, the worker retried every 100 ms without
/// polling: the member left the group, its commit failed and the records came again.
#[test]
fn a_retriable_put_is_redelivered_after_the_task_timeout_while_the_consumer_polls() {
    let script = Script {
        retriable_until_ms: 20_000,
        ..Script::default()
    };
    let extra = [("consumer.override.max.poll.interval.ms", "8000")];
    let outcome = run_scripted(script, &extra, |_, _| {}, 40);
    let refused: Vec<u64> = outcome
        .log
        .attempts
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(t, _)| *t)
        .collect();
    assert!(refused.len() >= 5, "{refused:?}");
    assert!(
        refused.windows(2).all(|w| w[1] - w[0] >= 1_000),
        "redelivered no sooner than the task's timeout: {refused:?}"
    );
    assert_delivered_once(&outcome.log.delivered);
    assert_eq!(outcome.committed, full_commit());
    eosim_sim::marks::assert_hit(&[
        "connect:paused-for-redelivery",
        "connect:redelivered-after-pause",
    ]);
}

/// `WorkerSinkTask.commitOffsets`: a throwing `preCommit` seeks the partitions back to
/// their last committed offsets (here their first positions), so their records are
/// delivered again. Before, the commit was only skipped.
#[test]
fn a_throwing_pre_commit_rewinds_to_the_last_committed_offsets() {
    let script = Script {
        fail_first_pre_commit: true,
        ..Script::default()
    };
    let outcome = run_scripted(script, &[], |_, _| {}, 20);
    let first = TopicPartition::new(TOPIC, 0);
    let again = outcome
        .log
        .delivered
        .iter()
        .filter(|(tp, o)| *tp == first && *o == 0)
        .count();
    assert_eq!(again, 2, "offset 0 delivered again after the rewind");
    assert_eq!(outcome.committed, full_commit());
    eosim_sim::marks::assert_hit(&["connect:pre-commit-failed-rewound"]);
}

/// `offset.flush.timeout.ms` (5 s) bounds the commit, not `preCommit`, which Java calls on
/// the task thread without a bound: a 7 s `preCommit` still commits. Before, every commit
/// was skipped as timed out.
#[test]
fn a_slow_pre_commit_is_not_bounded_by_the_flush_timeout() {
    let script = Script {
        pre_commit_ms: 7_000,
        ..Script::default()
    };
    let outcome = run_scripted(script, &[], |_, _| {}, 40);
    assert_eq!(outcome.committed, full_commit());
}

/// Connect's DLQ producer (`delivery.timeout.ms` = `Integer.MAX_VALUE`) retries an errant
/// record through a 40 s network cut until it is written. Before (30 s), the report was
/// dropped and the record never reached the queue.
#[test]
fn an_errant_record_reaches_the_dlq_after_a_long_network_cut() {
    let script = Script {
        report_and_clog: true,
        ..Script::default()
    };
    let extra = [
        ("errors.tolerance", "all"),
        ("errors.deadletterqueue.topic.name", "dlq"),
    ];
    let outcome = run_scripted(script, &extra, heal_after_40_s, 120);
    assert!(outcome.log.clogged.is_some(), "the errant record was put");
    assert_eq!(outcome.dlq_records, 1, "the report survived the cut");
    assert_eq!(outcome.committed, full_commit());
    eosim_sim::marks::assert_hit(&["connect:commit-awaited-errant-record"]);
}

/// Heals the clog [`ScriptedSink`] made, 40 s after it.
fn heal_after_40_s(_: &Herder, log: &SharedLog) {
    let log = log.clone();
    madsim::task::spawn(async move {
        let (node, clogged) = {
            let log = log.lock().expect("lock");
            (log.worker, log.clogged)
        };
        let (Some(node), Some(at_ms)) = (node, clogged) else {
            panic!("the worker was not cut off by 10 s")
        };
        madsim::time::sleep(Duration::from_millis(
            (at_ms + 40_000).saturating_sub(sim_ms()),
        ))
        .await;
        madsim::net::NetSim::current().unclog_node(node);
    });
}

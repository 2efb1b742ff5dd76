//! The Connect worker's `SinkTaskContext`: a task that rewinds a partition through
//! `offset` reads it again from there, and `request_commit` commits long before
//! `offset.flush.interval.ms` (60 s by default).

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
use eosim::runner::world::World;
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

/// Creates the topic (2 partitions) and writes `RECORDS` JSON records to each.
async fn produce() {
    let conn = Connection::open(1).await.expect("connection");
    let admin = SimAdmin::new(conn.clone(), Duration::from_secs(60));
    admin
        .create_topic(TOPIC, 2, 1, TopicConfig::default())
        .await
        .expect("create topic");
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

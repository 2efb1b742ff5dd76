//! The Kafka model (`eosim_sim::kafka::model::Cluster`) driven request by request, for the
//! model-versus-real suites (`differential.rs`, `txn_differential.rs`,
//! `group_differential.rs`): every link up, a broker down only while killed, time
//! advanced in fixed ticks, parked requests (acks=all produce, long polls) answered
//! by ticking until the model releases them.
//!
//! With one broker every request goes to broker 1. With three, a request goes where a
//! client's metadata would send it: a partition's request to the partition's leader, a
//! group's to the group coordinator (the leader of its `__consumer_offsets` partition), a
//! transactional id's to the transaction coordinator, anything else to the lowest live
//! broker ([`ModelWorld::route`]). [`ModelWorld::call`] then does what librdkafka does on a
//! routing error (`NOT_LEADER_OR_FOLLOWER`, `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`,
//! a dead broker's `REQUEST_TIMED_OUT`, `rdkafka_request.c` `rd_kafka_err_action`): it
//! refreshes the route and sends again after 100 ms, for up to 60 simulated seconds.

use bytes::Bytes;
use eosim_sim::kafka::model::{
    Cluster, CrashMode, Env, ParkToken, Reply, CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC,
};
use eosim_sim::kafka::{
    drop_aborted, BrokerId, ClusterConfig, FetchPartition, Isolation, KafkaError, Offset, Request,
    Response, TimeMs, TopicConfig, TopicPartition,
};

/// The environment: every link up, every broker up but those `down`.
#[derive(Debug, Default)]
pub struct Brokers {
    /// Brokers that are down.
    pub down: std::collections::BTreeSet<BrokerId>,
}

impl Env for Brokers {
    fn broker_up(&self, b: BrokerId) -> bool {
        !self.down.contains(&b)
    }
    fn link_up(&self, _: BrokerId, _: BrokerId) -> bool {
        true
    }
    fn controller_link_up(&self, _: BrokerId) -> bool {
        true
    }
}

/// The model with one or three brokers (ids from 1), driven request by request.
pub struct ModelWorld {
    cluster: Cluster,
    now: TimeMs,
    env: Brokers,
    /// Replication factor of the topics [`ModelWorld::create_topic`] makes: 1, or 3 with
    /// `min.insync.replicas` 2 on three brokers.
    replication_factor: u32,
}

impl ModelWorld {
    /// Simulated ms per tick.
    pub const TICK_MS: TimeMs = 10;
    const STEPS_MAX: u32 = 100_000;

    /// Simulated ms a routing error is retried for (see the module docs).
    const ROUTE_RETRY_MS: TimeMs = 60_000;

    /// One broker with `config`, run for a second so the controller has elected it.
    pub fn new(config: ClusterConfig) -> Self {
        Self::with_brokers(1, config)
    }

    /// `brokers` (1 or 3) brokers with `config`, run for a second so the controller has
    /// elected every leader.
    pub fn with_brokers(brokers: u32, config: ClusterConfig) -> Self {
        let mut w = Self {
            cluster: Cluster::new(brokers, config),
            now: 0,
            env: Brokers::default(),
            replication_factor: brokers.min(3),
        };
        w.advance(1_000);
        w
    }

    /// The model itself, for questions the requests do not ask (leaders, coordinators).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The broker a client would send `request` to (see the module docs); with one broker,
    /// always broker 1.
    pub fn route(&self, request: &Request) -> BrokerId {
        let c = &self.cluster;
        let live = || {
            (1..=c.broker_count())
                .find(|b| !self.env.down.contains(b))
                .unwrap_or(1)
        };
        if c.broker_count() == 1 {
            return 1;
        }
        let routed = match request {
            Request::Produce { tp, .. }
            | Request::ListOffsets { tp, .. }
            | Request::OffsetsForLeaderEpoch { tp, .. } => c.leader(tp),
            Request::Fetch { partitions, .. } => {
                partitions.first().and_then(|(tp, _)| c.leader(tp))
            }
            other => other
                .coordinator_key()
                .and_then(|(key, kind)| c.coordinator_for(key, kind)),
        };
        routed.unwrap_or_else(live)
    }

    /// The model's clock, ms.
    pub fn now(&self) -> TimeMs {
        self.now
    }

    /// Ticks the model for `ms` simulated milliseconds.
    pub fn advance(&mut self, ms: TimeMs) {
        let until = self.now + ms;
        while self.now < until {
            self.now += Self::TICK_MS;
            self.cluster.tick(self.now, &self.env);
        }
    }

    /// Sends `request` where [`ModelWorld::route`] says and ticks until it is answered;
    /// with more than one broker, a routing error is retried as the module docs say (the
    /// last answer is returned when the retries run out).
    ///
    /// # Panics
    /// When a parked request is not answered within 1,000 simulated seconds.
    pub fn call(&mut self, request: Request) -> Response {
        let mut response = self.call_once(request.clone());
        let started = self.now;
        while self.cluster.broker_count() > 1
            && routing_error(&response)
            && self.now < started + Self::ROUTE_RETRY_MS
        {
            self.advance(100);
            response = self.call_once(request.clone());
        }
        response
    }

    fn call_once(&mut self, request: Request) -> Response {
        let broker = self.route(&request);
        let token = match self.cluster.handle(self.now, broker, request) {
            Reply::Done(response) => return response,
            Reply::Parked(token) => token,
        };
        for _ in 0..Self::STEPS_MAX {
            self.advance(Self::TICK_MS);
            if let Some(response) = self.cluster.poll_parked(self.now, &token) {
                return response;
            }
        }
        panic!(
            "model: parked request not answered within {} steps",
            Self::STEPS_MAX
        );
    }

    /// Broker 1's process is killed (its page cache, so its log, survives), stays down
    /// for `down_ms`, starts again and is given 10 s to take its partitions back, as
    /// `Kafka::kill` then `Kafka::restart` do to a real node.
    pub fn restart(&mut self, down_ms: TimeMs) {
        self.kill(1);
        self.advance(down_ms);
        self.env.down.remove(&1);
        self.cluster.restart_broker(self.now, 1);
        self.advance(10_000);
    }

    /// Broker `b`'s process is killed (SIGKILL: its page cache, so its log, survives), as
    /// `Kafka::kill` does to a real node; it stays down until [`ModelWorld::revive`].
    pub fn kill(&mut self, b: BrokerId) {
        self.cluster
            .crash_broker(self.now, b, CrashMode::ProcessKill);
        self.env.down.insert(b);
    }

    /// Ticks until the controller has fenced the killed broker `b` (missed heartbeats for
    /// `broker.session.timeout.ms`) and moved its leaderships, then one more second, as the
    /// real arm waits until the broker is gone from the metadata.
    ///
    /// # Panics
    /// When `b` is not fenced within 60 simulated seconds.
    pub fn wait_fenced(&mut self, b: BrokerId) {
        let started = self.now;
        while !self.cluster.broker_fenced(b) {
            assert!(
                self.now < started + 60_000,
                "model: broker {b} not fenced in 60 s"
            );
            self.advance(Self::TICK_MS);
        }
        self.advance(1_000);
    }

    /// Starts the killed broker `b` again and ticks until every partition (internal ones
    /// included) has its full ISR back, as the real arm waits after `Kafka::restart`.
    ///
    /// # Panics
    /// When the ISRs are not full within 120 simulated seconds.
    pub fn revive(&mut self, b: BrokerId) {
        self.env.down.remove(&b);
        self.cluster.restart_broker(self.now, b);
        let started = self.now;
        while !self.isr_full() {
            assert!(
                self.now < started + 120_000,
                "model: ISRs not full in 120 s"
            );
            self.advance(100);
        }
    }

    /// Whether every partition's ISR holds all its replicas.
    fn isr_full(&self) -> bool {
        let c = &self.cluster;
        let mut topics = c.topics();
        topics.push(CONSUMER_OFFSETS_TOPIC.into());
        topics.push(TRANSACTION_STATE_TOPIC.into());
        topics.iter().all(|t| {
            (0..c.partition_count(t).unwrap_or(0)).all(|p| {
                let tp = TopicPartition::new(t, p);
                c.isr(&tp).len() == c.replicas(&tp).len()
            })
        })
    }

    /// Sends `request` where [`ModelWorld::route`] says, without waiting: its answer, or
    /// the token to ask again with [`ModelWorld::poll`].
    pub fn submit(&mut self, request: Request) -> Result<Response, ParkToken> {
        let broker = self.route(&request);
        match self.cluster.handle(self.now, broker, request) {
            Reply::Done(response) => Ok(response),
            Reply::Parked(token) => Err(token),
        }
    }

    /// The answer to a parked request, if the model has released it.
    pub fn poll(&mut self, token: &ParkToken) -> Option<Response> {
        self.cluster.poll_parked(self.now, token)
    }

    /// Creates `name` with `partitions` partitions (replication factor 1 on one broker; 3
    /// with `min.insync.replicas` 2 on three, as [`topic_config`] says), then lets a second
    /// pass.
    ///
    /// # Panics
    /// When the model refuses.
    pub fn create_topic(&mut self, name: &str, partitions: u32) {
        let (replication_factor, config) = topic_config(self.replication_factor);
        let created = self.call(Request::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor,
            config,
        });
        assert_eq!(created, Response::CreateTopic, "model: create topic {name}");
        self.advance(1_000);
    }

    /// One fetch of `tp` at `position` with `isolation`, no wait.
    ///
    /// # Panics
    /// When the model answers anything but a fetch of that partition without error.
    pub fn fetch_once(
        &mut self,
        tp: &TopicPartition,
        position: Offset,
        isolation: Isolation,
    ) -> FetchPartition {
        let response = self.call(Request::Fetch {
            isolation,
            partitions: vec![(tp.clone(), position)],
            max_bytes: 52_428_800,
            partition_max_bytes: 1_048_576,
            min_bytes: 1,
            max_wait_ms: 0,
            current_leader_epochs: Vec::new(),
        });
        let Response::Fetch { partitions } = response else {
            panic!("model: fetch answered {response:?}")
        };
        let (_, p) = partitions
            .into_iter()
            .next()
            .expect("one partition asked, one answered");
        assert_eq!(p.error, None, "model: fetch error");
        p
    }

    /// Reads `tp` from `from` to its end (the LSO under read_committed, else the high
    /// watermark) as a client would: aborted transactions dropped under read_committed.
    /// Returns the records (offset, key, value) and the end.
    pub fn read(
        &mut self,
        tp: &TopicPartition,
        from: Offset,
        isolation: Isolation,
    ) -> (Vec<(Offset, Bytes, Bytes)>, Offset) {
        let mut position = from;
        let mut records = Vec::new();
        loop {
            let p = self.fetch_once(tp, position, isolation);
            let end = match isolation {
                Isolation::ReadCommitted => p.last_stable_offset,
                Isolation::ReadUncommitted => p.high_watermark,
            };
            let kept = match isolation {
                Isolation::ReadCommitted => drop_aborted(p.records, &p.aborted),
                Isolation::ReadUncommitted => p.records,
            };
            for r in kept {
                let key = r.record.key.clone().unwrap_or_default();
                records.push((r.offset, key, r.record.value.clone().unwrap_or_default()));
            }
            if p.next_fetch_offset >= end || p.next_fetch_offset == position {
                return (records, end);
            }
            position = p.next_fetch_offset;
        }
    }

    /// The committed offsets of `group` for `partitions` of `topic` (-1 where none).
    ///
    /// # Panics
    /// When the model answers anything but the offsets.
    pub fn committed(&mut self, group: &str, topic: &str, partitions: u32) -> Vec<(u32, Offset)> {
        let partitions = (0..partitions)
            .map(|p| TopicPartition::new(topic, p))
            .collect();
        match self.call(Request::OffsetFetch {
            group_id: group.into(),
            partitions,
        }) {
            Response::OffsetFetch { offsets } => offsets
                .into_iter()
                .map(|(tp, o)| (tp.partition, o))
                .collect(),
            other => panic!("model: offset fetch answered {other:?}"),
        }
    }
}

/// The model's configuration as the real clusters run (`real/kafka/server.properties.template`
/// and `KafkaOptions::brokers`): `broker.session.timeout.ms` 6000, 10 partitions for each
/// internal topic; the rest Kafka's defaults.
pub fn real_cluster_config() -> ClusterConfig {
    ClusterConfig {
        broker_session_timeout_ms: 6_000,
        offsets_topic_num_partitions: 10,
        transaction_state_log_num_partitions: 10,
        ..ClusterConfig::default()
    }
}

/// The replication factor and topic configuration of a case's topic on `brokers` brokers:
/// (1, defaults) on one, (3, `min.insync.replicas` 2) on three; both arms use it.
pub fn topic_config(brokers: u32) -> (u32, TopicConfig) {
    match brokers {
        1 => (1, TopicConfig::default()),
        _ => (
            3,
            TopicConfig {
                min_insync_replicas: 2,
                ..TopicConfig::default()
            },
        ),
    }
}

/// An answer a client meets by refreshing its metadata and sending again (see the module
/// docs).
fn routing_error(r: &Response) -> bool {
    matches!(
        r,
        Response::Error(
            KafkaError::NotLeaderOrFollower
                | KafkaError::NotCoordinator
                | KafkaError::CoordinatorNotAvailable
                | KafkaError::RequestTimedOut
                | KafkaError::LeaderNotAvailable
        )
    )
}

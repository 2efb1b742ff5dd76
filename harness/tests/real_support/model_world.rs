//! The Kafka model (`eosim_sim::kafka::model::Cluster`) driven request by request, for the
//! model-versus-real suites (`differential.rs`, `txn_differential.rs`,
//! `group_differential.rs`): every link up, a broker down only while restarted, time
//! advanced in fixed ticks, parked requests (acks=all produce, long polls) answered
//! by ticking until the model releases them.

use bytes::Bytes;
use eosim_sim::kafka::model::{Cluster, CrashMode, Env, ParkToken, Reply};
use eosim_sim::kafka::{
    drop_aborted, BrokerId, ClusterConfig, FetchPartition, Isolation, Offset, Request, Response,
    TimeMs, TopicConfig, TopicPartition,
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

/// The model with one broker (id 1), driven request by request.
pub struct ModelWorld {
    cluster: Cluster,
    now: TimeMs,
    env: Brokers,
}

impl ModelWorld {
    /// Simulated ms per tick.
    pub const TICK_MS: TimeMs = 10;
    const STEPS_MAX: u32 = 100_000;

    /// One broker with `config`, run for a second so the controller has elected it.
    pub fn new(config: ClusterConfig) -> Self {
        let mut w = Self {
            cluster: Cluster::new(1, config),
            now: 0,
            env: Brokers::default(),
        };
        w.advance(1_000);
        w
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

    /// Sends `request` to broker 1 and ticks until it is answered.
    ///
    /// # Panics
    /// When a parked request is not answered within 1,000 simulated seconds.
    pub fn call(&mut self, request: Request) -> Response {
        let token = match self.cluster.handle(self.now, 1, request) {
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
        self.cluster
            .crash_broker(self.now, 1, CrashMode::ProcessKill);
        self.env.down.insert(1);
        self.advance(down_ms);
        self.env.down.remove(&1);
        self.cluster.restart_broker(self.now, 1);
        self.advance(10_000);
    }

    /// Sends `request` to broker 1 without waiting: its answer, or the token to ask again
    /// with [`ModelWorld::poll`].
    pub fn submit(&mut self, request: Request) -> Result<Response, ParkToken> {
        match self.cluster.handle(self.now, 1, request) {
            Reply::Done(response) => Ok(response),
            Reply::Parked(token) => Err(token),
        }
    }

    /// The answer to a parked request, if the model has released it.
    pub fn poll(&mut self, token: &ParkToken) -> Option<Response> {
        self.cluster.poll_parked(self.now, token)
    }

    /// Creates `name` with `partitions` partitions (replication factor 1), then lets a
    /// second pass.
    ///
    /// # Panics
    /// When the model refuses.
    pub fn create_topic(&mut self, name: &str, partitions: u32) {
        let created = self.call(Request::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            config: TopicConfig::default(),
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

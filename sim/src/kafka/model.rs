//! The Kafka cluster as one pure state machine.
//!
//! One [`Cluster`] holds every broker's replicas of every partition, the controller's view
//! (leaders, ISR, leader epochs, fenced brokers) and the group coordinators' state. Broker
//! nodes call [`Cluster::handle`] with their own id; what a broker does unasked (follower
//! fetches, ISR shrink and expand, the controller's elections, session expiry) happens in
//! [`Cluster::tick`], which the service calls every few simulated milliseconds.
//!
//! Requests that Kafka parks (acks=all produce waiting for the high watermark, JoinGroup
//! waiting for the rebalance, SyncGroup waiting for the leader) return [`Reply::Parked`];
//! the service re-asks with [`Cluster::poll_parked`] after every tick until it gets a
//! response or its own timeout fires.

use super::group::GroupCoordinator;
use super::types::*;

/// What the environment tells the model at a tick: which brokers run and which links work.
/// The nemesis owns these facts; the model only reads them.
pub trait Env {
    /// Whether broker `b` runs (not killed, not paused).
    fn broker_up(&self, b: BrokerId) -> bool;
    /// Whether `from` can reach `to` (a follower fetching from its leader, say).
    fn link_up(&self, from: BrokerId, to: BrokerId) -> bool;
    /// Whether broker `b` can reach the KRaft controller quorum (for its heartbeats).
    fn controller_link_up(&self, b: BrokerId) -> bool;
}

/// How a broker dies (models-reference A.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashMode {
    /// The process dies; the page cache survives: its log is intact up to its LEO.
    ProcessKill,
    /// The machine dies: the unflushed tail of every log is lost (everything, since Kafka
    /// does not fsync per write by default).
    MachineCrash,
}

/// A parked request, to be completed by [`Cluster::poll_parked`]. Each owner numbers its
/// own tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ParkToken {
    /// An acks=all produce waiting for the high watermark (numbered by the cluster).
    Produce(u64),
    /// A JoinGroup or SyncGroup waiting for the rebalance (numbered by the group coordinator).
    Group(u64),
}

/// The answer to a request: now, or once the cluster has moved on.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The response.
    Done(Response),
    /// Ask again with [`Cluster::poll_parked`] after the next tick.
    Parked(ParkToken),
}

/// The whole Kafka cluster. See the module docs.
#[derive(Debug)]
pub struct Cluster {
    config: ClusterConfig,
    broker_count: u32,
    groups: GroupCoordinator,
}

impl Cluster {
    /// A cluster of `broker_count` brokers with ids `1..=broker_count`, no topics.
    pub fn new(broker_count: u32, config: ClusterConfig) -> Self {
        let groups = GroupCoordinator::new(config.clone());
        Self { config, broker_count, groups }
    }

    /// The configuration the cluster was built with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// Number of brokers.
    pub fn broker_count(&self) -> u32 {
        self.broker_count
    }

    /// Handles a client request arriving at broker `broker` at time `now`.
    pub fn handle(&mut self, now: TimeMs, broker: BrokerId, request: Request) -> Reply {
        let _ = (now, broker, &self.groups);
        match request {
            _ => unimplemented!("the Kafka model is being written"),
        }
    }

    /// Re-asks a parked request; `None` while it is still waiting.
    pub fn poll_parked(&mut self, now: TimeMs, token: &ParkToken) -> Option<Response> {
        let _ = (now, token);
        unimplemented!("the Kafka model is being written")
    }

    /// Advances what brokers and the controller do on their own up to `now`.
    pub fn tick(&mut self, now: TimeMs, env: &dyn Env) {
        let _ = (now, env);
        unimplemented!("the Kafka model is being written")
    }

    /// Broker `broker` dies.
    pub fn crash_broker(&mut self, now: TimeMs, broker: BrokerId, mode: CrashMode) {
        let _ = (now, broker, mode);
        unimplemented!("the Kafka model is being written")
    }

    /// Broker `broker` starts again and recovers from its log.
    pub fn restart_broker(&mut self, now: TimeMs, broker: BrokerId) {
        let _ = (now, broker);
        unimplemented!("the Kafka model is being written")
    }
}

//! Broker nodes serving the Kafka model over the simulated network.
//!
//! Broker `b` listens on `10.0.1.b:9092`. All brokers share one [`Cluster`] (the model
//! holds every replica, so sharing it is how the model sees the whole cluster); a killed
//! node stops answering and the model is told the broker crashed.

use super::model::Cluster;
use super::BrokerId;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

/// The shared model.
pub type SharedCluster = Arc<Mutex<Cluster>>;

/// Kafka's port in eosim's worlds.
pub const KAFKA_PORT: u16 = 9092;

/// IP of broker `b`: `10.0.1.b`.
pub fn broker_ip(b: BrokerId) -> IpAddr {
    assert!((1..255).contains(&b), "broker ids are 1..=254");
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, b as u8))
}

/// Address of broker `b`.
pub fn broker_addr(b: BrokerId) -> SocketAddr {
    SocketAddr::new(broker_ip(b), KAFKA_PORT)
}

use super::model::{Env, ParkToken, Reply};
use super::types::{Request, Response, TimeMs};
use crate::deadline::Deadline;
use std::time::Duration;
use tokio::sync::Notify;

/// How often the controller and followers act on their own when nothing wakes them, ms.
pub const TICK_INTERVAL_IDLE_MS: u64 = 50;
/// Delay between an append and the followers' fetch of it (one replica fetch round trip).
pub const REPLICA_FETCH_DELAY_MS: u64 = 1;

/// The cluster's shared state on the simulator side: the model, the clock origin, and the
/// bells that wake the ticker (after an append) and parked requests (after a tick).
#[derive(Clone)]
pub struct KafkaWorld {
    /// The model.
    pub cluster: SharedCluster,
    /// [`crate::clock::now_ns`] when the world was made.
    start_ns: u64,
    ticked: Arc<Notify>,
    dirty: Arc<Notify>,
}

impl KafkaWorld {
    /// Wraps a model; time 0 is now.
    pub fn new(cluster: Cluster) -> Self {
        Self {
            cluster: Arc::new(Mutex::new(cluster)),
            start_ns: crate::clock::now_ns(),
            ticked: Arc::default(),
            dirty: Arc::default(),
        }
    }

    /// Simulated ms since the world was made.
    pub fn now_ms(&self) -> TimeMs {
        // Asked for every request and tick: simulated ns, without `Instant` arithmetic.
        (crate::clock::now_ns() - self.start_ns) / 1_000_000
    }

    /// Runs the model's tick loop forever: every [`TICK_INTERVAL_IDLE_MS`], and
    /// [`REPLICA_FETCH_DELAY_MS`] after any request that may write (not after reads such as
    /// Fetch or Metadata) or while acks=all produces wait for followers and the last tick
    /// moved them (Kafka's followers long-poll, so they fetch as soon as the leader
    /// appends). Run it on the controller node.
    pub async fn run_ticker(self, env: Arc<dyn Env + Send + Sync>) {
        let mut waiting = false;
        let mut fingerprint = 0;
        loop {
            let pause_ms = if waiting {
                REPLICA_FETCH_DELAY_MS
            } else {
                TICK_INTERVAL_IDLE_MS
            };
            let idle = Deadline::after(Duration::from_millis(pause_ms));
            tokio::select! {
                // `biased`: tokio picks branches with a thread-local RNG otherwise, which
                // would break replay.
                biased;
                _ = idle => {}
                _ = self.dirty.notified() => {
                    Deadline::after(Duration::from_millis(REPLICA_FETCH_DELAY_MS)).await;
                }
            }
            let now = self.now_ms();
            let mut cluster = self.cluster.lock().expect("cluster lock");
            cluster.tick(now, env.as_ref());
            // Every ms while parked produces progress; once a tick moved none of them, at
            // the idle interval or the next write.
            let now_fingerprint = cluster.parked_produce_fingerprint();
            waiting = cluster.parked_produce_count() > 0 && now_fingerprint != fingerprint;
            fingerprint = now_fingerprint;
            drop(cluster);
            self.ticked.notify_waiters();
        }
    }

    /// Handles one request as broker `broker`, waiting for a parked one to complete or for
    /// `park_timeout` (after which the model is asked one last time at that time).
    pub async fn handle(&self, broker: BrokerId, request: Request) -> Response {
        let park_timeout = park_timeout(&request);
        let writes = writes_state(&request);
        let reply = {
            let now = self.now_ms();
            self.cluster
                .lock()
                .expect("cluster lock")
                .handle(now, broker, request)
        };
        if writes {
            self.dirty.notify_one();
        }
        let token = match reply {
            Reply::Done(response) => return response,
            Reply::Parked(token) => token,
        };
        // One timer for the whole wait, not one per tick.
        let mut expired = Deadline::after(park_timeout);
        loop {
            let ticked = self.ticked.notified();
            let now = self.now_ms();
            if let Some(response) = self
                .cluster
                .lock()
                .expect("cluster lock")
                .poll_parked(now, &token)
            {
                return response;
            }
            tokio::select! {
                // `biased`: see `run_ticker`.
                biased;
                _ = ticked => {}
                _ = &mut expired => break,
            }
        }
        if let ParkToken::Fetch(_) = token {
            // A long poll answers at its `max_wait_ms` with what is readable then.
            let now = self.now_ms();
            let mut cluster = self.cluster.lock().expect("cluster lock");
            if let Some(response) = cluster.poll_parked(now, &token) {
                return response;
            }
        }
        // One tick past the deadline lets the model answer with its own timeout.
        madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_IDLE_MS)).await;
        let now = self.now_ms();
        let mut cluster = self.cluster.lock().expect("cluster lock");
        cluster
            .poll_parked(now, &token)
            .unwrap_or(Response::Error(super::KafkaError::RequestTimedOut))
    }
}

/// Whether `request` may change what the ticker acts on (an append to replicate, a group
/// or transaction to move on); reads ring no bell, so they cost no extra tick.
fn writes_state(request: &Request) -> bool {
    !matches!(
        request,
        Request::Metadata { .. }
            | Request::Fetch { .. }
            | Request::OffsetsForLeaderEpoch { .. }
            | Request::ListOffsets { .. }
            | Request::FindCoordinator { .. }
            | Request::OffsetFetch { .. }
            | Request::OffsetFetchStable { .. }
    )
}

/// How long the broker keeps a request parked: the produce timeout, the fetch's
/// `max_wait_ms`, or the group's rebalance bound.
fn park_timeout(request: &Request) -> Duration {
    match request {
        Request::Produce { timeout_ms, .. } => Duration::from_millis(*timeout_ms),
        Request::Fetch { max_wait_ms, .. } => Duration::from_millis(*max_wait_ms),
        Request::JoinGroup {
            rebalance_timeout_ms,
            ..
        } => Duration::from_millis(rebalance_timeout_ms + TICK_INTERVAL_IDLE_MS * 2),
        _ => Duration::from_secs(60),
    }
}

/// Serves broker `broker` on `10.0.1.<broker>:9092` until the node is killed. Use it as a
/// node's init function so a restart serves again.
pub async fn serve_broker(broker: BrokerId, world: KafkaWorld) {
    let endpoint = madsim::net::Endpoint::bind(broker_addr(broker))
        .await
        .expect("a broker node binds its own address");
    crate::net::serve(endpoint, move |request: Request, _from| {
        let world = world.clone();
        async move { world.handle(broker, request).await }
    })
    .await;
}

//! The `doris-fe` node (10.0.7.1:9030) and the `doris-be` node (10.0.7.2:8040), serving
//! one [`DorisWorld`] over eosim's RPC layer ([`crate::net`]).
//!
//! # Shape
//! Both nodes share the model behind a mutex. What crosses the network is what crosses
//! it in Doris: the FE reaches the BE for reads, commits (the tablets' commit infos) and
//! the publish of COMMITTED transactions (its heartbeat, every [`TICK_INTERVAL_MS`]); the
//! BE reaches the FE for Stream Load (begin and commit) and before it opens a load
//! channel. So a partition between them, or a dead peer, fails those requests with
//! [`DorisError::BackendUnavailable`] and leaves COMMITTED transactions unpublished until
//! the link heals.
//!
//! # Restarts
//! A node's init function runs at every (re)start; the second and later runs of the FE
//! replay its journal ([`Doris::restart_fe`]), of the BE drop its load channels
//! ([`Doris::restart_be`]).

use super::error::DorisError;
use super::group_commit::GroupCommitMode;
use super::model::Doris;
pub use super::protocol::{BeReply, BeRequest, BeResponse, FeReply, FeRequest, FeResponse};
use super::stream_load::{StreamLoadResponse, StreamLoadStatus};
use madsim::net::Endpoint;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The FE's MySQL port (`query_port`).
pub const FE_PORT: u16 = 9030;
/// The BE's HTTP port (`webserver_port`).
pub const BE_PORT: u16 = 8040;
/// How often the FE runs its daemons (timeouts, publish, schedulers), ms.
pub const TICK_INTERVAL_MS: u64 = 100;
/// How long one node waits for the other, ms.
pub const PEER_TIMEOUT_MS: u64 = 1_000;

/// IP of the doris-fe node.
pub fn fe_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 7, 1))
}

/// Address of the doris-fe node.
pub fn fe_addr() -> SocketAddr {
    SocketAddr::new(fe_ip(), FE_PORT)
}

/// IP of the doris-be node.
pub fn be_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 7, 2))
}

/// Address of the doris-be node.
pub fn be_addr() -> SocketAddr {
    SocketAddr::new(be_ip(), BE_PORT)
}

/// The shared model, its clock origin and the nodes' start counts. Cloning shares them.
#[derive(Clone)]
pub struct DorisWorld {
    /// The model.
    pub doris: Arc<Mutex<Doris>>,
    start: madsim::time::Instant,
    fe_starts: Arc<AtomicU32>,
    be_starts: Arc<AtomicU32>,
}

impl DorisWorld {
    /// Wraps the model; time 0 is now.
    pub fn new(doris: Doris) -> Self {
        Self {
            doris: Arc::new(Mutex::new(doris)),
            start: madsim::time::Instant::now(),
            fe_starts: Arc::default(),
            be_starts: Arc::default(),
        }
    }

    /// Simulated ms since the world was made.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The model, locked.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Doris> {
        self.doris.lock().expect("doris lock")
    }
}

async fn peer<Req, Resp>(endpoint: &Endpoint, addr: SocketAddr, req: Req) -> Option<Resp>
where
    Req: Clone + std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    let timeout = Duration::from_millis(PEER_TIMEOUT_MS);
    crate::net::call(endpoint, addr, req, timeout).await.ok()
}

async fn be_alive(endpoint: &Endpoint) -> bool {
    let pong: Option<BeReply> = peer(endpoint, be_addr(), BeRequest::Ping).await;
    pong.is_some()
}

async fn fe_alive(endpoint: &Endpoint) -> bool {
    let ping = FeRequest::ShowTransaction {
        db: String::new(),
        label: String::new(),
    };
    let pong: Option<FeReply> = peer(endpoint, fe_addr(), ping).await;
    pong.is_some()
}

/// Serves the FE until the node is killed. Use it as the doris-fe node's init function.
pub async fn serve_fe(world: DorisWorld) {
    if world.fe_starts.fetch_add(1, Ordering::SeqCst) > 0 {
        world.lock().restart_fe();
    }
    let endpoint = Endpoint::bind(fe_addr()).await.expect("doris-fe binds");
    let be_link = Arc::new(Endpoint::bind("0.0.0.0:0").await.expect("a BE link"));
    let ticker = world.clone();
    let link = be_link.clone();
    madsim::task::spawn(async move {
        loop {
            madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
            let alive = be_alive(&link).await;
            let now = ticker.now_ms();
            ticker.lock().tick(now, alive);
        }
    });
    crate::net::serve(endpoint, move |request: FeRequest, _from| {
        let world = world.clone();
        let link = be_link.clone();
        async move {
            if request.needs_be() && !be_alive(&link).await {
                crate::mark!("doris:fe-cannot-reach-be");
                return Err(DorisError::BackendUnavailable(
                    "doris-be unreachable".into(),
                ));
            }
            let now = world.now_ms();
            world.lock().handle_fe(now, request)
        }
    })
    .await;
}

/// Serves the BE until the node is killed. Use it as the doris-be node's init function.
pub async fn serve_be(world: DorisWorld) {
    if world.be_starts.fetch_add(1, Ordering::SeqCst) > 0 {
        world.lock().restart_be();
    }
    let endpoint = Endpoint::bind(be_addr()).await.expect("doris-be binds");
    let fe_link = Arc::new(Endpoint::bind("0.0.0.0:0").await.expect("an FE link"));
    crate::net::serve(endpoint, move |request: BeRequest, _from| {
        let world = world.clone();
        let link = fe_link.clone();
        async move {
            let needs_fe = !matches!(request, BeRequest::Ping);
            if needs_fe && !fe_alive(&link).await {
                crate::mark!("doris:be-cannot-reach-fe");
                return Err(DorisError::BackendUnavailable(
                    "doris-fe unreachable".into(),
                ));
            }
            let sync = matches!(&request, BeRequest::StreamLoad(r) if r.group_commit == GroupCommitMode::Sync);
            let now = world.now_ms();
            let reply = world.lock().handle_be(now, request);
            match reply {
                Ok(BeResponse::StreamLoaded(resp)) if sync && resp.group_commit => {
                    Ok(BeResponse::StreamLoaded(wait_group_commit(&world, resp).await))
                }
                reply => reply,
            }
        }
    })
    .await;
}

/// A `sync_mode` group commit load is answered once its internal load is VISIBLE, or
/// fails with it (polled every [`TICK_INTERVAL_MS`]; a BE restart meanwhile kills this
/// handler, and the client sees its connection fail).
async fn wait_group_commit(world: &DorisWorld, mut resp: StreamLoadResponse) -> StreamLoadResponse {
    if resp.status != StreamLoadStatus::Success {
        return resp;
    }
    crate::mark!("doris:group-commit-sync-waited");
    loop {
        let outcome = world.lock().group_commit_outcome(resp.txn_id);
        match outcome {
            Some(Ok(())) => return resp,
            Some(Err(reason)) => {
                resp.status = StreamLoadStatus::Fail;
                resp.message = reason;
                return resp;
            }
            None => madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await,
        }
    }
}

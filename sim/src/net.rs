//! eosim's RPC over madsim's simulated network, with message-level faults.
//!
//! This layer adds what madsim does not: a request delayed (so requests overtake each
//! other), dropped before it arrives, delivered twice, or applied with its response lost
//! on the way back (the ambiguous outcome every exactly-once design must survive).
//!
//! Calls stand for requests on a TCP connection: when the server's process dies, or its
//! machine comes back from a crash, the kernel resets the connection and every call still
//! waiting on it fails at once with [`RpcError::Disconnected`] ([`reset_connections`]), as
//! Kafka's `NetworkClient` fails in-flight requests on a disconnect. Without that, a call
//! parked at a dead server (a JoinGroup waits up to the rebalance timeout) would wait out
//! its whole timeout for a response that no process will ever send.
//!
//! A partition ([`set_link_cut`]) or a clog ([`set_clogged`]) does not lose what crosses
//! it, as TCP does not: a request or response sent while its link is cut is held and
//! retransmitted on Linux's schedule ([`retransmission_offsets_ms`]), and arrives at the
//! first retransmission after the heal; it is lost only when the connection is reset
//! meanwhile (the other end's process died or its machine restarted) or TCP gives up
//! (`tcp_retries2`, about 15 minutes; 8 retransmissions, 51 s, once the caller has closed
//! the socket: `tcp_orphan_retries`). A held request survives its caller giving up (a client
//! that times out closes its socket, and the kernel still sends what the socket had
//! queued), so a request can be applied after its caller's timeout, as on a real network.
//! madsim's own clogs (`NetSim::clog_link`) drop packets; the nemesis sets both, and this
//! layer holds every eosim packet before madsim could see the cut. Not modelled: connection
//! set-up (a call made during a cut is held as if its connection stood; over TCP its SYN
//! would wait on a schedule of its own, from 1 s) and the order within a connection (each
//! held packet keeps its own schedule, and madsim's 1-10 ms latencies reorder packets on
//! a link anyway, as TCP would not; a sender that must not overtake what a cut holds, as a
//! socket's close follows its data, waits with [`after_queued`]), a held request's sender killed as a process (it dies with the node's tasks
//! here, where the kernel would still send what the socket had queued), and a paused
//! process (its held packets wait with its tasks, where the kernel would go on
//! retransmitting; after the resume they look at the link at once).
//!
//! Faults are per directed pair of node IPs and live in a thread-local table: each
//! simulation runs on its own OS thread (see `DESIGN.md`, determinism rules), so runs never
//! share it. A client binds `0.0.0.0:0`, so the link's source is the calling *node's* IP
//! ([`register_node`], looked up by madsim's current node), never the bound socket's
//! unspecified address: a fault keyed `producer-0 → broker-1` acts on every socket of
//! `producer-0`. Every random draw comes from `madsim::rand`, so a seed replays bit for bit.
//!
//! Every time a fault acts here, it says so ([`crate::effects`]): a request dropped,
//! duplicated or delayed by N ms, a response dropped, a packet held by a cut link or a
//! clogged node.

use crate::effects::{self, kind};
use madsim::net::Endpoint;
use madsim::rand::Rng;
use madsim::task::NodeId;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Message faults on one directed link (client → server), as probabilities in `[0, 1]`
/// and a delay bound in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MessageFaults {
    /// Probability that a request is lost before it reaches the server.
    pub drop_request_probability: f64,
    /// Probability that the server applies a request and its response is lost.
    pub drop_response_probability: f64,
    /// Probability that a request is delivered twice.
    pub duplicate_probability: f64,
    /// Upper bound of an extra, uniformly drawn delay before a request leaves, in ms.
    pub delay_ms_max: u64,
}

impl MessageFaults {
    /// Whether no fault is set.
    pub fn is_quiet(&self) -> bool {
        *self == Self::default()
    }
}

thread_local! {
    static LINK_FAULTS: RefCell<BTreeMap<(IpAddr, IpAddr), MessageFaults>> =
        const { RefCell::new(BTreeMap::new()) };
}

thread_local! {
    /// Each node's IP, so a call finds its link by the node, not the bound socket.
    static NODE_IPS: RefCell<BTreeMap<NodeId, IpAddr>> = const { RefCell::new(BTreeMap::new()) };
    /// Directed links a partition cut, by IP (mirrors madsim's clogged links).
    static CUT_LINKS: RefCell<BTreeSet<(IpAddr, IpAddr)>> =
        const { RefCell::new(BTreeSet::new()) };
    /// Nodes a clog isolated, by IP.
    static CLOGGED: RefCell<BTreeSet<IpAddr>> = const { RefCell::new(BTreeSet::new()) };
}

/// Registers node `id` at `ip`, named `name` (as in the history): its calls use the links
/// from `ip`, and effects on it name `name`.
pub fn register_node(id: NodeId, ip: IpAddr, name: &str) {
    NODE_IPS.with(|t| t.borrow_mut().insert(id, ip));
    effects::name_node(ip, name);
}

/// The calling node's IP: the registered one, else the endpoint's bound address (a node
/// created outside [`register_node`], as in unit tests that bind their IP explicitly).
fn source_ip(endpoint: &Endpoint) -> Result<IpAddr, RpcError> {
    let node = madsim::plugin::node();
    if let Some(ip) = NODE_IPS.with(|t| t.borrow().get(&node).copied()) {
        return Ok(ip);
    }
    endpoint
        .local_addr()
        .map(|a| a.ip())
        .map_err(|e| RpcError::Transport(e.to_string()))
}

/// Marks the directed link `source → target` cut (`true`) or whole again (`false`): eosim
/// packets sent on a cut link are held until a retransmission finds it whole (see the
/// module's doc). The nemesis clogs madsim's link too, for any other traffic.
pub fn set_link_cut(source: IpAddr, target: IpAddr, cut: bool) {
    CUT_LINKS.with(|t| {
        let mut t = t.borrow_mut();
        if cut {
            t.insert((source, target));
        } else {
            t.remove(&(source, target));
        }
    });
}

/// Marks the node at `ip` clogged (isolated from everyone) or not, as [`set_link_cut`].
pub fn set_clogged(ip: IpAddr, clogged: bool) {
    CLOGGED.with(|t| {
        let mut t = t.borrow_mut();
        if clogged {
            t.insert(ip);
        } else {
            t.remove(&ip);
        }
    });
}

/// Whether a packet from `source` to `target` cannot cross now, and why: a partition
/// ([`kind::PARTITION`]) or a clog ([`kind::CLOG`]).
pub fn link_cut_by(source: IpAddr, target: IpAddr) -> Option<&'static str> {
    if CLOGGED.with(|t| {
        let t = t.borrow();
        t.contains(&source) || t.contains(&target)
    }) {
        Some(kind::CLOG)
    } else if CUT_LINKS.with(|t| t.borrow().contains(&(source, target))) {
        Some(kind::PARTITION)
    } else {
        None
    }
}

/// Linux's retransmission schedule for a segment nobody acknowledges, in ms after its
/// first send: the first retransmission after `TCP_RTO_MIN` (200 ms, the RTO of a
/// low-latency path), each next wait twice the last, capped at `TCP_RTO_MAX` (120 s), 15
/// retransmissions in all (`tcp_retries2`), after which the connection times out (the
/// last wait, 924.6 s after the send). So: 200, 600, 1,400, 3,000, 6,200, 12,600, 25,400,
/// 51,000, 102,200, 204,600, 324,600, 444,600, 564,600, 684,600, 804,600 ms. Source:
/// `include/net/tcp.h` (`TCP_RTO_MIN`, `TCP_RTO_MAX`), `net/ipv4/tcp_timer.c`
/// (`tcp_retransmit_timer` doubles `icsk_rto` up to `TCP_RTO_MAX`; `tcp_write_timeout`
/// gives up after `tcp_retries2`), Documentation/networking/ip-sysctl.rst (`tcp_retries2`
/// = 15, "a hypothetical timeout of 924.6 seconds").
pub fn retransmission_offsets_ms() -> impl Iterator<Item = u64> {
    const RTO_MIN_MS: u64 = 200;
    const RTO_MAX_MS: u64 = 120_000;
    const RETRIES2: usize = 15;
    (0..RETRIES2).scan((0u64, RTO_MIN_MS), |(at, rto), _| {
        *at += *rto;
        *rto = (*rto * 2).min(RTO_MAX_MS);
        Some(*at)
    })
}

/// Retransmissions of a socket its application has closed (an orphan, `SOCK_DEAD`): Linux's
/// `tcp_orphan_retries` default 0 means 8 (`tcp_orphan_retries()` in `net/ipv4/tcp_timer.c`),
/// so what a caller that gave up had queued is retransmitted up to 51 s after its send and
/// the connection is reset at 102.2 s, where an open socket goes on to 804.6 s.
const ORPHAN_RETRIES: usize = 8;

/// Whether the caller of a held request has stopped waiting (timed out, reset, answered):
/// its socket is closed then, and TCP retransmits what it had queued as an orphan's
/// ([`ORPHAN_RETRIES`]). Set by the [`Caller`] guard's drop.
type CallerGone = Arc<AtomicBool>;

/// Lives as long as a call waits for its answer; dropping it marks the call's
/// [`CallerGone`].
struct Caller(CallerGone);

impl Caller {
    fn new() -> (Self, CallerGone) {
        let gone = CallerGone::default();
        (Self(gone.clone()), gone)
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How a packet held by a cut or clog ended ([`hold_across_cut`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crossing {
    /// The link was whole at the send: nothing held.
    Now,
    /// Retransmitted after the heal: send it now.
    AfterHeal,
    /// The connection was reset or timed out while the packet waited: it is lost.
    Lost,
}

/// If the link from `source` to `target` is cut or clogged now, records the effect (one
/// per request or response, its duplicated copies together, naming `what`) and waits as
/// TCP does ([`retransmission_offsets_ms`]) until a retransmission finds the link whole
/// ([`Crossing::AfterHeal`]), `reset` fires (the connection was reset: made from the bell
/// of the server's IP for a request, of the client's for a response, before the packet
/// was held) or TCP gives up ([`Crossing::Lost`]): after 15 retransmissions, or after 8 once
/// `caller_gone` says the sending socket was closed. The wait is in the calling task: a
/// caller that must not lose the packet when it stops waiting spawns it (see
/// [`send_copies`]).
async fn hold_across_cut(
    source: IpAddr,
    target: IpAddr,
    reset: impl Future<Output = ()>,
    caller_gone: Option<&AtomicBool>,
    what: impl FnOnce() -> String,
) -> Crossing {
    let Some(kind) = link_cut_by(source, target) else {
        return Crossing::Now;
    };
    let on = if kind == kind::CLOG { "clogged" } else { "cut" };
    let detail = format!(
        "{} from {} to {} held (link {on}): TCP retransmits it after the heal",
        what(),
        effects::node_name(source),
        effects::node_name(target)
    );
    effects::record(kind, &effects::node_name(source), detail);
    let sent_at = madsim::time::Instant::now();
    tokio::pin!(reset);
    for (done, offset) in retransmission_offsets_ms().enumerate() {
        if done >= ORPHAN_RETRIES && caller_gone.is_some_and(|g| g.load(Ordering::Relaxed)) {
            break;
        }
        let retransmission = sent_at + Duration::from_millis(offset);
        tokio::select! {
            biased;
            () = &mut reset => {
                crate::mark!("net:held-packet-lost-to-reset");
                return Crossing::Lost;
            }
            () = madsim::time::sleep_until(retransmission) => {}
        }
        if link_cut_by(source, target).is_none() {
            crate::mark!("net:held-packet-retransmitted-after-heal");
            return Crossing::AfterHeal;
        }
    }
    crate::mark!("net:held-packet-lost-tcp-gave-up");
    Crossing::Lost
}

/// The name of a request for effect texts: its `Debug` form up to the first delimiter
/// (`Produce`, `Insert`, `Execute`), without formatting the rest.
fn api_name<Req: std::fmt::Debug>(request: &Req) -> String {
    struct FirstWord(String);
    impl std::fmt::Write for FirstWord {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            match s.find(|c: char| !(c.is_alphanumeric() || c == '_')) {
                Some(end) => {
                    self.0.push_str(&s[..end]);
                    Err(std::fmt::Error)
                }
                None => {
                    self.0.push_str(s);
                    Ok(())
                }
            }
        }
    }
    let mut word = FirstWord(String::new());
    let _ = std::fmt::write(&mut word, format_args!("{request:?}"));
    if word.0.is_empty() {
        "request".into()
    } else {
        word.0
    }
}

thread_local! {
    /// Per server IP, the bell rung when its connections are reset.
    static RESET_BELLS: RefCell<BTreeMap<IpAddr, Arc<Notify>>> =
        const { RefCell::new(BTreeMap::new()) };
}

/// The server at `ip` lost its connections (its process was killed, or its machine came
/// back after a crash): every call waiting on it fails with [`RpcError::Disconnected`].
/// Calls made afterwards are not affected.
pub fn reset_connections(ip: IpAddr) {
    RESET_BELLS.with(|t| {
        if let Some(bell) = t.borrow().get(&ip) {
            bell.notify_waiters();
        }
    });
}

fn reset_bell(ip: IpAddr) -> Arc<Notify> {
    RESET_BELLS.with(|t| t.borrow_mut().entry(ip).or_default().clone())
}

/// Sets the message faults from `source` to `target` (both directions are separate links).
pub fn set_message_faults(source: IpAddr, target: IpAddr, faults: MessageFaults) {
    LINK_FAULTS.with(|t| {
        let mut t = t.borrow_mut();
        if faults.is_quiet() {
            t.remove(&(source, target));
        } else {
            t.insert((source, target), faults);
        }
    });
}

/// Removes every message fault, cut link and clog mark (the heal phase).
pub fn clear_message_faults() {
    LINK_FAULTS.with(|t| t.borrow_mut().clear());
    CUT_LINKS.with(|t| t.borrow_mut().clear());
    CLOGGED.with(|t| t.borrow_mut().clear());
}

fn faults_on(source: IpAddr, target: IpAddr) -> MessageFaults {
    LINK_FAULTS.with(|t| {
        t.borrow()
            .get(&(source, target))
            .copied()
            .unwrap_or_default()
    })
}

fn draw(probability: f64) -> bool {
    probability > 0.0 && madsim::rand::thread_rng().gen_bool(probability.min(1.0))
}

/// Why a call got no response. Neither proves the request was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// No response within the timeout (lost request, lost response, partition, dead or
    /// paused server): the outcome is unknown.
    #[error("no response within {timeout_ms} ms from {target}")]
    Timeout {
        /// The server's address.
        target: SocketAddr,
        /// The timeout that expired, in ms.
        timeout_ms: u64,
    },
    /// The server's connections were reset while the call waited (see
    /// [`reset_connections`]): the outcome is unknown.
    #[error("connection to {target} reset")]
    Disconnected {
        /// The server's address.
        target: SocketAddr,
    },
    /// The local endpoint failed.
    #[error("transport error: {0}")]
    Transport(String),
}

/// The tag all eosim requests use; responses use a fresh random tag per call.
const REQUEST_TAG: u64 = 0x656f_7369_6d00_0001;

type Envelope<Req> = (u64, Req);

/// How one request leaves: after `delay_ms`, as `copies` packets (0 when dropped).
struct Departure {
    delay_ms: u64,
    copies: usize,
}

/// Draws how a request from `source` to `target` leaves under the link's faults, held
/// `extra_delay_ms` more by a BUGGIFY point, and records each fault that acted.
fn depart<Req: std::fmt::Debug>(
    source: IpAddr,
    target: SocketAddr,
    request: &Req,
    extra_delay_ms: u64,
) -> Departure {
    let faults = faults_on(source, target.ip());
    let drawn_ms = if faults.delay_ms_max > 0 {
        madsim::rand::thread_rng().gen_range(0..=faults.delay_ms_max)
    } else {
        0
    };
    let dropped = draw(faults.drop_request_probability);
    let copies = if dropped {
        0
    } else if draw(faults.duplicate_probability) {
        2
    } else {
        1
    };
    if drawn_ms == 0 && extra_delay_ms == 0 && copies == 1 {
        return Departure {
            delay_ms: 0,
            copies,
        };
    }
    let process = effects::node_name(source);
    let what = || {
        format!(
            "{} to {}",
            api_name(request),
            effects::node_name(target.ip())
        )
    };
    if drawn_ms > 0 {
        effects::record(
            kind::DELAY,
            &process,
            format!("{} delayed {drawn_ms} ms", what()),
        );
    }
    if extra_delay_ms > 0 {
        let detail = format!("{} held {extra_delay_ms} ms by a BUGGIFY point", what());
        effects::record(kind::BUGGIFY, &process, detail);
    }
    match copies {
        0 => effects::record(kind::DROP_REQUEST, &process, format!("{} dropped", what())),
        2 => effects::record(
            kind::DUPLICATE,
            &process,
            format!("{} delivered twice", what()),
        ),
        _ => {}
    }
    Departure {
        delay_ms: drawn_ms + extra_delay_ms,
        copies,
    }
}

/// Sends `copies` packets of `request` tagged `response_tag`. The last copy is `request`
/// itself: only a duplicated request is cloned. On a cut or clogged link the packets are
/// held in a task of their own ([`hold_across_cut`]), so they still leave after the heal
/// when the caller has stopped waiting.
///
/// # Errors
/// [`RpcError::Transport`] when the local endpoint fails.
async fn send_copies<Req: Clone + std::fmt::Debug + Send + Sync + 'static>(
    endpoint: &Endpoint,
    source: IpAddr,
    target: SocketAddr,
    request: Req,
    response_tag: u64,
    copies: usize,
    caller_gone: &CallerGone,
) -> Result<(), RpcError> {
    if copies > 0 && link_cut_by(source, target.ip()).is_some() {
        let sender = endpoint.clone();
        // Made here, not in the task: a reset between this send and the task's first poll
        // must still end the held request.
        let reset = reset_bell(target.ip()).notified_owned();
        let gone = caller_gone.clone();
        let queued = Queued::new(source, target.ip());
        madsim::task::spawn(async move {
            // Counted until it crossed or was lost (or its node died with this task).
            let _queued = queued;
            let what = || api_name(&request);
            let held = hold_across_cut(source, target.ip(), reset, Some(&gone), what).await;
            if held == Crossing::Lost {
                return;
            }
            // A send error means the local endpoint is gone; nobody waits any more.
            let _ = send_now(&sender, target, request, response_tag, copies).await;
        });
        return Ok(());
    }
    send_now(endpoint, target, request, response_tag, copies).await
}

thread_local! {
    /// Per directed link (by IP), the requests a cut holds in the sender's socket.
    static QUEUED: RefCell<BTreeMap<(IpAddr, IpAddr), u32>> =
        const { RefCell::new(BTreeMap::new()) };
    /// Rung whenever a held request crossed or was lost.
    static QUEUE_MOVED: Arc<Notify> = Arc::default();
}

/// Counts a held request in [`QUEUED`] while it lives.
struct Queued((IpAddr, IpAddr));

impl Queued {
    fn new(source: IpAddr, target: IpAddr) -> Self {
        QUEUED.with(|q| *q.borrow_mut().entry((source, target)).or_default() += 1);
        Self((source, target))
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        // A thread-local may be gone when the runtime drops its tasks at thread exit.
        let _ = QUEUED.try_with(|q| {
            let mut q = q.borrow_mut();
            if let Some(n) = q.get_mut(&self.0) {
                *n -= 1;
                if *n == 0 {
                    q.remove(&self.0);
                }
            }
        });
        let _ = QUEUE_MOVED.try_with(|bell| bell.notify_waiters());
    }
}

/// madsim's largest per-packet latency (`NetConfig::send_latency`, 1-10 ms): a packet sent
/// this much after another on the same link cannot arrive before it.
const LATENCY_MAX: Duration = Duration::from_millis(10);

/// Waits until no request this node sent to `target` is held by a cut any more, then
/// 10 ms more (madsim's largest latency): what a socket sends after its queued data (a
/// close, its FIN) arrives after that data, as over TCP.
///
/// # Errors
/// [`RpcError::Transport`] when the node's IP cannot be found.
pub async fn after_queued(endpoint: &Endpoint, target: SocketAddr) -> Result<(), RpcError> {
    let source = source_ip(endpoint)?;
    let link = (source, target.ip());
    let mut waited = false;
    loop {
        let moved = QUEUE_MOVED.with(|bell| bell.clone());
        let moved = moved.notified();
        if !QUEUED.with(|q| q.borrow().contains_key(&link)) {
            break;
        }
        waited = true;
        moved.await;
    }
    if waited {
        madsim::time::sleep(LATENCY_MAX).await;
    }
    Ok(())
}

/// Sends `copies` packets of `request` tagged `response_tag` into madsim's network now.
async fn send_now<Req: Clone + Send + Sync + 'static>(
    endpoint: &Endpoint,
    target: SocketAddr,
    request: Req,
    response_tag: u64,
    copies: usize,
) -> Result<(), RpcError> {
    let mut request = Some(request);
    for copy in 1..=copies {
        let packet = if copy == copies {
            request.take()
        } else {
            request.clone()
        };
        let envelope: Envelope<Req> = (response_tag, packet.expect("a copy is left"));
        endpoint
            .send_to_raw(target, REQUEST_TAG, Box::new(envelope))
            .await
            .map_err(|e| RpcError::Transport(e.to_string()))?;
    }
    Ok(())
}

/// Calls `target` with `request` and waits at most `timeout` for its response. A delayed
/// request waits in the caller: if the caller stops waiting, it never leaves. A request
/// held by a cut link leaves after the heal whether or not the caller still waits (see
/// the module's doc).
///
/// # Errors
/// [`RpcError::Disconnected`] when the server's connections were reset meanwhile, else
/// [`RpcError::Timeout`] when no response came back in time, whatever the reason.
pub async fn call<Req, Resp>(
    endpoint: &Endpoint,
    target: SocketAddr,
    request: Req,
    timeout: Duration,
) -> Result<Resp, RpcError>
where
    Req: Clone + std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    let source = source_ip(endpoint)?;
    let departure = depart(source, target, &request, 0);
    let response_tag: u64 = madsim::rand::random();
    let (_caller, gone) = Caller::new();
    let exchange = async {
        if departure.delay_ms > 0 {
            madsim::time::sleep(Duration::from_millis(departure.delay_ms)).await;
        }
        let copies = departure.copies;
        send_and_receive(
            endpoint,
            source,
            target,
            request,
            response_tag,
            copies,
            &gone,
        )
        .await
    };
    answer_or_reset(source, target, timeout, exchange).await
}

/// Sends `copies` of `request` now and waits for the response tagged `response_tag`.
async fn send_and_receive<Req, Resp>(
    endpoint: &Endpoint,
    source: IpAddr,
    target: SocketAddr,
    request: Req,
    response_tag: u64,
    copies: usize,
    caller_gone: &CallerGone,
) -> Result<Resp, RpcError>
where
    Req: Clone + std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    send_copies(
        endpoint,
        source,
        target,
        request,
        response_tag,
        copies,
        caller_gone,
    )
    .await?;
    receive(endpoint, response_tag).await
}

/// Waits for the response tagged `response_tag`.
async fn receive<Resp: Send + Sync + 'static>(
    endpoint: &Endpoint,
    response_tag: u64,
) -> Result<Resp, RpcError> {
    let (payload, _) = endpoint
        .recv_from_raw(response_tag)
        .await
        .map_err(|e| RpcError::Transport(e.to_string()))?;
    Ok(*payload
        .downcast::<Resp>()
        .expect("response type matches the request type"))
}

thread_local! {
    /// Calls waiting for a response, per IP of either end.
    static IN_FLIGHT: RefCell<BTreeMap<IpAddr, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Calls from or to `ip` still waiting for their response: what a kill of that node loses
/// in flight.
pub fn in_flight(ip: IpAddr) -> u64 {
    IN_FLIGHT.with(|t| t.borrow().get(&ip).copied().unwrap_or(0))
}

/// Counts a call in flight between two IPs while it lives.
struct InFlight([IpAddr; 2]);

impl InFlight {
    fn new(source: IpAddr, target: IpAddr) -> Self {
        IN_FLIGHT.with(|t| {
            let mut t = t.borrow_mut();
            for ip in [source, target] {
                *t.entry(ip).or_default() += 1;
            }
        });
        Self([source, target])
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // A thread-local may be gone when the runtime drops its tasks at thread exit.
        let _ = IN_FLIGHT.try_with(|t| {
            let mut t = t.borrow_mut();
            for ip in self.0 {
                if let Some(n) = t.get_mut(&ip) {
                    *n = n.saturating_sub(1);
                }
            }
        });
    }
}

/// Runs `exchange` (not yet polled) until it answers, the server's connections are reset
/// ([`RpcError::Disconnected`]) or `timeout` passes ([`RpcError::Timeout`]).
async fn answer_or_reset<Resp>(
    source: IpAddr,
    target: SocketAddr,
    timeout: Duration,
    exchange: impl Future<Output = Result<Resp, RpcError>>,
) -> Result<Resp, RpcError> {
    let timeout_ms = timeout.as_millis() as u64;
    let _in_flight = InFlight::new(source, target.ip());
    // Created before `exchange` sends anything, so a reset from then on is seen even
    // before the first poll.
    let bell = reset_bell(target.ip());
    let reset = bell.notified();
    let answered = async {
        tokio::select! {
            // `biased`: tokio picks branches with a thread-local RNG otherwise, which
            // would break replay.
            biased;
            result = exchange => result,
            () = reset => {
                crate::mark!("net:connection-reset");
                Err(RpcError::Disconnected { target })
            }
        }
    };
    crate::deadline::timeout(timeout, answered)
        .await
        .ok_or(RpcError::Timeout { target, timeout_ms })?
}

/// As [`call`], but a delayed request is in the network, not in the caller: it leaves
/// after its delay even if the caller stopped waiting (timed out), as a packet already
/// sent is not recalled when a client gives up. This is how a produce or EndTxn arrives
/// after its transaction ended (cases.md F8, KAFKA-17754).
///
/// # Errors
/// [`RpcError::Timeout`] when no response came back in time, whatever the reason.
pub async fn call_shared<Req, Resp>(
    endpoint: &std::sync::Arc<Endpoint>,
    target: SocketAddr,
    request: Req,
    timeout: Duration,
) -> Result<Resp, RpcError>
where
    Req: Clone + std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    call_delayed(endpoint, target, request, timeout, Duration::ZERO).await
}

/// As [`call_shared`], with `extra_delay` added to the link's drawn delay: a BUGGIFY-style
/// fault point for a component that wants exactly this request late (cases.md F8); a
/// non-zero `extra_delay` is recorded as a [`kind::BUGGIFY`] effect.
///
/// # Errors
/// [`RpcError::Timeout`] when no response came back in time, whatever the reason.
pub async fn call_delayed<Req, Resp>(
    endpoint: &std::sync::Arc<Endpoint>,
    target: SocketAddr,
    request: Req,
    timeout: Duration,
    extra_delay: Duration,
) -> Result<Resp, RpcError>
where
    Req: Clone + std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    let source = source_ip(endpoint)?;
    let departure = depart(source, target, &request, extra_delay.as_millis() as u64);
    let response_tag: u64 = madsim::rand::random();
    let (_caller, gone) = Caller::new();
    if departure.delay_ms == 0 {
        let copies = departure.copies;
        // Boxed: moving the exchange's large future into `answer_or_reset` copied it.
        let exchange = send_and_receive(
            endpoint,
            source,
            target,
            request,
            response_tag,
            copies,
            &gone,
        );
        return answer_or_reset(source, target, timeout, Box::pin(exchange)).await;
    }
    let sender = endpoint.clone();
    madsim::task::spawn(async move {
        madsim::time::sleep(Duration::from_millis(departure.delay_ms)).await;
        // A send error means the local endpoint is gone; nobody waits any more.
        let _ = send_copies(
            &sender,
            source,
            target,
            request,
            response_tag,
            departure.copies,
            &gone,
        )
        .await;
    });
    answer_or_reset(source, target, timeout, receive(endpoint, response_tag)).await
}

/// Serves requests on `endpoint` forever, one task per request, answering each with
/// `handler`'s response (unless a fault loses it, which is recorded as an effect).
/// `handler` gets the caller's address.
pub async fn serve<Req, Resp, F, Fut>(endpoint: Endpoint, handler: F)
where
    Req: std::fmt::Debug + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
    F: Fn(Req, SocketAddr) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Resp> + Send + 'static,
{
    let endpoint = std::sync::Arc::new(endpoint);
    loop {
        let Ok((payload, from)) = endpoint.recv_from_raw(REQUEST_TAG).await else {
            return;
        };
        let (response_tag, request) = *payload
            .downcast::<Envelope<Req>>()
            .expect("request type matches the service");
        let handler = handler.clone();
        let endpoint = endpoint.clone();
        // Named only where a fault may need the name: formatting costs.
        let api = faults_may_act().then(|| api_name(&request));
        // Boxed: the handler's future is large (see `call_delayed`).
        madsim::task::spawn(Box::pin(async move {
            let response = handler(request, from).await;
            let Ok(local) = source_ip(&endpoint) else {
                return;
            };
            let api = || api.clone().unwrap_or_else(|| "request".into());
            if draw(faults_on(from.ip(), local).drop_response_probability) {
                let detail = format!(
                    "{} response from {} to {} dropped",
                    api(),
                    effects::node_name(local),
                    effects::node_name(from.ip())
                );
                effects::record(kind::DROP_RESPONSE, &effects::node_name(from.ip()), detail);
                return;
            }
            if link_cut_by(local, from.ip()).is_some() {
                let what = || format!("{} response", api());
                // The response waits in this task: a kill of the server ends both. The
                // server's socket stays open (no orphan limit); a reset of the client ends it.
                let reset = reset_bell(from.ip()).notified_owned();
                let held = hold_across_cut(local, from.ip(), reset, None, what).await;
                if held == Crossing::Lost {
                    return;
                }
            }
            // A send error means the caller is gone; there is nobody to tell.
            let _ = endpoint
                .send_to_raw(from, response_tag, Box::new(response))
                .await;
        }));
    }
}

/// Whether any message fault, cut link or clog is set (so a request may need its name).
fn faults_may_act() -> bool {
    message_faults_set()
        || CUT_LINKS.with(|t| !t.borrow().is_empty())
        || CLOGGED.with(|t| !t.borrow().is_empty())
}

/// Whether any message fault is set.
pub fn message_faults_set() -> bool {
    LINK_FAULTS.with(|t| !t.borrow().is_empty())
}

#[cfg(test)]
mod tests;

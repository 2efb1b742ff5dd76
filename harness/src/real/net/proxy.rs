//! Message faults on real connections: a TCP proxy in front of one server's listener that
//! drops a request, loses a response after the server applied the request, delivers a
//! request twice or delays it, per client node, as the simulation's network does per link
//! (`sim/src/net.rs`'s `MessageFaults`, built only under `--cfg madsim`; [`MessageFaults`]
//! here carries the same four settings of a `messages` fault).
//!
//! # Requests and responses on a byte stream
//! The proxy knows no protocol. It serves request/response protocols that have one request
//! in flight per connection (HTTP/1.1 without pipelining, as ClickHouse's HTTP interface
//! is used): the client's bytes after the server's last answer are a new *request*, the
//! server's bytes after that are its *response*. At a request's first bytes the proxy
//! draws `drop_request_probability` (the request never reaches the server) and a delay in
//! `[0, delay_ms_max]` (held back before it leaves); at a response's first bytes
//! `drop_response_probability` (the server has applied the request; its answer is
//! swallowed) and `duplicate_probability` (the request, complete once the server answers
//! it, is sent again on a connection of its own, whose answer is discarded). A dropped
//! request or response leaves the connection silent: the client waits, as for a packet
//! the network lost, until its own timeout closes it.
//!
//! # Kafka's framing
//! Kafka's clients pipeline requests (up to `max.in.flight.requests.per.connection` on one
//! connection), so in front of a broker the proxy reads the protocol's framing instead
//! ([`Framing::Kafka`]): every request and response is a frame, `int32` size then that
//! many bytes, a request's correlation id at bytes 8..12 of its frame and a response's at
//! bytes 4..8 (`RequestHeader` / `ResponseHeader` in Kafka's
//! `clients/src/main/resources/common/message/`). Each request frame draws a drop and a
//! delay; each response frame, matched to its request by correlation id, draws a lost
//! response and a duplicate (the request sent again on a connection of its own, after the
//! original was answered). A request the broker never answers (`acks=0`) is forgotten.
//!
//! # PostgreSQL's framing
//! In front of PostgreSQL the proxy reads the frontend/backend protocol's messages
//! ([`Framing::Postgres`], `postgres`): a request is the client's messages up to a
//! `Sync` or a `Query`, its answer the server's up to the `ReadyForQuery` that ends it,
//! matched in order; startup and authentication are never faulted, and no request is
//! duplicated (a statement belongs to its session).
//!
//! # ZooKeeper's framing
//! In front of ZooKeeper ([`Framing::ZooKeeper`], `zookeeper`) frames are size-prefixed as
//! Kafka's; the session's handshake, pings and watch notifications are never faulted, a request
//! draws a drop and a delay, its answer (by the session's order) a loss, and no request is
//! duplicated (a request belongs to its session).
//!
//! Each time a fault acts, the proxy records an [`Event`] ([`Proxy::take_events`]): the
//! runner turns them into the history's effects ([`eosim_sim::effects::kind`]'s
//! `messages.*`). The client's node comes from `identify` (its socket's cgroup, see
//! [`super::node_of_connection`]); a connection whose client is no node (eosim's own) is
//! never faulted.

mod postgres;
mod zookeeper;

use eosim_sim::effects::kind;
use madsim::rand::rngs::StdRng;
use madsim::rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A `messages` fault's settings for one client: probabilities in `[0, 1]`, a delay bound
/// in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MessageFaults {
    /// `drop_request_probability`.
    pub drop_request_probability: f64,
    /// `drop_response_probability`.
    pub drop_response_probability: f64,
    /// `duplicate_probability`.
    pub duplicate_probability: f64,
    /// `delay_ms_max`.
    pub delay_ms_max: u64,
}

/// The most of a request kept for its duplicate, bytes (a larger one is not duplicated).
const DUPLICATE_MAX_BYTES: usize = 16 << 20;

/// Finds the node name of a connection's client from its address and the proxy's end.
pub type Identify = Arc<dyn Fn(SocketAddr, SocketAddr) -> Option<String> + Send + Sync>;

/// A fault that acted on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, on the run's clock ([`crate::real::clock::run_clock_ns`]).
    pub at_ns: u64,
    /// The effect kind (`messages.drop-request`, ...).
    pub kind: &'static str,
    /// The client's node.
    pub client: String,
    /// What happened, for the history.
    pub detail: String,
}

/// What the connections share: the faults per client node, the events, the dice.
struct Shared {
    server: String,
    framing: Framing,
    upstream: SocketAddr,
    faults: Mutex<BTreeMap<String, MessageFaults>>,
    events: Mutex<Vec<Event>>,
    rng: Mutex<StdRng>,
    stop: AtomicBool,
    identify: Identify,
}

impl Shared {
    fn faults_of(&self, client: &str) -> MessageFaults {
        let faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        faults.get(client).copied().unwrap_or_default()
    }

    fn draw(&self, probability: f64) -> bool {
        probability > 0.0
            && self
                .rng
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .gen_bool(probability.min(1.0))
    }

    fn delay(&self, max_ms: u64) -> u64 {
        if max_ms == 0 {
            return 0;
        }
        self.rng
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gen_range(0..=max_ms)
    }

    fn record(&self, kind: &'static str, client: &str, detail: String) {
        let at_ns = crate::real::clock::run_clock_ns();
        let event = Event {
            at_ns,
            kind,
            client: client.to_string(),
            detail,
        };
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }
}

/// A proxy's dice: the run's `seed` mixed with its server's name (FNV-1a), so two proxies
/// of one run never draw the same sequence.
fn dice_seed(seed: u64, server: &str) -> u64 {
    let fnv = (server.bytes()).fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    seed ^ fnv
}

/// How the proxy tells requests and responses apart on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Framing {
    /// One request in flight: the client's bytes after an answer are the next request
    /// (HTTP/1.1 without pipelining, as ClickHouse's interface is used).
    #[default]
    Alternating,
    /// Kafka's size-prefixed frames, pipelined, matched by correlation id.
    Kafka,
    /// PostgreSQL's typed messages, requests up to each `Sync` / `Query` matched in order to
    /// their `ReadyForQuery` (`postgres`).
    Postgres,
    /// ZooKeeper's size-prefixed frames after the session's handshake, answered in order;
    /// watch notifications pass (`zookeeper`).
    ZooKeeper,
}

/// One connection's state, shared by its two directions.
#[derive(Default)]
struct Conn {
    /// The server has answered the current request (the next client bytes start a new one).
    answered: bool,
    /// The current request's bytes (for a duplicate), `None` once too large.
    request: Option<Vec<u8>>,
    /// Kafka framing: the requests in flight by correlation id (for duplicates).
    in_flight: BTreeMap<i32, Vec<u8>>,
    /// A fault silenced the connection: nothing is forwarded any more.
    silenced: bool,
    /// PostgreSQL framing: where the conversation is.
    pg: postgres::PgFlow,
    /// ZooKeeper framing: whether the handshake has passed.
    zk: zookeeper::ZkFlow,
}

/// The most requests kept in flight per Kafka connection (older ones, never answered,
/// are forgotten).
const IN_FLIGHT_MAX: usize = 64;

/// A proxy on `127.0.0.1:<port>` in front of `upstream`, stopped on drop.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("port", &self.port)
            .field("server", &self.shared.server)
            .finish()
    }
}

impl Proxy {
    /// Starts a proxy for `server` (its node name) at `upstream`, on a free loopback port,
    /// its dice seeded with `seed` and the server's name (FNV-1a of the name, mixed in).
    ///
    /// # Errors
    /// The OS's, when no port can be bound.
    pub fn start(
        server: &str,
        upstream: SocketAddr,
        seed: u64,
        identify: Identify,
    ) -> Result<Self, String> {
        Proxy::start_framed(server, upstream, seed, identify, Framing::Alternating)
    }

    /// [`start`](Self::start) with the protocol's `framing` ([`Framing::Kafka`] in front
    /// of a broker).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_framed(
        server: &str,
        upstream: SocketAddr,
        seed: u64,
        identify: Identify,
        framing: Framing,
    ) -> Result<Self, String> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("{server} proxy: bind: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("{server} proxy: {e}"))?
            .port();
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("{server} proxy: {e}"))?;
        let shared = Arc::new(Shared {
            server: server.to_string(),
            framing,
            upstream,
            faults: Mutex::default(),
            events: Mutex::default(),
            rng: Mutex::new(StdRng::seed_from_u64(dice_seed(seed, server))),
            stop: AtomicBool::new(false),
            identify,
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::spawn(move || accept_loop(&listener, &s));
        Ok(Self {
            port,
            shared,
            accept: Some(accept),
        })
    }

    /// A proxy for `server` in front of its listener on loopback `port`, with `framing`,
    /// telling its clients apart by their cgroups ([`super::node_of_connection`]): what
    /// the real runner puts in front of a server its scenario sends message faults to.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn in_front_of(
        server: &str,
        port: u16,
        seed: u64,
        framing: Framing,
    ) -> Result<Self, String> {
        let identify: Identify =
            Arc::new(|peer, local| super::node_of_connection(peer.port(), local.port()));
        let upstream = SocketAddr::from(([127, 0, 0, 1], port));
        Proxy::start_framed(server, upstream, seed, identify, framing)
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the message faults of the requests `client` sends through this proxy.
    pub fn set_faults(&self, client: &str, faults: MessageFaults) {
        let mut all = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        all.insert(client.to_string(), faults);
    }

    /// Clears every client's faults (the heal); connections a fault silenced stay silent
    /// until their clients close them.
    pub fn clear_faults(&self) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Whether any client has faults set.
    pub fn is_faulted(&self) -> bool {
        let all = self.shared.faults.lock().unwrap_or_else(|p| p.into_inner());
        all.values().any(|f| *f != MessageFaults::default())
    }

    /// The events recorded since the last call.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.shared.events.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, peer)) => {
                let shared = Arc::clone(shared);
                std::thread::spawn(move || serve(client, peer, &shared));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Relays one connection; its client's node is looked up once.
fn serve(client: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect(shared.upstream) else {
        return;
    };
    let node = client
        .local_addr()
        .ok()
        .and_then(|local| (shared.identify)(peer, local));
    let conn = Arc::new(Mutex::new(Conn {
        answered: true,
        ..Conn::default()
    }));
    let (Ok(client_r), Ok(server_w)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = {
        let (shared, conn, node) = (Arc::clone(shared), Arc::clone(&conn), node.clone());
        std::thread::spawn(move || {
            relay_one_way(client_r, server_w, &conn, false, &shared, node.as_deref())
        })
    };
    relay_one_way(server, client, &conn, true, shared, node.as_deref());
    let _ = up.join();
}

/// One direction of a connection (`to_client`: the server's answers), relayed as the
/// proxy's framing reads it, its faults drawn for client `node`.
fn relay_one_way(
    from: TcpStream,
    to: TcpStream,
    conn: &Mutex<Conn>,
    to_client: bool,
    shared: &Shared,
    node: Option<&str>,
) {
    match (shared.framing, to_client) {
        (Framing::Kafka, false) => relay_frames(from, to, conn, false, sized_len, |c, frame| {
            on_kafka_request(shared, node, c, frame)
        }),
        (Framing::Kafka, true) => relay_frames(from, to, conn, true, sized_len, |c, frame| {
            on_kafka_response(shared, node, c, frame)
        }),
        (Framing::ZooKeeper, false) => {
            relay_frames(from, to, conn, false, sized_len, |c, frame| {
                let begins = c.zk.on_client(frame);
                on_session_request(shared, node, c, begins)
            })
        }
        (Framing::ZooKeeper, true) => relay_frames(from, to, conn, true, sized_len, |c, frame| {
            let begins = c.zk.on_server(frame);
            on_session_answer(shared, node, c, begins)
        }),
        (Framing::Postgres, false) => {
            let len = |c: &Conn, buf: &[u8]| c.pg.client_len(buf);
            relay_frames(from, to, conn, false, len, |c, message| {
                let begins = c.pg.on_client(message);
                on_session_request(shared, node, c, begins)
            })
        }
        (Framing::Postgres, true) => {
            let len = |c: &Conn, buf: &[u8]| c.pg.server_len(buf);
            relay_frames(from, to, conn, true, len, |c, message| {
                let begins = c.pg.on_server(message);
                on_session_answer(shared, node, c, begins)
            })
        }
        (Framing::Alternating, false) => relay(from, to, conn, false, |c, chunk| {
            on_request(shared, node, c, chunk)
        }),
        (Framing::Alternating, true) => {
            relay(from, to, conn, true, |c, _| on_response(shared, node, c))
        }
    }
}

/// A size-prefixed frame's whole length (its `int32` size, then that many bytes: Kafka's,
/// ZooKeeper's), once the size is there.
fn sized_len(_: &Conn, buf: &[u8]) -> Option<usize> {
    Some(4 + int32_at(buf, 0)?.max(0) as usize)
}

/// [`relay`] frame by frame: bytes are held until a whole frame is there (`len` reads a
/// frame's whole length from its first bytes, `None` until enough are there), and
/// `decide` sees each frame whole (a frame the stream's end cuts short is not forwarded).
fn relay_frames(
    from: TcpStream,
    to: TcpStream,
    conn: &Mutex<Conn>,
    to_client: bool,
    len: impl Fn(&Conn, &[u8]) -> Option<usize>,
    mut decide: impl FnMut(&mut Conn, &[u8]) -> Pass,
) {
    let mut pending: Vec<u8> = Vec::new();
    relay_with(from, to, conn, to_client, |c, chunk, out| {
        pending.extend_from_slice(chunk);
        let mut delay_ms = 0;
        while let Some(total) = len(c, &pending) {
            if pending.len() < total {
                break;
            }
            match decide(c, &pending[..total]) {
                Pass::Forward { delay_ms: d } => {
                    delay_ms = delay_ms.max(d);
                    out.extend_from_slice(&pending[..total]);
                    pending.drain(..total);
                }
                Pass::Swallow => {
                    pending.clear();
                    break;
                }
            }
            if c.silenced {
                break;
            }
        }
        delay_ms
    });
}

/// What a direction of a connection does with the bytes it just read.
enum Pass {
    /// Forward them after `delay_ms`.
    Forward { delay_ms: u64 },
    /// Swallow them (the connection is silenced).
    Swallow,
}

/// Copies `from` to `to` until either ends, each chunk as `decide` says (nothing once the
/// connection is silenced); then ends `to`'s writing half, unless the connection was
/// silenced and `to` is the client (which must hear nothing, not an end of stream).
fn relay(
    from: TcpStream,
    to: TcpStream,
    conn: &Mutex<Conn>,
    to_client: bool,
    mut decide: impl FnMut(&mut Conn, &[u8]) -> Pass,
) {
    relay_with(from, to, conn, to_client, |c, chunk, out| {
        match decide(c, chunk) {
            Pass::Forward { delay_ms } => {
                out.extend_from_slice(chunk);
                delay_ms
            }
            Pass::Swallow => 0,
        }
    });
}

/// The loop under [`relay`] and [`relay_frames`]: `step` puts what to forward of each
/// chunk read into its output and returns the delay before it leaves, in ms.
fn relay_with(
    mut from: TcpStream,
    mut to: TcpStream,
    conn: &Mutex<Conn>,
    to_client: bool,
    mut step: impl FnMut(&mut Conn, &[u8], &mut Vec<u8>) -> u64,
) {
    let mut buf = vec![0u8; 64 << 10];
    let mut out = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        out.clear();
        let delay_ms = {
            let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
            if c.silenced {
                0
            } else {
                step(&mut c, &buf[..n], &mut out)
            }
        };
        if delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(delay_ms));
        }
        if !out.is_empty() && to.write_all(&out).is_err() {
            break;
        }
    }
    let silenced = conn.lock().unwrap_or_else(|p| p.into_inner()).silenced;
    if !(silenced && to_client) {
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// Client → server: a request's first bytes draw a drop and a delay; its bytes are kept
/// for a duplicate.
fn on_request(shared: &Shared, node: Option<&str>, c: &mut Conn, chunk: &[u8]) -> Pass {
    let mut delay_ms = 0;
    if c.answered {
        c.answered = false;
        c.request = Some(Vec::new());
        if let Some(node) = node {
            let Some(delay) = request_faults(shared, node, c) else {
                return Pass::Swallow;
            };
            delay_ms = delay;
        }
    }
    if let Some(request) = &mut c.request {
        if request.len() + chunk.len() <= DUPLICATE_MAX_BYTES {
            request.extend_from_slice(chunk);
        } else {
            c.request = None;
        }
    }
    Pass::Forward { delay_ms }
}

/// Server → client: a response's first bytes draw a lost response and a duplicate.
fn on_response(shared: &Shared, node: Option<&str>, c: &mut Conn) -> Pass {
    if c.answered {
        return Pass::Forward { delay_ms: 0 };
    }
    c.answered = true;
    let request = c.request.take();
    let Some(node) = node else {
        return Pass::Forward { delay_ms: 0 };
    };
    answer_faults(shared, node, c, request)
}

/// The faults a request draws, in either framing: its drop (which silences the connection;
/// `None`) or its delay in ms.
fn request_faults(shared: &Shared, node: &str, c: &mut Conn) -> Option<u64> {
    let faults = shared.faults_of(node);
    if shared.draw(faults.drop_request_probability) {
        c.silenced = true;
        let detail = format!("a request from {node} to {} dropped", shared.server);
        shared.record(kind::DROP_REQUEST, node, detail);
        return None;
    }
    let delay_ms = shared.delay(faults.delay_ms_max);
    if delay_ms > 0 {
        let detail = format!(
            "a request from {node} to {} delayed {delay_ms} ms",
            shared.server
        );
        shared.record(kind::DELAY, node, detail);
    }
    Some(delay_ms)
}

/// The faults an answer draws, in either framing: a duplicate of its `request` (sent again
/// on a connection of its own), then the answer's loss (which silences the connection).
fn answer_faults(shared: &Shared, node: &str, c: &mut Conn, request: Option<Vec<u8>>) -> Pass {
    let faults = shared.faults_of(node);
    if let Some(request) = request.filter(|_| shared.draw(faults.duplicate_probability)) {
        let detail = format!("a request from {node} to {} delivered twice", shared.server);
        shared.record(kind::DUPLICATE, node, detail);
        let upstream = shared.upstream;
        std::thread::spawn(move || send_again(upstream, &request));
    }
    if shared.draw(faults.drop_response_probability) {
        c.silenced = true;
        let detail = format!(
            "the response of {} to a request from {node} lost (the request was applied)",
            shared.server
        );
        shared.record(kind::DROP_RESPONSE, node, detail);
        return Pass::Swallow;
    }
    Pass::Forward { delay_ms: 0 }
}

/// The big-endian `int32` at `at` of `buf` (a size, a correlation id, an xid), if it is
/// that long.
fn int32_at(buf: &[u8], at: usize) -> Option<i32> {
    let b = buf.get(at..at + 4)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Client → broker, one request frame: draws a drop and a delay; kept for a duplicate.
fn on_kafka_request(shared: &Shared, node: Option<&str>, c: &mut Conn, frame: &[u8]) -> Pass {
    let Some(node) = node else {
        return Pass::Forward { delay_ms: 0 };
    };
    let Some(delay_ms) = request_faults(shared, node, c) else {
        return Pass::Swallow;
    };
    if let Some(id) = int32_at(frame, 8) {
        if frame.len() <= DUPLICATE_MAX_BYTES {
            if c.in_flight.len() >= IN_FLIGHT_MAX {
                c.in_flight.pop_first();
            }
            c.in_flight.insert(id, frame.to_vec());
        }
    }
    Pass::Forward { delay_ms }
}

/// Broker → client, one response frame: its request (by correlation id) draws a
/// duplicate, and the response a loss.
fn on_kafka_response(shared: &Shared, node: Option<&str>, c: &mut Conn, frame: &[u8]) -> Pass {
    let request = int32_at(frame, 4).and_then(|id| c.in_flight.remove(&id));
    let Some(node) = node else {
        return Pass::Forward { delay_ms: 0 };
    };
    answer_faults(shared, node, c, request)
}

/// Client → server, one message of a session protocol (PostgreSQL's, ZooKeeper's), which
/// `begins` a request or not: a request draws a drop and a delay.
fn on_session_request(shared: &Shared, node: Option<&str>, c: &mut Conn, begins: bool) -> Pass {
    let Some(node) = node.filter(|_| begins) else {
        return Pass::Forward { delay_ms: 0 };
    };
    match request_faults(shared, node, c) {
        Some(delay_ms) => Pass::Forward { delay_ms },
        None => Pass::Swallow,
    }
}

/// Server → client, one message of a session protocol, which `begins` an answer or not: an
/// answer draws its loss, never a duplicate (a request belongs to its session: see
/// [`postgres`], [`zookeeper`]).
fn on_session_answer(shared: &Shared, node: Option<&str>, c: &mut Conn, begins: bool) -> Pass {
    let Some(node) = node.filter(|_| begins) else {
        return Pass::Forward { delay_ms: 0 };
    };
    answer_faults(shared, node, c, None)
}

/// Sends `request` again on a connection of its own; its answer is read and discarded.
fn send_again(upstream: SocketAddr, request: &[u8]) {
    let Ok(mut s) = TcpStream::connect(upstream) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    if s.write_all(request).is_err() {
        return;
    }
    let mut sink = [0u8; 8192];
    // The first bytes of the answer say the server took the request; then close.
    let _ = s.read(&mut sink);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// An upstream that answers each line with `ok <n>` (n counts the lines it applied).
    fn line_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let applied = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&applied);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut w = stream.try_clone().unwrap();
                    for line in std::io::BufReader::new(stream)
                        .lines()
                        .map_while(Result::ok)
                    {
                        let n = {
                            let mut l = log.lock().unwrap();
                            l.push(line);
                            l.len()
                        };
                        let _ = w.write_all(format!("ok {n}\n").as_bytes());
                    }
                });
            }
        });
        (addr, applied)
    }

    fn proxy(upstream: SocketAddr) -> Proxy {
        let identify: Identify = Arc::new(|_, _| Some("worker-0".to_string()));
        Proxy::start("clickhouse", upstream, 7, identify).unwrap()
    }

    /// Sends `line` through the proxy; the answer line, or `None` when none came within
    /// 10 s.
    fn call(port: u16, line: &str) -> Option<String> {
        call_within(port, line, Duration::from_secs(10))
    }

    /// As [`call`], waiting `wait` (a lost message never comes: this is the client's own
    /// timeout, not a measured time).
    fn call_within(port: u16, line: &str, wait: Duration) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(wait)).unwrap();
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut answer = String::new();
        match std::io::BufReader::new(s).read_line(&mut answer) {
            Ok(n) if n > 0 => Some(answer.trim().to_string()),
            _ => None,
        }
    }

    /// A proxy with `faults` set for worker-0 in front of a fresh [`line_server`], and
    /// what that server applied.
    fn faulted(faults: MessageFaults) -> (Proxy, Arc<Mutex<Vec<String>>>) {
        let (addr, applied) = line_server();
        let p = proxy(addr);
        p.set_faults("worker-0", faults);
        (p, applied)
    }

    /// Whether `line` through the proxy goes unanswered (waiting 300 ms: a lost message
    /// never comes, so this is the client's timeout, not a measured time).
    fn unanswered(port: u16, line: &str) -> bool {
        call_within(port, line, Duration::from_millis(300)).is_none()
    }

    fn kinds(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn without_faults_every_request_is_answered_once() {
        let (addr, applied) = line_server();
        let p = proxy(addr);
        assert_eq!(call(p.port(), "a").as_deref(), Some("ok 1"));
        assert_eq!(call(p.port(), "b").as_deref(), Some("ok 2"));
        assert!(p.take_events().is_empty());
        assert_eq!(*applied.lock().unwrap(), ["a", "b"]);
    }

    /// Both lose the answer: a dropped request never reached the server, a lost response
    /// left the request applied. The client waits either way; after the heal it is served.
    #[test]
    fn a_dropped_request_is_not_applied_and_a_lost_response_is() {
        let dropped = MessageFaults {
            drop_request_probability: 1.0,
            ..MessageFaults::default()
        };
        let lost = MessageFaults {
            drop_response_probability: 1.0,
            ..MessageFaults::default()
        };
        for (faults, applied_after, effect) in [
            (dropped, 0, kind::DROP_REQUEST),
            (lost, 1, kind::DROP_RESPONSE),
        ] {
            let (p, applied) = faulted(faults);
            assert!(unanswered(p.port(), "insert"), "{effect}");
            assert_eq!(applied.lock().unwrap().len(), applied_after, "{effect}");
            let events = p.take_events();
            assert_eq!(kinds(&events), [effect]);
            assert_eq!(events[0].client, "worker-0");
            p.clear_faults();
            let answer = format!("ok {}", applied_after + 1);
            assert_eq!(call(p.port(), "again"), Some(answer), "{effect}");
        }
    }

    #[test]
    fn a_duplicated_request_is_applied_twice_and_answered_once() {
        let (p, applied) = faulted(MessageFaults {
            duplicate_probability: 1.0,
            ..MessageFaults::default()
        });
        assert_eq!(call(p.port(), "insert").as_deref(), Some("ok 1"));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while applied.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(*applied.lock().unwrap(), ["insert", "insert"]);
        assert_eq!(kinds(&p.take_events()), [kind::DUPLICATE]);
    }

    /// Faults are per client node: a client the proxy cannot name (eosim itself) is never
    /// faulted, and a delay is recorded with its length.
    #[test]
    fn faults_follow_the_client_node() {
        let (addr, _) = line_server();
        let identify: Identify = Arc::new(|_, _| None);
        let p = Proxy::start("clickhouse", addr, 7, identify).unwrap();
        p.set_faults(
            "worker-0",
            MessageFaults {
                drop_request_probability: 1.0,
                ..MessageFaults::default()
            },
        );
        assert_eq!(call(p.port(), "x").as_deref(), Some("ok 1"));
        assert!(p.take_events().is_empty());
        let (q, _) = faulted(MessageFaults {
            delay_ms_max: 50,
            ..MessageFaults::default()
        });
        for i in 0..20 {
            assert!(call(q.port(), &format!("d{i}")).is_some());
        }
        let events = q.take_events();
        assert!(!events.is_empty(), "20 draws in [0, 50] ms, none above 0");
        assert!(events
            .iter()
            .all(|e| e.kind == kind::DELAY && e.detail.contains(" ms")));
    }

    /// A test server's answer to one frame's body (and whether it is its connection's
    /// first): what the frame applied, if anything, and the bytes to answer.
    type Answer = fn(&[u8], bool) -> (Option<String>, Vec<u8>);

    /// A server speaking size-prefixed frames on a fresh loopback port, and what it
    /// applied: `answer` gets each frame's body and whether it is its connection's first,
    /// and returns what the frame applied (logged) and the bytes to answer.
    fn sized_server(answer: Answer) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let applied = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&applied);
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    let mut first = true;
                    while let Some(body) = read_frame(&mut stream) {
                        let (done, reply) = answer(&body, std::mem::replace(&mut first, false));
                        log.lock().unwrap().extend(done);
                        let _ = stream.write_all(&reply);
                    }
                });
            }
        });
        (addr, applied)
    }

    /// A broker stand-in speaking Kafka's framing: each request frame `[size][api_key
    /// i16][api_version i16][correlation_id i32][payload]` is applied (its payload logged)
    /// and answered `[size][correlation_id][payload]`, in order, several in flight.
    fn frame_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        sized_server(|body, _| {
            let mut answer = body[4..8].to_vec();
            answer.extend_from_slice(&body[8..]);
            let payload = String::from_utf8_lossy(&body[8..]).into_owned();
            (Some(payload), sized(&answer))
        })
    }

    fn kafka_request(correlation_id: i32, payload: &str) -> Vec<u8> {
        let mut body = vec![0, 0, 0, 9]; // api_key 0 (Produce), api_version 9
        body.extend_from_slice(&correlation_id.to_be_bytes());
        body.extend_from_slice(payload.as_bytes());
        sized(&body)
    }

    /// `body` as a size-prefixed frame (Kafka's and ZooKeeper's framing).
    fn sized(body: &[u8]) -> Vec<u8> {
        [&(body.len() as i32).to_be_bytes()[..], body].concat()
    }

    /// One size-prefixed frame's body from `s`, `None` at the stream's end or its read
    /// timeout.
    fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
        let mut size = [0u8; 4];
        s.read_exact(&mut size).ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut body).ok()?;
        Some(body)
    }

    /// Sends the requests pipelined on one connection, each frame split across writes;
    /// the (correlation id, payload) of the responses that came within `wait`.
    fn kafka_calls(port: u16, requests: &[(i32, &str)], wait: Duration) -> Vec<(i32, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(wait)).unwrap();
        let bytes: Vec<u8> = requests
            .iter()
            .flat_map(|(id, p)| kafka_request(*id, p))
            .collect();
        for piece in bytes.chunks(5) {
            s.write_all(piece).unwrap();
        }
        let mut out = Vec::new();
        for _ in requests {
            let Some(body) = read_frame(&mut s) else {
                break;
            };
            let id = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            out.push((id, String::from_utf8_lossy(&body[4..]).into_owned()));
        }
        out
    }

    fn kafka_proxy(faults: MessageFaults) -> (Proxy, Arc<Mutex<Vec<String>>>) {
        let (addr, applied) = frame_server();
        let identify: Identify = Arc::new(|_, _| Some("producer-0".to_string()));
        let p = Proxy::start_framed("broker-1", addr, 7, identify, Framing::Kafka).unwrap();
        p.set_faults("producer-0", faults);
        (p, applied)
    }

    /// Pipelined requests pass frame by frame; a duplicate is applied twice (its answer
    /// once, to its correlation id); a dropped request is not applied (nor the one behind
    /// it), a lost response's request is (and the one in flight behind it), and either
    /// silences the connection as a lost packet would.
    #[test]
    fn kafka_frames_are_faulted_one_request_at_a_time_and_matched_by_correlation_id() {
        let wait = Duration::from_secs(10);
        let (p, applied) = kafka_proxy(MessageFaults::default());
        let answers = kafka_calls(p.port(), &[(41, "a"), (42, "b")], wait);
        assert_eq!(answers, [(41, "a".to_string()), (42, "b".to_string())]);
        assert!(p.take_events().is_empty());
        assert_eq!(*applied.lock().unwrap(), ["a", "b"]);

        let (p, applied) = kafka_proxy(MessageFaults {
            duplicate_probability: 1.0,
            ..MessageFaults::default()
        });
        assert_eq!(
            kafka_calls(p.port(), &[(7, "x")], wait),
            [(7, "x".to_string())]
        );
        let deadline = std::time::Instant::now() + wait;
        while applied.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(*applied.lock().unwrap(), ["x", "x"]);
        assert_eq!(kinds(&p.take_events()), [kind::DUPLICATE]);

        let short = Duration::from_millis(300);
        for (faults, applied_after, effect) in [
            (
                MessageFaults {
                    drop_request_probability: 1.0,
                    ..MessageFaults::default()
                },
                0,
                kind::DROP_REQUEST,
            ),
            (
                MessageFaults {
                    drop_response_probability: 1.0,
                    ..MessageFaults::default()
                },
                // Both were on their way before the first answer was lost.
                2,
                kind::DROP_RESPONSE,
            ),
        ] {
            let (p, applied) = kafka_proxy(faults);
            assert!(
                kafka_calls(p.port(), &[(1, "p"), (2, "q")], short).is_empty(),
                "{effect}"
            );
            assert_eq!(applied.lock().unwrap().len(), applied_after, "{effect}");
            assert_eq!(kinds(&p.take_events()), [effect]);
        }
    }

    /// A ZooKeeper stand-in: the first frame is the handshake (answered with a frame of 16
    /// zero bytes); then each request frame `[size][xid i32][type i32][payload]` is applied
    /// (its payload logged) and answered with a watch notification (xid -1) and then
    /// `[size][xid][zxid i64][err i32][payload]`.
    fn zk_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        sized_server(|body, first| {
            if first {
                return (None, sized(&[0; 16]));
            }
            let mut watch = (-1i32).to_be_bytes().to_vec();
            watch.extend_from_slice(&[0; 12]);
            let mut answer = body[..4].to_vec();
            answer.extend_from_slice(&[0; 12]);
            answer.extend_from_slice(&body[8..]);
            let payload = String::from_utf8_lossy(&body[8..]).into_owned();
            (Some(payload), [sized(&watch), sized(&answer)].concat())
        })
    }

    /// Opens a session through `port` and sends one request of `payload`; the xids of the
    /// frames that came back within `wait` after the handshake's answer (`None` when even
    /// that did not come).
    fn zk_call(port: u16, payload: &str, wait: Duration) -> Option<Vec<i32>> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(wait)).unwrap();
        s.write_all(&sized(&[0; 44])).unwrap(); // a ConnectRequest
        read_frame(&mut s)?; // its ConnectResponse
        let mut body = 7i32.to_be_bytes().to_vec(); // xid 7
        body.extend_from_slice(&14i32.to_be_bytes()); // multi
        body.extend_from_slice(payload.as_bytes());
        s.write_all(&sized(&body)).unwrap();
        let frames = (0..2).map_while(|_| read_frame(&mut s));
        Some(frames.map(|f| int32_at(&f, 0).unwrap()).collect())
    }

    /// In front of ZooKeeper the session's handshake is never faulted and a watch
    /// notification passes; a dropped request is not applied, a lost answer's request is,
    /// and no request is sent twice.
    #[test]
    fn zookeeper_requests_are_faulted_after_the_handshake_and_never_duplicated() {
        let zk_proxy = |faults: MessageFaults| {
            let (addr, applied) = zk_server();
            let identify: Identify = Arc::new(|_, _| Some("worker-0".to_string()));
            let p = Proxy::start_framed("keeper", addr, 7, identify, Framing::ZooKeeper).unwrap();
            p.set_faults("worker-0", faults);
            (p, applied)
        };
        let wait = Duration::from_secs(10);
        let (p, applied) = zk_proxy(MessageFaults {
            duplicate_probability: 1.0,
            ..MessageFaults::default()
        });
        assert_eq!(zk_call(p.port(), "a", wait), Some(vec![-1, 7]));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(*applied.lock().unwrap(), ["a"], "nothing sent twice");
        assert!(p.take_events().is_empty());

        let short = Duration::from_millis(300);
        for (faults, answered, applied_after, effect) in [
            (
                MessageFaults {
                    drop_request_probability: 1.0,
                    ..MessageFaults::default()
                },
                vec![],
                0,
                kind::DROP_REQUEST,
            ),
            (
                MessageFaults {
                    drop_response_probability: 1.0,
                    ..MessageFaults::default()
                },
                vec![-1],
                1,
                kind::DROP_RESPONSE,
            ),
        ] {
            let (p, applied) = zk_proxy(faults);
            assert_eq!(zk_call(p.port(), "b", short), Some(answered), "{effect}");
            assert_eq!(applied.lock().unwrap().len(), applied_after, "{effect}");
            assert_eq!(kinds(&p.take_events()), [effect]);
        }
    }
}

//! eosim's RPC over madsim's simulated network, with message-level faults.
//!
//! madsim drops packets on clogged links (network partitions); this layer adds what
//! madsim does not: a request delayed (so requests overtake each other), dropped before it
//! arrives, delivered twice, or applied with its response lost on the way back (the
//! ambiguous outcome every exactly-once design must survive).
//!
//! Calls stand for requests on a TCP connection: when the server's process dies, or its
//! machine comes back from a crash, the kernel resets the connection and every call still
//! waiting on it fails at once with [`RpcError::Disconnected`] ([`reset_connections`]), as
//! Kafka's `NetworkClient` fails in-flight requests on a disconnect. Without that, a call
//! parked at a dead server (a JoinGroup waits up to the rebalance timeout) would wait out
//! its whole timeout for a response that no process will ever send.
//!
//! Faults are per directed pair of IPs and live in a thread-local table: each simulation
//! runs on its own OS thread (see `DESIGN.md`, determinism rules), so runs never share it.
//! Every random draw comes from `madsim::rand`, so a seed replays bit for bit.

use madsim::net::Endpoint;
use madsim::rand::Rng;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
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

/// Removes every message fault (the heal phase).
pub fn clear_message_faults() {
    LINK_FAULTS.with(|t| t.borrow_mut().clear());
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

/// Calls `target` with `request` and waits at most `timeout` for its response.
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
    Req: Clone + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    let source = endpoint
        .local_addr()
        .map_err(|e| RpcError::Transport(e.to_string()))?;
    let faults = faults_on(source.ip(), target.ip());
    let response_tag: u64 = madsim::rand::random();
    let exchange = async {
        if faults.delay_ms_max > 0 {
            let ms = madsim::rand::thread_rng().gen_range(0..=faults.delay_ms_max);
            madsim::time::sleep(Duration::from_millis(ms)).await;
        }
        if draw(faults.drop_request_probability) {
            std::future::pending::<()>().await;
        }
        let copies = if draw(faults.duplicate_probability) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let envelope: Envelope<Req> = (response_tag, request.clone());
            endpoint
                .send_to_raw(target, REQUEST_TAG, Box::new(envelope))
                .await
                .map_err(|e| RpcError::Transport(e.to_string()))?;
        }
        receive(endpoint, response_tag).await
    };
    answer_or_reset(target, timeout, exchange).await
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

/// Runs `exchange` (not yet polled) until it answers, the server's connections are reset
/// ([`RpcError::Disconnected`]) or `timeout` passes ([`RpcError::Timeout`]).
async fn answer_or_reset<Resp>(
    target: SocketAddr,
    timeout: Duration,
    exchange: impl Future<Output = Result<Resp, RpcError>>,
) -> Result<Resp, RpcError> {
    let timeout_ms = timeout.as_millis() as u64;
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
            () = reset => Err(RpcError::Disconnected { target }),
        }
    };
    madsim::time::timeout(timeout, answered)
        .await
        .map_err(|_| RpcError::Timeout { target, timeout_ms })?
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
    Req: Clone + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    call_delayed(endpoint, target, request, timeout, Duration::ZERO).await
}

/// As [`call_shared`], with `extra_delay` added to the link's drawn delay: a BUGGIFY-style
/// fault point for a component that wants exactly this request late (cases.md F8).
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
    Req: Clone + Send + Sync + 'static,
    Resp: Send + Sync + 'static,
{
    let source = endpoint
        .local_addr()
        .map_err(|e| RpcError::Transport(e.to_string()))?;
    let faults = faults_on(source.ip(), target.ip());
    if faults.delay_ms_max == 0 && extra_delay.is_zero() {
        return call(endpoint, target, request, timeout).await;
    }
    let response_tag: u64 = madsim::rand::random();
    let delay_ms = madsim::rand::thread_rng().gen_range(0..=faults.delay_ms_max)
        + extra_delay.as_millis() as u64;
    let drop_request = draw(faults.drop_request_probability);
    let copies = if draw(faults.duplicate_probability) {
        2
    } else {
        1
    };
    let sender = endpoint.clone();
    madsim::task::spawn(async move {
        madsim::time::sleep(Duration::from_millis(delay_ms)).await;
        for _ in 0..copies * usize::from(!drop_request) {
            let envelope: Envelope<Req> = (response_tag, request.clone());
            // A send error means the local endpoint is gone; nobody waits any more.
            let _ = sender
                .send_to_raw(target, REQUEST_TAG, Box::new(envelope))
                .await;
        }
    });
    answer_or_reset(target, timeout, receive(endpoint, response_tag)).await
}

/// Serves requests on `endpoint` forever, one task per request, answering each with
/// `handler`'s response (unless a fault loses it). `handler` gets the caller's address.
pub async fn serve<Req, Resp, F, Fut>(endpoint: Endpoint, handler: F)
where
    Req: Send + Sync + 'static,
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
        madsim::task::spawn(async move {
            let response = handler(request, from).await;
            let Ok(local) = endpoint.local_addr() else {
                return;
            };
            if draw(faults_on(from.ip(), local.ip()).drop_response_probability) {
                return;
            }
            // A send error means the caller is gone; there is nobody to tell.
            let _ = endpoint
                .send_to_raw(from, response_tag, Box::new(response))
                .await;
        });
    }
}

/// Whether any message fault is set.
pub fn message_faults_set() -> bool {
    LINK_FAULTS.with(|t| !t.borrow().is_empty())
}

#[cfg(test)]
mod tests;

//! The RPC layer's connection resets and its TCP semantics across cuts, in madsim.

use super::*;
use madsim::runtime::Handle;
use std::net::Ipv4Addr;

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 9, 1));

/// A server that takes requests and never answers (a JoinGroup parked for good).
async fn silent_server() {
    let endpoint = Endpoint::bind(SocketAddr::new(SERVER, 9092))
        .await
        .expect("bind the server");
    serve(endpoint, |_request: u32, _from| {
        std::future::pending::<u32>()
    })
    .await;
}

/// One call with a 60 s timeout; its result and how long it took.
async fn call_silent_server() -> (Result<u32, RpcError>, Duration) {
    let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind the client");
    let started = madsim::time::Instant::now();
    let target = SocketAddr::new(SERVER, 9092);
    let result = call::<u32, u32>(&endpoint, target, 7, Duration::from_secs(60)).await;
    (result, started.elapsed())
}

#[madsim::test]
async fn a_reset_fails_the_waiting_calls_at_once_and_spares_later_ones() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let handle = Handle::current();
    let server = handle.create_node().name("server").ip(SERVER).build();
    server.spawn(silent_server());
    let client = handle
        .create_node()
        .name("client")
        .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 9, 2)))
        .build();
    madsim::time::sleep(Duration::from_millis(10)).await;
    let waiting = client.spawn(call_silent_server());
    madsim::time::sleep(Duration::from_secs(1)).await;
    reset_connections(SERVER);
    let (result, took) = waiting.await.expect("the call's task");
    let target = SocketAddr::new(SERVER, 9092);
    assert_eq!(result, Err(RpcError::Disconnected { target }));
    assert!(
        took < Duration::from_secs(2),
        "failed at the reset, took {took:?}"
    );
    // A call made after the reset waits out its own timeout.
    let (result, took) = client.spawn(call_silent_server()).await.expect("task");
    assert!(
        matches!(result, Err(RpcError::Timeout { .. })),
        "{result:?}"
    );
    assert!(took >= Duration::from_secs(60), "took {took:?}");
    crate::marks::assert_hit(&["net:connection-reset"]);
}

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 9, 2));

#[test]
fn retransmissions_follow_linux_from_200_ms_doubling_to_120_s_fifteen_times() {
    let offsets: Vec<u64> = retransmission_offsets_ms().collect();
    assert_eq!(offsets.len(), 15, "tcp_retries2 = 15");
    assert_eq!(&offsets[..4], &[200, 600, 1_400, 3_000]);
    // Waits double up to TCP_RTO_MAX (102.4 s, then 120 s each).
    assert_eq!(offsets[9] - offsets[8], 102_400);
    assert_eq!(offsets[10] - offsets[9], 120_000);
    // The last retransmission 804.6 s after the send (the connection times out 120 s
    // later, at ip-sysctl.rst's 924.6 s); an orphan's eighth and last at 51 s.
    assert_eq!(offsets[14], 804_600);
    assert_eq!(offsets[ORPHAN_RETRIES - 1], 51_000);
}

/// A server that counts the requests it applied and answers each with the count so far.
async fn counting_server(applied: Arc<std::sync::atomic::AtomicU32>) {
    let endpoint = Endpoint::bind(SocketAddr::new(SERVER, 9092))
        .await
        .expect("bind the server");
    serve(endpoint, move |_request: u32, _from| {
        let applied = applied.clone();
        async move { applied.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 }
    })
    .await;
}

/// A client and a counting server registered under their names (so effects name them),
/// and the server's count.
fn client_and_counting_server() -> (
    madsim::runtime::NodeHandle,
    Arc<std::sync::atomic::AtomicU32>,
) {
    let handle = Handle::current();
    let applied = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let server = handle.create_node().name("server").ip(SERVER).build();
    register_node(server.id(), SERVER, "server");
    server.spawn(counting_server(applied.clone()));
    let client = handle.create_node().name("client").ip(CLIENT).build();
    register_node(client.id(), CLIENT, "client");
    (client, applied)
}

/// One call with `timeout`; its result and how long it took.
async fn call_counting_server(timeout: Duration) -> (Result<u32, RpcError>, Duration) {
    let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind the client");
    let started = madsim::time::Instant::now();
    let target = SocketAddr::new(SERVER, 9092);
    let result = call::<u32, u32>(&endpoint, target, 7, timeout).await;
    (result, started.elapsed())
}

fn cut_both_ways(cut: bool) {
    set_link_cut(CLIENT, SERVER, cut);
    set_link_cut(SERVER, CLIENT, cut);
}

#[madsim::test]
async fn a_request_across_a_short_cut_arrives_at_the_first_retransmission_after_the_heal() {
    crate::marks::take();
    let _ = effects::take();
    let (client, applied) = client_and_counting_server();
    madsim::time::sleep(Duration::from_millis(10)).await;
    cut_both_ways(true);
    let waiting = client.spawn(call_counting_server(Duration::from_secs(30)));
    madsim::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 0, "held");
    cut_both_ways(false);
    let (result, took) = waiting.await.expect("the call's task");
    // Healed 1 s after the send: the retransmission at 1.4 s gets through, and the
    // answer (plus madsim's 1-10 ms latencies) comes back without a retry.
    assert_eq!(result, Ok(1));
    assert!(
        took >= Duration::from_millis(1_400) && took < Duration::from_millis(1_500),
        "took {took:?}"
    );
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
    let taken = effects::take();
    assert_eq!(taken.acted.get(kind::PARTITION), Some(&1), "{taken:?}");
    crate::marks::assert_hit(&["net:held-packet-retransmitted-after-heal"]);
}

#[madsim::test]
async fn a_request_held_past_its_callers_timeout_is_still_applied_after_the_heal() {
    crate::marks::take();
    let (client, applied) = client_and_counting_server();
    madsim::time::sleep(Duration::from_millis(10)).await;
    cut_both_ways(true);
    let (result, took) = client
        .spawn(call_counting_server(Duration::from_secs(2)))
        .await
        .expect("the call's task");
    assert!(
        matches!(result, Err(RpcError::Timeout { .. })),
        "{result:?}"
    );
    assert!(took >= Duration::from_secs(2), "took {took:?}");
    madsim::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Healed 5 s after the send: applied at the retransmission 6.2 s after it, an
    // outcome its caller never learns (the zombie request of an ambiguous timeout).
    cut_both_ways(false);
    madsim::time::sleep(Duration::from_millis(1_150)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 0);
    madsim::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
    crate::marks::assert_hit(&["net:held-packet-retransmitted-after-heal"]);
}

#[madsim::test]
async fn a_request_held_when_its_server_restarts_is_lost_with_the_connection() {
    crate::marks::take();
    let (client, applied) = client_and_counting_server();
    madsim::time::sleep(Duration::from_millis(10)).await;
    cut_both_ways(true);
    let waiting = client.spawn(call_counting_server(Duration::from_secs(30)));
    madsim::time::sleep(Duration::from_secs(1)).await;
    reset_connections(SERVER);
    cut_both_ways(false);
    let (result, _) = waiting.await.expect("the call's task");
    assert_eq!(
        result,
        Err(RpcError::Disconnected {
            target: SocketAddr::new(SERVER, 9092)
        })
    );
    madsim::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 0);
    crate::marks::assert_hit(&["net:held-packet-lost-to-reset"]);
}

#[madsim::test]
async fn a_response_across_a_one_way_cut_is_applied_at_once_and_answered_after_the_heal() {
    crate::marks::take();
    let (client, applied) = client_and_counting_server();
    madsim::time::sleep(Duration::from_millis(10)).await;
    set_link_cut(SERVER, CLIENT, true);
    let waiting = client.spawn(call_counting_server(Duration::from_secs(30)));
    madsim::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        applied.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the request crossed"
    );
    madsim::time::sleep(Duration::from_secs(3)).await;
    set_link_cut(SERVER, CLIENT, false);
    let (result, took) = waiting.await.expect("the call's task");
    // The response was held from about 10 ms after the send; the heal at about 3.1 s
    // lets through its retransmission 6.2 s after it was first sent.
    assert_eq!(result, Ok(1));
    assert!(
        took >= Duration::from_millis(6_200) && took < Duration::from_millis(6_300),
        "took {took:?}"
    );
    crate::marks::assert_hit(&["net:held-packet-retransmitted-after-heal"]);
}

#[madsim::test]
async fn a_request_held_past_an_orphans_retries_is_lost_and_one_still_awaited_is_not() {
    crate::marks::take();
    let (client, applied) = client_and_counting_server();
    madsim::time::sleep(Duration::from_millis(10)).await;
    cut_both_ways(true);
    // Given up after 2 s: an orphan's last retransmission is 51 s after the send.
    let orphaned = client.spawn(call_counting_server(Duration::from_secs(2)));
    // Still awaited for 200 s: its ninth retransmission, 102.2 s after the send, crosses.
    let awaited = client.spawn(call_counting_server(Duration::from_secs(200)));
    madsim::time::sleep(Duration::from_secs(60)).await;
    cut_both_ways(false);
    let (result, _) = orphaned.await.expect("the first call's task");
    assert!(
        matches!(result, Err(RpcError::Timeout { .. })),
        "{result:?}"
    );
    let (result, took) = awaited.await.expect("the second call's task");
    assert_eq!(result, Ok(1), "only the awaited request is applied");
    assert!(
        took >= Duration::from_millis(102_200) && took < Duration::from_millis(102_300),
        "took {took:?}"
    );
    madsim::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(applied.load(std::sync::atomic::Ordering::SeqCst), 1);
    crate::marks::assert_hit(&[
        "net:held-packet-lost-tcp-gave-up",
        "net:held-packet-retransmitted-after-heal",
    ]);
}

#[madsim::test]
async fn a_reset_before_the_held_packet_is_first_polled_still_loses_it() {
    crate::marks::take();
    cut_both_ways(true);
    // The reset future is made when the packet is held (`send_copies`), before its task
    // first runs: a reset in between must end it at once.
    let reset = reset_bell(SERVER).notified_owned();
    reset_connections(SERVER);
    let started = madsim::time::Instant::now();
    let crossing = hold_across_cut(CLIENT, SERVER, reset, None, || "Produce".into()).await;
    cut_both_ways(false);
    assert_eq!(crossing, Crossing::Lost);
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "not at once"
    );
    crate::marks::assert_hit(&["net:held-packet-lost-to-reset"]);
}

/// A server that records the requests it applied, in order.
async fn recording_server(applied: Arc<std::sync::Mutex<Vec<u32>>>) {
    let endpoint = Endpoint::bind(SocketAddr::new(SERVER, 9092))
        .await
        .expect("bind the server");
    serve(endpoint, move |request: u32, _from| {
        let applied = applied.clone();
        async move {
            applied.lock().expect("applied").push(request);
            request
        }
    })
    .await;
}

#[madsim::test]
async fn what_a_socket_sends_after_its_held_data_arrives_after_it() {
    let handle = Handle::current();
    let applied = Arc::new(std::sync::Mutex::new(Vec::new()));
    let server = handle.create_node().name("server").ip(SERVER).build();
    register_node(server.id(), SERVER, "server");
    server.spawn(recording_server(applied.clone()));
    let client = handle.create_node().name("client").ip(CLIENT).build();
    register_node(client.id(), CLIENT, "client");
    madsim::time::sleep(Duration::from_millis(10)).await;
    cut_both_ways(true);
    let target = SocketAddr::new(SERVER, 9092);
    let calls = client.spawn(async move {
        let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind");
        // Request 1 is held from 0 s; its caller gives up at 2 s and then sends 2 (a
        // close, say) behind it.
        let first = call::<u32, u32>(&endpoint, target, 1, Duration::from_secs(2)).await;
        assert!(matches!(first, Err(RpcError::Timeout { .. })), "{first:?}");
        after_queued(&endpoint, target)
            .await
            .expect("the node's IP");
        call::<u32, u32>(&endpoint, target, 2, Duration::from_secs(30)).await
    });
    // Healed 4.5 s after request 1 left: its retransmission at 6.2 s crosses. Request 2,
    // sent at once at 2 s, would have crossed first, at its own retransmission 3 s after
    // it (5.0 s); behind request 1 it leaves at 6.2 s.
    madsim::time::sleep(Duration::from_millis(4_500)).await;
    cut_both_ways(false);
    assert_eq!(calls.await.expect("the client's task"), Ok(2));
    assert_eq!(*applied.lock().expect("applied"), vec![1, 2]);
}

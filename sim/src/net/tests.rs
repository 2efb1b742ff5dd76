//! The RPC layer's connection resets, in madsim.

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

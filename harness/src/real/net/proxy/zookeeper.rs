//! ZooKeeper's framing for the message-fault proxy ([`super::Framing::ZooKeeper`]), after
//! the client protocol's records (`zookeeper-jute/src/main/resources/zookeeper.jute`:
//! `ConnectRequest`, `ConnectResponse`, `RequestHeader`, `ReplyHeader`) and the reserved
//! xids of `ClientCnxn.java` (`-1` a watch notification, `-2` a ping, `-4` auth, `-8` set
//! watches; the same in `zookeeper-client`'s `PredefinedXid`, the crate eosim's
//! [`crate::client::real::zookeeper`] uses).
//!
//! # Frames
//! Every message, both ways, is an `int32` length then that many bytes, as Kafka's are.
//! A connection opens with the client's `ConnectRequest` and the server's
//! `ConnectResponse` (no xid): the handshake that opens or resumes a session, never
//! faulted. After it each client frame is a request, `RequestHeader {xid, type}` first;
//! each server frame a `ReplyHeader {xid, zxid, err}` first: the answer to the request of
//! that xid (the server answers one session's requests in order), or, with xid `-1`, a
//! watch notification nobody asked for, which passes unfaulted.
//!
//! # Faults
//! A request draws a drop and a delay, an answer a loss (the server has applied the
//! request: a `multi` whose answer is lost is committed). Pings (xid `-2`) and their
//! answers pass unfaulted, as the handshake does: the simulation's Keeper sessions send
//! none (its message faults act on operations only), and `zookeeper-client`'s `connect`
//! waits for the answer to a ping it sends right after the `ConnectResponse`, so a faulted
//! ping would fail a reconnect that ClickHouse's client, which sends none there, makes.
//! Duplicates are not drawn: a request belongs to its session, which belongs to its
//! connection, so a request sent again on a connection of its own (without the handshake)
//! has no meaning to the server.

/// The xid of a watch notification (`ClientCnxn.NOTIFICATION_XID`).
const NOTIFICATION_XID: i32 = -1;
/// The xid of a ping and of its answer (`ClientCnxn.PING_XID`).
const PING_XID: i32 = -2;

/// Where one connection's conversation is, as the proxy reads both of its directions.
#[derive(Debug, Default)]
pub(super) struct ZkFlow {
    /// The client's `ConnectRequest` has passed: its frames are requests from now on.
    client_connected: bool,
    /// The server's `ConnectResponse` has passed: its frames are answers from now on.
    server_connected: bool,
}

impl ZkFlow {
    /// A client `frame`: whether it is a request to fault (not the handshake, not a ping).
    pub(super) fn on_client(&mut self, frame: &[u8]) -> bool {
        std::mem::replace(&mut self.client_connected, true)
            && super::int32_at(frame, 4) != Some(PING_XID)
    }

    /// A server `frame`: whether it answers a request (not the handshake's answer, not a
    /// watch notification, not a ping's answer).
    pub(super) fn on_server(&mut self, frame: &[u8]) -> bool {
        if !std::mem::replace(&mut self.server_connected, true) {
            return false;
        }
        let xid = super::int32_at(frame, 4);
        xid != Some(NOTIFICATION_XID) && xid != Some(PING_XID)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(xid: i32) -> Vec<u8> {
        let mut f = 16i32.to_be_bytes().to_vec();
        f.extend_from_slice(&xid.to_be_bytes());
        f.extend_from_slice(&[0; 12]);
        f
    }

    #[test]
    fn the_handshake_pings_and_notifications_are_not_requests_nor_answers() {
        let mut flow = ZkFlow::default();
        let connect = [0u8; 48];
        assert!(!flow.on_client(&connect[..]), "ConnectRequest");
        assert!(!flow.on_server(&connect[..]), "ConnectResponse");
        assert!(!flow.on_client(&frame(PING_XID)), "a ping");
        assert!(!flow.on_server(&frame(PING_XID)), "its answer");
        assert!(flow.on_client(&frame(1)), "a request");
        assert!(!flow.on_server(&frame(NOTIFICATION_XID)), "a watch event");
        assert!(flow.on_server(&frame(1)), "the request's answer");
    }
}

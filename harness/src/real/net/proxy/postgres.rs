//! PostgreSQL's framing for the message-fault proxy ([`super::Framing::Postgres`]), after
//! the frontend/backend protocol 3.0 (PostgreSQL's `doc/src/sgml/protocol.sgml`, "Message
//! Formats" and "Message Flow").
//!
//! # Messages
//! A connection opens with the client's untyped messages, `int32` length (itself
//! included) then the body, whose first `int32` is a code: `SSLRequest` (80877103) and
//! `GSSENCRequest` (80877104) are answered by the server with one byte (`N`, `S` or `G`),
//! `CancelRequest` (80877102) with nothing, and the `StartupMessage` (protocol 3.0,
//! 196608) ends the untyped phase. From then on every message, both ways, is a type byte,
//! an `int32` length (itself included, the type byte not) and the body.
//!
//! # Requests and their answers
//! Nothing is faulted until the server's first `ReadyForQuery` (`Z`): authentication runs
//! as it would. After it a *request* is the client's messages up to and including a
//! `Query` (`Q`), a `Sync` (`S`, the end of an extended-protocol batch: `Parse`, `Bind`,
//! `Execute`...) or a `FunctionCall` (`F`); the server ends its answer to each with one
//! `ReadyForQuery`, in order, however many requests the client pipelines
//! (tokio-postgres does). A request's first message draws a drop and a delay; the first
//! message of its answer draws a lost answer (the server has executed the request: a
//! `COMMIT` whose answer is lost is committed). `CopyData`, `CopyDone` and `CopyFail`
//! after a `Query` belong to that query. Duplicates are not drawn: the server keeps a
//! session's state (its open transaction, its prepared statements), so a request sent
//! again on a connection of its own has no meaning of its own.

use super::int32_at;

/// `SSLRequest`'s code.
const SSL_REQUEST: i32 = 80_877_103;
/// `GSSENCRequest`'s code.
const GSSENC_REQUEST: i32 = 80_877_104;
/// `CancelRequest`'s code.
const CANCEL_REQUEST: i32 = 80_877_102;

/// Where one connection's conversation is, as the proxy reads both of its directions.
#[derive(Debug, Default)]
pub(super) struct PgFlow {
    /// The client has sent its `StartupMessage`: its messages are typed from now on.
    started: bool,
    /// One-byte answers to `SSLRequest` / `GSSENCRequest` the server still owes.
    single_bytes_owed: u32,
    /// The server has sent its first `ReadyForQuery`: requests are faulted from now on.
    ready: bool,
    /// The client is sending a request (it has not ended it with `Q`, `S` or `F` yet).
    request_open: bool,
    /// Requests ended whose `ReadyForQuery` has not come back yet.
    requests_in_flight: u32,
    /// The server is answering the oldest request in flight.
    answering: bool,
}

/// The whole length of the typed message at the front of `buf` (type byte, length and
/// body), once its length is there.
fn typed_len(buf: &[u8]) -> Option<usize> {
    Some(1 + int32_at(buf, 1)?.max(4) as usize)
}

impl PgFlow {
    /// The length of the client's next message at the front of `buf`, once it can be read.
    pub(super) fn client_len(&self, buf: &[u8]) -> Option<usize> {
        if self.started {
            typed_len(buf)
        } else {
            Some(int32_at(buf, 0)?.max(4) as usize)
        }
    }

    /// The length of the server's next message at the front of `buf`, once it can be read.
    pub(super) fn server_len(&self, buf: &[u8]) -> Option<usize> {
        if self.single_bytes_owed > 0 {
            (!buf.is_empty()).then_some(1)
        } else {
            typed_len(buf)
        }
    }

    /// Takes the client's next whole message: whether it begins a request (which draws
    /// the request's faults).
    pub(super) fn on_client(&mut self, message: &[u8]) -> bool {
        if !self.started {
            match int32_at(message, 4) {
                Some(SSL_REQUEST | GSSENC_REQUEST) => self.single_bytes_owed += 1,
                Some(CANCEL_REQUEST) => {}
                _ => self.started = true,
            }
            return false;
        }
        let Some(&kind) = message.first() else {
            return false;
        };
        if !self.ready || kind == b'X' {
            return false;
        }
        let copying = matches!(kind, b'd' | b'c' | b'f');
        if copying && !self.request_open && self.requests_in_flight > 0 {
            return false;
        }
        let begins = !self.request_open;
        self.request_open = true;
        if matches!(kind, b'Q' | b'S' | b'F') {
            self.request_open = false;
            self.requests_in_flight += 1;
        }
        begins
    }

    /// Takes the server's next whole message: whether it begins the answer to a request
    /// (which draws the answer's faults).
    pub(super) fn on_server(&mut self, message: &[u8]) -> bool {
        if self.single_bytes_owed > 0 && message.len() == 1 {
            self.single_bytes_owed -= 1;
            return false;
        }
        let ready_for_query = message.first() == Some(&b'Z');
        if !self.ready {
            self.ready = ready_for_query;
            return false;
        }
        if self.requests_in_flight == 0 {
            // An asynchronous message (a notice, a parameter status) outside any answer.
            return false;
        }
        let begins = !self.answering;
        self.answering = true;
        if ready_for_query {
            self.requests_in_flight -= 1;
            self.answering = false;
        }
        begins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(4 + body.len() as i32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn untyped(code: i32) -> Vec<u8> {
        let mut m = 8i32.to_be_bytes().to_vec();
        m.extend_from_slice(&code.to_be_bytes());
        m
    }

    /// Both directions of a connection read message by message, as the proxy reads them:
    /// the lengths it finds and what begins a request or an answer.
    #[test]
    fn startup_is_never_faulted_and_each_request_is_matched_to_its_ready_for_query() {
        let mut flow = PgFlow::default();
        let ssl = untyped(SSL_REQUEST);
        assert_eq!(flow.client_len(&ssl), Some(8));
        assert!(!flow.on_client(&ssl));
        assert_eq!(flow.server_len(b"N"), Some(1), "the SSL answer is one byte");
        assert!(!flow.on_server(b"N"));
        let startup = untyped(196_608);
        assert!(!flow.on_client(&startup));
        let ok = typed(b'R', &0i32.to_be_bytes());
        assert_eq!(flow.server_len(&ok), Some(9));
        assert!(!flow.on_server(&ok));
        assert!(
            !flow.on_server(&typed(b'Z', b"I")),
            "the first ReadyForQuery"
        );
        // Extended protocol, two requests pipelined: Parse Bind Execute Sync, then Query.
        assert!(
            flow.on_client(&typed(b'P', b"\0insert\0\0\0")),
            "a request begins"
        );
        assert!(!flow.on_client(&typed(b'B', b"")));
        assert!(!flow.on_client(&typed(b'E', b"")));
        assert!(!flow.on_client(&typed(b'S', b"")));
        assert!(
            flow.on_client(&typed(b'Q', b"COMMIT\0")),
            "the next request"
        );
        assert!(flow.on_server(&typed(b'1', b"")), "the first answer begins");
        assert!(!flow.on_server(&typed(b'C', b"INSERT 0 1\0")));
        assert!(!flow.on_server(&typed(b'Z', b"T")));
        assert!(
            flow.on_server(&typed(b'C', b"COMMIT\0")),
            "the second answer"
        );
        assert!(!flow.on_server(&typed(b'Z', b"I")));
        assert!(
            !flow.on_server(&typed(b'N', b"")),
            "a notice outside any answer"
        );
        // COPY data after its Query is part of that query.
        assert!(flow.on_client(&typed(b'Q', b"COPY t FROM STDIN\0")));
        assert!(!flow.on_client(&typed(b'd', b"1\n")));
        assert!(!flow.on_client(&typed(b'c', b"")));
        assert!(flow.on_server(&typed(b'G', b"")));
        assert!(!flow.on_server(&typed(b'Z', b"I")));
        assert!(
            !flow.on_client(&typed(b'X', b"")),
            "Terminate is no request"
        );
    }

    #[test]
    fn a_message_is_read_only_once_its_length_is_there() {
        let flow = PgFlow::default();
        assert_eq!(flow.client_len(&[0, 0]), None);
        let started = PgFlow {
            started: true,
            ..PgFlow::default()
        };
        assert_eq!(started.client_len(&[b'Q', 0, 0]), None);
        assert_eq!(started.client_len(&typed(b'Q', b"SELECT 1\0")), Some(14));
    }
}

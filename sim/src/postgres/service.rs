//! The PostgreSQL server node: serves the [`Database`] model at `10.0.5.1:5432` over
//! eosim's RPC layer (`crate::net`).
//!
//! One request per protocol exchange a tokio-postgres client makes: [`Request::Connect`]
//! (startup), [`Request::Execute`] (one query), [`Request::ExecuteBatch`] (a pipeline of
//! queries in one round trip), [`Request::BeginBatch`] (`BEGIN` and a pipeline, the
//! transaction left open), `BEGIN`/`COMMIT`/`ROLLBACK`, and [`Request::Close`]
//! (`Terminate`, or the client's socket closing). Like a PostgreSQL backend, a session runs one request at a time: requests
//! on one session queue in arrival order behind the one running. A statement that waits for
//! a row lock ([`Execution::Blocked`]) is run again whenever a transaction ends (and when
//! `lock_timeout` is due), so it waits exactly as long as PostgreSQL's would
//! (<https://www.postgresql.org/docs/current/explicit-locking.html#LOCKING-ROWS>).
//!
//! Faults: the node can be killed and restarted; the runner then calls
//! [`PostgresWorld::crash`], which drops every session and open transaction and keeps what
//! was committed, less the asynchronous commits the WAL writer had not flushed
//! (`synchronous_commit = off`, [`Database::crash`]). A killed *client* process closes its sockets,
//! and PostgreSQL rolls back its open transaction at once; the runner says so with
//! [`PostgresWorld::client_gone`]. A paused or partitioned client keeps its transaction
//! (and its locks) until it returns, closes the session ([`Request::Close`]: the simulated
//! client does so when a call times out, and a partition delivers the close after the
//! heal) or `idle_in_transaction_session_timeout` ends it.

use super::model::{Database, Execution, SessionId, TxnEnd};
use super::{PgError, Reply, Statement};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// What a crash of the server lost ([`PostgresWorld::crash`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crashed {
    /// Sessions (client connections) ended, their open transactions rolled back.
    pub sessions: usize,
    /// Transactions committed asynchronously (`synchronous_commit = off`) that the WAL
    /// writer had not flushed: their changes are gone.
    pub commits: usize,
}

/// PostgreSQL's port.
pub const POSTGRES_PORT: u16 = 5432;

/// How often the server checks `idle_in_transaction_session_timeout`, ms.
pub const TICK_INTERVAL_MS: u64 = 100;

/// The server's IP: `10.0.5.1`.
pub fn postgres_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 5, 1))
}

/// The server's address: `10.0.5.1:5432`.
pub fn postgres_addr() -> SocketAddr {
    SocketAddr::new(postgres_ip(), POSTGRES_PORT)
}

/// The shared model.
pub type SharedDatabase = Arc<Mutex<Database>>;

/// A request, one per protocol exchange.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Open a session (startup and authentication; the model has no passwords).
    Connect,
    /// `Terminate`: close the session, rolling back its open transaction.
    Close {
        /// The session.
        session: SessionId,
    },
    /// `BEGIN`.
    Begin {
        /// The session.
        session: SessionId,
    },
    /// `COMMIT`.
    Commit {
        /// The session.
        session: SessionId,
    },
    /// `ROLLBACK`.
    Rollback {
        /// The session.
        session: SessionId,
    },
    /// One statement, in the open transaction or in autocommit mode.
    Execute {
        /// The session.
        session: SessionId,
        /// The statement.
        statement: Statement,
    },
    /// Statements in one round trip, in order, stopping at the first error. In an open
    /// transaction they run in it (and an error fails it); with none open they run in one
    /// implicit transaction, committed if all succeed and rolled back otherwise (what
    /// PostgreSQL does with a multi-statement simple query or a pipeline with one `Sync`).
    ExecuteBatch {
        /// The session.
        session: SessionId,
        /// The statements.
        statements: Vec<Statement>,
    },
    /// `BEGIN` and statements in one round trip, the transaction left open for a later
    /// [`Request::Commit`] (or [`Request::Rollback`]): what pgJDBC's `executeBatch` sends on
    /// a connection with autocommit off (`BEGIN` goes out with the first query), and what
    /// the real client's pipelined transaction sends (`harness/src/client/real/postgres.rs`).
    /// Stops at the first error, which fails the transaction (`25P02` for what follows,
    /// until `ROLLBACK`). Inside an open transaction `BEGIN` is a no-op, as in PostgreSQL.
    /// So a request held by a partition and applied after its client gave up commits
    /// nothing: the client never sent the `COMMIT`, and its closed socket ends the session.
    BeginBatch {
        /// The session.
        session: SessionId,
        /// The statements.
        statements: Vec<Statement>,
    },
}

/// A batch's first failing statement: its index in the batch and its error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("statement {index} of the batch: {error}")]
pub struct BatchError {
    /// Index of the failing statement (the ones after it did not run).
    pub index: usize,
    /// Its error.
    pub error: PgError,
}

/// The response to a [`Request`], variant for variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// The new session.
    Connected(SessionId),
    /// The session is closed.
    Closed,
    /// `BEGIN`'s outcome.
    Began(Result<(), PgError>),
    /// `COMMIT`'s outcome.
    Committed(Result<TxnEnd, PgError>),
    /// `ROLLBACK`'s outcome.
    RolledBack(Result<(), PgError>),
    /// The statement's outcome.
    Executed(Result<Reply, PgError>),
    /// Every statement's reply, or the first error.
    Batch(Result<Vec<Reply>, BatchError>),
}

/// The server's shared state on the simulator side: the model, the clock origin, the bell
/// that wakes statements waiting for locks, each session's request queue and peer.
#[derive(Clone)]
pub struct PostgresWorld {
    /// The model.
    pub db: SharedDatabase,
    start: madsim::time::Instant,
    txn_ended: Arc<Notify>,
    /// Per session: the queue its requests take turns in, and the client's address.
    sessions: Arc<Mutex<BTreeMap<SessionId, SessionSlot>>>,
}

/// A session's request queue (one request runs at a time, as on a PostgreSQL backend) and
/// its client's address.
type SessionSlot = (Arc<tokio::sync::Mutex<()>>, SocketAddr);

impl PostgresWorld {
    /// Wraps a model; time 0 is now.
    pub fn new(db: Database) -> Self {
        Self {
            db: Arc::new(Mutex::new(db)),
            start: madsim::time::Instant::now(),
            txn_ended: Arc::default(),
            sessions: Arc::default(),
        }
    }

    /// Simulated ms since the world was made.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn lock_db(&self) -> std::sync::MutexGuard<'_, Database> {
        self.db.lock().expect("database lock")
    }

    /// The server process died: sessions and open transactions are gone, committed rows
    /// stay, less the asynchronous commits not yet flushed ([`Database::crash`]). Call it
    /// when the node is killed.
    pub fn crash(&self) -> Crashed {
        let commits = self.lock_db().crash(self.now_ms());
        let sessions = {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            let n = sessions.len();
            sessions.clear();
            n
        };
        self.txn_ended.notify_waiters();
        Crashed { sessions, commits }
    }

    /// The client process at `ip` died and its sockets closed: its sessions end and their
    /// open transactions roll back. (Not for a pause or a partition: PostgreSQL does not
    /// notice those until TCP keepalive gives up.) Returns the sessions that ended.
    pub fn client_gone(&self, ip: IpAddr) -> usize {
        let gone: Vec<SessionId> = {
            let mut sessions = self.sessions.lock().expect("sessions lock");
            let gone: Vec<SessionId> = sessions
                .iter()
                .filter(|(_, (_, peer))| peer.ip() == ip)
                .map(|(&s, _)| s)
                .collect();
            for s in &gone {
                sessions.remove(s);
            }
            gone
        };
        let ended = gone.len();
        let mut db = self.lock_db();
        for s in gone {
            db.close(s);
        }
        drop(db);
        self.txn_ended.notify_waiters();
        ended
    }

    /// Ends sessions idle in a transaction past `idle_in_transaction_session_timeout`,
    /// every [`TICK_INTERVAL_MS`], forever. Runs on the server node.
    pub async fn run_ticker(self) {
        loop {
            madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
            let ended = self.lock_db().tick(self.now_ms());
            if !ended.is_empty() {
                self.txn_ended.notify_waiters();
            }
        }
    }

    /// Handles one request from `peer`; requests on one session run one at a time.
    pub async fn handle(&self, request: Request, peer: SocketAddr) -> Response {
        let session = match &request {
            Request::Connect => return self.connect(peer),
            Request::Close { session }
            | Request::Begin { session }
            | Request::Commit { session }
            | Request::Rollback { session }
            | Request::Execute { session, .. }
            | Request::ExecuteBatch { session, .. }
            | Request::BeginBatch { session, .. } => *session,
        };
        let queue = self
            .sessions
            .lock()
            .expect("sessions lock")
            .get(&session)
            .map(|q| q.0.clone());
        // An unknown session still reaches the model, which answers `08003`.
        let _turn = match &queue {
            Some(q) => Some(q.lock().await),
            None => None,
        };
        let response = self.dispatch(session, request).await;
        if matches!(response, Response::Closed) {
            self.sessions
                .lock()
                .expect("sessions lock")
                .remove(&session);
        }
        response
    }

    fn connect(&self, peer: SocketAddr) -> Response {
        let session = self.lock_db().connect(self.now_ms());
        let queue = Arc::new(tokio::sync::Mutex::new(()));
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(session, (queue, peer));
        Response::Connected(session)
    }

    async fn dispatch(&self, session: SessionId, request: Request) -> Response {
        let now = self.now_ms();
        let response = match request {
            Request::Connect => unreachable!("handled before taking a turn"),
            Request::Close { session } => {
                self.lock_db().close(session);
                Response::Closed
            }
            Request::Begin { session } => Response::Began(self.lock_db().begin(now, session)),
            Request::Commit { session } => Response::Committed(self.lock_db().commit(now, session)),
            Request::Rollback { session } => {
                Response::RolledBack(self.lock_db().rollback(now, session))
            }
            Request::Execute { statement, .. } => {
                Response::Executed(self.execute(session, &statement).await)
            }
            Request::ExecuteBatch { statements, .. } => {
                Response::Batch(self.execute_batch(session, &statements, false).await)
            }
            Request::BeginBatch { statements, .. } => {
                Response::Batch(self.execute_batch(session, &statements, true).await)
            }
        };
        if matches!(
            response,
            Response::Closed | Response::Committed(_) | Response::RolledBack(_)
        ) {
            self.txn_ended.notify_waiters();
        }
        response
    }

    /// Runs one statement, waiting (and re-running it) while it is blocked by a lock.
    pub async fn execute(
        &self,
        session: SessionId,
        statement: &Statement,
    ) -> Result<Reply, PgError> {
        loop {
            // Made before the attempt, so a transaction ending after it still wakes us.
            let ended = self.txn_ended.notified();
            let (execution, lock_timeout_ms) = {
                let mut db = self.lock_db();
                let execution = db.execute(self.now_ms(), session, statement);
                (execution, db.config().lock_timeout_ms)
            };
            match execution {
                Execution::Done(result) => return result,
                Execution::Blocked { .. } if lock_timeout_ms > 0 => {
                    // Wake at the latest when the lock timeout may have expired.
                    let wait = Duration::from_millis(lock_timeout_ms.min(TICK_INTERVAL_MS));
                    let _ = madsim::time::timeout(wait, ended).await;
                }
                Execution::Blocked { .. } => ended.await,
            }
        }
    }

    /// Runs a batch: [`Request::ExecuteBatch`], or with `begin` [`Request::BeginBatch`]
    /// (`BEGIN` first, the transaction left open).
    pub async fn execute_batch(
        &self,
        session: SessionId,
        statements: &[Statement],
        begin: bool,
    ) -> Result<Vec<Reply>, BatchError> {
        let implicit = !begin && !self.lock_db().in_transaction(session);
        if implicit || begin {
            let begun = self.lock_db().begin(self.now_ms(), session);
            begun.map_err(|error| BatchError { index: 0, error })?;
        }
        let mut replies = Vec::with_capacity(statements.len());
        for (index, statement) in statements.iter().enumerate() {
            match self.execute(session, statement).await {
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    if implicit {
                        // The session may be gone (crash, terminated); nothing to undo then.
                        let _ = self.lock_db().rollback(self.now_ms(), session);
                        self.txn_ended.notify_waiters();
                    }
                    return Err(BatchError { index, error });
                }
            }
        }
        if implicit {
            let end = self.lock_db().commit(self.now_ms(), session);
            self.txn_ended.notify_waiters();
            match end {
                Ok(TxnEnd::Committed) => {}
                Ok(TxnEnd::RolledBack) => unreachable!("no statement of the batch failed"),
                Err(error) => {
                    return Err(BatchError {
                        index: statements.len(),
                        error,
                    })
                }
            }
        }
        Ok(replies)
    }
}

/// Serves PostgreSQL on `10.0.5.1:5432` until the node is killed, with the
/// idle-in-transaction ticker running beside it. Use it as the node's init function so a
/// restart serves again (after the runner called [`PostgresWorld::crash`]). Simulation
/// only; the rest of the module also builds in the normal cfg, where the JDBC sink's
/// model-versus-real differential drives [`PostgresWorld::handle`] in process.
#[cfg(madsim)]
pub async fn serve_postgres(world: PostgresWorld) {
    let endpoint = madsim::net::Endpoint::bind(postgres_addr())
        .await
        .expect("the postgres node binds its own address");
    madsim::task::spawn(world.clone().run_ticker());
    crate::net::serve(endpoint, move |request: Request, peer| {
        let world = world.clone();
        async move { world.handle(request, peer).await }
    })
    .await;
}

//! The simulated PostgreSQL client: RPC to the `postgres` node
//! ([`eosim_sim::postgres::service`]) with a per-call timeout.
//!
//! A batch is two round trips, as the real client's (`client/real/postgres.rs`: `BEGIN`
//! and the statements pipelined, then `COMMIT`) and pgJDBC's with autocommit off
//! (`executeBatch`, then `commit`). A timeout closes the session, as pgJDBC and
//! tokio-postgres close the socket: the server ends it, rolling back what it had open,
//! when the close reaches it (after the heal, when a partition holds it back, and after
//! whatever the partition held before it, as a FIN follows the data). So a batch held by a
//! partition and applied after its client gave up never commits, and a held `COMMIT`
//! still does.

use crate::client::postgres::{PgClientError, PostgresClient};
use async_trait::async_trait;
use eosim_sim::postgres::service::{postgres_addr, Request, Response};
use eosim_sim::postgres::{PgError, Reply, SessionId, SqlState, Statement, TxnEnd};
use madsim::net::Endpoint;
use std::time::Duration;

/// A connection to the simulated server. The session is opened lazily and opened again
/// after a timeout or after the server forgot it (`08003`, after a crash).
pub struct SimPostgres {
    endpoint: Option<Endpoint>,
    session: Option<SessionId>,
    timeout: Duration,
}

impl SimPostgres {
    /// A client whose calls wait at most `timeout_ms` (tokio-postgres has no timeout of
    /// its own; the JDBC driver's `socketTimeout` plays this part).
    pub fn new(timeout_ms: u64) -> Self {
        Self {
            endpoint: None,
            session: None,
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    async fn call(&mut self, request: Request, what: &str) -> Result<Response, PgClientError> {
        if self.endpoint.is_none() {
            let endpoint = Endpoint::bind("0.0.0.0:0")
                .await
                .map_err(|e| PgClientError::Connection(format!("cannot bind: {e}")))?;
            self.endpoint = Some(endpoint);
        }
        let endpoint = self.endpoint.as_ref().expect("bound above");
        let result = eosim_sim::net::call(endpoint, postgres_addr(), request, self.timeout).await;
        result.map_err(|_| {
            // The session's state is unknown now: close it and start afresh next time.
            if let Some(session) = self.session.take() {
                let endpoint = endpoint.clone();
                let timeout = self.timeout;
                madsim::task::spawn(async move {
                    // The close leaves the socket behind whatever it still holds (a request
                    // a cut keeps in TCP's queue), as the FIN follows the data.
                    if eosim_sim::net::after_queued(&endpoint, postgres_addr())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let close = Request::Close { session };
                    // Nobody waits for the answer; the session ends when the close arrives.
                    let _: Result<Response, _> =
                        eosim_sim::net::call(&endpoint, postgres_addr(), close, timeout).await;
                });
            }
            PgClientError::Timeout {
                what: what.to_string(),
                timeout_ms: self.timeout.as_millis() as u64,
            }
        })
    }

    async fn session(&mut self) -> Result<SessionId, PgClientError> {
        if let Some(s) = self.session {
            return Ok(s);
        }
        match self.call(Request::Connect, "connect").await? {
            Response::Connected(s) => {
                self.session = Some(s);
                Ok(s)
            }
            other => Err(PgClientError::Connection(format!(
                "unexpected reply {other:?}"
            ))),
        }
    }

    /// Forgets the session the server no longer has: gone (`08003`, after a crash or a
    /// close) or terminated by `idle_in_transaction_session_timeout` (`25P03`, FATAL:
    /// PostgreSQL ends the backend).
    fn forget_lost_session(&mut self, error: &PgClientError) {
        if let PgClientError::Db { error, .. } = error {
            if matches!(
                error.code,
                SqlState::ConnectionDoesNotExist | SqlState::IdleInTransactionSessionTimeout
            ) {
                self.session = None;
            }
        }
    }
}

#[async_trait]
impl PostgresClient for SimPostgres {
    async fn execute(&mut self, statement: Statement) -> Result<Reply, PgClientError> {
        let session = self.session().await?;
        let response = self
            .call(Request::Execute { session, statement }, "execute")
            .await?;
        let result = match response {
            Response::Executed(r) => r.map_err(|error| PgClientError::Db { index: None, error }),
            other => Err(PgClientError::Connection(format!(
                "unexpected reply {other:?}"
            ))),
        };
        if let Err(e) = &result {
            self.forget_lost_session(e);
        }
        result
    }

    async fn execute_batch(
        &mut self,
        statements: Vec<Statement>,
    ) -> Result<Vec<Reply>, PgClientError> {
        let session = self.session().await?;
        let request = Request::BeginBatch {
            session,
            statements,
        };
        let batch = match self.call(request, "execute batch").await? {
            Response::Batch(r) => r.map_err(|e| PgClientError::Db {
                index: Some(e.index),
                error: e.error,
            }),
            other => Err(PgClientError::Connection(format!(
                "unexpected reply {other:?}"
            ))),
        };
        let replies = match batch {
            Ok(replies) => replies,
            Err(e) => {
                self.forget_lost_session(&e);
                if self.session.is_some() {
                    // The failed transaction holds its locks until `ROLLBACK`. A rollback
                    // that times out closes the session (see `call`), which rolls back too.
                    if let Ok(Response::RolledBack(Err(error))) =
                        self.call(Request::Rollback { session }, "rollback").await
                    {
                        self.forget_lost_session(&PgClientError::Db { index: None, error });
                    }
                }
                return Err(e);
            }
        };
        let result = match self.call(Request::Commit { session }, "commit").await? {
            Response::Committed(Ok(TxnEnd::Committed)) => Ok(replies),
            // Only a failed transaction's COMMIT rolls back, and this one did not fail;
            // a server that says so gets pgJDBC's answer ("The database returned ROLLBACK,
            // so the transaction cannot be committed"), a failed-transaction error.
            Response::Committed(Ok(TxnEnd::RolledBack)) => Err(PgClientError::Db {
                index: None,
                error: PgError::in_failed_transaction(),
            }),
            Response::Committed(Err(error)) => Err(PgClientError::Db { index: None, error }),
            other => Err(PgClientError::Connection(format!(
                "unexpected reply {other:?}"
            ))),
        };
        if let Err(e) = &result {
            self.forget_lost_session(e);
        }
        result
    }
}

#[cfg(test)]
mod tests;

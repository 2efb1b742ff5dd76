//! The simulated PostgreSQL client: RPC to the `postgres` node
//! ([`eosim_sim::postgres::service`]) with a per-call timeout.

use crate::client::postgres::{PgClientError, PostgresClient};
use async_trait::async_trait;
use eosim_sim::postgres::service::{postgres_addr, Request, Response};
use eosim_sim::postgres::{Reply, SessionId, SqlState, Statement};
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
            // The session's state is unknown now: start afresh next time.
            self.session = None;
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

    fn forget_lost_session(&mut self, error: &PgClientError) {
        if let PgClientError::Db { error, .. } = error {
            if error.code == SqlState::ConnectionDoesNotExist {
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
        let request = Request::ExecuteBatch {
            session,
            statements,
        };
        let result = match self.call(request, "execute batch").await? {
            Response::Batch(r) => r.map_err(|e| PgClientError::Db {
                index: Some(e.index),
                error: e.error,
            }),
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

//! A PostgreSQL client trait shaped after `tokio_postgres::Client`: one statement
//! ([`PostgresClient::execute`]), a pipeline of statements run as one transaction
//! ([`PostgresClient::execute_batch`], what `Client::batch_execute` or a pipelined
//! `BEGIN ... COMMIT` does) and a table read ([`PostgresClient::select`]).
//!
//! Statements are the model's typed statements ([`eosim_sim::postgres::Statement`]), not
//! SQL text; the real implementation (real-services tier) renders them to SQL. The
//! simulated one is `client::sim::postgres::SimPostgres` (under `--cfg madsim`).

use async_trait::async_trait;
use eosim_sim::postgres::{PgError, Reply, Row, Statement};

/// How a PostgreSQL call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgClientError {
    /// The server answered with an error (`tokio_postgres::Error::as_db_error`). For a
    /// batch, `index` is the failing statement; the transaction was rolled back whole.
    #[error(
        "{}SQLSTATE {}: {}",
        index.map(|i| format!("statement {i}: ")).unwrap_or_default(),
        error.code.code(),
        error.message
    )]
    Db {
        /// Index of the failing statement in a batch.
        index: Option<usize>,
        /// The server's error.
        error: PgError,
    },
    /// No answer within the client's timeout: the outcome is unknown (a `COMMIT` may have
    /// been applied).
    #[error("timed out after {timeout_ms} ms: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The bound, ms.
        timeout_ms: u64,
    },
    /// The connection could not be opened or was lost before the request left.
    #[error("connection: {0}")]
    Connection(String),
}

impl PgClientError {
    /// Whether the call may have taken effect although it failed.
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, PgClientError::Timeout { .. })
    }

    /// The SQLSTATE of a server error, if it is one.
    pub fn sqlstate(&self) -> Option<&'static str> {
        match self {
            PgClientError::Db { error, .. } => Some(error.code.code()),
            _ => None,
        }
    }
}

/// A table's rows as a `SELECT * ... ORDER BY pk` returns them.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRows {
    /// Column names, in table order.
    pub columns: Vec<String>,
    /// Rows in primary-key order.
    pub rows: Vec<Row>,
}

/// A PostgreSQL connection (`tokio_postgres::Client`). Reconnects by itself after the
/// server dropped the session (a crash, a terminated backend).
#[async_trait]
pub trait PostgresClient: Send {
    /// Runs one statement in autocommit mode.
    ///
    /// # Errors
    /// The server's error, a timeout (ambiguous) or a connection failure.
    async fn execute(&mut self, statement: Statement) -> Result<Reply, PgClientError>;

    /// Runs `statements` in one transaction, stopping at the first error (then nothing of
    /// the batch is applied).
    ///
    /// # Errors
    /// As [`PostgresClient::execute`], with the failing statement's index.
    async fn execute_batch(
        &mut self,
        statements: Vec<Statement>,
    ) -> Result<Vec<Reply>, PgClientError>;

    /// `SELECT * FROM table ORDER BY pk`.
    ///
    /// # Errors
    /// As [`PostgresClient::execute`].
    async fn select(&mut self, table: &str) -> Result<TableRows, PgClientError> {
        match self
            .execute(Statement::Select {
                table: table.to_string(),
            })
            .await?
        {
            Reply::Rows { columns, rows } => Ok(TableRows { columns, rows }),
            Reply::Affected(_) => Err(PgClientError::Connection("SELECT returned no rows".into())),
        }
    }
}

/// A stored value as JSON, for histories: numbers, booleans, text and JSON as themselves,
/// dates and times as PostgreSQL prints them, NULL as `null` (a float that JSON cannot
/// hold, such as NaN, as its text).
pub fn value_to_json(value: &eosim_sim::postgres::Value) -> serde_json::Value {
    use eosim_sim::postgres::datetime::{format_date, format_timestamptz, format_timetz};
    use eosim_sim::postgres::Value as V;
    use serde_json::Value as J;
    match value {
        V::Null => J::Null,
        V::Bool(b) => J::Bool(*b),
        V::Int(i) => J::from(*i),
        V::Float(f) => serde_json::Number::from_f64(*f).map_or(J::String(f.to_string()), J::Number),
        V::Text(t) => J::String(t.clone()),
        V::Json(j) => j.clone(),
        V::Date(d) => J::String(format_date(*d)),
        V::TimeTz(t) => J::String(format_timetz(*t)),
        V::TimestampTz(t) => J::String(format_timestamptz(*t)),
    }
}

//! The PostgreSQL model: tables, sessions, transactions, and the server node serving them.
//!
//! [`model::Database`] is a pure state machine (no I/O, no clock of its own: callers pass
//! `now_ms`) holding committed tables and every session's open transaction;
//! [`service`] serves it from a madsim node at `10.0.5.1:5432`. Statements are typed
//! ([`Statement`]), not SQL text; values coerce into column types by PostgreSQL's
//! assignment rules ([`coerce`]); errors carry the real SQLSTATE and message
//! ([`PgError`]). Behaviour follows `shared/models-reference.md` section G.

pub mod coerce;
pub mod datetime;
pub mod error;
pub mod model;
#[cfg(madsim)]
pub mod service;
pub mod types;

pub use error::{PgError, SqlState};
pub use model::{Database, DbConfig, Execution, SessionId, TxnEnd};
pub use types::*;
#[cfg(test)]
mod tests;
#[cfg(all(test, madsim))]
mod service_tests;

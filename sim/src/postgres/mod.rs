//! The PostgreSQL model: tables, sessions, transactions, and the server node serving them.
//!
//! [`model::Database`] is a pure state machine (no I/O, no clock of its own: callers pass
//! `now_ms`) holding committed tables and every session's open transaction;
//! `service` (under `--cfg madsim`) serves it from a madsim node at `10.0.5.1:5432`.
//! Statements are typed ([`Statement`]), not SQL text; values coerce into column types by
//! PostgreSQL's assignment rules ([`coerce`]); errors carry the real SQLSTATE and message
//! ([`PgError`]). Behaviour follows `shared/models-reference.md` section G.
//!
//! # Example
//! ```
//! use eosim_sim::postgres::*;
//!
//! let mut db = Database::new(DbConfig::default());
//! let s = db.connect(0);
//! let create = Statement::CreateTable(CreateTable {
//!     name: "t".into(),
//!     columns: vec![
//!         Column::new("id", ColumnType::Integer),
//!         Column::new("note", ColumnType::parse("varchar(10)")?),
//!     ],
//!     primary_key: vec!["id".into()],
//!     if_not_exists: false,
//! });
//! assert!(matches!(db.execute(0, s, &create), Execution::Done(Ok(_))));
//! let insert = Statement::Insert(Insert {
//!     table: "t".into(),
//!     columns: vec![],
//!     rows: vec![vec![Value::text("1"), Value::text("an 11-char!")]],
//!     on_conflict: OnConflict::None,
//! });
//! let Execution::Done(Err(e)) = db.execute(0, s, &insert) else { panic!() };
//! assert_eq!(e.code.code(), "22001");
//! assert_eq!(e.message, "value too long for type character varying(10)");
//! # Ok::<(), PgError>(())
//! ```

pub mod coerce;
pub mod datetime;
pub mod error;
pub mod model;
#[cfg(madsim)]
pub mod service;
#[cfg(all(test, madsim))]
mod service_tests;
#[cfg(test)]
mod tests;
pub mod types;

pub use error::{PgError, SqlState};
pub use model::{Database, DbConfig, Execution, SessionId, Table, TxnEnd};
pub use types::*;

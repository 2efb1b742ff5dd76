//! The PostgreSQL model: tables, sessions, transactions, and the server node serving them.
//!
//! [`model::Database`] is a pure state machine (no I/O, no clock of its own: callers pass
//! `now_ms`) holding committed tables and every session's open transaction;
//! `service` (under `--cfg madsim`) serves it from a madsim node at `10.0.5.1:5432`.
//! Statements are typed ([`Statement`]), not SQL text; values coerce into column types by
//! PostgreSQL's assignment rules ([`coerce`]); errors carry the real SQLSTATE and message
//! ([`PgError`]). Behaviour follows `shared/models-reference.md` section G.
//!
//! # Known differences
//! `harness/tests/real_postgres_diff.rs` runs generated single-session sequences (CREATE
//! TABLE of the seed table's types, multi-row INSERT with and without ON CONFLICT, UPDATE
//! and DELETE by key, TRUNCATE, SELECT; BEGIN/COMMIT/ROLLBACK and autocommit) on this model
//! and on real PostgreSQL 15, comparing each statement's success, affected rows, SQLSTATE,
//! message (23505, 23502, 22001, 22003, 22P02) and DETAIL (23505, 23502), and the final
//! rows as output text ([`coerce::format_column_value`]). Fixed after it found them:
//! parse-time errors (bad literals, missing casts) before plan-time ones (cast ranges,
//! `varchar(n)` length) over all rows of a statement ([`coerce::fails_at_parse`]);
//! `WHERE key = v` compares instead of assigning ([`coerce::key_operand`]); `22009` for zone
//! offsets past ±15:59:59; `real` printed as `f32` in output and DETAIL lines. The
//! differences it keeps, deliberately, and skips explicitly (each counted in its output):
//! - `json` is stored normalized like `jsonb` (key order, blanks, duplicate keys): compare
//!   a `json` column as `col::jsonb`. The DETAIL of a `23502` in a table with a `json` column
//!   shows the client's json text in PostgreSQL and the normalized text here.
//! - JSON numbers are serde_json's `i64`/`f64`, not jsonb's `numeric`: `1e2` prints as
//!   `100.0` here and `100` in PostgreSQL, `1.50` as `1.5` and `1.50`.
//! - [`coerce::format_value`] does not know the column type, so a `real` prints as the
//!   `f64` it is held in (`0.10000000149011612`); [`coerce::format_column_value`] prints
//!   it as PostgreSQL does (`0.1`).
//!
//! Not compared (outside what the differential generates): message wording of other
//! SQLSTATEs (`42804`, `22007`, `22008` and `22009` codes are compared, their texts not),
//! HINT lines, `COMMIT`'s command tag (`ROLLBACK` for a failed transaction; its effect on
//! the rows is compared), concurrency (single session only), tables without a primary key,
//! typed keys of another type family (`text_key = 5::int8` is `42883` in PostgreSQL),
//! `date`/`timetz`/`timestamptz` parameters bound as typed values.
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
pub mod fixtures;
pub mod model;
pub mod service;
#[cfg(all(test, madsim))]
mod service_tests;
#[cfg(test)]
mod tests;
pub mod types;

pub use error::{PgError, SqlState};
pub use model::{Database, DbConfig, Execution, SessionId, Table, TxnEnd};
pub use types::*;

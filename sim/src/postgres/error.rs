//! SQLSTATE codes and the error a statement fails with.
//!
//! Codes and message texts follow PostgreSQL's "PostgreSQL Error Codes" appendix
//! (<https://www.postgresql.org/docs/current/errcodes-appendix.html>) and the messages the
//! server prints for them (PostgreSQL 13+: the not-null message names the relation).

use crate::coded::coded_enum;
use serde::{Deserialize, Serialize};

coded_enum! {
    /// The SQLSTATE codes the model raises; names follow the appendix's condition names (and
    /// `tokio_postgres::error::SqlState`'s constants, in CamelCase); `code()` gives the
    /// five characters the server sends.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum SqlState: &'static str {
        /// `0A000` feature_not_supported: a statement the model does not support (an UPDATE or
        /// DELETE by key on a table without a primary key).
        FeatureNotSupported = "0A000",
        /// `08003` connection_does_not_exist: the session is unknown (closed, or lost in a
        /// server crash).
        ConnectionDoesNotExist = "08003",
        /// `21000` cardinality_violation: ON CONFLICT DO UPDATE would touch a row twice.
        CardinalityViolation = "21000",
        /// `22001` string_data_right_truncation: a value longer than `varchar(n)`.
        StringDataRightTruncation = "22001",
        /// `22003` numeric_value_out_of_range.
        NumericValueOutOfRange = "22003",
        /// `22007` invalid_datetime_format.
        InvalidDatetimeFormat = "22007",
        /// `22008` datetime_field_overflow.
        DatetimeFieldOverflow = "22008",
        /// `22009` invalid_time_zone_displacement_value: a zone offset beyond ±15:59:59.
        InvalidTimeZoneDisplacementValue = "22009",
        /// `22021` character_not_in_repertoire: a NUL byte in text.
        CharacterNotInRepertoire = "22021",
        /// `22023` invalid_parameter_value.
        InvalidParameterValue = "22023",
        /// `22P02` invalid_text_representation: bad input text for a number, boolean or json.
        InvalidTextRepresentation = "22P02",
        /// `22P05` untranslatable_character: `\u0000` in jsonb.
        UntranslatableCharacter = "22P05",
        /// `23502` not_null_violation.
        NotNullViolation = "23502",
        /// `23505` unique_violation.
        UniqueViolation = "23505",
        /// `25P02` in_failed_sql_transaction.
        InFailedSqlTransaction = "25P02",
        /// `25P03` idle_in_transaction_session_timeout.
        IdleInTransactionSessionTimeout = "25P03",
        /// `40P01` deadlock_detected.
        DeadlockDetected = "40P01",
        /// `42601` syntax_error (an INSERT whose rows and column list differ in length).
        SyntaxError = "42601",
        /// `42701` duplicate_column.
        DuplicateColumn = "42701",
        /// `42703` undefined_column.
        UndefinedColumn = "42703",
        /// `42704` undefined_object (an unknown type, a type without a btree operator class).
        UndefinedObject = "42704",
        /// `42804` datatype_mismatch: no assignment cast from the value's type.
        DatatypeMismatch = "42804",
        /// `42P01` undefined_table.
        UndefinedTable = "42P01",
        /// `42P07` duplicate_table.
        DuplicateTable = "42P07",
        /// `42P10` invalid_column_reference: an ON CONFLICT target that matches no unique
        /// constraint.
        InvalidColumnReference = "42P10",
        /// `55P03` lock_not_available: `lock_timeout` expired.
        LockNotAvailable = "55P03",
    }
}

impl SqlState {
    /// The model's name for a five-character SQLSTATE, if it knows it.
    pub fn from_code(code: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.code() == code)
    }
}

impl std::fmt::Display for SqlState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// An `ERROR` the server reports for a statement, shaped like `tokio_postgres::error::DbError`
/// (code, message, detail, hint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("ERROR: {message} (SQLSTATE {code})")]
pub struct PgError {
    /// The SQLSTATE.
    pub code: SqlState,
    /// The primary message, as PostgreSQL words it.
    pub message: String,
    /// The `DETAIL` line, if PostgreSQL sends one.
    pub detail: Option<String>,
    /// The `HINT` line, if PostgreSQL sends one.
    pub hint: Option<String>,
}

impl PgError {
    /// An error with a message and no detail or hint.
    pub fn new(code: SqlState, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// The same error with a `DETAIL` line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The same error with a `HINT` line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// `25P02`: what every statement after an error gets until ROLLBACK.
    pub fn in_failed_transaction() -> Self {
        Self::new(
            SqlState::InFailedSqlTransaction,
            "current transaction is aborted, commands ignored until end of transaction block",
        )
    }

    /// `42P01` for `table`.
    pub fn undefined_table(table: &str) -> Self {
        Self::new(
            SqlState::UndefinedTable,
            format!("relation \"{table}\" does not exist"),
        )
    }

    /// `42703` for `column` of `table`.
    pub fn undefined_column(table: &str, column: &str) -> Self {
        Self::new(
            SqlState::UndefinedColumn,
            format!("column \"{column}\" of relation \"{table}\" does not exist"),
        )
    }

    /// `08003`: the session is unknown.
    pub fn connection_does_not_exist() -> Self {
        Self::new(
            SqlState::ConnectionDoesNotExist,
            "connection does not exist",
        )
    }
}

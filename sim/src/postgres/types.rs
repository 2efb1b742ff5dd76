//! Column types, values and statements: the typed stand-ins for SQL text.
//!
//! Types follow "Data Types" (<https://www.postgresql.org/docs/current/datatype.html>);
//! statements follow the `CREATE TABLE`, `INSERT`, `UPDATE`, `DELETE`, `TRUNCATE` and
//! `SELECT` reference pages. Identifiers are taken as written, as if double-quoted (no
//! folding to lower case).

use super::error::{PgError, SqlState};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// The column types the model supports (the seed table `test15`'s, plus `varchar(n)` and
/// `jsonb`). <https://www.postgresql.org/docs/current/datatype.html>
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    /// `smallint` / `int2`: -32768..=32767.
    SmallInt,
    /// `integer` / `int4`.
    Integer,
    /// `bigint` / `int8`.
    BigInt,
    /// `boolean`.
    Boolean,
    /// `real` / `float4`.
    Real,
    /// `double precision` / `float8`.
    DoublePrecision,
    /// `date`.
    Date,
    /// `time with time zone` / `timetz`.
    TimeTz,
    /// `timestamp with time zone` / `timestamptz`.
    TimestampTz,
    /// `text`.
    Text,
    /// `character varying(n)`; `None` is unbounded `varchar`.
    Varchar(Option<u32>),
    /// `json` (stored normalized here, like `jsonb`; see [`Value::Json`]).
    Json,
    /// `jsonb`.
    Jsonb,
}

impl ColumnType {
    /// Parses a type name as `CREATE TABLE` and the JDBC sink's `col.types` spell it:
    /// `int2`/`smallint`, `int4`/`int`/`integer`, `int8`/`bigint`, `bool`/`boolean`,
    /// `float4`/`real`, `float8`/`double precision`, `date`, `timetz`/`time with time
    /// zone`, `timestamptz`/`timestamp with time zone`, `text`, `varchar[(n)]`/`character
    /// varying[(n)]`, `json`, `jsonb`; case and extra blanks are ignored.
    ///
    /// # Errors
    /// `42704` `type "..." does not exist`; `22023` for `varchar(0)`.
    pub fn parse(name: &str) -> Result<Self, PgError> {
        let lower = name.to_ascii_lowercase();
        let norm = lower.split_whitespace().collect::<Vec<_>>().join(" ");
        let unknown = || {
            PgError::new(
                SqlState::UndefinedObject,
                format!("type \"{norm}\" does not exist"),
            )
        };
        let t = match norm.as_str() {
            "int2" | "smallint" => Self::SmallInt,
            "int4" | "int" | "integer" => Self::Integer,
            "int8" | "bigint" => Self::BigInt,
            "bool" | "boolean" => Self::Boolean,
            "float4" | "real" => Self::Real,
            "float8" | "double precision" | "float" => Self::DoublePrecision,
            "date" => Self::Date,
            "timetz" | "time with time zone" => Self::TimeTz,
            "timestamptz" | "timestamp with time zone" => Self::TimestampTz,
            "text" => Self::Text,
            "varchar" | "character varying" => Self::Varchar(None),
            "json" => Self::Json,
            "jsonb" => Self::Jsonb,
            other => {
                let inner = other
                    .strip_prefix("varchar")
                    .or_else(|| other.strip_prefix("character varying"))
                    .map(str::trim)
                    .and_then(|r| r.strip_prefix('('))
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(unknown)?;
                let n: u32 = inner.trim().parse().map_err(|_| unknown())?;
                if n == 0 {
                    return Err(PgError::new(
                        SqlState::InvalidParameterValue,
                        "length for type varchar must be at least 1",
                    ));
                }
                Self::Varchar(Some(n))
            }
        };
        Ok(t)
    }

    /// The name PostgreSQL uses in messages (`format_type`): `smallint`, `character
    /// varying(10)`, `time with time zone`...
    pub fn pg_name(self) -> String {
        let s = match self {
            Self::SmallInt => "smallint",
            Self::Integer => "integer",
            Self::BigInt => "bigint",
            Self::Boolean => "boolean",
            Self::Real => "real",
            Self::DoublePrecision => "double precision",
            Self::Date => "date",
            Self::TimeTz => "time with time zone",
            Self::TimestampTz => "timestamp with time zone",
            Self::Text => "text",
            Self::Varchar(Some(n)) => return format!("character varying({n})"),
            Self::Varchar(None) => "character varying",
            Self::Json => "json",
            Self::Jsonb => "jsonb",
        };
        s.to_string()
    }
}

/// A column of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// `NOT NULL` (primary-key columns are always NOT NULL, whatever this says).
    pub not_null: bool,
}

impl Column {
    /// A nullable column.
    pub fn new(name: impl Into<String>, ty: ColumnType) -> Self {
        Self {
            name: name.into(),
            ty,
            not_null: false,
        }
    }

    /// The same column, `NOT NULL`.
    pub fn not_null(mut self) -> Self {
        self.not_null = true;
        self
    }
}

/// A `date`: days since 1970-01-01 (proleptic Gregorian calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Date(pub i32);

/// A `timestamp with time zone`: microseconds since 1970-01-01 00:00:00 UTC (PostgreSQL
/// keeps UTC and prints in the session's `TimeZone`, which the model fixes at `UTC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimestampTz(pub i64);

/// A `time with time zone`: local time of day in microseconds and the UTC offset in
/// seconds east of Greenwich (PostgreSQL keeps both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TimeTz {
    /// Microseconds since local midnight, `0..=86_400_000_000`.
    pub micros: i64,
    /// Offset from UTC, seconds east (`+02` is 7200).
    pub offset_s: i32,
}

/// A value: a statement's parameter or a stored datum.
///
/// As a parameter, each variant carries the type the client bound it with, and the column's
/// assignment rules decide (see [`assign`](super::coerce::assign)): [`Value::Text`] is an
/// untyped literal (`'...'`, type `unknown`) that goes through the column type's input
/// function, so `"2024-01-01"` fits a `date` and `"abc"` does not fit an `integer`;
/// [`Value::Int`] is a `bigint`, [`Value::Float`] a `double precision`, [`Value::Json`] a
/// `json`. Ordering is total (NaN equals NaN and sorts above every number, as in
/// PostgreSQL; text compares bytewise, as under the `C` collation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// `boolean`.
    Bool(bool),
    /// An integer (`smallint`, `integer`, `bigint` when stored).
    Int(i64),
    /// A float (`real` values are stored rounded to `f32`).
    Float(f64),
    /// Text (`text`, `varchar`; an untyped literal as a parameter).
    Text(String),
    /// `json` / `jsonb`.
    Json(serde_json::Value),
    /// `date`.
    Date(Date),
    /// `time with time zone`.
    TimeTz(TimeTz),
    /// `timestamp with time zone`.
    TimestampTz(TimestampTz),
}

impl Value {
    /// The parameter a JSON value becomes when bound by its own JSON type: null → NULL,
    /// booleans → `boolean`, integral numbers that fit i64 → `bigint`, other numbers →
    /// `double precision`, strings → untyped text, arrays and objects → `json`.
    pub fn from_json(json: &serde_json::Value) -> Self {
        use serde_json::Value as J;
        match json {
            J::Null => Self::Null,
            J::Bool(b) => Self::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Self::Int(i),
                None => Self::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Self::Text(s.clone()),
            J::Array(_) | J::Object(_) => Self::Json(json.clone()),
        }
    }

    /// Text, from anything string-like.
    pub fn text(s: impl Into<String>) -> Self {
        Self::Text(s.into())
    }

    /// Whether this is SQL NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    /// The type name of the value as a parameter, for `42804` messages.
    pub fn param_type_name(&self) -> &'static str {
        match self {
            Self::Null | Self::Text(_) => "unknown",
            Self::Bool(_) => "boolean",
            Self::Int(_) => "bigint",
            Self::Float(_) => "double precision",
            Self::Json(_) => "json",
            Self::Date(_) => "date",
            Self::TimeTz(_) => "time with time zone",
            Self::TimestampTz(_) => "timestamp with time zone",
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Null => 0,
            Self::Bool(_) => 1,
            Self::Int(_) => 2,
            Self::Float(_) => 3,
            Self::Text(_) => 4,
            Self::Json(_) => 5,
            Self::Date(_) => 6,
            Self::TimeTz(_) => 7,
            Self::TimestampTz(_) => 8,
        }
    }
}

fn float_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).expect("neither is NaN"),
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Bool(a), Self::Bool(b)) => a.cmp(b),
            (Self::Int(a), Self::Int(b)) => a.cmp(b),
            (Self::Float(a), Self::Float(b)) => float_cmp(*a, *b),
            (Self::Text(a), Self::Text(b)) => a.cmp(b),
            (Self::Json(a), Self::Json(b)) => a.to_string().cmp(&b.to_string()),
            (Self::Date(a), Self::Date(b)) => a.cmp(b),
            (Self::TimeTz(a), Self::TimeTz(b)) => a.cmp(b),
            (Self::TimestampTz(a), Self::TimestampTz(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

/// A primary-key value: the key columns' values in key order.
pub type Key = Vec<Value>;

/// A row: one value per column, in the table's column order.
pub type Row = Vec<Value>;

/// `CREATE TABLE [IF NOT EXISTS] name (columns..., PRIMARY KEY (primary_key...))`.
/// <https://www.postgresql.org/docs/current/sql-createtable.html>
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTable {
    /// The table's name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// The primary key's columns, in key order; empty for a table without one.
    pub primary_key: Vec<String>,
    /// `IF NOT EXISTS`: an existing table is a notice, not `42P07`.
    pub if_not_exists: bool,
}

/// What `INSERT` does with a row whose key exists.
/// <https://www.postgresql.org/docs/current/sql-insert.html#SQL-ON-CONFLICT>
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnConflict {
    /// No `ON CONFLICT` clause: `23505`.
    None,
    /// `ON CONFLICT [(target)] DO NOTHING`: skip the row.
    DoNothing {
        /// The arbiter's columns; `None` means any unique violation.
        conflict_target: Option<Vec<String>>,
    },
    /// `ON CONFLICT (target) DO UPDATE SET c = EXCLUDED.c, ...`.
    DoUpdate {
        /// The arbiter's columns (must be the primary key's, in any order).
        conflict_target: Vec<String>,
        /// The columns set from the proposed row (`EXCLUDED`).
        set: Vec<String>,
    },
}

/// `INSERT INTO table (columns) VALUES rows... [ON CONFLICT ...]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Insert {
    /// The target table.
    pub table: String,
    /// The target columns; empty means every column in table order. Columns left out get
    /// NULL (the model has no `DEFAULT`s).
    pub columns: Vec<String>,
    /// The proposed rows, each with one value per target column.
    pub rows: Vec<Vec<Value>>,
    /// The conflict clause.
    pub on_conflict: OnConflict,
}

/// A statement. <https://www.postgresql.org/docs/current/sql-commands.html>
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Statement {
    /// `CREATE TABLE` (transactional, as in PostgreSQL).
    CreateTable(CreateTable),
    /// `INSERT`.
    Insert(Insert),
    /// `UPDATE table SET set... WHERE (pk) = (where_pk)`.
    Update {
        /// The table.
        table: String,
        /// Columns and their new values (may include key columns: the key then changes).
        set: Vec<(String, Value)>,
        /// The primary-key value of the row to update, in key order.
        where_pk: Vec<Value>,
    },
    /// `DELETE FROM table WHERE (pk) = (where_pk)`.
    Delete {
        /// The table.
        table: String,
        /// The primary-key value of the row to delete, in key order.
        where_pk: Vec<Value>,
    },
    /// `TRUNCATE table` (transactional; takes an `ACCESS EXCLUSIVE` lock).
    Truncate {
        /// The table.
        table: String,
    },
    /// `SELECT * FROM table ORDER BY pk`.
    Select {
        /// The table.
        table: String,
    },
}

/// A statement's result, as `tokio_postgres` hands it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Rows affected (`Client::execute`'s `u64`; 0 for DDL and `TRUNCATE`). For an upsert,
    /// rows inserted plus rows updated; rows skipped by DO NOTHING do not count.
    Affected(u64),
    /// A `SELECT`'s rows (`Client::query`), with the column names.
    Rows {
        /// Column names, in order.
        columns: Vec<String>,
        /// The rows, in primary-key order.
        rows: Vec<Row>,
    },
}

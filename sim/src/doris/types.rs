//! Doris tables, column types, and the load-time conversion of JSON input into rows as
//! Stream Load and Routine Load do it: `COLUMNS(...)` mapping, `jsonpaths`, `strict_mode`,
//! error rows.
//!
//! Sources: the Doris manual's "Data Model" (DUPLICATE KEY, UNIQUE KEY merge-on-write,
//! `function_column.sequence_col`), "Strict Mode" (data-operate/import/load-strict-mode:
//! with `strict_mode` off a value that fails its conversion becomes NULL; with it on such a
//! row is filtered; NULL into a NOT NULL column and an over-long string are filtered in
//! both modes) and "Load JSON Format Data" (`jsonpaths`, one JSON object per Kafka
//! message for Routine Load).

use super::error::DorisError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A stored row: column name → value (`Value::Null` for NULL).
pub type Row = BTreeMap<String, Value>;

/// A column type (the subset the pipelines use).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnType {
    /// `BOOLEAN`.
    Boolean,
    /// `INT` (32 bit).
    Int,
    /// `BIGINT` (64 bit).
    BigInt,
    /// `DOUBLE`.
    Double,
    /// `DATETIME`: `yyyy-MM-dd HH:mm:ss` (or a date, time 00:00:00).
    Datetime,
    /// `VARCHAR(n)`: at most `n` bytes.
    Varchar(usize),
    /// `STRING`.
    String,
}

/// A column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDef {
    /// Name.
    pub name: String,
    /// Type.
    pub ty: ColumnType,
    /// Whether NULL is allowed (Doris columns are nullable unless `NOT NULL`).
    pub nullable: bool,
}

impl ColumnDef {
    /// A nullable column.
    pub fn new(name: &str, ty: ColumnType) -> Self {
        Self {
            name: name.into(),
            ty,
            nullable: true,
        }
    }

    /// The same column, `NOT NULL`.
    pub fn not_null(mut self) -> Self {
        self.nullable = false;
        self
    }
}

/// The table's data model (`DUPLICATE KEY` / `UNIQUE KEY`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeysType {
    /// `DUPLICATE KEY(cols)`: every loaded row is kept; the key is only the sort key.
    Duplicate(Vec<String>),
    /// `UNIQUE KEY(cols)` with `enable_unique_key_merge_on_write`: one row per key, the
    /// one of the latest version wins, or with `function_column.sequence_col` the one
    /// with the greatest sequence value (ties: the later load).
    Unique {
        /// Key columns.
        keys: Vec<String>,
        /// `function_column.sequence_col`.
        sequence_col: Option<String>,
    },
}

/// A table definition (`CREATE TABLE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Name.
    pub name: String,
    /// Columns, in order.
    pub columns: Vec<ColumnDef>,
    /// Data model.
    pub keys: KeysType,
}

impl TableDef {
    /// The seed's `clicklog(clickTime DATETIME, type String, id VARCHAR(100), user
    /// VARCHAR(100), city VARCHAR(50)) DUPLICATE KEY(clickTime, type)`.
    pub fn clicklog() -> Self {
        Self {
            name: "clicklog".into(),
            columns: vec![
                ColumnDef::new("clickTime", ColumnType::Datetime),
                ColumnDef::new("type", ColumnType::String),
                ColumnDef::new("id", ColumnType::Varchar(100)),
                ColumnDef::new("user", ColumnType::Varchar(100)),
                ColumnDef::new("city", ColumnType::Varchar(50)),
            ],
            keys: KeysType::Duplicate(vec!["clickTime".into(), "type".into()]),
        }
    }

    /// Checks the definition: key and sequence columns exist.
    ///
    /// # Errors
    /// [`DorisError::Analysis`] naming the missing column.
    pub fn validate(&self) -> Result<(), DorisError> {
        let (keys, seq) = match &self.keys {
            KeysType::Duplicate(k) => (k, None),
            KeysType::Unique { keys, sequence_col } => (keys, sequence_col.as_ref()),
        };
        for name in keys.iter().chain(seq) {
            if self.column(name).is_none() {
                return Err(DorisError::Analysis(format!(
                    "table {}: key column {name} does not exist",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// How a load maps input onto the table (the Stream Load headers and the Routine Load
/// `COLUMNS` / `PROPERTIES` that matter here).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// `COLUMNS(c1, c2, ...)`: the input fields, by name, in the order `jsonpaths` reads
    /// them; each names the table column it fills. Empty: the table's columns. Table
    /// columns not named get NULL (an error row if NOT NULL).
    pub columns: Vec<String>,
    /// `jsonpaths`: `$.a` or `$.a.b` per column of `columns` (empty: match by name).
    pub jsonpaths: Vec<String>,
    /// `strict_mode` (default false).
    pub strict_mode: bool,
}

/// Why one input row was filtered (an error row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RowError {
    /// The input is not a JSON object (`Parse json data for JsonDoc failed`).
    MalformedJson(String),
    /// A value did not convert to its column type under `strict_mode`.
    StrictConversion {
        /// Column.
        column: String,
        /// The input value.
        value: String,
    },
    /// NULL (given, or from a failed conversion) into a NOT NULL column.
    NullInNotNull(String),
    /// A string longer than its `VARCHAR(n)`.
    TooLong {
        /// Column.
        column: String,
        /// The value's length, bytes.
        len: usize,
        /// `n`.
        max: usize,
    },
}

/// One converted input: a row, or the reason it was filtered.
pub type Converted = Result<Row, RowError>;

impl LoadSpec {
    /// Checks the spec against `table`: every column exists, `jsonpaths` has one entry per
    /// column.
    ///
    /// # Errors
    /// [`DorisError::Analysis`] naming what is wrong.
    pub fn validate(&self, table: &TableDef) -> Result<(), DorisError> {
        if let Some(c) = self.columns.iter().find(|c| table.column(c).is_none()) {
            return Err(DorisError::Analysis(format!(
                "COLUMNS: unknown column '{c}' in table {}",
                table.name
            )));
        }
        if !self.jsonpaths.is_empty() && self.jsonpaths.len() != self.columns.len() {
            return Err(DorisError::Analysis(format!(
                "jsonpaths has {} entries for {} columns",
                self.jsonpaths.len(),
                self.columns.len()
            )));
        }
        Ok(())
    }

    /// Converts one input text (a Kafka message, a Stream Load line) into a row of `table`.
    pub fn convert(&self, table: &TableDef, input: &str) -> Converted {
        let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(input) else {
            return Err(RowError::MalformedJson(truncate(input)));
        };
        let doc = Value::Object(doc);
        let mut row = Row::new();
        for col in &table.columns {
            let raw = self.field(&doc, &col.name);
            row.insert(col.name.clone(), convert_value(col, raw, self.strict_mode)?);
        }
        Ok(row)
    }

    fn field<'a>(&self, doc: &'a Value, column: &str) -> Option<&'a Value> {
        if self.columns.is_empty() {
            return doc.get(column);
        }
        let i = self.columns.iter().position(|c| c == column)?;
        match self.jsonpaths.get(i) {
            Some(path) => json_path(doc, path),
            None => doc.get(column),
        }
    }
}

/// `$.a.b` lookup (the jsonpaths subset modelled: object members only).
fn json_path<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    let rest = path.strip_prefix('$')?;
    rest.split('.')
        .filter(|s| !s.is_empty())
        .try_fold(doc, |v, key| v.get(key))
}

fn truncate(input: &str) -> String {
    input.chars().take(64).collect()
}

/// One value into `col`: absent or NULL stays NULL; a failed conversion is NULL when
/// `strict` is off, an error row when on; NULL into NOT NULL and over-long strings are
/// error rows in both modes.
fn convert_value(col: &ColumnDef, raw: Option<&Value>, strict: bool) -> Result<Value, RowError> {
    let value = match raw {
        None | Some(Value::Null) => Value::Null,
        Some(v) => match cast(&col.ty, v) {
            Ok(v) => v,
            Err(CastError::TooLong(len, max)) => {
                return Err(RowError::TooLong {
                    column: col.name.clone(),
                    len,
                    max,
                })
            }
            Err(CastError::Invalid) if strict => {
                crate::mark!("doris:strict-mode-filtered");
                return Err(RowError::StrictConversion {
                    column: col.name.clone(),
                    value: truncate(&v.to_string()),
                });
            }
            Err(CastError::Invalid) => {
                crate::mark!("doris:non-strict-null");
                Value::Null
            }
        },
    };
    if value.is_null() && !col.nullable {
        return Err(RowError::NullInNotNull(col.name.clone()));
    }
    Ok(value)
}

enum CastError {
    Invalid,
    TooLong(usize, usize),
}

fn cast(ty: &ColumnType, v: &Value) -> Result<Value, CastError> {
    // Doris reads JSON scalars as text and casts them: "12" fills an INT, 12 a VARCHAR.
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        _ => return Err(CastError::Invalid),
    };
    match ty {
        ColumnType::Boolean => match text.as_str() {
            "true" | "1" => Ok(Value::Bool(true)),
            "false" | "0" => Ok(Value::Bool(false)),
            _ => Err(CastError::Invalid),
        },
        ColumnType::Int => text
            .parse::<i32>()
            .map(Value::from)
            .map_err(|_| CastError::Invalid),
        ColumnType::BigInt => text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| CastError::Invalid),
        ColumnType::Double => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or(CastError::Invalid),
        ColumnType::Datetime => parse_datetime(&text).map(Value::String),
        ColumnType::Varchar(max) if text.len() > *max => Err(CastError::TooLong(text.len(), *max)),
        ColumnType::Varchar(_) | ColumnType::String => Ok(Value::String(text)),
    }
}

/// `yyyy-MM-dd HH:mm:ss` or `yyyy-MM-dd`, normalized to the former; ranges checked
/// loosely (month 1..=12, day 1..=31, hour < 24, minute and second < 60).
fn parse_datetime(text: &str) -> Result<String, CastError> {
    let (date, time) = text.split_once(' ').unwrap_or((text, "00:00:00"));
    let d: Vec<u32> = fields(date, '-', 3)?;
    let t: Vec<u32> = fields(time, ':', 3)?;
    let ok = (1..=12).contains(&d[1])
        && (1..=31).contains(&d[2])
        && t[0] < 24
        && t[1] < 60
        && t[2] < 60
        && date.len() == 10;
    if !ok {
        return Err(CastError::Invalid);
    }
    Ok(format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d[0], d[1], d[2], t[0], t[1], t[2]
    ))
}

fn fields(text: &str, sep: char, n: usize) -> Result<Vec<u32>, CastError> {
    let parts: Vec<u32> = text
        .split(sep)
        .map(|p| p.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| CastError::Invalid)?;
    if parts.len() == n {
        Ok(parts)
    } else {
        Err(CastError::Invalid)
    }
}

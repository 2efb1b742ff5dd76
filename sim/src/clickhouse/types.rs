//! Column types, values, table definitions, settings and version profiles.
//!
//! Conversion of JSON input follows ClickHouse's `JSONEachRow` input format
//! ([CH-doc: interfaces/formats#jsoneachrow], `src/Processors/Formats/Impl/
//! JSONEachRowRowInputFormat.cpp`), with one documented switch, [`IntegerOverflow`]:
//! the real text parser wraps integers that do not fit their column silently (ClickHouse
//! issues #7630, #17714, #41100: "CH does overflow by performance reasons"), while the
//! literal path of `INSERT ... VALUES` (`convertFieldToTypeOrThrow`,
//! `src/Interpreters/convertFieldToType.h`) throws `ARGUMENT_OUT_OF_BOUND`.
//!
//! Error numbers are ClickHouse's own; which code the real parser raises for a given
//! malformed value is approximated (UNVERIFIED per value kind): wrong JSON shapes raise
//! `CANNOT_PARSE_INPUT_ASSERTION_FAILED` (27), bad DateTime text `CANNOT_PARSE_DATETIME`
//! (41), unknown fields `INCORRECT_DATA` (117).

use super::error::{ChError, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// A ClickHouse server version whose defaults and features the model follows
/// (models-reference F.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum VersionProfile {
    /// 18.16 (Debian's package): no KeeperMap, no `insert_deduplication_token`, no
    /// `non_replicated_deduplication_window`; NULL is not turned into a default.
    V18_16,
    /// 23.7 (the seed's version): `replicated_deduplication_window` = 100.
    V23_7,
    /// 23.11 and later until 25.8: `replicated_deduplication_window` = 1000
    /// (ClickHouse PR #57335; the exact first release, 23.11 or 23.12, is UNVERIFIED).
    V23_11,
    /// 25.9 and later: `replicated_deduplication_window` = 10000 (ClickHouse PR #86820).
    V25_9,
}

impl VersionProfile {
    /// Default `replicated_deduplication_window` (count of block ids kept per table).
    pub fn replicated_deduplication_window(self) -> u64 {
        match self {
            Self::V18_16 | Self::V23_7 => 100,
            Self::V23_11 => 1000,
            Self::V25_9 => 10000,
        }
    }

    /// Default `replicated_deduplication_window_seconds`: 604800 (7 days). ClickHouse
    /// PR #87414 lowers it to 3600 in a late-2025 release not pinned down here, so the
    /// model keeps 604800 for every profile; set it per table to test the lower value.
    pub fn replicated_deduplication_window_seconds(self) -> u64 {
        604_800
    }

    /// Default `max_insert_block_size` in rows: 1048576 in 18.x, 1048545 from 21.x on
    /// (`DEFAULT_INSERT_BLOCK_SIZE` in `src/Core/Defines.h`).
    pub fn max_insert_block_size(self) -> usize {
        match self {
            Self::V18_16 => 1_048_576,
            _ => 1_048_545,
        }
    }

    /// Default `min_insert_block_size_rows`: `DEFAULT_INSERT_BLOCK_SIZE`, the same as
    /// [`Self::max_insert_block_size`] (`src/Core/Settings.h`).
    pub fn min_insert_block_size_rows(self) -> u64 {
        self.max_insert_block_size() as u64
    }

    /// Default `min_insert_block_size_bytes`: `DEFAULT_INSERT_BLOCK_SIZE * 256` (256 MiB
    /// in 18.x).
    pub fn min_insert_block_size_bytes(self) -> u64 {
        self.max_insert_block_size() as u64 * 256
    }

    /// Whether the version has the KeeperMap engine (22.8+, ClickHouse PR #39976).
    pub fn has_keeper_map(self) -> bool {
        self != Self::V18_16
    }

    /// Whether the version knows `insert_deduplication_token` (22.2+) and
    /// `non_replicated_deduplication_window` (ClickHouse PR #22514, 2021).
    pub fn has_token_and_non_replicated_dedup(self) -> bool {
        self != Self::V18_16
    }

    /// Default of `input_format_null_as_default` (NULL in a non-Nullable column becomes
    /// the column's default). 18.16 rejects the NULL instead (UNVERIFIED error code).
    pub fn null_as_default(self) -> bool {
        self != Self::V18_16
    }
}

/// A column type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnType {
    /// UInt8.
    UInt8,
    /// UInt16.
    UInt16,
    /// UInt32.
    UInt32,
    /// UInt64.
    UInt64,
    /// Int8.
    Int8,
    /// Int16.
    Int16,
    /// Int32.
    Int32,
    /// Int64.
    Int64,
    /// String.
    String,
    /// DateTime: seconds since the Unix epoch, UTC, as UInt32.
    DateTime,
    /// Nullable(inner).
    Nullable(Box<ColumnType>),
}

impl ColumnType {
    /// The type's name as ClickHouse writes it.
    pub fn name(&self) -> String {
        match self {
            Self::Nullable(inner) => format!("Nullable({})", inner.name()),
            other => format!("{other:?}"),
        }
    }

    /// The value a missing field gets (the type's default: 0, '', epoch, NULL).
    pub fn default_value(&self) -> Value {
        match self {
            Self::UInt8 | Self::UInt16 | Self::UInt32 | Self::UInt64 => Value::UInt(0),
            Self::Int8 | Self::Int16 | Self::Int32 | Self::Int64 => Value::Int(0),
            Self::String => Value::String(String::new()),
            Self::DateTime => Value::DateTime(0),
            Self::Nullable(_) => Value::Null,
        }
    }

    fn unsigned_bits(&self) -> Option<u32> {
        match self {
            Self::UInt8 => Some(8),
            Self::UInt16 => Some(16),
            Self::UInt32 => Some(32),
            Self::UInt64 => Some(64),
            _ => None,
        }
    }

    fn signed_bits(&self) -> Option<u32> {
        match self {
            Self::Int8 => Some(8),
            Self::Int16 => Some(16),
            Self::Int32 => Some(32),
            Self::Int64 => Some(64),
            _ => None,
        }
    }
}

/// One stored value. The column's [`ColumnType`] says how to read it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Value {
    /// NULL (Nullable columns only).
    Null,
    /// Any UInt* value.
    UInt(u64),
    /// Any Int* value.
    Int(i64),
    /// A String value.
    String(String),
    /// A DateTime value, seconds since the epoch (UTC).
    DateTime(u32),
}

impl Value {
    /// The value as JSON (numbers as numbers, DateTime as `"YYYY-MM-DD hh:mm:ss"`).
    pub fn to_json(&self) -> Json {
        match self {
            Self::Null => Json::Null,
            Self::UInt(v) => Json::from(*v),
            Self::Int(v) => Json::from(*v),
            Self::String(s) => Json::from(s.clone()),
            Self::DateTime(s) => Json::from(format_datetime(*s)),
        }
    }

    /// Appends a stable byte encoding (tag, then little-endian or length-prefixed bytes):
    /// the input of block-id hashing.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Null => out.push(0),
            Self::UInt(v) => {
                out.push(1);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Self::Int(v) => {
                out.push(2);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Self::String(s) => {
                out.push(3);
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Self::DateTime(s) => {
                out.push(4);
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
    }
}

/// A row: one value per table column, in column order.
pub type Row = Vec<Value>;

/// What happens to an integer that does not fit its column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntegerOverflow {
    /// Keep the low bits, as ClickHouse's text formats (JSONEachRow, VALUES literals on
    /// the streaming path) do: 300 into UInt8 stores 44.
    #[default]
    Wrap,
    /// Throw `ARGUMENT_OUT_OF_BOUND` (69), as `convertFieldToTypeOrThrow` does on the
    /// interpreted `VALUES` path; a typed client (RowBinary) rejects such values too.
    Throw,
}

/// How one JSON value becomes a column value.
#[derive(Debug, Clone, Copy)]
pub struct Conversion {
    /// NULL in a non-Nullable column becomes the default (`input_format_null_as_default`).
    pub null_as_default: bool,
    /// Integer overflow handling.
    pub overflow: IntegerOverflow,
    /// Numbers and bools are accepted as text in String columns (23.x).
    pub numbers_as_strings: bool,
}

fn parse_error(column: &str, ty: &ColumnType, got: &Json) -> ChError {
    ChError::new(
        ErrorCode::CannotParseInputAssertionFailed,
        format!(
            "Cannot parse input: value {got} for column {column} of type {}",
            ty.name()
        ),
    )
}

/// Converts the JSON value of field `column` into a value of `ty`.
///
/// # Errors
/// 27 for a JSON shape the type cannot read, 41 for bad DateTime text, 69 for an
/// out-of-range integer under [`IntegerOverflow::Throw`], 27 for NULL in a non-Nullable
/// column when NULL is not turned into the default.
pub fn convert(
    column: &str,
    ty: &ColumnType,
    json: &Json,
    c: Conversion,
) -> Result<Value, ChError> {
    if let ColumnType::Nullable(inner) = ty {
        return if json.is_null() {
            Ok(Value::Null)
        } else {
            convert(column, inner, json, c)
        };
    }
    if json.is_null() {
        return if c.null_as_default {
            Ok(ty.default_value())
        } else {
            Err(parse_error(column, ty, json))
        };
    }
    if let Some(bits) = ty.unsigned_bits() {
        return convert_unsigned(column, ty, bits, json, c.overflow);
    }
    if let Some(bits) = ty.signed_bits() {
        return convert_signed(column, ty, bits, json, c.overflow);
    }
    match (ty, json) {
        (ColumnType::String, Json::String(s)) => Ok(Value::String(s.clone())),
        (ColumnType::String, Json::Number(_) | Json::Bool(_)) if c.numbers_as_strings => {
            Ok(Value::String(json.to_string()))
        }
        (ColumnType::DateTime, Json::String(s)) => parse_datetime(s)
            .map(Value::DateTime)
            .ok_or_else(|| cannot_parse_datetime(column, json)),
        (ColumnType::DateTime, Json::Number(n)) => n
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(Value::DateTime)
            .ok_or_else(|| cannot_parse_datetime(column, json)),
        _ => Err(parse_error(column, ty, json)),
    }
}

fn cannot_parse_datetime(column: &str, json: &Json) -> ChError {
    ChError::new(
        ErrorCode::CannotParseDatetime,
        format!("Cannot parse datetime {json} for column {column}"),
    )
}

/// The integer a JSON value holds: numbers, numeric strings (quoted numbers are read),
/// bools as 0/1 (ClickHouse issue #798). `None` for anything else.
fn json_integer(json: &Json) -> Option<i128> {
    match json {
        Json::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        Json::String(s) => s.trim().parse::<i128>().ok(),
        Json::Bool(b) => Some(i128::from(*b)),
        _ => None,
    }
}

fn out_of_bound(column: &str, ty: &ColumnType, v: i128) -> ChError {
    ChError::new(
        ErrorCode::ArgumentOutOfBound,
        format!(
            "Value {v} cannot be safely converted into type {} (column {column})",
            ty.name()
        ),
    )
}

fn convert_unsigned(
    column: &str,
    ty: &ColumnType,
    bits: u32,
    json: &Json,
    overflow: IntegerOverflow,
) -> Result<Value, ChError> {
    let v = json_integer(json).ok_or_else(|| parse_error(column, ty, json))?;
    let max = if bits == 64 {
        u64::MAX as i128
    } else {
        (1i128 << bits) - 1
    };
    if (0..=max).contains(&v) {
        return Ok(Value::UInt(v as u64));
    }
    match overflow {
        IntegerOverflow::Throw => Err(out_of_bound(column, ty, v)),
        IntegerOverflow::Wrap => Ok(Value::UInt((v as u64) & (max as u64))),
    }
}

fn convert_signed(
    column: &str,
    ty: &ColumnType,
    bits: u32,
    json: &Json,
    overflow: IntegerOverflow,
) -> Result<Value, ChError> {
    let v = json_integer(json).ok_or_else(|| parse_error(column, ty, json))?;
    let min = -(1i128 << (bits - 1));
    let max = (1i128 << (bits - 1)) - 1;
    if (min..=max).contains(&v) {
        return Ok(Value::Int(v as i64));
    }
    match overflow {
        IntegerOverflow::Throw => Err(out_of_bound(column, ty, v)),
        IntegerOverflow::Wrap => {
            let shift = 64 - bits;
            Ok(Value::Int(((v as i64) << shift) >> shift))
        }
    }
}

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD hh:mm:ss` (or `YYYY-MM-DD`) as UTC seconds since the epoch.
pub fn parse_datetime(text: &str) -> Option<u32> {
    let (date, time) = text.split_once(' ').unwrap_or((text, "00:00:00"));
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let t: Vec<i64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let ([y, mo, da], [h, mi, s]) = (d.as_slice(), t.as_slice()) else {
        return None;
    };
    let valid = (1..=12).contains(mo) && (1..=31).contains(da) && *h < 24 && *mi < 60 && *s < 60;
    if !valid {
        return None;
    }
    let secs = days_from_civil(*y, *mo, *da) * 86_400 + h * 3600 + mi * 60 + s;
    u32::try_from(secs).ok()
}

/// Formats UTC seconds as `YYYY-MM-DD hh:mm:ss`.
pub fn format_datetime(secs: u32) -> String {
    let days = i64::from(secs / 86_400);
    let rem = secs % 86_400;
    // civil_from_days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// A table column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Name.
    pub name: String,
    /// Type.
    pub ty: ColumnType,
}

impl Column {
    /// A column `name ty`.
    pub fn new(name: &str, ty: ColumnType) -> Self {
        Self {
            name: name.to_string(),
            ty,
        }
    }
}

/// A table engine ([CH-doc: engines/table-engines]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Engine {
    /// `MergeTree`: local parts; deduplicates only with `non_replicated_deduplication_window`.
    MergeTree,
    /// `ReplicatedMergeTree`: block ids kept in Keeper, `replicated_deduplication_window`.
    ReplicatedMergeTree,
    /// `ReplacingMergeTree([ver])`: FINAL keeps one row per sorting key.
    ReplacingMergeTree {
        /// The version column; without it the last inserted row wins.
        version_column: Option<String>,
    },
    /// `ReplicatedReplacingMergeTree([ver])`.
    ReplicatedReplacingMergeTree {
        /// The version column; without it the last inserted row wins.
        version_column: Option<String>,
    },
    /// `KeeperMap(root_path [, keys_limit]) PRIMARY KEY(col)`: rows live in Keeper
    /// (models-reference F.5, `src/Storages/StorageKeeperMap.cpp`).
    KeeperMap {
        /// The table's root path, appended to the server's `keeper_map_path_prefix`.
        root_path: String,
        /// Maximum number of keys; `None` = unlimited.
        keys_limit: Option<u64>,
    },
}

impl Engine {
    /// Whether the engine is one of the Replicated*MergeTree engines.
    pub fn is_replicated(&self) -> bool {
        matches!(
            self,
            Self::ReplicatedMergeTree | Self::ReplicatedReplacingMergeTree { .. }
        )
    }

    /// Whether the engine collapses rows under FINAL, and by which version column.
    pub fn replacing(&self) -> Option<&Option<String>> {
        match self {
            Self::ReplacingMergeTree { version_column }
            | Self::ReplicatedReplacingMergeTree { version_column } => Some(version_column),
            _ => None,
        }
    }

    /// The engine's name as ClickHouse spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::MergeTree => "MergeTree",
            Self::ReplicatedMergeTree => "ReplicatedMergeTree",
            Self::ReplacingMergeTree { .. } => "ReplacingMergeTree",
            Self::ReplicatedReplacingMergeTree { .. } => "ReplicatedReplacingMergeTree",
            Self::KeeperMap { .. } => "KeeperMap",
        }
    }
}

/// MergeTree table settings (`SETTINGS ...` of `CREATE TABLE`); `None` = the version
/// profile's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSettings {
    /// `replicated_deduplication_window`: block ids kept per Replicated table.
    pub replicated_deduplication_window: Option<u64>,
    /// `replicated_deduplication_window_seconds`, measured from the newest block id.
    pub replicated_deduplication_window_seconds: Option<u64>,
    /// `non_replicated_deduplication_window` (default 0 = off).
    pub non_replicated_deduplication_window: Option<u64>,
    /// How often the Replicated cleanup thread trims the block ids, ms
    /// (`cleanup_delay_period` = 30 s, randomized in ClickHouse, fixed here). 0 = trim at
    /// every insert (an eager window, handy for tests).
    pub cleanup_delay_period_ms: Option<u64>,
}

/// Default `cleanup_delay_period`, ms.
pub const CLEANUP_DELAY_PERIOD_MS_DEFAULT: u64 = 30_000;

/// `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDef {
    /// Table name.
    pub name: String,
    /// Columns in order.
    pub columns: Vec<Column>,
    /// The engine.
    pub engine: Engine,
    /// `ORDER BY` columns (MergeTree family); the sorting key FINAL collapses on.
    pub order_by: Vec<String>,
    /// `PARTITION BY <column>` (the column's value is the partition id); `None` = one
    /// partition `all`.
    pub partition_by: Option<String>,
    /// `PRIMARY KEY(col)` of a KeeperMap table (exactly one column).
    pub primary_key: Option<String>,
    /// Table settings.
    pub settings: TableSettings,
}

impl TableDef {
    /// A table with `engine`, sorted by `order_by`, no partition key, default settings.
    pub fn new(name: &str, columns: Vec<Column>, engine: Engine, order_by: &[&str]) -> Self {
        Self {
            name: name.to_string(),
            columns,
            engine,
            order_by: order_by.iter().map(|c| c.to_string()).collect(),
            partition_by: None,
            primary_key: None,
            settings: TableSettings::default(),
        }
    }

    /// A KeeperMap table at `root_path` keyed by `primary_key`.
    pub fn keeper_map(
        name: &str,
        columns: Vec<Column>,
        root_path: &str,
        primary_key: &str,
    ) -> Self {
        let engine = Engine::KeeperMap {
            root_path: root_path.to_string(),
            keys_limit: None,
        };
        let mut def = Self::new(name, columns, engine, &[]);
        def.primary_key = Some(primary_key.to_string());
        def
    }

    /// The seed's table: `kafka2ck(id UInt8, name String) ENGINE=MergeTree ORDER BY id`.
    pub fn kafka2ck() -> Self {
        let columns = vec![
            Column::new("id", ColumnType::UInt8),
            Column::new("name", ColumnType::String),
        ];
        Self::new("kafka2ck", columns, Engine::MergeTree, &["id"])
    }

    /// Index of column `name`.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// Per-insert settings (`INSERT ... SETTINGS ...`); `None` = the default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsertSettings {
    /// `max_insert_block_size`: rows per block the server forms while parsing.
    pub max_insert_block_size: Option<usize>,
    /// `min_insert_block_size_rows`: parsed blocks are squashed until they hold this many
    /// rows (0: no row bound).
    pub min_insert_block_size_rows: Option<u64>,
    /// `min_insert_block_size_bytes`: ... or this many bytes (0: no byte bound). With both
    /// bounds 0 every parsed block is written as it is.
    pub min_insert_block_size_bytes: Option<u64>,
    /// `insert_deduplicate` (default 1).
    pub insert_deduplicate: Option<bool>,
    /// `insert_deduplication_token` (22.2+): names the blocks instead of their data.
    pub insert_deduplication_token: Option<String>,
    /// `keeper_map_strict_mode` (23.4+, default 0): INSERT of an existing key fails.
    pub keeper_map_strict_mode: Option<bool>,
    /// `input_format_skip_unknown_fields` (default 0 in 23.x).
    pub input_format_skip_unknown_fields: Option<bool>,
    /// Integer overflow handling (see [`IntegerOverflow`]; not a ClickHouse setting).
    pub integer_overflow: IntegerOverflow,
}

/// `INSERT INTO <table> [SETTINGS ...] FORMAT JSONEachRow <rows>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Insert {
    /// Target table.
    pub table: String,
    /// Rows, each a JSON object (field name → value).
    pub rows: Vec<Json>,
    /// Settings.
    pub settings: InsertSettings,
}

impl Insert {
    /// An insert of `rows` into `table` with default settings.
    pub fn new(table: &str, rows: Vec<Json>) -> Self {
        Self {
            table: table.to_string(),
            rows,
            settings: InsertSettings::default(),
        }
    }

    /// Parses a JSONEachRow body (one object per line; blank lines skipped).
    ///
    /// # Errors
    /// 27 `CANNOT_PARSE_INPUT_ASSERTION_FAILED` at the first line that is not JSON.
    pub fn json_each_row(table: &str, body: &str) -> Result<Self, ChError> {
        let mut rows = Vec::new();
        for (i, line) in body
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let row = serde_json::from_str(line).map_err(|e| {
                ChError::new(
                    ErrorCode::CannotParseInputAssertionFailed,
                    format!("Cannot parse input: {e}: (at row {})", i + 1),
                )
            })?;
            rows.push(row);
        }
        Ok(Self::new(table, rows))
    }

    /// Sets `max_insert_block_size`.
    pub fn block_size(mut self, rows: usize) -> Self {
        self.settings.max_insert_block_size = Some(rows);
        self
    }

    /// Sets `min_insert_block_size_rows` and `_bytes` to 0: no squashing, so every block
    /// of `max_insert_block_size` rows becomes its own part (as for an INSERT of more than
    /// a million rows with the defaults).
    pub fn unsquashed(mut self) -> Self {
        self.settings.min_insert_block_size_rows = Some(0);
        self.settings.min_insert_block_size_bytes = Some(0);
        self
    }

    /// Sets `insert_deduplication_token`.
    pub fn token(mut self, token: &str) -> Self {
        self.settings.insert_deduplication_token = Some(token.to_string());
        self
    }
}

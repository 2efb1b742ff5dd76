//! Assignment of a parameter to a column: PostgreSQL's rules for `INSERT` and `UPDATE`
//! targets ("Value Storage", <https://www.postgresql.org/docs/current/typeconv-query.html>).
//!
//! An untyped literal ([`Value::Text`]) goes through the column type's input function
//! (`22P02`, `22003`, `22007`, `22008` on bad text). A typed parameter needs an implicit or
//! assignment cast to the column's type: `bigint` → `smallint` checks the range
//! (`smallint out of range`), `double precision` → integers rounds half to even, anything
//! → `text`/`varchar` is its output text; where PostgreSQL has no such cast (`boolean` →
//! `integer`, `bigint` → `date`, `bigint` → `json`) the result is `42804`. Strings longer
//! than `varchar(n)` fail with `22001` unless the excess is blanks, which are cut.

use super::datetime::{self, DateTimeError};
use super::error::{PgError, SqlState};
use super::types::{Column, ColumnType, Date, TimeTz, TimestampTz, Value};

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Converts `value` for storage in `column` (NULL stays NULL; NOT NULL is the table's
/// check, since its message names the relation).
///
/// # Errors
/// The SQLSTATE PostgreSQL raises for this value and type, see the module docs.
pub fn assign(value: &Value, column: &Column) -> Result<Value, PgError> {
    let ty = column.ty;
    let out = match value {
        Value::Null => return Ok(Value::Null),
        Value::Text(s) => input(s, ty)?,
        Value::Int(i) => from_int(*i, ty)?,
        Value::Float(f) => from_float(*f, ty)?,
        Value::Bool(b) => match ty {
            ColumnType::Boolean => Some(Value::Bool(*b)),
            _ => textual(ty, || b.to_string()),
        },
        Value::Json(j) => match ty {
            ColumnType::Json => Some(Value::Json(j.clone())),
            ColumnType::Jsonb => Some(Value::Json(jsonb_checked(j)?)),
            _ => textual(ty, || format_json(j)),
        },
        Value::Date(d) => match ty {
            ColumnType::Date => Some(Value::Date(*d)),
            ColumnType::TimestampTz => Some(Value::TimestampTz(TimestampTz(
                i64::from(d.0) * MICROS_PER_DAY,
            ))),
            _ => textual(ty, || datetime::format_date(*d)),
        },
        Value::TimestampTz(t) => from_timestamptz(*t, ty),
        Value::TimeTz(t) => match ty {
            ColumnType::TimeTz => Some(Value::TimeTz(*t)),
            _ => textual(ty, || datetime::format_timetz(*t)),
        },
    };
    let Some(out) = out else {
        return Err(mismatch(column, value));
    };
    fit_length(out, ty)
}

/// Whether PostgreSQL raises `assign`'s error `e` for `value` at parse analysis, before
/// planning: an untyped literal goes through the column type's input function there
/// (`coerce_type` on an `unknown` constant), and a missing assignment cast (`42804`) is
/// found there. Everything else — a typed value's cast (`int8` → `int4` range, `float8` →
/// integer rounding) and the `varchar(n)` length coercion, also of a literal — is a function
/// call on a constant that the planner folds (`eval_const_expressions`), so it fails later.
/// So a statement's parse-time errors, over all its rows, come before any plan-time one:
/// `VALUES (1::int8 /* into int2: 40000 */), ('x' /* into int */)` fails on `'x'` (`22P02`).
pub fn fails_at_parse(value: &Value, e: &PgError) -> bool {
    e.code == SqlState::DatatypeMismatch
        || (matches!(value, Value::Text(_)) && e.code != SqlState::StringDataRightTruncation)
}

/// A `WHERE key_column = value` comparison's right side in the key column's type, or
/// `Ok(None)` when no value of the column can equal it. An untyped literal goes through the
/// column's input function (its errors are the statement's), but without the `varchar(n)`
/// length coercion: the comparison is `text = text`, so a longer text equals nothing. A
/// typed number compares across types (`int2 = int8`, `int4 = float8`) without a cast to the
/// column's type: one out of the column's range, a fraction or NaN equals nothing.
///
/// # Errors
/// As [`assign`] for an untyped literal; [`assign`]'s for other values and column types.
pub fn key_operand(value: &Value, column: &Column) -> Result<Option<Value>, PgError> {
    let ty = column.ty;
    let integral = matches!(
        ty,
        ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt
    );
    match value {
        Value::Null => Ok(None),
        Value::Text(s) if matches!(ty, ColumnType::Varchar(_)) => {
            Ok(Some(Value::Text(no_nul(s)?.to_string())))
        }
        Value::Int(i) if integral => {
            let (lo, hi) = int_range(ty);
            Ok((lo..=hi).contains(i).then_some(Value::Int(*i)))
        }
        Value::Float(f) if integral => {
            let (lo, hi) = int_range(ty);
            let fits = f.fract() == 0.0 && *f >= lo as f64 && *f < hi as f64 + 1.0;
            Ok(fits.then_some(Value::Int(*f as i64)))
        }
        _ => assign(value, column).map(Some),
    }
}

fn mismatch(column: &Column, value: &Value) -> PgError {
    PgError::new(
        SqlState::DatatypeMismatch,
        format!(
            "column \"{}\" is of type {} but expression is of type {}",
            column.name,
            column.ty.pg_name(),
            value.param_type_name()
        ),
    )
    .with_hint("You will need to rewrite or cast the expression.")
}

/// The value's output text for a text column (I/O conversion casts to string types are
/// assignment casts), or `None` for any other column type.
fn textual(ty: ColumnType, text: impl FnOnce() -> String) -> Option<Value> {
    matches!(ty, ColumnType::Text | ColumnType::Varchar(_)).then(|| Value::Text(text()))
}

fn from_int(i: i64, ty: ColumnType) -> Result<Option<Value>, PgError> {
    let v = match ty {
        ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => {
            let (lo, hi) = int_range(ty);
            if !(lo..=hi).contains(&i) {
                return Err(out_of_range(ty));
            }
            Value::Int(i)
        }
        ColumnType::Real => Value::Float(f64::from(i as f32)),
        ColumnType::DoublePrecision => Value::Float(i as f64),
        _ => return Ok(textual(ty, || i.to_string())),
    };
    Ok(Some(v))
}

fn from_float(f: f64, ty: ColumnType) -> Result<Option<Value>, PgError> {
    let v = match ty {
        ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => {
            let r = f.round_ties_even();
            let (lo, hi) = int_range(ty);
            // The bounds are exact in f64 except i64::MAX, which rounds up to 2^63.
            if r.is_nan() || r < lo as f64 || r >= hi as f64 + 1.0 {
                return Err(out_of_range(ty));
            }
            Value::Int(r as i64)
        }
        ColumnType::Real => {
            let r = f as f32;
            if r.is_infinite() && f.is_finite() {
                return Err(PgError::new(
                    SqlState::NumericValueOutOfRange,
                    "value out of range: overflow",
                ));
            }
            if r == 0.0 && f != 0.0 {
                return Err(PgError::new(
                    SqlState::NumericValueOutOfRange,
                    "value out of range: underflow",
                ));
            }
            Value::Float(f64::from(r))
        }
        ColumnType::DoublePrecision => Value::Float(f),
        _ => return Ok(textual(ty, || format_float(f))),
    };
    Ok(Some(v))
}

fn from_timestamptz(t: TimestampTz, ty: ColumnType) -> Option<Value> {
    match ty {
        ColumnType::TimestampTz => Some(Value::TimestampTz(t)),
        ColumnType::Date => Some(Value::Date(Date(t.0.div_euclid(MICROS_PER_DAY) as i32))),
        ColumnType::TimeTz => Some(Value::TimeTz(TimeTz {
            micros: t.0.rem_euclid(MICROS_PER_DAY),
            offset_s: 0,
        })),
        _ => textual(ty, || datetime::format_timestamptz(t)),
    }
}

fn int_range(ty: ColumnType) -> (i64, i64) {
    match ty {
        ColumnType::SmallInt => (i64::from(i16::MIN), i64::from(i16::MAX)),
        ColumnType::Integer => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    }
}

fn out_of_range(ty: ColumnType) -> PgError {
    PgError::new(
        SqlState::NumericValueOutOfRange,
        format!("{} out of range", ty.pg_name()),
    )
}

fn bad_syntax(ty: &str, text: &str) -> PgError {
    PgError::new(
        SqlState::InvalidTextRepresentation,
        format!("invalid input syntax for type {ty}: \"{text}\""),
    )
}

/// The column type's input function applied to `text`.
fn input(text: &str, ty: ColumnType) -> Result<Option<Value>, PgError> {
    let v = match ty {
        ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => input_int(text, ty)?,
        ColumnType::Boolean => input_bool(text)?,
        ColumnType::Real | ColumnType::DoublePrecision => input_float(text, ty)?,
        ColumnType::Date => {
            Value::Date(datetime::parse_date(text).map_err(|e| dt_error(e, ty, text))?)
        }
        ColumnType::TimeTz => {
            Value::TimeTz(datetime::parse_timetz(text).map_err(|e| dt_error(e, ty, text))?)
        }
        ColumnType::TimestampTz => Value::TimestampTz(
            datetime::parse_timestamptz(text).map_err(|e| dt_error(e, ty, text))?,
        ),
        ColumnType::Text | ColumnType::Varchar(_) => Value::Text(no_nul(text)?.to_string()),
        ColumnType::Json => Value::Json(input_json(text)?),
        ColumnType::Jsonb => Value::Json(jsonb_checked(&input_json(text)?)?),
    };
    Ok(Some(v))
}

fn no_nul(text: &str) -> Result<&str, PgError> {
    if text.contains('\0') {
        return Err(PgError::new(
            SqlState::CharacterNotInRepertoire,
            "invalid byte sequence for encoding \"UTF8\": 0x00",
        ));
    }
    Ok(text)
}

/// `int2in`/`int4in`/`int8in`: blanks, an optional sign, decimal digits, blanks. (The
/// hexadecimal, octal, binary and `_`-separated forms of PostgreSQL 16 are not modelled.)
fn input_int(text: &str, ty: ColumnType) -> Result<Value, PgError> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_syntax(&ty.pg_name(), text));
    }
    let (lo, hi) = int_range(ty);
    match t.parse::<i64>() {
        Ok(i) if (lo..=hi).contains(&i) => Ok(Value::Int(i)),
        _ => Err(PgError::new(
            SqlState::NumericValueOutOfRange,
            format!("value \"{text}\" is out of range for type {}", ty.pg_name()),
        )),
    }
}

/// `boolin`: `t`, `true`, `y`, `yes`, `on`, `1` and `f`, `false`, `n`, `no`, `off`, `0`,
/// any case, surrounding blanks, and unique prefixes (`tr`, `fa`, `of`).
fn input_bool(text: &str) -> Result<Value, PgError> {
    let t = text.trim().to_ascii_lowercase();
    let is_prefix = |word: &str, min: usize| t.len() >= min && word.starts_with(t.as_str());
    if is_prefix("true", 1) || is_prefix("yes", 1) || t == "on" || t == "1" {
        Ok(Value::Bool(true))
    } else if is_prefix("false", 1) || is_prefix("no", 1) || is_prefix("off", 2) || t == "0" {
        Ok(Value::Bool(false))
    } else {
        Err(bad_syntax("boolean", text))
    }
}

/// `float4in`/`float8in`: decimal or exponent notation, `NaN`, `Infinity`, `inf`; a value
/// that overflows (or underflows to zero) the type is `22003`.
fn input_float(text: &str, ty: ColumnType) -> Result<Value, PgError> {
    let name = ty.pg_name();
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let bare = lower.trim_start_matches(['+', '-']);
    let special = matches!(bare, "nan" | "inf" | "infinity");
    let plain = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
        && t.bytes().any(|b| b.is_ascii_digit());
    let parsed = match (special || plain).then(|| t.parse::<f64>()) {
        Some(Ok(f)) => f,
        _ => return Err(bad_syntax(&name, text)),
    };
    let out_of_range = || {
        PgError::new(
            SqlState::NumericValueOutOfRange,
            format!("\"{text}\" is out of range for type {name}"),
        )
    };
    let mantissa = lower.split('e').next().unwrap_or("");
    let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    let f = if ty == ColumnType::Real {
        f64::from(parsed as f32)
    } else {
        parsed
    };
    if (f.is_infinite() && !special) || (f == 0.0 && nonzero) {
        return Err(out_of_range());
    }
    Ok(Value::Float(f))
}

fn dt_error(e: DateTimeError, ty: ColumnType, text: &str) -> PgError {
    match e {
        DateTimeError::BadFormat => PgError::new(
            SqlState::InvalidDatetimeFormat,
            format!("invalid input syntax for type {}: \"{text}\"", ty.pg_name()),
        ),
        DateTimeError::FieldOverflow => PgError::new(
            SqlState::DatetimeFieldOverflow,
            format!("date/time field value out of range: \"{text}\""),
        ),
        DateTimeError::ZoneOverflow => PgError::new(
            SqlState::InvalidTimeZoneDisplacementValue,
            format!("time zone displacement out of range: \"{text}\""),
        ),
        DateTimeError::OutOfRange => {
            let what = if ty == ColumnType::Date {
                "date"
            } else {
                "timestamp"
            };
            PgError::new(
                SqlState::DatetimeFieldOverflow,
                format!("{what} out of range: \"{text}\""),
            )
        }
    }
}

fn input_json(text: &str) -> Result<serde_json::Value, PgError> {
    serde_json::from_str(text).map_err(|e| {
        let detail = if e.is_eof() {
            "The input string ended unexpectedly.".to_string()
        } else {
            let token = text.split_whitespace().next().unwrap_or("");
            format!("Token \"{token}\" is invalid.")
        };
        PgError::new(
            SqlState::InvalidTextRepresentation,
            "invalid input syntax for type json",
        )
        .with_detail(detail)
    })
}

/// `jsonb` cannot hold `\u0000` in a string (`22P05`).
fn jsonb_checked(j: &serde_json::Value) -> Result<serde_json::Value, PgError> {
    fn has_nul(j: &serde_json::Value) -> bool {
        match j {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(a) => a.iter().any(has_nul),
            serde_json::Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
            _ => false,
        }
    }
    if has_nul(j) {
        return Err(PgError::new(
            SqlState::UntranslatableCharacter,
            "unsupported Unicode escape sequence",
        )
        .with_detail("\\u0000 cannot be converted to text."));
    }
    Ok(j.clone())
}

/// `varchar(n)`: more than `n` characters is `22001` unless the excess is all blanks,
/// which are cut ("Character Types",
/// <https://www.postgresql.org/docs/current/datatype-character.html>).
fn fit_length(value: Value, ty: ColumnType) -> Result<Value, PgError> {
    let (ColumnType::Varchar(Some(n)), Value::Text(s)) = (ty, &value) else {
        return Ok(value);
    };
    let n = n as usize;
    let Some((cut, _)) = s.char_indices().nth(n) else {
        return Ok(value);
    };
    if s[cut..].chars().all(|c| c == ' ') {
        return Ok(Value::Text(s[..cut].to_string()));
    }
    Err(PgError::new(
        SqlState::StringDataRightTruncation,
        format!("value too long for type {}", ty.pg_name()),
    ))
}

/// `float8out` (PostgreSQL 12+): the shortest text that reads back exactly, in exponent
/// form when the exponent is below -4 or at least 15.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if f != 0.0 && !(-4..15).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// `float4out` (PostgreSQL 12+): the shortest text that reads back as the same `f32`, in
/// exponent form when the decimal exponent is below -4 or at least 6 (`FLT_DIG`).
pub fn format_real(f: f64) -> String {
    let f = f as f32;
    if f.is_nan() || f.is_infinite() {
        return format_float(f64::from(f));
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    if f != 0.0 && !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// `jsonb`'s output text: `{"a": 1, "bb": [1, 2]}`, object keys shortest first, then
/// bytewise (jsonb's key order).
pub fn format_json(j: &serde_json::Value) -> String {
    use serde_json::Value as J;
    match j {
        J::Array(a) => {
            let items: Vec<String> = a.iter().map(format_json).collect();
            format!("[{}]", items.join(", "))
        }
        J::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
            let items: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}: {}", J::String(k.clone()), format_json(&o[k])))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// A stored value's text as PostgreSQL prints it for a column of type `ty`: as
/// [`format_value`], except that a `real` prints as an `f32` ([`format_real`]), not as the
/// `f64` it is held in.
pub fn format_column_value(v: &Value, ty: ColumnType) -> String {
    match (v, ty) {
        (Value::Float(f), ColumnType::Real) => format_real(*f),
        _ => format_value(v),
    }
}

/// A value's text as PostgreSQL prints it (`NULL` for null, as psql shows it).
pub fn format_value(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "t" } else { "f" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format_float(*f),
        Value::Text(s) => s.clone(),
        Value::Json(j) => format_json(j),
        Value::Date(d) => datetime::format_date(*d),
        Value::TimeTz(t) => datetime::format_timetz(*t),
        Value::TimestampTz(t) => datetime::format_timestamptz(*t),
    }
}

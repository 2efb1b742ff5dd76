//! The PostgreSQL model's typed statements ([`Statement`]) as SQL text for the simple query
//! protocol, and PostgreSQL's text output read back into the model's [`Value`]s.
//!
//! # Rendering
//! Identifiers are double-quoted (the model takes them as written). [`Value::Text`] is an
//! untyped literal `'…'` (quotes doubled; `standard_conforming_strings` is on, so
//! backslashes are literal), which is what the model says it is; [`Value::Int`] is
//! `'…'::int8`, [`Value::Float`] `'…'::float8`, [`Value::Bool`] `true`/`false`,
//! [`Value::Json`] `'…'::json`, dates and times their text with a cast, NULL `NULL`. The
//! differential test (`harness/tests/real_postgres_diff.rs`) checks that real PostgreSQL 15
//! and the model agree on what these texts do.
//!
//! # Reading back
//! [`parse_text`] reads a column's output text (session `TimeZone = UTC`, `DateStyle = ISO`,
//! `extra_float_digits = 1`, as [`SESSION_SETTINGS`] sets them) by the column's type.

use eosim_sim::postgres::coerce::format_float;
use eosim_sim::postgres::datetime;
use eosim_sim::postgres::{ColumnType, CreateTable, Insert, OnConflict, Statement, Value};

/// What every session runs first, so that output texts are the ones the model prints.
pub const SESSION_SETTINGS: &str = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; \
     SET extra_float_digits = 1; SET client_min_messages = warning";

/// `name` as a quoted identifier (`"a""b"`).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `s` as a string literal (`'it''s'`).
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// A value as SQL: see the module docs for the type each variant carries.
pub fn literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => format!("{}::int8", quote(&i.to_string())),
        Value::Float(f) => format!("{}::float8", quote(&format_float(*f))),
        Value::Text(s) => quote(s),
        Value::Json(j) => format!("{}::json", quote(&j.to_string())),
        Value::Date(d) => format!("{}::date", quote(&datetime::format_date(*d))),
        Value::TimeTz(t) => format!("{}::timetz", quote(&datetime::format_timetz(*t))),
        Value::TimestampTz(t) => {
            format!("{}::timestamptz", quote(&datetime::format_timestamptz(*t)))
        }
    }
}

fn idents(names: &[String]) -> String {
    names
        .iter()
        .map(|n| ident(n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"k1" = v1 AND "k2" = v2`: the row whose primary key (`primary_key`, in key order) is
/// `where_pk`.
pub fn key_condition(primary_key: &[String], where_pk: &[Value]) -> String {
    primary_key
        .iter()
        .zip(where_pk)
        .map(|(k, v)| format!("{} = {}", ident(k), literal(v)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

fn create_sql(c: &CreateTable) -> String {
    let mut parts: Vec<String> = c
        .columns
        .iter()
        .map(|col| {
            let nn = if col.not_null { " NOT NULL" } else { "" };
            format!("{} {}{nn}", ident(&col.name), col.ty.pg_name())
        })
        .collect();
    if !c.primary_key.is_empty() {
        parts.push(format!("PRIMARY KEY ({})", idents(&c.primary_key)));
    }
    let ine = if c.if_not_exists {
        "IF NOT EXISTS "
    } else {
        ""
    };
    format!(
        "CREATE TABLE {ine}{} ({})",
        ident(&c.name),
        parts.join(", ")
    )
}

fn insert_sql(i: &Insert) -> String {
    let mut out = format!("INSERT INTO {}", ident(&i.table));
    if !i.columns.is_empty() {
        out.push_str(&format!(" ({})", idents(&i.columns)));
    }
    let rows: Vec<String> = i
        .rows
        .iter()
        .map(|r| {
            let vals: Vec<String> = r.iter().map(literal).collect();
            format!("({})", vals.join(", "))
        })
        .collect();
    out.push_str(&format!(" VALUES {}", rows.join(", ")));
    match &i.on_conflict {
        OnConflict::None => {}
        OnConflict::DoNothing { conflict_target } => {
            out.push_str(" ON CONFLICT");
            if let Some(t) = conflict_target {
                out.push_str(&format!(" ({})", idents(t)));
            }
            out.push_str(" DO NOTHING");
        }
        OnConflict::DoUpdate {
            conflict_target,
            set,
        } => {
            let sets: Vec<String> = set
                .iter()
                .map(|c| format!("{} = EXCLUDED.{}", ident(c), ident(c)))
                .collect();
            out.push_str(&format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                idents(conflict_target),
                sets.join(", ")
            ));
        }
    }
    out
}

/// The statement as SQL text. `primary_key` is the table's key columns in key order: the
/// `WHERE` of `UPDATE`/`DELETE` and the `ORDER BY` of `SELECT * FROM table ORDER BY pk`
/// (no `ORDER BY` for a table without a key).
pub fn statement_sql(st: &Statement, primary_key: &[String]) -> String {
    match st {
        Statement::CreateTable(c) => create_sql(c),
        Statement::Insert(i) => insert_sql(i),
        Statement::Update {
            table,
            set,
            where_pk,
        } => {
            let sets: Vec<String> = set
                .iter()
                .map(|(c, v)| format!("{} = {}", ident(c), literal(v)))
                .collect();
            format!(
                "UPDATE {} SET {} WHERE {}",
                ident(table),
                sets.join(", "),
                key_condition(primary_key, where_pk)
            )
        }
        Statement::Delete { table, where_pk } => format!(
            "DELETE FROM {} WHERE {}",
            ident(table),
            key_condition(primary_key, where_pk)
        ),
        Statement::Truncate { table } => format!("TRUNCATE {}", ident(table)),
        Statement::Select { table } if primary_key.is_empty() => {
            format!("SELECT * FROM {}", ident(table))
        }
        Statement::Select { table } => format!(
            "SELECT * FROM {} ORDER BY {}",
            ident(table),
            idents(primary_key)
        ),
    }
}

/// The table a statement names.
pub fn table_of(st: &Statement) -> &str {
    match st {
        Statement::CreateTable(c) => &c.name,
        Statement::Insert(i) => &i.table,
        Statement::Update { table, .. }
        | Statement::Delete { table, .. }
        | Statement::Truncate { table }
        | Statement::Select { table } => table,
    }
}

/// A column's output text (`None` = NULL) as the model's value for type `ty`.
///
/// # Errors
/// Text the type's output function cannot have produced, with the type's name.
pub fn parse_text(text: Option<&str>, ty: ColumnType) -> Result<Value, String> {
    let Some(t) = text else {
        return Ok(Value::Null);
    };
    let bad = |e: &dyn std::fmt::Display| format!("{} output {t:?}: {e}", ty.pg_name());
    let value = match ty {
        ColumnType::SmallInt | ColumnType::Integer | ColumnType::BigInt => {
            Value::Int(t.parse().map_err(|e| bad(&e))?)
        }
        ColumnType::Boolean => match t {
            "t" => Value::Bool(true),
            "f" => Value::Bool(false),
            _ => return Err(bad(&"not t or f")),
        },
        ColumnType::Real | ColumnType::DoublePrecision => Value::Float(parse_float(t)?),
        ColumnType::Text | ColumnType::Varchar(_) => Value::Text(t.to_string()),
        ColumnType::Json | ColumnType::Jsonb => {
            Value::Json(serde_json::from_str(t).map_err(|e| bad(&e))?)
        }
        ColumnType::Date => {
            Value::Date(datetime::parse_date(t).map_err(|e| bad(&format!("{e:?}")))?)
        }
        ColumnType::TimeTz => {
            Value::TimeTz(datetime::parse_timetz(t).map_err(|e| bad(&format!("{e:?}")))?)
        }
        ColumnType::TimestampTz => {
            Value::TimestampTz(datetime::parse_timestamptz(t).map_err(|e| bad(&format!("{e:?}")))?)
        }
    };
    Ok(value)
}

fn parse_float(t: &str) -> Result<f64, String> {
    match t {
        "NaN" => Ok(f64::NAN),
        "Infinity" => Ok(f64::INFINITY),
        "-Infinity" => Ok(f64::NEG_INFINITY),
        _ => t.parse().map_err(|e| format!("float output {t:?}: {e}")),
    }
}

/// One row in `COPY ... FROM STDIN` text format: values separated by tabs, NULL as `\N`,
/// backslash, tab, newline and carriage return escaped; each value as its type's input
/// text (the same texts [`literal`] casts).
pub fn copy_text_row(row: &[Value]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|v| match v {
            Value::Null => "\\N".to_string(),
            Value::Bool(b) => if *b { "t" } else { "f" }.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => format_float(*f),
            Value::Text(s) => copy_escape(s),
            Value::Json(j) => copy_escape(&j.to_string()),
            Value::Date(d) => datetime::format_date(*d),
            Value::TimeTz(t) => datetime::format_timetz(*t),
            Value::TimestampTz(t) => datetime::format_timestamptz(*t),
        })
        .collect();
    let mut line = cells.join("\t");
    line.push('\n');
    line
}

fn copy_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::postgres::Column;

    fn upsert() -> Statement {
        Statement::Insert(Insert {
            table: "t1".into(),
            columns: vec!["id".into(), "name".into()],
            rows: vec![vec![Value::Int(1), Value::text("it's")]],
            on_conflict: OnConflict::DoUpdate {
                conflict_target: vec!["id".into()],
                set: vec!["name".into()],
            },
        })
    }

    #[test]
    fn an_upsert_renders_with_its_conflict_clause() {
        assert_eq!(
            statement_sql(&upsert(), &[]),
            "INSERT INTO \"t1\" (\"id\", \"name\") VALUES ('1'::int8, 'it''s') \
             ON CONFLICT (\"id\") DO UPDATE SET \"name\" = EXCLUDED.\"name\""
        );
    }

    #[test]
    fn update_delete_and_select_use_the_primary_key() {
        let pk = vec!["a".to_string(), "b\"c".to_string()];
        let delete = Statement::Delete {
            table: "t".into(),
            where_pk: vec![Value::Int(1), Value::text("x")],
        };
        assert_eq!(
            statement_sql(&delete, &pk),
            "DELETE FROM \"t\" WHERE \"a\" = '1'::int8 AND \"b\"\"c\" = 'x'"
        );
        let select = Statement::Select { table: "t".into() };
        assert_eq!(
            statement_sql(&select, &pk),
            "SELECT * FROM \"t\" ORDER BY \"a\", \"b\"\"c\""
        );
        assert_eq!(statement_sql(&select, &[]), "SELECT * FROM \"t\"");
    }

    #[test]
    fn create_table_names_types_as_postgres_prints_them() {
        let create = Statement::CreateTable(CreateTable {
            name: "t".into(),
            columns: vec![
                Column::new("id", ColumnType::BigInt),
                Column::new("v", ColumnType::Varchar(Some(5))).not_null(),
            ],
            primary_key: vec!["id".into()],
            if_not_exists: true,
        });
        assert_eq!(
            statement_sql(&create, &[]),
            "CREATE TABLE IF NOT EXISTS \"t\" (\"id\" bigint, \"v\" character varying(5) \
             NOT NULL, PRIMARY KEY (\"id\"))"
        );
    }

    #[test]
    fn output_text_reads_back_by_column_type() {
        assert_eq!(parse_text(None, ColumnType::BigInt), Ok(Value::Null));
        assert_eq!(
            parse_text(Some("-3"), ColumnType::SmallInt),
            Ok(Value::Int(-3))
        );
        assert_eq!(
            parse_text(Some("t"), ColumnType::Boolean),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            parse_text(Some("NaN"), ColumnType::Real),
            Ok(Value::Float(f64::NAN))
        );
        assert_eq!(
            parse_text(Some("{\"a\": 1}"), ColumnType::Jsonb),
            Ok(Value::Json(serde_json::json!({"a": 1})))
        );
        let ts = parse_text(Some("2024-01-31 12:30:00+00"), ColumnType::TimestampTz).unwrap();
        assert_eq!(
            ts,
            Value::TimestampTz(datetime::parse_timestamptz("2024-01-31 12:30:00Z").unwrap())
        );
        assert!(parse_text(Some("x"), ColumnType::Integer).is_err());
    }

    #[test]
    fn copy_rows_escape_and_mark_null() {
        let row = vec![
            Value::Int(7),
            Value::Null,
            Value::text("a\tb\\c\nd"),
            Value::Bool(false),
        ];
        assert_eq!(copy_text_row(&row), "7\t\\N\ta\\tb\\\\c\\nd\tf\n");
    }
}

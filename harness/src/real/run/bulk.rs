//! Issue 6's comparison of a sink with a bulk load, in the same run: after the pipeline,
//! the rows the change events carried (each `c`/`u`/`r` event's `after`, and each
//! flattened row, projected onto `col.names`) are loaded into two fresh tables of the
//! same columns and no primary key (the versions of one key are separate rows there), once
//! by `COPY ... FROM STDIN` (tokio-postgres `copy_in`, text format) and once by one
//! multi-row `INSERT`. Each load's rows/s is its rows over its wall time; the sink's rate
//! beside it is the rows its `put`s wrote over the time spent in them
//! ([`Measured::sink_put_rows_per_s`](crate::report::Measured::sink_put_rows_per_s)).

use super::cluster::LogRecord;
use super::pipelines::{block_on, PgTarget};
use crate::client::postgres::PostgresClient;
use crate::client::real::RealPostgres;
use crate::connect::debezium::{parse_change, Change, JsonRow};
use crate::report::BulkLoad;
use eosim_sim::kafka::TopicPartition;
use eosim_sim::postgres::{Column, CreateTable, Insert, OnConflict, Row, Statement, Value};
use std::collections::BTreeMap;
use std::time::Instant;

/// The rows the events of `log` carry, in partition then offset order, projected onto
/// `columns`.
pub fn event_rows(log: &BTreeMap<TopicPartition, Vec<LogRecord>>, columns: &[String]) -> Vec<Row> {
    let json = |t: &Option<String>| t.as_deref().and_then(|t| serde_json::from_str(t).ok());
    let mut rows = Vec::new();
    for r in log.values().flatten() {
        let (key, value) = (json(&r.key), json(&r.value));
        let after: Option<JsonRow> = match parse_change(key.as_ref(), value.as_ref()) {
            Ok(
                Change::Create { after } | Change::Read { after } | Change::Update { after, .. },
            ) => Some(after),
            Ok(Change::Row { row }) => Some(row),
            _ => None,
        };
        if let Some(after) = after {
            let row = columns
                .iter()
                .map(|c| after.get(c).map_or(Value::Null, Value::from_json))
                .collect();
            rows.push(row);
        }
    }
    rows
}

fn fresh_table(name: &str, columns: Vec<Column>) -> Statement {
    Statement::CreateTable(CreateTable {
        name: name.to_string(),
        columns,
        primary_key: Vec::new(),
        if_not_exists: false,
    })
}

fn load(method: &str, rows: u64, started: Instant) -> BulkLoad {
    timed_load("postgres", method, rows, started.elapsed().as_secs_f64())
}

/// A bulk load of `rows` into `target` by `method` that took `time_s` s (its `sink_ratio`
/// is filled in once the sink's rate is known).
pub fn timed_load(target: &str, method: &str, rows: u64, time_s: f64) -> BulkLoad {
    BulkLoad {
        target: target.into(),
        method: method.into(),
        rows,
        time_s,
        rows_per_s: if time_s > 0.0 {
            rows as f64 / time_s
        } else {
            0.0
        },
        sink_ratio: 0.0,
    }
}

async fn run_loads(
    client: &mut RealPostgres,
    table: &str,
    columns: Vec<Column>,
    rows: Vec<Row>,
) -> Result<Vec<BulkLoad>, String> {
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let (copy_table, insert_table) = (format!("{table}_bulk_copy"), format!("{table}_bulk_insert"));
    for t in [&copy_table, &insert_table] {
        let create = fresh_table(t, columns.clone());
        client
            .execute(create)
            .await
            .map_err(|e| format!("{t}: {e}"))?;
    }
    let started = Instant::now();
    let copied = client
        .copy_in(&copy_table, &names, &rows)
        .await
        .map_err(|e| format!("COPY into {copy_table}: {e}"))?;
    let copy = load("COPY FROM STDIN", copied, started);
    let insert = Statement::Insert(Insert {
        table: insert_table.clone(),
        columns: names,
        rows,
        on_conflict: OnConflict::None,
    });
    let started = Instant::now();
    let inserted = client
        .execute(insert)
        .await
        .map_err(|e| format!("INSERT into {insert_table}: {e}"))?;
    let n = match inserted {
        eosim_sim::postgres::Reply::Affected(n) => n,
        eosim_sim::postgres::Reply::Rows { rows, .. } => rows.len() as u64,
    };
    Ok(vec![copy, load("one multi-row INSERT", n, started)])
}

/// The bulk loads of the rows of `log` into fresh tables next to the sink's (their
/// `sink_ratio` is filled in once the sink's rate is known); `Err` says why there are none
/// (no `col.types` to create the tables from, no rows, a failed load).
///
/// # Errors
/// As above, with the statement that failed.
pub fn bulk_loads(
    t: &PgTarget,
    log: &BTreeMap<TopicPartition, Vec<LogRecord>>,
) -> Result<Vec<BulkLoad>, String> {
    let s = &t.sink;
    if s.col_types.is_empty() {
        return Err("bulk load: the connector has no col.types to create the tables from".into());
    }
    let columns: Vec<Column> = s
        .col_names
        .iter()
        .zip(&s.col_types)
        .map(|(n, ty)| Column::new(n.clone(), *ty))
        .collect();
    let rows = event_rows(log, &s.col_names);
    if rows.is_empty() {
        return Err("bulk load: the events carry no rows".into());
    }
    let mut client = t.admin()?;
    block_on(run_loads(&mut client, &s.table, columns, rows))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, value: &str) -> LogRecord {
        LogRecord {
            offset,
            key: Some(r#"{"id":1}"#.into()),
            value: Some(value.into()),
            headers: Vec::new(),
        }
    }

    #[test]
    fn creates_and_updates_carry_rows_and_deletes_do_not() {
        let tp = TopicPartition::new("t", 0);
        let log = BTreeMap::from([(
            tp,
            vec![
                rec(0, r#"{"op":"c","after":{"id":1,"v":0,"name":"a"}}"#),
                rec(1, r#"{"op":"u","before":{"id":1},"after":{"id":1,"v":1}}"#),
                rec(2, r#"{"op":"d","before":{"id":1,"v":1}}"#),
            ],
        )]);
        let columns = vec!["id".to_string(), "name".to_string()];
        assert_eq!(
            event_rows(&log, &columns),
            vec![
                vec![Value::Int(1), Value::text("a")],
                vec![Value::Int(1), Value::Null]
            ]
        );
    }
}

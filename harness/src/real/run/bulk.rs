//! Issue 6's comparison of a sink with a bulk load, in the same run: after the pipeline,
//! the rows the change events carried (each `c`/`u`/`r` event's `after`, and each
//! flattened row, projected onto `col.names`) are loaded into two fresh tables of the
//! same columns and no primary key by `COPY` and by one multi-row `INSERT`
//! ([`pg_bulk_loads`]). Each load's rows/s is its rows over its wall time; the sink's rate
//! beside it is the rows its `put`s wrote over the time spent in them
//! ([`Measured::sink_put_rows_per_s`](crate::report::Measured::sink_put_rows_per_s)).

use super::blocking::block_on;
use super::cluster::LogRecord;
use super::postgres_target::PgTarget;
use crate::connect::debezium::{parse_change, Change, JsonRow};
use crate::real::bulk::jdbc::pg_bulk_loads;
use crate::report::BulkLoad;
use eosim_sim::kafka::TopicPartition;
use eosim_sim::postgres::{Column, Row, Value};
use std::collections::BTreeMap;

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
    block_on(pg_bulk_loads(&mut client, &s.table, columns, rows))?
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

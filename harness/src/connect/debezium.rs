//! Debezium change events as sinks and checkers read them: the envelope (`before`,
//! `after`, `op`, `source`, `transaction`) and flattened records (the row itself, after
//! `ExtractNewRecordState`), with tombstones.
//!
//! A value that is a JSON object with an `op` field and a `before` or `after` field is an
//! envelope; any other object is a flattened row; a null value is a tombstone. Ops
//! (Debezium's `Envelope.Operation`): `c` create, `u` update, `d` delete, `r` read
//! (snapshot), `t` truncate; anything else is an error the sink reports as an errant
//! record. `source` and `transaction` are carried but not interpreted.

use serde_json::{Map, Value};

/// A row as a JSON object, column → value.
pub type JsonRow = Map<String, Value>;

/// One change event, interpreted.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// `op = c`: insert `after`.
    Create {
        /// The new row.
        after: JsonRow,
    },
    /// `op = r`: a snapshot read of `after` (applied as an upsert).
    Read {
        /// The row read.
        after: JsonRow,
    },
    /// `op = u`: the row found by `before`'s key becomes `after` (the key may change).
    Update {
        /// The old row (at least its key); `None` when the event carries no `before`.
        before: Option<JsonRow>,
        /// The new row.
        after: JsonRow,
    },
    /// `op = d`: delete the row found by `before`'s key.
    Delete {
        /// The deleted row (at least its key).
        before: JsonRow,
    },
    /// `op = t`: truncate the table.
    Truncate,
    /// A flattened record: the row itself (an upsert).
    Row {
        /// The row.
        row: JsonRow,
    },
    /// A null value: delete the row of the record's key (when deletes are enabled).
    Tombstone {
        /// The record key, if any.
        key: Option<Value>,
    },
}

/// Interprets a converted record.
///
/// # Errors
/// A text naming what is wrong: an unknown `op`, a missing `after` or `before`, a value
/// that is not an object.
pub fn parse_change(key: Option<&Value>, value: Option<&Value>) -> Result<Change, String> {
    let Some(value) = value else {
        return Ok(Change::Tombstone { key: key.cloned() });
    };
    let Value::Object(map) = value else {
        return Err(format!(
            "expected a JSON object as the record value, found {value}"
        ));
    };
    let is_envelope =
        map.contains_key("op") && (map.contains_key("before") || map.contains_key("after"));
    if !is_envelope {
        return Ok(Change::Row { row: map.clone() });
    }
    let row = |field: &str| -> Option<JsonRow> {
        match map.get(field) {
            Some(Value::Object(r)) => Some(r.clone()),
            _ => None,
        }
    };
    let need = |field: &str, op: &str| {
        row(field).ok_or_else(|| format!("op '{op}' needs an object in `{field}`"))
    };
    let op = map.get("op").and_then(Value::as_str).unwrap_or_default();
    match op {
        "c" => Ok(Change::Create {
            after: need("after", op)?,
        }),
        "r" => Ok(Change::Read {
            after: need("after", op)?,
        }),
        "u" => Ok(Change::Update {
            before: row("before"),
            after: need("after", op)?,
        }),
        "d" => Ok(Change::Delete {
            before: need("before", op)?,
        }),
        "t" => Ok(Change::Truncate),
        other => Err(format!(
            "unknown op '{other}' (expected one of c, u, d, r, t)"
        )),
    }
}

/// The primary-key value of `row` over `pk_fields` as canonical JSON text (an array of
/// the fields' values); `None` when a field is missing or null.
pub fn key_of(row: &JsonRow, pk_fields: &[String]) -> Option<String> {
    let mut values = Vec::with_capacity(pk_fields.len());
    for f in pk_fields {
        match row.get(f) {
            None | Some(Value::Null) => return None,
            Some(v) => values.push(v.clone()),
        }
    }
    // The bytes `Display` prints, without its fmt machinery (a hot path).
    Some(serde_json::to_string(&Value::Array(values)).expect("JSON values serialize"))
}

/// The row a tombstone's record key names: an object is taken as the key columns; a
/// scalar is the single primary-key column's value.
pub fn key_row(key: &Value, pk_fields: &[String]) -> Option<JsonRow> {
    match key {
        Value::Object(map) => Some(map.clone()),
        Value::Null => None,
        scalar if pk_fields.len() == 1 => {
            let mut map = JsonRow::new();
            map.insert(pk_fields[0].clone(), scalar.clone());
            Some(map)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_update_changes_the_key() {
        let v = json!({"before": {"id":2}, "after": {"id": 1, "name": "44"}, "op": "u",
                       "transaction": null});
        let Ok(Change::Update {
            before: Some(b),
            after,
        }) = parse_change(None, Some(&v))
        else {
            panic!("an update")
        };
        let pk = vec!["id".to_string()];
        assert_eq!(key_of(&b, &pk).as_deref(), Some("[2]"));
        assert_eq!(key_of(&after, &pk).as_deref(), Some("[1]"));
    }

    #[test]
    fn unknown_op_is_an_error_and_flat_rows_are_rows() {
        assert!(parse_change(None, Some(&json!({"op":"x","after":{}}))).is_err());
        let flat = parse_change(None, Some(&json!({"id": 3})));
        assert!(matches!(flat, Ok(Change::Row { .. })));
        assert!(matches!(
            parse_change(None, None),
            Ok(Change::Tombstone { key: None })
        ));
    }
}

//! The change events of the `connect-jdbc` pipeline (P2), built from a scenario's `[cdc]`
//! section: what the simulated producers (`workload::connect_jdbc`) and the real runner's
//! producer process send, in the same order, with the same ids.
//!
//! - Explicit `[cdc] events` first, ids `0..n`, key and value as written.
//! - Then `[cdc.generate]`: Debezium envelopes over `(id bigint, v bigint, name text)` with
//!   keys `{"id":k}`, `k` drawn from `0..keys`: a `c` for an absent key, else a `d` with
//!   probability `delete_probability` or a `u`; `v` is the event id, so every version of
//!   a row is distinct. Draws come from the caller's RNG (madsim's in simulation, a seeded
//!   one in a real run), so the simulation's histories depend only on its seed.
//!
//! Each event's id travels in header [`ID_HEADER`](crate::history::refs::ID_HEADER) (a
//! poison record has no other place for it).
//!
//! Built from the scenario, so it lives here rather than in `connect`: the components
//! below the scenario layer never read a scenario file.

use super::{Scenario, TableSpec};
use madsim::rand::Rng;
use std::collections::BTreeMap;

/// One change event to produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique id.
    pub id: u64,
    /// Key text.
    pub key: Option<String>,
    /// Value text; `None` is a tombstone.
    pub value: Option<String>,
}

/// Builds the event list of `scenario`: explicit events, then generated ones drawn from
/// `rng`.
pub fn build_events<R: Rng>(scenario: &Scenario, rng: &mut R) -> Vec<Event> {
    let mut events: Vec<Event> = scenario
        .cdc
        .events
        .iter()
        .enumerate()
        .map(|(i, e)| Event {
            id: i as u64,
            key: e.key.clone(),
            value: e.value.clone(),
        })
        .collect();
    let Some(g) = &scenario.cdc.generate else {
        return events;
    };
    // Each row's JSON text, by key. The texts are written as serde_json writes the
    // `json!` objects they stand for (keys sorted, no spaces): the generator runs for
    // every seed and for its determinism recheck, and building `Value`s to print them
    // was most of its cost (a test compares the two byte for byte).
    let mut present: BTreeMap<u32, String> = BTreeMap::new();
    let table = serde_json::to_string(&scenario.topic.name).expect("a string serializes");
    for _ in 0..g.events {
        let id = events.len() as u64;
        let k = rng.gen_range(0..g.keys.max(1));
        let row = format!(r#"{{"id":{k},"name":"n{id}","v":{id}}}"#);
        let (op, after) = match present.get(&k) {
            None => ("c", Some(row)),
            Some(_) if rng.gen_bool(g.delete_probability.clamp(0.0, 1.0)) => ("d", None),
            Some(_) => ("u", Some(row)),
        };
        let before = match &after {
            Some(a) => present.insert(k, a.clone()),
            None => present.remove(&k),
        };
        let (after, before) = (
            after.as_deref().unwrap_or("null"),
            before.as_deref().unwrap_or("null"),
        );
        let value = format!(
            concat!(
                r#"{{"after":{after},"before":{before},"op":"{op}","#,
                r#""source":{{"seq":{id},"table":{table}}},"transaction":null}}"#
            ),
            after = after,
            before = before,
            op = op,
            id = id,
            table = table
        );
        events.push(Event {
            id,
            key: Some(format!(r#"{{"id":{k}}}"#)),
            value: Some(value),
        });
    }
    events
}

/// Why `event` is built to be bad input, if it is: `poison: value is not JSON`,
/// `oversized: 612 bytes > max.message.bytes 400`, `poison: name is null (not null)`,
/// `poison: note has 11 characters (varchar(10))`, `schema drift: email is no column of
/// t`. Only explicit `[cdc] events` can be bad (generated ones fit the table by
/// construction), so `None` for an event id past them. The row checked is a Debezium
/// envelope's `after` (else `before`) or the flattened value itself, against
/// `[postgres.table]` when the scenario has one.
pub fn bad_record_reason(scenario: &Scenario, event: &Event) -> Option<String> {
    if event.id as usize >= scenario.cdc.events.len() {
        return None;
    }
    let size =
        event.key.as_ref().map_or(0, String::len) + event.value.as_ref().map_or(0, String::len);
    let limit = scenario.topic.max_message_bytes as usize;
    if size > limit {
        return Some(format!(
            "oversized: {size} bytes > max.message.bytes {limit}"
        ));
    }
    let value: serde_json::Value = match event.value.as_deref().map(serde_json::from_str) {
        None => return None,
        Some(Ok(v)) => v,
        Some(Err(_)) => return Some("poison: value is not JSON".into()),
    };
    let row = match (value.get("op"), value.get("after"), value.get("before")) {
        (Some(_), Some(after), _) if after.is_object() => after,
        (Some(_), _, Some(before)) => before,
        _ => &value,
    };
    let (Some(row), Some(table)) = (row.as_object(), scenario.postgres.table.as_ref()) else {
        return None;
    };
    bad_for_table(row, table)
}

/// What in `row` the table `table` cannot take: an unknown field, a null in a `not null`
/// column, a string longer than its `varchar(n)`.
fn bad_for_table(
    row: &serde_json::Map<String, serde_json::Value>,
    table: &TableSpec,
) -> Option<String> {
    let columns: BTreeMap<&str, &str> = table
        .columns
        .iter()
        .filter_map(|c| c.split_once(' '))
        .collect();
    for (field, v) in row {
        let Some(spec) = columns.get(field.as_str()) else {
            return Some(format!(
                "schema drift: {field} is no column of {}",
                table.name
            ));
        };
        let spec = spec.to_ascii_lowercase();
        if v.is_null() && spec.contains("not null") {
            return Some(format!("poison: {field} is null (not null)"));
        }
        let max = spec
            .strip_prefix("varchar(")
            .and_then(|r| r.split_once(')'))
            .and_then(|(n, _)| n.parse::<usize>().ok());
        let len = v.as_str().map(|t| t.chars().count());
        if let (Some(max), Some(len)) = (max, len) {
            if len <= max {
                continue;
            }
            return Some(format!(
                "poison: {field} has {len} characters (varchar({max}))"
            ));
        }
    }
    None
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;
    use madsim::rand::SeedableRng;
    use std::path::Path;

    fn scenario(text: &str) -> Scenario {
        Scenario::parse(Path::new("t.toml"), text).expect("scenario parses")
    }

    const CDC: &str = r#"
pipeline = "connect-jdbc"
claim = "exactly-once"
[topic]
name = "t"
[connector]
name = "s"
"connector.class" = "io.confluent.connect.jdbc.JdbcSinkConnector"
topics = "t"
"connection.url" = "jdbc:postgresql://h:5432/db"
"pk.fields" = "id"
[cdc]
events = [{ key = '{"id":9}', value = '{"op":"c","after":{"id":9}}' }, {}]
generate = { events = 50, keys = 3, delete_probability = 0.3 }
"#;

    /// The generator as first written, with `serde_json::json!` values: the texts
    /// [`build_events`] writes by hand must be these, byte for byte (the history hashes of
    /// every `connect-jdbc` seed depend on them).
    fn build_events_with_json_values<R: Rng>(scenario: &Scenario, rng: &mut R) -> Vec<Event> {
        let g = scenario.cdc.generate.as_ref().expect("generated events");
        let mut events = Vec::new();
        let mut present: BTreeMap<u32, serde_json::Value> = BTreeMap::new();
        let table = &scenario.topic.name;
        for _ in 0..g.events {
            let id = (scenario.cdc.events.len() + events.len()) as u64;
            let k = rng.gen_range(0..g.keys.max(1));
            let row = serde_json::json!({"id": k, "v": id, "name": format!("n{id}")});
            let before = present.get(&k).cloned();
            let (op, after) = match &before {
                None => ("c", Some(row)),
                Some(_) if rng.gen_bool(g.delete_probability.clamp(0.0, 1.0)) => ("d", None),
                Some(_) => ("u", Some(row)),
            };
            match &after {
                Some(a) => present.insert(k, a.clone()),
                None => present.remove(&k),
            };
            let value = serde_json::json!({
                "before": before, "after": after, "op": op,
                "source": {"table": table, "seq": id}, "transaction": null,
            });
            events.push(Event {
                id,
                key: Some(serde_json::json!({"id": k}).to_string()),
                value: Some(value.to_string()),
            });
        }
        events
    }

    #[test]
    fn generated_events_are_the_json_values_serde_json_writes() {
        // A table name that needs escaping, and every op (deletes at 0.3).
        let mut s = scenario(CDC);
        s.topic.name = "t\"q".into();
        for seed in 0..20 {
            let mut rng = madsim::rand::rngs::StdRng::seed_from_u64(seed);
            let events = build_events(&s, &mut rng);
            let mut rng = madsim::rand::rngs::StdRng::seed_from_u64(seed);
            let reference = build_events_with_json_values(&s, &mut rng);
            assert_eq!(events[2..], reference[..], "seed {seed}");
            let ops: std::collections::BTreeSet<String> = (events[2..].iter())
                .map(|e| {
                    e.value
                        .as_deref()
                        .unwrap()
                        .split("\"op\":\"")
                        .nth(1)
                        .unwrap()[..1]
                        .into()
                })
                .collect();
            assert_eq!(ops.len(), 3, "seed {seed}: {ops:?}");
        }
    }

    #[test]
    fn explicit_events_come_first_then_generated_ones_follow_each_key() {
        let s = scenario(CDC);
        let mut rng = madsim::rand::rngs::StdRng::seed_from_u64(7);
        let events = build_events(&s, &mut rng);
        assert_eq!(events.len(), 52);
        assert_eq!(
            events[1],
            Event {
                id: 1,
                key: None,
                value: None
            }
        );
        let mut present: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for (i, e) in events.iter().enumerate().skip(2) {
            assert_eq!(e.id, i as u64);
            let v: serde_json::Value = serde_json::from_str(e.value.as_deref().unwrap()).unwrap();
            let key = e.key.clone().unwrap();
            // `before` is the key's current row; `c` only for an absent key.
            assert_eq!(v["before"], present.get(&key).cloned().unwrap_or_default());
            assert_eq!(v["op"] == "c", !present.contains_key(&key), "event {i}");
            match v["op"].as_str().unwrap() {
                "d" => present.remove(&key),
                _ => present.insert(key, v["after"].clone()),
            };
        }
        let again = build_events(&s, &mut madsim::rand::rngs::StdRng::seed_from_u64(7));
        assert_eq!(events, again, "the same seed draws the same events");
    }

    fn catalogue(file: &str) -> Scenario {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../scenarios")
            .join(file);
        Scenario::load(&path).expect("scenario parses")
    }

    /// The reasons of the bad events of a catalogue scenario, by event id.
    fn bad(file: &str) -> Vec<(u64, String)> {
        let s = catalogue(file);
        let mut rng = madsim::rand::rngs::StdRng::seed_from_u64(1);
        build_events(&s, &mut rng)
            .iter()
            .filter_map(|e| bad_record_reason(&s, e).map(|r| (e.id, r)))
            .collect()
    }

    #[test]
    fn the_planned_bad_records_of_the_f4_and_drift_scenarios_are_found() {
        let poison = bad("f4-poison-tolerance-none.toml");
        let reasons: Vec<&str> = poison.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "poison: value is not JSON",
                "poison: name is null (not null)",
                "poison: note has 11 characters (varchar(10))"
            ]
        );
        let oversized = bad("f4-oversized-record-rejected.toml");
        assert_eq!(oversized.len(), 1, "{oversized:?}");
        assert!(oversized[0].1.starts_with("oversized: "), "{oversized:?}");
        // The source gains `email` at the third event; every event from there carries it.
        let drift = bad("p2-schema-drift-unknown-column-stalls.toml");
        let ids: Vec<u64> = drift.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [2, 3, 4, 5]);
        assert!(drift
            .iter()
            .all(|(_, r)| r == "schema drift: email is no column of t"));
        assert_eq!(bad("p2-upsert-worker-crash.toml"), []);
    }
}

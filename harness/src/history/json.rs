//! One [`Op`] as a line of `history.jsonl`: exactly the bytes `serde_json::to_writer` writes
//! for it (compact, fields in declaration order, the value's fields flattened after its
//! `f`), written by hand for the ops a long history is made of (sends, polls, writes,
//! commits, logs and transactions) and by serde_json for the rest. The history's hash runs
//! over this text twice per seed (the run and the determinism recheck); serde_json's
//! flattening map and per-fragment calls made it 8 % of a 20,000-record seed's
//! instructions.
//!
//! Each hand-written case names every field of its variant (no `..`), so a field added to
//! one of them fails to compile here until it is written too; the tests compare every case
//! with serde_json.

use super::{Op, OpKind, RecordRef, StreamsInputRecord, StreamsUpdate, Value};
use eosim_sim::kafka::{Offset, TopicPartition};

/// Appends `op` as serde_json writes it (no newline).
pub fn write_op(out: &mut Vec<u8>, op: &Op) {
    let start = out.len();
    if !write_known(out, op) {
        out.truncate(start);
        serde_json::to_writer(&mut *out, op).expect("ops serialize");
    }
}

/// Writes the ops written by hand; `false` (with whatever it wrote) for the others.
fn write_known(out: &mut Vec<u8>, op: &Op) -> bool {
    let f = match &op.value {
        Value::Send { .. } => "send",
        Value::Poll { .. } => "poll",
        Value::Write { .. } => "write",
        Value::SinkState { .. } => "sink-state",
        Value::Commit { .. } => "commit",
        Value::CommittedOffsets { .. } => "committed-offsets",
        Value::LogState { .. } => "log-state",
        Value::CommittedLogState { .. } => "committed-log-state",
        Value::StreamsRepartition { .. } => "streams-repartition",
        Value::StreamsInput { .. } => "streams-input",
        Value::StreamsTable { .. } => "streams-table",
        Value::StreamsOutput { .. } => "streams-output",
        Value::Txn { .. } => "txn",
        _ => return false,
    };
    out.extend_from_slice(b"{\"index\":");
    write_u64(out, op.index as u64);
    out.extend_from_slice(b",\"time_ns\":");
    write_u64(out, op.time_ns);
    out.extend_from_slice(b",\"process\":");
    write_str(out, &op.process);
    out.extend_from_slice(match op.kind {
        OpKind::Invoke => b",\"type\":\"invoke\",\"f\":\"",
        OpKind::Ok => b",\"type\":\"ok\",\"f\":\"",
        OpKind::Fail => b",\"type\":\"fail\",\"f\":\"",
        OpKind::Info => b",\"type\":\"info\",\"f\":\"",
    });
    out.extend_from_slice(f.as_bytes());
    out.push(b'"');
    write_fields(out, &op.value);
    if let Some(error) = &op.error {
        out.extend_from_slice(b",\"error\":");
        write_str(out, error);
    }
    out.push(b'}');
    true
}

/// The fields of a value [`write_known`] writes, each after a comma.
fn write_fields(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Send {
            id,
            key,
            tp,
            offset,
        } => {
            out.extend_from_slice(b",\"id\":");
            write_u64(out, *id);
            out.extend_from_slice(b",\"key\":");
            write_opt_str(out, key.as_deref());
            out.extend_from_slice(b",\"tp\":");
            match tp {
                Some(tp) => write_tp(out, tp),
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(b",\"offset\":");
            match offset {
                Some(offset) => write_i64(out, *offset),
                None => out.extend_from_slice(b"null"),
            }
        }
        Value::Poll { records } => write_refs(out, "records", records),
        Value::Write { rows } | Value::SinkState { rows } => write_refs(out, "rows", rows),
        Value::Commit { offsets } | Value::CommittedOffsets { offsets } => {
            write_offsets(out, offsets);
        }
        Value::LogState { tp, records }
        | Value::CommittedLogState { tp, records }
        | Value::StreamsRepartition { tp, records } => {
            out.extend_from_slice(b",\"tp\":");
            write_tp(out, tp);
            write_refs(out, "records", records);
        }
        Value::StreamsInput { tp, records } | Value::StreamsTable { tp, records } => {
            out.extend_from_slice(b",\"tp\":");
            write_tp(out, tp);
            out.extend_from_slice(b",\"records\":");
            write_list(out, records, write_input);
        }
        Value::StreamsOutput { tp, records } => {
            out.extend_from_slice(b",\"tp\":");
            write_tp(out, tp);
            out.extend_from_slice(b",\"records\":");
            write_list(out, records, write_update);
        }
        Value::Txn {
            id,
            transactional_id,
            sends,
            offsets,
        } => {
            out.extend_from_slice(b",\"id\":");
            write_u64(out, *id);
            out.extend_from_slice(b",\"transactional_id\":");
            write_str(out, transactional_id);
            write_refs(out, "sends", sends);
            write_offsets(out, offsets);
        }
        _ => unreachable!("write_known writes only the values above"),
    }
}

/// `,"<name>":[<record ref>,...]`.
fn write_refs(out: &mut Vec<u8>, name: &str, refs: &[RecordRef]) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
    write_list(out, refs, write_ref);
}

/// `,"offsets":[[<tp>,<offset>],...]`.
fn write_offsets(out: &mut Vec<u8>, offsets: &[(TopicPartition, Offset)]) {
    out.extend_from_slice(b",\"offsets\":");
    write_list(out, offsets, |out, (tp, offset)| {
        out.push(b'[');
        write_tp(out, tp);
        out.push(b',');
        write_i64(out, *offset);
        out.push(b']');
    });
}

/// `[item,...]`.
fn write_list<T>(out: &mut Vec<u8>, items: &[T], write: impl Fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(out, item);
    }
    out.push(b']');
}

fn write_ref(out: &mut Vec<u8>, r: &RecordRef) {
    let RecordRef {
        id,
        key,
        tp,
        offset,
    } = r;
    out.extend_from_slice(b"{\"id\":");
    write_u64(out, *id);
    out.extend_from_slice(b",\"key\":");
    write_opt_str(out, key.as_deref());
    out.extend_from_slice(b",\"tp\":");
    write_tp(out, tp);
    out.extend_from_slice(b",\"offset\":");
    write_i64(out, *offset);
    out.push(b'}');
}

fn write_input(out: &mut Vec<u8>, r: &StreamsInputRecord) {
    let StreamsInputRecord {
        id,
        key,
        timestamp_ms,
        offset,
    } = r;
    out.extend_from_slice(b"{\"id\":");
    write_u64(out, *id);
    out.extend_from_slice(b",\"key\":");
    write_str(out, key);
    out.extend_from_slice(b",\"timestamp_ms\":");
    write_i64(out, *timestamp_ms);
    out.extend_from_slice(b",\"offset\":");
    write_i64(out, *offset);
    out.push(b'}');
}

fn write_update(out: &mut Vec<u8>, u: &StreamsUpdate) {
    let StreamsUpdate {
        key,
        window_start_ms,
        count,
        offset,
    } = u;
    out.extend_from_slice(b"{\"key\":");
    write_str(out, key);
    out.extend_from_slice(b",\"window_start_ms\":");
    write_i64(out, *window_start_ms);
    out.extend_from_slice(b",\"count\":");
    write_u64(out, *count);
    out.extend_from_slice(b",\"offset\":");
    write_i64(out, *offset);
    out.push(b'}');
}

fn write_tp(out: &mut Vec<u8>, tp: &TopicPartition) {
    let TopicPartition { topic, partition } = tp;
    out.extend_from_slice(b"{\"topic\":");
    write_str(out, topic.as_str());
    out.extend_from_slice(b",\"partition\":");
    write_u64(out, u64::from(*partition));
    out.push(b'}');
}

fn write_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON string: copied as it is when nothing in it needs escaping (no `"`, `\` or control
/// character), else escaped by serde_json.
fn write_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        serde_json::to_writer(&mut *out, s).expect("strings serialize");
        return;
    }
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn write_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    write_u64(out, n.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<RecordRef> {
        vec![
            RecordRef {
                id: 0,
                key: None,
                tp: TopicPartition::new("events", 0),
                offset: -1,
            },
            RecordRef {
                id: u64::MAX,
                key: Some("k \"quoted\" \\ ünï\n\u{1}".into()),
                tp: TopicPartition::new("tab\there", u32::MAX),
                offset: i64::MIN,
            },
        ]
    }

    fn offsets() -> Vec<(TopicPartition, Offset)> {
        vec![
            (TopicPartition::new("a", 1), 0),
            (TopicPartition::new("b", 2), i64::MAX),
        ]
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("out", 3)
    }

    /// Every value written by hand, some twice (empty lists, `None`s).
    fn values() -> Vec<Value> {
        let input = StreamsInputRecord {
            id: 7,
            key: "k\"1".into(),
            timestamp_ms: -5,
            offset: 9,
        };
        let update = StreamsUpdate {
            key: "k2".into(),
            window_start_ms: 1_000,
            count: 3,
            offset: -1,
        };
        vec![
            Value::Send {
                id: 1,
                key: None,
                tp: None,
                offset: None,
            },
            Value::Send {
                id: 2,
                key: Some("k1".into()),
                tp: Some(tp()),
                offset: Some(42),
            },
            Value::Poll { records: refs() },
            Value::Poll { records: vec![] },
            Value::Write { rows: refs() },
            Value::SinkState { rows: refs() },
            Value::Commit { offsets: offsets() },
            Value::Commit { offsets: vec![] },
            Value::CommittedOffsets { offsets: offsets() },
            Value::LogState {
                tp: tp(),
                records: refs(),
            },
            Value::CommittedLogState {
                tp: tp(),
                records: refs(),
            },
            Value::StreamsRepartition {
                tp: tp(),
                records: refs(),
            },
            Value::StreamsInput {
                tp: tp(),
                records: vec![input.clone(), input.clone()],
            },
            Value::StreamsTable {
                tp: tp(),
                records: vec![input],
            },
            Value::StreamsOutput {
                tp: tp(),
                records: vec![update.clone(), update],
            },
            Value::Txn {
                id: 3,
                transactional_id: "copier-0".into(),
                sends: refs(),
                offsets: offsets(),
            },
            Value::Drain,
            Value::Fault {
                name: "kill".into(),
                detail: "broker-1".into(),
            },
        ]
    }

    #[test]
    fn every_op_is_written_as_serde_json_writes_it() {
        let kinds = [OpKind::Invoke, OpKind::Ok, OpKind::Fail, OpKind::Info];
        for (i, value) in values().into_iter().enumerate() {
            for (k, kind) in kinds.into_iter().enumerate() {
                for error in [None, Some("timed out \"x\"".to_string())] {
                    let op = Op {
                        index: i * 10 + k,
                        time_ns: u64::MAX - i as u64,
                        process: format!("producer-{k}"),
                        kind,
                        value: value.clone(),
                        error,
                    };
                    let mut out = Vec::new();
                    write_op(&mut out, &op);
                    let expected = serde_json::to_vec(&op).expect("serializes");
                    assert_eq!(
                        String::from_utf8_lossy(&out),
                        String::from_utf8_lossy(&expected)
                    );
                }
            }
        }
    }
}

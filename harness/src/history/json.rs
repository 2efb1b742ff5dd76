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
use std::io::Write;

/// Writes `op` as serde_json writes it (no newline) to `out`, a writer that cannot fail (a
/// `Vec`, a `BufWriter` over a digest): a failed write panics.
pub fn write_op<W: Write>(out: &mut W, op: &Op) {
    match known_tag(&op.value) {
        Some(f) => write_known(out, op, f),
        None => serde_json::to_writer(&mut *out, op).expect("ops serialize"),
    }
}

/// The `f` of the values written by hand.
fn known_tag(value: &Value) -> Option<&'static str> {
    Some(match value {
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
        _ => return None,
    })
}

/// An op whose value has the tag `f` of [`known_tag`].
fn write_known<W: Write>(out: &mut W, op: &Op, f: &str) {
    put(out, b"{\"index\":");
    write_u64(out, op.index as u64);
    put(out, b",\"time_ns\":");
    write_u64(out, op.time_ns);
    put(out, b",\"process\":");
    write_str(out, &op.process);
    put(
        out,
        match op.kind {
            OpKind::Invoke => b",\"type\":\"invoke\",\"f\":\"",
            OpKind::Ok => b",\"type\":\"ok\",\"f\":\"",
            OpKind::Fail => b",\"type\":\"fail\",\"f\":\"",
            OpKind::Info => b",\"type\":\"info\",\"f\":\"",
        },
    );
    put(out, f.as_bytes());
    put(out, b"\"");
    write_fields(out, &op.value);
    if let Some(error) = &op.error {
        put(out, b",\"error\":");
        write_str(out, error);
    }
    put(out, b"}");
}

/// Bytes to a writer that cannot fail.
fn put<W: Write>(out: &mut W, bytes: &[u8]) {
    out.write_all(bytes)
        .expect("the history's writers cannot fail");
}

/// The fields of a value [`write_known`] writes, each after a comma.
fn write_fields<W: Write>(out: &mut W, value: &Value) {
    match value {
        Value::Send {
            id,
            key,
            tp,
            offset,
        } => {
            put(out, b",\"id\":");
            write_u64(out, *id);
            put(out, b",\"key\":");
            write_opt_str(out, key.as_deref());
            put(out, b",\"tp\":");
            match tp {
                Some(tp) => write_tp(out, tp),
                None => put(out, b"null"),
            }
            put(out, b",\"offset\":");
            match offset {
                Some(offset) => write_i64(out, *offset),
                None => put(out, b"null"),
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
            put(out, b",\"tp\":");
            write_tp(out, tp);
            write_refs(out, "records", records);
        }
        Value::StreamsInput { tp, records } | Value::StreamsTable { tp, records } => {
            put(out, b",\"tp\":");
            write_tp(out, tp);
            put(out, b",\"records\":");
            write_list(out, records, write_input);
        }
        Value::StreamsOutput { tp, records } => {
            put(out, b",\"tp\":");
            write_tp(out, tp);
            put(out, b",\"records\":");
            write_list(out, records, write_update);
        }
        Value::Txn {
            id,
            transactional_id,
            sends,
            offsets,
        } => {
            put(out, b",\"id\":");
            write_u64(out, *id);
            put(out, b",\"transactional_id\":");
            write_str(out, transactional_id);
            write_refs(out, "sends", sends);
            write_offsets(out, offsets);
        }
        _ => unreachable!("known_tag names only the values above"),
    }
}

/// `,"<name>":[<record ref>,...]`.
fn write_refs<W: Write>(out: &mut W, name: &str, refs: &[RecordRef]) {
    put(out, b",\"");
    put(out, name.as_bytes());
    put(out, b"\":");
    write_list(out, refs, write_ref);
}

/// `,"offsets":[[<tp>,<offset>],...]`.
fn write_offsets<W: Write>(out: &mut W, offsets: &[(TopicPartition, Offset)]) {
    put(out, b",\"offsets\":");
    write_list(out, offsets, |out, (tp, offset)| {
        put(out, b"[");
        write_tp(out, tp);
        put(out, b",");
        write_i64(out, *offset);
        put(out, b"]");
    });
}

/// `[item,...]`.
fn write_list<W: Write, T>(out: &mut W, items: &[T], write: impl Fn(&mut W, &T)) {
    put(out, b"[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            put(out, b",");
        }
        write(out, item);
    }
    put(out, b"]");
}

fn write_ref<W: Write>(out: &mut W, r: &RecordRef) {
    let RecordRef {
        id,
        key,
        tp,
        offset,
    } = r;
    put(out, b"{\"id\":");
    write_u64(out, *id);
    put(out, b",\"key\":");
    write_opt_str(out, key.as_deref());
    put(out, b",\"tp\":");
    write_tp(out, tp);
    put(out, b",\"offset\":");
    write_i64(out, *offset);
    put(out, b"}");
}

fn write_input<W: Write>(out: &mut W, r: &StreamsInputRecord) {
    let StreamsInputRecord {
        id,
        key,
        timestamp_ms,
        offset,
    } = r;
    put(out, b"{\"id\":");
    write_u64(out, *id);
    put(out, b",\"key\":");
    write_str(out, key);
    put(out, b",\"timestamp_ms\":");
    write_i64(out, *timestamp_ms);
    put(out, b",\"offset\":");
    write_i64(out, *offset);
    put(out, b"}");
}

fn write_update<W: Write>(out: &mut W, u: &StreamsUpdate) {
    let StreamsUpdate {
        key,
        window_start_ms,
        count,
        offset,
    } = u;
    put(out, b"{\"key\":");
    write_str(out, key);
    put(out, b",\"window_start_ms\":");
    write_i64(out, *window_start_ms);
    put(out, b",\"count\":");
    write_u64(out, *count);
    put(out, b",\"offset\":");
    write_i64(out, *offset);
    put(out, b"}");
}

fn write_tp<W: Write>(out: &mut W, tp: &TopicPartition) {
    let TopicPartition { topic, partition } = tp;
    put(out, b"{\"topic\":");
    write_str(out, topic.as_str());
    put(out, b",\"partition\":");
    write_u64(out, u64::from(*partition));
    put(out, b"}");
}

fn write_opt_str<W: Write>(out: &mut W, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => put(out, b"null"),
    }
}

/// A JSON string: copied as it is when nothing in it needs escaping (no `"`, `\` or control
/// character), else escaped by serde_json.
fn write_str<W: Write>(out: &mut W, s: &str) {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        serde_json::to_writer(&mut *out, s).expect("strings serialize");
        return;
    }
    put(out, b"\"");
    put(out, s.as_bytes());
    put(out, b"\"");
}

fn write_u64<W: Write>(out: &mut W, mut n: u64) {
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
    put(out, &digits[i..]);
}

fn write_i64<W: Write>(out: &mut W, n: i64) {
    if n < 0 {
        put(out, b"-");
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

//! Throughput and end-to-end latency of a real run, from its history's wall-clock times
//! and, for sinks that report their puts ([`PutMark`]s), from those (see [`Measured`] for
//! the definitions); the bulk loads of the same run get the sink's ratio to each.

use super::connect_task::PutMark;
use crate::history::{History, OpKind, Value};
use crate::report::{BulkLoad, Measured, StateStoreCost};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// Input records a Streams commit made final, by the commit's time: for each committed
/// next offset of an `ok` `streams-commit`, the acknowledged sends of that partition from
/// the previous commit's offset up to it. A record's effect (its update, its changelog
/// entry) is durable when the commit holding its offset is, so this is Streams' "write".
fn streams_commits(history: &History) -> Vec<(u64, Vec<u64>)> {
    let mut sent: BTreeMap<TopicPartition, BTreeMap<Offset, u64>> = BTreeMap::new();
    let mut committed: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    let mut out = Vec::new();
    for op in &history.ops {
        match (&op.value, op.kind) {
            (
                Value::Send {
                    id,
                    tp: Some(tp),
                    offset: Some(o),
                    ..
                },
                OpKind::Ok,
            ) => {
                sent.entry(tp.clone()).or_default().insert(*o, *id);
            }
            (Value::StreamsCommit { offsets, .. }, OpKind::Ok) => {
                let mut ids = Vec::new();
                for (tp, next) in offsets {
                    let from = committed.get(tp).copied().unwrap_or(0);
                    if let Some(sends) = sent.get(tp).filter(|_| *next > from) {
                        ids.extend(sends.range(from..*next).map(|(_, id)| *id));
                    }
                    committed.insert(tp.clone(), from.max(*next));
                }
                out.push((op.time_ns, ids));
            }
            _ => {}
        }
    }
    out
}

/// When rows became durable in the sink: the history's `write` ops, the sink tasks'
/// successful puts (their end), and Streams commits ([`streams_commits`]).
fn writes(history: &History, marks: &[PutMark]) -> Vec<(u64, Vec<u64>)> {
    let mut out: Vec<(u64, Vec<u64>)> = history
        .ops
        .iter()
        .filter_map(|op| match (&op.value, op.kind) {
            (Value::Write { rows }, OpKind::Ok) => {
                Some((op.time_ns, rows.iter().map(|r| r.id).collect()))
            }
            _ => None,
        })
        .collect();
    out.extend(marks.iter().map(|m| (m.end_ns, m.ids.clone())));
    out.extend(streams_commits(history));
    out.sort();
    out
}

/// The puts' state-store calls and their share of the time spent inside `put`; `None`
/// when the sink made none (the JDBC sink keeps no state store).
fn state_store(marks: &[PutMark]) -> Option<StateStoreCost> {
    let (reads, writes): (u64, u64) = marks
        .iter()
        .fold((0, 0), |(r, w), m| (r + m.state_reads, w + m.state_writes));
    if reads + writes == 0 {
        return None;
    }
    let state_ns: u64 = marks.iter().map(|m| m.state_ns).sum();
    let busy_ns: u64 = marks
        .iter()
        .map(|m| m.end_ns.saturating_sub(m.start_ns))
        .sum();
    Some(StateStoreCost {
        reads,
        writes,
        time_s: state_ns as f64 / 1e9,
        put_share: if busy_ns > 0 {
            state_ns as f64 / busy_ns as f64
        } else {
            0.0
        },
    })
}

/// Rows over the time spent inside `put`, rows/s; `None` without marks.
fn put_rate(marks: &[PutMark]) -> Option<f64> {
    let rows: usize = marks.iter().map(|m| m.ids.len()).sum();
    let busy_ns: u64 = marks
        .iter()
        .map(|m| m.end_ns.saturating_sub(m.start_ns))
        .sum();
    (busy_ns > 0).then(|| rows as f64 / (busy_ns as f64 / 1e9))
}

/// What the history and the put marks say about throughput and latency, with `bulk`
/// loads given their ratio to the sink's put rate; `None` when nothing was acknowledged.
pub fn measure(history: &History, marks: &[PutMark], bulk: &[BulkLoad]) -> Option<Measured> {
    let mut invoked: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut first_send, mut last_ack, mut acked) = (u64::MAX, 0u64, 0u64);
    for op in &history.ops {
        match (&op.value, op.kind) {
            (Value::Send { id, .. }, OpKind::Invoke) => {
                invoked.entry(*id).or_insert(op.time_ns);
                first_send = first_send.min(op.time_ns);
            }
            (Value::Send { .. }, OpKind::Ok) => {
                acked += 1;
                last_ack = last_ack.max(op.time_ns);
            }
            _ => {}
        }
    }
    if acked == 0 {
        return None;
    }
    let (mut written, mut rows, mut last_write) = (BTreeMap::new(), 0u64, 0u64);
    for (t, ids) in writes(history, marks) {
        rows += ids.len() as u64;
        last_write = last_write.max(t);
        for id in ids {
            written.entry(id).or_insert(t);
        }
    }
    let mut latencies_ms: Vec<f64> = written
        .iter()
        .filter_map(|(id, w)| invoked.get(id).map(|i| w.saturating_sub(*i) as f64 / 1e6))
        .collect();
    latencies_ms.sort_by(f64::total_cmp);
    let per_s = |n: u64, end: u64| {
        let span_s = end.saturating_sub(first_send) as f64 / 1e9;
        if span_s > 0.0 {
            n as f64 / span_s
        } else {
            0.0
        }
    };
    let sink_put_rows_per_s = put_rate(marks);
    let bulk_loads = bulk
        .iter()
        .map(|b| BulkLoad {
            sink_ratio: match sink_put_rows_per_s {
                Some(sink) if b.rows_per_s > 0.0 => sink / b.rows_per_s,
                _ => 0.0,
            },
            ..b.clone()
        })
        .collect();
    Some(Measured {
        records_per_s: per_s(acked, last_ack),
        rows_per_s: per_s(rows, last_write),
        latency_ms_p50: percentile(&latencies_ms, 50.0),
        latency_ms_p95: percentile(&latencies_ms, 95.0),
        latency_ms_p99: percentile(&latencies_ms, 99.0),
        records_acked: acked,
        rows_written: rows,
        sink_put_rows_per_s,
        state_store: state_store(marks),
        bulk_loads,
    })
}

/// Nearest-rank percentile of sorted values; 0 when there are none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A send of `id` without key or placement.
    fn send(id: u64) -> Value {
        Value::Send {
            id,
            key: None,
            tp: None,
            offset: None,
        }
    }
    use crate::history::RecordRef;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[7.0], 95.0), 7.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn latency_runs_from_send_invoke_to_first_sink_write() {
        let mut h = History::default();
        let tp = TopicPartition::new("events", 0);
        let row = |id| RecordRef {
            id,
            key: None,
            tp: tp.clone(),
            offset: id as i64,
        };
        h.push(0, "producer-0", OpKind::Invoke, send(0), None);
        h.push(1_000_000, "producer-0", OpKind::Ok, send(0), None);
        h.push(1_000_000, "producer-0", OpKind::Invoke, send(1), None);
        h.push(2_000_000, "producer-0", OpKind::Ok, send(1), None);
        h.push(
            4_000_000,
            "consumer-0",
            OpKind::Ok,
            Value::Write {
                rows: vec![row(0), row(1)],
            },
            None,
        );
        h.push(
            9_000_000,
            "consumer-1",
            OpKind::Ok,
            Value::Write { rows: vec![row(1)] },
            None,
        );
        let m = measure(&h, &[], &[]).expect("measured");
        assert_eq!(m.records_acked, 2);
        assert_eq!(m.rows_written, 3);
        assert_eq!(m.latency_ms_p50, 3.0);
        assert_eq!(m.latency_ms_p99, 4.0);
        assert_eq!(m.records_per_s, 1_000.0);
    }

    #[test]
    fn put_marks_count_as_writes_and_give_the_sinks_rate_against_bulk_loads() {
        let mut h = History::default();
        for id in 0..4u64 {
            h.push(id * 1_000_000, "producer-0", OpKind::Invoke, send(id), None);
            h.push(id * 1_000_000 + 1, "producer-0", OpKind::Ok, send(id), None);
        }
        let marks = [
            PutMark {
                start_ns: 5_000_000,
                end_ns: 6_000_000,
                ids: vec![0, 1],
                ..PutMark::default()
            },
            PutMark {
                start_ns: 7_000_000,
                end_ns: 8_000_000,
                ids: vec![2, 3],
                ..PutMark::default()
            },
        ];
        let copy = BulkLoad {
            target: "postgres".into(),
            method: "COPY FROM STDIN".into(),
            rows: 4,
            time_s: 0.0001,
            rows_per_s: 40_000.0,
            sink_ratio: 0.0,
        };
        let m = measure(&h, &marks, &[copy]).expect("measured");
        assert_eq!(m.rows_written, 4);
        // 4 rows in 2 ms of put: 2000 rows/s, a twentieth of the copy's 40,000.
        assert_eq!(m.sink_put_rows_per_s, Some(2_000.0));
        assert!((m.bulk_loads[0].sink_ratio - 0.05).abs() < 1e-9);
        // Latency of id 0: invoked at 0, written at 6 ms; of id 3: 3 ms to 8 ms.
        assert_eq!(m.latency_ms_p50, 5.0);
        assert_eq!(m.latency_ms_p99, 6.0);
        // A sink without a state store reports none.
        assert_eq!(m.state_store, None);
    }

    #[test]
    fn state_store_calls_are_summed_apart_with_their_share_of_put_time() {
        let mut h = History::default();
        h.push(0, "producer-0", OpKind::Invoke, send(0), None);
        h.push(1, "producer-0", OpKind::Ok, send(0), None);
        let mark = |start_ns, reads, writes, state_ns| PutMark {
            start_ns,
            end_ns: start_ns + 4_000_000,
            ids: vec![0],
            state_reads: reads,
            state_writes: writes,
            state_ns,
        };
        let marks = [mark(0, 1, 2, 3_000_000), mark(10_000_000, 1, 2, 1_000_000)];
        let cost = measure(&h, &marks, &[]).expect("measured").state_store;
        // 4 ms of 8 ms of put time went to 2 reads and 4 writes.
        let expected = StateStoreCost {
            reads: 2,
            writes: 4,
            time_s: 0.004,
            put_share: 0.5,
        };
        assert_eq!(cost, Some(expected));
    }

    #[test]
    fn a_streams_commit_makes_the_input_below_its_offsets_final() {
        let mut h = History::default();
        let tp = TopicPartition::new("input", 0);
        let send = |id: u64, at: Option<i64>| Value::Send {
            id,
            key: None,
            tp: at.map(|_| tp.clone()),
            offset: at,
        };
        for id in 0..3u64 {
            let t = id * 1_000_000;
            h.push(t, "producer-0", OpKind::Invoke, send(id, None), None);
            h.push(t, "producer-0", OpKind::Ok, send(id, Some(id as i64)), None);
        }
        let commit = |next: i64| Value::StreamsCommit {
            guarantee: "exactly_once_v2".into(),
            records: 2,
            offsets: vec![(tp.clone(), next)],
        };
        h.push(10_000_000, "streams-0", OpKind::Invoke, commit(2), None);
        h.push(12_000_000, "streams-0", OpKind::Ok, commit(2), None);
        h.push(20_000_000, "streams-1", OpKind::Ok, commit(3), None);
        let commits = streams_commits(&h);
        assert_eq!(
            commits,
            vec![(12_000_000, vec![0, 1]), (20_000_000, vec![2])]
        );
        let m = measure(&h, &[], &[]).expect("measured");
        assert_eq!(m.rows_written, 3);
        // Latencies 12, 11 and 18 ms (sent at 0, 1 and 2 ms; final at 12, 12 and 20 ms).
        assert_eq!((m.latency_ms_p50, m.latency_ms_p99), (12.0, 18.0));
    }
}

//! Throughput and end-to-end latency of a real run, from its history's wall-clock times
//! (see [`Measured`] for the definitions).

use crate::history::{History, OpKind, Value};
use crate::report::Measured;
use std::collections::BTreeMap;

/// What the history says about throughput and latency; `None` when nothing was
/// acknowledged.
pub fn measure(history: &History) -> Option<Measured> {
    let mut invoked: BTreeMap<u64, u64> = BTreeMap::new();
    let mut written: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut first_send, mut last_ack, mut last_write) = (u64::MAX, 0u64, 0u64);
    let (mut acked, mut rows) = (0u64, 0u64);
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
            (Value::Write { rows: r }, OpKind::Ok) => {
                rows += r.len() as u64;
                last_write = last_write.max(op.time_ns);
                for row in r {
                    written.entry(row.id).or_insert(op.time_ns);
                }
            }
            _ => {}
        }
    }
    if acked == 0 {
        return None;
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
    Some(Measured {
        records_per_s: per_s(acked, last_ack),
        rows_per_s: per_s(rows, last_write),
        latency_ms_p50: percentile(&latencies_ms, 50.0),
        latency_ms_p95: percentile(&latencies_ms, 95.0),
        latency_ms_p99: percentile(&latencies_ms, 99.0),
        records_acked: acked,
        rows_written: rows,
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
    use crate::history::RecordRef;
    use eosim_sim::kafka::TopicPartition;

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
        let send = |id| Value::Send {
            id,
            key: None,
            tp: None,
            offset: None,
        };
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
        let m = measure(&h).expect("measured");
        assert_eq!(m.records_acked, 2);
        assert_eq!(m.rows_written, 3);
        assert_eq!(m.latency_ms_p50, 3.0);
        assert_eq!(m.latency_ms_p99, 4.0);
        assert_eq!(m.records_per_s, 1_000.0);
    }
}

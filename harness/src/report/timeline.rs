//! What a counterexample's plots show, computed from its history (pure data, no drawing):
//! the fault windows and instantaneous faults, the fault effects, and per time bucket the
//! throughput, a consumer-lag proxy and the end-to-end latency.
//!
//! # Fault windows
//! As Jepsen's plots shade nemesis intervals, a fault that lasts is a band from the nemesis
//! op that started it to the one that undid it ([`eosim_sim::nemesis::Fault`] and the
//! runner's `record_fault` names): `kill target=[X]` until `restart target=[X]`, `pause`
//! until `resume` of the same target, `partition`, `clog` and `messages` until the next
//! `heal`, `clock-jump` until `clock-reset` or the next jump of the same target. A window
//! still open at the end of the history ends there ([`FaultBand::closed`] false). Other
//! nemesis ops (`task-crash`, a `kill-leader` that found no leader, a component's fault
//! point) are instants; recoveries with nothing open draw nothing.
//!
//! # Series
//! Times are simulated seconds since the run started (`Op::time_ns` / 1e9); buckets are
//! [`bucket_width_s`] wide and start at 0.
//! - throughput: `ok` completions per second of each operation (`f`) in the bucket; the
//!   nemesis, fault effects and the final reads after the drain (process `final`) are not
//!   counted.
//! - lag (consumer-lag proxy): at each bucket's end, the record ids whose send was
//!   acknowledged and that have not reached the sink yet. Kafka's own lag (high watermark
//!   minus committed offset) is not in the history; this count is what a lag would show
//!   end to end, and a lost record keeps it above 0 for good. "Reached the sink" is the
//!   first `ok` op holding the id among the sink's writes (`write`), else the transactional
//!   copier's committed transactions (`txn`), else the consumers' polls (`poll`): the first
//!   of these families the history has ([`Series::delivered_by`]).
//! - latency: per id, from its first send's invoke to its delivery, ms (the real tier's
//!   `Measured` latency, on simulated time); per bucket of delivery time, the median
//!   (nearest rank) and the maximum.

use crate::history::text::value_name;
use crate::history::{History, Op, OpKind, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Buckets a series aims at; [`bucket_width_s`] rounds the width up to 1, 2 or 5 × 10ⁿ.
pub const BUCKETS_TARGET: f64 = 100.0;

/// Operations (`f`) plotted as throughput lines, the most frequent first.
pub const THROUGHPUT_LINES_MAX: usize = 5;

/// A fault that lasted: shaded from `start_s` to `end_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultBand {
    /// The fault's name (`kill`, `partition`, `messages`): its lane in the timeline.
    pub name: String,
    /// The nemesis op's detail (`target=[broker-2] mode=process-kill`).
    pub detail: String,
    /// When it started, s.
    pub start_s: f64,
    /// When it was undone (or the history ended), s.
    pub end_s: f64,
    /// Whether a recovery closed it; false when it lasted to the end of the history.
    pub closed: bool,
}

/// A point in time on one lane: an instantaneous fault or one fault effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Its lane: the fault's name or the effect's kind (`messages.duplicate`).
    pub lane: String,
    /// When, s.
    pub time_s: f64,
}

/// The nemesis's side of a history on the time axis.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The history's last op time, s (the end of every axis).
    pub end_s: f64,
    /// Faults that lasted, in start order.
    pub bands: Vec<FaultBand>,
    /// Nemesis ops that neither opened nor closed a window.
    pub instants: Vec<Tick>,
    /// One tick per fault effect (`effect` ops), in time order.
    pub effects: Vec<Tick>,
}

/// The history's client side, bucketed on the same time axis as its [`Timeline`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Bucket width, s.
    pub bucket_s: f64,
    /// Per operation (`send`, `write`...), `ok` ops/s in each bucket, the
    /// [`THROUGHPUT_LINES_MAX`] most frequent operations.
    pub throughput: BTreeMap<String, Vec<f64>>,
    /// Acknowledged records not yet in the sink at the end of each bucket.
    pub lag: Vec<u64>,
    /// The op family that counted as reaching the sink (`write`, `txn`, `poll`), `None`
    /// when the history has none (the lag is then every acknowledged record).
    pub delivered_by: Option<&'static str>,
    /// Per bucket with deliveries, (bucket index, median ms, maximum ms).
    pub latency_ms: Vec<(usize, f64, f64)>,
}

impl Series {
    /// The middle of bucket `i`, s: where its point is drawn.
    pub fn bucket_mid_s(&self, i: usize) -> f64 {
        (i as f64 + 0.5) * self.bucket_s
    }
}

/// Simulated seconds of a nanosecond time.
fn seconds(time_ns: u64) -> f64 {
    time_ns as f64 / 1e9
}

/// The bucket width for an axis `end_s` long: `end_s /` [`BUCKETS_TARGET`] rounded up to
/// 1, 2 or 5 × 10ⁿ s, at least 1 ms.
pub fn bucket_width_s(end_s: f64) -> f64 {
    let raw = (end_s / BUCKETS_TARGET).max(0.001);
    let decade = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|w| *w >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * decade)
}

/// The `target=[…]` part of a nemesis detail, or the whole detail when it has none.
fn target_of(detail: &str) -> &str {
    detail
        .split_whitespace()
        .find(|w| w.starts_with("target=["))
        .unwrap_or(detail)
}

/// The fault windows, instants and effects of `history` ([module docs](self)).
pub fn timeline(history: &History) -> Timeline {
    let end_s = history.ops.last().map_or(0.0, |op| seconds(op.time_ns));
    let mut out = Timeline {
        end_s,
        ..Timeline::default()
    };
    // Open windows by (name, target) with their band's index.
    let mut open: BTreeMap<(String, String), usize> = BTreeMap::new();
    for op in &history.ops {
        let t = seconds(op.time_ns);
        match &op.value {
            Value::Effect { kind, .. } => out.effects.push(Tick {
                lane: kind.clone(),
                time_s: t,
            }),
            Value::Fault { name, detail } => {
                fault_op(&mut out, &mut open, name, detail, t);
            }
            _ => {}
        }
    }
    for band in &mut out.bands {
        if !band.closed {
            band.end_s = end_s;
        }
    }
    out
}

/// Which open windows a recovery `name` closes: the names it undoes, and whether only the
/// same target's.
fn undoes(name: &str) -> Option<(&'static [&'static str], bool)> {
    match name {
        "restart" => Some((&["kill"], true)),
        "resume" => Some((&["pause"], true)),
        "heal" => Some((&["partition", "clog", "messages"], false)),
        "clock-reset" => Some((&["clock-jump"], false)),
        _ => None,
    }
}

/// Whether a fault `name` (with `detail`) opens a window.
fn opens_window(name: &str, detail: &str) -> bool {
    match name {
        "kill" | "pause" | "partition" | "clog" | "messages" | "clock-jump" => true,
        // A kill-leader is recorded as the `kill` of the leader it found.
        "kill-leader" => !detail.contains("has no leader"),
        _ => false,
    }
}

fn fault_op(
    out: &mut Timeline,
    open: &mut BTreeMap<(String, String), usize>,
    name: &str,
    detail: &str,
    t: f64,
) {
    let target = target_of(detail).to_string();
    if let Some((names, same_target)) = undoes(name) {
        let closing: Vec<(String, String)> = open
            .keys()
            .filter(|(n, tg)| names.contains(&n.as_str()) && (!same_target || *tg == target))
            .cloned()
            .collect();
        for key in closing {
            close(out, open, &key, t);
        }
        return;
    }
    if !opens_window(name, detail) {
        out.instants.push(Tick {
            lane: name.to_string(),
            time_s: t,
        });
        return;
    }
    let key = (name.to_string(), target);
    if name == "clock-jump" {
        // A jump of the same target steps that clock again: the earlier window ends.
        close(out, open, &key, t);
    }
    if open.contains_key(&key) {
        // The same fault again on the same target (a second partition of the same
        // groups): one window, from the first.
        return;
    }
    open.insert(key, out.bands.len());
    out.bands.push(FaultBand {
        name: name.to_string(),
        detail: detail.to_string(),
        start_s: t,
        end_s: t,
        closed: false,
    });
}

fn close(
    out: &mut Timeline,
    open: &mut BTreeMap<(String, String), usize>,
    key: &(String, String),
    t: f64,
) {
    if let Some(i) = open.remove(key) {
        out.bands[i].end_s = t;
        out.bands[i].closed = true;
    }
}

/// Whether an op is the pipeline's own work, counted in the throughput.
fn is_client_op(op: &Op) -> bool {
    op.process != "final"
        && op.process != "nemesis"
        && !matches!(
            op.value,
            Value::Fault { .. } | Value::Effect { .. } | Value::Drain
        )
}

/// The record ids an `ok` op of family `f` delivers to the sink.
fn delivered_ids<'a>(op: &'a Op, f: &str) -> Box<dyn Iterator<Item = u64> + 'a> {
    match (&op.value, f) {
        (Value::Write { rows }, "write") => Box::new(rows.iter().map(|r| r.id)),
        (Value::Txn { sends, .. }, "txn") => Box::new(sends.iter().map(|r| r.id)),
        (Value::Poll { records }, "poll") => Box::new(records.iter().map(|r| r.id)),
        _ => Box::new(std::iter::empty()),
    }
}

/// Per record id: when its send was first invoked, acknowledged, and when it reached the
/// sink (first `ok` op of `family`), ns.
#[derive(Default, Clone, Copy)]
struct RecordTimes {
    invoked_ns: Option<u64>,
    acked_ns: Option<u64>,
    delivered_ns: Option<u64>,
}

fn record_times(history: &History, family: Option<&str>) -> BTreeMap<u64, RecordTimes> {
    let mut times: BTreeMap<u64, RecordTimes> = BTreeMap::new();
    for op in history.ops.iter().filter(|op| is_client_op(op)) {
        if let Value::Send { id, .. } = &op.value {
            let entry = times.entry(*id).or_default();
            match op.kind {
                OpKind::Invoke => {
                    entry.invoked_ns.get_or_insert(op.time_ns);
                }
                OpKind::Ok => {
                    entry.acked_ns.get_or_insert(op.time_ns);
                }
                _ => {}
            }
        }
        if let (Some(f), OpKind::Ok) = (family, op.kind) {
            for id in delivered_ids(op, f) {
                times
                    .entry(id)
                    .or_default()
                    .delivered_ns
                    .get_or_insert(op.time_ns);
            }
        }
    }
    times
}

/// The sink family of a history: the first of `write`, `txn`, `poll` with an `ok` op.
fn sink_family(history: &History) -> Option<&'static str> {
    let present: BTreeSet<&'static str> = history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && is_client_op(op))
        .map(|op| value_name(&op.value))
        .collect();
    ["write", "txn", "poll"]
        .into_iter()
        .find(|f| present.contains(f))
}

/// The throughput, lag and latency series of `history` over `[0, end_s]` ([module
/// docs](self)).
pub fn series(history: &History, end_s: f64) -> Series {
    let bucket_s = bucket_width_s(end_s);
    let buckets = ((end_s / bucket_s).ceil() as usize).max(1);
    let bucket_of = |ns: u64| ((seconds(ns) / bucket_s) as usize).min(buckets - 1);
    let delivered_by = sink_family(history);
    let times = record_times(history, delivered_by);
    Series {
        bucket_s,
        throughput: throughput(history, buckets, &bucket_of, bucket_s),
        lag: lag(&times, buckets, &bucket_of),
        delivered_by,
        latency_ms: latency(&times, &bucket_of),
    }
}

fn throughput(
    history: &History,
    buckets: usize,
    bucket_of: &dyn Fn(u64) -> usize,
    bucket_s: f64,
) -> BTreeMap<String, Vec<f64>> {
    let mut counts: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    for op in history
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Ok && is_client_op(op))
    {
        counts
            .entry(value_name(&op.value))
            .or_insert_with(|| vec![0; buckets])[bucket_of(op.time_ns)] += 1;
    }
    let mut by_total: Vec<(&'static str, Vec<u64>)> = counts.into_iter().collect();
    by_total.sort_by_key(|(f, c)| (std::cmp::Reverse(c.iter().sum::<u64>()), *f));
    by_total
        .into_iter()
        .take(THROUGHPUT_LINES_MAX)
        .map(|(f, c)| {
            (
                f.to_string(),
                c.iter().map(|n| *n as f64 / bucket_s).collect(),
            )
        })
        .collect()
}

/// Per bucket, the records acknowledged in it or before and delivered after it: a +1 in
/// the bucket of the ack, a -1 in the bucket of the delivery, summed up.
fn lag(
    times: &BTreeMap<u64, RecordTimes>,
    buckets: usize,
    bucket_of: &dyn Fn(u64) -> usize,
) -> Vec<u64> {
    let mut step = vec![0i64; buckets];
    for r in times.values() {
        let Some(acked) = r.acked_ns.map(bucket_of) else {
            continue;
        };
        // A record delivered in the bucket of its ack (or before it: a poll can see a
        // record before the producer hears the ack) is never counted.
        let delivered = r.delivered_ns.map(bucket_of).unwrap_or(buckets);
        if delivered > acked {
            step[acked] += 1;
            if delivered < buckets {
                step[delivered] -= 1;
            }
        }
    }
    step.iter()
        .scan(0i64, |sum, d| {
            *sum += d;
            Some(*sum as u64)
        })
        .collect()
}

fn latency(
    times: &BTreeMap<u64, RecordTimes>,
    bucket_of: &dyn Fn(u64) -> usize,
) -> Vec<(usize, f64, f64)> {
    let mut per_bucket: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for r in times.values() {
        if let (Some(sent), Some(done)) = (r.invoked_ns, r.delivered_ns) {
            per_bucket
                .entry(bucket_of(done))
                .or_default()
                .push(done.saturating_sub(sent));
        }
    }
    per_bucket
        .into_iter()
        .map(|(i, mut ns)| {
            ns.sort_unstable();
            let median = ns[(ns.len() - 1) / 2];
            let max = ns[ns.len() - 1];
            (i, median as f64 / 1e6, max as f64 / 1e6)
        })
        .collect()
}

/// Fault effects per kind in a history: what acted in this seed.
pub fn effect_counts(history: &History) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for op in &history.ops {
        if let Value::Effect { kind, .. } = &op.value {
            *counts.entry(kind.clone()).or_default() += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::RecordRef;
    use eosim_sim::kafka::TopicPartition;

    const S: u64 = 1_000_000_000;

    fn fault(h: &mut History, t: u64, name: &str, detail: &str) {
        let value = Value::Fault {
            name: name.into(),
            detail: detail.into(),
        };
        h.push(t, "nemesis", OpKind::Info, value, None);
    }

    fn send(h: &mut History, t: u64, kind: OpKind, id: u64) {
        let value = Value::Send {
            id,
            key: None,
            tp: None,
            offset: None,
        };
        h.push(t, "producer-0", kind, value, None);
    }

    fn write(h: &mut History, t: u64, ids: &[u64]) {
        let rows = ids
            .iter()
            .map(|&id| RecordRef {
                id,
                key: None,
                tp: TopicPartition::new("t", 0),
                offset: id as i64,
            })
            .collect();
        h.push(t, "worker-0", OpKind::Ok, Value::Write { rows }, None);
    }

    #[test]
    fn bucket_widths_round_up_to_one_two_or_five() {
        assert_eq!(bucket_width_s(100.0), 1.0);
        assert_eq!(bucket_width_s(101.0), 2.0);
        assert_eq!(bucket_width_s(300.0), 5.0);
        assert_eq!(bucket_width_s(501.0), 10.0);
        assert!((bucket_width_s(12.0) - 0.2).abs() < 1e-12);
        assert_eq!(bucket_width_s(0.0), 0.001);
    }

    #[test]
    fn kills_close_on_the_restart_of_their_target_and_partitions_on_heal() {
        let mut h = History::default();
        fault(&mut h, S, "kill", "target=[broker-1] mode=process-kill");
        fault(
            &mut h,
            2 * S,
            "kill",
            "target=[broker-2] mode=machine-crash",
        );
        fault(
            &mut h,
            3 * S,
            "partition",
            "source=[a] target=[b] one_way=false",
        );
        fault(&mut h, 4 * S, "restart", "target=[broker-2]");
        fault(&mut h, 5 * S, "heal", "");
        fault(&mut h, 6 * S, "task-crash", "target=[sink-0] on worker-1");
        fault(&mut h, 7 * S, "restart", "target=[broker-9]");
        let effect = Value::Effect {
            kind: "kill".into(),
            detail: "broker-1 killed".into(),
        };
        h.push(8 * S, "broker-1", OpKind::Info, effect, None);
        let t = timeline(&h);
        assert_eq!(t.end_s, 8.0);
        let spans: Vec<(&str, f64, f64, bool)> = t
            .bands
            .iter()
            .map(|b| (b.name.as_str(), b.start_s, b.end_s, b.closed))
            .collect();
        assert_eq!(
            spans,
            [
                ("kill", 1.0, 8.0, false),
                ("kill", 2.0, 4.0, true),
                ("partition", 3.0, 5.0, true),
            ]
        );
        assert_eq!(
            t.instants,
            [Tick {
                lane: "task-crash".into(),
                time_s: 6.0
            }]
        );
        assert_eq!(t.effects.len(), 1);
        assert_eq!(t.effects[0].time_s, 8.0);
    }

    #[test]
    fn a_second_clock_jump_of_a_target_ends_the_first_window() {
        let mut h = History::default();
        fault(&mut h, S, "clock-jump", "target=[p-0] delta_ms=-7200000");
        fault(&mut h, 3 * S, "clock-jump", "target=[p-0] delta_ms=7200000");
        fault(&mut h, 4 * S, "clock-reset", "");
        let t = timeline(&h);
        let spans: Vec<(f64, f64)> = t.bands.iter().map(|b| (b.start_s, b.end_s)).collect();
        assert_eq!(spans, [(1.0, 3.0), (3.0, 4.0)]);
    }

    /// Ids 1..=4 sent at 0 s (acknowledged at 0.5 s); 1 and 2 written at 1.5 s, 3 at 3.5
    /// s, 4 never: the lag is 4 until the first write, then 2, then 1 for good.
    fn pipeline() -> History {
        let mut h = History::default();
        for id in 1..=4 {
            send(&mut h, 0, OpKind::Invoke, id);
        }
        for id in 1..=4 {
            send(&mut h, S / 2, OpKind::Ok, id);
        }
        write(&mut h, 3 * S / 2, &[1, 2]);
        write(&mut h, 7 * S / 2, &[3]);
        h.push(
            10 * S,
            "final",
            OpKind::Ok,
            Value::SinkState { rows: vec![] },
            None,
        );
        h
    }

    #[test]
    fn throughput_counts_ok_ops_per_second_in_their_bucket() {
        let h = pipeline();
        let s = series(&h, 10.0);
        assert!((s.bucket_s - 0.1).abs() < 1e-12);
        assert_eq!(
            s.throughput.len(),
            2,
            "send and write; the final read is not work"
        );
        // Four sends acknowledged in the bucket [0.5, 0.6): 4 ops / 0.1 s.
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(s.throughput["send"][5], 40.0));
        assert!(near(s.throughput["send"].iter().sum::<f64>(), 40.0));
        assert!(near(s.throughput["write"][15], 10.0));
        assert!(near(s.throughput["write"][35], 10.0));
        assert!(near(s.throughput["write"].iter().sum::<f64>(), 20.0));
    }

    #[test]
    fn lag_counts_acknowledged_records_not_yet_in_the_sink() {
        let h = pipeline();
        let s = series(&h, 10.0);
        assert_eq!(s.delivered_by, Some("write"));
        assert_eq!(s.lag[0], 0, "nothing acknowledged before 0.5 s");
        assert_eq!(s.lag[5], 4);
        assert_eq!(s.lag[14], 4);
        assert_eq!(s.lag[15], 2);
        assert_eq!(s.lag[35], 1);
        assert_eq!(*s.lag.last().unwrap(), 1, "id 4 never reached the sink");
    }

    #[test]
    fn latency_runs_from_the_send_invoke_to_the_first_delivery() {
        let h = pipeline();
        let s = series(&h, 10.0);
        assert_eq!(s.latency_ms, [(15, 1500.0, 1500.0), (35, 3500.0, 3500.0)]);
    }

    #[test]
    fn polls_count_as_delivery_when_nothing_writes() {
        let mut h = History::default();
        send(&mut h, 0, OpKind::Invoke, 7);
        send(&mut h, S, OpKind::Ok, 7);
        let records = vec![RecordRef {
            id: 7,
            key: None,
            tp: TopicPartition::new("t", 0),
            offset: 0,
        }];
        h.push(
            2 * S,
            "consumer-0",
            OpKind::Ok,
            Value::Poll { records },
            None,
        );
        let s = series(&h, 2.0);
        assert_eq!(s.delivered_by, Some("poll"));
        assert_eq!(*s.lag.last().unwrap(), 0);
        assert_eq!(s.latency_ms.len(), 1);
        assert_eq!(s.latency_ms[0].1, 2000.0);
    }
}

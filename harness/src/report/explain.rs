//! Explanations of anomaly cases from the history, in the manner of Elle's witnesses: which
//! ops a case rests on, by which process, when, what they did with the case's records, and
//! the faults and fault effects that happened between them.
//!
//! A case ([`Case::ops`]) names its witness ops by history index. [`explain`] turns them
//! into lines:
//!
//! ```text
//! t=12.100s worker-0 info write id 17 (1 of 5 rows, invoked t=11.900s) error="no answer ..."
//! t=14.000s worker-0 ok write id 17 (1 of 5 rows, invoked t=13.800s)
//! t=60.000s final ok sink-state id 17 ×2 (2 of 501 rows)
//! between t=11.900s and t=14.000s:
//!   t=12.000s worker-0 effect messages.drop-response: Insert response from clickhouse ...
//! ```
//!
//! The window of faults starts at the invoke of the earliest witness (a lost response acts
//! while its request is in flight) and ends at the last witness; when two or more witnesses
//! happened during the run, the final-state ops (process `final`) do not stretch it to the
//! end of the run.

use crate::checker::{Case, CheckResult};
use crate::history::text::{format_op, kind_name};
use crate::history::{is_recovery, History, Op, OpKind, RecordRef, Value};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Witness ops listed per case before the rest are counted in one line.
pub const WITNESSES_MAX: usize = 8;

/// Forbidden cases a counterexample explains.
pub const EXPLAINED_CASES_MAX: usize = 3;

/// Effect lines of one kind listed between two faults before the rest are summed up.
pub const EFFECT_LINES_PER_KIND_MAX: usize = 5;

/// One case explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// `anomaly: case text`.
    pub case: String,
    /// The witness lines in time order, then the faults and effects between them
    /// ([`explain`]).
    pub lines: Vec<String>,
}

/// The fault and effect lines of some ops, with how many faults (recoveries not counted)
/// and effects they hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultLines {
    /// Each fault, and its effects up to [`EFFECT_LINES_PER_KIND_MAX`] per kind between two
    /// faults (indented); the rest of a kind as one `  ... and N more <kind> effects` line
    /// where the next fault (or the end) begins.
    pub lines: Vec<String>,
    /// Nemesis faults, recoveries not counted.
    pub faults: u64,
    /// Fault effects.
    pub effects: u64,
}

/// The nemesis faults and fault effects among `ops`, summarised ([`FaultLines`]).
pub fn fault_effect_lines<'a>(ops: impl IntoIterator<Item = &'a Op>) -> FaultLines {
    let mut out = FaultLines::default();
    let mut shown: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    let flush = |lines: &mut Vec<String>, shown: &mut BTreeMap<&str, (usize, u64)>| {
        for (kind, (_, more)) in std::mem::take(shown) {
            if more > 0 {
                lines.push(format!("  ... and {more} more {kind} effects"));
            }
        }
    };
    for op in ops {
        match &op.value {
            Value::Fault { name, .. } => {
                flush(&mut out.lines, &mut shown);
                out.lines.push(format_op(op));
                out.faults += u64::from(!is_recovery(name));
            }
            Value::Effect { kind, .. } => {
                out.effects += 1;
                let entry = shown.entry(kind.as_str()).or_default();
                if entry.0 < EFFECT_LINES_PER_KIND_MAX {
                    entry.0 += 1;
                    out.lines.push(format!("  {}", format_op(op)));
                } else {
                    entry.1 += 1;
                }
            }
            _ => {}
        }
    }
    flush(&mut out.lines, &mut shown);
    out
}

/// Explains `case` from `history`: one line per witness op ([`Case::ops`], at most
/// [`WITNESSES_MAX`]) in time order, `<time> <process> <kind> <what>` where `what` says
/// which of the case's ids the op holds and how many rows it had, with the invoke time of
/// a completion and its error; then `between <t1> and <t2>:` and the faults and effects in
/// that window ([`fault_effect_lines`]), or `no fault or effect between them`. Indexes outside
/// the history are skipped; a case without witnesses gives no lines.
pub fn explain(history: &History, case: &Case) -> Vec<String> {
    let ids: BTreeSet<u64> = case.ids.iter().copied().collect();
    let mut witnesses: Vec<&Op> = case
        .ops
        .iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|&i| history.ops.get(i))
        .collect();
    witnesses.sort_by_key(|op| (op.time_ns, op.index));
    let Some(first) = witnesses.first() else {
        return Vec::new();
    };
    let mut lines: Vec<String> = witnesses
        .iter()
        .take(WITNESSES_MAX)
        .map(|op| witness_line(history, op, &ids))
        .collect();
    if witnesses.len() > WITNESSES_MAX {
        lines.push(format!(
            "... and {} more witness ops",
            witnesses.len() - WITNESSES_MAX
        ));
    }
    let during: Vec<&Op> = witnesses
        .iter()
        .copied()
        .filter(|op| op.process != "final")
        .collect();
    let last = match during.as_slice() {
        [.., a, b] if a.index != b.index => *b,
        _ => witnesses[witnesses.len() - 1],
    };
    let start = invoke_of(history, first).unwrap_or(first);
    let window = history
        .ops
        .iter()
        .skip(start.index)
        .take_while(|op| op.index <= last.index);
    let between = fault_effect_lines(window);
    if between.lines.is_empty() {
        lines.push("no fault or effect between them".to_string());
    } else {
        lines.push(format!(
            "between {} and {}:",
            super::time_text(start.time_ns),
            super::time_text(last.time_ns)
        ));
        lines.extend(between.lines.into_iter().map(|l| format!("  {l}")));
    }
    lines
}

/// The first [`EXPLAINED_CASES_MAX`] forbidden cases of `result`, by the op that completed
/// their evidence (as [`super::first_forbidden_op`] orders them), each explained.
pub fn explain_forbidden(history: &History, result: &CheckResult) -> Vec<Explanation> {
    let mut cases: Vec<(usize, String, &Case)> = result
        .anomalies
        .iter()
        .filter(|(anomaly, _)| result.forbidden.contains(anomaly))
        .flat_map(|(anomaly, cases)| {
            cases.iter().map(move |c| {
                let done = c.ops.iter().max().copied().unwrap_or(usize::MAX);
                (done, format!("{anomaly}: {}", c.text), c)
            })
        })
        .collect();
    cases.sort_by_key(|(done, _, _)| *done);
    cases
        .into_iter()
        .take(EXPLAINED_CASES_MAX)
        .map(|(_, text, c)| Explanation {
            case: text,
            lines: explain(history, c),
        })
        .collect()
}

/// The invoke a completion `op` completes: the latest earlier `invoke` of the same process
/// and operation (Jepsen's pairing: one open op per process). `None` for an invoke, or when
/// there is none.
fn invoke_of<'a>(history: &'a History, op: &Op) -> Option<&'a Op> {
    if op.kind == OpKind::Invoke {
        return None;
    }
    let same = std::mem::discriminant(&op.value);
    history.ops[..op.index.min(history.ops.len())]
        .iter()
        .rev()
        .find(|o| o.process == op.process && std::mem::discriminant(&o.value) == same)
        .filter(|o| o.kind == OpKind::Invoke)
}

fn witness_line(history: &History, op: &Op, ids: &BTreeSet<u64>) -> String {
    let time = super::time_text(op.time_ns);
    let mut line = match records_of(&op.value) {
        Some((verb, records)) => {
            let mut notes = vec![format!(
                "{} of {} rows",
                records.iter().filter(|r| ids.contains(&r.id)).count(),
                records.len()
            )];
            if let Some(invoke) = invoke_of(history, op) {
                notes.push(format!("invoked {}", super::time_text(invoke.time_ns)));
            }
            format!(
                "{time} {} {} {verb} {} ({})",
                op.process,
                kind_name(op.kind),
                held_text(records, ids),
                notes.join(", ")
            )
        }
        // Other ops read as the terminal shows them, error included.
        None => return format_op(op),
    };
    if let Some(error) = &op.error {
        line.push_str(&format!(" error={error:?}"));
    }
    line
}

/// The records an op carries, with the verb for them (`write`, `poll`, `sink-state`).
fn records_of(value: &Value) -> Option<(&'static str, &[RecordRef])> {
    match value {
        Value::Write { rows } => Some(("write", rows)),
        Value::Poll { records } => Some(("poll", records)),
        Value::SinkState { rows } => Some(("sink-state", rows)),
        Value::LogState { records, .. } => Some(("log-state", records)),
        Value::CommittedLogState { records, .. } => Some(("committed-log-state", records)),
        Value::Txn { sends, .. } => Some(("txn", sends)),
        _ => None,
    }
}

/// Which of `ids` the records hold: `id 17`, `id 17 ×2`, `ids 3, 4 ×2`, or `none of ids
/// 17` when it holds none of them.
fn held_text(records: &[RecordRef], ids: &BTreeSet<u64>) -> String {
    let mut held: BTreeMap<u64, u64> = BTreeMap::new();
    for r in records.iter().filter(|r| ids.contains(&r.id)) {
        *held.entry(r.id).or_default() += 1;
    }
    let name = |n: usize| if n == 1 { "id" } else { "ids" };
    if held.is_empty() {
        let listed: Vec<String> = ids.iter().map(u64::to_string).collect();
        return format!("none of {} {}", name(ids.len()), listed.join(", "));
    }
    let parts: Vec<String> = held
        .iter()
        .map(|(id, n)| match n {
            1 => id.to_string(),
            n => format!("{id} ×{n}"),
        })
        .collect();
    format!("{} {}", name(held.len()), parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{check_all, Anomaly, CheckOptions};
    use eosim_sim::kafka::TopicPartition;

    fn row(id: u64, offset: i64) -> RecordRef {
        RecordRef {
            id,
            key: None,
            tp: TopicPartition::new("t", 0),
            offset,
        }
    }

    fn write(ids: &[u64]) -> Value {
        Value::Write {
            rows: ids.iter().map(|&id| row(id, -1)).collect(),
        }
    }

    /// Id 17 written by worker-1 (ok); worker-0's insert of it lost its response (info),
    /// then worker-0 wrote it again (ok): the sink holds it twice. A partition of an
    /// unrelated broker before the first write lies outside the window.
    fn duplicated() -> History {
        let mut h = History::default();
        let s = 1_000_000_000;
        let effect = Value::Effect {
            kind: "messages.drop-response".into(),
            detail: "Insert response from clickhouse to worker-0 dropped".into(),
        };
        let part = Value::Fault {
            name: "partition".into(),
            detail: "broker-2".into(),
        };
        h.push(s, "nemesis", OpKind::Info, part, None);
        h.push(12 * s, "worker-1", OpKind::Invoke, write(&[16, 17]), None);
        h.push(
            12 * s + 100_000_000,
            "worker-1",
            OpKind::Ok,
            write(&[16, 17]),
            None,
        );
        h.push(13 * s, "worker-0", OpKind::Invoke, write(&[17]), None);
        h.push(13 * s + 200_000_000, "worker-0", OpKind::Info, effect, None);
        let timeout = Some("no answer from Insert within 2000 ms".to_string());
        h.push(15 * s, "worker-0", OpKind::Info, write(&[17]), timeout);
        h.push(16 * s, "worker-0", OpKind::Invoke, write(&[17]), None);
        h.push(16 * s, "worker-0", OpKind::Ok, write(&[17]), None);
        let log = Value::LogState {
            tp: TopicPartition::new("t", 0),
            records: vec![row(16, 0), row(17, 1)],
        };
        h.push(60 * s, "final", OpKind::Ok, log, None);
        let sink = Value::SinkState {
            rows: vec![row(16, 0), row(17, 1), row(17, 1), row(17, 1)],
        };
        h.push(60 * s, "final", OpKind::Ok, sink, None);
        h
    }

    #[test]
    fn a_duplicate_is_explained_by_both_writers_and_the_effect_between_them() {
        let h = duplicated();
        let result = check_all(&h, &CheckOptions::default());
        let case = &result.anomalies[&Anomaly::SinkDuplicate][0];
        // The case cites the ok writes, the info write (it may have applied) and the sink.
        assert_eq!(case.ops, vec![2, 5, 7, 9]);
        let lines = explain(&h, case);
        assert_eq!(
            lines[..4],
            [
                "t=12.100s worker-1 ok write id 17 (1 of 2 rows, invoked t=12.000s)",
                "t=15.000s worker-0 info write id 17 (1 of 1 rows, invoked t=13.000s) \
                 error=\"no answer from Insert within 2000 ms\"",
                "t=16.000s worker-0 ok write id 17 (1 of 1 rows, invoked t=16.000s)",
                "t=60.000s final ok sink-state id 17 ×3 (3 of 4 rows)",
            ]
        );
        // The window runs from worker-1's invoke to the last write, not to the final state,
        // and leaves out the partition before it.
        assert_eq!(
            lines[4..],
            [
                "between t=12.000s and t=16.000s:",
                "    t=13.200s worker-0 effect messages.drop-response: Insert response from \
                 clickhouse to worker-0 dropped",
            ]
        );
        let explained = explain_forbidden(&h, &result);
        assert_eq!(explained.len(), 1);
        assert_eq!(explained[0].case, format!("sink-duplicate: {}", case.text));
    }

    #[test]
    fn effects_past_the_per_kind_limit_are_summed_up() {
        let mut h = History::default();
        h.push(0, "worker-0", OpKind::Invoke, write(&[1]), None);
        for _ in 0..EFFECT_LINES_PER_KIND_MAX + 2 {
            let effect = Value::Effect {
                kind: "messages.delay".into(),
                detail: "Insert delayed 3 ms".into(),
            };
            h.push(1, "worker-0", OpKind::Info, effect, None);
        }
        h.push(2, "worker-0", OpKind::Ok, write(&[1]), None);
        let found = fault_effect_lines(&h.ops);
        assert_eq!(found.effects, EFFECT_LINES_PER_KIND_MAX as u64 + 2);
        assert_eq!(found.lines.len(), EFFECT_LINES_PER_KIND_MAX + 1);
        assert_eq!(
            found.lines.last().map(String::as_str),
            Some("  ... and 2 more messages.delay effects")
        );
    }
}

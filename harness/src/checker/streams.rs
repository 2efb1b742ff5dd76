//! The Streams checker, after Kafka's own `EosTestDriver` / `SmokeTestDriver`: after every
//! transaction finished, read the output read_committed, recompute the expected aggregates
//! from the input up to the committed offsets, and report missing, extra and wrong values
//! per key and window.
//!
//! # Inputs (ops of process `final`)
//! - `StreamsInput` per input partition: every input record with its key and event time.
//! - `CommittedOffsets` of the application's group: how far the input was consumed. A
//!   partition without one counts as consumed up to nothing.
//! - `StreamsOutput` per output partition: the KTable updates `key@windowStart → count`,
//!   read_committed, in offset order. Each `key@window` lands in one output partition (the
//!   default partitioner on the output key), so its updates have one order.
//!
//! - `StreamsWindow`: the window size of the topology, so that input maps to windows as the
//!   processor maps it (`start = timestamp - timestamp mod size`; 0 = unwindowed), and its
//!   record cache (`statestore.cache.max.bytes`), which decides what sequence of updates
//!   is correct ([`aggregate_sequence_cases`]).
//!
//! # A transactional input
//! Behind a transactional upstream (`[workload] "transactional.id"`) each input record's
//! transaction decides whether it counts ([`Analysis::fate`]): a committed one's (or a plain
//! producer's) is in the true count; an aborted one's never is (a read_uncommitted
//! at_least_once application that counts it over-counts, and the case says how many
//! aborted inputs the window holds); an undecided one's (outcome unknown, or still open
//! at the end) may or may not be, so the final value may lie anywhere from the true count
//! to the true count plus the undecided inputs.

use super::analysis::{Analysis, TxnFate};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult};
use crate::history::{History, RecordRef, Value};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// `key@windowStart`, the identity of one aggregate.
pub type WindowedKey = (String, i64);

/// The facts the Streams anomalies are inferred from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamsAnalysis {
    /// True counts per `key@window` of the input below the committed offsets: records of
    /// no transaction or of a committed one.
    pub expected: BTreeMap<WindowedKey, u64>,
    /// Input records below the committed offsets whose transaction's outcome is unknown,
    /// per `key@window`: each may count or not.
    pub undecided: BTreeMap<WindowedKey, u64>,
    /// Input records below the committed offsets whose transaction aborted, per
    /// `key@window`: never data.
    pub aborted: BTreeMap<WindowedKey, u64>,
    /// Committed updates per `key@window`, in output offset order: (count, offset).
    pub updates: BTreeMap<WindowedKey, Vec<(u64, Offset)>>,
    /// Output partition of each `key@window`.
    pub output_tp: BTreeMap<WindowedKey, TopicPartition>,
    /// Index of the op holding each `key@window`'s last update.
    pub output_op: BTreeMap<WindowedKey, usize>,
    /// Whether the history has a Streams final state at all.
    pub present: bool,
    /// Whether the topology had a record cache: consecutive updates of a key may then
    /// collapse into one, so its committed counts skip values.
    pub cached: bool,
}

impl StreamsAnalysis {
    /// Gathers the facts of `history`, whose transactions `a` knows.
    pub fn from_history(history: &History, a: &Analysis) -> Self {
        let mut committed: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
        let (mut window_size_ms, mut cached) = (0, false);
        for op in &history.ops {
            match &op.value {
                Value::CommittedOffsets { offsets } if op.process == "final" => {
                    committed.extend(offsets.iter().cloned());
                }
                // Another topology than the count: `checker::streams_records` judges it.
                Value::StreamsTopology { .. } => return Self::default(),
                Value::StreamsWindow {
                    window_size_ms: w,
                    cache_max_bytes,
                } => {
                    window_size_ms = *w;
                    cached = cache_max_bytes.is_some_and(|c| c > 0);
                }
                _ => {}
            }
        }
        let mut analysis = Self {
            cached,
            ..Self::default()
        };
        for op in &history.ops {
            match &op.value {
                Value::StreamsInput { tp, records } => {
                    analysis.present = true;
                    let end = committed.get(tp).copied().unwrap_or(0);
                    for r in records.iter().filter(|r| r.offset < end) {
                        let start = window_start(r.timestamp_ms, window_size_ms);
                        let logged = RecordRef {
                            id: r.id,
                            key: None,
                            tp: tp.clone(),
                            offset: r.offset,
                        };
                        let counts = match a.fate(&logged) {
                            TxnFate::NotTransactional | TxnFate::Committed => {
                                &mut analysis.expected
                            }
                            TxnFate::Undecided => &mut analysis.undecided,
                            TxnFate::Aborted => &mut analysis.aborted,
                        };
                        *counts.entry((r.key.clone(), start)).or_default() += 1;
                    }
                }
                Value::StreamsOutput { tp, records } => {
                    analysis.present = true;
                    for u in records {
                        let k = (u.key.clone(), u.window_start_ms);
                        analysis
                            .updates
                            .entry(k.clone())
                            .or_default()
                            .push((u.count, u.offset));
                        analysis.output_tp.insert(k.clone(), tp.clone());
                        analysis.output_op.insert(k, op.index);
                    }
                }
                _ => {}
            }
        }
        analysis
    }

    fn case(&self, k: &WindowedKey, text: String) -> Case {
        let updates = self.updates.get(k).cloned().unwrap_or_default();
        Case {
            ids: Vec::new(),
            tp: self.output_tp.get(k).cloned(),
            offsets: updates.iter().map(|(_, o)| *o).collect(),
            ops: self.output_op.get(k).copied().into_iter().collect(),
            text,
        }
    }

    fn final_value(&self, k: &WindowedKey) -> Option<u64> {
        self.updates.get(k).and_then(|u| u.last()).map(|(c, _)| *c)
    }

    /// `key@window`'s undecided inputs.
    fn undecided_of(&self, k: &WindowedKey) -> u64 {
        self.undecided.get(k).copied().unwrap_or(0)
    }

    /// What a case adds about `key@window`'s transactional input, if it has any that is not
    /// data for certain.
    fn txn_note(&self, k: &WindowedKey) -> String {
        let aborted = self.aborted.get(k).copied().unwrap_or(0);
        let undecided = self.undecided_of(k);
        match (aborted, undecided) {
            (0, 0) => String::new(),
            (a, 0) => format!(" ({a} inputs of aborted transactions below the committed offsets)"),
            (a, u) => format!(
                " ({a} inputs of aborted and {u} of undecided transactions below the committed \
                 offsets)"
            ),
        }
    }
}

/// The window a timestamp falls in (`size_ms` 0: unwindowed, start 0).
pub fn window_start(timestamp_ms: i64, size_ms: i64) -> i64 {
    if size_ms <= 0 {
        0
    } else {
        timestamp_ms - timestamp_ms.rem_euclid(size_ms)
    }
}

/// `key@window`s whose final committed value is below the true count. Inferred from the
/// last update in output offset order against the input up to the committed offsets.
pub fn aggregate_under_count_cases(a: &StreamsAnalysis) -> Vec<Case> {
    compare(a, |fin, exp, _| fin < exp, "under-counts")
}

/// `key@window`s whose final committed value is above the true count plus the undecided
/// inputs: an input applied twice (at_least_once after a crash replays what the changelog
/// already holds), or an aborted transaction's input counted (read read_uncommitted).
pub fn aggregate_over_count_cases(a: &StreamsAnalysis) -> Vec<Case> {
    compare(
        a,
        |fin, exp, undecided| fin > exp + undecided,
        "over-counts",
    )
}

fn compare(a: &StreamsAnalysis, bad: impl Fn(u64, u64, u64) -> bool, verb: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    for (k, exp) in &a.expected {
        let Some(fin) = a.final_value(k) else {
            continue;
        };
        if bad(fin, *exp, a.undecided_of(k)) {
            let text = format!(
                "{}@{}: final {fin} {verb} the true count {exp}{}",
                k.0,
                k.1,
                a.txn_note(k)
            );
            cases.push(a.case(k, text));
        }
    }
    // Worst first.
    cases.sort_by_key(|c| std::cmp::Reverse(c.offsets.len()));
    cases
}

/// `key@window`s with committed input and no committed update at all.
pub fn missing_aggregate_cases(a: &StreamsAnalysis) -> Vec<Case> {
    a.expected
        .iter()
        .filter(|(k, exp)| **exp > 0 && !a.updates.contains_key(*k))
        .map(|(k, exp)| a.case(k, format!("{}@{}: no output, true count {exp}", k.0, k.1)))
        .collect()
}

/// `key@window`s with committed updates but no consumed input that is or may be data
/// (only aborted transactions' inputs, or none).
pub fn extra_aggregate_cases(a: &StreamsAnalysis) -> Vec<Case> {
    a.updates
        .keys()
        .filter(|k| !a.expected.contains_key(*k) && a.undecided_of(k) == 0)
        .map(|k| {
            let fin = a.final_value(k).unwrap_or(0);
            let note = a.txn_note(k);
            a.case(
                k,
                format!("{}@{}: output {fin} without consumed input{note}", k.0, k.1),
            )
        })
        .collect()
}

/// `key@window`s whose committed updates are out of sequence in offset order: under
/// exactly_once_v2 each input's update is committed once, in order. Without a record cache
/// the counts must be exactly 1, 2, ..., n; with one (`cached`), where updates of a key
/// between two flushes collapse into the last, they must rise strictly (a repeated or
/// lower count is an input applied twice or a stale write).
pub fn aggregate_sequence_cases(a: &StreamsAnalysis) -> Vec<Case> {
    let mut cases = Vec::new();
    for (k, updates) in &a.updates {
        let bad = updates
            .iter()
            .enumerate()
            .find(|(i, (c, _))| match a.cached {
                false => *c != *i as u64 + 1,
                true => *c == 0 || (*i > 0 && *c <= updates[i - 1].0),
            });
        if let Some((i, (c, offset))) = bad {
            let expected = match a.cached {
                false => format!("{}", i + 1),
                true => format!("above {}", if i == 0 { 0 } else { updates[i - 1].0 }),
            };
            let text = format!(
                "{}@{}: update {} at offset {offset} is {c}, expected {expected} (counts {:?})",
                k.0,
                k.1,
                i + 1,
                updates.iter().map(|(c, _)| *c).take(12).collect::<Vec<_>>()
            );
            cases.push(a.case(k, text));
        }
    }
    cases
}

/// The Streams checker; finds nothing in a history without a Streams final state.
pub struct StreamsChecker;

impl AnalysisChecker for StreamsChecker {
    fn name(&self) -> &'static str {
        "streams"
    }

    fn check_analysis(
        &self,
        history: &History,
        options: &CheckOptions,
        analysis: &Analysis,
    ) -> CheckResult {
        let a = StreamsAnalysis::from_history(history, analysis);
        if !a.present {
            return CheckResult::from_cases(Vec::new(), BTreeMap::new(), options);
        }
        let found = vec![
            (
                Anomaly::AggregateUnderCount,
                aggregate_under_count_cases(&a),
            ),
            (Anomaly::AggregateOverCount, aggregate_over_count_cases(&a)),
            (Anomaly::MissingAggregate, missing_aggregate_cases(&a)),
            (Anomaly::ExtraAggregate, extra_aggregate_cases(&a)),
            (Anomaly::AggregateSequence, aggregate_sequence_cases(&a)),
        ];
        let mut counts = BTreeMap::new();
        counts.insert("streams-aggregates".to_string(), a.expected.len() as u64);
        let inputs: u64 = a.expected.values().sum();
        counts.insert("streams-consumed-inputs".to_string(), inputs);
        let updates: usize = a.updates.values().map(Vec::len).sum();
        counts.insert("streams-updates".to_string(), updates as u64);
        let aborted: u64 = a.aborted.values().sum();
        if aborted > 0 {
            counts.insert("streams-consumed-aborted-inputs".to_string(), aborted);
        }
        CheckResult::from_cases(found, counts, options)
    }
}

#[cfg(test)]
mod tests {
    //! One test per anomaly with a literal history, and a valid history beside them.
    use super::*;
    use crate::checker::test_support::streams_history as history;
    use crate::checker::test_support::streams_history_cached as history_cached;
    use crate::checker::{Checker, Claim, Validity};
    use crate::history::OpKind;

    fn check(h: &History, claim: Claim) -> CheckResult {
        StreamsChecker.check(h, &CheckOptions::for_claim(claim))
    }

    #[test]
    fn exact_counts_in_sequence_are_valid_under_exactly_once() {
        let r = check(&history(3, &[1, 2, 3]), Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
    }

    #[test]
    fn a_replayed_input_is_an_over_count_allowed_at_least_once() {
        // A crash after the changelog and output were flushed but before the offsets were
        // committed: the restored store holds 2, the replayed input makes it 3, then 4.
        let h = history(3, &[1, 2, 3, 3, 4]);
        let eos = check(&h, Claim::ExactlyOnce);
        assert!(eos.forbidden.contains(&Anomaly::AggregateOverCount));
        assert!(eos.forbidden.contains(&Anomaly::AggregateSequence));
        assert_eq!(check(&h, Claim::AtLeastOnce).validity, Validity::Valid);
    }

    #[test]
    fn a_record_cache_may_skip_counts_but_never_repeat_or_lower_one() {
        // With a cache, k0@0's three updates may collapse: 1 then 3 (one flush held 2 and
        // 3) is exact; without one the same output is out of sequence.
        let cache = Some(10_485_760);
        let cached = check(&history_cached(3, &[1, 3], cache), Claim::ExactlyOnce);
        assert_eq!(
            cached.validity,
            Validity::Valid,
            "{:?}",
            cached.case_texts(8)
        );
        let uncached = check(&history(3, &[1, 3]), Claim::ExactlyOnce);
        assert_eq!(uncached.forbidden, vec![Anomaly::AggregateSequence]);
        // A crash replay under at_least_once: 2 flushed, the input replayed, 2 again.
        let replayed = check(&history_cached(3, &[2, 2, 3], cache), Claim::ExactlyOnce);
        assert_eq!(replayed.forbidden, vec![Anomaly::AggregateSequence]);
        // A zombie's stale count after its successor's.
        let stale = check(&history_cached(3, &[2, 1, 3], cache), Claim::ExactlyOnce);
        assert_eq!(stale.forbidden, vec![Anomaly::AggregateSequence]);
    }

    #[test]
    fn a_lost_update_is_an_under_count_forbidden_at_least_once() {
        let r = check(&history(3, &[1, 2]), Claim::AtLeastOnce);
        assert_eq!(r.forbidden, vec![Anomaly::AggregateUnderCount]);
    }

    #[test]
    fn consumed_input_without_output_is_a_missing_aggregate() {
        let r = check(&history(3, &[]), Claim::AtLeastOnce);
        assert_eq!(r.forbidden, vec![Anomaly::MissingAggregate]);
    }

    #[test]
    fn output_without_consumed_input_is_an_extra_aggregate() {
        let r = check(&history(0, &[1]), Claim::AtLeastOnce);
        assert_eq!(r.forbidden, vec![Anomaly::ExtraAggregate]);
    }

    /// [`history`] (input ids 0..=2 at `input-0`@0..=2, all consumed) in which id 2 was
    /// sent by upstream transaction 0, completed `completion` (`None`: never ended).
    fn with_upstream_txn(counts: &[u64], completion: Option<OpKind>) -> History {
        let base = history(3, counts);
        let txn = Value::Txn {
            id: 0,
            transactional_id: "upstream".into(),
            sends: vec![RecordRef {
                id: 2,
                key: None,
                tp: TopicPartition::new("input", 0),
                offset: 2,
            }],
            offsets: Vec::new(),
        };
        let mut ops = vec![("producer-0", OpKind::Invoke, txn.clone())];
        ops.extend(completion.map(|kind| ("producer-0", kind, txn)));
        ops.extend((base.ops.iter()).map(|op| (op.process.as_str(), op.kind, op.value.clone())));
        crate::checker::test_support::history(ops)
    }

    #[test]
    fn an_aborted_input_is_not_in_the_true_count_and_counting_it_over_counts() {
        let skipped = check(
            &with_upstream_txn(&[1, 2], Some(OpKind::Fail)),
            Claim::ExactlyOnce,
        );
        assert_eq!(
            skipped.validity,
            Validity::Valid,
            "{:?}",
            skipped.case_texts(8)
        );
        let counted = check(
            &with_upstream_txn(&[1, 2, 3], Some(OpKind::Fail)),
            Claim::ExactlyOnce,
        );
        assert_eq!(counted.forbidden, vec![Anomaly::AggregateOverCount]);
        let text = &counted.anomalies[&Anomaly::AggregateOverCount][0].text;
        assert!(text.contains("1 inputs of aborted transactions"), "{text}");
        // A committed transaction's input is data like a plain producer's.
        let committed = check(
            &with_upstream_txn(&[1, 2], Some(OpKind::Ok)),
            Claim::ExactlyOnce,
        );
        assert_eq!(committed.forbidden, vec![Anomaly::AggregateUnderCount]);
    }

    #[test]
    fn an_undecided_input_may_count_or_not() {
        for counts in [&[1, 2][..], &[1, 2, 3]] {
            let r = check(&with_upstream_txn(counts, None), Claim::ExactlyOnce);
            assert_eq!(
                r.validity,
                Validity::Valid,
                "{counts:?}: {:?}",
                r.case_texts(8)
            );
        }
        let r = check(&with_upstream_txn(&[1], None), Claim::ExactlyOnce);
        assert_eq!(r.forbidden, vec![Anomaly::AggregateUnderCount]);
    }

    #[test]
    fn input_past_the_committed_offset_is_not_expected() {
        let r = check(&history(2, &[1, 2]), Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
    }
}

//! The Streams checker of the topologies other than the count (`[streams] topology`,
//! `streams::TopologyKind`), after Kafka's own `EosTestDriver`: once every transaction
//! finished, read the output read_committed, recompute from the input up to the committed
//! offsets what the topology must have written, and report what is missing, doubled or
//! wrong.
//!
//! # Inputs (ops of process `final`)
//! - `StreamsTopology`: the family (`filter-map-values`, `aggregate-ids` or
//!   `stream-table-join`); without it the
//!   history is the count's and this checker finds nothing.
//! - `StreamsInput` per input partition: each input record's id, key and event time.
//! - `CommittedOffsets` of the application's group: an input record below its partition's
//!   committed offset was consumed; one without a committed offset counts as not.
//! - `StreamsRecords` per output partition: keys and values as text, read_committed.
//! - `StreamsTable` per table partition (`stream-table-join` only): each update's version,
//!   key and offset, read_committed.
//!
//! # Analyses
//! `filter-map-values` (`stream.filter(id % 3 != 0).mapValues(v + "," + id²).to(out)`,
//! `streams::stateless`):
//! 1. [`kept_input_lost_cases`] (`sink-lost`): a consumed input the filter keeps is absent.
//! 2. [`kept_input_duplicate_cases`] (`sink-duplicate`): an input id is in the output more
//!    than once (an at_least_once replay; exactly_once_v2 aborts the first copy).
//! 3. [`unexpected_output_cases`] (`unexpected-output`): an output record that no input
//!    explains as the topology maps it: an id the filter drops, an unknown id, another key
//!    or another value than the mapping's.
//!
//! `aggregate-ids` (`groupByKey().aggregate(next id of the task's sequence)`,
//! `streams::ids`):
//! 4. [`id_reassigned_cases`] (`id-reassigned`): a key with two ids in the output.
//! 5. [`id_reused_cases`] (`id-reused`): one id given to two keys.
//! 6. [`missing_id_cases`] (`missing-aggregate`): a consumed key without any id.
//! 7. [`extra_id_cases`] (`extra-aggregate`): an id for a key with no consumed input.
//! 8. [`unexpected_output_cases`] (`unexpected-output`): a value that is not an id.
//!
//! `stream-table-join` (`stream.join(table).to(out)`, `streams::join`): the analyses of
//! [`super::streams_join`], over the table topic's `streams-table` ops as well.
//!
//! Every topology, behind a transactional upstream (`[workload] "transactional.id"`):
//! 9. [`aborted_input_output_cases`] (`aborted-in-sink`): output written for input of an
//!    aborted transaction ([`Analysis::fate`]), read read_uncommitted: a mapped or joined
//!    record of an aborted input id, or an id for a key whose only consumed input
//!    aborted. The analyses above expect only input that is data for certain (a plain
//!    producer's or a committed transaction's); input of an undecided transaction is
//!    neither expected nor forbidden.

use super::analysis::{Analysis, TxnFate};
use super::{AnalysisChecker, Anomaly, Case, CheckOptions, CheckResult};
use crate::history::{History, RecordRef, StreamsInputRecord, StreamsRecord, Value};
use crate::streams::stateless::{mapped_value, output_id, passes_filter};
use crate::streams::TopologyKind;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};

/// One output record with where it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Output partition.
    pub tp: TopicPartition,
    /// The record.
    pub record: StreamsRecord,
    /// Index of the `streams-records` op that holds it.
    pub op: usize,
}

/// The facts the analyses read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsAnalysis {
    /// The topology family, `None` when the history is not of one (the count's).
    pub topology: Option<TopologyKind>,
    /// Every input record by id, with whether it was consumed (below the committed offset).
    pub inputs: BTreeMap<u64, (StreamsInputRecord, bool)>,
    /// Every output record, in partition then offset order.
    pub outputs: Vec<Output>,
    /// `stream-table-join`: every table update read read_committed, by version, with its
    /// partition.
    pub table: BTreeMap<u64, (TopicPartition, StreamsInputRecord)>,
    /// The fate of each input id written in a transaction ([`Analysis::fate`]); ids absent
    /// are a plain producer's.
    pub fates: BTreeMap<u64, TxnFate>,
}

impl RecordsAnalysis {
    /// Gathers the facts of `history`, whose transactions `analysis` knows.
    pub fn from_history(history: &History, analysis: &Analysis) -> Self {
        let mut a = Self::default();
        let mut committed: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
        let mut inputs = Vec::new();
        for op in &history.ops {
            match &op.value {
                Value::StreamsTopology { topology } => {
                    a.topology = [
                        TopologyKind::FilterMapValues,
                        TopologyKind::AggregateIds,
                        TopologyKind::StreamTableJoin,
                    ]
                    .into_iter()
                    .find(|t| t.name() == topology);
                }
                Value::CommittedOffsets { offsets } if op.process == "final" => {
                    committed.extend(offsets.iter().cloned());
                }
                Value::StreamsInput { tp, records } => {
                    inputs.extend(records.iter().map(|r| (tp.clone(), r.clone())));
                }
                Value::StreamsTable { tp, records } => {
                    let updates = records.iter().map(|r| (r.id, (tp.clone(), r.clone())));
                    a.table.extend(updates);
                }
                Value::StreamsRecords { tp, records } => {
                    a.outputs.extend(records.iter().map(|r| Output {
                        tp: tp.clone(),
                        record: r.clone(),
                        op: op.index,
                    }));
                }
                _ => {}
            }
        }
        for (tp, r) in inputs {
            let consumed = r.offset < committed.get(&tp).copied().unwrap_or(0);
            let logged = RecordRef {
                id: r.id,
                key: None,
                tp,
                offset: r.offset,
            };
            match analysis.fate(&logged) {
                TxnFate::NotTransactional => {}
                fate => {
                    a.fates.insert(r.id, fate);
                }
            }
            a.inputs.insert(r.id, (r, consumed));
        }
        a
    }

    /// The fate of input id `id`'s transaction.
    pub(super) fn fate(&self, id: u64) -> TxnFate {
        self.fates
            .get(&id)
            .copied()
            .unwrap_or(TxnFate::NotTransactional)
    }

    /// The consumed inputs, by id.
    pub(super) fn consumed(&self) -> impl Iterator<Item = &StreamsInputRecord> {
        self.inputs.values().filter(|(_, c)| *c).map(|(r, _)| r)
    }

    /// The consumed inputs that are data for certain: a plain producer's or a committed
    /// transaction's.
    pub(super) fn consumed_data(&self) -> impl Iterator<Item = &StreamsInputRecord> {
        let data = |r: &&StreamsInputRecord| {
            matches!(
                self.fate(r.id),
                TxnFate::NotTransactional | TxnFate::Committed
            )
        };
        self.consumed().filter(data)
    }

    /// The output records of input id `id` (its value's first field).
    pub(super) fn outputs_of_id(&self) -> BTreeMap<u64, Vec<&Output>> {
        let mut by_id: BTreeMap<u64, Vec<&Output>> = BTreeMap::new();
        for o in &self.outputs {
            if let Some(id) = output_id(&o.record.value) {
                by_id.entry(id).or_default().push(o);
            }
        }
        by_id
    }
}

/// A case over output records `outputs` (the first one's partition), naming `ids`.
pub(super) fn case(ids: Vec<u64>, outputs: &[&Output], text: String) -> Case {
    let ops: BTreeSet<usize> = outputs.iter().map(|o| o.op).collect();
    Case {
        ids,
        tp: outputs.first().map(|o| o.tp.clone()),
        offsets: outputs.iter().map(|o| o.record.offset).collect(),
        ops: ops.into_iter().collect(),
        text,
    }
}

/// `filter-map-values`: consumed inputs the filter keeps that are absent from the output.
pub fn kept_input_lost_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let by_id = a.outputs_of_id();
    a.consumed_data()
        .filter(|r| passes_filter(&format!("{},{}", r.id, r.timestamp_ms)))
        .filter(|r| !by_id.contains_key(&r.id))
        .map(|r| {
            let text = format!(
                "id {} (key {}, input offset {}) passes the filter, consumed, not in the output",
                r.id, r.key, r.offset
            );
            case(vec![r.id], &[], text)
        })
        .collect()
}

/// `filter-map-values`: input ids in the output more than once.
pub fn kept_input_duplicate_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let mut cases: Vec<Case> = (a.outputs_of_id().into_iter())
        .filter(|(id, outs)| outs.len() > 1 && a.inputs.contains_key(id))
        .map(|(id, outs)| {
            let text = format!("id {id} is in the output {} times", outs.len());
            case(vec![id], &outs, text)
        })
        .collect();
    cases.sort_by_key(|c| std::cmp::Reverse(c.offsets.len()));
    cases
}

/// Output records no input explains as the topology writes them. `filter-map-values`: an
/// id that does not parse or is no input's, an id the filter drops, a key other than the
/// input's, a value other than `mapped_value(id, timestamp_ms)`. `aggregate-ids`: a value
/// that is not a decimal id.
pub fn unexpected_output_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let why = |o: &Output| -> Option<String> {
        let value = &o.record.value;
        if a.topology == Some(TopologyKind::AggregateIds) {
            return value.parse::<u64>().is_err().then(|| "is not an id".into());
        }
        let Some((input, _)) = output_id(value).and_then(|id| a.inputs.get(&id)) else {
            return Some("names no input id".into());
        };
        let (id, ts) = (input.id, input.timestamp_ms);
        if !passes_filter(&format!("{id},{ts}")) {
            return Some(format!("is input id {id}, which the filter drops"));
        }
        if o.record.key != input.key {
            return Some(format!(
                "has key {}, the input's is {}",
                o.record.key, input.key
            ));
        }
        let mapped = mapped_value(id, ts);
        (*value != mapped).then(|| format!("is not the mapping of input id {id}: {mapped}"))
    };
    (a.outputs.iter())
        .filter_map(|o| {
            let reason = why(o)?;
            let text = format!(
                "{}@{}: {} -> {} {reason}",
                o.tp, o.record.offset, o.record.key, o.record.value
            );
            let ids = output_id(&o.record.value).into_iter().collect();
            Some(case(ids, &[o], text))
        })
        .collect()
}

/// `aggregate-ids`: each key's output records by id, and each id's by key.
type IdsByKey<'a> = BTreeMap<&'a str, BTreeMap<u64, Vec<&'a Output>>>;

fn ids_by_key(a: &RecordsAnalysis) -> IdsByKey<'_> {
    let mut map: IdsByKey<'_> = BTreeMap::new();
    for o in &a.outputs {
        if let Ok(id) = o.record.value.parse::<u64>() {
            let ids = map.entry(o.record.key.as_str()).or_default();
            ids.entry(id).or_default().push(o);
        }
    }
    map
}

/// `aggregate-ids`: keys whose output records carry more than one id (the aggregate of a
/// key changed: its first id was lost from the store and a replay assigned another).
pub fn id_reassigned_cases(a: &RecordsAnalysis) -> Vec<Case> {
    (ids_by_key(a).into_iter())
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(key, ids)| {
            let outs: Vec<&Output> = ids.values().flatten().copied().collect();
            let text = format!(
                "key {key} was given ids {:?}",
                ids.keys().collect::<Vec<_>>()
            );
            case(ids.keys().copied().collect(), &outs, text)
        })
        .collect()
}

/// `aggregate-ids`: ids given to more than one key (a restored sequence behind an id
/// already handed out, which hands it out again).
pub fn id_reused_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let mut by_id: BTreeMap<u64, BTreeMap<&str, Vec<&Output>>> = BTreeMap::new();
    for (key, ids) in ids_by_key(a) {
        for (id, outs) in ids {
            by_id.entry(id).or_default().insert(key, outs);
        }
    }
    (by_id.into_iter())
        .filter(|(_, keys)| keys.len() > 1)
        .map(|(id, keys)| {
            let outs: Vec<&Output> = keys.values().flatten().copied().collect();
            let text = format!(
                "id {id} was given to keys {:?}",
                keys.keys().collect::<Vec<_>>()
            );
            case(vec![id], &outs, text)
        })
        .collect()
}

/// `aggregate-ids`: keys with consumed input that is data and no id in the output.
pub fn missing_id_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let given = ids_by_key(a);
    let keys: BTreeSet<&str> = a.consumed_data().map(|r| r.key.as_str()).collect();
    (keys.into_iter())
        .filter(|k| !given.contains_key(k))
        .map(|k| case(Vec::new(), &[], format!("key {k}: consumed input, no id")))
        .collect()
}

/// `aggregate-ids`: output keys with no consumed input at all (a key whose only consumed
/// input aborted is [`aborted_input_output_cases`]'s).
pub fn extra_id_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let keys: BTreeSet<&str> = a.consumed().map(|r| r.key.as_str()).collect();
    (ids_by_key(a).into_iter())
        .filter(|(k, _)| !keys.contains(k))
        .map(|(k, ids)| {
            let outs: Vec<&Output> = ids.values().flatten().copied().collect();
            case(
                Vec::new(),
                &outs,
                format!("key {k}: an id without consumed input"),
            )
        })
        .collect()
}

/// Output written for input of an aborted transaction: under `aggregate-ids` an id for a
/// key whose consumed inputs all aborted; under the other topologies a record whose input
/// id (the value's first field) aborted.
pub fn aborted_input_output_cases(a: &RecordsAnalysis) -> Vec<Case> {
    let aborted = |id: u64| a.fate(id) == TxnFate::Aborted;
    if a.topology == Some(TopologyKind::AggregateIds) {
        let mut inputs: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for r in a.consumed() {
            inputs.entry(r.key.as_str()).or_default().push(r.id);
        }
        return (ids_by_key(a).into_iter())
            .filter_map(|(key, ids)| {
                let consumed = inputs.get(key)?;
                if !consumed.iter().all(|&id| aborted(id)) {
                    return None;
                }
                let outs: Vec<&Output> = ids.values().flatten().copied().collect();
                let text = format!(
                    "key {key} was given an id, but its only consumed inputs {consumed:?} are \
                     of aborted transactions"
                );
                Some(case(consumed.clone(), &outs, text))
            })
            .collect();
    }
    (a.outputs_of_id().into_iter())
        .filter(|(id, _)| aborted(*id))
        .map(|(id, outs)| {
            let text = format!(
                "input id {id}, of an aborted transaction, is in the output {} time(s), \
                 first at {}@{}",
                outs.len(),
                outs[0].tp,
                outs[0].record.offset
            );
            case(vec![id], &outs, text)
        })
        .collect()
}

/// The records checker; finds nothing in a history without `streams-topology`.
pub struct StreamsRecordsChecker;

impl AnalysisChecker for StreamsRecordsChecker {
    fn name(&self) -> &'static str {
        "streams-records"
    }

    fn check_analysis(
        &self,
        history: &History,
        options: &CheckOptions,
        analysis: &Analysis,
    ) -> CheckResult {
        let a = RecordsAnalysis::from_history(history, analysis);
        let mut found = match a.topology {
            None | Some(TopologyKind::Count) => Vec::new(),
            Some(TopologyKind::FilterMapValues) => vec![
                (Anomaly::SinkLost, kept_input_lost_cases(&a)),
                (Anomaly::SinkDuplicate, kept_input_duplicate_cases(&a)),
                (Anomaly::UnexpectedOutput, unexpected_output_cases(&a)),
            ],
            Some(TopologyKind::StreamTableJoin) => super::streams_join::cases(&a),
            Some(TopologyKind::AggregateIds) => vec![
                (Anomaly::IdReassigned, id_reassigned_cases(&a)),
                (Anomaly::IdReused, id_reused_cases(&a)),
                (Anomaly::MissingAggregate, missing_id_cases(&a)),
                (Anomaly::ExtraAggregate, extra_id_cases(&a)),
                (Anomaly::UnexpectedOutput, unexpected_output_cases(&a)),
            ],
        };
        if a.topology.is_some_and(|t| t != TopologyKind::Count) {
            found.push((Anomaly::AbortedInSink, aborted_input_output_cases(&a)));
        }
        let mut counts = BTreeMap::new();
        if a.topology.is_some() {
            let consumed = a.consumed().count() as u64;
            counts.insert("streams-consumed-inputs".to_string(), consumed);
            counts.insert("streams-output-records".into(), a.outputs.len() as u64);
        }
        CheckResult::from_cases(found, counts, options)
    }
}

#[cfg(test)]
mod tests {
    //! One test per anomaly with a literal history, and valid histories beside them.
    use super::*;
    use crate::checker::test_support::streams_records_history as history;
    use crate::checker::{Checker, Claim, Validity};
    use crate::history::OpKind;

    fn check(h: &History, claim: Claim) -> CheckResult {
        StreamsRecordsChecker.check(h, &CheckOptions::for_claim(claim))
    }

    const INPUTS: [(u64, &str); 3] = [(1, "k1"), (2, "k2"), (3, "k0")];

    #[test]
    fn kept_records_once_and_mapped_are_valid_under_exactly_once() {
        let h = history(
            "filter-map-values",
            3,
            &INPUTS,
            &[("k1", "1,100,1"), ("k2", "2,200,4")],
        );
        let r = check(&h, Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
        assert_eq!(r.counts["streams-output-records"], 2);
    }

    #[test]
    fn a_consumed_kept_record_absent_is_sink_lost_and_past_the_offsets_is_not() {
        // Id 2 passes the filter and its offset (1) is below the committed offset 3.
        let h = history("filter-map-values", 3, &INPUTS, &[("k1", "1,100,1")]);
        assert_eq!(
            check(&h, Claim::AtLeastOnce).forbidden,
            vec![Anomaly::SinkLost]
        );
        let h = history("filter-map-values", 1, &INPUTS, &[("k1", "1,100,1")]);
        assert_eq!(check(&h, Claim::ExactlyOnce).validity, Validity::Valid);
    }

    #[test]
    fn a_kept_record_twice_is_sink_duplicate_allowed_at_least_once() {
        // An at_least_once replay: id 1 sent, not committed, sent again by the new owner.
        let out = [("k1", "1,100,1"), ("k2", "2,200,4"), ("k1", "1,100,1")];
        let h = history("filter-map-values", 3, &INPUTS, &out);
        assert_eq!(
            check(&h, Claim::ExactlyOnce).forbidden,
            vec![Anomaly::SinkDuplicate]
        );
        assert_eq!(check(&h, Claim::AtLeastOnce).validity, Validity::Valid);
    }

    #[test]
    fn a_dropped_record_or_a_wrong_mapping_is_unexpected_output_under_every_claim() {
        let dropped = [("k1", "1,100,1"), ("k2", "2,200,4"), ("k0", "3,300,9")];
        let unmapped = [("k1", "1,100,2"), ("k2", "2,200,4")];
        let rekeyed = [("k9", "1,100,1"), ("k2", "2,200,4")];
        for out in [&dropped[..], &unmapped, &rekeyed] {
            let h = history("filter-map-values", 3, &INPUTS, out);
            let r = check(&h, Claim::AtMostOnce);
            assert_eq!(r.forbidden, vec![Anomaly::UnexpectedOutput], "{out:?}");
        }
    }

    const KEYS: [(u64, &str); 3] = [(1, "k0"), (2, "k1"), (3, "k0")];

    #[test]
    fn one_id_per_key_and_one_key_per_id_is_valid() {
        let h = history(
            "aggregate-ids",
            3,
            &KEYS,
            &[("k0", "0"), ("k1", "3"), ("k0", "0")],
        );
        let r = check(&h, Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
    }

    #[test]
    fn a_key_with_two_ids_is_id_reassigned_forbidden_under_exactly_once() {
        // The changelog kept the sequence past k0's id 0 but not k0: the replay gave it 6.
        let h = history(
            "aggregate-ids",
            3,
            &KEYS,
            &[("k0", "0"), ("k1", "3"), ("k0", "6")],
        );
        assert_eq!(
            check(&h, Claim::ExactlyOnce).forbidden,
            vec![Anomaly::IdReassigned]
        );
        let alo = check(&h, Claim::AtLeastOnce);
        assert_eq!(alo.validity, Validity::Valid);
        assert!(alo.anomalies.contains_key(&Anomaly::IdReassigned));
    }

    #[test]
    fn an_id_of_two_keys_is_id_reused() {
        // The changelog kept k0's id 0 but not the sequence past it: k1 got 0 again.
        let h = history("aggregate-ids", 3, &KEYS, &[("k0", "0"), ("k1", "0")]);
        assert_eq!(
            check(&h, Claim::ExactlyOnce).forbidden,
            vec![Anomaly::IdReused]
        );
    }

    #[test]
    fn keys_without_ids_and_ids_without_keys_are_missing_and_extra_aggregates() {
        let h = history("aggregate-ids", 3, &KEYS, &[("k0", "0"), ("k9", "3")]);
        let r = check(&h, Claim::AtLeastOnce);
        assert_eq!(
            r.forbidden,
            vec![Anomaly::MissingAggregate, Anomaly::ExtraAggregate]
        );
        let h = history("aggregate-ids", 3, &KEYS, &[("k0", "0"), ("k1", "x")]);
        let r = check(&h, Claim::AtMostOnce);
        assert!(r.forbidden.contains(&Anomaly::UnexpectedOutput));
    }

    /// `h` with input id `id` (at `input-0`@`offset`) sent by an upstream transaction that
    /// aborted.
    fn behind_aborted_txn(h: History, id: u64, offset: Offset) -> History {
        let txn = Value::Txn {
            id: 0,
            transactional_id: "upstream".into(),
            sends: vec![RecordRef {
                id,
                key: None,
                tp: TopicPartition::new("input", 0),
                offset,
            }],
            offsets: Vec::new(),
        };
        let mut ops = vec![
            ("producer-0", OpKind::Invoke, txn.clone()),
            ("producer-0", OpKind::Fail, txn),
        ];
        ops.extend((h.ops.iter()).map(|op| (op.process.as_str(), op.kind, op.value.clone())));
        crate::checker::test_support::history(ops)
    }

    #[test]
    fn output_of_an_aborted_input_is_aborted_in_sink_and_its_absence_no_loss() {
        // Id 2 (k2, offset 1) passes the filter but its transaction aborted.
        let skipped = history("filter-map-values", 3, &INPUTS, &[("k1", "1,100,1")]);
        let r = check(&behind_aborted_txn(skipped, 2, 1), Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
        let out = [("k1", "1,100,1"), ("k2", "2,200,4")];
        let mapped = history("filter-map-values", 3, &INPUTS, &out);
        let r = check(&behind_aborted_txn(mapped, 2, 1), Claim::AtLeastOnce);
        assert_eq!(r.forbidden, vec![Anomaly::AbortedInSink]);
        // aggregate-ids: k1's only input (id 2) aborted, yet k1 got an id; k0 is fine.
        let out = [("k0", "0"), ("k1", "1")];
        let ids = history("aggregate-ids", 3, &KEYS, &out);
        let r = check(&behind_aborted_txn(ids, 2, 1), Claim::AtLeastOnce);
        assert_eq!(r.forbidden, vec![Anomaly::AbortedInSink]);
        let ids = history("aggregate-ids", 3, &KEYS, &[("k0", "0")]);
        let r = check(&behind_aborted_txn(ids, 2, 1), Claim::ExactlyOnce);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(8));
    }

    #[test]
    fn a_count_history_is_left_to_the_count_checker() {
        let h = crate::checker::test_support::streams_history(3, &[1]);
        let r = check(&h, Claim::ExactlyOnce);
        assert!(r.anomalies.is_empty() && r.counts.is_empty());
    }
}

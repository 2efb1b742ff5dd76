//! The change-data checker: the final table must equal every change event applied once,
//! in per-key order; readers may have seen rows go back to older versions on the way.
//!
//! # What is inferred, and from which ops
//! - The reference: the final `source-log` of each partition, in offset order, without
//!   the records the final `dlq-state` holds (matched by id), each interpreted as the
//!   connector's configuration (`connector-config`) says: `value.converter` and its
//!   `schemas.enable`, `pk.fields`, `col.names`, `delete.enabled`, `truncate.enabled`.
//!   `c`, `r` and flattened rows put the row at its key; `u` removes `before`'s key and
//!   puts `after` (a key change); `d` removes `before`'s key; a tombstone removes the
//!   record key's row when deletes are enabled; `t` empties the table when truncates are
//!   enabled. The reference is the intended effect, whatever `writeMode` does.
//! - How much must be applied: everything below the group's final committed offset. A
//!   partition whose committed offset reached its end must be applied whole; one that did
//!   not (a FAILED task, a stall) may stop at any later record, but must then equal that
//!   prefix exactly: nothing skipped, nothing applied twice out of order.
//! - `cdc-final-state`: per partition (keys are partition-local), no admissible prefix
//!   equals the final `table-state` restricted to the partition's keys; or a row whose
//!   key no event names.
//! - `cdc-duplicate-row`: one key held by several rows (a table without a primary key).
//! - `cdc-regression`: two `table-read`s of the same key where the later shows an older
//!   version (the version of a row = the last event whose `after` equals it).
//! - `cdc-skipped`: with a DLQ configured, a record the reference cannot interpret (not
//!   JSON, an unknown op) that is not in the DLQ: it was dropped silently.
//! - `cdc-dropped-field` (informational): a field of an applied event's row (`after`, or a
//!   flattened row) that is not a target column (`col.names`, else the final table's
//!   columns): schema drift the sink absorbed by dropping the field's values. One case per
//!   field, with the records that carried it. Forbid it (`check.forbidden`) to hold a
//!   pipeline to "no column silently lost".
//! - Behind a transactional upstream ([`Analysis::fate`] of each source record): an
//!   aborted transaction's events are not in the reference; an undecided one's may be,
//!   taken all together or none (the table may match either reference; a finer split is
//!   not tried). A table that matches no admissible reference but does match the one with
//!   the aborted events applied is `aborted-in-sink` (the sink read them
//!   read_uncommitted), not `cdc-final-state`.

use super::analysis::{Analysis, TxnFate};
use super::{Anomaly, Case, CheckOptions, CheckResult, Checker, SharedAnalysis, Validity};
use crate::connect::config::ConnectorConfig;
use crate::connect::converter::Converter;
use crate::connect::debezium::{key_row, parse_change, Change, JsonRow};
use crate::history::{History, OpKind, RecordRef, SourceRecord, Value};
use eosim_sim::kafka::{Offset, TopicPartition};
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};

/// Checks change-data pipelines (histories with a `connector-config`); a no-op elsewhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct CdcChecker;

/// A table as rows keyed by canonical primary-key text.
type Rows = BTreeMap<String, JsonRow>;

/// What the checker knows about a change-data history.
#[derive(Debug, Default)]
pub struct CdcAnalysis {
    /// The connector configuration.
    pub config: Option<ConnectorConfig>,
    /// `pk.fields`.
    pub pk: Vec<String>,
    /// Source logs by partition, with the op index.
    pub sources: BTreeMap<TopicPartition, (usize, Vec<SourceRecord>)>,
    /// Ids in the DLQ.
    pub dlq_ids: BTreeSet<u64>,
    /// Whether a DLQ state was recorded.
    pub has_dlq: bool,
    /// Final table: op, columns, rows.
    pub table: Option<(usize, Vec<String>, Vec<Vec<Json>>)>,
    /// Reads: op, columns, rows.
    pub reads: Vec<(usize, Vec<String>, Vec<Vec<Json>>)>,
    /// Final committed offsets.
    pub committed: BTreeMap<TopicPartition, Offset>,
    /// The transaction fate of each source record that a transaction wrote, by position.
    pub fates: BTreeMap<(TopicPartition, Offset), TxnFate>,
    /// Each source record's change as the connector's converters and the sink read it, by
    /// (record id, offset): parsed once, read by every check.
    changes: BTreeMap<(u64, Offset), Result<Change, String>>,
    /// The target's columns ([`CdcAnalysis::target_columns`]), worked out once: every
    /// projected row reads them.
    columns: Vec<String>,
}

impl CdcAnalysis {
    /// Gathers the change-data facts of `history`.
    pub fn new(history: &History) -> Self {
        let mut a = CdcAnalysis::default();
        for op in history.ops.iter().filter(|op| op.kind == OpKind::Ok) {
            match &op.value {
                Value::ConnectorConfig { config, .. } => {
                    a.config = crate::sinks::jdbc::parse_connector(config).ok();
                    a.pk = split(config.get("pk.fields"));
                }
                Value::SourceLog { tp, records } => {
                    a.sources.insert(tp.clone(), (op.index, records.clone()));
                }
                Value::DlqState { records, .. } => {
                    a.has_dlq = true;
                    a.dlq_ids.extend(records.iter().map(|r| r.id));
                }
                Value::TableState { columns, rows, .. } => {
                    a.table = Some((op.index, columns.clone(), rows.clone()));
                }
                Value::TableRead { columns, rows, .. } => {
                    a.reads.push((op.index, columns.clone(), rows.clone()));
                }
                Value::CommittedOffsets { offsets } => {
                    a.committed = offsets.iter().cloned().collect();
                }
                _ => {}
            }
        }
        let changes = a
            .sources
            .values()
            .flat_map(|(_, records)| records)
            .map(|r| ((r.id, r.offset), a.parse(r)))
            .collect();
        a.changes = changes;
        a.columns = a.target_columns();
        a
    }

    /// Adds the transaction fate of every source record, from `analysis`.
    pub fn with_fates(mut self, analysis: &Analysis) -> Self {
        for (tp, (_, records)) in &self.sources {
            for r in records {
                let at = RecordRef {
                    id: r.id,
                    key: r.key.clone(),
                    tp: tp.clone(),
                    offset: r.offset,
                };
                let fate = analysis.fate(&at);
                if fate != TxnFate::NotTransactional {
                    self.fates.insert((tp.clone(), r.offset), fate);
                }
            }
        }
        self
    }

    /// Whether source record `r` of `tp` is in a reference that takes undecided
    /// transactions' events when `undecided`, and aborted ones' when `aborted`.
    fn admitted(
        &self,
        tp: &TopicPartition,
        r: &SourceRecord,
        undecided: bool,
        aborted: bool,
    ) -> bool {
        match self.fates.get(&(tp.clone(), r.offset)) {
            None | Some(TxnFate::NotTransactional | TxnFate::Committed) => true,
            Some(TxnFate::Undecided) => undecided,
            Some(TxnFate::Aborted) => aborted,
        }
    }

    fn flag(&self, key: &str) -> bool {
        self.config
            .as_ref()
            .and_then(|c| c.raw.get(key))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    /// `col.names`, else the final table's columns.
    fn target_columns(&self) -> Vec<String> {
        let names = split(self.config.as_ref().and_then(|c| c.raw.get("col.names")));
        if names.is_empty() {
            self.table.as_ref().map(|t| t.1.clone()).unwrap_or_default()
        } else {
            names
        }
    }

    /// Source record `r`'s change (parsed once by [`CdcAnalysis::new`]), or why it cannot be
    /// applied.
    fn change(&self, r: &SourceRecord) -> Result<&Change, &str> {
        match self.changes.get(&(r.id, r.offset)) {
            Some(Ok(change)) => Ok(change),
            Some(Err(e)) => Err(e),
            None => Err("not a source record of the history"),
        }
    }

    /// Interprets one source record through the connector's converters.
    fn parse(&self, r: &SourceRecord) -> Result<Change, String> {
        let config = self.config.as_ref().ok_or("no connector configuration")?;
        let key_conv = Converter {
            class: config.key_converter.clone(),
            schemas_enable: config.key_schemas_enable,
        };
        let value_conv = Converter {
            class: config.value_converter.clone(),
            schemas_enable: config.value_schemas_enable,
        };
        let bytes = |t: &Option<String>| t.as_ref().map(|t| bytes::Bytes::from(t.clone()));
        let key = key_conv.to_connect_data(bytes(&r.key).as_ref())?;
        let value = value_conv.to_connect_data(bytes(&r.value).as_ref())?;
        parse_change(key.as_ref(), value.as_ref())
    }

    /// Applies one change to `rows`.
    fn apply(&self, rows: &mut Rows, change: &Change) -> Result<(), String> {
        let put = |rows: &mut Rows, after: &JsonRow| -> Result<(), String> {
            let key = canonical_key(after, &self.pk).ok_or("a row without its key")?;
            rows.insert(key, self.project(after));
            Ok(())
        };
        let remove = |rows: &mut Rows, before: &JsonRow| -> Result<(), String> {
            let key = canonical_key(before, &self.pk).ok_or("a delete without its key")?;
            rows.remove(&key);
            Ok(())
        };
        match change {
            Change::Create { after } | Change::Read { after } | Change::Row { row: after } => {
                put(rows, after)
            }
            Change::Update { before, after } => {
                if let Some(b) = before
                    .as_ref()
                    .filter(|b| canonical_key(b, &self.pk).is_some())
                {
                    remove(rows, b)?;
                }
                put(rows, after)
            }
            Change::Delete { before } => remove(rows, before),
            Change::Tombstone { key } if self.flag("delete.enabled") => {
                let row = key
                    .as_ref()
                    .and_then(|k| key_row(k, &self.pk))
                    .ok_or("a tombstone without a key")?;
                remove(rows, &row)
            }
            Change::Truncate if self.flag("truncate.enabled") => {
                rows.clear();
                Ok(())
            }
            Change::Tombstone { .. } | Change::Truncate => Ok(()),
        }
    }

    fn project(&self, row: &JsonRow) -> JsonRow {
        self.columns
            .iter()
            .map(|c| {
                let v = row.get(c).cloned().unwrap_or(Json::Null);
                (c.clone(), v)
            })
            .collect()
    }

    /// The records of `tp` the reference applies (not in the DLQ), in offset order.
    fn applied<'r>(&self, records: &'r [SourceRecord]) -> Vec<&'r SourceRecord> {
        let mut out: Vec<&SourceRecord> = records
            .iter()
            .filter(|r| !self.dlq_ids.contains(&r.id))
            .collect();
        out.sort_by_key(|r| r.offset);
        out
    }

    /// The final table as rows by key, plus keys held more than once.
    fn final_rows(&self) -> (Rows, Vec<String>) {
        let mut rows = Rows::new();
        let mut dups = Vec::new();
        let Some((_, columns, values)) = &self.table else {
            return (rows, dups);
        };
        for v in values {
            let row: JsonRow = columns.iter().cloned().zip(v.iter().cloned()).collect();
            let key = canonical_key(&row, &self.pk).unwrap_or_else(|| "[null]".into());
            if rows.insert(key.clone(), self.project(&row)).is_some() {
                dups.push(key);
            }
        }
        (rows, dups)
    }
}

fn split(v: Option<&String>) -> Vec<String> {
    v.map(|s| {
        s.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// The key's values as canonical text: integral strings become numbers, so `"1"` and `1`
/// name the same row.
fn canonical_key(row: &JsonRow, pk: &[String]) -> Option<String> {
    let mut values = Vec::new();
    for f in pk {
        let v = row.get(f)?;
        let v = match v {
            Json::Null => return None,
            Json::String(s) => s.parse::<i64>().map_or(v.clone(), Json::from),
            Json::Number(n)
                if n.as_f64().is_some_and(|f| f.fract() == 0.0) && n.as_i64().is_none() =>
            {
                Json::from(n.as_f64().unwrap_or_default() as i64)
            }
            _ => v.clone(),
        };
        values.push(v);
    }
    // The bytes `Display` prints, without its fmt machinery (a hot path).
    Some(serde_json::to_string(&Json::Array(values)).expect("JSON values serialize"))
}

/// Whether a stored value is what the event asked for (numbers within `real` rounding,
/// numeric text against numbers).
fn same_value(expected: &Json, actual: &Json) -> bool {
    let num = |v: &Json| match v {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match (expected, actual) {
        (Json::Number(_), _) | (_, Json::Number(_)) => match (num(expected), num(actual)) {
            (Some(a), Some(b)) => {
                a == b || (a - b).abs() <= 1e-6 * a.abs().max(1.0) || a as f32 == b as f32
            }
            _ => false,
        },
        (Json::String(a), Json::Object(_) | Json::Array(_)) => {
            serde_json::from_str::<Json>(a).is_ok_and(|p| &p == actual)
        }
        _ => expected == actual,
    }
}

fn same_row(expected: &JsonRow, actual: &JsonRow) -> bool {
    expected.len() == actual.len()
        && expected
            .iter()
            .all(|(k, v)| actual.get(k).is_some_and(|a| same_value(v, a)))
}

impl Checker for CdcChecker {
    fn name(&self) -> &'static str {
        "cdc"
    }

    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        self.check_shared(history, options, &SharedAnalysis::default())
    }

    fn check_shared(
        &self,
        history: &History,
        options: &CheckOptions,
        shared: &SharedAnalysis,
    ) -> CheckResult {
        let a = CdcAnalysis::new(history);
        if a.config.is_none() {
            return CheckResult::default();
        }
        let a = a.with_fates(shared.get(history, options));
        let (final_state, aborted) = final_state_cases(&a);
        let found = vec![
            (Anomaly::CdcFinalState, final_state),
            (Anomaly::AbortedInSink, aborted),
            (Anomaly::CdcDuplicateRow, cdc_duplicate_row_cases(&a)),
            (Anomaly::CdcRegression, cdc_regression_cases(&a)),
            (Anomaly::CdcSkipped, cdc_skipped_cases(&a)),
            (Anomaly::CdcDroppedField, cdc_dropped_field_cases(&a)),
        ];
        let mut counts = BTreeMap::new();
        let events: usize = a.sources.values().map(|(_, r)| r.len()).sum();
        counts.insert("cdc-events".to_string(), events as u64);
        counts.insert("cdc-dlq".to_string(), a.dlq_ids.len() as u64);
        counts.insert(
            "cdc-table-rows".to_string(),
            a.table.as_ref().map_or(0, |t| t.2.len()) as u64,
        );
        counts.insert("cdc-reads".to_string(), a.reads.len() as u64);
        let mut result = CheckResult::from_cases(found, counts, options);
        let missing = if a.table.is_none() {
            Some("no final TableState: the change-data claim cannot be decided")
        } else if a.pk.is_empty() {
            Some("no pk.fields: rows cannot be matched to keys")
        } else {
            None
        };
        if let Some(missing) = missing {
            result.validity = result.validity.merge(Validity::Unknown);
            result.error = Some(missing.to_string());
        }
        result
    }
}

/// `cdc-final-state` (see the module docs): per partition, the longest admissible prefix
/// whose reference equals the table on the partition's keys; rows no event names.
pub fn cdc_final_state_cases(a: &CdcAnalysis) -> Vec<Case> {
    final_state_cases(a).0
}

/// Whether some admissible prefix of `applied` (see the module docs) gives `actual`: the
/// whole of it when the committed offset reached `end`, else any prefix that covers every
/// record below `committed`. The reference is applied once, forward, and compared at each
/// admissible length (no copy of the rows per record).
fn matches_prefix(
    a: &CdcAnalysis,
    applied: &[&SourceRecord],
    end: Offset,
    committed: Offset,
    actual: &Rows,
) -> bool {
    let min_k = if committed >= end {
        applied.len()
    } else {
        applied.partition_point(|r| r.offset < committed)
    };
    let mut rows = Rows::new();
    for (k, r) in applied.iter().enumerate() {
        if k >= min_k && rows_equal(&rows, actual) {
            return true;
        }
        apply_record(a, &mut rows, r);
    }
    rows_equal(&rows, actual)
}

/// `aborted-in-sink` of change data: `tp`'s table matches its events only with the
/// aborted transactions' events applied.
fn aborted_case(tp: &TopicPartition, ops: Vec<usize>, aborted: Vec<&SourceRecord>) -> Case {
    Case {
        ids: aborted.iter().map(|r| r.id).collect(),
        tp: Some(tp.clone()),
        offsets: aborted.iter().map(|r| r.offset).collect(),
        ops,
        text: format!(
            "{tp}: the table holds the effect of {} event(s) of aborted transactions, \
             first {} at offset {}",
            aborted.len(),
            aborted[0].id,
            aborted[0].offset
        ),
    }
}

/// The `cdc-final-state` and the change-data `aborted-in-sink` cases.
fn final_state_cases(a: &CdcAnalysis) -> (Vec<Case>, Vec<Case>) {
    let Some((table_op, _, _)) = &a.table else {
        return (Vec::new(), Vec::new());
    };
    let (table, _) = a.final_rows();
    let (mut cases, mut aborted_cases) = (Vec::new(), Vec::new());
    let mut named: BTreeSet<String> = BTreeSet::new();
    for (tp, (op, records)) in &a.sources {
        let all = a.applied(records);
        let admitted = |undecided: bool, aborted: bool| -> Vec<&SourceRecord> {
            let kept = all.iter().filter(|r| a.admitted(tp, r, undecided, aborted));
            kept.copied().collect()
        };
        let keys = named_keys(a, &all);
        named.extend(keys.iter().cloned());
        let actual: Rows = table
            .iter()
            .filter(|(k, _)| keys.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let end = records.iter().map(|r| r.offset + 1).max().unwrap_or(0);
        let committed = a.committed.get(tp).copied().unwrap_or(0);
        let holds = |applied: &[&SourceRecord]| matches_prefix(a, applied, end, committed, &actual);
        let applied = admitted(false, false);
        if holds(&applied) || holds(&admitted(true, false)) {
            continue;
        }
        let aborted: Vec<&SourceRecord> = all
            .iter()
            .filter(|r| !a.admitted(tp, r, true, false))
            .copied()
            .collect();
        if !aborted.is_empty() && holds(&admitted(true, true)) {
            aborted_cases.push(aborted_case(tp, vec![*op, *table_op], aborted));
            continue;
        }
        let full = &reference_rows(a, &applied);
        cases.push(Case {
            ids: Vec::new(),
            tp: Some(tp.clone()),
            offsets: vec![committed],
            ops: vec![*op, *table_op],
            text: format!(
                "{tp}: table differs from the changes applied once up to any record at or \
                 past the committed offset {committed}: {}",
                diff_text(full, &actual)
            ),
        });
    }
    for key in table.keys().filter(|k| !named.contains(*k)) {
        cases.push(Case {
            ids: Vec::new(),
            tp: None,
            offsets: Vec::new(),
            ops: vec![*table_op],
            text: format!("row {key} is in the table but no change event names it"),
        });
    }
    (cases, aborted_cases)
}

/// Applies source record `r` to `rows` as the reference does; a record the reference
/// cannot interpret changes nothing.
fn apply_record(a: &CdcAnalysis, rows: &mut Rows, r: &SourceRecord) {
    if let Ok(change) = a.change(r) {
        let _ = a.apply(rows, change);
    }
}

/// The reference with every record of `applied` applied.
fn reference_rows(a: &CdcAnalysis, applied: &[&SourceRecord]) -> Rows {
    let mut rows = Rows::new();
    for r in applied {
        apply_record(a, &mut rows, r);
    }
    rows
}

/// Every key the records of `applied` name (a record the reference cannot interpret names
/// none).
fn named_keys(a: &CdcAnalysis, applied: &[&SourceRecord]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for change in applied.iter().filter_map(|r| a.change(r).ok()) {
        let mut name = |row: &JsonRow| keys.extend(canonical_key(row, &a.pk));
        match change {
            Change::Create { after } | Change::Read { after } | Change::Row { row: after } => {
                name(after)
            }
            Change::Update { before, after } => {
                before.iter().for_each(&mut name);
                name(after);
            }
            Change::Delete { before } => name(before),
            Change::Tombstone { key } => {
                if let Some(row) = key.as_ref().and_then(|k| key_row(k, &a.pk)) {
                    name(&row);
                }
            }
            Change::Truncate => {}
        }
    }
    keys
}

fn rows_equal(expected: &Rows, actual: &Rows) -> bool {
    expected.len() == actual.len()
        && expected
            .iter()
            .all(|(k, e)| actual.get(k).is_some_and(|x| same_row(e, x)))
}

fn diff_text(expected: &Rows, actual: &Rows) -> String {
    let mut parts = Vec::new();
    for (k, e) in expected {
        match actual.get(k) {
            None => parts.push(format!(
                "{k} missing (expected {})",
                Json::Object(e.clone())
            )),
            Some(x) if !same_row(e, x) => parts.push(format!(
                "{k} is {} (expected {})",
                Json::Object(x.clone()),
                Json::Object(e.clone())
            )),
            Some(_) => {}
        }
    }
    for (k, x) in actual.iter().filter(|(k, _)| !expected.contains_key(*k)) {
        parts.push(format!(
            "{k} = {} should not exist",
            Json::Object(x.clone())
        ));
    }
    let n = parts.len();
    parts.truncate(4);
    format!("{n} rows differ: {}", parts.join("; "))
}

/// `cdc-duplicate-row`: keys held by several rows of the final table.
pub fn cdc_duplicate_row_cases(a: &CdcAnalysis) -> Vec<Case> {
    let Some((op, _, _)) = &a.table else {
        return Vec::new();
    };
    let (_, dups) = a.final_rows();
    dups.into_iter()
        .map(|k| Case {
            ids: Vec::new(),
            tp: None,
            offsets: Vec::new(),
            ops: vec![*op],
            text: format!("key {k} is held by more than one row"),
        })
        .collect()
}

/// `cdc-regression`: a later read shows an older version of a key than an earlier read.
pub fn cdc_regression_cases(a: &CdcAnalysis) -> Vec<Case> {
    if a.reads.is_empty() {
        // No read to compare: the versions below would be built for nothing (every
        // applied record's projected row).
        return Vec::new();
    }
    let mut versions: BTreeMap<String, Vec<(usize, JsonRow)>> = BTreeMap::new();
    let mut index = 0usize;
    for (_, records) in a.sources.values() {
        for r in a.applied(records) {
            index += 1;
            let Ok(change) = a.change(r) else { continue };
            if let Change::Create { after }
            | Change::Read { after }
            | Change::Row { row: after }
            | Change::Update { after, .. } = change
            {
                if let Some(k) = canonical_key(after, &a.pk) {
                    versions
                        .entry(k)
                        .or_default()
                        .push((index, a.project(after)));
                }
            }
        }
    }
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut cases = Vec::new();
    for (op, columns, rows) in &a.reads {
        for v in rows {
            let row: JsonRow = a.project(&columns.iter().cloned().zip(v.iter().cloned()).collect());
            let Some(key) = canonical_key(&row, &a.pk) else {
                continue;
            };
            let Some(version) = versions.get(&key).and_then(|vs| {
                vs.iter()
                    .rev()
                    .find(|(_, r)| same_row(r, &row))
                    .map(|(i, _)| *i)
            }) else {
                continue;
            };
            if let Some((last, last_op)) = seen.get(&key) {
                if version < *last {
                    let text = format!(
                        "row {key} went back from the version of change #{last} to that of \
                         change #{version}"
                    );
                    let ops = vec![*last_op, *op];
                    cases.push(Case {
                        ids: Vec::new(),
                        tp: None,
                        offsets: Vec::new(),
                        ops,
                        text,
                    });
                }
            }
            seen.insert(key, (version, *op));
        }
    }
    cases
}

/// `cdc-skipped`: with a DLQ, a record the reference cannot interpret that is not in it.
pub fn cdc_skipped_cases(a: &CdcAnalysis) -> Vec<Case> {
    if !a.has_dlq {
        return Vec::new();
    }
    let mut cases = Vec::new();
    for (tp, (op, records)) in &a.sources {
        let end = a.committed.get(tp).copied().unwrap_or(0);
        for r in a.applied(records).iter().filter(|r| r.offset < end) {
            if let Err(e) = a.change(r) {
                let text = format!(
                    "record {} at {tp} offset {} ({e}) is below the committed offset but \
                     neither applied nor in the DLQ",
                    r.id, r.offset
                );
                let (ids, offsets) = (vec![r.id], vec![r.offset]);
                cases.push(Case {
                    ids,
                    tp: Some(tp.clone()),
                    offsets,
                    ops: vec![*op],
                    text,
                });
            }
        }
    }
    cases
}

/// `cdc-dropped-field`: per field that is not a target column, the applied records whose
/// row carried it.
pub fn cdc_dropped_field_cases(a: &CdcAnalysis) -> Vec<Case> {
    let columns: BTreeSet<String> = a.columns.iter().cloned().collect();
    if columns.is_empty() {
        return Vec::new();
    }
    // field -> (partition, offset, id) of each record carrying it, and the source op.
    let mut carried: BTreeMap<String, Vec<(TopicPartition, Offset, u64, usize)>> = BTreeMap::new();
    for (tp, (op, records)) in &a.sources {
        for r in a.applied(records) {
            let row = match a.change(r) {
                Ok(Change::Create { after } | Change::Read { after }) => after,
                Ok(Change::Update { after, .. }) => after,
                Ok(Change::Row { row }) => row,
                _ => continue,
            };
            for field in row.keys().filter(|f| !columns.contains(*f)) {
                let at = (tp.clone(), r.offset, r.id, *op);
                carried.entry(field.clone()).or_default().push(at);
            }
        }
    }
    let listed: Vec<&str> = columns.iter().map(String::as_str).collect();
    carried
        .into_iter()
        .map(|(field, at)| {
            let ids: Vec<u64> = at.iter().map(|a| a.2).collect();
            let text = format!(
                "field `{field}` of {} record(s) (ids {ids:?}) is not a column of the target \
                 ({}): its values were not stored",
                at.len(),
                listed.join(", ")
            );
            let ops: BTreeSet<usize> = at.iter().map(|a| a.3).collect();
            Case {
                ids,
                tp: at.first().map(|a| a.0.clone()),
                offsets: at.iter().map(|a| a.1).collect(),
                ops: ops.into_iter().collect(),
                text,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::test_support::{c, cdc_history, u};
    use crate::checker::Claim;
    use serde_json::json;

    /// [`cdc_history`] with an empty DLQ.
    fn history(
        values: &[String],
        reads: &[&[(i64, &str)]],
        table: &[(i64, &str)],
        committed: i64,
    ) -> History {
        cdc_history(values, reads, table, committed, &[])
    }

    fn check(h: &History) -> CheckResult {
        CdcChecker.check(h, &CheckOptions::for_claim(Claim::ExactlyOnce))
    }

    #[test]
    fn every_change_applied_once_in_order_is_valid() {
        let h = history(
            &[c(1, "a"), c(2, "b"), u(1, "a2")],
            &[],
            &[(1, "a2"), (2, "b")],
            3,
        );
        let r = check(&h);
        assert_eq!(r.validity, Validity::Valid, "{:?}", r.case_texts(4));
    }

    #[test]
    fn cdc_final_state_an_update_lost_leaves_the_old_version() {
        // The update of id 1 was committed as consumed (offset 3) but never applied.
        let h = history(
            &[c(1, "a"), c(2, "b"), u(1, "a2")],
            &[],
            &[(1, "a"), (2, "b")],
            3,
        );
        let r = check(&h);
        assert!(
            r.forbidden.contains(&Anomaly::CdcFinalState),
            "{:?}",
            r.case_texts(4)
        );
    }

    #[test]
    fn cdc_final_state_a_stopped_task_may_end_at_a_prefix_past_its_commit() {
        // Committed offset 1: the table may stop at any record from there on...
        let h = history(
            &[c(1, "a"), c(2, "b"), u(1, "a2")],
            &[],
            &[(1, "a"), (2, "b")],
            1,
        );
        assert_eq!(check(&h).validity, Validity::Valid);
        // ...but not skip one: id 2 missing while the update after it is applied.
        let h = history(&[c(1, "a"), c(2, "b"), u(1, "a2")], &[], &[(1, "a2")], 1);
        assert!(check(&h).forbidden.contains(&Anomaly::CdcFinalState));
    }

    #[test]
    fn cdc_dropped_field_names_a_drifted_field_and_its_records_without_breaking_the_claim() {
        // Schema drift: events 1 and 2 carry `email`, which col.names (id,v) lacks.
        let drifted = |op: &str, id: i64, v: &str| {
            let after = json!({"id": id, "v": v, "email": format!("{v}@x")});
            json!({"op": op, "before": {"id": id}, "after": after}).to_string()
        };
        let h = history(
            &[c(1, "a"), drifted("c", 2, "b"), drifted("u", 1, "a2")],
            &[],
            &[(1, "a2"), (2, "b")],
            3,
        );
        let r = check(&h);
        let cases = &r.anomalies[&Anomaly::CdcDroppedField];
        assert_eq!(cases.len(), 1, "one case per field: {cases:?}");
        assert_eq!(cases[0].ids, vec![1, 2]);
        assert!(cases[0].text.contains("`email`"), "{}", cases[0].text);
        assert_eq!(r.validity, Validity::Valid, "informational by default");
        // Without drift there is nothing to report.
        let h = history(&[c(1, "a")], &[], &[(1, "a")], 1);
        assert!(!check(&h).anomalies.contains_key(&Anomaly::CdcDroppedField));
    }

    #[test]
    fn cdc_duplicate_row_two_rows_of_one_key() {
        let h = history(&[c(1, "a")], &[], &[(1, "a"), (1, "a")], 1);
        assert!(check(&h).anomalies.contains_key(&Anomaly::CdcDuplicateRow));
    }

    #[test]
    fn cdc_regression_a_reader_sees_an_older_version_after_a_newer_one() {
        // A replay from an older committed offset re-applies `c(1,a)` after `u(1,a2)`:
        // readers see a2 then a, then a2 again. Reported, not forbidden.
        let reads: &[&[(i64, &str)]] = &[&[(1, "a2")], &[(1, "a")], &[(1, "a2")]];
        let h = history(&[c(1, "a"), u(1, "a2")], reads, &[(1, "a2")], 2);
        let r = check(&h);
        assert_eq!(r.anomalies[&Anomaly::CdcRegression].len(), 1);
        assert_eq!(r.validity, Validity::Valid);
        let forward: &[&[(i64, &str)]] = &[&[(1, "a")], &[(1, "a2")]];
        let h = history(&[c(1, "a"), u(1, "a2")], forward, &[(1, "a2")], 2);
        assert!(!check(&h).anomalies.contains_key(&Anomaly::CdcRegression));
    }

    #[test]
    fn cdc_skipped_a_poison_record_neither_applied_nor_in_the_dlq() {
        let h = history(
            &[c(1, "a"), "not json".into(), c(2, "b")],
            &[],
            &[(1, "a"), (2, "b")],
            3,
        );
        let r = check(&h);
        assert_eq!(r.anomalies[&Anomaly::CdcSkipped][0].ids, vec![1]);
        assert_eq!(r.validity, Validity::Invalid);
    }
}

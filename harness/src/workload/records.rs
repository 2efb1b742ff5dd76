//! Small conversions every pipeline shares: record bytes as text, the id a value carries,
//! a consumed record as the history names it, and the offsets to commit after a batch.

use crate::client::ConsumedRecord;
use crate::history::RecordRef;
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// Bytes as (lossy) UTF-8 text; `None` stays `None`.
pub fn text(bytes: &Option<Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// The id a record's value carries; `u64::MAX` for a value that is not one.
pub fn parse_id(value: &Option<Bytes>) -> u64 {
    text(value).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)
}

/// A consumed record as the history refers to it.
pub fn record_ref(r: &ConsumedRecord) -> RecordRef {
    RecordRef {
        id: parse_id(&r.value),
        key: text(&r.key),
        tp: r.tp.clone(),
        offset: r.offset,
    }
}

/// The next offset to read per partition after `records` (what a commit sends).
pub fn next_offsets(records: &[ConsumedRecord]) -> Vec<(TopicPartition, Offset)> {
    let mut next: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    for r in records {
        let entry = next.entry(r.tp.clone()).or_insert(r.offset + 1);
        *entry = (*entry).max(r.offset + 1);
    }
    next.into_iter().collect()
}

//! What the history calls a consumed record: its bytes as text, the id its value carries,
//! and the [`RecordRef`] naming it. Shared by the simulated workloads, the components run in
//! both worlds (`copier`) and the real tier's worker processes.

use super::RecordRef;
use crate::client::ConsumedRecord;
use bytes::Bytes;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// Bytes as (lossy) UTF-8 text; `None` stays `None`.
pub fn text(bytes: &Option<Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// The id a record's value carries (the value is the id in decimal); `u64::MAX` for a value
/// that is not one.
pub fn parse_id(value: &Option<Bytes>) -> u64 {
    text(value).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)
}

/// The header carrying a record's unique id where its value cannot (the change events of
/// `connect-jdbc`, a poison record among them: `scenario::cdc_events`).
pub const ID_HEADER: &str = "eosim.id";

/// The [`ID_HEADER`] header's value; `u64::MAX` without one.
pub fn id_of(headers: &[(String, Bytes)]) -> u64 {
    headers
        .iter()
        .find(|(k, _)| k == ID_HEADER)
        .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(u64::MAX)
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

/// Output records as sink rows, each named by where its id first is in the input
/// (`input`: id → partition and offset), or by its own position when the input does not
/// hold the id: the sink checker then compares the output with the input record by record.
pub fn named_by_input(
    records: &[RecordRef],
    input: &BTreeMap<u64, (TopicPartition, Offset)>,
) -> Vec<RecordRef> {
    records
        .iter()
        .map(|r| {
            let (tp, offset) = (input.get(&r.id).cloned()).unwrap_or((r.tp.clone(), r.offset));
            RecordRef {
                id: r.id,
                key: r.key.clone(),
                tp,
                offset,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::kafka::TopicPartition;

    #[test]
    fn the_id_header_names_the_event() {
        let headers = vec![(ID_HEADER.to_string(), Bytes::from("42"))];
        assert_eq!(id_of(&headers), 42);
        assert_eq!(id_of(&[]), u64::MAX);
    }

    #[test]
    fn a_record_is_named_by_the_id_its_value_carries() {
        let r = ConsumedRecord {
            tp: TopicPartition::new("t", 1),
            offset: 7,
            key: Some(Bytes::from_static(b"k2")),
            value: Some(Bytes::from_static(b"42")),
            headers: Vec::new(),
        };
        let named = record_ref(&r);
        assert_eq!(
            (named.id, named.key.as_deref(), named.offset),
            (42, Some("k2"), 7)
        );
        assert_eq!(parse_id(&Some(Bytes::from_static(b"x"))), u64::MAX);
        assert_eq!(parse_id(&None), u64::MAX);
    }

    #[test]
    fn an_output_row_is_named_by_its_input_position_when_the_input_holds_its_id() {
        let at = |topic: &str, offset| RecordRef {
            id: 0,
            key: None,
            tp: TopicPartition::new(topic, 0),
            offset,
        };
        let out = [
            RecordRef {
                id: 5,
                ..at("out", 3)
            },
            RecordRef {
                id: 6,
                ..at("out", 4)
            },
        ];
        let input = BTreeMap::from([(5, (TopicPartition::new("in", 2), 9))]);
        let named = named_by_input(&out, &input);
        let places: Vec<(&str, Offset)> = named
            .iter()
            .map(|r| (r.tp.topic.as_str(), r.offset))
            .collect();
        assert_eq!(places, [("in", 9), ("out", 4)]);
    }
}

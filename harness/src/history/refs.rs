//! What the history calls a consumed record: its bytes as text, the id its value carries,
//! and the [`RecordRef`] naming it. Shared by the simulated workloads, the components run in
//! both worlds (`copier`) and the real tier's worker processes.

use super::RecordRef;
use crate::client::ConsumedRecord;
use bytes::Bytes;

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

/// A consumed record as the history refers to it.
pub fn record_ref(r: &ConsumedRecord) -> RecordRef {
    RecordRef {
        id: parse_id(&r.value),
        key: text(&r.key),
        tp: r.tp.clone(),
        offset: r.offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::kafka::TopicPartition;

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
}

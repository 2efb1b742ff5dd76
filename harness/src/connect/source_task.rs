//! The source task contract, after Kafka Connect's `org.apache.kafka.connect.source.SourceTask`
//! (`start`, `poll`, `commit`) and `SourceRecord`.
//!
//! The worker owns the producer: it calls [`SourceTask::poll`], converts each
//! [`SourceRecord`] (`JsonConverter` with schemas disabled: key and value as JSON text),
//! sends it, and stores the record's `sourceOffset` under its `sourcePartition` in the
//! offsets topic (`offset.storage.topic`, key `["<connector>", <partition>]`, value the
//! offset, as `KafkaOffsetBackingStore` through `OffsetStorageWriter` writes them): every
//! `offset.flush.interval.ms` for the records whose sends were acknowledged
//! ([`super::submitted::SubmittedRecords`], `WorkerSourceTask`), or inside the records'
//! own transaction under KIP-618 (`ExactlyOnceWorkerSourceTask`). A task (re)started is
//! handed the last offsets stored for its partitions (`OffsetStorageReader.offset`) and
//! resumes after them, so what it emitted after the last stored offset is emitted again.

use super::task::ConnectError;
use bytes::Bytes;
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// A record a source task returns from `poll`: where it goes and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceRecord {
    /// The source partition (Debezium PostgreSQL: `{"server": "<topic.prefix>"}`).
    pub source_partition: Json,
    /// The position in that partition after this record (Debezium PostgreSQL: `lsn`,
    /// `txId`, `event_serial`).
    pub source_offset: Json,
    /// Destination topic.
    pub topic: String,
    /// Key, as JSON (`None` = null key).
    pub key: Option<Json>,
    /// Value, as JSON (`None` = tombstone).
    pub value: Option<Json>,
    /// Headers, raw.
    pub headers: Vec<(String, Bytes)>,
}

/// Stored offsets per source partition, as the worker read them from the offsets topic
/// at the task's start: the partition's JSON text → its last stored offset.
pub type StoredOffsets = BTreeMap<String, Json>;

/// A source task: one instance per task run.
pub trait SourceTask: Send {
    /// Called once before the first poll with the offsets stored for the task's
    /// partitions (Connect's `start`, reading `context.offsetStorageReader()`).
    ///
    /// # Errors
    /// A stored offset the task cannot resume from fails the task.
    fn start(&mut self, offsets: &StoredOffsets) -> Result<(), ConnectError>;

    /// The next records, at most the task's batch size, at `now_ms` (simulated or wall
    /// time, ms); empty when nothing new is there (the worker waits its poll interval).
    ///
    /// # Errors
    /// [`ConnectError::Fatal`] fails the task.
    fn poll(&mut self, now_ms: u64) -> Result<Vec<SourceRecord>, ConnectError>;

    /// How long the worker waits after an empty poll, ms (Debezium's `poll.interval.ms`).
    fn poll_interval_ms(&self) -> u64;
}

/// The key of `partition`'s offsets in the offsets topic of `connector`:
/// `["<connector>", <partition>]` as JSON text (`OffsetUtils`, `KafkaOffsetBackingStore`).
pub fn offset_key(connector: &str, partition: &Json) -> String {
    Json::Array(vec![Json::String(connector.to_string()), partition.clone()]).to_string()
}

/// The connector and partition an offsets-topic key names; `None` for a key that is not
/// `["<connector>", <partition>]`.
pub fn parse_offset_key(key: &str) -> Option<(String, Json)> {
    let Json::Array(parts) = serde_json::from_str(key).ok()? else {
        return None;
    };
    match parts.as_slice() {
        [Json::String(connector), partition] => Some((connector.clone(), partition.clone())),
        _ => None,
    }
}

/// Applies one offsets-topic record to `offsets` as `KafkaOffsetBackingStore` reads the
/// topic for `connector`: a key `["<connector>", <partition>]` of another connector or of
/// another shape is skipped, a JSON value stores the partition's offset, a null (or
/// unreadable) value deletes it. The simulated and the real worker read the topic through
/// this one function.
pub fn apply_offset_record(
    offsets: &mut StoredOffsets,
    connector: &str,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) {
    let key = key.map(String::from_utf8_lossy);
    let Some((owner, partition)) = key.as_deref().and_then(parse_offset_key) else {
        return;
    };
    if owner != connector {
        return;
    }
    match value.and_then(|v| serde_json::from_slice(v).ok()) {
        Some(offset) => offsets.insert(partition.to_string(), offset),
        None => offsets.remove(&partition.to_string()),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_offset_key_names_the_connector_and_the_partition() {
        let key = offset_key("inventory", &json!({"server": "db1"}));
        assert_eq!(key, r#"["inventory",{"server":"db1"}]"#);
        let (connector, partition) = parse_offset_key(&key).expect("a key");
        assert_eq!(connector, "inventory");
        assert_eq!(partition, json!({"server": "db1"}));
        assert_eq!(parse_offset_key("{}"), None);
        assert_eq!(parse_offset_key("[1, 2]"), None);
    }

    #[test]
    fn the_last_offset_of_the_connector_wins_and_a_null_deletes_it() {
        let mut offsets = StoredOffsets::new();
        let key = offset_key("inventory", &json!({"server": "db1"}));
        let other = offset_key("other", &json!({"server": "db1"}));
        let put = |o: &mut StoredOffsets, k: &str, v: Option<&str>| {
            apply_offset_record(o, "inventory", Some(k.as_bytes()), v.map(str::as_bytes))
        };
        put(&mut offsets, &key, Some(r#"{"lsn":1}"#));
        put(&mut offsets, &key, Some(r#"{"lsn":2}"#));
        put(&mut offsets, &other, Some(r#"{"lsn":9}"#));
        let partition = json!({"server": "db1"}).to_string();
        assert_eq!(offsets[&partition], json!({"lsn": 2}));
        assert_eq!(offsets.len(), 1, "another connector's offsets are not ours");
        put(&mut offsets, &key, None);
        assert!(offsets.is_empty(), "a tombstone deletes the offset");
    }
}

//! The stream-table join of `[streams] topology = "stream-table-join"`, as Kafka Streams runs
//! `builder.stream(topic).join(builder.table(table_topic), joiner).to(output)`.
//!
//! # Model (apache/kafka `streams/.../kstream/internals/`)
//! - The table (`KTableSource`): each record of the table topic is an update `key → value`
//!   put into the task's store; a table built with `builder.table(topic)` under
//!   `topology.optimization = "all"` takes the source topic itself as the store's changelog
//!   (the source-topic reuse `topology.optimization` enables, KIP-295;
//!   `InternalTopologyBuilder` records the topic as the store's changelog): no `<application.id>-<store>-changelog` is created or written, and a task
//!   restores its store by replaying the table topic's partition before processing. The
//!   restore reads to the end offset as it starts, as `StoreChangelogReader` does for an
//!   active task (only standbys stop at the committed offsets, its `limit offsets`), so the
//!   table records between the committed offset and that end are applied twice: once
//!   restored, once reprocessed. Here the store is written directly, without a record
//!   cache: the join reads the table's current value and the table forwards nothing.
//!   The table's updates are read with the main consumer's and the restore consumer's
//!   isolation: read_committed under exactly_once_v2, so an aborted table transaction is
//!   never applied; read_uncommitted under at_least_once (Kafka's consumer default), so it
//!   is (the `unwritten-table-version` canary).
//! - The join (`KStreamKTableJoin` → `KStreamKTableJoinProcessor.process`): a stream record
//!   looks its key up in the table's store (`KTableValueGetter.get`); an inner join
//!   forwards `joiner(streamValue, tableValue)` only when the table has a value for the key,
//!   and drops the record otherwise (a left join would forward with `null`). The result
//!   keeps the stream record's key and goes to the sink with the default partitioner.
//! - Co-partitioning: task `p` owns partition `p` of both topics, so a key's stream records
//!   and table updates meet in one task only when both topics have the same partition count
//!   and partitioner (`CopartitionedTopicsEnforcer`, checked by
//!   `StreamsSpec::check_copartitioned`).
//! - Stream-time synchronisation (`max.task.idle.ms`, KIP-353, KIP-695, `PartitionGroup`):
//!   unset, a task processes its two partitions' records in the order the consumer returns
//!   them. Set, it buffers both and processes the head with the lower event time first
//!   (`PartitionGroup.nextRecord`); with one partition empty, -1 processes the other at
//!   once, and `n` ≥ 1 waits until the empty one has stayed empty for `n` ms before it does
//!   (`readyToProcess`, enforced processing). Without waiting, a stream record meets a
//!   table older than an update of an earlier event time not yet fetched: a stale join,
//!   which `checker::streams_join` decides from the event times in both topics' values.
//!   Kafka's default 0 (wait while the fetched lag says data is there) is refused: the
//!   client trait reports no lag.
//!
//! # Shapes
//! - Table record: key `k<n % keys>`, value [`table_value`] = `<n>,<timestamp_ms>`, the
//!   update's version `n` (unique over the run) and event time; the store maps key →
//!   version.
//! - Output record: the stream record's key, value [`joined_value`] = `<stream id>,<version>`.

/// Updates per transaction of the transactional table producer (`table_abort_every`).
pub const TABLE_TRANSACTION_RECORDS: u64 = 5;

/// The value of table update `version` made at `timestamp_ms` (its event time):
/// `<version>,<timestamp_ms>`, whose version the store (`key → u64`) and its restore
/// (`store::changelog_entry`) keep, and whose time orders it against the stream's records
/// under `max.task.idle.ms`.
pub fn table_value(version: u64, timestamp_ms: u64) -> String {
    format!("{version},{timestamp_ms}")
}

/// The joiner's result for stream record `stream_id` and table version `version`:
/// `<stream_id>,<version>`.
pub fn joined_value(stream_id: u64, version: u64) -> String {
    format!("{stream_id},{version}")
}

/// The stream id and table version of an output value [`joined_value`] wrote; `None` for
/// another shape.
pub fn parse_joined(value: &str) -> Option<(u64, u64)> {
    let (id, version) = value.split_once(',')?;
    Some((id.parse().ok()?, version.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_joined_value_reads_back_as_its_stream_id_and_version() {
        assert_eq!(parse_joined(&joined_value(17, 4)), Some((17, 4)));
        assert_eq!(parse_joined("17"), None);
        assert_eq!(parse_joined("17,x"), None);
        assert_eq!(table_value(9, 120), "9,120");
        let entry = crate::streams::store::changelog_entry(Some(b"k1"), Some(b"9,120"));
        assert_eq!(
            entry,
            Some(("k1".to_string(), 9)),
            "the version is the entry"
        );
    }
}

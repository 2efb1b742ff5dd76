//! The Debezium PostgreSQL source task over the simulated change log
//! ([`eosim_sim::source_db`]), after Debezium's `BaseSourceTask` and
//! `PostgresConnectorTask` / `PostgresStreamingChangeEventSource`.
//!
//! # Model
//! - One source partition, `{"server": "<topic.prefix>"}` (`PostgresPartition`).
//! - `poll()` returns up to `max.batch.size` change events committed by now, after the
//!   task's position, each as a Debezium envelope (`op = c`, `after = {"id", "tx"}`,
//!   `source = {"name", "lsn", "txId", "event_serial"}`) keyed `{"id": <row>}` to topic
//!   `<topic.prefix>.<table>`, with the event's id in header [`ID_HEADER`].
//! - Each record's `sourceOffset` is its position: `{"lsn", "txId", "event_serial"}`. An LSN
//!   alone would not do: the rows of one transaction share their commit LSN, so a restart
//!   resumes *inside* the transaction after `event_serial` (Debezium's PostgreSQL offsets
//!   keep `lsn_proc` / `lsn_commit` for this, `PostgresOffsetContext`; MySQL's keep the
//!   binlog position plus `event` and `row` to skip).
//! - `start()` reads the stored offset of the partition: none = stream from the start of
//!   the log (the slot was created with the log; snapshots are not modelled); else resume
//!   after the stored position (`BaseSourceTask.getPreviousOffsets`). Whatever was polled
//!   after the stored offset is polled again: Debezium's documented at-least-once delivery
//!   when the worker stops without storing offsets.

use super::source_config::SourceConnectorConfig;
use super::source_task::{SourceRecord, SourceTask, StoredOffsets};
use super::task::ConnectError;
use crate::history::refs::ID_HEADER;
use bytes::Bytes;
use eosim_sim::source_db::{ChangeEvent, ChangeLog, LogPosition};
use serde_json::{json, Value as Json};
use std::sync::Arc;

/// A Debezium PostgreSQL task reading `log`.
#[derive(Debug)]
pub struct PostgresSourceTask {
    log: Arc<ChangeLog>,
    server: String,
    topic: String,
    max_batch_size: usize,
    poll_interval_ms: u64,
    position: Option<LogPosition>,
}

impl PostgresSourceTask {
    /// A task of server `topic.prefix` = `server` writing to `topic`, `max.batch.size`
    /// records per poll, waiting `poll.interval.ms` after an empty one.
    pub fn new(
        log: Arc<ChangeLog>,
        server: &str,
        topic: &str,
        max_batch_size: usize,
        poll_interval_ms: u64,
    ) -> Self {
        Self {
            log,
            server: server.to_string(),
            topic: topic.to_string(),
            max_batch_size,
            poll_interval_ms,
            position: None,
        }
    }

    /// A task of the connector `c` reading `log`: `topic.prefix`, its destination topic,
    /// `max.batch.size` and `poll.interval.ms` (what the simulated worker's plugin factory
    /// and the real tier's source worker both build).
    pub fn of_connector(log: Arc<ChangeLog>, c: &SourceConnectorConfig) -> Self {
        Self::new(
            log,
            &c.topic_prefix,
            c.topic(),
            c.max_batch_size,
            c.poll_interval_ms,
        )
    }

    /// The task's one source partition.
    pub fn partition(server: &str) -> Json {
        json!({ "server": server })
    }

    /// The position after which the next poll reads; `None` = from the start.
    pub fn position(&self) -> Option<LogPosition> {
        self.position
    }

    fn record(&self, e: &ChangeEvent) -> SourceRecord {
        let offset = offset_of(e);
        let source = json!({
            "connector": "postgresql", "name": self.server, "lsn": e.position.lsn,
            "txId": e.tx_id, "event_serial": e.position.serial,
        });
        let value = json!({
            "before": null, "after": {"id": e.id, "tx": e.tx_id}, "op": "c",
            "source": source, "transaction": null,
        });
        SourceRecord {
            source_partition: Self::partition(&self.server),
            source_offset: offset,
            topic: self.topic.clone(),
            key: Some(json!({ "id": e.id })),
            value: Some(value),
            headers: vec![(ID_HEADER.to_string(), Bytes::from(e.id.to_string()))],
        }
    }
}

/// The `sourceOffset` of event `e`.
pub fn offset_of(e: &ChangeEvent) -> Json {
    json!({"lsn": e.position.lsn, "txId": e.tx_id, "event_serial": e.position.serial})
}

/// The position a stored offset names.
///
/// # Errors
/// An offset without a whole `lsn` and `event_serial`.
pub fn position_of(offset: &Json) -> Result<LogPosition, String> {
    let field = |name: &str| offset.get(name).and_then(Json::as_u64);
    match (field("lsn"), field("event_serial")) {
        (Some(lsn), Some(serial)) => Ok(LogPosition {
            lsn,
            serial: u32::try_from(serial).map_err(|e| e.to_string())?,
        }),
        _ => Err(format!(
            "stored offset {offset} has no lsn and event_serial"
        )),
    }
}

impl SourceTask for PostgresSourceTask {
    fn start(&mut self, offsets: &StoredOffsets) -> Result<(), ConnectError> {
        let partition = Self::partition(&self.server).to_string();
        self.position = match offsets.get(&partition) {
            Some(offset) => {
                crate::mark!("connect:source-task-resumed-from-offset");
                Some(position_of(offset).map_err(ConnectError::Fatal)?)
            }
            None => None,
        };
        Ok(())
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<SourceRecord>, ConnectError> {
        let events = self
            .log
            .read_after(self.position, now_ms, self.max_batch_size);
        let records: Vec<SourceRecord> = events.iter().map(|e| self.record(e)).collect();
        if let Some(last) = events.last() {
            self.position = Some(last.position);
        }
        Ok(records)
    }

    fn poll_interval_ms(&self) -> u64 {
        self.poll_interval_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::source_db::ChangeLogConfig;

    fn task() -> PostgresSourceTask {
        let log = ChangeLog::generate(ChangeLogConfig {
            transactions: 3,
            rows_per_transaction: 2,
            transaction_interval_ms: 10,
            first_commit_ms: 0,
        });
        PostgresSourceTask::new(Arc::new(log), "db1", "db1.public.orders", 3, 500)
    }

    #[test]
    fn a_task_resumes_inside_a_transaction_after_the_stored_serial() {
        let mut first = task();
        first.start(&StoredOffsets::new()).expect("start");
        let batch = first.poll(1_000).expect("poll");
        assert_eq!(batch.len(), 3, "max.batch.size");
        let stored: StoredOffsets = [(
            batch[2].source_partition.to_string(),
            batch[2].source_offset.clone(),
        )]
        .into();
        assert_eq!(batch[2].source_offset["event_serial"], 0, "mid-transaction");
        let mut second = task();
        second.start(&stored).expect("start");
        let next = second.poll(1_000).expect("poll");
        let ids: Vec<String> = next
            .iter()
            .map(|r| r.key.clone().unwrap()["id"].to_string())
            .collect();
        assert_eq!(
            ids,
            ["3", "4", "5"],
            "the rest of transaction 1, then transaction 2"
        );
    }

    #[test]
    fn a_restart_without_stored_offsets_emits_everything_again() {
        let mut t = task();
        t.start(&StoredOffsets::new()).expect("start");
        let once = t.poll(1_000).expect("poll");
        let mut again = task();
        again.start(&StoredOffsets::new()).expect("start");
        assert_eq!(again.poll(1_000).expect("poll"), once);
    }

    #[test]
    fn a_stored_offset_without_a_position_fails_the_task() {
        let mut t = task();
        let bad: StoredOffsets =
            [(PostgresSourceTask::partition("db1").to_string(), json!({}))].into();
        assert!(matches!(t.start(&bad), Err(ConnectError::Fatal(_))));
    }
}

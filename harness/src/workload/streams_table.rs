//! The table producer of `streams-count` under `[streams] topology = "stream-table-join"`
//! (`streams::join`): process `table-producer` writes `streams.table_records` keyed
//! updates into `streams.table_topic`, one every `streams.table_interval_ms`.
//!
//! # Model
//! Update `n` (0-based, unique over the run, also its version) has key `k<n % keys>` (the
//! keys of the stream topic's records) and value `streams::join::table_value(n, t)`, `t`
//! the send's simulated time (its event time, as the stream's producers stamp theirs) less
//! `streams.table_event_time_lag_ms`. The
//! producer is idempotent (`[workload]`'s settings); with `streams.table_abort_every` it is
//! transactional (`transactional.id` `table-producer`), ends a transaction every
//! [`TABLE_TRANSACTION_RECORDS`] updates (or at a failed send) and aborts the `t`-th
//! transaction it ends (0-based) when `(t + 1) % table_abort_every == 0`, so those
//! versions are never written. A send that
//! fails is not retried by the workload: the version is skipped (the producer's own retries
//! and idempotence apply below it).
//!
//! # Ops recorded
//! None while running (the versions are not the stream's ids, which the Kafka checker
//! reads from `send` ops); after the drain the pipeline records each table partition read
//! read_committed as `streams-table`, the updates a join may have read.

use super::records::IdHandout;
use crate::client::sim::conn::Connection;
use crate::client::sim::producer::SimProducer;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::{Producer, ProducerRecord, TransactionalProducer};
use crate::scenario::Scenario;
use crate::streams::join::{table_value, TABLE_TRANSACTION_RECORDS};
use bytes::Bytes;
use eosim_sim::clock::now_ns;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The table producer's process name.
pub const TABLE_PRODUCER: &str = "table-producer";
/// Bound on one transactional call, ms.
const CALL_TIMEOUT_MS: u64 = 15_000;

/// The versions handed out to the table producer (shared with the pipeline's drain, which
/// waits for [`done`]).
pub type TableIds = Arc<Mutex<IdHandout>>;

/// Whether every table update of `scenario` was handed out and its send completed.
pub fn done(ids: &TableIds, scenario: &Scenario) -> bool {
    let ids = ids.lock().expect("table ids lock");
    ids.done(scenario.streams.table_records)
}

fn take(ids: &TableIds, scenario: &Scenario) -> Option<u64> {
    let total = scenario.streams.table_records;
    (ids.lock().expect("table ids lock")).take(TABLE_PRODUCER, total, false)
}

/// An update's event time now, ms: the simulated time less `table_event_time_lag_ms`.
fn event_time_ms(scenario: &Scenario) -> u64 {
    (now_ns() / 1_000_000).saturating_sub(scenario.streams.table_event_time_lag_ms)
}

/// Update `version` as a record of the table topic.
fn update(scenario: &Scenario, version: u64) -> ProducerRecord {
    let key = format!("k{}", version % u64::from(scenario.workload.keys.max(1)));
    ProducerRecord {
        topic: scenario.streams.table_topic.clone(),
        partition: None,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(table_value(version, event_time_ms(scenario)))),
        headers: Vec::new(),
    }
}

/// Runs the table producer until every update was handed out.
pub async fn run(scenario: Arc<Scenario>, ids: TableIds) {
    let Ok(conn) = Connection::open(scenario.cluster.brokers).await else {
        return;
    };
    let pause = Duration::from_millis(scenario.streams.table_interval_ms);
    if scenario.streams.table_abort_every.is_none() {
        let producer = SimProducer::new(conn, scenario.workload.idempotent_producer_config());
        while let Some(version) = take(&ids, &scenario) {
            let _ = producer.send(update(&scenario, version)).await;
            madsim::time::sleep(pause).await;
        }
        return;
    }
    let mut producer = transactional(&conn, &scenario).await;
    let (mut open, mut txn) = (false, 0);
    while let Some(version) = take(&ids, &scenario) {
        if !open && producer.begin_transaction().is_err() {
            producer = transactional(&conn, &scenario).await;
            continue; // the version is skipped
        }
        open = true;
        let sent = producer.send(update(&scenario, version)).await.is_ok();
        let last = (version + 1).is_multiple_of(TABLE_TRANSACTION_RECORDS)
            || version + 1 == scenario.streams.table_records;
        if !sent || last {
            let ended = end(&producer, &scenario, txn, sent).await;
            (open, txn) = (false, txn + 1);
            if !ended {
                producer = transactional(&conn, &scenario).await;
            }
        }
        madsim::time::sleep(pause).await;
    }
}

/// Ends table transaction `txn`: commits it, or aborts it when a send failed or its
/// number is one of `table_abort_every`'s; false when the producer must be recreated
/// (which aborts a transaction left open).
async fn end(
    producer: &SimTransactionalProducer,
    scenario: &Scenario,
    txn: u64,
    sent: bool,
) -> bool {
    let every = scenario.streams.table_abort_every.unwrap_or(0);
    let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
    if !sent || (every > 0 && (txn + 1).is_multiple_of(every)) {
        crate::mark!("streams:table-txn-aborted");
        return producer.abort_transaction(timeout).await.is_ok();
    }
    producer.commit_transaction(timeout).await.is_ok()
}

/// A transactional producer of `table-producer`, initialized (retried until it is).
async fn transactional(conn: &Connection, scenario: &Scenario) -> SimTransactionalProducer {
    let mut config = TxnProducerConfig::new(TABLE_PRODUCER);
    config.producer = scenario.workload.idempotent_producer_config();
    loop {
        let producer = SimTransactionalProducer::new(conn.clone(), config.clone());
        let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
        if producer.init_transactions(timeout).await.is_ok() {
            return producer;
        }
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
}

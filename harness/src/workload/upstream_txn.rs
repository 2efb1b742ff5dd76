//! The transactional upstream producer of the sink pipelines (`[workload]
//! "transactional.id"`): the records a sink reads are written in Kafka transactions, some
//! of which abort.
//!
//! # Model
//! - Each producer process owns a [`SimTransactionalProducer`] with `transactional.id` =
//!   the scenario's (`<id>-<i>` for producer `i` of several), `transaction.timeout.ms`
//!   from `[workload]` (Kafka's 60000 by default), idempotent, acks and retries from
//!   `[workload]`. It begins a transaction at its first record and ends it after
//!   `transaction_records` records, or when the generator is empty.
//! - Transactions are numbered in the order they begin, over the whole run (a restarted
//!   producer goes on with the next number); number `n` is aborted on purpose when
//!   `(n + 1) % abort_every == 0` (deterministic: the same transactions abort in every
//!   seed). A send that fails aborts its transaction too; an unknown commit outcome
//!   recreates the producer, whose InitProducerId settles it (KIP-98).
//! - An aborted transaction's records are never sent again: the upstream gave up on them,
//!   so a sink must never show them. Their data stays in the log with an abort marker;
//!   `read_committed` consumers filter it (`Fetcher`/`CompletedFetch` with the fetch's
//!   aborted-transaction list), `read_uncommitted` ones (the Java consumer's default,
//!   `ConsumerConfig.ISOLATION_LEVEL_CONFIG`) return it.
//!
//! # Ops recorded
//! As the `transactional-copy` copiers record theirs: `send` invoke then ok / fail / info
//! per record (ok with its partition and offset), and per transaction a `txn` invoke when
//! the commit or abort is requested, with every record sent, then ok (committed), fail
//! (certainly aborted: the abort was requested before any commit) or info (a commit of
//! unknown outcome). A producer killed inside a transaction leaves it open: the next
//! incarnation's `init_transactions` aborts it on the coordinator, and then records its
//! `txn` invoke and fail; one still open when the run ends is recorded by
//! [`UpstreamTxn::record_final`] as an invoke without completion (undecided).

use crate::client::sim::conn::Connection;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::{ProducerRecord, TransactionalProducer};
use crate::history::{OpKind, RecordRef, Recorder, Value};
use crate::runner::world::now_ns;
use crate::scenario::Scenario;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Records per transaction without `transaction_records`.
const TRANSACTION_RECORDS_DEFAULT: u64 = 10;
/// Kafka's `transaction.timeout.ms` default, ms.
const TRANSACTION_TIMEOUT_MS_DEFAULT: u64 = 60_000;

/// A transaction begun whose commit or abort was not yet requested.
#[derive(Debug, Clone)]
struct OpenTxn {
    id: u64,
    process: String,
    sends: Vec<RecordRef>,
}

#[derive(Debug, Default)]
struct State {
    next_txn: u64,
    /// By `transactional.id`: outside the producer processes, so that a restarted one
    /// (or the final state) can still name the records of its predecessor's open
    /// transaction.
    open: BTreeMap<String, OpenTxn>,
}

/// The transactional upstream of one run, shared by its producer processes.
#[derive(Clone)]
pub struct UpstreamTxn {
    scenario: Arc<Scenario>,
    recorder: Recorder,
    state: Arc<Mutex<State>>,
}

impl UpstreamTxn {
    /// The upstream of `scenario`, `None` without `[workload] "transactional.id"`.
    pub fn of(scenario: &Arc<Scenario>, recorder: &Recorder) -> Option<Self> {
        scenario.workload.transactional_id.as_ref()?;
        Some(Self {
            scenario: scenario.clone(),
            recorder: recorder.clone(),
            state: Arc::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("upstream txn lock")
    }

    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.recorder.record(now_ns(), process, kind, value, error);
    }

    /// Whether the run's transaction `n` aborts on purpose.
    fn aborts(&self, n: u64) -> bool {
        let every = self.scenario.workload.abort_every.unwrap_or(0);
        every > 0 && (n + 1).is_multiple_of(every)
    }

    /// Records, as invokes without completion, the transactions still open at the end of
    /// the run: undecided, neither expected in a sink nor forbidden there.
    pub fn record_final(&self) {
        let open = std::mem::take(&mut self.state().open);
        for (transactional_id, txn) in open {
            let value = txn_value(&txn, &transactional_id);
            self.record(&txn.process, OpKind::Invoke, value, None);
        }
    }

    /// Opens the session of producer process `process` (`producer-<i>`): a producer of
    /// its `transactional.id`, initialized (retried until it is).
    pub async fn session(&self, conn: Connection, process: &str) -> Session {
        let base = self.scenario.workload.transactional_id.clone();
        let base = base.expect("an UpstreamTxn has a transactional.id");
        let transactional_id = match self.scenario.workload.producers {
            1 => base,
            _ => format!("{base}-{}", process.trim_start_matches("producer-")),
        };
        let producer = self.init(&conn, &transactional_id, process).await;
        Session {
            upstream: self.clone(),
            conn,
            process: process.to_string(),
            transactional_id,
            producer,
        }
    }

    fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.scenario.workload.request_timeout_ms * 3)
    }

    /// A producer of `transactional_id`, initialized; the transaction a predecessor left
    /// open is then aborted, and recorded so.
    async fn init(
        &self,
        conn: &Connection,
        transactional_id: &str,
        process: &str,
    ) -> SimTransactionalProducer {
        let w = &self.scenario.workload;
        let mut config = TxnProducerConfig::new(transactional_id);
        config.transaction_timeout_ms = w
            .transaction_timeout_ms
            .unwrap_or(TRANSACTION_TIMEOUT_MS_DEFAULT);
        config.producer = w.idempotent_producer_config();
        let producer = loop {
            let producer = SimTransactionalProducer::new(conn.clone(), config.clone());
            match producer.init_transactions(self.call_timeout()).await {
                Ok(()) => break producer,
                Err(e) => tracing::debug!(%e, "upstream init_transactions"),
            }
            madsim::time::sleep(Duration::from_millis(500)).await;
        };
        let orphan = self.state().open.remove(transactional_id);
        if let Some(txn) = orphan {
            // InitProducerId of a transactional.id with an ongoing transaction aborts it
            // before it answers (`TransactionCoordinator.handleInitProducerId`); its commit
            // was never requested, or it would not be open here.
            crate::mark!("upstream:orphan-transaction-aborted");
            let value = txn_value(&txn, transactional_id);
            self.record(process, OpKind::Invoke, value.clone(), None);
            let why = "aborted by the next producer incarnation's InitProducerId";
            self.record(process, OpKind::Fail, value, Some(why.into()));
        }
        producer
    }
}

fn txn_value(txn: &OpenTxn, transactional_id: &str) -> Value {
    Value::Txn {
        id: txn.id,
        transactional_id: transactional_id.to_string(),
        sends: txn.sends.clone(),
        offsets: Vec::new(),
    }
}

/// One producer process's transactional producer.
pub struct Session {
    upstream: UpstreamTxn,
    conn: Connection,
    process: String,
    transactional_id: String,
    producer: SimTransactionalProducer,
}

impl Session {
    /// Sends record `id` (key text `key`) inside the open transaction, beginning one if
    /// none is; records the `send` op. Ends the transaction once it holds
    /// `transaction_records` records, and aborts it when the send failed.
    pub async fn send(&mut self, id: u64, key: Option<String>, record: ProducerRecord) {
        let topic = record.topic.clone();
        let fixed = record.partition.map(|p| TopicPartition::new(&topic, p));
        let send = |tp, offset| Value::Send {
            id,
            key: key.clone(),
            tp,
            offset,
        };
        if !self.in_transaction() {
            if let Err(e) = self.begin() {
                let error = Some(e.to_string());
                self.record(OpKind::Invoke, send(fixed.clone(), None), None);
                self.record(OpKind::Fail, send(fixed, None), error);
                return self.recreate().await;
            }
        }
        self.record(OpKind::Invoke, send(fixed.clone(), None), None);
        // Part of the open transaction before its request goes out: a process killed while
        // it is in flight may leave the record in the log, and the next incarnation's
        // InitProducerId aborts it with the rest of the transaction.
        let unacked = fixed
            .clone()
            .unwrap_or_else(|| TopicPartition::new(&topic, 0));
        self.add_send(RecordRef {
            id,
            key: key.clone(),
            tp: unacked,
            offset: -1,
        });
        let (tp, offset, failure) = match self.producer.send(record).await {
            Ok(d) => {
                let tp = TopicPartition::new(&topic, d.partition);
                self.record(OpKind::Ok, send(Some(tp.clone()), Some(d.offset)), None);
                (tp, d.offset, None)
            }
            Err(e) => {
                let kind = if e.is_ambiguous() {
                    OpKind::Info
                } else {
                    OpKind::Fail
                };
                self.record(kind, send(fixed.clone(), None), Some(e.to_string()));
                let tp = fixed.unwrap_or_else(|| TopicPartition::new(&topic, 0));
                (tp, -1, Some(e))
            }
        };
        let full = self.settle_send(RecordRef {
            id,
            key: key.clone(),
            tp,
            offset,
        });
        match failure {
            Some(e) => self.abort(e.to_string(), e.is_fatal()).await,
            None if full => self.end().await,
            None => {}
        }
    }

    /// Sends every record `next` hands out (`(id, key text, record)`, [`Session::send`]),
    /// pausing `interval` after each, then ends the open transaction ([`Session::end`]): the
    /// loop of every transactional upstream producer process.
    pub async fn send_all(
        &mut self,
        mut next: impl FnMut() -> Option<(u64, Option<String>, ProducerRecord)>,
        interval: Duration,
    ) {
        while let Some((id, key, record)) = next() {
            self.send(id, key, record).await;
            madsim::time::sleep(interval).await;
        }
        self.end().await;
    }

    /// Ends the open transaction, if any: commits it, or aborts it when its number is one
    /// of `abort_every`'s.
    pub async fn end(&mut self) {
        let Some(id) = self.open_id() else { return };
        if self.upstream.aborts(id) {
            crate::mark!("upstream:planned-abort");
            return self
                .abort("planned abort (abort_every)".into(), false)
                .await;
        }
        let value = self.take_open();
        self.record(OpKind::Invoke, value.clone(), None);
        let timeout = self.upstream.call_timeout();
        match self.producer.commit_transaction(timeout).await {
            Ok(()) => self.record(OpKind::Ok, value, None),
            Err(e) => {
                self.record(OpKind::Info, value, Some(e.to_string()));
                self.recreate().await;
            }
        }
    }

    /// Requests the abort of the open transaction after `error` and records it `fail`:
    /// no commit was requested, so it can only abort. A fenced producer is not asked.
    async fn abort(&mut self, error: String, fatal: bool) {
        let value = self.take_open();
        self.record(OpKind::Invoke, value.clone(), None);
        let abort = match fatal {
            true => Err("not aborted: the producer is fenced".to_string()),
            false => {
                let timeout = self.upstream.call_timeout();
                let result = self.producer.abort_transaction(timeout).await;
                result.map_err(|e| e.to_string())
            }
        };
        let text = match &abort {
            Ok(()) => error,
            Err(why) => format!("{error}; abort: {why}"),
        };
        self.record(OpKind::Fail, value, Some(text));
        if abort.is_err() {
            self.recreate().await;
        }
    }

    /// A new producer of the same `transactional.id` (fencing the old one).
    async fn recreate(&mut self) {
        let up = self.upstream.clone();
        self.producer = up
            .init(&self.conn, &self.transactional_id, &self.process)
            .await;
    }

    fn begin(&mut self) -> Result<(), crate::client::TxnError> {
        self.producer.begin_transaction()?;
        let mut state = self.upstream.state();
        let id = state.next_txn;
        state.next_txn += 1;
        let txn = OpenTxn {
            id,
            process: self.process.clone(),
            sends: Vec::new(),
        };
        state.open.insert(self.transactional_id.clone(), txn);
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        self.open_id().is_some()
    }

    fn open_id(&self) -> Option<u64> {
        let state = self.upstream.state();
        state.open.get(&self.transactional_id).map(|t| t.id)
    }

    /// Adds a send, not yet acknowledged, to the open transaction.
    fn add_send(&mut self, send: RecordRef) {
        self.open_sends(|sends| sends.push(send));
    }

    /// Replaces the open transaction's last send (the one [`Session::add_send`] added) by
    /// its outcome `send`; whether the transaction is now full.
    fn settle_send(&mut self, send: RecordRef) -> bool {
        let max = self.upstream.scenario.workload.transaction_records;
        let max = max.unwrap_or(TRANSACTION_RECORDS_DEFAULT);
        self.open_sends(|sends| {
            let last = sends.last_mut().expect("the send added before its request");
            *last = send;
            sends.len() as u64 >= max
        })
    }

    fn open_sends<T>(&mut self, f: impl FnOnce(&mut Vec<RecordRef>) -> T) -> T {
        let mut state = self.upstream.state();
        let txn = state
            .open
            .get_mut(&self.transactional_id)
            .expect("a send is inside an open transaction");
        f(&mut txn.sends)
    }

    /// The open transaction's `txn` value; it is no longer open (its end is requested).
    fn take_open(&mut self) -> Value {
        let txn = self.upstream.state().open.remove(&self.transactional_id);
        let txn = txn.expect("an open transaction to end");
        txn_value(&txn, &self.transactional_id)
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.upstream.record(&self.process, kind, value, error);
    }
}

/// Where a sink group reading `tp` with `isolation` has consumed everything, for the
/// drain's lag: the offset after the last record such a consumer returns (0 when none),
/// or `None` while a transaction on `tp` is undecided (LSO below the HW). Not the high
/// watermark: the commit or abort marker after a transaction's last record takes an offset
/// no record holds, and consumers commit the offset after the last record they processed
/// (Kafka Connect's `WorkerSinkTask` commits `record.offset() + 1`), so a transactional
/// topic's committed offsets stay one or more below the HW for good.
///
/// # Errors
/// The partition cannot be read (no leader, a fetch error).
pub fn consumed_end(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    isolation: Isolation,
) -> Result<Option<Offset>, String> {
    let hw = cluster.high_watermark(tp).unwrap_or(0);
    if cluster.last_stable_offset(tp).unwrap_or(0) < hw {
        return Ok(None);
    }
    let last = match isolation {
        Isolation::ReadCommitted => super::records::read_committed(cluster, now_ms, tp)?
            .last()
            .map(|r| r.offset),
        Isolation::ReadUncommitted => cluster.records(tp).last().map(|(o, _)| *o),
    };
    Ok(Some(last.map_or(0, |o| o + 1)))
}

/// The drain's lag line of `tp` for a group at committed offset `committed` reading a
/// transactional upstream with `isolation` ([`consumed_end`]); `None` once caught up.
pub fn lag_of(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    isolation: Isolation,
    committed: Offset,
) -> Option<String> {
    match consumed_end(cluster, now_ms, tp, isolation) {
        Err(e) => Some(format!("not readable: {e}")),
        Ok(None) => Some(format!(
            "{tp}: a transaction is undecided (LSO below the HW)"
        )),
        Ok(Some(end)) if committed < end => Some(format!(
            "{tp}: committed {committed} < {end}, the end of what the group reads"
        )),
        Ok(Some(_)) => None,
    }
}

/// The drain's lag lines of a sink group whose committed offsets are `committed`, over
/// `partitions`: behind a transactional upstream read with `transactional`'s isolation,
/// [`lag_of`] each; otherwise each partition whose committed offset is below its high
/// watermark.
pub fn committed_lag(
    cluster: &mut Cluster,
    now_ms: u64,
    partitions: impl IntoIterator<Item = TopicPartition>,
    committed: &BTreeMap<TopicPartition, Offset>,
    transactional: Option<Isolation>,
) -> Vec<String> {
    let mut lag = Vec::new();
    for tp in partitions {
        let c = committed.get(&tp).copied().unwrap_or(0);
        if let Some(isolation) = transactional {
            lag.extend(lag_of(cluster, now_ms, &tp, isolation, c));
            continue;
        }
        let hw = cluster.high_watermark(&tp).unwrap_or(0);
        if c < hw {
            lag.push(format!("{tp}: committed {c} < high watermark {hw}"));
        }
    }
    lag
}

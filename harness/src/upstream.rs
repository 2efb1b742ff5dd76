//! The transactional upstream producer of the sink pipelines (`[workload]
//! "transactional.id"`), written once over the client traits ([`TransactionalProducer`]) so
//! that the simulated producers (`workload::upstream_txn`, under `--cfg madsim`) and the real
//! `eosim worker --role producer` processes (`real::run::upstream_instance`) run the same
//! session, as [`crate::copier`] does for the copier.
//!
//! Where a session runs is an [`UpstreamHost`]: where its ops go (the history), how its
//! transactional producer is built, and where the run-wide [`UpstreamState`] lives (the
//! transaction numbering and the transactions open per `transactional.id`): in memory in
//! the simulation, in an fsync'ed file under a lock on the real tier, so that it outlives a
//! killed process.
//!
//! # Model
//! - Each producer process owns a transactional producer with `transactional.id` = the
//!   scenario's (`<id>-<i>` for producer `i` of several), `transaction.timeout.ms` from
//!   `[workload]` (Kafka's 60000 by default), idempotent, acks and retries from
//!   `[workload]`. It begins a transaction at its first record and ends it after
//!   `transaction_records` records (10 by default), or when its records run out
//!   ([`Session::end`]).
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
//! incarnation's `init_transactions` aborts it on the coordinator (the transaction
//! coordinator's `handleInitProducerId`), and then records its `txn` invoke and fail; one
//! still open when the run ends is recorded by the run's final state as an invoke without
//! completion (undecided: [`UpstreamState::take_open_at_end`]).

use crate::client::TxnSettings;
use crate::client::{ProducerRecord, TransactionalProducer, TxnError};
use crate::history::{OpKind, RecordRef, Value};
use crate::scenario::Scenario;
use eosim_sim::kafka::TopicPartition;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Records per transaction without `[workload] transaction_records`.
pub const TRANSACTION_RECORDS_DEFAULT: u64 = 10;
/// Kafka's `transaction.timeout.ms` default, ms.
pub const TRANSACTION_TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Pause between failed `init_transactions` attempts (or producer creations), ms.
const INIT_RETRY_MS: u64 = 500;

/// A transaction begun whose commit or abort was not yet requested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTxn {
    /// Its number within the run (the `txn` op's `id`).
    pub id: u64,
    /// The producer process that began it (`producer-<i>`).
    pub process: String,
    /// The records sent in it so far (offset -1 where the send was not acknowledged).
    pub sends: Vec<RecordRef>,
}

impl OpenTxn {
    /// Its `txn` op value: the records sent, no consumer offsets.
    pub fn value(&self, transactional_id: &str) -> Value {
        Value::Txn {
            id: self.id,
            transactional_id: transactional_id.to_string(),
            sends: self.sends.clone(),
            offsets: Vec::new(),
        }
    }
}

/// What a run's upstream producers share, outside every producer process: the next
/// transaction number, and the transactions open by `transactional.id` (so that a
/// restarted producer, or the final state, can still name the records of its
/// predecessor's open transaction).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamState {
    /// The number the next transaction to begin takes, from 0.
    pub next_txn: u64,
    /// The open transactions, by `transactional.id`.
    pub open: BTreeMap<String, OpenTxn>,
}

impl UpstreamState {
    /// Numbers a new transaction of `transactional_id`, begun by `process`, and keeps it
    /// open; its number.
    pub fn begin(&mut self, transactional_id: &str, process: &str) -> u64 {
        let id = self.next_txn;
        self.next_txn += 1;
        let txn = OpenTxn {
            id,
            process: process.to_string(),
            sends: Vec::new(),
        };
        self.open.insert(transactional_id.to_string(), txn);
        id
    }

    /// Adds `send` to the open transaction of `transactional_id`; how many records it now
    /// holds.
    ///
    /// # Panics
    /// When `transactional_id` has no open transaction (a send is always inside one).
    pub fn add_send(&mut self, transactional_id: &str, send: RecordRef) -> u64 {
        let txn = self.open.get_mut(transactional_id);
        let txn = txn.expect("a send is inside an open transaction");
        txn.sends.push(send);
        txn.sends.len() as u64
    }

    /// Sets where the last send of the open transaction of `transactional_id` went (`tp`,
    /// `offset`; offset -1 when it was not acknowledged); how many records the transaction
    /// holds.
    ///
    /// # Panics
    /// When `transactional_id` has no open transaction or it holds no send.
    pub fn settle_send(&mut self, transactional_id: &str, tp: TopicPartition, offset: i64) -> u64 {
        let txn = self.open.get_mut(transactional_id);
        let txn = txn.expect("a send is inside an open transaction");
        let last = txn.sends.last_mut().expect("the send was added");
        (last.tp, last.offset) = (tp, offset);
        txn.sends.len() as u64
    }

    /// The number of the open transaction of `transactional_id`, if one is open.
    pub fn open_id(&self, transactional_id: &str) -> Option<u64> {
        self.open.get(transactional_id).map(|t| t.id)
    }

    /// The open transaction of `transactional_id`, no longer open (its end is requested,
    /// or a new incarnation aborted it).
    pub fn take(&mut self, transactional_id: &str) -> Option<OpenTxn> {
        self.open.remove(transactional_id)
    }

    /// The transactions still open at the end of the run, no longer open, as `(process,
    /// txn value)` in `transactional.id` order: what the final state records as invokes
    /// without completion (undecided: neither expected in a sink nor forbidden there).
    pub fn take_open_at_end(&mut self) -> Vec<(String, Value)> {
        let open = std::mem::take(&mut self.open);
        let values = open.into_iter().map(|(transactional_id, txn)| {
            let value = txn.value(&transactional_id);
            (txn.process, value)
        });
        values.collect()
    }
}

/// Where the upstream's sessions run: the simulation or real producer processes.
pub trait UpstreamHost: Send + Sync {
    /// The transactional producer.
    type Txn: TransactionalProducer;

    /// Records an op of producer process `process`.
    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>);

    /// A transactional producer with `settings`, not yet initialized.
    ///
    /// # Errors
    /// A text when the client cannot be created (the session retries).
    fn txn_producer(&self, settings: &TxnSettings) -> Result<Self::Txn, String>;

    /// Applies `change` to the run's [`UpstreamState`] atomically (with respect to every
    /// producer process of the run) and durably before it returns; what `change` returned.
    fn update<R>(&self, change: impl FnOnce(&mut UpstreamState) -> R) -> R;
}

/// The upstream's settings, from `[workload]`.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// `[workload] "transactional.id"`: the base of every producer's.
    pub transactional_id: String,
    /// `[workload] producers`: with more than one, producer `i`'s id is `<base>-<i>`.
    pub producers: u32,
    /// `transaction.timeout.ms`, ms.
    pub transaction_timeout_ms: u64,
    /// The producer settings underneath: `[workload]`'s idempotent producer.
    pub producer: crate::client::ProducerConfig,
    /// Records per transaction (`transaction_records`).
    pub transaction_records: u64,
    /// Every `abort_every`-th transaction of the run aborts on purpose; 0: none.
    pub abort_every: u64,
    /// Bound on one transactional call (init, commit, abort): three request timeouts.
    pub call_timeout: Duration,
}

impl UpstreamConfig {
    /// The upstream of `scenario`, `None` without `[workload] "transactional.id"`.
    pub fn of_scenario(scenario: &Scenario) -> Option<Self> {
        let w = &scenario.workload;
        Some(Self {
            transactional_id: w.transactional_id.clone()?,
            producers: w.producers,
            transaction_timeout_ms: w
                .transaction_timeout_ms
                .unwrap_or(TRANSACTION_TIMEOUT_MS_DEFAULT),
            producer: w.idempotent_producer_config(),
            transaction_records: w.transaction_records.unwrap_or(TRANSACTION_RECORDS_DEFAULT),
            abort_every: w.abort_every.unwrap_or(0),
            call_timeout: Duration::from_millis(w.request_timeout_ms * 3),
        })
    }

    /// The transactional producer of process `process` (`producer-<i>`).
    pub fn settings(&self, process: &str) -> TxnSettings {
        let transactional_id = match self.producers {
            1 => self.transactional_id.clone(),
            _ => format!(
                "{}-{}",
                self.transactional_id,
                process.trim_start_matches("producer-")
            ),
        };
        TxnSettings {
            transactional_id,
            transaction_timeout_ms: self.transaction_timeout_ms,
            producer: self.producer.clone(),
        }
    }

    /// Whether the run's transaction `n` aborts on purpose.
    pub fn aborts(&self, n: u64) -> bool {
        self.abort_every > 0 && (n + 1).is_multiple_of(self.abort_every)
    }
}

/// One producer process's transactional producer on host `H`.
pub struct Session<H: UpstreamHost> {
    host: H,
    config: UpstreamConfig,
    process: String,
    settings: TxnSettings,
    producer: H::Txn,
}

impl<H: UpstreamHost> Session<H> {
    /// Opens the session of producer process `process` (`producer-<i>`) on `host`: a
    /// producer of its `transactional.id`, initialized (retried until it is); the
    /// transaction a predecessor left open is then aborted, and recorded so.
    pub async fn open(host: H, config: UpstreamConfig, process: &str) -> Self {
        let settings = config.settings(process);
        let producer = init(&host, &config, &settings, process).await;
        Self {
            host,
            config,
            process: process.to_string(),
            settings,
            producer,
        }
    }

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
        // Kept with its transaction before it is sent, unacknowledged (offset -1): a
        // process killed while it is in flight, or before its outcome is recorded, leaves
        // it in the open transaction its successor aborts, where the checkers match an
        // unacknowledged send by topic and id (it may have been appended).
        let unacked = fixed
            .clone()
            .unwrap_or_else(|| TopicPartition::new(&topic, 0));
        self.add_send(RecordRef {
            id,
            key: key.clone(),
            tp: unacked.clone(),
            offset: -1,
        });
        let (tp, offset, failure) = match self.producer.send(record).await {
            Ok(d) => (TopicPartition::new(&topic, d.partition), d.offset, None),
            Err(e) => (unacked, -1, Some(e)),
        };
        let full = self.settle_send(tp.clone(), offset);
        match &failure {
            None => self.record(OpKind::Ok, send(Some(tp), Some(offset)), None),
            Some(e) => {
                let kind = match e.is_ambiguous() {
                    true => OpKind::Info,
                    false => OpKind::Fail,
                };
                self.record(kind, send(fixed, None), Some(e.to_string()));
            }
        }
        match failure {
            Some(e) => self.abort(e.to_string(), e.is_fatal()).await,
            None if full => self.end().await,
            None => {}
        }
    }

    /// Sends every record `next` hands out (`(id, key text, record)`, [`Session::send`]),
    /// pausing `interval_ms` after each ([`crate::client::sends::pace`]), then ends the
    /// open transaction ([`Session::end`]): the loop of every transactional upstream
    /// producer process, simulated or real.
    pub async fn send_all(
        &mut self,
        mut next: impl FnMut() -> Option<(u64, Option<String>, ProducerRecord)>,
        interval_ms: u64,
    ) {
        while let Some((id, key, record)) = next() {
            self.send(id, key, record).await;
            crate::client::sends::pace(interval_ms).await;
        }
        self.end().await;
    }

    /// Ends the open transaction, if any: commits it, or aborts it when its number is one
    /// of `abort_every`'s.
    pub async fn end(&mut self) {
        let Some(id) = self.open_id() else { return };
        if self.config.aborts(id) {
            crate::mark!("upstream:planned-abort");
            return self
                .abort("planned abort (abort_every)".into(), false)
                .await;
        }
        let value = self.take_open();
        self.record(OpKind::Invoke, value.clone(), None);
        let timeout = self.config.call_timeout;
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
                let timeout = self.config.call_timeout;
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
        self.producer = init(&self.host, &self.config, &self.settings, &self.process).await;
    }

    fn begin(&mut self) -> Result<(), TxnError> {
        self.producer.begin_transaction()?;
        let (tid, process) = (&self.settings.transactional_id, &self.process);
        self.host.update(|state| state.begin(tid, process));
        Ok(())
    }

    fn in_transaction(&self) -> bool {
        self.open_id().is_some()
    }

    fn open_id(&self) -> Option<u64> {
        let tid = &self.settings.transactional_id;
        self.host.update(|state| state.open_id(tid))
    }

    /// Adds a send to the open transaction.
    fn add_send(&mut self, send: RecordRef) {
        let tid = &self.settings.transactional_id;
        self.host.update(|state| state.add_send(tid, send));
    }

    /// Sets where the open transaction's last send went; whether it is now full.
    fn settle_send(&mut self, tp: TopicPartition, offset: i64) -> bool {
        let tid = &self.settings.transactional_id;
        let held = self.host.update(|state| state.settle_send(tid, tp, offset));
        held >= self.config.transaction_records
    }

    /// The open transaction's `txn` value; it is no longer open (its end is requested).
    fn take_open(&mut self) -> Value {
        let tid = &self.settings.transactional_id;
        let txn = self.host.update(|state| state.take(tid));
        txn.expect("an open transaction to end").value(tid)
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.host.record(&self.process, kind, value, error);
    }
}

/// A producer of `settings`' `transactional.id` on `host`, initialized (retried until it
/// is); the transaction a predecessor left open is then recorded aborted.
async fn init<H: UpstreamHost>(
    host: &H,
    config: &UpstreamConfig,
    settings: &TxnSettings,
    process: &str,
) -> H::Txn {
    let producer = loop {
        match host.txn_producer(settings) {
            Ok(producer) => match producer.init_transactions(config.call_timeout).await {
                Ok(()) => break producer,
                Err(e) => tracing::debug!(%e, "upstream init_transactions"),
            },
            Err(e) => tracing::warn!(%e, "upstream transactional producer"),
        }
        tokio::time::sleep(Duration::from_millis(INIT_RETRY_MS)).await;
    };
    let tid = &settings.transactional_id;
    if let Some(txn) = host.update(|state| state.take(tid)) {
        // InitProducerId of a transactional.id with an ongoing transaction aborts it
        // before it answers (`TransactionCoordinator.handleInitProducerId`); its commit
        // was never requested, or it would not be open here.
        crate::mark!("upstream:orphan-transaction-aborted");
        let value = txn.value(tid);
        host.record(process, OpKind::Invoke, value.clone(), None);
        let why = "aborted by the next producer incarnation's InitProducerId";
        host.record(process, OpKind::Fail, value, Some(why.into()));
    }
    producer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(id: u64) -> RecordRef {
        RecordRef {
            id,
            key: None,
            tp: TopicPartition::new("t", 0),
            offset: id as i64,
        }
    }

    #[test]
    fn transactions_are_numbered_over_the_run_and_kept_open_by_transactional_id() {
        let mut state = UpstreamState::default();
        assert_eq!(state.begin("up-0", "producer-0"), 0);
        assert_eq!(state.begin("up-1", "producer-1"), 1);
        let mut unacked = send(7);
        unacked.offset = -1;
        assert_eq!(state.add_send("up-0", unacked), 1);
        assert_eq!(state.settle_send("up-0", TopicPartition::new("t", 0), 7), 1);
        assert_eq!(state.open_id("up-1"), Some(1));
        let taken = state.take("up-0").expect("open");
        assert_eq!(taken.sends, [send(7)]);
        assert_eq!(state.begin("up-0", "producer-0"), 2);
        let at_end = state.take_open_at_end();
        let processes: Vec<&str> = at_end.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(processes, ["producer-0", "producer-1"]);
        assert!(state.open.is_empty());
    }

    #[test]
    fn every_abort_every_th_transaction_of_the_run_aborts() {
        let file = "../scenarios/field/kafka-read-committed-skips-aborted-txn.toml";
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let mut scenario = Scenario::load(&path).expect("the scenario parses");
        let config = UpstreamConfig::of_scenario(&scenario).expect("transactional");
        let aborted: Vec<u64> = (0..9).filter(|n| config.aborts(*n)).collect();
        assert_eq!(aborted, [2, 5, 8]);
        assert_eq!(config.transaction_records, 10);
        assert_eq!(config.settings("producer-0").transactional_id, "upstream");
        scenario.workload.producers = 2;
        let config = UpstreamConfig::of_scenario(&scenario).expect("transactional");
        assert_eq!(config.settings("producer-1").transactional_id, "upstream-1");
        scenario.workload.transactional_id = None;
        assert_eq!(UpstreamConfig::of_scenario(&scenario), None);
    }
}

//! The copier of pipeline `transactional-copy`: a consume-transform-produce loop with Kafka
//! transactions (the loop of Kafka Streams under `exactly_once_v2`, models-reference E.5),
//! written once over the client traits ([`Consumer`], [`TransactionalProducer`]) so that
//! the simulated copier (`workload::transactional_copy`, under `--cfg madsim`) and a real
//! process (`real::run::copier_instance`) run the same code.
//!
//! Where the loop runs is a [`CopierHost`]: where its ops go (the history), how its
//! transactional producer is built and how its transactions are numbered.
//!
//! # Loop ([`run`])
//! Subscribe to the input topic (group [`COPY_GROUP`], read_committed unless
//! `[copy] "isolation.level"` says otherwise, `auto.offset.reset=earliest`), initialize a transactional producer with
//! `transactional.id = copier-<i>` (stable across restarts, so a restarted copier fences its
//! zombie by epoch: `TransactionManager.initializeTransactions`), then per poll of at most
//! `copy.records_per_transaction_max` records: begin, send each record unchanged to the
//! output topic (the transform is the identity on key and value, so output ids are input
//! ids), `send_offsets_to_transaction` with the group's generation (KIP-447), commit.
//!
//! On any error before the commit request the transaction is aborted (and the producer
//! recreated when the error is fatal); on a commit error the producer is recreated, since
//! the outcome is unknown and only a new epoch settles it. Then, with `copy.rewind_on_abort`
//! (the default), the consumer seeks back to the group's committed offsets; without it (the
//! F9 bug, cases.md) it reads on past the aborted input.
//!
//! # Ops recorded
//! `poll` ok per copier poll; `txn` invoke (at the commit or abort request, with every
//! record sent and the offsets) then ok (committed), fail (certainly aborted: no commit was
//! requested, or the abort succeeded) or info (the commit's outcome is unknown).

use crate::client::{
    next_offsets, AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig, ProducerRecord,
    TransactionalProducer, TxnError, TxnSettings,
};
use crate::history::refs::{parse_id, record_ref, text};
use crate::history::{OpKind, RecordRef, Value};
use crate::scenario::Scenario;
use eosim_sim::kafka::TopicPartition;
use std::collections::BTreeSet;
use std::time::Duration;

/// The consumer group of the copiers.
pub const COPY_GROUP: &str = "copier";
/// The copiers' `max.poll.interval.ms` (and rebalance timeout), ms.
const COPIER_MAX_POLL_INTERVAL_MS: u64 = 20_000;
/// Pause between failed `init_transactions` attempts (or producer creations), ms.
const INIT_RETRY_MS: u64 = 500;
/// One poll, ms.
const POLL_MS: u64 = 200;

/// Where a copier runs: the simulation or a real process.
pub trait CopierHost: Send + Sync {
    /// The transactional producer.
    type Txn: TransactionalProducer;

    /// Records an op of the copier (process `consumer-<i>`).
    fn record(&self, kind: OpKind, value: Value, error: Option<String>);

    /// A number for the next transaction, unique within the run (the `txn` op's `id`, by
    /// which the checkers pair its invoke and completion).
    fn next_txn(&self) -> u64;

    /// A transactional producer with `config`, not yet initialized.
    ///
    /// # Errors
    /// A text when the client cannot be created (the loop retries).
    fn txn_producer(&self, config: &TxnSettings) -> Result<Self::Txn, String>;
}

/// One copier's settings, from the scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct CopierConfig {
    /// The copier's number `i` (process `consumer-<i>`).
    pub index: u32,
    /// The input topic.
    pub input_topic: String,
    /// The output topic (`copy.output_topic`).
    pub output_topic: String,
    /// The consumer's settings ([`consumer_config`]).
    pub consumer: ConsumerConfig,
    /// The transactional producer's.
    pub txn: TxnSettings,
    /// Time the transform takes per record before it is sent (`copy.process_ms`).
    pub process: Duration,
    /// Bound on one transactional call (init, offsets, commit, abort): three request
    /// timeouts.
    pub call_timeout: Duration,
    /// Transactions this copier aborts on purpose (an injected produce error), by their
    /// 0-based number within the process (`copy.abort_transactions`).
    pub abort_transactions: BTreeSet<u64>,
    /// Seek back to the committed offsets after an abort (`copy.rewind_on_abort`).
    pub rewind_on_abort: bool,
}

impl CopierConfig {
    /// Copier `index` of `scenario`.
    pub fn of_scenario(scenario: &Scenario, index: u32) -> Self {
        let w = &scenario.workload;
        let copy = &scenario.copy;
        Self {
            index,
            input_topic: scenario.topic.name.clone(),
            output_topic: copy.output_topic.clone(),
            consumer: consumer_config(scenario),
            txn: TxnSettings {
                transactional_id: format!("copier-{index}"),
                transaction_timeout_ms: copy.transaction_timeout_ms,
                producer: w.idempotent_producer_config(),
            },
            process: Duration::from_millis(copy.process_ms),
            call_timeout: Duration::from_millis(w.request_timeout_ms * 3),
            abort_transactions: copy.abort_transactions.iter().copied().collect(),
            rewind_on_abort: copy.rewind_on_abort,
        }
    }
}

/// The copiers' consumer: group [`COPY_GROUP`], `[copy] "isolation.level"` (read_committed
/// by default), from the earliest offset,
/// at most `copy.records_per_transaction_max` records per poll, `[workload]`'s session and
/// request timeouts, `[copy] "group.protocol"` (classic, or KIP-848's consumer protocol).
pub fn consumer_config(scenario: &Scenario) -> ConsumerConfig {
    let w = &scenario.workload;
    let mut config = ConsumerConfig::new(COPY_GROUP);
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.isolation_level = scenario.copy.isolation_level.to_isolation();
    config.session_timeout_ms = w.session_timeout_ms;
    config.heartbeat_interval_ms = (w.session_timeout_ms / 3).max(100);
    config.max_poll_records = scenario.copy.records_per_transaction_max;
    config.request_timeout_ms = w.request_timeout_ms;
    // The rebalance timeout, which also bounds a JoinGroup: a lost JoinGroup (message
    // faults drop requests outright, where TCP would retransmit) is retried after 25 s
    // instead of Java's default 305 s, within the drain's bound.
    config.max_poll_interval_ms = COPIER_MAX_POLL_INTERVAL_MS;
    config.group_protocol = scenario.copy.group_protocol;
    config
}

/// Runs copier `config.index` on `consumer` until its process ends: poll, copy in a
/// transaction with the offsets, commit; forever (see the module docs).
pub async fn run<H: CopierHost, C: Consumer>(host: &H, mut consumer: C, config: &CopierConfig) {
    let topics = vec![config.input_topic.clone()];
    while consumer.subscribe(&topics).await.is_err() {
        tokio::time::sleep(Duration::from_millis(INIT_RETRY_MS)).await;
    }
    let mut producer = new_txn_producer(host, config).await;
    let mut local_txn = 0u64;
    loop {
        let records = match consumer.poll(Duration::from_millis(POLL_MS)).await {
            Ok(records) if !records.is_empty() => records,
            _ => continue,
        };
        let rows: Vec<RecordRef> = records.iter().map(record_ref).collect();
        host.record(OpKind::Ok, Value::Poll { records: rows }, None);
        let inject = config.abort_transactions.contains(&local_txn);
        local_txn += 1;
        let batch = Batch {
            host,
            config,
            producer: &producer,
        };
        let outcome = batch.copy(&consumer, &records, inject).await;
        if outcome == Outcome::Committed {
            continue;
        }
        if outcome == Outcome::Recreate {
            crate::mark!("copy:producer-recreated");
            producer = new_txn_producer(host, config).await;
        }
        if config.rewind_on_abort {
            crate::mark!("copy:rewind-after-abort");
            rewind(&mut consumer).await;
        }
    }
}

/// A transactional producer, initialized (retried until it is).
async fn new_txn_producer<H: CopierHost>(host: &H, config: &CopierConfig) -> H::Txn {
    loop {
        match host.txn_producer(&config.txn) {
            Ok(producer) => match producer.init_transactions(config.call_timeout).await {
                Ok(()) => return producer,
                Err(e) => tracing::debug!(%e, "init_transactions"),
            },
            Err(e) => tracing::warn!(%e, "transactional producer"),
        }
        tokio::time::sleep(Duration::from_millis(INIT_RETRY_MS)).await;
    }
}

/// How a copied batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Committed,
    /// Aborted; the producer is usable.
    Aborted,
    /// The producer must be recreated (fatal error, or an EndTxn of unknown outcome).
    Recreate,
}

/// One transaction of a copier.
struct Batch<'a, H: CopierHost> {
    host: &'a H,
    config: &'a CopierConfig,
    producer: &'a H::Txn,
}

impl<H: CopierHost> Batch<'_, H> {
    /// Begin, send every record, add the offsets, commit; records the `txn` op. An error
    /// before the commit request aborts.
    async fn copy(
        &self,
        consumer: &impl Consumer,
        records: &[ConsumedRecord],
        inject_abort: bool,
    ) -> Outcome {
        let id = self.host.next_txn();
        let offsets = next_offsets(records);
        let (sends, mut failed) = match self.producer.begin_transaction() {
            Ok(()) => self.send_records(records).await,
            Err(e) => (Vec::new(), Some(e)),
        };
        let mut error = failed.as_ref().map(ToString::to_string);
        if error.is_none() && inject_abort {
            error = Some("injected produce error".to_string());
        }
        if error.is_none() {
            match consumer.group_metadata() {
                Some(group) => {
                    let result = self
                        .producer
                        .send_offsets_to_transaction(&offsets, &group, self.config.call_timeout)
                        .await;
                    if let Err(e) = result {
                        error = Some(e.to_string());
                        failed = Some(e);
                    }
                }
                None => error = Some("no stable group generation".to_string()),
            }
        }
        let value = Value::Txn {
            id,
            transactional_id: self.config.txn.transactional_id.clone(),
            sends,
            offsets,
        };
        self.host.record(OpKind::Invoke, value.clone(), None);
        if let Some(error) = error {
            let fatal = failed.as_ref().is_some_and(TxnError::is_fatal);
            return self.abort(value, error, fatal).await;
        }
        match self
            .producer
            .commit_transaction(self.config.call_timeout)
            .await
        {
            Ok(()) => {
                self.host.record(OpKind::Ok, value, None);
                Outcome::Committed
            }
            Err(e) => {
                self.host.record(OpKind::Info, value, Some(e.to_string()));
                Outcome::Recreate
            }
        }
    }

    /// Aborts the transaction `value` after `error` and records it `fail`: no commit was
    /// requested, so it can only abort. A fenced producer is not asked to abort.
    async fn abort(&self, value: Value, error: String, fatal: bool) -> Outcome {
        let abort = match fatal {
            true => Err("not aborted: the producer is fenced".to_string()),
            false => self
                .producer
                .abort_transaction(self.config.call_timeout)
                .await
                .map_err(|e| e.to_string()),
        };
        let error = match &abort {
            Ok(()) => error,
            Err(why) => format!("{error}; abort: {why}"),
        };
        self.host.record(OpKind::Fail, value, Some(error));
        if abort.is_ok() {
            Outcome::Aborted
        } else {
            Outcome::Recreate
        }
    }

    /// Sends each record unchanged to the output topic until one fails; returns what was
    /// sent (offset -1 where unacknowledged) and the error.
    async fn send_records(&self, records: &[ConsumedRecord]) -> (Vec<RecordRef>, Option<TxnError>) {
        let topic = &self.config.output_topic;
        let mut sends = Vec::new();
        for r in records {
            tokio::time::sleep(self.config.process).await;
            let record = ProducerRecord {
                topic: topic.clone(),
                partition: None,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: Vec::new(),
            };
            let (id, key) = (parse_id(&r.value), text(&r.key));
            let (partition, offset, error) = match self.producer.send(record).await {
                Ok(d) => (d.partition, d.offset, None),
                Err(e) => (0, -1, Some(e)),
            };
            sends.push(RecordRef {
                id,
                key,
                tp: TopicPartition::new(topic.as_str(), partition),
                offset,
            });
            if error.is_some() {
                return (sends, error);
            }
        }
        (sends, None)
    }
}

/// Seeks every assigned partition back to the group's committed offset (0 where none).
async fn rewind(consumer: &mut impl Consumer) {
    let assignment = consumer.assignment();
    if assignment.is_empty() {
        return;
    }
    let Ok(committed) = consumer.committed(&assignment).await else {
        // The next poll after a rejoin positions from the committed offsets anyway; until
        // then, drop what is buffered by seeking every partition to its start.
        for tp in &assignment {
            let _ = consumer.seek(tp, 0);
        }
        return;
    };
    for (tp, offset) in committed {
        let _ = consumer.seek(&tp, offset.max(0));
    }
}

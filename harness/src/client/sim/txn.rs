//! The simulated transactional producer, after Java's `TransactionManager` (TV1 client
//! protocol, models-reference C.4) behind the rdkafka-shaped [`TransactionalProducer`].
//!
//! # Protocol
//! 1. `init_transactions`: FindCoordinator (transaction), InitProducerId with the
//!    `transactional.id`; retried on CONCURRENT_TRANSACTIONS (an older instance's open
//!    transaction is being aborted) and coordinator errors.
//! 2. `begin_transaction`: local.
//! 3. `send`: AddPartitionsToTxn for a partition new to the transaction, then Produce with
//!    `transactional = true` and the partition's sequence; retries keep the sequence.
//!    `send_with_callback` (and `send` with a batching configuration) queues the record in
//!    the producer's accumulator (`client::sim::sender`, as the idempotent producer's):
//!    the first record of a partition new to the transaction sends AddPartitionsToTxn at
//!    once, with every other partition queued meanwhile (Java's sender, woken by the new
//!    batch, `TransactionManager.maybeAddPartition`); a batch leaves after its linger, once
//!    its partition joined the transaction (`isSendToPartitionAllowed`), as one Produce. `commit_transaction` flushes the queue before its EndTxn and refuses if a
//!    batch failed; `abort_transaction` fails the queued batches without sending them
//!    (`RecordAccumulator.abortUndrainedBatches`) and waits for those in flight.
//! 4. `send_offsets_to_transaction`: AddOffsetsToTxn, then TxnOffsetCommit to the group
//!    coordinator with the consumer's generation and member id (KIP-447).
//! 5. `commit_transaction` / `abort_transaction`: EndTxn, retried on timeouts and
//!    CONCURRENT_TRANSACTIONS. A transaction that added nothing ends locally.
//!
//! # Errors (Java's classes, rdkafka's flags)
//! - Fatal: PRODUCER_FENCED (90), INVALID_PRODUCER_EPOCH (47), INVALID_TXN_STATE (48) on
//!   EndTxn: a newer instance owns the id; the producer must be dropped.
//! - Abortable: a send that failed or timed out, OUT_OF_ORDER_SEQUENCE (45), a
//!   TxnOffsetCommit fenced by the group (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID). After it
//!   only `abort_transaction` is allowed; that abort is followed by an epoch bump
//!   (InitProducerId with the current id and epoch, KIP-360), so the next transaction
//!   cannot meet the failed one's stray requests in the same epoch.
//! - Retriable: a call that ran out of time on timeouts or coordinator errors; the
//!   transaction is still open and the outcome of an EndTxn is then unknown.
//!
//! # Transaction version 2 (KIP-890 part 2)
//! Under TV2 the coordinator bumps the epoch at every EndTxn and answers with the new
//! producer id and epoch (EndTxn v5); the client continues with them, sequences from 0.

use super::conn::{needs_metadata_refresh, Connection};
use super::producer::{is_retriable, partition_of, produce_once, to_record, IdempotenceState};
use super::sender::{BatchDelivery, BatchQueue, Waiter};
use crate::client::{
    ClientError, ConsumerGroupMetadata, Delivery, ProducerConfig, ProducerRecord,
    TransactionalProducer, TxnDeliveryCallback, TxnError, TxnErrorClass,
};
use async_trait::async_trait;
use eosim_sim::kafka::{
    BrokerId, CoordinatorKind, KafkaError, Offset, Record, Request, Response, TopicPartition,
};
use madsim::time::Instant;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;

/// Settings of a transactional producer, with Kafka's names.
#[derive(Debug, Clone, PartialEq)]
pub struct TxnProducerConfig {
    /// `transactional.id`.
    pub transactional_id: String,
    /// `transaction.timeout.ms`. Default 60000 (Streams EOS: 10000).
    pub transaction_timeout_ms: u64,
    /// The producer settings underneath (idempotence is implied).
    pub producer: ProducerConfig,
    /// Fault points (simulation only).
    pub buggify: TxnBuggify,
}

impl TxnProducerConfig {
    /// Kafka's defaults for `transactional_id`.
    pub fn new(transactional_id: impl Into<String>) -> Self {
        Self {
            transactional_id: transactional_id.into(),
            transaction_timeout_ms: 60_000,
            producer: ProducerConfig::default(),
            buggify: TxnBuggify::default(),
        }
    }
}

/// BUGGIFY-style fault points of the transactional producer: hold a request in the network
/// so that it arrives late, after the producer gave up on it (cases.md F8 for Produce,
/// KAFKA-17754 for EndTxn). Probabilities per call; all zero by default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TxnBuggify {
    /// Probability that the first attempt of a transactional Produce is held back.
    pub produce_delay_probability: f64,
    /// Probability that the first attempt of an EndTxn is held back.
    pub end_txn_delay_probability: f64,
    /// How long a held request waits before it leaves, ms.
    pub delay_ms: u64,
}

impl TxnBuggify {
    /// The delay for one request with `probability`, drawn from madsim's RNG.
    fn draw(&self, probability: f64) -> Duration {
        use madsim::rand::Rng;
        if probability > 0.0 && madsim::rand::thread_rng().gen_bool(probability.min(1.0)) {
            tracing::debug!(
                delay_ms = self.delay_ms,
                "buggify: request held in the network"
            );
            Duration::from_millis(self.delay_ms)
        } else {
            Duration::ZERO
        }
    }
}

/// Where the producer is in its life (Java's `TransactionManager.State`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Uninitialized,
    Ready,
    InTransaction,
    AbortableError(String),
    FatalError(String),
}

#[derive(Debug)]
struct Inner {
    state: State,
    ids: IdempotenceState,
    coordinator: Option<BrokerId>,
    /// Partitions added to the open transaction.
    partitions: BTreeSet<TopicPartition>,
    /// Partitions of queued records not added yet: the next AddPartitionsToTxn adds them
    /// all (Java's `TransactionManager.maybeAddPartition` → `newPartitionsInTransaction`).
    pending: BTreeSet<TopicPartition>,
    /// Whether the open transaction added offsets.
    offsets_added: bool,
    /// KIP-360: bump the epoch after the abort that the current error requires.
    epoch_bump_required: bool,
    /// An abort is under way: queued batches fail without leaving (Java's
    /// `RecordAccumulator.abortUndrainedBatches`), and no partition joins any more.
    aborting: bool,
    /// Transactions begun so far: an AddPartitionsToTxn spawned for one transaction does
    /// nothing once another has begun.
    begun: u64,
}

/// A transactional producer on the simulated cluster. See the module docs.
pub struct SimTransactionalProducer {
    core: Arc<Core>,
    /// Queued sends ([`TransactionalProducer::send_with_callback`]), delivered by `core`.
    queue: BatchQueue,
}

/// The producer's state and calls, shared with the batches' tasks.
struct Core {
    conn: Connection,
    config: TxnProducerConfig,
    inner: Mutex<Inner>,
    /// One API call at a time.
    in_flight: tokio::sync::Mutex<()>,
    /// One AddPartitionsToTxn at a time, and none while an EndTxn is under way (Java sends
    /// one transactional request at a time; here AddOffsetsToTxn, TxnOffsetCommit and
    /// InitProducerId are serialised by `in_flight`, the API calls' lock, instead).
    adding: tokio::sync::Mutex<()>,
}

impl SimTransactionalProducer {
    /// A producer of `config.transactional_id` on `conn`; nothing is sent before
    /// [`TransactionalProducer::init_transactions`].
    pub fn new(conn: Connection, config: TxnProducerConfig) -> Self {
        let inner = Inner {
            state: State::Uninitialized,
            ids: IdempotenceState::new(-1, -1),
            coordinator: None,
            partitions: BTreeSet::new(),
            pending: BTreeSet::new(),
            offsets_added: false,
            epoch_bump_required: false,
            aborting: false,
            begun: 0,
        };
        let queue = BatchQueue::new(conn.clone(), config.producer.clone());
        let core = Core {
            conn,
            config,
            inner: Mutex::new(inner),
            in_flight: tokio::sync::Mutex::new(()),
            adding: tokio::sync::Mutex::new(()),
        };
        Self {
            core: Arc::new(core),
            queue,
        }
    }

    /// The producer id and epoch in use (-1, -1 before `init_transactions`).
    pub fn producer_id_and_epoch(&self) -> (i64, i16) {
        self.core.producer_id_and_epoch()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.core.lock()
    }

    /// Waits until no queued batch is left; `api`'s retriable timeout otherwise.
    async fn drain(&self, api: &'static str, deadline: Instant) -> Result<(), TxnError> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        (self.queue.flush(timeout).await)
            .map_err(|e| TxnError::new(api, TxnErrorClass::Retriable, e))
    }
}

impl Core {
    /// The producer id and epoch in use (-1, -1 before `init_transactions`).
    fn producer_id_and_epoch(&self) -> (i64, i16) {
        let inner = self.lock();
        (inner.ids.producer_id, inner.ids.producer_epoch)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("transaction state lock")
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.producer.request_timeout_ms)
    }

    fn backoff(&self) -> Duration {
        Duration::from_millis(self.config.producer.retry_backoff_ms)
    }

    /// Fails unless the producer is in a transaction; errors carry the state's class.
    fn require_transaction(&self, api: &'static str) -> Result<(), TxnError> {
        match &self.lock().state {
            State::InTransaction => Ok(()),
            State::AbortableError(why) => Err(TxnError::new(
                api,
                TxnErrorClass::Abortable,
                ClientError::Fatal(format!("transaction must be aborted: {why}")),
            )),
            State::FatalError(why) => Err(fatal(api, why.clone())),
            other => Err(fatal(
                api,
                format!("no transaction in progress ({other:?})"),
            )),
        }
    }

    /// Moves to the error state `class` calls for and returns the error.
    fn fail(&self, api: &'static str, class: TxnErrorClass, cause: ClientError) -> TxnError {
        let mut inner = self.lock();
        match class {
            TxnErrorClass::Fatal => {
                crate::mark!(match cause {
                    ClientError::Kafka(
                        KafkaError::ProducerFenced | KafkaError::InvalidProducerEpoch,
                    ) => "client:txn-producer-fenced",
                    _ => "client:txn-fatal-error",
                });
                inner.state = State::FatalError(cause.to_string());
            }
            TxnErrorClass::Abortable => {
                crate::mark!("client:txn-abortable-error");
                if !matches!(inner.state, State::FatalError(_)) {
                    inner.state = State::AbortableError(cause.to_string());
                    inner.epoch_bump_required = true;
                }
            }
            TxnErrorClass::Retriable => {}
        }
        TxnError::new(api, class, cause)
    }

    /// Sends `request` to the transaction coordinator, re-finding it on coordinator
    /// errors and timeouts and retrying CONCURRENT_TRANSACTIONS, until `deadline`.
    ///
    /// # Errors
    /// The last timeout once `deadline` passed; other errors come back as responses.
    async fn coordinator_call(
        &self,
        request: Request,
        deadline: Instant,
    ) -> Result<Response, ClientError> {
        self.coordinator_call_delayed(request, deadline, Duration::ZERO)
            .await
    }

    /// As [`Self::coordinator_call`], the first attempt held `first_delay` in the network.
    async fn coordinator_call_delayed(
        &self,
        request: Request,
        deadline: Instant,
        mut first_delay: Duration,
    ) -> Result<Response, ClientError> {
        let key = self.config.transactional_id.clone();
        loop {
            let known = self.lock().coordinator;
            let coordinator = match known {
                Some(c) => Ok(c),
                None => {
                    self.find_coordinator(&key, CoordinatorKind::Transaction)
                        .await
                }
            };
            let outcome = match coordinator {
                Ok(c) => {
                    self.lock().coordinator = Some(c);
                    let delay = std::mem::take(&mut first_delay);
                    let timeout = self.request_timeout();
                    self.conn
                        .request_delayed(c, request.clone(), timeout, delay)
                        .await
                }
                Err(e) => Err(e),
            };
            let error = match outcome {
                Ok(Response::Error(e)) if is_coordinator_error(e) => ClientError::Kafka(e),
                Ok(response) => return Ok(response),
                Err(e) => e,
            };
            if !matches!(
                error,
                ClientError::Kafka(KafkaError::ConcurrentTransactions)
            ) {
                self.lock().coordinator = None;
            }
            if Instant::now() + self.backoff() >= deadline {
                return Err(error);
            }
            madsim::time::sleep(self.backoff()).await;
        }
    }

    /// FindCoordinator for `key` from any broker.
    async fn find_coordinator(
        &self,
        key: &str,
        kind: CoordinatorKind,
    ) -> Result<BrokerId, ClientError> {
        let request = Request::FindCoordinator {
            key: key.to_string(),
            kind,
        };
        match self
            .conn
            .request_any(request, self.request_timeout())
            .await?
        {
            Response::FindCoordinator { broker } => Ok(broker),
            Response::Error(e) => Err(ClientError::Kafka(e)),
            other => Err(ClientError::Fatal(format!("FindCoordinator: {other:?}"))),
        }
    }

    /// InitProducerId with the current id and epoch (-1 on the first call); on success
    /// the new id and epoch with sequences from 0.
    async fn init_producer_id(&self, api: &'static str, deadline: Instant) -> Result<(), TxnError> {
        let (producer_id, producer_epoch) = self.producer_id_and_epoch();
        let request = Request::InitProducerId {
            transactional_id: Some(self.config.transactional_id.clone()),
            transaction_timeout_ms: self.config.transaction_timeout_ms,
            producer_id,
            producer_epoch,
        };
        match self.coordinator_call(request, deadline).await {
            Ok(Response::InitProducerId {
                producer_id,
                producer_epoch,
            }) => {
                let mut inner = self.lock();
                inner.ids = IdempotenceState::new(producer_id, producer_epoch);
                inner.epoch_bump_required = false;
                inner.state = State::Ready;
                Ok(())
            }
            Ok(Response::Error(e)) => {
                Err(self.fail(api, TxnErrorClass::Fatal, ClientError::Kafka(e)))
            }
            Ok(other) => Err(fatal(api, format!("unexpected response {other:?}"))),
            Err(e) => Err(TxnError::new(api, TxnErrorClass::Retriable, e)),
        }
    }

    /// AddPartitionsToTxn for `tp` unless the transaction already has it, with every
    /// partition of queued records not added yet (Java adds them in one request). With
    /// `only_in`, nothing once a transaction other than that one has begun (an add spawned
    /// for a transaction that ended).
    async fn add_partition(
        &self,
        tp: &TopicPartition,
        deadline: Instant,
        only_in: Option<u64>,
    ) -> Result<(), TxnError> {
        if self.lock().partitions.contains(tp) {
            return Ok(());
        }
        let _one = self.adding.lock().await;
        let api = "send";
        loop {
            let partitions: Vec<TopicPartition> = {
                let inner = self.lock();
                let ended = only_in.is_some_and(|n| n != inner.begun);
                if inner.partitions.contains(tp) || ended {
                    return Ok(());
                }
                if inner.state != State::InTransaction || inner.aborting {
                    // The transaction failed or ends: nothing joins it any more.
                    let why = format!("no partition joins the transaction ({:?})", inner.state);
                    return Err(TxnError::new(
                        api,
                        TxnErrorClass::Abortable,
                        ClientError::Fatal(why),
                    ));
                }
                let pending = inner.pending.iter().filter(|p| *p != tp);
                let others = pending.filter(|p| !inner.partitions.contains(*p)).cloned();
                std::iter::once(tp.clone()).chain(others).collect()
            };
            let (producer_id, producer_epoch) = self.producer_id_and_epoch();
            let request = Request::AddPartitionsToTxn {
                transactional_id: self.config.transactional_id.clone(),
                producer_id,
                producer_epoch,
                partitions: partitions.clone(),
            };
            let error = match self.coordinator_call(request, deadline).await {
                Ok(Response::AddPartitionsToTxn { results }) => {
                    match results.iter().find_map(|(_, e)| *e) {
                        None => {
                            let mut inner = self.lock();
                            for p in partitions {
                                inner.pending.remove(&p);
                                inner.partitions.insert(p);
                            }
                            return Ok(());
                        }
                        Some(e) => ClientError::Kafka(e),
                    }
                }
                Ok(Response::Error(e)) => ClientError::Kafka(e),
                Ok(other) => {
                    let cause = ClientError::Fatal(format!("unexpected response {other:?}"));
                    return Err(self.fail(api, TxnErrorClass::Fatal, cause));
                }
                Err(e) => return Err(self.fail(api, TxnErrorClass::Abortable, e)),
            };
            let class = classify(&error);
            if class != TxnErrorClass::Retriable || Instant::now() + self.backoff() >= deadline {
                let class = if class == TxnErrorClass::Retriable {
                    TxnErrorClass::Abortable
                } else {
                    class
                };
                return Err(self.fail(api, class, error));
            }
            madsim::time::sleep(self.backoff()).await;
        }
    }

    /// Produces `records` to `tp` as one batch in the transaction, retrying with the same
    /// sequence; the base offset.
    async fn produce(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
        deadline: Instant,
    ) -> Result<Offset, TxnError> {
        let mut attempts = 0u32;
        let mut ambiguous = false;
        let mut delay = self
            .config
            .buggify
            .draw(self.config.buggify.produce_delay_probability);
        loop {
            let header = self.lock().ids.header(tp, true);
            let config = &self.config.producer;
            let first_delay = std::mem::take(&mut delay);
            let batch = records.clone();
            let result = produce_once(&self.conn, config, tp, header, batch, first_delay).await;
            let error = match result {
                Ok(offset) => {
                    self.lock().ids.acknowledge(tp, records.len());
                    return Ok(offset);
                }
                Err(e) => e,
            };
            ambiguous |= error.is_ambiguous();
            if let ClientError::Kafka(e) = &error {
                if needs_metadata_refresh(*e) {
                    self.conn.invalidate(&tp.topic);
                }
            }
            attempts += 1;
            let out_of_time = Instant::now() + self.backoff() >= deadline;
            if !is_retriable(&error) || attempts > self.config.producer.retries || out_of_time {
                let class = match classify(&error) {
                    TxnErrorClass::Fatal => TxnErrorClass::Fatal,
                    _ => TxnErrorClass::Abortable,
                };
                let cause = if ambiguous && !matches!(error, ClientError::Timeout { .. }) {
                    ClientError::Timeout {
                        what: format!("transactional delivery to {tp} (last: {error})"),
                        timeout_ms: self.config.producer.delivery_timeout_ms,
                    }
                } else {
                    error
                };
                return Err(self.fail("send", class, cause));
            }
            madsim::time::sleep(self.backoff()).await;
        }
    }

    /// TxnOffsetCommit to the group coordinator, retrying coordinator errors.
    async fn txn_offset_commit(
        &self,
        offsets: &[(TopicPartition, Offset)],
        group: &ConsumerGroupMetadata,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        let api = "send_offsets_to_transaction";
        loop {
            let (producer_id, producer_epoch) = self.producer_id_and_epoch();
            let request = Request::TxnOffsetCommit {
                transactional_id: self.config.transactional_id.clone(),
                group_id: group.group_id.clone(),
                producer_id,
                producer_epoch,
                generation: group.generation,
                member_id: group.member_id.clone(),
                offsets: offsets.to_vec(),
            };
            let outcome = match self
                .find_coordinator(&group.group_id, CoordinatorKind::Group)
                .await
            {
                Ok(c) => self.conn.request(c, request, self.request_timeout()).await,
                Err(e) => Err(e),
            };
            let error = match outcome {
                Ok(Response::TxnOffsetCommit { results }) => {
                    match results.iter().find_map(|(_, e)| *e) {
                        None => return Ok(()),
                        Some(e) => ClientError::Kafka(e),
                    }
                }
                Ok(Response::Error(e)) => ClientError::Kafka(e),
                Ok(other) => return Err(fatal(api, format!("unexpected response {other:?}"))),
                Err(e) => e,
            };
            let class = classify(&error);
            if class != TxnErrorClass::Retriable || Instant::now() + self.backoff() >= deadline {
                let class = match class {
                    TxnErrorClass::Fatal => TxnErrorClass::Fatal,
                    _ => TxnErrorClass::Abortable,
                };
                return Err(self.fail(api, class, error));
            }
            madsim::time::sleep(self.backoff()).await;
        }
    }

    /// EndTxn(`commit`), retried until `deadline`. A transaction that added nothing ends
    /// locally, as in Java.
    async fn end_txn(
        &self,
        api: &'static str,
        commit: bool,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        // After any AddPartitionsToTxn under way (one transactional request at a time),
        // within the call's deadline: an add retrying against an unreachable coordinator
        // holds the lock until its own deadline.
        let _adding = match self.adding.try_lock() {
            Ok(guard) => guard,
            Err(_) => match eosim_sim::deadline::timeout(
                deadline.saturating_duration_since(Instant::now()),
                self.adding.lock(),
            )
            .await
            {
                Some(guard) => guard,
                None => {
                    let cause = ClientError::Timeout {
                        what: format!("{api}: an AddPartitionsToTxn still under way"),
                        timeout_ms: 0,
                    };
                    return Err(TxnError::new(api, TxnErrorClass::Retriable, cause));
                }
            },
        };
        let nothing_added = {
            let inner = self.lock();
            inner.partitions.is_empty() && !inner.offsets_added
        };
        if !nothing_added {
            let (producer_id, producer_epoch) = self.producer_id_and_epoch();
            let request = Request::EndTxn {
                transactional_id: self.config.transactional_id.clone(),
                producer_id,
                producer_epoch,
                commit,
            };
            let delay = self
                .config
                .buggify
                .draw(self.config.buggify.end_txn_delay_probability);
            match self
                .coordinator_call_delayed(request, deadline, delay)
                .await
            {
                Ok(Response::EndTxn) => {}
                // KIP-890 part 2: the coordinator bumped the epoch with this EndTxn.
                Ok(Response::EndTxnV5 {
                    producer_id,
                    producer_epoch,
                }) => {
                    self.lock().ids = IdempotenceState::new(producer_id, producer_epoch);
                }
                Ok(Response::Error(e)) => {
                    return Err(self.fail(api, TxnErrorClass::Fatal, ClientError::Kafka(e)))
                }
                Ok(other) => return Err(fatal(api, format!("unexpected response {other:?}"))),
                Err(e) => return Err(TxnError::new(api, TxnErrorClass::Retriable, e)),
            }
        }
        let mut inner = self.lock();
        inner.partitions.clear();
        inner.pending.clear();
        inner.offsets_added = false;
        inner.state = State::Ready;
        Ok(())
    }

    /// Why a queued batch may not leave: an abort is under way, or the transaction failed
    /// (Java fails such batches in the accumulator, `abortUndrainedBatches`).
    fn undrainable(&self) -> Option<ClientError> {
        let inner = self.lock();
        match &inner.state {
            _ if inner.aborting => Some(ClientError::Fatal(
                "transaction aborted: the batch was failed before it was sent".into(),
            )),
            State::AbortableError(why) | State::FatalError(why) => Some(ClientError::Fatal(
                format!("transaction in error: the batch was failed before it was sent ({why})"),
            )),
            _ => None,
        }
    }

    /// A queued record's delivery error as the transaction classes it: fatal once the
    /// producer is, else abortable (the failed batch left the transaction to be aborted).
    fn delivery_error(&self, cause: ClientError) -> TxnError {
        let class = match self.lock().state {
            State::FatalError(_) => TxnErrorClass::Fatal,
            _ => TxnErrorClass::Abortable,
        };
        TxnError::new("send", class, cause)
    }
}

/// A batch of queued records: fails at once when it may not leave, else joins the
/// transaction's partitions and is produced.
impl BatchDelivery for Arc<Core> {
    async fn deliver(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
        deadline: Instant,
    ) -> Result<i64, ClientError> {
        if let Some(e) = self.undrainable() {
            crate::mark!("client:txn-batch-failed-unsent");
            return Err(e);
        }
        let delivered = match self.add_partition(tp, deadline, None).await {
            Ok(()) => self.produce(tp, records, deadline).await,
            Err(e) => Err(e),
        };
        delivered.map_err(|e| {
            // Any failed batch leaves the transaction to be aborted (Java's
            // `TransactionManager.handleFailedBatch`), whatever path failed it.
            let open = {
                let inner = self.lock();
                inner.state == State::InTransaction && !inner.aborting
            };
            if open {
                self.fail("send", TxnErrorClass::Abortable, e.cause.clone());
            }
            e.cause
        })
    }

    /// A partition's batches leave once it joined the transaction, or at once to be
    /// failed when the transaction cannot take them any more.
    fn sendable(&self, tp: &TopicPartition) -> bool {
        let inner = self.lock();
        inner.partitions.contains(tp) || inner.aborting || inner.state != State::InTransaction
    }
}

#[async_trait]
impl TransactionalProducer for SimTransactionalProducer {
    async fn init_transactions(&self, timeout: Duration) -> Result<(), TxnError> {
        let core = &self.core;
        let _one = core.in_flight.lock().await;
        if self.lock().state != State::Uninitialized {
            return Err(fatal("init_transactions", "already initialized".into()));
        }
        core.init_producer_id("init_transactions", Instant::now() + timeout)
            .await
    }

    fn begin_transaction(&self) -> Result<(), TxnError> {
        let mut inner = self.lock();
        match &inner.state {
            State::Ready => {
                inner.state = State::InTransaction;
                inner.begun += 1;
                inner.partitions.clear();
                inner.pending.clear();
                inner.offsets_added = false;
                Ok(())
            }
            State::FatalError(why) => Err(fatal("begin_transaction", why.clone())),
            other => Err(fatal("begin_transaction", format!("not ready ({other:?})"))),
        }
    }

    /// With a batching configuration ([`ProducerConfig::batching`]) the record is queued
    /// and its delivery awaited (Java's `send(record).get()`); otherwise it is one Produce
    /// of one record from this task, after any queued batches.
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, TxnError> {
        let core = &self.core;
        if core.config.producer.batching() {
            let (report, delivered) = oneshot::channel();
            let callback = Box::new(move |outcome| {
                let _ = report.send(outcome);
            });
            self.send_with_callback(record, callback).await;
            return delivered.await.unwrap_or_else(|_| {
                let cause =
                    ClientError::Fatal("the producer stopped with the record queued".into());
                Err(TxnError::new("send", TxnErrorClass::Abortable, cause))
            });
        }
        let _one = core.in_flight.lock().await;
        core.require_transaction("send")?;
        let deadline =
            Instant::now() + Duration::from_millis(core.config.producer.delivery_timeout_ms);
        if !self.queue.is_idle() {
            self.drain("send", deadline).await?;
        }
        let partition = partition_of(&core.conn, &core.config.producer, &record)
            .await
            .map_err(|e| core.fail("send", TxnErrorClass::Abortable, e))?;
        let tp = TopicPartition::new(&record.topic, partition);
        core.add_partition(&tp, deadline, None).await?;
        let offset = core.produce(&tp, vec![to_record(record)], deadline).await?;
        Ok(Delivery { partition, offset })
    }

    /// Queues the record in the transaction's accumulator. The first record of a partition
    /// new to the transaction sends AddPartitionsToTxn at once (with every partition queued
    /// meanwhile); the batch leaves after its linger, once the partition joined. No task
    /// per record.
    async fn send_with_callback(&self, record: ProducerRecord, callback: TxnDeliveryCallback) {
        let core = &self.core;
        if let Err(e) = core.require_transaction("send") {
            return callback(Err(e));
        }
        let partition = match partition_of(&core.conn, &core.config.producer, &record).await {
            Ok(partition) => partition,
            Err(e) => return callback(Err(core.fail("send", TxnErrorClass::Abortable, e))),
        };
        let tp = TopicPartition::new(&record.topic, partition);
        let (new_partition, begun) = {
            let mut inner = self.lock();
            let new = !inner.partitions.contains(&tp) && inner.pending.insert(tp.clone());
            (new, inner.begun)
        };
        if new_partition {
            // Java's sender sends AddPartitionsToTxn as soon as a record of a new partition
            // is queued (`KafkaProducer.doSend` wakes it for the new batch), not when the
            // batch leaves: the coordinator has the transaction ongoing from here on.
            let (core, tp, queue) = (core.clone(), tp.clone(), self.queue.clone());
            let timeout = Duration::from_millis(core.config.producer.delivery_timeout_ms);
            tokio::spawn(async move {
                let deadline = Instant::now() + timeout;
                let _ = core.add_partition(&tp, deadline, Some(begun)).await;
                queue.wake();
            });
        }
        let shared = core.clone();
        let waiter = Waiter::Callback(Box::new(move |outcome: Result<Delivery, ClientError>| {
            callback(outcome.map_err(|e| shared.delivery_error(e)));
        }));
        self.queue.enqueue(core, &tp, to_record(record), waiter);
    }

    async fn flush(&self, timeout: Duration) -> Result<(), TxnError> {
        self.drain("flush", Instant::now() + timeout).await
    }

    async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, Offset)],
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<(), TxnError> {
        let core = &self.core;
        let _one = core.in_flight.lock().await;
        let api = "send_offsets_to_transaction";
        let valid: Vec<(TopicPartition, Offset)> =
            offsets.iter().filter(|(_, o)| *o >= 0).cloned().collect();
        if valid.is_empty() {
            return Ok(());
        }
        let offsets = valid.as_slice();
        core.require_transaction(api)?;
        let deadline = Instant::now() + timeout;
        let (producer_id, producer_epoch) = core.producer_id_and_epoch();
        let request = Request::AddOffsetsToTxn {
            transactional_id: core.config.transactional_id.clone(),
            producer_id,
            producer_epoch,
            group_id: group.group_id.clone(),
        };
        match core.coordinator_call(request, deadline).await {
            Ok(Response::AddOffsetsToTxn) => self.lock().offsets_added = true,
            Ok(Response::Error(e)) => {
                let error = ClientError::Kafka(e);
                return Err(core.fail(api, classify_not_retriable(&error), error));
            }
            Ok(other) => return Err(fatal(api, format!("unexpected response {other:?}"))),
            Err(e) => return Err(core.fail(api, TxnErrorClass::Abortable, e)),
        }
        core.txn_offset_commit(offsets, group, deadline).await
    }

    /// Flushes the queued records first (Java sends EndTxn only once no batch is
    /// incomplete); a batch that failed leaves the transaction to be aborted.
    async fn commit_transaction(&self, timeout: Duration) -> Result<(), TxnError> {
        let core = &self.core;
        let _one = core.in_flight.lock().await;
        let api = "commit_transaction";
        let deadline = Instant::now() + timeout;
        core.require_transaction(api)?;
        self.drain(api, deadline).await?;
        core.require_transaction(api)?;
        core.end_txn(api, true, deadline).await
    }

    /// Fails the queued batches unsent and waits for those in flight before the EndTxn
    /// (Java's `abortUndrainedBatches`, then EndTxn once no batch is incomplete).
    async fn abort_transaction(&self, timeout: Duration) -> Result<(), TxnError> {
        let core = &self.core;
        let _one = core.in_flight.lock().await;
        let api = "abort_transaction";
        let state = self.lock().state.clone();
        match state {
            State::InTransaction | State::AbortableError(_) => {}
            State::FatalError(why) => return Err(fatal(api, why)),
            other => {
                return Err(fatal(
                    api,
                    format!("no transaction in progress ({other:?})"),
                ))
            }
        }
        let deadline = Instant::now() + timeout;
        crate::mark!("client:txn-abort");
        self.lock().aborting = true;
        let ended = match self.drain(api, deadline).await {
            Ok(()) => core.end_txn(api, false, deadline).await,
            Err(e) => Err(e),
        };
        self.lock().aborting = false;
        ended?;
        if self.lock().epoch_bump_required {
            crate::mark!("client:txn-abort-epoch-bump");
            core.init_producer_id(api, deadline).await?;
        }
        Ok(())
    }
}

/// A fatal error of `api` with a message.
fn fatal(api: &'static str, why: String) -> TxnError {
    TxnError::new(api, TxnErrorClass::Fatal, ClientError::Fatal(why))
}

/// Java's class of a broker error in a transaction.
fn classify(error: &ClientError) -> TxnErrorClass {
    match error {
        ClientError::Kafka(
            KafkaError::ProducerFenced
            | KafkaError::InvalidProducerEpoch
            | KafkaError::TransactionCoordinatorFenced,
        )
        | ClientError::Fatal(_) => TxnErrorClass::Fatal,
        ClientError::Kafka(KafkaError::ConcurrentTransactions) => TxnErrorClass::Retriable,
        e if is_retriable(e) => TxnErrorClass::Retriable,
        _ => TxnErrorClass::Abortable,
    }
}

/// [`classify`] where retrying is no longer possible: retriable becomes abortable.
fn classify_not_retriable(error: &ClientError) -> TxnErrorClass {
    match classify(error) {
        TxnErrorClass::Retriable => TxnErrorClass::Abortable,
        class => class,
    }
}

/// Errors after which the transaction coordinator must be looked up again (or waited for).
fn is_coordinator_error(e: KafkaError) -> bool {
    matches!(
        e,
        KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress
            | KafkaError::ConcurrentTransactions
            | KafkaError::RequestTimedOut
    )
}

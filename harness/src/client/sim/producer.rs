//! The simulated producer: partitioning, leader routing, retries, `delivery.timeout.ms`, and
//! the idempotent producer of KIP-98 / KIP-360 (on by default, `enable.idempotence=true`).
//!
//! The outcome of a send that saw any timeout is ambiguous and is reported as
//! [`ClientError::Timeout`] unless a later attempt succeeded, because a timed-out Produce
//! may have been appended (`models-reference.md` A.2).
//!
//! # Batching (`linger.ms`, `batch.size`, `max.in.flight.requests.per.connection`)
//! With eosim's defaults (`linger.ms=0`, one request in flight,
//! [`ProducerConfig::batching`] false) an awaited [`Producer::send`] is one Produce request
//! of one record, sent from the caller's task, one at a time: the shape every existing
//! scenario was calibrated with. Otherwise, and for every [`Producer::send_async`], records
//! go through the producer's [`BatchQueue`] (`client::sim::sender`: Kafka's
//! `RecordAccumulator`, one queue of batches per partition) that a sender task drains
//! (Kafka's `Sender.sendProducerData`): a batch leaves when it is full, not its
//! partition's last, `linger.ms` old, or on [`Producer::flush`], while its leader has fewer
//! than `max.in.flight.requests.per.connection` batches in flight from this producer. Each
//! batch is retried as a unit (same records, same base sequence when idempotent) by its
//! own task, and every record of it resolves to `Delivery { offset: base offset + index }`
//! or to the batch's error, ambiguous for all of them alike.
//!
//! Ordering. One batch per partition is in flight when idempotent or when one request may
//! be in flight (Java's `guaranteeMessageOrder` mutes the partition, and its idempotent
//! producer keeps order with sequence numbers, `TransactionManager` re-enqueueing retries
//! in sequence order; eosim keeps that order by not overlapping a partition's batches,
//! which leaves out Java's pipelining of up to 5 batches of one partition). Without
//! idempotence and with more than one in flight, a partition's batches overlap and retry
//! independently: a batch that failed and is retried lands after a later one (reordering),
//! and one whose response was lost lands twice (duplication), as
//! `max.in.flight.requests.per.connection` documents for Kafka. A batch keeps its
//! in-flight slot through its retries and backoffs (Java re-enqueues it and frees the
//! slot), and the slot is counted against the leader known when the batch left.
//!
//! # Idempotence (models-reference B.1, B.4)
//! - The first send asks any broker for a producer id (InitProducerId without a
//!   transactional id) and numbers records per partition from sequence 0.
//! - A retry resends the same batch with the same producer id, epoch and base sequence, so
//!   a broker that already appended it answers with the original offset.
//! - DUPLICATE_SEQUENCE_NUMBER (46) is a success without an offset (Java's `Sender`).
//! - OUT_OF_ORDER_SEQUENCE_NUMBER (45) or UNKNOWN_PRODUCER_ID (59) on the batch: the
//!   producer bumps its epoch locally (KIP-360, Java's `bumpIdempotentProducerEpoch`),
//!   restarts every partition's sequences at 0 and retries.
//! - A send that ends without a known outcome leaves its partition *unresolved*: the epoch
//!   is bumped before the next send to it, as Java does.

use super::conn::{needs_metadata_refresh, Connection};
use super::sender::{BatchDelivery, BatchQueue, Waiter};
use crate::client::{
    ClientError, Delivery, DeliveryCallback, DeliveryFuture, Producer, ProducerConfig,
    ProducerRecord,
};
use async_trait::async_trait;
use eosim_sim::kafka::murmur2::partition_for_key;
use eosim_sim::kafka::{
    KafkaError, ProducerBatchHeader, Record, Request, Response, TopicPartition,
};
use madsim::rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Producer id, epoch and per-partition sequence numbers of an idempotent or transactional
/// producer (KIP-98).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdempotenceState {
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// Sequence of the next record per partition (absent = 0).
    pub next_sequence: BTreeMap<TopicPartition, i32>,
    /// Partitions with a batch whose outcome is unknown: bump the epoch before reuse.
    pub unresolved: BTreeSet<TopicPartition>,
}

impl IdempotenceState {
    /// A fresh state for `producer_id` at `producer_epoch`, every sequence at 0.
    pub fn new(producer_id: i64, producer_epoch: i16) -> Self {
        Self {
            producer_id,
            producer_epoch,
            ..Self::default()
        }
    }

    /// The header of the next batch to `tp`.
    pub fn header(&self, tp: &TopicPartition, transactional: bool) -> ProducerBatchHeader {
        ProducerBatchHeader {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.next_sequence.get(tp).copied().unwrap_or(0),
            transactional,
        }
    }

    /// A batch of `count` records to `tp` was acknowledged: advance its sequence (wrapping
    /// from `i32::MAX` to 0, as Kafka does).
    pub fn acknowledge(&mut self, tp: &TopicPartition, count: usize) {
        let next = self.next_sequence.entry(tp.clone()).or_insert(0);
        let advanced = i64::from(*next) + count as i64;
        *next = (advanced % (i64::from(i32::MAX) + 1)) as i32;
        self.unresolved.remove(tp);
    }

    /// KIP-360's local epoch bump: epoch + 1, every sequence back to 0.
    pub fn bump_epoch(&mut self) {
        self.producer_epoch = self.producer_epoch.saturating_add(1);
        self.next_sequence.clear();
        self.unresolved.clear();
    }
}

/// Sends one batch with `header` to the leader of `tp` (refreshing metadata if the leader
/// is unknown) and returns the base offset. `extra_delay` holds the request in the network
/// that long (a fault point; zero normally).
///
/// # Errors
/// The broker's error or a timeout (ambiguous).
pub async fn produce_once(
    conn: &Connection,
    config: &ProducerConfig,
    tp: &TopicPartition,
    header: ProducerBatchHeader,
    records: Vec<Record>,
    extra_delay: Duration,
) -> Result<i64, ClientError> {
    let timeout = Duration::from_millis(config.request_timeout_ms);
    let leader = match conn.leader(tp) {
        Some(leader) => leader,
        None => {
            conn.refresh_metadata(&[tp.topic.to_string()], timeout)
                .await?;
            conn.leader(tp)
                .ok_or(ClientError::Kafka(KafkaError::LeaderNotAvailable))?
        }
    };
    let request = Request::Produce {
        tp: tp.clone(),
        acks: config.acks,
        timeout_ms: config.request_timeout_ms,
        header,
        records,
    };
    match conn
        .request_delayed(leader, request, timeout, extra_delay)
        .await?
    {
        Response::Produce { base_offset, .. } => Ok(base_offset),
        Response::Error(KafkaError::DuplicateSequenceNumber) => Ok(-1),
        Response::Error(e) => {
            if needs_metadata_refresh(e) {
                conn.invalidate(&tp.topic);
            }
            Err(ClientError::Kafka(e))
        }
        other => Err(ClientError::Fatal(format!(
            "unexpected produce response {other:?}"
        ))),
    }
}

/// The partition of `record`: explicit, murmur2 of the key, or random for a null key.
/// Without the topic's metadata it asks for it again every `retry.backoff.ms` for up to
/// `max.block.ms` (Java's `KafkaProducer.waitOnMetadata`); metadata older than
/// `metadata.max.age.ms` is fetched again first, so partitions added to the topic
/// (CreatePartitions, KIP-195) are written to from then on, and keys move to
/// `murmur2 % new count`.
///
/// # Errors
/// When the topic's metadata cannot be had within `max.block.ms`.
pub async fn partition_of(
    conn: &Connection,
    config: &ProducerConfig,
    record: &ProducerRecord,
) -> Result<u32, ClientError> {
    if let Some(p) = record.partition {
        return Ok(p);
    }
    let max_age = Duration::from_millis(config.metadata_max_age_ms);
    let cached = conn.partition_count(&record.topic);
    if cached.is_some() && conn.metadata_expired(&record.topic, max_age) {
        // Java's sender thread refreshes aged metadata in the background; here the send
        // waits for that one request. A failure keeps the cached metadata.
        let timeout = Duration::from_millis(config.request_timeout_ms);
        let _ = (conn.refresh_metadata(std::slice::from_ref(&record.topic), timeout)).await;
        if conn.partition_count(&record.topic) > cached {
            crate::mark!("client:producer-sees-added-partitions");
        }
    }
    let deadline = madsim::time::Instant::now() + Duration::from_millis(config.max_block_ms);
    let mut waited = false;
    let count = loop {
        if let Some(n) = conn.partition_count(&record.topic) {
            break n;
        }
        // The first request gets its whole `request.timeout.ms`, as before any wait.
        let left = deadline.saturating_duration_since(madsim::time::Instant::now());
        let mut timeout = Duration::from_millis(config.request_timeout_ms);
        if waited {
            timeout = timeout.min(left);
        }
        waited = true;
        let refreshed = conn
            .refresh_metadata(std::slice::from_ref(&record.topic), timeout)
            .await;
        if let Some(n) = conn.partition_count(&record.topic) {
            break n;
        }
        if madsim::time::Instant::now() >= deadline {
            refreshed?;
            return Err(ClientError::Kafka(KafkaError::UnknownTopicOrPartition));
        }
        crate::mark!("client:producer-waits-for-metadata");
        madsim::time::sleep(Duration::from_millis(config.retry_backoff_ms)).await;
    };
    Ok(match &record.key {
        Some(key) => partition_for_key(key, count),
        // Sticky partitioning reduced to a random pick per record.
        None => madsim::rand::thread_rng().gen_range(0..count),
    })
}

/// Whether a client error is worth another attempt of the same batch.
pub fn is_retriable(error: &ClientError) -> bool {
    match error {
        ClientError::Kafka(e) => e.is_retriable(),
        ClientError::Timeout { .. } => true,
        _ => false,
    }
}

/// The record a [`ProducerRecord`] becomes, stamped with the producing process's wall
/// clock (`CreateTime`; moved by `clock-jump` faults, [`eosim_sim::clock`]).
pub fn to_record(record: ProducerRecord) -> Record {
    Record {
        key: record.key,
        value: record.value,
        headers: record.headers,
        timestamp_ms: eosim_sim::clock::wall_clock_ms(),
    }
}

/// A producer over a [`Connection`]; idempotent unless `enable_idempotence` is false.
/// Cloning shares everything (the sender task holds a clone).
#[derive(Clone)]
pub struct SimProducer {
    conn: Connection,
    config: ProducerConfig,
    idempotence: Arc<Mutex<Option<IdempotenceState>>>,
    /// One awaited send at a time without batching
    /// (`max.in.flight.requests.per.connection=1`).
    in_flight: Arc<tokio::sync::Mutex<()>>,
    /// One InitProducerId at a time (batches of several partitions may start together).
    init: Arc<tokio::sync::Mutex<()>>,
    /// The accumulator and its sender (`client::sim::sender`).
    queue: BatchQueue,
}

impl SimProducer {
    /// A producer with `config` on `conn`.
    pub fn new(conn: Connection, config: ProducerConfig) -> Self {
        Self {
            queue: BatchQueue::new(conn.clone(), config.clone()),
            conn,
            config,
            idempotence: Arc::default(),
            in_flight: Arc::default(),
            init: Arc::default(),
        }
    }

    /// The producer id and epoch in use, once the first send got one.
    pub fn producer_id_and_epoch(&self) -> Option<(i64, i16)> {
        let state = self.idempotence.lock().expect("idempotence lock");
        state.as_ref().map(|s| (s.producer_id, s.producer_epoch))
    }

    /// Sends `records` to `tp` as one batch in one Produce request, without retries (what
    /// librdkafka does under the hood once its linger expires). Returns the base offset.
    /// Idempotent producers number the batch and advance the sequence on success.
    ///
    /// # Errors
    /// The broker's error or a timeout (ambiguous).
    pub async fn send_batch(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
    ) -> Result<i64, ClientError> {
        let _one = self.in_flight.lock().await;
        let deadline = self.deadline();
        let header = self.next_header(tp, deadline).await?;
        let count = records.len();
        let result = produce_once(
            &self.conn,
            &self.config,
            tp,
            header,
            records,
            Duration::ZERO,
        )
        .await;
        self.settle(tp, header, count, &result);
        if result.as_ref().is_err_and(ClientError::is_ambiguous) {
            self.mark_unresolved(tp);
        }
        result
    }

    fn deadline(&self) -> madsim::time::Instant {
        madsim::time::Instant::now() + Duration::from_millis(self.config.delivery_timeout_ms)
    }

    /// Gets a producer id if idempotent and none is held yet, retrying until `deadline`.
    async fn ensure_producer_id(&self, deadline: madsim::time::Instant) -> Result<(), ClientError> {
        if !self.config.enable_idempotence || self.producer_id_and_epoch().is_some() {
            return Ok(());
        }
        let _one = self.init.lock().await;
        if self.producer_id_and_epoch().is_some() {
            return Ok(());
        }
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        loop {
            let request = Request::InitProducerId {
                transactional_id: None,
                transaction_timeout_ms: 60_000,
                producer_id: -1,
                producer_epoch: -1,
            };
            let error = match self.conn.request_any(request, timeout).await {
                Ok(Response::InitProducerId {
                    producer_id,
                    producer_epoch,
                }) => {
                    let state = IdempotenceState::new(producer_id, producer_epoch);
                    *self.idempotence.lock().expect("idempotence lock") = Some(state);
                    return Ok(());
                }
                Ok(Response::Error(e)) => ClientError::Kafka(e),
                Ok(other) => return Err(ClientError::Fatal(format!("InitProducerId: {other:?}"))),
                Err(e) => e,
            };
            let backoff = Duration::from_millis(self.config.retry_backoff_ms);
            if !is_retriable(&error) || madsim::time::Instant::now() + backoff >= deadline {
                return Err(error);
            }
            madsim::time::sleep(backoff).await;
        }
    }

    /// The header of the next batch to `tp`: plain without idempotence; else numbered, after
    /// an epoch bump if the partition is unresolved.
    async fn next_header(
        &self,
        tp: &TopicPartition,
        deadline: madsim::time::Instant,
    ) -> Result<ProducerBatchHeader, ClientError> {
        self.ensure_producer_id(deadline).await?;
        let mut state = self.idempotence.lock().expect("idempotence lock");
        let Some(state) = state.as_mut() else {
            return Ok(ProducerBatchHeader::NONE);
        };
        if state.unresolved.contains(tp) {
            state.bump_epoch();
        }
        Ok(state.header(tp, false))
    }

    /// Updates the sequence state after one attempt of a batch of `count` records.
    fn settle(
        &self,
        tp: &TopicPartition,
        header: ProducerBatchHeader,
        count: usize,
        result: &Result<i64, ClientError>,
    ) {
        let mut state = self.idempotence.lock().expect("idempotence lock");
        let Some(state) = state.as_mut() else { return };
        if state.producer_epoch != header.producer_epoch {
            return;
        }
        match result {
            Ok(_) => state.acknowledge(tp, count),
            Err(ClientError::Kafka(
                KafkaError::OutOfOrderSequenceNumber | KafkaError::UnknownProducerId,
            )) => state.bump_epoch(),
            // An ambiguous attempt is retried with the same sequence; only a send that gives
            // up leaves its partition unresolved (`mark_unresolved`).
            Err(_) => {}
        }
    }
}

#[async_trait]
impl Producer for SimProducer {
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, ClientError> {
        if self.config.batching() {
            return self.send_async(record).await?.await;
        }
        let _one = self.in_flight.lock().await;
        let partition = partition_of(&self.conn, &self.config, &record).await?;
        let tp = TopicPartition::new(&record.topic, partition);
        let batch = to_record(record);
        let deadline = self.deadline();
        let offset = self.deliver(&tp, vec![batch], deadline).await?;
        Ok(Delivery { partition, offset })
    }

    async fn send_async(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let partition = partition_of(&self.conn, &self.config, &record).await?;
        let (waiter, report) = oneshot::channel();
        self.enqueue(partition, record, Waiter::Report(waiter));
        Ok(DeliveryFuture::new(async move {
            report.await.unwrap_or_else(|_| {
                Err(ClientError::Timeout {
                    what: "delivery report (the producer stopped with the record queued)".into(),
                    timeout_ms: 0,
                })
            })
        }))
    }

    /// No task per record: the callback waits in the accumulator beside the record.
    async fn send_with_callback(&self, record: ProducerRecord, callback: DeliveryCallback) {
        match partition_of(&self.conn, &self.config, &record).await {
            Ok(partition) => self.enqueue(partition, record, Waiter::Callback(callback)),
            Err(e) => callback(Err(e)),
        }
    }

    async fn flush(&self, timeout: Duration) -> Result<(), ClientError> {
        self.queue.flush(timeout).await
    }
}

impl SimProducer {
    /// Delivers `records` to `tp` as one batch, retrying it as a unit until `deadline`
    /// (`delivery.timeout.ms` from its first record) or `retries` run out. Returns the
    /// base offset (-1 under acks=0 or for a batch the broker already had).
    ///
    /// # Errors
    /// The last error; [`ClientError::Timeout`] when any attempt timed out and none
    /// succeeded (the batch may have been appended).
    async fn deliver(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
        deadline: madsim::time::Instant,
    ) -> Result<i64, ClientError> {
        let count = records.len();
        let mut ambiguous = false;
        let mut attempts = 0u32;
        // The batch keeps the producer id, epoch and sequence it first went out with
        // through its retries, even when another partition's batch bumped the epoch
        // meanwhile: Java rewrites the in-flight sequences only of the partitions that
        // asked for the bump (`TransactionManager.bumpIdempotentProducerEpoch`,
        // `partitionsToRewriteSequences`), and moves any other partition to the new
        // epoch once its in-flight batches are done (`maybeUpdateProducerIdAndEpoch`).
        // Renumbering such a retry would make a broker that appended its first attempt
        // append it again.
        let mut header = self.next_header(tp, deadline).await?;
        loop {
            let result = produce_once(
                &self.conn,
                &self.config,
                tp,
                header,
                records.clone(),
                Duration::ZERO,
            )
            .await;
            self.settle(tp, header, count, &result);
            let error = match result {
                Ok(offset) => return Ok(offset),
                Err(e) => e,
            };
            ambiguous |= error.is_ambiguous();
            // After 45/59 the epoch was bumped: the retry is a new batch under it.
            let resequenced = matches!(
                error,
                ClientError::Kafka(
                    KafkaError::OutOfOrderSequenceNumber | KafkaError::UnknownProducerId
                )
            ) && header.producer_id >= 0;
            attempts += 1;
            let backoff = Duration::from_millis(self.config.retry_backoff_ms);
            let out_of_time = madsim::time::Instant::now() + backoff >= deadline;
            let retriable = is_retriable(&error) || resequenced;
            if !retriable || attempts > self.config.retries || out_of_time {
                if ambiguous {
                    self.mark_unresolved(tp);
                }
                return Err(
                    if ambiguous && !matches!(error, ClientError::Timeout { .. }) {
                        ClientError::Timeout {
                            what: format!("delivery to {tp} (an attempt timed out; last: {error})"),
                            timeout_ms: self.config.delivery_timeout_ms,
                        }
                    } else {
                        error
                    },
                );
            }
            crate::mark!(match error {
                ClientError::Timeout { .. } => "client:producer-retry-after-timeout",
                _ if resequenced => "client:producer-retry-resequenced",
                _ => "client:producer-retry",
            });
            madsim::time::sleep(backoff).await;
            if resequenced {
                header = self.next_header(tp, deadline).await?;
            }
        }
    }
}

impl BatchDelivery for SimProducer {
    fn deliver<'a>(
        &'a self,
        tp: &'a TopicPartition,
        records: Vec<Record>,
        deadline: madsim::time::Instant,
    ) -> impl std::future::Future<Output = Result<i64, ClientError>> + Send + 'a {
        SimProducer::deliver(self, tp, records, deadline)
    }
}

impl SimProducer {
    /// Appends `record` (to `partition`) to the queue with `waiter`.
    fn enqueue(&self, partition: u32, record: ProducerRecord, waiter: Waiter) {
        let tp = TopicPartition::new(&record.topic, partition);
        self.queue.enqueue(self, &tp, to_record(record), waiter);
    }

    fn mark_unresolved(&self, tp: &TopicPartition) {
        if let Some(state) = self.idempotence.lock().expect("idempotence lock").as_mut() {
            state.unresolved.insert(tp.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    #[test]
    fn a_retry_before_the_acknowledgement_keeps_its_sequence() {
        let mut state = IdempotenceState::new(7, 0);
        let first = state.header(&tp(), false);
        assert_eq!(
            state.header(&tp(), false),
            first,
            "an unacknowledged batch is resent as is"
        );
        state.acknowledge(&tp(), 3);
        assert_eq!(state.header(&tp(), true).base_sequence, 3);
    }

    #[test]
    fn sequences_wrap_from_i32_max_to_zero() {
        let mut state = IdempotenceState::new(7, 0);
        state.next_sequence.insert(tp(), i32::MAX);
        state.acknowledge(&tp(), 1);
        assert_eq!(state.header(&tp(), false).base_sequence, 0);
    }

    #[test]
    fn an_epoch_bump_restarts_every_partition_at_sequence_zero() {
        let mut state = IdempotenceState::new(7, 4);
        state.acknowledge(&tp(), 5);
        state.unresolved.insert(tp());
        state.bump_epoch();
        let header = state.header(&tp(), false);
        assert_eq!((header.producer_epoch, header.base_sequence), (5, 0));
        assert!(state.unresolved.is_empty());
    }
}

//! rdkafka implementations of [`Producer`], [`Consumer`] and [`Admin`].

use super::error::{from_code, from_commit, from_rdkafka};
use super::rebalance::RebalanceContext;
use crate::client::{
    Admin, AssignmentStrategy, AutoOffsetReset, ClientError, ConsumedRecord, Consumer,
    ConsumerConfig, ConsumerGroupMetadata, Delivery, DeliveryFuture, GroupProtocol, Producer,
    ProducerConfig, ProducerRecord, Revocation,
};
use async_trait::async_trait;
use bytes::Bytes;
use eosim_sim::kafka::{Acks, Isolation, KafkaError, Offset, TopicConfig, TopicPartition};
use futures::FutureExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{CommitMode, Consumer as _, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;

/// librdkafka's value for `acks`.
fn acks_value(acks: Acks) -> &'static str {
    match acks {
        Acks::None => "0",
        Acks::Leader => "1",
        Acks::All => "all",
    }
}

/// The librdkafka configuration of a [`RealProducer`].
///
/// `enable.idempotence` is set only with `acks=all`: librdkafka (like Java when the
/// property is explicit) refuses idempotence with `acks` 0 or 1, and Java leaves it off
/// then when it is not explicit, which is the behaviour kept here. `retries` is capped at
/// librdkafka's maximum, 2147483647.
///
/// Java's `request.timeout.ms` is two things: the Produce request's ack timeout the broker
/// enforces, and the time the client waits for any response before it closes the
/// connection and retries the in-flight batches (`NetworkClient.handleTimedOutRequests`).
/// librdkafka splits them: `request.timeout.ms` is the broker-side ack timeout only, and a
/// Produce request waits client-side for the smaller of its first message's remaining
/// `message.timeout.ms` and `socket.timeout.ms` (`rd_kafka_ProduceRequest`,
/// `rdkafka_request.c`), after which the connection is taken down
/// (`socket.max.fails` = 1, `rd_kafka_broker_timeout_scan`) and the messages retried. Both
/// are set to `request.timeout.ms` here, as for the consumer: with `socket.timeout.ms` at
/// librdkafka's 60 s default a lost Produce response is never retried within a short
/// `delivery.timeout.ms`, its records time out instead, and a non-idempotent producer
/// could not duplicate as Java's does.
pub fn producer_client_config(bootstrap_servers: &str, config: &ProducerConfig) -> ClientConfig {
    let idempotent = config.enable_idempotence && config.acks == Acks::All;
    let retries = config.retries.min(i32::MAX as u32);
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap_servers)
        .set("partitioner", "murmur2_random")
        .set("acks", acks_value(config.acks))
        .set("enable.idempotence", idempotent.to_string())
        .set("request.timeout.ms", config.request_timeout_ms.to_string())
        .set(
            "socket.timeout.ms",
            config.request_timeout_ms.max(10).to_string(),
        )
        .set(
            "delivery.timeout.ms",
            config.delivery_timeout_ms.to_string(),
        )
        .set("retries", retries.to_string())
        .set("retry.backoff.ms", config.retry_backoff_ms.to_string())
        .set("linger.ms", config.linger_ms.to_string())
        .set("batch.size", config.batch_size.to_string())
        .set(
            "max.in.flight.requests.per.connection",
            config.max_in_flight_requests_per_connection.to_string(),
        )
        // Java's metadata.max.age.ms is librdkafka's periodic refresh.
        .set(
            "topic.metadata.refresh.interval.ms",
            config.metadata_max_age_ms.to_string(),
        )
        .set("log_level", "3");
    c
}

/// A producer on rdkafka's `FutureProducer`.
pub struct RealProducer {
    producer: FutureProducer,
    config: ProducerConfig,
}

impl std::fmt::Debug for RealProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealProducer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RealProducer {
    /// A producer for `bootstrap_servers` (`host:port,...`) with `config`.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when librdkafka rejects the configuration.
    pub fn new(bootstrap_servers: &str, config: ProducerConfig) -> Result<Self, ClientError> {
        let producer = producer_client_config(bootstrap_servers, &config)
            .create()
            .map_err(|e| ClientError::Fatal(format!("producer configuration: {e}")))?;
        Ok(Self { producer, config })
    }

    /// Waits until every queued record is delivered or `timeout` passes.
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when records are still in flight.
    pub fn flush(&self, timeout: Duration) -> Result<(), ClientError> {
        rdkafka::producer::Producer::flush(&self.producer, timeout)
            .map_err(|e| from_rdkafka(&e, "flush", timeout.as_millis() as u64))
    }
}

fn owned_headers(headers: &[(String, Bytes)]) -> Option<OwnedHeaders> {
    if headers.is_empty() {
        return None;
    }
    let mut h = OwnedHeaders::new_with_capacity(headers.len());
    for (key, value) in headers {
        h = h.insert(Header {
            key,
            value: Some(&value[..]),
        });
    }
    Some(h)
}

/// The rdkafka record of `record` (topic, key, value, partition, headers), borrowing its
/// bytes; its timestamp is the process's wall clock with its `clock-jump` offset when it
/// has one ([`super::wall_clock::stamp_ms`]), else librdkafka's.
pub(super) fn future_record(record: &ProducerRecord) -> FutureRecord<'_, [u8], [u8]> {
    let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&record.topic);
    if let Some(ms) = super::wall_clock::stamp_ms() {
        r = r.timestamp(ms);
    }
    if let Some(key) = &record.key {
        r = r.key(&key[..]);
    }
    if let Some(value) = &record.value {
        r = r.payload(&value[..]);
    }
    if let Some(p) = record.partition {
        r = r.partition(p as i32);
    }
    if let Some(h) = owned_headers(&record.headers) {
        r = r.headers(h);
    }
    r
}

/// A librdkafka delivery report as a [`Delivery`]: acks=0 has no offset, and librdkafka
/// reports an invalid one (-1001), both become -1.
fn to_delivery(acks: Acks, d: &rdkafka::producer::future_producer::Delivery) -> Delivery {
    Delivery {
        partition: d.partition as u32,
        offset: if acks == Acks::None || d.offset < 0 {
            -1
        } else {
            d.offset
        },
    }
}

#[async_trait]
impl Producer for RealProducer {
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, ClientError> {
        let timeout_ms = self.config.delivery_timeout_ms;
        let queue_timeout = Timeout::After(Duration::from_millis(timeout_ms));
        match self
            .producer
            .send(future_record(&record), queue_timeout)
            .await
        {
            Ok(d) => Ok(to_delivery(self.config.acks, &d)),
            Err((e, _)) => Err(from_rdkafka(&e, "produce", timeout_ms)),
        }
    }

    /// `FutureProducer::send_result`: librdkafka queues the record and batches it itself
    /// (`linger.ms`, `batch.size`, `max.in.flight.requests.per.connection` are set from
    /// [`ProducerConfig`], [`producer_client_config`]). A full local queue
    /// (`queue.buffering.max.messages`) is an error here, not a wait.
    async fn send_async(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let timeout_ms = self.config.delivery_timeout_ms;
        let future = self
            .producer
            .send_result(future_record(&record))
            .map_err(|(e, _)| from_rdkafka(&e, "produce", timeout_ms))?;
        let acks = self.config.acks;
        Ok(DeliveryFuture::new(async move {
            match future.await {
                Ok(Ok(d)) => Ok(to_delivery(acks, &d)),
                Ok(Err((e, _))) => Err(from_rdkafka(&e, "produce", timeout_ms)),
                // The producer was dropped with the record queued: outcome unknown.
                Err(_) => Err(ClientError::Timeout {
                    what: "delivery report (the producer was dropped)".into(),
                    timeout_ms,
                }),
            }
        }))
    }

    /// librdkafka's `rd_kafka_flush`, which blocks the calling thread while it serves
    /// delivery reports (as [`RealProducer::flush`]).
    async fn flush(&self, timeout: Duration) -> Result<(), ClientError> {
        RealProducer::flush(self, timeout)
    }
}

/// The librdkafka configuration of a [`RealConsumer`]: no auto commit, no automatic offset
/// store, Java's names mapped to librdkafka's (`fetch.max.wait.ms` is `fetch.wait.max.ms`,
/// `request.timeout.ms` is `socket.timeout.ms`, `metadata.max.age.ms` is
/// `topic.metadata.refresh.interval.ms`, `auto.offset.reset` none is `error`).
/// `max.poll.records` has no librdkafka counterpart: [`RealConsumer::poll`] applies it.
///
/// The group protocol: under `classic`, `session.timeout.ms`, `heartbeat.interval.ms` and
/// the assignor ([`librdkafka_assignor`]); under KIP-848's `consumer`, `group.protocol` and
/// `group.remote.assignor` only (librdkafka refuses the classic keys with it, as Java's
/// `ConsumerConfig` does: the broker's `group.consumer.*` settings rule).
pub fn consumer_client_config(bootstrap_servers: &str, config: &ConsumerConfig) -> ClientConfig {
    let isolation = match config.isolation_level {
        Isolation::ReadCommitted => "read_committed",
        Isolation::ReadUncommitted => "read_uncommitted",
    };
    let reset = match config.auto_offset_reset {
        AutoOffsetReset::Earliest => "earliest",
        AutoOffsetReset::Latest => "latest",
        AutoOffsetReset::None => "error",
    };
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap_servers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set(
            "max.poll.interval.ms",
            config.max_poll_interval_ms.to_string(),
        )
        .set("fetch.max.bytes", config.fetch_max_bytes.to_string())
        .set(
            "max.partition.fetch.bytes",
            config.max_partition_fetch_bytes.to_string(),
        )
        .set("fetch.wait.max.ms", config.fetch_max_wait_ms.to_string())
        .set("fetch.min.bytes", config.fetch_min_bytes.to_string())
        .set("socket.timeout.ms", config.request_timeout_ms.to_string())
        .set("isolation.level", isolation)
        .set("auto.offset.reset", reset)
        .set(
            "topic.metadata.refresh.interval.ms",
            config.metadata_max_age_ms.to_string(),
        )
        .set("log_level", "3");
    if let Some(instance) = &config.group_instance_id {
        c.set("group.instance.id", instance);
    }
    match config.group_protocol {
        GroupProtocol::Classic => {
            c.set("partition.assignment.strategy", librdkafka_assignor(config))
                .set("session.timeout.ms", config.session_timeout_ms.to_string())
                .set(
                    "heartbeat.interval.ms",
                    config.heartbeat_interval_ms.to_string(),
                );
        }
        GroupProtocol::Consumer => {
            c.set("group.protocol", "consumer");
            if let Some(assignor) = &config.group_remote_assignor {
                c.set("group.remote.assignor", assignor);
            }
        }
    }
    c
}

/// librdkafka's `partition.assignment.strategy` for `config`'s: `cooperative-sticky` when
/// the consumer follows the cooperative protocol ([`ConsumerConfig::cooperative`]: every
/// listed assignor is `CooperativeStickyAssignor`), else `range`. librdkafka refuses a list
/// that mixes eager and cooperative assignors, and Java's default `[RangeAssignor,
/// CooperativeStickyAssignor]` rebalances with range, eagerly, while every member lists
/// range first.
pub fn librdkafka_assignor(config: &ConsumerConfig) -> &'static str {
    match config.cooperative() {
        true => AssignmentStrategy::CooperativeSticky.name(),
        false => AssignmentStrategy::Range.name(),
    }
}

/// The `StreamConsumer` of a [`RealConsumer`], with its rebalance callback.
type Inner = StreamConsumer<RebalanceContext>;

/// A group consumer on rdkafka's `StreamConsumer`. With
/// [`Consumer::listen_for_revocations`] its rebalance callback holds a revocation back
/// (`client::real::rebalance`): the poll that saw it returns empty and leaves it for
/// [`Consumer::take_revocation`], the next poll unassigns and librdkafka rejoins.
pub struct RealConsumer {
    consumer: Option<Arc<Inner>>,
    config: ConsumerConfig,
    revocation: Option<Revocation>,
}

impl std::fmt::Debug for RealConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealConsumer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn closed() -> ClientError {
    ClientError::Fatal("consumer is closed".into())
}

fn tpl_of(offsets: &[(TopicPartition, Offset)]) -> Result<TopicPartitionList, ClientError> {
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for (tp, offset) in offsets {
        tpl.add_partition_offset(
            &tp.topic,
            tp.partition as i32,
            rdkafka::Offset::Offset(*offset),
        )
        .map_err(|e| from_rdkafka(&e, "offset list", 0))?;
    }
    Ok(tpl)
}

fn partition_list(partitions: &[TopicPartition]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    for tp in partitions {
        tpl.add_partition(&tp.topic, tp.partition as i32);
    }
    tpl
}

fn consumed(m: &BorrowedMessage<'_>) -> ConsumedRecord {
    let headers = m
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    (
                        h.key.to_string(),
                        Bytes::copy_from_slice(h.value.unwrap_or_default()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    ConsumedRecord {
        tp: TopicPartition::new(m.topic(), m.partition() as u32),
        offset: m.offset(),
        key: m.key().map(Bytes::copy_from_slice),
        value: m.payload().map(Bytes::copy_from_slice),
        headers,
    }
}

/// Where to seek back the partitions `revocation` leaves assigned, when the records taken
/// from them in a poll are not returned: the first taken offset of each, sorted by
/// partition. Empty under the eager protocol (every assigned partition is revoked).
fn kept_rewinds(
    records: &[ConsumedRecord],
    revocation: &Revocation,
) -> Vec<(TopicPartition, Offset)> {
    let mut first: std::collections::BTreeMap<TopicPartition, Offset> = Default::default();
    for r in records
        .iter()
        .filter(|r| !revocation.partitions.contains(&r.tp))
    {
        let entry = first.entry(r.tp.clone()).or_insert(r.offset);
        *entry = (*entry).min(r.offset);
    }
    first.into_iter().collect()
}

/// Lets a closing consumer's revocation through ([`RebalanceContext::stop_listening`]) and
/// unassigns what a held revocation kept assigned, so that `rd_kafka_consumer_close` does
/// not wait for an unassign nobody will call.
fn stop_listening(consumer: &Inner) {
    if let Some(unassign) = consumer.context().stop_listening() {
        let _ = unassign.apply(consumer);
    }
}

/// A consumer dropped without [`Consumer::close`] (a panicking test, an aborted task) closes
/// in its drop: without this, a revocation held for the application blocked that drop for
/// ever.
impl Drop for RealConsumer {
    fn drop(&mut self) {
        if let Some(consumer) = &self.consumer {
            stop_listening(consumer);
        }
    }
}

impl RealConsumer {
    /// A consumer of group `config.group_id` on `bootstrap_servers`. Call it inside a tokio
    /// runtime (rdkafka's `StreamConsumer` spawns its wake-up task there): within `async`
    /// code, or after `Runtime::enter`.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when librdkafka rejects the configuration.
    pub fn new(bootstrap_servers: &str, config: ConsumerConfig) -> Result<Self, ClientError> {
        let consumer: Inner = consumer_client_config(bootstrap_servers, &config)
            .create_with_context(RebalanceContext::default())
            .map_err(|e| ClientError::Fatal(format!("consumer configuration: {e}")))?;
        Ok(Self {
            consumer: Some(Arc::new(consumer)),
            config,
            revocation: None,
        })
    }

    fn inner(&self) -> Result<&Arc<Inner>, ClientError> {
        self.consumer.as_ref().ok_or_else(closed)
    }

    /// Assigns partitions by hand, starting at the given offsets: no group membership, so
    /// commits go out with generation -1 (Kafka's "simple" commit, the model's admin commit).
    ///
    /// # Errors
    /// When librdkafka rejects the assignment.
    pub fn assign(&mut self, positions: &[(TopicPartition, Offset)]) -> Result<(), ClientError> {
        let tpl = tpl_of(positions)?;
        self.inner()?
            .assign(&tpl)
            .map_err(|e| from_rdkafka(&e, "assign", 0))
    }

    /// The group's committed offsets of `tps` (-1 where none), from the coordinator.
    ///
    /// # Errors
    /// A timeout after `request.timeout.ms`, or the coordinator's error.
    pub async fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
        let consumer = Arc::clone(self.inner()?);
        let mut query = TopicPartitionList::with_capacity(tps.len());
        for tp in tps {
            query.add_partition(&tp.topic, tp.partition as i32);
        }
        let timeout_ms = self.config.request_timeout_ms;
        let tpl = tokio::task::spawn_blocking(move || {
            consumer.committed_offsets(query, Duration::from_millis(timeout_ms))
        })
        .await
        .map_err(|e| ClientError::Fatal(format!("committed offsets task: {e}")))?
        .map_err(|e| from_rdkafka(&e, "offset fetch", timeout_ms))?;
        let mut out: Vec<(TopicPartition, Offset)> = tpl
            .elements()
            .iter()
            .map(|e| {
                let offset = match e.offset() {
                    rdkafka::Offset::Offset(o) => o,
                    _ => -1,
                };
                (TopicPartition::new(e.topic(), e.partition() as u32), offset)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The high watermark of `tp`, asked of its leader (`fetch_watermarks`).
    ///
    /// # Errors
    /// A timeout after `request.timeout.ms`, or the broker's error.
    pub async fn high_watermark(&self, tp: &TopicPartition) -> Result<Offset, ClientError> {
        let consumer = Arc::clone(self.inner()?);
        let (topic, partition) = (tp.topic, tp.partition as i32);
        let timeout_ms = self.config.request_timeout_ms;
        let timeout = Duration::from_millis(timeout_ms);
        let (_, high) = tokio::task::spawn_blocking(move || {
            consumer.fetch_watermarks(&topic, partition, timeout)
        })
        .await
        .map_err(|e| ClientError::Fatal(format!("watermarks task: {e}")))?
        .map_err(|e| from_rdkafka(&e, "list offsets", timeout_ms))?;
        Ok(high)
    }

    /// The fetch position of assigned partition `tp` (past control records, unlike the
    /// last record's offset); `None` before the first fetch.
    pub fn position(&self, tp: &TopicPartition) -> Option<Offset> {
        let tpl = self.inner().ok()?.position().ok()?;
        let e = tpl.find_partition(&tp.topic, tp.partition as i32)?;
        match e.offset() {
            rdkafka::Offset::Offset(o) => Some(o),
            _ => None,
        }
    }

    /// Handles one error from `recv`: `Some` ends the poll with it, `None` goes on, as
    /// Java's consumer retries connection, metadata and leadership errors inside `poll`.
    /// An `auto.offset.reset=none` miss (librdkafka's `_AUTO_OFFSET_RESET`) is Java's
    /// `NoOffsetForPartitionException`/`OffsetOutOfRangeException`: OFFSET_OUT_OF_RANGE.
    fn poll_error(e: &rdkafka::error::KafkaError) -> Option<ClientError> {
        use rdkafka::error::KafkaError as E;
        match e {
            E::MessageConsumptionFatal(code) => {
                Some(ClientError::Fatal(format!("consume: {code}")))
            }
            E::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset) => {
                Some(ClientError::Kafka(KafkaError::OffsetOutOfRange))
            }
            E::MessageConsumption(_) => None,
            other => Some(ClientError::Fatal(format!("consume: {other}"))),
        }
    }
}

#[async_trait]
impl Consumer for RealConsumer {
    async fn subscribe(&mut self, topics: &[String]) -> Result<(), ClientError> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.inner()?
            .subscribe(&names)
            .map_err(|e| from_rdkafka(&e, "subscribe", 0))
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumedRecord>, ClientError> {
        let consumer = Arc::clone(self.inner()?);
        if let Some(unassign) = consumer.context().take_unassign_due() {
            // The handed-out revocation was dealt with: let librdkafka rejoin (eager) or
            // acknowledge it (cooperative, KIP-848).
            unassign
                .apply(consumer.as_ref())
                .map_err(|e| from_rdkafka(&e, "unassign", 0))?;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut records = Vec::new();
        // Wait for the first record (or error) up to `timeout`, as Java's poll does.
        while records.is_empty() {
            if let Some(revocation) = consumer.context().hand_out() {
                // Java revokes before it returns anything of the next generation.
                self.revocation = Some(revocation);
                return Ok(Vec::new());
            }
            match tokio::time::timeout_at(deadline, consumer.recv()).await {
                Err(_) => return Ok(records),
                Ok(Ok(m)) => records.push(consumed(&m)),
                Ok(Err(e)) => {
                    if let Some(err) = Self::poll_error(&e) {
                        return Err(err);
                    }
                }
            }
        }
        // Then take what is already fetched, up to max.poll.records, without waiting.
        while records.len() < self.config.max_poll_records {
            match consumer.recv().now_or_never() {
                Some(Ok(m)) => records.push(consumed(&m)),
                Some(Err(_)) | None => break,
            }
        }
        if let Some(revocation) = consumer.context().hand_out() {
            // Revoked while these were taken: the revoked partitions' next owner reads
            // them again; a partition this member keeps (cooperative) is read again here,
            // or its records would be skipped (librdkafka's position is already past them).
            // The revocation is the application's whatever a seek says: a partition that
            // cannot be sought is no longer this member's.
            let rewinds = kept_rewinds(&records, &revocation);
            self.revocation = Some(revocation);
            for (tp, offset) in rewinds {
                if let Err(e) = self.seek(&tp, offset) {
                    eprintln!(
                        "eosim: consumer: rewind of {tp} to {offset} after a revocation: {e}"
                    );
                }
            }
            return Ok(Vec::new());
        }
        Ok(records)
    }

    async fn commit(&mut self, offsets: &[(TopicPartition, Offset)]) -> Result<(), ClientError> {
        let consumer = Arc::clone(self.inner()?);
        let tpl = tpl_of(offsets)?;
        let timeout_ms = self.config.request_timeout_ms;
        tokio::task::spawn_blocking(move || consumer.commit(&tpl, CommitMode::Sync))
            .await
            .map_err(|e| ClientError::Fatal(format!("commit task: {e}")))?
            .map_err(|e| from_commit(&e, timeout_ms))
    }

    fn assignment(&self) -> Vec<TopicPartition> {
        let Ok(consumer) = self.inner() else {
            return Vec::new();
        };
        let Ok(tpl) = consumer.assignment() else {
            return Vec::new();
        };
        let mut tps: Vec<TopicPartition> = tpl
            .elements()
            .iter()
            .map(|e| TopicPartition::new(e.topic(), e.partition() as u32))
            .collect();
        tps.sort();
        tps
    }

    /// librdkafka's `rd_kafka_seek` on an assigned partition; it does not block with a
    /// zero timeout, the fetcher picks the new position up.
    fn seek(&mut self, tp: &TopicPartition, offset: Offset) -> Result<(), ClientError> {
        let partition = i32::try_from(tp.partition)
            .map_err(|_| ClientError::Fatal(format!("partition {tp:?} out of range")))?;
        self.inner()?
            .seek(
                &tp.topic,
                partition,
                rdkafka::Offset::Offset(offset),
                Timeout::After(Duration::ZERO),
            )
            .map_err(|e| from_rdkafka(&e, "seek", 0))
    }

    fn listen_for_revocations(&mut self) -> bool {
        match self.inner() {
            Ok(consumer) => {
                consumer.context().listen();
                true
            }
            Err(_) => false,
        }
    }

    fn take_revocation(&mut self) -> Option<Revocation> {
        self.revocation.take()
    }

    /// librdkafka's `rd_kafka_pause_partitions`.
    fn pause(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        let tpl = partition_list(partitions);
        self.inner()?
            .pause(&tpl)
            .map_err(|e| from_rdkafka(&e, "pause", 0))
    }

    /// librdkafka's `rd_kafka_resume_partitions`.
    fn resume(&mut self, partitions: &[TopicPartition]) -> Result<(), ClientError> {
        let tpl = partition_list(partitions);
        self.inner()?
            .resume(&tpl)
            .map_err(|e| from_rdkafka(&e, "resume", 0))
    }

    /// librdkafka's generation and member id (`client::real::group`); `None` before the first
    /// join and after a close.
    fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        super::group::group_metadata(self.inner().ok()?)
    }

    async fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Offset)>, ClientError> {
        RealConsumer::committed(self, partitions).await
    }

    async fn close(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            stop_listening(&consumer);
            // Dropping the last handle runs rd_kafka_consumer_close (LeaveGroup), which
            // blocks: do it on the blocking pool.
            consumer.unsubscribe();
            let _ = tokio::task::spawn_blocking(move || drop(consumer)).await;
        }
    }
}

/// Admin calls on rdkafka's `AdminClient`.
pub struct RealAdmin {
    admin: AdminClient<DefaultClientContext>,
    timeout: Duration,
}

impl std::fmt::Debug for RealAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealAdmin")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RealAdmin {
    /// An admin client for `bootstrap_servers`; each call waits at most `timeout`.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when librdkafka rejects the configuration.
    pub fn new(bootstrap_servers: &str, timeout: Duration) -> Result<Self, ClientError> {
        let admin = ClientConfig::new()
            .set("bootstrap.servers", bootstrap_servers)
            .set("log_level", "3")
            .create()
            .map_err(|e| ClientError::Fatal(format!("admin configuration: {e}")))?;
        Ok(Self { admin, timeout })
    }
}

impl RealAdmin {
    /// `Admin.createPartitions` (KIP-195, librdkafka's `rd_kafka_CreatePartitions`):
    /// `topic` grows to `count` partitions, placed by the controller.
    ///
    /// # Errors
    /// The broker's error (INVALID_PARTITIONS when `count` is not an increase,
    /// UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICATION_FACTOR), or a failed or timed-out
    /// request.
    pub async fn create_partitions(&self, topic: &str, count: u32) -> Result<(), ClientError> {
        let timeout_ms = self.timeout.as_millis() as u64;
        let opts = AdminOptions::new()
            .operation_timeout(Some(self.timeout))
            .request_timeout(Some(self.timeout));
        let grow = NewPartitions::new(topic, count as usize);
        let results = self
            .admin
            .create_partitions([&grow], &opts)
            .await
            .map_err(|e| from_rdkafka(&e, "create partitions", timeout_ms))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(()),
            Some(Err((_, code))) => Err(from_code(code, "create partitions", timeout_ms)),
            None => Err(ClientError::Fatal(format!(
                "create partitions {topic}: no result"
            ))),
        }
    }

    /// `Admin.deleteRecords` (KIP-107, librdkafka's `rd_kafka_DeleteRecords`): the
    /// records of each partition before its offset go (`None`: before the high
    /// watermark, librdkafka's `RD_KAFKA_OFFSET_END`). Each partition's result is its low
    /// watermark (log start offset) after the deletion, or the broker's error
    /// (OFFSET_OUT_OF_RANGE past the high watermark, NOT_LEADER_OR_FOLLOWER, ...).
    ///
    /// # Errors
    /// When the request as a whole failed or timed out.
    pub async fn delete_records(
        &self,
        offsets: &[(TopicPartition, Option<Offset>)],
    ) -> Result<Vec<(TopicPartition, Result<Offset, ClientError>)>, ClientError> {
        let timeout_ms = self.timeout.as_millis() as u64;
        let mut tpl = TopicPartitionList::new();
        for (tp, offset) in offsets {
            let offset = offset.map_or(rdkafka::Offset::End, rdkafka::Offset::Offset);
            tpl.add_partition_offset(&tp.topic, tp.partition as i32, offset)
                .map_err(|e| from_rdkafka(&e, "delete records", timeout_ms))?;
        }
        let opts = AdminOptions::new()
            .operation_timeout(Some(self.timeout))
            .request_timeout(Some(self.timeout));
        let result = self
            .admin
            .delete_records(&tpl, &opts)
            .await
            .map_err(|e| from_rdkafka(&e, "delete records", timeout_ms))?;
        Ok(result
            .elements()
            .iter()
            .map(|e| {
                let tp = TopicPartition::new(e.topic(), e.partition() as u32);
                let outcome = match e.error() {
                    Err(err) => Err(from_rdkafka(&err, "delete records", timeout_ms)),
                    Ok(()) => match e.offset() {
                        rdkafka::Offset::Offset(o) => Ok(o),
                        other => Err(ClientError::Fatal(format!(
                            "delete records {tp}: low watermark {other:?}"
                        ))),
                    },
                };
                (tp, outcome)
            })
            .collect())
    }
}

#[async_trait]
impl Admin for RealAdmin {
    async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        config: TopicConfig,
    ) -> Result<(), ClientError> {
        let min_isr = config.min_insync_replicas.to_string();
        let unclean = config.unclean_leader_election_enable.to_string();
        let max_bytes = config.max_message_bytes.to_string();
        let topic = NewTopic::new(
            name,
            partitions as i32,
            TopicReplication::Fixed(replication_factor as i32),
        )
        .set("min.insync.replicas", &min_isr)
        .set("unclean.leader.election.enable", &unclean)
        .set("max.message.bytes", &max_bytes);
        let opts = AdminOptions::new()
            .operation_timeout(Some(self.timeout))
            .request_timeout(Some(self.timeout));
        let timeout_ms = self.timeout.as_millis() as u64;
        let results = self
            .admin
            .create_topics([&topic], &opts)
            .await
            .map_err(|e| from_rdkafka(&e, "create topic", timeout_ms))?;
        match results.into_iter().next() {
            Some(Ok(_)) => Ok(()),
            Some(Err((_, code))) => Err(from_code(code, "create topic", timeout_ms)),
            None => Err(ClientError::Fatal(format!(
                "create topic {name}: no result"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A revocation handed out after a poll took records: those of kept partitions are read
    /// again from their first taken offset; those of revoked partitions are left to the
    /// next owner.
    #[test]
    fn a_poll_cut_short_by_a_revocation_rewinds_only_the_kept_partitions() {
        let record = |p: u32, offset: Offset| ConsumedRecord {
            tp: TopicPartition::new("in", p),
            offset,
            key: None,
            value: None,
            headers: Vec::new(),
        };
        let records = [
            record(1, 7),
            record(0, 3),
            record(1, 5),
            record(2, 9),
            record(1, 6),
        ];
        let revocation = Revocation {
            partitions: vec![TopicPartition::new("in", 0)],
            lost: false,
        };
        assert_eq!(
            kept_rewinds(&records, &revocation),
            [
                (TopicPartition::new("in", 1), 5),
                (TopicPartition::new("in", 2), 9)
            ]
        );
        let eager = Revocation {
            partitions: (0..3).map(|p| TopicPartition::new("in", p)).collect(),
            lost: false,
        };
        assert!(kept_rewinds(&records, &eager).is_empty());
    }

    /// Java's `request.timeout.ms` bounds the client's wait for a Produce response; in
    /// librdkafka that is `socket.timeout.ms`, which must follow it, or a lost response is
    /// never retried within a short delivery timeout. The batching keys reach librdkafka
    /// under the same names.
    #[test]
    fn the_producers_request_timeout_bounds_its_wait_for_a_response() {
        let config = ProducerConfig {
            enable_idempotence: false,
            request_timeout_ms: 500,
            delivery_timeout_ms: 3_000,
            retries: 5,
            linger_ms: 10,
            max_in_flight_requests_per_connection: 5,
            ..ProducerConfig::default()
        };
        let c = producer_client_config("127.0.0.1:9092", &config);
        let got = |key: &str| c.get(key).map(str::to_string);
        assert_eq!(got("socket.timeout.ms").as_deref(), Some("500"));
        assert_eq!(got("request.timeout.ms").as_deref(), Some("500"));
        assert_eq!(got("delivery.timeout.ms").as_deref(), Some("3000"));
        assert_eq!(got("linger.ms").as_deref(), Some("10"));
        assert_eq!(
            got("max.in.flight.requests.per.connection").as_deref(),
            Some("5")
        );
        assert_eq!(got("enable.idempotence").as_deref(), Some("false"));
    }
}

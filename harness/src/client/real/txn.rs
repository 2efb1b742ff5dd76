//! The rdkafka implementation of [`TransactionalProducer`]: librdkafka's transactional
//! producer (KIP-98, KIP-447) behind a `FutureProducer`.
//!
//! # Calls
//! - `init_transactions`, `commit_transaction`, `abort_transaction` and
//!   `send_offsets_to_transaction` block in librdkafka, so they run on tokio's blocking
//!   pool; `begin_transaction` is local; `send` awaits the delivery report;
//!   `send_with_callback` hands the report to a task that runs the callback.
//! - `send_offsets_to_transaction` takes the group metadata as data (group id, generation,
//!   member id), as the trait does, and builds librdkafka's metadata with
//!   `rd_kafka_consumer_group_metadata_new_with_genid`: rdkafka 0.39 only hands one out from
//!   a live consumer, and the generation is what lets the group coordinator fence a zombie's
//!   offsets (ILLEGAL_GENERATION / FENCED_INSTANCE_ID, KIP-447). Generation -1 with an empty
//!   member id is Java's `new ConsumerGroupMetadata(groupId)`: no generation check.
//!
//! # Error classes
//! librdkafka classes every transactional error itself (`rd_kafka_error_is_retriable`,
//! `_txn_requires_abort`, `_is_fatal`); those flags become [`TxnErrorClass`] as they are.
//! A failed delivery inside a transaction carries no class: librdkafka moves the
//! transaction to its abortable state, so it is [`TxnErrorClass::Abortable`], unless the
//! producer raised a fatal error (fenced by a newer instance: PRODUCER_FENCED,
//! INVALID_PRODUCER_EPOCH), which makes it [`TxnErrorClass::Fatal`]. The cause keeps
//! Kafka's error code where eosim's model knows it ([`super::error::from_code`]), so a
//! timeout stays ambiguous.

use super::error::{from_code, from_rdkafka};
use super::kafka::{future_record, producer_client_config};
use crate::client::{
    ClientError, ConsumerGroupMetadata, Delivery, ProducerConfig, ProducerRecord,
    TransactionalProducer, TxnDeliveryCallback, TxnError, TxnErrorClass,
};
use async_trait::async_trait;
use eosim_sim::kafka::{Acks, Offset, TopicPartition};
use rdkafka::bindings as rd;
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer as _};
use rdkafka::util::Timeout;
use rdkafka::TopicPartitionList;
use std::ffi::{CStr, CString};
use std::time::Duration;

/// Settings of a [`RealTransactionalProducer`], with Kafka's names.
#[derive(Debug, Clone, PartialEq)]
pub struct RealTxnConfig {
    /// `transactional.id`.
    pub transactional_id: String,
    /// `transaction.timeout.ms` (Kafka's default 60000; Streams under EOS 10000).
    pub transaction_timeout_ms: u64,
    /// The producer settings underneath; `acks` is forced to `all` and idempotence on, as
    /// transactions require, and `delivery.timeout.ms` is capped at
    /// `transaction.timeout.ms` (librdkafka refuses a `message.timeout.ms` above it).
    pub producer: ProducerConfig,
}

impl RealTxnConfig {
    /// Kafka's defaults for `transactional_id`.
    pub fn new(transactional_id: impl Into<String>) -> Self {
        Self {
            transactional_id: transactional_id.into(),
            transaction_timeout_ms: 60_000,
            producer: ProducerConfig::default(),
        }
    }
}

/// A transactional producer on rdkafka. See the module docs.
pub struct RealTransactionalProducer {
    producer: FutureProducer,
    config: RealTxnConfig,
}

impl std::fmt::Debug for RealTransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealTransactionalProducer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RealTransactionalProducer {
    /// A transactional producer for `bootstrap_servers` (`host:port,...`). Nothing is sent
    /// before [`TransactionalProducer::init_transactions`].
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when librdkafka rejects the configuration.
    pub fn new(bootstrap_servers: &str, config: RealTxnConfig) -> Result<Self, ClientError> {
        let producer_config = ProducerConfig {
            acks: Acks::All,
            enable_idempotence: true,
            delivery_timeout_ms: (config.producer.delivery_timeout_ms)
                .min(config.transaction_timeout_ms),
            ..config.producer.clone()
        };
        let mut c = producer_client_config(bootstrap_servers, &producer_config);
        // librdkafka refuses a transactional producer whose `socket.timeout.ms` (here
        // `request.timeout.ms`, see `producer_client_config`) exceeds
        // `transaction.timeout.ms` + 100 (`rd_kafka_conf_finalize`); Java has no such rule.
        let socket_timeout_ms = producer_config
            .request_timeout_ms
            .max(10)
            .min(config.transaction_timeout_ms + 100);
        c.set("transactional.id", &config.transactional_id)
            .set(
                "transaction.timeout.ms",
                config.transaction_timeout_ms.to_string(),
            )
            .set("socket.timeout.ms", socket_timeout_ms.to_string());
        let producer = c.create().map_err(|e| {
            ClientError::Fatal(format!("transactional producer configuration: {e}"))
        })?;
        Ok(Self { producer, config })
    }

    /// Runs a blocking librdkafka call on tokio's blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        api: &'static str,
        call: impl FnOnce(&FutureProducer) -> Result<T, TxnError> + Send + 'static,
    ) -> Result<T, TxnError> {
        let producer = self.producer.clone();
        tokio::task::spawn_blocking(move || call(&producer))
            .await
            .unwrap_or_else(|e| {
                let cause = ClientError::Fatal(format!("{api}: blocking task: {e}"));
                Err(TxnError::new(api, TxnErrorClass::Fatal, cause))
            })
    }

    /// The class of a failed delivery: fatal when the producer raised a fatal error.
    fn delivery_class(&self) -> TxnErrorClass {
        delivery_class(&self.producer)
    }
}

/// The class of a failed delivery of `producer`: fatal when it raised a fatal error.
fn delivery_class(producer: &FutureProducer) -> TxnErrorClass {
    match producer.client().fatal_error() {
        Some(_) => TxnErrorClass::Fatal,
        None => TxnErrorClass::Abortable,
    }
}

/// The class librdkafka gave a transactional error.
fn class_of(fatal: bool, abortable: bool, retriable: bool) -> TxnErrorClass {
    if fatal {
        TxnErrorClass::Fatal
    } else if abortable {
        TxnErrorClass::Abortable
    } else if retriable {
        TxnErrorClass::Retriable
    } else {
        // Neither: a misuse (wrong state) or a non-retriable failure; the transaction
        // cannot go on, but the producer may abort it.
        TxnErrorClass::Abortable
    }
}

/// Maps an rdkafka error of transactional call `api`.
fn txn_error(api: &'static str, e: &RdKafkaError, timeout: Duration) -> TxnError {
    let timeout_ms = timeout.as_millis() as u64;
    match e {
        RdKafkaError::Transaction(t) => TxnError::new(
            api,
            class_of(t.is_fatal(), t.txn_requires_abort(), t.is_retriable()),
            from_code(t.code(), &format!("{api}: {}", t.string()), timeout_ms),
        ),
        other => TxnError::new(
            api,
            TxnErrorClass::Abortable,
            from_rdkafka(other, api, timeout_ms),
        ),
    }
}

/// The topic-partition list of `offsets` (next offsets to read).
fn offsets_list(offsets: &[(TopicPartition, Offset)]) -> Result<TopicPartitionList, TxnError> {
    let mut tpl = TopicPartitionList::with_capacity(offsets.len());
    for (tp, offset) in offsets {
        tpl.add_partition_offset(
            &tp.topic,
            tp.partition as i32,
            rdkafka::Offset::Offset(*offset),
        )
        .map_err(|e| {
            let cause = ClientError::Fatal(format!("offset {offset} of {tp}: {e}"));
            TxnError::new(
                "send_offsets_to_transaction",
                TxnErrorClass::Abortable,
                cause,
            )
        })?;
    }
    Ok(tpl)
}

/// `rd_kafka_send_offsets_to_transaction` with group metadata built from `group`.
fn send_offsets_native(
    producer: &FutureProducer,
    offsets: &TopicPartitionList,
    group: &ConsumerGroupMetadata,
    timeout: Duration,
) -> Result<(), TxnError> {
    const API: &str = "send_offsets_to_transaction";
    let text = |s: &str| {
        CString::new(s).map_err(|e| {
            let cause = ClientError::Fatal(format!("group metadata: {e}"));
            TxnError::new(API, TxnErrorClass::Abortable, cause)
        })
    };
    let (group_id, member_id) = (text(&group.group_id)?, text(&group.member_id)?);
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: the C strings outlive the call (librdkafka copies them); the metadata is
    // destroyed once after the call, which does not keep it; the producer handle and the
    // list are valid for the call; the returned error is read and destroyed once.
    unsafe {
        let cgmd = rd::rd_kafka_consumer_group_metadata_new_with_genid(
            group_id.as_ptr(),
            group.generation,
            member_id.as_ptr(),
            std::ptr::null(),
        );
        let error = rd::rd_kafka_send_offsets_to_transaction(
            producer.client().native_ptr(),
            offsets.ptr(),
            cgmd,
            timeout_ms,
        );
        rd::rd_kafka_consumer_group_metadata_destroy(cgmd);
        if error.is_null() {
            return Ok(());
        }
        let code = RDKafkaErrorCode::from(rd::rd_kafka_error_code(error));
        let message = CStr::from_ptr(rd::rd_kafka_error_string(error))
            .to_string_lossy()
            .into_owned();
        let class = class_of(
            rd::rd_kafka_error_is_fatal(error) != 0,
            rd::rd_kafka_error_txn_requires_abort(error) != 0,
            rd::rd_kafka_error_is_retriable(error) != 0,
        );
        rd::rd_kafka_error_destroy(error);
        let what = format!("{API}: {message}");
        let cause = from_code(code, &what, timeout.as_millis() as u64);
        Err(TxnError::new(API, class, cause))
    }
}

#[async_trait]
impl TransactionalProducer for RealTransactionalProducer {
    async fn init_transactions(&self, timeout: Duration) -> Result<(), TxnError> {
        let api = "init_transactions";
        self.blocking(api, move |p| {
            p.init_transactions(timeout)
                .map_err(|e| txn_error(api, &e, timeout))
        })
        .await
    }

    fn begin_transaction(&self) -> Result<(), TxnError> {
        self.producer
            .begin_transaction()
            .map_err(|e| txn_error("begin_transaction", &e, Duration::ZERO))
    }

    async fn send(&self, record: ProducerRecord) -> Result<Delivery, TxnError> {
        let r = future_record(&record);
        let timeout_ms =
            (self.config.producer.delivery_timeout_ms).min(self.config.transaction_timeout_ms);
        let queue_timeout = Timeout::After(Duration::from_millis(timeout_ms));
        match self.producer.send(r, queue_timeout).await {
            Ok(d) => Ok(Delivery {
                partition: d.partition as u32,
                offset: d.offset,
            }),
            Err((e, _)) => {
                let cause = from_rdkafka(&e, "produce", timeout_ms);
                Err(TxnError::new("send", self.delivery_class(), cause))
            }
        }
    }

    /// `FutureProducer::send_result`: librdkafka queues the record and batches it itself;
    /// a task awaits its delivery report and runs `callback` (classed as [`Self::send`]
    /// classes it). librdkafka's `commit_transaction` flushes before it commits.
    async fn send_with_callback(&self, record: ProducerRecord, callback: TxnDeliveryCallback) {
        let timeout_ms =
            (self.config.producer.delivery_timeout_ms).min(self.config.transaction_timeout_ms);
        let future = match self.producer.send_result(future_record(&record)) {
            Ok(future) => future,
            Err((e, _)) => {
                let cause = from_rdkafka(&e, "produce", timeout_ms);
                return callback(Err(TxnError::new("send", self.delivery_class(), cause)));
            }
        };
        let producer = self.producer.clone();
        tokio::spawn(async move {
            let cause = match future.await {
                Ok(Ok(d)) => {
                    let delivery = Delivery {
                        partition: d.partition as u32,
                        offset: d.offset,
                    };
                    return callback(Ok(delivery));
                }
                Ok(Err((e, _))) => from_rdkafka(&e, "produce", timeout_ms),
                // The producer was dropped with the record queued: outcome unknown.
                Err(_) => ClientError::Timeout {
                    what: "delivery report (the producer was dropped)".into(),
                    timeout_ms,
                },
            };
            callback(Err(TxnError::new("send", delivery_class(&producer), cause)));
        });
    }

    /// librdkafka's `rd_kafka_flush`, on the blocking pool.
    async fn flush(&self, timeout: Duration) -> Result<(), TxnError> {
        let api = "flush";
        self.blocking(api, move |p| {
            p.flush(timeout).map_err(|e| txn_error(api, &e, timeout))
        })
        .await
    }

    async fn send_offsets_to_transaction(
        &self,
        offsets: &[(TopicPartition, Offset)],
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<(), TxnError> {
        let list = offsets_list(offsets)?;
        let group = group.clone();
        self.blocking("send_offsets_to_transaction", move |p| {
            send_offsets_native(p, &list, &group, timeout)
        })
        .await
    }

    async fn commit_transaction(&self, timeout: Duration) -> Result<(), TxnError> {
        let api = "commit_transaction";
        self.blocking(api, move |p| {
            p.commit_transaction(timeout)
                .map_err(|e| txn_error(api, &e, timeout))
        })
        .await
    }

    async fn abort_transaction(&self, timeout: Duration) -> Result<(), TxnError> {
        let api = "abort_transaction";
        self.blocking(api, move |p| {
            p.abort_transaction(timeout)
                .map_err(|e| txn_error(api, &e, timeout))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_flags_become_the_classes_fatal_first() {
        assert_eq!(class_of(true, true, true), TxnErrorClass::Fatal);
        assert_eq!(class_of(false, true, true), TxnErrorClass::Abortable);
        assert_eq!(class_of(false, false, true), TxnErrorClass::Retriable);
        assert_eq!(class_of(false, false, false), TxnErrorClass::Abortable);
    }

    #[test]
    fn a_transactional_producer_is_configured_without_a_broker() {
        let config = RealTxnConfig::new("t-1");
        let p = RealTransactionalProducer::new("localhost:1", config);
        assert!(p.is_ok(), "{p:?}");
    }
}

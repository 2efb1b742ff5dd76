//! The simulated producer: partitioning, leader routing, retries, `delivery.timeout.ms`.
//!
//! One record per Produce request (no linger): simple to reason about in histories. The
//! outcome of a send that saw any timeout is ambiguous and is reported as
//! [`ClientError::Timeout`] unless a later attempt succeeded, because a timed-out Produce
//! may have been appended (`models-reference.md` A.2).

use super::conn::{needs_metadata_refresh, Connection};
use crate::client::{ClientError, Delivery, Producer, ProducerConfig, ProducerRecord};
use async_trait::async_trait;
use eosim_sim::kafka::murmur2::partition_for_key;
use eosim_sim::kafka::{KafkaError, ProducerBatchHeader, Record, Request, Response, TopicPartition};
use madsim::rand::Rng;
use std::time::Duration;

/// A producer over a [`Connection`]. Idempotence comes with the transactions issue; until
/// then every batch is sent without a producer id, so retries can duplicate.
pub struct SimProducer {
    conn: Connection,
    config: ProducerConfig,
}

impl SimProducer {
    /// A producer with `config` on `conn`.
    pub fn new(conn: Connection, config: ProducerConfig) -> Self {
        Self { conn, config }
    }

    async fn partition_of(&self, record: &ProducerRecord) -> Result<u32, ClientError> {
        if let Some(p) = record.partition {
            return Ok(p);
        }
        let count = self.partition_count(&record.topic).await?;
        Ok(match &record.key {
            Some(key) => partition_for_key(key, count),
            // Sticky partitioning reduced to a random pick per record.
            None => madsim::rand::thread_rng().gen_range(0..count),
        })
    }

    async fn partition_count(&self, topic: &str) -> Result<u32, ClientError> {
        if let Some(n) = self.conn.partition_count(topic) {
            return Ok(n);
        }
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        self.conn.refresh_metadata(&[topic.to_string()], timeout).await?;
        self.conn
            .partition_count(topic)
            .ok_or(ClientError::Kafka(KafkaError::UnknownTopicOrPartition))
    }

    /// Sends `records` to `tp` as one batch in one Produce request, without retries (what
    /// librdkafka does under the hood once its linger expires). Returns the base offset.
    ///
    /// # Errors
    /// The broker's error or a timeout (ambiguous).
    pub async fn send_batch(
        &self,
        tp: &TopicPartition,
        records: Vec<Record>,
    ) -> Result<i64, ClientError> {
        self.attempt(tp, records).await
    }

    /// One attempt: find the leader and send the batch.
    async fn attempt(&self, tp: &TopicPartition, records: Vec<Record>) -> Result<i64, ClientError> {
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let leader = match self.conn.leader(tp) {
            Some(leader) => leader,
            None => {
                self.conn.refresh_metadata(&[tp.topic.clone()], timeout).await?;
                self.conn.leader(tp).ok_or(ClientError::Kafka(KafkaError::LeaderNotAvailable))?
            }
        };
        let request = Request::Produce {
            tp: tp.clone(),
            acks: self.config.acks,
            timeout_ms: self.config.request_timeout_ms,
            header: ProducerBatchHeader::NONE,
            records,
        };
        match self.conn.request(leader, request, timeout).await? {
            Response::Produce { base_offset, .. } => Ok(base_offset),
            Response::Error(e) => Err(ClientError::Kafka(e)),
            other => Err(ClientError::Fatal(format!("unexpected produce response {other:?}"))),
        }
    }
}

#[async_trait]
impl Producer for SimProducer {
    async fn send(&self, record: ProducerRecord) -> Result<Delivery, ClientError> {
        let partition = self.partition_of(&record).await?;
        let tp = TopicPartition::new(record.topic.clone(), partition);
        let now_ms = madsim::time::TimeHandle::current().elapsed().as_millis() as i64;
        let batch = Record {
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp_ms: now_ms,
        };
        let deadline = madsim::time::Instant::now()
            + Duration::from_millis(self.config.delivery_timeout_ms);
        let mut ambiguous = false;
        let mut attempts = 0u32;
        loop {
            let error = match self.attempt(&tp, vec![batch.clone()]).await {
                Ok(offset) => return Ok(Delivery { partition, offset }),
                Err(e) => e,
            };
            ambiguous |= error.is_ambiguous();
            if let ClientError::Kafka(e) = error {
                if needs_metadata_refresh(e) {
                    self.conn.invalidate(&tp.topic);
                }
            }
            let retriable = match &error {
                ClientError::Kafka(e) => e.is_retriable(),
                ClientError::Timeout { .. } => true,
                _ => false,
            };
            attempts += 1;
            let backoff = Duration::from_millis(self.config.retry_backoff_ms);
            let out_of_time = madsim::time::Instant::now() + backoff >= deadline;
            if !retriable || attempts > self.config.retries || out_of_time {
                return Err(if ambiguous && !matches!(error, ClientError::Timeout { .. }) {
                    ClientError::Timeout {
                        what: format!("delivery to {tp} (an attempt timed out; last: {error})"),
                        timeout_ms: self.config.delivery_timeout_ms,
                    }
                } else {
                    error
                });
            }
            madsim::time::sleep(backoff).await;
        }
    }
}

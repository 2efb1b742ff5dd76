//! The sends of one input producer process, on any [`Producer`]: the simulated workloads
//! (`crate::workload`, under `--cfg madsim`) and the real tier's producer workers
//! (`crate::real::run::worker`) both go through [`Sends`], so a scenario's batching keys
//! (`linger.ms`, `max.in.flight.requests.per.connection`, [`crate::scenario::producer`])
//! shape both the same way: Java's `KafkaProducer.send(record, callback)`, not awaited
//! before the next send.

use super::{ClientError, Delivery, Producer, ProducerConfig, ProducerRecord};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The pause of an input producer process between two sends (`[workload]
/// produce_interval_ms`, in ms): none at 0, where the sender sends as fast as its
/// producer takes records, as Java's `KafkaProducer.send` returns at once until
/// `buffer.memory` fills. A zero sleep would not do: madsim's `sleep`, like tokio's, waits
/// at least 1 ms (`madsim::time::TimeHandle::sleep_until`), which paced a "no pause"
/// producer at 1,000 records per simulated second and cut its batches to a record or two.
pub async fn pace(interval_ms: u64) {
    if interval_ms > 0 {
        tokio::time::sleep(Duration::from_millis(interval_ms)).await;
    }
}

/// The sends of one input producer process: each awaited in turn, or, when the producer
/// batches ([`ProducerConfig::batching`]), left queued in its accumulator with the outcome
/// handed on from the producer's callback ([`Producer::send_with_callback`]) once the
/// delivery report arrives; [`Sends::finish`] then flushes and waits for every outcome.
pub struct Sends {
    queued: bool,
    flush_timeout: Duration,
    /// Queued sends whose outcome was not handed on yet, and a bell rung at each.
    outstanding: Arc<(Mutex<usize>, Notify)>,
}

impl Sends {
    /// The sends of a producer built with `config`; a flush waits up to its
    /// `delivery.timeout.ms` plus `request_timeout_ms`.
    pub fn new(config: &ProducerConfig, request_timeout_ms: u64) -> Self {
        Self {
            queued: config.batching(),
            flush_timeout: Duration::from_millis(config.delivery_timeout_ms + request_timeout_ms),
            outstanding: Arc::default(),
        }
    }

    /// Whether sends stay queued (the producer batches).
    pub fn queued(&self) -> bool {
        self.queued
    }

    /// Sends `produced` with `producer` and hands the outcome to `outcome`: at once, or
    /// from the producer's callback once its delivery report arrives when queued.
    pub async fn send(
        &mut self,
        producer: &impl Producer,
        produced: ProducerRecord,
        outcome: impl FnOnce(Result<Delivery, ClientError>) + Send + 'static,
    ) {
        if !self.queued {
            outcome(producer.send(produced).await);
            return;
        }
        *self.outstanding.0.lock().expect("outstanding lock") += 1;
        let outstanding = self.outstanding.clone();
        let callback = move |result| {
            outcome(result);
            *outstanding.0.lock().expect("outstanding lock") -= 1;
            outstanding.1.notify_waiters();
        };
        producer
            .send_with_callback(produced, Box::new(callback))
            .await;
    }

    /// When queued: flushes `producer` and waits for every outcome (a flush that times
    /// out leaves outcomes to come; they end within the delivery timeout).
    pub async fn finish(self, producer: &impl Producer) {
        if !self.queued {
            return;
        }
        let _ = producer.flush(self.flush_timeout).await;
        loop {
            // Created before the check, so an outcome in between still wakes it.
            let handed_on = self.outstanding.1.notified();
            if *self.outstanding.0.lock().expect("outstanding lock") == 0 {
                return;
            }
            handed_on.await;
        }
    }
}

//! The queued side of the simulated producers: an [`Accumulator`] per producer and the
//! sender task that drains it (Kafka's `RecordAccumulator` and `Sender.sendProducerData`,
//! `clients/.../producer/internals/`). Shared by the idempotent
//! [`super::producer::SimProducer`] and the transactional
//! [`super::txn::SimTransactionalProducer`]; each says how one batch is delivered
//! ([`BatchDelivery`]).
//!
//! A batch leaves when it is full, not its partition's last, `linger.ms` old, or while a
//! flush waits, and while its leader has fewer than
//! `max.in.flight.requests.per.connection` batches in flight from this producer. One batch
//! per partition is in flight when idempotent or when one request may be in flight (Java's
//! `guaranteeMessageOrder` mutes the partition at one in flight; its idempotent producer
//! pipelines up to 5 batches of a partition, which the model leaves out). Every record of
//! a batch resolves to
//! `Delivery { offset: base offset + index }` or to the batch's error.

use super::accumulator::{Accumulator, Batch};
use super::conn::Connection;
use crate::client::{ClientError, Delivery, DeliveryCallback, ProducerConfig};
use eosim_sim::deadline::Deadline;
use eosim_sim::kafka::{BrokerId, Record, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// Where a queued record's outcome goes: a report (`send_async`), or a callback
/// (`send_with_callback`), run in the batch's task as the batch completes (Java runs
/// callbacks on its I/O thread, in order within a batch).
pub enum Waiter {
    /// The report of [`crate::client::Producer::send_async`].
    Report(oneshot::Sender<Result<Delivery, ClientError>>),
    /// Java's `Callback`.
    Callback(DeliveryCallback),
}

impl Waiter {
    fn complete(self, outcome: Result<Delivery, ClientError>) {
        match self {
            // The caller may have dropped its report: nothing to tell then.
            Waiter::Report(report) => {
                let _ = report.send(outcome);
            }
            Waiter::Callback(callback) => callback(outcome),
        }
    }
}

/// How a producer delivers one batch that left its queue.
pub trait BatchDelivery: Clone + Send + Sync + 'static {
    /// Delivers `records` to `tp` as one batch, retrying it as a unit until `deadline`
    /// (`delivery.timeout.ms` from its first record). Returns the base offset (-1 under
    /// acks=0 or for a batch the broker already had).
    ///
    /// # Errors
    /// The last error; [`ClientError::Timeout`] when the outcome is unknown.
    fn deliver<'a>(
        &'a self,
        tp: &'a TopicPartition,
        records: Vec<Record>,
        deadline: madsim::time::Instant,
    ) -> impl Future<Output = Result<i64, ClientError>> + Send + 'a;

    /// Whether `tp`'s batches may leave now. A transactional producer holds a partition's
    /// batches until the partition joined the transaction (Java's
    /// `RecordAccumulator.drain` skips it unless `TransactionManager.isSendToPartitionAllowed`);
    /// it rings [`BatchQueue::wake`] when that changes.
    fn sendable(&self, tp: &TopicPartition) -> bool {
        let _ = tp;
        true
    }
}

/// The accumulator and what is in flight from it.
struct Queue {
    acc: Accumulator<Waiter>,
    /// The accumulator's clock: ms since this instant.
    clock_base: madsim::time::Instant,
    /// Batches in flight per leader (0 = no leader known when the batch left).
    in_flight: BTreeMap<BrokerId, u32>,
    /// Partitions with a batch in flight that no other batch of theirs may overlap.
    muted: BTreeSet<TopicPartition>,
    /// Batches in flight in all.
    batches_in_flight: usize,
    /// `flush` calls waiting.
    flushing: usize,
    /// Whether the sender task runs (it ends when nothing is queued or in flight).
    sender_running: bool,
}

impl Queue {
    fn now_ms(&self) -> u64 {
        self.clock_base.elapsed().as_millis() as u64
    }

    fn idle(&self) -> bool {
        self.acc.is_empty() && self.batches_in_flight == 0
    }
}

/// One producer's record queue and sender. Cloning shares it (the sender task and each
/// batch's task hold a clone).
#[derive(Clone)]
pub struct BatchQueue {
    conn: Connection,
    /// `linger.ms`, `batch.size`, `max.in.flight.requests.per.connection`,
    /// `enable.idempotence` and `delivery.timeout.ms` are read.
    config: ProducerConfig,
    queue: Arc<Mutex<Queue>>,
    /// Rung on a new record, a flush, and a batch's completion: the sender looks again.
    wake: Arc<Notify>,
    /// Rung on a batch's completion: flushes look again.
    settled: Arc<Notify>,
}

impl BatchQueue {
    /// An empty queue of a producer with `config` on `conn`.
    pub fn new(conn: Connection, config: ProducerConfig) -> Self {
        let queue = Queue {
            acc: Accumulator::new(config.linger_ms, config.batch_size),
            clock_base: madsim::time::Instant::now(),
            in_flight: BTreeMap::new(),
            muted: BTreeSet::new(),
            batches_in_flight: 0,
            flushing: 0,
            sender_running: false,
        };
        Self {
            conn,
            config,
            queue: Arc::new(Mutex::new(queue)),
            wake: Arc::default(),
            settled: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().expect("queue lock")
    }

    /// Whether nothing is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.lock().idle()
    }

    /// Makes the sender look at the queue again (a partition became sendable).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Appends `record` for `tp` with `waiter`, starting the sender task (which delivers
    /// with `delivery`) unless it runs.
    pub fn enqueue<D: BatchDelivery>(
        &self,
        delivery: &D,
        tp: &TopicPartition,
        record: Record,
        waiter: Waiter,
    ) {
        let start_sender = {
            let mut queue = self.lock();
            let now_ms = queue.now_ms();
            queue.acc.append(tp, record, waiter, now_ms);
            !std::mem::replace(&mut queue.sender_running, true)
        };
        if start_sender {
            // A task of this node: a kill ends it with the producer's process.
            tokio::spawn(self.clone().run_sender(delivery.clone()));
        } else {
            self.wake.notify_one();
        }
    }

    /// Sends every queued batch now, lingering or not, and waits until none is queued or
    /// in flight (Java's `KafkaProducer.flush`).
    ///
    /// # Errors
    /// [`ClientError::Timeout`] when records are still undelivered after `timeout`.
    pub async fn flush(&self, timeout: Duration) -> Result<(), ClientError> {
        // One deadline (and one timer) for the whole wait, not one per turn.
        let mut deadline = Deadline::at(madsim::time::Instant::now() + timeout);
        self.lock().flushing += 1;
        self.wake.notify_one();
        let result = loop {
            // Created before the check, so a completion in between still wakes it.
            let settled = self.settled.notified();
            if self.lock().idle() {
                break Ok(());
            }
            tokio::select! {
                // `biased`: tokio picks branches with a thread-local RNG otherwise, seeded
                // from a process-wide counter, which would break replay.
                biased;
                () = settled => {}
                () = &mut deadline => {
                    break Err(ClientError::Timeout {
                        what: "flush: records still undelivered".into(),
                        timeout_ms: timeout.as_millis() as u64,
                    });
                }
            }
        };
        self.lock().flushing -= 1;
        result
    }

    /// The sender task: sends every sendable batch, then sleeps until the next linger
    /// expires or something changes; ends when nothing is queued or in flight.
    async fn run_sender<D: BatchDelivery>(self, delivery: D) {
        loop {
            let wake_at = {
                let mut queue = self.lock();
                self.dispatch_ready(&delivery, &mut queue);
                if queue.idle() {
                    queue.sender_running = false;
                    return;
                }
                let now_ms = queue.now_ms();
                let expiry = queue.acc.next_linger_expiry_after_ms(now_ms);
                expiry.map(|at| queue.clock_base + Duration::from_millis(at))
            };
            match wake_at {
                Some(at) => tokio::select! {
                    // `biased`: see `flush`.
                    biased;
                    () = self.wake.notified() => {}
                    () = madsim::time::sleep_until(at) => {}
                },
                None => self.wake.notified().await,
            }
        }
    }

    /// Takes every batch that may leave now, in partition order, and starts its delivery.
    fn dispatch_ready<D: BatchDelivery>(&self, delivery: &D, queue: &mut Queue) {
        let max_in_flight = self.config.max_in_flight_requests_per_connection.max(1);
        let ordered = self.config.enable_idempotence || max_in_flight == 1;
        let now_ms = queue.now_ms();
        let flushing = queue.flushing > 0;
        for tp in queue.acc.partitions() {
            if !delivery.sendable(&tp) {
                continue;
            }
            let leader = self.conn.leader(&tp).unwrap_or(0);
            while !queue.muted.contains(&tp)
                && queue.in_flight.get(&leader).copied().unwrap_or(0) < max_in_flight
            {
                let Some(batch) = queue.acc.take_ready(&tp, now_ms, flushing) else {
                    break;
                };
                *queue.in_flight.entry(leader).or_insert(0) += 1;
                queue.batches_in_flight += 1;
                if ordered {
                    queue.muted.insert(tp.clone());
                }
                let deadline = queue.clock_base
                    + Duration::from_millis(batch.created_ms + self.config.delivery_timeout_ms);
                // Boxed: the delivery's future is kilobytes, and the spawn would otherwise
                // copy it several times on its way into the task (10 % of a batching
                // producer's seed).
                tokio::spawn(Box::pin(self.clone().deliver_batch(
                    delivery.clone(),
                    tp.clone(),
                    leader,
                    batch,
                    deadline,
                )));
            }
        }
    }

    /// Delivers one queued batch and resolves each of its records.
    async fn deliver_batch<D: BatchDelivery>(
        self,
        delivery: D,
        tp: TopicPartition,
        leader: BrokerId,
        batch: Batch<Waiter>,
        deadline: madsim::time::Instant,
    ) {
        crate::mark!("client:produce-batch");
        for _ in &batch.records {
            crate::mark!("client:produce-batch-record");
        }
        if batch.records.len() > 1 {
            crate::mark!("client:produce-batch-multi-record");
        }
        let result = delivery.deliver(&tp, batch.records, deadline).await;
        for (index, waiter) in batch.waiters.into_iter().enumerate() {
            let delivered = result.clone().map(|base| Delivery {
                partition: tp.partition,
                offset: if base >= 0 { base + index as i64 } else { -1 },
            });
            waiter.complete(delivered);
        }
        {
            let mut queue = self.lock();
            if let Some(n) = queue.in_flight.get_mut(&leader) {
                *n -= 1;
            }
            queue.batches_in_flight -= 1;
            queue.muted.remove(&tp);
        }
        self.wake.notify_one();
        self.settled.notify_waiters();
    }
}

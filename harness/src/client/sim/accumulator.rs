//! The record accumulator of the simulated producer, after Kafka's
//! `clients/.../producer/internals/RecordAccumulator.java`: one queue of batches per
//! partition, records appended to the partition's last batch while it has room, a batch
//! sendable once it is full, no longer the last one, `linger.ms` old, or a flush is on.
//!
//! Sizes are the broker model's ([`eosim_sim::kafka::log::batch_size_bytes`]): a batch
//! counts 61 bytes of v2 batch header (`DefaultRecordBatch.RECORD_BATCH_OVERHEAD`) plus, per
//! record, 8 bytes of overhead, the key, the value and each header's key and value (+2).
//! A record joins the last batch when `batch bytes + record bytes <= batch.size` or the
//! batch is empty (Java's `MemoryRecordsBuilder.hasRoomFor`, whose write limit is
//! `batch.size`); otherwise the last batch is closed and the record opens a new one, so a
//! record bigger than `batch.size` travels alone (`RecordAccumulator.append` allocates
//! `max(batch.size, record size)`). A batch whose bytes reach `batch.size` is full
//! (`MemoryRecordsBuilder.isFull`).
//!
//! Pure and clock-free: times are milliseconds on the caller's clock, so the unit tests
//! drive it without a runtime. Each producer's [`super::sender::BatchQueue`] owns one and
//! drains it from its sender task.

use eosim_sim::kafka::log::{batch_size_bytes, record_size_bytes};
use eosim_sim::kafka::{Record, TopicPartition};
use std::collections::{BTreeMap, VecDeque};

/// A batch under construction or ready to go: its records, in append order, and one waiter
/// per record (whatever the caller resolves with the record's outcome).
#[derive(Debug)]
pub struct Batch<W> {
    /// The records.
    pub records: Vec<Record>,
    /// One per record, same order.
    pub waiters: Vec<W>,
    /// When the first record was appended, ms on the caller's clock (`linger.ms` and
    /// `delivery.timeout.ms` count from here, as Java's `ProducerBatch.createdMs`).
    pub created_ms: u64,
    /// The batch's size as the model counts it, bytes.
    pub bytes: u32,
    /// No more records join it (it was full, or a record did not fit).
    closed: bool,
}

/// Per-partition queues of batches.
#[derive(Debug)]
pub struct Accumulator<W> {
    linger_ms: u64,
    batch_size: u32,
    queues: BTreeMap<TopicPartition, VecDeque<Batch<W>>>,
}

impl<W> Accumulator<W> {
    /// An empty accumulator with `linger.ms` = `linger_ms` and `batch.size` = `batch_size`
    /// bytes.
    pub fn new(linger_ms: u64, batch_size: u32) -> Self {
        Self {
            linger_ms,
            batch_size,
            queues: BTreeMap::new(),
        }
    }

    /// Appends `record` for `tp` at `now_ms` (`RecordAccumulator.append`): to the last batch
    /// if it has room, else to a new one.
    pub fn append(&mut self, tp: &TopicPartition, record: Record, waiter: W, now_ms: u64) {
        let record_bytes = record_size_bytes(&record);
        let queue = self.queues.entry(tp.clone()).or_default();
        let fits = queue
            .back()
            .is_some_and(|b| !b.closed && b.bytes + record_bytes <= self.batch_size);
        if !fits {
            if let Some(last) = queue.back_mut() {
                last.closed = true;
            }
            queue.push_back(Batch {
                records: Vec::new(),
                waiters: Vec::new(),
                created_ms: now_ms,
                bytes: batch_size_bytes(&[]),
                closed: false,
            });
        }
        let batch = queue.back_mut().expect("a batch was just ensured");
        batch.bytes += record_bytes;
        batch.records.push(record);
        batch.waiters.push(waiter);
        if batch.bytes >= self.batch_size {
            batch.closed = true;
        }
    }

    /// Takes the first batch of `tp` if it is sendable at `now_ms`
    /// (`RecordAccumulator.ready`: full, not the last of its queue, lingered `linger.ms`,
    /// or `flushing`).
    pub fn take_ready(
        &mut self,
        tp: &TopicPartition,
        now_ms: u64,
        flushing: bool,
    ) -> Option<Batch<W>> {
        let queue = self.queues.get_mut(tp)?;
        let first = queue.front()?;
        let lingered = now_ms.saturating_sub(first.created_ms) >= self.linger_ms;
        if !(first.closed || queue.len() > 1 || lingered || flushing) {
            return None;
        }
        let batch = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(tp);
        }
        batch
    }

    /// The partitions holding batches, in order.
    pub fn partitions(&self) -> Vec<TopicPartition> {
        self.queues.keys().cloned().collect()
    }

    /// The earliest moment after `now_ms` when a partition's first batch will have lingered
    /// long enough, ms on the caller's clock; `None` when no batch still waits for its
    /// linger. Batches already lingered long enough do not hide later ones: such a batch
    /// may be held back (its partition muted, its leader at its in-flight limit) while
    /// another partition's linger runs out (Java's `RecordAccumulator.ready` computes the
    /// next check over every partition it cannot send yet).
    pub fn next_linger_expiry_after_ms(&self, now_ms: u64) -> Option<u64> {
        self.queues
            .values()
            .filter_map(VecDeque::front)
            .map(|b| b.created_ms + self.linger_ms)
            .filter(|at| *at > now_ms)
            .min()
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn tp(p: u32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// A record of `value_bytes` value bytes and no key: 8 + `value_bytes` model bytes.
    fn record(value_bytes: usize) -> Record {
        Record {
            key: None,
            value: Some(Bytes::from(vec![b'x'; value_bytes])),
            headers: Vec::new(),
            timestamp_ms: 0,
        }
    }

    #[test]
    fn a_batch_waits_for_its_linger_then_goes_with_every_record_appended_meanwhile() {
        let mut acc = Accumulator::new(5, 16_384);
        acc.append(&tp(0), record(10), 0, 100);
        acc.append(&tp(0), record(10), 1, 103);
        assert!(
            acc.take_ready(&tp(0), 104, false).is_none(),
            "4 ms < linger.ms"
        );
        assert_eq!(acc.next_linger_expiry_after_ms(104), Some(105));
        let batch = acc.take_ready(&tp(0), 105, false).expect("lingered 5 ms");
        assert_eq!(batch.waiters, vec![0, 1]);
        assert_eq!(batch.bytes, 61 + 18 + 18);
        assert!(acc.is_empty());
    }

    #[test]
    fn a_record_that_does_not_fit_closes_the_batch_and_opens_the_next() {
        // 61 + 2 * 58 = 177 bytes fit in 200; a third record (58) would make 235.
        let mut acc = Accumulator::new(1_000, 200);
        for i in 0..3 {
            acc.append(&tp(0), record(50), i, 0);
        }
        let first = acc
            .take_ready(&tp(0), 0, false)
            .expect("not the last batch");
        assert_eq!(first.waiters, vec![0, 1]);
        assert!(
            acc.take_ready(&tp(0), 0, false).is_none(),
            "the last one lingers"
        );
        assert_eq!(
            acc.take_ready(&tp(0), 1_000, false)
                .expect("lingered")
                .waiters,
            vec![2]
        );
    }

    #[test]
    fn a_batch_that_reaches_batch_size_is_sent_at_once() {
        let mut acc = Accumulator::new(1_000, 61 + 58);
        acc.append(&tp(0), record(50), 0, 0);
        assert_eq!(
            acc.take_ready(&tp(0), 0, false)
                .expect("full")
                .records
                .len(),
            1
        );
    }

    #[test]
    fn a_record_bigger_than_batch_size_travels_alone() {
        let mut acc = Accumulator::new(1_000, 100);
        acc.append(&tp(0), record(500), 0, 0);
        acc.append(&tp(0), record(1), 1, 0);
        assert_eq!(
            acc.take_ready(&tp(0), 0, false).expect("full").waiters,
            vec![0]
        );
        assert!(acc.take_ready(&tp(0), 0, false).is_none());
    }

    #[test]
    fn partitions_batch_separately() {
        let mut acc = Accumulator::new(0, 16_384);
        acc.append(&tp(1), record(1), 10, 0);
        acc.append(&tp(0), record(1), 0, 0);
        acc.append(&tp(1), record(1), 11, 0);
        assert_eq!(acc.partitions(), vec![tp(0), tp(1)]);
        assert_eq!(
            acc.take_ready(&tp(0), 0, false).expect("linger 0").waiters,
            vec![0]
        );
        assert_eq!(
            acc.take_ready(&tp(1), 0, false).expect("linger 0").waiters,
            vec![10, 11]
        );
    }

    #[test]
    fn a_flush_sends_a_batch_before_its_linger() {
        let mut acc = Accumulator::new(60_000, 16_384);
        acc.append(&tp(0), record(1), 0, 0);
        assert!(acc.take_ready(&tp(0), 1, false).is_none());
        assert!(acc.take_ready(&tp(0), 1, true).is_some());
    }
}

//! One replica's producer state of one partition (models-reference B.2, B.3, B.5, C.6).
//!
//! Mirrors Kafka's `ProducerStateManager`, `ProducerStateEntry` and `ProducerAppendInfo`
//! (`storage/.../log/`): per producer id the epoch and the last
//! [`NUM_BATCHES_TO_RETAIN`] batches (for duplicate detection and sequence checks), the
//! first offset of its open transaction on this partition, the completed transactions whose
//! marker is not yet below the high watermark, and the aborted-transaction index.
//!
//! The state is a deterministic function of the log: every replica applies every batch it
//! appends (leader or follower, `ProducerAppendInfo` with origin CLIENT or REPLICATION), and
//! a truncation rebuilds it by replaying what is left (`truncateAndReload`). Only expiry
//! ([`ProducerState::expire`]) and the F10 bug switch ([`ProducerState::forget_producers`])
//! take it away from that function.

use super::log::Batch;
use super::types::*;
use std::collections::{BTreeMap, VecDeque};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: batches remembered per producer id.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

/// Control record type `ABORT` (`ControlRecordType.java`).
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type `COMMIT` (`ControlRecordType.java`).
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// One retained batch of a producer (`BatchMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record.
    pub last_seq: i32,
    /// Offset of the first record.
    pub first_offset: Offset,
    /// Offset of the last record.
    pub last_offset: Offset,
}

/// What a partition remembers of one producer id (`ProducerStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// Latest epoch seen in a batch or marker.
    pub epoch: i16,
    /// The last appended batches of `epoch`, oldest first, at most [`NUM_BATCHES_TO_RETAIN`].
    pub batches: VecDeque<BatchMetadata>,
    /// Max record timestamp of the latest batch (B.6: expiry goes by batch timestamps).
    pub last_timestamp_ms: i64,
}

impl ProducerEntry {
    /// Sequence of the last retained batch's last record, or -1 (none: the next is 0).
    pub fn last_seq(&self) -> i32 {
        self.batches.back().map_or(-1, |b| b.last_seq)
    }
}

/// An aborted transaction in the transaction index (`AbortedTxn`): producer id, its first
/// offset here and the offset of its ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedIndexEntry {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the transaction on this partition.
    pub first_offset: Offset,
    /// Offset of the ABORT marker.
    pub last_offset: Offset,
}

/// Outcome of [`ProducerState::validate`] for a batch that may be appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// Append it.
    Append,
    /// A retry of a retained batch: answer with its original offsets, append nothing.
    Duplicate {
        /// Original base offset.
        first_offset: Offset,
        /// Original last offset.
        last_offset: Offset,
    },
}

/// The producer state of one replica of one partition. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerState {
    producers: BTreeMap<i64, ProducerEntry>,
    /// Open transactions: producer id → first offset (`ongoingTxns`).
    ongoing: BTreeMap<i64, Offset>,
    /// Completed transactions whose marker is not yet below the HW: first offset → marker
    /// offset (`unreplicatedTxns`).
    unreplicated: BTreeMap<Offset, Offset>,
    /// The aborted-transaction index, in marker order.
    aborted: Vec<AbortedIndexEntry>,
}

/// `lastSeq + 1` with Kafka's wrap from `i32::MAX` to 0.
pub fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// Last sequence of a batch of `count` records starting at `first_seq`, wrapping at
/// `i32::MAX` (A.7).
pub fn last_seq_of(first_seq: i32, count: usize) -> i32 {
    let span = (count as i64 - 1).max(0);
    ((first_seq as i64 + span) % (i32::MAX as i64 + 1)) as i32
}

impl ProducerState {
    /// The entry of `producer_id`, if the partition knows it.
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Every known producer id and its entry.
    pub fn entries(&self) -> &BTreeMap<i64, ProducerEntry> {
        &self.producers
    }

    /// First offset of `producer_id`'s open transaction on this partition, if any.
    pub fn ongoing_txn_first_offset(&self, producer_id: i64) -> Option<Offset> {
        self.ongoing.get(&producer_id).copied()
    }

    /// Open transactions on this partition: producer id → first offset.
    pub fn ongoing_txns(&self) -> &BTreeMap<i64, Offset> {
        &self.ongoing
    }

    /// Number of open transactions on this partition.
    pub fn ongoing_txn_count(&self) -> usize {
        self.ongoing.len()
    }

    /// `firstUnstableOffset`: the earliest first offset of an open transaction or of a
    /// completed one whose marker is not yet below the HW (C.6).
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        let ongoing = self.ongoing.values().copied().min();
        let unreplicated = self.unreplicated.keys().next().copied();
        match (ongoing, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The aborted-transaction index, in marker order.
    pub fn aborted_index(&self) -> &[AbortedIndexEntry] {
        &self.aborted
    }

    /// `UnifiedLog.analyzeAndValidateProducerState` for a client batch, steps 1–3 of B.3
    /// and the first transactional check of C.6 (a non-transactional batch from a producer
    /// with an open transaction: `INVALID_TXN_STATE`). Errors: `INVALID_PRODUCER_EPOCH` (47)
    /// for an older epoch, `OUT_OF_ORDER_SEQUENCE_NUMBER` (45) for a sequence gap or a retry
    /// older than the retained batches. An unknown producer id is accepted with any sequence
    /// (KIP-360: no `UNKNOWN_PRODUCER_ID` from a 2.5+ broker).
    pub fn validate(
        &self,
        header: &ProducerBatchHeader,
        count: usize,
    ) -> Result<Validation, KafkaError> {
        if header.producer_id < 0 {
            return Ok(Validation::Append);
        }
        let first_seq = header.base_sequence;
        let last_seq = last_seq_of(first_seq, count);
        let Some(entry) = self.producers.get(&header.producer_id) else {
            return self.check_txn(header).map(|()| Validation::Append);
        };
        if entry.epoch == header.producer_epoch {
            let dup = entry
                .batches
                .iter()
                .find(|b| b.first_seq == first_seq && b.last_seq == last_seq);
            if let Some(b) = dup {
                return Ok(Validation::Duplicate {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                });
            }
        }
        if header.producer_epoch < entry.epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if header.producer_epoch > entry.epoch {
            if first_seq != 0 {
                return Err(KafkaError::OutOfOrderSequenceNumber);
            }
        } else if first_seq != next_seq(entry.last_seq()) {
            return Err(KafkaError::OutOfOrderSequenceNumber);
        }
        self.check_txn(header).map(|()| Validation::Append)
    }

    /// C.6: a non-transactional batch while the producer has an open transaction here.
    fn check_txn(&self, header: &ProducerBatchHeader) -> Result<(), KafkaError> {
        if !header.transactional && self.ongoing.contains_key(&header.producer_id) {
            return Err(KafkaError::InvalidTxnState);
        }
        Ok(())
    }

    /// Applies an appended batch (data or marker), as leader or follower. `high_watermark`
    /// is the replica's HW at the time (a marker at or above it is unreplicated).
    pub fn apply(&mut self, batch: &Batch, high_watermark: Offset) {
        let header = batch.header;
        if header.producer_id < 0 {
            return;
        }
        if batch.control {
            self.apply_marker(batch, high_watermark);
            return;
        }
        let timestamp = batch
            .records
            .iter()
            .map(|r| r.timestamp_ms)
            .max()
            .unwrap_or(0);
        let entry = self.entry_for_epoch(header.producer_id, header.producer_epoch);
        // `ProducerStateEntry.addBatch`: `lastTimestamp = timestamp`, a plain assignment, so
        // a client whose clock went back makes its entry look old at once.
        entry.last_timestamp_ms = timestamp;
        let count = (batch.last_offset - batch.base_offset + 1) as usize;
        entry.batches.push_back(BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: last_seq_of(header.base_sequence, count),
            first_offset: batch.base_offset,
            last_offset: batch.last_offset,
        });
        while entry.batches.len() > NUM_BATCHES_TO_RETAIN {
            entry.batches.pop_front();
        }
        assert!(
            entry.batches.len() <= NUM_BATCHES_TO_RETAIN,
            "at most 5 retained batches"
        );
        if header.transactional {
            self.ongoing
                .entry(header.producer_id)
                .or_insert(batch.base_offset);
        }
    }

    /// The entry of `producer_id`, created or moved to `epoch` (`maybeUpdateProducerEpoch`:
    /// a new epoch forgets the retained batches).
    fn entry_for_epoch(&mut self, producer_id: i64, epoch: i16) -> &mut ProducerEntry {
        let entry = self.producers.entry(producer_id).or_insert(ProducerEntry {
            epoch,
            batches: VecDeque::new(),
            last_timestamp_ms: 0,
        });
        if entry.epoch != epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry
    }

    /// `appendEndTxnMarker`: completes the producer's open transaction here (if any), indexes
    /// an abort, and moves the entry to the marker's epoch. A marker for a producer with no
    /// open transaction completes nothing.
    fn apply_marker(&mut self, batch: &Batch, high_watermark: Offset) {
        let header = batch.header;
        let timestamp = batch.records.first().map_or(0, |r| r.timestamp_ms);
        let abort = marker_type(&batch.records[0]) == Some(CONTROL_TYPE_ABORT);
        let entry = self.entry_for_epoch(header.producer_id, header.producer_epoch);
        entry.last_timestamp_ms = timestamp;
        let Some(first) = self.ongoing.remove(&header.producer_id) else {
            return;
        };
        assert!(
            first < batch.base_offset,
            "a transaction starts before its marker"
        );
        if batch.base_offset >= high_watermark {
            self.unreplicated.insert(first, batch.base_offset);
        }
        if abort {
            self.aborted.push(AbortedIndexEntry {
                producer_id: header.producer_id,
                first_offset: first,
                last_offset: batch.base_offset,
            });
        }
    }

    /// The HW moved to `high_watermark`: completed transactions whose marker is now below it
    /// become stable.
    pub fn on_high_watermark(&mut self, high_watermark: Offset) {
        self.unreplicated
            .retain(|_, marker| *marker >= high_watermark);
    }

    /// `truncateAndReload`: the state obtained by replaying `batches` from scratch.
    pub fn rebuild(batches: &[Batch], high_watermark: Offset) -> Self {
        let mut state = Self::default();
        for batch in batches {
            state.apply(batch, high_watermark);
        }
        state.on_high_watermark(high_watermark);
        state
    }

    /// F10 bug switch (`producer_state_survives_failover = false`): a new leader forgets
    /// every producer's epoch and retained batches, so any retry is appended as new.
    /// Open transactions are kept (the LSO still needs them).
    pub fn forget_producers(&mut self) {
        self.producers.clear();
    }

    /// `producer.id.expiration.ms` (B.6, KIP-854): drops entries without an open
    /// transaction whose last batch timestamp is more than `expiration_ms` before `now_ms`.
    pub fn expire(&mut self, now_ms: TimeMs, expiration_ms: u64) {
        let ongoing = &self.ongoing;
        self.producers.retain(|pid, e| {
            ongoing.contains_key(pid)
                || e.last_timestamp_ms.saturating_add(expiration_ms as i64) >= now_ms as i64
        });
    }
}

/// The control type of a marker record (its key is `(version: i16, type: i16)`, A.7).
pub fn marker_type(record: &Record) -> Option<i16> {
    let key = record.key.as_ref()?;
    (key.len() >= 4).then(|| i16::from_be_bytes([key[2], key[3]]))
}

/// A transaction marker record (`EndTransactionMarker`): key `(0, type)`, value
/// `(0, coordinator_epoch)`.
pub fn marker_record(commit: bool, coordinator_epoch: i32, timestamp_ms: i64) -> Record {
    let kind = if commit {
        CONTROL_TYPE_COMMIT
    } else {
        CONTROL_TYPE_ABORT
    };
    let mut key = vec![0u8, 0];
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = vec![0u8, 0];
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    Record {
        key: Some(bytes::Bytes::from(key)),
        value: Some(bytes::Bytes::from(value)),
        headers: Vec::new(),
        timestamp_ms,
    }
}

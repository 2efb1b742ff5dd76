//! One replica's copy of a partition log: batches, log end offset, high watermark and the
//! leader-epoch cache (models-reference A.1, A.6, A.7).
//!
//! Mirrors `UnifiedLog` (`core/.../log/UnifiedLog.scala`) and `LeaderEpochFileCache`
//! (`storage/.../epoch/LeaderEpochFileCache.java`) reduced to what the model needs. Batches
//! share their records through an `Arc`, so a follower copying a suffix of its leader's log
//! clones pointers, not records.

use super::kop::OffsetScheme;
use super::producer_state::ProducerState;
use super::types::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes of a record batch header (`DefaultRecordBatch.RECORD_BATCH_OVERHEAD`).
pub const BATCH_OVERHEAD_BYTES: u32 = 61;

/// A record batch as stored (`DefaultRecordBatch`): offsets, the epoch of the leader that
/// appended it, the producer header and whether it is a control batch.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Offset of the first record.
    pub base_offset: Offset,
    /// Offset of the last record (`base_offset + n - 1`; control batches: `base_offset`).
    pub last_offset: Offset,
    /// `partitionLeaderEpoch`: epoch of the leader that appended the batch.
    pub leader_epoch: i32,
    /// Producer id / epoch / base sequence / transactional flag (KIP-98).
    pub header: ProducerBatchHeader,
    /// `isControl`: a transaction marker; takes one offset, never returned to applications.
    pub control: bool,
    /// The records (one for a control batch: its key and value encode the marker).
    pub records: Arc<Vec<Record>>,
    /// Approximate size in bytes (header plus records), for `max.message.bytes` and fetch
    /// limits.
    pub size_bytes: u32,
}

/// Approximate serialized size of one record in a v2 batch: a few varint bytes of
/// overhead plus key, value and headers.
pub fn record_size_bytes(record: &Record) -> u32 {
    let key = record.key.as_ref().map_or(0, |k| k.len());
    let value = record.value.as_ref().map_or(0, |v| v.len());
    let headers: usize = record
        .headers
        .iter()
        .map(|(k, v)| k.len() + v.len() + 2)
        .sum();
    (8 + key + value + headers) as u32
}

/// Size of a batch holding `records`.
pub fn batch_size_bytes(records: &[Record]) -> u32 {
    BATCH_OVERHEAD_BYTES + records.iter().map(record_size_bytes).sum::<u32>()
}

/// Linux `vm.dirty_writeback_centisecs` default (500): the kernel's flusher threads wake
/// every 5 s (`Documentation/admin-guide/sysctl/vm.rst`).
pub const OS_WRITEBACK_INTERVAL_MS: u64 = 5_000;
/// Linux `vm.dirty_expire_centisecs` default (3000): a dirty page older than 30 s is written
/// back at the flusher's next wake-up.
pub const OS_DIRTY_EXPIRE_MS: u64 = 30_000;
/// LEO samples a log keeps for the OS writeback: one per wake-up over the expiry age.
const WRITEBACK_SAMPLES: usize = (OS_DIRTY_EXPIRE_MS / OS_WRITEBACK_INTERVAL_MS) as usize;

/// What of a log is on disk rather than only in the page cache (models-reference A.10).
/// Kafka fsyncs a log (`UnifiedLog.flush`, moving its `recoveryPoint` to the LEO) when
/// `LEO - recoveryPoint >= log.flush.interval.messages` after an append (leader and
/// follower alike, `UnifiedLog.append`) and from the `kafka-log-flusher` task; both are off
/// by default (`Long.MAX_VALUE`), leaving durability to the OS writeback of dirty pages.
#[derive(Debug, Clone)]
struct Durability {
    /// `recoveryPoint`: everything below was fsynced by Kafka.
    recovery_point: Offset,
    /// Everything below was written back by the OS (pages dirty past the expiry age).
    written_back: Offset,
    /// LEO at each of the last OS writeback wake-ups, oldest first.
    samples: VecDeque<Offset>,
    /// `log.flush.interval.messages`.
    flush_interval_messages: u64,
    /// Time of the last flush by the `kafka-log-flusher` task (`lastFlushTime`).
    last_flush_ms: TimeMs,
}

impl Default for Durability {
    fn default() -> Self {
        Self {
            recovery_point: 0,
            written_back: 0,
            samples: VecDeque::new(),
            flush_interval_messages: u64::MAX,
            last_flush_ms: 0,
        }
    }
}

/// One replica's log of one partition.
#[derive(Debug, Clone, Default)]
pub struct PartitionLog {
    batches: Vec<Batch>,
    log_start_offset: Offset,
    log_end_offset: Offset,
    high_watermark: Offset,
    /// `(epoch, start offset)`, epochs strictly increasing, start offsets non-decreasing.
    epochs: Vec<(i32, Offset)>,
    /// Producer ids, open transactions and the aborted index (B.2, C.6), kept in step with
    /// `batches` by every append and truncation.
    producers: ProducerState,
    /// What is on disk (A.10).
    durability: Durability,
    /// Where an appended batch starts: at the LEO (Kafka) or at the next Pulsar entry's
    /// offset (KoP without the index interceptor, [`OffsetScheme`]).
    offset_scheme: OffsetScheme,
}

impl PartitionLog {
    /// An empty log starting at offset 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// `logStartOffset`: first offset still retained.
    pub fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// LEO: the offset the next appended record gets.
    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// HW as this replica knows it.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// LSO (C.6): `min(HW, first offset of the earliest transaction that is open or whose
    /// marker is not yet below the HW)` (`ProducerStateManager.firstUnstableOffset`).
    pub fn last_stable_offset(&self) -> Offset {
        let lso = self
            .producers
            .first_unstable_offset()
            .map_or(self.high_watermark, |f| f.min(self.high_watermark));
        assert!(lso <= self.high_watermark, "LSO <= HW");
        lso
    }

    /// This replica's producer state.
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// This replica's producer state, for expiry and the F10 switch.
    pub fn producer_state_mut(&mut self) -> &mut ProducerState {
        &mut self.producers
    }

    /// The batches in offset order.
    pub fn batches(&self) -> &[Batch] {
        &self.batches
    }

    /// The leader-epoch cache: `(epoch, start offset)` in epoch order.
    pub fn epoch_cache(&self) -> &[(i32, Offset)] {
        &self.epochs
    }

    /// Latest epoch in the cache, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().map(|&(e, _)| e)
    }

    /// Start offset of `epoch` in the cache, if present.
    pub fn epoch_start_offset(&self, epoch: i32) -> Option<Offset> {
        self.epochs
            .iter()
            .rev()
            .find(|&&(e, _)| e == epoch)
            .map(|&(_, s)| s)
    }

    /// Index of the first batch whose last offset is ≥ `offset`.
    pub fn batch_index_from(&self, offset: Offset) -> usize {
        self.batches.partition_point(|b| b.last_offset < offset)
    }

    /// `LeaderEpochFileCache.assign` when this replica becomes leader of `epoch`: records
    /// that `epoch` starts at the current LEO.
    pub fn assign_epoch(&mut self, epoch: i32) {
        match self.epochs.last() {
            Some(&(e, _)) if e >= epoch => {
                assert!(
                    e == epoch,
                    "leader epochs only grow: cache has {e}, assigned {epoch}"
                )
            }
            _ => self.epochs.push((epoch, self.log_end_offset)),
        }
    }

    /// Sets how appended batches get their offsets (the broker flavour's, see
    /// [`super::kop`]).
    pub fn set_offset_scheme(&mut self, scheme: OffsetScheme) {
        self.offset_scheme = scheme;
    }

    /// How appended batches get their offsets.
    pub fn offset_scheme(&self) -> OffsetScheme {
        self.offset_scheme
    }

    /// Base offset the next leader-side append gets: the LEO under Kafka's dense scheme,
    /// the next Pulsar entry's first offset under KoP's ledger/entry scheme.
    pub fn next_base_offset(&self) -> Offset {
        let last_base = self.batches.last().map(|b| b.base_offset);
        self.offset_scheme
            .next_base_offset(self.log_end_offset, last_base)
    }

    /// Coverage marks of a KoP append that leaves a gap after the LEO, and of one that opens
    /// a new ledger (pre-2.8 offsets jump by 2^44 there).
    fn mark_entry_gap(&self, base_offset: Offset) {
        if base_offset > self.log_end_offset {
            crate::mark!("kop:entry-gap");
        }
        if let (OffsetScheme::LedgerEntryBatch { .. }, Some(last)) =
            (self.offset_scheme, self.batches.last())
        {
            let ledger = |o| super::kop::Position::of(o).ledger_id;
            if ledger(base_offset) > ledger(last.base_offset) {
                crate::mark!("kop:ledger-rolled");
            }
        }
    }

    /// Leader-side append of records (or a control record) stamped with `epoch`. Returns
    /// `(base_offset, last_offset)`. Within a batch offsets are consecutive (Kafka's
    /// `lastOffsetDelta`, KoP's batch index); between batches the flavour's scheme may
    /// leave a gap.
    pub fn append_as_leader(
        &mut self,
        epoch: i32,
        header: ProducerBatchHeader,
        control: bool,
        records: Arc<Vec<Record>>,
    ) -> (Offset, Offset) {
        assert!(!records.is_empty(), "a batch holds at least one record");
        if let Some(max) = self.offset_scheme.records_per_batch_max() {
            assert!(
                records.len() <= max,
                "a KoP entry holds at most {max} records (BATCH_BITS)"
            );
        }
        let base_offset = self.next_base_offset();
        self.mark_entry_gap(base_offset);
        let last_offset = base_offset + records.len() as Offset - 1;
        let size_bytes = batch_size_bytes(&records);
        self.assign_epoch(epoch);
        let batch = Batch {
            base_offset,
            last_offset,
            leader_epoch: epoch,
            header,
            control,
            records,
            size_bytes,
        };
        self.append_batch(batch);
        (base_offset, last_offset)
    }

    /// Appends a batch as it is (a follower copying its leader, or the leader itself).
    pub fn append_batch(&mut self, batch: Batch) {
        assert!(
            batch.base_offset >= self.log_end_offset,
            "appends start at or after the LEO"
        );
        if self.offset_scheme == OffsetScheme::Dense {
            assert!(
                batch.base_offset == self.log_end_offset,
                "Kafka appends are contiguous at the LEO"
            );
        }
        assert!(
            batch.last_offset >= batch.base_offset,
            "offsets increase within a batch"
        );
        if let Some(prev) = self.batches.last() {
            assert!(
                prev.last_offset < batch.base_offset,
                "offsets increase on append"
            );
        }
        match self.epochs.last() {
            Some(&(e, _)) if e > batch.leader_epoch => {
                panic!(
                    "batch epoch {} below the cached epoch {e}",
                    batch.leader_epoch
                )
            }
            Some(&(e, _)) if e == batch.leader_epoch => {}
            _ => self.epochs.push((batch.leader_epoch, batch.base_offset)),
        }
        self.log_end_offset = batch.last_offset + 1;
        self.producers.apply(&batch, self.high_watermark);
        self.batches.push(batch);
        assert!(self.high_watermark <= self.log_end_offset, "HW <= LEO");
        // `UnifiedLog.append`: `if (localLog.unflushedMessages() >= config().flushInterval)
        // flush(false)`, with `unflushedMessages = logEndOffset - recoveryPoint`.
        let d = &mut self.durability;
        let unflushed = (self.log_end_offset - d.recovery_point).max(0) as u64;
        if unflushed >= d.flush_interval_messages {
            d.recovery_point = self.log_end_offset;
        }
    }

    /// Leader: raises the HW to `hw` (never lowers it, `maybeIncrementLeaderHW`).
    pub fn advance_high_watermark(&mut self, hw: Offset) {
        assert!(hw <= self.log_end_offset, "HW <= LEO");
        if hw > self.high_watermark {
            self.high_watermark = hw;
            self.producers.on_high_watermark(hw);
        }
    }

    /// Follower: HW from a fetch response, `min(own LEO, leader HW)`; may go down after a
    /// truncation or with a new leader that knows less (A.4).
    pub fn set_follower_high_watermark(&mut self, leader_hw: Offset) {
        self.high_watermark = leader_hw.min(self.log_end_offset);
        self.producers.on_high_watermark(self.high_watermark);
        assert!(self.high_watermark <= self.log_end_offset, "HW <= LEO");
    }

    /// `LeaderEpochFileCache.endOffsetFor` (`UnifiedLog.endOffsetForEpoch`): for the latest
    /// cached epoch, `(it, LEO)`; for an older one, the largest cached epoch ≤ it and the
    /// next epoch's start offset; for one below every cached epoch, `(it, first start
    /// offset)`. `None` (`UNDEFINED_EPOCH`) for one above every cached epoch or an empty
    /// cache.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, Offset)> {
        let &(latest, _) = self.epochs.last()?;
        if epoch == latest {
            return Some((epoch, self.log_end_offset));
        }
        let idx = self.epochs.partition_point(|&(e, _)| e <= epoch);
        let &(_, next_start) = self.epochs.get(idx)?;
        if idx == 0 {
            return Some((epoch, next_start));
        }
        Some((self.epochs[idx - 1].0, next_start))
    }

    /// `UnifiedLog.maybeIncrementLogStartOffset` (DeleteRecords, KIP-107): raises the log
    /// start offset to `offset`, never lowers it. The batches that end below the new start
    /// are dropped (`deleteOldSegments`, which removes whole segments; a batch straddling
    /// the start stays, and nothing below the start is ever read again: a Fetch from there
    /// is OFFSET_OUT_OF_RANGE). The epoch cache keeps its entries from the new start on
    /// (`LeaderEpochFileCache.truncateFromStart`). The caller bounds `offset` by the HW at
    /// the leader (`Partition.deleteRecordsOnLeader`); a follower whose log ends below the
    /// leader's start starts again there ([`PartitionLog::truncate_fully_and_start_at`]).
    /// The producer state is kept (Kafka drops producers whose last batch fell below the
    /// start, `ProducerStateManager.truncateHead`; not modelled). Returns how many offsets
    /// fell below the start.
    pub fn increment_log_start_offset(&mut self, offset: Offset) -> u64 {
        let new_start = offset.min(self.log_end_offset);
        if new_start <= self.log_start_offset {
            return 0;
        }
        let moved = (new_start - self.log_start_offset) as u64;
        self.log_start_offset = new_start;
        let gone = self.batch_index_from(new_start);
        self.batches.drain(..gone);
        if let Some(last_before) = self.epochs.iter().rposition(|&(_, s)| s <= new_start) {
            self.epochs.drain(..last_before);
            self.epochs[0].1 = new_start;
        }
        self.high_watermark = self.high_watermark.max(new_start);
        let d = &mut self.durability;
        d.recovery_point = d.recovery_point.max(new_start);
        moved
    }

    /// `UnifiedLog.truncateFullyAndStartAt`: drops every batch and starts the log empty at
    /// `offset` (a follower whose fetch offset fell below its leader's log start,
    /// `AbstractFetcherThread.handleOutOfRangeError`).
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) {
        self.batches.clear();
        self.epochs.clear();
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.high_watermark = offset;
        self.producers = ProducerState::rebuild(&self.batches, offset);
        let d = &mut self.durability;
        d.recovery_point = offset;
        d.written_back = offset;
        d.samples.clear();
    }

    /// Removes every batch at or after `offset` (a batch straddling `offset` goes whole, as
    /// `LogSegment.truncateTo` does), and the epoch-cache entries starting at or after the
    /// new end (`truncateFromEnd`). The HW follows the LEO down and the producer state is
    /// rebuilt from what is left (`truncateAndReload`, B.5).
    pub fn truncate_to(&mut self, offset: Offset) {
        let keep = self.batch_index_from(offset);
        let removed = keep < self.batches.len();
        self.batches.truncate(keep);
        self.log_end_offset = self
            .batches
            .last()
            .map_or(self.log_start_offset, |b| b.last_offset + 1);
        let end = self.log_end_offset;
        self.epochs.retain(|&(_, start)| start < end);
        self.high_watermark = self.high_watermark.min(end);
        if removed {
            self.producers = ProducerState::rebuild(&self.batches, self.high_watermark);
        }
        // `LocalLog.truncateTo` lowers the recovery point with the LEO.
        let d = &mut self.durability;
        d.recovery_point = d.recovery_point.min(end);
        d.written_back = d.written_back.min(end);
        for sample in &mut d.samples {
            *sample = (*sample).min(end);
        }
        assert!(self.high_watermark <= self.log_end_offset, "HW <= LEO");
    }
}

/// Durability (models-reference A.10): fsyncs, the OS writeback, and what a machine crash
/// leaves.
impl PartitionLog {
    /// Sets `log.flush.interval.messages`: an append leaving at least that many messages
    /// unflushed fsyncs the log (`u64::MAX`, Kafka's `Long.MAX_VALUE` default: never).
    pub fn set_flush_interval_messages(&mut self, messages: u64) {
        self.durability.flush_interval_messages = messages.max(1);
    }

    /// The offset below which the log is on disk: fsynced by Kafka or written back by the
    /// OS. A machine crash keeps at least this much.
    pub fn durable_offset(&self) -> Offset {
        let d = &self.durability;
        d.recovery_point
            .max(d.written_back)
            .min(self.log_end_offset)
    }

    /// `UnifiedLog.flush` from the `kafka-log-flusher` task (`LogManager.flushDirtyLogs`):
    /// fsyncs the log if `now - lastFlushTime >= flush_interval_ms`.
    pub fn flush_if_due(&mut self, now: TimeMs, flush_interval_ms: u64) {
        let d = &mut self.durability;
        if now.saturating_sub(d.last_flush_ms) >= flush_interval_ms {
            d.recovery_point = self.log_end_offset;
            d.last_flush_ms = now;
        }
    }

    /// One wake-up of the OS flusher threads (every [`OS_WRITEBACK_INTERVAL_MS`]): what was
    /// appended before the wake-up [`OS_DIRTY_EXPIRE_MS`] ago is now on disk.
    pub fn os_writeback(&mut self) {
        let d = &mut self.durability;
        d.samples.push_back(self.log_end_offset);
        while d.samples.len() > WRITEBACK_SAMPLES {
            let old = d.samples.pop_front().expect("non-empty");
            d.written_back = d.written_back.max(old);
        }
    }

    /// A machine crash (power loss) and the log recovery after it: the log keeps its
    /// batches below `point` (clamped to `[durable_offset, LEO]`; a batch straddling it is
    /// torn and dropped, as `LogLoader` recovery truncates at the first invalid batch), and
    /// what is left is on disk. Returns the offsets lost.
    pub fn crash_to(&mut self, point: Offset) -> u64 {
        let leo = self.log_end_offset;
        let point = point.clamp(self.durable_offset(), leo);
        self.truncate_to(point);
        let end = self.log_end_offset;
        self.durability.recovery_point = end;
        self.durability.written_back = end;
        self.durability.samples.clear();
        (leo - end) as u64
    }
}

/// Where follower `follower` must truncate before fetching from `leader` (A.6,
/// `AbstractFetcherThread.getOffsetTruncationState`, KIP-279): walking the follower's epochs
/// from the latest, the first epoch the leader also has ends at `min(leader's end of it,
/// follower's end of it)`; epochs the leader never had are divergent. No common epoch:
/// truncate to the leader's log start.
pub fn truncation_offset(follower: &PartitionLog, leader: &PartitionLog) -> Offset {
    let epochs = follower.epoch_cache();
    for i in (0..epochs.len()).rev() {
        let (epoch, _) = epochs[i];
        let follower_end = epochs
            .get(i + 1)
            .map_or(follower.log_end_offset(), |&(_, s)| s);
        if let Some((found, leader_end)) = leader.end_offset_for_epoch(epoch) {
            if found == epoch {
                return leader_end.min(follower_end);
            }
        }
    }
    leader.log_start_offset().min(follower.log_end_offset())
}

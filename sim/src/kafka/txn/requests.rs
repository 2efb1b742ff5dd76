//! The transaction coordinator's requests, validated in Kafka's order
//! (`TransactionCoordinator.scala`: `handleInitProducerId`, `handleAddPartitionsToTransaction`,
//! `handleEndTransaction`; models-reference C.3–C.5, C.9).

use super::{error, TransactionCoordinator, TxnMetadata, TxnState};
use crate::kafka::types::*;
use std::collections::{BTreeMap, BTreeSet};

impl TransactionCoordinator {
    /// `InitProducerId` (C.3, KIP-98, KIP-360). Without a transactional id: a fresh producer
    /// id with epoch 0 (idempotent producer). With one: see the module docs for errors; the
    /// answer is the producer id and the bumped epoch.
    ///
    /// `expected` is the request's `(producerId, producerEpoch)`; `producerId` -1 means none
    /// (`KafkaApis.handleInitProducerIdRequest` passes `None`). Kafka's order
    /// (`TransactionCoordinator.prepareInitProducerIdTransit`, 4.x): an expected producer id
    /// other than the current one is `PRODUCER_FENCED`; Prepare* is
    /// `CONCURRENT_TRANSACTIONS`; Ongoing is fenced (epoch bump, abort); Empty / Complete*
    /// bump the epoch as `epoch_bump` decides.
    pub fn init_producer_id(
        &mut self,
        now: TimeMs,
        transactional_id: Option<String>,
        timeout_ms: u64,
        expected: (i64, i16),
    ) -> Response {
        let Some(tid) = transactional_id else {
            let producer_id = self.allocate_producer_id();
            return Response::InitProducerId {
                producer_id,
                producer_epoch: 0,
            };
        };
        if timeout_ms == 0 || timeout_ms > self.config.transaction_max_timeout_ms {
            return error(KafkaError::InvalidTransactionTimeout);
        }
        let Some(m) = self.txns.get(&tid) else {
            return self.create(now, tid, timeout_ms);
        };
        let (pid, epoch) = expected;
        let expected_epoch = (pid >= 0).then_some(epoch);
        if expected_epoch.is_some() && m.producer_id != pid {
            return error(KafkaError::ProducerFenced);
        }
        match m.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence => {
                error(KafkaError::ConcurrentTransactions)
            }
            TxnState::Ongoing => {
                // Zombie fencing: abort the open transaction with a bumped epoch first.
                crate::mark!("kafka:txn-fenced-by-init-aborted");
                self.fence_and_abort(now, &tid);
                error(KafkaError::ConcurrentTransactions)
            }
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                let last = match epoch_bump(m, expected_epoch) {
                    EpochBump::Bump { last } => last,
                    EpochBump::Retry => return self.current(&tid),
                    EpochBump::Fenced => return error(KafkaError::ProducerFenced),
                };
                self.bump_epoch(&tid);
                self.transition(now, &tid, TxnState::Empty);
                let m = self.txns.get_mut(&tid).expect("known");
                if m.producer_epoch != 0 {
                    m.last_producer_epoch = last;
                }
                m.timeout_ms = timeout_ms;
                m.partitions.clear();
                self.current(&tid)
            }
            TxnState::Dead => unreachable!("dead ids are removed"),
        }
    }

    fn create(&mut self, now: TimeMs, tid: String, timeout_ms: u64) -> Response {
        let producer_id = self.allocate_producer_id();
        self.by_producer_id.insert(producer_id, tid.clone());
        let m = TxnMetadata {
            producer_id,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: now,
            last_update_ms: now,
            pending_markers: BTreeMap::new(),
        };
        self.txns.insert(tid.clone(), m);
        self.current(&tid)
    }

    fn current(&self, tid: &str) -> Response {
        let m = &self.txns[tid];
        Response::InitProducerId {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
        }
    }

    /// Checks shared by AddPartitionsToTxn and AddOffsetsToTxn (C.4): unknown id or another
    /// producer id → `INVALID_PRODUCER_ID_MAPPING`; epoch ≠ current → `PRODUCER_FENCED`;
    /// Prepare* → `CONCURRENT_TRANSACTIONS`.
    fn check_add(&self, tid: &str, pid: i64, epoch: i16) -> Result<&TxnMetadata, KafkaError> {
        let m = self
            .txns
            .get(tid)
            .ok_or(KafkaError::InvalidProducerIdMapping)?;
        if m.producer_id != pid {
            return Err(KafkaError::InvalidProducerIdMapping);
        }
        if m.producer_epoch != epoch {
            return Err(KafkaError::ProducerFenced);
        }
        if m.state.is_prepare() || m.state == TxnState::PrepareEpochFence {
            return Err(KafkaError::ConcurrentTransactions);
        }
        Ok(m)
    }

    /// Adds `partitions` to the transaction (→ Ongoing; the timeout clock starts with the
    /// first partition). Already-added partitions are answered NONE without a write.
    pub fn add_partitions(
        &mut self,
        now: TimeMs,
        tid: &str,
        (pid, epoch): (i64, i16),
        partitions: &[TopicPartition],
    ) -> Result<(), KafkaError> {
        let m = self.check_add(tid, pid, epoch)?;
        if partitions.is_empty() {
            return Ok(());
        }
        if m.state == TxnState::Ongoing && partitions.iter().all(|tp| m.partitions.contains(tp)) {
            return Ok(());
        }
        if m.state != TxnState::Ongoing {
            let m = self.txns.get_mut(tid).expect("checked");
            m.partitions.clear();
            m.start_ms = now;
        }
        self.transition(now, tid, TxnState::Ongoing);
        let m = self.txns.get_mut(tid).expect("checked");
        m.partitions.extend(partitions.iter().cloned());
        assert!(
            !m.partitions.is_empty(),
            "an Ongoing transaction has partitions"
        );
        Ok(())
    }

    /// KIP-890 part 1 verification of a transactional produce from a producer with no open
    /// transaction on `tp` (`AddPartitionsToTxn` v4 `verifyOnly`): the partition must be in
    /// the ongoing transaction of that producer id and epoch. Errors: older epoch →
    /// `INVALID_PRODUCER_EPOCH`; Prepare* → `CONCURRENT_TRANSACTIONS`; anything else →
    /// `INVALID_TXN_STATE`.
    pub fn verify_produce(
        &self,
        pid: i64,
        epoch: i16,
        tp: &TopicPartition,
    ) -> Result<(), KafkaError> {
        let m = self
            .by_producer_id
            .get(&pid)
            .and_then(|tid| self.txns.get(tid))
            .ok_or(KafkaError::InvalidTxnState)?;
        if m.producer_epoch != epoch {
            return Err(KafkaError::InvalidProducerEpoch);
        }
        if m.state.is_prepare() {
            return Err(KafkaError::ConcurrentTransactions);
        }
        if m.state != TxnState::Ongoing || !m.partitions.contains(tp) {
            return Err(KafkaError::InvalidTxnState);
        }
        Ok(())
    }

    /// TV2 implicit add (KIP-890 part 2): the partition leader adds `tp` to the producer's
    /// transaction on its first transactional produce. Errors as
    /// [`TransactionCoordinator::verify_produce`], except that a partition not yet in the
    /// transaction is added (Empty/Complete* → Ongoing).
    pub fn add_partition_implicitly(
        &mut self,
        now: TimeMs,
        pid: i64,
        epoch: i16,
        tp: &TopicPartition,
    ) -> Result<(), KafkaError> {
        let tid = self
            .by_producer_id
            .get(&pid)
            .cloned()
            .ok_or(KafkaError::InvalidTxnState)?;
        match self.add_partitions(now, &tid, (pid, epoch), std::slice::from_ref(tp)) {
            Err(KafkaError::ProducerFenced) => Err(KafkaError::InvalidProducerEpoch),
            Err(KafkaError::InvalidProducerIdMapping) => Err(KafkaError::InvalidTxnState),
            other => other,
        }
    }

    /// The producer checks of `TxnOffsetCommit` as its append to `__consumer_offsets` makes
    /// them: unknown id or another producer id → `INVALID_PRODUCER_ID_MAPPING`, older epoch →
    /// `PRODUCER_FENCED`. With KIP-890 verification (part 1 and TV2) the group's offsets
    /// partition must be in the ongoing transaction (`INVALID_TXN_STATE` otherwise).
    pub fn check_txn_offset_commit(
        &self,
        tid: &str,
        (pid, epoch): (i64, i16),
        offsets_tp: &TopicPartition,
    ) -> Result<(), KafkaError> {
        let m = self
            .txns
            .get(tid)
            .ok_or(KafkaError::InvalidProducerIdMapping)?;
        if m.producer_id != pid {
            return Err(KafkaError::InvalidProducerIdMapping);
        }
        if epoch < m.producer_epoch {
            return Err(KafkaError::ProducerFenced);
        }
        let verify = self.config.transaction_protocol >= TxnProtocol::Kip890Part1;
        if verify && (m.state != TxnState::Ongoing || !m.partitions.contains(offsets_tp)) {
            return Err(KafkaError::InvalidTxnState);
        }
        Ok(())
    }

    /// `EndTxn` (C.5; TV2 rules of C.9 under [`TxnProtocol::Tv2`]). Ongoing → Prepare*, the
    /// client answered at once, before any marker is written.
    pub fn end_txn(
        &mut self,
        now: TimeMs,
        tid: &str,
        (pid, epoch): (i64, i16),
        commit: bool,
    ) -> Response {
        let Some(m) = self.txns.get(tid) else {
            return error(KafkaError::InvalidProducerIdMapping);
        };
        if m.producer_id != pid {
            return error(KafkaError::InvalidProducerIdMapping);
        }
        let tv2 = self.config.transaction_protocol == TxnProtocol::Tv2;
        let retry_epoch = if tv2 {
            m.last_producer_epoch
        } else {
            m.producer_epoch
        };
        let mut is_retry = epoch == retry_epoch && epoch >= 0;
        if tv2
            && matches!(m.state, TxnState::Ongoing | TxnState::Empty)
            && epoch != m.producer_epoch
        {
            // TV2: the previous transaction's epoch in a new transaction is a zombie's.
            is_retry = false;
        }
        if m.producer_epoch == epoch && m.state == TxnState::Ongoing {
            if tv2 {
                let last = m.producer_epoch;
                self.bump_epoch(tid);
                let m = self.txns.get_mut(tid).expect("known");
                if m.producer_epoch != 0 {
                    m.last_producer_epoch = last;
                }
            }
            self.prepare(now, tid, commit);
            return self.end_txn_ok(tid, tv2);
        }
        if !is_retry {
            let same = m.producer_epoch == epoch;
            return error(if same {
                KafkaError::InvalidTxnState
            } else {
                KafkaError::ProducerFenced
            });
        }
        use TxnState::*;
        match (m.state, commit) {
            (PrepareCommit, true) | (PrepareAbort, false) => {
                error(KafkaError::ConcurrentTransactions)
            }
            (CompleteCommit, true) | (CompleteAbort, false) => self.end_txn_ok(tid, tv2),
            (PrepareEpochFence, _) => error(KafkaError::ConcurrentTransactions),
            _ => error(KafkaError::InvalidTxnState),
        }
    }

    fn end_txn_ok(&self, tid: &str, tv2: bool) -> Response {
        let m = &self.txns[tid];
        if tv2 {
            Response::EndTxnV5 {
                producer_id: m.producer_id,
                producer_epoch: m.producer_epoch,
            }
        } else {
            Response::EndTxn
        }
    }
}

/// What an InitProducerId does to the epoch of an id in Empty / Complete*.
enum EpochBump {
    /// Bump the epoch and record `last` as the last epoch.
    Bump { last: i16 },
    /// A retry of the init that already bumped: answer the current epoch again.
    Retry,
    /// An epoch neither current nor last: `PRODUCER_FENCED`.
    Fenced,
}

/// `TransactionMetadata.prepareIncrementProducerEpoch` (Kafka 4.x, KIP-360): with no
/// expected epoch (a new producer instance) the epoch is bumped and the last epoch set to -1,
/// so no older instance can claim the new epoch as its retry; with the current epoch (a
/// producer recovering from an abortable error) the current one becomes the last; with the
/// last epoch it is a retry of a bump whose answer was lost.
fn epoch_bump(m: &TxnMetadata, expected_epoch: Option<i16>) -> EpochBump {
    match expected_epoch {
        None => EpochBump::Bump { last: -1 },
        Some(e) if e == m.producer_epoch => EpochBump::Bump {
            last: m.producer_epoch,
        },
        Some(e) if e >= 0 && e == m.last_producer_epoch => EpochBump::Retry,
        Some(_) => EpochBump::Fenced,
    }
}

//! The cluster's side of transactions: routing the transaction requests to the coordinator
//! placed on the leader of the id's `__transaction_state` partition, writing the markers in
//! `tick` (`WriteTxnMarkers`), materialising KIP-447 offsets, expiring producer state.

use super::{Cluster, CONSUMER_OFFSETS_TOPIC};
use crate::kafka::model::Env;
use crate::kafka::murmur2::coordinator_partition_for;
use crate::kafka::producer_state::marker_record;
use crate::kafka::txn::{MarkerProgress, MarkerTask};
use crate::kafka::types::*;

impl Cluster {
    /// Where `key`'s coordinator must be: `COORDINATOR_NOT_AVAILABLE` while its partition is
    /// offline (or, for transactions, while that partition's ISR is below
    /// `transaction.state.log.min.isr`, as the state write would fail), `NOT_COORDINATOR` at
    /// a broker that does not believe it leads the partition, or that still believes it but
    /// was replaced by the controller (its write to the internal topic cannot complete; a
    /// zombie coordinator changes nothing), `COORDINATOR_LOAD_IN_PROGRESS` at a new leader
    /// still loading the partition (`ClusterConfig::coordinator_load_ms`, from `now`).
    pub(super) fn check_coordinator(
        &self,
        now: TimeMs,
        broker: BrokerId,
        key: &str,
        kind: CoordinatorKind,
    ) -> Result<(), KafkaError> {
        let tp = self.coordinator_partition(key, kind);
        let p = self.partition(&tp).expect("internal topics exist");
        if p.leader.is_none() {
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        let Some(r) = p.replica(broker).filter(|r| r.believes_leader()) else {
            return Err(KafkaError::NotCoordinator);
        };
        if p.leader != Some(broker) || r.view_epoch != p.leader_epoch {
            return Err(KafkaError::NotCoordinator);
        }
        if kind == CoordinatorKind::Transaction && r.view_isr.len() < p.min_isr {
            return Err(KafkaError::CoordinatorNotAvailable);
        }
        let load_ms = self.config.coordinator_load_ms;
        if r.leader_since_ms.is_some_and(|since| now < since + load_ms) {
            crate::mark!("kafka:coordinator-load-in-progress");
            return Err(KafkaError::CoordinatorLoadInProgress);
        }
        Ok(())
    }

    /// Whether `broker` still believes it leads the internal partition owning `key` (a
    /// deposed coordinator does until it hears from the controller).
    pub(super) fn believes_coordinator(
        &self,
        broker: BrokerId,
        key: &str,
        kind: CoordinatorKind,
    ) -> bool {
        let tp = self.coordinator_partition(key, kind);
        self.partition(&tp)
            .and_then(|p| p.replica(broker))
            .is_some_and(|r| r.believes_leader())
    }

    /// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn (C.3–C.5). A
    /// non-transactional InitProducerId is answered by any broker.
    pub(super) fn txn_request(
        &mut self,
        now: TimeMs,
        broker: BrokerId,
        request: Request,
    ) -> Response {
        let tid = match &request {
            Request::InitProducerId {
                transactional_id: None,
                ..
            } => {
                return self.txns.init_producer_id(now, None, 0, (-1, -1));
            }
            other => match other.coordinator_key() {
                Some((t, CoordinatorKind::Transaction)) => t.to_string(),
                _ => unreachable!("not a transaction request: {other:?}"),
            },
        };
        if let Err(e) = self.check_coordinator(now, broker, &tid, CoordinatorKind::Transaction) {
            return Response::Error(e);
        }
        match request {
            Request::InitProducerId {
                transaction_timeout_ms,
                producer_id,
                producer_epoch,
                ..
            } => {
                let expected = (producer_id, producer_epoch);
                self.txns
                    .init_producer_id(now, Some(tid), transaction_timeout_ms, expected)
            }
            Request::AddPartitionsToTxn {
                producer_id,
                producer_epoch,
                partitions,
                ..
            } => self.add_partitions(now, &tid, (producer_id, producer_epoch), partitions),
            Request::AddOffsetsToTxn {
                producer_id,
                producer_epoch,
                group_id,
                ..
            } => {
                let tp = self.coordinator_partition(&group_id, CoordinatorKind::Group);
                let ids = (producer_id, producer_epoch);
                match self.txns.add_partitions(now, &tid, ids, &[tp]) {
                    Ok(()) => Response::AddOffsetsToTxn,
                    Err(e) => Response::Error(e),
                }
            }
            Request::EndTxn {
                producer_id,
                producer_epoch,
                commit,
                ..
            } => self
                .txns
                .end_txn(now, &tid, (producer_id, producer_epoch), commit),
            _ => unreachable!("matched above"),
        }
    }

    /// AddPartitionsToTxn: `UNKNOWN_TOPIC_OR_PARTITION` for the whole request if any
    /// partition does not exist (nothing is added), else the coordinator's answer.
    fn add_partitions(
        &mut self,
        now: TimeMs,
        tid: &str,
        ids: (i64, i16),
        partitions: Vec<TopicPartition>,
    ) -> Response {
        if partitions.iter().any(|tp| self.partition(tp).is_none()) {
            return Response::Error(KafkaError::UnknownTopicOrPartition);
        }
        match self.txns.add_partitions(now, tid, ids, &partitions) {
            Ok(()) => Response::AddPartitionsToTxn {
                results: partitions.into_iter().map(|tp| (tp, None)).collect(),
            },
            Err(e) => Response::Error(e),
        }
    }

    /// TxnOffsetCommit and OffsetFetch with `require_stable`, at the group coordinator
    /// (C.7): the producer is checked against its transaction (as the append to
    /// `__consumer_offsets` would), then the group's generation and member. Under TV2 the
    /// offsets partition joins the transaction implicitly (AddOffsetsToTxn still works).
    pub(super) fn txn_group_request(
        &mut self,
        now: TimeMs,
        broker: BrokerId,
        request: Request,
    ) -> Response {
        let group_id = match &request {
            Request::TxnOffsetCommit { group_id, .. }
            | Request::OffsetFetchStable { group_id, .. } => group_id.clone(),
            other => unreachable!("not a transactional group request: {other:?}"),
        };
        if let Err(e) = self.check_coordinator(now, broker, &group_id, CoordinatorKind::Group) {
            return Response::Error(e);
        }
        match request {
            Request::OffsetFetchStable { partitions, .. } => {
                self.groups.fetch_stable(&group_id, partitions)
            }
            Request::TxnOffsetCommit {
                transactional_id,
                producer_id,
                producer_epoch,
                generation,
                member_id,
                offsets,
                ..
            } => {
                let offsets_tp = self.coordinator_partition(&group_id, CoordinatorKind::Group);
                let ids = (producer_id, producer_epoch);
                if self.config.transaction_protocol == TxnProtocol::Tv2 {
                    // TxnOffsetCommit v5 adds the offsets partition implicitly (KIP-890
                    // part 2; errors surface in the check below).
                    let tp = std::slice::from_ref(&offsets_tp);
                    let _ = self.txns.add_partitions(now, &transactional_id, ids, tp);
                }
                if let Err(e) =
                    self.txns
                        .check_txn_offset_commit(&transactional_id, ids, &offsets_tp)
                {
                    return Response::Error(e);
                }
                self.groups.txn_offset_commit(
                    &group_id,
                    producer_id,
                    generation,
                    &member_id,
                    offsets,
                )
            }
            _ => unreachable!("matched above"),
        }
    }

    /// `WriteTxnMarkers` (C.5): for every transaction in Prepare*, each pending partition's
    /// marker is appended at its leader and acknowledged once that leader's HW passes it. The
    /// coordinator broker must act as the leader of the id's `__transaction_state`
    /// partition (it sends the markers of what it loaded), run and reach the leader; a
    /// marker lost to a truncation is written again.
    pub(super) fn write_markers(&mut self, now: TimeMs, env: &dyn Env) {
        for task in self.txns.marker_tasks() {
            let Some(coordinator) = self.acting_coordinator(&task.transactional_id) else {
                continue;
            };
            let Some(leader) = self.leader(&task.tp) else {
                continue;
            };
            let up = |b: BrokerId| self.state(b).alive && env.broker_up(b);
            let linked = coordinator == leader
                || (env.link_up(coordinator, leader) && env.link_up(leader, coordinator));
            if !up(coordinator) || !up(leader) || !linked {
                continue;
            }
            match task.progress {
                MarkerProgress::Unwritten => self.append_marker(now, &task),
                MarkerProgress::Appended {
                    leader_epoch,
                    offset,
                } => self.check_marker(now, &task, leader_epoch, offset),
            }
        }
    }

    fn append_marker(&mut self, now: TimeMs, task: &MarkerTask) {
        let header = ProducerBatchHeader {
            producer_id: task.producer_id,
            producer_epoch: task.producer_epoch,
            base_sequence: -1,
            transactional: true,
        };
        let state_tp =
            self.coordinator_partition(&task.transactional_id, CoordinatorKind::Transaction);
        let coordinator_epoch = self.leader_epoch(&state_tp).unwrap_or(0);
        let marker = marker_record(task.commit, coordinator_epoch, now as i64);
        match self.append_control_batch(&task.tp, header, marker) {
            Ok(offset) => {
                let r = self
                    .partition(&task.tp)
                    .and_then(|p| p.leader_replica())
                    .expect("appended");
                let progress = MarkerProgress::Appended {
                    leader_epoch: r.view_epoch,
                    offset,
                };
                self.txns
                    .marker_appended(&task.transactional_id, &task.tp, progress);
            }
            // The partition saw a newer epoch of this producer: Kafka's coordinator drops
            // the marker (`removeMarkersForTxn`).
            Err(KafkaError::InvalidProducerEpoch) => {
                crate::mark!("kafka:txn-marker-dropped-newer-epoch");
                self.marker_done(now, task)
            }
            Err(_) => {}
        }
    }

    /// A marker appended by the leader of `leader_epoch` at `offset`: acknowledged when the
    /// current leader holds it below its HW; written again if a truncation removed it.
    fn check_marker(&mut self, now: TimeMs, task: &MarkerTask, leader_epoch: i32, offset: Offset) {
        let Some(r) = self.partition(&task.tp).and_then(|p| p.leader_replica()) else {
            return;
        };
        let log = &r.log;
        let present = r.view_epoch == leader_epoch || {
            let i = log.batch_index_from(offset);
            log.batches().get(i).is_some_and(|b| {
                b.base_offset == offset && b.control && b.header.producer_id == task.producer_id
            })
        };
        if !present || offset >= log.log_end_offset() {
            crate::mark!("kafka:txn-marker-lost-rewritten");
            self.txns
                .marker_appended(&task.transactional_id, &task.tp, MarkerProgress::Unwritten);
        } else if log.high_watermark() > offset {
            self.marker_done(now, task);
        }
    }

    /// The marker of `task` is written and replicated: KIP-447 offsets of the producer on
    /// that `__consumer_offsets` partition are materialised (commit) or dropped (abort).
    fn marker_done(&mut self, now: TimeMs, task: &MarkerTask) {
        if task.tp.topic == CONSUMER_OFFSETS_TOPIC {
            let count = self.topics[CONSUMER_OFFSETS_TOPIC].partitions.len() as u32;
            let partition = task.tp.partition;
            let on_partition = move |g: &str| coordinator_partition_for(g, count) == partition;
            self.groups
                .complete_txn_offsets(now, task.producer_id, task.commit, &on_partition);
        }
        self.txns
            .marker_acknowledged(now, &task.transactional_id, &task.tp);
    }

    /// `producer.id.expiration.ms` (B.6): every `producer.id.expiration.check.interval.ms`
    /// each replica drops idle producer entries without an open transaction.
    pub(super) fn expire_producers(&mut self, now: TimeMs) {
        if now < self.next_producer_expiry_scan_ms {
            return;
        }
        let expiration_ms = self.config.producer_id_expiration_ms;
        for topic in self.topics.values_mut() {
            for p in &mut topic.partitions {
                for r in &mut p.replicas {
                    let known = r.log.producer_state().entries().len();
                    r.log.producer_state_mut().expire(now, expiration_ms);
                    if r.log.producer_state().entries().len() < known {
                        crate::mark!("kafka:producer-state-expired");
                    }
                }
            }
        }
        let interval = self.config.producer_id_expiration_check_interval_ms.max(1);
        self.next_producer_expiry_scan_ms = now + interval;
    }

    /// Broker `broker`'s producer state of `tp` (B.2), for introspection; `None` if it holds
    /// no replica.
    pub fn producer_state(
        &self,
        tp: &TopicPartition,
        broker: BrokerId,
    ) -> Option<&crate::kafka::producer_state::ProducerState> {
        Some(self.partition(tp)?.replica(broker)?.log.producer_state())
    }

    /// The batches of broker `broker`'s replica of `tp` (empty if it holds none).
    pub fn replica_log_batches(
        &self,
        tp: &TopicPartition,
        broker: BrokerId,
    ) -> Vec<crate::kafka::log::Batch> {
        self.partition(tp)
            .and_then(|p| p.replica(broker))
            .map_or(Vec::new(), |r| r.log.batches().to_vec())
    }

    /// The transaction coordinators, for introspection (states, epochs, partitions).
    pub fn transactions(&self) -> &crate::kafka::txn::TransactionCoordinator {
        &self.txns
    }
}

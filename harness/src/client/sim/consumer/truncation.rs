//! Log-truncation detection (KIP-320), after the Java consumer: each position carries the
//! leader epoch of the record before it (`FetchPosition.offsetEpoch`) and the leader epoch
//! it was validated under (`FetchPosition.currentLeader`). Fetches name that epoch
//! (`currentLeaderEpoch`), so a broker of another epoch answers FENCED_LEADER_EPOCH /
//! UNKNOWN_LEADER_EPOCH instead of records. When metadata shows a newer leader epoch, the
//! position is validated before the next fetch
//! (`SubscriptionState.maybeValidatePositionForCurrentLeader`): OffsetsForLeaderEpoch asks
//! the new leader where the position's epoch ends in its log (`OffsetsForLeaderEpochUtils`,
//! answered by `Partition.fetchOffsetForLeaderEpoch`), and
//! `SubscriptionState.maybeCompleteValidation` decides:
//! - end offset below the position: the log was truncated under the consumer; seek to that
//!   end offset, the first offset known to diverge (with `auto.offset.reset` none: Java's
//!   `LogTruncationException`);
//! - epoch or offset undefined (the leader knows no such epoch): reset by
//!   `auto.offset.reset`;
//! - else the position is valid.
//!
//! A position taken without a consumed record (committed offset, `auto.offset.reset`, seek)
//! has no epoch and is not validated (`updatePositionLeaderNoValidation`); eosim's commits
//! carry no leader epoch. An OFFSET_OUT_OF_RANGE fetch still resets by
//! `auto.offset.reset` (`Fetcher.handleOffsetOutOfRange`).

use super::{Deadline, SimConsumer};
use crate::client::sim::conn::needs_metadata_refresh;
use crate::client::{AutoOffsetReset, ClientError};
use eosim_sim::kafka::{Offset, Request, Response, TopicPartition};
use std::collections::BTreeMap;

/// The epochs of the consumer's positions. See the module docs.
#[derive(Debug, Default)]
pub(super) struct PositionEpochs {
    /// Per partition: the position this entry belongs to and the leader epoch of the
    /// record before it. Stale (ignored) once the position moved by other means.
    offset_epochs: BTreeMap<TopicPartition, (Offset, i32)>,
    /// Per partition: the leader epoch the position was validated under.
    leader_epochs: BTreeMap<TopicPartition, i32>,
}

impl PositionEpochs {
    /// A fetch moved `tp`'s position to `next`; `epoch` is the leader epoch of the last
    /// record it returned (`None`: none returned, the epoch stays).
    pub fn consumed(&mut self, tp: &TopicPartition, next: Offset, epoch: Option<i32>) {
        let epoch = epoch.or_else(|| self.offset_epochs.get(tp).map(|&(_, e)| e));
        if let Some(epoch) = epoch {
            self.offset_epochs.insert(tp.clone(), (next, epoch));
        }
    }

    /// The `currentLeaderEpoch` of each fetched partition whose position has one.
    pub fn current_leader_epochs(
        &self,
        partitions: &[(TopicPartition, Offset)],
    ) -> Vec<(TopicPartition, i32)> {
        partitions
            .iter()
            .filter_map(|(tp, _)| Some((tp.clone(), *self.leader_epochs.get(tp)?)))
            .collect()
    }

    /// Forgets `tp` (a cooperative revocation of one partition).
    pub fn forget(&mut self, tp: &TopicPartition) {
        self.offset_epochs.remove(tp);
        self.leader_epochs.remove(tp);
    }

    /// Forgets every partition (revocation).
    pub fn clear(&mut self) {
        self.offset_epochs.clear();
        self.leader_epochs.clear();
    }
}

/// What validation found for one partition.
enum Validated {
    /// The position is in the leader's log.
    Valid,
    /// Truncated below the position: seek to this offset of this epoch.
    Diverged { offset: Offset, epoch: i32 },
    /// The leader knows no such epoch: `auto.offset.reset`.
    Undefined,
}

impl SimConsumer {
    /// Validates every position whose leader epoch in the metadata cache is newer than the
    /// one it was validated under. Failed validations are retried at the next fetch round
    /// (the fetch meanwhile carries the old epoch and is fenced).
    ///
    /// # Errors
    /// [`ClientError::Fatal`] for a truncation under `auto.offset.reset=none` (Java's
    /// `LogTruncationException`).
    pub(super) async fn validate_positions(
        &mut self,
        deadline: &Deadline,
    ) -> Result<(), ClientError> {
        let positions: Vec<(TopicPartition, Offset)> = self
            .positions
            .iter()
            .map(|(tp, &o)| (tp.clone(), o))
            .collect();
        for (tp, position) in positions {
            let Some(current) = self.group.conn.leader_epoch(&tp) else {
                continue;
            };
            let known = *self
                .epochs
                .leader_epochs
                .entry(tp.clone())
                .or_insert(current);
            if current <= known {
                continue;
            }
            let epoch = match self.epochs.offset_epochs.get(&tp) {
                Some(&(at, epoch)) if at == position => epoch,
                _ => {
                    self.epochs.leader_epochs.insert(tp, current);
                    continue;
                }
            };
            let Some(found) = self
                .offsets_for_leader_epoch(&tp, current, epoch, deadline)
                .await
            else {
                continue;
            };
            self.epochs.leader_epochs.insert(tp.clone(), current);
            self.complete_validation(tp, position, found)?;
        }
        Ok(())
    }

    /// One OffsetsForLeaderEpoch to `tp`'s leader; `None` when it failed (metadata is
    /// invalidated where the error says it is stale).
    async fn offsets_for_leader_epoch(
        &self,
        tp: &TopicPartition,
        current_leader_epoch: i32,
        leader_epoch: i32,
        deadline: &Deadline,
    ) -> Option<(i32, Offset)> {
        let leader = self.group.conn.leader(tp)?;
        let request = Request::OffsetsForLeaderEpoch {
            tp: tp.clone(),
            current_leader_epoch,
            leader_epoch,
        };
        let timeout = deadline.cap(self.group.request_timeout());
        match self.group.conn.request(leader, request, timeout).await {
            Ok(Response::OffsetsForLeaderEpoch {
                leader_epoch,
                end_offset,
            }) => Some((leader_epoch, end_offset)),
            Ok(Response::Error(e)) if needs_metadata_refresh(e) => {
                self.group.conn.invalidate(&tp.topic);
                None
            }
            _ => None,
        }
    }

    /// `SubscriptionState.maybeCompleteValidation` for `tp` at `position`.
    fn complete_validation(
        &mut self,
        tp: TopicPartition,
        position: Offset,
        (epoch, end_offset): (i32, Offset),
    ) -> Result<(), ClientError> {
        let validated = if epoch < 0 || end_offset < 0 {
            Validated::Undefined
        } else if end_offset < position {
            Validated::Diverged {
                offset: end_offset,
                epoch,
            }
        } else {
            Validated::Valid
        };
        if !matches!(validated, Validated::Valid)
            && self.group.config.auto_offset_reset == AutoOffsetReset::None
        {
            let why = format!("LogTruncationException: {tp} truncated below offset {position}");
            return Err(ClientError::Fatal(why));
        }
        match validated {
            Validated::Valid => {}
            Validated::Diverged { offset, epoch } => {
                crate::mark!("client:consumer-log-truncation-detected");
                self.buffer.retain(|r| r.tp != tp);
                self.epochs
                    .offset_epochs
                    .insert(tp.clone(), (offset, epoch));
                self.positions.insert(tp, offset);
            }
            Validated::Undefined => {
                crate::mark!("client:consumer-log-truncation-reset");
                self.buffer.retain(|r| r.tp != tp);
                self.positions.remove(&tp);
                self.needs_reset.insert(tp);
            }
        }
        Ok(())
    }
}

//! The consumer's side of KIP-848 (`group.protocol = consumer`), after Java's
//! `AsyncKafkaConsumer`, `ConsumerMembershipManager` and `ConsumerHeartbeatRequestManager`
//! (apache/kafka `clients/.../consumer/internals/`):
//!
//! - A heartbeat task sends `ConsumerGroupHeartbeat` every interval the coordinator names
//!   (`group.consumer.heartbeat.interval.ms`), at once when the poll thread finished a
//!   reconciliation (the acknowledgement), with the member's epoch (0 to join), its
//!   subscription, `group.remote.assignor`, `max.poll.interval.ms` as rebalance timeout
//!   and the partitions it owns. Each answer's assignment is left for the poll thread.
//! - The poll thread reconciles ([`SimConsumer::reconcile`]): partitions no longer
//!   assigned are revoked first (with a rebalance listener, handed out as a [`Revocation`]
//!   while they are still owned and the epoch still valid, so the application commits
//!   them as on any revocation; the new assignment is applied by the next poll), then the
//!   new ones are positioned; what it owns then goes out with the next heartbeat, which
//!   the coordinator takes as the acknowledgement of the revocation.
//! - `FENCED_MEMBER_EPOCH` or `UNKNOWN_MEMBER_ID` (from a heartbeat or a commit): the
//!   member gives up every partition as lost (`onPartitionsLost`) and only then rejoins
//!   with epoch 0 under the same member id (`transitionToFenced`, `transitionToJoining`).
//! - `max.poll.interval.ms` without a poll: the member leaves (epoch -1), loses its
//!   partitions and rejoins at its next poll (`maybeLeaveGroup` on the poll timer,
//!   `transitionToStale`).
//! - Commits carry the member epoch; `STALE_MEMBER_EPOCH` fails the commit
//!   ([`ClientError::CommitFailed`]) and leaves the membership as it is.
//!
//! Static membership is not modelled here: `group.instance.id` with the consumer protocol
//! is refused when the scenario is read.

use super::membership::GroupClient;
use super::{Deadline, SimConsumer, RETRY_BACKOFF_MS};
use crate::client::{ClientError, Revocation};
use eosim_sim::kafka::group::consumer_protocol::LEAVE_MEMBER_EPOCH;
use eosim_sim::kafka::{
    BrokerId, ConsumerGroupHeartbeatRequest, KafkaError, Request, Response, TopicPartition,
};
use std::time::Duration;
use tokio::time::sleep;

/// The KIP-848 part of the membership the poll thread and the heartbeat task share.
#[derive(Debug, Default)]
pub(super) struct Kip848Membership {
    /// The last assignment a heartbeat answer carried, not reconciled yet.
    pub received: Option<Vec<TopicPartition>>,
    /// What the member owns, as its next heartbeat reports it.
    pub owned: Vec<TopicPartition>,
    /// Fenced (or left on a poll timeout): the poll thread must drop every partition
    /// before the heartbeat task rejoins.
    pub lost: bool,
    /// A non-retriable refusal of the coordinator, reported by the next poll.
    pub fatal: Option<KafkaError>,
    /// Left on an expired poll timer: no heartbeat until `poll` is called again.
    pub stale: bool,
}

impl GroupClient {
    /// The heartbeat task of the consumer protocol (see the module docs).
    pub async fn kip848_heartbeat_loop(self, topics: Vec<String>) {
        let mut interval = Duration::from_millis(0);
        let max_poll_interval = Duration::from_millis(self.config.max_poll_interval_ms);
        loop {
            tokio::select! {
                // `biased`: tokio picks branches with a thread-local RNG otherwise, seeded
                // from a process-wide counter, so a seed's history depended on what ran
                // before it in the process (replay in a fresh process differed).
                biased;
                _ = sleep(interval) => {}
                _ = self.heartbeat_now.notified() => {}
            }
            interval = Duration::from_millis(RETRY_BACKOFF_MS);
            let (overdue, waiting) = {
                let m = self.membership();
                let k = &m.kip848;
                let overdue = !k.stale && m.last_poll.elapsed() > max_poll_interval;
                (overdue, k.lost || k.stale || k.fatal.is_some())
            };
            if overdue {
                crate::mark!("client:kip848-max-poll-interval-leave");
                self.kip848_leave().await;
                let mut m = self.membership();
                m.kip848.stale = true;
                m.kip848.lost = true;
                continue;
            }
            if waiting {
                continue;
            }
            let deadline = Deadline::after(self.request_timeout());
            let Ok(coordinator) = self.ensure_coordinator(&deadline).await else {
                continue;
            };
            if let Some(next) = self.kip848_heartbeat(coordinator, &topics).await {
                interval = next;
            }
        }
    }

    /// One heartbeat; the interval to wait before the next, `None` to retry soon.
    async fn kip848_heartbeat(&self, coordinator: BrokerId, topics: &[String]) -> Option<Duration> {
        let request = {
            let m = self.membership();
            let (member_id, owned) = (m.member_id.clone(), m.kip848.owned.clone());
            self.kip848_request(member_id, m.generation.max(0), topics.to_vec(), owned)
        };
        let sent_epoch = request.member_epoch;
        let call = Request::ConsumerGroupHeartbeat(request);
        let result = (self.conn)
            .request(coordinator, call, self.request_timeout())
            .await;
        let mut m = self.membership();
        if m.generation.max(0) != sent_epoch || m.kip848.lost {
            // Fenced or reset meanwhile (a commit's answer): this answer is stale.
            return None;
        }
        match result {
            Ok(Response::ConsumerGroupHeartbeat {
                member_id,
                member_epoch,
                heartbeat_interval_ms,
                assignment,
            }) => {
                if sent_epoch == 0 {
                    crate::mark!("client:kip848-joined");
                }
                m.member_id = member_id;
                m.generation = member_epoch;
                m.stable = member_epoch > 0;
                m.kip848.received = Some(assignment);
                Some(Duration::from_millis(heartbeat_interval_ms.max(1)))
            }
            Ok(Response::Error(e)) => {
                m.on_kip848_error(e);
                None
            }
            Ok(other) => {
                m.kip848.fatal = Some(KafkaError::InvalidRequest);
                tracing::warn!(?other, "unexpected ConsumerGroupHeartbeat answer");
                None
            }
            Err(_) => {
                m.coordinator = None;
                None
            }
        }
    }

    /// A full `ConsumerGroupHeartbeat` of this member: its rebalance timeout
    /// (`max.poll.interval.ms`) and `group.remote.assignor`, with `topics` and `owned`.
    fn kip848_request(
        &self,
        member_id: String,
        member_epoch: i32,
        topics: Vec<String>,
        owned: Vec<TopicPartition>,
    ) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest {
            group_id: self.config.group_id.clone(),
            member_id,
            member_epoch,
            instance_id: None,
            rebalance_timeout_ms: self.config.max_poll_interval_ms,
            topics,
            server_assignor: self.config.group_remote_assignor.clone(),
            owned,
        }
    }

    /// A leave heartbeat (epoch -1) for the current member, answer ignored (Java's
    /// `leaveGroup`, on close and on an expired poll timer). Nothing before a join.
    pub async fn kip848_leave(&self) {
        let (member_id, coordinator) = {
            let m = self.membership();
            (m.member_id.clone(), m.coordinator)
        };
        let Some(coordinator) = coordinator.filter(|_| !member_id.is_empty()) else {
            return;
        };
        let request = self.kip848_request(member_id, LEAVE_MEMBER_EPOCH, Vec::new(), Vec::new());
        let call = Request::ConsumerGroupHeartbeat(request);
        let _ = (self.conn)
            .request(coordinator, call, self.request_timeout())
            .await;
        let mut m = self.membership();
        m.generation = 0;
        m.stable = false;
    }
}

impl super::membership::Membership {
    /// Java's reaction to a consumer-protocol error from the coordinator (heartbeat or
    /// commit): fenced members lose everything and rejoin with epoch 0; coordinator errors
    /// make it look the coordinator up again; the rest are fatal.
    pub fn on_kip848_error(&mut self, e: KafkaError) {
        match e {
            KafkaError::FencedMemberEpoch | KafkaError::UnknownMemberId => {
                crate::mark!("client:kip848-fenced-rejoin");
                self.generation = 0;
                self.stable = false;
                self.kip848.lost = true;
                self.kip848.received = None;
            }
            KafkaError::NotCoordinator
            | KafkaError::CoordinatorNotAvailable
            | KafkaError::CoordinatorLoadInProgress => self.coordinator = None,
            KafkaError::StaleMemberEpoch => {}
            other => self.kip848.fatal = Some(other),
        }
    }
}

impl SimConsumer {
    /// The poll thread's reconciliation (see the module docs). `Ok(true)`: a revocation was
    /// handed out, the poll returns now.
    ///
    /// # Errors
    /// [`ClientError::Fatal`] when the coordinator refused the member for good.
    pub(super) fn reconcile(&mut self) -> Result<bool, ClientError> {
        if let Some(assignment) = self.pending_assignment.take() {
            // The revocation handed out by the previous poll was taken: the rest follows.
            self.apply_kip848_assignment(assignment);
        }
        let (lost, received, fatal) = {
            let mut m = self.group.membership();
            m.kip848.stale = false;
            (m.kip848.lost, m.kip848.received.take(), m.kip848.fatal)
        };
        if let Some(e) = fatal {
            let why = format!("the group coordinator refused the member: {e}");
            return Err(ClientError::Fatal(why));
        }
        if lost {
            return Ok(self.lose_all());
        }
        let Some(mut target) = received else {
            return Ok(false);
        };
        target.sort();
        if target == self.assignment {
            return Ok(false);
        }
        let revoked: Vec<TopicPartition> = (self.assignment.iter())
            .filter(|tp| !target.contains(tp))
            .cloned()
            .collect();
        if !revoked.is_empty() {
            crate::mark!("client:kip848-reconcile-revoke");
            if self.listening {
                crate::mark!("client:consumer-revocation-handed-out");
                self.revocation = Some(Revocation {
                    partitions: revoked,
                    lost: false,
                });
                self.pending_assignment = Some(target);
                return Ok(true);
            }
        }
        self.apply_kip848_assignment(target);
        Ok(false)
    }

    /// Takes `assignment` and reports it as owned with an immediate heartbeat.
    fn apply_kip848_assignment(&mut self, assignment: Vec<TopicPartition>) {
        if assignment.iter().any(|tp| !self.assignment.contains(tp)) {
            crate::mark!("client:kip848-reconcile-assign");
        }
        self.apply_assignment(assignment);
        self.group.membership().kip848.owned = self.assignment.clone();
        self.group.heartbeat_now.notify_one();
    }

    /// Fenced or left: every partition is lost (handed out as such to a listener), then the
    /// heartbeat task may rejoin with epoch 0. Returns whether a revocation was handed out.
    fn lose_all(&mut self) -> bool {
        let handed_out = self.listening && !self.assignment.is_empty();
        if handed_out {
            crate::mark!("client:consumer-partitions-lost-handed-out");
            self.revocation = Some(Revocation {
                partitions: self.assignment.clone(),
                lost: true,
            });
        }
        self.pending_assignment = None;
        self.revoke_all();
        let mut m = self.group.membership();
        m.kip848.owned.clear();
        m.kip848.lost = false;
        m.generation = 0;
        m.stable = false;
        drop(m);
        self.group.heartbeat_now.notify_one();
        handed_out
    }
}

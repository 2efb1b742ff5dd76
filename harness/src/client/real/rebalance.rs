//! The real consumer's librdkafka rebalance callback, holding a revocation back for the
//! application when it listens for them ([`Consumer::listen_for_revocations`]).
//!
//! librdkafka calls the callback from the thread that polls, and its default handling
//! (rdkafka's `ConsumerContext::rebalance`) unassigns at once. A listening consumer instead
//! keeps the revoked partitions assigned and records a [`Revocation`]; librdkafka's group
//! state machine then waits for the unassign (join state `WAIT_UNASSIGN_CALL`, as it does
//! for the event-based rebalance API), so [`crate::client::real::RealConsumer`] hands the
//! revocation out from one poll and unassigns at the next, before librdkafka rejoins: the
//! application commits with the old generation meanwhile, as Java's `onPartitionsRevoked`
//! does inside `onJoinPrepare`. A revocation whose assignment librdkafka already reports
//! lost (`rd_kafka_assignment_lost`: session expired, fenced) is a loss.
//!
//! Without listening, and for assignments, the callback does what rdkafka's default does
//! for the eager protocol (the range assignor): `assign` the new partitions, unassign on
//! revoke or error. An assignment is also resumed: Java forgets the pause of a revoked
//! partition (`KafkaConsumer.pause`: apache/kafka#22538), librdkafka keeps it on the
//! partition object, so a partition paused before a rebalance and assigned again would
//! never be fetched (confluentinc/librdkafka#1849, confluent-kafka-go#193).
//!
//! [`Consumer::listen_for_revocations`]: crate::client::Consumer::listen_for_revocations

use crate::client::Revocation;
use eosim_sim::kafka::TopicPartition;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::TopicPartitionList;
use std::sync::{Mutex, MutexGuard};

/// Where the callback and the consumer meet.
#[derive(Debug, Default)]
struct State {
    listening: bool,
    /// Revoked by librdkafka, still assigned, not handed out yet.
    held: Option<Revocation>,
    /// Handed out: the next poll unassigns.
    handed_out: bool,
}

/// The consumer context of [`crate::client::real::RealConsumer`]. See the module docs.
#[derive(Debug, Default)]
pub struct RebalanceContext {
    state: Mutex<State>,
}

impl RebalanceContext {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// From now on, revocations are held for the application.
    pub fn listen(&self) {
        self.lock().listening = true;
    }

    /// Stops holding revocations back: the consumer is closing. librdkafka's close revokes
    /// the assignment through this callback and waits for the unassign, so a listening
    /// context would hold that revocation and the close would never end. Returns whether a
    /// revocation was held or handed out and not unassigned yet (the caller unassigns).
    pub fn stop_listening(&self) -> bool {
        let mut state = self.lock();
        state.listening = false;
        state.held.take().is_some() | std::mem::take(&mut state.handed_out)
    }

    /// A held revocation not handed out yet, now handed out.
    pub fn hand_out(&self) -> Option<Revocation> {
        let mut state = self.lock();
        let revocation = state.held.take()?;
        state.handed_out = true;
        Some(revocation)
    }

    /// Whether a revocation was handed out and the unassign is due; clears it.
    pub fn take_unassign_due(&self) -> bool {
        std::mem::take(&mut self.lock().handed_out)
    }
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn rebalance(
        &self,
        base_consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let _ = base_consumer.assign(tpl);
                // A fresh assignment is not paused, as in Java (`SubscriptionState.
                // assignFromSubscribed` builds new partition states); librdkafka keeps a
                // partition's pause across the unassign and the assign (librdkafka#1849).
                let _ = base_consumer.resume(tpl);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS
                if self.lock().listening && tpl.count() > 0 =>
            {
                let mut partitions: Vec<TopicPartition> = tpl
                    .elements()
                    .iter()
                    .map(|e| TopicPartition::new(e.topic(), e.partition() as u32))
                    .collect();
                partitions.sort();
                let lost = base_consumer.assignment_lost();
                let mut state = self.lock();
                state.held = Some(Revocation { partitions, lost });
                state.handed_out = false;
            }
            _ => {
                let _ = base_consumer.unassign();
            }
        }
    }
}

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
//! (`ConsumerContext::rebalance`): under the eager protocol (the range assignor) `assign`
//! the new partitions and unassign everything on revoke or error; under a cooperative one
//! (`cooperative-sticky`, KIP-429, and KIP-848's `group.protocol=consumer`, whose
//! reconciliation librdkafka hands out through the same incremental callback)
//! `incremental_assign` what was added and `incremental_unassign` what was revoked, the
//! rest staying assigned and fetched. A held revocation is then given up with
//! `incremental_unassign` of its partitions ([`Unassign::Incremental`]), which is what
//! librdkafka waits for before it acknowledges the revocation (KIP-848: in its next
//! heartbeat). An assignment is also resumed: Java forgets the pause of a revoked
//! partition (`KafkaConsumer.pause`: apache/kafka#22538), librdkafka keeps it on the
//! partition object, so a partition paused before a rebalance and assigned again would
//! never be fetched (confluentinc/librdkafka#1849, confluent-kafka-go#193).
//!
//! [`Consumer::listen_for_revocations`]: crate::client::Consumer::listen_for_revocations

use crate::client::Revocation;
use eosim_sim::kafka::TopicPartition;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::{Mutex, MutexGuard};

/// What giving up a held revocation takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unassign {
    /// Eager protocol: the whole assignment (`rd_kafka_assign(NULL)`).
    All,
    /// A cooperative protocol: only the revoked partitions (`rd_kafka_incremental_unassign`).
    Incremental(Vec<TopicPartition>),
}

impl Unassign {
    /// Gives the partitions up on `consumer`.
    ///
    /// # Errors
    /// librdkafka's refusal (an unassign outside a rebalance, a list it does not hold).
    pub fn apply<C: ConsumerContext>(
        &self,
        consumer: &impl Consumer<C>,
    ) -> rdkafka::error::KafkaResult<()> {
        match self {
            Unassign::All => consumer.unassign(),
            Unassign::Incremental(partitions) => {
                let mut tpl = TopicPartitionList::with_capacity(partitions.len());
                for tp in partitions {
                    tpl.add_partition_offset(&tp.topic, tp.partition as i32, Offset::Invalid)?;
                }
                consumer.incremental_unassign(&tpl)
            }
        }
    }
}

/// Where the callback and the consumer meet.
#[derive(Debug, Default)]
struct State {
    listening: bool,
    /// Revoked by librdkafka, still assigned, not handed out yet, and how to give it up.
    held: Option<(Revocation, Unassign)>,
    /// Handed out: the next poll gives it up.
    handed_out: Option<Unassign>,
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
    /// context would hold that revocation and the close would never end. Returns the
    /// unassign of a revocation held or handed out and not given up yet (the caller
    /// applies it).
    pub fn stop_listening(&self) -> Option<Unassign> {
        let mut state = self.lock();
        state.listening = false;
        let held = state.held.take().map(|(_, unassign)| unassign);
        held.or(state.handed_out.take())
    }

    /// A held revocation not handed out yet, now handed out.
    pub fn hand_out(&self) -> Option<Revocation> {
        let mut state = self.lock();
        let (revocation, unassign) = state.held.take()?;
        state.handed_out = Some(unassign);
        Some(revocation)
    }

    /// The unassign of a revocation handed out, now due; cleared.
    pub fn take_unassign_due(&self) -> Option<Unassign> {
        self.lock().handed_out.take()
    }
}

/// Whether `consumer` follows a cooperative protocol (incremental assign and unassign).
fn cooperative<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> bool {
    matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    )
}

impl ClientContext for RebalanceContext {}

impl ConsumerContext for RebalanceContext {
    fn rebalance(
        &self,
        base_consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = cooperative(base_consumer);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let _ = match cooperative {
                    true => base_consumer.incremental_assign(tpl),
                    false => base_consumer.assign(tpl),
                };
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
                let unassign = match cooperative {
                    true => Unassign::Incremental(partitions.clone()),
                    false => Unassign::All,
                };
                let mut state = self.lock();
                state.held = Some((Revocation { partitions, lost }, unassign));
                state.handed_out = None;
            }
            _ => {
                let _ = match cooperative {
                    true => base_consumer.incremental_unassign(tpl),
                    false => base_consumer.unassign(),
                };
            }
        }
    }
}

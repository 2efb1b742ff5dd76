//! The outcomes of an instance's sends, after Streams' `RecordCollectorImpl` (apache/kafka
//! trunk 4.0, `streams/src/main/java/org/apache/kafka/streams/processor/internals/
//! RecordCollectorImpl.java`): a record is handed to the producer with a callback and not
//! awaited (`send` → `streamsProducer.send(record, callback)`); the callback keeps the first
//! error (`sendException`), which the next send or flush throws (`checkForException`), and
//! the offset of each changelog record acknowledged (`offsets`, what a checkpoint writes).
//!
//! A flush waits for every outcome ([`Collector::settled`]): Java's `KafkaProducer.flush`
//! returns once every callback ran, while a producer that runs callbacks in tasks of their
//! own (the rdkafka one, `client::real`) may return from its flush before they did.
//!
//! A recovery ([`Collector::reset`]) starts a new epoch: outcomes of records sent before it
//! (an aborted transaction's queued batches, failed unsent) are dropped, as Java's closed
//! tasks drop their collectors.

use eosim_sim::kafka::Offset;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// A send's error: the message, and whether the producer is unusable (fenced: it must be
/// recreated).
pub type SendError = (String, bool);

/// Which task incarnation a changelog record belongs to: the partition and the number the
/// task got when it opened (a task closed and reopened is another incarnation).
pub type TaskIncarnation = (u32, u64);

/// The outcomes of one instance's sends. Cloning shares them (each callback holds one).
#[derive(Clone, Default)]
pub struct Collector {
    shared: Arc<Mutex<Outcomes>>,
    /// Rung at each outcome of the current epoch.
    bell: Arc<Notify>,
}

#[derive(Default)]
struct Outcomes {
    epoch: u64,
    /// Sends of this epoch whose outcome has not come yet.
    outstanding: usize,
    error: Option<SendError>,
    /// Per task incarnation, the offset after its highest acknowledged changelog record.
    changelog_ends: BTreeMap<TaskIncarnation, Offset>,
}

impl Collector {
    fn lock(&self) -> MutexGuard<'_, Outcomes> {
        self.shared.lock().expect("collector lock")
    }

    /// The callback of one send: keeps the first error of this epoch, and for a changelog
    /// record of `changelog` the offset after it.
    pub fn outcome(
        &self,
        changelog: Option<TaskIncarnation>,
    ) -> impl FnOnce(Result<Offset, SendError>) + Send + 'static {
        let collector = self.clone();
        let epoch = {
            let mut o = self.lock();
            o.outstanding += 1;
            o.epoch
        };
        move |outcome| {
            let mut o = collector.lock();
            if o.epoch != epoch {
                return;
            }
            o.outstanding -= 1;
            collector.bell.notify_waiters();
            match (outcome, changelog) {
                (Ok(offset), Some(task)) if offset >= 0 => {
                    let end = o.changelog_ends.entry(task).or_insert(0);
                    *end = (*end).max(offset + 1);
                }
                (Ok(_), _) => {}
                (Err(e), _) => {
                    o.error.get_or_insert(e);
                }
            }
        }
    }

    /// `checkForException`: the first send error since the last check, if any.
    ///
    /// # Errors
    /// That error.
    pub fn check(&self) -> Result<(), SendError> {
        match self.lock().error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits until every send of this epoch has its outcome, at most `timeout`; at once
    /// when none is outstanding.
    ///
    /// # Errors
    /// The count still outstanding after `timeout` (not ambiguous for the producer: the
    /// commit must not go on).
    pub async fn settled(&self, timeout: Duration) -> Result<(), SendError> {
        let wait = async {
            loop {
                // Created before the check, so an outcome in between still wakes it.
                let rung = self.bell.notified();
                if self.lock().outstanding == 0 {
                    return;
                }
                rung.await;
            }
        };
        if self.lock().outstanding == 0 {
            return Ok(());
        }
        tokio::time::timeout(timeout, wait).await.map_err(|_| {
            let n = self.lock().outstanding;
            (
                format!("{n} sends without an outcome after the flush"),
                false,
            )
        })
    }

    /// The acknowledged changelog ends gathered since the last call, per task incarnation.
    pub fn take_changelog_ends(&self) -> BTreeMap<TaskIncarnation, Offset> {
        std::mem::take(&mut self.lock().changelog_ends)
    }

    /// A new epoch: what was gathered is dropped, and so are outcomes still to come of
    /// records sent before.
    pub fn reset(&self) {
        let mut o = self.lock();
        o.epoch += 1;
        o.outstanding = 0;
        o.error = None;
        o.changelog_ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::block_on;

    #[test]
    fn the_first_error_is_thrown_once_and_changelog_ends_keep_the_highest_offset() {
        let c = Collector::default();
        c.outcome(Some((0, 1)))(Ok(7));
        c.outcome(Some((0, 1)))(Ok(3));
        c.outcome(None)(Ok(100));
        c.outcome(None)(Err(("first".into(), false)));
        c.outcome(Some((1, 2)))(Err(("second".into(), true)));
        assert_eq!(c.check(), Err(("first".to_string(), false)));
        assert_eq!(c.check(), Ok(()), "thrown once");
        let ends = c.take_changelog_ends();
        assert_eq!(ends, BTreeMap::from([((0, 1), 8)]));
        assert!(c.take_changelog_ends().is_empty());
    }

    #[test]
    fn settled_waits_for_every_outcome_of_the_epoch() {
        block_on(async {
            let c = Collector::default();
            let first = c.outcome(None);
            let second = c.outcome(Some((0, 1)));
            first(Ok(1));
            let short = Duration::from_millis(10);
            let e = c.settled(short).await.expect_err("one outstanding");
            assert!(e.0.contains("1 sends"), "{e:?}");
            let late = tokio::spawn(async move { second(Ok(2)) });
            c.settled(Duration::from_secs(5)).await.expect("both came");
            late.await.expect("task");
            // After a reset, what the old epoch still owes is not waited for.
            let _never = c.outcome(None);
            c.reset();
            c.settled(short)
                .await
                .expect("nothing of this epoch outstanding");
        });
    }

    #[test]
    fn outcomes_of_records_sent_before_a_reset_are_dropped() {
        let c = Collector::default();
        let late_error = c.outcome(None);
        let late_ack = c.outcome(Some((0, 1)));
        c.outcome(Some((0, 1)))(Ok(4));
        c.reset();
        late_error(Err(("aborted".into(), false)));
        late_ack(Ok(9));
        assert_eq!(c.check(), Ok(()));
        assert!(c.take_changelog_ends().is_empty());
        c.outcome(Some((0, 2)))(Ok(11));
        assert_eq!(c.take_changelog_ends(), BTreeMap::from([((0, 2), 12)]));
    }
}

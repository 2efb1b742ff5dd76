//! The outcomes of an instance's sends, after Streams' `RecordCollectorImpl` (apache/kafka
//! trunk 4.0, `streams/src/main/java/org/apache/kafka/streams/processor/internals/
//! RecordCollectorImpl.java`): a record is handed to the producer with a callback and not
//! awaited (`send` → `streamsProducer.send(record, callback)`); the callback keeps the first
//! error (`sendException`), which the next send or flush throws (`checkForException`), and
//! the offset of each changelog record acknowledged (`offsets`, what a checkpoint writes).
//!
//! A recovery ([`Collector::reset`]) starts a new epoch: outcomes of records sent before it
//! (an aborted transaction's queued batches, failed unsent) are dropped, as Java's closed
//! tasks drop their collectors.

use eosim_sim::kafka::Offset;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

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
}

#[derive(Default)]
struct Outcomes {
    epoch: u64,
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
        let epoch = self.lock().epoch;
        move |outcome| {
            let mut o = collector.lock();
            if o.epoch != epoch {
                return;
            }
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

    /// The acknowledged changelog ends gathered since the last call, per task incarnation.
    pub fn take_changelog_ends(&self) -> BTreeMap<TaskIncarnation, Offset> {
        std::mem::take(&mut self.lock().changelog_ends)
    }

    /// A new epoch: what was gathered is dropped, and so are outcomes still to come of
    /// records sent before.
    pub fn reset(&self) {
        let mut o = self.lock();
        o.epoch += 1;
        o.error = None;
        o.changelog_ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

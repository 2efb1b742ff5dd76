//! Which source offsets may be stored: Kafka Connect's `SubmittedRecords`
//! (`connect/runtime/.../SubmittedRecords.java`, KAFKA-12226).
//!
//! Every record the worker hands to its producer is *submitted* under its source partition;
//! its producer callback *acknowledges* it. An offset is committable only when its record
//! and every record submitted before it in the same partition were acknowledged: the
//! committable offset of a partition is the offset of the last record of the longest
//! acknowledged prefix of its submissions. [`SubmittedRecords::committable_offsets`] takes
//! those prefixes out and returns their last offsets; records still unacknowledged (and
//! everything behind them) wait for a later flush. So a stored offset never passes a
//! record Kafka has not acknowledged, whatever order the acknowledgements come in.

use serde_json::Value as Json;
use std::collections::{BTreeMap, VecDeque};

/// A submitted record's handle, for [`SubmittedRecords::ack`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    partition: String,
    seq: u64,
}

/// One submission: sequence number, offset, acknowledged yet.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    seq: u64,
    offset: Json,
    acked: bool,
}

/// The submissions of every source partition, oldest first. See the module docs.
#[derive(Debug, Default)]
pub struct SubmittedRecords {
    partitions: BTreeMap<String, VecDeque<Entry>>,
    next_seq: u64,
}

/// What [`SubmittedRecords::committable_offsets`] found.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CommittableOffsets {
    /// Per partition (its JSON text), the offset of its last acknowledged-prefix record.
    pub offsets: BTreeMap<String, Json>,
    /// Submitted records still waiting for an acknowledgement, in all partitions.
    pub unacked: usize,
}

impl SubmittedRecords {
    /// Nothing submitted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Submits a record of `partition` (its JSON text) whose offset is `offset`.
    pub fn submit(&mut self, partition: &str, offset: Json) -> Submitted {
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Entry {
            seq,
            offset,
            acked: false,
        };
        self.partitions
            .entry(partition.to_string())
            .or_default()
            .push_back(entry);
        Submitted {
            partition: partition.to_string(),
            seq,
        }
    }

    /// Acknowledges `record` (its send succeeded). Returns false for a record no longer
    /// tracked (already taken out, or from before [`SubmittedRecords::clear`]).
    pub fn ack(&mut self, record: &Submitted) -> bool {
        let Some(entries) = self.partitions.get_mut(&record.partition) else {
            return false;
        };
        match entries.iter_mut().find(|e| e.seq == record.seq) {
            Some(e) => {
                e.acked = true;
                true
            }
            None => false,
        }
    }

    /// Takes each partition's acknowledged prefix out and returns its last offset.
    pub fn committable_offsets(&mut self) -> CommittableOffsets {
        let mut out = CommittableOffsets::default();
        for (partition, entries) in &mut self.partitions {
            let mut last = None;
            while entries.front().is_some_and(|e| e.acked) {
                last = entries.pop_front().map(|e| e.offset);
            }
            if let Some(offset) = last {
                out.offsets.insert(partition.clone(), offset);
            }
            out.unacked += entries.len();
        }
        self.partitions.retain(|_, entries| !entries.is_empty());
        out
    }

    /// Forgets every submission (a transaction that aborted: its records are not data).
    pub fn clear(&mut self) {
        self.partitions.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_unacknowledged_record_holds_back_the_offsets_behind_it() {
        let mut s = SubmittedRecords::new();
        let a = s.submit("p", json!(1));
        let b = s.submit("p", json!(2));
        let c = s.submit("p", json!(3));
        assert!(s.ack(&c));
        assert!(s.ack(&a));
        let first = s.committable_offsets();
        assert_eq!(first.offsets, [("p".to_string(), json!(1))].into());
        assert_eq!(
            first.unacked, 2,
            "b is unacknowledged and c waits behind it"
        );
        assert!(s.ack(&b));
        let second = s.committable_offsets();
        assert_eq!(second.offsets, [("p".to_string(), json!(3))].into());
        assert_eq!(second.unacked, 0);
        assert!(s.committable_offsets().offsets.is_empty(), "taken out once");
    }

    #[test]
    fn partitions_commit_independently() {
        let mut s = SubmittedRecords::new();
        let a = s.submit("p", json!(1));
        let _b = s.submit("q", json!(10));
        assert!(s.ack(&a));
        let found = s.committable_offsets();
        assert_eq!(found.offsets, [("p".to_string(), json!(1))].into());
        assert_eq!(found.unacked, 1);
    }

    #[test]
    fn cleared_submissions_are_never_committable() {
        let mut s = SubmittedRecords::new();
        let a = s.submit("p", json!(1));
        s.clear();
        assert!(!s.ack(&a));
        assert_eq!(s.committable_offsets(), CommittableOffsets::default());
    }
}

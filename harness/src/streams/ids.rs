//! The aggregator of the id-assigning topology (`[streams] topology = "aggregate-ids"`,
//! [`super::topology::aggregate_ids`]): each key seen for the first time gets the next id of
//! a sequence held in the same store, under the entry [`SEQUENCE_KEY`].
//!
//! # Ids per task
//! A store belongs to one task (one input partition), so each task keeps its own sequence;
//! task `p` of `n` hands out `p, p + n, p + 2n, ...`, which no other task hands out. A key
//! lives in one input partition (the producers' default partitioner), so one task decides
//! its id.
//!
//! # Store and changelog
//! Store entries are `key → id` and `SEQUENCE_KEY → next id`, written through the record
//! cache and the changelog like the count's (the sequence entry goes to the changelog only,
//! never downstream). The restored store is right only when both kinds of entry were
//! restored from the same point: an at_least_once crash in the middle of a cache flush can
//! leave the changelog holding a key's id without the sequence moved past it (the id is
//! handed out again: `id-reused`) or the sequence moved without the key (the key gets
//! another id when its input is replayed: `id-reassigned`).

use super::store::CountStore;

/// The store key of a task's sequence entry (the next id to hand out). Input keys are
/// `k<n>`, so it never collides with one.
pub const SEQUENCE_KEY: &str = "#next-id";

/// Whether store key `key` is the sequence entry, which is written to the changelog but
/// not forwarded downstream.
pub fn is_sequence(key: &str) -> bool {
    key == SEQUENCE_KEY
}

/// The aggregator: the id of `key` in task `partition` of `partitions` (at least 1), from
/// `store`; a key without one gets the sequence's next id and the sequence moves on by
/// `partitions`. As `KStreamAggregate.process` does, the key's aggregate is put back on
/// every record (an update forwarded downstream even when unchanged); the sequence entry is
/// put first, from inside the aggregator.
pub fn assign(store: &mut impl CountStore, key: &str, partition: u32, partitions: u32) -> u64 {
    let id = match store.get(key) {
        Some(id) => id,
        None => {
            let id = store.get(SEQUENCE_KEY).unwrap_or(u64::from(partition));
            store.put(SEQUENCE_KEY.to_string(), id + u64::from(partitions.max(1)));
            id
        }
    };
    store.put(key.to_string(), id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::store::KeyValueStore;

    #[test]
    fn a_new_key_takes_the_next_id_of_its_task_and_keeps_it() {
        let mut store = KeyValueStore::default();
        assert_eq!(assign(&mut store, "k1", 1, 3), 1);
        assert_eq!(assign(&mut store, "k4", 1, 3), 4);
        assert_eq!(
            assign(&mut store, "k1", 1, 3),
            1,
            "a known key keeps its id"
        );
        assert_eq!(store.get(SEQUENCE_KEY), Some(7));
        let mut other = KeyValueStore::default();
        assert_eq!(assign(&mut other, "k2", 2, 3), 2, "task 2 starts at 2");
    }
}

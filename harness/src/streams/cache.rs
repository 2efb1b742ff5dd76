//! The record cache in front of the state stores, `statestore.cache.max.bytes` (KIP-770;
//! `cache.max.bytes.buffering` before Kafka 3.4).
//!
//! Followed: apache/kafka `streams/.../state/internals/ThreadCache.java` (the budget of a
//! stream thread and `maybeEvict`), `NamedCache.java` (one LRU cache per task and store:
//! `put`, `evict`, `flush`), `LRUCacheEntry.java` and `ProcessorRecordContext.
//! residentMemorySizeEstimate` (the entry size), `CachingKeyValueStore.java` /
//! `CachingWindowStore.java` (reads through the cache, writes into it, dirty entries to the
//! store and its changelog only when flushed), `TimestampedCacheFlushListener.java`
//! (flushed entries forwarded downstream) and `StreamTask.prepareCommit` (every commit
//! first flushes the caches, `stateMgr.flushCache()`, then the record collector).
//!
//! # Semantics
//! - The cache of a stream thread holds `statestore.cache.max.bytes / num.stream.threads`
//!   bytes ([`ThreadCache`]; an instance here runs one stream thread, [`STREAM_THREADS`]),
//!   shared by the [`NamedCache`]s of all its tasks.
//! - An update of the aggregate goes into its task's cache as a dirty entry, replacing the
//!   key's previous one: consecutive updates of a key between two flushes collapse into
//!   one. Nothing reaches the store, the changelog or the output yet.
//! - When the thread's caches together exceed the budget, the put's own cache evicts its
//!   least recently used entries (`ThreadCache.maybeEvict`) until they fit or it is empty.
//!   Evicting a dirty entry flushes that cache: the evicted entry first, then every other
//!   dirty key in the order of its latest update (`NamedCache.flush(evicted)`); the others
//!   stay cached, clean.
//! - A flush writes each dirty entry to the store (and its changelog) and forwards it
//!   downstream. A commit flushes every task's cache first, so what was cached goes into
//!   the commit (under exactly_once_v2, its transaction).
//! - A task closed dirty (a crash, a lost partition, an aborted transaction) loses its
//!   dirty entries with the cache (`ThreadCache.close(namespace)`): they never reached the
//!   changelog, so the restored store does not hold them either.
//! - With a budget of 0 every put evicts itself at once: every update is forwarded as it
//!   happens, exactly as without a cache.
//!
//! # Simplified
//! - The entry size is Kafka's estimate for the topology's byte layout
//!   ([`EntrySizer::bytes`]) computed from the key's length, not serialized bytes.
//! - A read that misses the cache reads the store and leaves the cache alone (Kafka's
//!   key-value store also caches the clean value it read; the window store does not, and
//!   the aggregate writes the key right after the read either way).
//! - Flushed entries are forwarded in the order above, each written to the store before
//!   the output and changelog records are sent (the processor sends output, then
//!   changelog, as it always has).

use super::store::{CountStore, KeyValueStore};
use super::topology::{Topology, Update};
use std::collections::BTreeMap;

/// Kafka's default `statestore.cache.max.bytes`: 10485760 (10 MiB, `StreamsConfig`).
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 10 * 1024 * 1024;

/// Stream threads per instance (`num.stream.threads`; Kafka's default 1, the only value
/// the processor runs). The cache budget is divided among them (and a global thread,
/// which the topology has none of): `KafkaStreams.getCacheSizePerThread`.
pub const STREAM_THREADS: u64 = 1;

/// `NamedCache.LRUNode.size()`: the key, then 8 bytes each for the entry, previous and
/// next references.
const NODE_OVERHEAD_BYTES: u64 = 8 + 8 + 8;
/// `LRUCacheEntry`: 1 byte for the dirty flag.
const DIRTY_FLAG_BYTES: u64 = 1;
/// `ProcessorRecordContext.residentMemorySizeEstimate()` without topic and headers:
/// timestamp (8), offset (8), partition (4).
const CONTEXT_BYTES: u64 = 8 + 8 + 4;
/// The cached value: `ValueAndTimestamp<Long>` serialized, timestamp (8) and count (8).
const VALUE_BYTES: u64 = 8 + 8;
/// What a window store adds to the key (`WindowKeySchema.toStoreKeyBinary`: window start
/// 8, sequence number 4; `SegmentedCacheFunction.cacheKey`: segment id 8).
const WINDOW_KEY_BYTES: u64 = 8 + 4 + 8;

/// Kafka's size estimate of one cache entry of the topology's store, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntrySizer {
    /// Whether the store is a window store (its cache keys are longer).
    pub windowed: bool,
    /// Characters of the source topic's name (the record context keeps it).
    pub topic_chars: u64,
}

impl EntrySizer {
    /// The sizer of `topology`'s store.
    pub fn of(topology: &Topology) -> Self {
        Self {
            windowed: topology.window.is_some(),
            topic_chars: topology.source.chars().count() as u64,
        }
    }

    /// The estimate for store key `key@windowStart`: record key bytes (+ window key bytes)
    /// + node overhead + dirty flag + value + record context (with the topic name).
    pub fn bytes(&self, store_key: &str) -> u64 {
        let key = store_key.rsplit_once('@').map_or(store_key, |(k, _)| k);
        let window = if self.windowed { WINDOW_KEY_BYTES } else { 0 };
        key.len() as u64
            + window
            + NODE_OVERHEAD_BYTES
            + DIRTY_FLAG_BYTES
            + VALUE_BYTES
            + CONTEXT_BYTES
            + self.topic_chars
    }
}

/// One cached entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    count: u64,
    size_bytes: u64,
    /// Position in the LRU order (a larger stamp is more recent).
    lru_stamp: u64,
    /// Position in the dirty order (arrival of its latest update); `None` when clean.
    dirty_stamp: Option<u64>,
}

/// The cache of one task's store (`NamedCache`): entries in LRU order, the dirty ones also
/// in the order of their latest update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamedCache {
    entries: BTreeMap<String, Entry>,
    /// LRU stamp → key, least recently used first.
    lru: BTreeMap<u64, String>,
    /// Dirty stamp → key, oldest update first (`NamedCache.dirtyKeys`, a LinkedHashSet
    /// whose key is removed and re-added on every dirty put).
    dirty: BTreeMap<u64, String>,
    next_stamp: u64,
    size_bytes: u64,
}

impl NamedCache {
    /// The cached value of `key`, marking it most recently used (`NamedCache.get`).
    pub fn get(&mut self, key: &str) -> Option<u64> {
        let stamp = self.stamp();
        let entry = self.entries.get_mut(key)?;
        self.lru.remove(&entry.lru_stamp);
        entry.lru_stamp = stamp;
        self.lru.insert(stamp, key.to_string());
        Some(entry.count)
    }

    /// Puts `key → count` as a dirty entry of `size_bytes`, most recently used and last in
    /// the dirty order (`NamedCache.put`).
    pub fn put_dirty(&mut self, key: String, count: u64, size_bytes: u64) {
        let (lru_stamp, dirty_stamp) = (self.stamp(), self.stamp());
        if let Some(old) = self.entries.remove(&key) {
            self.lru.remove(&old.lru_stamp);
            if let Some(d) = old.dirty_stamp {
                self.dirty.remove(&d);
            }
            self.size_bytes -= old.size_bytes;
        }
        self.lru.insert(lru_stamp, key.clone());
        self.dirty.insert(dirty_stamp, key.clone());
        self.size_bytes += size_bytes;
        let entry = Entry {
            count,
            size_bytes,
            lru_stamp,
            dirty_stamp: Some(dirty_stamp),
        };
        self.entries.insert(key, entry);
    }

    /// Removes the least recently used entry (`NamedCache.evict`); if it was dirty, the
    /// cache is flushed with it: the updates to forward, the evicted one first.
    pub fn evict(&mut self) -> Vec<Update> {
        let Some((_, key)) = self.lru.pop_first() else {
            return Vec::new();
        };
        let entry = self.entries.remove(&key).expect("an LRU key is cached");
        self.size_bytes -= entry.size_bytes;
        let Some(d) = entry.dirty_stamp else {
            return Vec::new();
        };
        self.dirty.remove(&d);
        let evicted = Update {
            store_key: key,
            count: entry.count,
        };
        let mut updates = vec![evicted];
        updates.extend(self.flush());
        updates
    }

    /// Marks every dirty entry clean and returns them in the order of their latest update
    /// (`NamedCache.flush`).
    pub fn flush(&mut self) -> Vec<Update> {
        let dirty = std::mem::take(&mut self.dirty);
        let mut updates = Vec::with_capacity(dirty.len());
        for key in dirty.into_values() {
            let entry = self.entries.get_mut(&key).expect("a dirty key is cached");
            entry.dirty_stamp = None;
            updates.push(Update {
                store_key: key,
                count: entry.count,
            });
        }
        updates
    }

    /// Estimated bytes held (`NamedCache.sizeInBytes`).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Entries held, clean and dirty.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Dirty entries held (updates not yet forwarded).
    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }
}

/// The budget of a stream thread's caches (`ThreadCache`), bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadCache {
    /// `statestore.cache.max.bytes / num.stream.threads`.
    pub max_bytes: u64,
}

impl ThreadCache {
    /// Puts a dirty entry into `cache`, then evicts from `cache` while the thread's caches
    /// (`cache` and the others' `other_caches_bytes`) exceed the budget and `cache` is not
    /// empty (`ThreadCache.put` → `maybeEvict`). The updates the evictions flushed, in
    /// order.
    pub fn put(
        &self,
        cache: &mut NamedCache,
        other_caches_bytes: u64,
        key: String,
        count: u64,
        size_bytes: u64,
    ) -> Vec<Update> {
        cache.put_dirty(key, count, size_bytes);
        let mut updates = Vec::new();
        while other_caches_bytes + cache.size_bytes() > self.max_bytes && !cache.is_empty() {
            updates.extend(cache.evict());
        }
        updates
    }
}

/// A task's store seen through its cache (`CachingKeyValueStore` / `CachingWindowStore`):
/// reads the cache, then the store; writes into the cache; what an eviction flushes is
/// written to the store at once and kept in [`forwarded`](Self::forwarded) for the
/// processor to send.
pub struct CachingStore<'a> {
    store: &'a mut KeyValueStore,
    cache: &'a mut NamedCache,
    budget: ThreadCache,
    other_caches_bytes: u64,
    sizer: EntrySizer,
    forwarded: Vec<Update>,
}

impl<'a> CachingStore<'a> {
    /// `store` behind `cache`, under `budget`, while the thread's other caches hold
    /// `other_caches_bytes`.
    pub fn new(
        store: &'a mut KeyValueStore,
        cache: &'a mut NamedCache,
        budget: ThreadCache,
        other_caches_bytes: u64,
        sizer: EntrySizer,
    ) -> Self {
        Self {
            store,
            cache,
            budget,
            other_caches_bytes,
            sizer,
            forwarded: Vec::new(),
        }
    }

    /// The updates evictions flushed (already in the store), in order.
    pub fn forwarded(self) -> Vec<Update> {
        self.forwarded
    }
}

impl CountStore for CachingStore<'_> {
    fn get(&mut self, key: &str) -> Option<u64> {
        self.cache.get(key).or_else(|| self.store.get(key))
    }

    fn put(&mut self, key: String, count: u64) {
        let size = self.sizer.bytes(&key);
        let flushed = (self.budget).put(self.cache, self.other_caches_bytes, key, count, size);
        for u in &flushed {
            self.store.put(u.store_key.clone(), u.count);
        }
        self.forwarded.extend(flushed);
    }
}

/// Flushes `cache` into `store` (`NamedCache.flush` through the caching store's flush
/// listener): every dirty entry written to the store; the updates to forward, in order.
pub fn flush_into(cache: &mut NamedCache, store: &mut KeyValueStore) -> Vec<Update> {
    let updates = cache.flush();
    for u in &updates {
        store.put(u.store_key.clone(), u.count);
    }
    updates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(updates: &[Update]) -> Vec<String> {
        (updates.iter())
            .map(|u| format!("{}={}", u.store_key, u.count))
            .collect()
    }

    #[test]
    fn consecutive_updates_of_a_key_collapse_until_the_flush() {
        let mut cache = NamedCache::default();
        let budget = ThreadCache { max_bytes: 1_000 };
        for (key, count) in [("a@0", 1), ("b@0", 1), ("a@0", 2), ("a@0", 3)] {
            assert!(budget.put(&mut cache, 0, key.into(), count, 10).is_empty());
        }
        assert_eq!(
            (cache.len(), cache.dirty_len(), cache.size_bytes()),
            (2, 2, 20)
        );
        // Arrival order of each key's latest update: b before a.
        assert_eq!(texts(&cache.flush()), ["b@0=1", "a@0=3"]);
        assert_eq!(
            (cache.len(), cache.dirty_len()),
            (2, 0),
            "flushed entries stay, clean"
        );
        assert!(cache.flush().is_empty());
    }

    #[test]
    fn evicting_a_dirty_entry_flushes_the_whole_cache_evicted_first() {
        let mut cache = NamedCache::default();
        let budget = ThreadCache { max_bytes: 30 };
        for key in ["a@0", "b@0", "c@0"] {
            assert!(budget.put(&mut cache, 0, key.into(), 1, 10).is_empty());
        }
        assert_eq!(cache.get("a@0"), Some(1), "a is now the most recently used");
        let flushed = budget.put(&mut cache, 0, "d@0".into(), 1, 10);
        // b is the LRU entry: it goes first, then the other dirty keys in update order.
        assert_eq!(texts(&flushed), ["b@0=1", "a@0=1", "c@0=1", "d@0=1"]);
        assert_eq!(
            (cache.len(), cache.dirty_len(), cache.size_bytes()),
            (3, 0, 30)
        );
        // A clean LRU entry is evicted silently.
        let flushed = budget.put(&mut cache, 0, "e@0".into(), 1, 10);
        assert!(flushed.is_empty(), "{flushed:?}");
        assert_eq!(cache.get("c@0"), None, "c was the least recently used");
    }

    #[test]
    fn the_thread_budget_counts_the_other_tasks_caches() {
        let mut cache = NamedCache::default();
        let budget = ThreadCache { max_bytes: 100 };
        assert!(budget.put(&mut cache, 85, "a@0".into(), 1, 10).is_empty());
        let flushed = budget.put(&mut cache, 85, "b@0".into(), 1, 10);
        // 105 bytes: a (the LRU) goes, flushing b with it; b stays, clean, within budget.
        assert_eq!(texts(&flushed), ["a@0=1", "b@0=1"]);
        assert_eq!((cache.len(), cache.dirty_len()), (1, 0));
        // Others alone above the budget: this cache empties itself and stops there.
        let flushed = budget.put(&mut cache, 200, "c@0".into(), 1, 10);
        assert_eq!(texts(&flushed), ["c@0=1"], "b leaves clean, then c flushes");
        assert!(cache.is_empty());
    }

    #[test]
    fn a_zero_budget_forwards_every_update_as_it_happens() {
        let mut cache = NamedCache::default();
        let budget = ThreadCache { max_bytes: 0 };
        for count in 1..=3 {
            let flushed = budget.put(&mut cache, 0, "a@0".into(), count, 10);
            assert_eq!(texts(&flushed), [format!("a@0={count}")]);
            assert!(cache.is_empty());
        }
    }

    #[test]
    fn entry_sizes_follow_kafka_s_estimate() {
        let windowed = EntrySizer {
            windowed: true,
            topic_chars: 6,
        };
        // "k1": 2 + window key 20 + node 24 + dirty 1 + value 16 + context 20 + topic 6.
        assert_eq!(windowed.bytes("k1@5000"), 89);
        let plain = EntrySizer {
            windowed: false,
            ..windowed
        };
        assert_eq!(plain.bytes("k1@0"), 69);
    }
}

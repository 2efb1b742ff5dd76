//! State stores: an ordered key-value map per task, and the "disk" a persistent store
//! flushes to.
//!
//! The disk lives outside every process (shared by the run, keyed by instance and task), so
//! a killed instance finds on restart exactly what it flushed before: the store contents as
//! of its last flush and, if one was written, a checkpoint (the changelog offset those
//! contents reflect). Restoring then replays the changelog from the checkpoint on; without
//! a checkpoint the store is wiped and restored from the changelog's start.

use eosim_sim::kafka::Offset;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A changelog record as a store entry: key `key@windowStart` (UTF-8), value the count
/// as decimal text, or a join table's update `<version>,<timestamp_ms>` (the version is
/// the entry, `streams::join::table_value`); `None` for anything else (a tombstone, say).
pub fn changelog_entry(key: Option<&[u8]>, value: Option<&[u8]>) -> Option<(String, u64)> {
    let key = String::from_utf8(key?.to_vec()).ok()?;
    let value = std::str::from_utf8(value?).ok()?;
    let count = value
        .split_once(',')
        .map_or(value, |(v, _)| v)
        .parse()
        .ok()?;
    Some((key, count))
}

/// A task's key-value state store (`key@windowStart → count`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyValueStore {
    map: BTreeMap<String, u64>,
}

impl KeyValueStore {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<u64> {
        self.map.get(key).copied()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: String, value: u64) {
        self.map.insert(key, value);
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What the aggregate reads and writes: a task's store directly ([`KeyValueStore`]) or
/// through its record cache (`streams::cache::CachingStore`).
pub trait CountStore {
    /// The current count of `key` (`key@windowStart`).
    fn get(&mut self, key: &str) -> Option<u64>;
    /// Sets `key` to `count`.
    fn put(&mut self, key: String, count: u64);
}

impl CountStore for KeyValueStore {
    fn get(&mut self, key: &str) -> Option<u64> {
        KeyValueStore::get(self, key)
    }

    fn put(&mut self, key: String, count: u64) {
        KeyValueStore::put(self, key, count);
    }
}

/// What one persistent store left on disk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flushed {
    /// Store contents as of the last flush.
    pub store: KeyValueStore,
    /// The `.checkpoint`: changelog offset up to which `store` is complete; `None` when no
    /// valid checkpoint exists (EOS deletes it while a task runs).
    pub checkpoint: Option<Offset>,
}

/// The disks of all instances: (instance, task partition) → what was flushed, and each
/// instance's `kafka-streams-process-metadata` file (its process id).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    inner: Arc<Mutex<BTreeMap<(u32, u32), Flushed>>>,
    process_files: Arc<Mutex<BTreeMap<u32, String>>>,
}

impl Disk {
    /// The process id in instance `instance`'s state directory
    /// (`kafka-streams-process-metadata`), if one was written.
    pub fn process_id(&self, instance: u32) -> Option<String> {
        let files = self.process_files.lock().expect("disk lock");
        files.get(&instance).cloned()
    }

    /// Writes instance `instance`'s process file.
    pub fn write_process_id(&self, instance: u32, process_id: String) {
        let mut files = self.process_files.lock().expect("disk lock");
        files.insert(instance, process_id);
    }

    /// What instance `instance` flushed for task `partition`.
    pub fn read(&self, instance: u32, partition: u32) -> Option<Flushed> {
        self.inner
            .lock()
            .expect("disk lock")
            .get(&(instance, partition))
            .cloned()
    }

    /// Flushes a store and its checkpoint.
    pub fn write(&self, instance: u32, partition: u32, flushed: Flushed) {
        self.inner
            .lock()
            .expect("disk lock")
            .insert((instance, partition), flushed);
    }

    /// The checkpoint of every task instance `instance` has one for (task → offset).
    pub fn checkpoints(&self, instance: u32) -> BTreeMap<u32, Offset> {
        let disks = self.inner.lock().expect("disk lock");
        disks
            .iter()
            .filter(|((i, _), _)| *i == instance)
            .filter_map(|((_, p), f)| f.checkpoint.map(|c| (*p, c)))
            .collect()
    }

    /// Deletes the checkpoint of a task (EOS, when the task starts running).
    pub fn delete_checkpoint(&self, instance: u32, partition: u32) {
        if let Some(f) = self
            .inner
            .lock()
            .expect("disk lock")
            .get_mut(&(instance, partition))
        {
            f.checkpoint = None;
        }
    }

    /// Wipes the store directory of a task.
    pub fn wipe(&self, instance: u32, partition: u32) {
        self.inner
            .lock()
            .expect("disk lock")
            .remove(&(instance, partition));
    }
}

//! State stores: an ordered key-value map per task, and the "disk" a persistent store
//! flushes to.
//!
//! The disk lives outside every process (shared by the run, keyed by instance and task), so
//! a killed instance finds on restart exactly what it flushed before: the store contents as
//! of its last flush and, if one was written, a checkpoint (the changelog offset those
//! contents reflect). Restoring then replays the changelog from the checkpoint on; without
//! a checkpoint the store is wiped and restored from the changelog's start.
//!
//! In simulation the disk is memory shared by the run's nodes ([`Disk::default`]); on the
//! real tier, where each instance is a process of its own, it is a directory the run keeps
//! ([`Disk::in_dir`]): `streams-<i>/kafka-streams-process-metadata` (the process id) and
//! `streams-<i>/<task>.json` (a flushed store and its checkpoint), each replaced whole by a
//! rename, so a process killed mid-flush leaves the previous flush (as RocksDB's flush and
//! the `.checkpoint` file's atomic move do in Kafka Streams).

use eosim_sim::kafka::Offset;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flushed {
    /// Store contents as of the last flush.
    pub store: KeyValueStore,
    /// The `.checkpoint`: changelog offset up to which `store` is complete; `None` when no
    /// valid checkpoint exists (EOS deletes it while a task runs).
    pub checkpoint: Option<Offset>,
}

/// The disks of all instances: (instance, task partition) → what was flushed, and each
/// instance's `kafka-streams-process-metadata` file (its process id). In memory, or in a
/// directory ([`Disk::in_dir`]).
#[derive(Debug, Clone, Default)]
pub struct Disk {
    inner: Arc<Mutex<BTreeMap<(u32, u32), Flushed>>>,
    process_files: Arc<Mutex<BTreeMap<u32, String>>>,
    dir: Option<Arc<PathBuf>>,
}

/// The process id's file in an instance's state directory (`StateDirectory`'s
/// `PROCESS_FILE_NAME`).
const PROCESS_FILE: &str = "kafka-streams-process-metadata";

impl Disk {
    /// A disk in directory `dir` (created on the first write), for instances that are
    /// processes of their own: each reads what earlier incarnations of it flushed there.
    /// A file that cannot be read or parsed reads as absent (as a store directory Kafka
    /// Streams cannot open is wiped); one that cannot be written panics, naming it.
    pub fn in_dir(dir: PathBuf) -> Disk {
        Disk {
            dir: Some(Arc::new(dir)),
            ..Disk::default()
        }
    }

    fn instance_dir(dir: &Path, instance: u32) -> PathBuf {
        dir.join(format!("streams-{instance}"))
    }

    fn task_file(dir: &Path, instance: u32, partition: u32) -> PathBuf {
        Disk::instance_dir(dir, instance).join(format!("{partition}.json"))
    }

    /// Replaces `path` with `text` whole: written beside it, then renamed over it.
    fn replace(path: &Path, text: &[u8]) {
        let tmp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            panic!(
                "streams state directory: cannot write {}: {e}",
                path.display()
            );
        }
    }

    /// The process id in instance `instance`'s state directory
    /// (`kafka-streams-process-metadata`), if one was written.
    pub fn process_id(&self, instance: u32) -> Option<String> {
        if let Some(dir) = &self.dir {
            let path = Disk::instance_dir(dir, instance).join(PROCESS_FILE);
            let text = std::fs::read_to_string(path).ok()?;
            return Some(text.trim().to_string()).filter(|id| !id.is_empty());
        }
        let files = self.process_files.lock().expect("disk lock");
        files.get(&instance).cloned()
    }

    /// Writes instance `instance`'s process file.
    pub fn write_process_id(&self, instance: u32, process_id: String) {
        if let Some(dir) = &self.dir {
            let path = Disk::instance_dir(dir, instance).join(PROCESS_FILE);
            return Disk::replace(&path, process_id.as_bytes());
        }
        let mut files = self.process_files.lock().expect("disk lock");
        files.insert(instance, process_id);
    }

    /// What instance `instance` flushed for task `partition`.
    pub fn read(&self, instance: u32, partition: u32) -> Option<Flushed> {
        if let Some(dir) = &self.dir {
            let text = std::fs::read(Disk::task_file(dir, instance, partition)).ok()?;
            return serde_json::from_slice(&text).ok();
        }
        self.inner
            .lock()
            .expect("disk lock")
            .get(&(instance, partition))
            .cloned()
    }

    /// Flushes a store and its checkpoint.
    pub fn write(&self, instance: u32, partition: u32, flushed: Flushed) {
        if let Some(dir) = &self.dir {
            let text = serde_json::to_vec(&flushed).expect("a store serializes");
            return Disk::replace(&Disk::task_file(dir, instance, partition), &text);
        }
        self.inner
            .lock()
            .expect("disk lock")
            .insert((instance, partition), flushed);
    }

    /// The checkpoint of every task instance `instance` has one for (task → offset).
    pub fn checkpoints(&self, instance: u32) -> BTreeMap<u32, Offset> {
        if let Some(dir) = &self.dir {
            let Ok(entries) = std::fs::read_dir(Disk::instance_dir(dir, instance)) else {
                return BTreeMap::new();
            };
            let tasks = entries.filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                name.strip_suffix(".json")?.parse::<u32>().ok()
            });
            let flushed = tasks.filter_map(|p| Some((p, self.read(instance, p)?.checkpoint?)));
            return flushed.collect();
        }
        let disks = self.inner.lock().expect("disk lock");
        disks
            .iter()
            .filter(|((i, _), _)| *i == instance)
            .filter_map(|((_, p), f)| f.checkpoint.map(|c| (*p, c)))
            .collect()
    }

    /// Deletes the checkpoint of a task (EOS, when the task starts running).
    pub fn delete_checkpoint(&self, instance: u32, partition: u32) {
        if let Some(mut flushed) = self.read(instance, partition) {
            if flushed.checkpoint.take().is_some() {
                self.write(instance, partition, flushed);
            }
        }
    }

    /// Wipes the store directory of a task.
    pub fn wipe(&self, instance: u32, partition: u32) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_file(Disk::task_file(dir, instance, partition));
            return;
        }
        self.inner
            .lock()
            .expect("disk lock")
            .remove(&(instance, partition));
    }
}

#[cfg(all(test, not(madsim)))]
mod tests {
    use super::*;

    fn flushed(count: u64, checkpoint: Option<Offset>) -> Flushed {
        let mut store = KeyValueStore::default();
        store.put("k0@0".into(), count);
        Flushed { store, checkpoint }
    }

    /// Every operation, on a disk in memory and on one in a directory, read back through a
    /// second handle on the same directory (the next incarnation's): the same answers.
    #[test]
    fn a_disk_in_a_directory_answers_as_the_disk_in_memory_and_outlives_its_handle() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("state");
        for disk in [Disk::default(), Disk::in_dir(dir.clone())] {
            let again = match disk.dir.is_some() {
                true => Disk::in_dir(dir.clone()),
                false => disk.clone(),
            };
            assert_eq!(again.process_id(1), None);
            disk.write_process_id(1, "p-1".into());
            assert_eq!(again.process_id(1).as_deref(), Some("p-1"));
            assert_eq!(again.process_id(0), None);
            disk.write(1, 2, flushed(7, Some(40)));
            disk.write(1, 0, flushed(3, None));
            disk.write(0, 2, flushed(9, Some(5)));
            assert_eq!(again.read(1, 2), Some(flushed(7, Some(40))));
            assert_eq!(again.checkpoints(1), BTreeMap::from([(2, 40)]));
            disk.delete_checkpoint(1, 2);
            assert_eq!(again.read(1, 2), Some(flushed(7, None)));
            assert_eq!(again.checkpoints(1), BTreeMap::new());
            disk.wipe(1, 2);
            assert_eq!(again.read(1, 2), None);
            assert_eq!(again.read(0, 2), Some(flushed(9, Some(5))));
        }
        let files = std::fs::read_dir(dir.join("streams-1"))
            .expect("written")
            .count();
        assert_eq!(
            files, 2,
            "the process file and task 0's store; no temp file left"
        );
    }
}

//! The transactional upstream producer (`[workload] "transactional.id"`) as `eosim worker
//! --role producer` (or `cdc-producer`) processes of a real run: the session of
//! [`crate::upstream`] (shared with the simulation) over a [`RealTransactionalProducer`],
//! so that a kill of the process is a real SIGKILL inside a Kafka transaction.
//!
//! # State
//! The run's [`UpstreamState`] (the next transaction number and the transactions open by
//! `transactional.id`) is a [`FileStore`] in the run's directory, beside `sink/`:
//! `upstream-txn/state.json`, replaced whole (written to `state.json.tmp`, fsync'ed, renamed,
//! the directory fsync'ed) under an exclusive `flock(2)` of `upstream-txn/state.lock` held
//! for the whole read-change-write. So the numbering is one sequence over every producer
//! process and every incarnation of one, and a killed producer's open transaction is still
//! there for its next incarnation (which records it aborted) or for the run's final state
//! (which records it undecided: [`FileStore::take_open_at_end`]). A kill cannot tear the
//! state (the rename is atomic) and cannot hold the lock (the kernel drops a dead
//! process's `flock`).
//!
//! A process killed between a state change and the op that reports it leaves the two a
//! step apart: a send kept in its transaction with no outcome recorded (harmless: the
//! transaction is then aborted), or a transaction whose end was taken from the state with
//! no `txn` op recorded (its records then have no transaction in the history). The second
//! window is one `write(2)` of an op line wide.

use super::worker_spec::{Emit, WorkerSpec};
use crate::client::real::RealTransactionalProducer;
use crate::client::ProducerRecord;
use crate::client::TxnSettings;
use crate::history::{OpKind, Value};
use crate::upstream::{Session, UpstreamConfig, UpstreamHost, UpstreamState};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The store's directory name in the run's directory.
pub const STORE_DIR: &str = "upstream-txn";

/// The run's [`UpstreamState`] in files that survive a killed process (see the module
/// docs).
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// The store of the run whose sink directory is `sink_dir` (`<run>/sink`): the
    /// directory `<run>/upstream-txn`.
    pub fn of_run(sink_dir: &Path) -> Self {
        Self {
            dir: sink_dir.with_file_name(STORE_DIR),
        }
    }

    /// Empties the store (a directory left by an earlier run in the same place is
    /// removed), before any producer starts.
    ///
    /// # Errors
    /// The directory cannot be removed or created (its path and the OS error).
    pub fn create_empty(&self) -> Result<(), String> {
        let what = |e: std::io::Error| format!("upstream store {}: {e}", self.dir.display());
        if self.dir.exists() {
            std::fs::remove_dir_all(&self.dir).map_err(what)?;
        }
        std::fs::create_dir_all(&self.dir).map_err(what)
    }

    /// Applies `change` to the state under the lock and makes the result durable before
    /// the lock is released (nothing is written when `change` changed nothing); what
    /// `change` returned.
    ///
    /// # Errors
    /// The lock, the state file or its replacement failed (path and OS error), or the
    /// state file does not parse.
    pub fn update<R>(&self, change: impl FnOnce(&mut UpstreamState) -> R) -> Result<R, String> {
        let what = |e: std::io::Error| format!("upstream store {}: {e}", self.dir.display());
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("state.lock"))
            .map_err(what)?;
        flock_exclusive(&lock).map_err(what)?;
        let path = self.dir.join("state.json");
        let before = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("upstream store {}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => UpstreamState::default(),
            Err(e) => return Err(what(e)),
        };
        let mut state = before.clone();
        let out = change(&mut state);
        if state != before {
            self.replace(&state).map_err(what)?;
        }
        // Closing the lock's descriptor releases the flock.
        drop(lock);
        Ok(out)
    }

    /// Writes `state` to a temporary file, fsyncs it, renames it over `state.json` and
    /// fsyncs the directory: after a kill the state is either the old one or this one.
    fn replace(&self, state: &UpstreamState) -> std::io::Result<()> {
        let tmp = self.dir.join("state.json.tmp");
        let mut file = File::create(&tmp)?;
        file.write_all(&serde_json::to_vec(state).expect("the state serializes"))?;
        file.sync_all()?;
        std::fs::rename(&tmp, self.dir.join("state.json"))?;
        File::open(&self.dir)?.sync_all()
    }

    /// The transactions still open at the end of the run, taken out of the store, as
    /// `(process, txn value)` ([`UpstreamState::take_open_at_end`]).
    ///
    /// # Errors
    /// As [`FileStore::update`].
    pub fn take_open_at_end(&self) -> Result<Vec<(String, Value)>, String> {
        self.update(UpstreamState::take_open_at_end)
    }
}

/// `flock(fd, LOCK_EX)`, retried when a signal interrupts it.
fn flock_exclusive(file: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this `File` owns and keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A real producer process as an [`UpstreamHost`]: ops on stdout, rdkafka transactional
/// producers, the state in the run's [`FileStore`].
struct RealUpstreamHost {
    epoch_ns: u64,
    bootstrap: String,
    store: FileStore,
}

impl UpstreamHost for RealUpstreamHost {
    type Txn = RealTransactionalProducer;

    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        let emit = Emit {
            name: process.to_string(),
            epoch_ns: self.epoch_ns,
        };
        emit.op(kind, value, error);
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<RealTransactionalProducer, String> {
        super::copier_instance::real_txn_producer(&self.bootstrap, settings)
    }

    /// A store that cannot be read or written ends the process (exit status 1, the
    /// reason on stderr, the worker's log): the runner starts it again, as after a kill,
    /// which the store is made to survive.
    fn update<R>(&self, change: impl FnOnce(&mut UpstreamState) -> R) -> R {
        self.store.update(change).unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        })
    }
}

/// Sends the ids `[id_from, id_to)` of producer `spec.name` in transactions, each as
/// `make(id)` gives it (its key for the history, and the record), one every
/// `produce_interval_ms` (after `produce_start_ms`), then ends the open transaction.
///
/// # Errors
/// None today: a producer that cannot be created or initialized is retried.
pub async fn txn_producer(
    spec: &WorkerSpec,
    config: UpstreamConfig,
    make: impl Fn(u64) -> (Option<String>, ProducerRecord),
) -> Result<(), String> {
    let w = &spec.scenario.workload;
    if w.produce_start_ms > 0 {
        tokio::time::sleep(Duration::from_millis(w.produce_start_ms)).await;
    }
    let host = RealUpstreamHost {
        epoch_ns: spec.epoch_ns,
        bootstrap: spec.bootstrap.clone(),
        store: FileStore::of_run(&spec.sink_dir),
    };
    let mut session = Session::open(host, config, &spec.name).await;
    let mut ids = spec.id_from..spec.id_to;
    let next = || {
        let id = ids.next()?;
        let (key, record) = make(id);
        Some((id, key, record))
    };
    session.send_all(next, w.produce_interval_ms).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_store_numbers_across_handles_and_keeps_open_transactions() {
        let run = tempfile::tempdir().expect("temp dir");
        let sink = run.path().join("sink");
        let store = FileStore::of_run(&sink);
        store.create_empty().expect("store");
        // Two handles stand for two producer processes of the run.
        let other = FileStore::of_run(&sink);
        assert_eq!(store.update(|s| s.begin("up-0", "producer-0")), Ok(0));
        assert_eq!(other.update(|s| s.begin("up-1", "producer-1")), Ok(1));
        assert_eq!(other.update(|s| s.take("up-1").map(|t| t.id)), Ok(Some(1)));
        let at_end = store.take_open_at_end().expect("read");
        assert_eq!(at_end.len(), 1);
        assert_eq!(at_end[0].0, "producer-0");
        assert_eq!(store.update(|s| s.next_txn), Ok(2));
        store.create_empty().expect("emptied");
        assert_eq!(store.update(|s| s.next_txn), Ok(0));
    }
}

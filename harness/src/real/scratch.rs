//! Scratch directories of a real run (a service's data, config and log), and the cleanup of
//! every exit path.
//!
//! Each directory is `eosim-run-<pid>-<service>-XXXXXX` under the system temp dir, `<pid>`
//! the eosim process that made it. A normal exit removes it when its [`TempDir`] drops; a
//! Ctrl-C, SIGTERM or SIGHUP exits through [`process`](super::process)'s teardown, which
//! calls [`remove_own`]; a SIGKILLed eosim leaves its directories behind, and the next real
//! run removes them with [`sweep_leftovers`] (every directory whose `<pid>` is no longer a
//! live process). A service that does not come up keeps its directory
//! ([`start_in`]), so the log its error names still exists. Mounts left under a directory
//! (a killed `eosim lazyfs`'s) are detached before it is removed.

use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// The prefix of every scratch directory.
const PREFIX: &str = "eosim-run-";

/// A fresh scratch directory for `service` ("postgres", "kafka", ...).
///
/// # Errors
/// The OS's, naming the service.
pub fn scratch_dir(service: &str) -> Result<TempDir, String> {
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{}-{service}-", std::process::id()))
        .tempdir()
        .map_err(|e| format!("{service}: temporary directory: {e}"))
}

/// Starts `service` in a fresh scratch directory with `start(dir)`; returns what it started
/// and the directory, which must outlive it. When `start` fails the directory is kept on
/// disk, so the log the error names can be read, and the error says where it is.
///
/// # Errors
/// [`scratch_dir`]'s, or `start`'s naming the kept directory.
pub fn start_in<T>(
    service: &str,
    start: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<(T, TempDir), String> {
    let dir = scratch_dir(service)?;
    match start(dir.path()) {
        Ok(started) => Ok((started, dir)),
        Err(e) => Err(format!(
            "{e} (its directory is kept: {})",
            dir.keep().display()
        )),
    }
}

/// The owner pid of a scratch directory named `name`, if it is one.
fn owner(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// Removes the scratch directories under `root` whose owner is gone (`alive(pid)` false);
/// returns them.
fn sweep(root: &Path, alive: impl Fn(u32) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        // A lazyfs whose process was killed leaves its mount behind (a machine crash's
        // file system, `super::lazyfs`): detached first, or the removal stops at it.
        super::lazyfs::detach_all_under(&entry.path());
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// Removes the scratch directories that runs killed with SIGKILL left behind (their eosim
/// is no longer alive); returns them. A real run calls this when it starts.
pub fn sweep_leftovers() -> Vec<PathBuf> {
    sweep(&std::env::temp_dir(), |pid| {
        Path::new(&format!("/proc/{pid}")).exists()
    })
}

/// Removes this process's own scratch directories (the teardown on a signal, which exits
/// without running destructors).
pub fn remove_own() -> Vec<PathBuf> {
    let me = std::process::id();
    sweep(&std::env::temp_dir(), |pid| pid != me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_the_directories_of_dead_owners_only() {
        let root = tempfile::tempdir().unwrap();
        for name in [
            "eosim-run-11-postgres-a",
            "eosim-run-22-kafka-b",
            "eosim-run-x-c",
            "other",
        ] {
            std::fs::create_dir(root.path().join(name)).unwrap();
        }
        let removed = sweep(root.path(), |pid| pid == 22);
        assert_eq!(removed, vec![root.path().join("eosim-run-11-postgres-a")]);
        let mut left: Vec<String> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["eosim-run-22-kafka-b", "eosim-run-x-c", "other"]);
    }

    #[test]
    fn a_scratch_dir_names_its_owner_and_is_kept_when_the_service_fails() {
        let mut seen = PathBuf::new();
        let err = start_in::<()>("unit", |dir| {
            seen = dir.to_path_buf();
            Err("unit did not come up (log: unit.log)".into())
        });
        let name = seen.file_name().unwrap().to_str().unwrap().to_string();
        assert_eq!(owner(&name), Some(std::process::id()));
        assert!(err.unwrap_err().contains(&seen.display().to_string()));
        assert!(seen.exists(), "the failing service's directory was deleted");
        std::fs::remove_dir_all(&seen).unwrap();
        let (started, dir) = start_in("unit", |dir| Ok(dir.to_path_buf())).unwrap();
        drop(dir);
        assert!(
            !started.exists(),
            "a started service's directory outlived its handle"
        );
    }
}

//! One cgroup v2 per process of a run, so that nftables can tell the run's processes apart
//! on loopback (`socket cgroupv2`, [`super::rules`]).
//!
//! The tree is `<cgroup2 mount>/eosim-<pid>/<node>`, `<pid>` the eosim process that made
//! it: at depth 2 under the cgroup v2 root ([`LEVEL`]), which is what `socket cgroupv2
//! level 2` compares (`cgroup_ancestor` in `net/netfilter/nft_socket.c`). A process joins
//! its node's cgroup in the child between `fork` and `exec` ([`join_in_child`]), before it
//! opens any socket: a socket belongs to the cgroup its creator was in when it was made
//! (`sock_cgroup_set` at `sk_alloc`), so moving a running process would leave its sockets
//! behind. Its children (PostgreSQL's backends, a JVM's threads) inherit the cgroup.
//!
//! `nft` resolves a cgroup path under `/sys/fs/cgroup` (`SYSFS_CGROUPSV2_PATH` in
//! nftables' `src/datatype.c`), so the cgroup v2 hierarchy must be mounted there or below
//! (`/sys/fs/cgroup/unified` on a hybrid systemd host).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The depth of a node's cgroup under the cgroup v2 root.
pub const LEVEL: u32 = 2;

/// Where `nft` looks up cgroup paths.
const NFT_CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The prefix of a run's cgroup directory.
const PREFIX: &str = "eosim-";

/// The cgroup v2 mount point from `mounts` (`/proc/self/mounts`' text: device, mount
/// point, type, ...).
///
/// # Errors
/// No `cgroup2` mount, or one that is not under `/sys/fs/cgroup`, named.
pub fn cgroup2_mount(mounts: &str) -> Result<PathBuf, String> {
    let mount = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2"))
        .and_then(|f| f.get(1).map(PathBuf::from))
        .ok_or("no cgroup v2 hierarchy is mounted (no `cgroup2` line in /proc/self/mounts)")?;
    if !mount.starts_with(NFT_CGROUP_ROOT) {
        return Err(format!(
            "cgroup v2 is mounted at {}, outside {NFT_CGROUP_ROOT} where nft resolves \
             `socket cgroupv2` paths",
            mount.display()
        ));
    }
    Ok(mount)
}

/// A run's cgroups: `<mount>/eosim-<pid>/<node>`, made on demand, removed on drop.
#[derive(Debug)]
pub struct CgroupTree {
    mount: PathBuf,
    dir: PathBuf,
}

impl CgroupTree {
    /// Makes `<mount>/eosim-<pid>` for this process.
    ///
    /// # Errors
    /// The OS's, naming the directory.
    pub fn create(mount: &Path) -> Result<Self, String> {
        let dir = mount.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
        Ok(Self {
            mount: mount.to_path_buf(),
            dir,
        })
    }

    /// `node`'s cgroup directory, made if missing.
    ///
    /// # Errors
    /// The OS's, naming the directory.
    pub fn node_dir(&self, node: &str) -> Result<PathBuf, String> {
        let dir = self.dir.join(node);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// `node`'s cgroup as `nft` names it (its path under `/sys/fs/cgroup`).
    pub fn nft_path(&self, node: &str) -> String {
        let rel = self
            .dir
            .join(node)
            .strip_prefix(NFT_CGROUP_ROOT)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        rel.display().to_string()
    }

    /// The pids in `node`'s cgroup (its `cgroup.procs`); none when it has no cgroup yet.
    pub fn pids(&self, node: &str) -> Vec<i32> {
        let procs = self.dir.join(node).join("cgroup.procs");
        std::fs::read_to_string(procs)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Removes the node cgroups and the run's directory, waiting up to 5 s for processes
    /// that are still exiting; returns what could not be removed.
    pub fn remove(&self) -> Vec<String> {
        remove_tree(&self.dir, Duration::from_secs(5))
    }

    /// The cgroup v2 mount this tree is under.
    pub fn mount(&self) -> &Path {
        &self.mount
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        for left in self.remove() {
            eprintln!("eosim: {left}");
        }
    }
}

/// Removes `dir`'s child cgroups, then `dir` (cgroups are removed with `rmdir`; one with a
/// process in it is busy), retrying until `max`; returns what is left, with the OS's reason.
fn remove_tree(dir: &Path, max: Duration) -> Vec<String> {
    let deadline = Instant::now() + max;
    loop {
        let mut left = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for child in entries.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()) {
                if let Err(e) = std::fs::remove_dir(child.path()) {
                    left.push(format!(
                        "cgroup {} not removed: {e}",
                        child.path().display()
                    ));
                }
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Vec::new(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => left.push(format!("cgroup {} not removed: {e}", dir.display())),
        }
        if Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes the run cgroups under `mount` whose eosim process is gone (`alive(pid)` false,
/// a SIGKILLed run's); returns them.
pub fn sweep_leftovers(mount: &Path, alive: impl Fn(u32) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(mount) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !alive(pid) && remove_tree(&entry.path(), Duration::ZERO).is_empty() {
            removed.push(entry.path());
        }
    }
    removed
}

/// Makes `cmd`'s child join the cgroup at `dir` between `fork` and `exec`, then take
/// `user`'s uid and gid (std's `Command::uid` would drop root before any `pre_exec`
/// closure ran, and only root may move a process out of the root cgroup). Writing `0` to
/// `cgroup.procs` moves the writer (`cgroup_procs_write_start`, `kernel/cgroup/cgroup.c`).
/// The child fails to start (the spawn's error) when it cannot join.
///
/// # Errors
/// A directory path with a NUL byte.
pub fn join_in_child(
    cmd: &mut Command,
    dir: &Path,
    user: Option<(u32, u32)>,
) -> Result<(), String> {
    let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(|_| format!("cgroup {}: a NUL in the path", dir.display()))?;
    // SAFETY: the closure only makes async-signal-safe calls (open, write, close,
    // setgroups, setgid, setuid) on memory allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(err);
            }
            if let Some((uid, gid)) = user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_and_must_be_under_sys_fs_cgroup() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            cgroup2_mount(hybrid).unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        let v1_only = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        assert!(cgroup2_mount(v1_only).unwrap_err().contains("no cgroup v2"));
        let elsewhere = "cgroup2 /mnt/cg cgroup2 rw 0 0\n";
        let err = cgroup2_mount(elsewhere).unwrap_err();
        assert!(err.contains("/mnt/cg") && err.contains("nft"), "{err}");
    }

    /// A tree made in a plain directory: node directories on demand, nft's path relative to
    /// /sys/fs/cgroup, and a sweep that removes only dead owners' trees.
    #[test]
    fn trees_are_made_named_and_swept() {
        let root = tempfile::tempdir().unwrap();
        let tree = CgroupTree::create(root.path()).unwrap();
        let dir = tree.node_dir("broker-1").unwrap();
        assert!(dir.is_dir());
        assert!(tree.pids("broker-1").is_empty());
        // Outside /sys/fs/cgroup nft has no name for it.
        assert_eq!(tree.nft_path("broker-1"), "");
        drop(tree);
        assert!(!dir.exists(), "drop removes the tree");
        let dead = root.path().join("eosim-999999999");
        let live = root.path().join(format!("eosim-{}", std::process::id()));
        std::fs::create_dir_all(dead.join("postgres")).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        let removed = sweep_leftovers(root.path(), |pid| pid == std::process::id());
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists() && live.exists());
    }
}

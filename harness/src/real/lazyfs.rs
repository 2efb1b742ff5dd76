//! A file system that loses what was not fsynced: the real tier's machine crash.
//!
//! Modelled on Jepsen's lazyfs (github.com/dsrhaslab/lazyfs, "LazyFS: A FUSE Filesystem
//! with an Internal Page Cache to Simulate Power Failures", used by Jepsen with its
//! `lazyfs::clear-cache` command): a FUSE passthrough over a backing directory that keeps
//! every write to file data in its own memory, its "page cache", until the file is fsynced
//! (`fsync`, `fdatasync`, `msync(MS_SYNC)`, Java's `FileChannel.force`), and writes it
//! through to the backing directory then. A `clear-cache` command drops everything not
//! yet synced, as a power loss drops the OS's dirty pages; reads afterwards see the backing
//! directory's content. The process crash that comes with it (SIGKILL of the service) is
//! the caller's: the real runner kills the broker first, then clears its cache.
//!
//! # What is modelled
//! - File data: every `write` (and each dirty page of a shared writable `mmap`, which the
//!   kernel writes back as `write` requests: Kafka's index files) is held per inode as
//!   extents over the backing file until that file is fsynced.
//! - File size: truncations and extensions (`ftruncate`, `RandomAccessFile.setLength`)
//!   are held too; a file shrunk and grown again reads zeros where its old data was.
//! - `clear-cache` drops all of it and invalidates the kernel's own page cache of those
//!   files (`FUSE_NOTIFY_INVAL_INODE`), so nothing dropped is read back from the kernel.
//!
//! # What is not
//! - Metadata: `create`, `mkdir`, `unlink`, `rmdir`, `rename`, `chmod`, `utimens` go
//!   through to the backing directory at once, as if the directory were always fsynced
//!   (lazyfs's default, too, persists metadata operations as they come). A file created
//!   and never fsynced survives a crash, empty; a rename survives. `fsyncdir` is therefore
//!   a no-op.
//! - Partial writeback: the OS writing back dirty pages on its own (after
//!   `vm.dirty_expire_centisecs`) is not modelled: everything unsynced is lost, the worst
//!   case a power loss allows (lazyfs's `clear-cache` too).
//! - Torn writes: a synced write is written whole; lazyfs's `torn-seq`/`torn-op` faults
//!   are not offered.
//! - The backing directory itself is not fsynced on `fsync` (it is the "disk": the host
//!   does not crash), which keeps `log.flush.interval.messages=1` cheap.
//! - Hard links, special files, extended attributes, `fallocate`, POSIX locks over FUSE
//!   (the kernel keeps the locks locally, as for any FUSE file system that does not ask
//!   for `FUSE_POSIX_LOCKS`).
//!
//! # Running it
//! `eosim lazyfs --backing DIR --mount DIR --control PATH` (hidden subcommand) mounts the
//! file system at `--mount`, mirroring `--backing`, and serves commands on the Unix socket
//! `--control`, one per connection: a line `clear-cache`, `stats` or `unmount`, answered
//! with one line, `ok files=F bytes=B truncations=T` (what was dropped, or is unsynced now)
//! or `ok` (unmount: the process then unmounts and exits), or `error ...`. Mounting uses
//! `mount(2)` on `/dev/fuse` directly (fuser's pure-Rust mount, no libfuse), which needs
//! root; [`available`] says why not where it is not. [`LazyFsMount`] is the runner's
//! handle: it starts that process, talks to its socket and unmounts on drop.

use super::process::{Launch, ServiceProcess};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// Attributes and entries are never cached by the kernel: sizes change under it at a
/// `clear-cache`.
const TTL: Duration = Duration::ZERO;

/// The root's inode number (FUSE's).
const ROOT: u64 = 1;

/// Unsynced changes to one file: its size now, the lowest size it was truncated to since
/// its last sync, and the bytes written since, as non-overlapping extents by offset.
#[derive(Debug, Default)]
struct Dirty {
    size: u64,
    floor: Option<u64>,
    extents: BTreeMap<u64, Vec<u8>>,
}

impl Dirty {
    fn new(size: u64) -> Self {
        Dirty {
            size,
            ..Dirty::default()
        }
    }

    fn bytes(&self) -> u64 {
        self.extents.values().map(|v| v.len() as u64).sum()
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        let overlapping: Vec<u64> = self
            .extents
            .range(..end)
            .rev()
            .take_while(|(s, v)| **s + v.len() as u64 > off)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            let v = self.extents.remove(&s).expect("listed above");
            let e = s + v.len() as u64;
            if s < off {
                self.extents.insert(s, v[..(off - s) as usize].to_vec());
            }
            if e > end {
                self.extents.insert(end, v[(end - s) as usize..].to_vec());
            }
        }
        self.size = self.size.max(end);
        if let Some((s, v)) = self.extents.range_mut(..off).next_back() {
            if *s + v.len() as u64 == off {
                v.extend_from_slice(data);
                return;
            }
        }
        self.extents.insert(off, data.to_vec());
    }

    fn truncate(&mut self, size: u64) {
        if size < self.size {
            self.floor = Some(self.floor.map_or(size, |f| f.min(size)));
            let beyond: Vec<u64> = self
                .extents
                .iter()
                .filter(|(s, v)| **s + v.len() as u64 > size)
                .map(|(s, _)| *s)
                .collect();
            for s in beyond {
                let mut v = self.extents.remove(&s).expect("listed above");
                if s < size {
                    v.truncate((size - s) as usize);
                    self.extents.insert(s, v);
                }
            }
        }
        self.size = size;
    }

    /// `size` bytes at `off` as the file reads now: the backing file's bytes below what
    /// no unsynced truncation cut, zeros beyond, the unsynced extents over them.
    fn read(&self, file: &File, backing_len: u64, off: u64, size: u32) -> std::io::Result<Vec<u8>> {
        let end = (off + u64::from(size)).min(self.size);
        if off >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - off) as usize];
        let durable = backing_len.min(self.floor.unwrap_or(u64::MAX));
        if off < durable {
            read_at_most(file, &mut buf[..(end.min(durable) - off) as usize], off)?;
        }
        let first = self
            .extents
            .range(..=off)
            .next_back()
            .map_or(off, |(s, _)| *s);
        for (s, v) in self.extents.range(first..end) {
            let (s, e) = (*s, *s + v.len() as u64);
            let (from, to) = (s.max(off), e.min(end));
            if from < to {
                buf[(from - off) as usize..(to - off) as usize]
                    .copy_from_slice(&v[(from - s) as usize..(to - s) as usize]);
            }
        }
        Ok(buf)
    }

    /// Writes the changes through to the backing file.
    fn sync(&self, file: &File) -> std::io::Result<()> {
        if let Some(floor) = self.floor {
            file.set_len(floor)?;
        }
        file.set_len(self.size)?;
        for (s, v) in &self.extents {
            file.write_all_at(v, *s)?;
        }
        Ok(())
    }
}

/// Reads into `buf` at `off` until it is full or the file ends (the rest stays as it
/// was); returns how many bytes were read.
fn read_at_most(file: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// One inode: its path under the backing directory, the backing file while it is open
/// or has unsynced changes, and those changes.
#[derive(Debug)]
struct Node {
    path: PathBuf,
    file: Option<File>,
    opens: u32,
    dirty: Option<Dirty>,
    unlinked: bool,
}

/// What a `clear-cache` dropped, or what is unsynced now (`stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unsynced {
    /// Files with unsynced changes.
    pub files: u64,
    /// Unsynced bytes written to them.
    pub bytes: u64,
    /// Of those files, how many had an unsynced truncation.
    pub truncations: u64,
}

impl Unsynced {
    fn line(&self) -> String {
        format!(
            "ok files={} bytes={} truncations={}",
            self.files, self.bytes, self.truncations
        )
    }

    fn parse(line: &str) -> Option<Unsynced> {
        let mut out = Unsynced::default();
        let mut fields = line.strip_prefix("ok ")?.split(' ');
        for (key, slot) in [
            ("files", &mut out.files),
            ("bytes", &mut out.bytes),
            ("truncations", &mut out.truncations),
        ] {
            let (k, v) = fields.next()?.split_once('=')?;
            if k != key {
                return None;
            }
            *slot = v.parse().ok()?;
        }
        Some(out)
    }
}

#[derive(Debug)]
struct State {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    next_ino: u64,
}

impl State {
    fn intern(&mut self, path: PathBuf) -> u64 {
        if let Some(ino) = self.by_path.get(&path) {
            return *ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_path.insert(path.clone(), ino);
        let node = Node {
            path,
            file: None,
            opens: 0,
            dirty: None,
            unlinked: false,
        };
        self.nodes.insert(ino, node);
        ino
    }

    /// The node at `path` is gone from the namespace (unlinked, or replaced by a rename):
    /// an unopened one forgets its unsynced changes with its file.
    fn forget_path(&mut self, path: &Path) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.unlinked = true;
            if node.opens == 0 {
                node.dirty = None;
                node.file = None;
            }
        }
    }
}

/// The file system: a passthrough of `backing` holding unsynced file data in memory.
#[derive(Debug, Clone)]
pub struct LazyFs {
    backing: PathBuf,
    state: Arc<Mutex<State>>,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind_of(m: &Metadata) -> FileType {
    FileType::from_std(m.file_type()).unwrap_or(FileType::RegularFile)
}

fn time(secs: i64, nanos: i64) -> SystemTime {
    let t = if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    };
    t + Duration::from_nanos(nanos.max(0) as u64)
}

fn attr(ino: u64, m: &Metadata, size: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512).max(m.blocks()),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: SystemTime::UNIX_EPOCH,
        kind: kind_of(m),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

impl LazyFs {
    /// A lazy file system over `backing` (a directory).
    ///
    /// # Errors
    /// When `backing` is not a directory, naming it.
    pub fn new(backing: &Path) -> Result<LazyFs, String> {
        let m = std::fs::metadata(backing)
            .map_err(|e| format!("lazyfs: backing directory {}: {e}", backing.display()))?;
        if !m.is_dir() {
            return Err(format!(
                "lazyfs: backing {} is not a directory",
                backing.display()
            ));
        }
        let mut state = State {
            nodes: HashMap::new(),
            by_path: HashMap::new(),
            next_ino: ROOT,
        };
        state.intern(PathBuf::new());
        Ok(LazyFs {
            backing: backing.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn full(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    /// The node's attributes: its open backing file's (it may be unlinked) or its path's,
    /// with the size its unsynced changes give it.
    fn stat(&self, st: &State, ino: u64) -> Result<FileAttr, Errno> {
        let node = st.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let m = match &node.file {
            Some(f) => f.metadata(),
            None if node.unlinked => return Err(Errno::ENOENT),
            None => std::fs::symlink_metadata(self.full(&node.path)),
        }
        .map_err(|e| errno(&e))?;
        let size = node.dirty.as_ref().map_or(m.len(), |d| d.size);
        Ok(attr(ino, &m, size))
    }

    fn child(&self, st: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        let node = st.nodes.get(&parent.0).ok_or(Errno::ENOENT)?;
        if node.unlinked {
            return Err(Errno::ENOENT);
        }
        Ok(node.path.join(name))
    }

    /// Opens the node's backing file if it is not open yet.
    fn ensure_file(&self, node: &mut Node) -> Result<(), Errno> {
        if node.file.is_none() {
            let full = self.full(&node.path);
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&full)
                .or_else(|_| File::open(&full))
                .map_err(|e| errno(&e))?;
            node.file = Some(file);
        }
        Ok(())
    }

    fn entry(&self, st: &mut State, path: PathBuf, reply: ReplyEntry) {
        if let Err(e) = std::fs::symlink_metadata(self.full(&path)) {
            return reply.error(errno(&e));
        }
        let ino = st.intern(path);
        match self.stat(st, ino) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// Drops every unsynced change (a power loss); returns what was dropped and the
    /// inodes whose kernel caches must go.
    pub fn clear_cache(&self) -> (Unsynced, Vec<u64>) {
        let mut st = self.lock();
        let mut dropped = Unsynced::default();
        let mut inos = Vec::new();
        for (ino, node) in &mut st.nodes {
            let Some(d) = node.dirty.take() else { continue };
            dropped.files += 1;
            dropped.bytes += d.bytes();
            dropped.truncations += u64::from(d.floor.is_some());
            inos.push(*ino);
            if node.opens == 0 {
                node.file = None;
            }
        }
        (dropped, inos)
    }

    /// What is unsynced now.
    pub fn unsynced(&self) -> Unsynced {
        let st = self.lock();
        let mut out = Unsynced::default();
        for d in st.nodes.values().filter_map(|n| n.dirty.as_ref()) {
            out.files += 1;
            out.bytes += d.bytes();
            out.truncations += u64::from(d.floor.is_some());
        }
        out
    }

    /// `unlink` and `rmdir`: `op` removes the entry from the backing directory at once
    /// (metadata is never held), then the node is forgotten.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        op: fn(PathBuf) -> std::io::Result<()>,
    ) {
        let mut st = self.lock();
        let path = match self.child(&st, parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match op(self.full(&path)) {
            Ok(()) => {
                st.forget_path(&path);
                reply.ok()
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.lock();
        match self.child(&st, parent, name) {
            Ok(path) => self.entry(&mut st, path, reply),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.lock();
        match self.stat(&st, ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.lock();
        let result = (|| {
            let node = st.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            let full = self.full(&node.path);
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                let perm = std::fs::Permissions::from_mode(mode & 0o7777);
                match &node.file {
                    Some(f) => f.set_permissions(perm),
                    None => std::fs::set_permissions(&full, perm),
                }
                .map_err(|e| errno(&e))?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&full, uid, gid).map_err(|e| errno(&e))?;
            }
            if let Some(size) = size {
                self.ensure_file(node)?;
                let file = node.file.as_ref().expect("ensured");
                let len = file.metadata().map_err(|e| errno(&e))?.len();
                node.dirty
                    .get_or_insert_with(|| Dirty::new(len))
                    .truncate(size);
            }
            if atime.is_some() || mtime.is_some() {
                let to_time = |t: TimeOrNow| match t {
                    TimeOrNow::SpecificTime(t) => t,
                    TimeOrNow::Now => SystemTime::now(),
                };
                let mut times = std::fs::FileTimes::new();
                if let Some(t) = atime {
                    times = times.set_accessed(to_time(t));
                }
                if let Some(t) = mtime {
                    times = times.set_modified(to_time(t));
                }
                let f = match &node.file {
                    Some(f) => f.try_clone(),
                    None => File::open(&full),
                }
                .map_err(|e| errno(&e))?;
                f.set_times(times).map_err(|e| errno(&e))?;
            }
            self.stat(&st, ino.0)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.lock();
        let Some(node) = st.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::read_link(self.full(&node.path)) {
            Ok(t) => reply.data(t.as_os_str().as_encoded_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        use std::os::unix::fs::DirBuilderExt;
        let mut st = self.lock();
        let path = match self.child(&st, parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let made = std::fs::DirBuilder::new()
            .mode(mode & !umask & 0o7777)
            .create(self.full(&path));
        match made {
            Ok(()) => self.entry(&mut st, path, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let mut st = self.lock();
        let path = match self.child(&st, parent, link_name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match std::os::unix::fs::symlink(target, self.full(&path)) {
            Ok(()) => self.entry(&mut st, path, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, std::fs::remove_file);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, std::fs::remove_dir);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let (from, to) = match (
            self.child(&st, parent, name),
            self.child(&st, newparent, newname),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if !flags.is_empty() {
            // RENAME_NOREPLACE / RENAME_EXCHANGE: not needed by the services run here.
            return reply.error(Errno::EINVAL);
        }
        if let Err(e) = std::fs::rename(self.full(&from), self.full(&to)) {
            return reply.error(errno(&e));
        }
        st.forget_path(&to);
        let moved: Vec<(PathBuf, u64)> = st
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(&from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, ino) in moved {
            st.by_path.remove(&old);
            let rest = old.strip_prefix(&from).expect("filtered");
            // `to.join("")` would end in a slash: the renamed node itself is `to`.
            let new = if rest.as_os_str().is_empty() {
                to.clone()
            } else {
                to.join(rest)
            };
            st.forget_path(&new);
            st.by_path.insert(new.clone(), ino);
            if let Some(node) = st.nodes.get_mut(&ino) {
                node.path = new;
            }
        }
        reply.ok()
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.lock();
        let Some(node) = st.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        match self.ensure_file(node) {
            Ok(()) => {
                node.opens += 1;
                // No FOPEN_KEEP_CACHE: each open drops the kernel's cached pages.
                reply.opened(FileHandle(ino.0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.lock();
        let path = match self.child(&st, parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .create_new(flags & libc::O_EXCL != 0)
            .mode(mode & !umask & 0o7777)
            .open(self.full(&path));
        let file = match file {
            Ok(f) => f,
            Err(e) => return reply.error(errno(&e)),
        };
        let ino = st.intern(path);
        let node = st.nodes.get_mut(&ino).expect("interned");
        node.opens += 1;
        if node.file.is_none() {
            node.file = Some(file);
        }
        if flags & libc::O_TRUNC != 0 {
            let len = node.dirty.as_ref().map_or(0, |d| d.size);
            node.dirty
                .get_or_insert_with(|| Dirty::new(len))
                .truncate(0);
        }
        match self.stat(&st, ino) {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(ino),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = self.lock();
        let Some(node) = st.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Err(e) = self.ensure_file(node) {
            return reply.error(e);
        }
        let file = node.file.as_ref().expect("ensured");
        let result = match &node.dirty {
            Some(d) => file
                .metadata()
                .and_then(|m| d.read(file, m.len(), offset, size)),
            None => {
                let mut buf = vec![0u8; size as usize];
                read_at_most(file, &mut buf, offset).map(|done| {
                    buf.truncate(done);
                    buf
                })
            }
        };
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.lock();
        let Some(node) = st.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if let Err(e) = self.ensure_file(node) {
            return reply.error(e);
        }
        if node.dirty.is_none() {
            let file = node.file.as_ref().expect("ensured");
            match file.metadata() {
                Ok(m) => node.dirty = Some(Dirty::new(m.len())),
                Err(e) => return reply.error(errno(&e)),
            }
        }
        node.dirty.as_mut().expect("set").write(offset, data);
        reply.written(data.len() as u32)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable.
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        if let Some(node) = st.nodes.get_mut(&ino.0) {
            node.opens = node.opens.saturating_sub(1);
            if node.opens == 0 && (node.dirty.is_none() || node.unlinked) {
                node.dirty = None;
                node.file = None;
            }
        }
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.lock();
        let Some(node) = st.nodes.get_mut(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(dirty) = node.dirty.take() else {
            return reply.ok();
        };
        let file = node.file.as_ref().expect("a dirty node keeps its file");
        match dirty.sync(file) {
            Ok(()) => {
                if node.opens == 0 {
                    node.file = None;
                }
                reply.ok()
            }
            Err(e) => {
                node.dirty = Some(dirty);
                reply.error(errno(&e))
            }
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty())
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.lock();
        let Some(node) = st.nodes.get(&ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let dir = node.path.clone();
        let parent = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let entries = match std::fs::read_dir(self.full(&dir)) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let mut list = vec![
            (ino.0, FileType::Directory, ".".into()),
            (st.intern(parent), FileType::Directory, "..".into()),
        ];
        let mut children: Vec<_> = entries
            .flatten()
            .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
            .collect();
        children.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in children {
            let kind = FileType::from_std(t).unwrap_or(FileType::RegularFile);
            list.push((st.intern(dir.join(&name)), kind, name));
        }
        for (i, (ino, kind, name)) in list.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Metadata goes through at once (module doc): nothing is pending.
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(path) = std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: statvfs fills the zeroed struct from a NUL-terminated path.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(&std::io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        )
    }
}

/// Whether this process can mount a FUSE file system, or why not: `/dev/fuse` must open
/// for reading and writing, and `mount(2)` needs root (no `fusermount3` fallback).
///
/// # Errors
/// What is missing.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("mounting the lossy file system (lazyfs, FUSE) needs root".into());
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("the lossy file system (lazyfs) needs /dev/fuse: {e}"))
}

/// `eosim lazyfs`: mounts [`LazyFs`] over `backing` at `mount` and serves `control` until
/// an `unmount` command (module doc).
///
/// # Errors
/// Mounting's or the control socket's, naming the paths.
pub fn serve(backing: &Path, mount: &Path, control: &Path) -> Result<(), String> {
    let fs = LazyFs::new(backing)?;
    let handle = fs.clone();
    let mut config = fuser::Config::default();
    config.mount_options = vec![MountOption::FSName("eosim-lazyfs".into())];
    let session = fuser::Session::new(fs, mount, &config)
        .and_then(fuser::Session::spawn)
        .map_err(|e| format!("lazyfs: mounting at {}: {e}", mount.display()))?;
    let notifier = session.notifier();
    let _ = std::fs::remove_file(control);
    let listener = UnixListener::bind(control)
        .map_err(|e| format!("lazyfs: control socket {}: {e}", control.display()))?;
    println!(
        "lazyfs: {} mounted at {}, control socket {}",
        backing.display(),
        mount.display(),
        control.display()
    );
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            continue;
        }
        let (answer, stop) = match line.trim() {
            "clear-cache" => {
                let (dropped, inos) = handle.clear_cache();
                for ino in inos {
                    // The kernel may have forgotten the inode (ENOENT): nothing cached.
                    let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
                }
                println!("lazyfs: clear-cache dropped {dropped:?}");
                (dropped.line(), false)
            }
            "stats" => (handle.unsynced().line(), false),
            "unmount" => ("ok".to_string(), true),
            other => (format!("error unknown command {other:?}"), false),
        };
        let _ = writeln!(stream, "{answer}");
        if stop {
            break;
        }
    }
    drop(listener);
    let _ = std::fs::remove_file(control);
    session
        .umount_and_join()
        .map_err(|e| format!("lazyfs: unmounting {}: {e}", mount.display()))
}

/// Sends `command` to the lazyfs control socket at `control`; its answer line.
fn ask(control: &Path, command: &str) -> Result<String, String> {
    let what = |e: std::io::Error| format!("lazyfs control {}: {command}: {e}", control.display());
    let mut stream = UnixStream::connect(control).map_err(what)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(what)?;
    writeln!(stream, "{command}").map_err(what)?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).map_err(what)?;
    let line = line.trim().to_string();
    if line.starts_with("ok") {
        Ok(line)
    } else {
        Err(format!(
            "lazyfs control {}: {command}: answered {line:?}",
            control.display()
        ))
    }
}

/// A running `eosim lazyfs` process and its mount; dropping it unmounts (through the
/// process, else `umount2(MNT_DETACH)`) and ends the process.
#[derive(Debug)]
pub struct LazyFsMount {
    mount: PathBuf,
    control: PathBuf,
    process: Option<ServiceProcess>,
}

impl LazyFsMount {
    /// Starts `exe lazyfs` (the eosim binary) as service `service`, mirroring `backing` at
    /// `mount` (an empty directory), its control socket at `control`, its output in `log`;
    /// returns once the socket answers.
    ///
    /// # Errors
    /// [`available`]'s, the spawn's, or the process's exit or silence within 10 s, naming
    /// its log.
    pub fn start(
        exe: &Path,
        service: &str,
        backing: &Path,
        mount: &Path,
        control: &Path,
        log: &Path,
    ) -> Result<LazyFsMount, String> {
        available()?;
        let arg = |p: &Path| p.display().to_string();
        let launch = Launch {
            service: service.to_string(),
            program: exe.to_path_buf(),
            args: vec![
                "lazyfs".into(),
                "--backing".into(),
                arg(backing),
                "--mount".into(),
                arg(mount),
                "--control".into(),
                arg(control),
            ],
            env: Vec::new(),
            cwd: backing.to_path_buf(),
            log_path: log.to_path_buf(),
            user: None,
            container: None,
        };
        let process = ServiceProcess::spawn(launch).map_err(|e| e.to_string())?;
        let mut me = LazyFsMount {
            mount: mount.to_path_buf(),
            control: control.to_path_buf(),
            process: Some(process),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if me.stats().is_ok() {
                return Ok(me);
            }
            let exited = me.process.as_mut().and_then(|p| p.exit_status());
            if exited.is_some() || Instant::now() > deadline {
                let why = exited.map_or("no answer in 10 s".to_string(), |s| format!("exited {s}"));
                return Err(format!(
                    "{service}: lazyfs at {} did not come up ({why}); log {}{}",
                    mount.display(),
                    log.display(),
                    super::log_tail(log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Drops every unsynced write (the page cache lost with the machine); what was dropped.
    ///
    /// # Errors
    /// The control socket's.
    pub fn clear_cache(&self) -> Result<Unsynced, String> {
        let line = ask(&self.control, "clear-cache")?;
        Unsynced::parse(&line).ok_or_else(|| format!("lazyfs: clear-cache answered {line:?}"))
    }

    /// What is unsynced now.
    ///
    /// # Errors
    /// The control socket's.
    pub fn stats(&self) -> Result<Unsynced, String> {
        let line = ask(&self.control, "stats")?;
        Unsynced::parse(&line).ok_or_else(|| format!("lazyfs: stats answered {line:?}"))
    }

    /// The mount point.
    pub fn mount_point(&self) -> &Path {
        &self.mount
    }

    /// Unmounts and ends the process (also on drop).
    pub fn unmount(&mut self) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        let asked = ask(&self.control, "unmount").is_ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while asked && process.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if process.is_running() {
            process.kill();
        }
        detach(&self.mount);
    }
}

impl Drop for LazyFsMount {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// `umount2(path, MNT_DETACH)` if `path` is still a FUSE mount point of ours (after its
/// process died, the mount is left "not connected"); a path that is not mounted is left.
pub fn detach(path: &Path) {
    if !mount_points().iter().any(|m| m == path) {
        return;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: umount2 with a NUL-terminated path; failure only leaves the mount.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

/// Mount points of this process's mount namespace (`/proc/self/mountinfo`, field 5, its
/// octal escapes undone).
pub fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .collect()
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount under `dir` (deepest first): a killed lazyfs leaves its mount
/// behind, and removing the directory would stop there.
pub fn detach_all_under(dir: &Path) {
    let mut under: Vec<PathBuf> = mount_points()
        .into_iter()
        .filter(|m| m.starts_with(dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in under {
        detach(&m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backed(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut t = tempfile::NamedTempFile::new().unwrap();
        t.write_all(bytes).unwrap();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(t.path())
            .unwrap();
        (t, f)
    }

    #[test]
    fn unsynced_writes_overlay_the_backing_file_and_sync_through() {
        let (_t, f) = backed(b"0123456789");
        let mut d = Dirty::new(10);
        d.write(8, b"abcd");
        d.write(2, b"XY");
        d.write(3, b"Z");
        assert_eq!(d.read(&f, 10, 0, 100).unwrap(), b"01XZ4567abcd");
        assert_eq!(d.bytes(), 6);
        d.truncate(4);
        d.truncate(6);
        assert_eq!(d.read(&f, 10, 0, 100).unwrap(), b"01XZ\0\0");
        d.sync(&f).unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut File::open(_t.path()).unwrap(), &mut back).unwrap();
        assert_eq!(back, b"01XZ\0\0");
    }

    #[test]
    fn sequential_appends_make_one_extent() {
        let mut d = Dirty::new(0);
        for i in 0..100u64 {
            d.write(i * 3, b"abc");
        }
        assert_eq!(d.extents.len(), 1);
        assert_eq!(d.size, 300);
    }

    #[test]
    fn control_answers_parse() {
        let u = Unsynced {
            files: 2,
            bytes: 30,
            truncations: 1,
        };
        assert_eq!(Unsynced::parse(&u.line()), Some(u));
        assert_eq!(unescape_octal("/tmp/a\\040b"), "/tmp/a b");
    }

    /// Mounts a [`LazyFs`] in this process (root and /dev/fuse needed: skipped otherwise)
    /// and checks the power loss: an unsynced write is gone after `clear_cache`, a synced
    /// one stays, through the mount and on the backing directory.
    #[test]
    fn clear_cache_drops_unsynced_writes_and_keeps_synced_ones() {
        if let Err(why) = available() {
            eprintln!("skipped: {why}");
            return;
        }
        let backing = tempfile::tempdir().unwrap();
        let mount = tempfile::tempdir().unwrap();
        std::fs::write(backing.path().join("old"), b"durable").unwrap();
        let fs = LazyFs::new(backing.path()).unwrap();
        let handle = fs.clone();
        let session = fuser::Session::new(fs, mount.path(), &fuser::Config::default())
            .and_then(fuser::Session::spawn)
            .unwrap();
        let notifier = session.notifier();
        let m = mount.path();
        let clear = || {
            let (dropped, inos) = handle.clear_cache();
            for ino in inos {
                let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
            }
            dropped
        };
        // Unsynced: a new file's data, an append to an old one, a truncation.
        std::fs::write(m.join("lost"), b"unsynced").unwrap();
        let mut old = OpenOptions::new().append(true).open(m.join("old")).unwrap();
        old.write_all(b" + unsynced").unwrap();
        drop(old);
        assert_eq!(std::fs::read(m.join("old")).unwrap(), b"durable + unsynced");
        assert_eq!(
            std::fs::read(backing.path().join("old")).unwrap(),
            b"durable"
        );
        // Synced: written, then fsynced.
        let mut kept = File::create(m.join("kept")).unwrap();
        kept.write_all(b"synced").unwrap();
        kept.sync_all().unwrap();
        drop(kept);
        // A checkpoint's pattern (Kafka's quorum-state, its offset checkpoints): a synced
        // temporary file renamed over the old one, twice.
        for text in [&b"first"[..], b"second"] {
            let mut tmp = File::create(m.join("state.tmp")).unwrap();
            tmp.write_all(text).unwrap();
            tmp.sync_all().unwrap();
            drop(tmp);
            std::fs::rename(m.join("state.tmp"), m.join("state")).unwrap();
            assert_eq!(std::fs::read(m.join("state")).unwrap(), text);
        }
        let dropped = clear();
        assert_eq!((dropped.files, dropped.bytes), (2, 19));
        assert_eq!(std::fs::read(m.join("state")).unwrap(), b"second");
        assert_eq!(std::fs::read(m.join("lost")).unwrap(), b"");
        assert_eq!(std::fs::read(m.join("old")).unwrap(), b"durable");
        assert_eq!(std::fs::read(m.join("kept")).unwrap(), b"synced");
        // A shared writable mmap written and msynced reaches the disk (Kafka's indexes).
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.join("kept"))
            .unwrap();
        // SAFETY: a shared mapping of 6 bytes of an open file, unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                6,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(b"SYNCED".as_ptr(), p.cast::<u8>(), 6);
            assert_eq!(libc::msync(p, 6, libc::MS_SYNC), 0);
            libc::munmap(p, 6);
        }
        drop(f);
        assert_eq!(clear().files, 0);
        assert_eq!(
            std::fs::read(backing.path().join("kept")).unwrap(),
            b"SYNCED"
        );
        session.umount_and_join().unwrap();
    }
}

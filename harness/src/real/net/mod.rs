//! Network faults on real services: full and one-way partitions and clogs between any two
//! processes of a native run (brokers, `eosim worker`s, PostgreSQL, ClickHouse, ZooKeeper),
//! as nftables rules that drop their packets on loopback; and message faults (a request
//! dropped, delayed or duplicated, a response lost) through a proxy in front of a server's
//! listener ([`proxy`]), which tells its clients apart by the same cgroups
//! ([`node_of_connection`]).
//!
//! # Design
//! Everything stays on loopback, as the rest of the native backend does. Each process the
//! run starts is placed in a cgroup v2 of its own, named by the simulation's node name
//! ([`cgroup`]; a service's `kafka-N` is node `broker-N`, ZooKeeper is `keeper`), and one
//! nftables table `inet eosim_<pid>` tells the processes apart by their sockets' cgroups
//! and listening ports and drops what a cut link carries, at the receiver's input hook
//! ([`rules`]), as Jepsen's `iptables` partitions do (`jepsen/src/jepsen/net.clj`). The
//! other design, a network namespace per process with veth pairs, would need every
//! service, client configuration and advertised listener moved off `127.0.0.1`; this one
//! drops the same packets (TCP segments of the run's processes, both directions of a full
//! cut) without touching them. `tc netem` is not available on these kernels.
//!
//! A one-way cut `a → b` drops what `a` sends to `b` and lets `b`'s packets through; over
//! TCP a connection needs both, so its effect on a connection is that of a full cut after
//! the retransmissions (a connection `b` opens to `a` sees its SYN-ACKs dropped; one `a`
//! opens to `b` is established but its data is never acknowledged), as on a real network.
//! Packets of eosim itself (its admin client, the drain's probes, the final reads) are not
//! in any node's cgroup and are never dropped: a clog isolates a node from the run's other
//! processes, not from the bench.
//!
//! # Evidence
//! Each drop rule counts its packets; [`Network::heal`] returns the packets each cut link
//! dropped, which the runner records as the fault's effect ([`eosim_sim::effects::kind`]'s
//! `PARTITION`, `CLOG`), so a cut between processes that never talked has no effect and a
//! `holds` under it is *not exercised*.
//!
//! # Requirements and cleanup
//! Root, `nft` (Debian's `nftables`), and cgroup v2 mounted under `/sys/fs/cgroup`
//! ([`Network::open`] names what is missing; the runner then notes every network fault as
//! not injected, with that reason). The table and the cgroups are removed when the
//! [`Network`] drops, on Ctrl-C / SIGTERM through the process teardown
//! ([`teardown_active`]), and at the next open when a SIGKILLed run left them.

pub mod cgroup;
pub mod proxy;
pub mod rules;

use cgroup::CgroupTree;
use rules::{Cut, Endpoint};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The run whose processes are placed in cgroups: its cgroup directory, table and `nft`.
struct Active {
    dir: PathBuf,
    table: String,
    nft: PathBuf,
}

/// At most one network-faulted run per eosim process (a run is one scenario).
static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

/// The node name of a service process (`kafka-2` → `broker-2`, `zookeeper` → `keeper`, as
/// the simulation names them; a dedicated controller `kafka-controller` → `controller`); a
/// worker's name is its node's.
pub fn node_of_service(service: &str) -> String {
    if service == "kafka-controller" {
        // A dedicated KRaft controller: no node of the simulation, so no fault cuts it.
        return "controller".into();
    }
    if let Some(n) = service.strip_prefix("kafka-") {
        return format!("broker-{n}");
    }
    match service {
        "zookeeper" => "keeper".into(),
        other => other.into(),
    }
}

/// The cgroup directory a process of `service` joins when a network-faulted run is active
/// (made if missing), else `None`.
///
/// # Errors
/// The OS's, when the directory cannot be made (the process must not start outside it:
/// its link could then not be cut).
pub fn placement(service: &str) -> Result<Option<PathBuf>, String> {
    let active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(active) = active.as_ref() else {
        return Ok(None);
    };
    let dir = active.dir.join(node_of_service(service));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
    Ok(Some(dir))
}

/// Deletes the active run's table (for the Ctrl-C teardown, after the processes are
/// killed, and before their cgroups are removed); returns whether there was one.
pub fn teardown_active() -> bool {
    let taken = ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(active) = taken else {
        return false;
    };
    let _ = delete_table(&active.nft, &active.table);
    let _ = std::fs::read_dir(&active.dir).map(|entries| {
        for e in entries.filter_map(|e| e.ok()) {
            let _ = std::fs::remove_dir(e.path());
        }
    });
    let _ = std::fs::remove_dir(&active.dir);
    true
}

fn delete_table(nft: &Path, table: &str) -> Result<(), String> {
    nft_run(nft, &["delete", "table", "inet", table], None).map(|_| ())
}

/// Runs `nft args` (with `stdin` fed when given); its stdout.
fn nft_run(nft: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let mut child = Command::new(nft)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", nft.display()))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{} stdin: {e}", nft.display()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", nft.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`nft {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `nft` on `PATH` or in `/usr/sbin`, `/sbin` (root's usual places, often not on a user's
/// `PATH`).
fn find_nft() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("nft"))
        .find(|p| p.is_file())
}

/// Whether `pid` is a live process.
fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The TCP ports in state LISTEN of `/proc/net/tcp` / `tcp6`'s text, by socket inode
/// (proc(5): `local_address` is `ADDR:PORT` in hex, `st` `0A` is LISTEN, `inode` the 10th
/// field).
pub fn listening_ports_by_inode(tables: &[String]) -> BTreeMap<u64, u16> {
    let mut out = BTreeMap::new();
    for line in tables.iter().flat_map(|t| t.lines().skip(1)) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let port = f[1]
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        if let (Some(port), Ok(inode)) = (port, f[9].parse::<u64>()) {
            out.insert(inode, port);
        }
    }
    out
}

/// The TCP ports `pids` listen on: their open sockets (`/proc/<pid>/fd/*` → `socket:[N]`)
/// that `/proc/net/tcp{,6}` lists as LISTEN.
fn listening_ports(pids: &[i32]) -> BTreeSet<u16> {
    if pids.is_empty() {
        return BTreeSet::new();
    }
    let tables: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let by_inode = listening_ports_by_inode(&tables);
    let mut out = BTreeSet::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|l| l.parse::<u64>().ok());
            if let Some(port) = inode.and_then(|i| by_inode.get(&i)) {
                out.insert(*port);
            }
        }
    }
    out
}

/// The node whose process holds the client end of a loopback connection from
/// `client_port` to `server_port` (its socket inode from `/proc/net/tcp{,6}`, then the
/// processes of each node cgroup of the active run); `None` when no run is active or the
/// client is in no node (eosim itself).
pub fn node_of_connection(client_port: u16, server_port: u16) -> Option<String> {
    let dir = ACTIVE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|a| a.dir.clone())?;
    let tables: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let inode = socket_inode(&tables, client_port, server_port)?;
    let wanted = format!("socket:[{inode}]");
    for node in std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok()) {
        let procs = std::fs::read_to_string(node.path().join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{}/fd", pid.trim())) else {
                continue;
            };
            let holds = fds
                .filter_map(|e| e.ok())
                .filter_map(|fd| std::fs::read_link(fd.path()).ok())
                .any(|l| l.to_str() == Some(wanted.as_str()));
            if holds {
                return node.file_name().to_str().map(str::to_string);
            }
        }
    }
    None
}

/// The inode of the socket bound to `local_port` and connected to `remote_port` in
/// `/proc/net/tcp` / `tcp6`'s text (proc(5)).
pub fn socket_inode(tables: &[String], local_port: u16, remote_port: u16) -> Option<u64> {
    let port = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    tables
        .iter()
        .flat_map(|t| t.lines().skip(1))
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 10 && port(f[1]) == Some(local_port) && port(f[2]) == Some(remote_port))
                .then(|| f[9].parse().ok())
                .flatten()
        })
}

/// The packets one cut link dropped while it was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The link and the fault kind that cut it.
    pub cut: Cut,
    /// Packets dropped.
    pub packets: u64,
}

/// A run's network faults: its cgroups, its nftables table, the links cut now and the
/// packets they dropped so far.
#[derive(Debug)]
pub struct Network {
    nft: PathBuf,
    table: String,
    tree: CgroupTree,
    /// Each node's listening ports seen so far (a node that is down keeps the ones it had).
    ports: BTreeMap<String, BTreeSet<u16>>,
    cuts: BTreeSet<Cut>,
    /// Packets dropped per link since the last heal, from tables replaced since.
    dropped: BTreeMap<(String, String, String), u64>,
    /// Whether this is the process's active run ([`placement`]), set once open succeeded.
    registered: bool,
}

impl Network {
    /// Checks what network faults need (root, `nft`, cgroup v2 under `/sys/fs/cgroup`,
    /// an nftables kernel that loads a `socket cgroupv2` rule), removes what SIGKILLed
    /// runs left (tables `eosim_<pid>` and cgroups `eosim-<pid>` of dead pids), makes this
    /// run's cgroup directory and table, and places every process started from now on in
    /// its node's cgroup ([`placement`]).
    ///
    /// # Errors
    /// What is missing, named: not root, no `nft`, no cgroup v2 (or one `nft` cannot
    /// name), rules the kernel refuses (with `nft`'s message), another run active in this
    /// process.
    pub fn open() -> Result<Self, String> {
        // Held until this run is registered: a second open in this process must not touch
        // the table and cgroups (named by the pid) of the first.
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if active.is_some() {
            return Err("network faults: another run of this process holds them".into());
        }
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(format!(
                "network faults need root (nftables rules and cgroups); eosim runs as uid {euid}"
            ));
        }
        let nft = find_nft().ok_or(
            "network faults need `nft` (Debian package `nftables`), found neither on PATH \
             nor in /usr/sbin, /sbin",
        )?;
        let mounts = std::fs::read_to_string("/proc/self/mounts")
            .map_err(|e| format!("network faults: /proc/self/mounts: {e}"))?;
        let mount = cgroup::cgroup2_mount(&mounts).map_err(|e| format!("network faults: {e}"))?;
        sweep_tables(&nft);
        cgroup::sweep_leftovers(&mount, alive);
        let tree = CgroupTree::create(&mount).map_err(|e| format!("network faults: {e}"))?;
        let table = format!("eosim_{}", std::process::id());
        let mut net = Self {
            nft,
            table,
            tree,
            ports: BTreeMap::new(),
            cuts: BTreeSet::new(),
            dropped: BTreeMap::new(),
            registered: false,
        };
        // A rule of each kind the faults use, on a node of its own, before anything runs.
        net.tree.node_dir("probe")?;
        net.load(&["probe".to_string()])
            .map_err(|e| format!("network faults: the kernel refused the rules: {e}"))?;
        *active = Some(Active {
            dir: net.tree_dir(),
            table: net.table.clone(),
            nft: net.nft.clone(),
        });
        net.registered = true;
        Ok(net)
    }

    fn tree_dir(&self) -> PathBuf {
        self.tree
            .mount()
            .join(format!("eosim-{}", std::process::id()))
    }

    /// The table's name (`eosim_<pid>`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Cuts `cuts` (on top of those in force) among `nodes`, the run's processes by node
    /// name; the table is replaced in one transaction.
    ///
    /// # Errors
    /// A cut naming a node not in `nodes`; `nft`'s error.
    pub fn cut(&mut self, nodes: &[String], cuts: Vec<Cut>) -> Result<(), String> {
        self.collect_counts()?;
        let before = self.cuts.clone();
        self.cuts.extend(cuts);
        let loaded = self.load(nodes);
        if loaded.is_err() {
            self.cuts = before;
        }
        loaded
    }

    /// Heals every cut; returns each link cut since the last heal with the packets it
    /// dropped (zero for a link nothing crossed).
    ///
    /// # Errors
    /// `nft`'s error (the table then stays as it was).
    pub fn heal(&mut self, nodes: &[String]) -> Result<Vec<Dropped>, String> {
        if self.cuts.is_empty() {
            return Ok(Vec::new());
        }
        self.collect_counts()?;
        let cuts = std::mem::take(&mut self.cuts);
        if let Err(e) = self.load(nodes) {
            self.cuts = cuts;
            return Err(e);
        }
        let mut dropped = std::mem::take(&mut self.dropped);
        Ok(cuts
            .into_iter()
            .map(|cut| {
                let key = (cut.kind.to_string(), cut.from.clone(), cut.to.clone());
                let packets = dropped.remove(&key).unwrap_or(0);
                Dropped { cut, packets }
            })
            .collect())
    }

    /// Adds `ports` to `node`'s listening ports (a proxy's, which listens for it in eosim).
    pub fn add_ports(&mut self, node: &str, ports: &[u16]) {
        self.ports
            .entry(node.to_string())
            .or_default()
            .extend(ports.iter().copied());
    }

    /// Whether a link is cut now.
    pub fn is_cut(&self) -> bool {
        !self.cuts.is_empty()
    }

    /// Adds the current table's drop counters to `dropped`.
    fn collect_counts(&mut self) -> Result<(), String> {
        if self.cuts.is_empty() {
            return Ok(());
        }
        let json = nft_run(
            &self.nft,
            &["-j", "list", "table", "inet", &self.table],
            None,
        )?;
        for (key, packets) in rules::drop_counts(&json)? {
            *self.dropped.entry(key).or_insert(0) += packets;
        }
        Ok(())
    }

    /// Loads the table for `nodes` with the cuts in force, their listening ports read
    /// from their cgroups' processes now (added to those seen before).
    fn load(&mut self, nodes: &[String]) -> Result<(), String> {
        let mut endpoints = Vec::with_capacity(nodes.len());
        for name in nodes {
            let seen = self.ports.entry(name.clone()).or_default();
            seen.extend(listening_ports(&self.tree.pids(name)));
            endpoints.push(Endpoint {
                name: name.clone(),
                cgroup: self.tree.nft_path(name),
                ports: seen.iter().copied().collect(),
            });
        }
        let cuts: Vec<Cut> = self.cuts.iter().cloned().collect();
        let text = rules::ruleset(&self.table, cgroup::LEVEL, &endpoints, &cuts)?;
        nft_run(&self.nft, &["-f", "-"], Some(&text)).map(|_| ())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // An open that failed half way holds the lock itself and registered nothing.
        if self.registered {
            *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        if let Err(e) = delete_table(&self.nft, &self.table) {
            eprintln!("eosim: network faults: {e}");
        }
        // The cgroups go when `tree` drops, after this.
    }
}

/// Deletes the tables `eosim_<pid>` whose eosim process is gone (a SIGKILLed run's).
fn sweep_tables(nft: &Path) {
    let Ok(list) = nft_run(nft, &["list", "tables"], None) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.trim().strip_prefix("table inet ") else {
            continue;
        };
        let dead = name
            .strip_prefix("eosim_")
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| !alive(pid));
        if dead {
            let _ = delete_table(nft, name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_are_named_as_the_simulations_nodes() {
        assert_eq!(node_of_service("kafka-3"), "broker-3");
        assert_eq!(node_of_service("zookeeper"), "keeper");
        assert_eq!(node_of_service("postgres"), "postgres");
        assert_eq!(node_of_service("connect-1"), "connect-1");
    }

    #[test]
    fn listening_ports_are_read_from_proc_net_tcp() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:9C40 0100007F:2384 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0000000000000000 20 4 30 10 -1\n"
            .to_string();
        assert_eq!(
            socket_inode(std::slice::from_ref(&tcp), 0x9C40, 0x2384),
            Some(4343)
        );
        assert_eq!(
            socket_inode(std::slice::from_ref(&tcp), 0x9C40, 0x2385),
            None
        );
        let ports = listening_ports_by_inode(&[tcp]);
        assert_eq!(ports.len(), 1, "only LISTEN (0A) sockets: {ports:?}");
        assert_eq!(ports[&4242], 0x2384);
    }
}

//! Child processes of the native backend: one process group each, logs to a file, faults by
//! signal, and nothing left behind. A [`Launch`] with a container spec runs as a container
//! instead ([`super::container`]), behind the same [`ServiceProcess`] methods.
//!
//! Every service process is spawned in a process group of its own (`setpgid(0, 0)`), so one
//! `killpg` reaches the server and whatever it forked into that group. Descendants that left
//! the group are signalled too (`signal_tree`): PostgreSQL's backends do, each calling
//! `setsid()` in `InitPostmasterChild` (`src/backend/utils/init/miscinit.c`), so a killpg of
//! the postmaster alone leaves them running, attached to the shared memory the restarted
//! postmaster then refuses to reuse, and a SIGSTOP of the group pauses the postmaster while
//! its backends go on serving their connections. Live
//! groups are kept in a process-wide registry; [`install_teardown_on_signal`] makes Ctrl-C,
//! SIGTERM and SIGHUP kill every registered group before the process exits, and
//! [`ServiceProcess`]'s `Drop` kills its group on every other exit path (return, `?`, panic
//! unwinding). The one exit path no handler sees is a SIGKILL of eosim itself (a CI
//! timeout, `kill -9`): for that, each group has a watchdog, a small `sh` outside it that
//! polls this process once a second and SIGKILLs the group once this process is gone
//! (`watch_group`); it is stopped whenever the group is killed or reaped here.

use super::container::ContainerProcess;
pub use super::launch::Launch;
use super::ProvisionError;
use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// Process groups that are alive and owned by this process.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
static TEARDOWN: Once = Once::new();

/// Exit code after a teardown on a signal: 128 + SIGINT, as a shell reports Ctrl-C.
pub const EXIT_CODE_SIGNALLED: i32 = 130;

/// Installs (once per process) a Ctrl-C / SIGTERM / SIGHUP handler that kills every live
/// service process group and exits with [`EXIT_CODE_SIGNALLED`]. Service constructors call
/// it; calling it again is a no-op. If the program installed its own `ctrlc` handler first,
/// this one is not installed and [`kill_all_live_groups`] is the program's to call.
pub fn install_teardown_on_signal() {
    TEARDOWN.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            let killed = kill_all_live_groups() + super::container::remove_all_live();
            let removed = super::scratch::remove_own().len();
            // After the kills: the cgroups must be empty to go.
            super::net::teardown_active();
            eprintln!(
                "eosim: signal received, killed {killed} service process group(s) and \
                 container(s), removed {removed} scratch directory(ies)"
            );
            std::process::exit(EXIT_CODE_SIGNALLED);
        });
        if let Err(e) = installed {
            eprintln!("eosim: no teardown on Ctrl-C: {e}");
        }
    });
}

/// Sends SIGKILL to every registered process group; returns how many there were.
pub fn kill_all_live_groups() -> usize {
    let groups: Vec<i32> = match LIVE_GROUPS.lock() {
        Ok(mut g) => std::mem::take(&mut *g).into_iter().collect(),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner())
            .into_iter()
            .collect(),
    };
    for pgid in &groups {
        signal_tree(*pgid, libc::SIGKILL);
    }
    // Reap the group leaders (our children), so that none is left as a zombie when this
    // process exits and nobody reaps them (pid 1 of a container may not).
    let deadline = Instant::now() + Duration::from_secs(5);
    for pgid in &groups {
        // SAFETY: waitpid on our own child's pid with a null status pointer.
        while unsafe { libc::waitpid(*pgid, std::ptr::null_mut(), libc::WNOHANG) } == 0
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    groups.len()
}

/// The process groups currently registered (for tests that check nothing is left behind).
pub fn live_groups() -> Vec<i32> {
    LIVE_GROUPS
        .lock()
        .map(|g| g.iter().copied().collect())
        .unwrap_or_default()
}

pub(crate) fn register(pgid: i32) {
    if let Ok(mut g) = LIVE_GROUPS.lock() {
        g.insert(pgid);
    }
}

pub(crate) fn unregister(pgid: i32) {
    if let Ok(mut g) = LIVE_GROUPS.lock() {
        g.remove(&pgid);
    }
}

pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: killpg has no memory-safety preconditions; pgid > 1 is checked so that a bad
    // value can never address every process of the user (pgid 0 = our own group).
    pgid > 1 && unsafe { libc::killpg(pgid, signal) } == 0
}

/// The pids of `root`'s descendants (children, theirs, ...), from the ppid field of each
/// `/proc/<pid>/stat` (proc(5)); empty where `/proc` cannot be read.
fn descendants(root: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(i32, i32)> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, proc_stat(pid)?.1)))
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == parent && !out.contains(&pid) {
                out.push(pid);
                frontier.push(pid);
            }
        }
    }
    out
}

/// `(state, ppid)` of `/proc/<pid>/stat`: the fields after the parenthesised command name,
/// which may itself hold spaces and parentheses.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Whether `pid` is a live process (a zombie is not: it only waits to be reaped, by a
/// parent that may never do it once the service it belonged to is gone).
fn process_alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Sends `signal` to group `pgid` and to every descendant of its leader that left the group
/// (see the module docs); returns those descendants. They are listed before the group is
/// signalled, so a SIGKILL that orphans them does not hide them.
pub(crate) fn signal_tree(pgid: i32, signal: i32) -> Vec<i32> {
    let strays: Vec<i32> = descendants(pgid)
        .into_iter()
        // SAFETY: getpgid has no memory-safety preconditions.
        .filter(|&pid| unsafe { libc::getpgid(pid) } != pgid)
        .collect();
    signal_group(pgid, signal);
    for &pid in &strays {
        // SAFETY: kill has no memory-safety preconditions; each pid is > 1 (a descendant).
        unsafe { libc::kill(pid, signal) };
    }
    strays
}

/// Waits until every thread of process `pid` is stopped (state `T` or `t` in
/// `/proc/<pid>/task/*/stat`, proc(5)), polling every 5 ms for at most `max`; whether it
/// got there. `kill(SIGSTOP)` returns when the signal is queued, not when each thread of
/// a busy server has taken it, so a request sent right after could still be served.
fn wait_stopped(pid: i32, max: Duration) -> bool {
    let stopped = || -> Option<bool> {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        for task in tasks {
            let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
            // The state follows the parenthesised command name, which may hold spaces.
            let state = stat.rsplit_once(") ")?.1.chars().next()?;
            if state != 'T' && state != 't' {
                return Some(false);
            }
        }
        Some(true)
    };
    let deadline = Instant::now() + max;
    loop {
        match stopped() {
            Some(true) => return true,
            None => return false,
            Some(false) if Instant::now() >= deadline => return false,
            Some(false) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Whether any process of group `pgid` still exists (zombies included until reaped).
pub fn group_exists(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    pgid > 1 && unsafe { libc::killpg(pgid, 0) } == 0
}

/// `launch` as a child process: its own process group, output appended to its log.
fn native_command(launch: &Launch) -> Result<Command, ProvisionError> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(&launch.log_path)
        .map_err(|e| ProvisionError::io(&launch.service, &launch.log_path, e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| ProvisionError::io(&launch.service, &launch.log_path, e))?;
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .process_group(0);
    // A network-faulted run places the process in its node's cgroup (taking its user
    // there too); otherwise std drops to the user.
    let placement =
        super::net::placement(&launch.service).map_err(|reason| ProvisionError::Spawn {
            service: launch.service.clone(),
            program: launch.program.clone(),
            reason,
        })?;
    match placement {
        Some(dir) => {
            super::net::cgroup::join_in_child(&mut cmd, &dir, launch.user).map_err(|reason| {
                ProvisionError::Spawn {
                    service: launch.service.clone(),
                    program: launch.program.clone(),
                    reason,
                }
            })?
        }
        None => {
            if let Some((uid, gid)) = launch.user {
                cmd.uid(uid).gid(gid);
            }
        }
    }
    Ok(cmd)
}

/// One running service process, leader of its own process group; or, for a [`Launch`]
/// with a container spec, one container ([`ContainerProcess`]), which every method below
/// drives instead.
#[derive(Debug)]
pub struct ServiceProcess {
    launch: Launch,
    child: Option<Child>,
    container: Option<ContainerProcess>,
    paused: bool,
    watchdog: Option<Child>,
}

impl ServiceProcess {
    /// Spawns `launch` in a new process group and registers the group for teardown.
    ///
    /// # Errors
    /// [`ProvisionError::Spawn`] when the program cannot be started.
    pub fn spawn(launch: Launch) -> Result<Self, ProvisionError> {
        install_teardown_on_signal();
        let mut p = Self {
            launch,
            child: None,
            container: None,
            paused: false,
            watchdog: None,
        };
        p.start()?;
        Ok(p)
    }

    fn start(&mut self) -> Result<(), ProvisionError> {
        if let Some(spec) = &self.launch.container {
            match &mut self.container {
                Some(c) => c.restart(&self.launch)?,
                None => self.container = Some(ContainerProcess::start(&self.launch, spec)?),
            }
            self.paused = false;
            return Ok(());
        }
        let child = native_command(&self.launch)?
            .spawn()
            .map_err(|e| ProvisionError::Spawn {
                service: self.launch.service.clone(),
                program: self.launch.program.clone(),
                reason: e.to_string(),
            })?;
        register(child.id() as i32);
        self.stop_watchdog();
        self.watchdog = watch_group(child.id() as i32);
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Stops the group's watchdog (the group is gone, or about to be restarted).
    fn stop_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    /// The service's name.
    pub fn service(&self) -> &str {
        &self.launch.service
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.launch.log_path
    }

    /// Process id (= process group id) while running; a container's first process.
    pub fn pid(&self) -> Option<i32> {
        if let Some(c) = &self.container {
            return c.pid();
        }
        self.child.as_ref().map(|c| c.id() as i32)
    }

    /// The container, when the service runs in one.
    pub fn container(&self) -> Option<&ContainerProcess> {
        self.container.as_ref()
    }

    /// Whether the process is running (or stopped by [`pause`](Self::pause)); reaps it if
    /// it has exited.
    pub fn is_running(&mut self) -> bool {
        if let Some(c) = &self.container {
            return c.is_running();
        }
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.forget_exited();
                false
            }
            None => false,
        }
    }

    /// The exit status text if the process has exited on its own (for error messages).
    pub fn exit_status(&mut self) -> Option<String> {
        if let Some(c) = &self.container {
            return c.exit_status();
        }
        let status = self.child.as_mut()?.try_wait().ok()??;
        Some(status.to_string())
    }

    fn forget_exited(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as i32;
            // Children the server forked may outlive it; they share its group.
            signal_group(pgid, libc::SIGKILL);
            let _ = child.wait();
            unregister(pgid);
        }
        self.stop_watchdog();
    }

    /// SIGKILL to the whole process tree (`signal_tree`), then reaps it: a crash, nothing
    /// flushed.
    pub fn kill(&mut self) {
        if let Some(c) = &mut self.container {
            c.kill();
            self.paused = false;
            return;
        }
        if let Some(mut child) = self.child.take() {
            let pgid = child.id() as i32;
            let strays = signal_tree(pgid, libc::SIGKILL);
            let _ = child.wait();
            wait_group_gone(pgid, Duration::from_secs(5));
            wait_gone(&strays, Duration::from_secs(5));
            unregister(pgid);
        }
        self.stop_watchdog();
        self.paused = false;
    }

    /// Graceful stop: `signal` (SIGTERM, or SIGINT for PostgreSQL's fast shutdown) to the
    /// group, SIGKILL after `grace`.
    pub fn stop(&mut self, signal: i32, grace: Duration) {
        self.begin_stop(signal);
        self.finish_stop(Instant::now() + grace);
    }

    /// Sends the stop `signal` to the group (after SIGCONT if paused) without waiting, so
    /// that several services can shut down at once; [`finish_stop`](Self::finish_stop)
    /// waits.
    pub fn begin_stop(&mut self, signal: i32) {
        if let Some(c) = &self.container {
            c.resume();
            c.signal(signal);
            self.paused = false;
            return;
        }
        let Some(pgid) = self.pid() else { return };
        if self.paused {
            signal_group(pgid, libc::SIGCONT);
            self.paused = false;
        }
        signal_group(pgid, signal);
    }

    /// Waits until the process has exited, SIGKILLs its group at `deadline`.
    pub fn finish_stop(&mut self, deadline: Instant) {
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// Starts the same command again after [`kill`](Self::kill) or [`stop`](Self::stop).
    ///
    /// # Errors
    /// [`ProvisionError::Spawn`]; [`ProvisionError::StillRunning`] if it was never stopped.
    pub fn restart(&mut self) -> Result<(), ProvisionError> {
        if self.is_running() {
            return Err(ProvisionError::StillRunning {
                service: self.launch.service.clone(),
            });
        }
        self.start()
    }

    /// SIGSTOP to the process tree (`signal_tree`): the service stops answering but keeps
    /// its sockets open.
    pub fn pause(&mut self) {
        if let Some(c) = &self.container {
            c.pause();
            self.paused = true;
            return;
        }
        if let Some(pgid) = self.pid() {
            signal_tree(pgid, libc::SIGSTOP);
            self.paused = group_exists(pgid);
            if self.paused && !wait_stopped(pgid, Duration::from_secs(2)) {
                eprintln!("eosim: {pgid} not stopped 2 s after SIGSTOP");
            }
        }
    }

    /// SIGCONT to the process tree.
    pub fn resume(&mut self) {
        if let Some(c) = &self.container {
            c.resume();
            self.paused = false;
            return;
        }
        if let Some(pgid) = self.pid() {
            signal_tree(pgid, libc::SIGCONT);
            self.paused = false;
        }
    }

    /// Whether [`pause`](Self::pause) is in effect.
    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the watchdog of process group `pgid`: `sh` in a group of its own that polls this
/// process (`kill -0`) every second and, once it is gone, SIGKILLs the group. `None` when
/// `sh` cannot be started (the group then relies on the in-process teardown alone).
fn watch_group(pgid: i32) -> Option<Child> {
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -KILL -{pgid} 2>/dev/null",
        parent = std::process::id()
    );
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()
}

/// Waits (at most `max`) until none of `pids` is a live process.
fn wait_gone(pids: &[i32], max: Duration) {
    let deadline = Instant::now() + max;
    while pids.iter().any(|&pid| process_alive(pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_group_gone(pgid: i32, max: Duration) {
    let deadline = Instant::now() + max;
    while group_exists(pgid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `probe` every `interval` until it returns `Ok`, the process exits, or `timeout_ms`
/// passes. The error names the service and its log file, with the probe's last error.
///
/// # Errors
/// [`ProvisionError::NotReady`].
pub fn wait_healthy<T>(
    process: &mut ServiceProcess,
    timeout_ms: u64,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, ProvisionError> {
    let started = Instant::now();
    let mut last_error = String::from("no probe ran");
    while started.elapsed() < Duration::from_millis(timeout_ms) {
        match probe() {
            Ok(v) => return Ok(v),
            Err(e) => last_error = e,
        }
        if let Some(status) = process.exit_status() {
            last_error = format!("process exited ({status}); last probe error: {last_error}");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(ProvisionError::NotReady {
        service: process.service().to_string(),
        log_path: process.log_path().to_path_buf(),
        waited_ms: started.elapsed().as_millis() as u64,
        last_error,
    })
}

/// A loopback TCP port that was free a moment ago. Ports of one service are taken while
/// the earlier ones are still bound, so they differ from each other.
///
/// # Errors
/// When no port can be bound.
pub fn free_ports(count: usize) -> Result<Vec<u16>, ProvisionError> {
    let listeners: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<Result<_, _>>()
        .map_err(|e| ProvisionError::io("ports", Path::new("127.0.0.1:0"), e))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| ProvisionError::io("ports", Path::new("127.0.0.1:0"), e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn launch(dir: &Path, script: &str) -> Launch {
        Launch {
            service: "test-service".into(),
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: Vec::new(),
            cwd: dir.to_path_buf(),
            log_path: dir.join("test-service.log"),
            user: None,
            container: None,
        }
    }

    /// `wait_stopped` says a busy process is stopped only once SIGSTOP took it, and a
    /// running one is not.
    #[test]
    fn pause_returns_once_the_process_is_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ServiceProcess::spawn(launch(dir.path(), "while :; do :; done")).unwrap();
        let pgid = p.pid().unwrap();
        assert!(
            !wait_stopped(pgid, Duration::from_millis(50)),
            "a busy loop is running"
        );
        p.pause();
        assert!(p.is_paused());
        assert!(
            wait_stopped(pgid, Duration::ZERO),
            "pause returned before the stop"
        );
        p.resume();
        assert!(!wait_stopped(pgid, Duration::from_millis(200)), "resumed");
        p.kill();
    }

    #[test]
    fn kill_takes_the_whole_process_group_down() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ServiceProcess::spawn(launch(dir.path(), "sleep 100 & sleep 100")).unwrap();
        let pgid = p.pid().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(live_groups().contains(&pgid));
        p.kill();
        assert!(!group_exists(pgid), "a forked grandchild survived");
        assert!(!live_groups().contains(&pgid));
    }

    /// A child that left the group with `setsid` (as PostgreSQL's backends do) is killed
    /// with it, and paused with it.
    #[test]
    fn kill_and_pause_reach_descendants_that_left_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let script = "setsid sleep 100 & sleep 100";
        let mut p = ServiceProcess::spawn(launch(dir.path(), script)).unwrap();
        let pgid = p.pid().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let stray = loop {
            let found = descendants(pgid)
                .into_iter()
                .find(|&pid| unsafe { libc::getpgid(pid) } == pid);
            match found {
                Some(pid) => break pid,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                None => panic!("the setsid child never appeared"),
            }
        };
        p.pause();
        let state = |pid| proc_stat(pid).map(|(state, _)| state);
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(stray) != Some('T') && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            state(stray),
            Some('T'),
            "the stray kept running through a pause"
        );
        p.resume();
        p.kill();
        assert!(
            !process_alive(stray),
            "a descendant that left the group survived the kill"
        );
    }

    #[test]
    fn drop_kills_and_restart_runs_the_same_command_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ServiceProcess::spawn(launch(dir.path(), "echo started; sleep 100")).unwrap();
        assert!(matches!(
            p.restart(),
            Err(ProvisionError::StillRunning { .. })
        ));
        let log_path = dir.path().join("test-service.log");
        let started = |n: usize| {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            log.matches("started").count() >= n
        };
        wait_healthy(&mut p, 5_000, || {
            started(1).then_some(()).ok_or("not yet".to_string())
        })
        .unwrap();
        p.kill();
        p.restart().unwrap();
        wait_healthy(&mut p, 5_000, || {
            started(2).then_some(()).ok_or("not yet".to_string())
        })
        .unwrap();
        let pgid = p.pid().unwrap();
        p.pause();
        assert!(p.is_paused());
        p.resume();
        drop(p);
        assert!(!group_exists(pgid));
    }

    #[test]
    fn a_service_that_never_answers_is_not_ready_naming_it_and_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ServiceProcess::spawn(launch(dir.path(), "sleep 100")).unwrap();
        let err = wait_healthy(&mut p, 300, || Err::<(), _>("connection refused".into()));
        let Err(ProvisionError::NotReady {
            service,
            log_path,
            last_error,
            ..
        }) = err
        else {
            panic!("expected NotReady, got {err:?}");
        };
        assert_eq!(service, "test-service");
        assert_eq!(log_path, dir.path().join("test-service.log"));
        assert_eq!(last_error, "connection refused");
    }

    #[test]
    fn a_service_that_exits_is_not_ready_with_its_exit_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut p =
            ServiceProcess::spawn(launch(dir.path(), "echo no config >&2; exit 3")).unwrap();
        let err = wait_healthy(&mut p, 10_000, || Err::<(), _>("refused".into())).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("test-service did not come up"), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("test-service.log"), "{text}");
        assert!(
            text.ends_with("; its last lines: no config)"),
            "the error carries what the log said, so the report keeps it: {text}"
        );
    }
}

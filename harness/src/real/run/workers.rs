//! The pipeline's processes as children of the runner: `eosim worker` each in a process
//! group of its own (registered for the Ctrl-C teardown, killed on drop), its stdout read
//! line by line into the run's ops, its stderr appended to `<logs>/<name>.log`.
//!
//! Faults are signals: `kill` is SIGKILL to the group, `pause` SIGSTOP, `resume` SIGCONT;
//! `restart` spawns the process again (a producer from the id after the last one it
//! invoked).

use super::worker_spec::Role;
use crate::history::{Op, OpKind, Value};
use crate::real::clock::ClockOffsets;
use crate::real::process::{register, signal_group, unregister};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What every worker of a run shares: how to start one, and where its ops go.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    /// The `eosim` binary.
    pub exe: PathBuf,
    /// The scenario file (each worker reads it).
    pub scenario_path: PathBuf,
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// The sink's directory.
    pub sink_dir: PathBuf,
    /// Where worker logs go.
    pub log_dir: PathBuf,
    /// The run's epoch on the run's clock ([`crate::real::clock::run_clock_ns`]).
    pub epoch_ns: u64,
    /// The workers' wall-clock offsets, when the scenario jumps clocks: every worker is
    /// told its own file.
    pub clocks: Option<ClockOffsets>,
    /// Connector keys every worker sets over the scenario's (`--set KEY=VALUE`).
    pub connector_sets: Vec<(String, String)>,
    /// Ops read from every worker's stdout, in arrival order.
    pub ops: Arc<Mutex<Vec<Op>>>,
}

/// One worker process and its incarnations.
#[derive(Debug)]
pub struct Worker {
    /// `producer-0`, `consumer-1`.
    pub name: String,
    /// Its role.
    pub role: Role,
    child: Option<Child>,
    reader: Option<JoinHandle<()>>,
    paused: bool,
    failed: bool,
    arm_fault_point: bool,
    id_from: u64,
    id_to: u64,
    /// Ops lines that were not ops (a torn last line of a killed worker, say).
    pub bad_lines: Arc<Mutex<Vec<String>>>,
}

impl Worker {
    /// A worker not yet started; `ids` is a producer's id range (empty for consumers).
    pub fn new(name: &str, role: Role, ids: std::ops::Range<u64>) -> Self {
        Self {
            name: name.to_string(),
            role,
            child: None,
            reader: None,
            paused: false,
            failed: false,
            arm_fault_point: false,
            id_from: ids.start,
            id_to: ids.end,
            bad_lines: Arc::default(),
        }
    }

    /// The worker's log file.
    pub fn log_path(&self, env: &WorkerEnv) -> PathBuf {
        env.log_dir.join(format!("{}.log", self.name))
    }

    /// Whether a producer has ids left to send (other roles always have work).
    pub fn has_work(&self) -> bool {
        !self.failed && (!self.role.is_producer() || self.id_from < self.id_to)
    }

    /// Arms the scenario's `[sink.fault_point]` in the next start only (`eosim worker
    /// --arm-fault-point`): a restarted worker does not fire it again.
    pub fn arm_fault_point(&mut self) {
        self.arm_fault_point = true;
    }

    /// Marks a sink task that failed: it is not started again.
    pub fn mark_failed(&mut self) {
        self.failed = true;
    }

    /// Starts (or starts again) the process.
    ///
    /// # Errors
    /// The worker's name and log file when it cannot be spawned.
    pub fn start(&mut self, env: &WorkerEnv) -> Result<(), String> {
        let log_path = self.log_path(env);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("{}: log {}: {e}", self.name, log_path.display()))?;
        let role = self.role.name();
        let mut cmd = Command::new(&env.exe);
        cmd.arg("worker")
            .args([
                "--role",
                role,
                "--name",
                &self.name,
                "--bootstrap",
                &env.bootstrap,
            ])
            .arg("--scenario")
            .arg(&env.scenario_path)
            .arg("--sink")
            .arg(&env.sink_dir)
            .args(["--epoch-ns", &env.epoch_ns.to_string()])
            .args([
                "--id-from",
                &self.id_from.to_string(),
                "--id-to",
                &self.id_to.to_string(),
            ])
            .args(
                env.connector_sets
                    .iter()
                    .flat_map(|(k, v)| ["--set".to_string(), format!("{k}={v}")]),
            )
            .args(std::mem::take(&mut self.arm_fault_point).then_some("--arm-fault-point"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing. A worker dies
        // with the runner even when the runner itself is SIGKILLed (no teardown runs then).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        if let Some(clocks) = &env.clocks {
            clocks.apply(&self.name, &mut cmd)?;
        }
        // A network-faulted run places the worker in its node's cgroup.
        if let Some(dir) = crate::real::net::placement(&self.name)? {
            crate::real::net::cgroup::join_in_child(&mut cmd, &dir, None)?;
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "{}: cannot start {}: {e} (log: {})",
                self.name,
                env.exe.display(),
                log_path.display()
            )
        })?;
        register(child.id() as i32);
        let stdout = child.stdout.take().expect("stdout is piped");
        let (ops, bad) = (Arc::clone(&env.ops), Arc::clone(&self.bad_lines));
        self.reader = Some(std::thread::spawn(move || read_ops(stdout, &ops, &bad)));
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The exit status of a process that ended by itself, `None` while it runs or when it
    /// was never started or killed.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL to the process group, then reaps it and reads the rest of its output; a
    /// producer's next incarnation starts after the last id this one invoked.
    pub fn kill(&mut self, env: &WorkerEnv) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id() as i32;
        signal_group(pid, libc::SIGKILL);
        let _ = child.wait();
        unregister(pid);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.paused = false;
        if self.role.is_producer() {
            self.id_from = self
                .id_from
                .max(last_invoked(&env.ops, &self.name).map_or(0, |i| i + 1));
        }
    }

    /// Reaps a process that ended by itself and reads the rest of its output.
    pub fn reap(&mut self, env: &WorkerEnv) {
        if self.exit_status().is_some() {
            self.kill(env);
        }
    }

    /// SIGSTOP (`pause`) or SIGCONT (`resume`) to the process group; false when the
    /// process is not running or already in that state.
    pub fn signal_pause(&mut self, pause: bool) -> bool {
        if pause == self.paused || !self.is_running() {
            return false;
        }
        let pid = self.child.as_ref().map_or(0, |c| c.id() as i32);
        signal_group(pid, if pause { libc::SIGSTOP } else { libc::SIGCONT });
        self.paused = pause;
        true
    }

    /// Marks a producer's range as sent (it exited 0 after its last id).
    pub fn mark_done(&mut self) {
        self.id_from = self.id_to;
    }

    /// Whether the process is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            signal_group(pid, libc::SIGKILL);
            let _ = child.wait();
            unregister(pid);
        }
    }
}

fn read_ops(stdout: std::process::ChildStdout, ops: &Mutex<Vec<Op>>, bad: &Mutex<Vec<String>>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Op>(&line) {
            Ok(op) => ops.lock().expect("ops lock").push(op),
            Err(_) => bad.lock().expect("bad lines lock").push(line),
        }
    }
}

/// The highest id `process` invoked a send for.
fn last_invoked(ops: &Mutex<Vec<Op>>, process: &str) -> Option<u64> {
    let ops = ops.lock().expect("ops lock");
    ops.iter()
        .filter(|op| op.process == process && op.kind == OpKind::Invoke)
        .filter_map(|op| match op.value {
            Value::Send { id, .. } => Some(id),
            _ => None,
        })
        .max()
}

/// The `eosim` binary next to the running one: itself when it is `eosim`, else (a test
/// binary in `target/<profile>/deps/`) `target/<profile>/eosim`.
pub fn default_exe() -> Option<PathBuf> {
    let me = std::env::current_exe().ok()?;
    if me.file_stem().is_some_and(|s| s == "eosim") {
        return Some(me);
    }
    let profile_dir = me.parent()?.parent()?;
    Some(Path::new(profile_dir).join("eosim")).filter(|p| p.exists())
}

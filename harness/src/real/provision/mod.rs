//! Native provisioning: each service a child process on loopback ports, its files and log
//! in a directory the caller owns (a `tempfile::TempDir`, say).
//!
//! | service | started as | health check | timeout |
//! |---|---|---|---|
//! | [`Kafka`] | `StorageTool format`, `java kafka.Kafka` per node | brokers registered | 120 s |
//! | [`Postgres`] | `initdb`, `postgres -D` as a non-root user | `pg_isready` | 60 s |
//! | [`ClickHouse`] | `clickhouse-server --config-file` | HTTP `GET /ping` is `Ok.` | 60 s |
//! | [`ZooKeeper`] | `java QuorumPeerMain zoo.cfg` | `ruok` is `imok`, `srvr` has a mode | 60 s |
//!
//! A service that does not come up in time is a [`ProvisionError::NotReady`] naming it and
//! its log file. Every handle kills its process groups when dropped; see
//! [`process`](super::process) for Ctrl-C.
//!
//! ## Environment variables
//! - `JAVA`: the java binary (default `java` on `PATH`).
//! - `EOSIM_KAFKA_LIB`: the Kafka jars (default `real/kafka/lib` of this repository).
//! - `EOSIM_PG_BIN`: PostgreSQL's server binaries (default `/usr/lib/postgresql/15/bin`).
//! - `EOSIM_PG_USER`: the user initdb and postgres run as when eosim runs as root
//!   (default `eosim`, else `nobody`).

mod clickhouse;
mod kafka;
mod postgres;
mod zookeeper;

pub use clickhouse::ClickHouse;
pub use kafka::{dedicated_controller, Kafka, KafkaOptions, BROKER_COUNT_MAX, CONTROLLER_NODE_ID};
pub use postgres::Postgres;
pub use zookeeper::ZooKeeper;

use super::process::{wait_healthy, Launch, ServiceProcess};
use super::ProvisionError;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A service that can be crashed and started again (SIGKILL to its process group).
pub trait Kill {
    /// SIGKILL to the service's process group; returns once it is reaped.
    fn kill(&mut self);
    /// Starts the service again after [`kill`](Kill::kill) and waits for its health check.
    ///
    /// # Errors
    /// [`ProvisionError::StillRunning`] if it was not killed, [`ProvisionError::NotReady`].
    fn restart(&mut self) -> Result<(), ProvisionError>;
}

/// A service that can be frozen (SIGSTOP) and thawed (SIGCONT).
pub trait Pause {
    /// SIGSTOP to the service's process group.
    fn pause(&mut self);
    /// SIGCONT to the service's process group.
    fn resume(&mut self);
}

/// A service the nemesis kills, restarts, pauses and resumes (PostgreSQL, ClickHouse,
/// ZooKeeper): [`Kill`] and [`Pause`] together, so one table of services serves every fault.
pub trait ServiceFaults: Kill + Pause {}

impl<T: Kill + Pause> ServiceFaults for T {}

/// What the nemesis did to one database service of the run: killed and not restarted yet,
/// paused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceState {
    /// Killed by the nemesis and not restarted yet.
    pub down: bool,
    /// Paused by the nemesis.
    pub paused: bool,
}

/// A health check: `Ok` once the service answers, else why not.
pub(crate) type Probe = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// One service process with its health check (PostgreSQL, ClickHouse, ZooKeeper).
pub(crate) struct Single {
    pub(crate) process: ServiceProcess,
    probe: Probe,
    start_timeout_ms: u64,
    stop_signal: i32,
}

impl std::fmt::Debug for Single {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Single")
            .field("process", &self.process)
            .finish_non_exhaustive()
    }
}

impl Single {
    /// Spawns `process`'s command and waits for `probe`.
    pub(crate) fn start(
        process: ServiceProcess,
        probe: Probe,
        start_timeout_ms: u64,
        stop_signal: i32,
    ) -> Result<Self, ProvisionError> {
        let mut s = Self {
            process,
            probe,
            start_timeout_ms,
            stop_signal,
        };
        s.wait()?;
        Ok(s)
    }

    fn wait(&mut self) -> Result<(), ProvisionError> {
        let probe = &self.probe;
        wait_healthy(&mut self.process, self.start_timeout_ms, probe)
    }

    /// Graceful stop with the service's own signal, SIGKILL after `grace`.
    pub(crate) fn stop(&mut self, grace: Duration) {
        self.process.stop(self.stop_signal, grace);
    }
}

impl Kill for Single {
    fn kill(&mut self) {
        self.process.kill();
    }

    fn restart(&mut self) -> Result<(), ProvisionError> {
        self.process.restart()?;
        self.wait()
    }
}

impl Pause for Single {
    fn pause(&mut self) {
        self.process.pause();
    }

    fn resume(&mut self) {
        self.process.resume();
    }
}

/// Implements [`Kill`] and [`Pause`] for a service struct with a `single: Single` field.
macro_rules! single_service_faults {
    ($service:ty) => {
        impl $crate::real::provision::Kill for $service {
            fn kill(&mut self) {
                $crate::real::provision::Kill::kill(&mut self.single);
            }
            fn restart(&mut self) -> Result<(), $crate::real::ProvisionError> {
                $crate::real::provision::Kill::restart(&mut self.single)
            }
        }
        impl $crate::real::provision::Pause for $service {
            fn pause(&mut self) {
                $crate::real::provision::Pause::pause(&mut self.single);
            }
            fn resume(&mut self) {
                $crate::real::provision::Pause::resume(&mut self.single);
            }
        }
    };
}
pub(crate) use single_service_faults;

/// Replaces each `{{key}}` in `template`; a placeholder left over is a bug in eosim.
pub(crate) fn render(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (key, value) in values {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    assert!(
        !out.contains("{{"),
        "unrendered placeholder in a service template"
    );
    out
}

/// Writes `contents` to `path`.
pub(crate) fn write_file(service: &str, path: &Path, contents: &str) -> Result<(), ProvisionError> {
    std::fs::write(path, contents).map_err(|e| ProvisionError::io(service, path, e))
}

/// Creates `path` and its parents.
pub(crate) fn create_dir(service: &str, path: &Path) -> Result<(), ProvisionError> {
    std::fs::create_dir_all(path).map_err(|e| ProvisionError::io(service, path, e))
}

/// Runs a setup step to completion with its output in `log_path`.
pub(crate) fn run_step(
    service: &str,
    step: &str,
    mut cmd: Command,
    log_path: &Path,
) -> Result<(), ProvisionError> {
    let log =
        std::fs::File::create(log_path).map_err(|e| ProvisionError::io(service, log_path, e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| ProvisionError::io(service, log_path, e))?;
    let program = PathBuf::from(cmd.get_program());
    let status = cmd
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .status()
        .map_err(|e| ProvisionError::Spawn {
            service: service.into(),
            program,
            reason: e.to_string(),
        })?;
    if status.success() {
        return Ok(());
    }
    let tail = last_lines(log_path, 5);
    Err(ProvisionError::Setup {
        service: service.into(),
        step: step.into(),
        reason: format!("{status}: {tail}"),
        log_path: log_path.into(),
    })
}

/// Runs a setup step (`initdb`, `kafka-storage format`) described as a [`Launch`] to
/// completion: a child process natively, a one-shot container with a container spec.
pub(crate) fn setup_step(step: &str, launch: &Launch) -> Result<(), ProvisionError> {
    if let Some(spec) = &launch.container {
        let status = crate::real::container::run_to_completion(launch, spec)?;
        if status.as_deref() == Some("exit code 0") {
            return Ok(());
        }
        return Err(ProvisionError::Setup {
            service: launch.service.clone(),
            step: step.into(),
            reason: format!(
                "{}: {}",
                status.as_deref().unwrap_or("still running after 300 s"),
                last_lines(&launch.log_path, 5)
            ),
            log_path: launch.log_path.clone(),
        });
    }
    let mut cmd = Command::new(&launch.program);
    cmd.args(&launch.args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd);
    if let Some((uid, gid)) = launch.user {
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, gid);
    }
    run_step(&launch.service, step, cmd, &launch.log_path)
}

/// The last `n` lines of a log, joined with " | " (for error messages).
pub(crate) fn last_lines(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// `JAVA` or `java`.
pub(crate) fn java() -> PathBuf {
    std::env::var_os("JAVA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("java"))
}

/// Whether `program` can be found (an absolute path that exists, or a name on `PATH`).
pub(crate) fn find_program(program: &Path) -> Option<PathBuf> {
    if program.is_absolute() {
        return program.exists().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// `program` if installed, else [`ProvisionError::Missing`] pointing at the install script.
pub(crate) fn require_program(service: &str, program: &Path) -> Result<PathBuf, ProvisionError> {
    find_program(program).ok_or_else(|| ProvisionError::Missing {
        service: service.into(),
        what: program.display().to_string(),
        hint: INSTALL_HINT.into(),
    })
}

/// What to run when something is missing.
pub(crate) const INSTALL_HINT: &str = "run .ci/install-real-services (as root)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_replaces_every_placeholder() {
        let out = render(
            "a={{a}} b={{b}} a={{a}}",
            &[("a", "1".into()), ("b", "x".into())],
        );
        assert_eq!(out, "a=1 b=x a=1");
    }
}

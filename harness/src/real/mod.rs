//! The real tier's provisioning: services started and stopped by eosim itself, and the
//! faults it injects into them by signal.
//!
//! # Sections
//! - [`backend`]: which provisioning backend answers here (`native`, `testcontainers`,
//!   `external`) and why not.
//! - [`provision`]: Kafka 4.x (KRaft, one or three brokers), PostgreSQL, ClickHouse and
//!   ZooKeeper as child processes on loopback ports in a temporary directory, each with a
//!   health check, `kill`/`restart`, `pause`/`resume`.
//! - [`net`]: network faults (partitions, clogs) between the run's processes, as
//!   nftables rules over one cgroup v2 per process.
//! - [`clock`]: the run's clock every process shares, and a wall-clock offset per worker
//!   for clock jumps.
//! - [`lazyfs`]: a FUSE file system that loses unsynced writes (machine crashes of
//!   brokers), after Jepsen's lazyfs.
//! - [`process`]: process groups, logs, signals and the teardown on Ctrl-C.
//! - [`scratch`]: the services' scratch directories, removed on every exit path.
//! - [`bulk`]: rows/s through a sink beside a bulk load of the same rows, as a ratio.
//!
//! # Example
//! ```no_run
//! use eosim::real::provision::Kafka;
//! let dir = tempfile::tempdir().unwrap();
//! let mut kafka = Kafka::start(dir.path(), 1).unwrap();
//! println!("bootstrap.servers={}", kafka.bootstrap_servers());
//! kafka.kill(1);
//! kafka.restart(1).unwrap();
//! ```
//!
//! What must be installed first (`.ci/install-real-services` does it): Java 17, the Kafka
//! jars in `real/kafka/lib` (or `EOSIM_KAFKA_LIB`), PostgreSQL 15's server binaries,
//! Debian's `clickhouse-server` and `zookeeper`.

pub mod backend;
pub mod bulk;
pub mod clock;
pub mod container;
pub mod launch;
pub mod lazyfs;
pub mod net;
pub mod process;
pub mod provision;
pub mod run;
pub mod scratch;

use std::path::{Path, PathBuf};

/// `; its last lines: a | b | ...` of the log at `path` when it has any, else nothing: a
/// service's error carries what its log said, so the report keeps it after the scratch
/// directory that held the log is gone (the next run sweeps it).
fn log_tail(path: &Path) -> String {
    let tail = provision::last_lines(path, 8);
    if tail.is_empty() {
        return String::new();
    }
    format!("; its last lines: {tail}")
}

/// Why a service could not be provisioned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProvisionError {
    /// The image a service's container runs from is missing or stale (the testcontainers
    /// backend).
    #[error("{service}: image {image} {reason}")]
    Image {
        /// The service.
        service: String,
        /// `name:tag`.
        image: String,
        /// What is wrong and what to run.
        reason: String,
    },
    /// Something the service needs is not installed.
    #[error("{service}: {what} not found; {hint}")]
    Missing {
        /// The service.
        service: String,
        /// What is missing (a path, a program).
        what: String,
        /// How to get it.
        hint: String,
    },
    /// The program could not be started.
    #[error("{service}: cannot start {program}: {reason}", program = program.display())]
    Spawn {
        /// The service.
        service: String,
        /// The program.
        program: PathBuf,
        /// The OS error.
        reason: String,
    },
    /// A setup step (initdb, storage format) failed.
    #[error("{service}: {step} failed: {reason} (log: {log})", log = log_path.display())]
    Setup {
        /// The service.
        service: String,
        /// The step.
        step: String,
        /// Its output or exit status.
        reason: String,
        /// Where its output went.
        log_path: PathBuf,
    },
    /// The health check did not pass in time.
    #[error(
        "{service} did not come up within {waited_ms} ms: {last_error} (log: {log}{tail})",
        log = log_path.display(),
        tail = log_tail(log_path)
    )]
    NotReady {
        /// The service.
        service: String,
        /// Its log file.
        log_path: PathBuf,
        /// How long the check waited, in ms.
        waited_ms: u64,
        /// The last failure of the health check.
        last_error: String,
    },
    /// `restart` of a process that is still running.
    #[error("{service} is still running; kill or stop it before restart")]
    StillRunning {
        /// The service.
        service: String,
    },
    /// No such broker or service in this deployment.
    #[error("{service}: {reason}")]
    Invalid {
        /// The service.
        service: String,
        /// What was wrong with the request.
        reason: String,
    },
    /// File system error.
    #[error("{service}: {path}: {reason}", path = path.display())]
    Io {
        /// The service.
        service: String,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        reason: String,
    },
}

impl ProvisionError {
    pub(crate) fn io(service: &str, path: &Path, e: std::io::Error) -> Self {
        ProvisionError::Io {
            service: service.into(),
            path: path.into(),
            reason: e.to_string(),
        }
    }
}

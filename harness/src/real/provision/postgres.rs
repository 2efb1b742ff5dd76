//! PostgreSQL 15 from Debian's package: `initdb`, then `postgres -D` as a child process.
//!
//! initdb and postgres refuse to run as root. When eosim runs as root, both run as
//! `EOSIM_PG_USER` (default: the `eosim` system user that `.ci/install-real-services`
//! creates, else `nobody`) through `setuid` in the child; the data directory is chowned to
//! that user and `dir` gets the search bit for others so that the user can reach it.

use super::{create_dir, require_program, run_step, single_service_faults, Probe, Single};
use crate::real::process::{free_ports, Launch, ServiceProcess};
use crate::real::ProvisionError;
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A running PostgreSQL server on `127.0.0.1:<port>`, user `postgres`, trust auth;
/// dropping it kills the server and its backends.
#[derive(Debug)]
pub struct Postgres {
    single: Single,
    port: u16,
    data_dir: PathBuf,
}

single_service_faults!(Postgres);

/// Default start timeout, in ms.
const START_TIMEOUT_MS: u64 = 60_000;

fn pg_bin() -> PathBuf {
    std::env::var_os("EOSIM_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

/// uid and gid of `name`, from the password database.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer to static storage or null; we copy the two fields
    // out at once. The harness calls it from one thread at a time (during start).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: pw is non-null and points at a valid passwd record.
    unsafe { Some(((*pw).pw_uid, (*pw).pw_gid)) }
}

/// The uid/gid to run as: none when we are not root.
fn server_user() -> Result<Option<(u32, u32)>, ProvisionError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let wanted = std::env::var("EOSIM_PG_USER").ok();
    let names: Vec<String> = match wanted {
        Some(n) => vec![n],
        None => vec!["eosim".into(), "nobody".into()],
    };
    names
        .iter()
        .find_map(|n| lookup_user(n))
        .map(Some)
        .ok_or_else(|| ProvisionError::Missing {
            service: "postgres".into(),
            what: format!("a non-root user to run as (tried {})", names.join(", ")),
            hint: "run .ci/install-real-services, or set EOSIM_PG_USER".into(),
        })
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> Result<(), ProvisionError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| ProvisionError::io("postgres", path, e))
}

/// Lets other users traverse `dir` (root's temp dirs are 0700).
fn allow_traverse(dir: &Path) -> Result<(), ProvisionError> {
    let meta = std::fs::metadata(dir).map_err(|e| ProvisionError::io("postgres", dir, e))?;
    let mode = meta.permissions().mode() | 0o011;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| ProvisionError::io("postgres", dir, e))
}

fn initdb(
    bin: &Path,
    data_dir: &Path,
    user: Option<(u32, u32)>,
    log: &Path,
) -> Result<(), ProvisionError> {
    let initdb = require_program("postgres", &bin.join("initdb"))?;
    let mut cmd = Command::new(initdb);
    cmd.arg("-D")
        .arg(data_dir)
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .env("LC_ALL", "C");
    if let Some((uid, gid)) = user {
        std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, gid);
    }
    run_step("postgres", "initdb", cmd, log)
}

fn pg_isready(bin: &Path, port: u16) -> Probe {
    let program = bin.join("pg_isready");
    Box::new(move || {
        let out = Command::new(&program)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "1",
                "-U",
                "postgres",
            ])
            .output()
            .map_err(|e| format!("cannot run pg_isready: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(String::from_utf8_lossy(&out.stdout).trim().to_string())
    })
}

impl Postgres {
    /// Runs initdb in `dir/pgdata` and starts the server with its log in
    /// `dir/postgres.log`, listening on a free loopback port (Unix socket in
    /// `dir/pg-socket`).
    ///
    /// # Errors
    /// [`ProvisionError::Missing`] without the server binaries or a non-root user,
    /// [`ProvisionError::Setup`] when initdb fails, [`ProvisionError::NotReady`] when
    /// `pg_isready` does not answer within 60 s.
    pub fn start(dir: &Path) -> Result<Postgres, ProvisionError> {
        let bin = pg_bin();
        let postgres = require_program("postgres", &bin.join("postgres"))?;
        require_program("postgres", &bin.join("pg_isready"))?;
        let user = server_user()?;
        let data_dir = dir.join("pgdata");
        let socket_dir = dir.join("pg-socket");
        create_dir("postgres", &data_dir)?;
        create_dir("postgres", &socket_dir)?;
        if let Some(u) = user {
            allow_traverse(dir)?;
            chown(&data_dir, u)?;
            chown(&socket_dir, u)?;
        }
        initdb(&bin, &data_dir, user, &dir.join("initdb.log"))?;
        let port = free_ports(1)?[0];
        let args = vec![
            "-D".to_string(),
            data_dir.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-k".into(),
            socket_dir.display().to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
        ];
        let launch = Launch {
            service: "postgres".into(),
            program: postgres,
            args,
            env: vec![("LC_ALL".into(), "C".into())],
            cwd: dir.to_path_buf(),
            log_path: dir.join("postgres.log"),
            user,
        };
        let process = ServiceProcess::spawn(launch)?;
        let single = Single::start(
            process,
            pg_isready(&bin, port),
            START_TIMEOUT_MS,
            libc::SIGINT,
        )?;
        Ok(Postgres {
            single,
            port,
            data_dir,
        })
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A tokio-postgres / libpq connection string for database `postgres`.
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        self.single.process.log_path()
    }

    /// The postmaster's pid (= its process group id) while running.
    pub fn pid(&self) -> Option<i32> {
        self.single.process.pid()
    }

    /// Fast shutdown (SIGINT), SIGKILL after 10 s.
    pub fn stop(mut self) {
        self.single.stop(Duration::from_secs(10));
    }
}

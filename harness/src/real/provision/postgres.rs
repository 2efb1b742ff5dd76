//! PostgreSQL 15 from Debian's package: `initdb`, then `postgres -D` as a child process.
//!
//! initdb and postgres refuse to run as root. When eosim runs as root, both run as
//! `EOSIM_PG_USER` (default: the `eosim` system user that `.ci/install-real-services`
//! creates, else `nobody`) through `setuid` in the child; the data directory is chowned to
//! that user and `dir` gets the search bit for others so that the user can reach it.

use super::{create_dir, require_program, setup_step, single_service_faults, Probe, Single};
use crate::real::container::{ContainerSpec, Runtime, ServiceImage, CONTAINER_UID};
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
    initdb: PathBuf,
    dir: &Path,
    data_dir: &Path,
    user: Option<(u32, u32)>,
    container: Option<ContainerSpec>,
) -> Result<(), ProvisionError> {
    let launch = Launch {
        service: "postgres".into(),
        program: initdb,
        args: vec![
            "-D".into(),
            data_dir.display().to_string(),
            "-U".into(),
            "postgres".into(),
            "-A".into(),
            "trust".into(),
            "-E".into(),
            "UTF8".into(),
            "--locale=C".into(),
            "--no-sync".into(),
        ],
        env: vec![("LC_ALL".into(), "C".into())],
        cwd: dir.to_path_buf(),
        log_path: dir.join("initdb.log"),
        user,
        container,
    };
    setup_step("initdb", &launch)
}

/// `pg_isready` against the server: natively the host's, in a container the image's
/// (through `docker exec`).
fn pg_isready(bin: &Path, port: u16, container: Option<String>) -> Probe {
    let argv: Vec<String> = [
        bin.join("pg_isready").display().to_string(),
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
        "-t".into(),
        "1".into(),
        "-U".into(),
        "postgres".into(),
    ]
    .into();
    Box::new(move || {
        let (ok, text) = match &container {
            Some(name) => {
                let (code, text) = crate::real::container::exec(name, &argv)?;
                (code == 0, text)
            }
            None => {
                let out = Command::new(&argv[0])
                    .args(&argv[1..])
                    .output()
                    .map_err(|e| format!("cannot run pg_isready: {e}"))?;
                (
                    out.status.success(),
                    String::from_utf8_lossy(&out.stdout).to_string(),
                )
            }
        };
        if ok {
            return Ok(());
        }
        Err(text.trim().to_string())
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
        Postgres::start_on(dir, Runtime::Native)
    }

    /// [`start`](Self::start) on `runtime`: in a container of `eosim/postgres` (as its
    /// user `eosim`, uid [`CONTAINER_UID`], the image's binaries) or natively.
    ///
    /// # Errors
    /// As [`start`](Self::start); [`ProvisionError::Image`] when the image is missing or stale.
    pub fn start_on(dir: &Path, runtime: Runtime) -> Result<Postgres, ProvisionError> {
        Postgres::start_with(dir, runtime, &[])
    }

    /// [`start_on`](Self::start_on) with server `settings` (`name`, `value`), each passed as
    /// `-c name=value` (`synchronous_commit`, `wal_writer_delay`...), so they hold across
    /// restarts too.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with(
        dir: &Path,
        runtime: Runtime,
        settings: &[(&str, String)],
    ) -> Result<Postgres, ProvisionError> {
        let container = runtime.spec(ServiceImage::Postgres, &[dir.to_path_buf()])?;
        // The image's binaries and user, or the host's (checked to be there).
        let (bin, user) = match container {
            Some(_) => (
                PathBuf::from("/usr/lib/postgresql/15/bin"),
                Some((CONTAINER_UID, CONTAINER_UID)),
            ),
            None => {
                let bin = pg_bin();
                for program in ["postgres", "pg_isready"] {
                    require_program("postgres", &bin.join(program))?;
                }
                let user = server_user()?;
                require_program("postgres", &bin.join("initdb"))?;
                (bin, user)
            }
        };
        let (postgres, initdb_bin) = (bin.join("postgres"), bin.join("initdb"));
        let data_dir = dir.join("pgdata");
        let socket_dir = dir.join("pg-socket");
        create_dir("postgres", &data_dir)?;
        create_dir("postgres", &socket_dir)?;
        if let Some(u) = user {
            allow_traverse(dir)?;
            chown(&data_dir, u)?;
            chown(&socket_dir, u)?;
        }
        initdb(initdb_bin, dir, &data_dir, user, container.clone())?;
        let port = free_ports(1)?[0];
        let mut args = vec![
            "-D".to_string(),
            data_dir.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-k".into(),
            socket_dir.display().to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
        ];
        for (name, value) in settings {
            args.extend(["-c".to_string(), format!("{name}={value}")]);
        }
        let launch = Launch {
            service: "postgres".into(),
            program: postgres,
            args,
            env: vec![("LC_ALL".into(), "C".into())],
            cwd: dir.to_path_buf(),
            log_path: dir.join("postgres.log"),
            user,
            container,
        };
        let process = ServiceProcess::spawn(launch)?;
        let in_container = process.container().map(|c| c.name().to_string());
        let single = Single::start(
            process,
            pg_isready(&bin, port, in_container),
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

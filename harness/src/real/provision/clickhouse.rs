//! ClickHouse from Debian's package (18.16): `clickhouse-server --config-file` with a
//! generated config under the caller's directory.

use super::{
    create_dir, render, require_program, single_service_faults, write_file, Probe, Single,
};
use crate::real::container::{Runtime, ServiceImage};
use crate::real::process::{free_ports, Launch, ServiceProcess};
use crate::real::ProvisionError;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

const CONFIG_XML: &str = include_str!("../../../../real/clickhouse/config.xml.template");
const USERS_XML: &str = include_str!("../../../../real/clickhouse/users.xml");

/// Default start timeout, in ms.
const START_TIMEOUT_MS: u64 = 60_000;

/// A running ClickHouse server on loopback, user `default` without password; dropping it
/// kills the server.
#[derive(Debug)]
pub struct ClickHouse {
    single: Single,
    http_port: u16,
    tcp_port: u16,
}

single_service_faults!(ClickHouse);

/// `GET /ping` over plain HTTP/1.0; ClickHouse answers `Ok.`.
fn http_ping(port: u16) -> Probe {
    Box::new(move || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        s.write_all(b"GET /ping HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut response = String::new();
        s.read_to_string(&mut response).map_err(|e| e.to_string())?;
        if response.starts_with("HTTP/1.")
            && response.contains(" 200 ")
            && response.ends_with("Ok.\n")
        {
            return Ok(());
        }
        Err(format!(
            "unexpected answer to /ping: {:?}",
            response.lines().next()
        ))
    })
}

impl ClickHouse {
    /// Starts a server with its data and logs under `dir` (`clickhouse-server.log`,
    /// `clickhouse-server.err.log`). See [`ClickHouse::start_with_zookeeper`].
    ///
    /// # Errors
    /// As [`ClickHouse::start_with_zookeeper`].
    pub fn start(dir: &Path) -> Result<ClickHouse, ProvisionError> {
        ClickHouse::start_with_zookeeper(dir, None)
    }

    /// Starts a server; with `zookeeper = Some("127.0.0.1:<port>")` it also gets a
    /// `<zookeeper>` section (replicated tables, `system.zookeeper`).
    ///
    /// # Errors
    /// [`ProvisionError::Missing`] without `clickhouse-server`, [`ProvisionError::NotReady`]
    /// when `/ping` does not answer within 60 s.
    pub fn start_with_zookeeper(
        dir: &Path,
        zookeeper: Option<&str>,
    ) -> Result<ClickHouse, ProvisionError> {
        ClickHouse::start_on(dir, zookeeper, Runtime::Native)
    }

    /// [`start_with_zookeeper`](Self::start_with_zookeeper) on `runtime`: natively, or in
    /// a container of `eosim/clickhouse`.
    ///
    /// # Errors
    /// As [`start_with_zookeeper`](Self::start_with_zookeeper);
    /// [`ProvisionError::Image`] when the image is missing or stale.
    pub fn start_on(
        dir: &Path,
        zookeeper: Option<&str>,
        runtime: Runtime,
    ) -> Result<ClickHouse, ProvisionError> {
        create_dir("clickhouse", dir)?;
        let container = runtime.spec(ServiceImage::ClickHouse, &[dir.to_path_buf()])?;
        let program = match container {
            Some(_) => PathBuf::from("clickhouse-server"),
            None => require_program("clickhouse", Path::new("clickhouse-server"))?,
        };
        let ports = free_ports(2)?;
        let (http_port, tcp_port) = (ports[0], ports[1]);
        let zk = zookeeper.map(zookeeper_section).unwrap_or_default();
        let config = render(
            CONFIG_XML,
            &[
                ("dir", dir.display().to_string()),
                ("http_port", http_port.to_string()),
                ("tcp_port", tcp_port.to_string()),
                ("zookeeper", zk),
            ],
        );
        let config_path = dir.join("config.xml");
        write_file("clickhouse", &config_path, &config)?;
        write_file("clickhouse", &dir.join("users.xml"), USERS_XML)?;
        let launch = Launch {
            service: "clickhouse".into(),
            program,
            args: vec![format!("--config-file={}", config_path.display())],
            env: Vec::new(),
            cwd: dir.to_path_buf(),
            log_path: dir.join("clickhouse-server.log"),
            user: None,
            container,
        };
        let process = ServiceProcess::spawn(launch)?;
        let single = Single::start(
            process,
            http_ping(http_port),
            START_TIMEOUT_MS,
            libc::SIGTERM,
        )?;
        Ok(ClickHouse {
            single,
            http_port,
            tcp_port,
        })
    }

    /// The HTTP interface's URL, `http://127.0.0.1:<port>` (for the `clickhouse` crate).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// The HTTP port.
    pub fn http_port(&self) -> u16 {
        self.http_port
    }

    /// The native protocol port (`clickhouse-client --port`).
    pub fn tcp_port(&self) -> u16 {
        self.tcp_port
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.single.process.log_path().to_path_buf()
    }

    /// The server's pid (= its process group id) while running.
    pub fn pid(&self) -> Option<i32> {
        self.single.process.pid()
    }

    /// SIGTERM, SIGKILL after 10 s.
    pub fn stop(mut self) {
        self.single.stop(Duration::from_secs(10));
    }
}

fn zookeeper_section(addr: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "2181"));
    format!("<zookeeper><node><host>{host}</host><port>{port}</port></node></zookeeper>")
}

//! ZooKeeper 3.8 from Debian's package, standalone: `java -cp zookeeper.jar
//! org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg`. The jar's manifest names its
//! dependencies in /usr/share/java; slf4j-simple makes it log to stdout.

use super::{
    create_dir, java, render, require_program, single_service_faults, write_file, Probe, Single,
};
use crate::real::container::{Runtime, ServiceImage};
use crate::real::process::{free_ports, Launch, ServiceProcess};
use crate::real::ProvisionError;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

const ZOO_CFG: &str = include_str!("../../../../real/zookeeper/zoo.cfg.template");
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// Default start timeout, in ms.
const START_TIMEOUT_MS: u64 = 60_000;

/// A running standalone ZooKeeper on loopback; dropping it kills the server.
#[derive(Debug)]
pub struct ZooKeeper {
    single: Single,
    port: u16,
}

single_service_faults!(ZooKeeper);

/// Sends a four-letter command and reads the whole answer.
fn four_letter(port: u16, word: &[u8]) -> Result<String, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    s.write_all(word).map_err(|e| e.to_string())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).map_err(|e| e.to_string())?;
    Ok(answer)
}

/// `ruok` must answer `imok` (the process runs) and `srvr` must report a `Mode:` (it
/// serves requests; before that it answers "not currently serving requests").
fn ruok_and_serving(port: u16) -> Probe {
    Box::new(move || {
        let answer = four_letter(port, b"ruok")?;
        if answer != "imok" {
            return Err(format!("ruok answered {answer:?}"));
        }
        let srvr = four_letter(port, b"srvr")?;
        if srvr.contains("Mode: ") {
            return Ok(());
        }
        Err(format!(
            "srvr answered {:?}",
            srvr.lines().next().unwrap_or_default()
        ))
    })
}

impl ZooKeeper {
    /// Starts a standalone server with its data in `dir/data` and its log in
    /// `dir/zookeeper.log`.
    ///
    /// # Errors
    /// [`ProvisionError::Missing`] without Java or Debian's zookeeper package,
    /// [`ProvisionError::NotReady`] when it does not serve within 60 s (`ruok`, `srvr`).
    pub fn start(dir: &Path) -> Result<ZooKeeper, ProvisionError> {
        ZooKeeper::start_on(dir, Runtime::Native)
    }

    /// [`start`](Self::start) on `runtime`: natively, or in a container of
    /// `eosim/zookeeper` (which has slf4j-simple).
    ///
    /// # Errors
    /// As [`start`](Self::start); [`ProvisionError::Image`] when the image is missing or stale.
    pub fn start_on(dir: &Path, runtime: Runtime) -> Result<ZooKeeper, ProvisionError> {
        create_dir("zookeeper", &dir.join("data"))?;
        let container = runtime.spec(ServiceImage::ZooKeeper, &[dir.to_path_buf()])?;
        let (java, slf4j) = match container {
            Some(_) => (PathBuf::from("java"), true),
            None => {
                require_program("zookeeper", Path::new(ZOOKEEPER_JAR))?;
                (
                    require_program("zookeeper", &java())?,
                    Path::new(SLF4J_SIMPLE_JAR).exists(),
                )
            }
        };
        let port = free_ports(1)?[0];
        let cfg = render(
            ZOO_CFG,
            &[
                ("dir", dir.display().to_string()),
                ("port", port.to_string()),
            ],
        );
        let cfg_path = dir.join("zoo.cfg");
        write_file("zookeeper", &cfg_path, &cfg)?;
        let mut classpath = ZOOKEEPER_JAR.to_string();
        if slf4j {
            classpath = format!("{classpath}:{SLF4J_SIMPLE_JAR}");
        }
        let launch = Launch {
            service: "zookeeper".into(),
            program: java,
            args: vec![
                "-Xmx256m".into(),
                "-cp".into(),
                classpath,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain".into(),
                cfg_path.display().to_string(),
            ],
            env: Vec::new(),
            cwd: dir.to_path_buf(),
            log_path: dir.join("zookeeper.log"),
            user: None,
            container,
        };
        let process = ServiceProcess::spawn(launch)?;
        let single = Single::start(
            process,
            ruok_and_serving(port),
            START_TIMEOUT_MS,
            libc::SIGTERM,
        )?;
        Ok(ZooKeeper { single, port })
    }

    /// `host:port` for clients (`127.0.0.1:<port>`).
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
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

//! Apache Kafka 4.x in KRaft mode from Maven Central's jars, one or three combined
//! broker+controller nodes.

use super::{create_dir, java, render, require_program, setup_step, write_file, INSTALL_HINT};
pub use crate::real::container::images::kafka_lib_dir;
use crate::real::container::images::KAFKA_LIBS;
use crate::real::container::{ContainerSpec, Runtime, ServiceImage};
use crate::real::lazyfs::{LazyFsMount, Unsynced};
use crate::real::process::{free_ports, Launch, ServiceProcess};
use crate::real::ProvisionError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::ClientConfig;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SERVER_PROPERTIES: &str = include_str!("../../../../real/kafka/server.properties.template");
const LOG4J2_YAML: &str = include_str!("../../../../real/kafka/log4j2.yaml");

/// How to start a Kafka cluster.
///
/// ## Default values
/// One node, 768 MiB heap per node, 120000 ms start timeout, 10 partitions for
/// `__consumer_offsets` and `__transaction_state` (Kafka's 50 take seconds to create on two
/// cores; the tests use 10, `eosim run` the scenario's `[cluster]` counts), no extra
/// properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOptions {
    /// Number of brokers, 1..=[`BROKER_COUNT_MAX`]: with 1 or 3 each node is broker and
    /// controller, with another count the brokers are brokers only beside one dedicated
    /// controller ([`dedicated_controller`]).
    pub broker_count: u32,
    /// `-Xmx` of each node's JVM, in MiB.
    pub heap_mb: u32,
    /// How long the health check waits for every broker to be registered, in ms.
    pub start_timeout_ms: u64,
    /// `offsets.topic.num.partitions`.
    pub offsets_topic_num_partitions: u32,
    /// `transaction.state.log.num.partitions`.
    pub transaction_state_log_num_partitions: u32,
    /// Extra `server.properties` lines (`key`, `value`), appended last so they win.
    pub extra_properties: Vec<(String, String)>,
    /// Child processes, or containers of `eosim/kafka` (its JVM and jars).
    pub runtime: Runtime,
    /// Per node, in node-id order: the port its PLAINTEXT listener binds and the port it
    /// advertises (a message-fault proxy's in front of it, `real::net::proxy`); empty: free
    /// ports, each advertised as bound.
    pub fronts: Vec<(u16, u16)>,
    /// The eosim binary to run `eosim lazyfs` from: each broker's data directory is then
    /// a lossy file system ([`crate::real::lazyfs`]) whose unsynced writes
    /// [`Kafka::machine_crash`] drops; `None`, the plain directory (no machine crashes).
    pub lazyfs_exe: Option<PathBuf>,
}

impl KafkaOptions {
    /// The defaults for `broker_count` nodes.
    pub fn brokers(broker_count: u32) -> Self {
        Self {
            broker_count,
            heap_mb: 768,
            start_timeout_ms: 120_000,
            offsets_topic_num_partitions: 10,
            transaction_state_log_num_partitions: 10,
            extra_properties: Vec::new(),
            runtime: Runtime::Native,
            fronts: Vec::new(),
            lazyfs_exe: None,
        }
    }
}

/// One node of the cluster.
#[derive(Debug)]
struct Node {
    node_id: i32,
    /// The listener's port (the health check's).
    port: u16,
    /// The advertised port (the clients').
    advertised_port: u16,
    /// Declared after `process`, so dropped after it: the JVM dies before its file system.
    process: ServiceProcess,
    /// The lossy file system over its data directory, if [`KafkaOptions::lazyfs_exe`].
    lazyfs: Option<LazyFsMount>,
}

/// A running Kafka cluster; dropping it kills every node.
#[derive(Debug)]
pub struct Kafka {
    /// The brokers (combined broker and controller nodes with 1 or 3 of them).
    nodes: Vec<Node>,
    /// The dedicated controller ([`dedicated_controller`]), held so that it lives and dies
    /// with the cluster: no fault targets it, as the simulation's brokers have no
    /// controller node to fault.
    _controller: Option<Node>,
    options: KafkaOptions,
    cluster_id: String,
    /// Whether the brokers' data directories are lossy file systems, or why not.
    lossy: Result<(), String>,
}

fn check_jars(lib: &Path) -> Result<(), ProvisionError> {
    let has_broker = std::fs::read_dir(lib)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("kafka_2.13-"))
        })
        .unwrap_or(false);
    if has_broker {
        return Ok(());
    }
    Err(ProvisionError::Missing {
        service: "kafka".into(),
        what: format!("{}/kafka_2.13-*.jar", lib.display()),
        hint: format!("{INSTALL_HINT}, or set EOSIM_KAFKA_LIB"),
    })
}

/// A KRaft cluster id: 16 random bytes in unpadded URL-safe base64 (22 characters), as
/// `kafka-storage random-uuid` prints. Like Kafka's `Uuid.randomUuid`, never one that
/// starts with `-`: the storage tool's argument parser would read it as an option.
fn random_cluster_id() -> String {
    loop {
        let id = random_base64_id();
        if !id.starts_with('-') {
            return id;
        }
    }
}

fn random_base64_id() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !filled {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = (nanos ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits: u32 = 0;
    let mut bit_count = 0;
    let mut out = String::with_capacity(22);
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        bit_count += 8;
        while bit_count >= 6 {
            bit_count -= 6;
            out.push(ALPHABET[((bits >> bit_count) & 63) as usize] as char);
        }
    }
    if bit_count > 0 {
        out.push(ALPHABET[((bits << (6 - bit_count)) & 63) as usize] as char);
    }
    out
}

/// Where a node keeps its files.
struct NodeLayout {
    node_id: i32,
    /// Its service name: `kafka-<node_id>`, or `kafka-controller` for a dedicated controller
    /// (`real::net::node_of_service` names the network node after it).
    service: String,
    /// The listener's port.
    port: u16,
    /// The port it advertises (clients connect there).
    advertised_port: u16,
    dir: PathBuf,
    properties: PathBuf,
}

/// The most brokers a native cluster runs (each a JVM of `heap_mb`).
pub const BROKER_COUNT_MAX: u32 = 5;

/// The node id of the dedicated controller (outside the brokers' `1..=broker_count`).
pub const CONTROLLER_NODE_ID: i32 = 100;

/// Whether `broker_count` brokers run with a dedicated controller: not 1 or 3, whose
/// combined nodes keep a quorum through any one broker's failure where there is one to
/// lose (two combined voters would lose it with either down, and every fault of a broker
/// would also be a fault of the metadata quorum).
pub fn dedicated_controller(broker_count: u32) -> bool {
    !matches!(broker_count, 1 | 3)
}

/// The brokers' layouts, in node-id order, and the dedicated controller's when
/// [`dedicated_controller`].
fn layout(
    dir: &Path,
    options: &KafkaOptions,
) -> Result<(Vec<NodeLayout>, Option<NodeLayout>), ProvisionError> {
    let n = options.broker_count as usize;
    if !(options.fronts.is_empty() || options.fronts.len() == n) {
        return Err(ProvisionError::Invalid {
            service: "kafka".into(),
            reason: format!("{} fronts for {n} nodes", options.fronts.len()),
        });
    }
    let dedicated = dedicated_controller(options.broker_count);
    // Two ports per broker (listener, controller listener in combined mode), then the
    // dedicated controller's.
    let mut ports = free_ports(2 * n + usize::from(dedicated))?;
    let mut advertised: Vec<u16> = (0..n).map(|i| ports[2 * i]).collect();
    for (i, (listen, front)) in options.fronts.iter().enumerate() {
        ports[2 * i] = *listen;
        advertised[i] = *front;
    }
    let controller_port = ports[2 * n..].first().copied();
    let voters: Vec<String> = match controller_port {
        Some(port) => vec![format!("{CONTROLLER_NODE_ID}@127.0.0.1:{port}")],
        None => (0..n)
            .map(|i| format!("{}@127.0.0.1:{}", i + 1, ports[2 * i + 1]))
            .collect(),
    };
    let rf = options.broker_count.min(3);
    let extra: String = options
        .extra_properties
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    let write = |node_id: i32, service: String, roles: &str, listeners: String, broker: String| {
        let node_dir = dir.join(&service);
        create_dir("kafka", &node_dir)?;
        let properties = node_dir.join("server.properties");
        let text = render(
            SERVER_PROPERTIES,
            &[
                ("roles", roles.to_string()),
                ("node_id", node_id.to_string()),
                ("voters", voters.join(",")),
                ("listeners", listeners),
                ("broker_listeners", broker),
                ("log_dir", node_dir.join("data").display().to_string()),
                ("replication_factor", rf.to_string()),
                ("txn_min_isr", rf.min(2).to_string()),
                (
                    "offsets_topic_num_partitions",
                    options.offsets_topic_num_partitions.to_string(),
                ),
                (
                    "transaction_state_log_num_partitions",
                    options.transaction_state_log_num_partitions.to_string(),
                ),
                ("extra", extra.clone()),
            ],
        );
        write_file("kafka", &properties, &text)?;
        Ok::<_, ProvisionError>((node_dir, properties))
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let node_id = i as i32 + 1;
        let plaintext = format!("PLAINTEXT://127.0.0.1:{}", ports[2 * i]);
        let (roles, listeners) = match dedicated {
            true => ("broker", plaintext),
            false => (
                "broker,controller",
                format!("{plaintext},CONTROLLER://127.0.0.1:{}", ports[2 * i + 1]),
            ),
        };
        let broker = format!(
            "advertised.listeners=PLAINTEXT://127.0.0.1:{}\ninter.broker.listener.name=PLAINTEXT",
            advertised[i]
        );
        let service = format!("kafka-{node_id}");
        let (node_dir, properties) = write(node_id, service.clone(), roles, listeners, broker)?;
        nodes.push(NodeLayout {
            node_id,
            service,
            port: ports[2 * i],
            advertised_port: advertised[i],
            dir: node_dir,
            properties,
        });
    }
    let controller = match controller_port {
        None => None,
        Some(port) => {
            let service = "kafka-controller".to_string();
            let listeners = format!("CONTROLLER://127.0.0.1:{port}");
            let written = write(
                CONTROLLER_NODE_ID,
                service.clone(),
                "controller",
                listeners,
                String::new(),
            )?;
            Some(NodeLayout {
                node_id: CONTROLLER_NODE_ID,
                service,
                port,
                advertised_port: port,
                dir: written.0,
                properties: written.1,
            })
        }
    };
    Ok((nodes, controller))
}

/// The JVM and jars the nodes run with: the host's (`JAVA`, [`kafka_lib_dir`]) or the
/// `eosim/kafka` image's (`java`, [`KAFKA_LIBS`]).
struct Jvm {
    java: PathBuf,
    lib: PathBuf,
    container: Option<ContainerSpec>,
}

impl Jvm {
    fn on(runtime: Runtime, dir: &Path) -> Result<Jvm, ProvisionError> {
        let container = runtime.spec(ServiceImage::Kafka, &[dir.to_path_buf()])?;
        if container.is_some() {
            return Ok(Jvm {
                java: PathBuf::from("java"),
                lib: PathBuf::from(KAFKA_LIBS),
                container,
            });
        }
        let lib = kafka_lib_dir();
        check_jars(&lib)?;
        Ok(Jvm {
            java: require_program("kafka", &java())?,
            lib,
            container,
        })
    }

    /// Node `node`'s process running `args`, its output in `node.dir/log`.
    fn launch(&self, node: &NodeLayout, args: Vec<String>, log: &str) -> Launch {
        Launch {
            service: node.service.clone(),
            program: self.java.clone(),
            args,
            env: Vec::new(),
            cwd: node.dir.clone(),
            log_path: node.dir.join(log),
            user: None,
            container: self.container.clone(),
        }
    }
}

fn java_command(lib: &Path, log4j: &Path, heap_mb: u32, main: &str) -> Vec<String> {
    vec![
        format!("-Xmx{heap_mb}m"),
        "-Xms128m".into(),
        "-XX:+UseG1GC".into(),
        "-Djava.awt.headless=true".into(),
        format!("-Dlog4j2.configurationFile={}", log4j.display()),
        "-cp".into(),
        format!("{}/*", lib.display()),
        main.into(),
    ]
}

/// Formats every node's storage, in parallel (each is a JVM start of a few seconds).
fn format_storage(
    nodes: &[&NodeLayout],
    jvm: &Jvm,
    log4j: &Path,
    cluster_id: &str,
) -> Result<(), ProvisionError> {
    let results: Vec<Result<(), ProvisionError>> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|node| {
                s.spawn(move || {
                    let mut args = java_command(&jvm.lib, log4j, 256, "kafka.tools.StorageTool");
                    args.extend(
                        ["format", "--ignore-formatted", "-t", cluster_id, "-c"].map(String::from),
                    );
                    args.push(node.properties.display().to_string());
                    let launch = jvm.launch(node, args, "format.log");
                    setup_step("storage format", &launch)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("format thread panicked"))
            .collect()
    });
    results.into_iter().collect()
}

impl Kafka {
    /// Starts `broker_count` KRaft brokers under `dir` (1 or 3 combined nodes, else brokers
    /// and one dedicated controller, [`dedicated_controller`]) and waits until every broker
    /// is registered. See [`Kafka::start_with`].
    ///
    /// # Errors
    /// As [`Kafka::start_with`].
    pub fn start(dir: &Path, broker_count: u32) -> Result<Kafka, ProvisionError> {
        Kafka::start_with(dir, KafkaOptions::brokers(broker_count))
    }

    /// Starts a cluster as `options` say: formats each node's storage under
    /// `dir/kafka-<node>/data` and runs `kafka.Kafka` with its log in
    /// `dir/kafka-<node>/kafka.log`.
    ///
    /// # Errors
    /// [`ProvisionError::Missing`] without Java or the jars, [`ProvisionError::Setup`] when
    /// formatting fails, [`ProvisionError::NotReady`] naming the first broker that did not
    /// register within `start_timeout_ms`.
    pub fn start_with(dir: &Path, options: KafkaOptions) -> Result<Kafka, ProvisionError> {
        if !(1..=BROKER_COUNT_MAX).contains(&options.broker_count) {
            return Err(ProvisionError::Invalid {
                service: "kafka".into(),
                reason: format!(
                    "broker_count must be 1..={BROKER_COUNT_MAX}, not {}",
                    options.broker_count
                ),
            });
        }
        let jvm = Jvm::on(options.runtime, dir)?;
        create_dir("kafka", dir)?;
        let log4j = dir.join("kafka-log4j2.yaml");
        write_file("kafka", &log4j, LOG4J2_YAML)?;
        let (layouts, controller) = layout(dir, &options)?;
        let cluster_id = random_cluster_id();
        let every: Vec<&NodeLayout> = layouts.iter().chain(controller.as_ref()).collect();
        format_storage(&every, &jvm, &log4j, &cluster_id)?;
        let (mut mounts, lossy) = match (&options.lazyfs_exe, options.runtime) {
            (None, _) => (Vec::new(), Err(NOT_LOSSY.to_string())),
            (Some(_), Runtime::Containers) => (
                Vec::new(),
                Err("the lossy file system (lazyfs) runs with --backend native only".into()),
            ),
            (Some(exe), Runtime::Native) => match mount_lossy(exe, &layouts) {
                Ok(m) => (m, Ok(())),
                Err(why) => (Vec::new(), Err(why)),
            },
        };
        mounts.resize_with(layouts.len(), || None);
        let mounts = std::sync::Mutex::new(mounts);
        let start = |node: &NodeLayout| -> Result<Node, ProvisionError> {
            let mut args = java_command(&jvm.lib, &log4j, options.heap_mb, "kafka.Kafka");
            args.push(node.properties.display().to_string());
            let process = ServiceProcess::spawn(jvm.launch(node, args, "kafka.log"))?;
            let lazyfs = layouts
                .iter()
                .position(|l| l.node_id == node.node_id)
                .and_then(|i| mounts.lock().expect("mounts lock")[i].take());
            Ok(Node {
                node_id: node.node_id,
                port: node.port,
                advertised_port: node.advertised_port,
                process,
                lazyfs,
            })
        };
        let controller = controller.as_ref().map(start).transpose()?;
        let nodes = layouts.iter().map(start).collect::<Result<Vec<_>, _>>()?;
        let mut kafka = Kafka {
            nodes,
            _controller: controller,
            options,
            cluster_id,
            lossy,
        };
        let all: Vec<i32> = kafka.nodes.iter().map(|n| n.node_id).collect();
        kafka.wait_registered(&all, kafka.options.start_timeout_ms)?;
        Ok(kafka)
    }
}

/// Why [`Kafka::machine_crash`] is refused without [`KafkaOptions::lazyfs_exe`].
const NOT_LOSSY: &str = "the brokers' data directories are not on the lossy file system (lazyfs)";

/// Mounts a lossy file system over each broker's data directory: the formatted
/// `data` becomes `data.disk`, the backing directory ("the disk"), and `data` the mount.
/// On any failure every mount made is undone and the directories put back; the error
/// says why (no /dev/fuse, not root, the process's log).
fn mount_lossy(exe: &Path, layouts: &[NodeLayout]) -> Result<Vec<Option<LazyFsMount>>, String> {
    crate::real::lazyfs::available()?;
    let mut mounts: Vec<Option<LazyFsMount>> = Vec::new();
    let mut moved: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut mount_one = |node: &NodeLayout| -> Result<LazyFsMount, String> {
        let (data, disk) = (node.dir.join("data"), node.dir.join("data.disk"));
        let io = |what: &str, p: &Path, e: std::io::Error| {
            format!("lazyfs: {what} {}: {e}", p.display())
        };
        std::fs::rename(&data, &disk).map_err(|e| io("moving the formatted", &data, e))?;
        moved.push((data.clone(), disk.clone()));
        std::fs::create_dir(&data).map_err(|e| io("creating the mount point", &data, e))?;
        LazyFsMount::start(
            exe,
            &format!("lazyfs-{}", node.node_id),
            &disk,
            &data,
            &node.dir.join("lazyfs.sock"),
            &node.dir.join("lazyfs.log"),
        )
    };
    for node in layouts {
        match mount_one(node) {
            Ok(m) => mounts.push(Some(m)),
            Err(why) => {
                drop(mounts);
                for (data, disk) in moved {
                    let _ = std::fs::remove_dir(&data);
                    let _ = std::fs::rename(&disk, &data);
                }
                return Err(why);
            }
        }
    }
    Ok(mounts)
}

/// A metadata fetch through `bootstrap` alone, so it succeeds only when that broker answers.
fn fetch_metadata(bootstrap: &str, timeout: Duration) -> Result<Metadata, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("socket.connection.setup.timeout.ms", "1000")
        .set("log_level", "0")
        .create()
        .map_err(|e| e.to_string())?;
    consumer
        .fetch_metadata(None, timeout)
        .map_err(|e| e.to_string())
}

impl Kafka {
    /// `bootstrap.servers` for clients: every node's advertised address, `127.0.0.1:<port>,...`
    /// (a front's port where [`KafkaOptions::fronts`] put one before it).
    pub fn bootstrap_servers(&self) -> String {
        let addrs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.advertised_port))
            .collect();
        addrs.join(",")
    }

    /// The KRaft cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Node ids, `1..=broker_count`.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.node_id).collect()
    }

    /// The log file of node `node_id`.
    ///
    /// # Errors
    /// [`ProvisionError::Invalid`] for an unknown node.
    pub fn log_path(&self, node_id: i32) -> Result<PathBuf, ProvisionError> {
        Ok(self.node(node_id)?.process.log_path().to_path_buf())
    }

    fn node(&self, node_id: i32) -> Result<&Node, ProvisionError> {
        self.nodes
            .iter()
            .find(|n| n.node_id == node_id)
            .ok_or_else(|| unknown_node(node_id))
    }

    fn node_mut(&mut self, node_id: i32) -> Result<&mut Node, ProvisionError> {
        self.nodes
            .iter_mut()
            .find(|n| n.node_id == node_id)
            .ok_or_else(|| unknown_node(node_id))
    }

    /// Waits until each of `node_ids` answers a metadata request itself and is listed as a
    /// registered broker.
    fn wait_registered(&mut self, node_ids: &[i32], timeout_ms: u64) -> Result<(), ProvisionError> {
        let started = Instant::now();
        let mut pending: Vec<i32> = node_ids.to_vec();
        let mut last_error;
        while !pending.is_empty() {
            let node = self.node_mut(pending[0])?;
            let bootstrap = format!("127.0.0.1:{}", node.port);
            match fetch_metadata(&bootstrap, Duration::from_millis(1500)) {
                Ok(m) if m.brokers().iter().any(|b| b.id() == node.node_id) => {
                    pending.remove(0);
                    continue;
                }
                Ok(m) => last_error = format!("metadata lists brokers {:?}", broker_list(&m)),
                Err(e) => last_error = e,
            }
            if let Some(status) = node.process.exit_status() {
                last_error = format!("process exited ({status}); last: {last_error}");
            }
            if started.elapsed() >= Duration::from_millis(timeout_ms) || !node.process.is_running()
            {
                return Err(ProvisionError::NotReady {
                    service: node.process.service().to_string(),
                    log_path: node.process.log_path().to_path_buf(),
                    waited_ms: started.elapsed().as_millis() as u64,
                    last_error,
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    /// Cluster metadata as a running broker sees it.
    ///
    /// # Errors
    /// [`ProvisionError::NotReady`] when no broker answers within `timeout_ms`.
    pub fn metadata(&self, timeout_ms: u64) -> Result<Metadata, ProvisionError> {
        fetch_metadata(&self.bootstrap_servers(), Duration::from_millis(timeout_ms)).map_err(|e| {
            ProvisionError::NotReady {
                service: "kafka".into(),
                log_path: self.nodes[0].process.log_path().to_path_buf(),
                waited_ms: timeout_ms,
                last_error: e,
            }
        })
    }

    /// The current leader of `topic`-`partition`, `None` while it has none.
    ///
    /// # Errors
    /// When metadata cannot be fetched or the partition does not exist.
    pub fn partition_leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<i32>, ProvisionError> {
        let m = self.metadata(10_000)?;
        let t = m.topics().iter().find(|t| t.name() == topic);
        let p = t.and_then(|t| t.partitions().iter().find(|p| p.id() == partition));
        match p {
            Some(p) if p.error().is_none() && p.leader() >= 0 => Ok(Some(p.leader())),
            Some(_) => Ok(None),
            None => Err(ProvisionError::Invalid {
                service: "kafka".into(),
                reason: format!("no partition {topic}-{partition} in metadata"),
            }),
        }
    }

    /// Leader failover: SIGKILLs the leader of `topic`-`partition` and returns its id.
    ///
    /// # Errors
    /// When the partition has no leader or metadata cannot be fetched.
    pub fn kill_leader(&mut self, topic: &str, partition: i32) -> Result<i32, ProvisionError> {
        let leader =
            self.partition_leader(topic, partition)?
                .ok_or_else(|| ProvisionError::Invalid {
                    service: "kafka".into(),
                    reason: format!("{topic}-{partition} has no leader to kill"),
                })?;
        self.kill(leader)?;
        Ok(leader)
    }

    /// Waits until `topic`-`partition` has a leader other than `old`; returns it.
    ///
    /// # Errors
    /// [`ProvisionError::NotReady`] when none is elected within `timeout_ms`.
    pub fn wait_new_leader(
        &self,
        topic: &str,
        partition: i32,
        old: i32,
        timeout_ms: u64,
    ) -> Result<i32, ProvisionError> {
        let started = Instant::now();
        let mut last = String::from("no metadata yet");
        while started.elapsed() < Duration::from_millis(timeout_ms) {
            match self.partition_leader(topic, partition) {
                Ok(Some(l)) if l != old => return Ok(l),
                Ok(l) => last = format!("leader is {l:?}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(ProvisionError::NotReady {
            service: format!("kafka leader election for {topic}-{partition}"),
            log_path: self.nodes[0].process.log_path().to_path_buf(),
            waited_ms: timeout_ms,
            last_error: last,
        })
    }

    /// SIGKILL to node `node_id` (its page cache survives: the OS keeps what was written).
    ///
    /// # Errors
    /// [`ProvisionError::Invalid`] for an unknown node.
    pub fn kill(&mut self, node_id: i32) -> Result<(), ProvisionError> {
        self.node_mut(node_id)?.process.kill();
        Ok(())
    }

    /// Whether [`Kafka::machine_crash`] can act (the brokers' data directories are lossy
    /// file systems), or why not.
    ///
    /// # Errors
    /// Why not: no [`KafkaOptions::lazyfs_exe`], containers, no /dev/fuse, not root.
    pub fn lossy_page_cache(&self) -> Result<(), String> {
        self.lossy.clone()
    }

    /// A machine crash of `node_ids` at once (a power loss): SIGKILL to each, then each
    /// one's lossy file system drops what the broker had not fsynced; what each dropped,
    /// in `node_ids` order.
    ///
    /// # Errors
    /// [`ProvisionError::Invalid`] for an unknown node, one without a lossy file system
    /// ([`Kafka::lossy_page_cache`]), or a `clear-cache` that failed.
    pub fn machine_crash(&mut self, node_ids: &[i32]) -> Result<Vec<Unsynced>, ProvisionError> {
        let service = |id: i32| format!("kafka-{id}");
        for &id in node_ids {
            if self.node(id)?.lazyfs.is_none() {
                let why = self.lossy.clone().err().unwrap_or_else(|| NOT_LOSSY.into());
                return Err(ProvisionError::Invalid {
                    service: service(id),
                    reason: format!("no machine crash: {why}"),
                });
            }
        }
        for &id in node_ids {
            self.node_mut(id)?.process.kill();
        }
        let mut dropped = Vec::with_capacity(node_ids.len());
        for &id in node_ids {
            let lazyfs = self.node(id)?.lazyfs.as_ref().expect("checked above");
            let d = lazyfs
                .clear_cache()
                .map_err(|reason| ProvisionError::Invalid {
                    service: service(id),
                    reason,
                })?;
            dropped.push(d);
        }
        Ok(dropped)
    }

    /// Starts a killed or stopped node again and waits until it is registered.
    ///
    /// # Errors
    /// [`ProvisionError::StillRunning`], [`ProvisionError::NotReady`].
    pub fn restart(&mut self, node_id: i32) -> Result<(), ProvisionError> {
        self.restart_all(&[node_id])
    }

    /// Starts killed or stopped nodes again, all of them before waiting until every one is
    /// registered (a KRaft quorum of combined nodes needs a majority of them up at once).
    ///
    /// # Errors
    /// As [`Kafka::restart`].
    pub fn restart_all(&mut self, node_ids: &[i32]) -> Result<(), ProvisionError> {
        for &id in node_ids {
            self.node_mut(id)?.process.restart()?;
        }
        self.wait_registered(node_ids, self.options.start_timeout_ms)
    }

    /// SIGSTOP to node `node_id`.
    ///
    /// # Errors
    /// [`ProvisionError::Invalid`] for an unknown node.
    pub fn pause(&mut self, node_id: i32) -> Result<(), ProvisionError> {
        self.node_mut(node_id)?.process.pause();
        Ok(())
    }

    /// SIGCONT to node `node_id`.
    ///
    /// # Errors
    /// [`ProvisionError::Invalid`] for an unknown node.
    pub fn resume(&mut self, node_id: i32) -> Result<(), ProvisionError> {
        self.node_mut(node_id)?.process.resume();
        Ok(())
    }

    /// Process ids of the running nodes (each the leader of its process group).
    pub fn pids(&self) -> Vec<i32> {
        self.nodes.iter().filter_map(|n| n.process.pid()).collect()
    }

    /// Stops every node at once: SIGTERM (controlled shutdown), SIGKILL after 15 s.
    pub fn stop(mut self) {
        for node in &mut self.nodes {
            node.process.begin_stop(libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for node in &mut self.nodes {
            node.process.finish_stop(deadline);
        }
    }
}

fn unknown_node(node_id: i32) -> ProvisionError {
    ProvisionError::Invalid {
        service: "kafka".into(),
        reason: format!("no node {node_id}"),
    }
}

fn broker_list(m: &Metadata) -> Vec<i32> {
    m.brokers().iter().map(|b| b.id()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_id_is_22_url_safe_characters() {
        let id = random_cluster_id();
        assert_eq!(id.len(), 22);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(id, random_cluster_id());
        assert!((0..1000).all(|_| !random_cluster_id().starts_with('-')));
    }

    #[test]
    fn the_internal_topics_get_their_own_partition_counts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = KafkaOptions {
            offsets_topic_num_partitions: 7,
            transaction_state_log_num_partitions: 11,
            ..KafkaOptions::brokers(1)
        };
        let (nodes, controller) = layout(dir.path(), &options).expect("layout");
        assert!(controller.is_none(), "one combined node");
        let text = std::fs::read_to_string(&nodes[0].properties).expect("server.properties");
        assert!(
            text.contains("\noffsets.topic.num.partitions=7\n"),
            "{text}"
        );
        assert!(
            text.contains("\ntransaction.state.log.num.partitions=11\n"),
            "{text}"
        );
    }

    #[test]
    fn two_brokers_run_beside_a_dedicated_controller_three_as_combined_nodes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (brokers, controller) = layout(dir.path(), &KafkaOptions::brokers(2)).expect("2");
        let controller = controller.expect("a dedicated controller for 2 brokers");
        let text = |node: &NodeLayout| std::fs::read_to_string(&node.properties).unwrap();
        let voters = format!(
            "controller.quorum.voters={CONTROLLER_NODE_ID}@127.0.0.1:{}\n",
            controller.port
        );
        assert_eq!(brokers.len(), 2);
        for broker in &brokers {
            let t = text(broker);
            assert!(
                t.contains("process.roles=broker\n") && t.contains(&voters),
                "{t}"
            );
            assert!(t.contains("advertised.listeners=PLAINTEXT://"), "{t}");
        }
        let t = text(&controller);
        assert!(
            t.contains("process.roles=controller\n") && t.contains(&voters),
            "{t}"
        );
        assert!(!t.contains("PLAINTEXT://") && controller.service == "kafka-controller");
        let (three, none) = layout(dir.path(), &KafkaOptions::brokers(3)).expect("3");
        assert!(none.is_none());
        let t = text(&three[1]);
        assert!(t.contains("process.roles=broker,controller\n"), "{t}");
        assert_eq!(t.matches("@127.0.0.1:").count(), 3, "three voters: {t}");
    }
}

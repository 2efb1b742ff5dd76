//! The real runner: a scenario file run once against real Kafka, with real faults, judged
//! by the same checkers and written into the same report as a simulated run.
//!
//! # Phases
//! 1. Brokers: `native` starts `[cluster] brokers` (1 to 5) KRaft brokers in a temporary
//!    directory (1 or 3 combined broker-and-controller nodes, else beside one dedicated
//!    controller); `testcontainers` starts the same nodes, and every other service, as
//!    containers of the locally built images ([`crate::real::container`]); `external`
//!    uses `--bootstrap-servers`.
//! 2. The topic with the scenario's settings; the pipeline's processes as `eosim worker`
//!    children ([`workers`]), each in its own process group.
//! 3. Faults: the explicit `[[faults.schedule]]` and the swarm drawn from the run's seed,
//!    until `faults.until_ms`, as real faults ([`faults`]): SIGKILL/restart and
//!    SIGSTOP/SIGCONT of `broker-N`, `producer-i`, `consumer-i`; `kill-leader` through the
//!    partition's current leader; a `clickhouse-sink`'s `[sink.fault_point]` crash
//!    ([`fault_point`]); `partition` and `clog` as nftables drops between the processes'
//!    cgroups ([`crate::real::net`]); `messages` on `clickhouse` and on brokers through
//!    proxies in front of their listeners ([`crate::real::net::proxy`]; each broker
//!    advertises its proxy's port) and on `postgres`; machine crashes of brokers through a
//!    lossy file system under their data ([`crate::real::lazyfs`]); clock jumps of workers
//!    as the timestamps their producers stamp ([`crate::real::clock`]). Message faults on
//!    ZooKeeper, machine crashes of anything but brokers and clock jumps of brokers or
//!    databases are not injected: each is named in the result's notes (the table in
//!    [`faults`]).
//! 4. Heal and drain: every killed process restarted, every paused one resumed; the
//!    pipeline must finish (producers done, the group's committed offsets at every high
//!    watermark; behind a transactional upstream, no transaction open on the input and
//!    the offsets at the end of what the group's isolation level reads) within
//!    `drain.time_s_max` s of wall time, else the run is stalled.
//! 5. Final state: the log (read_uncommitted, offset 0 to the high watermark), the group's
//!    committed offsets, the sink's files; then [`check_all`](crate::checker::check_all).
//!
//! Per pipeline ([`pipelines`]): `kafka-consume` as above; `connect-jdbc` (P2) with a
//! PostgreSQL server, change-event producers and `connect-i` sink-task processes
//! ([`connect_task`]), drained on group `connect-<name>`, its final state the table read
//! back, and a bulk load of the same rows for comparison ([`bulk`]); `streams-count` (P3)
//! with `streams-i` Streams instances ([`streams_instance`], [`streams_count`]), drained
//! on group `streams.application_id`, its final state the output read_committed;
//! `transactional-copy` with `consumer-i` copiers ([`copier_instance`],
//! [`transactional_copy`]), drained on group `copier` and on a stable output, its final
//! state the output's watermarks and read_committed view; `connect-source` with a
//! `connect-1` source-task process ([`source_instance`], [`connect_source`]) on real Kafka
//! over the simulation's model of the source database, drained on its stored offsets (and
//! a stable topic under KIP-618), its final state the change log and the topic read
//! uncommitted and committed. With `[workload]
//! "transactional.id"` the producers of `kafka-consume`, `connect-jdbc` and
//! `clickhouse-sink` write in Kafka transactions ([`upstream_instance`]), and the final
//! state records the transactions they left open as undecided.
//!
//! A real run is one run of one seed (`eosim run --seed`, default 0): the seed draws the
//! swarm's fault schedule as the simulation does ([`eosim_sim::nemesis::swarm`]), so the
//! same seed injects the same faults at the same times again; the run itself is not
//! reproducible, and its history carries times since the run's start on the machine's
//! monotonic clock ([`crate::real::clock::run_clock_ns`]).

pub mod blocking;
pub mod bulk;
pub mod clickhouse_sink;
pub mod cluster;
pub mod connect_source;
pub mod connect_state;
pub mod connect_task;
pub mod copier_instance;
pub mod doris;
pub mod fault_point;
pub mod faults;
pub mod measure;
pub mod needs;
pub mod pipelines;
pub mod plugins;
pub mod postgres_target;
pub mod result;
pub mod source_instance;
pub mod streams_count;
pub mod streams_instance;
pub mod transactional_copy;
pub mod upstream_instance;
pub mod worker;
pub mod worker_spec;
pub mod workers;

use crate::history::{History, Op, OpKind, RecordRef, Value};
use crate::real::backend::Backend;
use crate::real::container::Runtime;

use crate::real::clock::run_clock_ns;
use crate::real::provision::{Kafka, KafkaOptions, BROKER_COUNT_MAX};
use crate::real::scratch::start_in;
use crate::scenario::{ClusterSpec, Scenario};
use cluster::{Brokers, Probe, StabilityProbe};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use worker_spec::{Role, SinkBatch, SINK_GROUP};
use workers::{Worker, WorkerEnv};

/// Bound on one read of a transactional input topic for the drain's lag, ms.
const CONSUMED_END_READ_MS_MAX: u64 = 10_000;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where the services come from.
    pub backend: Backend,
    /// `bootstrap.servers` of a user's cluster (`external` only).
    pub bootstrap_servers: Option<String>,
    /// The `eosim` binary the workers run.
    pub exe: PathBuf,
    /// This scenario's directory in the report: `history.jsonl`, `sink/`, `logs/`.
    pub dir: PathBuf,
    /// Print one line per fault as it happens.
    pub verbose: bool,
    /// The seed the swarm's schedule is drawn from (`eosim run --seed`).
    pub seed: u64,
}

/// What a real run produced.
#[derive(Debug, Clone, Default)]
pub struct RealOutcome {
    /// The merged history (workers' ops by time, the nemesis', then the final state).
    pub history: History,
    /// Why the run was not run at all (a backend that does not answer here).
    pub skipped: Option<String>,
    /// Why the pipeline did not finish within the drain bound.
    pub stalled: Option<String>,
    /// Why the run could not go on (a service that did not come up, with its log file).
    pub crashed: Option<String>,
    /// Unsupported faults, worker restarts, torn sink lines: what a reader should know.
    pub notes: Vec<String>,
    /// Wall time of the whole run, s.
    pub wall_time_s: f64,
    /// The sink tasks' successful puts (`connect-jdbc`), for throughput and latency.
    pub put_marks: Vec<connect_task::PutMark>,
    /// Bulk loads of the same rows after the pipeline (`connect-jdbc`).
    pub bulk_loads: Vec<crate::report::BulkLoad>,
    /// The seed the run's swarm was drawn from ([`RunOptions::seed`]).
    pub seed: u64,
    /// The faults the run scheduled before `faults.until_ms`: the file's schedule and the
    /// swarm's drawn one, by time (what the report counts as scheduled).
    pub schedule: Vec<eosim_sim::nemesis::ScheduledFault>,
}

/// A run in progress: the brokers, the workers and what they recorded.
pub struct Run<'a> {
    scenario: &'a Scenario,
    brokers: Brokers,
    target: pipelines::Target,
    env: WorkerEnv,
    workers: Vec<Worker>,
    notes: Vec<String>,
    bulk_loads: Vec<crate::report::BulkLoad>,
    /// Connect tasks not started yet (`connect.connector_create_at_ms`).
    connector_pending: bool,
    /// Workers that crashed at their fault point, by name: when to start them again, ms
    /// since the run's epoch.
    fault_point_restarts: BTreeMap<String, u64>,
    /// Faults that could not be carried out as asked ([`Run::fail`]); any makes the run
    /// end as crashed.
    failures: Vec<String>,
    verbose: bool,
    /// The swarm's seed ([`RunOptions::seed`]).
    seed: u64,
    /// The message-fault proxies in front of the brokers' listeners, by node name
    /// (`broker-1`), when the scenario has `messages` on brokers.
    broker_proxies: BTreeMap<String, crate::real::net::proxy::Proxy>,
    /// The workers' wall-clock offsets when the scenario jumps clocks
    /// ([`needs::clock_jumps`]; `Err`: why they cannot be stepped here).
    clocks: Option<Result<crate::real::clock::ClockOffsets, String>>,
    /// The network faults' rules and cgroups when the scenario has network faults
    /// ([`needs::needs_network`]; `Err`: why they cannot be injected here). Last, so that
    /// it drops after every process it placed.
    net: Option<Result<crate::real::net::Network, String>>,
}

/// Runs `scenario` (read from `path`) once against real services.
pub fn run_real(scenario: &Scenario, path: &Path, options: &RunOptions) -> RealOutcome {
    let started = Instant::now();
    let mut outcome = match prepare(scenario, options) {
        Err(skipped) => RealOutcome {
            skipped: Some(skipped),
            ..RealOutcome::default()
        },
        Ok(()) => match start(scenario, path, options) {
            Err(crashed) => RealOutcome {
                crashed: Some(crashed),
                ..RealOutcome::default()
            },
            Ok(mut run) => run.execute(),
        },
    };
    outcome.wall_time_s = started.elapsed().as_secs_f64();
    outcome.seed = options.seed;
    outcome
}

/// Whether this backend and scenario can run here; `Err` is the skip reason.
fn prepare(scenario: &Scenario, options: &RunOptions) -> Result<(), String> {
    match options.backend {
        Backend::Testcontainers => {
            options
                .backend
                .check_available()
                .map_err(|e| e.to_string())?;
            if !matches!(scenario.cluster.brokers, 1 | 3) {
                return Err(format!(
                    "skipped: the testcontainers backend runs 1 or 3 brokers, the scenario \
                     asks for {}",
                    scenario.cluster.brokers
                ));
            }
            match crate::real::container::sweep_leftovers() {
                Ok(gone) if !gone.is_empty() => eprintln!(
                    "eosim: removed {} container(s) of runs that were killed: {}",
                    gone.len(),
                    gone.join(", ")
                ),
                Ok(_) => {}
                Err(e) => return Err(format!("skipped: docker: {e}")),
            }
            pipelines::unsupported(scenario).map_or(Ok(()), Err)
        }
        Backend::External if options.bootstrap_servers.is_none() => {
            Err("skipped: --backend external needs --bootstrap-servers".into())
        }
        Backend::Native if !(1..=BROKER_COUNT_MAX).contains(&scenario.cluster.brokers) => {
            Err(format!(
                "skipped: the native backend runs 1 to {BROKER_COUNT_MAX} brokers, the scenario \
                 asks for {}",
                scenario.cluster.brokers
            ))
        }
        _ => pipelines::unsupported(scenario).map_or(Ok(()), Err),
    }
}

/// Brokers, topic, directories and workers, started.
fn start<'a>(scenario: &'a Scenario, path: &Path, options: &RunOptions) -> Result<Run<'a>, String> {
    // Before any process starts, so that each one starts in its node's cgroup.
    let native = options.backend != Backend::External || options.bootstrap_servers.is_none();
    let net = (native && needs::needs_network(scenario)).then(crate::real::net::Network::open);
    let mut broker_proxies = BTreeMap::new();
    let runtime = match options.backend {
        Backend::Testcontainers => Runtime::Containers,
        Backend::Native | Backend::External => Runtime::Native,
    };
    let brokers = match &options.bootstrap_servers {
        Some(b) if options.backend == Backend::External => Brokers::External(b.clone()),
        _ => {
            // The scenario's internal-topic partition counts (Kafka's 50 by default), so
            // that groups and transactional ids have the coordinators the simulation gives
            // them and a `kill-leader` of `__transaction_state` partition 33 finds it.
            let fronts;
            (fronts, broker_proxies) = broker_fronts(scenario, options.seed)?;
            let options = KafkaOptions {
                fronts,
                offsets_topic_num_partitions: scenario.cluster.offsets_topic_num_partitions,
                transaction_state_log_num_partitions: scenario
                    .cluster
                    .transaction_state_log_num_partitions,
                runtime,
                extra_properties: broker_properties(&scenario.cluster),
                // A lossy file system under each broker only when the scenario crashes a
                // broker's machine: FUSE costs every log write a round trip.
                lazyfs_exe: needs::machine_crash_of_brokers(scenario).then(|| options.exe.clone()),
                ..KafkaOptions::brokers(scenario.cluster.brokers)
            };
            let (kafka, dir) = start_in("kafka", |dir| {
                Kafka::start_with(dir, options).map_err(|e| e.to_string())
            })?;
            Brokers::Native {
                kafka: Box::new(kafka),
                down: Default::default(),
                paused: Default::default(),
                dir,
            }
        }
    };
    let bootstrap = brokers.bootstrap();
    cluster::create_topic(&bootstrap, scenario)?;
    cluster::warm_offsets_log(&bootstrap, &scenario.topic.name)?;
    let target = pipelines::setup(scenario, &bootstrap, options.seed, runtime)?;
    let (sink_dir, log_dir) = (options.dir.join("sink"), options.dir.join("logs"));
    for d in [&sink_dir, &log_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    if scenario.workload.transactional_id.is_some() {
        upstream_instance::FileStore::of_run(&sink_dir).create_empty()?;
    }
    let clocks = needs::clock_jumps(scenario)
        .then(|| crate::real::clock::ClockOffsets::open(&options.dir.join("clocks")));
    let env = WorkerEnv {
        exe: options.exe.clone(),
        scenario_path: path.to_path_buf(),
        bootstrap,
        sink_dir,
        log_dir,
        epoch_ns: run_clock_ns(),
        clocks: clocks.as_ref().and_then(|c| c.as_ref().ok().cloned()),
        connector_sets: target.connector_sets(),
        ops: Arc::new(Mutex::new(Vec::new())),
    };
    let mut run = Run {
        scenario,
        brokers,
        target,
        env,
        workers: pipelines::workers(scenario),
        notes: pipelines::deviations(scenario),
        bulk_loads: Vec::new(),
        connector_pending: matches!(
            scenario.pipeline,
            crate::scenario::Pipeline::ConnectJdbc | crate::scenario::Pipeline::ConnectSource
        ),
        fault_point_restarts: BTreeMap::new(),
        failures: Vec::new(),
        verbose: options.verbose,
        seed: options.seed,
        broker_proxies,
        clocks,
        net,
    };
    if runtime == Runtime::Containers {
        run.notes.push(format!(
            "testcontainers backend: every service a container (host network) of the local \
             images {}, built by `eosim images` from Debian 12's packages and the Maven jars \
             (upstream images need a registry); the workers are eosim processes on the host",
            crate::real::container::live_images().join(", ")
        ));
    }
    run.spawn_workers()?;
    run.create_connector_by(0);
    Ok(run)
}

/// The `[cluster]` broker settings a scenario changed, as `server.properties` lines:
/// `replica.lag.time.max.ms`, `broker.session.timeout.ms`, `producer.id.expiration.ms` and
/// `producer.id.expiration.check.interval.ms` when they differ from Kafka's defaults (30000,
/// 9000, 86400000 and 600000; the template's own 6000 session stays otherwise, for short
/// failovers), the `log.flush.*` settings a scenario set, `group.initial.rebalance.delay.ms`
/// always (the scenario's, 0 unless set, where Kafka's default is 3000), KIP-937's
/// `log.message.timestamp.{before,after}.max.ms` always (the model's values, whatever the
/// broker's own defaults), and KIP-848's group settings (`group_consumer_session_timeout_ms`,
/// `group_consumer_heartbeat_interval_ms`) with the bounds Kafka checks them against
/// (`GroupCoordinatorConfig`: `group.consumer.min.*` 45000 and 5000, `group.consumer.max.*`
/// 60000 and 15000 by default) widened to take them.
fn broker_properties(cluster: &ClusterSpec) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let changed = [
        (
            "replica.lag.time.max.ms",
            cluster.replica_lag_time_max_ms,
            30_000,
        ),
        (
            "broker.session.timeout.ms",
            cluster.broker_session_timeout_ms,
            9_000,
        ),
        // KIP-854's producer-state expiry (`TransactionLogConfig`), which a producer
        // whose wall clock was stepped back runs into.
        (
            "producer.id.expiration.ms",
            cluster.producer_id_expiration_ms,
            86_400_000,
        ),
        (
            "producer.id.expiration.check.interval.ms",
            cluster.producer_id_expiration_check_interval_ms,
            600_000,
        ),
    ];
    for (name, value, kafka_default) in changed {
        if value != kafka_default {
            lines.push((name.to_string(), value.to_string()));
        }
    }
    // The log flush (fsync) settings, whose defaults are Long.MAX_VALUE (never): what a
    // machine crash of brokers keeps (`crate::real::lazyfs`).
    let flush = [
        (
            "log.flush.interval.messages",
            cluster.log_flush_interval_messages,
        ),
        (
            "log.flush.scheduler.interval.ms",
            cluster.log_flush_scheduler_interval_ms,
        ),
    ];
    for (name, value) in flush {
        if value != i64::MAX as u64 {
            lines.push((name.to_string(), value.to_string()));
        }
    }
    if let Some(ms) = cluster.log_flush_interval_ms {
        lines.push(("log.flush.interval.ms".to_string(), ms.to_string()));
    }
    // The group coordinator's wait before a new group's first rebalance, always: the
    // scenario's (eosim's default 0, as the simulated groups run it) where Kafka's own is
    // 3000 (`GroupCoordinatorConfig`), which held every real group's first assignment 3 s
    // past the simulation's (real Streams instances got their tasks 3-4 s into a run).
    lines.push((
        "group.initial.rebalance.delay.ms".to_string(),
        cluster.group_initial_rebalance_delay_ms.to_string(),
    ));
    // KIP-937's timestamp window, whatever the broker's own default (Kafka 4.1's are the
    // model's; a 3.x broker's `after` default is `Long.MAX_VALUE`).
    let model = cluster.to_config();
    lines.push((
        "log.message.timestamp.before.max.ms".to_string(),
        model.log_message_timestamp_before_max_ms.to_string(),
    ));
    lines.push((
        "log.message.timestamp.after.max.ms".to_string(),
        model.log_message_timestamp_after_max_ms.to_string(),
    ));
    let settings = [
        (
            "session.timeout.ms",
            cluster.group_consumer_session_timeout_ms,
            45_000,
            60_000,
        ),
        (
            "heartbeat.interval.ms",
            cluster.group_consumer_heartbeat_interval_ms,
            5_000,
            15_000,
        ),
    ];
    for (name, value, min, max) in settings {
        let Some(value) = value else { continue };
        lines.push((format!("group.consumer.{name}"), value.to_string()));
        lines.push((
            format!("group.consumer.min.{name}"),
            value.min(min).to_string(),
        ));
        lines.push((
            format!("group.consumer.max.{name}"),
            value.max(max).to_string(),
        ));
    }
    lines
}

/// Per broker, its bound and advertised ports ([`KafkaOptions::fronts`]), and the proxies
/// by node name.
type BrokerFronts = (
    Vec<(u16, u16)>,
    BTreeMap<String, crate::real::net::proxy::Proxy>,
);

/// With `messages` on brokers ([`needs::messages_on_brokers`]): a free listener port per
/// broker and a Kafka-framed proxy in front of it, whose port the broker advertises, so
/// every client reaches it through the proxy; else nothing.
///
/// # Errors
/// No free port, a proxy that cannot bind.
fn broker_fronts(scenario: &Scenario, seed: u64) -> Result<BrokerFronts, String> {
    use crate::real::net::proxy::{Framing, Proxy};
    let mut proxies = BTreeMap::new();
    if !needs::messages_on_brokers(scenario) {
        return Ok((Vec::new(), proxies));
    }
    let n = scenario.cluster.brokers as usize;
    let ports = crate::real::process::free_ports(n).map_err(|e| e.to_string())?;
    let mut fronts = Vec::with_capacity(n);
    for (i, port) in ports.into_iter().enumerate() {
        let name = format!("broker-{}", i + 1);
        let proxy = Proxy::in_front_of(&name, port, seed, Framing::Kafka)?;
        fronts.push((port, proxy.port()));
        proxies.insert(name, proxy);
    }
    Ok((fronts, proxies))
}

impl Run<'_> {
    /// Starts every worker but the Connect tasks when the connector is created later
    /// (`connect.connector_create_at_ms` > 0, see `create_connector_by`).
    fn spawn_workers(&mut self) -> Result<(), String> {
        for worker in &mut self.workers {
            if self.connector_pending && worker.role.is_connect_task() {
                continue;
            }
            worker.start(&self.env)?;
        }
        Ok(())
    }

    /// ns since the run's epoch.
    fn now_ns(&self) -> u64 {
        run_clock_ns().saturating_sub(self.env.epoch_ns)
    }

    /// Records a nemesis op (kind `info`, as the simulation does) and prints it.
    fn record_fault(&mut self, name: &str, detail: String) {
        let t = self.now_ns();
        if self.verbose {
            println!("t={:.3}s nemesis {name} {detail}", t as f64 / 1e9);
        }
        let value = Value::Fault {
            name: name.to_string(),
            detail,
        };
        self.push(t, "nemesis", value);
    }

    /// Records `value` as an `info` op of `process` (faults, effects).
    fn push(&self, time_ns: u64, process: &str, value: Value) {
        self.push_kind(time_ns, process, OpKind::Info, value);
    }

    /// Records `value` as an `ok` op of `process` (what a fault certainly did, such as the
    /// records a `delete-records` removed).
    fn push_ok(&self, time_ns: u64, process: &str, value: Value) {
        self.push_kind(time_ns, process, OpKind::Ok, value);
    }

    fn push_kind(&self, time_ns: u64, process: &str, kind: OpKind, value: Value) {
        let op = Op {
            index: 0,
            time_ns,
            process: process.into(),
            kind,
            value,
            error: None,
        };
        self.env.ops.lock().expect("ops lock").push(op);
    }

    fn execute(&mut self) -> RealOutcome {
        let schedule = self.run_faults();
        self.create_connector_by(u64::MAX);
        self.heal();
        let t = self.now_ns();
        self.push(t, "nemesis", Value::Drain);
        let stalled = self.drain();
        for w in &mut self.workers {
            w.kill(&self.env);
        }
        let mut history = self.merged_history();
        self.record_open_upstream(&mut history);
        let bootstrap = self.env.bootstrap.clone();
        let fin = match &self.target {
            pipelines::Target::Files => None,
            pipelines::Target::Postgres(t) => Some(pipelines::final_state_cdc(
                t,
                self.scenario,
                &bootstrap,
                &history,
            )),
            pipelines::Target::ClickHouse(t) => Some(clickhouse_sink::final_state(
                t,
                self.scenario,
                &bootstrap,
                &history,
            )),
            pipelines::Target::Copy => {
                Some(transactional_copy::final_state(self.scenario, &bootstrap))
            }
            pipelines::Target::Streams => {
                Some(streams_count::final_state(self.scenario, &bootstrap))
            }
            pipelines::Target::Source => Some(connect_source::final_state(
                self.scenario,
                &bootstrap,
                &history,
            )),
        }
        .unwrap_or_else(|| self.final_state_files());
        let crashed = match fin {
            Ok(state) => {
                let at = self.now_ns();
                for value in state.values {
                    history.push(at, "final", OpKind::Ok, value, None);
                }
                match state.bulk_loads {
                    Ok(loads) => self.bulk_loads = loads,
                    Err(e) => self.notes.push(e),
                }
                None
            }
            Err(e) => Some(e),
        }
        .or_else(|| self.failed_faults());
        self.note_bad_lines();
        RealOutcome {
            history,
            skipped: None,
            stalled,
            crashed,
            notes: std::mem::take(&mut self.notes),
            wall_time_s: 0.0,
            put_marks: self.read_put_marks(),
            bulk_loads: std::mem::take(&mut self.bulk_loads),
            seed: self.seed,
            schedule,
        }
    }

    /// With a transactional upstream ([`upstream_instance`]): records the transactions its
    /// producers left open as invokes without completion (undecided), as the simulation's
    /// final state does; a store that cannot be read is noted.
    fn record_open_upstream(&mut self, history: &mut History) {
        if self.scenario.workload.transactional_id.is_none() {
            return;
        }
        let store = upstream_instance::FileStore::of_run(&self.env.sink_dir);
        match store.take_open_at_end() {
            Ok(open) => {
                let at = self.now_ns();
                for (process, value) in open {
                    history.push(at, &process, OpKind::Invoke, value, None);
                }
            }
            Err(e) => self
                .notes
                .push(format!("open upstream transactions not recorded: {e}")),
        }
    }

    /// Why the run is not the one its scenario describes, if a fault could not be carried out.
    fn failed_faults(&self) -> Option<String> {
        (!self.failures.is_empty()).then(|| {
            let what = self.failures.join("; ");
            format!("a fault the schedule asked for could not be carried out: {what}")
        })
    }

    /// The workers' and the nemesis' ops by time (stable), numbered.
    fn merged_history(&self) -> History {
        let mut ops = std::mem::take(&mut *self.env.ops.lock().expect("ops lock"));
        ops.sort_by_key(|op| op.time_ns);
        let mut history = History::default();
        for op in ops {
            history.push(op.time_ns, &op.process, op.kind, op.value, op.error);
        }
        history
    }

    /// Waits until the producers are done, the group committed up to every high
    /// watermark and no transaction is open on the pipeline's transactional outputs
    /// ([`pipelines::transactional_outputs`]); `Some(reason)` past `drain.time_s_max`.
    fn drain(&mut self) -> Option<String> {
        let bound = Duration::from_secs(self.scenario.drain.time_s_max);
        let started = Instant::now();
        let group = pipelines::group(self.scenario);
        let probe = match Probe::of_scenario(&self.env.bootstrap, self.scenario, &group) {
            Ok(p) => p,
            Err(e) => return Some(e),
        };
        let outputs = pipelines::transactional_outputs(self.scenario);
        let stability = match outputs.is_empty() {
            true => None,
            false => match StabilityProbe::new(
                &self.env.bootstrap,
                &outputs,
                self.scenario.topic.partitions,
            ) {
                Ok(p) => Some(p),
                Err(e) => return Some(e),
            },
        };
        loop {
            self.restart_exited();
            let lag = self.lag(&probe, stability.as_ref());
            if lag.is_empty() {
                return None;
            }
            if started.elapsed() >= bound {
                return Some(format!(
                    "no convergence after {} s wall time: {}",
                    self.scenario.drain.time_s_max,
                    lag.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Producers not done, partitions whose committed offset is behind the high
    /// watermark, and (with `stability`) output partitions with an open transaction.
    fn lag(&mut self, probe: &Probe, stability: Option<&StabilityProbe>) -> Vec<String> {
        let mut lag: Vec<String> = self
            .workers
            .iter()
            .filter(|w| w.role.is_producer() && w.has_work())
            .map(|w| format!("{} not done", w.name))
            .collect();
        if self.scenario.pipeline == crate::scenario::Pipeline::ConnectSource {
            // No consumer group: the stored source offsets are the pipeline's progress.
            self.extend_open_transactions(stability, &mut lag);
            let failed: Vec<String> = (self.workers.iter())
                .filter(|w| w.role.is_connect_task() && !w.has_work())
                .map(|w| w.name.clone())
                .collect();
            lag.extend(connect_source::lag(
                &self.env.bootstrap,
                self.scenario,
                &failed,
            ));
            return lag;
        }
        let (high, committed) = match (probe.high_watermarks(), probe.committed()) {
            (Ok(h), Ok(c)) => (h, c.into_iter().collect::<BTreeMap<_, _>>()),
            (Err(e), _) | (_, Err(e)) => return vec![e],
        };
        self.extend_open_transactions(stability, &mut lag);
        let settled = lag.is_empty();
        lag.extend(self.committed_lag(&high, &committed, settled));
        lag
    }

    /// With `stability`, a lag line per partition of the transactional outputs with an open
    /// transaction (or the error that kept them from being read).
    fn extend_open_transactions(&self, stability: Option<&StabilityProbe>, lag: &mut Vec<String>) {
        if let Some(stability) = stability {
            match stability.open_transactions() {
                Ok(open) => lag.extend(open),
                Err(e) => lag.push(e),
            }
        }
    }

    /// The partitions whose committed offset is behind the end of what the group reads:
    /// the high watermark, or behind a transactional upstream
    /// ([`pipelines::upstream_isolation`]) the offset after the last record the group's
    /// isolation level returns ([`cluster::consumed_ends`]), read only once the producers
    /// are done and no transaction is open (`settled`), when that end no longer moves.
    fn committed_lag(
        &self,
        high: &BTreeMap<TopicPartition, Offset>,
        committed: &BTreeMap<TopicPartition, Offset>,
        settled: bool,
    ) -> Vec<String> {
        let at = |tp: &TopicPartition| committed.get(tp).copied().unwrap_or(0);
        let behind: Vec<_> = high.iter().filter(|(tp, hw)| at(tp) < **hw).collect();
        let isolation = pipelines::upstream_isolation(self.scenario);
        let ends = match isolation {
            Some(isolation) if settled && !behind.is_empty() => Some(cluster::consumed_ends(
                &self.env.bootstrap,
                high,
                CONSUMED_END_READ_MS_MAX,
                isolation,
            )),
            _ => None,
        };
        match ends {
            None => (behind.into_iter())
                .map(|(tp, hw)| format!("{tp}: committed {} < high watermark {hw}", at(tp)))
                .collect(),
            Some(Err(e)) => vec![e],
            Some(Ok(ends)) => (ends.into_iter())
                .filter(|(tp, end)| at(tp) < *end)
                .map(|(tp, end)| {
                    let c = at(&tp);
                    format!("{tp}: committed {c} < {end}, the end of what the group reads")
                })
                .collect(),
        }
    }

    /// Reaps workers that ended by themselves: a sink task that crashed at its fault
    /// point is restarted when its time is up; a producer that finished is done; a sink
    /// task that failed stays FAILED (Connect does not restart it) unless `[connect]
    /// restart_failed_after_ms` > 0, when the operator restarts it; any other exit is
    /// noted and the worker started again (as the heal phase would).
    fn restart_exited(&mut self) {
        // A crash at a fault point is a kill, not a failure: restarted, once its time is up.
        self.restart_fault_point_crashes();
        let mut notes = Vec::new();
        let restart_failed = self.scenario.connect.restart_failed_after_ms > 0;
        for i in 0..self.workers.len() {
            let w = &mut self.workers[i];
            let Some(status) = w.exit_status() else {
                continue;
            };
            w.reap(&self.env);
            if w.role.is_producer() && status.success() {
                w.mark_done();
                continue;
            }
            let log = w.log_path(&self.env).display().to_string();
            if w.role.is_connect_task() && !restart_failed {
                w.mark_failed();
                notes.push(format!(
                    "{}: the {} task failed ({status}) and stays FAILED, as in Connect \
                     (log: {log})",
                    w.name,
                    match w.role {
                        Role::SourceTask => "source",
                        _ => "sink",
                    }
                ));
                continue;
            }
            notes.push(format!(
                "{} exited by itself ({status}) and was started again (log: {log})",
                w.name
            ));
            if w.has_work() {
                if let Err(e) = w.start(&self.env) {
                    notes.push(e);
                }
            }
            if w.role.is_connect_task() {
                let task = connect_task::task_id(&w.name);
                self.record_restart_task(task);
            }
        }
        self.notes.extend(notes);
    }

    /// The operator's `restart-task` of a FAILED task, as in simulation.
    fn record_restart_task(&mut self, task: u32) {
        let connector = self
            .scenario
            .connector
            .get("name")
            .cloned()
            .unwrap_or_default();
        let op = Op {
            index: 0,
            time_ns: self.now_ns(),
            process: "operator".into(),
            kind: OpKind::Ok,
            value: Value::RestartTask { connector, task },
            error: None,
        };
        self.env.ops.lock().expect("ops lock").push(op);
    }

    /// The sink tasks' put marks (`<sink>/*.puts.jsonl`), torn lines skipped.
    fn read_put_marks(&self) -> Vec<connect_task::PutMark> {
        let Ok(entries) = std::fs::read_dir(&self.env.sink_dir) else {
            return Vec::new();
        };
        let mut marks = Vec::new();
        for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if !path.to_string_lossy().ends_with(".puts.jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            marks.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
        }
        marks
    }

    /// The final state of a `kafka-consume` run: the log, the sink files' rows, the
    /// group's committed offsets.
    fn final_state_files(&mut self) -> Result<connect_state::FinalState, String> {
        let (log, offsets) =
            connect_state::source_and_offsets(&self.env.bootstrap, self.scenario, SINK_GROUP)?;
        let mut values: Vec<Value> = log
            .into_iter()
            .map(|(tp, records)| {
                let records = records
                    .iter()
                    .map(|r| r.record_ref(&tp, r.value_id()))
                    .collect();
                Value::LogState { tp, records }
            })
            .collect();
        values.push(Value::SinkState {
            rows: self.read_sink()?,
        });
        values.push(Value::CommittedOffsets { offsets });
        Ok(connect_state::FinalState {
            values,
            bulk_loads: Ok(Vec::new()),
        })
    }

    /// Every durable batch of every consumer's sink file, in write order (the batches'
    /// times; the files share one clock); a torn last line (a kill inside a write) is
    /// skipped and noted.
    fn read_sink(&mut self) -> Result<Vec<RecordRef>, String> {
        let dir = &self.env.sink_dir;
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("sink {}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .filter(|p| !p.to_string_lossy().ends_with(".puts.jsonl"))
            .collect();
        files.sort();
        let mut batches = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("sink {}: {e}", file.display()))?;
            for (n, line) in text.lines().enumerate() {
                match serde_json::from_str::<SinkBatch>(line) {
                    Ok(batch) => batches.push(batch),
                    Err(_) => self.notes.push(format!(
                        "sink {} line {}: torn write skipped (not durable)",
                        file.display(),
                        n + 1
                    )),
                }
            }
        }
        batches.sort_by_key(|b| b.time_ns);
        Ok(batches.into_iter().flat_map(|b| b.rows).collect())
    }

    fn note_bad_lines(&mut self) {
        for w in &self.workers {
            let bad = w.bad_lines.lock().expect("bad lines lock");
            if !bad.is_empty() {
                self.notes.push(format!(
                    "{}: {} output line(s) were not ops (first: {:?})",
                    w.name,
                    bad.len(),
                    bad[0]
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(lines: &[(String, String)], name: &str) -> Option<String> {
        lines
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// The real brokers' first rebalance of a group waits what the simulated
    /// coordinator waits: 0 unless the scenario sets it, never Kafka's 3000 by omission.
    #[test]
    fn the_brokers_take_the_scenarios_initial_rebalance_delay() {
        let mut cluster = ClusterSpec::default();
        let name = "group.initial.rebalance.delay.ms";
        assert_eq!(
            value_of(&broker_properties(&cluster), name).as_deref(),
            Some("0")
        );
        cluster.group_initial_rebalance_delay_ms = 3_000;
        assert_eq!(
            value_of(&broker_properties(&cluster), name).as_deref(),
            Some("3000")
        );
    }

    /// The sibling modules of `real::run` import one another without a circle (issue 13
    /// asked for the 10-file import circle to go): a `super::<module>` outside comments and
    /// unit tests is an import (`test_support::import_circle`).
    #[test]
    fn the_run_modules_import_one_another_without_a_circle() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/real/run");
        let modules = crate::test_support::modules_in(&dir, &["mod"], false);
        if let Some(circle) = crate::test_support::import_circle(&modules, "super::") {
            panic!("import circle: {}", circle.join(" -> "));
        }
        assert!(modules.len() > 20, "read {} modules", modules.len());
    }
}

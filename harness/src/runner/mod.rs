//! The simulation runner: one scenario, one seed, one fresh madsim runtime on a fresh OS
//! thread (std's `RandomState` differs per thread, so nothing leaks between runs); then the
//! checkers, and over many seeds the scenario's verdict.
//!
//! A run has three phases: setup (brokers, topic, processes), faults until
//! `faults.until_ms`, and heal-and-drain: every fault is undone, every process restarted or
//! resumed, and the pipeline must catch up (producers done, the sink's group committed up to
//! every partition's high watermark) within `drain.time_s_max`, or the run is `stalled`.

pub mod nemesis;

pub use crate::workload::Pipeline;

use crate::history::{History, OpKind, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::world::World;
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::service::KafkaWorld;
use eosim_sim::kafka::TopicPartition;
use eosim_sim::nemesis::{swarm, ScheduledFault};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

/// What one seed of one scenario produced.
#[derive(Debug, Clone)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// The recorded history.
    pub history: History,
    /// `Some(reason)` when the pipeline did not catch up within the drain bound.
    pub stalled: Option<String>,
    /// `Some(message)` when a model or component panicked (a crash verdict).
    pub crashed: Option<String>,
    /// Simulated time the run took, ms.
    pub sim_time_ms: u64,
    /// Coverage marks hit, with counts.
    pub marks: BTreeMap<String, u64>,
    /// Per effect kind ([`eosim_sim::effects::kind`]), how many times it was scheduled:
    /// by the nemesis' schedule (`Fault::effect_kinds` of each applied fault) or
    /// armed by a component (a fault point, a BUGGIFY probability, bad records).
    pub scheduled: BTreeMap<String, u64>,
    /// Per effect kind, how many times a fault of that kind acted.
    pub acted: BTreeMap<String, u64>,
    /// Swarm parameters drawn for this seed, as `key=value` lines.
    pub drawn: Vec<String>,
    /// The faults this seed applied (explicit and swarm-drawn, before `faults.until_ms`),
    /// in time order: what a shrinker starts from.
    pub schedule: Vec<ScheduledFault>,
}

/// Runs `scenario` with `seed` in a fresh simulator on a fresh OS thread. `verbose` prints
/// one line per fault as it happens.
pub fn run_seed(scenario: &Scenario, seed: u64) -> SeedOutcome {
    run_seed_with(scenario, seed, false)
}

/// As [`run_seed`], printing nemesis events when `verbose`.
pub fn run_seed_with(scenario: &Scenario, seed: u64, verbose: bool) -> SeedOutcome {
    run_seed_probed(scenario, seed, verbose).0
}

/// As [`run_seed_with`], with a weak reference to the run's Kafka model: once the run is
/// over it must be dead, since every node and task of a seed goes with the seed (tests of
/// that hold it; see [`World::shutdown`]).
#[doc(hidden)]
pub fn run_seed_probed(
    scenario: &Scenario,
    seed: u64,
    verbose: bool,
) -> (SeedOutcome, std::sync::Weak<std::sync::Mutex<Cluster>>) {
    let scenario = Arc::new(scenario.clone());
    let thread = std::thread::Builder::new()
        .name(format!("sim-{}-{seed}", scenario.name))
        .spawn(move || {
            let runtime =
                madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
            runtime.block_on(simulate(scenario, seed, verbose))
        })
        .expect("spawn a simulation thread");
    match thread.join() {
        Ok(probed) => probed,
        Err(panic) => (
            SeedOutcome::crashed(seed, panic_message(&panic)),
            std::sync::Weak::new(),
        ),
    }
}

impl SeedOutcome {
    /// The outcome of a seed whose run panicked with `message`: no history, nothing else.
    pub fn crashed(seed: u64, message: String) -> Self {
        Self {
            seed,
            history: History::default(),
            stalled: None,
            crashed: Some(message),
            sim_time_ms: 0,
            marks: BTreeMap::new(),
            scheduled: BTreeMap::new(),
            acted: BTreeMap::new(),
            drawn: Vec::new(),
            schedule: Vec::new(),
        }
    }
}

/// The text of a panic's payload.
pub fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "panic with a non-text payload".into()
    }
}

async fn simulate(
    scenario: Arc<Scenario>,
    seed: u64,
    verbose: bool,
) -> (SeedOutcome, std::sync::Weak<std::sync::Mutex<Cluster>>) {
    crate::marks::take();
    eosim_sim::effects::take();
    let brokers = scenario.cluster.brokers;
    let kafka = KafkaWorld::new(Cluster::new(brokers, scenario.cluster.to_config()));
    let mut world = World::new(kafka, brokers);
    // Every pipeline records a produce's invoke and completion per record, and a few more
    // ops per batch, transaction or fault (capped: a soak's history grows as it goes).
    let records = usize::try_from(scenario.workload.records).map_or(1 << 20, |r| r.min(1 << 20));
    world.recorder.reserve(2 * records + 1024);
    let recorder = world.recorder.clone();
    eosim_sim::effects::set_sink(move |effect| {
        let value = Value::Effect {
            kind: effect.kind.to_string(),
            detail: effect.detail.clone(),
        };
        recorder.record(now_ns(), &effect.process, OpKind::Info, value, None);
    });
    world.add_kafka();
    let mut pipeline = crate::workload::pipeline_for(scenario.clone(), world.recorder.clone());
    create_topics(&mut world, &scenario, pipeline.topics()).await;
    pipeline.start(&mut world);
    let (mut schedule, drawn) = match build_schedule(&world, &scenario) {
        Ok(s) => s,
        Err(e) => panic!("scenario {}: faults: {e}", scenario.name),
    };
    schedule.retain(|f| f.at_ms < scenario.faults.until_ms);
    run_schedule(&world, &schedule, scenario.faults.until_ms, verbose).await;
    let stalled = drain(&world, pipeline.as_ref(), &scenario, verbose).await;
    pipeline.record_final(&world);
    let taken = eosim_sim::effects::take();
    let mut scheduled = taken.armed;
    for f in &schedule {
        for kind in f.fault.effect_kinds() {
            *scheduled.entry(kind.to_string()).or_default() += 1;
        }
    }
    let outcome = SeedOutcome {
        seed,
        history: world.recorder.take(),
        stalled,
        crashed: None,
        sim_time_ms: now_ns() / 1_000_000,
        marks: crate::marks::take(),
        scheduled,
        acted: taken.acted,
        drawn,
        schedule,
    };
    // Every node and task of the run goes with it (see `World::shutdown`); nothing is
    // recorded after the history is taken above, so the outcome does not depend on this.
    world.shutdown();
    (outcome, Arc::downgrade(&world.kafka.cluster))
}

/// Creates `topics` from an `admin` node, waiting until they exist.
async fn create_topics(world: &mut World, scenario: &Arc<Scenario>, topics: Vec<TopicSpec>) {
    use crate::client::sim::{admin::SimAdmin, conn::Connection};
    use crate::client::Admin;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let done_tx = Arc::new(std::sync::Mutex::new(Some(done_tx)));
    let brokers = scenario.cluster.brokers;
    world.add_node("admin", IpAddr::V4(Ipv4Addr::new(10, 0, 9, 1)), move || {
        let (topics, done_tx) = (topics.clone(), done_tx.clone());
        async move {
            let result = async {
                let conn = Connection::open(brokers).await.map_err(|e| e.to_string())?;
                let admin = SimAdmin::new(conn, Duration::from_secs(60));
                for t in &topics {
                    let config = t.to_config();
                    admin
                        .create_topic(&t.name, t.partitions, t.replication_factor, config)
                        .await
                        .map_err(|e| format!("topic {}: {e}", t.name))?;
                }
                Ok::<(), String>(())
            }
            .await;
            if let Some(tx) = done_tx.lock().expect("admin lock").take() {
                let _ = tx.send(result);
            }
        }
    });
    match done_rx.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("scenario {}: cannot create topics: {e}", scenario.name),
        Err(_) => panic!("scenario {}: the admin node died", scenario.name),
    }
}

/// The scenario's explicit faults and this seed's swarm, in time order.
fn build_schedule(
    world: &World,
    scenario: &Scenario,
) -> Result<(Vec<ScheduledFault>, Vec<String>), String> {
    let mut schedule = scenario.faults.schedule.clone();
    let mut drawn_lines = Vec::new();
    if let Some(swarm) = &scenario.faults.swarm {
        let rng = &mut madsim::rand::thread_rng();
        let drawn = swarm::draw(swarm, rng);
        drawn_lines = drawn.lines();
        let (targets, names) = (world.resolve(&swarm.targets)?, world.names());
        let topology = swarm::Topology {
            targets: &targets,
            names: &names,
            topic: &scenario.topic.name,
            partitions: scenario.topic.partitions,
        };
        let window = (swarm::START_MS, scenario.faults.until_ms);
        schedule.extend(swarm::schedule(&drawn, topology, window, rng));
    }
    for f in &schedule {
        if let Err(e) = world.resolve(&fault_targets(&f.fault)) {
            return Err(format!("at_ms={}: {e}", f.at_ms));
        }
    }
    schedule.sort_by_key(|f| f.at_ms);
    Ok((schedule, drawn_lines))
}

fn fault_targets(fault: &eosim_sim::nemesis::Fault) -> Vec<String> {
    use eosim_sim::nemesis::Fault;
    match fault {
        Fault::Kill { target, .. }
        | Fault::Restart { target }
        | Fault::Pause { target }
        | Fault::Resume { target }
        | Fault::Clog { target }
        | Fault::ClockJump { target, .. } => target.clone(),
        Fault::Partition { source, target, .. } | Fault::Messages { source, target, .. } => {
            source.iter().chain(target).cloned().collect()
        }
        Fault::KillLeader { .. }
        | Fault::DeleteRecords { .. }
        | Fault::AddPartitions { .. }
        | Fault::Heal => Vec::new(),
    }
}

async fn run_schedule(world: &World, schedule: &[ScheduledFault], until_ms: u64, verbose: bool) {
    for f in schedule {
        let now_ms = now_ns() / 1_000_000;
        if f.at_ms > now_ms {
            madsim::time::sleep(Duration::from_millis(f.at_ms - now_ms)).await;
        }
        nemesis::apply(world, &f.fault, verbose).expect("targets were resolved up front");
    }
    let now_ms = now_ns() / 1_000_000;
    if until_ms > now_ms {
        madsim::time::sleep(Duration::from_millis(until_ms - now_ms)).await;
    }
}

/// Heals everything, then waits until the pipeline reports no lag. Returns the stall
/// reason, if any.
async fn drain(
    world: &World,
    pipeline: &dyn Pipeline,
    scenario: &Scenario,
    verbose: bool,
) -> Option<String> {
    nemesis::recover_everything(world, verbose);
    world
        .recorder
        .record(now_ns(), "nemesis", OpKind::Info, Value::Drain, None);
    let deadline = now_ns() + scenario.drain.time_s_max * 1_000_000_000;
    let topics: Vec<String> = pipeline.topics().into_iter().map(|t| t.name).collect();
    loop {
        let mut lag = offline_partitions(world, &topics);
        lag.extend(pipeline.lag(world));
        if lag.is_empty() {
            return None;
        }
        if now_ns() >= deadline {
            let mut reason = format!(
                "no convergence after {} s sim time: {}",
                scenario.drain.time_s_max,
                lag.join("; ")
            );
            // A broker that refused a request by closing the connection (KoP with its
            // transaction coordinator off) is the cause a user needs to see first.
            let closed = world
                .kafka
                .cluster
                .lock()
                .expect("cluster lock")
                .closed_connections();
            if !closed.is_empty() {
                reason = format!(
                    "brokers closed connections ({}); {reason}",
                    closed.join("; ")
                );
            }
            return Some(reason);
        }
        madsim::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The partitions of `topics` that have no leader, one line each. The drain waits for them
/// as for any lag: a partition without a leader cannot be read, and a final read taken
/// then would record its log as empty, every acknowledged write on it as lost
/// (`Cluster::records` reads the leader's replica). Right after the heal the controller
/// may not have unfenced a broker and elected a leader yet; a partition that never gets
/// one again (its ISR gone with unclean election disabled) stalls the run with this
/// reason, which is what a real cluster shows: unavailable, not known to be lost.
fn offline_partitions(world: &World, topics: &[String]) -> Vec<String> {
    let cluster = world.kafka.cluster.lock().expect("cluster lock");
    let mut offline = Vec::new();
    for topic in topics {
        for p in 0..cluster.partition_count(topic).unwrap_or(0) {
            let tp = TopicPartition::new(topic.as_str(), p);
            if cluster.leader(&tp).is_none() {
                offline.push(format!("{tp}: offline (no leader), its log cannot be read"));
            }
        }
    }
    offline
}

/// This process's resident memory in KiB (`VmRSS` of `/proc/self/status`); `None` where
/// there is no such file (not Linux).
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

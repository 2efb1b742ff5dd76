//! The nemesis at work: each fault of a seed's schedule (the scenario's explicit faults and
//! the swarm's, [`eosim_sim::nemesis::swarm`]) turned into madsim kills, pauses, clogged
//! links and message faults, recorded in the history.

use crate::history::refs::{parse_id, text};
use crate::history::{OpKind, RecordRef, Value};
use crate::world::{broker_name, World};
use eosim_sim::clock::now_ns;
use eosim_sim::effects::{self, kind};
use eosim_sim::kafka::model::CrashMode;
use eosim_sim::kafka::TopicPartition;
use eosim_sim::nemesis::{DeleteBefore, DeletePoint, Fault};
use eosim_sim::net::{clear_message_faults, set_message_faults, MessageFaults};
use madsim::net::NetSim;
use madsim::rand::Rng;

/// Applies one fault now and records it. Unknown targets are errors (a scenario typo must
/// not pass as a quiet run).
pub fn apply(world: &World, fault: &Fault, verbose: bool) -> Result<(), String> {
    match fault {
        Fault::Kill { target, mode } => {
            for name in world.resolve(target)? {
                kill(world, &name, *mode, kind::KILL, verbose);
            }
        }
        Fault::KillLeader {
            topic,
            partition,
            mode,
        } => {
            let tp = TopicPartition::new(topic.as_str(), *partition);
            let leader = world
                .kafka
                .cluster
                .lock()
                .expect("cluster lock")
                .leader(&tp);
            match leader {
                Some(b) => kill(world, &broker_name(b), *mode, kind::KILL_LEADER, verbose),
                None => world.record_fault("kill-leader", format!("{tp} has no leader"), verbose),
            }
        }
        Fault::Restart { target } => {
            for name in world.resolve(target)? {
                restart(world, &name, verbose);
            }
        }
        Fault::Pause { target } | Fault::Resume { target } => {
            let pause = matches!(fault, Fault::Pause { .. });
            for name in world.resolve(target)? {
                pause_or_resume(world, &name, pause, verbose);
            }
        }
        Fault::Partition {
            source,
            target,
            one_way,
        } => partition(
            world,
            &world.resolve(source)?,
            &world.resolve(target)?,
            *one_way,
            verbose,
        ),
        Fault::Clog { target } => {
            for name in world.resolve(target)? {
                let (id, ip) = world.node(&name).expect("resolved names exist");
                NetSim::current().clog_node(id);
                eosim_sim::net::set_clogged(ip, true);
                world
                    .net
                    .lock()
                    .expect("net lock")
                    .clogged
                    .insert(name.clone());
                world.record_fault("clog", format!("target=[{name}]"), verbose);
            }
        }
        Fault::Messages { source, target, .. } => messages(
            world,
            fault,
            &world.resolve(source)?,
            &world.resolve(target)?,
            verbose,
        ),
        Fault::ClockJump { target, delta_ms } => {
            for name in world.resolve(target)? {
                let (id, _) = world.node(&name).expect("resolved names exist");
                eosim_sim::clock::jump(id, *delta_ms);
                let detail = format!("target=[{name}] delta_ms={delta_ms}");
                world.record_fault("clock-jump", detail, verbose);
                let effect = format!("wall clock of {name} stepped {delta_ms:+} ms");
                effects::record(kind::CLOCK_JUMP, &name, effect);
            }
        }
        Fault::DeleteRecords {
            topic,
            partition,
            before,
            group,
        } => delete_records(world, topic, *partition, *before, group.as_deref(), verbose),
        Fault::AddPartitions { topic, count } => add_partitions(world, topic, *count, verbose),
        Fault::Heal => heal(world, verbose),
    }
    Ok(())
}

/// `add-partitions`: `topic` grows to `count` partitions at the controller
/// ([`Cluster::create_partitions`]), recorded as the fault's detail and as an
/// `add-partitions` effect on the topic; a refusal (not an increase, too few brokers) is
/// the detail alone, acting on nothing.
///
/// [`Cluster::create_partitions`]: eosim_sim::kafka::model::Cluster::create_partitions
fn add_partitions(world: &World, topic: &str, count: u32, verbose: bool) {
    let now_ms = world.kafka.now_ms();
    let added =
        (world.kafka.cluster.lock().expect("cluster lock")).create_partitions(now_ms, topic, count);
    match added {
        Ok((old, new)) => {
            let detail = format!("topic={topic} partitions {old} -> {new}");
            world.record_fault("add-partitions", detail, verbose);
            let effect = format!("{topic}: {old} -> {new} partitions (new: {old}..{new})");
            effects::record(kind::ADD_PARTITIONS, topic, effect);
        }
        Err(e) => {
            let detail = format!("topic={topic} count={count} refused: {e:?}");
            world.record_fault("add-partitions", detail, verbose);
        }
    }
}

/// `delete-records` on `topic`'s `partition` (every partition when `None`): each leader's
/// log start rises to `before` ([`Cluster::delete_records`]); the records that went
/// (kafka-consume's: the id is the value) are recorded as a `records-deleted` op of the
/// nemesis, and as a `delete-records` effect on
/// the partition when at least one went. A refusal (past the HW, no leader, a group
/// without a committed offset there) is recorded as the fault's detail, acting on nothing.
///
/// [`Cluster::delete_records`]: eosim_sim::kafka::model::Cluster::delete_records
fn delete_records(
    world: &World,
    topic: &str,
    partition: Option<u32>,
    before: DeleteBefore,
    group: Option<&str>,
    verbose: bool,
) {
    let mut cluster = world.kafka.cluster.lock().expect("cluster lock");
    let partitions: Vec<u32> = match partition {
        Some(p) => vec![p],
        None => (0..cluster.partition_count(topic).unwrap_or(0)).collect(),
    };
    let committed = group
        .map(|g| cluster.committed_offsets(g))
        .unwrap_or_default();
    for p in partitions {
        let tp = TopicPartition::new(topic, p);
        let offset = match before {
            DeleteBefore::Offset(o) => Some(o),
            DeleteBefore::Named(DeletePoint::HighWatermark) => None,
            DeleteBefore::Named(DeletePoint::Committed) => {
                match committed.iter().find(|(t, _)| *t == tp) {
                    Some(&(_, o)) => Some(o),
                    None => {
                        let g = group.unwrap_or_default();
                        let detail = format!("tp={tp} refused: group {g} has no committed offset");
                        world.record_fault("delete-records", detail, verbose);
                        continue;
                    }
                }
            }
        };
        let held = cluster.records(&tp);
        let (old, new) = match cluster.delete_records(&tp, offset) {
            Ok(moved) => moved,
            Err(e) => {
                let detail = format!("tp={tp} refused: {e:?}");
                world.record_fault("delete-records", detail, verbose);
                continue;
            }
        };
        let detail = format!("tp={tp} log_start_offset {old} -> {new}");
        world.record_fault("delete-records", detail, verbose);
        let gone: Vec<RecordRef> = held
            .iter()
            .filter(|(offset, _)| *offset < new)
            .map(|(offset, record)| RecordRef {
                id: parse_id(&record.value),
                key: text(&record.key),
                tp: tp.clone(),
                offset: *offset,
            })
            .collect();
        if gone.is_empty() {
            continue;
        }
        let effect = format!(
            "{} records of {tp} deleted (log start {old} -> {new})",
            gone.len()
        );
        effects::record(kind::DELETE_RECORDS, &tp.to_string(), effect);
        let value = Value::RecordsDeleted {
            tp,
            log_start_offset: new,
            records: gone,
        };
        world
            .recorder
            .record(now_ns(), "nemesis", OpKind::Ok, value, None);
    }
}

/// Kills `name` if it runs, and records what the kill lost as a `kind` effect: the calls
/// in flight to and from it, a broker's unflushed log tail (machine crash), what the
/// pipeline's kill hooks report (PostgreSQL sessions). A kill of a dead process does nothing
/// and records nothing.
fn kill(world: &World, name: &str, mode: CrashMode, kind: &'static str, verbose: bool) {
    let mut net = world.net.lock().expect("net lock");
    if !net.down.insert(name.to_string()) {
        return;
    }
    net.paused.remove(name);
    drop(net);
    let (id, ip) = world.node(name).expect("resolved names exist");
    let mut lost = vec![format!(
        "{} requests in flight",
        eosim_sim::net::in_flight(ip)
    )];
    world.handle().kill(id);
    if mode == CrashMode::ProcessKill {
        // The kernel outlives the process and resets its connections (RST).
        eosim_sim::net::reset_connections(ip);
    }
    lost.extend(world.notify_kill(name, mode));
    if let Some(b) = name.strip_prefix("broker-").and_then(|b| b.parse().ok()) {
        let now = world.kafka.now_ms();
        // A power loss keeps of each log a prefix ending anywhere between what is on disk
        // and its end (the OS may have written back part of the dirty pages).
        let mut rng = madsim::rand::thread_rng();
        let mut pick = |durable: i64, end: i64| rng.gen_range(durable..=end);
        let cut = world
            .kafka
            .cluster
            .lock()
            .expect("cluster lock")
            .crash_broker_with(now, b, mode, &mut pick);
        if mode == CrashMode::MachineCrash {
            lost.push(format!("{cut} unflushed log offsets"));
        }
    }
    let mode = match mode {
        CrashMode::ProcessKill => "process-kill",
        CrashMode::MachineCrash => "machine-crash",
    };
    world.record_fault("kill", format!("target=[{name}] mode={mode}"), verbose);
    let detail = format!("{name} killed ({mode}); lost: {}", lost.join(", "));
    effects::record(kind, name, detail);
}

fn restart(world: &World, name: &str, verbose: bool) {
    if !world.net.lock().expect("net lock").down.remove(name) {
        return;
    }
    let (id, ip) = world.node(name).expect("resolved names exist");
    if let Some(b) = name.strip_prefix("broker-").and_then(|b| b.parse().ok()) {
        let now = world.kafka.now_ms();
        world
            .kafka
            .cluster
            .lock()
            .expect("cluster lock")
            .restart_broker(now, b);
    }
    world.handle().restart(id);
    // The new incarnation answers whatever still waits on the old one (a crashed machine's
    // connections, requests sent while it was down) with RST.
    eosim_sim::net::reset_connections(ip);
    world.record_fault("restart", format!("target=[{name}]"), verbose);
}

fn pause_or_resume(world: &World, name: &str, pause: bool, verbose: bool) {
    let mut net = world.net.lock().expect("net lock");
    if net.down.contains(name) {
        return;
    }
    let changed = if pause {
        net.paused.insert(name.to_string())
    } else {
        net.paused.remove(name)
    };
    drop(net);
    if !changed {
        return;
    }
    let (id, ip) = world.node(name).expect("resolved names exist");
    if pause {
        world.handle().pause(id);
    } else {
        world.handle().resume(id);
    }
    let verb = if pause { "pause" } else { "resume" };
    world.record_fault(verb, format!("target=[{name}]"), verbose);
    if pause {
        let waiting = eosim_sim::net::in_flight(ip);
        let detail = format!("{name} paused with {waiting} requests in flight");
        effects::record(kind::PAUSE, name, detail);
    }
}

fn partition(world: &World, source: &[String], target: &[String], one_way: bool, verbose: bool) {
    let net_sim = NetSim::current();
    let mut net = world.net.lock().expect("net lock");
    for a in source {
        for b in target.iter().filter(|b| *b != a) {
            let (ia, ip_a) = world.node(a).expect("resolved names exist");
            let (ib, ip_b) = world.node(b).expect("resolved names exist");
            net_sim.clog_link(ia, ib);
            eosim_sim::net::set_link_cut(ip_a, ip_b, true);
            net.cut.insert((a.clone(), b.clone()));
            if !one_way {
                net_sim.clog_link(ib, ia);
                eosim_sim::net::set_link_cut(ip_b, ip_a, true);
                net.cut.insert((b.clone(), a.clone()));
            }
        }
    }
    drop(net);
    let detail = format!(
        "source=[{}] target=[{}] one_way={one_way}",
        source.join(","),
        target.join(",")
    );
    world.record_fault("partition", detail, verbose);
}

fn messages(world: &World, fault: &Fault, source: &[String], target: &[String], verbose: bool) {
    let Fault::Messages {
        drop_request_probability,
        drop_response_probability,
        duplicate_probability,
        delay_ms_max,
        ..
    } = fault
    else {
        unreachable!("messages() gets a Messages fault");
    };
    let faults = MessageFaults {
        drop_request_probability: *drop_request_probability,
        drop_response_probability: *drop_response_probability,
        duplicate_probability: *duplicate_probability,
        delay_ms_max: *delay_ms_max,
    };
    for a in source {
        for b in target.iter().filter(|b| *b != a) {
            let (_, ip_a) = world.node(a).expect("resolved names exist");
            let (_, ip_b) = world.node(b).expect("resolved names exist");
            set_message_faults(ip_a, ip_b, faults);
        }
    }
    let detail = format!(
        "source=[{}] target=[{}] drop_request={:.2} drop_response={:.2} duplicate={:.2} \
         delay_ms_max={}",
        source.join(","),
        target.join(","),
        drop_request_probability,
        drop_response_probability,
        duplicate_probability,
        delay_ms_max
    );
    world.record_fault("messages", detail, verbose);
}

/// Undoes every partition, clog and message fault.
pub fn heal(world: &World, verbose: bool) {
    let net_sim = NetSim::current();
    let mut net = world.net.lock().expect("net lock");
    if net.cut.is_empty() && net.clogged.is_empty() && !has_message_faults() {
        return;
    }
    for (a, b) in std::mem::take(&mut net.cut) {
        let (ia, _) = world.node(&a).expect("cut links join known nodes");
        let (ib, _) = world.node(&b).expect("cut links join known nodes");
        net_sim.unclog_link(ia, ib);
    }
    for name in std::mem::take(&mut net.clogged) {
        let (id, _) = world.node(&name).expect("clogged nodes are known");
        net_sim.unclog_node(id);
    }
    net.blocked_seen.clear();
    drop(net);
    // Message faults, and the cut links and clogs eosim's RPC layer holds packets on.
    clear_message_faults();
    world.record_fault("heal", String::new(), verbose);
}

fn has_message_faults() -> bool {
    eosim_sim::net::message_faults_set()
}

/// The heal-and-drain start: heal the network, set every wall clock right, restart the
/// dead, resume the paused.
pub fn recover_everything(world: &World, verbose: bool) {
    heal(world, verbose);
    if eosim_sim::clock::reset_all() {
        world.record_fault("clock-reset", String::new(), verbose);
    }
    let all = world.names();
    for name in &all {
        restart(world, name, verbose);
        pause_or_resume(world, name, false, verbose);
    }
}

//! Swarm testing (FoundationDB's): each seed draws its own fault mix and rates from a
//! [`Swarm`], then a schedule of faults and their recoveries over the run's nodes.
//!
//! Pure functions of a random number generator, so the simulator (madsim's seeded RNG) and
//! the real tier (an RNG seeded by `eosim run --seed`) draw the same schedule from the same
//! seed and node names.

use super::{Fault, FaultKind, ScheduledFault, Swarm};
use crate::kafka::model::CrashMode;
use madsim::rand::Rng;

/// When a swarm's schedule may begin, ms after the run's start: once the pipeline is up.
pub const START_MS: u64 = 2_000;

/// The swarm parameters drawn for one seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawnSwarm {
    /// Fault kinds this seed uses.
    pub kinds: Vec<FaultKind>,
    /// Mean gap between faults, ms.
    pub interval_ms: u64,
    /// Longest fault duration, ms.
    pub duration_ms_max: u64,
}

impl DrawnSwarm {
    /// `key=value` lines for the run header.
    pub fn lines(&self) -> Vec<String> {
        let kinds: Vec<String> = self
            .kinds
            .iter()
            .map(|k| format!("{k:?}").to_lowercase())
            .collect();
        vec![
            format!("swarm.kinds={}", kinds.join(",")),
            format!("swarm.interval_ms={}", self.interval_ms),
            format!("swarm.duration_ms_max={}", self.duration_ms_max),
        ]
    }
}

/// Draws a seed's swarm: each kind kept with probability 1/2 (at least one), an interval
/// and a duration bound within the configured ranges.
pub fn draw(swarm: &Swarm, rng: &mut impl Rng) -> DrawnSwarm {
    let mut kinds: Vec<FaultKind> = swarm
        .kinds
        .iter()
        .copied()
        .filter(|_| rng.gen_bool(0.5))
        .collect();
    if kinds.is_empty() && !swarm.kinds.is_empty() {
        kinds.push(swarm.kinds[rng.gen_range(0..swarm.kinds.len())]);
    }
    let interval_ms =
        rng.gen_range(swarm.interval_ms_min..=swarm.interval_ms_max.max(swarm.interval_ms_min));
    let duration_ms_max =
        rng.gen_range(swarm.duration_ms_min..=swarm.duration_ms_max.max(swarm.duration_ms_min));
    DrawnSwarm {
        kinds,
        interval_ms,
        duration_ms_max,
    }
}

/// The nodes a swarm's faults may hit and the data they may name.
#[derive(Debug, Clone, Copy)]
pub struct Topology<'a> {
    /// The swarm's `targets`, resolved to node names.
    pub targets: &'a [String],
    /// Every node of the run (the other end of a client's partition may lie outside
    /// `targets`).
    pub names: &'a [String],
    /// The workload's topic (`kill-leader` picks one of its partitions).
    pub topic: &'a str,
    /// Its partition count.
    pub partitions: u32,
}

/// Expands a drawn swarm into faults with their recoveries between `from_ms` and
/// `until_ms` over `topology`'s targets.
pub fn schedule(
    drawn: &DrawnSwarm,
    topology: Topology<'_>,
    (from_ms, until_ms): (u64, u64),
    rng: &mut impl Rng,
) -> Vec<ScheduledFault> {
    let targets = topology.targets;
    let mut out = Vec::new();
    let mut at_ms = from_ms;
    while !drawn.kinds.is_empty() && !targets.is_empty() {
        at_ms += rng.gen_range(drawn.interval_ms / 2..=drawn.interval_ms * 3 / 2);
        if at_ms >= until_ms {
            break;
        }
        let kind = drawn.kinds[rng.gen_range(0..drawn.kinds.len())];
        let node = targets[rng.gen_range(0..targets.len())].clone();
        // The other end of a partition or message fault: a link that carries traffic
        // (a fault between two clients, or a message fault on a link nobody calls over,
        // would never act).
        let other = other_end(rng, topology, &node);
        let end_ms = (at_ms + rng.gen_range(drawn.duration_ms_max / 4..=drawn.duration_ms_max))
            .min(until_ms);
        let (fault, recovery) = fault_and_recovery(kind, node, other, topology, rng);
        out.push(ScheduledFault { at_ms, fault });
        out.push(ScheduledFault {
            at_ms: end_ms,
            fault: recovery,
        });
    }
    out
}

/// One fault of `kind` on `node` (and `other`, for a link fault) and what undoes it.
fn fault_and_recovery(
    kind: FaultKind,
    node: String,
    other: String,
    topology: Topology<'_>,
    rng: &mut impl Rng,
) -> (Fault, Fault) {
    match kind {
        FaultKind::Kill => kill_and_restart(node, CrashMode::ProcessKill),
        FaultKind::MachineCrash if node.starts_with("broker-") => {
            kill_and_restart(node, CrashMode::MachineCrash)
        }
        FaultKind::MachineCrash => kill_and_restart(node, CrashMode::ProcessKill),
        FaultKind::Pause => (
            Fault::Pause {
                target: vec![node.clone()],
            },
            Fault::Resume { target: vec![node] },
        ),
        FaultKind::Partition => {
            let one_way = rng.gen_bool(0.25);
            let partition = Fault::Partition {
                source: vec![node],
                target: vec![other],
                one_way,
            };
            (partition, Fault::Heal)
        }
        // Requests flow from clients to servers: the client is the link's source.
        FaultKind::Messages if is_server(&node) && !is_server(&other) => {
            (message_fault(rng, other, node), Fault::Heal)
        }
        FaultKind::Messages => (message_fault(rng, node, other), Fault::Heal),
        FaultKind::ClockJump => {
            let delta_ms = rng.gen_range(-CLOCK_JUMP_MS_MAX..=CLOCK_JUMP_MS_MAX);
            let jump = |delta_ms| Fault::ClockJump {
                target: vec![node.clone()],
                delta_ms,
            };
            (jump(delta_ms), jump(-delta_ms))
        }
        FaultKind::KillLeader => {
            let partition = rng.gen_range(0..topology.partitions.max(1));
            let kill = Fault::KillLeader {
                topic: topology.topic.to_string(),
                partition,
                mode: CrashMode::ProcessKill,
            };
            let restart = Fault::Restart {
                target: vec!["brokers".into()],
            };
            (kill, restart)
        }
    }
}

/// Whether `name` is a server the pipeline's processes call (a broker, ClickHouse, Keeper,
/// PostgreSQL, the Doris FE and BE): eosim's requests flow from clients to these.
pub fn is_server(name: &str) -> bool {
    name.starts_with("broker-")
        || matches!(
            name,
            "clickhouse" | "keeper" | "postgres" | "doris-fe" | "doris-be"
        )
}

/// The other end of a swarm's partition or message fault on `node`, drawn so that the link
/// carries traffic: a server for a client (from the targets, else any of the run's), and
/// for a server any other target (brokers replicate to each other; clients call it); `node`
/// itself when there is no other.
fn other_end(rng: &mut impl Rng, topology: Topology<'_>, node: &str) -> String {
    let targets = topology.targets;
    let candidates: Vec<&String> = if is_server(node) {
        targets.iter().filter(|t| *t != node).collect()
    } else {
        let servers: Vec<&String> = targets.iter().filter(|t| is_server(t)).collect();
        if servers.is_empty() {
            topology.names.iter().filter(|n| is_server(n)).collect()
        } else {
            servers
        }
    };
    match candidates.len() {
        0 => node.to_string(),
        n => candidates[rng.gen_range(0..n)].clone(),
    }
}

/// The largest swarm clock step, ms: two days, past the default
/// `producer.id.expiration.ms` (one day).
const CLOCK_JUMP_MS_MAX: i64 = 2 * 86_400_000;

fn kill_and_restart(node: String, mode: CrashMode) -> (Fault, Fault) {
    (
        Fault::Kill {
            target: vec![node.clone()],
            mode,
        },
        Fault::Restart { target: vec![node] },
    )
}

fn message_fault(rng: &mut impl Rng, source: String, target: String) -> Fault {
    Fault::Messages {
        source: vec![source],
        target: vec![target],
        drop_request_probability: rng.gen_range(0.0..0.3),
        drop_response_probability: rng.gen_range(0.0..0.3),
        duplicate_probability: rng.gen_range(0.0..0.3),
        delay_ms_max: rng.gen_range(0..500),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    fn swarm() -> Swarm {
        serde_json::from_str(r#"{"kinds": ["kill", "pause", "partition"]}"#).expect("parses")
    }

    fn names() -> Vec<String> {
        ["broker-1", "broker-2", "consumer-0", "producer-0"]
            .map(String::from)
            .to_vec()
    }

    fn drawn_schedule(seed: u64) -> (DrawnSwarm, Vec<ScheduledFault>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let drawn = draw(&swarm(), &mut rng);
        let names = names();
        let topology = Topology {
            targets: &names,
            names: &names,
            topic: "events",
            partitions: 3,
        };
        let faults = schedule(&drawn, topology, (2_000, 60_000), &mut rng);
        (drawn, faults)
    }

    /// The same seed draws the same schedule (what `eosim run --seed` promises), another
    /// seed another one; every fault lies in the window, each followed by its recovery.
    #[test]
    fn a_seed_draws_one_schedule_within_the_window() {
        let (drawn, faults) = drawn_schedule(7);
        assert_eq!(drawn_schedule(7), (drawn.clone(), faults.clone()));
        assert_ne!(drawn_schedule(8).1, faults);
        assert!(!faults.is_empty() && faults.len() % 2 == 0);
        for pair in faults.chunks(2) {
            assert!((2_000..60_000).contains(&pair[0].at_ms), "{pair:?}");
            assert!(pair[1].at_ms >= pair[0].at_ms && pair[1].at_ms <= 60_000);
        }
        let kinds_used: Vec<&Fault> = faults.iter().step_by(2).map(|f| &f.fault).collect();
        assert!(kinds_used.iter().all(|f| match f {
            Fault::Kill { .. } => drawn.kinds.contains(&FaultKind::Kill),
            Fault::Pause { .. } => drawn.kinds.contains(&FaultKind::Pause),
            Fault::Partition { .. } => drawn.kinds.contains(&FaultKind::Partition),
            _ => false,
        }));
    }

    /// A client's partition is cut from a server, never from another client (a link
    /// nobody calls over would never act).
    #[test]
    fn a_partition_of_a_client_cuts_it_from_a_server() {
        for seed in 0..50 {
            for f in drawn_schedule(seed).1 {
                if let Fault::Partition { source, target, .. } = f.fault {
                    assert!(
                        is_server(&source[0]) || is_server(&target[0]),
                        "{source:?} {target:?}"
                    );
                }
            }
        }
    }
}

//! The nemesis: the faults eosim injects, as data.
//!
//! A [`Fault`] names its targets by node name (`broker-2`, `consumer-0`, `producer-0`, or a
//! group such as `brokers`, `consumers`, `clients`, `all`). Scenario files hold explicit
//! schedules of [`ScheduledFault`]s; [`Swarm`] settings let each seed draw its own fault mix
//! and rates (FoundationDB's swarm testing). Every fault the runner injects is recorded in
//! the history with its time, so a failing seed says what preceded the anomaly.
//!
//! The simulator side (turning a fault into madsim kills, clogs and message faults) lives
//! in the harness runner; this module only says what a fault is.

pub mod swarm;

use crate::kafka::model::CrashMode;
use serde::{Deserialize, Serialize};

/// The node groups a fault may name instead of a node: those of [`group_member`], and
/// `all`, which each world resolves to its own nodes.
pub const NODE_GROUPS: [&str; 6] = [
    "brokers",
    "producers",
    "consumers",
    "streams",
    "clients",
    "all",
];

/// Whether `name` is one of [`NODE_GROUPS`] rather than a node's name.
pub fn is_group(name: &str) -> bool {
    NODE_GROUPS.contains(&name)
}

/// Whether `node` belongs to the node group `group` a fault may name, by the node names
/// both worlds give their processes: `brokers` (`broker-*`), `producers` (`producer-*`),
/// `consumers` (`consumer-*`: kafka-consume's consumers, transactional-copy's copiers),
/// `streams` (`streams-*`) and `clients` (the last three). Connect workers (`connect-*`,
/// `worker-*`) and the databases are in none of them: a fault names them. `None` when
/// `group` is none of these groups (a node's name, or `all`, which each world resolves to
/// its own nodes). The simulation's `World::resolve` and the real tier's fault injector
/// both resolve groups with it, so one scenario's faults hit the same processes in both.
pub fn group_member(group: &str, node: &str) -> Option<bool> {
    let prefixes: &[&str] = match group {
        "brokers" => &["broker-"],
        "producers" => &["producer-"],
        "consumers" => &["consumer-"],
        "streams" => &["streams-"],
        "clients" => &["producer-", "consumer-", "streams-"],
        _ => return None,
    };
    Some(prefixes.iter().any(|p| node.starts_with(p)))
}

/// One fault or recovery. Serialized with `fault = "<kebab-case name>"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fault {
    /// Kill the target processes (SIGKILL). Brokers lose what `mode` says.
    Kill {
        /// Node names or groups.
        target: Vec<String>,
        /// For brokers: `process-kill` (default; the log survives) or `machine-crash`.
        #[serde(default = "default_crash_mode")]
        mode: CrashMode,
    },
    /// Start killed processes again.
    Restart {
        /// Node names or groups.
        target: Vec<String>,
    },
    /// Pause the target processes (SIGSTOP): they neither act nor answer.
    Pause {
        /// Node names or groups.
        target: Vec<String>,
    },
    /// Resume paused processes (SIGCONT).
    Resume {
        /// Node names or groups.
        target: Vec<String>,
    },
    /// Cut the network between two groups of nodes; `one_way` cuts only source → target.
    Partition {
        /// One side.
        source: Vec<String>,
        /// The other side.
        target: Vec<String>,
        /// Cut only packets from `source` to `target`.
        #[serde(default)]
        one_way: bool,
    },
    /// Isolate nodes from everyone (both directions).
    Clog {
        /// Node names or groups.
        target: Vec<String>,
    },
    /// Message faults on the links from `source` to `target` (requests) and back
    /// (responses): drop, delay (hence reorder), duplicate, lose a response after the
    /// request was applied.
    Messages {
        /// Client side.
        source: Vec<String>,
        /// Server side.
        target: Vec<String>,
        /// Probability a request is lost.
        #[serde(default)]
        drop_request_probability: f64,
        /// Probability a response is lost after the request was applied.
        #[serde(default)]
        drop_response_probability: f64,
        /// Probability a request is delivered twice.
        #[serde(default)]
        duplicate_probability: f64,
        /// Extra delay bound in ms (uniform), which reorders requests.
        #[serde(default)]
        delay_ms_max: u64,
    },
    /// Kill the broker leading `topic`-`partition` (leader failover).
    KillLeader {
        /// Topic.
        topic: String,
        /// Partition.
        partition: u32,
        /// Crash mode of the leader.
        #[serde(default = "default_crash_mode")]
        mode: CrashMode,
    },
    /// Step the wall clock of the target processes by `delta_ms` (negative: back), as an
    /// NTP step or `date -s` does; their monotonic timers do not move
    /// (`crate::clock`). The drain sets every clock right again.
    ClockJump {
        /// Node names or groups.
        target: Vec<String>,
        /// The step, ms.
        delta_ms: i64,
    },
    /// DeleteRecords (KIP-107, `kafka-delete-records.sh`, `Admin.deleteRecords`): the log
    /// start offset of `topic`'s `partition` (every partition when unset) rises to
    /// `before`, as an operator's purge or a retention pass moves it. The records below it
    /// are gone; a consumer whose position is below it gets OFFSET_OUT_OF_RANGE and resets
    /// as its `auto.offset.reset` says. Applied at the partition's leader at once (no
    /// network in the way); refused by the leader past its high watermark.
    DeleteRecords {
        /// Topic.
        topic: String,
        /// Partition; every partition of the topic when unset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        partition: Option<u32>,
        /// Where the new log start is.
        before: DeleteBefore,
        /// With `before = "committed"`: the consumer group whose committed offset bounds
        /// the deletion (kafka-consume's group is `sink`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// CreatePartitions (KIP-195, `kafka-topics.sh --alter --partitions`,
    /// `Admin.createPartitions` with `NewPartitions.increaseTo(count)`): `topic` grows to
    /// `count` partitions, applied at the controller at once
    /// ([`crate::kafka::model::Cluster::create_partitions`]). Clients see the new
    /// partitions when they next fetch metadata (`metadata.max.age.ms`, or an error):
    /// producers start writing to them, a group's leader rejoins and assigns them, and a
    /// consumer positions each by `auto.offset.reset` (nothing is committed there), so
    /// with `latest` the records written before that are never read (KAFKA-12478).
    AddPartitions {
        /// Topic.
        topic: String,
        /// The partition count afterwards (more than the topic has).
        count: u32,
    },
    /// Undo every partition, clog and message fault.
    Heal,
}

/// Where [`Fault::DeleteRecords`] puts the new log start offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeleteBefore {
    /// This offset (refused by the leader past its high watermark).
    Offset(i64),
    /// A named position.
    Named(DeletePoint),
}

/// The named positions of [`DeleteBefore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeletePoint {
    /// The partition's high watermark (`RecordsToDelete.beforeOffset(-1)`): every record.
    HighWatermark,
    /// The group's committed offset on the partition: only what the group has consumed,
    /// as Kafka Streams purges its repartition topics (`TaskManager.maybePurgeCommittedRecords`).
    Committed,
}

fn default_crash_mode() -> CrashMode {
    CrashMode::ProcessKill
}

impl Fault {
    /// The effect kinds this fault is expected to produce ([`crate::effects::kind`]): one per
    /// kind of fault, one per non-zero setting of a message fault (each acts on its own),
    /// none for a recovery. What the report counts as scheduled.
    pub fn effect_kinds(&self) -> Vec<&'static str> {
        use crate::effects::kind;
        match self {
            Fault::Kill { .. } => vec![kind::KILL],
            Fault::KillLeader { .. } => vec![kind::KILL_LEADER],
            Fault::Pause { .. } => vec![kind::PAUSE],
            Fault::Partition { .. } => vec![kind::PARTITION],
            Fault::Clog { .. } => vec![kind::CLOG],
            Fault::ClockJump { .. } => vec![kind::CLOCK_JUMP],
            Fault::DeleteRecords { .. } => vec![kind::DELETE_RECORDS],
            Fault::AddPartitions { .. } => vec![kind::ADD_PARTITIONS],
            Fault::Messages {
                drop_request_probability,
                drop_response_probability,
                duplicate_probability,
                delay_ms_max,
                ..
            } => [
                (*drop_request_probability > 0.0, kind::DROP_REQUEST),
                (*drop_response_probability > 0.0, kind::DROP_RESPONSE),
                (*duplicate_probability > 0.0, kind::DUPLICATE),
                (*delay_ms_max > 0, kind::DELAY),
            ]
            .into_iter()
            .filter_map(|(set, kind)| set.then_some(kind))
            .collect(),
            Fault::Restart { .. } | Fault::Resume { .. } | Fault::Heal => Vec::new(),
        }
    }

    /// The fault's kebab-case name, as in scenario files and histories.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => "kill",
            Fault::Restart { .. } => "restart",
            Fault::Pause { .. } => "pause",
            Fault::Resume { .. } => "resume",
            Fault::Partition { .. } => "partition",
            Fault::Clog { .. } => "clog",
            Fault::Messages { .. } => "messages",
            Fault::KillLeader { .. } => "kill-leader",
            Fault::ClockJump { .. } => "clock-jump",
            Fault::DeleteRecords { .. } => "delete-records",
            Fault::AddPartitions { .. } => "add-partitions",
            Fault::Heal => "heal",
        }
    }
}

/// A fault at a point in simulated time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    /// When, in ms of simulated time since the run started.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub fault: Fault,
}

/// The kinds of fault a swarm may draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// Kill and later restart a process.
    Kill,
    /// Pause a process longer than session timeouts, then resume it.
    Pause,
    /// Partition two random groups of nodes (sometimes one way), then heal.
    Partition,
    /// Message faults on random links, then heal.
    Messages,
    /// Kill a partition leader, then restart it.
    KillLeader,
    /// Crash a broker machine (its unflushed log tail is lost), then restart it.
    MachineCrash,
    /// Step a process's wall clock by up to two days either way, then step it back.
    ClockJump,
}

/// Swarm settings: each seed draws a subset of `kinds`, a fault interval within
/// `[interval_ms_min, interval_ms_max]` and a fault duration within
/// `[duration_ms_min, duration_ms_max]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Swarm {
    /// Fault kinds to draw from.
    pub kinds: Vec<FaultKind>,
    /// Which nodes may be hit (names or groups). Default: brokers and clients.
    #[serde(default = "default_swarm_targets")]
    pub targets: Vec<String>,
    /// Shortest gap between faults, ms.
    #[serde(default = "default_interval_min")]
    pub interval_ms_min: u64,
    /// Longest gap between faults, ms.
    #[serde(default = "default_interval_max")]
    pub interval_ms_max: u64,
    /// Shortest time a fault lasts before its recovery, ms.
    #[serde(default = "default_duration_min")]
    pub duration_ms_min: u64,
    /// Longest time a fault lasts before its recovery, ms.
    #[serde(default = "default_duration_max")]
    pub duration_ms_max: u64,
}

fn default_swarm_targets() -> Vec<String> {
    vec!["brokers".into(), "clients".into()]
}
fn default_interval_min() -> u64 {
    1_000
}
fn default_interval_max() -> u64 {
    10_000
}
fn default_duration_min() -> u64 {
    1_000
}
fn default_duration_max() -> u64 {
    20_000
}

#[cfg(test)]
mod tests {
    use super::{group_member, is_group, NODE_GROUPS};

    #[test]
    fn groups_take_their_nodes_by_name_and_connect_workers_only_by_name() {
        let nodes = [
            "broker-1",
            "producer-0",
            "consumer-1",
            "streams-0",
            "connect-0",
            "worker-1",
            "clickhouse",
        ];
        let members = |group: &str| -> Vec<&str> {
            (nodes.iter().copied())
                .filter(|n| group_member(group, n) == Some(true))
                .collect()
        };
        assert_eq!(members("brokers"), ["broker-1"]);
        assert_eq!(members("producers"), ["producer-0"]);
        assert_eq!(members("consumers"), ["consumer-1"]);
        assert_eq!(members("streams"), ["streams-0"]);
        assert_eq!(
            members("clients"),
            ["producer-0", "consumer-1", "streams-0"]
        );
        for not_a_group in ["all", "worker-1", "workers"] {
            assert_eq!(group_member(not_a_group, "worker-1"), None, "{not_a_group}");
        }
        // The named groups are `group_member`'s and `all`, nothing else.
        for group in NODE_GROUPS {
            assert_eq!(group_member(group, "").is_some(), group != "all", "{group}");
        }
        assert!(is_group("all") && !is_group("worker-1") && !is_group("workers"));
    }
}

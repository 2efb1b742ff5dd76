//! Scenario files (TOML): which pipeline runs on which cluster, under which workload and
//! faults, and which delivery claim the checkers hold it to.
//!
//! ```toml
//! name = "alo-commit-after-acks-all"
//! pipeline = "kafka-consume"          # the component under test
//! claim = "at-least-once"
//!
//! [cluster]
//! brokers = 3
//!
//! [topic]
//! name = "events"
//! partitions = 3
//! replication_factor = 3
//! min_insync_replicas = 2
//!
//! [workload]
//! records = 300
//! commit = "after-processing"
//!
//! [faults]
//! swarm = { kinds = ["kill", "pause", "partition"] }
//! ```
//!
//! Every key is checked: an unknown key, a wrong type or a missing value is a
//! [`ScenarioError`] naming the file, the key path and what was expected.

use crate::checker::Claim;
use eosim_sim::kafka::{Acks, ClusterConfig};
use eosim_sim::nemesis::{ScheduledFault, Swarm};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A scenario file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TOML is malformed or a key has the wrong shape.
    #[error("{file}: key `{key}`: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Dotted key path (`faults.schedule[2].at_ms`), or `<root>`.
        key: String,
        /// What was wrong and what was expected.
        message: String,
    },
}

/// The component under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pipeline {
    /// Producers write ids into a topic; a consumer group copies them into an in-memory
    /// sink, committing offsets before or after the write (`workload.commit`).
    KafkaConsume,
}

impl Pipeline {
    /// The kebab-case name, as in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Pipeline::KafkaConsume => "kafka-consume",
        }
    }
}

/// When the consumer commits relative to writing a batch into the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CommitMode {
    /// Write, then commit: a crash replays (at-least-once).
    #[default]
    AfterProcessing,
    /// Commit, then write: a crash skips (at-most-once).
    BeforeProcessing,
}

/// `[cluster]`: brokers and their configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// Number of brokers. Default 3.
    #[serde(default = "default_brokers")]
    pub brokers: u32,
    /// `replica.lag.time.max.ms`. Default 30000.
    #[serde(default = "default_replica_lag")]
    pub replica_lag_time_max_ms: u64,
    /// `broker.session.timeout.ms`. Default 9000.
    #[serde(default = "default_broker_session")]
    pub broker_session_timeout_ms: u64,
    /// `group.initial.rebalance.delay.ms`. Default 0 in eosim (3000 in Kafka) to keep runs
    /// short; set it to test the delay.
    #[serde(default)]
    pub group_initial_rebalance_delay_ms: u64,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            brokers: default_brokers(),
            replica_lag_time_max_ms: default_replica_lag(),
            broker_session_timeout_ms: default_broker_session(),
            group_initial_rebalance_delay_ms: 0,
        }
    }
}

impl ClusterSpec {
    /// The model's configuration.
    pub fn to_config(&self) -> ClusterConfig {
        ClusterConfig {
            replica_lag_time_max_ms: self.replica_lag_time_max_ms,
            broker_session_timeout_ms: self.broker_session_timeout_ms,
            group_initial_rebalance_delay_ms: self.group_initial_rebalance_delay_ms,
            offsets_topic_replication_factor: self.brokers.min(3),
            ..ClusterConfig::default()
        }
    }
}

fn default_brokers() -> u32 {
    3
}
fn default_replica_lag() -> u64 {
    30_000
}
fn default_broker_session() -> u64 {
    9_000
}

/// `[topic]`: the topic the workload writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSpec {
    /// Topic name. Default `events`.
    #[serde(default = "default_topic")]
    pub name: String,
    /// Partition count. Default 3.
    #[serde(default = "default_partitions")]
    pub partitions: u32,
    /// Replication factor. Default 3.
    #[serde(default = "default_replication")]
    pub replication_factor: u32,
    /// `min.insync.replicas`. Default 1 (Kafka's default).
    #[serde(default = "default_min_isr")]
    pub min_insync_replicas: u32,
    /// `unclean.leader.election.enable`. Default false.
    #[serde(default)]
    pub unclean_leader_election_enable: bool,
}

impl Default for TopicSpec {
    fn default() -> Self {
        Self {
            name: default_topic(),
            partitions: default_partitions(),
            replication_factor: default_replication(),
            min_insync_replicas: default_min_isr(),
            unclean_leader_election_enable: false,
        }
    }
}

fn default_topic() -> String {
    "events".into()
}
fn default_partitions() -> u32 {
    3
}
fn default_replication() -> u32 {
    3
}
fn default_min_isr() -> u32 {
    1
}

/// `[workload]`: what producers and consumers do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Records to produce in all. Default 300.
    #[serde(default = "default_records")]
    pub records: u64,
    /// Distinct keys (`k0`..). Default 10.
    #[serde(default = "default_keys")]
    pub keys: u32,
    /// Producer processes. Default 1.
    #[serde(default = "default_one")]
    pub producers: u32,
    /// Consumer processes in the sink's group. Default 2.
    #[serde(default = "default_two")]
    pub consumers: u32,
    /// Pause between two sends of one producer, ms. Default 20.
    #[serde(default = "default_produce_interval")]
    pub produce_interval_ms: u64,
    /// Producer `acks`: `"all"`, `"1"` or `"0"`. Default all.
    #[serde(default = "default_acks", with = "acks_serde")]
    pub acks: Acks,
    /// Producer `retries`. Default 5 (Kafka: unbounded, within delivery.timeout.ms).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Producer `request.timeout.ms`. Default 5000.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_ms: u64,
    /// Consumer `session.timeout.ms`. Default 10000.
    #[serde(default = "default_session_timeout")]
    pub session_timeout_ms: u64,
    /// Consumer `max.poll.records`. Default 50.
    #[serde(default = "default_max_poll_records")]
    pub max_poll_records: usize,
    /// When the consumer commits. Default after-processing.
    #[serde(default)]
    pub commit: CommitMode,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        toml::from_str("").expect("every workload key has a default")
    }
}

fn default_records() -> u64 {
    300
}
fn default_keys() -> u32 {
    10
}
fn default_one() -> u32 {
    1
}
fn default_two() -> u32 {
    2
}
fn default_produce_interval() -> u64 {
    20
}
fn default_acks() -> Acks {
    Acks::All
}
fn default_retries() -> u32 {
    5
}
fn default_request_timeout() -> u64 {
    5_000
}
fn default_session_timeout() -> u64 {
    10_000
}
fn default_max_poll_records() -> usize {
    50
}

mod acks_serde {
    use eosim_sim::kafka::Acks;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(acks: &Acks, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(match acks {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Acks, D::Error> {
        match String::deserialize(d)?.as_str() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(serde::de::Error::custom(format!(
                "acks must be \"0\", \"1\" or \"all\", found \"{other}\""
            ))),
        }
    }
}

/// `[faults]`: an explicit schedule, a swarm, or both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Faults at fixed times.
    #[serde(default)]
    pub schedule: Vec<ScheduledFault>,
    /// Random faults drawn per seed.
    #[serde(default)]
    pub swarm: Option<Swarm>,
    /// When faults stop and the heal-and-drain phase begins, ms. Default 60000.
    #[serde(default = "default_faults_until")]
    pub until_ms: u64,
}

fn default_faults_until() -> u64 {
    60_000
}

/// `[drain]`: the heal-and-drain phase at the end of every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSpec {
    /// How long the pipeline has to catch up after healing, s of simulated time; past it
    /// the verdict is `stalled`. Default 120.
    #[serde(default = "default_drain_time")]
    pub time_s_max: u64,
}

impl Default for DrainSpec {
    fn default() -> Self {
        Self {
            time_s_max: default_drain_time(),
        }
    }
}

fn default_drain_time() -> u64 {
    120
}

/// `[check]`: overrides of what the claim forbids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    /// Anomaly names (kebab-case) forbidden in addition to the claim's.
    #[serde(default)]
    pub forbidden: Vec<String>,
    /// Anomaly names allowed although the claim forbids them.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// The verdict this scenario is expected to reach (`holds` or `violated`), when the
    /// scenario exists to show a known failure. The run reports what it found either way;
    /// the test suite compares.
    #[serde(default)]
    pub expect: Option<String>,
}

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name; defaults to the file stem.
    #[serde(default)]
    pub name: String,
    /// One line saying what the scenario shows.
    #[serde(default)]
    pub description: String,
    /// The component under test.
    pub pipeline: Pipeline,
    /// The delivery claim the checkers hold it to.
    pub claim: Claim,
    /// Seeds to run by default. Default 20.
    #[serde(default = "default_seeds")]
    pub seeds: u64,
    /// Brokers.
    #[serde(default)]
    pub cluster: ClusterSpec,
    /// Topic.
    #[serde(default)]
    pub topic: TopicSpec,
    /// Workload.
    #[serde(default)]
    pub workload: WorkloadSpec,
    /// Faults.
    #[serde(default)]
    pub faults: FaultSpec,
    /// Heal and drain.
    #[serde(default)]
    pub drain: DrainSpec,
    /// Checker overrides.
    #[serde(default)]
    pub check: CheckSpec,
}

fn default_seeds() -> u64 {
    20
}

impl Scenario {
    /// Parses scenario text; `file` is only used in errors and for the default name.
    ///
    /// # Errors
    /// [`ScenarioError::Invalid`] with the key path and what was expected.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ScenarioError> {
        let deserializer = toml::Deserializer::new(text);
        let mut scenario: Scenario =
            serde_path_to_error::deserialize(deserializer).map_err(|e| {
                let key = e.path().to_string();
                ScenarioError::Invalid {
                    file: file.to_path_buf(),
                    key: if key == "." { "<root>".into() } else { key },
                    message: e.into_inner().message().trim().to_string(),
                }
            })?;
        if scenario.name.is_empty() {
            scenario.name = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        scenario.validate(file)?;
        Ok(scenario)
    }

    /// Reads and parses a scenario file.
    ///
    /// # Errors
    /// [`ScenarioError::Io`] or [`ScenarioError::Invalid`].
    pub fn load(file: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(file).map_err(|source| ScenarioError::Io {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(file, &text)
    }

    fn validate(&self, file: &Path) -> Result<(), ScenarioError> {
        let invalid = |key: &str, message: String| ScenarioError::Invalid {
            file: file.to_path_buf(),
            key: key.to_string(),
            message,
        };
        if self.cluster.brokers == 0 || self.cluster.brokers > 9 {
            return Err(invalid("cluster.brokers", "expected 1..=9 brokers".into()));
        }
        if self.topic.replication_factor > self.cluster.brokers {
            return Err(invalid(
                "topic.replication_factor",
                format!(
                    "{} exceeds the {} brokers",
                    self.topic.replication_factor, self.cluster.brokers
                ),
            ));
        }
        if self.topic.partitions == 0 {
            return Err(invalid("topic.partitions", "expected at least 1".into()));
        }
        if self.workload.producers == 0 || self.workload.consumers == 0 {
            return Err(invalid(
                "workload",
                "expected at least 1 producer and 1 consumer".into(),
            ));
        }
        Ok(())
    }
}

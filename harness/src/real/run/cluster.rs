//! The Kafka side of a real run: the brokers (started here, or a user's), the topic, and
//! the reads the runner makes itself: high watermarks, the pipeline group's committed
//! offsets and the final log.

use crate::client::real::RealAdmin;
use crate::client::Admin;
use crate::history::RecordRef;
use crate::real::provision::Kafka;
use crate::scenario::Scenario;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long one metadata, watermark or offset request may take, ms.
const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// The brokers of a run.
pub enum Brokers {
    /// Started by eosim in a temporary directory (removed on drop, after the brokers).
    Native {
        /// The cluster.
        kafka: Box<Kafka>,
        /// Node ids killed and not yet restarted.
        down: BTreeSet<i32>,
        /// Node ids paused.
        paused: BTreeSet<i32>,
        /// Their directory.
        dir: tempfile::TempDir,
    },
    /// A user's cluster, by `bootstrap.servers`: no broker faults.
    External(String),
}

impl Brokers {
    /// `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        match self {
            Brokers::Native { kafka, .. } => kafka.bootstrap_servers(),
            Brokers::External(b) => b.clone(),
        }
    }

    /// The native cluster's directory (logs), if any.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match self {
            Brokers::Native { dir, .. } => Some(dir.path()),
            Brokers::External(_) => None,
        }
    }
}

/// An admin client of `bootstrap` (30 s per call) and a runtime to drive it from the
/// synchronous runner.
///
/// # Errors
/// A runtime that cannot be built, a configuration librdkafka refuses.
fn admin_on(bootstrap: &str) -> Result<(tokio::runtime::Runtime, RealAdmin), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let admin = RealAdmin::new(bootstrap, Duration::from_secs(30)).map_err(|e| e.to_string())?;
    Ok((runtime, admin))
}

/// Creates the scenario's topic with its settings.
///
/// # Errors
/// The admin client's error, naming the topic and the bootstrap servers.
pub fn create_topic(bootstrap: &str, scenario: &Scenario) -> Result<(), String> {
    create_topic_spec(bootstrap, &scenario.topic)
}

/// Group of the OffsetFetch that [`warm_offsets_log`] repeats.
pub const WARM_UP_GROUP: &str = "eosim-warm-up";

/// Bound on [`warm_offsets_log`], ms.
const OFFSETS_LOG_WAIT_MS: u64 = 60_000;

/// Has the cluster create `__consumer_offsets` before the workload starts: an OffsetFetch
/// of group [`WARM_UP_GROUP`] for `topic`, repeated until a group coordinator answers. A
/// fresh cluster creates the topic on the first FindCoordinator of a group
/// (`offsets.topic.num.partitions` partitions, 50 by default: seconds on 2 cores, more on
/// a loaded machine), which the workload's first commit would otherwise wait out,
/// committing seconds later than in the simulation, whose coordinators answer at once (a
/// `delete-records` bounded by the group's committed offset at 7 s once found none).
///
/// # Errors
/// No coordinator answered within 60 s: the last error.
pub fn warm_offsets_log(bootstrap: &str, topic: &str) -> Result<(), String> {
    let probe = Probe::new(bootstrap, topic, 1, WARM_UP_GROUP)?;
    let within = Duration::from_millis(OFFSETS_LOG_WAIT_MS);
    match probe.committed_retrying(within, Duration::from_millis(200)) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "kafka ({bootstrap}): no group coordinator within {OFFSETS_LOG_WAIT_MS} ms: {e}"
        )),
    }
}

/// Creates topic `t` with its settings.
///
/// # Errors
/// The admin client's error, naming the topic and the bootstrap servers.
pub fn create_topic_spec(bootstrap: &str, t: &crate::scenario::TopicSpec) -> Result<(), String> {
    let config = t.to_config();
    let (runtime, admin) = admin_on(bootstrap)?;
    runtime
        .block_on(admin.create_topic(&t.name, t.partitions, t.replication_factor, config))
        .map_err(|e| format!("kafka ({bootstrap}): create topic {}: {e}", t.name))
}

/// CreatePartitions (KIP-195) through the admin client ([`RealAdmin::create_partitions`]),
/// from the synchronous runner: `topic` grows to `count` partitions.
///
/// # Errors
/// The broker's refusal, or a failed request.
pub fn create_partitions(bootstrap: &str, topic: &str, count: u32) -> Result<(), String> {
    let (runtime, admin) = admin_on(bootstrap)?;
    runtime
        .block_on(admin.create_partitions(topic, count))
        .map_err(|e| e.to_string())
}

/// Each partition's low watermark after a DeleteRecords, or the broker's error for it.
pub type LowWatermarks = Vec<(TopicPartition, Result<Offset, String>)>;

/// DeleteRecords (KIP-107) through the admin client ([`RealAdmin::delete_records`]), from
/// the synchronous runner: each partition's low watermark after the deletion, or its error.
///
/// # Errors
/// When the request as a whole failed.
pub fn delete_records(
    bootstrap: &str,
    offsets: &[(TopicPartition, Option<Offset>)],
) -> Result<LowWatermarks, String> {
    let (runtime, admin) = admin_on(bootstrap)?;
    let results = runtime
        .block_on(admin.delete_records(offsets))
        .map_err(|e| format!("kafka ({bootstrap}): delete records: {e}"))?;
    Ok(results
        .into_iter()
        .map(|(tp, r)| (tp, r.map_err(|e| e.to_string())))
        .collect())
}

/// A consumer of the pipeline's group that never joins it: it reads committed offsets and
/// watermarks only.
pub struct Probe {
    consumer: BaseConsumer,
    group: String,
    tps: Vec<TopicPartition>,
}

impl Probe {
    /// A probe of `partitions` partitions of `topic` and of `group`'s offsets on
    /// `bootstrap`.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(bootstrap: &str, topic: &str, partitions: u32, group: &str) -> Result<Self, String> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("log_level", "0")
            .create()
            .map_err(|e| format!("probe consumer: {e}"))?;
        let tps = (0..partitions)
            .map(|p| TopicPartition::new(topic, p))
            .collect();
        Ok(Self {
            consumer,
            group: group.to_string(),
            tps,
        })
    }

    /// A probe of the scenario's topic and of `group`.
    ///
    /// # Errors
    /// As [`Probe::new`].
    /// Its partitions are those the cluster has when it is made (an `add-partitions`
    /// fault may have grown the topic past `[topic] partitions`), or the declared ones
    /// when the metadata cannot be had (the watermark reads then say why).
    pub fn of_scenario(bootstrap: &str, scenario: &Scenario, group: &str) -> Result<Self, String> {
        let t = &scenario.topic;
        let mut probe = Self::new(bootstrap, &t.name, t.partitions, group)?;
        let count = probe.partition_count(&t.name).unwrap_or(t.partitions);
        if count > t.partitions {
            probe.tps = (0..count)
                .map(|p| TopicPartition::new(&t.name, p))
                .collect();
        }
        Ok(probe)
    }

    /// `topic`'s partition count as the cluster's metadata has it.
    ///
    /// # Errors
    /// Metadata that could not be fetched, or a topic it does not list.
    pub fn partition_count(&self, topic: &str) -> Result<u32, String> {
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let metadata = (self.consumer.fetch_metadata(Some(topic), timeout))
            .map_err(|e| format!("{topic}: metadata: {e}"))?;
        let listed = metadata.topics().iter().find(|m| m.name() == topic);
        listed
            .map(|m| m.partitions().len() as u32)
            .ok_or_else(|| format!("{topic}: not in the cluster's metadata"))
    }

    /// The partitions of the topic.
    pub fn partitions(&self) -> &[TopicPartition] {
        &self.tps
    }

    /// The high watermark of every partition.
    ///
    /// # Errors
    /// The first partition whose watermarks could not be fetched.
    pub fn high_watermarks(&self) -> Result<BTreeMap<TopicPartition, Offset>, String> {
        let watermarks = self.watermarks()?;
        Ok(watermarks
            .into_iter()
            .map(|(tp, (_, high))| (tp, high))
            .collect())
    }

    /// The low watermark (log start offset) and high watermark of every partition.
    ///
    /// # Errors
    /// The first partition whose watermarks could not be fetched.
    pub fn watermarks(&self) -> Result<BTreeMap<TopicPartition, (Offset, Offset)>, String> {
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let mut out = BTreeMap::new();
        for tp in &self.tps {
            let marks = self
                .consumer
                .fetch_watermarks(&tp.topic, tp.partition as i32, timeout)
                .map_err(|e| format!("{tp}: watermarks: {e}"))?;
            out.insert(tp.clone(), marks);
        }
        Ok(out)
    }

    /// [`Probe::committed`] asked again every `every` while it fails (no coordinator yet,
    /// or one moving: `COORDINATOR_NOT_AVAILABLE`, `NOT_COORDINATOR`), as an admin tool
    /// retries, until it answers or `within` has passed.
    ///
    /// # Errors
    /// The last error once `within` has passed.
    pub fn committed_retrying(
        &self,
        within: Duration,
        every: Duration,
    ) -> Result<Vec<(TopicPartition, Offset)>, String> {
        let deadline = Instant::now() + within;
        loop {
            match self.committed() {
                Err(_) if Instant::now() < deadline => std::thread::sleep(every),
                answer => return answer,
            }
        }
    }

    /// The group's committed offsets (partitions without one left out).
    ///
    /// # Errors
    /// When the coordinator does not answer in time.
    pub fn committed(&self) -> Result<Vec<(TopicPartition, Offset)>, String> {
        let mut query = TopicPartitionList::new();
        for tp in &self.tps {
            query.add_partition(&tp.topic, tp.partition as i32);
        }
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let tpl = self
            .consumer
            .committed_offsets(query, timeout)
            .map_err(|e| format!("group {}: committed offsets: {e}", self.group))?;
        let mut out: Vec<(TopicPartition, Offset)> = tpl
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                rdkafka::Offset::Offset(o) => {
                    Some((TopicPartition::new(e.topic(), e.partition() as u32), o))
                }
                _ => None,
            })
            .collect();
        out.sort();
        Ok(out)
    }
}

/// A record of the final log: offset, key and value (text, lossily), headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Offset.
    pub offset: Offset,
    /// Key text.
    pub key: Option<String>,
    /// Value text; `None` is a tombstone.
    pub value: Option<String>,
    /// Headers, raw.
    pub headers: Vec<(String, bytes::Bytes)>,
}

impl LogRecord {
    /// As the history's [`RecordRef`] of partition `tp`, its id given.
    pub fn record_ref(&self, tp: &TopicPartition, id: u64) -> RecordRef {
        RecordRef {
            id,
            key: self.key.clone(),
            tp: tp.clone(),
            offset: self.offset,
        }
    }

    /// The id a `kafka-consume` record carries in its value; `u64::MAX` without one.
    pub fn value_id(&self) -> u64 {
        self.value
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX)
    }
}

fn log_record(m: &rdkafka::message::BorrowedMessage<'_>) -> LogRecord {
    use rdkafka::message::Headers;
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    let headers = m
        .headers()
        .map(|h| {
            h.iter()
                .map(|h| {
                    let v = bytes::Bytes::copy_from_slice(h.value.unwrap_or_default());
                    (h.key.to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default();
    LogRecord {
        offset: m.offset(),
        key: text(m.key()),
        value: text(m.payload()),
        headers,
    }
}

/// Reads every partition from offset 0 to its high watermark with read_uncommitted.
///
/// # Errors
/// When the log cannot be read up to the high watermarks within `time_ms_max`.
pub fn read_log(
    bootstrap: &str,
    high: &BTreeMap<TopicPartition, Offset>,
    time_ms_max: u64,
) -> Result<BTreeMap<TopicPartition, Vec<LogRecord>>, String> {
    read_log_isolated(bootstrap, high, time_ms_max, Isolation::ReadUncommitted)
}

/// Watches the partitions `0..partitions` of some topics for open transactions: two
/// consumers made once, one read_committed (its ListOffsets answers the last stable
/// offset: librdkafka sends the consumer's `isolation.level`, KIP-98) and one
/// read_uncommitted (the high watermark).
pub struct StabilityProbe {
    committed: BaseConsumer,
    uncommitted: BaseConsumer,
    tps: Vec<TopicPartition>,
}

impl StabilityProbe {
    /// A probe of `topics`, each with `partitions` partitions, on `bootstrap`.
    ///
    /// # Errors
    /// A probe consumer librdkafka refuses.
    pub fn new(bootstrap: &str, topics: &[String], partitions: u32) -> Result<Self, String> {
        let consumer = |level: &str| -> Result<BaseConsumer, String> {
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("group.id", "eosim-lso-probe")
                .set("enable.auto.commit", "false")
                .set("isolation.level", level)
                .set("log_level", "0")
                .create()
                .map_err(|e| format!("LSO probe: {e}"))
        };
        let tps = topics
            .iter()
            .flat_map(|t| (0..partitions).map(move |p| TopicPartition::new(t, p)))
            .collect();
        Ok(Self {
            committed: consumer("read_committed")?,
            uncommitted: consumer("read_uncommitted")?,
            tps,
        })
    }

    /// Each partition's last stable offset and high watermark, `(lso, hw)`.
    ///
    /// # Errors
    /// Watermarks that could not be fetched.
    pub fn stable_offsets(&self) -> Result<BTreeMap<TopicPartition, (Offset, Offset)>, String> {
        let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
        let mut out = BTreeMap::new();
        for tp in &self.tps {
            let watermark = |c: &BaseConsumer| {
                c.fetch_watermarks(&tp.topic, tp.partition as i32, timeout)
                    .map(|(_, high)| high)
                    .map_err(|e| format!("{tp}: watermarks: {e}"))
            };
            let marks = (watermark(&self.committed)?, watermark(&self.uncommitted)?);
            out.insert(tp.clone(), marks);
        }
        Ok(out)
    }

    /// The partitions whose last stable offset is below their high watermark (an open
    /// transaction holds read_committed readers back), one line each, `<tp>: last stable
    /// offset <lso> < high watermark <hw> (an open transaction)`.
    ///
    /// # Errors
    /// Watermarks that could not be fetched.
    pub fn open_transactions(&self) -> Result<Vec<String>, String> {
        let open = self
            .stable_offsets()?
            .into_iter()
            .filter(|(_, (lso, hw))| lso < hw);
        Ok(open
            .map(|(tp, (lso, hw))| {
                format!(
                    "{tp}: last stable offset {lso} < high watermark {hw} (an open transaction)"
                )
            })
            .collect())
    }
}

/// Where a consumer reading with `isolation` has consumed everything of each partition of
/// `high` (partition to high watermark): the offset after the last record it returns, 0
/// when none (the real tier's `workload::upstream_txn::consumed_end` of the simulation).
/// Not the high watermark: behind a transactional producer the commit or abort marker
/// after a transaction's last record takes an offset no record holds, and consumers commit
/// the offset after the last record they processed (Connect's `WorkerSinkTask` commits
/// `record.offset() + 1`), so the committed offsets stay below the high watermark for good.
///
/// # Errors
/// As [`read_log_isolated`]: the partitions cannot be read to their high watermarks within
/// `time_ms_max` ms (an open transaction holds a read_committed reader back).
pub fn consumed_ends(
    bootstrap: &str,
    high: &BTreeMap<TopicPartition, Offset>,
    time_ms_max: u64,
    isolation: Isolation,
) -> Result<BTreeMap<TopicPartition, Offset>, String> {
    let log = read_log_isolated(bootstrap, high, time_ms_max, isolation)?;
    let end = |records: &[LogRecord]| records.last().map_or(0, |r| r.offset + 1);
    Ok(log.into_iter().map(|(tp, r)| (tp, end(&r))).collect())
}

/// Reads every partition from offset 0 to its high watermark with `isolation`: under
/// read_committed aborted records are left out, and a partition is read once the position
/// reached the high watermark (past transaction markers, which no record reports).
///
/// # Errors
/// When the log cannot be read up to the high watermarks within `time_ms_max` (under
/// read_committed, a transaction still open holds the position back).
pub fn read_log_isolated(
    bootstrap: &str,
    high: &BTreeMap<TopicPartition, Offset>,
    time_ms_max: u64,
    isolation: Isolation,
) -> Result<BTreeMap<TopicPartition, Vec<LogRecord>>, String> {
    let level = match isolation {
        Isolation::ReadCommitted => "read_committed",
        Isolation::ReadUncommitted => "read_uncommitted",
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "eosim-final-log")
        .set("enable.auto.commit", "false")
        .set("isolation.level", level)
        .set("log_level", "0")
        .create()
        .map_err(|e| format!("log reader: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for tp in high.keys() {
        tpl.add_partition_offset(&tp.topic, tp.partition as i32, rdkafka::Offset::Beginning)
            .map_err(|e| format!("{tp}: {e}"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| format!("log reader assign: {e}"))?;
    let mut log: BTreeMap<TopicPartition, Vec<LogRecord>> =
        high.keys().map(|tp| (tp.clone(), Vec::new())).collect();
    let done = |log: &BTreeMap<TopicPartition, Vec<LogRecord>>| {
        let positions = consumer.position().ok();
        high.iter().all(|(tp, hw)| {
            let position = positions
                .as_ref()
                .and_then(|t| t.find_partition(&tp.topic, tp.partition as i32))
                .and_then(|e| e.offset().to_raw())
                .unwrap_or(0);
            log[tp].last().map_or(0, |r| r.offset + 1).max(position) >= *hw
        })
    };
    let started = Instant::now();
    while !done(&log) {
        if started.elapsed() > Duration::from_millis(time_ms_max) {
            return Err(format!(
                "final log read: not at the high watermarks {high:?} after {time_ms_max} ms"
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition() as u32);
                if m.offset() < high.get(&tp).copied().unwrap_or(0) {
                    log.entry(tp).or_default().push(log_record(&m));
                }
            }
            Some(Err(e)) => eprintln!("eosim: final log read: {e}"),
            None => {}
        }
    }
    Ok(log)
}

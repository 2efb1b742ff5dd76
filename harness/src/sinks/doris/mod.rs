//! The Doris Kafka connector (apache/doris-kafka-connector) as a Kafka Connect sink:
//! its configuration, its Stream Load labels, and (under `--cfg madsim`) the sink task.
//!
//! # Source followed
//! apache/doris-kafka-connector `src/main/java/org/apache/doris/kafka/connector/`:
//! `DorisSinkTask`, `service/DorisDefaultSinkService`, `writer/DorisWriter`,
//! `writer/StreamLoadWriter`, `writer/LabelGenerator`, `writer/load/DorisStreamLoad`,
//! `writer/commit/DorisCommitter`, `writer/ResponseUtil`, `utils/BackoffAndRetryUtils`,
//! `cfg/DorisSinkConnectorConfig`, `cfg/DorisOptions`, `utils/ConfigCheckUtils`.
//!
//! # Behaviour (the task, `task::DorisSinkTask`)
//! - One writer per assigned partition (`startTask` on `open`, created once per task
//!   instance: `close` does nothing, so a writer outlives a revocation, as in the source).
//! - `put` buffers each record's JSON (`RecordBuffer`) unless its offset is at or below
//!   the writer's `processedOffset` or the offset recovered from Doris; a buffer reaching
//!   `buffer.count.records` or `buffer.size.bytes` is flushed at once, and after the batch
//!   every writer whose last flush is `buffer.flush.time` seconds old flushes what it holds.
//! - A flush is one Stream Load (to `doris-be`) with the label of [`LabelGenerator`] and,
//!   with `enable.2pc` (default true), `two_phase_commit: true`, so the load ends
//!   PRECOMMITTED. A load answered with anything but `Success` / `Publish Timeout`, or not
//!   answered, throws: `put` turns it into a `RetriableException` after
//!   `context.timeout(retry.interval.ms)` while `max.retries` lasts (never reset, as in
//!   `DorisSinkTask`), then fails the task. The buffer being flushed is dropped with the
//!   exception (`DorisWriter.insertRecord` swaps it out before `flush`); Connect only
//!   redelivers the batch of the failed `put`.
//! - `preCommit` commits every pre-committed load of the partitions (`DorisCommitter`:
//!   `_stream_load_2pc` with `txn_operation: commit`, tried at 0, 1, 2 and 4 s, an answer
//!   `transaction [n] is already COMMITTED/VISIBLE, not pre-committed.` counting as
//!   success), then returns each partition's flushed offset (last loaded offset + 1) for
//!   Connect to commit; a partition with nothing loaded is left out.
//! - With `delivery.guarantee=exactly_once` a writer, on its first record, reads the
//!   labels of its partition (`SHOW TRANSACTION FROM db WHERE LABEL LIKE
//!   '<topic>__KC_<partition>__KC_<db>_<table>%'`) and takes the greatest last offset of a
//!   VISIBLE one as persisted: records at or below it are skipped. PRECOMMITTED loads a
//!   crashed task left are neither committed nor aborted by anyone: Doris aborts them after
//!   `stream_load_default_precommit_timeout_second`.
//! - With `sink.properties.group_commit` set (any mode), the connector sends every Stream
//!   Load without a label (`DorisStreamLoad.load`: `label = null`) and with the
//!   `group_commit` header, and an `enable.2pc` left at its default is off
//!   (`ConfigCheckUtils.validateGroupCommitMode`): a reloaded batch is not recognised by
//!   its label, and `exactly_once` finds no labels to recover progress from. Doris groups
//!   the loads (`eosim_sim::doris::group_commit`); `off_mode` is an unlabelled ordinary
//!   load.
//!
//! # Not modelled
//! `load.model=copy_into` (`CopyIntoWriter`), `enable.combine.flush`
//! (`DorisCombinedSinkService`), `record.tablename.field`, Debezium
//! conversion (`converter.mode=debezium_ingestion`), `enable.delete`, CSV input, the
//! UNIQUE KEY table check that turns an unforced `enable.2pc` off (the pipeline's table is
//! DUPLICATE KEY), JMX metrics. These keys are refused when set to anything else than the
//! modelled value.
//!
//! # Bug switches
//! `eosim.bug.commit.offsets.before.2pc=true`: `preCommit` returns the flushed offsets
//! first and commits the pre-committed loads only at the next `preCommit`; a crash in
//! between leaves loads PRECOMMITTED (to time out) whose records Connect already counts as
//! delivered.
//!
//! `eosim.precommit` ([`PreCommitPolicy`]): `durable-only` (the default, the connector's
//! own `preCommit`: the offsets of what loads made durable) or `pass-through` (the offsets
//! Connect passed in, as a buffering sink that keeps `SinkTask`'s default `preCommit`
//! returns them: they cover what is still in a buffer, which a crash loses).
//!
//! ## Default values
//! `delivery.guarantee` at_least_once, `enable.2pc` true, `buffer.count.records` 50000,
//! `buffer.size.bytes` 104857600, `buffer.flush.time` 120 (s, at least 1),
//! `max.retries` 10, `retry.interval.ms` 6000, `behavior.on.null.values` ignore,
//! `load.model` stream_load, `sink.properties.read_json_by_line` true,
//! `sink.properties.strict_mode` false; `doris.topic2table.map` empty (a topic loads into
//! the table of its own name).

#[cfg(madsim)]
pub mod task;

use crate::connect::config::{self, ConfigError, ConnectorConfig};
use eosim_sim::doris::group_commit::GroupCommitMode;
use std::collections::BTreeMap;

/// The connector class (`DorisSinkConnector`).
pub const CONNECTOR_CLASS: &str = "org.apache.doris.kafka.connector.DorisSinkConnector";

/// `LoadConstants.FILE_DELIM_DEFAULT`: the separator of a label's parts.
pub const LABEL_DELIM: &str = "__KC_";

/// The connector's own keys (`DorisSinkConnectorConfig`), and eosim's bug switch.
pub const KEYS: &[&str] = &[
    "doris.urls",
    "doris.http.port",
    "doris.query.port",
    "doris.user",
    "doris.password",
    "doris.database",
    "doris.topic2table.map",
    "buffer.count.records",
    "buffer.size.bytes",
    "buffer.flush.time",
    "delivery.guarantee",
    "enable.2pc",
    "label.prefix",
    "load.model",
    "enable.combine.flush",
    "max.retries",
    "retry.interval.ms",
    "behavior.on.null.values",
    "sink.properties.format",
    "sink.properties.read_json_by_line",
    "sink.properties.strict_mode",
    "sink.properties.group_commit",
    BUG_COMMIT_OFFSETS_BEFORE_2PC,
    PRECOMMIT_POLICY,
];

/// The bug switch's key (see the module doc).
pub const BUG_COMMIT_OFFSETS_BEFORE_2PC: &str = "eosim.bug.commit.offsets.before.2pc";

/// The `preCommit` policy's key (see the module doc, [`PreCommitPolicy`]).
pub const PRECOMMIT_POLICY: &str = "eosim.precommit";

/// What `preCommit` hands Connect to commit ([`PRECOMMIT_POLICY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreCommitPolicy {
    /// `durable-only` (the connector's own `DorisSinkTask.preCommit`): per partition the
    /// offset after the last record a load made durable; records still in a buffer are
    /// not covered, so a crash redelivers them.
    DurableOnly,
    /// `pass-through`: the offsets Connect passed in (its consumed positions), as a sink
    /// that buffers in `put` but keeps `SinkTask`'s default `preCommit` (`flush`, a no-op
    /// for such a sink, then `return currentOffsets`) hands them back: the offsets cover
    /// records still in a buffer, and a crash loses them (`sink-lost`).
    PassThrough,
}

/// `delivery.guarantee` (`DeliveryGuarantee`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// `at_least_once`: offsets come from Connect alone.
    AtLeastOnce,
    /// `exactly_once`: a writer also recovers its progress from the VISIBLE labels.
    ExactlyOnce,
}

/// `behavior.on.null.values`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullValues {
    /// `ignore`: a tombstone is skipped.
    Ignore,
    /// `fail`: a tombstone fails the task (`DataException`).
    Fail,
}

/// The connector's configuration (`DorisOptions`).
#[derive(Debug, Clone, PartialEq)]
pub struct DorisSinkConfig {
    /// `doris.database`.
    pub database: String,
    /// `doris.topic2table.map`, parsed (`topic:table,...`).
    pub topic2table: BTreeMap<String, String>,
    /// `buffer.count.records`: a buffer of this many records is flushed (0: no limit).
    pub buffer_count_records: u64,
    /// `buffer.size.bytes`: a buffer of this many bytes is flushed.
    pub buffer_size_bytes: u64,
    /// `buffer.flush.time`, s: a buffer this old is flushed at the end of a `put`.
    pub buffer_flush_time_s: u64,
    /// `delivery.guarantee`.
    pub delivery_guarantee: DeliveryGuarantee,
    /// `enable.2pc`, after `sink.properties.group_commit` turned it off.
    pub enable_2pc: bool,
    /// `sink.properties.group_commit` (`None`: not set). Set to any mode, the connector
    /// sends its Stream Loads without a label and with this `group_commit` header.
    pub group_commit: Option<GroupCommitMode>,
    /// `max.retries`: failed `put`s retried over the task's life.
    pub max_retries: u32,
    /// `retry.interval.ms`: the redelivery delay asked of Connect after a failed `put`.
    pub retry_interval_ms: u64,
    /// `behavior.on.null.values`.
    pub null_values: NullValues,
    /// `sink.properties.strict_mode`.
    pub strict_mode: bool,
    /// The bug switch [`BUG_COMMIT_OFFSETS_BEFORE_2PC`].
    pub bug_commit_offsets_before_2pc: bool,
    /// [`PRECOMMIT_POLICY`]: `durable-only` (default) or `pass-through`.
    pub precommit: PreCommitPolicy,
}

fn one_of(
    raw: &BTreeMap<String, String>,
    key: &str,
    default: &str,
    allowed: &[&str],
    why: &str,
) -> Result<String, ConfigError> {
    let value = config::get(raw, key, default).trim().to_ascii_lowercase();
    if allowed.contains(&value.as_str()) {
        Ok(value)
    } else {
        Err(config::invalid(
            key,
            &value,
            &format!("{}{why}", allowed.join(" or ")),
        ))
    }
}

/// `sink.properties.group_commit` (the Stream Load `group_commit` header the connector
/// passes on) and what it does to `enable.2pc`, as `ConfigCheckUtils.validateGroupCommitMode`
/// decides: the key set at all (any valid mode, `off_mode` included) turns group commit on
/// in the connector (`DorisStreamLoad.load` then sends no label); with `enable.2pc=true`
/// set explicitly (`force2PC`) it is refused; with `enable.2pc` left at its default, 2PC
/// is turned off silently (the source only logs it). Returns the mode (`None`: the key is
/// not set) and whether 2PC stays on.
///
/// # Errors
/// An unknown mode; the key with `enable.2pc=true` set explicitly.
fn check_group_commit(
    raw: &BTreeMap<String, String>,
    enable_2pc: bool,
) -> Result<(Option<GroupCommitMode>, bool), ConfigError> {
    const KEY: &str = "sink.properties.group_commit";
    let Some(value) = raw.get(KEY) else {
        return Ok((None, enable_2pc));
    };
    let mode = GroupCommitMode::parse(value)
        .ok_or_else(|| config::invalid(KEY, value, "off_mode or sync_mode or async_mode"))?;
    let forced_2pc = raw.contains_key("enable.2pc") && enable_2pc;
    if forced_2pc {
        return Err(config::invalid(
            KEY,
            value,
            "no group commit with enable.2pc=true (the connector: \"When group commit is \
             enabled, you should disable two phase commit! Please set 'enable.2pc':'false'\")",
        ));
    }
    Ok((Some(mode), false))
}

impl DorisSinkConfig {
    /// Parses the connector's keys of `raw`.
    ///
    /// # Errors
    /// A missing `doris.urls`, `doris.user` or `doris.database`; a value that does not
    /// parse; a `buffer.flush.time` below 1 or a `buffer.size.bytes` of 0 (the source's
    /// minimums); an unmodelled choice (`load.model`, `enable.combine.flush`,
    /// `sink.properties.format`, `sink.properties.read_json_by_line`); and the
    /// `sink.properties.group_commit` with `enable.2pc=true` set explicitly.
    /// `delivery.guarantee=exactly_once` without two-phase commit is accepted, as the
    /// connector accepts it: what it delivers is for the checker to say.
    pub fn parse(raw: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        for key in ["doris.urls", "doris.user", "doris.database"] {
            if config::get(raw, key, "").trim().is_empty() {
                return Err(ConfigError::Missing(key.into()));
            }
        }
        one_of(
            raw,
            "load.model",
            "stream_load",
            &["stream_load"],
            " (copy_into is not modelled)",
        )?;
        one_of(
            raw,
            "enable.combine.flush",
            "false",
            &["false"],
            " (combined flush is not modelled)",
        )?;
        one_of(
            raw,
            "sink.properties.format",
            "json",
            &["json"],
            " (the pipeline's records are JSON; csv is not modelled)",
        )?;
        one_of(
            raw,
            "sink.properties.read_json_by_line",
            "true",
            &["true"],
            " (one JSON object per line)",
        )?;
        let guarantee = one_of(
            raw,
            "delivery.guarantee",
            "at_least_once",
            &["at_least_once", "exactly_once"],
            "",
        )?;
        let delivery_guarantee = if guarantee == "exactly_once" {
            DeliveryGuarantee::ExactlyOnce
        } else {
            DeliveryGuarantee::AtLeastOnce
        };
        let enable_2pc = config::boolean(raw, "enable.2pc", "true")?;
        let (group_commit, enable_2pc) = check_group_commit(raw, enable_2pc)?;
        let buffer_flush_time_s: u64 = config::number(raw, "buffer.flush.time", "120")?;
        if buffer_flush_time_s < 1 {
            return Err(config::invalid(
                "buffer.flush.time",
                "0",
                "at least 1 (seconds)",
            ));
        }
        let buffer_size_bytes: u64 = config::number(raw, "buffer.size.bytes", "104857600")?;
        if buffer_size_bytes < 1 {
            return Err(config::invalid("buffer.size.bytes", "0", "at least 1"));
        }
        let null_values = match one_of(
            raw,
            "behavior.on.null.values",
            "ignore",
            &["ignore", "fail"],
            "",
        )?
        .as_str()
        {
            "fail" => NullValues::Fail,
            _ => NullValues::Ignore,
        };
        let precommit = match one_of(
            raw,
            PRECOMMIT_POLICY,
            "durable-only",
            &["durable-only", "pass-through"],
            "",
        )?
        .as_str()
        {
            "pass-through" => PreCommitPolicy::PassThrough,
            _ => PreCommitPolicy::DurableOnly,
        };
        Ok(Self {
            database: config::get(raw, "doris.database", "").trim().to_string(),
            topic2table: parse_topic2table(config::get(raw, "doris.topic2table.map", ""))?,
            buffer_count_records: config::number(raw, "buffer.count.records", "50000")?,
            buffer_size_bytes,
            buffer_flush_time_s,
            delivery_guarantee,
            enable_2pc,
            group_commit,
            max_retries: config::number(raw, "max.retries", "10")?,
            retry_interval_ms: config::number(raw, "retry.interval.ms", "6000")?,
            null_values,
            strict_mode: config::boolean(raw, "sink.properties.strict_mode", "false")?,
            bug_commit_offsets_before_2pc: config::boolean(
                raw,
                BUG_COMMIT_OFFSETS_BEFORE_2PC,
                "false",
            )?,
            precommit,
        })
    }

    /// The table `topic` loads into (`DorisOptions.getTopicMapTable`: the map's entry, else
    /// the topic's own name).
    pub fn table_of(&self, topic: &str) -> String {
        self.topic2table
            .get(topic)
            .cloned()
            .unwrap_or_else(|| topic.to_string())
    }
}

/// `ConfigCheckUtils.parseTopicToTableMap`: `topic:table` pairs separated by commas.
fn parse_topic2table(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut map = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parsed = pair
            .split_once(':')
            .map(|(t, table)| (t.trim(), table.trim()))
            .filter(|(t, table)| !t.is_empty() && !table.is_empty());
        let Some((topic, table)) = parsed else {
            return Err(config::invalid(
                "doris.topic2table.map",
                text,
                "topic:table pairs separated by commas",
            ));
        };
        if map.insert(topic.to_string(), table.to_string()).is_some() {
            return Err(config::invalid(
                "doris.topic2table.map",
                text,
                "each topic at most once",
            ));
        }
    }
    Ok(map)
}

/// Validates a connector configuration: Connect's keys plus the connector's ([`KEYS`]),
/// its class, and its own values ([`DorisSinkConfig::parse`]).
///
/// # Errors
/// The first unknown key, wrong class or bad value.
pub fn parse_connector(raw: &BTreeMap<String, String>) -> Result<ConnectorConfig, ConfigError> {
    let config = ConnectorConfig::parse(raw, KEYS)?;
    if config.connector_class != CONNECTOR_CLASS {
        let class = &config.connector_class;
        return Err(config::invalid("connector.class", class, CONNECTOR_CLASS));
    }
    DorisSinkConfig::parse(raw)?;
    Ok(config)
}

/// `LabelGenerator`: `<topic>__KC_<partition>__KC_<db>_<table>__KC_<lastOffset>__KC_<n>`,
/// dots replaced by `_` (a Stream Load label cannot hold them), where `n` starts at a
/// random number below 1000 when the writer is made and counts up with every label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelGenerator {
    prefix: String,
    suffix: u64,
}

impl LabelGenerator {
    /// The generator of a writer of `topic`/`partition` into `db`.`table`, its suffix
    /// starting at `suffix_start` (the source draws `new Random().nextInt(1000)`).
    pub fn new(topic: &str, partition: u32, db: &str, table: &str, suffix_start: u64) -> Self {
        let topic = topic.replace('.', "_");
        let table_id = format!("{db}.{table}").replace('.', "_");
        Self {
            prefix: format!("{topic}{LABEL_DELIM}{partition}{LABEL_DELIM}{table_id}"),
            suffix: suffix_start,
        }
    }

    /// `buildLabelPrefix`: what every label of the writer starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `generateLabel(lastOffset)`: the next label.
    pub fn next(&mut self, last_offset: i64) -> String {
        let label = format!(
            "{}{LABEL_DELIM}{last_offset}{LABEL_DELIM}{}",
            self.prefix, self.suffix
        );
        self.suffix += 1;
        label
    }
}

/// `FileNameUtils.labelToEndOffset`: the last offset a label names (its fourth part), if
/// it parses.
pub fn label_to_end_offset(label: &str) -> Option<i64> {
    label.split(LABEL_DELIM).nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let base = [
            ("name", "doris-sink"),
            ("connector.class", CONNECTOR_CLASS),
            ("topics", "clicklog"),
            ("doris.urls", "doris-fe"),
            ("doris.user", "root"),
            ("doris.database", "db"),
        ];
        base.iter()
            .chain(pairs)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_are_the_connectors() {
        let c = DorisSinkConfig::parse(&raw(&[])).unwrap();
        assert_eq!(c.delivery_guarantee, DeliveryGuarantee::AtLeastOnce);
        assert!(c.enable_2pc);
        assert_eq!(c.buffer_count_records, 50_000);
        assert_eq!(c.buffer_size_bytes, 100 * 1024 * 1024);
        assert_eq!(c.buffer_flush_time_s, 120);
        assert_eq!(c.max_retries, 10);
        assert_eq!(c.retry_interval_ms, 6_000);
        assert_eq!(c.table_of("clicklog"), "clicklog");
        assert_eq!(c.precommit, PreCommitPolicy::DurableOnly);
        assert!(parse_connector(&raw(&[])).is_ok());
    }

    #[test]
    fn the_precommit_policy_is_durable_only_or_pass_through_and_nothing_else() {
        let pass = DorisSinkConfig::parse(&raw(&[(PRECOMMIT_POLICY, "pass-through")])).unwrap();
        assert_eq!(pass.precommit, PreCommitPolicy::PassThrough);
        let e = DorisSinkConfig::parse(&raw(&[(PRECOMMIT_POLICY, "sometimes")])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("eosim.precommit") && text.contains("durable-only or pass-through"),
            "{text}"
        );
    }

    #[test]
    fn group_commit_turns_an_unforced_two_phase_commit_off_and_refuses_a_forced_one() {
        let key = "sink.properties.group_commit";
        let eos = DorisSinkConfig::parse(&raw(&[
            ("delivery.guarantee", "exactly_once"),
            (key, "async_mode"),
        ]))
        .unwrap();
        assert_eq!(eos.group_commit, Some(GroupCommitMode::Async));
        assert!(!eos.enable_2pc, "an unforced enable.2pc is turned off");
        // The connector refuses the key with a forced 2PC whatever the mode, off_mode too.
        let forced = [("enable.2pc", "true"), (key, "off_mode")];
        let e = DorisSinkConfig::parse(&raw(&forced)).unwrap_err();
        assert!(e.to_string().contains("disable two phase commit"), "{e}");
        let off = DorisSinkConfig::parse(&raw(&[(key, "off_mode")])).unwrap();
        assert_eq!(
            (off.group_commit, off.enable_2pc),
            (Some(GroupCommitMode::Off), false)
        );
        let none = DorisSinkConfig::parse(&raw(&[])).unwrap();
        assert_eq!((none.group_commit, none.enable_2pc), (None, true));
        let bad = [("enable.2pc", "false"), (key, "fast_mode")];
        let e = DorisSinkConfig::parse(&raw(&bad)).unwrap_err();
        assert!(e.to_string().contains("fast_mode"), "{e}");
    }

    #[test]
    fn exactly_once_without_two_phase_commit_is_accepted_as_the_connector_accepts_it() {
        let c = DorisSinkConfig::parse(&raw(&[
            ("delivery.guarantee", "exactly_once"),
            ("enable.2pc", "false"),
        ]))
        .unwrap();
        assert_eq!(
            (c.delivery_guarantee, c.enable_2pc),
            (DeliveryGuarantee::ExactlyOnce, false)
        );
        let ok = DorisSinkConfig::parse(&raw(&[("delivery.guarantee", "EXACTLY_ONCE")])).unwrap();
        assert_eq!(ok.delivery_guarantee, DeliveryGuarantee::ExactlyOnce);
    }

    #[test]
    fn unknown_and_unmodelled_keys_are_refused_by_name() {
        let e = parse_connector(&raw(&[("buffer.count.record", "5")])).unwrap_err();
        assert!(e.to_string().contains("`buffer.count.record`"), "{e}");
        let e = parse_connector(&raw(&[("load.model", "copy_into")])).unwrap_err();
        assert!(e.to_string().contains("not modelled"), "{e}");
        let e = parse_connector(&raw(&[("buffer.flush.time", "0")])).unwrap_err();
        assert!(e.to_string().contains("`buffer.flush.time`"), "{e}");
        let e = parse_connector(&raw(&[("doris.topic2table.map", "a:b,a:c")])).unwrap_err();
        assert!(e.to_string().contains("at most once"), "{e}");
        let e = DorisSinkConfig::parse(&raw(&[("doris.database", " ")])).unwrap_err();
        assert_eq!(e, ConfigError::Missing("doris.database".into()));
        let deprecated = parse_connector(&raw(&[("label.prefix", "ignored")]));
        assert!(deprecated.is_ok(), "label.prefix is accepted and unused");
    }

    #[test]
    fn labels_carry_partition_table_and_last_offset_and_count_up() {
        let mut g = LabelGenerator::new("click.log", 2, "db", "clicklog", 998);
        assert_eq!(g.prefix(), "click_log__KC_2__KC_db_clicklog");
        let first = g.next(49);
        assert_eq!(first, "click_log__KC_2__KC_db_clicklog__KC_49__KC_998");
        assert_eq!(g.next(99), "click_log__KC_2__KC_db_clicklog__KC_99__KC_999");
        assert_eq!(label_to_end_offset(&first), Some(49));
        assert_eq!(label_to_end_offset("stream_load_1"), None);
    }
}

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
//!
//! # Not modelled
//! `load.model=copy_into` (`CopyIntoWriter`), `enable.combine.flush`
//! (`DorisCombinedSinkService`), group commit (`sink.properties.group_commit` is parsed
//! and refused with `enable.2pc` true as the connector refuses it, and any mode but
//! `off_mode` is refused as not modelled: see `check_group_commit`), `record.tablename.field`, Debezium
//! conversion (`converter.mode=debezium_ingestion`), `enable.delete`, CSV input, the
//! UNIQUE KEY table check that turns an unforced `enable.2pc` off (the pipeline's table is
//! DUPLICATE KEY), JMX metrics. These keys are refused when set to anything else than the
//! modelled value.
//!
//! # Bug switch
//! `eosim.bug.commit.offsets.before.2pc=true`: `preCommit` returns the flushed offsets
//! first and commits the pre-committed loads only at the next `preCommit`; a crash in
//! between leaves loads PRECOMMITTED (to time out) whose records Connect already counts as
//! delivered.
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
];

/// The bug switch's key (see the module doc).
pub const BUG_COMMIT_OFFSETS_BEFORE_2PC: &str = "eosim.bug.commit.offsets.before.2pc";

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
    /// `enable.2pc`.
    pub enable_2pc: bool,
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
/// passes on): `off_mode`, `sync_mode` or `async_mode`. As the connector's
/// `ConfigCheckUtils.validateGroupCommitMode` does, the key set at all (any valid mode)
/// with `enable.2pc` true is refused: group commit loads carry no label and cannot be
/// pre-committed. A mode other than `off_mode` is refused too, because the Stream Load
/// model has no group commit yet (several loads sharing one internal transaction, and
/// `async_mode`'s acknowledgement before the data is durable, are not modelled).
///
/// # Errors
/// An unknown mode, the key with `enable.2pc` true, a mode other than `off_mode`.
fn check_group_commit(raw: &BTreeMap<String, String>, enable_2pc: bool) -> Result<(), ConfigError> {
    const KEY: &str = "sink.properties.group_commit";
    if !raw.contains_key(KEY) {
        return Ok(());
    }
    let mode = one_of(
        raw,
        KEY,
        "off_mode",
        &["off_mode", "sync_mode", "async_mode"],
        "",
    )?;
    if enable_2pc {
        return Err(config::invalid(
            KEY,
            &mode,
            "no group commit with enable.2pc=true (the connector: \"When group commit is \
             enabled, you should disable two phase commit! Please set 'enable.2pc':'false'\")",
        ));
    }
    if mode != "off_mode" {
        return Err(config::invalid(
            KEY,
            &mode,
            "off_mode: eosim's Stream Load model has no group commit (sync_mode, async_mode) yet",
        ));
    }
    Ok(())
}

impl DorisSinkConfig {
    /// Parses the connector's keys of `raw`.
    ///
    /// # Errors
    /// A missing `doris.urls`, `doris.user` or `doris.database`; a value that does not
    /// parse; a `buffer.flush.time` below 1 or a `buffer.size.bytes` of 0 (the source's
    /// minimums); an unmodelled choice (`load.model`, `enable.combine.flush`,
    /// `sink.properties.format`, `sink.properties.read_json_by_line`); and the
    /// contradiction `delivery.guarantee=exactly_once` with `enable.2pc=false` (the
    /// connector accepts it, but without two-phase commit a Stream Load whose answer is
    /// lost is retried under a new label and loaded twice, so eosim refuses the claim).
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
        if delivery_guarantee == DeliveryGuarantee::ExactlyOnce && !enable_2pc {
            return Err(config::invalid(
                "enable.2pc",
                "false",
                "true with delivery.guarantee=exactly_once (without two-phase commit a \
                 retried Stream Load whose answer was lost is loaded twice)",
            ));
        }
        check_group_commit(raw, enable_2pc)?;
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
        Ok(Self {
            database: config::get(raw, "doris.database", "").trim().to_string(),
            topic2table: parse_topic2table(config::get(raw, "doris.topic2table.map", ""))?,
            buffer_count_records: config::number(raw, "buffer.count.records", "50000")?,
            buffer_size_bytes,
            buffer_flush_time_s,
            delivery_guarantee,
            enable_2pc,
            max_retries: config::number(raw, "max.retries", "10")?,
            retry_interval_ms: config::number(raw, "retry.interval.ms", "6000")?,
            null_values,
            strict_mode: config::boolean(raw, "sink.properties.strict_mode", "false")?,
            bug_commit_offsets_before_2pc: config::boolean(
                raw,
                BUG_COMMIT_OFFSETS_BEFORE_2PC,
                "false",
            )?,
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
        assert!(parse_connector(&raw(&[])).is_ok());
    }

    #[test]
    fn group_commit_is_refused_with_two_phase_commit_and_not_modelled_without() {
        let key = "sink.properties.group_commit";
        let eos = DorisSinkConfig::parse(&raw(&[
            ("delivery.guarantee", "exactly_once"),
            (key, "sync_mode"),
        ]))
        .unwrap_err();
        assert!(
            eos.to_string().contains("disable two phase commit"),
            "{eos}"
        );
        // The connector refuses the key with 2PC whatever the mode, off_mode included.
        let off = DorisSinkConfig::parse(&raw(&[(key, "off_mode")])).unwrap_err();
        assert!(off.to_string().contains("enable.2pc=true"), "{off}");
        let no_2pc = [("enable.2pc", "false"), (key, "off_mode")];
        assert!(DorisSinkConfig::parse(&raw(&no_2pc)).is_ok());
        let async_mode = [("enable.2pc", "false"), (key, "async_mode")];
        let e = DorisSinkConfig::parse(&raw(&async_mode)).unwrap_err();
        assert!(e.to_string().contains("no group commit"), "{e}");
        let bad = [("enable.2pc", "false"), (key, "fast_mode")];
        assert!(DorisSinkConfig::parse(&raw(&bad)).is_err());
    }

    #[test]
    fn exactly_once_without_two_phase_commit_is_refused() {
        let e = DorisSinkConfig::parse(&raw(&[
            ("delivery.guarantee", "exactly_once"),
            ("enable.2pc", "false"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("`enable.2pc`"), "{e}");
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

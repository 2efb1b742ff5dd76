//! Checkers: pure functions from a [`History`] to a [`CheckResult`].
//!
//! A checker first gathers the facts of a history into an [`Analysis`], then infers each
//! [`Anomaly`] with one `<anomaly>_cases(&Analysis) -> Vec<Case>` function whose doc says
//! what is inferred and from which ops. Which anomalies *fail* the run is not the checker's
//! taste: it is [`forbidden_anomalies`] of the scenario's [`Claim`] and [`CheckOptions`],
//! which a scenario can override with explicit `forbidden` / `allowed` lists.
//!
//! # Sections
//! - [`Validity`], [`Anomaly`], [`Case`], [`CheckResult`]: what a checker answers.
//! - [`Claim`], [`CheckOptions`], [`forbidden_anomalies`]: what the scenario promises.
//! - [`Checker`], [`Compose`], [`KafkaChecker`], [`SinkChecker`], [`TxnChecker`],
//!   [`check_all`].
//!
//! # Which anomalies are forbidden
//!
//! Kafka-level anomalies depend on how the producer and consumers are configured, the
//! end-to-end sink anomalies on the pipeline's claim. `F` = forbidden, `-` = reported only.
//!
//! | anomaly | exactly-once | at-least-once | at-most-once | condition |
//! |---|---|---|---|---|
//! | `lost-write` | F | F | F | unless `acks = "0"` (1) |
//! | `inconsistent-offsets` | F | F | F | always |
//! | `duplicate` | F | F | F | only with `idempotent_producer` (2) |
//! | `unseen` | - | - | - | informational |
//! | `nonmonotonic-poll`, `poll-skip` | F | F | F | only when not `subscribe` (3) |
//! | `nonmonotonic-send` | F | F | F | only with `producer_order` (6) |
//! | `aborted-read` (G1a) | F | F | F | only with `read_committed` |
//! | `torn-transaction` | F | F | F | only with `read_committed` |
//! | `uncommitted-read` | F | F | F | only with `read_committed` |
//! | `stuck-lso` | F | F | F | only with `read_committed` |
//! | `offsets-for-aborted-output` | F | F | F | only with `read_committed` |
//! | `sink-lost` | F | F | - | also a source connector's lost change event (`source`) |
//! | `sink-duplicate` | F | - | F | also a change event twice in a source connector's topic |
//! | `sink-reorder` | F | F | F | only with `per_key_order` |
//! | `progress-ahead-of-data` | - | F | - | |
//! | `aborted-in-sink` | F | F | F | always (5) |
//! | `cdc-final-state` | F | F | - | change data ([`cdc`]) |
//! | `cdc-duplicate-row` | F | - | F | change data |
//! | `cdc-regression` | - | - | - | change data: readers saw a replay |
//! | `cdc-skipped` | F | F | F | change data, with a DLQ |
//! | `aggregate-under-count` | F | F | - | Streams (4) |
//! | `aggregate-over-count` | F | - | F | Streams |
//! | `missing-aggregate` | F | F | - | Streams |
//! | `extra-aggregate` | F | F | F | Streams |
//! | `aggregate-sequence` | F | - | - | Streams |
//! | `id-reassigned`, `id-reused` | F | - | - | Streams `aggregate-ids` ([`streams_records`]) |
//! | `unexpected-output` | F | F | F | Streams `filter-map-values`, `aggregate-ids`, `stream-table-join` |
//! | `unwritten-table-version` | F | - | - | Streams `stream-table-join` ([`streams_join`]) |
//! | `stale-join` | - | - | - | Streams `stream-table-join`: informational |
//! | `routine-load-statistic` | F | F | F | Doris ([`DorisChecker`]) |
//! | `label-loaded-twice` | F | F | F | Doris |
//!
//! (5) A row in the sink whose record a transaction wrote and certainly aborted: data that
//! never existed upstream. Kafka's consumer defaults to `isolation.level=read_uncommitted`
//! (`ConsumerConfig.DEFAULT_ISOLATION_LEVEL`), and Kafka Connect does not change it for
//! sink tasks (`Worker.baseConsumerConfigs` sets `group.id`, `enable.auto.commit=false`,
//! `auto.offset.reset=earliest` and the deserializers; only the exactly-once source
//! offsets reader gets `read_committed`), so a sink behind a transactional producer loads
//! aborted records unless `consumer.override.isolation.level=read_committed`. The other
//! side of the rule: an aborted transaction's record is never expected in a sink (no
//! `sink-lost`, no `progress-ahead-of-data` for it), and an undecided transaction's
//! (outcome unknown, or still open when the run ended) is neither expected nor forbidden
//! ([`Analysis::fate`]).
//! (6) Kafka keeps a producer's per-partition order when it is idempotent (sequence numbers,
//! KIP-98) or has one request in flight; with `enable.idempotence=false` and
//! `max.in.flight.requests.per.connection` > 1 a retried batch may land after a later one
//! (the `KafkaProducer` docs of `max.in.flight.requests.per.connection` and `retries`).
//! (4) The Streams anomalies come from [`StreamsChecker`], Kafka's `EosTestDriver` in
//! Jepsen's shape: final value per `key@window` against the count recomputed from the input
//! up to the committed offsets.
//! (1) With `acks = "1"` it stays forbidden: that is how an unclean election's loss of
//! acknowledged writes shows. (2) Retries of a plain producer may duplicate. (3) With group
//! subscription a rebalance legitimately rewinds to the committed offset or moves on.
//!
//! `progress-ahead-of-data` is forbidden for at-least-once because that claim *is* "commit
//! progress only after the data is durable". Exactly-once is judged on the final state: a
//! progress record ahead of the data that a crash turned into a loss shows as `sink-lost`,
//! and sinks that keep their own progress (KeeperMap, Doris labels) may legitimately run
//! their Kafka offsets ahead; at-most-once commits first by design. Both still report it.
//!
//! # Validity
//! `Invalid` when a forbidden anomaly is present; `Unknown` when the history lacks what a
//! forbidden anomaly would be decided from (no final `LogState`, no `SinkState` while the
//! scenario has a sink) or a checker panicked; `Valid` otherwise. Merged Invalid > Unknown >
//! Valid, as Jepsen's `valid-priorities`.

mod analysis;
pub mod cdc;
mod doris;
mod kafka;
#[cfg(test)]
mod mutation_tests;
mod sink;
mod source;
mod streams;
pub mod streams_join;
pub mod streams_records;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
mod txn;
#[cfg(test)]
mod txn_tests;

pub use analysis::{
    AckedSend, Analysis, CommitOp, DorisFinal, FinalLog, FinalOffsets, LoadErrorOp, Observation,
    PollOp, Source, TxnFate, TxnOp, TxnSends, WriteOp,
};
pub use doris::{label_loaded_twice_cases, routine_load_statistic_cases, DorisChecker};
pub use kafka::{
    duplicate_cases, inconsistent_offsets_cases, lost_write_cases, nonmonotonic_poll_cases,
    poll_skip_cases, unseen_cases, KafkaChecker,
};
pub use sink::{
    aborted_in_sink_cases, progress_ahead_of_data_cases, sink_duplicate_cases, sink_lost_cases,
    sink_reorder_cases, SinkChecker,
};
pub use source::{
    change_event_duplicate_cases, change_event_lost_cases, SourceAnalysis, SourceChecker,
};
pub use streams::{
    aggregate_over_count_cases, aggregate_sequence_cases, aggregate_under_count_cases,
    extra_aggregate_cases, missing_aggregate_cases, StreamsAnalysis, StreamsChecker,
};
pub use txn::{
    aborted_read_cases, lost_committed_write_cases, offsets_for_aborted_output_cases,
    stuck_lso_cases, torn_transaction_cases, uncommitted_read_cases, TxnChecker,
};

use crate::history::History;
use eosim_sim::kafka::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Whether a history satisfies what the scenario forbids.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    /// Nothing forbidden was found.
    #[default]
    Valid,
    /// A forbidden anomaly was found.
    Invalid,
    /// Could not be decided: missing final state, or a checker failed. Never a pass.
    Unknown,
}

impl Validity {
    /// The merge of two verdicts: Invalid > Unknown > Valid.
    pub fn merge(self, other: Validity) -> Validity {
        fn rank(v: Validity) -> u8 {
            match v {
                Validity::Valid => 0,
                Validity::Unknown => 1,
                Validity::Invalid => 2,
            }
        }
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// The anomalies the checkers infer, with Jepsen's names (`kebab-case` in JSON and TOML).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Anomaly {
    /// A send the broker acknowledged is absent from the final log.
    LostWrite,
    /// In the final log but never returned by any poll (informational for Kafka).
    Unseen,
    /// The same id at two offsets of the final log.
    Duplicate,
    /// One id at different offsets across observations, or one offset holding different ids.
    InconsistentOffsets,
    /// A consumer's successive polls of a partition went backwards.
    NonmonotonicPoll,
    /// A consumer skipped offsets that hold records.
    PollSkip,
    /// One producer process's sends to one partition are in the final log in another order
    /// than it invoked them (Jepsen's `int-nonmonotonic-send`): a retried batch appended
    /// after a later one, which Kafka rules out only with idempotence or one request in
    /// flight (`max.in.flight.requests.per.connection` docs, KIP-98).
    NonmonotonicSend,
    /// A read_committed reader saw a record of an aborted transaction (Adya's G1a).
    AbortedRead,
    /// Some but not all records of a committed (or undecided) transaction are visible to
    /// read_committed readers.
    TornTransaction,
    /// A read_committed reader saw a record before its transaction asked to commit.
    UncommittedRead,
    /// A partition's last stable offset stays below its high watermark after the drain: a
    /// hanging transaction stalls every read_committed consumer.
    StuckLso,
    /// A consume-transform-produce group committed input offsets past input whose output
    /// was aborted and never written again.
    OffsetsForAbortedOutput,
    /// A record committed upstream is absent from the pipeline's target: a record of the
    /// final log absent from the final sink state, or (source connectors, `source`) a
    /// change event of the source database absent from the topic.
    SinkLost,
    /// An id is held more than once in the pipeline's target: the final sink state, or
    /// (source connectors) the topic a source connector writes.
    SinkDuplicate,
    /// Within one key, the sink's order differs from the log's offset order.
    SinkReorder,
    /// A committed offset is past a record of its partition the sink did not hold.
    ProgressAheadOfData,
    /// The sink holds a record of a transaction that certainly aborted (read with
    /// `read_uncommitted`).
    AbortedInSink,
    /// A send that failed for certain (a non-retriable error such as `MESSAGE_TOO_LARGE`,
    /// or retries exhausted) and was never written: the record is in no log and no sink.
    /// Informational, so such records are counted, never silently gone.
    SendRejected,
    /// Change data: the final table differs from every change applied once in per-key
    /// order (see [`cdc`]).
    CdcFinalState,
    /// Change data: a key is held by more than one row.
    CdcDuplicateRow,
    /// Change data: a reader saw a row go back to an older version.
    CdcRegression,
    /// Change data: a record that cannot be applied was dropped without reaching the DLQ.
    CdcSkipped,
    /// Change data: an event carries a field that is not a column of the target (schema
    /// drift against a fixed `col.names`), so its values were never stored. Informational
    /// unless the scenario forbids it.
    CdcDroppedField,
    /// Streams: the final value of a `key@window` is below the true count of its input.
    AggregateUnderCount,
    /// Streams: the final value of a `key@window` is above the true count (an input applied
    /// twice).
    AggregateOverCount,
    /// Streams: a `key@window` with input and no committed output at all.
    MissingAggregate,
    /// Streams: committed output for a `key@window` that has no input.
    ExtraAggregate,
    /// Streams: the committed updates of one `key@window` are not 1, 2, ..., n (a count
    /// repeated, gone back or skipped: an input's effect seen twice or lost on the way).
    AggregateSequence,
    /// Streams `aggregate-ids`: one key's output carries two ids (its first id was lost from
    /// the restored store and a replay gave it another; [`streams_records`]).
    IdReassigned,
    /// Streams `aggregate-ids`: one id was given to two keys (the restored id sequence was
    /// behind an id already handed out).
    IdReused,
    /// Streams `filter-map-values` / `aggregate-ids`: an output record no input explains
    /// as the topology writes it (a record the filter drops, a value other than the
    /// mapping's, an id that is not one).
    UnexpectedOutput,
    /// Streams `stream-table-join`: an output joined a table version that the table topic
    /// does not hold, committed, for that key (an aborted or never-written update;
    /// [`streams_join`]).
    UnwrittenTableVersion,
    /// Streams `stream-table-join`: an output joined a version of its key older than
    /// another committed update of that key whose event time is not after the stream
    /// record's (the table was behind the stream in event time; [`streams_join`]). Kafka
    /// documents it as the cost of processing without waiting (`max.task.idle.ms`), so no
    /// claim forbids it unless `[check] forbidden` names it.
    StaleJoin,
    /// Doris: a Routine Load job's `SHOW ROUTINE LOAD` statistics disagree with the rows
    /// it loaded and the error rows its loads filtered (see `doris`).
    RoutineLoadStatistic,
    /// Doris: one label committed by two transactions of a database.
    LabelLoadedTwice,
}

impl Anomaly {
    /// Every anomaly, in declaration order.
    pub const ALL: [Anomaly; 35] = [
        Anomaly::LostWrite,
        Anomaly::Unseen,
        Anomaly::Duplicate,
        Anomaly::InconsistentOffsets,
        Anomaly::NonmonotonicPoll,
        Anomaly::PollSkip,
        Anomaly::NonmonotonicSend,
        Anomaly::AbortedRead,
        Anomaly::TornTransaction,
        Anomaly::UncommittedRead,
        Anomaly::StuckLso,
        Anomaly::OffsetsForAbortedOutput,
        Anomaly::SinkLost,
        Anomaly::SinkDuplicate,
        Anomaly::SinkReorder,
        Anomaly::ProgressAheadOfData,
        Anomaly::AbortedInSink,
        Anomaly::SendRejected,
        Anomaly::CdcFinalState,
        Anomaly::CdcDuplicateRow,
        Anomaly::CdcRegression,
        Anomaly::CdcSkipped,
        Anomaly::CdcDroppedField,
        Anomaly::AggregateUnderCount,
        Anomaly::AggregateOverCount,
        Anomaly::MissingAggregate,
        Anomaly::ExtraAggregate,
        Anomaly::AggregateSequence,
        Anomaly::IdReassigned,
        Anomaly::IdReused,
        Anomaly::UnexpectedOutput,
        Anomaly::UnwrittenTableVersion,
        Anomaly::StaleJoin,
        Anomaly::RoutineLoadStatistic,
        Anomaly::LabelLoadedTwice,
    ];

    /// The kebab-case name, as in JSON (`lost-write`).
    pub fn name(self) -> &'static str {
        match self {
            Anomaly::LostWrite => "lost-write",
            Anomaly::Unseen => "unseen",
            Anomaly::Duplicate => "duplicate",
            Anomaly::InconsistentOffsets => "inconsistent-offsets",
            Anomaly::NonmonotonicPoll => "nonmonotonic-poll",
            Anomaly::PollSkip => "poll-skip",
            Anomaly::NonmonotonicSend => "nonmonotonic-send",
            Anomaly::AbortedRead => "aborted-read",
            Anomaly::TornTransaction => "torn-transaction",
            Anomaly::UncommittedRead => "uncommitted-read",
            Anomaly::StuckLso => "stuck-lso",
            Anomaly::OffsetsForAbortedOutput => "offsets-for-aborted-output",
            Anomaly::SinkLost => "sink-lost",
            Anomaly::SinkDuplicate => "sink-duplicate",
            Anomaly::SinkReorder => "sink-reorder",
            Anomaly::ProgressAheadOfData => "progress-ahead-of-data",
            Anomaly::AbortedInSink => "aborted-in-sink",
            Anomaly::SendRejected => "send-rejected",
            Anomaly::CdcFinalState => "cdc-final-state",
            Anomaly::CdcDuplicateRow => "cdc-duplicate-row",
            Anomaly::CdcRegression => "cdc-regression",
            Anomaly::CdcSkipped => "cdc-skipped",
            Anomaly::CdcDroppedField => "cdc-dropped-field",
            Anomaly::AggregateUnderCount => "aggregate-under-count",
            Anomaly::AggregateOverCount => "aggregate-over-count",
            Anomaly::MissingAggregate => "missing-aggregate",
            Anomaly::ExtraAggregate => "extra-aggregate",
            Anomaly::AggregateSequence => "aggregate-sequence",
            Anomaly::IdReassigned => "id-reassigned",
            Anomaly::IdReused => "id-reused",
            Anomaly::UnexpectedOutput => "unexpected-output",
            Anomaly::UnwrittenTableVersion => "unwritten-table-version",
            Anomaly::StaleJoin => "stale-join",
            Anomaly::RoutineLoadStatistic => "routine-load-statistic",
            Anomaly::LabelLoadedTwice => "label-loaded-twice",
        }
    }
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The delivery claim of a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claim {
    /// Every record lands in the target once.
    #[serde(alias = "exactly_once")]
    ExactlyOnce,
    /// Every record lands at least once; duplicates allowed.
    #[serde(alias = "at_least_once")]
    AtLeastOnce,
    /// Every record lands at most once; losses allowed.
    #[serde(alias = "at_most_once")]
    AtMostOnce,
}

impl Claim {
    /// The kebab-case name (`exactly-once`).
    pub fn name(self) -> &'static str {
        match self {
            Claim::ExactlyOnce => "exactly-once",
            Claim::AtLeastOnce => "at-least-once",
            Claim::AtMostOnce => "at-most-once",
        }
    }
}

/// The producer's `acks` setting, with Kafka's spelling: `"all"`, `"1"`, `"0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProducerAcks {
    /// `acks=all` (`-1`): acknowledged once every in-sync replica has it.
    #[serde(rename = "all", alias = "-1")]
    All,
    /// `acks=1`: acknowledged by the leader alone.
    #[serde(rename = "1")]
    Leader,
    /// `acks=0`: not acknowledged at all.
    #[serde(rename = "0")]
    None,
}

/// What a scenario tells its checkers. Embeddable in scenario TOML; every key is optional.
///
/// ## Default values
/// `claim = "exactly-once"`, `acks = "all"`, `idempotent_producer = true` (Kafka ≥ 3.0),
/// `producer_order = true`,
/// `subscribe = true`, `read_committed = false`, `per_key_order = true`, `sink = true`,
/// `sink_topics = []` (every topic of the final logs), `forbidden = []`, `allowed = []`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckOptions {
    /// The pipeline's delivery claim.
    pub claim: Claim,
    /// The producer's `acks`.
    pub acks: ProducerAcks,
    /// `enable.idempotence` of the producer: log duplicates are then forbidden.
    pub idempotent_producer: bool,
    /// The producers keep each partition's send order (idempotent, or one request in
    /// flight): `nonmonotonic-send` is then forbidden.
    pub producer_order: bool,
    /// Consumers use group subscription (rebalances), not manual assignment.
    pub subscribe: bool,
    /// Consumers read with `isolation.level=read_committed`.
    pub read_committed: bool,
    /// The claim promises per-key order in the target.
    pub per_key_order: bool,
    /// The scenario has a sink: a history without a final `SinkState` is then `Unknown`.
    pub sink: bool,
    /// Topics the sink consumes; empty = every topic that has a final `LogState`.
    pub sink_topics: Vec<String>,
    /// Anomalies forbidden in addition to the table (wins over `allowed`).
    pub forbidden: Vec<Anomaly>,
    /// Anomalies allowed despite the table.
    pub allowed: Vec<Anomaly>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            claim: Claim::ExactlyOnce,
            acks: ProducerAcks::All,
            idempotent_producer: true,
            producer_order: true,
            subscribe: true,
            read_committed: false,
            per_key_order: true,
            sink: true,
            sink_topics: Vec::new(),
            forbidden: Vec::new(),
            allowed: Vec::new(),
        }
    }
}

impl CheckOptions {
    /// Defaults with the given claim.
    pub fn for_claim(claim: Claim) -> Self {
        Self {
            claim,
            ..Self::default()
        }
    }

    /// [`forbidden_anomalies`] of `self.claim` and `self`.
    pub fn forbidden_set(&self) -> BTreeSet<Anomaly> {
        forbidden_anomalies(self.claim, self)
    }
}

/// The anomalies that fail a run of `claim` under `options` (see the module's table), after
/// the explicit `allowed` (removed) and `forbidden` (added, wins) lists.
pub fn forbidden_anomalies(claim: Claim, options: &CheckOptions) -> BTreeSet<Anomaly> {
    let mut set = BTreeSet::new();
    let mut forbid = |anomaly: Anomaly, when: bool| {
        if when {
            set.insert(anomaly);
        }
    };
    forbid(Anomaly::LostWrite, options.acks != ProducerAcks::None);
    forbid(Anomaly::InconsistentOffsets, true);
    forbid(Anomaly::Duplicate, options.idempotent_producer);
    forbid(Anomaly::NonmonotonicPoll, !options.subscribe);
    forbid(Anomaly::PollSkip, !options.subscribe);
    forbid(Anomaly::NonmonotonicSend, options.producer_order);
    for anomaly in [
        Anomaly::AbortedRead,
        Anomaly::TornTransaction,
        Anomaly::UncommittedRead,
        Anomaly::StuckLso,
        Anomaly::OffsetsForAbortedOutput,
    ] {
        forbid(anomaly, options.read_committed);
    }
    forbid(Anomaly::SinkLost, claim != Claim::AtMostOnce);
    forbid(Anomaly::SinkDuplicate, claim != Claim::AtLeastOnce);
    forbid(Anomaly::SinkReorder, options.per_key_order);
    forbid(Anomaly::ProgressAheadOfData, claim == Claim::AtLeastOnce);
    forbid(Anomaly::AbortedInSink, true);
    forbid(Anomaly::CdcFinalState, claim != Claim::AtMostOnce);
    forbid(Anomaly::CdcDuplicateRow, claim != Claim::AtLeastOnce);
    forbid(Anomaly::CdcSkipped, true);
    forbid(Anomaly::AggregateUnderCount, claim != Claim::AtMostOnce);
    forbid(Anomaly::AggregateOverCount, claim != Claim::AtLeastOnce);
    forbid(Anomaly::MissingAggregate, claim != Claim::AtMostOnce);
    forbid(Anomaly::ExtraAggregate, true);
    forbid(Anomaly::AggregateSequence, claim == Claim::ExactlyOnce);
    forbid(Anomaly::IdReassigned, claim == Claim::ExactlyOnce);
    forbid(Anomaly::IdReused, claim == Claim::ExactlyOnce);
    forbid(Anomaly::UnexpectedOutput, true);
    forbid(Anomaly::UnwrittenTableVersion, claim == Claim::ExactlyOnce);
    forbid(Anomaly::RoutineLoadStatistic, true);
    forbid(Anomaly::LabelLoadedTwice, true);
    for anomaly in &options.allowed {
        set.remove(anomaly);
    }
    set.extend(options.forbidden.iter().copied());
    set
}

/// One instance of an anomaly: the records and ops it is inferred from, and a line of text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    /// Record ids involved.
    pub ids: Vec<u64>,
    /// Partition involved, if one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tp: Option<TopicPartition>,
    /// Offsets involved, in the order the text names them.
    pub offsets: Vec<Offset>,
    /// Indexes of the history ops that are the evidence.
    pub ops: Vec<usize>,
    /// One line saying what was seen.
    pub text: String,
}

/// A checker's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The verdict.
    pub validity: Validity,
    /// Every anomaly found, forbidden or not, with its cases (absent = none found).
    pub anomalies: BTreeMap<Anomaly, Vec<Case>>,
    /// The anomalies found that the scenario forbids, sorted.
    pub forbidden: Vec<Anomaly>,
    /// Sizes of what was checked (`acknowledged-sends`, `sink-rows`, ...).
    pub counts: BTreeMap<String, u64>,
    /// Why the verdict is `Unknown`, when it is.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

impl CheckResult {
    /// An `Unknown` result carrying `error`.
    pub fn unknown(error: impl Into<String>) -> Self {
        Self {
            validity: Validity::Unknown,
            error: Some(error.into()),
            ..Self::default()
        }
    }

    /// A result from the cases found: empty case lists are dropped, `forbidden` is what is
    /// present and forbidden by `options`, validity is `Invalid` if that is non-empty.
    pub fn from_cases(
        found: Vec<(Anomaly, Vec<Case>)>,
        counts: BTreeMap<String, u64>,
        options: &CheckOptions,
    ) -> Self {
        let anomalies: BTreeMap<Anomaly, Vec<Case>> = found
            .into_iter()
            .filter(|(_, cases)| !cases.is_empty())
            .collect();
        let forbidden_set = options.forbidden_set();
        let forbidden: Vec<Anomaly> = anomalies
            .keys()
            .copied()
            .filter(|a| forbidden_set.contains(a))
            .collect();
        let validity = if forbidden.is_empty() {
            Validity::Valid
        } else {
            Validity::Invalid
        };
        Self {
            validity,
            anomalies,
            forbidden,
            counts,
            error: None,
        }
    }

    /// Folds `other` into `self`: validity merged, cases appended, forbidden united, counts
    /// added, errors joined with `"; "`.
    pub fn merge(&mut self, other: CheckResult) {
        self.validity = self.validity.merge(other.validity);
        for (anomaly, cases) in other.anomalies {
            self.anomalies.entry(anomaly).or_default().extend(cases);
        }
        let forbidden: BTreeSet<Anomaly> = self
            .forbidden
            .iter()
            .chain(other.forbidden.iter())
            .copied()
            .collect();
        self.forbidden = forbidden.into_iter().collect();
        for (name, n) in other.counts {
            *self.counts.entry(name).or_default() += n;
        }
        self.error = match (self.error.take(), other.error) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
    }

    /// The first `n` case texts of forbidden anomalies, then of the others.
    pub fn case_texts(&self, n: usize) -> Vec<String> {
        let forbidden = self
            .anomalies
            .iter()
            .filter(|(a, _)| self.forbidden.contains(a));
        let others = self
            .anomalies
            .iter()
            .filter(|(a, _)| !self.forbidden.contains(a));
        forbidden
            .chain(others)
            .flat_map(|(a, cases)| cases.iter().map(move |c| format!("{a}: {}", c.text)))
            .take(n)
            .collect()
    }
}

/// A pure function from a history to a verdict.
pub trait Checker {
    /// Short name, the key in a [`Compose`].
    fn name(&self) -> &'static str;
    /// Checks `history` against what `options` forbid.
    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult;

    /// As [`Checker::check`], taking the history's `Analysis` from
    /// `shared`, which the checkers of one [`Compose`] share: it is built once per history,
    /// not once per checker. The default ignores it.
    fn check_shared(
        &self,
        history: &History,
        options: &CheckOptions,
        shared: &SharedAnalysis,
    ) -> CheckResult {
        let _ = shared;
        self.check(history, options)
    }
}

/// A checker over the history's `Analysis` (the kafka, sink and txn checkers): it is a
/// [`Checker`] whose `check` builds the analysis and whose `check_shared` takes it from the
/// [`SharedAnalysis`] of its [`Compose`].
pub(crate) trait AnalysisChecker {
    /// Short name, the key in a [`Compose`].
    fn name(&self) -> &'static str;
    /// Checks `history`, whose analysis under `options` is `a`.
    fn check_analysis(
        &self,
        history: &History,
        options: &CheckOptions,
        a: &analysis::Analysis,
    ) -> CheckResult;
}

impl<T: AnalysisChecker> Checker for T {
    fn name(&self) -> &'static str {
        AnalysisChecker::name(self)
    }

    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        self.check_shared(history, options, &SharedAnalysis::default())
    }

    fn check_shared(
        &self,
        history: &History,
        options: &CheckOptions,
        shared: &SharedAnalysis,
    ) -> CheckResult {
        self.check_analysis(history, options, shared.get(history, options))
    }
}

/// One history's `Analysis`, built by the first checker that asks
/// for it and then lent to the others. Every checker of a composition gets the same history
/// and options, so the analysis is the same for all; a panic while building it leaves it
/// unbuilt, and the next checker that asks builds (and panics) again.
#[derive(Debug, Default)]
pub struct SharedAnalysis(std::cell::OnceCell<analysis::Analysis>);

impl SharedAnalysis {
    /// The analysis of `history` under `options`, built on first use.
    pub(crate) fn get(&self, history: &History, options: &CheckOptions) -> &analysis::Analysis {
        self.0
            .get_or_init(|| analysis::Analysis::new(history, options))
    }
}

/// Several checkers run as one, as Jepsen's `compose`: results merged, and a checker that
/// panics yields `Unknown` with the panic's text (Jepsen's `check-safe`), never a pass.
#[derive(Default)]
pub struct Compose {
    /// The checkers, by name.
    pub checkers: BTreeMap<&'static str, Box<dyn Checker>>,
}

impl Compose {
    /// An empty composition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a checker under its own name.
    pub fn with(mut self, checker: impl Checker + 'static) -> Self {
        self.checkers.insert(checker.name(), Box::new(checker));
        self
    }
}

impl Checker for Compose {
    fn name(&self) -> &'static str {
        "compose"
    }

    fn check(&self, history: &History, options: &CheckOptions) -> CheckResult {
        let mut merged = CheckResult::default();
        let shared = SharedAnalysis::default();
        for (name, checker) in &self.checkers {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                checker.check_shared(history, options, &shared)
            }));
            let result = match outcome {
                Ok(result) => result,
                Err(panic) => CheckResult::unknown(format!(
                    "checker {name} panicked: {}",
                    panic_text(panic.as_ref())
                )),
            };
            merged.merge(result);
        }
        merged
    }
}

/// The message of a panic payload (`&str` or `String`), or a placeholder.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-text panic payload".to_string()
    }
}

/// The standard composition: [`KafkaChecker`], [`SinkChecker`], [`cdc::CdcChecker`] (which
/// only speaks for change-data histories), [`TxnChecker`] (which finds nothing in a
/// history without transactions), [`StreamsChecker`] (the count) and
/// [`streams_records::StreamsRecordsChecker`] (the other Streams topologies), [`DorisChecker`] (which finds
/// nothing without a final `DorisState`) and [`SourceChecker`] (which finds nothing without a
/// final `ChangeLog`).
pub fn standard() -> Compose {
    Compose::new()
        .with(KafkaChecker)
        .with(SinkChecker)
        .with(cdc::CdcChecker)
        .with(TxnChecker)
        .with(StreamsChecker)
        .with(streams_records::StreamsRecordsChecker)
        .with(DorisChecker)
        .with(SourceChecker)
}

/// Runs [`standard`] over `history`.
pub fn check_all(history: &History, options: &CheckOptions) -> CheckResult {
    standard().check(history, options)
}

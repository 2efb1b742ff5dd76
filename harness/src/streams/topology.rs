//! The topology API: source topic → stateless `filter` / `map_values` → `group_by_key` →
//! an aggregate over tumbling windows (or unwindowed) in a named state store → sink topic.
//!
//! The aggregate is Kafka Streams' `count()`: a KTable whose updates are forwarded
//! downstream, so the output topic is a changelog of `key@windowStart → count` in which
//! later updates supersede earlier ones. With a record cache (`statestore.cache.max.bytes`
//! above 0, `streams::cache`) an update is forwarded when its cache entry is evicted or
//! flushed at a commit, so consecutive updates of a key collapse into the last one; with 0
//! every update is forwarded as it happens.
//!
//! `group_by_key()` groups by the input key, which the input partitioner already co-located
//! in one task: one sub-topology. `group_by(selector)` groups by a key the selector derives
//! (Kafka's `KStream.groupBy(KeyValueMapper)`, as `selectKey(...).groupByKey()`): records
//! with one new key may sit in any input partition, so Streams splits the topology in two
//! at a repartition topic (apache/kafka `KGroupedStreamImpl` with `repartitionRequired`,
//! `GroupedStreamAggregateBuilder.build` → `KStreamImpl.createRepartitionedSource`,
//! `RepartitionNode`): sub-topology 0 reads the source, runs the stateless steps, re-keys
//! and writes to `<application.id>-<store>-repartition` (the store's name as the
//! repartition name when the user gives none; `InternalTopologyBuilder.decorateTopic`
//! prefixes the application id) with the default partitioner on the new key; sub-topology
//! 1 reads that topic and aggregates ([`Topology::repartition`], [`Topology::process`]).
//!
//! # Other shapes (`[streams] topology`, `streams::TopologyKind`)
//! - Stateless, [`filter_map_values`]: `stream(..).filter(..).mapValues(..).to(..)`
//!   ([`KStream::to`]): each record the filter keeps goes to the sink with its mapped value
//!   (apache/kafka `KStreamImpl.filter` / `mapValues` / `to`, processors `KStreamFilter`,
//!   `KStreamMapValues`, `SinkNode`). No store, no changelog, no record cache: a task's
//!   only state is its input position.
//! - Id assignment, [`aggregate_ids`]: `groupByKey().aggregate(..)` whose aggregator
//!   (`streams::ids::assign`) gives a key seen for the first time the next id of a
//!   sequence held in the same store (`KStreamAggregate.KStreamAggregateProcessor.process`:
//!   read the old aggregate, apply the aggregator, put, forward through the cache's flush
//!   listener). Kafka's `Aggregator` sees only its own key's aggregate; an application
//!   reaching a second entry of the store from it does so through the processor context
//!   (`KStream.process` with the store connected), which is the store this aggregate
//!   writes: one store, one changelog, one record cache.
//! - Stream-table join, [`stream_table_join`]: `stream(..).join(table(..))` → `to(..)`
//!   (`KStreamKTableJoin`, `KTableSource`; `streams::join`): a second source, the table
//!   topic, co-partitioned with the first, whose records update the store
//!   ([`Topology::put_table`]) and whose topic is the store's changelog; each stream record
//!   is inner-joined with its key's value ([`Topology::join`]). No record cache.

use std::sync::Arc;

/// A record as the topology sees it. The event time travels in the value
/// (`<id>,<timestamp_ms>`) because the client trait's consumed record has no timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// Key.
    pub key: String,
    /// Value (after any `map_values`).
    pub value: String,
    /// Event time, ms.
    pub timestamp_ms: i64,
}

impl StreamRecord {
    /// Parses an input record whose value is `<id>,<timestamp_ms>`; `None` for a record
    /// without key or with another value shape (skipped, as Streams' default
    /// deserialization handler `LogAndContinue` would be configured to).
    pub fn parse(key: Option<&[u8]>, value: Option<&[u8]>) -> Option<Self> {
        let key = String::from_utf8(key?.to_vec()).ok()?;
        let value = String::from_utf8(value?.to_vec()).ok()?;
        let timestamp_ms = value.split_once(',')?.1.parse().ok()?;
        Some(Self {
            key,
            value,
            timestamp_ms,
        })
    }
}

type Predicate = Arc<dyn Fn(&StreamRecord) -> bool + Send + Sync>;
type ValueMapper = Arc<dyn Fn(&str) -> String + Send + Sync>;
/// A `KeyValueMapper` of `groupBy`: the grouping key of a record.
type KeySelector = Arc<dyn Fn(&StreamRecord) -> String + Send + Sync>;

/// A stateless step.
#[derive(Clone)]
enum Step {
    Filter(Predicate),
    MapValues(ValueMapper),
}

/// Tumbling windows (`TimeWindows.ofSizeWithNoGrace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    /// Window size, ms.
    pub size_ms: i64,
}

impl TimeWindows {
    /// Tumbling windows of `size_ms`.
    pub fn of_size_ms(size_ms: i64) -> Self {
        assert!(size_ms > 0, "window size must be positive");
        Self { size_ms }
    }

    /// Start of the window `timestamp_ms` falls in.
    pub fn start_of(&self, timestamp_ms: i64) -> i64 {
        timestamp_ms - timestamp_ms.rem_euclid(self.size_ms)
    }
}

/// Entry point (`StreamsBuilder`).
pub struct StreamsBuilder;

impl StreamsBuilder {
    /// A stream from `topic`.
    #[allow(clippy::new_ret_no_self)]
    pub fn stream(topic: &str) -> KStream {
        KStream {
            source: topic.to_string(),
            steps: Vec::new(),
        }
    }
}

/// A record stream (`KStream`).
#[derive(Clone)]
pub struct KStream {
    source: String,
    steps: Vec<Step>,
}

impl KStream {
    /// Keeps records for which `predicate` holds.
    pub fn filter(
        mut self,
        predicate: impl Fn(&StreamRecord) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.steps.push(Step::Filter(Arc::new(predicate)));
        self
    }

    /// Replaces each value by `mapper(value)`; keys stay.
    pub fn map_values(mut self, mapper: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.steps.push(Step::MapValues(Arc::new(mapper)));
        self
    }

    /// Writes each record that passed the stateless steps to `topic` (`KStream.to`): a
    /// stateless topology, without store ([`Topology::stateful`] is false).
    pub fn to(self, topic: &str) -> Topology {
        Topology {
            source: self.source,
            steps: self.steps,
            selector: None,
            window: None,
            store: String::new(),
            aggregate: None,
            table: None,
            sink: topic.to_string(),
        }
    }

    /// Groups by the record key (no repartition needed).
    pub fn group_by_key(self) -> KGroupedStream {
        KGroupedStream {
            stream: self,
            window: None,
            selector: None,
        }
    }

    /// Groups by `selector(record)` (`KStream.groupBy`): the topology gets a repartition
    /// topic between the stateless steps and the aggregate (see the module docs).
    pub fn group_by(
        self,
        selector: impl Fn(&StreamRecord) -> String + Send + Sync + 'static,
    ) -> KGroupedStream {
        KGroupedStream {
            stream: self,
            window: None,
            selector: Some(Arc::new(selector)),
        }
    }
}

/// What a stateful topology's store holds and how a record updates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    /// `count()`: `key@windowStart → count`.
    Count,
    /// `aggregate(..)` assigning ids: `key → id` plus the sequence entry
    /// (`streams::ids`); the tasks' ids are interleaved over `partitions` input partitions.
    AssignIds { partitions: u32 },
    /// The materialised table of a stream-table join (`streams::join`): `key → version`,
    /// written by the table topic's records, read by the stream's.
    Table,
}

/// A grouped stream, optionally windowed.
#[derive(Clone)]
pub struct KGroupedStream {
    stream: KStream,
    window: Option<TimeWindows>,
    /// The `groupBy` key selector; `None` for `groupByKey`.
    selector: Option<KeySelector>,
}

impl KGroupedStream {
    /// Aggregates per tumbling window.
    pub fn windowed_by(mut self, window: TimeWindows) -> Self {
        self.window = Some(window);
        self
    }

    /// Counts per key (and window) in state store `store`.
    pub fn count(self, store: &str) -> KTable {
        KTable {
            grouped: self,
            store: store.to_string(),
            aggregate: Aggregate::Count,
        }
    }

    /// `aggregate(..)` in state store `store` with the id-assigning aggregator
    /// (`streams::ids::assign`): each key's aggregate is its id, unique over the
    /// `partitions` tasks of the input (at least 1). Unwindowed: a window set before is
    /// ignored.
    pub fn aggregate_ids(mut self, store: &str, partitions: u32) -> KTable {
        self.window = None;
        KTable {
            grouped: self,
            store: store.to_string(),
            aggregate: Aggregate::AssignIds {
                partitions: partitions.max(1),
            },
        }
    }
}

/// The aggregate's table (`KTable`).
#[derive(Clone)]
pub struct KTable {
    grouped: KGroupedStream,
    store: String,
    aggregate: Aggregate,
}

impl KTable {
    /// The table's update stream.
    pub fn to_stream(self) -> KTableStream {
        KTableStream { table: self }
    }
}

/// A table's update stream, waiting for its sink.
#[derive(Clone)]
pub struct KTableStream {
    table: KTable,
}

impl KTableStream {
    /// Writes every update to `topic`: `key@windowStart → count` for a count, `key → id`
    /// for [`KGroupedStream::aggregate_ids`].
    pub fn to(self, topic: &str) -> Topology {
        let KTable {
            grouped,
            store,
            aggregate,
        } = self.table;
        Topology {
            source: grouped.stream.source,
            steps: grouped.stream.steps,
            selector: grouped.selector,
            window: grouped.window,
            store,
            aggregate: Some(aggregate),
            table: None,
            sink: topic.to_string(),
        }
    }
}

/// A built topology: one sub-topology, or two split at a repartition topic when grouped
/// with `group_by`; one state store, or none when stateless ([`KStream::to`]).
#[derive(Clone)]
pub struct Topology {
    /// Source topic.
    pub source: String,
    steps: Vec<Step>,
    /// The `groupBy` key selector; `None` without repartition.
    selector: Option<KeySelector>,
    /// Windowing, `None` for an unwindowed count.
    pub window: Option<TimeWindows>,
    /// State store name; empty for a stateless topology.
    pub store: String,
    /// The store's aggregate; `None` for a stateless topology.
    aggregate: Option<Aggregate>,
    /// The table topic of a stream-table join ([`stream_table_join`]), else `None`.
    table: Option<String>,
    /// Sink topic.
    pub sink: String,
}

/// One update of the aggregate: the store key `key@windowStart`, the new count. It is
/// written to the store, its changelog and the sink topic alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// `key@windowStart` (`key@0` unwindowed).
    pub store_key: String,
    /// The new count.
    pub count: u64,
}

impl Topology {
    /// The changelog topic of the store under `application_id`.
    pub fn changelog_topic(&self, application_id: &str) -> String {
        format!("{application_id}-{}-changelog", self.store)
    }

    /// Whether the topology has a state store (and so a changelog and a record cache):
    /// false for [`KStream::to`]'s stateless topology.
    pub fn stateful(&self) -> bool {
        self.aggregate.is_some()
    }

    /// Whether the store entry `store_key` goes downstream when flushed: every entry but
    /// the id sequence of [`KGroupedStream::aggregate_ids`] (changelog only).
    pub fn forwards(&self, store_key: &str) -> bool {
        !matches!(self.aggregate, Some(Aggregate::AssignIds { .. }))
            || !super::ids::is_sequence(store_key)
    }

    /// The table topic of a stream-table join, `None` for the other topologies.
    pub fn table_topic(&self) -> Option<&str> {
        self.table.as_deref()
    }

    /// A table update of a stream-table join (`KTableSource.process`): `key → version` into
    /// the table's `store`, the version read from the record's value
    /// (`streams::join::table_value`); false (nothing written) for a record without key
    /// or with another value, as `KTableSource` skips a null key.
    pub fn put_table(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        store: &mut super::store::KeyValueStore,
    ) -> bool {
        match super::store::changelog_entry(key, value) {
            Some((key, version)) => {
                store.put(key, version);
                true
            }
            None => false,
        }
    }

    /// The inner join of stream `record` with the table in `store`
    /// (`KStreamKTableJoinProcessor.process`, `leftJoin = false`): the output record, key
    /// kept and value `streams::join::joined_value(id, version)`; `None` when the table
    /// has no value for the key (or the record's value has no id).
    pub fn join(
        &self,
        record: StreamRecord,
        store: &super::store::KeyValueStore,
    ) -> Option<StreamRecord> {
        let version = store.get(&record.key)?;
        let (id, _) = super::input_id_and_time(&record.value);
        (id != u64::MAX).then(|| StreamRecord {
            value: super::join::joined_value(id, version),
            ..record
        })
    }

    /// Whether the topology has a repartition topic (grouped with `group_by`).
    pub fn repartitions(&self) -> bool {
        self.selector.is_some()
    }

    /// The repartition topic under `application_id`, `<application_id>-<store>-repartition`;
    /// `None` without one.
    pub fn repartition_topic(&self, application_id: &str) -> Option<String> {
        self.repartitions()
            .then(|| format!("{application_id}-{}-repartition", self.store))
    }

    /// The topic the aggregating tasks read: the repartition topic, else the source.
    pub fn aggregate_source(&self, application_id: &str) -> String {
        self.repartition_topic(application_id)
            .unwrap_or_else(|| self.source.clone())
    }

    /// Sub-topology 0 of a repartitioning topology: `record` through the stateless steps,
    /// then re-keyed by the selector: what goes to the repartition topic (`None` when
    /// filtered out).
    ///
    /// # Panics
    /// When the topology does not repartition.
    pub fn repartition(&self, record: StreamRecord) -> Option<StreamRecord> {
        let selector = self.selector.as_ref().expect("a repartitioning topology");
        let mut record = self.stateless(record)?;
        record.key = selector(&record);
        Some(record)
    }

    /// `record` through the stateless steps (`KStreamFilter`, `KStreamMapValues`, in the
    /// order they were added); `None` when a filter drops it. For a stateless topology,
    /// what goes to the sink.
    pub fn stateless(&self, mut record: StreamRecord) -> Option<StreamRecord> {
        for step in &self.steps {
            match step {
                Step::Filter(p) if !p(&record) => return None,
                Step::Filter(_) => {}
                Step::MapValues(m) => record.value = m(&record.value),
            }
        }
        Some(record)
    }

    /// The store key `key@window` of a record the aggregate reads: a source record run
    /// through the stateless steps first, or a repartition record as it is (sub-topology 0
    /// ran them); `None` when filtered out.
    pub fn store_key(&self, record: StreamRecord) -> Option<String> {
        let record = match self.repartitions() {
            true => record,
            false => self.stateless(record)?,
        };
        let start = self.window.map_or(0, |w| w.start_of(record.timestamp_ms));
        Some(format!("{}@{start}", record.key))
    }

    /// Processes one record of [`aggregate_source`](Self::aggregate_source) in task
    /// `partition` against the task's store (directly, or through its record cache,
    /// `streams::cache`): the update of the record's key applied, if any.
    ///
    /// # Panics
    /// On a stateless topology (it has no store).
    pub fn process(
        &self,
        partition: u32,
        record: StreamRecord,
        store: &mut impl super::store::CountStore,
    ) -> Option<Update> {
        match self.aggregate.expect("a stateful topology") {
            Aggregate::Count => {
                let store_key = self.store_key(record)?;
                let count = store.get(&store_key).unwrap_or(0) + 1;
                store.put(store_key.clone(), count);
                Some(Update { store_key, count })
            }
            // A stream record of a join reads the table (`join`); it never updates it.
            Aggregate::Table => None,
            Aggregate::AssignIds { partitions } => {
                let record = self.stateless(record)?;
                let id = super::ids::assign(store, &record.key, partition, partitions);
                Some(Update {
                    store_key: record.key,
                    count: id,
                })
            }
        }
    }
}

/// Splits a store key `key@windowStart` (the output key) into its parts.
pub fn split_store_key(store_key: &str) -> Option<(String, i64)> {
    let (key, start) = store_key.rsplit_once('@')?;
    Some((key.to_string(), start.parse().ok()?))
}

/// The seed's topology: count per key in tumbling windows of `window_size_ms` (unwindowed
/// when 0), in store `store`, written to `output`.
pub fn windowed_count(input: &str, store: &str, window_size_ms: i64, output: &str) -> Topology {
    let grouped = StreamsBuilder::stream(input).group_by_key();
    let grouped = match window_size_ms {
        0 => grouped,
        size => grouped.windowed_by(TimeWindows::of_size_ms(size)),
    };
    grouped.count(store).to_stream().to(output)
}

/// The stateless topology of `[streams] topology = "filter-map-values"`:
/// `stream(input).filter(passes_filter).mapValues(map_value).to(output)` (the functions of
/// `streams::stateless`).
pub fn filter_map_values(input: &str, output: &str) -> Topology {
    use super::stateless::{map_value, passes_filter};
    StreamsBuilder::stream(input)
        .filter(|r| passes_filter(&r.value))
        .map_values(map_value)
        .to(output)
}

/// The id-assigning topology of `[streams] topology = "aggregate-ids"`:
/// `stream(input).groupByKey().aggregate(assign ids, store).toStream().to(output)` over an
/// input of `partitions` partitions (`streams::ids`).
pub fn aggregate_ids(input: &str, store: &str, partitions: u32, output: &str) -> Topology {
    StreamsBuilder::stream(input)
        .group_by_key()
        .aggregate_ids(store, partitions)
        .to_stream()
        .to(output)
}

/// The stream-table join of `[streams] topology = "stream-table-join"`:
/// `stream(input).join(table(table, store), joiner).to(output)` (`streams::join`): the
/// table materialised in `store` with `table` as its changelog, no stateless steps.
pub fn stream_table_join(input: &str, table: &str, store: &str, output: &str) -> Topology {
    Topology {
        source: input.to_string(),
        steps: Vec::new(),
        selector: None,
        window: None,
        store: store.to_string(),
        aggregate: Some(Aggregate::Table),
        table: Some(table.to_string()),
        sink: output.to_string(),
    }
}

/// [`windowed_count`] grouped by `selector` instead of the input key: with a repartition
/// topic.
pub fn windowed_count_by(
    input: &str,
    selector: impl Fn(&StreamRecord) -> String + Send + Sync + 'static,
    store: &str,
    window_size_ms: i64,
    output: &str,
) -> Topology {
    let grouped = StreamsBuilder::stream(input).group_by(selector);
    let grouped = match window_size_ms {
        0 => grouped,
        size => grouped.windowed_by(TimeWindows::of_size_ms(size)),
    };
    grouped.count(store).to_stream().to(output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::store::KeyValueStore;

    fn record(key: &str, ts: i64) -> StreamRecord {
        StreamRecord {
            key: key.into(),
            value: format!("0,{ts}"),
            timestamp_ms: ts,
        }
    }

    #[test]
    fn windowed_count_counts_per_key_and_window() {
        let t = windowed_count("in", "s", 5_000, "out");
        let mut store = KeyValueStore::default();
        let updates: Vec<Update> = [("a", 0), ("a", 4_999), ("a", 5_000), ("b", 1)]
            .into_iter()
            .filter_map(|(k, ts)| t.process(0, record(k, ts), &mut store))
            .collect();
        let text: Vec<String> = updates
            .iter()
            .map(|u| format!("{}={}", u.store_key, u.count))
            .collect();
        assert_eq!(text, ["a@0=1", "a@0=2", "a@5000=1", "b@0=1"]);
    }

    #[test]
    fn filtered_records_leave_the_store_alone() {
        let t = StreamsBuilder::stream("in")
            .filter(|r| r.key != "skip")
            .map_values(|v| v.to_uppercase())
            .group_by_key()
            .count("s")
            .to_stream()
            .to("out");
        let mut store = KeyValueStore::default();
        assert_eq!(t.process(0, record("skip", 1), &mut store), None);
        assert_eq!(
            t.process(0, record("a", 9_999), &mut store)
                .map(|u| u.store_key),
            Some("a@0".into())
        );
    }

    #[test]
    fn group_by_re_keys_in_sub_topology_0_and_counts_the_new_key_in_sub_topology_1() {
        let t = windowed_count_by("in", |r| format!("g{}", r.value.len()), "s", 0, "out");
        assert_eq!(
            t.repartition_topic("app").as_deref(),
            Some("app-s-repartition")
        );
        assert_eq!(t.aggregate_source("app"), "app-s-repartition");
        let moved = t.repartition(record("k1", 7)).expect("no filter");
        assert_eq!((moved.key.as_str(), moved.value.as_str()), ("g3", "0,7"));
        let mut store = KeyValueStore::default();
        let update = t.process(0, moved, &mut store).expect("counted");
        assert_eq!((update.store_key.as_str(), update.count), ("g3@0", 1));
        let plain = windowed_count("in", "s", 0, "out");
        assert_eq!(
            (
                plain.repartition_topic("app"),
                plain.aggregate_source("app")
            ),
            (None, "in".into())
        );
    }

    #[test]
    fn filter_map_values_sends_kept_records_mapped_and_has_no_store() {
        let t = filter_map_values("in", "out");
        assert!(!t.stateful());
        assert_eq!(
            t.stateless(record("k1", 5)),
            None,
            "id 0 is a multiple of 3"
        );
        let kept = StreamRecord {
            value: "4,5".into(),
            ..record("k1", 5)
        };
        let out = t.stateless(kept).expect("id 4 passes");
        assert_eq!((out.key.as_str(), out.value.as_str()), ("k1", "4,5,16"));
    }

    #[test]
    fn aggregate_ids_gives_each_key_one_id_and_keeps_the_sequence_from_the_output() {
        let t = aggregate_ids("in", "ids", 3, "out");
        assert!(t.stateful());
        let mut store = KeyValueStore::default();
        let ids: Vec<u64> = ["a", "b", "a", "c"]
            .into_iter()
            .filter_map(|k| t.process(2, record(k, 0), &mut store))
            .map(|u| u.count)
            .collect();
        assert_eq!(ids, [2, 5, 2, 8]);
        assert!(t.forwards("a"));
        assert!(!t.forwards(crate::streams::ids::SEQUENCE_KEY));
        assert!(windowed_count("in", "s", 0, "out").forwards("#next-id"));
    }

    #[test]
    fn input_values_carry_their_event_time() {
        let r = StreamRecord::parse(Some(b"k1"), Some(b"17,12345")).expect("parses");
        assert_eq!((r.key.as_str(), r.timestamp_ms), ("k1", 12_345));
        assert_eq!(StreamRecord::parse(None, Some(b"1,2")), None);
        assert_eq!(split_store_key("k1@5000"), Some(("k1".into(), 5_000)));
    }
}

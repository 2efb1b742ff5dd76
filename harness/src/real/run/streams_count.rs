//! Pipeline `streams-count` in a real run: the input topic and, as the simulated pipeline
//! creates them, the output topic and the store's changelog (the input's partitions and
//! settings); producers `producer-i` send the input (`<id>,<timestamp_ms>`), instances
//! `streams-i` ([`super::streams_instance`]) form group `streams.application_id`; the
//! drain waits for that group's committed offsets at the input's high watermarks; the
//! final state is recorded in the shapes of `workload::streams_count` so that
//! `checker::streams` judges it as in simulation: `streams-window`, each input partition's
//! `log-state` and `streams-input`, the group's `committed-offsets`, and each output
//! partition's `streams-output` read_committed from offset 0.
//!
//! Not run on the real backend (skipped with the reason): standby replicas (Streams' own
//! assignor cannot be plugged into librdkafka's group), and the topologies other than the
//! count (`streams.topology`: their final state is not recorded here). Persistent stores
//! run: they flush into the run's directory ([`super::streams_instance`]).

use super::cluster::{self, LogRecord, Probe};
use super::connect_state::{source_and_offsets, FinalState};
use super::worker_spec::Role;
use super::workers::Worker;
use crate::history::{RecordRef, StreamsInputRecord, Value};
use crate::scenario::{Scenario, TopicSpec};
use crate::streams::{input_id_and_time, output_update, TopologyKind};
use eosim_sim::kafka::{Isolation, TopicPartition};

/// Bound on each final read of a topic, ms.
const FINAL_READ_MS: u64 = 30_000;

/// Why the real backend cannot run `scenario` (a skip reason), if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    let s = &scenario.streams;
    if s.topology != TopologyKind::Count {
        return Some(format!(
            "skipped: streams.topology = \"{}\": the real backend records and checks the \
             count's output only (streams-output of key@window -> count); the other \
             topologies run in simulation",
            s.topology.name()
        ));
    }
    if s.num_standby_replicas > 0 {
        return Some(
            "skipped: streams.num_standby_replicas > 0: standby tasks need Kafka Streams' \
             assignor, which rdkafka cannot plug into the consumer group (the real backend \
             runs active tasks only, with librdkafka's range assignor)"
                .into(),
        );
    }
    if s.repartition_topic().is_some() {
        return Some(
            "skipped: streams.group_by = \"id-mod\" repartitions: its source task 0_p and \
             aggregating task 1_p must land on one instance, which Kafka Streams' assignor \
             (simulation only) ensures and librdkafka's range assignor over two topics does \
             not; nor does the real backend create the repartition topic"
                .into(),
        );
    }
    None
}

/// What the real instances do differently from the simulated ones (see
/// [`super::pipelines::deviations`]).
pub fn deviations(scenario: &Scenario) -> Vec<String> {
    let mut notes = Vec::new();
    let protocol = match scenario.streams.cooperative() {
        true => "cooperatively (KIP-429) on librdkafka's cooperative-sticky assignor",
        false => "eagerly (upgrade_from 2.3 or older) on librdkafka's range assignor",
    };
    notes.push(format!(
        "streams: the real instances rebalance {protocol}, which knows partitions, not \
         Streams' tasks, standbys or their lags (StreamsPartitionAssignor's choices are the \
         simulation's only)"
    ));
    notes
}

/// The output topic and the changelog, with the input topic's settings.
fn topics(scenario: &Scenario) -> [TopicSpec; 2] {
    let input = &scenario.topic;
    let streams = &scenario.streams;
    [streams.output_topic.clone(), streams.changelog_topic()].map(|name| TopicSpec {
        name,
        ..input.clone()
    })
}

/// Creates the output topic and the changelog.
///
/// # Errors
/// A topic that cannot be created.
pub fn setup(scenario: &Scenario, bootstrap: &str) -> Result<(), String> {
    for spec in topics(scenario) {
        cluster::create_topic_spec(bootstrap, &spec)?;
    }
    Ok(())
}

/// The instances `streams-0..instances`, not started.
pub fn instances(scenario: &Scenario) -> Vec<Worker> {
    (0..scenario.streams.instances)
        .map(|i| Worker::new(&format!("streams-{i}"), Role::Streams, 0..0))
        .collect()
}

/// An input partition as `log-state` (the Kafka checker) and `streams-input` (the Streams
/// checker).
fn input_values(tp: &TopicPartition, records: &[LogRecord]) -> [Value; 2] {
    let mut refs = Vec::new();
    let mut inputs = Vec::new();
    for r in records {
        let (id, timestamp_ms) = input_id_and_time(r.value.as_deref().unwrap_or_default());
        refs.push(RecordRef {
            id,
            key: r.key.clone(),
            tp: tp.clone(),
            offset: r.offset,
        });
        inputs.push(StreamsInputRecord {
            id,
            key: r.key.clone().unwrap_or_default(),
            timestamp_ms,
            offset: r.offset,
        });
    }
    [
        Value::LogState {
            tp: tp.clone(),
            records: refs,
        },
        Value::StreamsInput {
            tp: tp.clone(),
            records: inputs,
        },
    ]
}

/// The final state of a `streams-count` run, as the simulated pipeline records it.
///
/// # Errors
/// A final read that failed.
pub fn final_state(scenario: &Scenario, bootstrap: &str) -> Result<FinalState, String> {
    let streams = &scenario.streams;
    let (input, offsets) = source_and_offsets(bootstrap, scenario, &streams.application_id)?;
    let partitions = scenario.topic.partitions;
    let output_probe = Probe::new(bootstrap, &streams.output_topic, partitions, "eosim")?;
    let output = cluster::read_log_isolated(
        bootstrap,
        &output_probe.high_watermarks()?,
        FINAL_READ_MS,
        Isolation::ReadCommitted,
    )?;
    let mut values = vec![Value::StreamsWindow {
        window_size_ms: streams.window_size_ms,
        cache_max_bytes: streams.recorded_cache_max_bytes(),
    }];
    for (tp, records) in &input {
        values.extend(input_values(tp, records));
    }
    values.push(Value::CommittedOffsets { offsets });
    for (tp, records) in output {
        let records = records
            .iter()
            .filter_map(|r| output_update(r.key.as_deref(), r.value.as_deref(), r.offset))
            .collect();
        values.push(Value::StreamsOutput { tp, records });
    }
    Ok(FinalState {
        values,
        bulk_loads: Ok(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(streams: &str) -> Scenario {
        let text = format!(
            "name = \"t\"\npipeline = \"streams-count\"\nclaim = \"exactly-once\"\n\
             [streams]\n{streams}"
        );
        toml::from_str(&text).expect("scenario parses")
    }

    #[test]
    fn the_real_instances_rebalance_with_the_scenarios_protocol_on_librdkafkas_assignors() {
        let notes = deviations(&scenario(""));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("cooperatively (KIP-429)"), "{notes:?}");
        assert!(
            !notes[0].contains("  "),
            "one sentence, no runs of spaces: {notes:?}"
        );
        let eager = deviations(&scenario("upgrade_from = \"2.3\""));
        assert!(eager[0].contains("eagerly"), "{eager:?}");
    }

    #[test]
    fn a_repartitioning_scenario_is_skipped_on_the_real_tier_with_its_reason() {
        let reason = unsupported(&scenario("group_by = \"id-mod\"")).expect("skipped");
        assert!(reason.contains("streams.group_by"), "{reason}");
        assert!(reason.contains("repartition"), "{reason}");
        assert_eq!(unsupported(&scenario("group_by = \"input-key\"")), None);
    }

    #[test]
    fn a_topology_other_than_the_count_is_skipped_on_the_real_tier_by_name() {
        for name in ["filter-map-values", "aggregate-ids", "stream-table-join"] {
            let why = unsupported(&scenario(&format!("topology = \"{name}\""))).expect("skip");
            assert!(
                why.contains(&format!("streams.topology = \"{name}\"")),
                "{why}"
            );
        }
        assert_eq!(unsupported(&scenario("topology = \"count\"")), None);
    }
}

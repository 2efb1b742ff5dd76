//! Pipeline `transactional-copy` in a real run: the input topic and, as the simulated
//! pipeline creates it, the output topic (the input's partitions and settings); producers
//! `producer-i` send the ids (`k<id % keys>` → the id), copiers `consumer-i`
//! ([`super::copier_instance`]) form group [`COPY_GROUP`]; the drain waits for that group's
//! committed offsets at the input's high watermarks and for no open transaction on the
//! output ([`super::pipelines::transactional_outputs`]); the final state is recorded in
//! the shapes of `workload::transactional_copy` so that the Kafka, sink and transaction
//! checkers judge it as in simulation: each input partition's `log-state`, the group's
//! `committed-offsets`, each output partition's `partition-state` (high watermark and last
//! stable offset) and `committed-log-state` (read_committed from offset 0), and the
//! output's committed view as the `sink-state`, each row named by its id's input position.
//!
//! Not run on the real backend (skipped with the reason): the copiers' BUGGIFY points
//! (`copy.buggify_*`), which hold a request inside the simulated network.

use super::cluster::{self, StabilityProbe};
use super::connect_state::{source_and_offsets, FinalState};
use super::worker_spec::Role;
use super::workers::Worker;
use crate::copier::COPY_GROUP;
use crate::history::refs::named_by_input;
use crate::history::{RecordRef, Value};
use crate::scenario::{Scenario, TopicSpec};
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::collections::BTreeMap;

/// Bound on each final read of a topic, ms.
const FINAL_READ_MS: u64 = 30_000;

/// Why the real backend cannot run `scenario` (a skip reason), if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    let copy = &scenario.copy;
    let buggify = [
        (
            "copy.buggify_produce_delay_probability",
            copy.buggify_produce_delay_probability,
        ),
        (
            "copy.buggify_end_txn_delay_probability",
            copy.buggify_end_txn_delay_probability,
        ),
    ];
    let (key, _) = buggify.into_iter().find(|(_, p)| *p > 0.0)?;
    Some(format!(
        "skipped: {key} > 0: a BUGGIFY point holds the copier's request inside the simulated \
         network; librdkafka's requests have no such hook on the real tier"
    ))
}

/// The output topic, with the input topic's settings.
fn output_topic(scenario: &Scenario) -> TopicSpec {
    TopicSpec {
        name: scenario.copy.output_topic.clone(),
        ..scenario.topic.clone()
    }
}

/// Creates the output topic.
///
/// # Errors
/// A topic that cannot be created.
pub fn setup(scenario: &Scenario, bootstrap: &str) -> Result<(), String> {
    cluster::create_topic_spec(bootstrap, &output_topic(scenario))
}

/// The copiers `consumer-0..consumers`, not started.
pub fn copiers(scenario: &Scenario) -> Vec<Worker> {
    (0..scenario.workload.consumers)
        .map(|i| Worker::new(&format!("consumer-{i}"), Role::Copier, 0..0))
        .collect()
}

/// The final state of a `transactional-copy` run, as the simulated pipeline records it.
///
/// # Errors
/// A final read that failed.
pub fn final_state(scenario: &Scenario, bootstrap: &str) -> Result<FinalState, String> {
    let (input, offsets) = source_and_offsets(bootstrap, scenario, COPY_GROUP)?;
    let mut values = Vec::new();
    let mut input_position: BTreeMap<u64, (TopicPartition, Offset)> = BTreeMap::new();
    for (tp, records) in &input {
        let refs: Vec<RecordRef> = records
            .iter()
            .map(|r| r.record_ref(tp, r.value_id()))
            .collect();
        for r in &refs {
            input_position.entry(r.id).or_insert((tp.clone(), r.offset));
        }
        values.push(Value::LogState {
            tp: tp.clone(),
            records: refs,
        });
    }
    values.push(Value::CommittedOffsets { offsets });
    let output = output_topic(scenario);
    let marks =
        StabilityProbe::new(bootstrap, &[output.name], output.partitions)?.stable_offsets()?;
    let high = marks
        .iter()
        .map(|(tp, (_, hw))| (tp.clone(), *hw))
        .collect();
    let mut committed =
        cluster::read_log_isolated(bootstrap, &high, FINAL_READ_MS, Isolation::ReadCommitted)?;
    let mut sink = Vec::new();
    for (tp, (last_stable_offset, high_watermark)) in marks {
        values.push(Value::PartitionState {
            tp: tp.clone(),
            high_watermark,
            last_stable_offset,
        });
        let records: Vec<RecordRef> = (committed.remove(&tp).unwrap_or_default().iter())
            .map(|r| r.record_ref(&tp, r.value_id()))
            .collect();
        sink.extend(named_by_input(&records, &input_position));
        values.push(Value::CommittedLogState { tp, records });
    }
    values.push(Value::SinkState { rows: sink });
    Ok(FinalState {
        values,
        bulk_loads: Ok(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(copy: &str) -> Scenario {
        let text = format!(
            "name = \"t\"\npipeline = \"transactional-copy\"\nclaim = \"exactly-once\"\n\
             [workload]\nconsumers = 2\n[copy]\n{copy}"
        );
        toml::from_str(&text).expect("scenario parses")
    }

    #[test]
    fn a_buggify_point_is_skipped_on_the_real_tier_by_its_key() {
        let s = scenario("buggify_end_txn_delay_probability = 0.3\nbuggify_delay_ms = 3000");
        let why = unsupported(&s).expect("skipped");
        assert!(
            why.contains("copy.buggify_end_txn_delay_probability"),
            "{why}"
        );
        assert_eq!(unsupported(&scenario("abort_transactions = [1]")), None);
    }

    #[test]
    fn copiers_are_consumer_i_in_the_copier_role() {
        let names: Vec<(String, Role)> = copiers(&scenario(""))
            .into_iter()
            .map(|w| (w.name.clone(), w.role))
            .collect();
        assert_eq!(
            names,
            [
                ("consumer-0".to_string(), Role::Copier),
                ("consumer-1".to_string(), Role::Copier)
            ]
        );
    }
}

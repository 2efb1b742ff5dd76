//! What a run reads at its end: the [`FinalState`] every pipeline hands the runner, the
//! source log with the group's committed offsets (`source_and_offsets`), and, for the
//! Connect sinks (`connect-jdbc`, `clickhouse-sink`), their dead-letter queue topic
//! (created at the start) and their tasks' last states.

use super::cluster::{self, LogRecord, Probe};
use crate::connect::config::ConnectorConfig;
use crate::history::refs::id_of;
use crate::history::{DlqRecord, History, Value};
use crate::report::BulkLoad;
use crate::scenario::{Scenario, TopicSpec};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

/// A pipeline's final state, for the runner to record: the values (each a `final` op, in
/// order, at the end of the run) and the bulk loads of the same rows beside the sink (`Err`:
/// why there are none, for the notes).
#[derive(Debug)]
pub struct FinalState {
    /// The final ops' values.
    pub values: Vec<Value>,
    /// The bulk loads of the same rows, or why none was made.
    pub bulk_loads: Result<Vec<BulkLoad>, String>,
}

/// A source topic's records per partition, and a group's committed offsets.
pub(super) type SourceAndOffsets = (
    BTreeMap<TopicPartition, Vec<LogRecord>>,
    Vec<(TopicPartition, Offset)>,
);

/// The source topic's log up to its high watermarks and the group's committed offsets,
/// read at a run's end.
///
/// # Errors
/// A read that failed.
pub(super) fn source_and_offsets(
    bootstrap: &str,
    scenario: &Scenario,
    group: &str,
) -> Result<SourceAndOffsets, String> {
    let probe = Probe::of_scenario(bootstrap, scenario, group)?;
    let high = probe.high_watermarks()?;
    let log = cluster::read_log(bootstrap, &high, 30_000)?;
    Ok((log, probe.committed()?))
}

/// The connector's dead-letter queue topic, if it has one: one partition, its
/// `errors.deadletterqueue.topic.replication.factor` capped at the scenario topic's, as the
/// simulated cluster creates it.
///
/// # Errors
/// The admin client's.
pub(super) fn create_dlq_topic(
    bootstrap: &str,
    scenario: &Scenario,
    connector: &ConnectorConfig,
) -> Result<(), String> {
    let Some(dlq) = &connector.dlq_topic else {
        return Ok(());
    };
    let t = &scenario.topic;
    let spec = TopicSpec {
        name: dlq.clone(),
        partitions: 1,
        replication_factor: connector.dlq_replication_factor.min(t.replication_factor),
        ..t.clone()
    };
    cluster::create_topic_spec(bootstrap, &spec)
}

/// The DLQ topic's records (one partition) with their headers as text.
pub(super) fn dlq_state(bootstrap: &str, topic: &str) -> Result<Value, String> {
    let probe = Probe::new(bootstrap, topic, 1, "eosim-final-dlq")?;
    let high = probe.high_watermarks()?;
    let log = cluster::read_log(bootstrap, &high, 30_000)?;
    let records = log
        .iter()
        .flat_map(|(tp, records)| {
            records.iter().map(move |r| DlqRecord {
                id: id_of(&r.headers),
                tp: tp.clone(),
                offset: r.offset,
                headers: r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect(),
            })
        })
        .collect();
    Ok(Value::DlqState {
        topic: topic.to_string(),
        records,
    })
}

/// Each sink task's last `task-status`, as the workers printed it.
pub(super) fn task_states(history: &History) -> BTreeMap<(String, u32), Value> {
    let mut last = BTreeMap::new();
    for op in &history.ops {
        if let Value::TaskStatus {
            connector, task, ..
        } = &op.value
        {
            last.insert((connector.clone(), *task), op.value.clone());
        }
    }
    last
}

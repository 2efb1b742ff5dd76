//! Pipeline `connect-source` in a real run: a Debezium PostgreSQL source connector's task
//! in `connect-i` processes ([`super::source_instance`]) on real Kafka, at least once
//! (`WorkerSourceTask`) or exactly once (KIP-618, `ExactlyOnceWorkerSourceTask`).
//!
//! # What is real, what is still the model
//! Kafka, the task's producers (librdkafka's transactional producer under KIP-618,
//! `transactional.id = <group.id>-<connector>-<task>`), its transactions and the offsets
//! topic are real; a kill of `connect-i` is a SIGKILL of the process that runs the task.
//! The source *database* is still the simulation's model: every incarnation of the task
//! generates the same change log from `[source]` ([`ChangeLog::generate`]: event `i`
//! commits at `i`'s time since the run's epoch) and reads it in-process, as the simulated
//! task does; no PostgreSQL server, replication slot or replication connection is in the
//! run, so no fault can act on them. The run's notes say so ([`deviations`]).
//!
//! # Run
//! - Setup: the offsets topic (`offset.storage.topic`, one partition, the scenario topic's
//!   replication), as the simulated pipeline creates it; under KIP-618 also the brokers'
//!   transaction log (`__transaction_state`, by one InitProducerId of a transactional id
//!   of its own), so that the task's first InitProducerId does not wait seconds for its
//!   creation, which the simulated coordinator never does.
//! - Workers: `connect-1` runs the connector's one task (task 0); files with more workers
//!   are skipped (the herder's assignment of one task over several workers is not on
//!   real). `connect.task_crash_probability` crashes the task at its fault point as in
//!   simulation (`connect_task::RealHost`).
//! - Drain ([`lag`]): the offsets stored for the connector (read as the task reads them:
//!   read_committed under KIP-618) cover the change log's last event, no `connect-i` task
//!   is FAILED, and under KIP-618 the topic's last stable offsets reached their high
//!   watermarks (the runner's [`super::pipelines::transactional_outputs`]).
//! - Final state ([`final_state`]), in the shapes of `workload::connect_source`: the
//!   `change-log`, then per partition of the topic its `log-state` (read_uncommitted),
//!   `partition-state` (high watermark, last stable offset) and `committed-log-state`
//!   (read_committed), each record named by its `eosim.id` header; then each task's last
//!   `task-status`.

use super::cluster::{self, StabilityProbe};
use super::connect_state::{task_states, FinalState};
use super::worker_spec::Role;
use super::workers::Worker;
use crate::connect::config::WorkerConfig;
use crate::connect::postgres_source::{position_of, PostgresSourceTask};
use crate::connect::source_config::{exactly_once, offsets_isolation, SourceConnectorConfig};
use crate::connect::source_task::{apply_offset_record, StoredOffsets};
use crate::history::refs::id_of;
use crate::history::{History, RecordRef, Value};
use crate::scenario::{Scenario, TopicSpec};
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use eosim_sim::source_db::ChangeLog;
use std::collections::BTreeMap;

/// Bound on each final read of a topic, ms.
const FINAL_READ_MS: u64 = 30_000;
/// Bound on one read of the offsets topic (a task's start, a drain check), ms.
const OFFSETS_READ_MS: u64 = 10_000;
/// Bound on the creation of the brokers' transaction log at the setup, ms.
const TRANSACTION_LOG_WAIT_MS: u64 = 60_000;
/// The transactional id whose InitProducerId creates the transaction log at the setup
/// (no op of the history: it writes nothing).
pub const WARM_UP_TRANSACTIONAL_ID: &str = "eosim-transaction-log-warm-up";

/// Why the real backend cannot run `scenario` (a skip reason), if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    let connect = &scenario.connect;
    (connect.workers != 1).then(|| {
        format!(
            "skipped: connect.workers = {}: the real tier runs a source connector's one task \
             in connect-1; the herder's assignment of it over several workers (and its \
             rebalances) is simulated only",
            connect.workers
        )
    })
}

/// What the real run does differently from the simulation and runs anyway.
pub fn deviations(scenario: &Scenario) -> Vec<String> {
    let mut notes = vec!["connect-source on real: Kafka, the task's producers, its \
         transactions and the offsets topic are real, and a kill of connect-i is a SIGKILL \
         of the task's process; the source database is still the simulation's model (the \
         change log of [source], generated alike in every incarnation and read in-process), \
         so no PostgreSQL server, replication slot or replication connection is in the run"
        .to_string()];
    if worker_config(scenario).is_ok_and(|wc| exactly_once(&wc)) {
        notes.push(format!(
            "KIP-618: the brokers' transaction log was created before the worker started \
             (one InitProducerId of {WARM_UP_TRANSACTIONAL_ID}), as a running cluster has \
             it; the simulated coordinator needs none"
        ));
    }
    notes
}

/// The worker configuration of `[connect] worker` (validated when the file was loaded).
fn worker_config(scenario: &Scenario) -> Result<WorkerConfig, String> {
    WorkerConfig::parse(&scenario.connect.worker).map_err(|e| format!("[connect] worker: {e}"))
}

/// The connector's name (`[connector] name`).
fn connector_name(scenario: &Scenario) -> Result<String, String> {
    SourceConnectorConfig::parse(&scenario.connector)
        .map(|c| c.framework.name)
        .map_err(|e| format!("[connector]: {e}"))
}

/// Creates the offsets topic and, under KIP-618, the brokers' transaction log.
///
/// # Errors
/// A topic that cannot be created, a transaction coordinator that does not answer.
pub fn setup(scenario: &Scenario, bootstrap: &str) -> Result<(), String> {
    let wc = worker_config(scenario)?;
    let offsets = TopicSpec {
        name: wc.offset_storage_topic.clone(),
        partitions: 1,
        ..scenario.topic.clone()
    };
    cluster::create_topic_spec(bootstrap, &offsets)?;
    match exactly_once(&wc) {
        true => warm_transaction_log(bootstrap),
        false => Ok(()),
    }
}

/// Creates `__transaction_state` before the worker starts, by one InitProducerId of
/// transactional id [`WARM_UP_TRANSACTIONAL_ID`]: a fresh cluster creates it on the first
/// one (seconds with the scenario's 50 partitions on three brokers, measured 3.3 s on 2
/// cores), which the task's own InitProducerId would otherwise wait out, starting seconds
/// later than in the simulation (with the kill at 4.3 s, as the pair's files had it then,
/// the kill found no transaction of the task). The simulated coordinator needs no such
/// log: with it the task starts as early as there.
fn warm_transaction_log(bootstrap: &str) -> Result<(), String> {
    use crate::client::TransactionalProducer;
    let settings = crate::client::TxnSettings {
        transactional_id: WARM_UP_TRANSACTIONAL_ID.to_string(),
        transaction_timeout_ms: 60_000,
        producer: crate::client::ProducerConfig::default(),
    };
    let producer = super::copier_instance::real_txn_producer(bootstrap, &settings)?;
    let timeout = std::time::Duration::from_millis(TRANSACTION_LOG_WAIT_MS);
    super::blocking::block_on(producer.init_transactions(timeout))?
        .map_err(|e| format!("transaction log warm-up ({WARM_UP_TRANSACTIONAL_ID}): {e}"))
}

/// The source workers `connect-1..workers`, not started.
pub fn workers(scenario: &Scenario) -> Vec<Worker> {
    (1..=scenario.connect.workers)
        .map(|i| Worker::new(&format!("connect-{i}"), Role::SourceTask, 0..0))
        .collect()
}

/// The offsets `connector` has stored in `topic` (one partition), read from offset 0 with
/// `isolation`: read_committed up to the last stable offset, read_uncommitted up to the
/// high watermark. Blocking.
///
/// # Errors
/// Watermarks or records that could not be read in time.
pub fn stored_offsets(
    bootstrap: &str,
    topic: &str,
    isolation: Isolation,
    connector: &str,
) -> Result<StoredOffsets, String> {
    let marks = StabilityProbe::new(bootstrap, &[topic.to_string()], 1)?.stable_offsets()?;
    let ends: BTreeMap<TopicPartition, Offset> = marks
        .into_iter()
        .map(|(tp, (lso, hw))| match isolation {
            Isolation::ReadCommitted => (tp, lso),
            Isolation::ReadUncommitted => (tp, hw),
        })
        .collect();
    let log = cluster::read_log_isolated(bootstrap, &ends, OFFSETS_READ_MS, isolation)?;
    let mut offsets = StoredOffsets::new();
    for r in log.values().flatten() {
        let (key, value) = (r.key.as_deref(), r.value.as_deref());
        apply_offset_record(
            &mut offsets,
            connector,
            key.map(str::as_bytes),
            value.map(str::as_bytes),
        );
    }
    Ok(offsets)
}

/// Why the pipeline is not finished: the stored offset behind the change log's last
/// event, and each of `failed` (the `connect-i` whose task FAILED and stays so). One line
/// each; empty when done.
pub fn lag(bootstrap: &str, scenario: &Scenario, failed: &[String]) -> Vec<String> {
    let mut lag: Vec<String> = failed
        .iter()
        .map(|w| format!("the task of {w} FAILED"))
        .collect();
    let (wc, name) = match (worker_config(scenario), connector_name(scenario)) {
        (Ok(wc), Ok(name)) => (wc, name),
        (Err(e), _) | (_, Err(e)) => return vec![e],
    };
    let topic = &wc.offset_storage_topic;
    let stored = match stored_offsets(bootstrap, topic, offsets_isolation(&wc), &name) {
        Ok(offsets) => offsets,
        Err(e) => return vec![e],
    };
    let server = match SourceConnectorConfig::parse(&scenario.connector) {
        Ok(c) => c.topic_prefix,
        Err(e) => return vec![e.to_string()],
    };
    let partition = PostgresSourceTask::partition(&server).to_string();
    let position = stored.get(&partition).and_then(|o| position_of(o).ok());
    let last = ChangeLog::generate(scenario.source.log_config()).last_position();
    if position < last {
        let stored = position.map_or("nothing".to_string(), |p| p.to_string());
        let last = last.map(|p| p.to_string()).unwrap_or_default();
        lag.push(format!(
            "stored source offset {stored} < last change event {last}"
        ));
    }
    lag
}

/// The final state of a `connect-source` run, as the simulated pipeline records it.
///
/// # Errors
/// A final read that failed.
pub fn final_state(
    scenario: &Scenario,
    bootstrap: &str,
    history: &History,
) -> Result<FinalState, String> {
    let events = ChangeLog::generate(scenario.source.log_config())
        .events()
        .to_vec();
    let mut values = vec![Value::ChangeLog { events }];
    let t = &scenario.topic;
    let marks = StabilityProbe::new(bootstrap, std::slice::from_ref(&t.name), t.partitions)?
        .stable_offsets()?;
    let high: BTreeMap<TopicPartition, Offset> = marks
        .iter()
        .map(|(tp, (_, hw))| (tp.clone(), *hw))
        .collect();
    let mut log = cluster::read_log(bootstrap, &high, FINAL_READ_MS)?;
    let mut committed =
        cluster::read_log_isolated(bootstrap, &high, FINAL_READ_MS, Isolation::ReadCommitted)?;
    let refs = |tp: &TopicPartition, records: Vec<cluster::LogRecord>| -> Vec<RecordRef> {
        (records.iter())
            .map(|r| r.record_ref(tp, id_of(&r.headers)))
            .collect()
    };
    for (tp, (last_stable_offset, high_watermark)) in marks {
        let records = refs(&tp, log.remove(&tp).unwrap_or_default());
        values.push(Value::LogState {
            tp: tp.clone(),
            records,
        });
        values.push(Value::PartitionState {
            tp: tp.clone(),
            high_watermark,
            last_stable_offset,
        });
        let records = refs(&tp, committed.remove(&tp).unwrap_or_default());
        values.push(Value::CommittedLogState { tp, records });
    }
    values.extend(task_states(history).into_values());
    Ok(FinalState {
        values,
        bulk_loads: Ok(Vec::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(connect: &str) -> Scenario {
        let text = format!(
            "name = \"t\"\npipeline = \"connect-source\"\nclaim = \"exactly-once\"\n\
             [topic]\nname = \"db1.public.orders\"\npartitions = 1\n[connect]\n{connect}\n[connector]\nname = \"inventory\"\n\
             \"connector.class\" = \"io.debezium.connector.postgresql.PostgresConnector\"\n\
             \"topic.prefix\" = \"db1\"\n\"table.include.list\" = \"public.orders\"\n"
        );
        Scenario::parse(std::path::Path::new("t.toml"), &text).expect("scenario parses")
    }

    #[test]
    fn one_source_worker_runs_on_real_and_more_are_skipped_by_name() {
        assert_eq!(unsupported(&scenario("workers = 1")), None);
        let why = unsupported(&scenario("workers = 2")).expect("skipped");
        assert!(why.contains("connect.workers = 2"), "{why}");
        let crash = scenario("workers = 1\ntask_crash_probability = 0.1");
        assert_eq!(
            unsupported(&crash),
            None,
            "the real task crashes at its point too"
        );
        let names: Vec<(String, Role)> = workers(&scenario("workers = 1"))
            .into_iter()
            .map(|w| (w.name.clone(), w.role))
            .collect();
        assert_eq!(names, [("connect-1".to_string(), Role::SourceTask)]);
    }
}

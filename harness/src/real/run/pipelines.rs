//! What differs per pipeline in a real run: which scenarios run at all, the services
//! besides Kafka, the worker processes, the consumer group the drain waits for, and the
//! final state.
//!
//! - `kafka-consume`: no other service; workers `producer-i` and `consumer-i`; group
//!   `sink`; final state: the log, the sink files, the committed offsets.
//! - `connect-jdbc`: PostgreSQL 15 (initdb, a role for `connection.user`); workers
//!   `producer-i` (the change events) and `connect-1..n` (one sink task each); group
//!   `connect-<name>`; final state: the log and the source log, the table, the DLQ, the
//!   committed offsets and the tasks' states, then the bulk loads.
//! - `clickhouse-sink` ([`clickhouse_sink`](super::clickhouse_sink)): ZooKeeper and
//!   ClickHouse 18.16 configured with it; producers send `{"id", "name"}` rows, `worker-i`
//!   run one sink task each in group `connect-<[sink] name>`; final state: the log, the
//!   table's rows by name, committed offsets, task states.
//!
//! - `streams-count` ([`streams_count`](super::streams_count)): the output topic and the
//!   changelog; producers send `<id>,<timestamp_ms>`, `streams-i` run one Streams instance
//!   each in group `streams.application_id`; final state: the input log, the committed
//!   offsets, the output read_committed.
//!
//! - `transactional-copy` ([`transactional_copy`](super::transactional_copy)): the output
//!   topic; producers send the ids, copiers `consumer-i` (the loop of [`crate::copier`])
//!   form group `copier`; final state: the input log, the committed offsets, the output's
//!   watermarks and read_committed view.
//!
//! - `connect-source` ([`connect_source`](super::connect_source)): the offsets topic;
//!   `connect-1` runs the Debezium source task ([`source_instance`](super::source_instance))
//!   over the simulation's change-log model (the source database is not a real service);
//!   drained on the stored offsets; final state: the change log, the topic read
//!   uncommitted and committed, its watermarks, the task's state.
//!
//! A transactional upstream (`[workload] "transactional.id"`, [`crate::upstream`]) runs
//! in the producers of `kafka-consume`, `connect-jdbc` and `clickhouse-sink`
//! ([`upstream_instance`](super::upstream_instance)); the drain then also waits for the
//! input topic to be stable and measures the group's lag to the end of what its isolation
//! level reads ([`upstream_isolation`]).
//!
//! `routine-load` and `doris-sink` are skipped naming what is missing (Docker, the Doris
//! image, or the runner itself: [`doris`](super::doris)). For `connect-jdbc` the
//! connector runs with `connection.url` pointing at the server started here (the
//! scenario's own URL is the simulated node's), with pgJDBC's `reWriteBatchedInserts=true`
//! unless the scenario's URL names its own properties ([`url_properties`]); the history
//! records the configuration the
//! tasks ran with, which the change-data checker reads as in simulation.

use super::blocking::block_on;
use super::cluster::LogRecord;
use super::connect_state::{
    create_dlq_topic, dlq_state, source_and_offsets, task_states, FinalState,
};
use super::postgres_target::PgTarget;
use super::worker_spec::{Role, REAL_EVENTS_SEED, SINK_GROUP};
use super::workers::Worker;
use crate::client::postgres::{value_to_json, PostgresClient};
use crate::client::real::RealPostgres;
use crate::history::refs::id_of;
use crate::history::{History, Op, OpKind, SourceRecord, Value};
use crate::real::container::Runtime;
use crate::real::net::proxy::{Framing, Proxy};
use crate::real::provision::Postgres;
use crate::real::scratch::start_in;
use crate::scenario::cdc_events::build_events;
use crate::scenario::{FlavourName, Pipeline, Scenario};
use crate::sinks::jdbc::{parse_connector, JdbcSinkConfig};
use eosim_sim::kafka::{
    Isolation, PartitionEpochBookkeeping, StaticMemberRejoin, TopicPartition, TxnProtocol,
};
use madsim::rand::rngs::StdRng;
use madsim::rand::SeedableRng;

/// Where a pipeline's output goes in a real run.
pub enum Target {
    /// `kafka-consume`: the workers' fsync'ed sink files.
    Files,
    /// `connect-jdbc`: a PostgreSQL server started for the run.
    Postgres(Box<PgTarget>),
    /// `clickhouse-sink`: ClickHouse and ZooKeeper started for the run.
    ClickHouse(Box<super::clickhouse_sink::ChTarget>),
    /// `streams-count`: the output topic (and the changelog) in the run's Kafka.
    Streams,
    /// `transactional-copy`: the output topic in the run's Kafka.
    Copy,
    /// `connect-source`: the connector's topic and the offsets topic in the run's Kafka.
    Source,
}

impl Target {
    /// Connector keys every sink task sets over the scenario's.
    pub fn connector_sets(&self) -> Vec<(String, String)> {
        match self {
            Target::Files | Target::Streams | Target::Copy | Target::Source => Vec::new(),
            Target::ClickHouse(t) => t.connector.raw.clone().into_iter().collect(),
            Target::Postgres(t) => vec![(
                "connection.url".to_string(),
                t.connector.raw["connection.url"].clone(),
            )],
        }
    }
}

/// Why the real backend cannot run `scenario` (a skip reason), if it cannot.
pub fn unsupported(scenario: &Scenario) -> Option<String> {
    if let Some(why) = model_only_switch(scenario) {
        return Some(why);
    }
    match scenario.pipeline {
        Pipeline::KafkaConsume => None,
        Pipeline::ConnectJdbc => None,
        Pipeline::ClickhouseSink => super::clickhouse_sink::unsupported(scenario),
        Pipeline::StreamsCount => super::streams_count::unsupported(scenario),
        Pipeline::TransactionalCopy => super::transactional_copy::unsupported(scenario),
        Pipeline::ConnectSource => super::connect_source::unsupported(scenario),
        Pipeline::RoutineLoad | Pipeline::DorisSink => Some(super::doris::skip_reason(
            scenario.pipeline.name(),
            &super::doris::probe(),
        )),
    }
}

/// A `[cluster]` switch that selects a broker behaviour the real tier's brokers (Kafka
/// 4.1, `real/kafka/pom.xml`) do not have: running the file anyway would test today's
/// Kafka under the old behaviour's name, a silent downgrade.
fn model_only_switch(scenario: &Scenario) -> Option<String> {
    let c = &scenario.cluster;
    let switch = if c.kip848_partition_epochs == PartitionEpochBookkeeping::PreKafka16147 {
        "cluster.kip848_partition_epochs = \"pre-kafka-16147\" (KAFKA-16147: Kafka 3.7 before the fix)"
    } else if c.static_member_rejoin == StaticMemberRejoin::PreKip814 {
        "cluster.static_member_rejoin = \"pre-kip814\" (KAFKA-13435: brokers before 3.2)"
    } else if c.transaction_protocol == TxnProtocol::PreKip890 {
        "cluster.transaction_protocol = \"pre-kip890\" (brokers before 3.6)"
    } else if c.transaction_protocol == TxnProtocol::Tv2 {
        return Some(
            "skipped: cluster.transaction_protocol = \"tv2\" (KIP-890 part 2) needs a client \
             that speaks it; the real tier's librdkafka 2.12 sends transaction version 1 \
             (confluentinc/librdkafka#5423), so the brokers would run the part-1 protocol \
             under the tv2 name"
                .to_string(),
        );
    } else if !c.producer_state_survives_failover {
        "cluster.producer_state_survives_failover = false (F10: no Kafka release forgets it)"
    } else if c.flavour == FlavourName::Kop {
        "cluster.flavour = \"kop\" (Kafka-on-Pulsar)"
    } else {
        return None;
    };
    Some(format!(
        "skipped: {switch} is a simulation switch: the real brokers are Apache Kafka 4.1, \
         which behave otherwise"
    ))
}

/// The consumer group whose committed offsets the drain waits for.
pub fn group(scenario: &Scenario) -> String {
    match scenario.pipeline {
        Pipeline::ConnectJdbc => parse_connector(&scenario.connector)
            .map_or_else(|_| SINK_GROUP.to_string(), |c| c.group_id()),
        Pipeline::ClickhouseSink => super::clickhouse_sink::group(scenario),
        Pipeline::StreamsCount => scenario.streams.application_id.clone(),
        Pipeline::TransactionalCopy => crate::copier::COPY_GROUP.to_string(),
        _ => SINK_GROUP.to_string(),
    }
}

/// The topics the pipeline's processes write in transactions, which the drain waits to see
/// stable (no open transaction): under `exactly_once_v2` Streams' output topic and
/// changelog; `transactional-copy`'s output topic; `connect-source`'s topic under KIP-618;
/// the input topic behind a transactional upstream (`[workload] "transactional.id"`,
/// [`crate::upstream`]); none otherwise. A crashed instance's transaction stays open until
/// the coordinator aborts it (`transaction.timeout.ms`) or its next incarnation does, and
/// a final read_committed read before that would miss every later committed write.
pub fn transactional_outputs(scenario: &Scenario) -> Vec<String> {
    if scenario.workload.transactional_id.is_some() {
        return vec![scenario.topic.name.clone()];
    }
    match scenario.pipeline {
        Pipeline::StreamsCount
            if matches!(
                scenario.streams.processing_guarantee,
                crate::streams::ProcessingGuarantee::ExactlyOnceV2
            ) =>
        {
            vec![
                scenario.streams.output_topic.clone(),
                scenario.streams.changelog_topic(),
            ]
        }
        Pipeline::TransactionalCopy => vec![scenario.copy.output_topic.clone()],
        // KIP-618: the task's transactions write the connector's topic.
        Pipeline::ConnectSource if crate::report::judge::sink_reads_committed(scenario) => {
            vec![scenario.topic.name.clone()]
        }
        _ => Vec::new(),
    }
}

/// The isolation level the sink group reads a transactional upstream with (`[workload]
/// "transactional.id"`): the copiers' `[copy] "isolation.level"`, the Streams instances'
/// ([`crate::streams::StreamsSpec::isolation`]), or for the sink pipelines read_committed
/// when their consumers are configured so ([`crate::report::judge::sink_reads_committed`]),
/// else Kafka's default read_uncommitted;
/// `None` without a transactional upstream. The drain's lag then ends at the last record
/// such a consumer returns ([`super::cluster::consumed_ends`]), not at the high watermark.
pub fn upstream_isolation(scenario: &Scenario) -> Option<Isolation> {
    scenario.workload.transactional_id.as_ref()?;
    Some(match scenario.pipeline {
        Pipeline::TransactionalCopy => scenario.copy.isolation_level.to_isolation(),
        Pipeline::StreamsCount => scenario.streams.isolation(),
        _ => match crate::report::judge::sink_reads_committed(scenario) {
            true => Isolation::ReadCommitted,
            false => Isolation::ReadUncommitted,
        },
    })
}

/// The change events a `connect-jdbc` run sends (the producers draw the same list).
pub fn event_count(scenario: &Scenario) -> u64 {
    let mut rng = StdRng::seed_from_u64(REAL_EVENTS_SEED);
    build_events(scenario, &mut rng).len() as u64
}

/// The pipeline's worker processes, not started.
pub fn workers(scenario: &Scenario) -> Vec<Worker> {
    if scenario.pipeline == Pipeline::ConnectSource {
        // No producer: the source task writes the topic from the change log.
        return super::connect_source::workers(scenario);
    }
    let w = &scenario.workload;
    let (ids, producer_role) = match scenario.pipeline {
        Pipeline::ConnectJdbc => (event_count(scenario), Role::CdcProducer),
        _ => (w.records, Role::Producer),
    };
    let producers = u64::from(w.producers.max(1));
    let mut out = Vec::new();
    for i in 0..u64::from(w.producers) {
        let range = (i * ids / producers)..((i + 1) * ids / producers);
        out.push(Worker::new(&format!("producer-{i}"), producer_role, range));
    }
    match scenario.pipeline {
        Pipeline::ConnectJdbc => {
            for i in 1..=scenario.connect.workers {
                out.push(Worker::new(&format!("connect-{i}"), Role::SinkTask, 0..0));
            }
        }
        Pipeline::ClickhouseSink => {
            let armed = super::fault_point::spec(scenario).is_some();
            for i in 0..super::clickhouse_sink::spec(scenario).tasks {
                let mut w = Worker::new(&format!("worker-{i}"), Role::SinkTask, 0..0);
                if armed && w.name == super::fault_point::ARMED_WORKER {
                    w.arm_fault_point();
                }
                out.push(w);
            }
        }
        Pipeline::StreamsCount => out.extend(super::streams_count::instances(scenario)),
        Pipeline::TransactionalCopy => out.extend(super::transactional_copy::copiers(scenario)),
        _ => {
            for i in 0..w.consumers {
                out.push(Worker::new(&format!("consumer-{i}"), Role::Consumer, 0..0));
            }
        }
    }
    out
}

/// What the real run does differently from the simulation of `scenario` and runs anyway,
/// for the result's notes (each names the difference and why).
pub fn deviations(scenario: &Scenario) -> Vec<String> {
    match scenario.pipeline {
        Pipeline::StreamsCount => super::streams_count::deviations(scenario),
        Pipeline::ConnectSource => super::connect_source::deviations(scenario),
        _ => Vec::new(),
    }
}

/// Starts what the pipeline needs besides the topic: for `connect-jdbc`, PostgreSQL (with
/// the connector's role) and the dead-letter queue topic.
///
/// # Errors
/// pgJDBC's properties for the real run's `connection.url`: the scenario URL's own
/// (`?a=b&...`) when it has any, else `reWriteBatchedInserts=true`, which deployments of
/// the JDBC sink into PostgreSQL set for batch throughput (the simulation models no
/// per-statement cost, so it needs none; see `client/real/postgres/rewrite.rs`).
pub fn url_properties(scenario_url: &str) -> String {
    match scenario_url.split_once('?') {
        Some((_, query)) if !query.is_empty() => query.to_string(),
        _ => "reWriteBatchedInserts=true".to_string(),
    }
}

/// A service that does not come up (naming its log), a topic that cannot be created.
pub fn setup(
    scenario: &Scenario,
    bootstrap: &str,
    seed: u64,
    runtime: Runtime,
) -> Result<Target, String> {
    if scenario.pipeline == Pipeline::ClickhouseSink {
        let target = super::clickhouse_sink::ChTarget::setup(scenario, bootstrap, seed, runtime)?;
        return Ok(Target::ClickHouse(Box::new(target)));
    }
    if scenario.pipeline == Pipeline::StreamsCount {
        super::streams_count::setup(scenario, bootstrap)?;
        return Ok(Target::Streams);
    }
    if scenario.pipeline == Pipeline::TransactionalCopy {
        super::transactional_copy::setup(scenario, bootstrap)?;
        return Ok(Target::Copy);
    }
    if scenario.pipeline == Pipeline::ConnectSource {
        super::connect_source::setup(scenario, bootstrap)?;
        return Ok(Target::Source);
    }
    if scenario.pipeline != Pipeline::ConnectJdbc {
        return Ok(Target::Files);
    }
    let spec = &scenario.postgres;
    let settings = [
        (
            "synchronous_commit",
            spec.synchronous_commit.as_str().to_string(),
        ),
        (
            "wal_writer_delay",
            format!("{}ms", spec.wal_writer_delay_ms),
        ),
    ];
    let (pg, dir) = start_in("postgres", |dir| {
        Postgres::start_with(dir, runtime, &settings).map_err(|e| e.to_string())
    })?;
    let proxy = super::needs::messages_on(scenario, "postgres")
        .then(|| Proxy::in_front_of("postgres", pg.port(), seed, Framing::Postgres))
        .transpose()?;
    let mut raw = scenario.connector.clone();
    let url = format!(
        "jdbc:postgresql://127.0.0.1:{}/postgres?{}",
        proxy.as_ref().map_or(pg.port(), Proxy::port),
        url_properties(raw.get("connection.url").map_or("", String::as_str))
    );
    raw.insert("connection.url".into(), url);
    let connector = parse_connector(&raw).map_err(|e| format!("[connector]: {e}"))?;
    let sink = JdbcSinkConfig::parse(&raw, &connector.topics).map_err(|e| e.to_string())?;
    let target = PgTarget {
        pg,
        state: Default::default(),
        connector,
        sink,
        timeout_ms: scenario.postgres.client_timeout_ms,
        proxy,
        _dir: dir,
    };
    create_role(&target)?;
    if let Some(table) = &scenario.postgres.table {
        create_table(&target, table)?;
    }
    create_dlq_topic(bootstrap, scenario, &target.connector)?;
    Ok(Target::Postgres(Box::new(target)))
}

/// `CREATE ROLE` for the connector's `connection.user` (login, superuser, its password),
/// so the scenario's credentials work as written.
fn create_role(target: &PgTarget) -> Result<(), String> {
    let user = &target.sink.connection_user;
    if user.is_empty() || user == "postgres" {
        return Ok(());
    }
    let password = target.connector.raw.get("connection.password");
    let mut text = format!(
        "CREATE ROLE {} LOGIN SUPERUSER",
        crate::client::real::postgres::sql::ident(user)
    );
    if let Some(p) = password.filter(|p| !p.is_empty()) {
        text.push_str(&format!(
            " PASSWORD {}",
            crate::client::real::postgres::sql::quote(p)
        ));
    }
    let mut admin = target.admin()?;
    block_on(admin.run_sql(&text))?
        .map(|_| ())
        .map_err(|e| format!("postgres: {text}: {e}"))
}

/// `[postgres.table]`: the table the DBA creates before the connector starts, through the
/// real client's rendering of the statement the simulation runs
/// ([`crate::scenario::TableSpec::create_statement`]).
///
/// # Errors
/// The server's refusal, with the table's name.
fn create_table(target: &PgTarget, table: &crate::scenario::TableSpec) -> Result<(), String> {
    use crate::client::postgres::PostgresClient;
    let mut admin = target.admin()?;
    block_on(admin.execute(table.create_statement()))?
        .map(|_| ())
        .map_err(|e| format!("postgres: [postgres.table] {}: {e}", table.name))
}

/// The final table as the history holds it (absent table: no columns, no rows).
async fn table_state(client: &mut RealPostgres, table: &str) -> Result<Value, String> {
    let (columns, rows) = match client.select(table).await {
        Ok(t) => (t.columns, t.rows),
        Err(e) if e.sqlstate() == Some("42P01") => (Vec::new(), Vec::new()),
        Err(e) => return Err(format!("postgres: final read of {table}: {e}")),
    };
    let rows = rows
        .iter()
        .map(|r| r.iter().map(value_to_json).collect())
        .collect();
    Ok(Value::TableState {
        table: table.to_string(),
        columns,
        rows,
    })
}

fn source_log(tp: &TopicPartition, records: &[LogRecord]) -> [Value; 2] {
    let refs = records.iter().map(|r| r.record_ref(tp, id_of(&r.headers)));
    let source = records.iter().map(|r| SourceRecord {
        id: id_of(&r.headers),
        offset: r.offset,
        key: r.key.clone(),
        value: r.value.clone(),
    });
    [
        Value::LogState {
            tp: tp.clone(),
            records: refs.collect(),
        },
        Value::SourceLog {
            tp: tp.clone(),
            records: source.collect(),
        },
    ]
}

/// The operator's creation of the connector as the simulation records it (its
/// configuration, at `time_ns`), and a note when the scenario asks for table reads the real
/// backend does not make.
pub fn connector_op(t: &PgTarget, scenario: &Scenario, time_ns: u64) -> (Op, Option<String>) {
    let note = (scenario.cdc.read_interval_ms > 0).then(|| {
        "cdc.read_interval_ms: the real backend makes no table reads during the run (no \
         cdc-regression can be seen)"
            .to_string()
    });
    let op = connector_config_op(&t.connector.name, &t.connector.raw, time_ns);
    (op, note)
}

/// The operator's creation of connector `name` with `config` at `time_ns`, as the
/// simulation records it.
pub fn connector_config_op(
    name: &str,
    config: &std::collections::BTreeMap<String, String>,
    time_ns: u64,
) -> Op {
    Op {
        index: 0,
        time_ns,
        process: "operator".into(),
        kind: OpKind::Ok,
        value: Value::ConnectorConfig {
            connector: name.to_string(),
            config: config.clone(),
        },
        error: None,
    }
}

/// The final state of a `connect-jdbc` run, as the simulated pipeline records it, and the
/// bulk loads of the same rows.
///
/// # Errors
/// A final read that failed.
pub fn final_state_cdc(
    t: &PgTarget,
    scenario: &Scenario,
    bootstrap: &str,
    history: &History,
) -> Result<FinalState, String> {
    let (log, offsets) = source_and_offsets(bootstrap, scenario, &t.connector.group_id())?;
    let mut client = t.admin()?;
    let table = block_on(table_state(&mut client, &t.sink.table))??;
    let dlq = match &t.connector.dlq_topic {
        Some(topic) => Some(dlq_state(bootstrap, topic)?),
        None => None,
    };
    let mut values: Vec<Value> = Vec::new();
    for (tp, records) in &log {
        values.extend(source_log(tp, records));
    }
    values.push(table);
    values.extend(dlq);
    values.push(Value::CommittedOffsets { offsets });
    values.extend(task_states(history).into_values());
    Ok(FinalState {
        values,
        bulk_loads: super::bulk::bulk_loads(t, &log),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_url_rewrites_batched_inserts_unless_the_scenario_names_properties() {
        let sim = "jdbc:postgresql://10.0.5.1:5432/db";
        assert_eq!(url_properties(sim), "reWriteBatchedInserts=true");
        let own = "jdbc:postgresql://10.0.5.1:5432/db?reWriteBatchedInserts=false";
        assert_eq!(url_properties(own), "reWriteBatchedInserts=false");
    }

    #[test]
    fn simulation_only_broker_switches_are_skipped_by_name() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
        let read = |file: &str| {
            let path = dir.join(file);
            Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let refused = |file: &str, parts: &[&str]| {
            let why = unsupported(&read(file)).unwrap_or_else(|| panic!("{file} not refused"));
            assert!(parts.iter().all(|p| why.contains(p)), "{file}: {why}");
        };
        let static_leader = "field/kafka-static-leader-restart-pre-kip814-stalls.toml";
        refused(static_leader, &["static_member_rejoin", "pre-kip814"]);
        refused(
            "field/kop-idempotent-producer-coordinator-enabled.toml",
            &["kop"],
        );
        let fixed = read("field/kafka-static-leader-restart-kip814.toml");
        assert_eq!(unsupported(&fixed), None);
        let tv2 = read("txn-copy-messages.toml");
        let why = unsupported(&tv2).expect("refused");
        assert!(why.contains("tv2") && why.contains("librdkafka"), "{why}");
        assert_eq!(unsupported(&read("txn-copy-no-faults.toml")), None);
        for file in [
            "field/kafka-read-committed-skips-aborted-txn.toml",
            "field/jdbc-sink-read-uncommitted-aborted-txn-corrupts.toml",
        ] {
            assert_eq!(
                unsupported(&read(file)),
                None,
                "{file}: a transactional upstream"
            );
        }
        // The ClickHouse twins run their upstream on real too, but not their sink variant.
        let clickhouse = "field/clickhouse-connect-read-committed-skips-aborted-txn.toml";
        refused(
            clickhouse,
            &["connector-current", "insert_deduplication_token"],
        );
        let two_owners = "field/kafka-kip848-pre-kafka-16147-two-owners-duplicates.toml";
        refused(two_owners, &["kip848_partition_epochs", "pre-kafka-16147"]);
        // KIP-848's consumer protocol runs on real brokers (librdkafka's
        // group.protocol=consumer, the brokers' group.consumer.* from [cluster]).
        for kip848 in [
            "alo-kip848-consumer-restarts.toml",
            "p2-upsert-worker-crash-kip848.toml",
        ] {
            assert_eq!(unsupported(&read(kip848)), None, "{kip848}");
        }
        let classic = read("alo-cooperative-sticky-consumer-restarts.toml");
        assert_eq!(unsupported(&classic), None);
        // connect-source runs on real (its source database still the model).
        for file in [
            "field/connect-source-kip618-exactly-once-worker-crash.toml",
            "field/connect-source-at-least-once-worker-crash-duplicates.toml",
        ] {
            assert_eq!(unsupported(&read(file)), None, "{file}");
        }
    }
}

//! `eosim run --backend native` end to end: the real smoke scenarios, judged by the
//! simulation's checkers, with throughput and latency measured: `kafka-consume` (a consumer
//! SIGKILLed and restarted mid-run) against a real Kafka broker, and `connect-jdbc` (P2: a
//! Connect worker SIGKILLed and restarted mid-run) against real Kafka and PostgreSQL, with
//! the bulk-load comparison; `clickhouse-sink` (P1, seed: a sink worker crashed at a fault
//! point) against real Kafka, ClickHouse 18.16 and ZooKeeper, a known violation shown;
//! `streams-count` (P3: exactly_once_v2, a Streams instance SIGKILLed and restarted);
//! `transactional-copy` (F9: an aborted transaction with and without the rewind); a
//! transactional upstream that aborts on purpose, read_uncommitted and read_committed;
//! `connect-source` (a Debezium source task killed between offset flushes, at least once
//! and under KIP-618) on real Kafka over the simulation's model of the source database.
//! Runs only with `EOSIM_REAL=1`; the skips (testcontainers backend, unsupported
//! pipelines) need no services.
#![cfg(not(madsim))]

mod real_support;

use eosim::history::{OpKind, Value};
use eosim::real::backend::Backend;
use eosim::real::process::live_groups;
use eosim::real::run::result::scenario_result;
use eosim::real::run::{run_real, RealOutcome, RunOptions};
use eosim::report::{ScenarioResult, Verdict};
use eosim::scenario::Scenario;
use real_support::{real_enabled, service_dir, timed};
use std::path::PathBuf;

fn scenario_at(relative: &str) -> (PathBuf, Scenario) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative);
    let scenario = Scenario::load(&path).expect("the scenario parses");
    (path, scenario)
}

fn smoke_scenario() -> (PathBuf, Scenario) {
    scenario_at("../scenarios/real/kafka-consume-crash.toml")
}

fn fault_lines(history: &eosim::history::History) -> Vec<String> {
    history
        .ops
        .iter()
        .filter_map(|op| match &op.value {
            Value::Fault { name, detail } => Some(format!("{name} {detail}")),
            _ => None,
        })
        .collect()
}

/// When the history's first `fault` op at or after `after_ns` was recorded, ns.
fn fault_time(history: &eosim::history::History, fault: &str, after_ns: u64) -> Option<u64> {
    (history.ops.iter())
        .filter(|op| op.time_ns >= after_ns)
        .find(|op| matches!(&op.value, Value::Fault { name, .. } if name == fault))
        .map(|op| op.time_ns)
}

fn options(backend: Backend, dir: &std::path::Path) -> RunOptions {
    RunOptions {
        backend,
        bootstrap_servers: None,
        exe: PathBuf::from(env!("CARGO_BIN_EXE_eosim")),
        dir: dir.to_path_buf(),
        verbose: true,
        seed: 0,
    }
}

/// Runs `scenario` on `backend`, which must report it skipped (no seed run); its notes.
fn skipped(path: &std::path::Path, scenario: &Scenario, backend: Backend) -> Vec<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let outcome = run_real(scenario, path, &options(backend, dir.path()));
    let result = scenario_result(scenario, &outcome, &dir.path().join("h.jsonl"), "test");
    assert_eq!(result.verdict, Verdict::Skipped);
    assert_eq!(result.seeds, 0);
    result.notes
}

/// How many effects of `kind` (`eosim_sim::effects::kind`) the run recorded: what shows a
/// fault took effect on real services.
fn effects_of(history: &eosim::history::History, kind: &str) -> usize {
    let of_kind =
        |op: &&eosim::history::Op| matches!(&op.value, Value::Effect { kind: k, .. } if k == kind);
    history.ops.iter().filter(of_kind).count()
}

/// Runs `scenario` natively in `dir` and judges it.
fn run_native(
    what: &str,
    path: &std::path::Path,
    scenario: &Scenario,
    dir: &std::path::Path,
) -> (RealOutcome, ScenarioResult) {
    let outcome = timed(what, || {
        run_real(scenario, path, &options(Backend::Native, dir))
    });
    let result = scenario_result(scenario, &outcome, &dir.join("history.jsonl"), "test");
    eprintln!("{}", serde_json::to_string_pretty(&result).expect("json"));
    (outcome, result)
}

/// Runs `file` until a run tested it, at most three times: `untested` names why a run did
/// not test what the file is for (a condition of the real machine the file does not
/// control), `None` when it did. Three untested runs in a row fail, with the reasons.
fn run_until_tested(
    file: &str,
    label: &str,
    path: &std::path::Path,
    scenario: &Scenario,
    untested: impl Fn(&RealOutcome, &ScenarioResult) -> Option<String>,
) -> (RealOutcome, ScenarioResult) {
    let mut reasons = Vec::new();
    loop {
        let dir = service_dir(label);
        let (outcome, result) = run_native(file, path, scenario, dir.path());
        let Some(reason) = untested(&outcome, &result) else {
            return (outcome, result);
        };
        eprintln!("{file}: run {}: {reason}: not counted", reasons.len() + 1);
        reasons.push(reason);
        assert!(
            reasons.len() < 3,
            "{file}: none of {} runs tested the file: {reasons:?}",
            reasons.len()
        );
    }
}

/// Runs `scenario` natively in `dir`, judges it, and checks what every real smoke run must
/// show: the verdict `holds`, the faults `kill` then `restart` of `killed`.
fn run_and_judge(
    what: &str,
    path: &std::path::Path,
    scenario: &Scenario,
    dir: &std::path::Path,
    killed: &str,
) -> (RealOutcome, ScenarioResult) {
    let (outcome, result) = run_native(what, path, scenario, dir);
    assert_eq!(result.verdict, Verdict::Holds, "notes: {:?}", result.notes);
    assert_eq!(
        fault_lines(&outcome.history),
        [
            format!("kill target=[{killed}] mode=process-kill"),
            format!("restart target=[{killed}]")
        ]
    );
    (outcome, result)
}

/// A real run of a pair's file judged as expected: `Some(anomaly)`, violated with that
/// anomaly among the forbidden ones; `None`, holds with none.
fn assert_judged(file: &str, result: &ScenarioResult, caught_by: Option<&str>) {
    let caught = result.forbidden_anomalies.keys().collect::<Vec<_>>();
    match caught_by {
        Some(anomaly) => {
            let notes = &result.notes;
            assert_eq!(result.verdict, Verdict::Violated, "{file}: {notes:?}");
            assert!(caught.iter().any(|a| *a == anomaly), "{file}: {caught:?}");
        }
        None => {
            assert_eq!(result.verdict, Verdict::Holds, "{file}: {:?}", result.notes);
            assert!(caught.is_empty(), "{file}: {caught:?}");
        }
    }
}

/// A real run stays inside its share of CI's budget (`budget_s` of wall time) and leaves
/// no service process group behind.
fn assert_short_and_clean(result: &ScenarioResult, budget_s: f64) {
    assert!(
        result.wall_time_s < budget_s,
        "CI budget: {} s",
        result.wall_time_s
    );
    assert_eq!(live_groups(), Vec::<i32>::new(), "no process left behind");
}

#[test]
fn a_consumer_killed_mid_run_keeps_at_least_once_on_real_kafka() {
    if !real_enabled("a_consumer_killed_mid_run_keeps_at_least_once_on_real_kafka") {
        return;
    }
    let (path, scenario) = smoke_scenario();
    let dir = service_dir("real-run");
    let what = "real run of the smoke scenario";
    let (_, result) = run_and_judge(what, &path, &scenario, dir.path(), "consumer-0");
    let measured = result
        .measured
        .as_ref()
        .expect("throughput and latency are measured");
    assert_eq!(measured.records_acked, scenario.workload.records);
    assert!(measured.rows_written >= scenario.workload.records);
    assert!(measured.records_per_s > 0.0 && measured.rows_per_s > 0.0);
    assert!(measured.latency_ms_p50 <= measured.latency_ms_p99);
    assert_short_and_clean(&result, 120.0);
}

/// The smoke scenario with a batching input producer (`linger.ms` 20, five requests in
/// flight): librdkafka batches the sends and each outcome comes back through the producer's
/// callback (`Producer::send_with_callback`); every send is answered before the producer
/// process ends, and at-least-once holds as without batching.
#[test]
fn a_batching_producer_hands_every_outcome_back_on_real_kafka() {
    if !real_enabled("a_batching_producer_hands_every_outcome_back_on_real_kafka") {
        return;
    }
    let (path, mut scenario) = smoke_scenario();
    scenario.workload.linger_ms = Some(20);
    scenario.workload.max_in_flight_requests_per_connection = Some(5);
    let dir = service_dir("real-run-batching");
    let what = "real run of the smoke scenario with a batching producer";
    let (outcome, result) = run_and_judge(what, &path, &scenario, dir.path(), "consumer-0");
    let sends = |kind: OpKind| {
        (outcome.history.ops.iter())
            .filter(|op| op.kind == kind && matches!(op.value, Value::Send { .. }))
            .count() as u64
    };
    let records = scenario.workload.records;
    assert_eq!(sends(OpKind::Invoke), records);
    assert_eq!(sends(OpKind::Ok), records, "every send answered ok");
    let measured = result.measured.as_ref().expect("measured");
    assert_eq!(measured.records_acked, records);
    assert_short_and_clean(&result, 120.0);
}

/// A swarm is drawn on the real tier as in the simulation: the run injects the schedule
/// `swarm::schedule` draws for its seed over its consumers, beginning with its first fault.
#[test]
fn a_swarm_is_drawn_from_the_seed_on_the_real_tier() {
    use eosim_sim::nemesis::{swarm, Fault};
    use madsim::rand::{rngs::StdRng, SeedableRng};
    if !real_enabled("a_swarm_is_drawn_from_the_seed_on_the_real_tier") {
        return;
    }
    let (path, _) = smoke_scenario();
    let text = std::fs::read_to_string(&path).expect("the smoke scenario reads");
    let text = text.replace("records = 2000", "records = 600").replace(
        "[drain]",
        "[faults.swarm]\nkinds = [\"kill\", \"pause\"]\ntargets = [\"consumers\"]\n\
         interval_ms_min = 1000\ninterval_ms_max = 2000\nduration_ms_min = 500\n\
         duration_ms_max = 1500\n\n[drain]",
    );
    let scenario = Scenario::parse(&path, &text).expect("the scenario parses");
    let spec = scenario.faults.swarm.clone().expect("a swarm");
    let rng = &mut StdRng::seed_from_u64(3);
    let drawn = swarm::draw(&spec, rng);
    let consumers = ["consumer-0".to_string(), "consumer-1".to_string()];
    let topology = swarm::Topology {
        targets: &consumers,
        names: &consumers,
        topic: &scenario.topic.name,
        partitions: scenario.topic.partitions,
    };
    let window = (swarm::START_MS, scenario.faults.until_ms);
    let expected = swarm::schedule(&drawn, topology, window, rng);
    let first = match &expected.first().expect("the seed draws a fault").fault {
        Fault::Kill { target, .. } => format!("kill target=[{}]", target[0]),
        Fault::Pause { target } => format!("pause target=[{}]", target[0]),
        other => panic!("not a kill or pause: {other:?}"),
    };
    let dir = service_dir("real-run-swarm");
    let mut opts = options(Backend::Native, dir.path());
    opts.seed = 3;
    let outcome = timed("a real run with a swarm", || {
        run_real(&scenario, &path, &opts)
    });
    let result = scenario_result(&scenario, &outcome, &dir.path().join("h.jsonl"), "test");
    assert_eq!(result.verdict, Verdict::Holds, "notes: {:?}", result.notes);
    let faults = fault_lines(&outcome.history);
    assert!(faults.len() >= 2, "{faults:?}");
    assert!(
        faults[0].starts_with(&first),
        "{faults:?} vs the drawn {first}"
    );
    assert!(
        result
            .notes
            .iter()
            .any(|n| n.starts_with("swarm of seed 3")),
        "{:?}",
        result.notes
    );
    assert_short_and_clean(&result, 120.0);
}

/// A file the testcontainers backend cannot run as asked is skipped, never passed: with no
/// daemon, for that; with one, because it runs 1 or 3 brokers as the native backend does.
#[test]
fn the_testcontainers_backend_skips_what_it_cannot_run_never_passes() {
    let (path, _) = smoke_scenario();
    let text = std::fs::read_to_string(&path).expect("the smoke scenario reads");
    let text = text.replace("brokers = 1", "brokers = 2");
    let scenario = Scenario::parse(&path, &text).expect("the scenario parses");
    let notes = skipped(&path, &scenario, Backend::Testcontainers);
    assert!(
        notes[0].starts_with("skipped: no Docker daemon")
            || notes[0].starts_with("skipped: the testcontainers backend runs 1 or 3 brokers"),
        "{notes:?}"
    );
}

/// Message faults on brokers act through the Kafka-framed proxies the brokers advertise:
/// a non-idempotent producer whose Produce requests are delivered twice appends records
/// twice on real Kafka, as in the simulation (`canary-duplicate-unsafe`).
#[test]
fn duplicated_produce_requests_through_the_broker_proxies_duplicate_records_on_real_kafka() {
    if !real_enabled("duplicated_produce_requests_through_the_broker_proxies") {
        return;
    }
    let (path, scenario) = scenario_at("../scenarios/canary-duplicate-unsafe.toml");
    let dir = service_dir("real-run-broker-messages");
    let (outcome, result) = run_native("duplicated produce requests", &path, &scenario, dir.path());
    assert_eq!(
        result.verdict,
        Verdict::Violated,
        "notes: {:?}",
        result.notes
    );
    let duplicates = effects_of(&outcome.history, eosim_sim::effects::kind::DUPLICATE);
    assert!(duplicates > 0, "no request was delivered twice");
    assert_short_and_clean(&result, 120.0);
}

/// `delete-records` on real Kafka (`Admin.deleteRecords` through librdkafka): a purge to the
/// high watermark while the consumer is paused deletes records it never read, which the
/// checker finds as `sink-lost` (`canary-delete-records-unsafe`); bounded by the group's
/// committed offset it deletes only what the sink holds, and the claim holds
/// (`canary-delete-records-safe`). Each run records the deleted records and the effect.
///
/// A purge bounded by the committed offset is refused while the group has none: a run
/// whose consumer had not committed when the fault came (a slow start on a loaded machine;
/// s13 saw one at 7 s) did not test the file and runs again, at most three times.
#[test]
fn delete_records_on_real_kafka_is_caught_past_the_committed_offset_and_safe_below_it() {
    if !real_enabled("delete_records_on_real_kafka") {
        return;
    }
    let refused_for_want_of_a_commit = |outcome: &RealOutcome, _: &ScenarioResult| {
        let refused = outcome.history.ops.iter().any(|op| match &op.value {
            Value::Fault { name, detail } => {
                name == "delete-records" && detail.contains("has no committed offset")
            }
            _ => false,
        });
        refused.then(|| "the group had no committed offset at the fault".to_string())
    };
    for (file, expected) in [
        ("canary-delete-records-unsafe", Verdict::Violated),
        ("canary-delete-records-safe", Verdict::Holds),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
        let (outcome, result) = run_until_tested(
            file,
            "real-run-delete-records",
            &path,
            &scenario,
            refused_for_want_of_a_commit,
        );
        assert_eq!(result.verdict, expected, "{file}: notes {:?}", result.notes);
        let deleted: usize = outcome
            .history
            .ops
            .iter()
            .map(|op| match &op.value {
                Value::RecordsDeleted { records, .. } => records.len(),
                _ => 0,
            })
            .sum();
        assert!(deleted > 0, "{file}: no record was deleted");
        let acted = effects_of(&outcome.history, eosim_sim::effects::kind::DELETE_RECORDS) > 0;
        assert!(acted, "{file}: no delete-records effect");
        assert_short_and_clean(&result, 120.0);
    }
}

/// `add-partitions` on real Kafka (`Admin.createPartitions` through librdkafka): the
/// topic grows from 2 to 4 partitions under a group reading with
/// `auto.offset.reset=latest`, and what the producer writes to the new partitions before
/// the group's leader notices is never read (`sink-lost`, KAFKA-12478); with `earliest`
/// the claim holds. Each run records the effect, and the final read covers all 4
/// partitions.
///
/// The loss needs the producer to write to the new partitions before the group takes them;
/// a group that fetches fresh metadata early (a member joining late, which on a loaded
/// machine can happen after the growth at 3 s, brings a rejoin with the new count) closes
/// the window. The latest file held once in the real suite's loop (2026-12-08, while
/// builds shared the two cores, after it had been violated in every run of the 17 before),
/// so it runs up to three times until it is violated; each run must still record the
/// effect and read all 4 partitions. The earliest twin must hold.
#[test]
fn add_partitions_on_real_kafka_loses_records_under_latest_and_not_under_earliest() {
    if !real_enabled("add_partitions_on_real_kafka") {
        return;
    }
    let file = "kafka-add-partitions-latest-loses";
    let caught = (1..=3).any(|attempt| {
        let verdict = run_add_partitions(file);
        eprintln!("{file} attempt {attempt}: {verdict:?}");
        assert!(
            matches!(verdict, Verdict::Violated | Verdict::Holds),
            "{file}: {verdict:?}"
        );
        verdict == Verdict::Violated
    });
    assert!(caught, "{file} held in 3 runs of 3");
    let file = "kafka-add-partitions-earliest";
    assert_eq!(run_add_partitions(file), Verdict::Holds, "{file}");
}

/// One run of an add-partitions field file: its verdict, after checking that the growth
/// acted, the final read covered all 4 partitions, and the run was short and clean.
fn run_add_partitions(file: &str) -> Verdict {
    let (path, scenario) = scenario_at(&format!("../scenarios/field/{file}.toml"));
    let dir = service_dir("real-run-add-partitions");
    let (outcome, result) = run_native(file, &path, &scenario, dir.path());
    eprintln!("{file}: {:?}, notes {:?}", result.verdict, result.notes);
    let acted = effects_of(&outcome.history, eosim_sim::effects::kind::ADD_PARTITIONS) > 0;
    assert!(acted, "{file}: no add-partitions effect");
    let partitions_read = outcome
        .history
        .ops
        .iter()
        .filter(|op| matches!(&op.value, Value::LogState { .. }))
        .count();
    assert_eq!(
        partitions_read, 4,
        "{file}: the final read missed added partitions"
    );
    assert_short_and_clean(&result, 120.0);
    result.verdict
}

/// The `clog` canary pair on real services: streams-0's cgroup is cut off from every
/// process for 14 s, past the session timeout. Under at_least_once the zombie's stale
/// counts land after its successor's (`aggregate-under-count`), under exactly_once_v2 its
/// transaction is fenced and the counts hold; the clog acts in both. By hand before this
/// test: unsafe violated in 3 of 3 runs (2026-12-04, 2026-12-06), safe held.
///
/// The unsafe file is caught only when streams-0 has updates in hand at the clog (4 s, a
/// wall-clock time) that its successor overwrites before they land. In simulation 2 of 10
/// seeds hold (seed 2: streams-0 idle at the clog; seed 3: its stale update not
/// overtaken); slowing it to be always busy (`process_ms = 300`) left the successor too far
/// behind to overtake anything (2 of 10 violated), and a later clog missed more seeds
/// still (3 of 10 at 6 s, 1 of 10 at 8 s). On real 3 of 12 runs held, about one in four
/// as in simulation: two where streams-0 had no task yet at the clog (the instances get
/// theirs 3 to 4 s into the run), one where it had one. So each run must be violated with
/// `aggregate-under-count` alone or hold with no forbidden anomaly (the tasks streams-0
/// restored before the clog printed), and the file runs again until it is violated: up to
/// five runs in which streams-0 had a task at the clog (all five holding: about one test
/// in a thousand). A run where it had none could not be caught and does not count: on a
/// loaded machine the instances get their tasks later (2026-12-07: five runs of five
/// held while a build shared the two cores, streams-0 taskless at the clog each time);
/// at most ten runs in all. The safe twin must hold.
#[test]
fn a_clogged_streams_instance_under_counts_at_least_once_and_not_exactly_once_on_real_kafka() {
    if !real_enabled("a_clogged_streams_instance_under_counts_at_least_once") {
        return;
    }
    let file = "canary-clog-unsafe";
    let (mut caught, mut exercised) = (false, 0);
    for attempt in 1..=10 {
        let (outcome, result) = run_clog_canary(file);
        let tasks = tasks_before_fault(&outcome.history, "streams-0", "clog");
        eprintln!(
            "{file} attempt {attempt}: {:?}; streams-0's tasks before the clog: {tasks:?}",
            result.verdict
        );
        if result.verdict == Verdict::Violated {
            let anomalies = result.forbidden_anomalies.keys().collect::<Vec<_>>();
            assert_eq!(anomalies, ["aggregate-under-count"], "{file}");
            caught = true;
            break;
        }
        assert_judged(file, &result, None);
        exercised += usize::from(!tasks.is_empty());
        if exercised == 5 {
            break;
        }
    }
    assert!(
        caught,
        "{file} held in every run ({exercised} with a task of streams-0's at the clog)"
    );
    let (_, result) = run_clog_canary("canary-clog-safe");
    assert_judged("canary-clog-safe", &result, None);
}

/// One run of a clog canary file: the clog acted, within its budget, nothing left behind.
fn run_clog_canary(file: &str) -> (RealOutcome, ScenarioResult) {
    let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
    let dir = service_dir("real-run-clog");
    let (outcome, result) = run_native(file, &path, &scenario, dir.path());
    let acted = effects_of(&outcome.history, eosim_sim::effects::kind::CLOG) > 0;
    assert!(acted, "{file}: no clog effect; notes {:?}", result.notes);
    assert_short_and_clean(&result, 120.0);
    (outcome, result)
}

/// The input partitions whose task `process` restored before the history's first `fault`.
fn tasks_before_fault(history: &eosim::history::History, process: &str, fault: &str) -> Vec<u32> {
    let at = fault_time(history, fault, 0).unwrap_or(u64::MAX);
    (history.ops.iter())
        .filter(|op| op.process == process && op.time_ns < at)
        .filter_map(|op| match &op.value {
            Value::StreamsRestore { tp, .. } => Some(tp.partition),
            _ => None,
        })
        .collect()
}

/// `messages` on `keeper` on real services: a proxy reading ZooKeeper's frames sits in
/// front of ZooKeeper, started before ClickHouse, and since ClickHouse 18.16 has no
/// KeeperMap the fault from `clickhouse` to `keeper` reaches the sink tasks' own
/// ZooKeeper sessions (where the KeeperMap rows live on real). Their requests are dropped
/// and their answers lost while the fault holds, and the seed variant writes duplicates as
/// in simulation (58 of 60 seeds): a dropped AFTER write sends the retry through BEFORE
/// into a second insert. Violated in 14 runs of 14 (2026-12-07); each run must show
/// the fault acting on a sink task's session and hold or show only the seed design's known
/// anomalies ([`assert_seed_design_anomalies_only`]), and the file runs again, up to three
/// times, until `sink-duplicate` is among them. Two early real
/// runs (ZooKeeper calls bounded at 10 s, not yet at the connector's 2 s) also lost rows
/// (`sink-lost`, 30 rows of `events-1` in the dead-letter queue: a redelivered batch
/// `[0..29]` below its stored BEFORE `[18..29]`, the seed's unhandled `below-min` case,
/// under `errors.tolerance = all`), which the simulation has not shown under this fault:
/// allowed beside `sink-duplicate` (a real outcome of the design), nothing else is.
#[test]
fn lost_zookeeper_messages_reach_the_sink_tasks_sessions_and_the_seed_variant_duplicates() {
    if !real_enabled("lost_zookeeper_messages_reach_the_sink_tasks_sessions") {
        return;
    }
    let file = "p1-keeper-lost-responses-seed-duplicates";
    let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
    let caught = (1..=3).any(|attempt| {
        let dir = service_dir("real-run-keeper-messages");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        let on_tasks = |kind: &str| {
            (outcome.history.ops.iter())
                .filter(|op| op.process.starts_with("worker-"))
                .filter(|op| {
                    matches!(&op.value, Value::Effect { kind: k, detail }
                    if k == kind && detail.contains("keeper"))
                })
                .count()
        };
        let (dropped, lost) = (
            on_tasks("messages.drop-request"),
            on_tasks("messages.drop-response"),
        );
        eprintln!(
            "{file} attempt {attempt}: {:?}; {dropped} requests of the sink tasks to \
             ZooKeeper dropped, {lost} answers lost",
            result.verdict
        );
        assert!(
            dropped + lost > 0,
            "no request of a sink task to ZooKeeper dropped nor answer lost; notes {:?}",
            result.notes
        );
        assert_short_and_clean(&result, 150.0);
        assert_seed_design_anomalies_only(&result);
        result.forbidden_anomalies.contains_key("sink-duplicate")
    });
    assert!(caught, "{file} held in three runs of three");
}

/// A partition between `clickhouse` and `keeper` on real services cuts the sink tasks'
/// ZooKeeper sessions too (they hold ClickHouse's KeeperMap rows on real, where 18.16 has
/// none), as it cuts ClickHouse's KeeperMap traffic in simulation: the cut links' dropped
/// packets name a worker. Holds in simulation (20 of 20 seeds) and held on real in 3 runs
/// of 3 (2026-12-07); the seed design's known anomalies under Keeper faults are allowed,
/// nothing else ([`assert_seed_design_anomalies_only`]).
#[test]
fn a_partition_of_clickhouse_from_keeper_cuts_the_sink_tasks_zookeeper_sessions() {
    if !real_enabled("a_partition_of_clickhouse_from_keeper_cuts_the_sink_tasks") {
        return;
    }
    let file = "p1-keeper-lost-responses-seed-duplicates";
    let (path, _) = scenario_at(&format!("../scenarios/{file}.toml"));
    let text = std::fs::read_to_string(&path).expect("the file reads");
    let from = text.find("fault = \"messages\"").expect("a messages fault");
    let to = text[from..]
        .find("\n\n")
        .map(|i| from + i)
        .expect("its end");
    let partition = "fault = \"partition\"\nsource = [\"clickhouse\"]\ntarget = [\"keeper\"]";
    let text = format!("{}{partition}{}", &text[..from], &text[to..]);
    let scenario = Scenario::parse(&path, &text).expect("the scenario parses");
    let dir = service_dir("real-run-keeper-partition");
    let (outcome, result) = run_native("clickhouse cut from keeper", &path, &scenario, dir.path());
    let cut_workers: Vec<&str> = (outcome.history.ops.iter())
        .filter_map(|op| match &op.value {
            Value::Effect { kind, detail } if kind == eosim_sim::effects::kind::PARTITION => {
                Some(detail.as_str())
            }
            _ => None,
        })
        .filter(|d| d.contains("worker-") && d.contains("keeper"))
        .collect();
    assert!(
        !cut_workers.is_empty(),
        "no packet between a sink task and ZooKeeper dropped; notes {:?}",
        result.notes
    );
    assert_seed_design_anomalies_only(&result);
    assert_short_and_clean(&result, 150.0);
}

/// Keeps the history of a run that failed its test under `CARGO_TARGET_TMPDIR/kept/` (the
/// run's own directory is removed with it) and prints its Streams tasks' starts, recoveries
/// and final reads, so a rare failure can be read afterwards.
fn keep_history(file: &str, outcome: &RealOutcome) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("kept");
    std::fs::create_dir_all(&dir).expect("the kept directory");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = dir.join(format!("{}-{stamp}.jsonl", file.replace('/', "_")));
    std::fs::write(&path, outcome.history.to_jsonl()).expect("the history writes");
    eprintln!("{file}: history kept at {}", path.display());
    for op in &outcome.history.ops {
        let streams = matches!(
            op.value,
            Value::StreamsRecover { .. } | Value::StreamsRestore { .. }
        );
        if streams || op.process == "final" {
            eprintln!("  {}", eosim::history::text::format_op(op));
        }
    }
}

/// A real run of the ClickHouse sink's seed design under Keeper faults: it holds, or it is
/// violated with what the design is known to do under them, nothing else: `sink-duplicate`
/// (a retry from BEFORE inserts a batch again) and `sink-lost` (a redelivered batch below
/// its stored range, the seed's unhandled `below-min` case, goes to the dead-letter queue
/// under `errors.tolerance = all`). A stall, or any other anomaly, fails.
fn assert_seed_design_anomalies_only(result: &ScenarioResult) {
    let anomalies: Vec<&String> = result.forbidden_anomalies.keys().collect();
    let known = ["sink-duplicate", "sink-lost"];
    let expected = match result.verdict {
        Verdict::Holds => anomalies.is_empty(),
        Verdict::Violated => anomalies.iter().all(|a| known.contains(&a.as_str())),
        _ => false,
    };
    assert!(
        expected,
        "{:?} with {anomalies:?}; notes {:?}",
        result.verdict, result.notes
    );
}

/// A broker with a message proxy in front of it (each client, and each broker, reaches it
/// through the proxy's port) is still cut off by a `partition`: the proxy's port counts as
/// the broker's in the nftables rules, so the consumers' packets to it are dropped.
#[test]
fn a_partition_cuts_the_clients_of_a_broker_behind_its_message_proxy() {
    if !real_enabled("a_partition_cuts_the_clients_of_a_broker_behind_its_message_proxy") {
        return;
    }
    let (path, _) = smoke_scenario();
    let text = std::fs::read_to_string(&path).expect("the smoke scenario reads");
    let faults = text.find("[faults]").expect("a [faults] section");
    let drain = text.find("[drain]").expect("a [drain] section");
    let at = |ms: u32, fault: &str| format!("[[faults.schedule]]\nat_ms = {ms}\n{fault}\n\n");
    let text = format!(
        "{}[faults]\nuntil_ms = 7000\n\n{}{}{}{}",
        &text[..faults],
        at(
            1000,
            "fault = \"messages\"\nsource = [\"producer-0\"]\ntarget = [\"broker-1\"]\n\
             delay_ms_max = 5"
        ),
        at(
            2000,
            "fault = \"partition\"\nsource = [\"consumer-0\", \"consumer-1\"]\n\
             target = [\"broker-1\"]\none_way = true"
        ),
        at(5000, "fault = \"heal\""),
        &text[drain..]
    );
    let scenario = Scenario::parse(&path, &text).expect("the scenario parses");
    let dir = service_dir("real-run-proxied-partition");
    let (outcome, result) = run_native("a proxied broker cut off", &path, &scenario, dir.path());
    assert_eq!(result.verdict, Verdict::Holds, "notes {:?}", result.notes);
    let dropped: Vec<String> = (outcome.history.ops.iter())
        .filter_map(|op| match &op.value {
            Value::Effect { kind, detail } if kind == eosim_sim::effects::kind::PARTITION => {
                Some(detail.clone())
            }
            _ => None,
        })
        .collect();
    assert!(
        dropped.iter().any(|d| d.contains("to broker-1")),
        "no consumer packet to the proxied broker dropped: {dropped:?}"
    );
    assert_short_and_clean(&result, 120.0);
}

/// A `kill-leader` asking for a machine crash is never carried out as a plain process
/// kill: with root and /dev/fuse the leader's broker is SIGKILLed and its lossy file
/// system drops what it had not fsynced (the effect says how much); without them it is
/// noted as not injected, naming why, and nothing is killed.
#[test]
fn a_kill_leader_machine_crash_is_a_lossy_crash_or_noted_never_a_process_kill() {
    if !real_enabled("a_kill_leader_machine_crash_is_a_lossy_crash_or_noted") {
        return;
    }
    let (path, _) = smoke_scenario();
    let text = std::fs::read_to_string(&path).expect("the smoke scenario reads");
    let faults = text.find("[faults]").expect("a [faults] section");
    let drain = text.find("[drain]").expect("a [drain] section");
    let text = format!(
        "{}[faults]\nuntil_ms = 4000\n\n[[faults.schedule]]\nat_ms = 2000\nfault = \
         \"kill-leader\"\ntopic = \"events\"\npartition = 0\nmode = \"machine-crash\"\n\n{}",
        &text[..faults],
        &text[drain..]
    )
    .replace("records = 2000", "records = 300");
    let scenario = Scenario::parse(&path, &text).expect("the scenario parses");
    let dir = service_dir("real-run-machine-crash");
    let (outcome, result) = run_native("a kill-leader machine crash", &path, &scenario, dir.path());
    let lines = fault_lines(&outcome.history);
    match eosim::real::lazyfs::available() {
        Ok(()) => {
            assert_eq!(
                lines[0], "kill target=[broker-1] mode=machine-crash",
                "{lines:?}"
            );
            assert!(
                lines.iter().all(|l| !l.contains("process-kill")),
                "{lines:?}"
            );
            assert_eq!(effects_of(&outcome.history, "kill-leader"), 1);
            assert!(
                (result.notes.iter()).any(|n| n.contains("machine crash of broker-1")),
                "{:?}",
                result.notes
            );
        }
        Err(why) => {
            assert_eq!(lines, Vec::<String>::new());
            assert!(
                (result.notes.iter())
                    .any(|n| n.contains("fault `kill-leader` not injected") && n.contains(&why)),
                "{:?}",
                result.notes
            );
        }
    }
    assert_short_and_clean(&result, 120.0);
}

#[test]
fn p2_upsert_with_a_worker_killed_mid_run_is_exact_on_real_kafka_and_postgres() {
    let test = "p2_upsert_with_a_worker_killed_mid_run_is_exact_on_real_kafka_and_postgres";
    if !real_enabled(test) {
        return;
    }
    let (path, scenario) = scenario_at("../scenarios/real/connect-jdbc-upsert-worker-crash.toml");
    let dir = service_dir("real-run-p2");
    let what = "real run of the P2 scenario";
    let (outcome, result) = run_and_judge(what, &path, &scenario, dir.path(), "connect-1");
    // The change-data checker had a final table to judge: every key the events leave
    // present is a row.
    let rows = outcome.history.ops.iter().find_map(|op| match &op.value {
        Value::TableState { rows, .. } => Some(rows.len()),
        _ => None,
    });
    assert!(rows.is_some_and(|n| n > 0), "table rows: {rows:?}");
    let m = result
        .measured
        .as_ref()
        .expect("throughput and latency are measured");
    let events = scenario
        .cdc
        .generate
        .as_ref()
        .expect("generated events")
        .events;
    assert_eq!(m.records_acked, events);
    assert!(
        m.rows_written >= events - events / 4,
        "rows written {}",
        m.rows_written
    );
    assert!(m.sink_put_rows_per_s.is_some_and(|r| r > 0.0));
    // The JDBC sink keeps no state store.
    assert_eq!(m.state_store, None);
    let methods: Vec<&str> = m.bulk_loads.iter().map(|b| b.method.as_str()).collect();
    assert_eq!(methods, ["COPY FROM STDIN", "one multi-row INSERT"]);
    for b in &m.bulk_loads {
        assert!(b.rows > 0 && b.rows <= events, "{b:?}");
        assert!(b.rows_per_s > 0.0 && b.sink_ratio > 0.0, "{b:?}");
    }
    assert_short_and_clean(&result, 150.0);
}

/// P1's crash smoke: `worker-0` ends itself at the fault point `between-insert-and-after`
/// of its first batch, once (its restart is not armed), and the seed design inserts the
/// redelivered batch again: VIOLATED with sink-duplicate, on every run.
#[test]
fn p1_seed_crashed_between_insert_and_after_duplicates_on_real_services() {
    let test = "p1_seed_crashed_between_insert_and_after_duplicates_on_real_services";
    if !real_enabled(test) {
        return;
    }
    let relative = "../scenarios/real/clickhouse-sink-seed-crash-after-insert-duplicates.toml";
    let (path, scenario) = scenario_at(relative);
    let dir = service_dir("real-run-p1");
    let (outcome, result) = run_native("real run of the P1 crash", &path, &scenario, dir.path());
    assert_eq!(
        result.verdict,
        Verdict::Violated,
        "notes: {:?}",
        result.notes
    );
    let forbidden: Vec<&str> = result
        .forbidden_anomalies
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(forbidden, ["sink-duplicate"], "{:?}", result.anomalies);
    assert_eq!(
        fault_lines(&outcome.history),
        [
            "kill target=[worker-0] fault-point=between-insert-and-after",
            "restart target=[worker-0]"
        ]
    );
    // The seed design's state store, counted apart from its inserts: a read and two
    // writes per put of the surviving puts (one record each), so about twice as many
    // writes as reads.
    let m = result.measured.as_ref().expect("measured");
    let store = m
        .state_store
        .as_ref()
        .expect("the sink's state store is measured");
    assert!(store.reads > 0 && store.writes >= store.reads, "{store:?}");
    assert!(store.put_share > 0.0 && store.put_share < 1.0, "{store:?}");
    assert_short_and_clean(&result, 120.0);
}

#[test]
fn a_pipeline_the_real_backend_does_not_run_is_reported_skipped() {
    let (path, scenario) = scenario_at(
        "../scenarios/field/doris-connector-read-uncommitted-aborted-txn-corrupts.toml",
    );
    let notes = skipped(&path, &scenario, Backend::Native);
    assert!(
        notes[0].starts_with("skipped: pipeline doris-sink"),
        "{notes:?}"
    );
}

/// F9 on real Kafka: a copier whose second transaction aborts (an injected produce error)
/// and which reads on past the aborted input loses it from the output while its offsets
/// commit past it; the copier that seeks back to the committed offsets copies every record
/// once. The same loop (`eosim::copier`) runs in simulation, where the pair has the same
/// verdicts.
#[test]
fn a_copier_that_does_not_rewind_after_an_abort_loses_input_on_real_kafka() {
    if !real_enabled("a_copier_that_does_not_rewind_after_an_abort_loses_input") {
        return;
    }
    for (file, expected) in [
        ("f9-no-rewind-loses-input", Verdict::Violated),
        ("f9-rewind-on-abort", Verdict::Holds),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
        let dir = service_dir("real-run-copy");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        assert_eq!(result.verdict, expected, "{file}: notes {:?}", result.notes);
        if expected == Verdict::Violated {
            let caught = result.forbidden_anomalies.keys().collect::<Vec<_>>();
            assert_eq!(
                caught,
                ["offsets-for-aborted-output", "sink-lost"],
                "{file}"
            );
        }
        let txns = |kind: OpKind| {
            let ops = outcome.history.ops.iter();
            ops.filter(|op| op.kind == kind && matches!(op.value, Value::Txn { .. }))
                .count()
        };
        assert!(txns(OpKind::Ok) > 0, "{file}: no transaction committed");
        assert!(
            txns(OpKind::Fail) > 0,
            "{file}: the injected abort is not in the history"
        );
        assert_short_and_clean(&result, 120.0);
    }
}

#[test]
fn streams_standbys_are_reported_skipped_on_the_real_backend() {
    let (path, scenario) = scenario_at("../scenarios/p3-eos-standby-promoted.toml");
    let notes = skipped(&path, &scenario, Backend::Native);
    assert!(
        notes[0].contains("rdkafka cannot plug into the consumer group"),
        "{notes:?}"
    );
}

#[test]
fn p3_streams_eos_with_an_instance_killed_mid_run_counts_exactly_on_real_kafka() {
    if !real_enabled("p3_streams_eos_with_an_instance_killed_mid_run_counts_exactly_on_real_kafka")
    {
        return;
    }
    let (path, scenario) = scenario_at("../scenarios/real/streams-eos-instance-crash.toml");
    let dir = service_dir("real-run-streams");
    let what = "real run of the Streams EOS scenario";
    let (outcome, _) = run_and_judge(what, &path, &scenario, dir.path(), "streams-0");
    // Every input record made one committed update, and the restarted instance opened
    // tasks again (restoring their stores from the real changelog; how much it restores
    // depends on what was committed before the kill, which wall-clock timing decides).
    let updates: usize = outcome
        .history
        .ops
        .iter()
        .filter_map(|op| match &op.value {
            Value::StreamsOutput { records, .. } => Some(records.len()),
            _ => None,
        })
        .sum();
    assert_eq!(updates as u64, scenario.workload.records);
    let restarted_ns = fault_time(&outcome.history, "restart", 0).expect("the restart is recorded");
    let reopened = outcome.history.ops.iter().any(|op| {
        op.process == "streams-0"
            && op.time_ns > restarted_ns
            && matches!(op.value, Value::StreamsRestore { .. })
    });
    assert!(reopened, "the restarted instance opened tasks");
    assert_eq!(live_groups(), Vec::<i32>::new(), "no process left behind");
}

/// The transactional upstream (`[workload] "transactional.id"`, `eosim::upstream`) on real
/// Kafka: the producer writes 10-record transactions and aborts every third on purpose. A
/// sink group at the consumer's default read_uncommitted writes the aborted records into
/// its sink (`aborted-in-sink`); the same group at read_committed skips them and holds.
/// So do the copiers of `transactional-copy` (`[copy] "isolation.level"`) and a Streams
/// at_least_once count (`[streams] "consumer.isolation.level"`), whose read_uncommitted
/// twin over-counts. The same session runs in simulation, where the pairs have the same
/// verdicts. A run of a Streams at_least_once file expected to hold whose instance
/// recovered (and so replayed, as at_least_once may) and over-counted is run again, at
/// most three times; an over-count of the read_committed file was seen twice in about
/// twenty suites, each time on a machine loaded beside them.
#[test]
fn aborted_upstream_transactions_reach_a_read_uncommitted_sink_and_not_a_read_committed_one() {
    if !real_enabled("aborted_upstream_transactions_reach_a_read_uncommitted_sink") {
        return;
    }
    // (file, the anomaly that shows the aborted records were read; None: holds). The
    // kafka-consume pair, the consume-transform-produce copier pair and the Streams
    // at_least_once count pair (which reads read_uncommitted unless told otherwise).
    for (file, caught_by) in [
        (
            "field/kafka-read-uncommitted-aborted-txn-corrupts",
            Some("aborted-in-sink"),
        ),
        ("field/kafka-read-committed-skips-aborted-txn", None),
        (
            "field/stream-processor-read-uncommitted-aborted-txn-corrupts",
            Some("aborted-in-sink"),
        ),
        (
            "field/stream-processor-read-committed-skips-aborted-txn",
            None,
        ),
        (
            "p3-alo-transactional-upstream-aborted-counted-corrupts",
            Some("aggregate-over-count"),
        ),
        ("p3-alo-transactional-upstream-read-committed", None),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
        // At least once, a Streams instance that recovered (its partitions lost to a
        // session timeout on a loaded machine, a failed commit) replays from its committed
        // offsets and may count twice: the run did not test "without faults nothing is
        // replayed".
        let recovered_and_over_counted = |outcome: &RealOutcome, result: &ScenarioResult| {
            let replayed: Vec<&String> = (outcome.history.ops.iter())
                .filter_map(|op| match &op.value {
                    Value::StreamsRecover { reason, .. } => Some(reason),
                    _ => None,
                })
                .collect();
            let only_over_count =
                (result.forbidden_anomalies.keys()).all(|a| a == "aggregate-over-count");
            let excused = caught_by.is_none()
                && scenario.streams.processing_guarantee
                    == eosim::streams::ProcessingGuarantee::AtLeastOnce
                && result.verdict == Verdict::Violated
                && only_over_count
                && !replayed.is_empty();
            excused.then(|| format!("over-counted after a recovery {replayed:?}"))
        };
        let (outcome, result) = run_until_tested(
            file,
            "real-run-upstream",
            &path,
            &scenario,
            recovered_and_over_counted,
        );
        if caught_by.is_none() && result.verdict != Verdict::Holds {
            keep_history(file, &outcome);
        }
        assert_judged(file, &result, caught_by);
        // No faults: every send succeeds, so the run's transactions are exactly the planned
        // ones, and every third (numbers 2, 5, 8, 11) aborts.
        let w = &scenario.workload;
        let (per_txn, every) = (w.transaction_records.unwrap(), w.abort_every.unwrap());
        let planned: Vec<u64> = (0..w.records.div_ceil(per_txn))
            .filter(|n| (n + 1) % every == 0)
            .collect();
        let aborted: Vec<u64> = (outcome.history.ops.iter())
            .filter(|op| op.kind == OpKind::Fail)
            .filter(|op| op.error.as_deref() == Some("planned abort (abort_every)"))
            .filter_map(|op| match &op.value {
                Value::Txn { id, sends, .. } if sends.len() as u64 == per_txn => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(
            aborted, planned,
            "{file}: the planned aborts in the history"
        );
        assert_short_and_clean(&result, 90.0);
    }
}

/// A transactional upstream producer SIGKILLed inside a transaction: its next incarnation's
/// `init_transactions` aborts the transaction it left open, and records it aborted (with
/// the send in flight at the kill, if any: the state file kept it), so the read_committed
/// sink's skip of its records is no loss; the numbering goes on over the run.
///
/// The kill is at a wall-clock time, and the producer holds no open transaction between a
/// commit's request and its next send (about one time in ten on real Kafka: CI saw it
/// once). Each run asserts what its own history implies (one orphan when the kill found a
/// transaction open, none when it did not), and the file runs again, up to three times,
/// until a kill lands inside a transaction, so the abort by the successor is always shown.
#[test]
fn a_transactional_upstream_producer_killed_mid_transaction_is_aborted_by_its_successor() {
    if !real_enabled("a_transactional_upstream_producer_killed_mid_transaction") {
        return;
    }
    let (path, scenario) = scenario_at("../scenarios/real/upstream-txn-producer-crash.toml");
    let what = "real run of the upstream producer crash";
    let mut shown = false;
    for attempt in 1..=3 {
        let dir = service_dir("real-run-upstream-crash");
        let (outcome, result) = run_and_judge(what, &path, &scenario, dir.path(), "producer-0");
        let history = &outcome.history;
        let orphan = |op: &&eosim::history::Op| {
            op.kind == OpKind::Fail
                && op.error.as_deref()
                    == Some("aborted by the next producer incarnation's InitProducerId")
        };
        let orphans: Vec<usize> = (history.ops.iter().filter(orphan))
            .filter_map(|op| match &op.value {
                Value::Txn { sends, .. } => Some(sends.len()),
                _ => None,
            })
            .collect();
        let open = open_at_kill(history, "producer-0");
        eprintln!("attempt {attempt}: transaction open at the kill: {open}; orphans {orphans:?}");
        match open {
            true => assert_eq!(orphans.len(), 1, "one transaction left open by the kill"),
            // Killed between `begin_transaction` and its first send's record: an open
            // transaction of no sends, aborted all the same.
            false => assert!(
                orphans.is_empty() || orphans == [0],
                "no transaction was open at the kill, yet {orphans:?} were aborted"
            ),
        }
        // Numbers are unique over the run: each txn number is invoked once.
        let mut invoked: Vec<u64> = (history.ops.iter())
            .filter(|op| op.kind == OpKind::Invoke)
            .filter_map(|op| match &op.value {
                Value::Txn { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        let count = invoked.len();
        invoked.sort_unstable();
        invoked.dedup();
        assert_eq!(invoked.len(), count, "a transaction number used twice");
        assert_short_and_clean(&result, 90.0);
        if open {
            shown = true;
            break;
        }
    }
    assert!(
        shown,
        "in none of three runs did the kill land inside a transaction"
    );
}

/// Whether `process` held an open transaction when the history's first `kill` fault was
/// recorded: its last op before the kill is a send's (a `txn` op is the end of one
/// requested, a commit or an abort). A kill before any op finds none open.
fn open_at_kill(history: &eosim::history::History, process: &str) -> bool {
    let kill_ns = fault_time(history, "kill", 0).expect("a kill in the history");
    let last = (history.ops.iter().rev())
        .filter(|op| op.process == process && op.time_ns <= kill_ns)
        .find(|op| matches!(op.value, Value::Send { .. } | Value::Txn { .. }));
    matches!(last.map(|op| &op.value), Some(Value::Send { .. }))
}

/// Two brokers beside a dedicated KRaft controller (two combined nodes would lose their
/// quorum with either down): the unclean-election field pair on real Kafka. The link
/// between the brokers is cut, so the follower falls out of the ISR while the controller
/// still hears both; then the leader is killed. With `acks=1` and
/// `unclean.leader.election.enable=true` the out-of-sync follower is elected and the
/// acknowledged writes it never fetched are lost (`lost-write`); with `acks=all`,
/// `min.insync.replicas=2` and clean elections nothing acknowledged is lost. The simulation
/// gives both files the same verdicts.
#[test]
fn two_brokers_beside_a_dedicated_controller_lose_acked_writes_only_to_an_unclean_election() {
    if !real_enabled("two_brokers_beside_a_dedicated_controller") {
        return;
    }
    for (file, lost) in [
        ("kafka-acks-1-unclean-election-loses", true),
        ("kafka-acks-all-clean-election", false),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/field/{file}.toml"));
        assert_eq!(scenario.cluster.brokers, 2, "{file}");
        let dir = service_dir("real-run-two-brokers");
        let (_, result) = run_native(file, &path, &scenario, dir.path());
        assert_judged(file, &result, lost.then_some("lost-write"));
        // The cut acted: the heal counted packets dropped on the brokers' link.
        let healed = result.notes.iter().any(|n| n.contains("packet(s) dropped"));
        assert!(healed, "{file}: {:?}", result.notes);
        assert_short_and_clean(&result, 90.0);
    }
}

/// The unsynced bytes a machine crash's effect says its lossy file system dropped, summed
/// over the run (`... lost: N unsynced bytes in F file(s) ...`).
fn dropped_bytes(history: &eosim::history::History) -> u64 {
    history
        .ops
        .iter()
        .filter_map(|op| match &op.value {
            Value::Effect { kind, detail } if kind == "kill" => detail
                .split("lost: ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok(),
            _ => None,
        })
        .sum()
}

/// The power-loss field pair on real Kafka: three brokers' machines crash at once
/// (SIGKILL, then each data directory's lossy file system drops what was not fsynced,
/// `real::lazyfs`). With Kafka's default `log.flush.*` nothing appended since the topic was
/// created is on disk, so acknowledged writes are lost (`lost-write`); with
/// `log.flush.interval.messages=1` every append is fsynced before it is acknowledged, and
/// nothing acknowledged is lost. The simulation gives both files the same verdicts. Needs
/// root and /dev/fuse: without them the crashes are noted as not injected and the pair is
/// not run.
#[test]
fn a_power_loss_of_every_broker_loses_acked_writes_only_with_the_default_flush() {
    if !real_enabled("a_power_loss_of_every_broker") {
        return;
    }
    if let Err(why) = eosim::real::lazyfs::available() {
        eprintln!("skipped: {why}");
        return;
    }
    for (file, lost) in [
        ("kafka-power-loss-default-flush-loses", true),
        ("kafka-power-loss-flush-every-message", false),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/field/{file}.toml"));
        let dir = service_dir("real-run-power-loss");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        assert_judged(file, &result, lost.then_some("lost-write"));
        let lines = fault_lines(&outcome.history);
        for b in 1..=3 {
            let crash = format!("kill target=[broker-{b}] mode=machine-crash");
            assert!(lines.contains(&crash), "{file}: {lines:?}");
        }
        assert_eq!(effects_of(&outcome.history, "kill"), 3, "{file}");
        // The default flush left the appended records unsynced: the crash dropped them.
        if lost {
            assert!(
                dropped_bytes(&outcome.history) > 0,
                "{file}: nothing dropped"
            );
        }
        assert_short_and_clean(&result, 150.0);
    }
}

/// Whether `process` had a send in flight while the history's first `messages` fault was
/// on: a send invoked before the `heal` after it, completed after the fault was recorded.
fn sent_through_message_faults(history: &eosim::history::History, process: &str) -> bool {
    let Some(from) = fault_time(history, "messages", 0) else {
        return false;
    };
    let to = fault_time(history, "heal", from).unwrap_or(u64::MAX);
    let sends = |kind: OpKind| {
        (history.ops.iter())
            .filter(move |op| op.process == process && op.kind == kind)
            .filter_map(|op| match op.value {
                Value::Send { id, .. } => Some((id, op.time_ns)),
                _ => None,
            })
    };
    let invoked: std::collections::HashMap<u64, u64> = sends(OpKind::Invoke).collect();
    sends(OpKind::Ok).any(|(id, done)| done > from && invoked.get(&id).is_some_and(|&t| t < to))
}

/// Clock jumps on real: the timestamps the producer stamps stepped back (its wall clock).
/// Two days back is past `producer.id.expiration.ms` (1 day): the real broker forgets the
/// producer at its next scan (every second here), so a batch whose response was lost and
/// that the producer retries is appended again (`duplicate`, `sink-duplicate`). One hour
/// back stays within it and the retries are deduplicated; two hours ahead, past
/// `log.message.timestamp.after.max.ms`, every send is refused with `INVALID_TIMESTAMP`. The
/// simulation gives all three files the same verdicts. Every run must show a record
/// carrying the jump (the producer's `clock-jump` effect); the pair, a send of producer-0 in
/// flight while responses were lost (300 records, 6 s of sending at the least, past the
/// heal at 6 s: with 100 a fast start could finish before the loss began at 3 s) and the
/// lost responses (`messages.drop-response`).
#[test]
fn a_producer_clock_stepped_back_past_the_expiration_duplicates_on_real_kafka() {
    if !real_enabled("a_producer_clock_stepped_back_past_the_expiration") {
        return;
    }
    for (file, duplicated) in [
        ("clock-jump-back-expires-producer-duplicates", true),
        ("clock-jump-within-expiration", false),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
        let dir = service_dir("real-run-clock-jump");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        // What both verdicts rest on: producer-0 still sending while its responses were
        // lost (a producer done before 3 s would leave the faults nothing to act on).
        assert!(
            sent_through_message_faults(&outcome.history, "producer-0"),
            "{file}: no send of producer-0 in flight between the messages fault and the heal; \
             notes {:?}",
            result.notes
        );
        assert_judged(file, &result, duplicated.then_some("duplicate"));
        let lines = fault_lines(&outcome.history);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("clock-jump target=[producer-0]")),
            "{file}: {lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("clock-reset")),
            "{file}: {lines:?}"
        );
        assert!(effects_of(&outcome.history, "clock-jump") >= 1, "{file}");
        assert!(
            effects_of(&outcome.history, "messages.drop-response") >= 1,
            "{file}"
        );
        assert!(
            result.not_exercised.is_empty(),
            "{file}: {:?}",
            result.not_exercised
        );
        assert_short_and_clean(&result, 120.0);
    }
    // Two hours ahead: Kafka 4's leaders refuse every record stamped more than
    // `log.message.timestamp.after.max.ms` (one hour) ahead, as the model does.
    let file = "clock-jump-ahead-past-timestamp-window-refused";
    let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
    let dir = service_dir("real-run-clock-jump");
    let (outcome, result) = run_native(file, &path, &scenario, dir.path());
    assert_eq!(result.verdict, Verdict::Holds, "{file}: {:?}", result.notes);
    assert!(effects_of(&outcome.history, "clock-jump") >= 1, "{file}");
    let refused = outcome
        .history
        .ops
        .iter()
        .filter(|op| {
            op.error
                .as_deref()
                .is_some_and(|e| e.contains("InvalidTimestamp"))
        })
        .count();
    assert!(
        refused > 0,
        "{file}: no send refused with INVALID_TIMESTAMP"
    );
    assert_short_and_clean(&result, 120.0);
}

/// `connect-source` on real Kafka: the Debezium source task's worker `connect-1` SIGKILLed
/// at 8.5 s and restarted at 10.2 s. At least once, the restarted task resumes from the
/// last offsets flushed (every 5 s) and emits every change event sent since again
/// (`sink-duplicate`); under KIP-618 the kill leaves a transaction open, the restarted
/// task's InitProducerId aborts it and it resumes from the offsets its last committed
/// transaction stored: each event once in the read_committed view. The simulation gives
/// both files the same verdicts. The source database is still the simulation's model (the
/// same change log in every incarnation); Kafka, the transactions and the offsets topic
/// are real.
#[test]
fn a_source_task_killed_between_offset_flushes_duplicates_unless_it_runs_kip618_on_real_kafka() {
    if !real_enabled("a_source_task_killed_between_offset_flushes") {
        return;
    }
    for (file, duplicated) in [
        ("connect-source-at-least-once-worker-crash-duplicates", true),
        ("connect-source-kip618-exactly-once-worker-crash", false),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/field/{file}.toml"));
        let dir = service_dir("real-run-connect-source");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        assert_judged(file, &result, duplicated.then_some("sink-duplicate"));
        assert_eq!(
            fault_lines(&outcome.history),
            [
                "kill target=[connect-1] mode=process-kill",
                "restart target=[connect-1]"
            ],
            "{file}"
        );
        assert_eq!(effects_of(&outcome.history, "kill"), 1, "{file}");
        let ops = || outcome.history.ops.iter();
        let running = |op: &&eosim::history::Op| {
            let task = matches!(&op.value, Value::TaskStatus { state, .. } if state == "RUNNING");
            task && op.process == "connect-1"
        };
        let started = ops().filter(running).count();
        assert_eq!(started, 2, "{file}: the task runs in two incarnations");
        if !duplicated {
            let committed = ops()
                .filter(|op| op.kind == OpKind::Ok && matches!(op.value, Value::Txn { .. }))
                .count();
            assert!(committed > 0, "{file}: no source transaction committed");
        }
        assert!(
            result
                .notes
                .iter()
                .any(|n| n.contains("source database is still")),
            "{file}: {:?}",
            result.notes
        );
        assert_short_and_clean(&result, 75.0);
    }
}

/// PostgreSQL's `synchronous_commit` on real: the server killed twice under a 10 s
/// `wal_writer_delay`. With `off`, COMMIT answers before its WAL is flushed and each kill
/// loses what was committed since the WAL writer's last cycle; the sink had its answers and
/// committed the offsets, so rows are missing from the final table (`cdc-final-state`).
/// With `on` (the default) nothing answered is lost and the final table is exact. The
/// kills fall 0 to 10 s after a cycle while batches commit every few hundred ms, so at
/// least one of the two finds commits to lose but for a kill within the first commit gap
/// after a cycle, twice.
#[test]
fn a_postgres_crash_loses_answered_commits_only_under_synchronous_commit_off() {
    if !real_enabled("a_postgres_crash_loses_answered_commits_only_under_synchronous_commit_off") {
        return;
    }
    for (file, caught_by) in [
        (
            "p2-upsert-database-crash-synchronous-commit-off-loses",
            Some("cdc-final-state"),
        ),
        ("p2-upsert-database-crash-synchronous-commit-on", None),
    ] {
        let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
        let dir = service_dir("real-run-synchronous-commit");
        let (outcome, result) = run_native(file, &path, &scenario, dir.path());
        let kills = &result.fault_effects["kill"];
        assert_eq!((kills.scheduled, kills.acted), (2, 2), "{file}: {kills:?}");
        assert_eq!(
            fault_lines(&outcome.history),
            [
                "kill target=[postgres] mode=process-kill",
                "restart target=[postgres]",
                "kill target=[postgres] mode=process-kill",
                "restart target=[postgres]",
            ],
            "{file}"
        );
        assert_judged(file, &result, caught_by);
        assert_short_and_clean(&result, 150.0);
    }
}

/// Persistent Streams stores on real: `streams-0` (exactly_once_v2) killed and restarted.
/// Its stores and process id were flushed into the run's state directory, which outlived
/// the process: the restart reads the same process id back (so the same
/// `transactional.id`, whose InitProducerId fences the dead transaction) and opens its
/// tasks from that disk, each store without a checkpoint wiped as EOS requires.
#[test]
fn a_restarted_streams_instance_reads_back_its_persistent_stores_and_process_id_on_real_kafka() {
    if !real_enabled("a_restarted_streams_instance_reads_back_its_persistent_stores") {
        return;
    }
    let file = "p3-eos-crash-persistent-store-fences-by-init";
    let (path, scenario) = scenario_at(&format!("../scenarios/{file}.toml"));
    let dir = service_dir("real-run-persistent-store");
    let what = "real run of the persistent-store crash";
    let (outcome, result) = run_and_judge(what, &path, &scenario, dir.path(), "streams-0");
    let state = dir.path().join("sink/streams-state/streams-0");
    let id = std::fs::read_to_string(state.join("kafka-streams-process-metadata"))
        .expect("streams-0 wrote its process id into the state directory");
    assert_eq!(id.trim().len(), 36, "a UUID: {id:?}");
    // Each incarnation logs its process id: the first drew it, the restart read it back.
    let log = std::fs::read_to_string(dir.path().join("logs/streams-0.log")).expect("log");
    let starts: Vec<&str> = log.lines().filter(|l| l.contains("process id")).collect();
    assert_eq!(
        starts,
        [
            format!("streams-0: process id {} (fresh)", id.trim()),
            format!(
                "streams-0: process id {} (read from the state directory)",
                id.trim()
            ),
        ],
    );
    let restart_ns = fault_time(&outcome.history, "restart", 0).expect("a restart");
    // Every store the restarted instance opened is a persistent one: read from the disk
    // where it had flushed that task (wiped when without checkpoint, as EOS deletes it
    // while a task runs), empty where it had not (which task it gets back is the group's).
    let labels: Vec<&str> = (outcome.history.ops.iter())
        .filter(|op| op.process == "streams-0" && op.time_ns > restart_ns)
        .filter_map(|op| match &op.value {
            Value::StreamsRestore { store, .. } => Some(store.as_str()),
            _ => None,
        })
        .collect();
    assert!(!labels.is_empty(), "the restarted streams-0 opened no task");
    assert!(
        labels.iter().all(|l| l.starts_with("persistent")),
        "{labels:?}"
    );
    assert_short_and_clean(&result, 120.0);
}

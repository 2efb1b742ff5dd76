//! The ClickHouse exactly-once sink (SPEC.md P1), run by the Connect worker, on the field
//! cases F1 and F2: the seed's design fails both, the fenced variant with a dedup token
//! holds on the same schedules.

use eosim::checker::{Anomaly, Validity};
use eosim::cli::aggregate::check_options;
use eosim::history::{OpKind, Value};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use std::path::Path;

fn scenario(file: &str, variant: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    let mut s = Scenario::load(&path).expect("scenario parses");
    let sink = s.sink.as_mut().expect("a [sink] section");
    sink.variant = serde_json::from_value(serde_json::json!(variant)).expect("a variant");
    s
}

fn judge(s: &Scenario, seed: u64) -> (SeedOutcome, eosim::checker::CheckResult) {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "seed {seed} crashed");
    assert_eq!(outcome.stalled, None, "seed {seed} stalled");
    let result = eosim::checker::check_all(&outcome.history, &check_options(s));
    (outcome, result)
}

#[test]
fn f1_zombie_after_rebalance_duplicates_a_batch_on_the_seed_design() {
    let s = scenario("f1-zombie-after-rebalance-seed-duplicates.toml", "seed");
    let (outcome, result) = judge(&s, 1);
    assert_eq!(result.validity, Validity::Invalid);
    let dups = &result.anomalies[&Anomaly::SinkDuplicate];
    // Exactly A's stale batch [100..199] lands twice.
    assert_eq!(dups.len(), 100, "{:?}", result.case_texts(4));
    assert!(outcome
        .marks
        .contains_key("fault-point-fired:between-before-and-insert"));
    assert!(outcome.marks.contains_key("case:same:BEFORE"));
}

#[test]
fn f1_zombie_is_fenced_by_the_fenced_variant_on_the_same_schedule() {
    let s = scenario(
        "f1-zombie-after-rebalance-seed-duplicates.toml",
        "seed+token+fencing",
    );
    let (outcome, result) = judge(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    assert!(outcome
        .marks
        .contains_key("fault-point-fired:between-before-and-insert"));
    assert!(outcome
        .marks
        .contains_key("fencing:insert-refused-stale-owner"));
    // The zombie rewinds to its unwritten batch through SinkTaskContext::offset.
    assert!(outcome.marks.contains_key("fencing:rewind"));
}

#[test]
fn f2_redelivery_with_smaller_batches_loses_the_first_batch_to_the_dlq_on_the_seed_design() {
    let s = scenario("f2-redelivery-other-boundaries-seed-loses.toml", "seed");
    let (outcome, result) = judge(&s, 1);
    assert_eq!(result.validity, Validity::Invalid);
    let lost = &result.anomalies[&Anomaly::SinkLost];
    // [0..49] and [50..99] fall into "Contains while BEFORE" and go to the DLQ.
    assert_eq!(lost.len(), 100, "{:?}", result.case_texts(4));
    assert_eq!(outcome.marks.get("dlq:record"), Some(&100));
    assert!(outcome.marks.contains_key("case:contains:BEFORE"));
    // The worker's DLQ topic holds them, with Connect's context headers of the put stage.
    let dlq: Vec<_> = final_values(&outcome)
        .filter_map(|v| match v {
            Value::DlqState { records, .. } => Some(records.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(dlq.len(), 100);
    let ids: Vec<u64> = dlq.iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..100).collect::<Vec<_>>());
    let stage = dlq[0]
        .headers
        .iter()
        .find(|(k, _)| k == "__connect.errors.stage");
    assert_eq!(stage.map(|(_, v)| v.as_str()), Some("TASK_PUT"));
    // The restarted task polled batches of 50 because the operator put that config.
    let configs = outcome.history.ops.iter().filter(|op| {
        matches!(&op.value, Value::ConnectorConfig { config, .. }
            if config.get("consumer.override.max.poll.records").map(String::as_str) == Some("50"))
    });
    assert_eq!(configs.count(), 1);
}

fn final_values(outcome: &SeedOutcome) -> impl Iterator<Item = &Value> {
    let ops = outcome.history.ops.iter();
    ops.filter(|op| op.process == "final" && op.kind == OpKind::Ok)
        .map(|op| &op.value)
}

#[test]
fn f2_with_errors_tolerance_none_leaves_the_task_failed_in_the_herder() {
    let mut s = scenario("f2-redelivery-other-boundaries-seed-loses.toml", "seed");
    let sink = s.sink.as_mut().expect("[sink]");
    sink.errors_tolerance = "none".into();
    // With neither a DLQ topic nor errors.log.enable Connect gives the task no errant
    // record reporter and the report would be dropped silently; with the log reporter it
    // exists and, under errors.tolerance=none, fails the task.
    sink.errors_log_enable = true;
    let outcome = run_seed(&s, 1);
    let stalled = outcome
        .stalled
        .clone()
        .expect("a FAILED task stalls the run");
    assert!(
        stalled.contains("task ck-sink-0 FAILED on worker-0"),
        "{stalled}"
    );
    let failed = final_values(&outcome).any(|v| {
        matches!(v, Value::TaskStatus { state, trace: Some(t), .. }
            if state == "FAILED" && t.contains("Tolerance exceeded"))
    });
    assert!(
        failed,
        "the final task status is FAILED with the reporter's error"
    );
}

#[test]
fn f2_redelivery_is_reassembled_by_the_fenced_variant_on_the_same_schedule() {
    let s = scenario(
        "f2-redelivery-other-boundaries-seed-loses.toml",
        "seed+token+fencing",
    );
    let (outcome, result) = judge(&s, 1);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{:?}",
        result.case_texts(8)
    );
    assert!(outcome
        .marks
        .contains_key("token:hold-until-stored-range-covered"));
    assert_eq!(outcome.marks.get("dlq:record"), None);
}

#[test]
fn a_connector_config_the_herder_refuses_stalls_the_run_and_says_so() {
    let mut s = scenario("f2-redelivery-other-boundaries-seed-loses.toml", "seed");
    s.sink.as_mut().expect("[sink]").errors_tolerance = "some".into();
    let outcome = run_seed(&s, 1);
    let stalled = outcome.stalled.clone().expect("nothing is consumed");
    assert!(
        stalled.contains("connector ck-sink not created"),
        "{stalled}"
    );
    let refused = outcome.history.ops.iter().any(|op| {
        op.kind == OpKind::Fail
            && matches!(op.value, Value::ConnectorConfig { .. })
            && op
                .error
                .as_deref()
                .is_some_and(|e| e.contains("errors.tolerance"))
    });
    assert!(
        refused,
        "the operator's post is recorded as failed, naming the key"
    );
}

mod fencing {
    //! The fenced variant's task against the ClickHouse and Keeper nodes alone, driven
    //! call by call as the worker would: a fenced task rewinds through its context, and
    //! claims the partition again when it gets its records anyway.

    use eosim::client::sim::clickhouse::SimClickHouse;
    use eosim::connect::task::{
        ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
    };
    use eosim::sinks::clickhouse::{
        create_tables, ClickHouseSinkConfig, ClickHouseSinkTask, NoHooks,
    };
    use eosim_sim::clickhouse::keeper::Keeper;
    use eosim_sim::clickhouse::model::{ClickHouse, ServerConfig};
    use eosim_sim::clickhouse::service::{
        clickhouse_ip, keeper_ip, serve_clickhouse, serve_keeper, ClickHouseWorld,
    };
    use eosim_sim::clickhouse::types::{TableDef, Value as ChValue, VersionProfile};
    use eosim_sim::kafka::TopicPartition;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    struct Refuse;

    impl ErrantRecordReporter for Refuse {
        fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
            panic!("no record should be reported: {} {error}", record.offset);
        }
    }

    fn tp() -> TopicPartition {
        TopicPartition::new("events", 0)
    }

    fn records(offsets: std::ops::Range<i64>) -> Vec<SinkRecord> {
        let json = |i| serde_json::json!({"id": i, "name": format!("r{i}")});
        offsets
            .map(|i| SinkRecord {
                tp: tp(),
                offset: i,
                key: None,
                value: Some(json(i)),
                headers: Vec::new(),
                timestamp_ms: 0,
            })
            .collect()
    }

    async fn task(owner: &str) -> (ClickHouseSinkTask<SimClickHouse>, SinkTaskContext) {
        let props: BTreeMap<String, String> =
            [("exactlyOnce", "true"), ("variant", "seed+token+fencing")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let config = ClickHouseSinkConfig::from_props(&props).expect("valid props");
        let client = SimClickHouse::connect(5_000).await.expect("client");
        let mut task = ClickHouseSinkTask::new(config, client, owner.into(), Arc::new(NoHooks));
        let context = SinkTaskContext::new();
        task.initialize(context.clone());
        task.open(&[tp()]).await.expect("claim");
        (task, context)
    }

    async fn scenario(ch: ClickHouseWorld) {
        let client = SimClickHouse::connect(5_000).await.expect("client");
        create_tables(&client, TableDef::kafka2ck(), "connect_state")
            .await
            .expect("tables");
        let (mut a, a_context) = task("worker-0#1").await;
        a.put(records(0..5), &mut Refuse).await.expect("put");
        assert!(
            a_context.take_commit_request(),
            "a handled batch asks for a commit"
        );
        let (mut b, b_context) = task("worker-1#1").await;
        // B claimed the partition: A's next batch is refused and rewound to its start.
        a.put(records(5..10), &mut Refuse)
            .await
            .expect("fenced, not failed");
        assert_eq!(a_context.take_offsets(), [(tp(), 5)].into_iter().collect());
        assert!(!a_context.take_commit_request());
        let next = [(tp(), 10)].into_iter().collect();
        assert!(a.pre_commit(&next).await.expect("pre_commit").is_empty());
        // The group gives A the rewound records again without a new open: A claims anew.
        a.put(records(5..10), &mut Refuse).await.expect("put");
        assert_eq!(a.pre_commit(&next).await.expect("pre_commit"), next);
        // Now B is the stale owner: its insert of the same range is refused.
        b.put(records(5..10), &mut Refuse)
            .await
            .expect("fenced, not failed");
        assert_eq!(b_context.take_offsets(), [(tp(), 5)].into_iter().collect());
        let rows = ch.server.lock().unwrap().select("kafka2ck", false).unwrap();
        let mut names: Vec<String> = rows
            .iter()
            .map(|r| match &r[1] {
                ChValue::String(s) => s.clone(),
                other => panic!("name is a String, found {other:?}"),
            })
            .collect();
        names.sort_by_key(|n| n[1..].parse::<u32>().unwrap());
        let expected: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        assert_eq!(names, expected, "each row once");
    }

    #[test]
    fn a_fenced_task_rewinds_and_claims_again_when_it_gets_the_records_back() {
        let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
        runtime.block_on(async {
            let server = ClickHouse::new(VersionProfile::V23_7, ServerConfig::default());
            let ch = ClickHouseWorld::new(server, Keeper::new());
            let handle = madsim::runtime::Handle::current();
            let c = ch.clone();
            let init = move || serve_keeper(c.clone());
            handle
                .create_node()
                .name("keeper")
                .ip(keeper_ip())
                .init(init)
                .build();
            let c = ch.clone();
            let init = move || serve_clickhouse(c.clone());
            let ip = clickhouse_ip();
            handle
                .create_node()
                .name("clickhouse")
                .ip(ip)
                .init(init)
                .build();
            let worker = handle
                .create_node()
                .name("worker")
                .ip([10, 0, 4, 1].into())
                .build();
            worker.spawn(scenario(ch)).await.expect("scenario ran");
        });
    }
}

#[test]
fn a_fault_point_that_fires_is_armed_and_leaves_its_effect_in_the_history() {
    let s = scenario("f1-zombie-after-rebalance-seed-duplicates.toml", "seed");
    let outcome = run_seed(&s, 1);
    let kind = eosim_sim::effects::kind::FAULT_POINT;
    assert_eq!(outcome.scheduled.get(kind), Some(&1));
    assert_eq!(outcome.acted.get(kind), Some(&1));
    let fired: Vec<_> = outcome
        .history
        .ops
        .iter()
        .filter_map(|op| match &op.value {
            Value::Effect { kind: k, detail } if k == kind => Some((op.process.as_str(), detail)),
            _ => None,
        })
        .collect();
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert!(
        fired[0].1.starts_with("between-before-and-insert fired: "),
        "{fired:?}"
    );
}

#[test]
fn a_lost_insert_response_is_an_info_write_that_the_duplicate_cites_and_explains() {
    let s = scenario("p1-lost-insert-response-seed-duplicates.toml", "seed");
    let (outcome, result) = judge(&s, 1);
    let ops = &outcome.history.ops;
    let writes = |kind: OpKind| {
        ops.iter()
            .filter(move |op| op.kind == kind && matches!(op.value, Value::Write { .. }))
    };
    // Every attempt is in the history: as many invokes as completions, and the insert whose
    // response was lost completes `info` with the client's timeout.
    let completions =
        writes(OpKind::Ok).count() + writes(OpKind::Fail).count() + writes(OpKind::Info).count();
    assert_eq!(writes(OpKind::Invoke).count(), completions);
    let unknown: Vec<usize> = writes(OpKind::Info).map(|op| op.index).collect();
    assert!(!unknown.is_empty());
    assert!(writes(OpKind::Info).all(|op| op.error.is_some()));
    // The duplicate cites the write whose response was lost and the retry that applied it
    // again; the explanation shows both and the dropped response between them.
    let dups = &result.anomalies[&Anomaly::SinkDuplicate];
    let case = dups
        .iter()
        .find(|c| c.ops.iter().any(|i| unknown.contains(i)))
        .expect("a duplicate citing an info write");
    let cited_ok = case
        .ops
        .iter()
        .filter(|&&i| ops[i].kind == OpKind::Ok && matches!(ops[i].value, Value::Write { .. }));
    assert!(cited_ok.count() >= 1, "{case:?}");
    let lines = eosim::report::explain::explain(&outcome.history, case).join("\n");
    assert!(lines.contains(" info write id "), "{lines}");
    assert!(lines.contains(" ok write id "), "{lines}");
    assert!(lines.contains("effect messages.drop-response"), "{lines}");
}

#[test]
fn f2_on_the_connector_without_an_errant_reporter_drops_the_records_silently_and_the_checker_sees_the_loss(
) {
    let with_dlq = scenario(
        "f2-redelivery-other-boundaries-connector-current-loses.toml",
        "connector-current",
    );
    let (outcome, result) = judge(&with_dlq, 1);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::SinkLost].len(), 100);
    // Contains while BEFORE is thrown; errors.tolerance=all reports the partition's records.
    assert!(outcome
        .marks
        .contains_key("tolerance:partition-records-reported"));
    assert_eq!(outcome.marks.get("dlq:record"), Some(&100));
    let file = "f2-redelivery-other-boundaries-connector-current-no-reporter-loses.toml";
    let silent = scenario(file, "connector-current");
    let (outcome, result) = judge(&silent, 1);
    assert_eq!(result.validity, Validity::Invalid);
    assert_eq!(result.anomalies[&Anomaly::SinkLost].len(), 100);
    assert_eq!(outcome.marks.get("dlq:no-reporter-dropped"), Some(&100));
    assert_eq!(outcome.marks.get("dlq:record"), None);
    let dlq = final_values(&outcome).any(|v| matches!(v, Value::DlqState { .. }));
    assert!(!dlq, "no dead-letter queue topic");
}

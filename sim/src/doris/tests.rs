//! Tests of the Doris model: labels, transaction states, publish, conversion, key models,
//! crashes, Stream Load 2PC, Routine Load progress and job states.

use super::error::DorisError;
use super::fe_routine_load::{CreateRoutineLoad, TaskAssignment};
use super::model::{Doris, DorisConfig};
use super::routine_load::*;
use super::stream_load::{StreamLoad, StreamLoadStatus, TxnOperation};
use super::txn::*;
use super::types::*;
use std::collections::BTreeMap;

fn cluster() -> Doris {
    let mut d = Doris::new(DorisConfig::default());
    d.create_database("db");
    d.create_table("db", TableDef::clicklog()).unwrap();
    d
}

fn begin(label: &str) -> BeginTxn {
    BeginTxn {
        db: "db".into(),
        table: "clicklog".into(),
        label: label.into(),
        source: LoadSource::StreamLoad { two_phase: false },
        timeout_ms: 1_000,
    }
}

fn click(id: u32) -> String {
    format!(r#"{{"clickTime":"2023-05-01 10:00:00","type":"webset","id":"{id}","user":"u{id}"}}"#)
}

fn clicks(ids: std::ops::Range<u32>) -> Vec<String> {
    ids.map(click).collect()
}

fn ids(d: &Doris) -> Vec<String> {
    let rows = d.select("db", "clicklog").unwrap();
    rows.iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn committed_label_is_refused_and_aborted_label_is_reusable() {
    let mut d = cluster();
    let t1 = d.begin(0, begin("a")).unwrap();
    let Err(DorisError::LabelAlreadyExists {
        txn_id,
        existing_job_status,
        ..
    }) = d.begin(0, begin("a"))
    else {
        panic!("a running label must be refused");
    };
    assert_eq!((txn_id, existing_job_status.as_str()), (t1, "RUNNING"));
    d.abort(1, t1, "x").unwrap();
    let t2 = d.begin(2, begin("a")).unwrap();
    d.commit(3, t2, None).unwrap();
    d.tick(4, true);
    let err = d.begin(5, begin("a")).unwrap_err();
    assert!(
        matches!(err, DorisError::LabelAlreadyExists { ref existing_job_status, .. }
        if existing_job_status == "FINISHED")
    );
    assert_eq!(
        err.to_string(),
        format!("Label [a] has already been used, relate to txn [{t2}]")
    );
}

#[test]
fn labels_are_forgotten_after_label_keep_max_second() {
    let mut d = cluster();
    let t = d.begin(0, begin("a")).unwrap();
    d.commit(1, t, None).unwrap();
    d.tick(2, true);
    d.tick(2 + LABEL_KEEP_MAX_MS, true);
    assert!(
        d.begin(3 + LABEL_KEEP_MAX_MS, begin("a")).is_err(),
        "kept for 3 days"
    );
    d.tick(3 + LABEL_KEEP_MAX_MS, true);
    assert!(d.transaction(t).is_none());
    assert!(d.begin(4 + LABEL_KEEP_MAX_MS, begin("a")).is_ok());
}

#[test]
fn committed_data_is_invisible_until_published_on_a_live_be() {
    let mut d = cluster();
    let t = d.begin(0, begin("a")).unwrap();
    d.write(t, &LoadSpec::default(), &clicks(0..3)).unwrap();
    assert!(ids(&d).is_empty(), "PREPARE is not readable");
    d.commit(1, t, None).unwrap();
    d.tick(2, false);
    assert_eq!(
        d.transaction(t).unwrap().status,
        TransactionStatus::Committed
    );
    assert!(
        ids(&d).is_empty(),
        "COMMITTED is not readable before publish"
    );
    d.tick(3, true);
    assert_eq!(d.transaction(t).unwrap().status, TransactionStatus::Visible);
    assert_eq!(d.transaction(t).unwrap().version, Some(1));
    assert_eq!(ids(&d), ["0", "1", "2"]);
}

#[test]
fn prepare_times_out_but_precommitted_waits() {
    let mut d = cluster();
    let t1 = d.begin(0, begin("a")).unwrap();
    let t2 = d.begin(0, begin("b")).unwrap();
    d.write(t2, &LoadSpec::default(), &clicks(0..1)).unwrap();
    d.precommit(1, t2).unwrap();
    d.tick(5_000, true);
    let s1 = d.transaction(t1).unwrap();
    assert_eq!(
        (s1.status, s1.reason.as_str()),
        (TransactionStatus::Aborted, TIMEOUT_REASON)
    );
    assert_eq!(
        d.transaction(t2).unwrap().status,
        TransactionStatus::Precommitted
    );
    let err = d.commit(6_000, t1, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("transaction [{t1}] is already aborted. abort reason: timeout by txn manager")
    );
    assert!(ids(&d).is_empty(), "PRECOMMITTED is not readable");
}

/// `TransactionState.isTimeout`: a PRECOMMITTED transaction is aborted once
/// `stream_load_default_precommit_timeout_second` (3600 s) passed since its precommit.
#[test]
fn precommitted_times_out_after_the_precommit_timeout() {
    let mut d = cluster();
    let t = d.begin(0, begin("a")).unwrap();
    d.write(t, &LoadSpec::default(), &clicks(0..1)).unwrap();
    d.precommit(1_000, t).unwrap();
    d.tick(1_000 + PRECOMMIT_TIMEOUT_MS, true);
    assert_eq!(
        d.transaction(t).unwrap().status,
        TransactionStatus::Precommitted
    );
    d.tick(1_001 + PRECOMMIT_TIMEOUT_MS, true);
    let s = d.transaction(t).unwrap();
    assert_eq!(
        (s.status, s.reason.as_str()),
        (TransactionStatus::Aborted, TIMEOUT_REASON)
    );
    assert!(d.commit_prepared(1_002 + PRECOMMIT_TIMEOUT_MS, t).is_err());
    assert!(ids(&d).is_empty());
}

fn stream(label: &str, lines: Vec<String>, two_phase: bool) -> StreamLoad {
    StreamLoad {
        db: "db".into(),
        table: "clicklog".into(),
        label: Some(label.into()),
        spec: LoadSpec::default(),
        max_filter_ratio: 0.0,
        two_phase_commit: two_phase,
        group_commit: super::group_commit::GroupCommitMode::Off,
        lines,
    }
}

#[test]
fn stream_load_two_phase_commit_and_its_errors() {
    let mut d = cluster();
    let r = d.stream_load(0, stream("s1", clicks(0..2), true));
    assert_eq!(r.status, StreamLoadStatus::Success);
    assert_eq!(
        d.transaction(r.txn_id).unwrap().status,
        TransactionStatus::Precommitted
    );
    d.tick(1, true);
    assert!(ids(&d).is_empty());
    d.stream_load_2pc(2, "db", r.txn_id, TxnOperation::Commit)
        .unwrap();
    d.tick(3, true);
    assert_eq!(ids(&d).len(), 2);
    let again = d
        .stream_load_2pc(4, "db", r.txn_id, TxnOperation::Commit)
        .unwrap_err();
    assert_eq!(
        again.to_string(),
        format!(
            "transaction [{}] is already visible, not pre-committed.",
            r.txn_id
        )
    );
    assert!(again.means_committed());
    let dup = d.stream_load(5, stream("s1", clicks(5..6), false));
    assert_eq!(
        dup.status,
        StreamLoadStatus::LabelAlreadyExists("FINISHED".into())
    );
    let r2 = d.stream_load(6, stream("s2", clicks(2..3), true));
    d.stream_load_2pc(7, "db", r2.txn_id, TxnOperation::Abort)
        .unwrap();
    let late = d
        .stream_load_2pc(8, "db", r2.txn_id, TxnOperation::Commit)
        .unwrap_err();
    assert!(late
        .to_string()
        .ends_with("is already aborted. abort reason: User Abort"));
    assert!(!late.means_committed());
    d.tick(9, true);
    assert_eq!(ids(&d).len(), 2, "the aborted load left nothing");
}

#[test]
fn strict_mode_decides_between_null_and_an_error_row() {
    let def = TableDef::clicklog();
    let bad_time = r#"{"clickTime":"yesterday","type":"webset","id":"1","user":"u"}"#;
    let lax = LoadSpec::default();
    let row = lax.convert(&def, bad_time).unwrap();
    assert!(
        row["clickTime"].is_null(),
        "strict_mode off: a failed conversion is NULL"
    );
    let strict = LoadSpec {
        strict_mode: true,
        ..LoadSpec::default()
    };
    assert!(matches!(strict.convert(&def, bad_time),
        Err(RowError::StrictConversion { ref column, .. }) if column == "clickTime"));
    let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(101));
    for spec in [&lax, &strict] {
        assert!(matches!(
            spec.convert(&def, &long),
            Err(RowError::TooLong { max: 100, .. })
        ));
        assert!(matches!(
            spec.convert(&def, "{not json"),
            Err(RowError::MalformedJson(_))
        ));
    }
}

#[test]
fn null_into_not_null_is_an_error_row_in_both_modes() {
    let mut def = TableDef::clicklog();
    def.columns[0] = ColumnDef::new("clickTime", ColumnType::Datetime).not_null();
    let bad_time = r#"{"clickTime":"yesterday","id":"1"}"#;
    let spec = LoadSpec::default();
    assert_eq!(
        spec.convert(&def, bad_time),
        Err(RowError::NullInNotNull("clickTime".into()))
    );
    let absent = r#"{"id":"1"}"#;
    assert_eq!(
        spec.convert(&def, absent),
        Err(RowError::NullInNotNull("clickTime".into()))
    );
}

#[test]
fn columns_and_jsonpaths_map_fields() {
    let def = TableDef::clicklog();
    let spec = LoadSpec {
        columns: vec![
            "clickTime".into(),
            "id".into(),
            "type".into(),
            "user".into(),
        ],
        jsonpaths: vec![
            "$.t".into(),
            "$.ev.id".into(),
            "$.ev.kind".into(),
            "$.u".into(),
        ],
        strict_mode: false,
    };
    spec.validate(&def).unwrap();
    let row = spec
        .convert(
            &def,
            r#"{"t":"2023-01-02","ev":{"id":7,"kind":"k"},"u":"x"}"#,
        )
        .unwrap();
    assert_eq!(row["clickTime"], "2023-01-02 00:00:00");
    assert_eq!(row["id"], "7", "a JSON number fills a VARCHAR as text");
    assert_eq!(row["type"], "k");
    assert!(row["city"].is_null(), "a column outside COLUMNS gets NULL");
    let bad = LoadSpec {
        columns: vec!["nope".into()],
        ..LoadSpec::default()
    };
    assert!(bad
        .validate(&def)
        .unwrap_err()
        .to_string()
        .contains("'nope'"));
}

#[test]
fn stream_load_max_filter_ratio_aborts_and_counts() {
    let mut d = cluster();
    let mut lines = clicks(0..3);
    lines.push("garbage".into());
    let r = d.stream_load(0, stream("f", lines.clone(), false));
    assert_eq!(r.status, StreamLoadStatus::Fail);
    assert_eq!((r.number_total_rows, r.number_filtered_rows), (4, 1));
    assert_eq!(
        d.transaction(r.txn_id).unwrap().status,
        TransactionStatus::Aborted
    );
    let mut lenient = stream("f", lines, false);
    lenient.max_filter_ratio = 0.25;
    let r = d.stream_load(1, lenient);
    assert_eq!(
        (r.status, r.number_loaded_rows),
        (StreamLoadStatus::Success, 3)
    );
}

fn unique_table(seq: Option<&str>) -> Doris {
    let mut d = Doris::new(DorisConfig::default());
    d.create_database("db");
    let def = TableDef {
        name: "u".into(),
        columns: vec![
            ColumnDef::new("k", ColumnType::Int),
            ColumnDef::new("v", ColumnType::String),
            ColumnDef::new("s", ColumnType::BigInt),
        ],
        keys: KeysType::Unique {
            keys: vec!["k".into()],
            sequence_col: seq.map(String::from),
        },
    };
    d.create_table("db", def).unwrap();
    d
}

fn load_u(d: &mut Doris, label: &str, lines: &[&str]) {
    let mut req = stream(label, lines.iter().map(|s| s.to_string()).collect(), false);
    req.table = "u".into();
    assert_eq!(d.stream_load(0, req).status, StreamLoadStatus::Success);
    d.tick(1, true);
}

#[test]
fn unique_key_keeps_the_last_version_or_the_greatest_sequence() {
    let mut d = unique_table(None);
    load_u(&mut d, "1", &[r#"{"k":1,"v":"a","s":5}"#]);
    load_u(
        &mut d,
        "2",
        &[r#"{"k":1,"v":"b","s":1}"#, r#"{"k":2,"v":"c","s":1}"#],
    );
    let rows = d.select("db", "u").unwrap();
    assert_eq!((rows.len(), rows[0]["v"].as_str()), (2, Some("b")));
    let mut d = unique_table(Some("s"));
    load_u(&mut d, "1", &[r#"{"k":1,"v":"a","s":5}"#]);
    load_u(&mut d, "2", &[r#"{"k":1,"v":"b","s":1}"#]);
    assert_eq!(
        d.select("db", "u").unwrap()[0]["v"],
        "a",
        "smaller sequence loses"
    );
    load_u(&mut d, "3", &[r#"{"k":1,"v":"c","s":5}"#]);
    assert_eq!(
        d.select("db", "u").unwrap()[0]["v"],
        "c",
        "equal sequence: later load wins"
    );
}

#[test]
fn be_restart_loses_uncommitted_load_channels_only() {
    let mut d = cluster();
    let t1 = d.begin(0, begin("a")).unwrap();
    d.write(t1, &LoadSpec::default(), &clicks(0..2)).unwrap();
    d.commit(1, t1, None).unwrap();
    let t2 = d.begin(1, begin("b")).unwrap();
    d.write(t2, &LoadSpec::default(), &clicks(2..4)).unwrap();
    d.restart_be();
    assert!(matches!(
        d.commit(2, t2, None),
        Err(DorisError::BackendUnavailable(_))
    ));
    assert!(d.write(t2, &LoadSpec::default(), &clicks(4..5)).is_err());
    d.tick(3, true);
    assert_eq!(
        ids(&d),
        ["0", "1"],
        "the committed rowset survived and was published"
    );
    d.abort(4, t2, "be restarted").unwrap();
    assert!(
        d.begin(5, begin("b")).is_ok(),
        "the aborted label is free again"
    );
}

// ---- Routine Load ----

fn props(extra: &[(&str, &str)]) -> RoutineLoadProps {
    let mut m: BTreeMap<String, String> = [
        ("kafka_broker_list", "broker-1:9092"),
        ("kafka_topic", "clicks"),
        ("desired_concurrent_number", "3"),
        ("max_batch_interval", "20"),
        ("property.kafka_default_offsets", "OFFSET_BEGINNING"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        m.insert(k.to_string(), v.to_string());
    }
    RoutineLoadProps::parse(&m).unwrap()
}

fn job(d: &mut Doris, props: RoutineLoadProps, partitions: &[i32]) -> u64 {
    let req = CreateRoutineLoad {
        name: "rl".into(),
        db: "db".into(),
        table: "clicklog".into(),
        spec: LoadSpec {
            columns: vec![
                "clickTime".into(),
                "id".into(),
                "type".into(),
                "user".into(),
            ],
            ..LoadSpec::default()
        },
        props,
    };
    d.create_routine_load(req, partitions).unwrap()
}

fn attachment(
    t: &TaskAssignment,
    rows: u64,
    errors: u64,
    next: &[(i32, i64)],
) -> RlTaskTxnCommitAttachment {
    RlTaskTxnCommitAttachment {
        job_id: t.job_id,
        task_id: t.task_id,
        total_rows: rows,
        filtered_rows: errors,
        unselected_rows: 0,
        received_bytes: rows * 10,
        task_execution_time_ms: 100,
        next_offsets: next.iter().copied().collect(),
    }
}

#[test]
fn properties_parse_with_doris_names_and_reject_unknown_keys() {
    let p = props(&[
        ("kafka_partitions", "0,1"),
        ("kafka_offsets", "5,OFFSET_END"),
    ]);
    assert_eq!(p.kafka_offsets, [KafkaOffset::Next(5), KafkaOffset::End]);
    assert_eq!(p.task_timeout_ms(), 200_000);
    let mut m = BTreeMap::new();
    m.insert("kafka_topic".to_string(), "t".to_string());
    m.insert("max_batch_rowz".to_string(), "1".to_string());
    let err = RoutineLoadProps::parse(&m).unwrap_err().to_string();
    assert!(err.contains("max_batch_rowz"), "{err}");
    m.remove("max_batch_rowz");
    m.insert("max_batch_rows".to_string(), "many".to_string());
    assert!(RoutineLoadProps::parse(&m)
        .unwrap_err()
        .to_string()
        .contains("max_batch_rows"));
}

#[test]
fn job_is_divided_into_min_of_partitions_and_desired_once_a_be_is_alive() {
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0, 1, 2, 3, 4]);
    assert_eq!(d.fe.jobs[&id].state, JobState::NeedSchedule);
    d.tick(0, false);
    assert_eq!(
        d.fe.jobs[&id].state,
        JobState::NeedSchedule,
        "no BE alive: waits"
    );
    d.tick(1, true);
    let job = &d.fe.jobs[&id];
    assert_eq!(job.state, JobState::Running);
    let parts: Vec<Vec<i32>> = job.tasks.iter().map(|t| t.partitions.clone()).collect();
    assert_eq!(parts, [vec![0, 3], vec![1, 4], vec![2]]);
}

#[test]
fn a_committed_task_moves_data_and_progress_together() {
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0]);
    d.tick(0, true);
    let t = d.take_task(1).unwrap();
    assert_eq!(t.offsets[&0], KafkaOffset::Beginning);
    assert!(d.take_task(1).is_none(), "one partition, one task");
    d.write(t.txn_id, &t.spec, &clicks(0..5)).unwrap();
    // Offsets are not dense: 5 records ending at offset 6 leave the consumer at 7.
    d.commit_task(2, t.txn_id, attachment(&t, 5, 0, &[(0, 7)]))
        .unwrap();
    assert_eq!(d.fe.jobs[&id].progress[&0], KafkaOffset::Next(7));
    d.update_latest_offsets(id, [(0, 10)].into());
    d.tick(3, true);
    assert_eq!(ids(&d).len(), 5);
    let show = d.show_routine_load("db", "rl").unwrap();
    assert_eq!(
        show.progress["0"], "6",
        "Progress shows the last consumed offset"
    );
    assert_eq!(show.lag["0"], 3);
    let s = show.statistic;
    assert_eq!(
        (s.total_rows, s.loaded_rows, s.committed_task_num),
        (5, 5, 1)
    );
    assert_eq!(s.load_rows_rate, 50);
    let next = d.take_task(4).unwrap();
    assert_eq!(
        next.offsets[&0],
        KafkaOffset::Next(7),
        "the renewed task starts there"
    );
    assert_ne!(next.label, t.label);
}

#[test]
fn a_timed_out_task_moves_nothing_and_its_late_commit_is_refused() {
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0]);
    d.tick(0, true);
    let t = d.take_task(1).unwrap();
    d.write(t.txn_id, &t.spec, &clicks(0..5)).unwrap();
    d.tick(1 + t.props.task_timeout_ms() + 1, true);
    let job = &d.fe.jobs[&id];
    assert_eq!(job.progress[&0], KafkaOffset::Beginning);
    assert_eq!(job.statistic.aborted_task_num, 1);
    let late = d.commit_task(300_000, t.txn_id, attachment(&t, 5, 0, &[(0, 5)]));
    assert!(matches!(late, Err(DorisError::TaskAborted { .. })));
    let again = d.take_task(300_001).unwrap();
    assert_eq!(
        again.offsets[&0],
        KafkaOffset::Beginning,
        "F7: from the last commit"
    );
    assert!(ids(&d).is_empty());
}

#[test]
fn an_abort_with_an_attachment_moves_progress_as_after_aborted_does() {
    // Doris advances progress on a BE abort that carries the batch's attachment (every row
    // filtered). A task executor that attaches its consumer position to the abort of a
    // failed batch therefore skips it: the F7 bug the harness's switch reproduces.
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0]);
    d.tick(0, true);
    let t = d.take_task(1).unwrap();
    d.write(t.txn_id, &t.spec, &clicks(0..5)).unwrap();
    let a = attachment(&t, 5, 0, &[(0, 5)]);
    d.abort_task(2, t.txn_id, "task failed", Some(a), false)
        .unwrap();
    assert_eq!(d.fe.jobs[&id].progress[&0], KafkaOffset::Next(5));
    d.tick(3, true);
    assert!(
        ids(&d).is_empty(),
        "the rows are gone, the progress says they are in"
    );
    let s = &d.fe.jobs[&id].statistic;
    assert_eq!((s.aborted_task_num, s.loaded_rows), (1, 5));
}

#[test]
fn fe_restart_keeps_progress_and_refuses_the_old_tasks() {
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0]);
    d.tick(0, true);
    let t = d.take_task(1).unwrap();
    d.write(t.txn_id, &t.spec, &clicks(0..2)).unwrap();
    d.commit_task(2, t.txn_id, attachment(&t, 2, 0, &[(0, 2)]))
        .unwrap();
    let t2 = d.take_task(3).unwrap();
    d.restart_fe();
    assert_eq!(d.fe.jobs[&id].state, JobState::NeedSchedule);
    assert!(matches!(
        d.commit_task(4, t2.txn_id, attachment(&t2, 1, 0, &[(0, 3)])),
        Err(DorisError::TaskAborted { .. })
    ));
    d.tick(5, true);
    let t3 = d.take_task(6).unwrap();
    assert_eq!(t3.offsets[&0], KafkaOffset::Next(2));
    assert!(
        t3.task_id > t2.task_id,
        "task ids (labels) are never reused"
    );
    assert_eq!(ids(&d).len(), 2);
}

#[test]
fn too_many_error_rows_pause_the_job_for_good() {
    let mut d = cluster();
    let id = job(&mut d, props(&[("max_error_number", "1")]), &[0]);
    d.tick(0, true);
    let t = d.take_task(1).unwrap();
    let w = d
        .write(t.txn_id, &t.spec, &["x".into(), "y".into(), click(1)])
        .unwrap();
    assert_eq!((w.filtered_rows, w.loaded_rows), (2, 1));
    d.commit_task(2, t.txn_id, attachment(&t, 3, 2, &[(0, 3)]))
        .unwrap();
    let job = &d.fe.jobs[&id];
    assert_eq!(job.state, JobState::Paused);
    assert_eq!(
        job.pause_reason.as_ref().unwrap().code,
        PauseCode::TooManyFailureRows
    );
    d.tick(3_600_000, true);
    assert_eq!(
        d.fe.jobs[&id].state,
        JobState::Paused,
        "never resumed automatically"
    );
    let s = d.show_routine_load("db", "rl").unwrap().statistic;
    assert_eq!((s.total_rows, s.error_rows, s.loaded_rows), (3, 2, 1));
    d.resume_routine_load(3_600_001, "db", "rl").unwrap();
    d.tick(3_600_002, true);
    assert_eq!(d.fe.jobs[&id].state, JobState::Running);
}

#[test]
fn a_task_side_pause_is_resumed_automatically_three_times() {
    let mut d = cluster();
    let id = job(&mut d, props(&[]), &[0]);
    let mut now = 0;
    for round in 0..4 {
        d.tick(now, true);
        let t = d.take_task(now).unwrap();
        d.abort_task(now, t.txn_id, "kafka unreachable", None, true)
            .unwrap();
        assert_eq!(d.fe.jobs[&id].state, JobState::Paused);
        now += AUTO_RESUME_BACKOFF_MS << round;
        d.tick(now - 1, true);
        assert_eq!(d.fe.jobs[&id].state, JobState::Paused, "back-off {round}");
        d.tick(now, true);
        if round < 3 {
            assert_eq!(d.fe.jobs[&id].state, JobState::Running, "round {round}");
        }
    }
    assert_eq!(
        d.fe.jobs[&id].state,
        JobState::Paused,
        "three resumes in five minutes"
    );
    assert!(d.stop_routine_load(now, "db", "rl").is_ok());
    assert!(
        d.resume_routine_load(now, "db", "rl").is_err(),
        "STOPPED is final"
    );
}

/// `SHOW TRANSACTION ... WHERE LABEL LIKE 'prefix%'` (the Doris Kafka connector's offset
/// recovery) lists the latest transaction of each label under the prefix, in this
/// database only, and nothing past the prefix's range.
#[test]
fn label_prefix_lookup_lists_the_latest_transaction_of_each_matching_label() {
    let mut d = cluster();
    d.create_database("other");
    d.create_table("other", TableDef::clicklog()).unwrap();
    let loaded = d.stream_load(
        0,
        stream("t__KC_0__KC_db_clicklog__KC_9__KC_1", clicks(0..2), false),
    );
    assert_eq!(loaded.status, StreamLoadStatus::Success);
    let pre = d.stream_load(
        1,
        stream("t__KC_0__KC_db_clicklog__KC_19__KC_2", clicks(2..4), true),
    );
    assert_eq!(pre.status, StreamLoadStatus::Success);
    d.stream_load(
        2,
        stream("t__KC_1__KC_db_clicklog__KC_5__KC_3", clicks(4..5), false),
    );
    let mut elsewhere = stream("t__KC_0__KC_db_clicklog__KC_99__KC_4", clicks(5..6), false);
    elsewhere.db = "other".into();
    d.stream_load(3, elsewhere);
    d.tick(4, true);
    let found: Vec<(String, TransactionStatus)> =
        d.fe.txns
            .by_label_prefix("db", "t__KC_0__KC_db_clicklog")
            .into_iter()
            .map(|t| (t.label.clone(), t.status))
            .collect();
    assert_eq!(
        found,
        vec![
            (
                "t__KC_0__KC_db_clicklog__KC_19__KC_2".to_string(),
                TransactionStatus::Precommitted
            ),
            (
                "t__KC_0__KC_db_clicklog__KC_9__KC_1".to_string(),
                TransactionStatus::Visible
            ),
        ]
    );
}

//! P1 on real services: Debian's ClickHouse 18.16 and ZooKeeper, through the real clients
//! (`client::real::{clickhouse, zookeeper}`). Insert/select round trip, what 18.16
//! deduplicates, KeeperMap-in-ZooKeeper's versioned writes, the sink task's state machine,
//! and the sink-versus-bulk-load ratio. Runs only with `EOSIM_REAL=1`, except the check
//! that a token variant is reported skipped on 18.16 (it needs no services); and the
//! insert differential suite against the model (`real_support/clickhouse_differential.rs`).
#![cfg(not(madsim))]

#[path = "real_support/clickhouse_differential.rs"]
mod clickhouse_differential;
mod real_support;

use eosim::client::clickhouse::{ChClientError, ClickHouse, KeeperMap};
use eosim::client::real::clickhouse::{RealClickHouse, RealClickHouseConfig};
use eosim::client::real::zookeeper::{ClickHouseWithZooKeeper, ZkKeeperMap, ZkKeeperMapConfig};
use eosim::connect::task::{ConnectError, SinkTask};
use eosim::real::bulk::{clickhouse_sink_vs_bulk, seed_record, KeptReports};
use eosim::real::provision::{ClickHouse as ChServer, Kill, Pause, ZooKeeper};
use eosim::sinks::clickhouse::{
    create_tables, state_table_def, ClickHouseSinkConfig, ClickHouseSinkTask, NoHooks,
};
use eosim_sim::clickhouse::keeper::KeeperError;
use eosim_sim::clickhouse::model::{ClickHouse as Model, ServerConfig};
use eosim_sim::clickhouse::types::{Engine, Insert, TableDef, Value, VersionProfile};
use eosim_sim::clickhouse::ErrorCode;
use eosim_sim::kafka::TopicPartition;
use real_support::{real_enabled, runtime, service_dir, timed};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// ZooKeeper and a ClickHouse configured with it, with their directories.
struct Services {
    ch: ChServer,
    zk: ZooKeeper,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

fn start_services() -> Services {
    let (zk_dir, ch_dir) = (service_dir("zookeeper"), service_dir("clickhouse"));
    let zk = timed("zookeeper start", || ZooKeeper::start(zk_dir.path())).expect("zookeeper");
    let ch = timed("clickhouse start", || {
        ChServer::start_with_zookeeper(ch_dir.path(), Some(&zk.connect_string()))
    })
    .expect("clickhouse");
    Services {
        ch,
        zk,
        _dirs: (zk_dir, ch_dir),
    }
}

async fn both(s: &Services) -> ClickHouseWithZooKeeper {
    ClickHouseWithZooKeeper::connect(
        RealClickHouseConfig::new(&s.ch.url()),
        ZkKeeperMapConfig::new(&s.zk.connect_string()),
    )
    .await
    .expect("clients connect")
}

fn rows(ids: std::ops::Range<u64>) -> Vec<serde_json::Value> {
    ids.map(|i| json!({"id": i, "name": format!("r{i}")}))
        .collect()
}

fn names(rows: &[Vec<Value>]) -> Vec<String> {
    let mut names: Vec<String> = rows
        .iter()
        .map(|r| match &r[1] {
            Value::String(s) => s.clone(),
            other => panic!("name is a String, got {other:?}"),
        })
        .collect();
    names.sort();
    names
}

fn server_code(result: Result<impl std::fmt::Debug, ChClientError>) -> ErrorCode {
    match result {
        Err(ChClientError::Server(e)) => e.code,
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[test]
fn insert_and_select_round_trip_on_the_seed_table() {
    if !real_enabled("insert_and_select_round_trip_on_the_seed_table") {
        return;
    }
    let dir = service_dir("clickhouse");
    let server = timed("clickhouse start", || ChServer::start(dir.path())).expect("starts");
    runtime().block_on(async {
        let ch = RealClickHouse::connect(RealClickHouseConfig::new(&server.url()))
            .await
            .expect("connects");
        assert_eq!(ch.version().await.unwrap().to_string(), "18.16.1");
        ch.create_table(TableDef::kafka2ck()).await.expect("create");
        let code = server_code(ch.create_table(TableDef::kafka2ck()).await);
        assert_eq!(code, ErrorCode::TableAlreadyExists);
        // 5 rows in blocks of 2 (300 wraps to 44 in UInt8): squashed into one part by
        // min_insert_block_size_rows, as ClickHouse does by default.
        let mut batch = rows(0..4);
        batch.push(json!({"id": 300, "name": "r300"}));
        let summary = ch
            .insert(Insert::new("kafka2ck", batch.clone()).block_size(2))
            .await
            .expect("insert");
        assert_eq!((summary.blocks_total, summary.blocks_applied), (3, 3));
        let parts = "SELECT count() FROM system.parts WHERE table = 'kafka2ck' AND level = 0";
        assert_eq!(ch.query_text(parts).await.unwrap(), "1");
        three_parts_without_squashing(&server, batch).await;
        let got = ch.select("kafka2ck", false).await.expect("select");
        assert_eq!(names(&got), ["r0", "r1", "r2", "r3", "r300"]);
        let wrapped = got.iter().find(|r| r[1] == Value::String("r300".into()));
        assert_eq!(wrapped.unwrap()[0], Value::UInt(44));
        // Errors keep ClickHouse's codes.
        let unknown_field = Insert::new("kafka2ck", vec![json!({"id": 1, "x": 2})]);
        assert_eq!(
            server_code(ch.insert(unknown_field).await),
            ErrorCode::IncorrectData
        );
        assert_eq!(
            server_code(ch.select("nope", false).await),
            ErrorCode::UnknownTable
        );
        assert_eq!(
            server_code(ch.select("kafka2ck", true).await),
            ErrorCode::IllegalFinal
        );
        // The token is refused before anything is sent, naming the version it needs.
        let token = Insert::new("kafka2ck", rows(10..12)).token("t-0-1");
        match ch.insert(token).await {
            Err(ChClientError::Server(e)) => {
                assert_eq!(e.code, ErrorCode::UnknownSetting);
                assert!(e.message.contains("22.2") && e.message.contains("18.16.1"));
            }
            other => panic!("token on 18.16: {other:?}"),
        }
        assert_eq!(ch.count("kafka2ck").await.unwrap(), 5);
    });
}

/// With squashing off, the same INSERT forms one part per block of 2, as in the model.
async fn three_parts_without_squashing(server: &ChServer, batch: Vec<serde_json::Value>) {
    let mut config = RealClickHouseConfig::new(&server.url());
    for setting in ["min_insert_block_size_rows", "min_insert_block_size_bytes"] {
        config.settings.insert(setting.into(), "0".into());
    }
    let ch = RealClickHouse::connect(config).await.expect("connects");
    let mut def = TableDef::kafka2ck();
    def.name = "unsquashed".into();
    ch.create_table(def).await.expect("create");
    let insert = Insert::new("unsquashed", batch).block_size(2);
    ch.insert(insert).await.expect("insert");
    let parts = "SELECT count() FROM system.parts WHERE table = 'unsquashed' AND level = 0";
    assert_eq!(ch.query_text(parts).await.unwrap(), "3");
}

/// Inserts the same batch twice and counts the table's rows on the server and in the
/// model with the 18.16 profile.
async fn twice(ch: &RealClickHouse, def: TableDef) -> (u64, usize) {
    let mut model = Model::new(VersionProfile::V18_16, ServerConfig::default());
    model.create_table(def.clone()).expect("model create");
    ch.create_table(def.clone()).await.expect("create");
    let insert = Insert::new(&def.name, rows(0..3));
    for _ in 0..2 {
        ch.insert(insert.clone()).await.expect("insert");
        model.insert(0, &insert).expect("model insert");
    }
    let model_rows = model.select(&def.name, false).expect("model select").len();
    (ch.count(&def.name).await.expect("count"), model_rows)
}

#[test]
fn plain_merge_tree_keeps_a_repeated_insert_and_replicated_drops_it() {
    if !real_enabled("plain_merge_tree_keeps_a_repeated_insert_and_replicated_drops_it") {
        return;
    }
    let services = start_services();
    runtime().block_on(async {
        let ch = RealClickHouse::connect(RealClickHouseConfig::new(&services.ch.url()))
            .await
            .expect("connects");
        // The seed's table: no deduplication on 18.16 (no non_replicated window at all).
        assert_eq!(twice(&ch, TableDef::kafka2ck()).await, (6, 6));
        let mut replicated = TableDef::kafka2ck();
        replicated.name = "kafka2ck_replicated".into();
        replicated.engine = Engine::ReplicatedMergeTree;
        assert_eq!(twice(&ch, replicated).await, (3, 3));
        // insert_deduplicate=0 turns it off.
        let mut again = Insert::new("kafka2ck_replicated", rows(0..3));
        again.settings.insert_deduplicate = Some(false);
        ch.insert(again).await.expect("insert");
        assert_eq!(ch.count("kafka2ck_replicated").await.unwrap(), 6);
    });
}

#[test]
fn keeper_map_in_zookeeper_refuses_a_stale_version() {
    if !real_enabled("keeper_map_in_zookeeper_refuses_a_stale_version") {
        return;
    }
    let dir = service_dir("zookeeper");
    let zk = timed("zookeeper start", || ZooKeeper::start(dir.path())).expect("starts");
    runtime().block_on(async {
        let config = ZkKeeperMapConfig::new(&zk.connect_string());
        let map = ZkKeeperMap::connect(config.clone())
            .await
            .expect("connects");
        map.create_table(state_table_def("connect_state"))
            .await
            .expect("create");
        let code = server_code(map.create_table(state_table_def("connect_state")).await);
        assert_eq!(code, ErrorCode::TableAlreadyExists);
        let row = |state: &str| {
            json!({"key": "t-0", "min_offset": 0, "max_offset": 4, "state": state,
                   "owner": "w#1"})
        };
        let table = "connect_state";
        assert_eq!(
            map.put_if_version(table, row("BEFORE"), None)
                .await
                .unwrap(),
            0
        );
        let lost_race = map.put_if_version(table, row("BEFORE"), None).await;
        assert_eq!(keeper_cause(lost_race), KeeperError::NodeExists);
        assert_eq!(
            map.put_if_version(table, row("AFTER"), Some(0))
                .await
                .unwrap(),
            1
        );
        let stale = map.put_if_version(table, row("NONE"), Some(0)).await;
        assert_eq!(keeper_cause(stale), KeeperError::BadVersion);
        // A second session (a restarted worker) finds the table by name and the row.
        let other = ZkKeeperMap::connect(config).await.expect("connects");
        let got = other.get(table, json!("t-0")).await.unwrap().expect("row");
        assert_eq!(got.version, 1);
        assert_eq!(got.row[3], Value::String("AFTER".into()));
        assert_eq!(other.get(table, json!("t-1")).await.unwrap(), None);
        // A KeeperMap INSERT overwrites blindly (non-strict) and adds keys in one multi.
        let insert = Insert::new(table, vec![row("BEFORE"), json!({"key": "t-1"})]);
        other.insert(insert).await.expect("insert");
        let after = map.get(table, json!("t-0")).await.unwrap().expect("row");
        assert_eq!(
            (after.version, &after.row[3]),
            (2, &Value::String("BEFORE".into()))
        );
        assert_eq!(map.select(table, false).await.unwrap().len(), 2);
    });
}

fn keeper_cause<T: std::fmt::Debug>(result: Result<T, ChClientError>) -> KeeperError {
    match result {
        Err(ChClientError::Server(e)) if e.code == ErrorCode::KeeperException => {
            e.keeper_error.expect("a Keeper error behind it")
        }
        other => panic!("expected KEEPER_EXCEPTION, got {other:?}"),
    }
}

fn task(
    client: &ClickHouseWithZooKeeper,
    variant: &str,
    owner: &str,
) -> ClickHouseSinkTask<ClickHouseWithZooKeeper> {
    let props = BTreeMap::from([
        ("exactlyOnce".to_string(), "true".to_string()),
        ("variant".to_string(), variant.to_string()),
    ]);
    let config = ClickHouseSinkConfig::from_props(&props).expect("config");
    ClickHouseSinkTask::new(config, client.clone(), owner.into(), Arc::new(NoHooks))
}

async fn state_of(client: &ClickHouseWithZooKeeper, tp: &TopicPartition) -> Vec<Value> {
    let key = json!(format!("{}-{}", tp.topic, tp.partition));
    let got = client.get("connect_state", key).await.expect("get");
    got.expect("a state record").row
}

#[test]
fn sink_task_on_real_services_writes_once_and_drops_a_redelivered_batch() {
    if !real_enabled("sink_task_on_real_services_writes_once_and_drops_a_redelivered_batch") {
        return;
    }
    let services = start_services();
    runtime().block_on(async {
        let client = both(&services).await;
        let tp = TopicPartition::new("kafka2ck", 0);
        let batch = |r: std::ops::Range<i64>| r.map(|o| seed_record(&tp, o)).collect::<Vec<_>>();
        let mut first = task(&client, "seed", "worker-0#1");
        create_tables(&client, TableDef::kafka2ck(), "connect_state")
            .await
            .expect("tables");
        first.open(std::slice::from_ref(&tp)).await.unwrap();
        let mut reports = KeptReports::default();
        first.put(batch(0..5), &mut reports).await.expect("put");
        let committable = first.pre_commit(&BTreeMap::from([(tp.clone(), 5)])).await;
        assert_eq!(committable.unwrap(), BTreeMap::from([(tp.clone(), 5)]));
        assert_eq!(client.clickhouse.count("kafka2ck").await.unwrap(), 5);
        let after = |min: i64, max: i64| {
            vec![
                Value::String("kafka2ck-0".into()),
                Value::Int(min),
                Value::Int(max),
                Value::String("AFTER".into()),
                Value::String("worker-0#1".into()),
            ]
        };
        assert_eq!(state_of(&client, &tp).await, after(0, 4));
        // A restarted worker (new clients, new session) gets the same batch again: Same.
        let restarted = both(&services).await;
        let mut second = task(&restarted, "seed", "worker-0#2");
        create_tables(&restarted, TableDef::kafka2ck(), "connect_state")
            .await
            .expect("tables exist");
        second.open(std::slice::from_ref(&tp)).await.unwrap();
        second.put(batch(0..5), &mut reports).await.expect("put");
        assert_eq!(restarted.clickhouse.count("kafka2ck").await.unwrap(), 5);
        assert_eq!(state_of(&client, &tp).await, after(0, 4));
        // The next batch is New.
        second.put(batch(5..8), &mut reports).await.expect("put");
        let got = restarted.select("kafka2ck", false).await.unwrap();
        let expected: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
        assert_eq!(names(&got), expected);
        assert!(reports.0.is_empty(), "{:?}", reports.0);
        token_variant_is_refused_on_18_16(&restarted).await;
    });
}

/// `seed+token` needs `insert_deduplication_token`: on 18.16 its first insert fails the
/// task (a setting the server does not know is fatal), after writing only BEFORE.
async fn token_variant_is_refused_on_18_16(client: &ClickHouseWithZooKeeper) {
    let tp = TopicPartition::new("kafka2ck", 1);
    let mut t = task(client, "seed+token", "worker-1#1");
    t.open(std::slice::from_ref(&tp)).await.unwrap();
    let before = client.clickhouse.count("kafka2ck").await.unwrap();
    let batch = (0..3).map(|o| seed_record(&tp, o)).collect();
    match t.put(batch, &mut KeptReports::default()).await {
        Err(ConnectError::Fatal(msg)) => assert!(msg.contains("insert_deduplication_token")),
        other => panic!("seed+token on 18.16: {other:?}"),
    }
    assert_eq!(client.clickhouse.count("kafka2ck").await.unwrap(), before);
    assert_eq!(
        state_of(client, &tp).await[3],
        Value::String("BEFORE".into())
    );
}

#[test]
fn sink_rows_per_second_beside_one_large_insert() {
    if !real_enabled("sink_rows_per_second_beside_one_large_insert") {
        return;
    }
    let services = start_services();
    runtime().block_on(async {
        let client = both(&services).await;
        let ratio = clickhouse_sink_vs_bulk(&client, "eosim_bulk", 20_000, 500)
            .await
            .expect("measured");
        let line = format!("bulk-load ratio: {ratio}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        assert!(ratio.sink_rows_per_s > 0.0 && ratio.bulk_rows_per_s > 0.0);
        // Forty INSERTs with six ZooKeeper round trips each cannot beat one INSERT.
        assert!(ratio.ratio() < 1.0, "{ratio}");
    });
}

#[test]
fn a_lost_answer_is_ambiguous_and_a_lost_session_comes_back() {
    if !real_enabled("a_lost_answer_is_ambiguous_and_a_lost_session_comes_back") {
        return;
    }
    let mut services = start_services();
    let rt = runtime();
    let mut config = RealClickHouseConfig::new(&services.ch.url());
    config.timeout_ms = 1_000;
    let ch = rt
        .block_on(RealClickHouse::connect(config))
        .expect("connects");
    rt.block_on(ch.create_table(TableDef::kafka2ck()))
        .expect("create");
    services.ch.pause();
    let lost = rt.block_on(ch.insert(Insert::new("kafka2ck", rows(0..2))));
    services.ch.resume();
    match lost {
        Err(e @ ChClientError::Timeout { .. }) => assert!(e.is_ambiguous()),
        other => panic!("a paused server's insert: {other:?}"),
    }
    // ZooKeeper killed: KeeperMap calls fail as Keeper errors or timeouts; after its
    // restart the same client works again (a new session if the old one expired).
    let mut zk_config = ZkKeeperMapConfig::new(&services.zk.connect_string());
    zk_config.timeout_ms = 2_000;
    let map = rt
        .block_on(ZkKeeperMap::connect(zk_config))
        .expect("connects");
    rt.block_on(map.create_table(state_table_def("connect_state")))
        .expect("create");
    services.zk.kill();
    let down = rt.block_on(map.get("connect_state", json!("t-0")));
    match down {
        Err(ChClientError::Timeout { .. }) => {}
        other => assert_eq!(keeper_cause(other), KeeperError::ConnectionLoss),
    }
    timed("zookeeper restart", || services.zk.restart()).expect("restarts");
    let back = rt.block_on(async {
        for _ in 0..20 {
            if map.get("connect_state", json!("t-0")).await.is_ok() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        false
    });
    assert!(back, "the client works again within 10 s of the restart");
    let row = json!({"key": "t-0", "state": "AFTER"});
    let again = rt.block_on(map.put_if_version("connect_state", row, None));
    assert_eq!(again.expect("works after the restart"), 0);
}

/// `seed+token` scenarios run in simulation only: on Debian's 18.16 the runner reports
/// them skipped, naming the setting and the version, never passed. Needs no services.
#[test]
fn a_token_variant_is_reported_skipped_on_18_16_not_passed() {
    use eosim::real::backend::Backend;
    use eosim::real::run::result::scenario_result;
    use eosim::real::run::{run_real, RunOptions};
    use eosim::report::Verdict;
    use eosim::scenario::Scenario;
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios/p1-clickhouse-restart-seed-token.toml");
    let scenario = Scenario::load(&path).expect("the scenario parses");
    let dir = tempfile::tempdir().expect("temp dir");
    let options = RunOptions {
        backend: Backend::Native,
        bootstrap_servers: None,
        exe: std::path::PathBuf::from(env!("CARGO_BIN_EXE_eosim")),
        dir: dir.path().to_path_buf(),
        verbose: false,
        seed: 0,
    };
    let outcome = run_real(&scenario, &path, &options);
    let history = dir.path().join("history.jsonl");
    let result = scenario_result(&scenario, &outcome, &history, "test");
    assert_eq!(result.verdict, Verdict::Skipped);
    let note = &result.notes[0];
    assert!(
        note.contains("insert_deduplication_token") && note.contains("18.16"),
        "{note}"
    );
}

/// Generated INSERTs (new rows, repeated and reordered blocks, block sizes, squashing on and
/// off, `insert_deduplicate`, unparsable rows) into Replicated, partitioned Replicated and
/// plain MergeTree tables run against ClickHouse 18.16 with ZooKeeper and against the model:
/// every result code, table content and part count must be equal. Prints the agreement
/// rate. See `real_support/clickhouse_differential.rs`.
#[test]
fn model_and_real_clickhouse_agree_on_inserts_and_deduplication() {
    if !real_enabled("model_and_real_clickhouse_agree_on_inserts_and_deduplication") {
        return;
    }
    let services = start_services();
    let rt = runtime();
    let ch = rt
        .block_on(RealClickHouse::connect(RealClickHouseConfig::new(
            &services.ch.url(),
        )))
        .expect("connects");
    let cases = real_support::diff_cases(32);
    let (agreed, ran, tally) = timed(&format!("clickhouse differential, {cases} cases"), || {
        clickhouse_differential::run(&rt, &ch, cases)
    });
    real_support::report_agreement(
        "ClickHouse 18.16 inserts and deduplication",
        agreed,
        ran,
        &tally,
    );
    for must in [
        "Replicated: ok, all deduplicated",
        "Replicated: ok, all written",
        "Plain: ok, all written",
    ] {
        assert!(
            tally.contains_key(must),
            "the generated cases never exercised `{must}`: {tally:?}"
        );
    }
    assert!(
        tally.keys().any(|k| k.contains("error")),
        "no unparsable row was exercised: {tally:?}"
    );
}

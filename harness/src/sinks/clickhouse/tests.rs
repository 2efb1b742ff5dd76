//! The task over an in-process ClickHouse and Keeper (the model's synchronous drivers):
//! the connector-current variant's tokens, thrown cases and error tolerance, and the
//! fenced variant's owner-conditional writes.

use super::plan::Variant;
use super::{state_table_def, ClickHouseSinkConfig, ClickHouseSinkTask, NoHooks};
use crate::client::clickhouse::{ChClientError, ClickHouse, KeeperMap};
use crate::connect::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask};
use crate::test_support::block_on;
use async_trait::async_trait;
use eosim_sim::clickhouse::keeper::Keeper;
use eosim_sim::clickhouse::keeper_map::{self, KeeperMapTable, VersionedRow};
use eosim_sim::clickhouse::model::{ClickHouse as Model, InsertSummary, ServerConfig};
use eosim_sim::clickhouse::types::{
    Engine, Insert, Row, TableDef, Value as ChValue, VersionProfile,
};
use eosim_sim::kafka::TopicPartition;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// ClickHouse and Keeper in one process; every data insert is kept.
#[derive(Clone)]
struct Local {
    state: Arc<Mutex<(Model, Keeper)>>,
    inserts: Arc<Mutex<Vec<Insert>>>,
}

impl Local {
    fn new() -> Self {
        let model = Model::new(VersionProfile::V23_7, ServerConfig::default());
        Self {
            state: Arc::new(Mutex::new((model, Keeper::new()))),
            inserts: Arc::default(),
        }
    }

    fn tokens(&self) -> Vec<Option<String>> {
        let inserts = self.inserts.lock().unwrap();
        let data = inserts.iter().filter(|i| i.table == "kafka2ck");
        data.map(|i| i.settings.insert_deduplication_token.clone())
            .collect()
    }
}

fn server(e: eosim_sim::clickhouse::ChError) -> ChClientError {
    ChClientError::Server(e)
}

#[async_trait]
impl ClickHouse for Local {
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError> {
        let (model, keeper) = &mut *self.state.lock().unwrap();
        let keeper_map = matches!(def.engine, Engine::KeeperMap { .. });
        let name = def.name.clone();
        model.create_table(def).map_err(server)?;
        if keeper_map {
            let table = KeeperMapTable::resolve(model, &name).map_err(server)?;
            keeper_map::create_paths(keeper, &table).map_err(server)?;
        }
        Ok(())
    }

    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError> {
        let (model, keeper) = &mut *self.state.lock().unwrap();
        if insert.table == "connect_state" {
            keeper_map::insert(model, keeper, &insert).map_err(server)?;
            return Ok(InsertSummary::default());
        }
        self.inserts.lock().unwrap().push(insert.clone());
        model.insert(0, &insert).map_err(server)
    }

    async fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChClientError> {
        let (model, _) = &*self.state.lock().unwrap();
        model.select(table, final_).map_err(server)
    }
}

#[async_trait]
impl KeeperMap for Local {
    async fn get(
        &self,
        table: &str,
        key: serde_json::Value,
    ) -> Result<Option<VersionedRow>, ChClientError> {
        let (model, keeper) = &*self.state.lock().unwrap();
        keeper_map::get(model, keeper, table, &key).map_err(server)
    }

    /// No ClickHouse statement takes a Keeper version from the client.
    async fn put_if_version(
        &self,
        _table: &str,
        _row: serde_json::Value,
        _expected: Option<i32>,
    ) -> Result<i32, ChClientError> {
        panic!("a ClickHouse client cannot send a versioned KeeperMap write")
    }

    /// The strict-mode `ALTER TABLE ... UPDATE ... WHERE` on the server: read, check,
    /// versioned set, in one step.
    async fn update_where(
        &self,
        table: &str,
        key: serde_json::Value,
        row: serde_json::Value,
        column: usize,
        equals: &ChValue,
    ) -> Result<(), ChClientError> {
        let (model, keeper) = &mut *self.state.lock().unwrap();
        let Some(current) = keeper_map::get(model, keeper, table, &key).map_err(server)? else {
            return Ok(());
        };
        if current.row.get(column) != Some(equals) {
            return Ok(());
        }
        let version = Some(current.version);
        keeper_map::put_if_version(model, keeper, table, &row, version)
            .map(drop)
            .map_err(server)
    }
}

/// Keeps what the task reports.
#[derive(Default)]
struct Kept(Vec<i64>);

impl ErrantRecordReporter for Kept {
    fn report(&mut self, record: &SinkRecord, _error: &str) -> Result<(), ConnectError> {
        self.0.push(record.offset);
        Ok(())
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn records(min: i64, max: i64) -> Vec<SinkRecord> {
    (min..=max)
        .map(|o| SinkRecord {
            tp: tp(),
            offset: o,
            key: None,
            value: Some(serde_json::json!({"id": o, "name": format!("r{o}")})),
            headers: Vec::new(),
            timestamp_ms: 0,
        })
        .collect()
}

fn props(variant: Variant, extra: &[(&str, &str)]) -> ClickHouseSinkConfig {
    let mut p = BTreeMap::new();
    p.insert("exactlyOnce".to_string(), "true".to_string());
    p.insert("variant".to_string(), variant.name().to_string());
    for (k, v) in extra {
        p.insert(k.to_string(), v.to_string());
    }
    ClickHouseSinkConfig::from_props(&p).expect("valid props")
}

async fn task(
    client: &Local,
    config: ClickHouseSinkConfig,
    owner: &str,
) -> ClickHouseSinkTask<Local> {
    let _ = client.create_table(TableDef::kafka2ck()).await;
    let _ = client.create_table(state_table_def("connect_state")).await;
    let mut t = ClickHouseSinkTask::new(config, client.clone(), owner.into(), Arc::new(NoHooks));
    t.open(&[tp()]).await.expect("open");
    t
}

/// Stores `{min, max, phase}` for the partition, as an earlier task left it.
async fn store(client: &Local, min: i64, max: i64, phase: &str, owner: &str) {
    let row = serde_json::json!({"key": "t-0", "min_offset": min, "max_offset": max,
                                 "state": phase, "owner": owner});
    client
        .insert(Insert::new("connect_state", vec![row]))
        .await
        .expect("state stored");
}

#[test]
fn connector_current_inserts_trimmed_records_under_the_untrimmed_batch_token() {
    block_on(async {
        let client = Local::new();
        let mut t = task(&client, props(Variant::ConnectorCurrent, &[]), "a").await;
        store(&client, 50, 99, "BEFORE", "a").await;
        t.put(records(0, 99), &mut Kept::default()).await.unwrap();
        // Same while BEFORE: records 50..99 inserted, token of the batch [0..99].
        assert_eq!(client.tokens(), vec![Some("t-0-0-99".to_string())]);
        let inserts = client.inserts.lock().unwrap();
        assert_eq!(inserts[0].rows.len(), 50);
    });
}

#[test]
fn connector_current_throws_on_an_older_batch_unless_tolerate_state_mismatch() {
    block_on(async {
        let client = Local::new();
        let mut t = task(&client, props(Variant::ConnectorCurrent, &[]), "a").await;
        store(&client, 100, 199, "AFTER", "a").await;
        let got = t.put(records(50, 120), &mut Kept::default()).await;
        assert!(matches!(got, Err(ConnectError::Fatal(m)) if m.contains("previous")));
        let tolerant = props(
            Variant::ConnectorCurrent,
            &[("tolerateStateMismatch", "true")],
        );
        let mut t = task(&client, tolerant, "b").await;
        t.put(records(50, 120), &mut Kept::default()).await.unwrap();
        assert!(client.tokens().is_empty(), "an older batch is skipped");
    });
}

#[test]
fn errors_tolerance_all_reports_a_thrown_partition_and_goes_on() {
    block_on(async {
        let client = Local::new();
        let dlq = [
            ("errors.tolerance", "all"),
            ("errors.deadletterqueue.topic.name", "dlq"),
        ];
        let mut t = task(&client, props(Variant::ConnectorCurrent, &dlq), "a").await;
        store(&client, 0, 99, "BEFORE", "a").await;
        // Contains while BEFORE: doLogic throws; ProxySinkTask.put reports the records.
        let mut kept = Kept::default();
        t.put(records(0, 49), &mut kept).await.unwrap();
        assert_eq!(kept.0, (0..50).collect::<Vec<_>>());
        let offsets = BTreeMap::from([(tp(), 50)]);
        assert_eq!(t.pre_commit(&offsets).await.unwrap(), offsets);
        // Without a DLQ topic or errors.log.enable there is no reporter: dropped silently.
        let mut t = task(&client, props(Variant::ConnectorCurrent, &dlq[..1]), "b").await;
        let mut kept = Kept::default();
        t.put(records(0, 49), &mut kept).await.unwrap();
        assert!(kept.0.is_empty());
        assert_eq!(t.pre_commit(&offsets).await.unwrap(), offsets);
        // errors.tolerance=none fails the task instead.
        let mut t = task(&client, props(Variant::ConnectorCurrent, &[]), "c").await;
        assert!(t.put(records(0, 49), &mut Kept::default()).await.is_err());
    });
}

#[test]
fn fencing_takes_over_by_owner_and_refuses_the_previous_owner_s_state_writes() {
    block_on(async {
        let client = Local::new();
        let config = props(Variant::SeedTokenFencing, &[]);
        let mut a = task(&client, config.clone(), "a").await;
        a.put(records(0, 9), &mut Kept::default()).await.unwrap();
        let b = task(&client, config, "b").await;
        let seen = b.read_state(&tp()).await.unwrap();
        assert_eq!(
            seen.owner.as_deref(),
            Some("b"),
            "claimed by an owner-conditional update"
        );
        // A's next batch: its state write matches no row (owner is b), read back: fenced.
        a.put(records(10, 19), &mut Kept::default()).await.unwrap();
        assert!(a.fenced.contains(&tp()));
        assert_eq!(client.tokens().len(), 1, "the stale owner inserted nothing");
        let seen = b.read_state(&tp()).await.unwrap();
        assert_eq!(seen.owner.as_deref(), Some("b"));
    });
}

//! The clickhouse and keeper nodes under madsim: RPC round trips, a kill mid-insert,
//! Keeper unavailable.

use super::error::ErrorCode;
use super::keeper::{Keeper, KeeperError};
use super::model::{ClickHouse, ServerConfig};
use super::service::*;
use super::types::*;
use madsim::net::Endpoint;
use madsim::runtime::Handle;
use madsim::task::NodeId;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

struct Nodes {
    world: ClickHouseWorld,
    clickhouse: NodeId,
    keeper: NodeId,
    client: madsim::runtime::NodeHandle,
}

fn start(profile: VersionProfile) -> Nodes {
    let handle = Handle::current();
    let world = ClickHouseWorld::new(
        ClickHouse::new(profile, ServerConfig::default()),
        Keeper::new(),
    );
    let w = world.clone();
    let keeper = handle
        .create_node()
        .name("keeper")
        .ip(keeper_ip())
        .init(move || serve_keeper(w.clone()))
        .build();
    let w = world.clone();
    let clickhouse = handle
        .create_node()
        .name("clickhouse")
        .ip(clickhouse_ip())
        .init(move || serve_clickhouse(w.clone()))
        .build();
    let client = handle
        .create_node()
        .name("client")
        .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 9, 9)))
        .build();
    Nodes {
        world,
        clickhouse: clickhouse.id(),
        keeper: keeper.id(),
        client,
    }
}

async fn call(request: ChRequest) -> Result<ChReply, crate::net::RpcError> {
    let endpoint = Endpoint::bind("0.0.0.0:0").await.expect("bind");
    crate::net::call(
        &endpoint,
        clickhouse_addr(),
        request,
        Duration::from_secs(30),
    )
    .await
}

fn kafka2ck_rows(n: u64) -> Vec<serde_json::Value> {
    (0..n)
        .map(|id| json!({"id": id, "name": format!("n{id}")}))
        .collect()
}

#[madsim::test]
async fn clickhouse_node_inserts_and_selects_over_rpc() {
    let nodes = start(VersionProfile::V23_7);
    let rows = nodes
        .client
        .spawn(async move {
            madsim::time::sleep(Duration::from_millis(10)).await;
            call(ChRequest::CreateTable(TableDef::kafka2ck()))
                .await
                .unwrap()
                .unwrap();
            let insert = Insert::new("kafka2ck", kafka2ck_rows(5));
            call(ChRequest::Insert(insert)).await.unwrap().unwrap();
            call(ChRequest::Select {
                table: "kafka2ck".into(),
                final_: false,
            })
            .await
            .unwrap()
            .unwrap()
        })
        .await
        .unwrap();
    assert_eq!(
        rows,
        ChResponse::Rows(
            nodes
                .world
                .server
                .lock()
                .unwrap()
                .select("kafka2ck", false)
                .unwrap()
        )
    );
    let ChResponse::Rows(rows) = rows else {
        panic!()
    };
    assert_eq!(rows.len(), 5);
}

#[madsim::test]
async fn clickhouse_killed_mid_insert_keeps_a_prefix_of_the_blocks() {
    let nodes = start(VersionProfile::V23_7);
    let task = nodes.client.spawn(async move {
        madsim::time::sleep(Duration::from_millis(10)).await;
        call(ChRequest::CreateTable(TableDef::kafka2ck()))
            .await
            .unwrap()
            .unwrap();
        let insert = Insert::new("kafka2ck", kafka2ck_rows(200))
            .block_size(1)
            .unsquashed();
        call(ChRequest::Insert(insert)).await
    });
    madsim::time::sleep(Duration::from_millis(100)).await;
    Handle::current().kill(nodes.clickhouse);
    let result = task.await.unwrap();
    assert!(result.is_err(), "the client gets no answer: {result:?}");
    let parts = nodes
        .world
        .server
        .lock()
        .unwrap()
        .parts("kafka2ck")
        .unwrap()
        .len();
    assert!(
        parts > 0 && parts < 200,
        "a strict prefix was committed: {parts}"
    );
    let committed = parts;
    madsim::time::sleep(Duration::from_millis(500)).await;
    let parts = nodes
        .world
        .server
        .lock()
        .unwrap()
        .parts("kafka2ck")
        .unwrap()
        .len();
    assert_eq!(parts, committed, "nothing more is written after the kill");
    Handle::current().restart(nodes.clickhouse);
    let rows = nodes
        .client
        .spawn(async move {
            madsim::time::sleep(Duration::from_millis(10)).await;
            call(ChRequest::Select {
                table: "kafka2ck".into(),
                final_: false,
            })
            .await
        })
        .await
        .unwrap();
    let Ok(Ok(ChResponse::Rows(rows))) = rows else {
        panic!("{rows:?}")
    };
    assert_eq!(rows.len(), committed, "committed parts survive the restart");
}

fn state_table() -> TableDef {
    let columns = vec![
        Column::new("key", ColumnType::String),
        Column::new("minOffset", ColumnType::UInt64),
        Column::new("maxOffset", ColumnType::UInt64),
        Column::new("state", ColumnType::String),
    ];
    TableDef::keeper_map("connect_state", columns, "/connect_state", "key")
}

#[madsim::test]
async fn keeper_map_through_the_nodes_fails_while_keeper_is_down() {
    let nodes = start(VersionProfile::V23_7);
    let record =
        |state: &str| json!({"key": "t-0", "minOffset": 0, "maxOffset": 99, "state": state});
    let get = || ChRequest::KeeperMapGet {
        table: "connect_state".into(),
        key: json!("t-0"),
    };
    let r = nodes
        .client
        .spawn(async move {
            madsim::time::sleep(Duration::from_millis(10)).await;
            call(ChRequest::CreateTable(state_table()))
                .await
                .unwrap()
                .unwrap();
            let insert = Insert::new("connect_state", vec![record("BEFORE")]);
            call(ChRequest::Insert(insert)).await.unwrap().unwrap();
            let put = ChRequest::KeeperMapPutIfVersion {
                table: "connect_state".into(),
                row: record("AFTER"),
                expected_version: Some(0),
            };
            call(put.clone()).await.unwrap().unwrap();
            let stale = call(put).await.unwrap().unwrap_err();
            (stale, call(get()).await.unwrap().unwrap())
        })
        .await
        .unwrap();
    assert_eq!(r.0.keeper_error, Some(KeeperError::BadVersion));
    let ChResponse::Got(Some(row)) = r.1 else {
        panic!("{:?}", r.1)
    };
    assert_eq!(
        (row.version, &row.row[3]),
        (1, &Value::String("AFTER".into()))
    );

    Handle::current().kill(nodes.keeper);
    let down = nodes
        .client
        .spawn(async move { call(get()).await.unwrap() })
        .await
        .unwrap();
    let err = down.unwrap_err();
    assert_eq!(
        (err.code, err.keeper_error),
        (
            ErrorCode::KeeperException,
            Some(KeeperError::ConnectionLoss)
        )
    );

    Handle::current().restart(nodes.keeper);
    let up = nodes
        .client
        .spawn(async move {
            madsim::time::sleep(Duration::from_millis(10)).await;
            call(get()).await.unwrap()
        })
        .await
        .unwrap();
    assert!(matches!(up, Ok(ChResponse::Got(Some(_)))), "{up:?}");
}

#[madsim::test]
async fn replicated_insert_is_refused_while_keeper_is_down() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let nodes = start(VersionProfile::V23_7);
    let mut def = TableDef::kafka2ck();
    def.engine = Engine::ReplicatedMergeTree;
    Handle::current().kill(nodes.keeper);
    let r = nodes
        .client
        .spawn(async move {
            madsim::time::sleep(Duration::from_millis(10)).await;
            call(ChRequest::CreateTable(def)).await.unwrap().unwrap();
            call(ChRequest::Insert(Insert::new("kafka2ck", kafka2ck_rows(3))))
                .await
                .unwrap()
        })
        .await
        .unwrap();
    assert_eq!(r.unwrap_err().code, ErrorCode::TableIsReadOnly);
    assert_eq!(
        nodes
            .world
            .server
            .lock()
            .unwrap()
            .parts("kafka2ck")
            .unwrap()
            .len(),
        0
    );
    crate::marks::assert_hit(&[
        "clickhouse:keeper-unavailable",
        "clickhouse:table-read-only",
    ]);
}

#[madsim::test]
async fn keeper_lost_during_a_replicated_insert_is_read_only_or_unknown_status() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let nodes = start(VersionProfile::V23_7);
    let mut def = TableDef::kafka2ck();
    def.engine = Engine::ReplicatedMergeTree;
    let task = nodes.client.spawn(async move {
        madsim::time::sleep(Duration::from_millis(10)).await;
        call(ChRequest::CreateTable(def)).await.unwrap().unwrap();
        let insert = Insert::new("kafka2ck", kafka2ck_rows(200))
            .block_size(1)
            .unsquashed();
        call(ChRequest::Insert(insert)).await.unwrap()
    });
    madsim::time::sleep(Duration::from_millis(300)).await;
    Handle::current().kill(nodes.keeper);
    let err = task.await.unwrap().unwrap_err();
    let codes = [ErrorCode::TableIsReadOnly, ErrorCode::UnknownStatusOfInsert];
    assert!(codes.contains(&err.code), "{err}");
    let parts = nodes
        .world
        .server
        .lock()
        .unwrap()
        .parts("kafka2ck")
        .unwrap()
        .len();
    assert!(parts > 0 && parts < 200, "a prefix was committed: {parts}");
    crate::marks::assert_hit(&["clickhouse:keeper-unavailable"]);
}

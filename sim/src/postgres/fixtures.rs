//! The `kv` table and its upsert: the smallest table the tests of the server node
//! (`service_tests.rs`) and of the simulated client (`harness/src/client/sim/postgres/`)
//! share, kept in one place so that they cannot drift apart.

use super::{Column, ColumnType, CreateTable, Insert, OnConflict, Statement, Value};

/// `CREATE TABLE IF NOT EXISTS kv (k bigint PRIMARY KEY, v text)`.
pub fn kv_table() -> Statement {
    Statement::CreateTable(CreateTable {
        name: "kv".into(),
        columns: vec![
            Column::new("k", ColumnType::BigInt),
            Column::new("v", ColumnType::Text),
        ],
        primary_key: vec!["k".into()],
        if_not_exists: true,
    })
}

/// `INSERT INTO kv VALUES (k, v) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`.
pub fn kv_upsert(k: i64, v: &str) -> Statement {
    Statement::Insert(Insert {
        table: "kv".into(),
        columns: vec![],
        rows: vec![vec![Value::Int(k), Value::text(v)]],
        on_conflict: OnConflict::DoUpdate {
            conflict_target: vec!["k".into()],
            set: vec!["v".into()],
        },
    })
}

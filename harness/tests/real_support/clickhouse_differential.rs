//! Differential conformance of ClickHouse inserts: the same generated INSERTs against real
//! ClickHouse 18.16 with ZooKeeper (through eosim's real client) and against the model
//! (`eosim_sim::clickhouse::model::ClickHouse`, 18.16 profile).
//!
//! Each case creates three tables (`id UInt8, name String, p UInt8`): a
//! `ReplicatedMergeTree` (block deduplication through ZooKeeper, the default window of
//! 100), the same partitioned by `p` (one part and one block id per partition of a block),
//! and a plain `MergeTree` (no deduplication on 18.16). The operations are INSERTs of
//! generated rows into one of them: any order, repeats of an earlier INSERT (identical
//! blocks), the same rows reordered, `max_insert_block_size` of 1–3 rows, squashing on or
//! off (`min_insert_block_size_rows/_bytes = 0`), `insert_deduplicate` on or off, and a
//! row that does not parse (a string for `UInt8`) at some position.
//!
//! What is compared after every INSERT: its result (ok, or the ClickHouse error code),
//! the table's rows (as a sorted multiset), and the number of parts the table was written
//! as (level-0 parts in `system.parts`, active or merged away). So a block that the model
//! deduplicates and the server writes (or the reverse), a part split differently, or an
//! INSERT whose blocks before a bad row are kept in one world and not the other, shows.
//!
//! Deliberately not compared: the window's eviction. The server trims block ids in its
//! cleanup thread (`cleanup_delay_period` 30 s plus a random add), the model at a fixed
//! period, so the sequences stay inside the window (at most 20 INSERTs per case, window
//! 100) and eviction is left to the model's own tests.

use eosim::client::clickhouse::{ChClientError, ClickHouse as _};
use eosim::client::real::clickhouse::RealClickHouse;
use eosim_sim::clickhouse::model::{ClickHouse as Model, ServerConfig};
use eosim_sim::clickhouse::types::{
    Column, ColumnType, Engine, Insert, TableDef, Value, VersionProfile,
};
use eosim_sim::clickhouse::ErrorCode;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use std::collections::BTreeMap;

/// The three tables of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    /// `ReplicatedMergeTree ORDER BY id`.
    Replicated,
    /// `ReplicatedMergeTree PARTITION BY p ORDER BY id`.
    Partitioned,
    /// `MergeTree ORDER BY id`.
    Plain,
}

impl Table {
    const ALL: [Table; 3] = [Table::Replicated, Table::Partitioned, Table::Plain];

    fn name(self, case: u32) -> String {
        let kind = match self {
            Table::Replicated => "dedup",
            Table::Partitioned => "dedup_parts",
            Table::Plain => "plain",
        };
        format!("diff_{kind}_{case}")
    }

    fn def(self, case: u32) -> TableDef {
        let columns = vec![
            Column::new("id", ColumnType::UInt8),
            Column::new("name", ColumnType::String),
            Column::new("p", ColumnType::UInt8),
        ];
        let engine = match self {
            Table::Plain => Engine::MergeTree,
            _ => Engine::ReplicatedMergeTree,
        };
        let mut def = TableDef::new(&self.name(case), columns, engine, &["id"]);
        if self == Table::Partitioned {
            def.partition_by = Some("p".into());
        }
        def
    }
}

/// How an INSERT's rows are chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rows {
    /// New rows with these ids.
    Ids(Vec<u8>),
    /// The rows of the `back`-th most recent INSERT again (identical blocks).
    Repeat { back: usize },
    /// The rows of the `back`-th most recent INSERT, reversed.
    Reversed { back: usize },
}

/// One generated INSERT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Into which table.
    pub table: Table,
    /// Which rows.
    pub rows: Rows,
    /// `max_insert_block_size`.
    pub block: usize,
    /// `min_insert_block_size_rows/_bytes = 0`: every block its own part.
    pub unsquashed: bool,
    /// `insert_deduplicate`.
    pub deduplicate: bool,
    /// A row that does not parse, inserted before this index (clamped to the end).
    pub bad_at: Option<usize>,
}

/// What one INSERT showed; equal in both worlds or the model is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// Ok, or the error code.
    pub result: Result<(), ErrorCode>,
    /// The table's rows, rendered and sorted.
    pub rows: Vec<String>,
    /// Parts the table was written as.
    pub parts: u64,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let table = prop_oneof![
        3 => Just(Table::Replicated),
        2 => Just(Table::Partitioned),
        1 => Just(Table::Plain),
    ];
    let rows = prop_oneof![
        4 => proptest::collection::vec(0u8..8, 1..6).prop_map(Rows::Ids),
        3 => (0usize..3).prop_map(|back| Rows::Repeat { back }),
        1 => (0usize..3).prop_map(|back| Rows::Reversed { back }),
    ];
    let bad_at = prop_oneof![4 => Just(None), 1 => (0usize..6).prop_map(Some)];
    (
        table,
        rows,
        1usize..4,
        any::<bool>(),
        prop::bool::weighted(0.85),
        bad_at,
    )
        .prop_map(|(table, rows, block, unsquashed, deduplicate, bad_at)| Op {
            table,
            rows,
            block,
            unsquashed,
            deduplicate,
            bad_at,
        })
}

fn row(id: u8) -> serde_json::Value {
    json!({"id": id, "name": format!("r{id}"), "p": id % 2})
}

/// The INSERTs of a case, made concrete: repeats resolved against the earlier INSERTs
/// into the same table (a repeat with none becomes the ids `[0]`).
fn inserts(case: u32, ops: &[Op]) -> Vec<(Table, Insert)> {
    let mut earlier: BTreeMap<Table, Vec<Vec<serde_json::Value>>> = BTreeMap::new();
    let mut out = Vec::new();
    for op in ops {
        let before = earlier.entry(op.table).or_default();
        let pick = |back: usize| before.iter().rev().nth(back).cloned();
        let mut rows = match &op.rows {
            Rows::Ids(ids) => ids.iter().map(|&id| row(id)).collect(),
            Rows::Repeat { back } => pick(*back).unwrap_or_else(|| vec![row(0)]),
            Rows::Reversed { back } => {
                let mut rows = pick(*back).unwrap_or_else(|| vec![row(0)]);
                rows.reverse();
                rows
            }
        };
        before.push(rows.clone());
        if let Some(at) = op.bad_at {
            let at = at.min(rows.len());
            rows.insert(at, json!({"id": "bad", "name": "x", "p": 0}));
        }
        let mut insert = Insert::new(&op.table.name(case), rows).block_size(op.block);
        if op.unsquashed {
            insert = insert.unsquashed();
        }
        insert.settings.insert_deduplicate = Some(op.deduplicate);
        out.push((op.table, insert));
    }
    out
}

fn rendered(rows: Vec<Vec<Value>>) -> Vec<String> {
    let mut rows: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
    rows.sort();
    rows
}

/// Runs `cases` generated sequences against the real server at `url` and the model;
/// returns (cases agreeing, cases run) and a tally of what the agreeing cases exercised.
/// Panics on the first (shrunk) difference.
pub fn run(
    rt: &tokio::runtime::Runtime,
    ch: &RealClickHouse,
    cases: u32,
) -> (u32, u32, BTreeMap<String, u32>) {
    let strategy = proptest::collection::vec(op_strategy(), 1..20);
    super::real_support::run_differential("ClickHouse", cases, 32, strategy, |n, ops| {
        let inserts = inserts(n, &ops);
        let real = rt
            .block_on(run_real(ch, n, &inserts))
            .map_err(TestCaseError::fail)?;
        let model = run_model(n, &inserts);
        prop_assert_eq!(&real, &model, "ops: {:?}", ops);
        let mut exercised = Vec::new();
        let mut parts_before: BTreeMap<Table, u64> = BTreeMap::new();
        let mut rows_before: BTreeMap<Table, usize> = BTreeMap::new();
        for ((table, insert), observed) in inserts.iter().zip(&model) {
            let parts = parts_before.entry(*table).or_default();
            let rows = rows_before.entry(*table).or_default();
            let kind = match (&observed.result, observed.parts > *parts) {
                (Err(code), _) => format!("error {code:?}"),
                (Ok(()), false) => "ok, all deduplicated".to_string(),
                (Ok(()), true) if observed.rows.len() < *rows + insert.rows.len() => {
                    "ok, some deduplicated".to_string()
                }
                (Ok(()), true) => "ok, all written".to_string(),
            };
            exercised.push(format!("{table:?}: {kind}"));
            (*parts, *rows) = (observed.parts, observed.rows.len());
        }
        Ok(exercised)
    })
}

fn run_model(case: u32, inserts: &[(Table, Insert)]) -> Vec<Observation> {
    let mut model = Model::new(VersionProfile::V18_16, ServerConfig::default());
    for table in Table::ALL {
        model
            .create_table(table.def(case))
            .expect("model: create table");
    }
    let mut out = Vec::new();
    for (n, (table, insert)) in inserts.iter().enumerate() {
        let result = model
            .insert(n as u64 * 1_000, insert)
            .map(|_| ())
            .map_err(|e| e.code);
        let name = table.name(case);
        let rows = model.select(&name, false).expect("model: select");
        let parts = model.parts(&name).map_or(0, |p| p.len() as u64);
        out.push(Observation {
            result,
            rows: rendered(rows),
            parts,
        });
    }
    out
}

async fn run_real(
    ch: &RealClickHouse,
    case: u32,
    inserts: &[(Table, Insert)],
) -> Result<Vec<Observation>, String> {
    for table in Table::ALL {
        ch.create_table(table.def(case))
            .await
            .map_err(|e| format!("create {}: {e}", table.name(case)))?;
    }
    let mut out = Vec::new();
    for (table, insert) in inserts {
        let result = match ch.insert(insert.clone()).await {
            Ok(_) => Ok(()),
            Err(ChClientError::Server(e)) => Err(e.code),
            Err(e) => return Err(format!("insert: {e}")),
        };
        let name = table.name(case);
        let rows = ch
            .select(&name, false)
            .await
            .map_err(|e| format!("select {name}: {e}"))?;
        let sql = format!(
            "SELECT count() FROM system.parts WHERE database = currentDatabase() \
             AND table = '{name}' AND level = 0"
        );
        let parts = ch
            .query_text(&sql)
            .await
            .map_err(|e| format!("parts of {name}: {e}"))?;
        let parts = parts
            .trim()
            .parse()
            .map_err(|e| format!("parts of {name}: {parts:?}: {e}"))?;
        out.push(Observation {
            result,
            rows: rendered(rows),
            parts,
        });
    }
    Ok(out)
}

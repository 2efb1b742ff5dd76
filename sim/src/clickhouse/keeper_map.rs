//! KeeperMap tables over the [`Keeper`] model (models-reference F.5; [CH-doc:
//! engines/table-engines/special/keepermap], `src/Storages/StorageKeeperMap.cpp`).
//!
//! A KeeperMap table `KeeperMap(root_path [, keys_limit]) PRIMARY KEY(key)` keeps each
//! row as one znode `<keeper_map_path_prefix><root_path>/data/<base64(key)>` whose data
//! holds the row. Tables on the same path share their rows.
//!
//! - INSERT: all rows of one INSERT become one Keeper `multi` (atomic across keys; within
//!   one INSERT the last row of a key wins). Non-strict mode (default): for each key an
//!   `exists` first, then create (new key) or set with version -1 (blind overwrite); a
//!   key created by someone else between the check and the multi fails the whole multi.
//!   `keeper_map_strict_mode=1` (23.4+): every key is created, so an existing key fails
//!   the INSERT with `KEEPER_EXCEPTION` (node exists).
//! - Reads: a get by key; a full scan lists the children and gets each (not a snapshot).
//! - A conditional write by version ([`put_if_version`]) is what strict-mode
//!   `ALTER TABLE ... UPDATE` does inside one query (read values with versions, then a
//!   versioned multi); ClickHouse does not let a client pass the version itself.
//!   eosim's clients expose it only as that statement's second step (the harness'
//!   `KeeperMap::update_where`), which is what the fenced sink variant uses.
//!
//! Simplifications: keys are encoded as URL-safe base64 of the key's text (ClickHouse
//! base64-encodes the key's binary serialization), values as JSON of the whole row
//! (ClickHouse stores the other columns in its binary serialization); the table's
//! `metadata` and `tables` znodes are not created.
//!
//! The functions come in two layers: pure steps ([`prepare_insert`], [`insert_ops`],
//! [`decode`]) that the service drives over RPC, and synchronous drivers ([`insert`],
//! [`get`], [`select`], [`put_if_version`]) over a local `&mut Keeper` for tests.

use super::error::{ChError, ErrorCode};
use super::keeper::{CreateMode, Keeper, KeeperError, MultiError, Op};
use super::model::ClickHouse;
use super::types::{Engine, Insert, Row, TableDef, Value};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A KeeperMap row with its znode version (`dataVersion`, 0 when first written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionedRow {
    /// The row, one value per column.
    pub row: Row,
    /// The znode's version.
    pub version: i32,
}

/// Where a KeeperMap table lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperMapTable {
    /// The definition.
    pub def: TableDef,
    /// `<prefix><root>/data`.
    pub data_path: String,
    /// `keys_limit`.
    pub keys_limit: Option<u64>,
    key_index: usize,
}

fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        for _ in chunk.len()..3 {
            out.push('=');
        }
    }
    out
}

fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => other.to_json().to_string(),
    }
}

impl KeeperMapTable {
    /// Looks up KeeperMap table `table` on `ch`.
    ///
    /// # Errors
    /// 60 if it does not exist, 36 if it is not a KeeperMap table or KeeperMap is disabled.
    pub fn resolve(ch: &ClickHouse, table: &str) -> Result<Self, ChError> {
        let def = ch.table(table).ok_or_else(|| {
            ChError::new(
                ErrorCode::UnknownTable,
                format!("Table default.{table} doesn't exist"),
            )
        })?;
        let Engine::KeeperMap {
            root_path,
            keys_limit,
        } = &def.engine
        else {
            let msg = format!("Table {table} is not a KeeperMap table");
            return Err(ChError::new(ErrorCode::BadArguments, msg));
        };
        let prefix = ch
            .config()
            .keeper_map_path_prefix
            .as_deref()
            .ok_or_else(|| ChError::new(ErrorCode::BadArguments, "KeeperMap is disabled"))?;
        let key = def.primary_key.as_deref().expect("checked at create");
        Ok(Self {
            def: def.clone(),
            data_path: format!("{}{}/data", prefix.trim_end_matches('/'), root_path),
            keys_limit: *keys_limit,
            key_index: def.column_index(key).expect("checked at create"),
        })
    }

    /// The znode of `key`.
    pub fn key_path(&self, key: &Value) -> String {
        format!(
            "{}/{}",
            self.data_path,
            base64_url(key_text(key).as_bytes())
        )
    }

    /// The znode path and data of `row`.
    pub fn encode(&self, row: &Row) -> (String, Vec<u8>) {
        let data = serde_json::to_vec(row).expect("values serialize");
        (self.key_path(&row[self.key_index]), data)
    }

    /// Converts a JSON key into the key column's value.
    ///
    /// # Errors
    /// The key column's conversion error.
    pub fn key_value(&self, ch: &ClickHouse, key: &serde_json::Value) -> Result<Value, ChError> {
        let column = &self.def.columns[self.key_index];
        let conversion = ch.conversion(&Default::default());
        super::types::convert(&column.name, &column.ty, key, conversion)
    }
}

/// The row stored in a key's znode `data`.
///
/// # Errors
/// 117 when the data is not what [`KeeperMapTable::encode`] writes.
pub fn decode(data: &[u8]) -> Result<Row, ChError> {
    serde_json::from_slice(data).map_err(|e| {
        ChError::new(
            ErrorCode::IncorrectData,
            format!("bad KeeperMap value: {e}"),
        )
    })
}

/// The paths `CREATE TABLE ... ENGINE = KeeperMap` creates (ancestors included).
pub fn paths_to_create(table: &KeeperMapTable) -> Vec<String> {
    let mut paths = Vec::new();
    let mut prefix = String::new();
    for part in table.data_path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        paths.push(prefix.clone());
    }
    paths
}

/// An INSERT into a KeeperMap table, converted: one (path, data) per distinct key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedInsert {
    /// The table.
    pub table: KeeperMapTable,
    /// (znode path, data) per key; the last row of a key wins.
    pub entries: Vec<(String, Vec<u8>)>,
    /// `keeper_map_strict_mode`.
    pub strict: bool,
}

/// Converts `insert` for a KeeperMap table.
///
/// # Errors
/// 60, 36, 115 (settings on 18.16), or a conversion error (nothing is written then).
pub fn prepare_insert(ch: &ClickHouse, insert: &Insert) -> Result<PreparedInsert, ChError> {
    let table = KeeperMapTable::resolve(ch, &insert.table)?;
    ch.check_settings(&insert.settings)?;
    let mut entries = BTreeMap::new();
    for (i, json) in insert.rows.iter().enumerate() {
        let row = ch
            .convert_row(&table.def, json, &insert.settings)
            .map_err(|mut e| {
                e.message = format!("{}: (at row {})", e.message, i + 1);
                e
            })?;
        let (path, data) = table.encode(&row);
        entries.insert(path, data);
    }
    let strict = insert.settings.keeper_map_strict_mode.unwrap_or(false);
    Ok(PreparedInsert {
        table,
        entries: entries.into_iter().collect(),
        strict,
    })
}

/// The `multi` for `prepared`, given which keys exist (`existing[i]` for entry `i`, from
/// `exists` calls) and how many keys the table holds (`keys_now`, the data node's
/// `num_children`).
///
/// # Errors
/// 290 when `keys_limit` would be exceeded.
pub fn insert_ops(
    prepared: &PreparedInsert,
    existing: &[bool],
    keys_now: u64,
) -> Result<Vec<Op>, ChError> {
    assert_eq!(
        existing.len(),
        prepared.entries.len(),
        "one existence flag per key"
    );
    let new_keys = existing.iter().filter(|e| !**e).count() as u64;
    if let Some(limit) = prepared.table.keys_limit {
        if keys_now + new_keys > limit {
            let msg = format!("Limit would be exceeded by inserting {new_keys} new key(s)");
            return Err(ChError::new(ErrorCode::LimitExceeded, msg));
        }
    }
    Ok(prepared
        .entries
        .iter()
        .zip(existing)
        .map(|((path, data), exists)| {
            if *exists && !prepared.strict {
                Op::Set {
                    path: path.clone(),
                    data: data.clone(),
                    version: -1,
                }
            } else {
                Op::Create {
                    path: path.clone(),
                    data: data.clone(),
                    mode: CreateMode::Persistent,
                }
            }
        })
        .collect())
}

/// The ClickHouse error for a failed multi: `KEEPER_EXCEPTION` with the op's error.
pub fn multi_error(e: MultiError) -> ChError {
    let mut error = ChError::from(e.error);
    error.message = format!("{} (multi op {})", error.message, e.index);
    error
}

/// Creates the table's znodes in `keeper`.
///
/// # Errors
/// 999 on a Keeper error.
pub fn create_paths(keeper: &mut Keeper, table: &KeeperMapTable) -> Result<(), ChError> {
    keeper
        .create_recursive(&table.data_path)
        .map_err(ChError::from)
}

/// `INSERT INTO <KeeperMap table>` against a local Keeper; returns the rows' key count.
///
/// # Errors
/// As [`prepare_insert`], [`insert_ops`], and 999 when the multi fails (strict mode and an
/// existing key: node exists; no data node: no node).
pub fn insert(ch: &ClickHouse, keeper: &mut Keeper, insert: &Insert) -> Result<usize, ChError> {
    let prepared = prepare_insert(ch, insert)?;
    let keys_now = keeper
        .exists(&prepared.table.data_path)
        .map_or(0, |s| s.num_children);
    let existing: Vec<bool> = prepared
        .entries
        .iter()
        .map(|(p, _)| keeper.exists(p).is_some())
        .collect();
    let ops = insert_ops(&prepared, &existing, keys_now as u64)?;
    keeper.multi(None, ops).map_err(multi_error)?;
    Ok(prepared.entries.len())
}

/// `SELECT * FROM <KeeperMap table> WHERE key = <key>` with the row's version.
///
/// # Errors
/// 60, 36, the key's conversion error, 999.
pub fn get(
    ch: &ClickHouse,
    keeper: &Keeper,
    table: &str,
    key: &serde_json::Value,
) -> Result<Option<VersionedRow>, ChError> {
    let table = KeeperMapTable::resolve(ch, table)?;
    let key = table.key_value(ch, key)?;
    match keeper.get(&table.key_path(&key)) {
        Ok((data, stat)) => Ok(Some(VersionedRow {
            row: decode(&data)?,
            version: stat.version,
        })),
        Err(KeeperError::NoNode) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `SELECT * FROM <KeeperMap table>`, ordered by key znode name (list the children,
/// then get each: not a snapshot when writers run concurrently).
///
/// # Errors
/// 60, 36, 999.
pub fn select(ch: &ClickHouse, keeper: &Keeper, table: &str) -> Result<Vec<Row>, ChError> {
    let table = KeeperMapTable::resolve(ch, table)?;
    let mut rows = Vec::new();
    for child in keeper.children(&table.data_path)? {
        match keeper.get(&format!("{}/{child}", table.data_path)) {
            Ok((data, _)) => rows.push(decode(&data)?),
            Err(KeeperError::NoNode) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(rows)
}

/// Writes `row` only if its key's znode has version `expected` (`None`: only if the key
/// does not exist yet); returns the new version.
///
/// # Errors
/// 999 with [`KeeperError::BadVersion`], [`KeeperError::NoNode`] or
/// [`KeeperError::NodeExists`] when the condition fails; conversion errors.
pub fn put_if_version(
    ch: &ClickHouse,
    keeper: &mut Keeper,
    table: &str,
    row: &serde_json::Value,
    expected: Option<i32>,
) -> Result<i32, ChError> {
    let (path, data) = prepare_put(ch, table, row)?;
    match expected {
        None => keeper
            .create(None, &path, &data, CreateMode::Persistent)
            .map(|_| 0),
        Some(version) => keeper.set(&path, &data, version).map(|s| s.version),
    }
    .map_err(ChError::from)
}

/// Converts one row for [`put_if_version`]: its znode path and data.
///
/// # Errors
/// 60, 36, conversion errors.
pub fn prepare_put(
    ch: &ClickHouse,
    table: &str,
    row: &serde_json::Value,
) -> Result<(String, Vec<u8>), ChError> {
    let table = KeeperMapTable::resolve(ch, table)?;
    let row = ch.convert_row(&table.def, row, &Default::default())?;
    Ok(table.encode(&row))
}

//! The ClickHouse server as a pure state machine: tables of the MergeTree family built
//! from inserted blocks, insert deduplication, and SELECT (with FINAL).
//!
//! # Inserts, blocks, parts (models-reference F.1)
//! The rows of an INSERT are parsed into blocks of `max_insert_block_size` rows, and
//! consecutive parsed blocks are squashed (`SquashingTransform`) until one holds
//! `min_insert_block_size_rows` rows or `min_insert_block_size_bytes` bytes (either bound
//! 0 is off; both 0 turn squashing off); the rest is squashed into a last block. Bytes are
//! counted as the rows' JSON text, an approximation of ClickHouse's in-memory size. So with
//! the defaults (about a million rows) a small INSERT is one block whatever its
//! `max_insert_block_size`, as a real 18.16 server showed (`harness/tests/real_clickhouse.rs`).
//! Each squashed block is split by partition and each piece becomes one level-0 part,
//! committed atomically on its own. A failure between parts leaves the committed prefix:
//! [`ClickHouse::insert_prefix`] stops after `k` blocks (the server died mid-insert), and a
//! conversion error leaves the blocks squashed and emitted before it committed, while the
//! rows still being squashed are lost with the failed query.
//!
//! # Deduplication (models-reference F.2; `src/Storages/MergeTree/MergeTreeSink.cpp`,
//! `ReplicatedMergeTreeSink.cpp`, `MergeTreeDeduplicationLog.cpp`)
//! Each part gets a block id `<partition_id>_<hi>_<lo>`: a 128-bit hash of the part's rows
//! after sorting by the ORDER BY key, or, with `insert_deduplication_token`, of the
//! string `<token>_<n>` where `n` counts the blocks of the INSERT (0, 1, ...). ClickHouse
//! uses SipHash128 over the part's column checksums; the model uses FNV-1a 128 over a
//! stable encoding of the sorted rows ([`block_hash`]): equal data ⇔ equal id, as there,
//! but the ids do not match a real server's. A part whose id is in the table's window is
//! dropped silently; the INSERT still succeeds. The window is per table, shared by every
//! writer:
//! - Replicated engines keep every id and trim lazily, as the cleanup thread does: every
//!   `cleanup_delay_period_ms` [`ClickHouse::tick`] keeps the newest
//!   `replicated_deduplication_window` ids and drops ids older than
//!   `replicated_deduplication_window_seconds` before the newest one. An id beyond the
//!   count still deduplicates until the cleanup runs (period 0 = trim at every insert).
//! - Plain MergeTree deduplicates only when `non_replicated_deduplication_window` > 0
//!   (default 0), trimming FIFO at insert time.
//!
//! # Durability
//! Committed parts and the deduplication logs survive a server restart (they are on disk;
//! `fsync_after_insert` is off but a process kill keeps the page cache), so a restart does
//! not touch the model: only inserts in flight lose their uncommitted blocks.
//!
//! Background merges are not modelled except that `FINAL` collapses ReplacingMergeTree
//! rows at read time ([`ClickHouse::select`]). KeeperMap tables are defined here but their
//! rows live in Keeper: see [`super::keeper_map`].

use super::error::{ChError, ErrorCode};
use super::types::*;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Server configuration (`config.xml`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerConfig {
    /// `keeper_map_path_prefix`; `None` disables KeeperMap (BAD_ARGUMENTS, "KeeperMap is
    /// disabled"). The real default is disabled; the model's default is
    /// `/keeper_map_tables`, as in the KeeperMap docs page's example.
    pub keeper_map_path_prefix: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            keeper_map_path_prefix: Some("/keeper_map_tables".to_string()),
        }
    }
}

/// A committed part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// Part name `<partition_id>_<block>_<block>_0`.
    pub name: String,
    /// Partition id (`all` without a partition key).
    pub partition_id: String,
    /// Block id used for deduplication.
    pub block_id: String,
    /// Rows, sorted by the ORDER BY key.
    pub rows: Vec<Row>,
}

/// What happened to one part of an insert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartOutcome {
    /// Written as a new part.
    Written {
        /// Index of the block within the INSERT.
        block: usize,
        /// Part name.
        part: String,
        /// Block id.
        block_id: String,
        /// Rows in the part.
        rows: usize,
    },
    /// Dropped: its block id was in the window.
    Deduplicated {
        /// Index of the block within the INSERT.
        block: usize,
        /// Block id.
        block_id: String,
        /// Rows dropped.
        rows: usize,
    },
}

/// The result of an INSERT (or of the prefix of one that ran).
///
/// A real client learns none of this: ClickHouse answers a deduplicated INSERT exactly
/// like a written one. Components under test must not branch on it; it is for the
/// history, the checkers and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsertSummary {
    /// Blocks the INSERT was cut into.
    pub blocks_total: usize,
    /// Blocks committed (written or deduplicated).
    pub blocks_applied: usize,
    /// Per part, in commit order.
    pub parts: Vec<PartOutcome>,
}

impl InsertSummary {
    /// Rows written (not deduplicated).
    pub fn rows_written(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                PartOutcome::Written { rows, .. } => *rows,
                PartOutcome::Deduplicated { .. } => 0,
            })
            .sum()
    }

    /// Rows dropped as duplicates.
    pub fn rows_deduplicated(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                PartOutcome::Deduplicated { rows, .. } => *rows,
                PartOutcome::Written { .. } => 0,
            })
            .sum()
    }
}

/// One part of a planned block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedPart {
    /// Partition id.
    pub partition_id: String,
    /// Block id.
    pub block_id: String,
    /// Rows, sorted by the ORDER BY key.
    pub rows: Vec<Row>,
}

/// An INSERT parsed and cut into blocks, not yet applied: commit it block by block with
/// [`ClickHouse::commit_block`] (the service yields between blocks so a kill can land).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InsertPlan {
    /// Target table.
    pub table: String,
    /// Blocks that converted cleanly, in order; each is a list of parts.
    pub blocks: Vec<Vec<PlannedPart>>,
    /// Whether deduplication applies (`insert_deduplicate`).
    pub deduplicate: bool,
    /// The conversion error of the first bad block, raised after the blocks before it
    /// are committed.
    pub error: Option<ChError>,
}

#[derive(Debug, Clone, Default)]
struct BlockIds {
    /// Replicated: block id → (sequence number, insert time ms).
    replicated: BTreeMap<String, (u64, u64)>,
    /// Non-replicated: FIFO of ids.
    fifo: VecDeque<String>,
    next_seq: u64,
}

#[derive(Debug, Clone)]
struct Table {
    def: TableDef,
    parts: Vec<Part>,
    block_ids: BlockIds,
    next_block_number: u64,
    next_cleanup_ms: u64,
}

/// The ClickHouse server. See the module docs.
#[derive(Debug, Clone)]
pub struct ClickHouse {
    profile: VersionProfile,
    config: ServerConfig,
    tables: BTreeMap<String, Table>,
}

/// FNV-1a, 128 bits, over `bytes`: the model's stand-in for SipHash128.
pub fn block_hash(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME))
}

fn block_id(partition_id: &str, hash: u128) -> String {
    format!("{partition_id}_{}_{}", (hash >> 64) as u64, hash as u64)
}

fn unknown_table(name: &str) -> ChError {
    ChError::new(
        ErrorCode::UnknownTable,
        format!("Table default.{name} doesn't exist"),
    )
}

fn unknown_setting(name: &str) -> ChError {
    ChError::new(ErrorCode::UnknownSetting, format!("Unknown setting {name}"))
}

impl ClickHouse {
    /// A server of version `profile` with `config` and no tables.
    pub fn new(profile: VersionProfile, config: ServerConfig) -> Self {
        Self {
            profile,
            config,
            tables: BTreeMap::new(),
        }
    }

    /// The version profile.
    pub fn profile(&self) -> VersionProfile {
        self.profile
    }

    /// The server configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The definition of `table`.
    pub fn table(&self, table: &str) -> Option<&TableDef> {
        self.tables.get(table).map(|t| &t.def)
    }

    /// The committed parts of `table`, in commit order.
    pub fn parts(&self, table: &str) -> Option<&[Part]> {
        self.tables.get(table).map(|t| t.parts.as_slice())
    }

    /// `CREATE TABLE`. For KeeperMap this only records the definition: the caller creates
    /// its Keeper paths ([`super::keeper_map::create_paths`]).
    ///
    /// # Errors
    /// 57 if it exists; 56 for KeeperMap on 18.16; 36 for KeeperMap without
    /// `keeper_map_path_prefix` or without one PRIMARY KEY column; 115 for
    /// `non_replicated_deduplication_window` on 18.16; 16 for unknown key columns.
    pub fn create_table(&mut self, def: TableDef) -> Result<(), ChError> {
        if self.tables.contains_key(&def.name) {
            let msg = format!("Table default.{} already exists", def.name);
            return Err(ChError::new(ErrorCode::TableAlreadyExists, msg));
        }
        self.check_engine(&def)?;
        let key_columns = def
            .order_by
            .iter()
            .chain(&def.partition_by)
            .chain(&def.primary_key);
        let version = def.engine.replacing().and_then(|v| v.as_ref());
        for c in key_columns.chain(version) {
            if def.column_index(c).is_none() {
                let msg = format!("There is no column {c} in table {}", def.name);
                return Err(ChError::new(ErrorCode::NoSuchColumnInTable, msg));
            }
        }
        let table = Table {
            def: def.clone(),
            parts: Vec::new(),
            block_ids: BlockIds::default(),
            next_block_number: 1,
            next_cleanup_ms: 0,
        };
        self.tables.insert(def.name, table);
        Ok(())
    }

    /// `DROP TABLE`: forgets the table, its parts and its block ids (KeeperMap data stays
    /// in Keeper). Returns whether it existed.
    pub fn drop_table(&mut self, table: &str) -> bool {
        self.tables.remove(table).is_some()
    }

    fn check_engine(&self, def: &TableDef) -> Result<(), ChError> {
        if def.settings.non_replicated_deduplication_window.is_some()
            && !self.profile.has_token_and_non_replicated_dedup()
        {
            return Err(unknown_setting("non_replicated_deduplication_window"));
        }
        if !matches!(def.engine, Engine::KeeperMap { .. }) {
            return Ok(());
        }
        if !self.profile.has_keeper_map() {
            let msg = "Unknown table engine KeeperMap";
            return Err(ChError::new(ErrorCode::UnknownStorage, msg));
        }
        if self.config.keeper_map_path_prefix.is_none() {
            let msg =
                "KeeperMap is disabled because 'keeper_map_path_prefix' config is not defined";
            return Err(ChError::new(ErrorCode::BadArguments, msg));
        }
        if def.primary_key.is_none() {
            let msg = "KeeperMap requires one column in primary key";
            return Err(ChError::new(ErrorCode::BadArguments, msg));
        }
        Ok(())
    }

    /// The conversion settings an insert uses on this server.
    pub fn conversion(&self, settings: &InsertSettings) -> Conversion {
        let modern = self.profile != VersionProfile::V18_16;
        Conversion {
            null_as_default: self.profile.null_as_default(),
            overflow: settings.integer_overflow,
            numbers_as_strings: modern,
        }
    }

    /// Checks the insert's settings against the server version.
    ///
    /// # Errors
    /// 115 for `insert_deduplication_token` or `keeper_map_strict_mode` on 18.16.
    pub fn check_settings(&self, settings: &InsertSettings) -> Result<(), ChError> {
        if self.profile.has_token_and_non_replicated_dedup() {
            return Ok(());
        }
        if settings.insert_deduplication_token.is_some() {
            return Err(unknown_setting("insert_deduplication_token"));
        }
        if settings.keeper_map_strict_mode.is_some() {
            return Err(unknown_setting("keeper_map_strict_mode"));
        }
        Ok(())
    }

    /// Converts one JSON object into a row of `def`.
    ///
    /// # Errors
    /// 27 when the row is not an object, 117 for an unknown field (unless
    /// `input_format_skip_unknown_fields`), or the column's conversion error.
    pub fn convert_row(
        &self,
        def: &TableDef,
        json: &serde_json::Value,
        settings: &InsertSettings,
    ) -> Result<Row, ChError> {
        let conversion = self.conversion(settings);
        let object = json.as_object().ok_or_else(|| {
            let msg = format!("Cannot parse input: expected '{{' before: {json}");
            ChError::new(ErrorCode::CannotParseInputAssertionFailed, msg)
        })?;
        if !settings.input_format_skip_unknown_fields.unwrap_or(false) {
            if let Some(field) = object.keys().find(|k| def.column_index(k).is_none()) {
                let msg = format!("Unknown field found while parsing JSONEachRow format: {field}");
                return Err(ChError::new(ErrorCode::IncorrectData, msg));
            }
        }
        def.columns
            .iter()
            .map(|c| match object.get(&c.name) {
                None => Ok(c.ty.default_value()),
                Some(v) => convert(&c.name, &c.ty, v, conversion),
            })
            .collect()
    }

    /// Parses and cuts `insert` into blocks and parts with their block ids, without
    /// changing anything.
    ///
    /// # Errors
    /// 60, 115, or 36 for a KeeperMap table (use [`super::keeper_map`]). A conversion
    /// error is not an `Err` here: it ends the plan ([`InsertPlan::error`]).
    pub fn plan_insert(&self, insert: &Insert) -> Result<InsertPlan, ChError> {
        let table = self
            .tables
            .get(&insert.table)
            .ok_or_else(|| unknown_table(&insert.table))?;
        self.check_settings(&insert.settings)?;
        if matches!(table.def.engine, Engine::KeeperMap { .. }) {
            let msg = "KeeperMap tables are written through keeper_map::insert";
            return Err(ChError::new(ErrorCode::BadArguments, msg));
        }
        let block_size = insert
            .settings
            .max_insert_block_size
            .unwrap_or(self.profile.max_insert_block_size())
            .max(1);
        let mut plan = InsertPlan {
            table: insert.table.clone(),
            blocks: Vec::new(),
            deduplicate: insert.settings.insert_deduplicate.unwrap_or(true),
            error: None,
        };
        let mut squashing = Squashing::new(self.squash_bounds(&insert.settings));
        let token = insert.settings.insert_deduplication_token.as_deref();
        let emit = |plan: &mut InsertPlan, rows: Vec<Row>| {
            let n = plan.blocks.len();
            plan.blocks
                .push(split_block(&table.def, rows, token.map(|t| (t, n))));
        };
        for (n, chunk) in insert.rows.chunks(block_size).enumerate() {
            let converted: Result<Vec<Row>, ChError> = chunk
                .iter()
                .enumerate()
                .map(|(i, json)| {
                    self.convert_row(&table.def, json, &insert.settings)
                        .map_err(|mut e| {
                            e.message =
                                format!("{}: (at row {})", e.message, n * block_size + i + 1);
                            e
                        })
                })
                .collect();
            match converted {
                Ok(rows) => {
                    let bytes = chunk.iter().map(|j| j.to_string().len() as u64).sum();
                    if let Some(block) = squashing.add(rows, bytes) {
                        emit(&mut plan, block);
                    }
                }
                Err(e) => {
                    plan.error = Some(e);
                    return Ok(plan);
                }
            }
        }
        if let Some(block) = squashing.finish() {
            emit(&mut plan, block);
        }
        Ok(plan)
    }

    /// `(min_insert_block_size_rows, min_insert_block_size_bytes)` for `settings`.
    fn squash_bounds(&self, settings: &InsertSettings) -> (u64, u64) {
        let rows = settings
            .min_insert_block_size_rows
            .unwrap_or(self.profile.min_insert_block_size_rows());
        let bytes = settings
            .min_insert_block_size_bytes
            .unwrap_or(self.profile.min_insert_block_size_bytes());
        (rows, bytes)
    }

    /// Commits block `index` of `plan` at `now_ms`: each of its parts is written, or
    /// dropped if its block id is in the table's window.
    ///
    /// # Errors
    /// 60 if the table was dropped since planning.
    pub fn commit_block(
        &mut self,
        now_ms: u64,
        plan: &InsertPlan,
        index: usize,
    ) -> Result<Vec<PartOutcome>, ChError> {
        let profile = self.profile;
        let table = self
            .tables
            .get_mut(&plan.table)
            .ok_or_else(|| unknown_table(&plan.table))?;
        let mut outcomes = Vec::new();
        for part in &plan.blocks[index] {
            let rows = part.rows.len();
            let block_id = part.block_id.clone();
            if plan.deduplicate && table.is_duplicate(profile, now_ms, &block_id) {
                crate::mark!("clickhouse:dedup-hit");
                outcomes.push(PartOutcome::Deduplicated {
                    block: index,
                    block_id,
                    rows,
                });
                continue;
            }
            let number = table.next_block_number;
            table.next_block_number += 1;
            let name = format!("{}_{number}_{number}_0", part.partition_id);
            table.parts.push(Part {
                name: name.clone(),
                partition_id: part.partition_id.clone(),
                block_id: block_id.clone(),
                rows: part.rows.clone(),
            });
            outcomes.push(PartOutcome::Written {
                block: index,
                part: name,
                block_id,
                rows,
            });
        }
        Ok(outcomes)
    }

    /// Runs the whole of `insert` at `now_ms`.
    ///
    /// # Errors
    /// As [`ClickHouse::plan_insert`]; a conversion error in block `j` is returned after
    /// blocks `0..j` were committed.
    pub fn insert(&mut self, now_ms: u64, insert: &Insert) -> Result<InsertSummary, ChError> {
        self.insert_prefix(now_ms, insert, usize::MAX)
    }

    /// Runs `insert` but commits at most `blocks_max` blocks, as when the server dies
    /// after committing the first `blocks_max` parts: the rest never exist.
    ///
    /// # Errors
    /// As [`ClickHouse::insert`].
    pub fn insert_prefix(
        &mut self,
        now_ms: u64,
        insert: &Insert,
        blocks_max: usize,
    ) -> Result<InsertSummary, ChError> {
        let plan = self.plan_insert(insert)?;
        let mut summary = InsertSummary {
            blocks_total: plan.blocks.len(),
            ..Default::default()
        };
        for index in 0..plan.blocks.len().min(blocks_max) {
            summary
                .parts
                .extend(self.commit_block(now_ms, &plan, index)?);
            summary.blocks_applied += 1;
        }
        match plan.error {
            Some(e) if summary.blocks_applied == plan.blocks.len() => Err(e),
            _ => Ok(summary),
        }
    }

    /// `SELECT * FROM table [FINAL]`: rows of every part in commit order; with `FINAL`
    /// a ReplacingMergeTree keeps, per partition and sorting key, the row with the
    /// highest version (ties and no version column: the last inserted).
    ///
    /// # Errors
    /// 60; 181 for FINAL on an engine that does not replace rows; 36 for KeeperMap
    /// tables (read them through [`super::keeper_map`]).
    pub fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChError> {
        let t = self.tables.get(table).ok_or_else(|| unknown_table(table))?;
        if matches!(t.def.engine, Engine::KeeperMap { .. }) {
            let msg = "KeeperMap tables are read through keeper_map::select";
            return Err(ChError::new(ErrorCode::BadArguments, msg));
        }
        let rows = t.parts.iter().flat_map(|p| p.rows.iter().cloned());
        if !final_ {
            return Ok(rows.collect());
        }
        let Some(version_column) = t.def.engine.replacing() else {
            let msg = format!("Storage {} doesn't support FINAL", t.def.engine.name());
            return Err(ChError::new(ErrorCode::IllegalFinal, msg));
        };
        let version = version_column.as_ref().and_then(|c| t.def.column_index(c));
        let key_of = |row: &Row| -> Vec<Value> {
            let partition = partition_id(&t.def, row);
            let key = t
                .def
                .order_by
                .iter()
                .map(|c| row[t.def.column_index(c).expect("checked")].clone());
            std::iter::once(Value::String(partition))
                .chain(key)
                .collect()
        };
        let mut winners: BTreeMap<Vec<Value>, Row> = BTreeMap::new();
        for row in rows {
            let key = key_of(&row);
            let replace = match (winners.get(&key), version) {
                (None, _) | (Some(_), None) => true,
                (Some(old), Some(v)) => row[v] >= old[v],
            };
            if replace {
                winners.insert(key, row);
            }
        }
        Ok(winners.into_values().collect())
    }

    /// Runs what the server does on its own up to `now_ms`: the Replicated tables'
    /// block-id cleanup.
    pub fn tick(&mut self, now_ms: u64) {
        let profile = self.profile;
        for table in self.tables.values_mut() {
            if !table.def.engine.is_replicated() || now_ms < table.next_cleanup_ms {
                continue;
            }
            let period = table.def.settings.cleanup_delay_period_ms;
            table.next_cleanup_ms = now_ms + period.unwrap_or(CLEANUP_DELAY_PERIOD_MS_DEFAULT);
            table.trim_replicated(profile);
        }
    }

    /// The block ids `table` currently remembers, oldest first.
    pub fn block_ids(&self, table: &str) -> Vec<String> {
        let Some(t) = self.tables.get(table) else {
            return Vec::new();
        };
        if t.def.engine.is_replicated() {
            let mut ids: Vec<_> = t.block_ids.replicated.iter().collect();
            ids.sort_by_key(|(_, (seq, _))| *seq);
            ids.into_iter().map(|(id, _)| id.clone()).collect()
        } else {
            t.block_ids.fifo.iter().cloned().collect()
        }
    }
}

impl Table {
    /// Whether `block_id` is a duplicate; if not, remembers it.
    fn is_duplicate(&mut self, profile: VersionProfile, now_ms: u64, block_id: &str) -> bool {
        let settings = &self.def.settings;
        let ids = &mut self.block_ids;
        if self.def.engine.is_replicated() {
            if ids.replicated.contains_key(block_id) {
                return true;
            }
            ids.replicated
                .insert(block_id.to_string(), (ids.next_seq, now_ms));
            ids.next_seq += 1;
            if settings.cleanup_delay_period_ms == Some(0) {
                self.trim_replicated(profile);
            }
            return false;
        }
        let window = settings.non_replicated_deduplication_window.unwrap_or(0) as usize;
        if window == 0 {
            return false;
        }
        if ids.fifo.iter().any(|id| id == block_id) {
            return true;
        }
        ids.fifo.push_back(block_id.to_string());
        while ids.fifo.len() > window {
            crate::mark!("clickhouse:dedup-window-evicted");
            ids.fifo.pop_front();
        }
        false
    }

    fn trim_replicated(&mut self, profile: VersionProfile) {
        let settings = &self.def.settings;
        let count_max = settings
            .replicated_deduplication_window
            .unwrap_or(profile.replicated_deduplication_window()) as usize;
        let seconds = settings
            .replicated_deduplication_window_seconds
            .unwrap_or(profile.replicated_deduplication_window_seconds());
        let ids = &mut self.block_ids.replicated;
        let newest_ms = ids.values().map(|(_, t)| *t).max().unwrap_or(0);
        let mut by_age: Vec<(u64, u64, String)> = ids
            .iter()
            .map(|(id, (seq, t))| (*seq, *t, id.clone()))
            .collect();
        by_age.sort();
        let excess = by_age.len().saturating_sub(count_max);
        for (i, (_, t, id)) in by_age.into_iter().enumerate() {
            if i < excess || t + seconds * 1000 < newest_ms {
                crate::mark!("clickhouse:dedup-window-evicted");
                ids.remove(&id);
            }
        }
        assert!(
            ids.len() <= count_max,
            "the window holds at most its count after a trim"
        );
    }
}

/// The partition id of `row`: the partition column's value as text (`all` without one).
fn partition_id(def: &TableDef, row: &Row) -> String {
    let Some(column) = &def.partition_by else {
        return "all".to_string();
    };
    match &row[def.column_index(column).expect("checked at create")] {
        Value::UInt(v) => v.to_string(),
        Value::Int(v) => v.to_string(),
        Value::DateTime(v) => v.to_string(),
        Value::Null => "null".to_string(),
        Value::String(s) => format!("{:032x}", block_hash(s.as_bytes())),
    }
}

/// Splits a converted block into parts by partition (ordered by partition id; ClickHouse's
/// `MergeTreeDataWriter::splitBlockIntoParts` groups rows the same way) and computes each
/// part's block id; `token` is (insert_deduplication_token, block index).
/// ClickHouse's `SquashingTransform` on an INSERT: parsed blocks accumulate until the
/// accumulation is big enough, then leave as one block.
struct Squashing {
    min_rows: u64,
    min_bytes: u64,
    rows: Vec<Row>,
    bytes: u64,
}

impl Squashing {
    fn new((min_rows, min_bytes): (u64, u64)) -> Self {
        Self {
            min_rows,
            min_bytes,
            rows: Vec::new(),
            bytes: 0,
        }
    }

    /// `isEnoughSize`: both bounds off, or one of them reached.
    fn enough(&self) -> bool {
        let rows = self.rows.len() as u64;
        (self.min_rows == 0 && self.min_bytes == 0)
            || (self.min_rows > 0 && rows >= self.min_rows)
            || (self.min_bytes > 0 && self.bytes >= self.min_bytes)
    }

    /// Adds a parsed block; returns a squashed block when the accumulation is enough.
    fn add(&mut self, rows: Vec<Row>, bytes: u64) -> Option<Vec<Row>> {
        self.rows.extend(rows);
        self.bytes += bytes;
        self.enough().then(|| self.take())
    }

    /// What is left at the end of the INSERT.
    fn finish(&mut self) -> Option<Vec<Row>> {
        (!self.rows.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> Vec<Row> {
        self.bytes = 0;
        std::mem::take(&mut self.rows)
    }
}

fn split_block(def: &TableDef, rows: Vec<Row>, token: Option<(&str, usize)>) -> Vec<PlannedPart> {
    let mut by_partition: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for row in rows {
        by_partition
            .entry(partition_id(def, &row))
            .or_default()
            .push(row);
    }
    let key: Vec<usize> = def
        .order_by
        .iter()
        .map(|c| def.column_index(c).expect("checked at create"))
        .collect();
    by_partition
        .into_iter()
        .map(|(partition_id, mut rows)| {
            rows.sort_by(|a, b| key.iter().map(|&i| &a[i]).cmp(key.iter().map(|&i| &b[i])));
            let hash = match token {
                Some((token, n)) => block_hash(format!("{token}_{n}").as_bytes()),
                None => {
                    let mut bytes = Vec::new();
                    rows.iter().flatten().for_each(|v| v.encode(&mut bytes));
                    block_hash(&bytes)
                }
            };
            PlannedPart {
                block_id: block_id(&partition_id, hash),
                partition_id,
                rows,
            }
        })
        .collect()
}

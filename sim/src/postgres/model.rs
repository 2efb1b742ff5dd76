//! The database as one pure state machine: committed tables, sessions, transactions, row
//! locks.
//!
//! # Transactions
//! Each session runs statements in its open transaction (`begin` … `commit`/`rollback`,
//! <https://www.postgresql.org/docs/current/tutorial-transactions.html>) or, with none open,
//! in an implicit one per statement (autocommit). A statement is atomic: on error it leaves
//! nothing behind, and the transaction is *failed*: every later statement gets `25P02`
//! until `rollback`, and `commit` of a failed transaction rolls back
//! ([`TxnEnd::RolledBack`], as PostgreSQL answers `ROLLBACK` to it, without an error).
//! `commit` applies the whole transaction at once; [`Database::crash`] drops every open
//! transaction and keeps every committed one (`synchronous_commit = on`: a COMMIT is
//! acknowledged after its WAL record is flushed).
//!
//! # Isolation: READ COMMITTED, row locks that block
//! A statement sees the committed rows plus its own transaction's writes, never another
//! open transaction's ("Transaction Isolation",
//! <https://www.postgresql.org/docs/current/transaction-iso.html#XACT-READ-COMMITTED>).
//! Every row a transaction inserts, updates or deletes stays locked by it until it ends;
//! `TRUNCATE` and `CREATE TABLE` lock the whole table. A statement that needs a row or
//! table another transaction holds returns [`Execution::Blocked`] and has no effect: the
//! caller (the service) waits for a transaction to end and runs the statement again from
//! the start. That is PostgreSQL's outcome for these statements: an INSERT on a key another
//! transaction inserted waits and then fails with `23505` (or takes the DO UPDATE / DO
//! NOTHING path) if that transaction committed; an UPDATE or DELETE of a row another
//! transaction changed waits and then acts on the row's newest committed version, or on no
//! row. Differences, all on the side of simpler: a waiting statement holds none of the locks
//! it took before it blocked (PostgreSQL keeps them), so deadlocks form a little less often;
//! a cycle of waiting sessions is found at once and the session that closes it gets `40P01`
//! (PostgreSQL checks after `deadlock_timeout`, 1 s); reads take no lock (PostgreSQL's
//! `ACCESS SHARE` lock of a `SELECT` in an open transaction would make a `TRUNCATE` wait).
//! `lock_timeout` and `idle_in_transaction_session_timeout` are modelled ([`DbConfig`]).
//!
//! # Durability
//! A committed transaction survives a crash under `synchronous_commit = on` (the default:
//! `COMMIT` answers after its WAL flush). Under `off` it survives only once the WAL writer
//! has flushed it, at its next cycle ([`DbConfig::last_wal_flush_ms`]); a crash before
//! takes it back ([`Database::crash`]). Data files and checkpoints are not modelled:
//! recovery replays the flushed WAL, so what survives is exactly what was flushed.
//!
//! # Tables without a primary key
//! Rows get a hidden row number (like `ctid`), in insertion order; `UPDATE` and `DELETE` by
//! key need a primary key (`0A000` otherwise).

use super::coerce::{assign, fails_at_parse, format_column_value, key_operand};
use super::error::{PgError, SqlState};
use super::types::*;
use std::collections::{BTreeMap, BTreeSet};

/// A session (one client connection), numbered from 1; numbers are never reused, even
/// across a crash, so a stale client cannot reach a newer session.
pub type SessionId = u64;

/// Server settings, PostgreSQL's names with units in the names.
/// <https://www.postgresql.org/docs/current/runtime-config-client.html>,
/// <https://www.postgresql.org/docs/current/runtime-config-wal.html>
///
/// ## Default values
/// As in PostgreSQL: both timeouts 0 (off), `synchronous_commit = on`,
/// `wal_writer_delay = 200ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DbConfig {
    /// `lock_timeout`: a statement waiting this long for a lock fails with `55P03`; 0 waits
    /// forever.
    pub lock_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout`: a session idle this long inside a transaction
    /// is terminated (`25P03`) and its transaction rolled back; 0 never.
    pub idle_in_transaction_session_timeout_ms: u64,
    /// `synchronous_commit`: `true` for `on` (and `local`, `remote_write`, `remote_apply`,
    /// which on a server without synchronous standbys also wait for the local WAL flush):
    /// `COMMIT` answers once its WAL is on disk. `false` for `off`: `COMMIT` answers at once
    /// and the WAL writer flushes the commit record on its next cycle, so a crash before
    /// that loses the transaction ("Asynchronous Commit", `wal-async-commit.html`).
    pub synchronous_commit: bool,
    /// `wal_writer_delay`, ms: the WAL writer's period (PostgreSQL: 1 to 10,000 ms).
    pub wal_writer_delay_ms: u64,
    /// When the WAL writer's cycles fall, ms into its period: it writes and flushes the
    /// asynchronously committed records at `phase + k * wal_writer_delay_ms`.
    pub wal_writer_phase_ms: u64,
}

impl Default for DbConfig {
    fn default() -> Self {
        Self {
            lock_timeout_ms: 0,
            idle_in_transaction_session_timeout_ms: 0,
            synchronous_commit: true,
            wal_writer_delay_ms: 200,
            wal_writer_phase_ms: 0,
        }
    }
}

impl DbConfig {
    /// The WAL writer's last cycle at or before `now_ms` (0 before its first): every
    /// asynchronous commit before it is on disk.
    ///
    /// The WAL writer (`walwriter.c`, `XLogBackgroundFlush` in `xlog.c`) wakes every
    /// `wal_writer_delay`, writes the WAL up to the last asynchronous commit and flushes it,
    /// since its last flush is at least `wal_writer_delay` old. PostgreSQL documents the
    /// risk window as up to three times `wal_writer_delay` in busy periods (it prefers whole
    /// pages); the model keeps the one-period window of a lightly loaded server. A write
    /// without the flush would survive a process kill, but the writer does both in the same
    /// cycle, so the model loses the same commits to a process kill of the whole server
    /// (shared memory's WAL buffers are gone) as to a machine crash.
    pub fn last_wal_flush_ms(&self, now_ms: u64) -> u64 {
        let delay = self.wal_writer_delay_ms.max(1);
        let phase = self.wal_writer_phase_ms % delay;
        match now_ms.checked_sub(phase) {
            Some(since) => phase + since / delay * delay,
            None => 0,
        }
    }
}

/// How a statement went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Execution {
    /// It ran: its result or its error.
    Done(Result<Reply, PgError>),
    /// It waits for a lock session `by`'s transaction holds; nothing was applied. Run it
    /// again after a transaction ends.
    Blocked {
        /// The session holding the lock.
        by: SessionId,
    },
}

/// How `commit` ended a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxnEnd {
    /// Applied (also the answer when no transaction was open: PostgreSQL warns and says
    /// `COMMIT`).
    Committed,
    /// The transaction had failed, so `COMMIT` rolled it back (command tag `ROLLBACK`).
    RolledBack,
}

/// A committed table: its schema and rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// The table's name.
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// Indices of the primary-key columns, in key order; empty for none.
    pub primary_key: Vec<usize>,
    rows: BTreeMap<Key, Row>,
}

impl Table {
    /// The rows, in primary-key order (insertion order without a key).
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.rows.values()
    }

    fn column_index(&self, name: &str) -> Result<usize, PgError> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| PgError::undefined_column(&self.name, name))
    }

    fn key_of(&self, row: &Row) -> Key {
        self.primary_key.iter().map(|&i| row[i].clone()).collect()
    }
}

/// One transaction's writes to one table, applied on commit.
#[derive(Debug, Clone, Default)]
struct TableWrites {
    /// `TRUNCATE` ran: the committed rows are gone for this transaction.
    truncated: bool,
    /// Row versions by key: `Some` written, `None` deleted.
    rows: BTreeMap<Key, Option<Row>>,
}

/// What an asynchronous commit changed, to take back if the server crashes before the WAL
/// writer flushes it: the tables it created, and each written table's rows as they were
/// before it (all of them for a `TRUNCATE`, else each written key's committed version).
#[derive(Debug, Clone)]
struct AsyncCommit {
    /// When it committed, ms.
    at_ms: u64,
    created: Vec<String>,
    before: Vec<(String, Before)>,
}

#[derive(Debug, Clone)]
enum Before {
    Rows(BTreeMap<Key, Row>),
    Keys(BTreeMap<Key, Option<Row>>),
}

#[derive(Debug, Clone, Default)]
struct Txn {
    failed: bool,
    /// Tables created in this transaction (empty; their rows are in `writes`).
    created: BTreeMap<String, Table>,
    writes: BTreeMap<String, TableWrites>,
    row_locks: BTreeSet<(String, Key)>,
    table_locks: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy)]
struct Wait {
    by: SessionId,
    since_ms: u64,
}

#[derive(Debug, Clone, Default)]
struct Session {
    txn: Option<Txn>,
    waiting: Option<Wait>,
    last_active_ms: u64,
    /// Set when the server terminated the session; reported once, then it is gone.
    terminated: Option<PgError>,
}

/// One statement's effects on its one table, merged into the transaction on success.
#[derive(Debug, Default)]
struct Pending {
    table: String,
    created: Option<Table>,
    truncated: bool,
    rows: BTreeMap<Key, Option<Row>>,
    row_locks: BTreeSet<Key>,
    table_lock: bool,
    row_numbers_used: i64,
}

/// Why a statement stopped.
enum Stop {
    Error(PgError),
    Blocked(SessionId),
}

impl From<PgError> for Stop {
    fn from(e: PgError) -> Self {
        Stop::Error(e)
    }
}

/// The PostgreSQL server's state. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Database {
    config: DbConfig,
    tables: BTreeMap<String, Table>,
    sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    /// Hidden row numbers of tables without a primary key (not transactional, like a
    /// sequence).
    next_row_number: i64,
    row_locks: BTreeMap<(String, Key), SessionId>,
    table_locks: BTreeMap<String, SessionId>,
    /// Asynchronous commits (`synchronous_commit = off`) the WAL writer may not have
    /// flushed yet, oldest first; trimmed at each commit.
    unflushed: Vec<AsyncCommit>,
}

impl Database {
    /// An empty database with these settings.
    pub fn new(config: DbConfig) -> Self {
        Self {
            config,
            next_session: 1,
            next_row_number: 1,
            ..Self::default()
        }
    }

    /// The settings.
    pub fn config(&self) -> DbConfig {
        self.config
    }

    /// Opens a session (a client connection's backend).
    pub fn connect(&mut self, now_ms: u64) -> SessionId {
        let id = self.next_session.max(1);
        self.next_session = id + 1;
        self.sessions.insert(
            id,
            Session {
                last_active_ms: now_ms,
                ..Session::default()
            },
        );
        id
    }

    /// Closes a session (the client's `Terminate` message, or its socket closing): its open
    /// transaction rolls back. Unknown sessions are ignored.
    pub fn close(&mut self, session: SessionId) {
        if self.end_txn(session).is_some() {
            crate::mark!("postgres:close-rolled-back");
        }
        self.sessions.remove(&session);
    }

    /// Whether `session` exists and has a transaction open (failed or not).
    pub fn in_transaction(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.txn.is_some())
    }

    /// Number of open sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The session, refreshed as active at `now_ms`, or why it cannot run anything.
    fn session_mut(&mut self, now_ms: u64, session: SessionId) -> Result<&mut Session, PgError> {
        let Some(s) = self.sessions.get(&session) else {
            return Err(PgError::connection_does_not_exist());
        };
        if let Some(e) = s.terminated.clone() {
            self.sessions.remove(&session);
            return Err(e);
        }
        let s = self.sessions.get_mut(&session).expect("checked above");
        s.last_active_ms = now_ms;
        Ok(s)
    }

    /// `BEGIN`. Inside a transaction it is a no-op (PostgreSQL warns "there is already a
    /// transaction in progress").
    ///
    /// # Errors
    /// `08003` for an unknown session, `25P03` for one the server terminated.
    pub fn begin(&mut self, now_ms: u64, session: SessionId) -> Result<(), PgError> {
        let s = self.session_mut(now_ms, session)?;
        s.txn.get_or_insert_with(Txn::default);
        Ok(())
    }

    /// `ROLLBACK`: the open transaction's writes and locks are gone. Outside a transaction
    /// it is a no-op (PostgreSQL warns).
    ///
    /// # Errors
    /// As [`Database::begin`].
    pub fn rollback(&mut self, now_ms: u64, session: SessionId) -> Result<(), PgError> {
        self.session_mut(now_ms, session)?;
        if self.end_txn(session).is_some() {
            crate::mark!("postgres:rollback");
        }
        Ok(())
    }

    /// `COMMIT`: applies the transaction atomically, or rolls it back if it failed.
    ///
    /// # Errors
    /// As [`Database::begin`].
    pub fn commit(&mut self, now_ms: u64, session: SessionId) -> Result<TxnEnd, PgError> {
        self.session_mut(now_ms, session)?;
        let Some(txn) = self.end_txn(session) else {
            return Ok(TxnEnd::Committed);
        };
        if txn.failed {
            crate::mark!("postgres:commit-rolled-back");
            return Ok(TxnEnd::RolledBack);
        }
        self.apply(now_ms, txn);
        Ok(TxnEnd::Committed)
    }

    /// Ends `session`'s transaction, if any: releases its locks and hands it back.
    fn end_txn(&mut self, session: SessionId) -> Option<Txn> {
        let s = self.sessions.get_mut(&session)?;
        s.waiting = None;
        let txn = s.txn.take()?;
        for lock in &txn.row_locks {
            let holder = self.row_locks.remove(lock);
            assert_eq!(
                holder,
                Some(session),
                "a row lock is held by its transaction"
            );
        }
        for table in &txn.table_locks {
            let holder = self.table_locks.remove(table);
            assert_eq!(
                holder,
                Some(session),
                "a table lock is held by its transaction"
            );
        }
        Some(txn)
    }

    /// Makes a transaction's writes the committed state at `now_ms`; under
    /// `synchronous_commit = off`, remembers what it changed until the WAL writer's next
    /// cycle ([`DbConfig::last_wal_flush_ms`]).
    fn apply(&mut self, now_ms: u64, txn: Txn) {
        if !self.config.synchronous_commit {
            let flushed = self.config.last_wal_flush_ms(now_ms);
            self.unflushed.retain(|c| c.at_ms >= flushed);
            let undo = self.async_commit(now_ms, &txn);
            self.unflushed.push(undo);
        }
        for (name, table) in txn.created {
            let replaced = self.tables.insert(name, table);
            assert!(replaced.is_none(), "a created table's name was locked");
        }
        for (name, writes) in txn.writes {
            let table = self.tables.get_mut(&name).expect("written tables exist");
            if writes.truncated {
                table.rows.clear();
            }
            for (key, row) in writes.rows {
                match row {
                    Some(row) => {
                        assert_eq!(row.len(), table.columns.len(), "a row has every column");
                        table.rows.insert(key, row);
                    }
                    None => {
                        table.rows.remove(&key);
                    }
                }
            }
        }
    }

    /// What `txn`, about to be applied, changes in the committed state.
    fn async_commit(&self, now_ms: u64, txn: &Txn) -> AsyncCommit {
        let created = txn.created.keys().cloned().collect();
        let before = (txn.writes.iter())
            .filter(|(name, _)| !txn.created.contains_key(*name))
            .map(|(name, writes)| {
                let table = self.tables.get(name).expect("written tables exist");
                let before = match writes.truncated {
                    true => Before::Rows(table.rows.clone()),
                    false => Before::Keys(
                        (writes.rows.keys())
                            .map(|k| (k.clone(), table.rows.get(k).cloned()))
                            .collect(),
                    ),
                };
                (name.clone(), before)
            })
            .collect();
        AsyncCommit {
            at_ms: now_ms,
            created,
            before,
        }
    }

    /// The server crashed (or was killed) at `now_ms`: every session and open transaction
    /// is gone; committed tables survive, except the asynchronous commits the WAL writer
    /// had not flushed (`synchronous_commit = off`), which recovery cannot replay and are
    /// taken back, newest first. Returns how many transactions that lost.
    pub fn crash(&mut self, now_ms: u64) -> usize {
        if self.sessions.values().any(|s| s.txn.is_some()) {
            crate::mark!("postgres:crash-lost-open-transactions");
        }
        self.sessions.clear();
        self.row_locks.clear();
        self.table_locks.clear();
        let flushed = self.config.last_wal_flush_ms(now_ms);
        let lost: Vec<AsyncCommit> = std::mem::take(&mut self.unflushed)
            .into_iter()
            .filter(|c| c.at_ms >= flushed)
            .collect();
        for commit in lost.iter().rev() {
            for (name, before) in &commit.before {
                let table = self.tables.get_mut(name).expect("a written table exists");
                match before {
                    Before::Rows(rows) => table.rows = rows.clone(),
                    Before::Keys(keys) => {
                        for (key, row) in keys {
                            match row {
                                Some(row) => table.rows.insert(key.clone(), row.clone()),
                                None => table.rows.remove(key),
                            };
                        }
                    }
                }
            }
            for name in &commit.created {
                self.tables.remove(name);
            }
        }
        if !lost.is_empty() {
            crate::mark!("postgres:async-commit-lost");
        }
        lost.len()
    }

    /// Terminates sessions idle inside a transaction for
    /// `idle_in_transaction_session_timeout_ms` (rolling their transactions back); returns
    /// them, in order. Their next request gets `25P03`.
    pub fn tick(&mut self, now_ms: u64) -> Vec<SessionId> {
        let timeout = self.config.idle_in_transaction_session_timeout_ms;
        if timeout == 0 {
            return Vec::new();
        }
        let idle: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.txn.is_some() && s.waiting.is_none() && s.terminated.is_none())
            .filter(|(_, s)| now_ms.saturating_sub(s.last_active_ms) >= timeout)
            .map(|(&id, _)| id)
            .collect();
        for &id in &idle {
            crate::mark!("postgres:idle-in-transaction-timeout");
            self.end_txn(id);
            let error = PgError::new(
                SqlState::IdleInTransactionSessionTimeout,
                "terminating connection due to idle-in-transaction timeout",
            );
            self.sessions.get_mut(&id).expect("listed above").terminated = Some(error);
        }
        idle
    }

    /// The committed rows of `table`, in primary-key order; `None` if it does not exist.
    /// (For checkers: what a fresh session would `SELECT`.)
    pub fn table_rows(&self, table: &str) -> Option<Vec<Row>> {
        Some(self.tables.get(table)?.rows.values().cloned().collect())
    }

    /// The committed table `name`.
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.get(name)
    }
}

/// What one statement reads through: its table, its transaction, the committed state.
struct Ctx<'a> {
    db: &'a Database,
    session: SessionId,
    txn: &'a Txn,
    table: &'a Table,
}

impl<'a> Ctx<'a> {
    /// The table as `session` sees it, once no other transaction holds it exclusively.
    fn open(db: &'a Database, session: SessionId, name: &str) -> Result<Self, Stop> {
        let txn = db.sessions[&session]
            .txn
            .as_ref()
            .expect("a statement runs in a transaction");
        let table = txn
            .created
            .get(name)
            .or_else(|| db.tables.get(name))
            .ok_or_else(|| PgError::undefined_table(name))?;
        match db.table_locks.get(name) {
            Some(&holder) if holder != session => Err(Stop::Blocked(holder)),
            _ => Ok(Self {
                db,
                session,
                txn,
                table,
            }),
        }
    }

    fn pending(&self) -> Pending {
        Pending {
            table: self.table.name.clone(),
            ..Pending::default()
        }
    }

    /// The row at `key` as this statement sees it.
    fn get<'b>(&'b self, p: &'b Pending, key: &Key) -> Option<&'b Row> {
        if let Some(v) = p.rows.get(key) {
            return v.as_ref();
        }
        if p.truncated {
            return None;
        }
        let writes = self.txn.writes.get(&self.table.name);
        if let Some(v) = writes.and_then(|w| w.rows.get(key)) {
            return v.as_ref();
        }
        if writes.is_some_and(|w| w.truncated) {
            return None;
        }
        self.table.rows.get(key)
    }

    /// Takes the row lock on `key`, or says who holds it.
    fn lock(&self, p: &mut Pending, key: &Key) -> Result<(), Stop> {
        let id = (self.table.name.clone(), key.clone());
        match self.db.row_locks.get(&id) {
            Some(&holder) if holder != self.session => Err(Stop::Blocked(holder)),
            Some(_) => Ok(()),
            None => {
                p.row_locks.insert(key.clone());
                Ok(())
            }
        }
    }

    /// Every row as this statement sees it, in key order.
    fn scan(&self) -> Vec<Row> {
        let writes = self.txn.writes.get(&self.table.name);
        let mut rows = if writes.is_some_and(|w| w.truncated) {
            BTreeMap::new()
        } else {
            self.table.rows.clone()
        };
        for (key, row) in writes.iter().flat_map(|w| w.rows.iter()) {
            match row {
                Some(row) => rows.insert(key.clone(), row.clone()),
                None => rows.remove(key),
            };
        }
        rows.into_values().collect()
    }

    /// `23502` unless every NOT NULL (and key) column of `row` has a value.
    fn check_not_null(&self, row: &Row) -> Result<(), PgError> {
        let t = self.table;
        let Some(i) = t
            .columns
            .iter()
            .zip(row)
            .position(|(c, v)| c.not_null && v.is_null())
        else {
            return Ok(());
        };
        let shown: Vec<String> = row
            .iter()
            .zip(&t.columns)
            .map(|(v, c)| {
                if v.is_null() {
                    "null".to_string()
                } else {
                    format_column_value(v, c.ty)
                }
            })
            .collect();
        Err(PgError::new(
            SqlState::NotNullViolation,
            format!(
                "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                t.columns[i].name, t.name
            ),
        )
        .with_detail(format!("Failing row contains ({}).", shown.join(", "))))
    }

    /// `23505` for `key` on the table's primary key, `<table>_pkey`.
    fn duplicate_key(&self, key: &Key) -> PgError {
        let t = self.table;
        let names: Vec<&str> = t
            .primary_key
            .iter()
            .map(|&i| t.columns[i].name.as_str())
            .collect();
        let values: Vec<String> = key
            .iter()
            .zip(&t.primary_key)
            .map(|(v, &i)| format_column_value(v, t.columns[i].ty))
            .collect();
        PgError::new(
            SqlState::UniqueViolation,
            format!(
                "duplicate key value violates unique constraint \"{}_pkey\"",
                t.name
            ),
        )
        .with_detail(format!(
            "Key ({})=({}) already exists.",
            names.join(", "),
            values.join(", ")
        ))
    }

    /// The key `where_pk` names, in the key columns' types; `None` when no row's key can
    /// equal it (see [`key_operand`]: `WHERE k = v` compares, it does not assign).
    fn where_key(&self, verb: &str, where_pk: &[Value]) -> Result<Option<Key>, PgError> {
        let t = self.table;
        if t.primary_key.is_empty() {
            return Err(PgError::new(
                SqlState::FeatureNotSupported,
                format!(
                    "{verb} by key needs a primary key; table \"{}\" has none",
                    t.name
                ),
            ));
        }
        if where_pk.len() != t.primary_key.len() {
            return Err(PgError::new(
                SqlState::SyntaxError,
                format!(
                    "{verb} needs {} key values, got {}",
                    t.primary_key.len(),
                    where_pk.len()
                ),
            ));
        }
        let parts = t
            .primary_key
            .iter()
            .zip(where_pk)
            .map(|(&i, v)| key_operand(v, &t.columns[i]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(parts.into_iter().collect())
    }
}

impl Database {
    /// Runs `statement` in `session`'s open transaction, or in an implicit transaction of
    /// its own if none is open (autocommit).
    ///
    /// An error fails the open transaction (later statements get `25P02`). A statement that
    /// must wait for another transaction's lock returns [`Execution::Blocked`] with no
    /// effect; run it again after a transaction ends. While it waits: a wait cycle is
    /// `40P01`, a wait longer than `lock_timeout_ms` is `55P03`, both failing the
    /// transaction.
    pub fn execute(&mut self, now_ms: u64, session: SessionId, statement: &Statement) -> Execution {
        let s = match self.session_mut(now_ms, session) {
            Ok(s) => s,
            Err(e) => return Execution::Done(Err(e)),
        };
        let implicit = s.txn.is_none();
        if s.txn.get_or_insert_with(Txn::default).failed {
            return Execution::Done(Err(PgError::in_failed_transaction()));
        }
        match self.run(session, statement) {
            Ok((reply, pending)) => {
                self.merge(session, pending);
                self.sessions
                    .get_mut(&session)
                    .expect("checked above")
                    .waiting = None;
                if implicit {
                    let txn = self.end_txn(session).expect("begun above");
                    self.apply(now_ms, txn);
                }
                Execution::Done(Ok(reply))
            }
            Err(Stop::Error(e)) => {
                if e.code == SqlState::UniqueViolation {
                    crate::mark!("postgres:unique-violation");
                }
                self.fail(session, implicit);
                Execution::Done(Err(e))
            }
            Err(Stop::Blocked(by)) => self.blocked(now_ms, session, by, implicit),
        }
    }

    fn fail(&mut self, session: SessionId, implicit: bool) {
        if implicit {
            self.end_txn(session);
            return;
        }
        let s = self
            .sessions
            .get_mut(&session)
            .expect("failing session exists");
        s.waiting = None;
        s.txn.as_mut().expect("failing transaction exists").failed = true;
    }

    fn blocked(
        &mut self,
        now_ms: u64,
        session: SessionId,
        by: SessionId,
        implicit: bool,
    ) -> Execution {
        let since_ms = self.sessions[&session]
            .waiting
            .map_or(now_ms, |w| w.since_ms);
        let timeout = self.config.lock_timeout_ms;
        let error = if self.waits_for(by, session) {
            Some(
                PgError::new(SqlState::DeadlockDetected, "deadlock detected")
                    .with_detail(format!(
                        "Session {session} waits for session {by}, which waits for session \
                         {session}."
                    ))
                    .with_hint("See server log for query details."),
            )
        } else if timeout > 0 && now_ms.saturating_sub(since_ms) >= timeout {
            Some(PgError::new(
                SqlState::LockNotAvailable,
                "canceling statement due to lock timeout",
            ))
        } else {
            None
        };
        if let Some(e) = error {
            crate::mark!(match e.code {
                SqlState::DeadlockDetected => "postgres:deadlock-detected",
                _ => "postgres:lock-timeout",
            });
            self.fail(session, implicit);
            return Execution::Done(Err(e));
        }
        let s = self
            .sessions
            .get_mut(&session)
            .expect("blocked session exists");
        if implicit {
            // The implicit transaction took no lock yet: nothing to release.
            s.txn = None;
        }
        s.waiting = Some(Wait { by, since_ms });
        Execution::Blocked { by }
    }

    /// Whether `from` waits, directly or through others, for `target`.
    fn waits_for(&self, from: SessionId, target: SessionId) -> bool {
        let mut current = from;
        for _ in 0..=self.sessions.len() {
            if current == target {
                return true;
            }
            match self.sessions.get(&current).and_then(|s| s.waiting) {
                Some(w) => current = w.by,
                None => return false,
            }
        }
        false
    }

    fn run(&self, session: SessionId, statement: &Statement) -> Result<(Reply, Pending), Stop> {
        match statement {
            Statement::CreateTable(c) => self.create_table(session, c),
            Statement::Insert(i) => insert(&Ctx::open(self, session, &i.table)?, i),
            Statement::Update {
                table,
                set,
                where_pk,
            } => update(&Ctx::open(self, session, table)?, set, where_pk),
            Statement::Delete { table, where_pk } => {
                delete(&Ctx::open(self, session, table)?, where_pk)
            }
            Statement::Truncate { table } => truncate(&Ctx::open(self, session, table)?),
            Statement::Select { table } => {
                let ctx = Ctx::open(self, session, table)?;
                let columns = ctx.table.columns.iter().map(|c| c.name.clone()).collect();
                Ok((
                    Reply::Rows {
                        columns,
                        rows: ctx.scan(),
                    },
                    ctx.pending(),
                ))
            }
        }
    }

    /// Folds a statement's effects into its session's transaction.
    fn merge(&mut self, session: SessionId, p: Pending) {
        self.next_row_number += p.row_numbers_used;
        let txn = self
            .sessions
            .get_mut(&session)
            .and_then(|s| s.txn.as_mut())
            .expect("open");
        let name = p.table;
        if let Some(t) = p.created {
            txn.created.insert(name.clone(), t);
        }
        if p.table_lock && txn.table_locks.insert(name.clone()) {
            let other = self.table_locks.insert(name.clone(), session);
            assert!(other.is_none(), "a table lock has one holder");
        }
        for key in p.row_locks {
            let id = (name.clone(), key);
            let other = self.row_locks.insert(id.clone(), session);
            assert!(
                other.is_none_or(|h| h == session),
                "a row lock has one holder"
            );
            txn.row_locks.insert(id);
        }
        if p.truncated || !p.rows.is_empty() {
            let w = txn.writes.entry(name).or_default();
            if p.truncated {
                w.truncated = true;
                w.rows.clear();
            }
            w.rows.extend(p.rows);
        }
    }

    fn create_table(&self, session: SessionId, c: &CreateTable) -> Result<(Reply, Pending), Stop> {
        if let Some(&holder) = self.table_locks.get(&c.name) {
            if holder != session {
                return Err(Stop::Blocked(holder));
            }
        }
        let txn = self.sessions[&session]
            .txn
            .as_ref()
            .expect("a statement runs in a transaction");
        let p = Pending {
            table: c.name.clone(),
            ..Pending::default()
        };
        if txn.created.contains_key(&c.name) || self.tables.contains_key(&c.name) {
            if c.if_not_exists {
                return Ok((Reply::Affected(0), p));
            }
            let msg = format!("relation \"{}\" already exists", c.name);
            return Err(PgError::new(SqlState::DuplicateTable, msg).into());
        }
        let table = new_table(c)?;
        Ok((
            Reply::Affected(0),
            Pending {
                created: Some(table),
                table_lock: true,
                ..p
            },
        ))
    }
}

/// Validates `CREATE TABLE` and builds the empty table.
fn new_table(c: &CreateTable) -> Result<Table, PgError> {
    let dup = |what: String| PgError::new(SqlState::DuplicateColumn, what);
    let mut columns = c.columns.clone();
    for (i, col) in columns.iter().enumerate() {
        if columns[..i].iter().any(|o| o.name == col.name) {
            return Err(dup(format!(
                "column \"{}\" specified more than once",
                col.name
            )));
        }
    }
    let mut primary_key = Vec::new();
    for name in &c.primary_key {
        let i = columns
            .iter()
            .position(|col| &col.name == name)
            .ok_or_else(|| {
                let msg = format!("column \"{name}\" named in key does not exist");
                PgError::new(SqlState::UndefinedColumn, msg)
            })?;
        if primary_key.contains(&i) {
            return Err(dup(format!(
                "column \"{name}\" appears twice in primary key constraint"
            )));
        }
        if columns[i].ty == ColumnType::Json {
            return Err(PgError::new(
                SqlState::UndefinedObject,
                "data type json has no default operator class for access method \"btree\"",
            )
            .with_hint(
                "You must specify an operator class for the index or define a default \
                 operator class for the data type.",
            ));
        }
        columns[i].not_null = true;
        primary_key.push(i);
    }
    Ok(Table {
        name: c.name.clone(),
        columns,
        primary_key,
        rows: BTreeMap::new(),
    })
}

/// Indices of an INSERT's target columns (all, in order, when none are named).
fn target_columns(t: &Table, names: &[String]) -> Result<Vec<usize>, PgError> {
    if names.is_empty() {
        return Ok((0..t.columns.len()).collect());
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let i = t.column_index(name)?;
        if out.contains(&i) {
            let msg = format!("column \"{name}\" specified more than once");
            return Err(PgError::new(SqlState::DuplicateColumn, msg));
        }
        out.push(i);
    }
    Ok(out)
}

/// Checks the conflict target against the primary key; returns the DO UPDATE SET columns.
fn arbiter(t: &Table, on_conflict: &OnConflict) -> Result<Vec<usize>, PgError> {
    let target = match on_conflict {
        OnConflict::None
        | OnConflict::DoNothing {
            conflict_target: None,
        } => return Ok(vec![]),
        OnConflict::DoNothing {
            conflict_target: Some(target),
        } => target,
        OnConflict::DoUpdate {
            conflict_target, ..
        } => conflict_target,
    };
    let mut wanted = target
        .iter()
        .map(|n| t.column_index(n))
        .collect::<Result<Vec<_>, _>>()?;
    let mut key = t.primary_key.clone();
    wanted.sort_unstable();
    wanted.dedup();
    key.sort_unstable();
    if key.is_empty() || wanted != key {
        return Err(PgError::new(
            SqlState::InvalidColumnReference,
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        ));
    }
    match on_conflict {
        OnConflict::DoUpdate { set, .. } => set.iter().map(|n| t.column_index(n)).collect(),
        _ => Ok(vec![]),
    }
}

/// The parse-analysis errors of an INSERT row: a row of the wrong length, an untyped
/// literal a column's input function rejects, a value with no assignment cast
/// ([`fails_at_parse`]).
fn check_parse(t: &Table, targets: &[usize], values: &[Value]) -> Result<(), PgError> {
    if values.len() != targets.len() {
        let more = if values.len() > targets.len() {
            "expressions"
        } else {
            "target columns"
        };
        let fewer = if values.len() > targets.len() {
            "target columns"
        } else {
            "expressions"
        };
        let msg = format!("INSERT has more {more} than {fewer}");
        return Err(PgError::new(SqlState::SyntaxError, msg));
    }
    for (&i, v) in targets.iter().zip(values) {
        match assign(v, &t.columns[i]) {
            Err(e) if fails_at_parse(v, &e) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// A proposed row: every column, coerced, NULL where not given (NOT NULL is checked when
/// the row is inserted).
fn coerced_row(t: &Table, targets: &[usize], values: &[Value]) -> Result<Row, PgError> {
    let mut row = vec![Value::Null; t.columns.len()];
    for (&i, v) in targets.iter().zip(values) {
        row[i] = assign(v, &t.columns[i])?;
    }
    Ok(row)
}

/// `INSERT ... [ON CONFLICT ...]` (sql-insert.html): all rows or none.
fn insert(ctx: &Ctx, ins: &Insert) -> Result<(Reply, Pending), Stop> {
    let t = ctx.table;
    let targets = target_columns(t, &ins.columns)?;
    let set = arbiter(t, &ins.on_conflict)?;
    let mut p = ctx.pending();
    let mut touched: BTreeSet<Key> = BTreeSet::new();
    let mut affected = 0;
    // Parse analysis coerces every row before planning folds the casts and before any row
    // is inserted: its errors come first, in row and column order.
    for values in &ins.rows {
        check_parse(t, &targets, values)?;
    }
    let rows = ins
        .rows
        .iter()
        .map(|values| coerced_row(t, &targets, values))
        .collect::<Result<Vec<_>, _>>()?;
    for row in rows {
        ctx.check_not_null(&row)?;
        let key = if t.primary_key.is_empty() {
            p.row_numbers_used += 1;
            vec![Value::Int(ctx.db.next_row_number + p.row_numbers_used - 1)]
        } else {
            t.key_of(&row)
        };
        ctx.lock(&mut p, &key)?;
        let Some(existing) = ctx.get(&p, &key) else {
            touched.insert(key.clone());
            p.rows.insert(key, Some(row));
            affected += 1;
            continue;
        };
        match &ins.on_conflict {
            OnConflict::None => return Err(ctx.duplicate_key(&key).into()),
            OnConflict::DoNothing { .. } => continue,
            OnConflict::DoUpdate { .. } => {}
        }
        if !touched.insert(key.clone()) {
            return Err(PgError::new(
                SqlState::CardinalityViolation,
                "ON CONFLICT DO UPDATE command cannot affect row a second time",
            )
            .with_hint(
                "Ensure that no rows proposed for insertion within the same command have \
                 duplicate constrained values.",
            )
            .into());
        }
        let mut updated = existing.clone();
        for &i in &set {
            updated[i] = row[i].clone();
        }
        ctx.check_not_null(&updated)?;
        assert_eq!(
            t.key_of(&updated),
            key,
            "EXCLUDED's key is the conflicting key"
        );
        p.rows.insert(key, Some(updated));
        affected += 1;
    }
    Ok((Reply::Affected(affected), p))
}

/// `UPDATE table SET ... WHERE pk = ...` (sql-update.html); the key itself may change.
fn update(
    ctx: &Ctx,
    set: &[(String, Value)],
    where_pk: &[Value],
) -> Result<(Reply, Pending), Stop> {
    let t = ctx.table;
    // Parse analysis: the WHERE clause, then the SET list (its untyped literals and
    // missing casts); then planning folds the SET list's casts ([`fails_at_parse`]).
    let key = ctx.where_key("UPDATE", where_pk)?;
    let mut columns: Vec<usize> = Vec::with_capacity(set.len());
    for (name, value) in set {
        let i = t.column_index(name)?;
        if columns.contains(&i) {
            let msg = format!("multiple assignments to same column \"{name}\"");
            return Err(PgError::new(SqlState::SyntaxError, msg).into());
        }
        match assign(value, &t.columns[i]) {
            Err(e) if fails_at_parse(value, &e) => return Err(e.into()),
            _ => columns.push(i),
        }
    }
    let mut assignments: Vec<(usize, Value)> = Vec::with_capacity(set.len());
    for (&i, (_, value)) in columns.iter().zip(set) {
        assignments.push((i, assign(value, &t.columns[i])?));
    }
    let mut p = ctx.pending();
    let Some(old) = key.and_then(|key| ctx.get(&p, &key).cloned().map(|row| (key, row))) else {
        return Ok((Reply::Affected(0), p));
    };
    let (key, old) = old;
    ctx.lock(&mut p, &key)?;
    let mut new = old;
    for (i, v) in assignments {
        new[i] = v;
    }
    ctx.check_not_null(&new)?;
    let new_key = t.key_of(&new);
    if new_key != key {
        ctx.lock(&mut p, &new_key)?;
        if ctx.get(&p, &new_key).is_some() {
            return Err(ctx.duplicate_key(&new_key).into());
        }
        p.rows.insert(key, None);
    }
    p.rows.insert(new_key, Some(new));
    Ok((Reply::Affected(1), p))
}

/// `DELETE FROM table WHERE pk = ...` (sql-delete.html).
fn delete(ctx: &Ctx, where_pk: &[Value]) -> Result<(Reply, Pending), Stop> {
    let mut p = ctx.pending();
    let Some(key) = ctx.where_key("DELETE", where_pk)? else {
        return Ok((Reply::Affected(0), p));
    };
    if ctx.get(&p, &key).is_none() {
        return Ok((Reply::Affected(0), p));
    }
    ctx.lock(&mut p, &key)?;
    p.rows.insert(key, None);
    Ok((Reply::Affected(1), p))
}

/// `TRUNCATE table` (sql-truncate.html): waits for every other transaction that wrote to
/// the table, then locks it whole.
fn truncate(ctx: &Ctx) -> Result<(Reply, Pending), Stop> {
    let name = &ctx.table.name;
    let others = ctx
        .db
        .row_locks
        .range((name.clone(), Vec::new())..)
        .take_while(|((t, _), _)| t == name)
        .find(|(_, &holder)| holder != ctx.session);
    if let Some((_, &holder)) = others {
        return Err(Stop::Blocked(holder));
    }
    let mut p = ctx.pending();
    p.truncated = true;
    p.table_lock = true;
    Ok((Reply::Affected(0), p))
}

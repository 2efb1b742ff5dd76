//! [`PostgresClient`] over tokio-postgres 0.7 against a real PostgreSQL server.
//!
//! # How calls map onto the wire
//! - [`execute`](PostgresClient::execute): one simple-protocol query in autocommit mode.
//! - [`execute_batch`](PostgresClient::execute_batch): `BEGIN`, the statements pipelined
//!   (all sent before the first answer, as pgJDBC's `executeBatch` does), `COMMIT`; the
//!   first failing statement is the error's `index` and the transaction is rolled back.
//! - With pgJDBC's `reWriteBatchedInserts=true` (in the JDBC URL's query, or
//!   [`RealPostgres::with_rewrite_batched_inserts`]) a batch's runs of one-row `INSERT`s go
//!   as multi-row `INSERT`s ([`rewrite`]). Each must report one row per statement it
//!   stands for before the `COMMIT`; after a server error, or another count, that
//!   transaction is rolled back and the batch runs again one statement each, so the error
//!   names its statement as without the rewrite (the first attempt applied nothing).
//! - Statements are rendered by [`sql`]; `UPDATE`/`DELETE`/`SELECT` take the table's
//!   primary key from the catalog (`pg_index`), cached per table, and `SELECT` reads each
//!   column's text by its catalog type.
//!
//! # Errors
//! A server error becomes [`PgClientError::Db`] with its SQLSTATE, message, detail and
//! hint when the model knows the code ([`SqlState::from_code`]); the server's other codes
//! (`57P01` admin shutdown, `53300` too many connections, ...) become
//! [`PgClientError::Connection`] naming the code. Losing the connection, or no answer
//! within `timeout_ms`, is [`PgClientError::Timeout`] (ambiguous) where the work may have
//! been applied: an autocommit statement, or the `COMMIT` of a batch; before a batch's
//! `COMMIT` left it is [`PgClientError::Connection`] (the server rolls the transaction
//! back). Either way the session is dropped and the next call reconnects.

pub mod rewrite;
pub mod sql;

use crate::client::postgres::{PgClientError, PostgresClient};
use async_trait::async_trait;
use eosim_sim::postgres::{ColumnType, PgError, Reply, Row, SqlState, Statement};
use futures::SinkExt;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// A connection to a real server, opened lazily and again after it was lost.
pub struct RealPostgres {
    config: tokio_postgres::Config,
    timeout: Duration,
    client: Option<Session>,
    keys: BTreeMap<String, Vec<String>>,
    rewrite_batched_inserts: bool,
}

impl std::fmt::Debug for RealPostgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealPostgres")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// An open session: the client and the task driving its connection. Dropping it closes
/// the socket at once, as pgJDBC closes a connection whose socket timed out, so the server
/// ends the backend and rolls back what it had open (its row locks with it). Dropping the
/// client alone would not: tokio-postgres keeps the connection up while a request is still
/// waiting for its answer, and a lost answer never comes.
struct Session {
    client: Client,
    connection: tokio::task::JoinHandle<()>,
}

impl std::ops::Deref for Session {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Where a failure happened, for its classification (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing can have been applied yet (connect, BEGIN, a statement before COMMIT).
    Before,
    /// The work may have been applied (an autocommit statement, COMMIT).
    Applying,
}

/// `jdbc:postgresql://host[:port]/database[?...]` as (host, port, database).
///
/// # Errors
/// A URL of another shape, with the expected one.
pub fn parse_jdbc_url(url: &str) -> Result<(String, u16, String), String> {
    let expected = "jdbc:postgresql://host[:port]/database";
    let rest = url
        .strip_prefix("jdbc:postgresql://")
        .ok_or(format!("connection.url {url:?}: expected {expected}"))?;
    let rest = rest.split('?').next().unwrap_or_default();
    let (authority, database) = rest
        .split_once('/')
        .ok_or(format!("connection.url {url:?}: expected {expected}"))?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => {
            let port = p
                .parse()
                .map_err(|_| format!("connection.url {url:?}: port {p:?} is not a number"))?;
            (h.to_string(), port)
        }
        None => (authority.to_string(), 5432),
    };
    Ok((host, port, database.to_string()))
}

/// A boolean property of a JDBC URL's query (`?reWriteBatchedInserts=true&...`), `false`
/// when absent, as pgJDBC reads its connection properties from the URL.
///
/// # Errors
/// A value other than `true` or `false`, naming the property.
pub fn url_flag(url: &str, name: &str) -> Result<bool, String> {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == name {
            return match value {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(format!(
                    "connection.url {url:?}: {name}={other:?}, expected true or false"
                )),
            };
        }
    }
    Ok(false)
}

impl RealPostgres {
    /// A client for `config` whose calls wait at most `timeout_ms` (pgJDBC's
    /// `socketTimeout`).
    pub fn new(config: tokio_postgres::Config, timeout_ms: u64) -> Self {
        Self {
            config,
            timeout: Duration::from_millis(timeout_ms),
            client: None,
            keys: BTreeMap::new(),
            rewrite_batched_inserts: false,
        }
    }

    /// The same client with pgJDBC's `reWriteBatchedInserts` set: a batch's runs of one-row
    /// `INSERT`s go as multi-row `INSERT`s ([`rewrite`]; see the module docs).
    pub fn with_rewrite_batched_inserts(mut self, on: bool) -> Self {
        self.rewrite_batched_inserts = on;
        self
    }

    /// A client for the JDBC sink's `connection.url`, `connection.user` and
    /// `connection.password`.
    ///
    /// # Errors
    /// [`PgClientError::Connection`] for a URL that is not `jdbc:postgresql://...`.
    pub fn from_jdbc(
        url: &str,
        user: &str,
        password: &str,
        timeout_ms: u64,
    ) -> Result<Self, PgClientError> {
        let (host, port, database) = parse_jdbc_url(url).map_err(PgClientError::Connection)?;
        let mut config = tokio_postgres::Config::new();
        config.host(&host).port(port).dbname(&database).user(user);
        if !password.is_empty() {
            config.password(password);
        }
        config.connect_timeout(Duration::from_millis(timeout_ms));
        let rewrite = url_flag(url, "reWriteBatchedInserts").map_err(PgClientError::Connection)?;
        Ok(Self::new(config, timeout_ms).with_rewrite_batched_inserts(rewrite))
    }

    /// A client for a libpq connection string (`host=... port=... user=...`).
    ///
    /// # Errors
    /// [`PgClientError::Connection`] when tokio-postgres cannot parse it.
    pub fn from_connection_string(text: &str, timeout_ms: u64) -> Result<Self, PgClientError> {
        let config: tokio_postgres::Config = text
            .parse()
            .map_err(|e| PgClientError::Connection(format!("connection string: {e}")))?;
        Ok(Self::new(config, timeout_ms))
    }

    fn timeout_ms(&self) -> u64 {
        self.timeout.as_millis() as u64
    }

    /// Forgets the session after any failure but a server error.
    fn settle<T>(&mut self, result: Result<T, PgClientError>) -> Result<T, PgClientError> {
        if matches!(&result, Err(e) if !matches!(e, PgClientError::Db { .. })) {
            self.client = None;
        }
        result
    }

    /// The session, connected (and set up) if it is not.
    async fn connect(&mut self) -> Result<&Client, PgClientError> {
        if self.client.as_ref().is_some_and(|s| s.is_closed()) {
            self.client = None;
        }
        if self.client.is_none() {
            let client = open(&self.config, self.timeout).await?;
            self.client = Some(client);
        }
        Ok(&self.client.as_ref().expect("connected above").client)
    }

    /// Runs one query text in autocommit mode or inside the current transaction.
    async fn query(
        &mut self,
        text: &str,
        phase: Phase,
    ) -> Result<Vec<SimpleQueryMessage>, PgClientError> {
        let (timeout, timeout_ms) = (self.timeout, self.timeout_ms());
        let client = self.connect().await?;
        let result = bounded(
            timeout,
            text,
            phase,
            None,
            timeout_ms,
            client.simple_query(text),
        );
        let result = result.await;
        self.settle(result)
    }

    /// The primary key of `table` in key order, from the catalog (cached).
    async fn primary_key(&mut self, table: &str) -> Result<Vec<String>, PgClientError> {
        if let Some(k) = self.keys.get(table) {
            return Ok(k.clone());
        }
        let text = format!(
            "SELECT a.attname FROM pg_index i \
             CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
             WHERE i.indrelid = to_regclass({}) AND i.indisprimary ORDER BY k.n",
            sql::quote(&sql::ident(table))
        );
        let rows = text_rows(&self.query(&text, Phase::Before).await?);
        let key: Vec<String> = rows.into_iter().filter_map(|mut r| r.remove(0)).collect();
        self.keys.insert(table.to_string(), key.clone());
        Ok(key)
    }

    /// The columns of `table` with their types, in table order; `42P01` when there is no
    /// such table.
    async fn columns(&mut self, table: &str) -> Result<Vec<(String, ColumnType)>, PgClientError> {
        let text = format!(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            sql::quote(&sql::ident(table))
        );
        let rows = text_rows(&self.query(&text, Phase::Before).await?);
        if rows.is_empty() {
            let error = PgError::undefined_table(table);
            return Err(PgClientError::Db { index: None, error });
        }
        rows.into_iter()
            .map(|r| {
                let name = r[0].clone().unwrap_or_default();
                let ty_name = r[1].clone().unwrap_or_default();
                let ty = ColumnType::parse(&ty_name).map_err(|e| {
                    PgClientError::Connection(format!("{table}.{name}: {}", e.message))
                })?;
                Ok((name, ty))
            })
            .collect()
    }

    /// The statement as SQL, with the table's key looked up where the text needs it.
    async fn render(&mut self, statement: &Statement) -> Result<String, PgClientError> {
        let key = match statement {
            Statement::CreateTable(c) => {
                self.keys.insert(c.name.clone(), c.primary_key.clone());
                Vec::new()
            }
            Statement::Update { table, .. }
            | Statement::Delete { table, .. }
            | Statement::Select { table } => self.primary_key(table).await?,
            Statement::Insert(_) | Statement::Truncate { .. } => Vec::new(),
        };
        Ok(sql::statement_sql(statement, &key))
    }

    /// `SELECT * FROM table ORDER BY pk`, each value read by its column's type.
    async fn select_rows(&mut self, table: &str) -> Result<Reply, PgClientError> {
        let columns = self.columns(table).await?;
        let text = self
            .render(&Statement::Select {
                table: table.into(),
            })
            .await?;
        let messages = self.query(&text, Phase::Before).await?;
        let mut rows: Vec<Row> = Vec::new();
        for r in text_rows(&messages) {
            let row = r
                .iter()
                .zip(&columns)
                .map(|(t, (_, ty))| sql::parse_text(t.as_deref(), *ty))
                .collect::<Result<Row, String>>()
                .map_err(PgClientError::Connection)?;
            rows.push(row);
        }
        let columns = columns.into_iter().map(|(n, _)| n).collect();
        Ok(Reply::Rows { columns, rows })
    }

    /// Runs SQL text in autocommit mode (setup the model's statements cannot say, such as
    /// `CREATE ROLE`); returns the rows the last statement affected.
    ///
    /// # Errors
    /// As [`PostgresClient::execute`].
    pub async fn run_sql(&mut self, text: &str) -> Result<u64, PgClientError> {
        let messages = self.query(text, Phase::Applying).await?;
        Ok(messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .last()
            .unwrap_or(0))
    }

    /// Loads `rows` into `table`'s `columns` with `COPY ... FROM STDIN` (text format), in
    /// one statement; returns the rows copied.
    ///
    /// # Errors
    /// As [`PostgresClient::execute`]; a lost connection while copying is ambiguous.
    pub async fn copy_in(
        &mut self,
        table: &str,
        columns: &[String],
        rows: &[Row],
    ) -> Result<u64, PgClientError> {
        let cols: Vec<String> = columns.iter().map(|c| sql::ident(c)).collect();
        let text = format!(
            "COPY {} ({}) FROM STDIN",
            sql::ident(table),
            cols.join(", ")
        );
        let mut data = String::new();
        for row in rows {
            data.push_str(&sql::copy_text_row(row));
        }
        let (timeout, timeout_ms) = (self.timeout, self.timeout_ms());
        let client = self.connect().await?;
        let copy = async {
            let sink = client.copy_in::<_, bytes::Bytes>(&text).await?;
            futures::pin_mut!(sink);
            sink.send(bytes::Bytes::from(data)).await?;
            sink.finish().await
        };
        let result = bounded(timeout, &text, Phase::Applying, None, timeout_ms, copy).await;
        self.settle(result)
    }

    /// Runs `statements` pipelined after `BEGIN`: per statement its reply or its error.
    async fn pipelined(
        &mut self,
        texts: &[String],
    ) -> Result<Vec<Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>>, PgClientError> {
        let (timeout, timeout_ms) = (self.timeout, self.timeout_ms());
        let client = self.connect().await?;
        let all = async {
            let begin = client.simple_query("BEGIN");
            let each = futures::future::join_all(texts.iter().map(|t| client.simple_query(t)));
            let (begin, each) = futures::join!(begin, each);
            begin.map(|_| each)
        };
        let result = bounded(timeout, "BEGIN; ...", Phase::Before, None, timeout_ms, all).await;
        self.settle(result)
    }
}

/// Opens a session and applies [`sql::SESSION_SETTINGS`].
async fn open(
    config: &tokio_postgres::Config,
    timeout: Duration,
) -> Result<Session, PgClientError> {
    let (client, connection) = match tokio::time::timeout(timeout, config.connect(NoTls)).await {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(PgClientError::Connection(format!("connect: {e}"))),
        Err(_) => return Err(PgClientError::Connection("connect: timed out".into())),
    };
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let session = Session { client, connection };
    match tokio::time::timeout(timeout, session.batch_execute(sql::SESSION_SETTINGS)).await {
        Ok(Ok(())) => Ok(session),
        Ok(Err(e)) => Err(PgClientError::Connection(format!("session setup: {e}"))),
        Err(_) => Err(PgClientError::Connection("session setup: timed out".into())),
    }
}

/// Awaits `f` at most `timeout`, mapping its failure (see the module docs).
async fn bounded<T>(
    timeout: Duration,
    what: &str,
    phase: Phase,
    index: Option<usize>,
    timeout_ms: u64,
    f: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgClientError> {
    match tokio::time::timeout(timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(map_error(&e, what, phase, index, timeout_ms)),
        Err(_) => Err(lost(what, "no answer", phase, timeout_ms)),
    }
}

/// A failure without a server error: ambiguous once the work may have been applied.
fn lost(what: &str, why: &str, phase: Phase, timeout_ms: u64) -> PgClientError {
    let what: String = what.chars().take(120).collect();
    match phase {
        Phase::Before => PgClientError::Connection(format!("{what}: {why}")),
        Phase::Applying => PgClientError::Timeout {
            what: format!("{what}: {why} (outcome unknown)"),
            timeout_ms,
        },
    }
}

/// A tokio-postgres error in the trait's terms (see the module docs).
fn map_error(
    e: &tokio_postgres::Error,
    what: &str,
    phase: Phase,
    index: Option<usize>,
    timeout_ms: u64,
) -> PgClientError {
    let Some(db) = e.as_db_error() else {
        return lost(what, &e.to_string(), phase, timeout_ms);
    };
    match SqlState::from_code(db.code().code()) {
        Some(code) => PgClientError::Db {
            index,
            error: PgError {
                code,
                message: db.message().to_string(),
                detail: db.detail().map(str::to_string),
                hint: db.hint().map(str::to_string),
            },
        },
        None => PgClientError::Connection(format!(
            "SQLSTATE {} (not in the model): {}",
            db.code().code(),
            db.message()
        )),
    }
}

/// The rows of a simple query's answer, as text (`None` = NULL).
pub fn text_rows(messages: &[SimpleQueryMessage]) -> Vec<Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// The rows a statement affected, from its `CommandComplete`.
pub fn affected(messages: &[SimpleQueryMessage]) -> u64 {
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

#[async_trait]
impl PostgresClient for RealPostgres {
    async fn execute(&mut self, statement: Statement) -> Result<Reply, PgClientError> {
        if let Statement::Select { table } = &statement {
            return self.select_rows(table).await;
        }
        let text = self.render(&statement).await?;
        let messages = self.query(&text, Phase::Applying).await?;
        Ok(Reply::Affected(affected(&messages)))
    }

    async fn execute_batch(
        &mut self,
        statements: Vec<Statement>,
    ) -> Result<Vec<Reply>, PgClientError> {
        if self.rewrite_batched_inserts {
            let runs = rewrite::rewrite(&statements);
            if runs.len() < statements.len() {
                if let Some(replies) = self.rewritten_batch(&runs).await? {
                    return Ok(replies);
                }
            }
        }
        let mut texts = Vec::with_capacity(statements.len());
        for st in &statements {
            texts.push(self.render(st).await?);
        }
        let results = self.transaction(&texts).await?;
        self.query("COMMIT", Phase::Applying).await?;
        Ok(results
            .iter()
            .map(|m| Reply::Affected(affected(m)))
            .collect())
    }
}

impl RealPostgres {
    /// `BEGIN` and `texts` pipelined, the transaction left open: each statement's reply, or
    /// the first failing one as the error (its `index`), the transaction rolled back.
    async fn transaction(
        &mut self,
        texts: &[String],
    ) -> Result<Vec<Vec<SimpleQueryMessage>>, PgClientError> {
        let results = self.pipelined(texts).await?;
        if let Some(i) = results.iter().position(Result::is_err) {
            let e = results[i].as_ref().expect_err("position found an error");
            let error = map_error(e, &texts[i], Phase::Before, Some(i), self.timeout_ms());
            if matches!(error, PgClientError::Db { .. }) {
                // A failed ROLLBACK loses the session, which rolls back as well.
                let _ = self.query("ROLLBACK", Phase::Before).await;
            } else {
                self.client = None;
            }
            return Err(error);
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("none failed"))
            .collect())
    }

    /// The batch as `runs` in one transaction, committed when every rewritten statement
    /// affected one row per statement it stands for: one reply per batch statement.
    /// `None` (rolled back, nothing applied) after a server error or another count: the
    /// caller runs the statements one by one, which names the failing one.
    async fn rewritten_batch(
        &mut self,
        runs: &[rewrite::Rewritten],
    ) -> Result<Option<Vec<Reply>>, PgClientError> {
        let mut texts = Vec::with_capacity(runs.len());
        for run in runs {
            texts.push(self.render(&run.statement).await?);
        }
        let results = match self.transaction(&texts).await {
            Ok(r) => r,
            Err(PgClientError::Db { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let counts: Vec<u64> = results.iter().map(|m| affected(m)).collect();
        let as_expected = runs
            .iter()
            .zip(&counts)
            .all(|(run, n)| run.count == 1 || *n == run.count as u64);
        if !as_expected {
            let _ = self.query("ROLLBACK", Phase::Before).await;
            return Ok(None);
        }
        self.query("COMMIT", Phase::Applying).await?;
        let mut replies = Vec::new();
        for (run, n) in runs.iter().zip(counts) {
            let each = if run.count == 1 { n } else { 1 };
            replies.extend(std::iter::repeat_n(Reply::Affected(each), run.count));
        }
        Ok(Some(replies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdbc_urls_give_host_port_and_database() {
        assert_eq!(
            parse_jdbc_url("jdbc:postgresql://10.0.5.1:5432/db?ssl=false"),
            Ok(("10.0.5.1".into(), 5432, "db".into()))
        );
        assert_eq!(
            parse_jdbc_url("jdbc:postgresql://h/x"),
            Ok(("h".into(), 5432, "x".into()))
        );
        assert!(parse_jdbc_url("jdbc:mysql://h/x").is_err());
        assert!(parse_jdbc_url("jdbc:postgresql://h:port/x").is_err());
    }

    #[test]
    fn url_properties_set_the_rewrite_and_bad_values_are_named() {
        let url = "jdbc:postgresql://h:1/db?ssl=false&reWriteBatchedInserts=true";
        assert_eq!(url_flag(url, "reWriteBatchedInserts"), Ok(true));
        assert_eq!(
            url_flag("jdbc:postgresql://h/db", "reWriteBatchedInserts"),
            Ok(false)
        );
        let bad = url_flag(
            "jdbc:postgresql://h/db?reWriteBatchedInserts=yes",
            "reWriteBatchedInserts",
        );
        assert!(bad.unwrap_err().contains("reWriteBatchedInserts=\"yes\""));
        let client = RealPostgres::from_jdbc(url, "u", "", 1_000).expect("parses");
        assert!(client.rewrite_batched_inserts);
    }

    #[test]
    fn every_model_sqlstate_maps_back_from_its_code() {
        for &s in SqlState::ALL {
            assert_eq!(SqlState::from_code(s.code()), Some(s));
        }
        assert_eq!(SqlState::from_code("57P01"), None);
    }

    #[test]
    fn a_lost_commit_is_ambiguous_and_a_lost_statement_is_not() {
        assert!(lost("COMMIT", "closed", Phase::Applying, 5).is_ambiguous());
        assert!(!lost("INSERT", "closed", Phase::Before, 5).is_ambiguous());
    }
}

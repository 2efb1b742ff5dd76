//! The [`ClickHouse`] trait over a real server's HTTP interface, with the `clickhouse`
//! crate 0.15 ([`RealClickHouse`]).
//!
//! # What goes over the wire
//! - `CREATE TABLE`: DDL rendered from the [`TableDef`] ([`create_table_sql`]);
//!   Replicated engines get the explicit ZooKeeper path
//!   `/eosim/clickhouse/tables/<database>/<table>` and replica `replica1` (the provisioned
//!   server has no `<macros>`).
//! - `INSERT`: `INSERT INTO <t> FORMAT JSONEachRow` through the crate's
//!   `insert_formatted_with`, one JSON object a line, with the insert's settings as URL
//!   parameters (`max_insert_block_size`, `insert_deduplicate`,
//!   `insert_deduplication_token`, `input_format_skip_unknown_fields`,
//!   `keeper_map_strict_mode`): the server parses the body and cuts it into blocks itself,
//!   as for the connector's own JSON inserts.
//! - `SELECT`: `DESCRIBE TABLE` for the column types, then `SELECT * FROM <t> [FINAL]
//!   FORMAT JSONEachRow` read as raw bytes and converted column by column with the
//!   model's own JSON conversion (64-bit integers arrive quoted, which it reads).
//!
//! The crate's typed `Row` API is not used: it speaks RowBinary, which needs a Rust type
//! per table, and its validating mode (`RowBinaryWithNamesAndTypes`) does not exist on
//! 18.16. The client is built with `with_validation(false)` and no compression, and every
//! statement goes through `query_raw`/`insert_formatted_with` with `FORMAT JSONEachRow`
//! spelled out, which 18.16 understands.
//!
//! # Versions
//! The first statement that needs it asks `SELECT version()` (once per client;
//! [`RealClickHouse::connect`] asks at once). A setting the server does not
//! know is refused before anything is sent, with ClickHouse's own code 115
//! `UNKNOWN_SETTING` and a message naming the version that introduced it:
//! `insert_deduplication_token` needs 22.2, `keeper_map_strict_mode` 23.4
//! (models-reference F.7). 18.16 itself would answer the same code.
//!
//! # Errors
//! A server exception (`Code: N, e.displayText() = DB::Exception: ...` on 18.16,
//! `Code: N. DB::Exception: ...` later) becomes [`ChClientError::Server`] with code `N`
//! ([`ErrorCode::from_number`]). No answer within `timeout_ms`, a broken or refused
//! connection, or an answer the client cannot read becomes [`ChClientError::Timeout`]:
//! the client cannot tell whether the statement ran (a refused connection did not, but
//! the crate does not say which happened reliably, so it is reported as ambiguous too).
//!
//! # Blocks
//! `max_insert_block_size` cuts the parsed rows into blocks, but the server then squashes
//! consecutive small blocks up to `min_insert_block_size_rows` (1048576) /
//! `_bytes` (256 MiB) before writing parts (models-reference F.1). So on a real server a
//! small INSERT with `max_insert_block_size = 2` still forms one part; it forms one part
//! per block only with `min_insert_block_size_rows = 0` and `min_insert_block_size_bytes =
//! 0`, per insert ([`Insert::unsquashed`], sent as URL settings) or per client
//! ([`RealClickHouseConfig::settings`]). The model squashes the same way.
//!
//! # What the client does not learn
//! ClickHouse answers a deduplicated INSERT like a written one: the returned
//! [`InsertSummary`] counts the blocks the client expects
//! (`ceil(rows / max_insert_block_size)`) and leaves `parts` empty.

use crate::client::clickhouse::{ChClientError, ClickHouse};
use async_trait::async_trait;
use bytes::Bytes;
use eosim_sim::clickhouse::model::InsertSummary;
use eosim_sim::clickhouse::types::{
    convert, Column, ColumnType, Conversion, Engine, Insert, IntegerOverflow, Row, TableDef,
    VersionProfile,
};
use eosim_sim::clickhouse::{ChError, ErrorCode};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// The ZooKeeper path under which Replicated tables keep their metadata and block ids.
pub const REPLICATED_ZK_ROOT: &str = "/eosim/clickhouse/tables";

/// The replica name of every Replicated table eosim creates.
pub const REPLICA_NAME: &str = "replica1";

/// A server version `major.minor.patch` as `SELECT version()` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// Major (18, 23, ...).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl ServerVersion {
    /// Parses `18.16.1` or `23.7.4.5` (parts after the third are ignored).
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
        Some(Self {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next().flatten().unwrap_or(0),
        })
    }

    fn at_least(self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether the server knows `insert_deduplication_token` (22.2+).
    pub fn has_deduplication_token(self) -> bool {
        self.at_least(22, 2)
    }

    /// Whether the server has the KeeperMap engine (22.8+, ClickHouse PR #39976).
    pub fn has_keeper_map(self) -> bool {
        self.at_least(22, 8)
    }

    /// Whether the server knows `keeper_map_strict_mode` (23.4+, ClickHouse PR #48293).
    pub fn has_keeper_map_strict_mode(self) -> bool {
        self.at_least(23, 4)
    }

    /// The model's profile whose defaults this version has (models-reference F.7): 18.16
    /// up to 22.1, 23.7 up to 23.10, 23.11 up to 25.8, 25.9 from there.
    pub fn profile(self) -> VersionProfile {
        if !self.has_deduplication_token() {
            VersionProfile::V18_16
        } else if !self.at_least(23, 11) {
            VersionProfile::V23_7
        } else if !self.at_least(25, 9) {
            VersionProfile::V23_11
        } else {
            VersionProfile::V25_9
        }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Where and how to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealClickHouseConfig {
    /// The HTTP interface, `http://127.0.0.1:8123`.
    pub url: String,
    /// The database (`default`).
    pub database: String,
    /// The user (`default`).
    pub user: String,
    /// The password (empty for none).
    pub password: String,
    /// How long one statement may take before it counts as unanswered, ms.
    pub timeout_ms: u64,
    /// Settings sent with every statement (URL parameters), as a user profile in
    /// `users.xml` would set them: `min_insert_block_size_rows=0` for instance.
    pub settings: BTreeMap<String, String>,
}

impl RealClickHouseConfig {
    /// `url`, database and user `default`, no password, 30 s per statement.
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_string(),
            database: "default".into(),
            user: "default".into(),
            password: String::new(),
            timeout_ms: 30_000,
            settings: BTreeMap::new(),
        }
    }
}

/// The HTTP client the crate's `Client::default()` builds (`http_client.rs`: TCP
/// keepalive 60 s, idle connections kept 2 s, under ClickHouse's 3 s keep-alive), with
/// `TCP_NODELAY` on. The crate sends an INSERT's body as chunks after its headers; with
/// Nagle's algorithm the last small chunk waits for the server's delayed ACK (40 ms on
/// Linux), so every small INSERT took tens of milliseconds (issue 15, item 4: the
/// ClickHouse sink's 500-row INSERTs ran at about 30 ms each, one 20,000-row INSERT in 18).
fn nodelay_client() -> clickhouse::Client {
    use hyper_util::client::legacy::{connect::HttpConnector, Client};
    let mut connector = HttpConnector::new();
    connector.set_keepalive(Some(Duration::from_secs(60)));
    connector.set_nodelay(true);
    let http = Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(2))
        .build(connector);
    clickhouse::Client::with_http_client(http)
}

/// A client of a real ClickHouse server; cloning shares the HTTP connection pool.
#[derive(Clone)]
pub struct RealClickHouse {
    client: clickhouse::Client,
    config: RealClickHouseConfig,
    version: std::sync::Arc<tokio::sync::OnceCell<ServerVersion>>,
}

impl std::fmt::Debug for RealClickHouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealClickHouse")
            .field("url", &self.config.url)
            .field("version", &self.version.get())
            .finish()
    }
}

impl RealClickHouse {
    /// A client of the server `config` names; nothing is sent until the first statement.
    pub fn new(config: RealClickHouseConfig) -> Self {
        let mut client = nodelay_client()
            .with_url(&config.url)
            .with_database(&config.database)
            .with_user(&config.user)
            .with_compression(clickhouse::Compression::None)
            .with_validation(false);
        if !config.password.is_empty() {
            client = client.with_password(&config.password);
        }
        for (name, value) in &config.settings {
            client = client.with_setting(name, value);
        }
        Self {
            client,
            config,
            version: Default::default(),
        }
    }

    /// A client that has asked the server's version.
    ///
    /// # Errors
    /// As [`RealClickHouse::version`].
    pub async fn connect(config: RealClickHouseConfig) -> Result<Self, ChClientError> {
        let ch = Self::new(config);
        ch.version().await?;
        Ok(ch)
    }

    /// The server's version (`SELECT version()`, asked once).
    ///
    /// # Errors
    /// [`ChClientError::Timeout`] when the server does not answer; [`ChClientError::Server`]
    /// with `BAD_ARGUMENTS` when the answer is not a version.
    pub async fn version(&self) -> Result<ServerVersion, ChClientError> {
        let ask = || async {
            let text = self.query_text("SELECT version()").await?;
            ServerVersion::parse(&text).ok_or_else(|| {
                let msg = format!("unreadable answer to SELECT version(): {text:?}");
                ChClientError::Server(ChError::new(ErrorCode::BadArguments, msg))
            })
        };
        self.version.get_or_try_init(ask).await.copied()
    }

    /// The connection settings.
    pub fn config(&self) -> &RealClickHouseConfig {
        &self.config
    }

    /// Runs `fut` within the statement timeout, mapping the crate's errors.
    async fn timed<T>(
        &self,
        what: &str,
        fut: impl Future<Output = clickhouse::error::Result<T>>,
    ) -> Result<T, ChClientError> {
        let timeout_ms = self.config.timeout_ms;
        match tokio::time::timeout(Duration::from_millis(timeout_ms), fut).await {
            Ok(result) => result.map_err(|e| map_error(&e, what, timeout_ms)),
            Err(_) => Err(ChClientError::Timeout {
                what: what.to_string(),
                timeout_ms,
            }),
        }
    }

    /// Runs a statement that returns nothing (DDL, `OPTIMIZE`, ...).
    ///
    /// # Errors
    /// As the module docs say.
    pub async fn execute(&self, sql: &str) -> Result<(), ChClientError> {
        self.timed(sql, self.client.query_raw(sql).execute()).await
    }

    /// Runs `sql` and returns the whole answer as text (`TabSeparated` unless `sql` names
    /// a format), trimmed.
    ///
    /// # Errors
    /// As the module docs say.
    pub async fn query_text(&self, sql: &str) -> Result<String, ChClientError> {
        let fut = async {
            let mut cursor = self.client.query_raw(sql).fetch_bytes("TabSeparated")?;
            cursor.collect().await
        };
        let bytes = self.timed(sql, fut).await?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// Runs `sql` (which must end in `FORMAT JSONEachRow`) and parses each line.
    ///
    /// # Errors
    /// As the module docs say; a line that is not JSON is `INCORRECT_DATA` (117).
    pub async fn query_json(&self, sql: &str) -> Result<Vec<serde_json::Value>, ChClientError> {
        let text = self.query_text(sql).await?;
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).map_err(|e| {
                    let msg = format!("answer to {sql} is not JSONEachRow: {e}: {l}");
                    ChClientError::Server(ChError::new(ErrorCode::IncorrectData, msg))
                })
            })
            .collect()
    }

    /// `count()` of `table`.
    ///
    /// # Errors
    /// As the module docs say.
    pub async fn count(&self, table: &str) -> Result<u64, ChClientError> {
        let text = self
            .query_text(&format!("SELECT count() FROM {}", quote_ident(table)))
            .await?;
        text.parse().map_err(|_| {
            let msg = format!("count() of {table} answered {text:?}");
            ChClientError::Server(ChError::new(ErrorCode::IncorrectData, msg))
        })
    }

    /// The columns of `table` (`DESCRIBE TABLE`), in order.
    ///
    /// # Errors
    /// `UNKNOWN_TABLE` (60) from the server; `BAD_ARGUMENTS` (36) for a column type the
    /// model does not know.
    pub async fn columns(&self, table: &str) -> Result<Vec<Column>, ChClientError> {
        let sql = format!("DESCRIBE TABLE {} FORMAT JSONEachRow", quote_ident(table));
        let rows = self.query_json(&sql).await?;
        rows.iter()
            .map(|r| {
                let name = r["name"].as_str().unwrap_or_default();
                let ty = r["type"].as_str().unwrap_or_default();
                let ty = parse_type(ty).ok_or_else(|| {
                    let msg = format!("column {table}.{name} has type {ty}, unknown to eosim");
                    ChClientError::Server(ChError::new(ErrorCode::BadArguments, msg))
                })?;
                Ok(Column::new(name, ty))
            })
            .collect()
    }

    /// Refuses settings this server does not know, before anything is sent.
    async fn check_settings(&self, insert: &Insert) -> Result<(), ChClientError> {
        let s = &insert.settings;
        let version = self.version().await?;
        let refuse = |setting: &str, since: &str| {
            let msg = format!(
                "Unknown setting {setting}: it needs ClickHouse {since} or later, \
                 the server is {version}"
            );
            Err(ChClientError::Server(ChError::new(
                ErrorCode::UnknownSetting,
                msg,
            )))
        };
        if s.insert_deduplication_token.is_some() && !version.has_deduplication_token() {
            return refuse("insert_deduplication_token", "22.2");
        }
        if s.keeper_map_strict_mode.is_some() && !version.has_keeper_map_strict_mode() {
            return refuse("keeper_map_strict_mode", "23.4");
        }
        if s.integer_overflow == IntegerOverflow::Throw {
            let msg = "integer_overflow=Throw is the model's VALUES path; a real \
                       JSONEachRow insert wraps integers";
            return Err(ChClientError::Server(ChError::new(
                ErrorCode::BadArguments,
                msg,
            )));
        }
        Ok(())
    }
}

/// Quotes an identifier with backquotes.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('\\', "\\\\").replace('`', "\\`"))
}

fn quote_string(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Parses a column type as `DESCRIBE TABLE` writes it; `None` for types the model does not
/// have.
pub fn parse_type(text: &str) -> Option<ColumnType> {
    let text = text.trim();
    if let Some(inner) = text
        .strip_prefix("Nullable(")
        .and_then(|t| t.strip_suffix(')'))
    {
        return parse_type(inner).map(|t| ColumnType::Nullable(Box::new(t)));
    }
    Some(match text {
        "UInt8" => ColumnType::UInt8,
        "UInt16" => ColumnType::UInt16,
        "UInt32" => ColumnType::UInt32,
        "UInt64" => ColumnType::UInt64,
        "Int8" => ColumnType::Int8,
        "Int16" => ColumnType::Int16,
        "Int32" => ColumnType::Int32,
        "Int64" => ColumnType::Int64,
        "String" => ColumnType::String,
        "DateTime" => ColumnType::DateTime,
        _ => return None,
    })
}

/// The engine clause (`ENGINE = ...`, `PRIMARY KEY` for KeeperMap) of `def`.
fn engine_sql(def: &TableDef, database: &str) -> String {
    let zk = || {
        let path = format!("{REPLICATED_ZK_ROOT}/{database}/{}", def.name);
        format!("{}, {}", quote_string(&path), quote_string(REPLICA_NAME))
    };
    let version = |v: &Option<String>| v.as_deref().map(quote_ident);
    match &def.engine {
        Engine::MergeTree => "MergeTree()".into(),
        Engine::ReplicatedMergeTree => format!("ReplicatedMergeTree({})", zk()),
        Engine::ReplacingMergeTree { version_column } => format!(
            "ReplacingMergeTree({})",
            version(version_column).unwrap_or_default()
        ),
        Engine::ReplicatedReplacingMergeTree { version_column } => {
            let args = match version(version_column) {
                Some(v) => format!("{}, {v}", zk()),
                None => zk(),
            };
            format!("ReplicatedReplacingMergeTree({args})")
        }
        Engine::KeeperMap {
            root_path,
            keys_limit,
        } => {
            let limit = keys_limit.map(|n| format!(", {n}")).unwrap_or_default();
            let key = def.primary_key.as_deref().map(quote_ident);
            format!(
                "KeeperMap({}{limit}) PRIMARY KEY({})",
                quote_string(root_path),
                key.unwrap_or_default()
            )
        }
    }
}

/// `CREATE TABLE` for `def` in `database`. `cleanup_delay_period_ms` is rounded up to
/// whole seconds (ClickHouse's `cleanup_delay_period` is in seconds).
pub fn create_table_sql(def: &TableDef, database: &str) -> String {
    let columns: Vec<String> = def
        .columns
        .iter()
        .map(|c| format!("{} {}", quote_ident(&c.name), c.ty.name()))
        .collect();
    let mut sql = format!(
        "CREATE TABLE {} ({}) ENGINE = {}",
        quote_ident(&def.name),
        columns.join(", "),
        engine_sql(def, database)
    );
    if matches!(def.engine, Engine::KeeperMap { .. }) {
        return sql;
    }
    if let Some(p) = &def.partition_by {
        sql.push_str(&format!(" PARTITION BY {}", quote_ident(p)));
    }
    let order: Vec<String> = def.order_by.iter().map(|c| quote_ident(c)).collect();
    sql.push_str(&format!(" ORDER BY ({})", order.join(", ")));
    let s = &def.settings;
    let settings: Vec<String> = [
        (
            "replicated_deduplication_window",
            s.replicated_deduplication_window,
        ),
        (
            "replicated_deduplication_window_seconds",
            s.replicated_deduplication_window_seconds,
        ),
        (
            "non_replicated_deduplication_window",
            s.non_replicated_deduplication_window,
        ),
        (
            "cleanup_delay_period",
            s.cleanup_delay_period_ms.map(|ms| ms.div_ceil(1000)),
        ),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| format!("{name} = {v}")))
    .collect();
    if !settings.is_empty() {
        sql.push_str(&format!(" SETTINGS {}", settings.join(", ")));
    }
    sql
}

/// The URL settings of `insert`, as (name, value).
fn insert_settings(insert: &Insert) -> Vec<(&'static str, String)> {
    let s = &insert.settings;
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    let mut out = Vec::new();
    if let Some(n) = s.max_insert_block_size {
        out.push(("max_insert_block_size", n.to_string()));
    }
    if let Some(n) = s.min_insert_block_size_rows {
        out.push(("min_insert_block_size_rows", n.to_string()));
    }
    if let Some(n) = s.min_insert_block_size_bytes {
        out.push(("min_insert_block_size_bytes", n.to_string()));
    }
    if let Some(d) = s.insert_deduplicate {
        out.push(("insert_deduplicate", flag(d)));
    }
    if let Some(t) = &s.insert_deduplication_token {
        out.push(("insert_deduplication_token", t.clone()));
    }
    if let Some(k) = s.keeper_map_strict_mode {
        out.push(("keeper_map_strict_mode", flag(k)));
    }
    if let Some(k) = s.input_format_skip_unknown_fields {
        out.push(("input_format_skip_unknown_fields", flag(k)));
    }
    out
}

/// The JSONEachRow body of `insert`: one object a line.
fn json_each_row(insert: &Insert) -> Bytes {
    let mut body = Vec::new();
    for row in &insert.rows {
        serde_json::to_writer(&mut body, row).expect("JSON values serialize");
        body.push(b'\n');
    }
    Bytes::from(body)
}

/// Parses a server exception's text: its code and message.
pub fn parse_exception(text: &str) -> Option<ChError> {
    let start = text.find("Code: ")?;
    let rest = &text[start + "Code: ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let code = ErrorCode::from_number(digits.parse().ok()?);
    let message = rest
        .split_once("DB::Exception: ")
        .map_or(rest, |(_, m)| m)
        .split(", e.what() = ")
        .next()
        .unwrap_or_default()
        .trim()
        .trim_end_matches('.')
        .to_string();
    Some(ChError::new(code, message))
}

/// Maps the crate's error: server exceptions keep their code; anything else leaves the
/// outcome unknown ([`ChClientError::Timeout`]).
pub fn map_error(e: &clickhouse::error::Error, what: &str, timeout_ms: u64) -> ChClientError {
    if let clickhouse::error::Error::BadResponse(text) = e {
        if let Some(error) = parse_exception(text) {
            return ChClientError::Server(error);
        }
    }
    ChClientError::Timeout {
        what: format!("{what} ({e})"),
        timeout_ms,
    }
}

/// How the real server reads JSON into a row: the profile's conversion, wrapping integers.
fn conversion(profile: VersionProfile) -> Conversion {
    let modern = profile != VersionProfile::V18_16;
    Conversion {
        null_as_default: profile.null_as_default(),
        overflow: IntegerOverflow::Wrap,
        numbers_as_strings: modern,
    }
}

/// Converts one `SELECT ... FORMAT JSONEachRow` object into a row of `columns`.
///
/// # Errors
/// The model's conversion error for a value it cannot read.
pub fn row_from_json(
    columns: &[Column],
    json: &serde_json::Value,
    profile: VersionProfile,
) -> Result<Row, ChError> {
    columns
        .iter()
        .map(|c| {
            let value = json.get(&c.name).unwrap_or(&serde_json::Value::Null);
            convert(&c.name, &c.ty, value, conversion(profile))
        })
        .collect()
}

#[async_trait]
impl ClickHouse for RealClickHouse {
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError> {
        self.execute(&create_table_sql(&def, &self.config.database))
            .await
    }

    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError> {
        self.check_settings(&insert).await?;
        let sql = format!(
            "INSERT INTO {} FORMAT JSONEachRow",
            quote_ident(&insert.table)
        );
        let mut statement = self.client.insert_formatted_with(sql.clone());
        for (name, value) in insert_settings(&insert) {
            statement = statement.with_setting(name, value);
        }
        let body = json_each_row(&insert);
        let fut = async move {
            statement.send(body).await?;
            statement.end().await
        };
        self.timed(&sql, fut).await?;
        let block = insert
            .settings
            .max_insert_block_size
            .unwrap_or(self.version().await?.profile().max_insert_block_size())
            .max(1);
        let blocks = insert.rows.len().div_ceil(block);
        Ok(InsertSummary {
            blocks_total: blocks,
            blocks_applied: blocks,
            parts: Vec::new(),
        })
    }

    async fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChClientError> {
        let columns = self.columns(table).await?;
        let sql = format!(
            "SELECT * FROM {}{} FORMAT JSONEachRow",
            quote_ident(table),
            if final_ { " FINAL" } else { "" }
        );
        let profile = self.version().await?.profile();
        self.query_json(&sql)
            .await?
            .iter()
            .map(|j| row_from_json(&columns, j, profile).map_err(ChClientError::Server))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eosim_sim::clickhouse::types::{TableSettings, Value};
    use serde_json::json;

    #[test]
    fn exceptions_of_18_16_and_of_newer_servers_keep_their_code() {
        let old = "Code: 115, e.displayText() = DB::Exception: Unknown setting \
                   insert_deduplication_token, e.what() = DB::Exception\n";
        let e = parse_exception(old).unwrap();
        assert_eq!(e.code, ErrorCode::UnknownSetting);
        assert_eq!(e.message, "Unknown setting insert_deduplication_token");
        let new = "Code: 60. DB::Exception: Table default.nope does not exist. \
                   (UNKNOWN_TABLE) (version 23.7.1.1)";
        assert_eq!(parse_exception(new).unwrap().code, ErrorCode::UnknownTable);
        let other = parse_exception("Code: 252, e.displayText() = DB::Exception: Too many parts");
        assert_eq!(other.unwrap().code, ErrorCode::Other(252));
        assert!(parse_exception("502 Bad Gateway").is_none());
    }

    #[test]
    fn every_named_code_maps_back_from_its_number() {
        for code in ErrorCode::NAMED {
            assert_eq!(ErrorCode::from_number(code.number()), code);
        }
        assert_eq!(ErrorCode::from_number(209).number(), 209);
    }

    #[test]
    fn versions_gate_the_token_and_keeper_map() {
        let v18 = ServerVersion::parse("18.16.1").unwrap();
        assert!(!v18.has_deduplication_token() && !v18.has_keeper_map());
        assert_eq!(v18.profile(), VersionProfile::V18_16);
        let v23 = ServerVersion::parse("23.7.4.5").unwrap();
        assert!(v23.has_deduplication_token() && v23.has_keeper_map());
        assert!(v23.has_keeper_map_strict_mode());
        assert_eq!(v23.profile(), VersionProfile::V23_7);
        assert_eq!(
            ServerVersion::parse("25.9.1").unwrap().profile(),
            VersionProfile::V25_9
        );
        assert!(ServerVersion::parse("not a version").is_none());
    }

    #[test]
    fn ddl_names_the_engine_its_zookeeper_path_and_settings() {
        let mut def = TableDef::kafka2ck();
        assert_eq!(
            create_table_sql(&def, "default"),
            "CREATE TABLE `kafka2ck` (`id` UInt8, `name` String) ENGINE = MergeTree() \
             ORDER BY (`id`)"
        );
        def.engine = Engine::ReplicatedMergeTree;
        def.settings = TableSettings {
            replicated_deduplication_window: Some(100),
            cleanup_delay_period_ms: Some(1500),
            ..TableSettings::default()
        };
        assert_eq!(
            create_table_sql(&def, "db"),
            "CREATE TABLE `kafka2ck` (`id` UInt8, `name` String) ENGINE = \
             ReplicatedMergeTree('/eosim/clickhouse/tables/db/kafka2ck', 'replica1') \
             ORDER BY (`id`) SETTINGS replicated_deduplication_window = 100, \
             cleanup_delay_period = 2"
        );
        let state = crate::sinks::clickhouse::state_table_def("connect_state");
        assert!(create_table_sql(&state, "default")
            .ends_with("ENGINE = KeeperMap('/eosim_connect_state') PRIMARY KEY(`key`)"));
    }

    #[test]
    fn select_answers_convert_with_quoted_64_bit_integers() {
        let columns = vec![
            Column::new("id", ColumnType::UInt8),
            Column::new("n", ColumnType::Int64),
            Column::new("s", ColumnType::Nullable(Box::new(ColumnType::String))),
        ];
        let row = row_from_json(
            &columns,
            &json!({"id": 7, "n": "-3", "s": null}),
            VersionProfile::V18_16,
        )
        .unwrap();
        assert_eq!(row, vec![Value::UInt(7), Value::Int(-3), Value::Null]);
        assert_eq!(
            parse_type("Nullable(DateTime)"),
            Some(ColumnType::Nullable(Box::new(ColumnType::DateTime)))
        );
        assert_eq!(parse_type("Float64"), None);
    }

    #[test]
    fn insert_settings_go_as_url_parameters() {
        let insert = Insert::new("t", vec![json!({"id": 1})])
            .block_size(2)
            .token("tp-0-5");
        assert_eq!(
            insert_settings(&insert),
            vec![
                ("max_insert_block_size", "2".to_string()),
                ("insert_deduplication_token", "tp-0-5".to_string())
            ]
        );
        assert_eq!(json_each_row(&insert), Bytes::from_static(b"{\"id\":1}\n"));
    }
}

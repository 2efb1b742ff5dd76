//! KeeperMap tables kept directly in a real ZooKeeper ([`ZkKeeperMap`], crate
//! `zookeeper-client` 0.11), and [`ClickHouseWithZooKeeper`], a real ClickHouse whose
//! KeeperMap tables live there.
//!
//! # Why
//! Debian's ClickHouse is 18.16, which has no KeeperMap engine (22.8+). The ClickHouse
//! sink keeps its state record in a KeeperMap table; KeeperMap is a thin layer over
//! Keeper/ZooKeeper, so on such a server eosim writes into ZooKeeper itself, the way
//! KeeperMap does, and keeps the sink's code unchanged.
//!
//! # Layout, and how it corresponds to KeeperMap's
//! ClickHouse's `StorageKeeperMap` (`src/Storages/StorageKeeperMap.cpp`, models-reference
//! F.5) keeps a table `KeeperMap(root_path) PRIMARY KEY(key)` under
//! `<keeper_map_path_prefix><root_path>`: `metadata` (the table's definition), `tables/`
//! (one child per ClickHouse table attached to the path), and `data/<serialized key>`
//! whose data is the row's other columns. Here, with `prefix` standing for
//! `keeper_map_path_prefix`:
//! - `<prefix><root_path>/data/<base64url(key text)>` holds the whole row as JSON (the
//!   model's encoding, [`eosim_sim::clickhouse::keeper_map`]; ClickHouse base64-encodes
//!   the key's binary serialization and stores the other columns binary-serialized);
//! - `<prefix><root_path>/metadata` holds the [`TableDef`] as JSON;
//! - `<prefix>/eosim_catalog/<table>` holds it too, keyed by table name: it stands for
//!   ClickHouse's own catalog (`metadata/<db>/<table>.sql` on the server's disk), so a
//!   restarted worker finds the table by name. `tables/` is not kept.
//!
//! Operations follow KeeperMap's: an INSERT is one `multi` of create (new key) or set
//! with version -1 (existing key, non-strict mode) after an `exists` per key, so a key
//! created by someone else in between fails the whole INSERT with node exists; a get by
//! key returns the znode's data and `dataVersion`; a full scan lists `data/` and gets each
//! child (not a snapshot). [`KeeperMap::put_if_version`] is a `setData` with the expected
//! version (`create` when none is expected, where node exists means another writer won).
//! The conversion of rows is the model's for a 23.7 server.
//!
//! # Sessions and errors
//! One ZooKeeper session, opened at [`ZkKeeperMap::connect`] and reopened on the next
//! call after it expired or closed, or after a call went unanswered: ClickHouse's own
//! client ends its session when an operation times out (`ZooKeeperImpl::receiveThread`
//! throws `Operation timeout (no response)` and `finalize`s; the next
//! `Context::getZooKeeper` opens a new one), where `zookeeper-client` would wait for the
//! silent connection until its own 8-tick timeout. Keeper's errors become
//! `KEEPER_EXCEPTION` (999) carrying the [`KeeperError`] as ClickHouse's
//! `Coordination::Exception` does (a lost connection included: a write whose answer was
//! lost may have applied, exactly as through KeeperMap). A call that gets no answer
//! within `timeout_ms` is [`ChClientError::Timeout`].

use super::clickhouse::RealClickHouse;
use super::meter::{StoreCall, StoreMeter};
use crate::client::clickhouse::{ChClientError, ClickHouse, KeeperMap};
use async_trait::async_trait;
use eosim_sim::clickhouse::keeper::{KeeperError, Op};
use eosim_sim::clickhouse::keeper_map::{
    decode, insert_ops, prepare_insert, prepare_put, KeeperMapTable, VersionedRow,
};
use eosim_sim::clickhouse::model::{ClickHouse as Catalog, InsertSummary, ServerConfig};
use eosim_sim::clickhouse::types::{Engine, Insert, Row, TableDef, VersionProfile};
use eosim_sim::clickhouse::{ChError, ErrorCode};
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zookeeper_client as zk;

/// The default `keeper_map_path_prefix` (the KeeperMap docs' example).
pub const KEEPER_MAP_PATH_PREFIX: &str = "/keeper_map_tables";

/// Where and how to reach ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkKeeperMapConfig {
    /// `host:port[,host:port...]`.
    pub connect_string: String,
    /// `keeper_map_path_prefix`.
    pub path_prefix: String,
    /// The session timeout to negotiate, ms (ClickHouse's default is 30 s).
    pub session_timeout_ms: u64,
    /// How long one call may take before it counts as unanswered, ms.
    pub timeout_ms: u64,
}

impl ZkKeeperMapConfig {
    /// `connect_string`, prefix [`KEEPER_MAP_PATH_PREFIX`], 30 s session, 10 s per call.
    pub fn new(connect_string: &str) -> Self {
        Self {
            connect_string: connect_string.to_string(),
            path_prefix: KEEPER_MAP_PATH_PREFIX.to_string(),
            session_timeout_ms: 30_000,
            timeout_ms: 10_000,
        }
    }
}

/// KeeperMap tables in ZooKeeper; see the module docs.
pub struct ZkKeeperMap {
    config: ZkKeeperMapConfig,
    session: tokio::sync::Mutex<Option<Session>>,
    /// Sessions opened so far: the number of the next one.
    opened: std::sync::atomic::AtomicU64,
    /// Table definitions known to this client, and the row conversion (a 23.7 server's).
    catalog: Mutex<Catalog>,
    /// Names looked up and found not to be KeeperMap tables.
    not_keeper_map: Mutex<BTreeSet<String>>,
}

/// An open ZooKeeper session, numbered in the order this client opened them, so that a
/// call ends the session it was made on ([`ZkKeeperMap::end`]) and never one opened since
/// (a late timeout of an old session's call would otherwise close a fresh one).
#[derive(Clone)]
struct Session {
    number: u64,
    client: zk::Client,
}

/// Whether `e` means the session is gone (expired, or the client closed it): the next call
/// opens a new one.
fn ends_session(e: &zk::Error) -> bool {
    matches!(e, zk::Error::SessionExpired | zk::Error::ClientClosed)
}

impl std::fmt::Debug for ZkKeeperMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkKeeperMap")
            .field("config", &self.config)
            .finish()
    }
}

/// The error for a ZooKeeper error, as ClickHouse reports Keeper's errors.
pub fn keeper_error(e: &zk::Error) -> ChError {
    let known = match e {
        zk::Error::NoNode => Some(KeeperError::NoNode),
        zk::Error::BadVersion => Some(KeeperError::BadVersion),
        zk::Error::NodeExists => Some(KeeperError::NodeExists),
        zk::Error::NotEmpty => Some(KeeperError::NotEmpty),
        zk::Error::NoChildrenForEphemerals => Some(KeeperError::NoChildrenForEphemerals),
        zk::Error::BadArguments(_) => Some(KeeperError::BadArguments),
        zk::Error::SessionExpired => Some(KeeperError::SessionExpired),
        zk::Error::ConnectionLoss | zk::Error::NoHosts | zk::Error::ClientClosed => {
            Some(KeeperError::ConnectionLoss)
        }
        _ => None,
    };
    match known {
        Some(k) => ChError::from(k),
        None => ChError::new(
            ErrorCode::KeeperException,
            format!("Coordination::Exception: {e}"),
        ),
    }
}

fn multi_error(e: &zk::MultiWriteError) -> ChError {
    let mut error = keeper_error(multi_source(e));
    if let zk::MultiWriteError::OperationFailed { index, .. } = e {
        error.message = format!("{} (multi op {index})", error.message);
    }
    error
}

/// The ZooKeeper error under a failed `multi`: the request's, or its failing operation's.
fn multi_source(e: &zk::MultiWriteError) -> &zk::Error {
    match e {
        zk::MultiWriteError::RequestFailed { source } => source,
        zk::MultiWriteError::OperationFailed { source, .. } => source,
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// A ZooKeeper call (`what`) that got no answer within `timeout_ms`.
fn unanswered(what: &str, timeout_ms: u64) -> ChClientError {
    ChClientError::Timeout {
        what: format!("ZooKeeper {what}"),
        timeout_ms,
    }
}

fn server(e: ChError) -> ChClientError {
    ChClientError::Server(e)
}

impl ZkKeeperMap {
    /// A client that opens its session at the first call.
    pub fn new(config: ZkKeeperMapConfig) -> Self {
        let catalog = Catalog::new(
            VersionProfile::V23_7,
            ServerConfig {
                keeper_map_path_prefix: Some(config.path_prefix.clone()),
            },
        );
        Self {
            config,
            session: tokio::sync::Mutex::new(None),
            opened: std::sync::atomic::AtomicU64::new(0),
            catalog: Mutex::new(catalog),
            not_keeper_map: Mutex::new(BTreeSet::new()),
        }
    }

    /// A client with its session open.
    ///
    /// # Errors
    /// `KEEPER_EXCEPTION` (connection loss) or [`ChClientError::Timeout`] when ZooKeeper
    /// does not answer.
    pub async fn connect(config: ZkKeeperMapConfig) -> Result<Self, ChClientError> {
        let map = Self::new(config);
        map.session().await?;
        Ok(map)
    }

    /// The configuration.
    pub fn config(&self) -> &ZkKeeperMapConfig {
        &self.config
    }

    /// The open session, or a new one.
    async fn session(&self) -> Result<Session, ChClientError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = Duration::from_millis(self.config.session_timeout_ms);
        let connect = zk::Client::connector()
            .with_session_timeout(session)
            .connect(&self.config.connect_string);
        // Under the slot's lock: mapped here, not by `bounded`, which may take the lock.
        let timeout_ms = self.config.timeout_ms;
        let client = match tokio::time::timeout(Duration::from_millis(timeout_ms), connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(zk::Error::Timeout)) | Err(_) => return Err(unanswered("connect", timeout_ms)),
            Ok(Err(e)) => return Err(server(keeper_error(&e))),
        };
        let number = (self.opened).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = Session { number, client };
        *slot = Some(session.clone());
        Ok(session)
    }

    /// Ends `session` if it is still the open one: after a call on it went unanswered, as
    /// ClickHouse's client finalizes its session, or after it expired; the next call opens
    /// a new one (see the module docs).
    async fn end(&self, session: &Session) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| s.number == session.number) {
            *slot = None;
        }
    }

    /// Runs `fut`, a call on `session`, within `timeout_ms`; a ZooKeeper error is mapped
    /// ([`keeper_error`]); a timeout, an expired session or a closed client ends the
    /// session ([`Self::end`]).
    async fn bounded<T>(
        &self,
        session: &Session,
        what: &str,
        fut: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<T, ChClientError> {
        let timeout_ms = self.config.timeout_ms;
        match tokio::time::timeout(Duration::from_millis(timeout_ms), fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(zk::Error::Timeout)) | Err(_) => {
                self.end(session).await;
                Err(unanswered(what, timeout_ms))
            }
            Ok(Err(e)) => {
                if ends_session(&e) {
                    self.end(session).await;
                }
                Err(server(keeper_error(&e)))
            }
        }
    }

    /// `get` of one znode: data and version, `None` when absent.
    async fn get_znode(&self, path: &str) -> Result<Option<(Vec<u8>, i32)>, ChClientError> {
        let session = self.session().await?;
        let client = &session.client;
        match self.bounded(&session, "get", client.get_data(path)).await {
            Ok((data, stat)) => Ok(Some((data, stat.version))),
            Err(ChClientError::Server(e)) if e.keeper_error == Some(KeeperError::NoNode) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn catalog_path(&self, table: &str) -> String {
        format!(
            "{}/eosim_catalog/{table}",
            self.config.path_prefix.trim_end_matches('/')
        )
    }

    /// Records `def` in this client's catalog (a definition read back from ZooKeeper).
    fn adopt(&self, def: TableDef) -> Result<(), ChClientError> {
        self.not_keeper_map
            .lock()
            .expect("not poisoned")
            .remove(&def.name);
        let mut catalog = self.catalog.lock().expect("not poisoned");
        if catalog.table(&def.name).is_none() {
            catalog.create_table(def).map_err(server)?;
        }
        Ok(())
    }

    /// The KeeperMap table `name`: from this client's catalog, else from ZooKeeper's;
    /// `None` when it is not a KeeperMap table.
    ///
    /// # Errors
    /// ZooKeeper errors; `INCORRECT_DATA` (117) for a catalog entry eosim did not write.
    pub async fn table(&self, name: &str) -> Result<Option<KeeperMapTable>, ChClientError> {
        let resolve = || {
            let catalog = self.catalog.lock().expect("not poisoned");
            catalog
                .table(name)
                .map(|_| KeeperMapTable::resolve(&catalog, name).map_err(server))
                .transpose()
        };
        if let Some(t) = resolve()? {
            return Ok(Some(t));
        }
        if self
            .not_keeper_map
            .lock()
            .expect("not poisoned")
            .contains(name)
        {
            return Ok(None);
        }
        let Some((data, _)) = self.get_znode(&self.catalog_path(name)).await? else {
            let mut negative = self.not_keeper_map.lock().expect("not poisoned");
            negative.insert(name.to_string());
            return Ok(None);
        };
        let def: TableDef = serde_json::from_slice(&data).map_err(|e| {
            let msg = format!("catalog entry of {name} is not a table definition: {e}");
            server(ChError::new(ErrorCode::IncorrectData, msg))
        })?;
        self.adopt(def)?;
        resolve()
    }

    async fn table_or_unknown(&self, name: &str) -> Result<KeeperMapTable, ChClientError> {
        self.table(name).await?.ok_or_else(|| {
            let msg = format!("Table default.{name} doesn't exist");
            server(ChError::new(ErrorCode::UnknownTable, msg))
        })
    }

    /// Creates `path` unless it exists.
    async fn ensure_node(&self, path: &str, data: &[u8]) -> Result<(), ChClientError> {
        let session = self.session().await?;
        let client = &session.client;
        let options = persistent();
        match self
            .bounded(&session, "create", client.create(path, data, &options))
            .await
        {
            Ok(_) => Ok(()),
            Err(ChClientError::Server(e)) if e.keeper_error == Some(KeeperError::NodeExists) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    async fn mkdir(&self, path: &str) -> Result<(), ChClientError> {
        let session = self.session().await?;
        let client = &session.client;
        self.bounded(&session, "mkdir", client.mkdir(path, &persistent()))
            .await
    }
}

#[async_trait]
impl ClickHouse for ZkKeeperMap {
    /// `CREATE TABLE ... ENGINE = KeeperMap`: the table's znodes, then its catalog entry.
    /// A table that exists (by name) is `TABLE_ALREADY_EXISTS` (57), and its stored
    /// definition is adopted.
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError> {
        if !matches!(def.engine, Engine::KeeperMap { .. }) {
            let msg = format!("{} is not a KeeperMap table", def.name);
            return Err(server(ChError::new(ErrorCode::BadArguments, msg)));
        }
        let mut scratch = Catalog::new(
            VersionProfile::V23_7,
            ServerConfig {
                keeper_map_path_prefix: Some(self.config.path_prefix.clone()),
            },
        );
        scratch.create_table(def.clone()).map_err(server)?;
        let table = KeeperMapTable::resolve(&scratch, &def.name).map_err(server)?;
        let json = serde_json::to_vec(&def).expect("definitions serialize");
        self.mkdir(&table.data_path).await?;
        let root = table
            .data_path
            .strip_suffix("/data")
            .expect("KeeperMap layout");
        self.ensure_node(&format!("{root}/metadata"), &json).await?;
        let catalog = self.catalog_path(&def.name);
        self.mkdir(catalog.rsplit_once('/').expect("absolute").0)
            .await?;
        let session = self.session().await?;
        let client = &session.client;
        let created = self
            .bounded(
                &session,
                "create",
                client.create(&catalog, &json, &persistent()),
            )
            .await;
        match created {
            Ok(_) => self.adopt(def),
            Err(ChClientError::Server(e)) if e.keeper_error == Some(KeeperError::NodeExists) => {
                self.table(&def.name).await?;
                let msg = format!("Table default.{} already exists", def.name);
                Err(server(ChError::new(ErrorCode::TableAlreadyExists, msg)))
            }
            Err(e) => Err(e),
        }
    }

    /// `INSERT INTO <KeeperMap table>`: one `multi` (see the module docs).
    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError> {
        self.table_or_unknown(&insert.table).await?;
        let prepared = {
            let catalog = self.catalog.lock().expect("not poisoned");
            prepare_insert(&catalog, &insert).map_err(server)?
        };
        let session = self.session().await?;
        let client = &session.client;
        // The `exists` of the table and of each key go out together, as KeeperMap's sink
        // sends its key checks as one batch (`StorageKeeperMap.cpp`, `KeeperMapSink`); one
        // session answers in request order, so this reads what the sequential calls did.
        let data_stat = self.bounded(
            &session,
            "exists",
            client.check_stat(&prepared.table.data_path),
        );
        let keys = prepared
            .entries
            .iter()
            .map(|(path, _)| self.bounded(&session, "exists", client.check_stat(path)));
        let (data_stat, keys) = futures::join!(data_stat, futures::future::join_all(keys));
        let keys_now = data_stat?.map_or(0, |s| s.num_children.max(0) as u64);
        let existing = keys
            .into_iter()
            .map(|k| k.map(|stat| stat.is_some()))
            .collect::<Result<Vec<bool>, ChClientError>>()?;
        let ops = insert_ops(&prepared, &existing, keys_now).map_err(server)?;
        let mut multi = client.new_multi_writer();
        let options = persistent();
        for op in &ops {
            let added = match op {
                Op::Create { path, data, .. } => multi.add_create(path, data, &options),
                Op::Set {
                    path,
                    data,
                    version,
                } => multi.add_set_data(path, data, (*version >= 0).then_some(*version)),
                other => unreachable!("insert_ops makes creates and sets only: {other:?}"),
            };
            added.map_err(|e| server(keeper_error(&e)))?;
        }
        let timeout_ms = self.config.timeout_ms;
        let commit = tokio::time::timeout(Duration::from_millis(timeout_ms), multi.commit());
        match commit.await {
            Ok(Ok(_)) => Ok(InsertSummary {
                blocks_total: 1,
                blocks_applied: usize::from(!ops.is_empty()),
                parts: Vec::new(),
            }),
            Ok(Err(e)) => {
                if ends_session(multi_source(&e)) {
                    self.end(&session).await;
                }
                Err(server(multi_error(&e)))
            }
            Err(_) => {
                self.end(&session).await;
                Err(unanswered("multi", timeout_ms))
            }
        }
    }

    /// `SELECT * FROM <KeeperMap table>`, ordered by znode name; `FINAL` changes nothing.
    async fn select(&self, table: &str, _final: bool) -> Result<Vec<Row>, ChClientError> {
        let table = self.table_or_unknown(table).await?;
        let session = self.session().await?;
        let client = &session.client;
        let mut children = self
            .bounded(&session, "list", client.list_children(&table.data_path))
            .await?;
        children.sort();
        let mut rows = Vec::new();
        for child in children {
            let path = format!("{}/{child}", table.data_path);
            if let Some((data, _)) = self.get_znode(&path).await? {
                rows.push(decode(&data).map_err(server)?);
            }
        }
        Ok(rows)
    }
}

#[async_trait]
impl KeeperMap for ZkKeeperMap {
    async fn get(
        &self,
        table: &str,
        key: serde_json::Value,
    ) -> Result<Option<VersionedRow>, ChClientError> {
        let table = self.table_or_unknown(table).await?;
        let path = {
            let catalog = self.catalog.lock().expect("not poisoned");
            let key = table.key_value(&catalog, &key).map_err(server)?;
            table.key_path(&key)
        };
        let Some((data, version)) = self.get_znode(&path).await? else {
            return Ok(None);
        };
        let row = decode(&data).map_err(server)?;
        Ok(Some(VersionedRow { row, version }))
    }

    async fn put_if_version(
        &self,
        table: &str,
        row: serde_json::Value,
        expected_version: Option<i32>,
    ) -> Result<i32, ChClientError> {
        self.table_or_unknown(table).await?;
        let (path, data) = {
            let catalog = self.catalog.lock().expect("not poisoned");
            prepare_put(&catalog, table, &row).map_err(server)?
        };
        let session = self.session().await?;
        let client = &session.client;
        match expected_version {
            None => {
                let create = client.create(&path, &data, &persistent());
                self.bounded(&session, "create", create)
                    .await
                    .map(|(stat, _)| stat.version)
            }
            Some(v) => {
                let set = client.set_data(&path, &data, Some(v));
                self.bounded(&session, "set", set)
                    .await
                    .map(|stat| stat.version)
            }
        }
    }
}

/// A ClickHouse server `C` whose KeeperMap tables live in ZooKeeper ([`ZkKeeperMap`]):
/// `CREATE TABLE` of a KeeperMap table, and INSERT and SELECT of a table ZooKeeper's
/// catalog names, go to ZooKeeper; everything else goes to `C`. This is the client the
/// ClickHouse sink runs over on a server without KeeperMap (18.16). Cloning shares the
/// connections and the ZooKeeper session.
#[derive(Debug, Clone)]
pub struct ClickHouseWithZooKeeper<C = RealClickHouse> {
    /// The ClickHouse server.
    pub clickhouse: C,
    /// The KeeperMap tables.
    pub keeper: Arc<ZkKeeperMap>,
    /// The calls that went to the KeeperMap tables (the sink's state store), shared by
    /// clones.
    pub meter: Arc<StoreMeter>,
}

impl ClickHouseWithZooKeeper<RealClickHouse> {
    /// Clients of both that connect at their first call.
    pub fn new(
        clickhouse: super::clickhouse::RealClickHouseConfig,
        zookeeper: ZkKeeperMapConfig,
    ) -> Self {
        Self {
            clickhouse: RealClickHouse::new(clickhouse),
            keeper: Arc::new(ZkKeeperMap::new(zookeeper)),
            meter: Arc::default(),
        }
    }

    /// Connects to both.
    ///
    /// # Errors
    /// As [`RealClickHouse::connect`] and [`ZkKeeperMap::connect`].
    pub async fn connect(
        clickhouse: super::clickhouse::RealClickHouseConfig,
        zookeeper: ZkKeeperMapConfig,
    ) -> Result<Self, ChClientError> {
        Ok(Self {
            clickhouse: RealClickHouse::connect(clickhouse).await?,
            keeper: Arc::new(ZkKeeperMap::connect(zookeeper).await?),
            meter: Arc::default(),
        })
    }
}

#[async_trait]
impl<C: ClickHouse> ClickHouse for ClickHouseWithZooKeeper<C> {
    async fn create_table(&self, def: TableDef) -> Result<(), ChClientError> {
        if matches!(def.engine, Engine::KeeperMap { .. }) {
            return self.keeper.create_table(def).await;
        }
        self.clickhouse.create_table(def).await
    }

    async fn insert(&self, insert: Insert) -> Result<InsertSummary, ChClientError> {
        if self.keeper.table(&insert.table).await?.is_some() {
            let write = self.keeper.insert(insert);
            return self.meter.time(StoreCall::Write, write).await;
        }
        self.clickhouse.insert(insert).await
    }

    async fn select(&self, table: &str, final_: bool) -> Result<Vec<Row>, ChClientError> {
        if self.keeper.table(table).await?.is_some() {
            let read = self.keeper.select(table, final_);
            return self.meter.time(StoreCall::Read, read).await;
        }
        self.clickhouse.select(table, final_).await
    }
}

#[async_trait]
impl<C: ClickHouse> KeeperMap for ClickHouseWithZooKeeper<C> {
    async fn get(
        &self,
        table: &str,
        key: serde_json::Value,
    ) -> Result<Option<VersionedRow>, ChClientError> {
        let read = self.keeper.get(table, key);
        self.meter.time(StoreCall::Read, read).await
    }

    async fn put_if_version(
        &self,
        table: &str,
        row: serde_json::Value,
        expected_version: Option<i32>,
    ) -> Result<i32, ChClientError> {
        let write = self.keeper.put_if_version(table, row, expected_version);
        self.meter.time(StoreCall::Write, write).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeper_errors_become_keeper_exceptions_with_their_cause() {
        let e = keeper_error(&zk::Error::BadVersion);
        assert_eq!(e.code, ErrorCode::KeeperException);
        assert_eq!(e.keeper_error, Some(KeeperError::BadVersion));
        let lost = keeper_error(&zk::Error::ConnectionLoss);
        assert_eq!(lost.keeper_error, Some(KeeperError::ConnectionLoss));
        let auth = keeper_error(&zk::Error::NoAuth);
        assert_eq!(
            (auth.code, auth.keeper_error),
            (ErrorCode::KeeperException, None)
        );
        let multi = zk::MultiWriteError::OperationFailed {
            index: 2,
            source: zk::Error::NodeExists,
        };
        let e = multi_error(&multi);
        assert_eq!(e.keeper_error, Some(KeeperError::NodeExists));
        assert!(e.message.ends_with("(multi op 2)"), "{}", e.message);
    }
}

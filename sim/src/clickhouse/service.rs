//! The `clickhouse` node (10.0.6.1:8123) and the `keeper` node (10.0.6.2:9181), serving
//! the models over eosim's RPC layer ([`crate::net`]).
//!
//! # Shape
//! Both nodes share one [`ClickHouseWorld`]: the ClickHouse model and the Keeper model
//! behind mutexes, and the clock origin. The models are durable state: a killed node
//! stops answering and loses only what it was doing (an INSERT in flight keeps the blocks
//! it committed), and a restarted node serves the same models again (parts are on disk;
//! Keeper has its snapshot and log).
//!
//! # The ClickHouse → Keeper link
//! KeeperMap queries and the Keeper check before each block of a Replicated table go from
//! the clickhouse node to the keeper node over RPC, so killing, pausing or partitioning
//! the keeper node (or the link) makes them fail as in ClickHouse: `KEEPER_EXCEPTION`
//! (999) with connection loss for KeeperMap, `TABLE_IS_READ_ONLY` (242) for Replicated
//! inserts. The clickhouse node opens a Keeper session lazily and reopens it when it
//! has expired (KeeperMap uses no ephemeral nodes, so a new session loses nothing).
//!
//! # Mid-insert crashes
//! An INSERT is planned (parsed and cut into blocks) at once, then committed block by
//! block with a [`BLOCK_WRITE_MS`] sleep before each, so a kill lands before the first
//! block, between any two, or after the last.
//!
//! Replicated block ids live in the ClickHouse model rather than under
//! `<zk path>/blocks` in Keeper (one server, so per-table state is the same thing). A
//! Replicated block is bracketed by two Keeper round trips: one before the commit (fails
//! with `TABLE_IS_READ_ONLY`, 242, nothing committed) and one after it (fails with
//! `UNKNOWN_STATUS_OF_INSERT`, 319, the part *is* committed), so losing Keeper around
//! a commit leaves either outcome, as ClickHouse's single Keeper `multi` does.

use super::error::{ChError, ErrorCode};
use super::keeper::{CreateMode, Keeper, KeeperError, KeeperRequest, KeeperResponse, SessionId};
use super::keeper_map::{self, KeeperMapTable, VersionedRow};
use super::model::{ClickHouse, InsertSummary};
pub use super::protocol::{ChReply, ChRequest, ChResponse};
use super::types::{Engine, Insert, TableDef};
use madsim::net::Endpoint;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// ClickHouse's HTTP port.
pub const CLICKHOUSE_PORT: u16 = 8123;
/// ClickHouse Keeper's client port.
pub const KEEPER_PORT: u16 = 9181;
/// Simulated time to write one block, ms (a kill can land between blocks).
pub const BLOCK_WRITE_MS: u64 = 1;
/// ClickHouse's Keeper `operation_timeout_ms` default: how long the clickhouse node
/// waits for Keeper.
pub const KEEPER_OPERATION_TIMEOUT_MS: u64 = 10_000;
/// ClickHouse's Keeper `session_timeout_ms` default.
pub const KEEPER_SESSION_TIMEOUT_MS: u64 = 30_000;
/// How often Keeper expires sessions and ClickHouse runs its cleanup thread, ms.
pub const TICK_INTERVAL_MS: u64 = 100;

/// IP of the clickhouse node.
pub fn clickhouse_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 6, 1))
}

/// Address of the clickhouse node.
pub fn clickhouse_addr() -> SocketAddr {
    SocketAddr::new(clickhouse_ip(), CLICKHOUSE_PORT)
}

/// IP of the keeper node.
pub fn keeper_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 6, 2))
}

/// Address of the keeper node.
pub fn keeper_addr() -> SocketAddr {
    SocketAddr::new(keeper_ip(), KEEPER_PORT)
}

/// A request to the keeper node: `request` on behalf of `session`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperCall {
    /// The caller's session (`None` for [`KeeperRequest::OpenSession`] and session-less
    /// requests).
    pub session: Option<SessionId>,
    /// The request.
    pub request: KeeperRequest,
}

/// The keeper node's answer.
pub type KeeperReply = Result<KeeperResponse, KeeperError>;

/// The shared models and their clock. Cloning shares them.
#[derive(Clone)]
pub struct ClickHouseWorld {
    /// The ClickHouse model.
    pub server: Arc<Mutex<ClickHouse>>,
    /// The Keeper model.
    pub keeper: Arc<Mutex<Keeper>>,
    start: madsim::time::Instant,
}

impl ClickHouseWorld {
    /// Wraps the models; time 0 is now.
    pub fn new(server: ClickHouse, keeper: Keeper) -> Self {
        Self {
            server: Arc::new(Mutex::new(server)),
            keeper: Arc::new(Mutex::new(keeper)),
            start: madsim::time::Instant::now(),
        }
    }

    /// Simulated ms since the world was made.
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn server(&self) -> std::sync::MutexGuard<'_, ClickHouse> {
        self.server.lock().expect("clickhouse lock")
    }
}

/// Serves Keeper on 10.0.6.2:9181 until the node is killed, expiring sessions every
/// [`TICK_INTERVAL_MS`]. Use it as the keeper node's init function.
pub async fn serve_keeper(world: ClickHouseWorld) {
    let endpoint = Endpoint::bind(keeper_addr())
        .await
        .expect("the keeper node binds its address");
    let ticker = world.clone();
    madsim::task::spawn(async move {
        loop {
            madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
            let now = ticker.now_ms();
            ticker.keeper.lock().expect("keeper lock").tick(now);
        }
    });
    crate::net::serve(endpoint, move |call: KeeperCall, _from| {
        let world = world.clone();
        async move {
            let now = world.now_ms();
            world
                .keeper
                .lock()
                .expect("keeper lock")
                .handle(now, call.session, call.request)
        }
    })
    .await;
}

/// Serves ClickHouse on 10.0.6.1:8123 until the node is killed, running the
/// Replicated tables' cleanup every [`TICK_INTERVAL_MS`]. Use it as the clickhouse
/// node's init function.
pub async fn serve_clickhouse(world: ClickHouseWorld) {
    let endpoint = Endpoint::bind(clickhouse_addr())
        .await
        .expect("the clickhouse node binds its address");
    let keeper_endpoint = Endpoint::bind("0.0.0.0:0")
        .await
        .expect("a Keeper client endpoint");
    let keeper = KeeperClient {
        endpoint: Arc::new(keeper_endpoint),
        session: Arc::default(),
    };
    let ticker = world.clone();
    madsim::task::spawn(async move {
        loop {
            madsim::time::sleep(Duration::from_millis(TICK_INTERVAL_MS)).await;
            let now = ticker.now_ms();
            ticker.server().tick(now);
        }
    });
    crate::net::serve(endpoint, move |request: ChRequest, _from| {
        let handler = Handler {
            world: world.clone(),
            keeper: keeper.clone(),
        };
        async move { handler.handle(request).await }
    })
    .await;
}

/// The clickhouse node's Keeper connection.
#[derive(Clone)]
struct KeeperClient {
    endpoint: Arc<Endpoint>,
    session: Arc<Mutex<Option<SessionId>>>,
}

impl KeeperClient {
    async fn raw(
        &self,
        session: Option<SessionId>,
        request: KeeperRequest,
    ) -> Result<KeeperReply, ChError> {
        let call = KeeperCall { session, request };
        let timeout = Duration::from_millis(KEEPER_OPERATION_TIMEOUT_MS);
        crate::net::call(&self.endpoint, keeper_addr(), call, timeout)
            .await
            .map_err(|_| {
                crate::mark!("clickhouse:keeper-unavailable");
                ChError::from(KeeperError::ConnectionLoss)
            })
    }

    async fn session(&self) -> Result<SessionId, ChError> {
        if let Some(s) = *self.session.lock().expect("session lock") {
            return Ok(s);
        }
        let open = KeeperRequest::OpenSession {
            timeout_ms: KEEPER_SESSION_TIMEOUT_MS,
        };
        match self.raw(None, open).await? {
            Ok(KeeperResponse::SessionOpened(s)) => {
                *self.session.lock().expect("session lock") = Some(s);
                Ok(s)
            }
            other => panic!("OpenSession answered {other:?}"),
        }
    }

    /// Sends `request` in the node's session; an expired session is replaced once (the
    /// request was rejected, not applied).
    async fn call(&self, request: KeeperRequest) -> Result<KeeperResponse, ChError> {
        for _ in 0..2 {
            let session = self.session().await?;
            match self.raw(Some(session), request.clone()).await? {
                Err(KeeperError::SessionExpired) => {
                    crate::mark!("clickhouse:keeper-session-expired");
                    *self.session.lock().expect("session lock") = None;
                }
                reply => return reply.map_err(ChError::from),
            }
        }
        Err(KeeperError::SessionExpired.into())
    }
}

struct Handler {
    world: ClickHouseWorld,
    keeper: KeeperClient,
}

impl Handler {
    async fn handle(&self, request: ChRequest) -> ChReply {
        match request {
            ChRequest::CreateTable(def) => self.create_table(def).await,
            ChRequest::Insert(insert) => {
                let engine = self
                    .world
                    .server()
                    .table(&insert.table)
                    .map(|d| d.engine.clone());
                match engine {
                    Some(Engine::KeeperMap { .. }) => self.insert_keeper_map(&insert).await,
                    _ => self.insert_merge_tree(&insert).await,
                }
            }
            ChRequest::Select { table, final_ } => {
                let engine = self.world.server().table(&table).map(|d| d.engine.clone());
                match engine {
                    Some(Engine::KeeperMap { .. }) => self.select_keeper_map(&table).await,
                    _ => self
                        .world
                        .server()
                        .select(&table, final_)
                        .map(ChResponse::Rows),
                }
            }
            ChRequest::KeeperMapGet { table, key } => self.get(&table, &key).await,
            ChRequest::KeeperMapPutIfVersion {
                table,
                row,
                expected_version,
            } => {
                let (path, data) = keeper_map::prepare_put(&self.world.server(), &table, &row)?;
                let request = match expected_version {
                    None => KeeperRequest::Create {
                        path,
                        data,
                        mode: CreateMode::Persistent,
                    },
                    Some(version) => KeeperRequest::Set {
                        path,
                        data,
                        version,
                    },
                };
                match self.keeper.call(request).await? {
                    KeeperResponse::Created(_) => Ok(ChResponse::Version(0)),
                    KeeperResponse::Stat(stat) => Ok(ChResponse::Version(stat.version)),
                    other => panic!("conditional write answered {other:?}"),
                }
            }
        }
    }

    async fn create_table(&self, def: TableDef) -> ChReply {
        let name = def.name.clone();
        self.world.server().create_table(def)?;
        let table = match KeeperMapTable::resolve(&self.world.server(), &name) {
            Ok(table) => table,
            Err(_) => return Ok(ChResponse::Ok),
        };
        for path in keeper_map::paths_to_create(&table) {
            let create = KeeperRequest::Create {
                path,
                data: Vec::new(),
                mode: CreateMode::Persistent,
            };
            match self.keeper.call(create).await {
                Ok(_) => {}
                Err(e) if e.keeper_error == Some(KeeperError::NodeExists) => {}
                Err(e) => {
                    self.world.server().drop_table(&name);
                    return Err(e);
                }
            }
        }
        Ok(ChResponse::Ok)
    }

    async fn insert_merge_tree(&self, insert: &Insert) -> ChReply {
        let plan = self.world.server().plan_insert(insert)?;
        let replicated = self
            .world
            .server()
            .table(&insert.table)
            .is_some_and(|d| d.engine.is_replicated());
        let mut summary = InsertSummary {
            blocks_total: plan.blocks.len(),
            ..Default::default()
        };
        for index in 0..plan.blocks.len() {
            madsim::time::sleep(Duration::from_millis(BLOCK_WRITE_MS)).await;
            if replicated {
                self.keeper_before_commit().await?;
            }
            let now = self.world.now_ms();
            summary
                .parts
                .extend(self.world.server().commit_block(now, &plan, index)?);
            summary.blocks_applied += 1;
            if replicated {
                self.keeper_after_commit().await?;
            }
        }
        match plan.error {
            Some(e) => Err(e),
            None => Ok(ChResponse::Inserted(summary)),
        }
    }

    /// A Replicated part commit starts in Keeper: without Keeper the table is read-only
    /// and nothing is committed.
    async fn keeper_before_commit(&self) -> Result<(), ChError> {
        let check = KeeperRequest::Exists {
            path: "/".to_string(),
        };
        self.keeper.call(check).await.map(drop).map_err(|e| {
            crate::mark!("clickhouse:table-read-only");
            let msg = format!("Table is in readonly mode: {}", e.message);
            ChError::new(ErrorCode::TableIsReadOnly, msg)
        })
    }

    /// The Keeper answer that confirms a Replicated part commit. When it is lost the
    /// part is committed but the client hears `UNKNOWN_STATUS_OF_INSERT` (319): with
    /// [`Self::keeper_before_commit`], a Keeper connection loss around a commit leaves
    /// either outcome, as models-reference F.6 says.
    async fn keeper_after_commit(&self) -> Result<(), ChError> {
        let check = KeeperRequest::Exists {
            path: "/".to_string(),
        };
        self.keeper.call(check).await.map(drop).map_err(|e| {
            crate::mark!("clickhouse:unknown-status-of-insert");
            let msg = format!("Unknown status, client must retry. Reason: {}", e.message);
            ChError::new(ErrorCode::UnknownStatusOfInsert, msg)
        })
    }

    async fn insert_keeper_map(&self, insert: &Insert) -> ChReply {
        let prepared = keeper_map::prepare_insert(&self.world.server(), insert)?;
        let data_path = prepared.table.data_path.clone();
        let keys_now = match self
            .keeper
            .call(KeeperRequest::Exists { path: data_path })
            .await?
        {
            KeeperResponse::Exists(Some(stat)) => stat.num_children as u64,
            KeeperResponse::Exists(None) => return Err(KeeperError::NoNode.into()),
            other => panic!("exists answered {other:?}"),
        };
        let mut existing = Vec::with_capacity(prepared.entries.len());
        for (path, _) in &prepared.entries {
            match self
                .keeper
                .call(KeeperRequest::Exists { path: path.clone() })
                .await?
            {
                KeeperResponse::Exists(stat) => existing.push(stat.is_some()),
                other => panic!("exists answered {other:?}"),
            }
        }
        let ops = keeper_map::insert_ops(&prepared, &existing, keys_now)?;
        match self.keeper.call(KeeperRequest::Multi(ops)).await? {
            KeeperResponse::Multi(_) => Ok(ChResponse::KeysWritten(prepared.entries.len())),
            KeeperResponse::MultiFailed(e) => Err(keeper_map::multi_error(e)),
            other => panic!("multi answered {other:?}"),
        }
    }

    async fn select_keeper_map(&self, table: &str) -> ChReply {
        let table = KeeperMapTable::resolve(&self.world.server(), table)?;
        let children = match self
            .keeper
            .call(KeeperRequest::Children {
                path: table.data_path.clone(),
            })
            .await?
        {
            KeeperResponse::Children(c) => c,
            other => panic!("children answered {other:?}"),
        };
        let mut rows = Vec::new();
        for child in children {
            let get = KeeperRequest::Get {
                path: format!("{}/{child}", table.data_path),
            };
            match self.keeper.call(get).await {
                Ok(KeeperResponse::Data(data, _)) => rows.push(keeper_map::decode(&data)?),
                Err(e) if e.keeper_error == Some(KeeperError::NoNode) => continue,
                Err(e) => return Err(e),
                Ok(other) => panic!("get answered {other:?}"),
            }
        }
        Ok(ChResponse::Rows(rows))
    }

    async fn get(&self, table: &str, key: &serde_json::Value) -> ChReply {
        let path = {
            let server = self.world.server();
            let table = KeeperMapTable::resolve(&server, table)?;
            table.key_path(&table.key_value(&server, key)?)
        };
        match self.keeper.call(KeeperRequest::Get { path }).await {
            Ok(KeeperResponse::Data(data, stat)) => {
                let row = keeper_map::decode(&data)?;
                Ok(ChResponse::Got(Some(VersionedRow {
                    row,
                    version: stat.version,
                })))
            }
            Err(e) if e.keeper_error == Some(KeeperError::NoNode) => Ok(ChResponse::Got(None)),
            Err(e) => Err(e),
            Ok(other) => panic!("get answered {other:?}"),
        }
    }
}

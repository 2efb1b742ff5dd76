//! ClickHouse Keeper (or ZooKeeper) as one linearizable state machine.
//!
//! A tree of znodes: each has data bytes, a [`Stat`] (`version` = dataVersion, 0 at
//! create, +1 per set), children, and an owner session when ephemeral. Writes are totally
//! ordered (one zxid each; a `multi` is one zxid and all-or-nothing). Sessions expire when
//! nothing was heard from them for their timeout; their ephemeral nodes are deleted
//! then. Behaviour follows the ZooKeeper Programmer's Guide
//! ([ZK-doc: zookeeperProgrammers.html], "ZooKeeper Sessions", "Ephemeral Nodes") and
//! models-reference F.6; error names and numbers follow ZooKeeper's `KeeperException.Code`
//! (ClickHouse: `src/Common/ZooKeeper/IKeeper.h`, `Coordination::Error`).
//!
//! Simplifications: one server, so reads are linearizable (real Keeper reads are served
//! by the session's server and may be stale; KeeperMap promises only sequentially
//! consistent reads); no watches, ACLs, quotas or containers; connection loss is made by
//! the network, never by the model.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A session id (ZooKeeper's `sessionId`); 0 means "no owner" in [`Stat::ephemeral_owner`].
pub type SessionId = i64;

/// A Keeper error, named as ZooKeeper's `KeeperException.Code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum KeeperError {
    /// -4 `CONNECTIONLOSS`: the connection broke; the request may or may not have applied.
    #[error("Connection loss (ZCONNECTIONLOSS, -4)")]
    ConnectionLoss,
    /// -8 `BADARGUMENTS`: a malformed path or request.
    #[error("Bad arguments (ZBADARGUMENTS, -8)")]
    BadArguments,
    /// -101 `NONODE`.
    #[error("No node (ZNONODE, -101)")]
    NoNode,
    /// -103 `BADVERSION`: the expected version differs from the node's.
    #[error("Bad version (ZBADVERSION, -103)")]
    BadVersion,
    /// -108 `NOCHILDRENFOREPHEMERALS`.
    #[error("No children for ephemerals (ZNOCHILDRENFOREPHEMERALS, -108)")]
    NoChildrenForEphemerals,
    /// -110 `NODEEXISTS`.
    #[error("Node exists (ZNODEEXISTS, -110)")]
    NodeExists,
    /// -111 `NOTEMPTY`: delete of a node with children.
    #[error("Not empty (ZNOTEMPTY, -111)")]
    NotEmpty,
    /// -112 `SESSIONEXPIRED`.
    #[error("Session expired (ZSESSIONEXPIRED, -112)")]
    SessionExpired,
}

impl KeeperError {
    /// ZooKeeper's numeric code.
    pub fn code(self) -> i32 {
        match self {
            Self::ConnectionLoss => -4,
            Self::BadArguments => -8,
            Self::NoNode => -101,
            Self::BadVersion => -103,
            Self::NoChildrenForEphemerals => -108,
            Self::NodeExists => -110,
            Self::NotEmpty => -111,
            Self::SessionExpired => -112,
        }
    }
}

/// A znode's metadata (ZooKeeper's `Stat`, the fields the model keeps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// zxid of the create.
    pub czxid: i64,
    /// zxid of the last change of data.
    pub mzxid: i64,
    /// Data version (`dataVersion`): 0 at create, +1 per set.
    pub version: i32,
    /// Children version: +1 per child created or deleted.
    pub cversion: i32,
    /// Number of children.
    pub num_children: i32,
    /// Owner session of an ephemeral node; 0 for persistent nodes.
    pub ephemeral_owner: SessionId,
}

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CreateMode {
    /// Lives until deleted.
    Persistent,
    /// Deleted when its session ends.
    Ephemeral,
    /// Persistent, name suffixed with a 10-digit counter from the parent.
    PersistentSequential,
    /// Ephemeral and sequential.
    EphemeralSequential,
}

impl CreateMode {
    fn ephemeral(self) -> bool {
        matches!(self, Self::Ephemeral | Self::EphemeralSequential)
    }
    fn sequential(self) -> bool {
        matches!(self, Self::PersistentSequential | Self::EphemeralSequential)
    }
}

/// One operation of a `multi`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Create `path`.
    Create {
        /// Path.
        path: String,
        /// Data.
        data: Vec<u8>,
        /// Mode.
        mode: CreateMode,
    },
    /// Set `path`'s data if its version is `version` (-1 = any).
    Set {
        /// Path.
        path: String,
        /// Data.
        data: Vec<u8>,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Delete `path` if its version is `version` (-1 = any).
    Delete {
        /// Path.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    },
    /// Fail the multi unless `path` has version `version`.
    Check {
        /// Path.
        path: String,
        /// Expected version, -1 for any (existence only).
        version: i32,
    },
}

/// The result of one applied [`Op`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpResult {
    /// The created path (differs from the requested one for sequential nodes).
    Created(String),
    /// The node's stat after the set.
    Set(Stat),
    /// Deleted.
    Deleted,
    /// The check passed.
    Checked,
}

/// Why a `multi` failed: the first failing op and its error. Nothing was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("multi failed at op {index}: {error}")]
pub struct MultiError {
    /// Index of the failing op.
    pub index: usize,
    /// Its error.
    pub error: KeeperError,
}

/// A request to the Keeper service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeeperRequest {
    /// Open a session with `timeout_ms`.
    OpenSession {
        /// Session timeout, ms.
        timeout_ms: u64,
    },
    /// Close the session (its ephemeral nodes go).
    CloseSession,
    /// Keep the session alive.
    Heartbeat,
    /// `create`.
    Create {
        /// Path.
        path: String,
        /// Data.
        data: Vec<u8>,
        /// Mode.
        mode: CreateMode,
    },
    /// `get`: data and stat.
    Get {
        /// Path.
        path: String,
    },
    /// `set` with expected version (-1 = any).
    Set {
        /// Path.
        path: String,
        /// Data.
        data: Vec<u8>,
        /// Expected version.
        version: i32,
    },
    /// `delete` with expected version (-1 = any).
    Delete {
        /// Path.
        path: String,
        /// Expected version.
        version: i32,
    },
    /// `exists`: the stat or nothing.
    Exists {
        /// Path.
        path: String,
    },
    /// `getChildren`: child names, sorted.
    Children {
        /// Path.
        path: String,
    },
    /// `multi`: all or nothing.
    Multi(Vec<Op>),
}

/// A successful response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeeperResponse {
    /// A new session.
    SessionOpened(SessionId),
    /// Done (close, heartbeat, delete).
    Ok,
    /// The created path.
    Created(String),
    /// Data and stat.
    Data(Vec<u8>, Stat),
    /// The stat after a set.
    Stat(Stat),
    /// `exists`.
    Exists(Option<Stat>),
    /// Child names.
    Children(Vec<String>),
    /// Results of a multi.
    Multi(Vec<OpResult>),
    /// A multi failed.
    MultiFailed(MultiError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    data: Vec<u8>,
    stat: Stat,
    children: BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Session {
    timeout_ms: u64,
    last_heard_ms: u64,
}

/// The Keeper state machine. See the module docs.
#[derive(Debug, Clone)]
pub struct Keeper {
    nodes: BTreeMap<String, Znode>,
    sessions: BTreeMap<SessionId, Session>,
    zxid: i64,
    next_session: SessionId,
}

impl Default for Keeper {
    fn default() -> Self {
        Self::new()
    }
}

type Undo = Vec<(String, Option<Znode>)>;

fn parent_of(path: &str) -> Option<(&str, &str)> {
    let i = path.rfind('/')?;
    let parent = if i == 0 { "/" } else { &path[..i] };
    Some((parent, &path[i + 1..]))
}

fn valid_path(path: &str) -> bool {
    path == "/" || (path.starts_with('/') && !path.ends_with('/') && !path.contains("//"))
}

impl Keeper {
    /// An empty tree (just `/`), no sessions.
    pub fn new() -> Self {
        let root = Znode {
            data: Vec::new(),
            stat: Stat::default(),
            children: BTreeSet::new(),
        };
        Self {
            nodes: BTreeMap::from([("/".to_string(), root)]),
            sessions: BTreeMap::new(),
            zxid: 0,
            next_session: 1,
        }
    }

    /// Opens a session at `now_ms` that expires after `timeout_ms` without contact.
    pub fn open_session(&mut self, now_ms: u64, timeout_ms: u64) -> SessionId {
        let id = self.next_session;
        self.next_session += 1;
        self.sessions.insert(
            id,
            Session {
                timeout_ms,
                last_heard_ms: now_ms,
            },
        );
        id
    }

    /// Whether `session` is alive.
    pub fn session_alive(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session)
    }

    /// Closes `session` and deletes its ephemeral nodes.
    pub fn close_session(&mut self, session: SessionId) {
        if self.sessions.remove(&session).is_some() {
            self.remove_ephemerals(session);
        }
    }

    /// Records contact from `session` at `now_ms`.
    ///
    /// # Errors
    /// [`KeeperError::SessionExpired`] when the session has expired.
    pub fn heartbeat(&mut self, now_ms: u64, session: SessionId) -> Result<(), KeeperError> {
        self.tick(now_ms);
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or(KeeperError::SessionExpired)?;
        s.last_heard_ms = s.last_heard_ms.max(now_ms);
        Ok(())
    }

    /// Expires every session not heard from for its timeout; returns the expired ids.
    pub fn tick(&mut self, now_ms: u64) -> Vec<SessionId> {
        let expired: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| now_ms > s.last_heard_ms + s.timeout_ms)
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            self.close_session(*id);
        }
        expired
    }

    fn remove_ephemerals(&mut self, session: SessionId) {
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.stat.ephemeral_owner == session)
            .map(|(p, _)| p.clone())
            .collect();
        if owned.is_empty() {
            return;
        }
        self.zxid += 1;
        let mut undo = Undo::new();
        for path in owned {
            self.apply_delete(&path, -1, &mut undo)
                .expect("ephemeral nodes have no children");
        }
    }

    /// The data and stat of `path`.
    ///
    /// # Errors
    /// [`KeeperError::NoNode`].
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, Stat), KeeperError> {
        let node = self.nodes.get(path).ok_or(KeeperError::NoNode)?;
        Ok((node.data.clone(), node.stat))
    }

    /// The stat of `path`, if it exists.
    pub fn exists(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(|n| n.stat)
    }

    /// The sorted child names of `path`.
    ///
    /// # Errors
    /// [`KeeperError::NoNode`].
    pub fn children(&self, path: &str) -> Result<Vec<String>, KeeperError> {
        let node = self.nodes.get(path).ok_or(KeeperError::NoNode)?;
        Ok(node.children.iter().cloned().collect())
    }

    /// Creates `path` owned by `session` (needed for ephemeral modes); returns the path.
    ///
    /// # Errors
    /// `NodeExists`, `NoNode` (no parent), `NoChildrenForEphemerals`, `BadArguments`,
    /// `SessionExpired` (ephemeral without a live session).
    pub fn create(
        &mut self,
        session: Option<SessionId>,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String, KeeperError> {
        let op = Op::Create {
            path: path.to_string(),
            data: data.to_vec(),
            mode,
        };
        self.single(session, op).map(|r| match r {
            OpResult::Created(p) => p,
            other => unreachable!("create returned {other:?}"),
        })
    }

    /// Sets `path`'s data if its version is `version` (-1 = any); returns the new stat.
    ///
    /// # Errors
    /// `NoNode`, `BadVersion`.
    pub fn set(&mut self, path: &str, data: &[u8], version: i32) -> Result<Stat, KeeperError> {
        let op = Op::Set {
            path: path.to_string(),
            data: data.to_vec(),
            version,
        };
        self.single(None, op).map(|r| match r {
            OpResult::Set(stat) => stat,
            other => unreachable!("set returned {other:?}"),
        })
    }

    /// Deletes `path` if its version is `version` (-1 = any).
    ///
    /// # Errors
    /// `NoNode`, `BadVersion`, `NotEmpty`.
    pub fn delete(&mut self, path: &str, version: i32) -> Result<(), KeeperError> {
        self.single(
            None,
            Op::Delete {
                path: path.to_string(),
                version,
            },
        )
        .map(|_| ())
    }

    fn single(&mut self, session: Option<SessionId>, op: Op) -> Result<OpResult, KeeperError> {
        self.multi(session, vec![op])
            .map(|mut r| r.remove(0))
            .map_err(|e| e.error)
    }

    /// Applies `ops` atomically as one transaction: all of them or none.
    ///
    /// # Errors
    /// The first failing op and its error; the tree is unchanged.
    pub fn multi(
        &mut self,
        session: Option<SessionId>,
        ops: Vec<Op>,
    ) -> Result<Vec<OpResult>, MultiError> {
        self.zxid += 1;
        let mut undo = Undo::new();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.into_iter().enumerate() {
            match self.apply(session, op, &mut undo) {
                Ok(r) => results.push(r),
                Err(error) => {
                    for (path, before) in undo.into_iter().rev() {
                        match before {
                            Some(node) => self.nodes.insert(path, node),
                            None => self.nodes.remove(&path),
                        };
                    }
                    self.zxid -= 1;
                    return Err(MultiError { index, error });
                }
            }
        }
        Ok(results)
    }

    fn remember(&self, path: &str, undo: &mut Undo) {
        undo.push((path.to_string(), self.nodes.get(path).cloned()));
    }

    fn apply(
        &mut self,
        session: Option<SessionId>,
        op: Op,
        undo: &mut Undo,
    ) -> Result<OpResult, KeeperError> {
        match op {
            Op::Create { path, data, mode } => self.apply_create(session, &path, data, mode, undo),
            Op::Set {
                path,
                data,
                version,
            } => {
                let node = self.nodes.get(&path).ok_or(KeeperError::NoNode)?;
                if version != -1 && version != node.stat.version {
                    return Err(KeeperError::BadVersion);
                }
                self.remember(&path, undo);
                let zxid = self.zxid;
                let node = self.nodes.get_mut(&path).expect("checked above");
                node.data = data;
                node.stat.version += 1;
                node.stat.mzxid = zxid;
                Ok(OpResult::Set(node.stat))
            }
            Op::Delete { path, version } => self
                .apply_delete(&path, version, undo)
                .map(|()| OpResult::Deleted),
            Op::Check { path, version } => {
                let node = self.nodes.get(&path).ok_or(KeeperError::NoNode)?;
                if version != -1 && version != node.stat.version {
                    return Err(KeeperError::BadVersion);
                }
                Ok(OpResult::Checked)
            }
        }
    }

    fn apply_create(
        &mut self,
        session: Option<SessionId>,
        path: &str,
        data: Vec<u8>,
        mode: CreateMode,
        undo: &mut Undo,
    ) -> Result<OpResult, KeeperError> {
        if !valid_path(path) || path == "/" {
            return Err(KeeperError::BadArguments);
        }
        let owner = match (mode.ephemeral(), session) {
            (false, _) => 0,
            (true, Some(s)) if self.sessions.contains_key(&s) => s,
            (true, _) => return Err(KeeperError::SessionExpired),
        };
        let (parent, _) = parent_of(path).ok_or(KeeperError::BadArguments)?;
        let parent_node = self.nodes.get(parent).ok_or(KeeperError::NoNode)?;
        if parent_node.stat.ephemeral_owner != 0 {
            return Err(KeeperError::NoChildrenForEphemerals);
        }
        let path = if mode.sequential() {
            format!("{path}{:010}", parent_node.stat.cversion)
        } else {
            path.to_string()
        };
        if self.nodes.contains_key(&path) {
            return Err(KeeperError::NodeExists);
        }
        let (_, name) = parent_of(&path).expect("checked above");
        let name = name.to_string();
        self.remember(parent, undo);
        self.remember(&path, undo);
        let parent_node = self.nodes.get_mut(parent).expect("checked above");
        parent_node.children.insert(name);
        parent_node.stat.cversion += 1;
        parent_node.stat.num_children += 1;
        assert_eq!(
            parent_node.stat.num_children as usize,
            parent_node.children.len()
        );
        let stat = Stat {
            czxid: self.zxid,
            mzxid: self.zxid,
            ephemeral_owner: owner,
            ..Stat::default()
        };
        self.nodes.insert(
            path.clone(),
            Znode {
                data,
                stat,
                children: BTreeSet::new(),
            },
        );
        Ok(OpResult::Created(path))
    }

    fn apply_delete(
        &mut self,
        path: &str,
        version: i32,
        undo: &mut Undo,
    ) -> Result<(), KeeperError> {
        if path == "/" {
            return Err(KeeperError::BadArguments);
        }
        let node = self.nodes.get(path).ok_or(KeeperError::NoNode)?;
        if version != -1 && version != node.stat.version {
            return Err(KeeperError::BadVersion);
        }
        if !node.children.is_empty() {
            return Err(KeeperError::NotEmpty);
        }
        let (parent, name) = parent_of(path).ok_or(KeeperError::BadArguments)?;
        self.remember(parent, undo);
        self.remember(path, undo);
        let parent_node = self.nodes.get_mut(parent).expect("a node's parent exists");
        parent_node.children.remove(name);
        parent_node.stat.cversion += 1;
        parent_node.stat.num_children -= 1;
        assert_eq!(
            parent_node.stat.num_children as usize,
            parent_node.children.len()
        );
        self.nodes.remove(path);
        Ok(())
    }

    /// Creates `path` and any missing ancestors as empty persistent nodes (like
    /// ClickHouse's `createAncestors` + create); existing nodes are left alone.
    pub fn create_recursive(&mut self, path: &str) -> Result<(), KeeperError> {
        if !valid_path(path) {
            return Err(KeeperError::BadArguments);
        }
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            match self.create(None, &prefix, &[], CreateMode::Persistent) {
                Ok(_) | Err(KeeperError::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Handles one request from `session` (`None` for session-less requests and for
    /// [`KeeperRequest::OpenSession`]) at `now_ms`. Any request from a live session
    /// counts as contact.
    ///
    /// # Errors
    /// `SessionExpired` when `session` is not alive; otherwise the operation's error.
    pub fn handle(
        &mut self,
        now_ms: u64,
        session: Option<SessionId>,
        request: KeeperRequest,
    ) -> Result<KeeperResponse, KeeperError> {
        if let KeeperRequest::OpenSession { timeout_ms } = request {
            return Ok(KeeperResponse::SessionOpened(
                self.open_session(now_ms, timeout_ms),
            ));
        }
        if let Some(s) = session {
            self.heartbeat(now_ms, s)?;
        }
        match request {
            KeeperRequest::OpenSession { .. } => unreachable!("handled above"),
            KeeperRequest::CloseSession => {
                session.into_iter().for_each(|s| self.close_session(s));
                Ok(KeeperResponse::Ok)
            }
            KeeperRequest::Heartbeat => Ok(KeeperResponse::Ok),
            KeeperRequest::Create { path, data, mode } => self
                .create(session, &path, &data, mode)
                .map(KeeperResponse::Created),
            KeeperRequest::Get { path } => self.get(&path).map(|(d, s)| KeeperResponse::Data(d, s)),
            KeeperRequest::Set {
                path,
                data,
                version,
            } => self.set(&path, &data, version).map(KeeperResponse::Stat),
            KeeperRequest::Delete { path, version } => {
                self.delete(&path, version).map(|()| KeeperResponse::Ok)
            }
            KeeperRequest::Exists { path } => Ok(KeeperResponse::Exists(self.exists(&path))),
            KeeperRequest::Children { path } => self.children(&path).map(KeeperResponse::Children),
            KeeperRequest::Multi(ops) => Ok(match self.multi(session, ops) {
                Ok(results) => KeeperResponse::Multi(results),
                Err(e) => KeeperResponse::MultiFailed(e),
            }),
        }
    }
}

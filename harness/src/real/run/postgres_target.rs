//! The PostgreSQL side of a `connect-jdbc` run: the server started for it and the
//! connector writing into it ([`PgTarget`]), which the runner, the fault injector and the
//! bulk load share.

use crate::client::real::RealPostgres;
use crate::connect::config::ConnectorConfig;
use crate::real::provision::Postgres;
use crate::sinks::jdbc::JdbcSinkConfig;

/// The PostgreSQL server of a `connect-jdbc` run and the connector writing into it.
pub struct PgTarget {
    /// The server (dropped before its directory).
    pub pg: Postgres,
    /// What the nemesis did to it.
    pub state: crate::real::provision::ServiceState,
    /// The connector as the tasks run it (`connection.url` set to this server).
    pub connector: ConnectorConfig,
    /// The JDBC sink's part of it.
    pub sink: JdbcSinkConfig,
    /// `[postgres] client_timeout_ms`.
    pub timeout_ms: u64,
    /// The message-fault proxy the connector's `connection.url` points at, when the
    /// scenario has `messages` faults on `postgres` ([`crate::real::net::proxy`],
    /// PostgreSQL's framing); eosim's own connections go to the server directly.
    pub proxy: Option<crate::real::net::proxy::Proxy>,
    /// Its scratch directory (dropped after the server).
    pub(super) _dir: tempfile::TempDir,
}

impl PgTarget {
    /// A client of the server as superuser `postgres`.
    ///
    /// # Errors
    /// A connection string tokio-postgres rejects (not expected).
    pub fn admin(&self) -> Result<RealPostgres, String> {
        RealPostgres::from_connection_string(&self.pg.connection_string(), self.timeout_ms)
            .map_err(|e| e.to_string())
    }
}

//! The simulated Doris client: RPC to the `doris-fe` and `doris-be` nodes
//! ([`eosim_sim::doris::service`]) over eosim's network layer, so the nemesis' kills,
//! pauses and partitions between a caller and the Doris nodes apply to it.

use eosim_sim::doris::service::{be_addr, fe_addr, BeReply, BeRequest, BeResponse};
use eosim_sim::doris::service::{FeReply, FeRequest, FeResponse};
use eosim_sim::doris::DorisError;
use madsim::net::Endpoint;
use std::sync::Arc;
use std::time::Duration;

/// A failed Doris call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DorisClientError {
    /// Doris answered with an error: the request did not apply.
    #[error("{0}")]
    Doris(DorisError),
    /// No answer (timeout, reset): the request may have applied.
    #[error("no answer from {node}: {cause}")]
    Unknown {
        /// `doris-fe` or `doris-be`.
        node: &'static str,
        /// The transport's reason.
        cause: String,
    },
}

impl DorisClientError {
    /// Whether the outcome is unknown (the request may have applied).
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Unknown { .. })
    }
}

/// A client of both Doris nodes; cloning shares the endpoint.
#[derive(Clone)]
pub struct SimDoris {
    endpoint: Arc<Endpoint>,
    timeout_ms: u64,
}

impl SimDoris {
    /// Binds a client endpoint on the current node; each request waits at most
    /// `timeout_ms`.
    ///
    /// # Errors
    /// The bind failed (the node is shutting down).
    pub async fn connect(timeout_ms: u64) -> std::io::Result<Self> {
        let endpoint = Endpoint::bind("0.0.0.0:0").await?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
            timeout_ms,
        })
    }

    /// A request to the FE (MySQL protocol / FE HTTP API).
    ///
    /// # Errors
    /// Doris' error, or an unknown outcome.
    pub async fn fe(&self, request: FeRequest) -> Result<FeResponse, DorisClientError> {
        let timeout = Duration::from_millis(self.timeout_ms);
        let reply: FeReply = eosim_sim::net::call(&self.endpoint, fe_addr(), request, timeout)
            .await
            .map_err(|e| DorisClientError::Unknown {
                node: "doris-fe",
                cause: e.to_string(),
            })?;
        reply.map_err(DorisClientError::Doris)
    }

    /// A request to the BE (its HTTP API: load channels, Stream Load).
    ///
    /// # Errors
    /// Doris' error, or an unknown outcome.
    pub async fn be(&self, request: BeRequest) -> Result<BeResponse, DorisClientError> {
        let timeout = Duration::from_millis(self.timeout_ms);
        let reply: BeReply = eosim_sim::net::call(&self.endpoint, be_addr(), request, timeout)
            .await
            .map_err(|e| DorisClientError::Unknown {
                node: "doris-be",
                cause: e.to_string(),
            })?;
        reply.map_err(DorisClientError::Doris)
    }
}

//! Group coordinators (classic protocol): membership, generations, rebalances, committed
//! offsets. Behaviour follows `shared/models-reference.md` section D.

use super::types::*;

/// The state of every consumer group in the cluster.
#[derive(Debug)]
pub struct GroupCoordinator {
    config: ClusterConfig,
}

impl GroupCoordinator {
    /// No groups yet.
    pub fn new(config: ClusterConfig) -> Self {
        Self { config }
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }
}

//! Standby replicas (`num.standby.replicas`) on simulated instances: the standby tasks an
//! instance keeps (the leader's assignment of them is [`super::partition_assignor`]'s).
//!
//! # Standby tasks ([K:streams/.../StandbyTask.java], `StoreChangelogReader`)
//! A standby task keeps its own copy of a store by reading the task's changelog partition
//! from its own position with the restore consumer's isolation: read_committed under
//! exactly_once_v2 (up to the LSO, aborted records dropped), read_uncommitted under
//! at_least_once. One fetch per standby per loop of the instance, after the active tasks
//! (Streams updates standbys in the same stream-thread loop). A standby never writes.
//!
//! When the assignment makes a standby active the task is *recycled*: the new active task
//! starts from the standby's store and restores only from the standby's position on. An
//! active task revoked while this instance is assigned a standby of it is recycled the
//! other way, keeping its store, if no transaction is open (a clean suspend).

use super::restore::restore_step;
use crate::client::sim::conn::Connection;
use eosim_sim::kafka::{Isolation, TopicPartition};
use std::collections::BTreeMap;

pub use super::processor::StandbyTask;

/// One update of every standby in `standbys` (one fetch each) from changelog `topic`;
/// a failed fetch leaves that standby where it was until the next loop.
pub async fn update(
    conn: &Connection,
    topic: &str,
    isolation: Isolation,
    standbys: &mut BTreeMap<u32, StandbyTask>,
) {
    for (p, standby) in standbys.iter_mut() {
        let tp = TopicPartition::new(topic, *p);
        let from = standby.position;
        match restore_step(conn, &tp, from, isolation, &mut standby.store).await {
            Ok(step) => standby.position = step.end_offset,
            Err(e) => tracing::debug!(%e, "standby update"),
        }
    }
}

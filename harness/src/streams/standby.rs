//! Standby replicas (`num.standby.replicas`) on simulated instances: the group leader's
//! Streams assignment and the standby tasks an instance keeps.
//!
//! # Protocol
//! Kafka Streams puts its `SubscriptionInfo` (task offset sums) into the JoinGroup user data
//! and its `AssignmentInfo` (standby tasks) into the SyncGroup answer. The simulated group
//! protocol carries no user data, so a [`Board`] shared by the instances of a run holds both,
//! written exactly where the bytes would be produced: each member's report when it sends
//! JoinGroup ([`GroupAssignor::on_join`]), the leader's standby assignment per generation
//! before its SyncGroup. A member reads its standbys for the generation it synced.
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

use super::assignor::{self, AssignorConfig, TaskOffset};
use super::restore::restore_step;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::{AssignmentFuture, GroupAssignor};
use eosim_sim::kafka::{Isolation, Offset, OffsetSpec, Request, Response, TopicPartition};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The leader's bound on one ListOffsets of a changelog end offset.
const LIST_OFFSETS_TIMEOUT_MS: u64 = 2_000;

#[derive(Debug, Default)]
struct BoardState {
    /// Member id → the task offsets it sent with its last JoinGroup.
    subscriptions: BTreeMap<String, BTreeMap<u32, TaskOffset>>,
    /// (generation, member id) → the standby tasks (warm-ups included) the leader gave it.
    standbys: BTreeMap<(i32, String), BTreeSet<u32>>,
}

/// The user data of one application's group (see the module docs). Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Board {
    inner: Arc<Mutex<BoardState>>,
}

impl Board {
    fn state(&self) -> std::sync::MutexGuard<'_, BoardState> {
        self.inner.lock().expect("board lock")
    }

    /// The standby tasks the leader of `generation` gave `member_id`; `None` when that
    /// generation's assignment did not come from a Streams leader.
    pub fn standbys(&self, generation: i32, member_id: &str) -> Option<BTreeSet<u32>> {
        let key = (generation, member_id.to_string());
        self.state().standbys.get(&key).cloned()
    }
}

/// One instance's side of the Streams assignment: what it reports and, when it leads, the
/// assignment of [`assignor::assign`] over every member's report.
pub struct StreamsAssignor {
    /// The run's board.
    pub board: Board,
    /// The task offsets this instance reports now (kept current by the instance).
    pub report: Arc<Mutex<BTreeMap<u32, TaskOffset>>>,
    /// The input topic (one task per partition).
    pub source: String,
    /// The changelog topic (partition = task).
    pub changelog: String,
    /// The assignor settings.
    pub config: AssignorConfig,
}

impl GroupAssignor for StreamsAssignor {
    /// `StreamsPartitionAssignor.name()`.
    fn name(&self) -> &'static str {
        "stream"
    }

    fn on_join(&self, member_id: &str) {
        if member_id.is_empty() {
            return;
        }
        let report = self.report.lock().expect("report lock").clone();
        self.board
            .state()
            .subscriptions
            .insert(member_id.to_string(), report);
    }

    fn assign<'a>(
        &'a self,
        conn: &'a Connection,
        generation: i32,
        members: &'a BTreeMap<String, Vec<String>>,
        partition_counts: &'a BTreeMap<String, u32>,
    ) -> AssignmentFuture<'a> {
        Box::pin(async move {
            let tasks = partition_counts.get(&self.source).copied().unwrap_or(0);
            let members: Vec<&String> = members
                .iter()
                .filter(|(_, topics)| topics.contains(&self.source))
                .map(|(m, _)| m)
                .collect();
            let reports: BTreeMap<String, BTreeMap<u32, TaskOffset>> = {
                let state = self.board.state();
                let report = |m: &String| state.subscriptions.get(m).cloned().unwrap_or_default();
                members.iter().map(|m| ((*m).clone(), report(m))).collect()
            };
            let ends = self.end_offsets(conn, tasks, &reports).await;
            let lags = reports
                .iter()
                .map(|(m, r)| (m.clone(), assignor::lags(r, &ends)))
                .collect();
            let assignment = assignor::assign(tasks, &lags, self.config);
            tracing::debug!(generation, ?assignment, "streams assignment");
            let mut state = self.board.state();
            let mut actives = BTreeMap::new();
            for (member, a) in assignment.clients {
                let key = (generation, member.clone());
                state.standbys.insert(key, a.standby);
                let tps = a
                    .active
                    .iter()
                    .map(|p| TopicPartition::new(&self.source, *p));
                actives.insert(member, tps.collect());
            }
            actives
        })
    }
}

impl StreamsAssignor {
    /// Each changelog partition's end offset (ListOffsets latest, read_uncommitted, as the
    /// leader's admin client lists it); where that fails, the furthest position reported.
    async fn end_offsets(
        &self,
        conn: &Connection,
        tasks: u32,
        reports: &BTreeMap<String, BTreeMap<u32, TaskOffset>>,
    ) -> BTreeMap<u32, Offset> {
        let _ = conn
            .refresh_metadata(
                std::slice::from_ref(&self.changelog),
                Duration::from_millis(LIST_OFFSETS_TIMEOUT_MS),
            )
            .await;
        let mut ends = BTreeMap::new();
        for task in 0..tasks {
            let tp = TopicPartition::new(&self.changelog, task);
            let listed = match conn.leader(&tp) {
                Some(leader) => {
                    let spec = OffsetSpec::Latest(Isolation::ReadUncommitted);
                    let request = Request::ListOffsets { tp, spec };
                    let timeout = Duration::from_millis(LIST_OFFSETS_TIMEOUT_MS);
                    match conn.request(leader, request, timeout).await {
                        Ok(Response::ListOffsets { offset }) => Some(offset),
                        _ => None,
                    }
                }
                None => None,
            };
            let furthest = reports
                .values()
                .filter_map(|r| match r.get(&task) {
                    Some(TaskOffset::Position(p)) => Some(*p),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            ends.insert(task, listed.unwrap_or(furthest));
        }
        ends
    }
}

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

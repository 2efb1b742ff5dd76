//! Kafka Streams' `StreamsPartitionAssignor` on simulated instances (apache/kafka trunk 4.0
//! `1eb7644`, `streams/.../internals/StreamsPartitionAssignor.java`): what each member
//! reports at JoinGroup and, on the group leader, the assignment of [`assignor::assign`]
//! over every member's report, handed over cooperatively (KIP-429) unless `upgrade.from`
//! forces the eager protocol.
//!
//! # Protocol
//! Kafka Streams puts its `SubscriptionInfo` (process id, task offset sums) into the
//! JoinGroup user data and its `AssignmentInfo` (standby tasks) into the SyncGroup answer.
//! The simulated group protocol carries no user data, so a [`Board`] shared by the instances
//! of a run holds both, written exactly where the bytes would be produced: each member's
//! report when it sends JoinGroup ([`GroupAssignor::on_join`]), the leader's standby
//! assignment per generation before its SyncGroup. A member reads its standbys for the
//! generation it synced.
//!
//! # Clients
//! Java assigns tasks to *clients* (one per process id, `ClientMetadata`), sorted by process
//! id, and then over each client's consumers. Here every instance has one stream thread, so
//! a client is a member; clients are ordered by process id first (then member id), so an
//! instance that rejoins under a new member id keeps its place in the round robin, and one
//! restarted with a fresh process id (in-memory stores) takes a new one, as in Java.
//!
//! # Cooperative hand-over
//! Under the cooperative protocol (Streams' default since 2.4) the JoinGroup of each member
//! carries the partitions it still owns; an active task meant for another client than the
//! one owning it is held back ([`assignor::hold_back_owned_tasks`]) and handed over in the
//! follow-up rebalance that the revoking owner asks for. Java also tells the new owner to
//! rejoin at once (`AssignmentInfo.nextRebalanceTime = 0`); here the owner's rejoin after
//! its revocation starts that rebalance alone.

use super::assignor::{self, AssignorConfig, TaskOffset};
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::{AssignmentFuture, GroupAssignor};
use eosim_sim::kafka::TopicPartition;
use eosim_sim::kafka::{Isolation, Offset, OffsetSpec, OwnedPartitions, Request, Response};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The leader's bound on one ListOffsets of a changelog end offset.
const LIST_OFFSETS_TIMEOUT_MS: u64 = 2_000;

/// What a member put in its last JoinGroup's `SubscriptionInfo`.
#[derive(Debug, Clone, Default)]
struct Subscription {
    process_id: String,
    task_offsets: BTreeMap<u32, TaskOffset>,
}

#[derive(Debug, Default)]
struct BoardState {
    /// Member id → what it sent with its last JoinGroup.
    subscriptions: BTreeMap<String, Subscription>,
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
/// assignment over every member's report.
pub struct StreamsAssignor {
    /// The run's board.
    pub board: Board,
    /// The task offsets this instance reports now (kept current by the instance).
    pub report: Arc<Mutex<BTreeMap<u32, TaskOffset>>>,
    /// This start's process id (`StateDirectory.initializeProcessId`).
    pub process_id: String,
    /// The input topic (one task per partition).
    pub source: String,
    /// The repartition topic under `group_by` (see `topology`): task `p` then stands for
    /// the stateless source task `0_p` and the aggregating task `1_p` (repartition
    /// partition `p`), handed to one client together.
    ///
    /// Java assigns stateless tasks apart (`HighAvailabilityTaskAssignor
    /// .assignStatelessActiveTasks`: round robin over the least-loaded clients, after the
    /// stateful ones); with one thread per client and balanced stateful loads that round
    /// robin mostly lands `0_p` where `1_p` is, and keeping them together keeps the
    /// cooperative hand-over ([`assignor::hold_back_owned_tasks`]) one decision per task.
    pub repartition: Option<String>,
    /// The table topic of a stream-table join (`streams::join`): partition `p` belongs to
    /// task `p` with the stream partition `p` (co-partitioned sources of one task,
    /// `PartitionGrouper`), so both go to the same client.
    pub table: Option<String>,
    /// The changelog topic (partition = task).
    pub changelog: String,
    /// The assignor settings.
    pub config: AssignorConfig,
    /// Whether COOPERATIVE is among the supported protocols (no eager `upgrade.from`).
    pub cooperative: bool,
}

impl GroupAssignor for StreamsAssignor {
    /// `StreamsPartitionAssignor.name()`.
    fn name(&self) -> &'static str {
        "stream"
    }

    fn cooperative(&self) -> bool {
        self.cooperative
    }

    fn on_join(&self, member_id: &str) {
        if member_id.is_empty() {
            return;
        }
        let subscription = Subscription {
            process_id: self.process_id.clone(),
            task_offsets: self.report.lock().expect("report lock").clone(),
        };
        let mut state = self.board.state();
        state
            .subscriptions
            .insert(member_id.to_string(), subscription);
    }

    fn assign<'a>(
        &'a self,
        conn: &'a Connection,
        generation: i32,
        members: &'a BTreeMap<String, Vec<String>>,
        owned: &'a BTreeMap<String, OwnedPartitions>,
        partition_counts: &'a BTreeMap<String, u32>,
    ) -> AssignmentFuture<'a> {
        Box::pin(async move {
            let tasks = partition_counts.get(&self.source).copied().unwrap_or(0);
            let clients = self.clients(members);
            let ends = self.end_offsets(conn, tasks, &clients).await;
            let lags = (clients.iter())
                .map(|(c, s)| (c.clone(), assignor::lags(&s.task_offsets, &ends)))
                .collect();
            let mut assignment = assignor::assign(tasks, &lags, self.config);
            if self.cooperative {
                let owners = self.owners(&clients, owned);
                let reports = (clients.iter())
                    .map(|(c, s)| (c.clone(), s.task_offsets.clone()))
                    .collect();
                let held_back = assignor::hold_back_owned_tasks(&mut assignment, &owners, &reports);
                if !held_back.is_empty() {
                    crate::mark!("streams:cooperative-tasks-held-back");
                }
            }
            tracing::debug!(generation, ?assignment, "streams assignment");
            let mut state = self.board.state();
            let mut actives = BTreeMap::new();
            for (client, a) in assignment.clients {
                let member = clients[&client].member_id.clone();
                state
                    .standbys
                    .insert((generation, member.clone()), a.standby);
                let topics =
                    (std::iter::once(&self.source).chain(&self.repartition)).chain(&self.table);
                let tps =
                    topics.flat_map(|t| a.active.iter().map(move |p| TopicPartition::new(t, *p)));
                actives.insert(member, tps.collect());
            }
            actives
        })
    }
}

/// A client of the assignment: a member and what it subscribed with.
struct Client {
    member_id: String,
    task_offsets: BTreeMap<u32, TaskOffset>,
}

impl StreamsAssignor {
    /// The members subscribed to the source, keyed `<process id> <member id>` so that the
    /// clients sort by process id (see the module docs).
    fn clients(&self, members: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, Client> {
        let state = self.board.state();
        let subscribed = members.iter().filter(|(_, t)| t.contains(&self.source));
        subscribed
            .map(|(m, _)| {
                let s = state.subscriptions.get(m).cloned().unwrap_or_default();
                let client = Client {
                    member_id: m.clone(),
                    task_offsets: s.task_offsets,
                };
                (format!("{} {m}", s.process_id), client)
            })
            .collect()
    }

    /// Task → the client whose member owns its source partition as it joins.
    fn owners(
        &self,
        clients: &BTreeMap<String, Client>,
        owned: &BTreeMap<String, OwnedPartitions>,
    ) -> BTreeMap<u32, String> {
        let mut owners = BTreeMap::new();
        for (client, c) in clients {
            let Some(o) = owned.get(&c.member_id) else {
                continue;
            };
            for tp in o.partitions.iter().filter(|tp| tp.topic == self.source) {
                owners.insert(tp.partition, client.clone());
            }
        }
        owners
    }

    /// Each changelog partition's end offset (ListOffsets latest, read_uncommitted, as the
    /// leader's admin client lists it); where that fails, the furthest position reported.
    async fn end_offsets(
        &self,
        conn: &Connection,
        tasks: u32,
        clients: &BTreeMap<String, Client>,
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
            let furthest = clients
                .values()
                .filter_map(|c| match c.task_offsets.get(&task) {
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

//! Kafka Streams' task assignment with standby replicas (KIP-441), as the group leader's
//! `StreamsPartitionAssignor` runs it through `HighAvailabilityTaskAssignor`.
//!
//! # Inputs
//! Every client (one instance, one stream thread here) reports in its subscription the
//! *offset sum* of each task it has state for: `Running` for an active task it runs (Java's
//! `Task.LATEST_OFFSET`), else the changelog position of its standby (or of a checkpoint).
//! The leader turns those into lags against the changelog end offsets ([`lags`]). A client
//! is *caught up* on a task when it runs it or its lag is at most
//! `acceptable.recovery.lag` (default 10000 records).
//!
//! # Steps ([`assign`], after `HighAvailabilityTaskAssignor.assign` and `TaskMovement`)
//! 1. Active tasks round-robin over the clients sorted by id (`assignActiveStatefulTasks`).
//! 2. `num.standby.replicas` standbys per task, each on the least-loaded client not already
//!    holding the task (`DefaultStandbyTaskAssignor`; load = active + standby tasks, ties by
//!    client id).
//! 3. Active movements: an active task whose client is not caught up while a more caught-up
//!    client exists moves to, in order, the least-loaded caught-up client holding a standby
//!    of it (active and standby swap), the least-loaded caught-up client, or the most
//!    caught-up client. The client it was meant for keeps a *warm-up* replica (a standby that
//!    restores towards the end), at most `max.warmup.replicas` (default 2) in all.
//! 4. Standby movements: likewise for standbys on clients that are not caught up.
//!
//! Movements make Java schedule a probing rebalance after `probing.rebalance.interval.ms`
//! (10 minutes) to hand tasks back once warm-ups caught up; [`Assignment::movements`] says
//! so, but the simulated instances do not schedule one (runs are shorter than that).
//! Stateless tasks, rack awareness, client tags and multi-thread capacity are not modelled.

use eosim_sim::kafka::Offset;
use std::collections::{BTreeMap, BTreeSet};

/// What a client reported for one task in its subscription (Java's task offset sums).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaskOffset {
    /// The client runs the task as active (`Task.LATEST_OFFSET`).
    Running,
    /// The client's copy of the store is complete below this changelog offset.
    Position(Offset),
}

/// A client's lag on a task, as the leader computes it. `Running` orders first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lag {
    /// The client runs the task as active.
    Running,
    /// Changelog records the client's copy is behind the end offset.
    Behind(u64),
}

/// `num.standby.replicas`, `acceptable.recovery.lag`, `max.warmup.replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignorConfig {
    /// Standby replicas per stateful task (Streams' default 0).
    pub num_standby_replicas: u32,
    /// Lag, in changelog records, within which a client counts as caught up (10000).
    pub acceptable_recovery_lag: u64,
    /// Warm-up replicas the assignment may add in all (2).
    pub max_warmup_replicas: u32,
}

/// One client's tasks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientAssignment {
    /// Active tasks (input partitions).
    pub active: BTreeSet<u32>,
    /// Standby tasks, warm-ups included (the client keeps a copy of their stores).
    pub standby: BTreeSet<u32>,
    /// The standbys that are warm-ups for a later move of the active task here.
    pub warmup: BTreeSet<u32>,
}

/// The assignment of every client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assignment {
    /// Client id → tasks.
    pub clients: BTreeMap<String, ClientAssignment>,
    /// Active and standby movements made towards caught-up clients (a probing rebalance
    /// would follow in Java when this is above 0).
    pub movements: usize,
}

/// The lag of one client on each task with a known end offset: `end - position`
/// (saturating), `Running` for a task it runs, and `end` for a task it reported nothing
/// for (as if its offset sum were 0). `end_offsets` maps task to its changelog end offset.
pub fn lags(
    reports: &BTreeMap<u32, TaskOffset>,
    end_offsets: &BTreeMap<u32, Offset>,
) -> BTreeMap<u32, Lag> {
    end_offsets
        .iter()
        .map(|(&task, &end)| {
            let lag = match reports.get(&task) {
                Some(TaskOffset::Running) => Lag::Running,
                Some(TaskOffset::Position(p)) => Lag::Behind(end.saturating_sub(*p).max(0) as u64),
                None => Lag::Behind(end.max(0) as u64),
            };
            (task, lag)
        })
        .collect()
}

/// Assigns tasks `0..tasks` over the clients of `lags` (client id → task → lag; a missing
/// entry is the largest lag) in the steps of the module docs.
pub fn assign(
    tasks: u32,
    lags: &BTreeMap<String, BTreeMap<u32, Lag>>,
    config: AssignorConfig,
) -> Assignment {
    let mut state = State {
        lags,
        config,
        clients: lags
            .keys()
            .map(|c| (c.clone(), ClientAssignment::default()))
            .collect(),
        warmups_left: config.max_warmup_replicas,
        movements: 0,
    };
    let ids: Vec<String> = lags.keys().cloned().collect();
    if ids.is_empty() {
        return Assignment::default();
    }
    for task in 0..tasks {
        let client = &ids[task as usize % ids.len()];
        state.client(client).active.insert(task);
    }
    for task in 0..tasks {
        for _ in 0..config.num_standby_replicas {
            let Some(c) = state.least_loaded(|s, c| !s.holds(c, task)) else {
                break;
            };
            state.client(&c).standby.insert(task);
        }
    }
    state.move_actives(tasks);
    state.move_standbys(tasks);
    Assignment {
        clients: state.clients,
        movements: state.movements,
    }
}

/// The cooperative protocol's hand-over (KIP-429; apache/kafka trunk 4.0 `1eb7644`,
/// `StreamsPartitionAssignor.populateActiveTaskAndPartitionsLists` and
/// `buildStandbyTaskMap`): an active task given to a client while another member still
/// owns its partition is taken out of this assignment until that owner has revoked it.
/// The owner, no longer assigned the task, revokes it and rejoins; the follow-up rebalance
/// gives it to its new owner. A client that has state for a task held back from it (a
/// standby or a checkpoint: a `Position` in its report) keeps it as a standby meanwhile.
///
/// `owners` maps task → the client whose member owns its partition as it joins;
/// `reports` is each client's reported task offsets. Returns the tasks held back.
pub fn hold_back_owned_tasks(
    assignment: &mut Assignment,
    owners: &BTreeMap<u32, String>,
    reports: &BTreeMap<String, BTreeMap<u32, TaskOffset>>,
) -> BTreeSet<u32> {
    let mut held_back = BTreeSet::new();
    for (client, a) in assignment.clients.iter_mut() {
        let owned_elsewhere: Vec<u32> = (a.active.iter())
            .filter(|t| owners.get(t).is_some_and(|owner| owner != client))
            .copied()
            .collect();
        for task in owned_elsewhere {
            a.active.remove(&task);
            held_back.insert(task);
            let report = reports.get(client).and_then(|r| r.get(&task));
            if matches!(report, Some(TaskOffset::Position(_))) {
                a.standby.insert(task);
            }
        }
    }
    held_back
}

struct State<'a> {
    lags: &'a BTreeMap<String, BTreeMap<u32, Lag>>,
    config: AssignorConfig,
    clients: BTreeMap<String, ClientAssignment>,
    warmups_left: u32,
    movements: usize,
}

impl State<'_> {
    fn client(&mut self, id: &str) -> &mut ClientAssignment {
        self.clients.get_mut(id).expect("a known client")
    }

    fn lag(&self, client: &str, task: u32) -> Lag {
        let lag = self.lags.get(client).and_then(|l| l.get(&task));
        lag.copied().unwrap_or(Lag::Behind(u64::MAX))
    }

    fn caught_up(&self, client: &str, task: u32) -> bool {
        match self.lag(client, task) {
            Lag::Running => true,
            Lag::Behind(l) => l <= self.config.acceptable_recovery_lag,
        }
    }

    fn holds(&self, client: &str, task: u32) -> bool {
        let a = &self.clients[client];
        a.active.contains(&task) || a.standby.contains(&task)
    }

    /// The eligible client with the fewest tasks (ties: the smallest id).
    fn least_loaded(&self, eligible: impl Fn(&Self, &str) -> bool) -> Option<String> {
        self.clients
            .iter()
            .filter(|(c, _)| eligible(self, c))
            .min_by_key(|(c, a)| (a.active.len() + a.standby.len(), c.as_str()))
            .map(|(c, _)| c.clone())
    }

    /// The eligible client with the smallest lag on `task` that is strictly more caught
    /// up than `destination` (Java's `mostCaughtUpEligibleClient`).
    fn most_caught_up(
        &self,
        task: u32,
        destination: &str,
        eligible: impl Fn(&Self, &str) -> bool,
    ) -> Option<String> {
        let mut by_lag: Vec<(Lag, &String)> = self
            .clients
            .keys()
            .map(|c| (self.lag(c, task), c))
            .collect();
        by_lag.sort();
        by_lag
            .into_iter()
            .take_while(|(_, c)| c.as_str() != destination)
            .find(|(_, c)| eligible(self, c))
            .map(|(_, c)| c.clone())
    }

    /// Whether `client` is not caught up on `task` while a more caught-up client exists.
    fn should_move(&self, task: u32, client: &str) -> bool {
        if self.caught_up(client, task) {
            return false;
        }
        let best = self.clients.keys().map(|c| self.lag(c, task)).min();
        best.is_some_and(|best| best < self.lag(client, task))
    }

    /// The (task, client) pairs of `which` to move, fewest caught-up clients first.
    fn planned(&self, tasks: u32, which: impl Fn(&ClientAssignment, u32) -> bool) -> Vec<Move> {
        let mut planned: Vec<(usize, u32, String)> = Vec::new();
        for (client, a) in &self.clients {
            for task in (0..tasks).filter(|t| which(a, *t)) {
                if self.should_move(task, client) {
                    let caught_up = self
                        .clients
                        .keys()
                        .filter(|c| self.caught_up(c, task))
                        .count();
                    planned.push((caught_up, task, client.clone()));
                }
            }
        }
        planned.sort();
        planned
            .into_iter()
            .map(|(_, task, destination)| Move { task, destination })
            .collect()
    }

    fn move_actives(&mut self, tasks: u32) {
        for m in self.planned(tasks, |a, t| a.active.contains(&t)) {
            let (task, dest) = (m.task, m.destination.as_str());
            let standby_holder = self
                .least_loaded(|s, c| s.caught_up(c, task) && s.clients[c].standby.contains(&task));
            let source = standby_holder
                .or_else(|| self.least_loaded(|s, c| s.caught_up(c, task)))
                .or_else(|| self.most_caught_up(task, dest, |_, _| true));
            let Some(source) = source else { continue };
            self.movements += 1;
            let swap = self.client(&source).standby.remove(&task);
            self.client(&source).active.insert(task);
            self.client(dest).active.remove(&task);
            if swap {
                self.client(dest).standby.insert(task);
            } else if self.take_warmup() {
                let d = self.client(dest);
                d.standby.insert(task);
                d.warmup.insert(task);
            }
        }
    }

    fn move_standbys(&mut self, tasks: u32) {
        let plans = self.planned(tasks, |a, t| {
            a.standby.contains(&t) && !a.warmup.contains(&t)
        });
        for m in plans {
            let (task, dest) = (m.task, m.destination.as_str());
            let eligible = |s: &Self, c: &str| !s.holds(c, task);
            let source = self
                .least_loaded(|s, c| s.caught_up(c, task) && eligible(s, c))
                .or_else(|| self.most_caught_up(task, dest, eligible));
            let Some(source) = source else { continue };
            self.movements += 1;
            self.client(&source).standby.insert(task);
            if self.take_warmup() {
                self.client(dest).warmup.insert(task);
            } else {
                self.client(dest).standby.remove(&task);
            }
        }
    }

    fn take_warmup(&mut self) -> bool {
        let left = self.warmups_left > 0;
        self.warmups_left = self.warmups_left.saturating_sub(1);
        left
    }
}

struct Move {
    task: u32,
    destination: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: AssignorConfig = AssignorConfig {
        num_standby_replicas: 1,
        acceptable_recovery_lag: 10_000,
        max_warmup_replicas: 2,
    };

    fn clients(rows: &[(&str, &[(u32, Lag)])]) -> BTreeMap<String, BTreeMap<u32, Lag>> {
        rows.iter()
            .map(|(c, l)| (c.to_string(), l.iter().copied().collect()))
            .collect()
    }

    fn set(tasks: &[u32]) -> BTreeSet<u32> {
        tasks.iter().copied().collect()
    }

    #[test]
    fn cooperative_hand_over_holds_back_tasks_another_member_still_owns() {
        let lags = clients(&[("a", &[]), ("b", &[]), ("c", &[])]);
        let config = AssignorConfig {
            num_standby_replicas: 0,
            ..DEFAULTS
        };
        let mut assignment = assign(4, &lags, config);
        // Round robin: a gets 0 and 3, b gets 1, c gets 2. Before, a ran 0 and 2, b 1 and 3.
        assert_eq!(assignment.clients["a"].active, set(&[0, 3]));
        let owners: BTreeMap<u32, String> = [(0, "a"), (1, "b"), (2, "a"), (3, "b")]
            .map(|(t, c)| (t, c.to_string()))
            .into();
        let reports = BTreeMap::from([(
            "c".to_string(),
            BTreeMap::from([(2, TaskOffset::Position(7))]),
        )]);
        let held_back = hold_back_owned_tasks(&mut assignment, &owners, &reports);
        assert_eq!(held_back, set(&[2, 3]));
        // Kept: tasks the client owns itself; held back: those another member owns.
        assert_eq!(assignment.clients["a"].active, set(&[0]));
        assert_eq!(assignment.clients["b"].active, set(&[1]));
        assert_eq!(assignment.clients["c"].active, set(&[]));
        // c had state for task 2 (a checkpoint): it keeps it as a standby meanwhile; a had
        // none for task 3, so it gets no standby of it.
        assert!(assignment.clients["c"].standby.contains(&2));
        assert!(!assignment.clients["a"].standby.contains(&3));
        // Unowned tasks (a member that left) are handed out at once.
        let mut again = assign(4, &lags, config);
        let held_back = hold_back_owned_tasks(&mut again, &BTreeMap::new(), &reports);
        assert!(held_back.is_empty());
        assert_eq!(again.clients["c"].active, set(&[2]));
    }

    #[test]
    fn lags_count_from_the_end_and_a_missing_report_as_offset_zero() {
        let reports = BTreeMap::from([(0, TaskOffset::Running), (1, TaskOffset::Position(7))]);
        let ends = BTreeMap::from([(0, 50), (1, 10), (2, 4)]);
        let expected =
            BTreeMap::from([(0, Lag::Running), (1, Lag::Behind(3)), (2, Lag::Behind(4))]);
        assert_eq!(lags(&reports, &ends), expected);
    }

    #[test]
    fn with_everyone_caught_up_actives_go_round_robin_and_standbys_elsewhere() {
        let fresh = [
            (0, Lag::Behind(0)),
            (1, Lag::Behind(0)),
            (2, Lag::Behind(0)),
        ];
        let a = assign(3, &clients(&[("a", &fresh), ("b", &fresh)]), DEFAULTS);
        assert_eq!(a.clients["a"].active, set(&[0, 2]));
        assert_eq!(a.clients["b"].active, set(&[1]));
        assert_eq!(a.clients["a"].standby, set(&[1]));
        assert_eq!(a.clients["b"].standby, set(&[0, 2]));
        assert_eq!(a.movements, 0);
    }

    #[test]
    fn an_active_meant_for_a_cold_client_goes_to_the_caught_up_standby_instead() {
        // "a" restarted with nothing; "b" ran everything. Round-robin gives 0 and 2 to "a"
        // and standbys of them to "b": both swap, and "a" keeps standbys of all three.
        let config = AssignorConfig {
            acceptable_recovery_lag: 10,
            ..DEFAULTS
        };
        let cold = [
            (0, Lag::Behind(300)),
            (1, Lag::Behind(300)),
            (2, Lag::Behind(300)),
        ];
        let warm = [(0, Lag::Running), (1, Lag::Behind(4)), (2, Lag::Running)];
        let a = assign(3, &clients(&[("a", &cold), ("b", &warm)]), config);
        assert_eq!(a.clients["b"].active, set(&[0, 1, 2]));
        assert!(a.clients["a"].active.is_empty());
        assert_eq!(a.clients["a"].standby, set(&[0, 1, 2]));
        assert!(a.clients["b"].standby.is_empty());
        assert!(a.movements >= 2);
    }

    #[test]
    fn warm_ups_are_bounded_by_max_warmup_replicas() {
        let config = AssignorConfig {
            num_standby_replicas: 0,
            acceptable_recovery_lag: 0,
            max_warmup_replicas: 1,
        };
        let cold: Vec<(u32, Lag)> = (0..4).map(|t| (t, Lag::Behind(100))).collect();
        let warm: Vec<(u32, Lag)> = (0..4).map(|t| (t, Lag::Running)).collect();
        let a = assign(4, &clients(&[("a", &cold), ("b", &warm)]), config);
        assert_eq!(a.clients["b"].active, set(&[0, 1, 2, 3]));
        assert_eq!(a.clients["a"].warmup.len(), 1);
        assert_eq!(a.clients["a"].standby.len(), 1);
    }

    #[test]
    fn without_caught_up_clients_the_most_caught_up_one_gets_the_task() {
        let config = AssignorConfig {
            num_standby_replicas: 0,
            acceptable_recovery_lag: 0,
            max_warmup_replicas: 0,
        };
        let a = assign(
            1,
            &clients(&[
                ("a", &[(0, Lag::Behind(90))]),
                ("b", &[(0, Lag::Behind(20))]),
            ]),
            config,
        );
        assert_eq!(a.clients["b"].active, set(&[0]));
        assert!(a.clients["a"].active.is_empty() && a.clients["a"].standby.is_empty());
    }

    #[test]
    fn standbys_never_share_a_client_with_their_active_and_are_capped_by_clients() {
        let config = AssignorConfig {
            num_standby_replicas: 3,
            ..DEFAULTS
        };
        let lags = clients(&[("a", &[]), ("b", &[]), ("c", &[])]);
        let a = assign(5, &lags, config);
        for task in 0..5 {
            let holders: Vec<&String> = a
                .clients
                .iter()
                .filter(|(_, c)| c.active.contains(&task) || c.standby.contains(&task))
                .map(|(id, _)| id)
                .collect();
            assert_eq!(holders.len(), 3, "task {task}: one active and two standbys");
            let actives = a
                .clients
                .values()
                .filter(|c| c.active.contains(&task))
                .count();
            assert_eq!(actives, 1);
        }
    }
}

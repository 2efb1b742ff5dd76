//! The distributed herder: which worker runs which task, task states, and the control API
//! (create and delete a connector, status, restart a task).
//!
//! # Model (a documented simplification of Connect's distributed mode)
//! - Worker membership: each worker process heartbeats into the herder every
//!   `heartbeat.interval.ms`; a worker silent for `session.timeout.ms` (killed, paused) has
//!   *departed*. As with KIP-415's incremental cooperative protocol, a departed worker's
//!   tasks stay with it for `scheduled.rebalance.max.delay.ms`; if it comes back within
//!   that delay it keeps them, otherwise they are reassigned to the live worker with the
//!   fewest tasks (ties by name). The herder state itself is the config and status topics:
//!   it survives every process.
//! - Partition ownership is *not* decided here: every task of a connector is a consumer in
//!   the connector's group `connect-<name>` (Kafka's group protocol through the broker
//!   model), so partitions move between tasks by consumer rebalances and offset commits
//!   of a task that lost its partitions are fenced by the generation check.
//! - A task that fails goes FAILED and stays where it is until [`Herder::restart_task`]
//!   (or a restart of its worker's process, which starts every task it owns afresh).
//! - Each (re)start of a task bumps its `run`; a worker stops any task whose run it no
//!   longer owns, so a zombie (a paused worker whose tasks moved) stops at its next
//!   heartbeat, after it possibly wrote once more (as in Connect).

use super::config::{invalid, ConfigError, ConnectorConfig, WorkerConfig};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A task's state (`AbstractStatus.State`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    /// Assigned (or waiting for a worker) and not started yet.
    Unassigned,
    /// Running.
    Running,
    /// Failed; stays so until restarted.
    Failed,
}

/// One task's status as the REST API's `GET /connectors/{c}/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStatus {
    /// Task id.
    pub id: u32,
    /// State.
    pub state: TaskState,
    /// Worker it is assigned to.
    pub worker_id: Option<String>,
    /// The failure, when FAILED.
    pub trace: Option<String>,
}

/// One task the herder assigned to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// Connector name.
    pub connector: String,
    /// Task id.
    pub task: u32,
    /// Run number: bumped on every (re)start or move.
    pub run: u64,
    /// Current state.
    pub state: TaskState,
}

#[derive(Debug, Clone)]
struct TaskSlot {
    worker: Option<String>,
    state: TaskState,
    trace: Option<String>,
    run: u64,
}

impl TaskSlot {
    /// A task no worker runs yet.
    fn unassigned() -> Self {
        Self {
            worker: None,
            state: TaskState::Unassigned,
            trace: None,
            run: 0,
        }
    }
}

#[derive(Debug, Clone)]
struct WorkerSlot {
    last_heartbeat_ms: u64,
    departed_at_ms: Option<u64>,
}

#[derive(Debug, Default)]
struct HerderState {
    workers: BTreeMap<String, WorkerSlot>,
    connectors: BTreeMap<String, (ConnectorConfig, Vec<TaskSlot>)>,
}

/// Parses a connector's string map into its framework configuration, checking the
/// connector class's own keys (a factory per plugin).
pub type ConfigParser =
    Arc<dyn Fn(&BTreeMap<String, String>) -> Result<ConnectorConfig, ConfigError> + Send + Sync>;

/// The herder shared by the worker processes. Cloning shares it.
#[derive(Clone)]
pub struct Herder {
    inner: Arc<Mutex<HerderState>>,
    config: WorkerConfig,
    parser: ConfigParser,
}

impl Herder {
    /// A herder for workers configured with `config`; `parser` validates connector
    /// configurations.
    pub fn new(config: WorkerConfig, parser: ConfigParser) -> Self {
        Self {
            inner: Arc::default(),
            config,
            parser,
        }
    }

    /// The worker configuration.
    pub fn worker_config(&self) -> &WorkerConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HerderState> {
        self.inner.lock().expect("herder lock")
    }

    /// `POST /connectors`: creates a connector with `tasks.max` unassigned tasks.
    ///
    /// # Errors
    /// The configuration's first problem; a name already in use.
    pub fn create_connector(&self, raw: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        let config = (self.parser)(raw)?;
        let mut state = self.lock();
        if state.connectors.contains_key(&config.name) {
            return Err(invalid("name", &config.name, "a name not in use"));
        }
        let tasks = vec![TaskSlot::unassigned(); config.tasks_max as usize];
        state
            .connectors
            .insert(config.name.clone(), (config, tasks));
        Ok(())
    }

    /// `PUT /connectors/{name}/config` on an existing connector: replaces its configuration
    /// and restarts every task with it (Connect reconfigures the connector and starts its
    /// tasks afresh; a changed `tasks.max` adds or drops tasks).
    ///
    /// # Errors
    /// The configuration's first problem; no connector of that name.
    pub fn update_connector_config(
        &self,
        raw: &BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        let config = (self.parser)(raw)?;
        let mut state = self.lock();
        let Some((old, tasks)) = state.connectors.get_mut(&config.name) else {
            return Err(invalid("name", &config.name, "an existing connector"));
        };
        tasks.resize(config.tasks_max as usize, TaskSlot::unassigned());
        for t in tasks.iter_mut() {
            t.run += 1;
            t.state = TaskState::Unassigned;
            t.trace = None;
        }
        *old = config;
        Ok(())
    }

    /// `DELETE /connectors/{name}`; false when there was none.
    pub fn delete_connector(&self, name: &str) -> bool {
        self.lock().connectors.remove(name).is_some()
    }

    /// A connector's configuration.
    pub fn connector_config(&self, name: &str) -> Option<ConnectorConfig> {
        self.lock().connectors.get(name).map(|(c, _)| c.clone())
    }

    /// A lag line per FAILED task of `connector`: `task <name>-<id> FAILED on <worker>:
    /// <trace>` (what a drain that never catches up names as its reason).
    pub fn failed_task_lines(&self, connector: &str) -> Vec<String> {
        self.status(connector)
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.state == TaskState::Failed)
            .map(|t| {
                let trace = t.trace.unwrap_or_default();
                let worker = t.worker_id.unwrap_or_default();
                format!("task {connector}-{} FAILED on {worker}: {trace}", t.id)
            })
            .collect()
    }

    /// `GET /connectors/{name}/status`: its tasks' states.
    pub fn status(&self, name: &str) -> Option<Vec<TaskStatus>> {
        let state = self.lock();
        let (_, tasks) = state.connectors.get(name)?;
        let status = tasks
            .iter()
            .enumerate()
            .map(|(id, t)| TaskStatus {
                id: id as u32,
                state: t.state,
                worker_id: t.worker.clone(),
                trace: t.trace.clone(),
            })
            .collect();
        Some(status)
    }

    /// `POST /connectors/{name}/tasks/{task}/restart`: the task starts afresh on its worker.
    ///
    /// # Errors
    /// When the connector or task does not exist.
    pub fn restart_task(&self, name: &str, task: u32) -> Result<(), String> {
        let mut state = self.lock();
        let (_, tasks) = state
            .connectors
            .get_mut(name)
            .ok_or(format!("no connector {name}"))?;
        let slot = tasks
            .get_mut(task as usize)
            .ok_or(format!("no task {name}-{task}"))?;
        crate::mark!("connect:task-restarted");
        slot.run += 1;
        slot.state = TaskState::Unassigned;
        slot.trace = None;
        Ok(())
    }

    /// `POST /connectors/{name}/restart?includeTasks=true&onlyFailed=true` (KIP-745):
    /// restarts the FAILED tasks and returns their ids.
    pub fn restart_failed(&self, name: &str) -> Vec<u32> {
        let failed: Vec<u32> = self
            .status(name)
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.state == TaskState::Failed)
            .map(|t| t.id)
            .collect();
        for &id in &failed {
            let _ = self.restart_task(name, id);
        }
        failed
    }

    /// A worker process started: it joins, and every task it still owns starts afresh.
    pub fn register(&self, worker: &str, now_ms: u64) {
        let mut state = self.lock();
        let slot = WorkerSlot {
            last_heartbeat_ms: now_ms,
            departed_at_ms: None,
        };
        state.workers.insert(worker.to_string(), slot);
        for (_, tasks) in state.connectors.values_mut() {
            for t in tasks
                .iter_mut()
                .filter(|t| t.worker.as_deref() == Some(worker))
            {
                t.run += 1;
                t.state = TaskState::Unassigned;
                t.trace = None;
            }
        }
    }

    /// A worker's heartbeat; it is back if it had departed. Returns false when the worker
    /// is unknown (its tasks were taken away and it was dropped): it must register again.
    pub fn heartbeat(&self, worker: &str, now_ms: u64) -> bool {
        let mut state = self.lock();
        match state.workers.get_mut(worker) {
            Some(slot) => {
                slot.last_heartbeat_ms = now_ms;
                slot.departed_at_ms = None;
                true
            }
            None => false,
        }
    }

    /// The group leader's work: notices departed workers, takes their tasks after
    /// `scheduled.rebalance.max.delay.ms`, and assigns unowned tasks.
    pub fn rebalance(&self, now_ms: u64) {
        let mut state = self.lock();
        let session = self.config.session_timeout_ms;
        let delay = self.config.scheduled_rebalance_max_delay_ms;
        let mut gone = Vec::new();
        for (name, w) in state.workers.iter_mut() {
            if now_ms.saturating_sub(w.last_heartbeat_ms) > session {
                let since = *w.departed_at_ms.get_or_insert(now_ms);
                if now_ms.saturating_sub(since) >= delay {
                    gone.push(name.clone());
                }
            }
        }
        for name in &gone {
            crate::mark!("connect:worker-departed-tasks-reassigned");
            state.workers.remove(name);
        }
        let live: Vec<String> = state
            .workers
            .iter()
            .filter(|(_, w)| w.departed_at_ms.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        assign_orphans(&mut state, &live);
    }

    /// The tasks assigned to `worker`.
    pub fn assignments(&self, worker: &str) -> Vec<Assignment> {
        let state = self.lock();
        let mut out = Vec::new();
        for (name, (_, tasks)) in &state.connectors {
            for (id, t) in tasks.iter().enumerate() {
                if t.worker.as_deref() == Some(worker) {
                    let (connector, task) = (name.clone(), id as u32);
                    out.push(Assignment {
                        connector,
                        task,
                        run: t.run,
                        state: t.state,
                    });
                }
            }
        }
        out
    }

    /// Sets a task's state if `run` is still its current run (a stale run changes
    /// nothing). Returns whether it applied.
    pub fn set_state(
        &self,
        connector: &str,
        task: u32,
        run: u64,
        new: TaskState,
        trace: Option<String>,
    ) -> bool {
        let mut state = self.lock();
        let Some((_, tasks)) = state.connectors.get_mut(connector) else {
            return false;
        };
        match tasks.get_mut(task as usize) {
            Some(slot) if slot.run == run => {
                slot.state = new;
                slot.trace = trace;
                true
            }
            _ => false,
        }
    }
}

/// Gives every task without a (known) worker to the live worker with the fewest tasks.
fn assign_orphans(state: &mut HerderState, live: &[String]) {
    if live.is_empty() {
        return;
    }
    let known: Vec<String> = state.workers.keys().cloned().collect();
    let mut load: BTreeMap<String, usize> = live.iter().map(|w| (w.clone(), 0)).collect();
    for (_, tasks) in state.connectors.values() {
        for t in tasks {
            if let Some(n) = t.worker.as_ref().and_then(|w| load.get_mut(w)) {
                *n += 1;
            }
        }
    }
    for (_, tasks) in state.connectors.values_mut() {
        for t in tasks.iter_mut() {
            if t.worker.as_ref().is_some_and(|w| known.contains(w)) {
                continue;
            }
            let (target, n) = load
                .iter_mut()
                .min_by_key(|(name, n)| (**n, (*name).clone()))
                .expect("live is not empty");
            *n += 1;
            t.worker = Some(target.clone());
            t.run += 1;
            t.state = TaskState::Unassigned;
            t.trace = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::config::ConnectorConfig;

    fn herder(delay_ms: u64) -> Herder {
        let config = WorkerConfig {
            scheduled_rebalance_max_delay_ms: delay_ms,
            ..WorkerConfig::default()
        };
        let parser: ConfigParser = Arc::new(|raw| ConnectorConfig::parse(raw, &[]));
        let h = Herder::new(config, parser);
        let raw = raw_of(&[
            ("name", "c"),
            ("connector.class", "x"),
            ("topics", "t"),
            ("tasks.max", "2"),
        ]);
        h.create_connector(&raw).expect("valid config");
        h
    }

    #[test]
    fn tasks_of_a_dead_worker_move_after_the_scheduled_delay() {
        let h = herder(5_000);
        h.register("connect-1", 0);
        h.register("connect-2", 0);
        h.rebalance(0);
        assert_eq!(h.assignments("connect-1").len(), 1);
        h.heartbeat("connect-2", 12_000);
        h.rebalance(12_000); // connect-1 departed at 12 s
        assert_eq!(h.assignments("connect-1").len(), 1, "kept during the delay");
        h.heartbeat("connect-2", 17_000);
        h.rebalance(17_000);
        assert_eq!(h.assignments("connect-2").len(), 2);
    }

    #[test]
    fn failed_task_stays_failed_until_restarted() {
        let h = herder(0);
        h.register("connect-1", 0);
        h.rebalance(0);
        let a = h.assignments("connect-1")[0].clone();
        assert!(h.set_state("c", a.task, a.run, TaskState::Failed, Some("boom".into())));
        h.rebalance(1_000);
        assert_eq!(
            h.status("c").unwrap()[a.task as usize].state,
            TaskState::Failed
        );
        assert_eq!(h.restart_failed("c"), vec![a.task]);
        assert_eq!(
            h.status("c").unwrap()[a.task as usize].state,
            TaskState::Unassigned
        );
    }

    #[test]
    fn a_config_update_restarts_every_task_with_the_new_config() {
        let h = herder(0);
        h.register("connect-1", 0);
        h.rebalance(0);
        let before = h.assignments("connect-1");
        for a in &before {
            assert!(h.set_state("c", a.task, a.run, TaskState::Failed, None));
        }
        let raw = raw_of(&[
            ("name", "c"),
            ("connector.class", "x"),
            ("topics", "t"),
            ("tasks.max", "2"),
            ("consumer.override.max.poll.records", "50"),
        ]);
        h.update_connector_config(&raw).expect("valid config");
        assert_eq!(h.connector_config("c").unwrap().max_poll_records, 50);
        let after = h.assignments("connect-1");
        assert_eq!(after.len(), 2, "the tasks stay on their worker");
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(a.run, b.run + 1, "a stale run stops, a new one starts");
            assert_eq!(a.state, TaskState::Unassigned);
        }
        let mut unknown = raw_of(&[("name", "d"), ("connector.class", "x"), ("topics", "t")]);
        assert!(
            h.update_connector_config(&unknown).is_err(),
            "no connector d"
        );
        unknown.insert("name".into(), "c".into());
        unknown.insert("tasks.max".into(), "0".into());
        assert!(h.update_connector_config(&unknown).is_err(), "tasks.max 0");
    }

    fn raw_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn control_api_creates_reports_and_deletes_a_connector() {
        let h = herder(0);
        h.register("connect-1", 0);
        h.rebalance(0);
        let status = h.status("c").expect("created");
        assert_eq!(status.len(), 2);
        assert!(status
            .iter()
            .all(|t| t.worker_id.as_deref() == Some("connect-1")));
        let raw = raw_of(&[("name", "c"), ("connector.class", "x"), ("topics", "t")]);
        assert!(h.create_connector(&raw).is_err(), "the name is in use");
        assert!(h.delete_connector("c"));
        assert!(h.status("c").is_none());
        assert!(h.assignments("connect-1").is_empty());
    }
}

//! The armed fault point and the history hooks of the sink tasks.

use super::connector::{connector_props, post_config};
use super::Context;
use crate::client::clickhouse::ChClientError;
use crate::history::{OpKind, RecordRef, Value};
use crate::scenario::clickhouse::FaultPointAction;
use crate::sinks::clickhouse::{SinkHooks, FAULT_POINTS};
use crate::sinks::{completion, WriteLog};
use crate::workload::HistoryWriteLog;
use async_trait::async_trait;
use eosim_sim::clock::now_ns;
use eosim_sim::effects::{self, kind};
use eosim_sim::kafka::TopicPartition;
use madsim::rand::Rng;
use madsim::runtime::Handle;
use std::time::Duration;

/// The point, hit and action armed for this run (`enumerate` resolved with the seed).
pub fn armed(ctx: &Context) -> Option<(String, u64, FaultPointAction)> {
    let spec = ctx.spec.fault_point.as_ref()?;
    if spec.point != "enumerate" {
        return Some((spec.point.clone(), spec.hit, spec.action));
    }
    let seed = Handle::current().seed();
    let point = FAULT_POINTS[(seed % FAULT_POINTS.len() as u64) as usize];
    let hit = 1 + (seed / FAULT_POINTS.len() as u64) % spec.hits_max.max(1);
    let action = if point == "mid-insert" {
        FaultPointAction::CrashClickhouse
    } else {
        FaultPointAction::Crash
    };
    Some((point.to_string(), hit, action))
}

/// F2's other batch boundaries: with `redelivery_batch_records_max` set, the operator
/// puts the connector's configuration again with that `consumer.override.max.poll.records`
/// while the crashed worker is down, so every task restarts polling batches of that size
/// (Connect restarts a connector's tasks on a configuration change).
fn redelivery_config(ctx: &Context) {
    let Some(n) = ctx.spec.redelivery_batch_records_max else {
        return;
    };
    let mut raw = connector_props(ctx);
    raw.insert("consumer.override.max.poll.records".into(), n.to_string());
    post_config(ctx, raw, true);
}

/// Hooks of task `worker`.
pub struct Hooks {
    /// The run.
    pub ctx: Context,
    /// The worker node's name.
    pub worker: String,
    /// The task's insert attempts, into the history as `worker`.
    writes: HistoryWriteLog,
}

impl Hooks {
    /// The hooks of the task on `worker`.
    pub fn new(ctx: Context, worker: String) -> Self {
        let writes = HistoryWriteLog {
            recorder: ctx.recorder.clone(),
            process: worker.clone(),
        };
        Self {
            ctx,
            worker,
            writes,
        }
    }

    fn fault(&self, name: &str, detail: String) {
        let value = Value::Fault {
            name: name.to_string(),
            detail,
        };
        self.ctx
            .recorder
            .record(now_ns(), "nemesis", OpKind::Info, value, None);
    }

    /// Whether this hit of `point` fires the armed action.
    fn fires(&self, point: &str) -> Option<FaultPointAction> {
        let (armed, hit, action) = armed(&self.ctx)?;
        let mut shared = self.ctx.shared();
        if armed != point || shared.fired {
            return None;
        }
        let n = shared.point_hits.entry(point.to_string()).or_default();
        *n += 1;
        if *n != hit {
            return None;
        }
        shared.fired = true;
        Some(action)
    }

    /// What the armed point did when it fired, for its effect: `mid-insert fired: crash
    /// worker-0, restart after 3000 ms`.
    fn fired_text(&self, point: &str, action: FaultPointAction) -> String {
        let spec = self.ctx.spec.fault_point.as_ref().expect("armed");
        let what = match action {
            FaultPointAction::Crash => format!(
                "crash {}, restart after {} ms",
                self.worker, spec.restart_after_ms
            ),
            FaultPointAction::Pause => format!("stall {} for {} ms", self.worker, spec.stall_ms),
            FaultPointAction::CrashClickhouse => format!(
                "crash clickhouse within {} ms, restart after {} ms",
                spec.kill_after_ms_max.max(1),
                spec.restart_after_ms
            ),
        };
        format!("{point} fired: {what}")
    }

    fn node(&self, name: &str) -> madsim::task::NodeId {
        self.ctx.shared().nodes[name]
    }

    async fn crash_worker(&self, point: &str) {
        let spec = self.ctx.spec.fault_point.clone().expect("armed");
        let (worker, supervisor) = (self.node(&self.worker), self.node("fault-supervisor"));
        self.fault(
            "kill",
            format!("target=[{}] fault-point={point}", self.worker),
        );
        let (ctx, name) = (self.ctx.clone(), self.worker.clone());
        let handle = Handle::current();
        let node = handle.get_node(supervisor).expect("supervisor node");
        node.spawn(async move {
            Handle::current().kill(worker);
            redelivery_config(&ctx);
            madsim::time::sleep(Duration::from_millis(spec.restart_after_ms)).await;
            Handle::current().restart(worker);
            let value = Value::Fault {
                name: "restart".into(),
                detail: format!("target=[{name}]"),
            };
            ctx.recorder
                .record(now_ns(), "nemesis", OpKind::Info, value, None);
        });
        std::future::pending::<()>().await;
    }

    async fn pause_worker(&self, point: &str) {
        let spec = self.ctx.spec.fault_point.clone().expect("armed");
        let (worker, supervisor) = (self.node(&self.worker), self.node("fault-supervisor"));
        self.fault(
            "pause",
            format!("target=[{}] fault-point={point}", self.worker),
        );
        let (ctx, name) = (self.ctx.clone(), self.worker.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let node = Handle::current()
            .get_node(supervisor)
            .expect("supervisor node");
        node.spawn(async move {
            Handle::current().pause(worker);
            let _ = tx.send(());
            madsim::time::sleep(Duration::from_millis(spec.stall_ms)).await;
            Handle::current().resume(worker);
            let value = Value::Fault {
                name: "resume".into(),
                detail: format!("target=[{name}]"),
            };
            ctx.recorder
                .record(now_ns(), "nemesis", OpKind::Info, value, None);
        });
        let _ = rx.await;
    }

    fn crash_clickhouse(&self, point: &str) {
        let spec = self.ctx.spec.fault_point.clone().expect("armed");
        let (clickhouse, supervisor) = (self.node("clickhouse"), self.node("fault-supervisor"));
        let after_ms = madsim::rand::thread_rng().gen_range(1..=spec.kill_after_ms_max.max(1));
        let detail = format!("target=[clickhouse] fault-point={point} after_ms={after_ms}");
        let ctx = self.ctx.clone();
        let node = Handle::current()
            .get_node(supervisor)
            .expect("supervisor node");
        node.spawn(async move {
            madsim::time::sleep(Duration::from_millis(after_ms)).await;
            Handle::current().kill(clickhouse);
            let value = Value::Fault {
                name: "kill".into(),
                detail,
            };
            ctx.recorder
                .record(now_ns(), "nemesis", OpKind::Info, value, None);
            madsim::time::sleep(Duration::from_millis(spec.restart_after_ms)).await;
            Handle::current().restart(clickhouse);
            let value = Value::Fault {
                name: "restart".into(),
                detail: "target=[clickhouse]".into(),
            };
            ctx.recorder
                .record(now_ns(), "nemesis", OpKind::Info, value, None);
        });
    }
}

#[async_trait]
impl SinkHooks for Hooks {
    async fn fault_point(&self, point: &'static str) {
        let Some(action) = self.fires(point) else {
            return;
        };
        crate::mark!(&format!("fault-point-fired:{point}"));
        effects::record(
            kind::FAULT_POINT,
            &self.worker,
            self.fired_text(point, action),
        );
        match action {
            FaultPointAction::Crash => self.crash_worker(point).await,
            FaultPointAction::Pause => self.pause_worker(point).await,
            FaultPointAction::CrashClickhouse => self.crash_clickhouse(point),
        }
    }

    fn inserting(&self, tp: &TopicPartition, rows: &[serde_json::Value]) {
        self.writes.invoked(&row_refs(tp, rows));
    }

    fn inserted(
        &self,
        tp: &TopicPartition,
        rows: &[serde_json::Value],
        result: &Result<(), ChClientError>,
    ) {
        let (kind, error) = completion(result, ChClientError::is_ambiguous);
        self.writes.completed(&row_refs(tp, rows), kind, error);
    }
}

/// The rows of an insert as the history knows them: the id from the row's `name`
/// (`r<id>`, `u64::MAX` if it has none), the partition it was read from, offset unknown.
fn row_refs(tp: &TopicPartition, rows: &[serde_json::Value]) -> Vec<RecordRef> {
    rows.iter()
        .map(|r| {
            let name = r.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let id = name.trim_start_matches('r').parse().unwrap_or(u64::MAX);
            RecordRef {
                id,
                key: None,
                tp: tp.clone(),
                offset: -1,
            }
        })
        .collect()
}

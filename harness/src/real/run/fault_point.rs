//! `[sink.fault_point]` on the real backend: the ClickHouse sink's step-boundary fault
//! points ([`FAULT_POINTS`]) as real crashes of a sink-task process.
//!
//! # How it differs from the simulation
//! - Only action `crash` at a named point is run. `enumerate` (a point drawn from the
//!   seed: a real run has none), `pause` and `crash-clickhouse` are simulation-only, and a
//!   scenario that asks for them is skipped with the reason ([`unsupported`]).
//! - Hits are counted per process, not over every task: the runner arms one process, the
//!   first sink task (`worker-0`), and only its first incarnation (`eosim worker
//!   --arm-fault-point`), so `hit = n` is worker-0's n-th pass through the point and the
//!   restarted worker never fires it again.
//! - The crash is the process ending at once with [`FAULT_POINT_EXIT_CODE`]
//!   (`libc::_exit`: no destructor, no consumer close, no flush of anything but the op
//!   already written), right after it printed the nemesis op the simulated hooks record:
//!   `kill target=[worker-0] fault-point=<point>`. The runner tells that exit from a
//!   FAILED task's (which stays failed) and starts the worker again `restart_after_ms`
//!   later, recording `restart target=[worker-0]`.

use super::worker_spec::{Emit, WorkerSpec};
use crate::client::clickhouse::ChClientError;
use crate::history::{OpKind, Value};
use crate::scenario::clickhouse::{FaultPointAction, FaultPointSpec};
use crate::scenario::Scenario;
use crate::sinks::clickhouse::{SinkHooks, FAULT_POINTS};
use async_trait::async_trait;
use eosim_sim::kafka::TopicPartition;
use std::sync::atomic::{AtomicU64, Ordering};

/// The exit code of a sink-task process that crashed at its armed fault point (distinct
/// from a FAILED task's, [`crate::cli::ExitClass::Crash`]'s 4).
pub const FAULT_POINT_EXIT_CODE: i32 = 86;

/// The process the runner arms: the first sink task.
pub const ARMED_WORKER: &str = "worker-0";

/// The scenario's fault point when the real backend runs it (a crash at a named point).
pub fn spec(scenario: &Scenario) -> Option<&FaultPointSpec> {
    let spec = scenario.sink.as_ref()?.fault_point.as_ref()?;
    (unsupported(spec).is_none()).then_some(spec)
}

/// Why the real backend cannot run `spec`, if it cannot: a skip reason.
pub fn unsupported(spec: &FaultPointSpec) -> Option<String> {
    if spec.point == "enumerate" {
        return Some(
            "skipped: [sink.fault_point] point = \"enumerate\" draws the point from the seed; \
             a real run has no seed (name a point)"
                .into(),
        );
    }
    if !FAULT_POINTS.contains(&spec.point.as_str()) {
        return Some(format!(
            "skipped: [sink.fault_point] point {:?} is none of {}",
            spec.point,
            FAULT_POINTS.join(", ")
        ));
    }
    match spec.action {
        FaultPointAction::Crash => None,
        FaultPointAction::Pause | FaultPointAction::CrashClickhouse => Some(
            "skipped: [sink.fault_point] action pause and crash-clickhouse are \
             simulation-only; the real backend runs crash"
                .into(),
        ),
    }
}

/// The armed point of one sink-task process: counts its hits and crashes the process at
/// the armed one.
pub struct RealHooks {
    worker: String,
    nemesis: Emit,
    armed: Option<(String, u64)>,
    hits: AtomicU64,
}

impl RealHooks {
    /// The hooks of the process `spec` describes: armed when the runner passed
    /// `--arm-fault-point` and the scenario names a point the real backend runs.
    pub fn new(spec: &WorkerSpec) -> Self {
        let armed = if spec.arm_fault_point {
            self::spec(&spec.scenario).map(|f| (f.point.clone(), f.hit))
        } else {
            None
        };
        Self {
            worker: spec.name.clone(),
            nemesis: Emit {
                name: "nemesis".into(),
                epoch_ns: spec.epoch_ns,
            },
            armed,
            hits: AtomicU64::new(0),
        }
    }

    /// Whether this pass through `point` is the armed hit.
    fn fires(&self, point: &str) -> bool {
        let Some((armed, hit)) = &self.armed else {
            return false;
        };
        armed == point && self.hits.fetch_add(1, Ordering::SeqCst) + 1 == *hit
    }
}

#[async_trait]
impl SinkHooks for RealHooks {
    async fn fault_point(&self, point: &'static str) {
        if !self.fires(point) {
            return;
        }
        let value = Value::Fault {
            name: "kill".into(),
            detail: format!("target=[{}] fault-point={point}", self.worker),
        };
        // Printed and flushed before the exit: the runner reads it from the pipe.
        self.nemesis.op(OpKind::Info, value, None);
        eprintln!(
            "{}: fault point {point} fired; exiting at once",
            self.worker
        );
        // SAFETY: `_exit` ends the process without running anything of it: the crash.
        unsafe { libc::_exit(FAULT_POINT_EXIT_CODE) }
    }

    /// Nothing: the real run reads the target's rows from ClickHouse after the drain.
    fn inserting(&self, _tp: &TopicPartition, _rows: &[serde_json::Value]) {}

    /// Nothing, as for `inserting`.
    fn inserted(
        &self,
        _tp: &TopicPartition,
        _rows: &[serde_json::Value],
        _result: &Result<(), ChClientError>,
    ) {
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(text: &str) -> FaultPointSpec {
        toml::from_str(text).expect("fault point parses")
    }

    #[test]
    fn only_a_crash_at_a_named_point_runs() {
        assert_eq!(unsupported(&point("point = \"mid-insert\"")), None);
        let e = unsupported(&point("point = \"enumerate\"")).unwrap();
        assert!(e.contains("enumerate") && e.contains("no seed"), "{e}");
        let e = unsupported(&point("point = \"mid-insert\"\naction = \"pause\"")).unwrap();
        assert!(e.contains("simulation-only"), "{e}");
        let e = unsupported(&point("point = \"nowhere\"")).unwrap();
        assert!(e.contains("after-after"), "{e}");
    }

    fn hooks(arm: bool, hit: u64) -> RealHooks {
        RealHooks {
            worker: ARMED_WORKER.into(),
            nemesis: Emit {
                name: "nemesis".into(),
                epoch_ns: 0,
            },
            armed: arm.then(|| ("between-insert-and-after".to_string(), hit)),
            hits: AtomicU64::new(0),
        }
    }

    #[test]
    fn the_armed_hit_of_the_armed_point_fires_once() {
        let h = hooks(true, 2);
        assert!(!h.fires("before-before"));
        assert!(!h.fires("between-insert-and-after"));
        assert!(h.fires("between-insert-and-after"));
        assert!(!h.fires("between-insert-and-after"));
        let unarmed = hooks(false, 1);
        assert!(!unarmed.fires("between-insert-and-after"));
    }
}

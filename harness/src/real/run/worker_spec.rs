//! What every process of a real run shares with the runner: its role, its arguments
//! ([`WorkerSpec`]), the op lines it prints ([`Emit`]) and the clock they are timed by. The
//! per-role loops (`worker`, `connect_task`, `source_instance`, `streams_instance`,
//! `copier_instance`, `fault_point`) build on it; it builds on none of them.

use crate::client::real::wall_clock;
use crate::history::{Op, OpKind, RecordRef, Value};
use crate::real::clock::run_clock_ns;
use crate::scenario::Scenario;
use std::io::Write;
use std::path::PathBuf;

pub use crate::scenario::consumer::SINK_GROUP;

/// Which process of the pipeline a worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `kafka-consume`: sends its id range, then exits 0.
    Producer,
    /// `kafka-consume`: polls, writes into the sink and commits, until killed.
    Consumer,
    /// `connect-jdbc`: sends its range of the scenario's change events
    /// ([`crate::scenario::cdc_events`]), then exits 0.
    CdcProducer,
    /// `connect-jdbc`: one Connect sink task ([`super::connect_task`]) until killed; exits
    /// non-zero when the task fails.
    SinkTask,
    /// `streams-count`: one Streams instance ([`super::streams_instance`]) until killed.
    Streams,
    /// `transactional-copy`: one copier ([`super::copier_instance`]) until killed.
    Copier,
    /// `connect-source`: one Connect source task ([`super::source_instance`]) until
    /// killed; exits non-zero when the task fails.
    SourceTask,
}

impl Role {
    /// The name `eosim worker --role` takes.
    pub fn name(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Consumer => "consumer",
            Role::CdcProducer => "cdc-producer",
            Role::SinkTask => "sink-task",
            Role::Streams => "streams",
            Role::Copier => "copier",
            Role::SourceTask => "source-task",
        }
    }

    /// The role named `name`.
    ///
    /// # Errors
    /// An unknown name, with the known ones.
    pub fn parse(name: &str) -> Result<Self, String> {
        [
            Role::Producer,
            Role::Consumer,
            Role::CdcProducer,
            Role::SinkTask,
            Role::Streams,
            Role::Copier,
            Role::SourceTask,
        ]
        .into_iter()
        .find(|r| r.name() == name)
        .ok_or(format!(
            "--role {name:?}: expected producer, consumer, cdc-producer, sink-task, streams, \
             copier or source-task"
        ))
    }

    /// Whether the role runs a Connect task (sink or source): started when the operator
    /// creates the connector, FAILED for good when its task fails (unless the operator
    /// restarts failed tasks).
    pub fn is_connect_task(self) -> bool {
        matches!(self, Role::SinkTask | Role::SourceTask)
    }

    /// Whether the role sends an id range and then ends.
    pub fn is_producer(self) -> bool {
        matches!(self, Role::Producer | Role::CdcProducer)
    }
}

/// One line of a sink file: a batch, made durable at once.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SinkBatch {
    /// When it was written, ns since the run's epoch: orders batches across files.
    pub time_ns: u64,
    /// Its rows, in order.
    pub rows: Vec<RecordRef>,
}

/// Everything a worker process needs.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Producer or consumer.
    pub role: Role,
    /// The scenario (workload settings, topic).
    pub scenario: Scenario,
    /// Process name in the history (`producer-0`, `consumer-1`).
    pub name: String,
    /// `bootstrap.servers`.
    pub bootstrap: String,
    /// The sink's directory (consumers append to `<sink>/<name>.jsonl`).
    pub sink_dir: PathBuf,
    /// The run's epoch on the run's clock ([`run_clock_ns`], `CLOCK_MONOTONIC`).
    pub epoch_ns: u64,
    /// First id to send (producers).
    pub id_from: u64,
    /// One past the last id to send (producers).
    pub id_to: u64,
    /// Connector keys set over the scenario's `[connector]` (where the real services are,
    /// such as `connection.url`).
    pub connector_sets: Vec<(String, String)>,
    /// Whether this process arms the scenario's `[sink.fault_point]` (sink tasks; the
    /// runner sets it on the first incarnation of `worker-0` only, see
    /// [`super::fault_point`]).
    pub arm_fault_point: bool,
}

/// Prints ops as JSON lines on stdout, each flushed at once (a kill loses none printed).
#[derive(Debug, Clone)]
pub struct Emit {
    /// The process name ops carry.
    pub name: String,
    /// The run's epoch on the run's clock ([`run_clock_ns`]).
    pub epoch_ns: u64,
}

impl Emit {
    /// ns since the run's epoch, on the run's clock (a clock jump does not move it).
    pub fn now_ns(&self) -> u64 {
        run_clock_ns().saturating_sub(self.epoch_ns)
    }

    /// Prints one op of this process, timed now; first, when a record of this process was
    /// stamped with a new clock offset since its last op (a clock jump,
    /// [`wall_clock::take_moved`]), a `clock-jump` effect on it that says by how much.
    pub fn op(&self, kind: OpKind, value: Value, error: Option<String>) {
        if let Some((was_ms, now_ms)) = wall_clock::take_moved() {
            let detail = format!(
                "a record of {} stamped with its wall clock {now_ms:+} ms from the true time \
                 (was {was_ms:+} ms)",
                self.name
            );
            let effect = Value::Effect {
                kind: eosim_sim::effects::kind::CLOCK_JUMP.into(),
                detail,
            };
            self.print(OpKind::Info, effect, None);
        }
        self.print(kind, value, error);
    }

    fn print(&self, kind: OpKind, value: Value, error: Option<String>) {
        let op = Op {
            index: 0,
            time_ns: self.now_ns(),
            process: self.name.clone(),
            kind,
            value,
            error,
        };
        let line = serde_json::to_string(&op).expect("ops serialize");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
}

/// The seed of the change events of a real run: every producer process (and each
/// restart) draws the same list and sends its own range of it.
pub const REAL_EVENTS_SEED: u64 = 1;

//! The real runner: a scenario file run once against real Kafka, with real faults, judged
//! by the same checkers and written into the same report as a simulated run.
//!
//! # Phases
//! 1. Brokers: `native` starts `[cluster] brokers` (1 or 3) KRaft nodes in a temporary
//!    directory; `external` uses `--bootstrap-servers`; `testcontainers` is reported as
//!    skipped (no Docker daemon here, and not implemented yet either way).
//! 2. The topic with the scenario's settings; the pipeline's processes as `eosim worker`
//!    children ([`workers`]), each in its own process group.
//! 3. Faults: the explicit `[[faults.schedule]]` until `faults.until_ms`, as real faults
//!    ([`faults`]): SIGKILL/restart and SIGSTOP/SIGCONT of `broker-N`, `producer-i`,
//!    `consumer-i`; `kill-leader` through the partition's current leader. Network faults
//!    (`partition`, `clog`, `messages`), machine crashes and swarms are not injected in this
//!    backend: each is named in the result's notes.
//! 4. Heal and drain: every killed process restarted, every paused one resumed; the
//!    pipeline must finish (producers done, the group's committed offsets at every high
//!    watermark) within `drain.time_s_max` s of wall time, else the run is stalled.
//! 5. Final state: the log (read_uncommitted, offset 0 to the high watermark), the group's
//!    committed offsets, the sink's files; then [`check_all`](crate::checker::check_all).
//!
//! A real run is one run, not a seed: it is reported as one seed (`seed 0`), is not
//! reproducible, and its history carries wall-clock times since the run's start.

pub mod clickhouse_sink;
pub mod cluster;
pub mod faults;
pub mod measure;
pub mod result;
pub mod worker;
pub mod workers;

use crate::history::{History, Op, OpKind, RecordRef, Value};
use crate::real::backend::Backend;
use crate::real::provision::Kafka;
use crate::scenario::Scenario;
use cluster::{Brokers, Probe};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use worker::{unix_ns, Role, SinkBatch};
use workers::{Worker, WorkerEnv};

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where the services come from.
    pub backend: Backend,
    /// `bootstrap.servers` of a user's cluster (`external` only).
    pub bootstrap_servers: Option<String>,
    /// The `eosim` binary the workers run.
    pub exe: PathBuf,
    /// This scenario's directory in the report: `history.jsonl`, `sink/`, `logs/`.
    pub dir: PathBuf,
    /// Print one line per fault as it happens.
    pub verbose: bool,
}

/// What a real run produced.
#[derive(Debug, Clone, Default)]
pub struct RealOutcome {
    /// The merged history (workers' ops by time, the nemesis', then the final state).
    pub history: History,
    /// Why the run was not run at all (a backend that does not answer here).
    pub skipped: Option<String>,
    /// Why the pipeline did not finish within the drain bound.
    pub stalled: Option<String>,
    /// Why the run could not go on (a service that did not come up, with its log file).
    pub crashed: Option<String>,
    /// Unsupported faults, worker restarts, torn sink lines: what a reader should know.
    pub notes: Vec<String>,
    /// Wall time of the whole run, s.
    pub wall_time_s: f64,
}

/// A run in progress: the brokers, the workers and what they recorded.
pub struct Run<'a> {
    scenario: &'a Scenario,
    brokers: Brokers,
    env: WorkerEnv,
    workers: Vec<Worker>,
    notes: Vec<String>,
    verbose: bool,
}

/// Runs `scenario` (read from `path`) once against real services.
pub fn run_real(scenario: &Scenario, path: &Path, options: &RunOptions) -> RealOutcome {
    let started = Instant::now();
    let mut outcome = match prepare(scenario, options) {
        Err(skipped) => RealOutcome {
            skipped: Some(skipped),
            ..RealOutcome::default()
        },
        Ok(()) => match start(scenario, path, options) {
            Err(crashed) => RealOutcome {
                crashed: Some(crashed),
                ..RealOutcome::default()
            },
            Ok(mut run) => run.execute(),
        },
    };
    outcome.wall_time_s = started.elapsed().as_secs_f64();
    outcome
}

/// Whether this backend and scenario can run here; `Err` is the skip reason.
fn prepare(scenario: &Scenario, options: &RunOptions) -> Result<(), String> {
    match options.backend {
        Backend::Testcontainers => {
            options
                .backend
                .check_available()
                .map_err(|e| e.to_string())?;
            Err(
                "skipped: the testcontainers backend is not implemented yet; run with \
                 --backend native"
                    .into(),
            )
        }
        Backend::External if options.bootstrap_servers.is_none() => {
            Err("skipped: --backend external needs --bootstrap-servers".into())
        }
        Backend::Native if !matches!(scenario.cluster.brokers, 1 | 3) => Err(format!(
            "skipped: the native backend runs 1 or 3 brokers, the scenario asks for {}",
            scenario.cluster.brokers
        )),
        _ => Ok(()),
    }
}

/// Brokers, topic, directories and workers, started.
fn start<'a>(scenario: &'a Scenario, path: &Path, options: &RunOptions) -> Result<Run<'a>, String> {
    let brokers = match &options.bootstrap_servers {
        Some(b) if options.backend == Backend::External => Brokers::External(b.clone()),
        _ => {
            let dir = tempfile::Builder::new()
                .prefix("eosim-run-kafka-")
                .tempdir()
                .map_err(|e| format!("kafka: temporary directory: {e}"))?;
            let kafka =
                Kafka::start(dir.path(), scenario.cluster.brokers).map_err(|e| e.to_string())?;
            Brokers::Native {
                kafka,
                down: Default::default(),
                paused: Default::default(),
                dir,
            }
        }
    };
    let bootstrap = brokers.bootstrap();
    cluster::create_topic(&bootstrap, scenario)?;
    let (sink_dir, log_dir) = (options.dir.join("sink"), options.dir.join("logs"));
    for d in [&sink_dir, &log_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let env = WorkerEnv {
        exe: options.exe.clone(),
        scenario_path: path.to_path_buf(),
        bootstrap,
        sink_dir,
        log_dir,
        epoch_ns: unix_ns(),
        ops: Arc::new(Mutex::new(Vec::new())),
    };
    let mut run = Run {
        scenario,
        brokers,
        env,
        workers: Vec::new(),
        notes: Vec::new(),
        verbose: options.verbose,
    };
    run.spawn_workers()?;
    Ok(run)
}

impl Run<'_> {
    fn spawn_workers(&mut self) -> Result<(), String> {
        let w = &self.scenario.workload;
        let producers = u64::from(w.producers.max(1));
        for i in 0..w.producers {
            let i = u64::from(i);
            let ids = (i * w.records / producers)..((i + 1) * w.records / producers);
            self.workers
                .push(Worker::new(&format!("producer-{i}"), Role::Producer, ids));
        }
        for i in 0..w.consumers {
            self.workers
                .push(Worker::new(&format!("consumer-{i}"), Role::Consumer, 0..0));
        }
        for worker in &mut self.workers {
            worker.start(&self.env)?;
        }
        Ok(())
    }

    /// ns since the run's epoch.
    fn now_ns(&self) -> u64 {
        unix_ns().saturating_sub(self.env.epoch_ns)
    }

    /// Records a nemesis op (kind `info`, as the simulation does) and prints it.
    fn record_fault(&mut self, name: &str, detail: String) {
        let t = self.now_ns();
        if self.verbose {
            println!("t={:.3}s nemesis {name} {detail}", t as f64 / 1e9);
        }
        let value = Value::Fault {
            name: name.to_string(),
            detail,
        };
        self.push(t, "nemesis", value);
    }

    fn push(&self, time_ns: u64, process: &str, value: Value) {
        let op = Op {
            index: 0,
            time_ns,
            process: process.into(),
            kind: OpKind::Info,
            value,
            error: None,
        };
        self.env.ops.lock().expect("ops lock").push(op);
    }

    fn execute(&mut self) -> RealOutcome {
        self.run_faults();
        self.heal();
        let t = self.now_ns();
        self.push(t, "nemesis", Value::Drain);
        let stalled = self.drain();
        for w in &mut self.workers {
            w.kill(&self.env);
        }
        let mut history = self.merged_history();
        let crashed = self.record_final(&mut history).err();
        self.note_bad_lines();
        RealOutcome {
            history,
            skipped: None,
            stalled,
            crashed,
            notes: std::mem::take(&mut self.notes),
            wall_time_s: 0.0,
        }
    }

    /// The workers' and the nemesis' ops by time (stable), numbered.
    fn merged_history(&self) -> History {
        let mut ops = std::mem::take(&mut *self.env.ops.lock().expect("ops lock"));
        ops.sort_by_key(|op| op.time_ns);
        let mut history = History::default();
        for op in ops {
            history.push(op.time_ns, &op.process, op.kind, op.value, op.error);
        }
        history
    }

    /// Waits until the producers are done and the group committed up to every high
    /// watermark; `Some(reason)` past `drain.time_s_max`.
    fn drain(&mut self) -> Option<String> {
        let bound = Duration::from_secs(self.scenario.drain.time_s_max);
        let started = Instant::now();
        let probe = match Probe::new(&self.env.bootstrap, self.scenario) {
            Ok(p) => p,
            Err(e) => return Some(e),
        };
        loop {
            self.restart_exited();
            let lag = self.lag(&probe);
            if lag.is_empty() {
                return None;
            }
            if started.elapsed() >= bound {
                return Some(format!(
                    "no convergence after {} s wall time: {}",
                    self.scenario.drain.time_s_max,
                    lag.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Producers not done, and partitions whose committed offset is behind the high
    /// watermark.
    fn lag(&mut self, probe: &Probe) -> Vec<String> {
        let mut lag: Vec<String> = self
            .workers
            .iter()
            .filter(|w| w.role == Role::Producer && w.has_work())
            .map(|w| format!("{} not done", w.name))
            .collect();
        let (high, committed) = match (probe.high_watermarks(), probe.committed()) {
            (Ok(h), Ok(c)) => (h, c.into_iter().collect::<BTreeMap<_, _>>()),
            (Err(e), _) | (_, Err(e)) => return vec![e],
        };
        for (tp, hw) in high {
            let c = committed.get(&tp).copied().unwrap_or(0);
            if c < hw {
                lag.push(format!("{tp}: committed {c} < high watermark {hw}"));
            }
        }
        lag
    }

    /// Reaps workers that ended by themselves: a producer that finished is done; any
    /// other exit is noted and the worker started again (as the heal phase would).
    fn restart_exited(&mut self) {
        let mut restarted = Vec::new();
        for w in &mut self.workers {
            let Some(status) = w.exit_status() else {
                continue;
            };
            w.reap(&self.env);
            let finished = w.role == Role::Producer && status.success();
            if finished {
                w.mark_done();
                continue;
            }
            restarted.push(format!(
                "{} exited by itself ({status}) and was started again (log: {})",
                w.name,
                w.log_path(&self.env).display()
            ));
            if w.has_work() {
                if let Err(e) = w.start(&self.env) {
                    restarted.push(e);
                }
            }
        }
        self.notes.extend(restarted);
    }

    /// The final state, as `final` ops at the time the drain ended.
    fn record_final(&mut self, history: &mut History) -> Result<(), String> {
        let probe = Probe::new(&self.env.bootstrap, self.scenario)?;
        let high = probe.high_watermarks()?;
        let log = cluster::read_log(&self.env.bootstrap, &high, 30_000)?;
        let offsets = probe.committed()?;
        let rows = self.read_sink()?;
        let t = self.now_ns();
        for (tp, records) in log {
            history.push(
                t,
                "final",
                OpKind::Ok,
                Value::LogState { tp, records },
                None,
            );
        }
        history.push(t, "final", OpKind::Ok, Value::SinkState { rows }, None);
        history.push(
            t,
            "final",
            OpKind::Ok,
            Value::CommittedOffsets { offsets },
            None,
        );
        Ok(())
    }

    /// Every durable batch of every consumer's sink file, in write order (the batches'
    /// times; the files share one clock); a torn last line (a kill inside a write) is
    /// skipped and noted.
    fn read_sink(&mut self) -> Result<Vec<RecordRef>, String> {
        let dir = &self.env.sink_dir;
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("sink {}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        let mut batches = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("sink {}: {e}", file.display()))?;
            for (n, line) in text.lines().enumerate() {
                match serde_json::from_str::<SinkBatch>(line) {
                    Ok(batch) => batches.push(batch),
                    Err(_) => self.notes.push(format!(
                        "sink {} line {}: torn write skipped (not durable)",
                        file.display(),
                        n + 1
                    )),
                }
            }
        }
        batches.sort_by_key(|b| b.time_ns);
        Ok(batches.into_iter().flat_map(|b| b.rows).collect())
    }

    fn note_bad_lines(&mut self) {
        for w in &self.workers {
            let bad = w.bad_lines.lock().expect("bad lines lock");
            if !bad.is_empty() {
                self.notes.push(format!(
                    "{}: {} output line(s) were not ops (first: {:?})",
                    w.name,
                    bad.len(),
                    bad[0]
                ));
            }
        }
    }
}

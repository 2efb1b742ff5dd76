//! The consumer of pipeline `kafka-consume`: poll, write the batch into a sink outside the
//! process, commit, written once over the [`Consumer`] trait so that the simulated consumer
//! (`workload::kafka_consume`, under `--cfg madsim`) and a real process
//! (`real::run::worker`) run the same loop.
//!
//! Where the loop runs is a [`SinkHost`]: where its ops go (the history), how a batch is
//! made durable in the sink (the simulation's store outside the nodes; a real process's
//! fsync'ed file), and where the errors of a stall's reason go.
//!
//! # Loop ([`run`])
//! Subscribe to the input topic, then per non-empty poll (recorded `poll` ok):
//! - `enable.auto.commit = true` (`[consumer]`): write the batch; the positions after it are
//!   committed by a later poll once `auto.commit.interval.ms` has passed since the last
//!   auto commit, at the top of that poll, before its records are returned (Java's
//!   `ConsumerCoordinator.maybeAutoCommitOffsetsAsync`, called from `KafkaConsumer.poll`):
//!   a crash in between replays what was written (at-least-once, with synchronous
//!   processing).
//! - else `[workload] commit = "after-processing"`: write, then commit (a crash replays);
//!   `"before-processing"`: commit, then write if the commit took effect (a crash skips:
//!   at-most-once).
//!
//! A write waits `[workload] sink_write_ms` first: a kill in that window loses the batch, as
//! a crash before a database commit would. Each write is recorded `write` ok once durable;
//! each commit as `commit` invoke, then ok, fail, or info when its outcome is unknown.

use crate::client::{next_offsets, Consumer};
use crate::history::refs::record_ref;
use crate::history::{OpKind, RecordRef, Value};
use crate::scenario::consumer::ConsumerSpec;
use crate::scenario::{CommitMode, Scenario};
use async_trait::async_trait;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;
use std::time::Duration;

/// Pause between failed subscribes, ms.
const SUBSCRIBE_RETRY_MS: u64 = 500;
/// One poll, and the pause after a failed one, ms.
const POLL_MS: u64 = 200;

/// Where a sink consumer runs: the simulation or a real process.
#[async_trait]
pub trait SinkHost: Send + Sync {
    /// Records an op of the consumer.
    fn record(&self, kind: OpKind, value: Value, error: Option<String>);

    /// Makes `rows` durable in the sink, in order.
    ///
    /// # Errors
    /// A text when the sink cannot be written (the loop ends with it: nothing is lost
    /// silently).
    async fn write(&mut self, rows: &[RecordRef]) -> Result<(), String>;

    /// A poll failed with `error` (kept as a stall's reason, or logged).
    fn poll_failed(&self, error: &str);

    /// A commit failed with `error` (kept as a stall's reason, or logged).
    fn commit_failed(&self, error: &str);
}

/// `enable.auto.commit`: the positions of everything polls returned, committed from the
/// next poll once `auto.commit.interval.ms` has passed since the last auto commit (Java's
/// `ConsumerCoordinator.maybeAutoCommitOffsetsAsync`, called at the top of `poll`).
struct AutoCommit {
    interval: Option<Duration>,
    last: tokio::time::Instant,
    consumed: BTreeMap<TopicPartition, Offset>,
}

impl AutoCommit {
    fn new(spec: &ConsumerSpec) -> Self {
        Self {
            interval: spec
                .enable_auto_commit
                .then(|| Duration::from_millis(spec.auto_commit_interval_ms)),
            last: tokio::time::Instant::now(),
            consumed: BTreeMap::new(),
        }
    }

    fn enabled(&self) -> bool {
        self.interval.is_some()
    }

    /// Positions after a poll's records.
    fn consumed(&mut self, offsets: Vec<(TopicPartition, Offset)>) {
        for (tp, next) in offsets {
            let entry = self.consumed.entry(tp).or_insert(next);
            *entry = (*entry).max(next);
        }
    }

    /// The offsets to auto-commit now, if the interval has passed and there are any.
    fn due(&mut self) -> Option<Vec<(TopicPartition, Offset)>> {
        let interval = self.interval?;
        if self.consumed.is_empty() || self.last.elapsed() < interval {
            return None;
        }
        self.last = tokio::time::Instant::now();
        crate::mark!("consumer:auto-commit");
        Some(std::mem::take(&mut self.consumed).into_iter().collect())
    }
}

/// Runs the consumer of `scenario` until its process ends (see the module docs). The
/// consumer was built with the scenario's sink consumer settings
/// ([`Scenario::sink_consumer_config`]); `[consumer] "enable.auto.commit"` is carried out
/// here, as Java's consumer carries it out inside `poll`, so the client itself never
/// commits on its own.
///
/// # Errors
/// A sink write that failed ([`SinkHost::write`]).
pub async fn run<H: SinkHost, C: Consumer>(
    host: &mut H,
    mut consumer: C,
    scenario: &Scenario,
) -> Result<(), String> {
    let topics = vec![scenario.topic.name.clone()];
    while consumer.subscribe(&topics).await.is_err() {
        tokio::time::sleep(Duration::from_millis(SUBSCRIBE_RETRY_MS)).await;
    }
    let mut auto = AutoCommit::new(&scenario.consumer);
    let write_wait = Duration::from_millis(scenario.workload.sink_write_ms);
    loop {
        if let Some(offsets) = auto.due() {
            commit(host, &mut consumer, offsets).await;
        }
        let records = match consumer.poll(Duration::from_millis(POLL_MS)).await {
            Ok(records) => records,
            Err(e) => {
                host.poll_failed(&e.to_string());
                tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        let rows: Vec<RecordRef> = records.iter().map(record_ref).collect();
        let poll = Value::Poll {
            records: rows.clone(),
        };
        host.record(OpKind::Ok, poll, None);
        let offsets = next_offsets(&records);
        if auto.enabled() {
            write(host, rows, write_wait).await?;
            auto.consumed(offsets);
            continue;
        }
        match scenario.workload.commit {
            CommitMode::AfterProcessing => {
                write(host, rows, write_wait).await?;
                commit(host, &mut consumer, offsets).await;
            }
            CommitMode::BeforeProcessing => {
                if commit(host, &mut consumer, offsets).await {
                    write(host, rows, write_wait).await?;
                }
            }
        }
    }
}

/// Waits `wait` (the window in which a kill loses the batch), makes `rows` durable and
/// records the `write`.
async fn write<H: SinkHost>(
    host: &mut H,
    rows: Vec<RecordRef>,
    wait: Duration,
) -> Result<(), String> {
    tokio::time::sleep(wait).await;
    host.write(&rows).await?;
    host.record(OpKind::Ok, Value::Write { rows }, None);
    Ok(())
}

/// Commits and records it; true when the commit certainly took effect.
async fn commit<H: SinkHost>(
    host: &H,
    consumer: &mut impl Consumer,
    offsets: Vec<(TopicPartition, Offset)>,
) -> bool {
    let invoke = Value::Commit {
        offsets: offsets.clone(),
    };
    host.record(OpKind::Invoke, invoke, None);
    let result = consumer.commit(&offsets).await;
    let (kind, error) = match &result {
        Ok(()) => (OpKind::Ok, None),
        Err(e) if e.is_ambiguous() => (OpKind::Info, Some(e.to_string())),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    };
    if let Some(e) = &error {
        host.commit_failed(e);
    }
    host.record(kind, Value::Commit { offsets }, error);
    result.is_ok()
}

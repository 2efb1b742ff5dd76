//! STAND-IN for the Connect worker (branch `connect`): the smallest loop that runs one
//! sink task the way `WorkerSinkTask` does (poll, convert, put, pre_commit, commit). When
//! the worker lands, `task_process` becomes "start a worker with this connector".

use super::hooks::Hooks;
use super::{target_table, Context};
use crate::client::sim::clickhouse::SimClickHouse;
use crate::client::sim::conn::Connection;
use crate::client::sim::consumer::SimConsumer;
use crate::client::{AutoOffsetReset, ConsumedRecord, Consumer, ConsumerConfig};
use crate::connect::task::{ConnectError, ErrantRecordReporter, SinkRecord, SinkTask};
use crate::history::{OpKind, RecordRef, Value};
use crate::runner::world::now_ns;
use crate::sinks::clickhouse::{ClickHouseSinkConfig, ClickHouseSinkTask};
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Retries of a `Retriable` put before the batch is given up to a rebalance, and the
/// pause between two, ms.
const PUT_RETRIES_MAX: u32 = 40;
const PUT_RETRY_BACKOFF_MS: u64 = 500;

/// The errant-record reporter: `errors.tolerance=all` sends to the (in-memory)
/// dead-letter queue, `none` fails the task.
struct Reporter {
    ctx: Context,
}

impl ErrantRecordReporter for Reporter {
    fn report(&mut self, record: &SinkRecord, error: &str) -> Result<(), ConnectError> {
        crate::mark!("dlq:record");
        if self.ctx.spec.errors_tolerance != "all" {
            return Err(ConnectError::Fatal(format!("errant record: {error}")));
        }
        let entry = (record.tp.clone(), record.offset, error.to_string());
        self.ctx.shared().dlq.push(entry);
        Ok(())
    }
}

fn props(ctx: &Context) -> BTreeMap<String, String> {
    let spec = &ctx.spec;
    let mut p = BTreeMap::new();
    let mut set = |k: &str, v: String| p.insert(k.to_string(), v);
    set("exactlyOnce", "true".into());
    set("hostname", "clickhouse".into());
    set("port", "8123".into());
    set("errors.tolerance", spec.errors_tolerance.clone());
    set(
        "tolerateStateMismatch",
        spec.tolerate_state_mismatch.to_string(),
    );
    set("variant", spec.variant.name().into());
    if let Some(n) = spec.max_insert_block_size {
        set("max_insert_block_size", n.to_string());
    }
    p
}

async fn consumer_for(ctx: &Context, max_poll_records: usize) -> Option<SimConsumer> {
    let conn = Connection::open(ctx.scenario.cluster.brokers).await.ok()?;
    let spec = &ctx.spec;
    let mut config = ConsumerConfig::new(ctx.group());
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.session_timeout_ms = spec.session_timeout_ms;
    config.heartbeat_interval_ms = (spec.session_timeout_ms / 3).max(100);
    config.max_poll_interval_ms = spec.max_poll_interval_ms;
    config.max_poll_records = max_poll_records;
    config.request_timeout_ms = ctx.scenario.workload.request_timeout_ms;
    Some(SimConsumer::new(conn, config))
}

async fn build(
    ctx: &Context,
    name: &str,
) -> Option<(SimConsumer, ClickHouseSinkTask<SimClickHouse>, usize)> {
    let spec = &ctx.spec;
    let client = SimClickHouse::connect(spec.request_timeout_ms).await.ok()?;
    let incarnation = {
        let mut shared = ctx.shared();
        let n = shared.incarnations.entry(name.to_string()).or_default();
        *n += 1;
        *n
    };
    let batch = match spec.redelivery_batch_records_max {
        Some(n) if incarnation > 1 => n,
        _ => spec.batch_records_max,
    };
    let consumer = consumer_for(ctx, batch).await?;
    let sink_config = ClickHouseSinkConfig::from_props(&props(ctx)).expect("valid props");
    let hooks = Arc::new(Hooks {
        ctx: ctx.clone(),
        worker: name.to_string(),
    });
    let owner = format!("{name}#{incarnation}");
    let task = ClickHouseSinkTask::new(sink_config, client, owner, hooks);
    Some((consumer, task, batch))
}

/// The worker-side state of one running task.
struct Running {
    ctx: Context,
    name: String,
    consumer: SimConsumer,
    task: ClickHouseSinkTask<SimClickHouse>,
    batch_max: usize,
    assigned: Vec<TopicPartition>,
}

/// What a put round asks of the loop.
enum After {
    Commit,
    /// Leave the group and rejoin: the consumer restarts from the committed offsets.
    Rejoin,
    Failed(ConnectError),
}

impl Running {
    async fn subscribe(&mut self) {
        let topics = vec![self.ctx.scenario.topic.name.clone()];
        while self.consumer.subscribe(&topics).await.is_err() {
            madsim::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Drops the consumer's position (records polled but not committed come back) by
    /// rejoining with a fresh consumer.
    async fn rejoin(&mut self) -> bool {
        crate::mark!("task:rejoin");
        self.consumer.close().await;
        let all = std::mem::take(&mut self.assigned);
        let _ = self.task.close(&all).await;
        let Some(c) = consumer_for(&self.ctx, self.batch_max).await else {
            return false;
        };
        self.consumer = c;
        self.subscribe().await;
        true
    }

    /// Calls close/open for what the consumer lost/gained; false when open kept failing.
    async fn rebalance(&mut self) -> bool {
        let now = self.consumer.assignment();
        let lost: Vec<_> = self
            .assigned
            .iter()
            .filter(|tp| !now.contains(tp))
            .cloned()
            .collect();
        let gained: Vec<_> = now
            .iter()
            .filter(|tp| !self.assigned.contains(tp))
            .cloned()
            .collect();
        if !lost.is_empty() {
            let _ = self.task.close(&lost).await;
        }
        self.assigned.retain(|tp| now.contains(tp));
        if gained.is_empty() {
            return true;
        }
        for _ in 0..PUT_RETRIES_MAX {
            if self.task.open(&gained).await.is_ok() {
                self.assigned = now;
                return true;
            }
            madsim::time::sleep(Duration::from_millis(PUT_RETRY_BACKOFF_MS)).await;
        }
        false
    }

    async fn put(&mut self, batch: Vec<SinkRecord>, reporter: &mut Reporter) -> After {
        for _ in 0..PUT_RETRIES_MAX {
            match self.task.put(batch.clone(), reporter).await {
                Err(ConnectError::Retriable(_)) => {
                    crate::mark!("task:put-retriable");
                    madsim::time::sleep(Duration::from_millis(PUT_RETRY_BACKOFF_MS)).await;
                }
                Err(e) => return After::Failed(e),
                Ok(()) if self.task.fenced_partitions().is_empty() => return After::Commit,
                Ok(()) => {
                    crate::mark!("task:fenced");
                    return After::Rejoin;
                }
            }
        }
        crate::mark!("task:put-retries-exhausted");
        After::Rejoin
    }
}

/// One worker node running one task, forever.
pub async fn task_process(ctx: Context, name: String) {
    let start_ms = ctx.spec.start_after_ms;
    let now_ms = now_ns() / 1_000_000;
    if start_ms > now_ms {
        madsim::time::sleep(Duration::from_millis(start_ms - now_ms)).await;
    }
    let Some((consumer, task, batch_max)) = build(&ctx, &name).await else {
        return;
    };
    while task.ensure_tables(target_table(&ctx.spec)).await.is_err() {
        madsim::time::sleep(Duration::from_millis(500)).await;
    }
    let assigned = Vec::new();
    let mut run = Running {
        ctx: ctx.clone(),
        name,
        consumer,
        task,
        batch_max,
        assigned,
    };
    run.subscribe().await;
    let mut reporter = Reporter { ctx: ctx.clone() };
    loop {
        let Ok(records) = run.consumer.poll(Duration::from_millis(200)).await else {
            madsim::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if !run.rebalance().await {
            if !run.rejoin().await {
                return;
            }
            continue;
        }
        if records.is_empty() {
            continue;
        }
        let polled: Vec<RecordRef> = records.iter().map(record_ref).collect();
        ctx.record(&run.name, OpKind::Ok, Value::Poll { records: polled }, None);
        let next = next_offsets(&records);
        let batch = convert(records, &mut reporter);
        match run.put(batch, &mut reporter).await {
            After::Commit => {}
            After::Failed(e) => return fail(&ctx, &run.name, e).await,
            After::Rejoin => {
                // Commit what is durable first, then rejoin.
                if let Ok(offsets) = run.task.pre_commit(&next).await {
                    commit(&ctx, &run.name, &mut run.consumer, offsets).await;
                }
                if !run.rejoin().await {
                    return;
                }
                continue;
            }
        }
        let Ok(offsets) = run.task.pre_commit(&next).await else {
            continue;
        };
        commit(&ctx, &run.name, &mut run.consumer, offsets).await;
    }
}

/// The task is FAILED until its node restarts.
async fn fail(ctx: &Context, name: &str, e: ConnectError) {
    crate::mark!("task:failed");
    ctx.shared().failed.insert(name.to_string(), e.to_string());
    let value = Value::Fault {
        name: "task-failed".into(),
        detail: format!("{name}: {e}"),
    };
    ctx.record(name, OpKind::Info, value, None);
    std::future::pending::<()>().await;
}

async fn commit(
    ctx: &Context,
    name: &str,
    consumer: &mut SimConsumer,
    offsets: BTreeMap<TopicPartition, Offset>,
) {
    if offsets.is_empty() {
        return;
    }
    let offsets: Vec<(TopicPartition, Offset)> = offsets.into_iter().collect();
    ctx.record(
        name,
        OpKind::Invoke,
        Value::Commit {
            offsets: offsets.clone(),
        },
        None,
    );
    let (kind, error) = match consumer.commit(&offsets).await {
        Ok(()) => (OpKind::Ok, None),
        Err(e) if e.is_ambiguous() => (OpKind::Info, Some(e.to_string())),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    };
    ctx.record(name, kind, Value::Commit { offsets }, error);
}

/// `JsonConverter` (schemas.enable=false): a value that is not JSON goes to the DLQ.
fn convert(records: Vec<ConsumedRecord>, reporter: &mut Reporter) -> Vec<SinkRecord> {
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let parse = |b: &Option<bytes::Bytes>| {
            b.as_ref()
                .map(|b| serde_json::from_slice::<serde_json::Value>(b))
        };
        let mut record = SinkRecord {
            tp: r.tp.clone(),
            offset: r.offset,
            key: None,
            value: None,
            headers: r.headers.clone(),
            timestamp_ms: 0,
        };
        match parse(&r.value).transpose() {
            Ok(value) => record.value = value,
            Err(e) => {
                let _ = reporter.report(&record, &format!("converter: {e}"));
                continue;
            }
        }
        record.key = parse(&r.key).and_then(Result::ok);
        out.push(record);
    }
    out
}

fn record_ref(r: &ConsumedRecord) -> RecordRef {
    super::record_ref(&r.tp, r.offset, &r.value)
}

fn next_offsets(records: &[ConsumedRecord]) -> BTreeMap<TopicPartition, Offset> {
    let mut next: BTreeMap<TopicPartition, Offset> = BTreeMap::new();
    for r in records {
        let entry = next.entry(r.tp.clone()).or_insert(r.offset + 1);
        *entry = (*entry).max(r.offset + 1);
    }
    next
}

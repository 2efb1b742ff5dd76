//! What the simulated pipelines share (the conversions of consumed records are
//! `history::refs`, shared with the real tier): the final read_committed view of a
//! partition and the drain's wait for output LSOs ([`LsoGrace`]); and the sends of the
//! input producers: one generated id recorded as invoke then ok / fail / info
//! ([`crate::history::send_outcome`]), awaited or queued in a batching producer ([`crate::client::sends::Sends`]).

use crate::client::sends::Sends;
use crate::client::sim::consumer::drop_aborted;
use crate::client::sim::producer::SimProducer;
use crate::client::{ClientError, Delivery, Producer, ProducerRecord};
use crate::history::{send_completion, send_invoked, OpKind, Value};
use bytes::Bytes;
use eosim_sim::kafka::model::{Cluster, Reply};
use eosim_sim::kafka::{
    FetchPartition, FetchedRecord, Isolation, Offset, Request, Response, TopicPartition,
};
use std::collections::BTreeSet;

/// Reads `tp` from offset 0 as a read_committed consumer would, through the model's Fetch
/// at the partition's leader, with the client's aborted-transaction filter.
///
/// # Errors
/// When the partition has no leader or the leader answers with an error.
pub fn read_committed(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
) -> Result<Vec<FetchedRecord>, String> {
    read_committed_from(cluster, now_ms, tp, 0)
}

/// [`read_committed`] from offset `from` (a log start offset raised by DeleteRecords:
/// reading below it is OFFSET_OUT_OF_RANGE).
///
/// # Errors
/// As [`read_committed`].
pub fn read_committed_from(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    from: Offset,
) -> Result<Vec<FetchedRecord>, String> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let part = fetch_committed(cluster, now_ms, tp, offset, FETCH_MAX_BYTES)?;
        if part.next_fetch_offset <= offset {
            return Ok(out);
        }
        let records = drop_aborted(part.records, &part.aborted);
        out.extend(records.into_iter().filter(|r| r.offset >= offset));
        offset = part.next_fetch_offset;
    }
}

/// Whether a read_committed consumer can read `tp` now: one Fetch from offset 0 of at most
/// one batch (the model, as Kafka, answers at least one batch whatever `max_bytes`) at the
/// partition's leader. Errors are the partition's, not an offset's, so this answers as
/// [`read_committed`] would without reading the whole log (the drain checks call it every
/// 250 ms).
///
/// # Errors
/// As [`read_committed`].
pub fn readable_committed(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
) -> Result<(), String> {
    fetch_committed(cluster, now_ms, tp, 0, 1).map(|_| ())
}

/// Grace for every output LSO to reach its HW beyond the transaction timeout, ms.
pub const LSO_GRACE_EXTRA_MS: u64 = 15_000;

/// The drain's wait for a transactional output's last stable offsets: read_committed
/// readers see a partition only up to its LSO, so one below the HW holds a transaction
/// whose markers are still on their way or that was left open. That is lag until a grace
/// (`grace_ms`) after the drain first found everything else done; past it a stuck LSO is
/// no longer lag but the checkers' finding (`stuck-lso`, an under-count), so a transaction
/// left open by a dead member gets its timeout and markers in flight are always waited for.
#[derive(Debug, Default)]
pub struct LsoGrace {
    /// When the drain first found everything but the LSOs done, ns.
    settled_ns: Option<u64>,
}

impl LsoGrace {
    /// Appends to `lag` (the rest of the drain's lag, computed first) each partition of
    /// `outputs` not readable read_committed and, within the grace, each whose LSO is
    /// below its HW. `now_ns` is the simulated clock.
    pub fn output_lag(
        &mut self,
        cluster: &mut Cluster,
        (now_ms, now_ns): (u64, u64),
        outputs: &[TopicPartition],
        grace_ms: u64,
        lag: &mut Vec<String>,
    ) {
        let mut unstable = Vec::new();
        for tp in outputs {
            if let Err(e) = readable_committed(cluster, now_ms, tp) {
                lag.push(format!("not readable: {e}"));
            }
            let hw = cluster.high_watermark(tp).unwrap_or(0);
            let lso = cluster.last_stable_offset(tp).unwrap_or(0);
            if lso < hw {
                unstable.push(format!(
                    "{tp}: last stable offset {lso} < high watermark {hw}"
                ));
            }
        }
        if unstable.is_empty() {
            return;
        }
        let grace_over = lag.is_empty() && {
            let settled = *self.settled_ns.get_or_insert(now_ns);
            now_ns >= settled + grace_ms * 1_000_000
        };
        if !grace_over {
            lag.extend(unstable);
        }
    }
}

/// `fetch.max.bytes` / `max.partition.fetch.bytes` of [`read_committed`]'s fetches: the
/// Java consumer's 50 MiB.
const FETCH_MAX_BYTES: u32 = 52_428_800;

/// One read_committed Fetch of `tp` from `offset` at its leader, at most `max_bytes`.
fn fetch_committed(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    offset: Offset,
    max_bytes: u32,
) -> Result<FetchPartition, String> {
    let leader = cluster
        .leader(tp)
        .ok_or_else(|| format!("{tp} has no leader"))?;
    let request = Request::Fetch {
        isolation: Isolation::ReadCommitted,
        partitions: vec![(tp.clone(), offset)],
        max_bytes,
        partition_max_bytes: max_bytes,
        min_bytes: 1,
        max_wait_ms: 0,
        current_leader_epochs: Vec::new(),
    };
    let partitions = match cluster.handle(now_ms, leader, request) {
        Reply::Done(Response::Fetch { partitions }) => partitions,
        other => return Err(format!("{tp}: fetch at broker-{leader}: {other:?}")),
    };
    let (_, part) = partitions
        .into_iter()
        .next()
        .ok_or_else(|| format!("{tp}: empty fetch"))?;
    if let Some(e) = part.error {
        return Err(format!("{tp}: fetch at broker-{leader}: {e}"));
    }
    Ok(part)
}

/// Sends generated id `id` to `topic` (key `k{id % keys}`, value the id in decimal),
/// recording a `send` invoke and its completion through `record`: ok with the partition
/// and offset (no offset under acks=0, which reports -1), info when the outcome is unknown,
/// fail when the record certainly was not written.
pub async fn send_id(
    producer: &SimProducer,
    topic: &str,
    keys: u32,
    id: u64,
    record: impl Fn(OpKind, Value, Option<String>),
) {
    let (key, produced) = id_record(topic, keys, id);
    record(OpKind::Invoke, send_invoked(id, Some(key.clone())), None);
    let result = producer.send(produced).await;
    record_outcome(topic, id, &key, result, record);
}

/// As [`send_id`], through `sends` ([`Sends::send`]): awaited, or, when the producer
/// batches, left queued, the completion recorded once its delivery report arrives.
pub async fn send_id_queued(
    producer: &SimProducer,
    sends: &mut Sends,
    topic: &str,
    keys: u32,
    id: u64,
    record: impl Fn(OpKind, Value, Option<String>) + Send + 'static,
) {
    send_queued(producer, sends, id, id_record(topic, keys, id), record).await;
}

/// Sends `produced` (input record `id` with key text `key`) through `sends`, recording a
/// `send` invoke now and its completion ([`send_id`]'s) once its delivery report arrives
/// (at once when the producer does not batch).
pub async fn send_queued(
    producer: &SimProducer,
    sends: &mut Sends,
    id: u64,
    (key, produced): (String, ProducerRecord),
    record: impl Fn(OpKind, Value, Option<String>) + Send + 'static,
) {
    record(OpKind::Invoke, send_invoked(id, Some(key.clone())), None);
    let topic = produced.topic.clone();
    sends
        .send(producer, produced, move |result| {
            record_outcome(&topic, id, &key, result, record)
        })
        .await;
}

/// The ids `0..total` a run's producer processes take in turn, and the processes with
/// sends still outstanding: the producer half of a pipeline's drain.
#[derive(Debug, Default)]
pub struct IdHandout {
    next: u64,
    /// Processes that took an id and have not gone idle.
    active: BTreeSet<String>,
}

impl IdHandout {
    /// The next id below `total` for `process`, which is then active; `None` once all are
    /// handed out, and then `process` goes idle unless `keep_active` (it still awaits
    /// delivery reports, and calls [`IdHandout::release`] once they are in).
    pub fn take(&mut self, process: &str, total: u64, keep_active: bool) -> Option<u64> {
        if self.next >= total {
            if !keep_active {
                self.active.remove(process);
            }
            return None;
        }
        self.active.insert(process.to_string());
        self.next += 1;
        Some(self.next - 1)
    }

    /// `process` went idle: every send it made has its completion recorded.
    pub fn release(&mut self, process: &str) {
        self.active.remove(process);
    }

    /// Whether every id below `total` was handed out and every process went idle.
    pub fn done(&self, total: u64) -> bool {
        self.next >= total && self.active.is_empty()
    }
}

/// The key (`k{id % keys}`) and record (value the id in decimal) of generated id `id`.
pub fn id_record(topic: &str, keys: u32, id: u64) -> (String, ProducerRecord) {
    let key = format!("k{}", id % u64::from(keys.max(1)));
    let produced = ProducerRecord {
        topic: topic.to_string(),
        partition: None,
        key: Some(Bytes::from(key.clone())),
        value: Some(Bytes::from(id.to_string())),
        headers: Vec::new(),
    };
    (key, produced)
}

/// Records the completion of the send of `id` ([`send_completion`]).
fn record_outcome(
    topic: &str,
    id: u64,
    key: &str,
    result: Result<Delivery, ClientError>,
    record: impl Fn(OpKind, Value, Option<String>),
) {
    let (kind, value, error) = send_completion(topic, id, Some(key.to_string()), result);
    record(kind, value, error);
}

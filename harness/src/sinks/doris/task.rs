//! `DorisSinkTask` with its writers (`StreamLoadWriter`) on the simulated Doris client:
//! Stream Loads go to `doris-be`, `_stream_load_2pc` and the label lookups to `doris-fe`,
//! over the simulated network from the worker's node. See the parent module for what is
//! followed and what is not.

use super::{
    label_to_end_offset, DeliveryGuarantee, DorisSinkConfig, LabelGenerator, NullValues,
    PreCommitPolicy,
};
use crate::client::sim::doris::{DorisClientError, SimDoris};
use crate::connect::task::{
    ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
};
use crate::history::RecordRef;
use crate::sinks::doris_routine_load::record_ref;
use crate::sinks::{completion, NoWriteLog, WriteLog};
use async_trait::async_trait;
use eosim_sim::doris::service::{BeRequest, BeResponse, FeRequest, FeResponse};
use eosim_sim::doris::stream_load::{StreamLoad, StreamLoadStatus, TxnOperation};
use eosim_sim::doris::txn::TransactionStatus;
use eosim_sim::doris::types::LoadSpec;
use eosim_sim::kafka::{Offset, TopicPartition};
use madsim::rand::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// `BackoffAndRetryUtils.backoffSec`: the 2PC commit's attempts, seconds after the last.
const COMMIT_BACKOFF_S: [u64; 4] = [0, 1, 2, 4];

/// A load waiting for its second phase (`KafkaRespContent` → `DorisCommittable`).
#[derive(Debug, Clone)]
struct Committable {
    txn_id: u64,
}

/// One partition's `StreamLoadWriter`.
struct Writer {
    table: String,
    labels: LabelGenerator,
    /// `RecordBuffer`: (offset, JSON line, the record's position).
    buffer: Vec<(Offset, String, RecordRef)>,
    buffer_bytes: u64,
    /// `processedOffset`: the last record of the last count/size flush.
    processed: Offset,
    /// `flushedOffset`: last loaded offset + 1 (-1: nothing loaded).
    flushed: Offset,
    /// `committedOffset`: what `preCommit` returns (0: nothing).
    committed: Offset,
    /// `offsetPersistedInDoris`: the last offset of the newest VISIBLE label (-1: none).
    persisted: Offset,
    /// `hasInitialized`: the labels were read (exactly_once).
    initialized: bool,
    /// `respContents`: loads since the last `commit`.
    loaded: Vec<Committable>,
    /// `committableList`: loads being committed (kept until `getOffset` clears them).
    committables: Vec<Committable>,
    /// `previousFlushTimeStamp`, ms.
    last_flush_ms: u64,
}

/// The Doris Kafka connector's sink task.
pub struct DorisSinkTask {
    config: DorisSinkConfig,
    client: SimDoris,
    writers: BTreeMap<TopicPartition, Writer>,
    remaining_retries: u32,
    context: Option<SinkTaskContext>,
    write_log: Arc<dyn WriteLog>,
    suffix_start: Box<dyn FnMut() -> u64 + Send + Sync>,
    /// The first offset of each partition in the `put` being served (what Connect would
    /// redeliver if it failed).
    put_starts: BTreeMap<TopicPartition, Offset>,
}

fn now_ms() -> u64 {
    madsim::time::TimeHandle::current().elapsed().as_millis() as u64
}

/// `RecordService.getProcessedRecord` for schemaless JSON: a string value as it is, any
/// other value as its JSON text.
fn json_line(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl DorisSinkTask {
    /// A task with `config` on `client`; each writer's label suffix starts at a random
    /// number below 1000, as `LabelGenerator` draws it.
    pub fn new(config: DorisSinkConfig, client: SimDoris) -> Self {
        Self {
            remaining_retries: config.max_retries,
            config,
            client,
            writers: BTreeMap::new(),
            context: None,
            write_log: Arc::new(NoWriteLog),
            suffix_start: Box::new(|| madsim::rand::thread_rng().gen_range(0..1000)),
            put_starts: BTreeMap::new(),
        }
    }

    /// Reports every Stream Load to `log` (its rows, then its outcome).
    pub fn with_write_log(mut self, log: Arc<dyn WriteLog>) -> Self {
        self.write_log = log;
        self
    }

    /// Draws the writers' label suffix starts from `start` instead (tests that need a
    /// label collision).
    pub fn with_suffix_starts(
        mut self,
        start: impl FnMut() -> u64 + Send + Sync + 'static,
    ) -> Self {
        self.suffix_start = Box::new(start);
        self
    }

    /// `startTask`: the partition's writer, made once per task instance.
    fn writer(&mut self, tp: &TopicPartition) -> &mut Writer {
        if !self.writers.contains_key(tp) {
            let table = self.config.table_of(&tp.topic);
            let start = (self.suffix_start)();
            let labels = LabelGenerator::new(
                &tp.topic,
                tp.partition,
                &self.config.database,
                &table,
                start,
            );
            let writer = Writer {
                table,
                labels,
                buffer: Vec::new(),
                buffer_bytes: 0,
                processed: -1,
                flushed: -1,
                committed: 0,
                persisted: -1,
                initialized: false,
                loaded: Vec::new(),
                committables: Vec::new(),
                last_flush_ms: now_ms(),
            };
            self.writers.insert(tp.clone(), writer);
        }
        self.writers.get_mut(tp).expect("inserted above")
    }

    /// `DorisDefaultSinkService.insert`: every record, then the time-based flushes.
    async fn insert(&mut self, records: Vec<SinkRecord>) -> Result<(), String> {
        self.put_starts.clear();
        for r in &records {
            self.put_starts.entry(r.tp.clone()).or_insert(r.offset);
        }
        for record in records {
            let Some(value) = &record.value else {
                if self.config.null_values == NullValues::Fail {
                    return Err(format!(
                        "Null valued record from topic {}, partition {} and offset {} was failed \
                         (the configuration property 'behavior.on.null.values' is 'FAIL').",
                        record.tp.topic, record.tp.partition, record.offset
                    ));
                }
                continue;
            };
            let exactly_once = self.config.delivery_guarantee == DeliveryGuarantee::ExactlyOnce;
            if exactly_once && !self.writer(&record.tp).initialized {
                self.fetch_offset(&record.tp).await?;
            }
            let line = json_line(value);
            let position = record_ref(&record.tp, record.offset, Some(line.as_bytes()));
            self.insert_record(&record.tp, record.offset, line, position)
                .await?;
        }
        let flush_ms = self.config.buffer_flush_time_s * 1_000;
        let due: Vec<TopicPartition> = self
            .writers
            .iter()
            .filter(|(_, w)| {
                now_ms().saturating_sub(w.last_flush_ms) >= flush_ms && !w.buffer.is_empty()
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in due {
            let writer = self.writer(&tp);
            let buffer = std::mem::take(&mut writer.buffer);
            writer.buffer_bytes = 0;
            self.flush(&tp, buffer).await?;
        }
        Ok(())
    }

    /// `DorisWriter.insertRecord`.
    async fn insert_record(
        &mut self,
        tp: &TopicPartition,
        offset: Offset,
        line: String,
        position: RecordRef,
    ) -> Result<(), String> {
        let (count_max, bytes_max) = (
            self.config.buffer_count_records,
            self.config.buffer_size_bytes,
        );
        let writer = self.writer(tp);
        if offset <= writer.persisted || offset <= writer.processed {
            if offset <= writer.persisted {
                crate::mark!("doris-kc:record-skipped-as-loaded");
            }
            return Ok(());
        }
        writer.buffer_bytes += line.len() as u64;
        writer.buffer.push((offset, line, position));
        let full = writer.buffer_bytes >= bytes_max
            || (count_max != 0 && writer.buffer.len() as u64 >= count_max);
        if full {
            let buffer = std::mem::take(&mut writer.buffer);
            writer.buffer_bytes = 0;
            self.flush(tp, buffer).await?;
            self.writer(tp).processed = offset;
        }
        Ok(())
    }

    /// `StreamLoadWriter.fetchOffset`: the newest VISIBLE label's last offset.
    async fn fetch_offset(&mut self, tp: &TopicPartition) -> Result<(), String> {
        let db = self.config.database.clone();
        let label_prefix = self.writer(tp).labels.prefix().to_string();
        let request = FeRequest::ShowTransactionsLike { db, label_prefix };
        let rows = match self.client.fe(request).await {
            Ok(FeResponse::Transactions(rows)) => rows,
            Ok(other) => return Err(format!("unexpected answer {other:?}")),
            Err(e) => {
                return Err(format!(
                    "Unable to obtain the label generated when importing data through stream \
                     load from doris, causing the doris kafka connector to not guarantee \
                     exactly once: {e}"
                ))
            }
        };
        let persisted = rows
            .iter()
            .filter(|(_, status)| *status == TransactionStatus::Visible)
            .filter_map(|(label, _)| label_to_end_offset(label))
            .max()
            .unwrap_or(-1);
        if persisted >= 0 {
            crate::mark!("doris-kc:progress-recovered-from-label");
        }
        let writer = self.writer(tp);
        writer.persisted = persisted;
        writer.initialized = true;
        Ok(())
    }

    /// `StreamLoadWriter.flush`: one Stream Load of `buffer` under the next label.
    async fn flush(
        &mut self,
        tp: &TopicPartition,
        buffer: Vec<(Offset, String, RecordRef)>,
    ) -> Result<(), String> {
        let (Some(first_offset), Some(last_offset)) = (
            buffer.first().map(|(o, _, _)| *o),
            buffer.last().map(|(o, _, _)| *o),
        ) else {
            return Ok(());
        };
        let (db, two_phase_commit, strict_mode) = (
            self.config.database.clone(),
            self.config.enable_2pc,
            self.config.strict_mode,
        );
        let group_commit = self.config.group_commit;
        let writer = self.writer(tp);
        let label = writer.labels.next(last_offset);
        let request = StreamLoad {
            db,
            table: writer.table.clone(),
            // `DorisStreamLoad.load`: with group commit on, the label is dropped.
            label: group_commit.is_none().then(|| label.clone()),
            spec: LoadSpec {
                strict_mode,
                ..LoadSpec::default()
            },
            max_filter_ratio: 0.0,
            two_phase_commit,
            group_commit: group_commit.unwrap_or_default(),
            lines: buffer.iter().map(|(_, line, _)| line.clone()).collect(),
        };
        let rows: Vec<RecordRef> = buffer.into_iter().map(|(_, _, r)| r).collect();
        self.write_log.invoked(&rows);
        let result = match self.client.be(BeRequest::StreamLoad(request)).await {
            Ok(BeResponse::StreamLoaded(resp)) => match resp.status {
                StreamLoadStatus::Success => {
                    if resp.group_commit {
                        crate::mark!("doris-kc:group-commit-load");
                    }
                    Ok(resp.txn_id)
                }
                StreamLoadStatus::LabelAlreadyExists(status) => {
                    crate::mark!("doris-kc:label-already-exists");
                    Err(StreamLoadError::Refused(format!(
                        "stream load error: {} (ExistingJobStatus {status})",
                        resp.message
                    )))
                }
                StreamLoadStatus::Fail => Err(StreamLoadError::Refused(format!(
                    "stream load error: {}",
                    resp.message
                ))),
            },
            Ok(other) => Err(StreamLoadError::Refused(format!(
                "response error : {other:?}"
            ))),
            Err(e) => Err(StreamLoadError::Client(e)),
        };
        let (kind, error) = completion(&result, StreamLoadError::is_ambiguous);
        self.write_log.completed(&rows, kind, error);
        let redelivered_from = self.put_starts.get(tp).copied().unwrap_or(Offset::MAX);
        if result.is_err() && first_offset < redelivered_from {
            // The buffer is gone with the exception; Connect redelivers only this put.
            crate::mark!("doris-kc:failed-flush-dropped-earlier-puts");
        }
        let txn_id = result.map_err(|e| match group_commit {
            Some(_) => format!("failed to stream load data with group commit: {e}"),
            None => format!("failed to stream load data with label: {label}: {e}"),
        })?;
        let writer = self.writer(tp);
        writer.loaded.push(Committable { txn_id });
        writer.flushed = writer.flushed.max(last_offset + 1);
        writer.last_flush_ms = now_ms();
        Ok(())
    }

    /// `DorisCommitter.commitTransaction`: `_stream_load_2pc` commit, at 0, 1, 2 and 4 s;
    /// "already COMMITTED/VISIBLE" counts as success.
    async fn commit_transaction(&self, txn_id: u64) -> Result<(), String> {
        let mut last = String::new();
        for (attempt, backoff_s) in COMMIT_BACKOFF_S.into_iter().enumerate() {
            if attempt > 0 {
                crate::mark!("doris-kc:2pc-commit-retried");
                madsim::time::sleep(Duration::from_secs(backoff_s)).await;
            }
            let request = FeRequest::StreamLoad2pc {
                db: self.config.database.clone(),
                txn_id,
                op: TxnOperation::Commit,
            };
            match self.client.fe(request).await {
                Ok(_) => return Ok(()),
                Err(DorisClientError::Doris(e)) if e.means_committed() => {
                    crate::mark!("doris-kc:2pc-commit-already-committed");
                    return Ok(());
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(format!(
            "commit transaction error: Api retry exceeded the max retry limit, operation = \
             COMMIT_TRANSACTION (txn {txn_id}: {last})"
        ))
    }

    /// `StreamLoadWriter.commit`: moves the partition's loads to its committables and, with
    /// `enable.2pc`, commits them all.
    async fn commit_partition(&mut self, tp: &TopicPartition) -> Result<(), String> {
        let writer = self.writer(tp);
        let loaded = std::mem::take(&mut writer.loaded);
        writer.committables.extend(loaded);
        if !self.config.enable_2pc {
            return Ok(());
        }
        let txns: Vec<u64> = self
            .writer(tp)
            .committables
            .iter()
            .map(|c| c.txn_id)
            .collect();
        for txn_id in txns {
            self.commit_transaction(txn_id).await?;
        }
        Ok(())
    }

    /// `StreamLoadWriter.getOffset`: the flushed offset once committables were committed
    /// (and clears them), else the last one returned.
    fn take_offset(&mut self, tp: &TopicPartition) -> Offset {
        let writer = self.writer(tp);
        if !writer.committables.is_empty() {
            writer.committed = writer.flushed;
            writer.committables.clear();
        }
        writer.committed
    }
}

/// Why a Stream Load did not succeed.
#[derive(Debug, thiserror::Error)]
enum StreamLoadError {
    /// Doris answered and refused it.
    #[error("{0}")]
    Refused(String),
    /// No answer, or the node refused the request.
    #[error("{0}")]
    Client(DorisClientError),
}

impl StreamLoadError {
    fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Client(e) if e.is_ambiguous())
    }
}

#[async_trait]
impl SinkTask for DorisSinkTask {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = Some(context);
    }

    /// `startTask` for each partition: a writer unless this task instance has one.
    async fn open(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        for tp in partitions {
            self.writer(tp);
        }
        Ok(())
    }

    /// `DorisSinkTask.put`: a failure is retried through Connect while `max.retries`
    /// lasts, after `retry.interval.ms`.
    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        _reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        let Err(e) = self.insert(records).await else {
            return Ok(());
        };
        if self.remaining_retries == 0 {
            return Err(ConnectError::Fatal(e));
        }
        self.remaining_retries -= 1;
        crate::mark!("doris-kc:put-retried");
        if let Some(context) = &self.context {
            context.timeout(self.config.retry_interval_ms);
        }
        Err(ConnectError::Retriable(e))
    }

    /// `DorisSinkTask.preCommit`: the 2PC commits of the partitions, then their flushed
    /// offsets (those not 0). With the bug switch, the offsets first and the commits of the
    /// loads they cover only at the next call. Under `eosim.precommit = pass-through` the
    /// offsets returned are those Connect passed in ([`PreCommitPolicy::PassThrough`]).
    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        if self.writers.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut committed = BTreeMap::new();
        let partitions: Vec<TopicPartition> = offsets
            .keys()
            .filter(|tp| self.writers.contains_key(*tp))
            .cloned()
            .collect();
        for tp in &partitions {
            if self.config.bug_commit_offsets_before_2pc {
                let pending = std::mem::take(&mut self.writer(tp).committables);
                for c in pending {
                    self.commit_transaction(c.txn_id)
                        .await
                        .map_err(ConnectError::Fatal)?;
                }
                let writer = self.writer(tp);
                let loaded = std::mem::take(&mut writer.loaded);
                if !loaded.is_empty() {
                    crate::mark!("doris-kc:bug-offsets-before-2pc-commit");
                    writer.committed = writer.flushed;
                }
                writer.committables = loaded;
            } else {
                self.commit_partition(tp)
                    .await
                    .map_err(ConnectError::Fatal)?;
                self.take_offset(tp);
            }
            let offset = match self.config.precommit {
                PreCommitPolicy::DurableOnly => self.writer(tp).committed,
                PreCommitPolicy::PassThrough => {
                    let passed = offsets[tp];
                    if passed > self.writer(tp).committed {
                        crate::mark!("doris-kc:precommit-passes-buffered-offsets");
                    }
                    passed
                }
            };
            if offset != 0 {
                committed.insert(tp.clone(), offset);
            }
        }
        Ok(committed)
    }

    /// `DorisSinkTask.close` does nothing: the writers stay.
    async fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        Ok(())
    }
}

//! The processing and commit loop of one Streams instance (one stream thread), written once
//! over the client traits ([`Consumer`], [`Producer`], [`TransactionalProducer`]) so that
//! the simulated instance (`streams::instance`, under `--cfg madsim`) and a real process
//! can run the same code.
//!
//! Where the loop runs is a [`StreamsHost`]: its clock, where its ops go (the history), how
//! producers are built, and the standby hooks (simulation only; the defaults do nothing).
//! How a task's store is restored from its changelog is a [`ChangelogReader`].
//!
//! # Loop ([`Processor::step`])
//! poll → open tasks for newly assigned partitions (stable committed offset first, then
//! seek, then restore the store from its changelog) and drop revoked ones → process each
//! record (the update into the store's record cache; output and changelog records for
//! what the cache forwards: every update with `statestore.cache.max.bytes = 0`, else what
//! an eviction flushes, `streams::cache`) → every `commit.interval.ms` commit, when a record
//! was processed since the last one (`StreamTask.commitNeeded`).
//!
//! # Rebalances
//! The instance listens for revocations, as `StreamsRebalanceListener` does, under either
//! protocol ([`ProcessorConfig::cooperative`]):
//! - Eager (`upgrade.from` 2.3 or older; the real tier's librdkafka consumer): when the
//!   consumer is about to rejoin, every task is revoked: committed at once (one producer,
//!   one open transaction under exactly_once_v2), checkpointed and suspended
//!   (`TaskManager.handleRevocation`); after the rejoin a suspended task kept resumes with
//!   its store and one that moved is closed clean. Nothing is processed meanwhile.
//! - Cooperative (KIP-429, Streams' default since 2.4): the tasks kept go on processing
//!   while the group rebalances (commits wait for a stable generation, as Java's
//!   `rebalanceInProgress` makes them); after the SyncGroup only the tasks that moved are
//!   revoked: committed, with every other task that needs it, checkpointed and closed
//!   clean; the leader hands them to their new owner in the follow-up rebalance
//!   (`streams::partition_assignor`). An open transaction of kept tasks spans the
//!   rebalance and commits with the new generation's metadata.
//!
//! Lost partitions (`onPartitionsLost`: fenced, expired) close every task dirty and
//! re-initialize the producer (`handleLostAll`).
//!
//! # Repartitioning (`group_by`, `topology` module docs)
//! The consumer reads the source and the repartition topic. A source record is task
//! `0_p`'s: run through the stateless steps, re-keyed and sent to the repartition topic
//! (the default partitioner on the new key; under exactly_once_v2 in the open
//! transaction); a repartition record is task `1_p`'s, counted as above. A commit carries
//! both tasks' offsets: under exactly_once_v2 in the one transaction with the repartition,
//! output and changelog records (`StreamTask.prepareCommit` of every task, then
//! `TaskExecutor.commitOffsetsOrTransaction`), and the repartition topic is read
//! read_committed like any input; under at_least_once a crash between a repartition send
//! and the commit re-sends the record after the source is re-read, and the count takes it
//! twice. After a commit, every `repartition.purge.interval.ms`, the repartition topic is
//! purged below the offsets just committed (DeleteRecords,
//! [`StreamsHost::delete_records`]).
//!
//! # Stream-table join (`topology = "stream-table-join"`, `streams::join`)
//! The consumer reads the stream and the table topic; task `p` owns partition `p` of both
//! (one task, two sources, as `PartitionGrouper` groups co-partitioned topics). A table
//! record updates the task's store, which is complete up to the next table offset (the
//! table topic is the store's changelog: the task opens by restoring it, and nothing is
//! written to a changelog); a stream record is inner-joined with the store and the result
//! sent to the sink. A commit carries both partitions' offsets, under exactly_once_v2 in
//! the transaction with the joined records. Records are processed in the order the
//! consumer returns them; under `max.task.idle.ms` each task buffers both partitions and
//! takes the lower event time first, waiting up to that long for an empty partition
//! (`PartitionGroup`, [`Processor::step`] runs the buffers after each poll).
//!
//! # Standbys (`num.standby.replicas > 0`, `streams::standby`)
//! After each loop the standby tasks fetch their changelogs once; a newly assigned active
//! task with a standby here starts from the standby's store and position (history:
//! `streams-restore` with `store = "standby"`); a revoked active task with a standby
//! assigned here is recycled into it. Tasks kept into the next generation keep their
//! stores (Streams suspends, not closes, them during a rebalance); after a missed
//! generation they are closed dirty.
//!
//! # Commit
//! Every commit first flushes the record caches of all tasks (`StreamTask.prepareCommit`:
//! `stateMgr.flushCache()` before the record collector): each dirty entry is written to its
//! store and sent as output and changelog records, under exactly_once_v2 inside the
//! transaction being committed. A task closed without a commit drops its cache, dirty
//! entries included.
//! Then the record collector flushes (`RecordCollectorImpl.flush`, `streams::collector`):
//! sends are not awaited one by one but handed to the producer with a callback, batched
//! (`linger.ms` 100, [`STREAMS_PRODUCER_LINGER_MS`](super::STREAMS_PRODUCER_LINGER_MS))
//! and all delivered here; the first send error is thrown then (or at the next send), and the changelog offsets acknowledged move
//! each task's checkpointable position.
//! - `at_least_once`: persistent stores flush with a checkpoint; then the offsets are
//!   committed. A crash in between replays input whose effect the changelog already
//!   holds: an over-count.
//! - `exactly_once_v2`: the first send after a commit begins a transaction with the group
//!   metadata of that moment; the commit adds the offsets with that metadata (a rebalance
//!   since then fences it: ILLEGAL_GENERATION) and commits. On any error the transaction is
//!   aborted (or the producer recreated, which fences the old epoch), every store is wiped
//!   and every task reopened: restored read_committed from the changelog, positioned at the
//!   committed offsets (models-reference E.5: TaskMigrated → close dirty, wipe, rejoin).

use super::assignor::TaskOffset;
use super::cache::{self, CachingStore, EntrySizer, NamedCache, ThreadCache};
use super::collector::{Collector, SendError, TaskIncarnation};
use super::store::{Disk, Flushed, KeyValueStore};
use super::topology::{StreamRecord, Topology, Update};
use super::{ProcessingGuarantee, StoreKind, StreamsSpec};
use crate::client::{
    AutoOffsetReset, ClientError, ConsumedRecord, Consumer, ConsumerConfig, ConsumerGroupMetadata,
    Delivery, Producer, ProducerConfig, ProducerRecord, Revocation, TransactionalProducer,
    TxnError,
};
use crate::history::{OpKind, Value};
use async_trait::async_trait;
use bytes::Bytes;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// Bound on one transactional call or committed-offset fetch, ms.
const CALL_TIMEOUT_MS: u64 = 15_000;
/// Pause between failed `init_transactions` attempts, ms.
const INIT_RETRY_MS: u64 = 500;

/// What a restore did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    /// Changelog records replayed.
    pub records: usize,
    /// The changelog offset the store is now complete up to.
    pub end_offset: Offset,
}

/// A standby task: its copy of the store and its changelog position.
#[derive(Debug, Clone, Default)]
pub struct StandbyTask {
    /// The copy of the task's store.
    pub store: KeyValueStore,
    /// Changelog offset the copy is complete up to (the next to read).
    pub position: Offset,
}

/// The restore consumer of an instance: replays one changelog partition into a store.
#[async_trait]
pub trait ChangelogReader: Send {
    /// Replays changelog partition `tp` from offset `from` up to its end as of the start of
    /// the restore (last value per key wins), reading with `isolation`.
    ///
    /// # Errors
    /// A text when the partition stayed unreadable.
    async fn restore(
        &mut self,
        tp: &TopicPartition,
        from: Offset,
        isolation: Isolation,
        store: &mut KeyValueStore,
    ) -> Result<Restored, String>;
}

/// The producer of an instance: plain (idempotent) under at_least_once, transactional
/// under exactly_once_v2.
pub enum Writer<P, T> {
    /// at_least_once.
    Alo(P),
    /// exactly_once_v2.
    Eos(T),
}

/// Where an instance runs: the simulated node or a real process.
#[async_trait]
pub trait StreamsHost: Send + Sync {
    /// The plain producer.
    type Producer: Producer;
    /// The transactional producer.
    type Txn: TransactionalProducer;

    /// Time since the run's start, ns (the simulator's clock, or the wall clock).
    fn now_ns(&self) -> u64;

    /// Records an op of the instance (`streams-<index>`).
    fn record(&self, kind: OpKind, value: Value, error: Option<String>);

    /// A plain producer with `config`.
    ///
    /// # Errors
    /// A text when the client cannot be created.
    fn producer(&self, config: ProducerConfig) -> Result<Self::Producer, String>;

    /// A transactional producer with `transactional_id`, `transaction_timeout_ms` and the
    /// producer settings `config`, not yet initialized.
    ///
    /// # Errors
    /// A text when the client cannot be created.
    fn txn_producer(
        &self,
        transactional_id: String,
        transaction_timeout_ms: u64,
        config: ProducerConfig,
    ) -> Result<Self::Txn, String>;

    /// The standby tasks the Streams assignor gave this member in `group`'s generation;
    /// `None` when it did not (the default: no standbys).
    fn assigned_standbys(&self, group: &ConsumerGroupMetadata) -> Option<BTreeSet<u32>> {
        let _ = group;
        None
    }

    /// One changelog fetch of every standby task (the default does nothing).
    async fn update_standbys(
        &self,
        topic: &str,
        isolation: Isolation,
        standbys: &mut BTreeMap<u32, StandbyTask>,
    ) {
        let _ = (topic, isolation, standbys);
    }

    /// DeleteRecords (KIP-107) of `tp` below `before` through the instance's admin client
    /// (`Admin.deleteRecords`); the partition's low watermark after it.
    ///
    /// # Errors
    /// A text when the request failed; the default refuses (the real instances do not
    /// repartition, `real::run::streams_count::unsupported`).
    async fn delete_records(&self, tp: &TopicPartition, before: Offset) -> Result<Offset, String> {
        let _ = (tp, before);
        Err("DeleteRecords is not offered by this host".into())
    }

    /// What the next JoinGroup reports to the Streams assignor (the default drops it).
    fn publish_report(&self, report: BTreeMap<u32, TaskOffset>) {
        let _ = report;
    }
}

/// What the loop needs from the run.
#[derive(Clone)]
pub struct ProcessorConfig {
    /// Instance number (`streams-<index>`).
    pub index: u32,
    /// The `[streams]` settings.
    pub spec: StreamsSpec,
    /// The topology.
    pub topology: Topology,
    /// Consumer `session.timeout.ms`.
    pub session_timeout_ms: u64,
    /// Producer settings (acks, timeouts, Streams' batching); idempotence is forced on.
    pub producer: ProducerConfig,
    /// The disks of persistent stores.
    pub disk: Disk,
    /// The process id of this start (see [`initialize_process_id`]); empty until the host
    /// initializes it.
    pub process_id: String,
    /// Whether the consumer rebalances with the cooperative protocol (KIP-429): owned
    /// tasks go on processing while the group rebalances and an open transaction may span
    /// a generation. The simulated instance follows [`StreamsSpec::cooperative`]; the real
    /// one is eager (librdkafka's range assignor).
    pub cooperative: bool,
}

impl ProcessorConfig {
    /// `transactional.id` under exactly_once_v2: `<application.id>-<processId>-<threadIdx>`
    /// (apache/kafka `ActiveTaskCreator.producer()`, trunk 4.0 `1eb7644`; one stream thread,
    /// index 1), so it changes with the process id.
    ///
    /// # Panics
    /// When the process id was not initialized ([`initialize_process_id`]).
    pub fn transactional_id(&self) -> String {
        assert!(!self.process_id.is_empty(), "the process id is initialized");
        format!("{}-{}-1", self.spec.application_id, self.process_id)
    }

    /// `streams-<index>`.
    pub fn name(&self) -> String {
        format!("streams-{}", self.index)
    }

    /// Whether `processing.guarantee` is exactly_once_v2.
    pub fn eos(&self) -> bool {
        self.spec.processing_guarantee == ProcessingGuarantee::ExactlyOnceV2
    }

    /// The consumers' isolation, main, restore and standby alike: read_committed under
    /// exactly_once_v2, else `[streams] "consumer.isolation.level"`, else the Java
    /// consumer's read_uncommitted (StreamsConfig `getCommonConsumerConfigs`).
    pub fn isolation(&self) -> Isolation {
        self.spec.isolation()
    }

    /// The main consumer's settings: group `application.id`, `earliest`, the isolation of
    /// [`ProcessorConfig::isolation`].
    pub fn consumer_config(&self) -> ConsumerConfig {
        let mut config = ConsumerConfig::new(self.spec.application_id.clone());
        config.auto_offset_reset = AutoOffsetReset::Earliest;
        config.isolation_level = self.isolation();
        config.session_timeout_ms = self.session_timeout_ms;
        config.heartbeat_interval_ms = (self.session_timeout_ms / 3).max(100);
        config.max_poll_records = self.spec.max_poll_records;
        config.max_poll_interval_ms = self.spec.max_poll_interval_ms;
        config.request_timeout_ms = self.producer.request_timeout_ms;
        config
    }
}

/// The process id of an instance start, as `StateDirectory.initializeProcessId` decides it
/// (apache/kafka trunk 4.0 `1eb7644`): without persistent stores a fresh random UUID on every
/// start; with them the one in the state directory's `kafka-streams-process-metadata` file,
/// written on the first start. A restarted in-memory instance thus gets another
/// `transactional.id`: its `InitProducerId` does not fence its predecessor, whose open
/// transaction stays open until `transaction.timeout.ms` and the coordinator aborts it
/// (read_committed readers see the LSO stuck until then).
///
/// `now_ns` is the start's clock: the UUID's bits are drawn from it and the instance
/// (a mix, not the run's random stream, so that drawing a process id does not move every
/// later random choice of the run; two starts at different times get different ids).
pub fn initialize_process_id(cfg: &ProcessorConfig, now_ns: u64) -> ProcessId {
    let persistent = cfg.spec.store == StoreKind::Persistent;
    if persistent {
        if let Some(id) = cfg.disk.process_id(cfg.index) {
            crate::mark!("streams:process-id-from-state-dir");
            return ProcessId {
                id,
                from_state_dir: true,
            };
        }
    }
    let id = uuid_from(now_ns, cfg.index);
    if persistent {
        cfg.disk.write_process_id(cfg.index, id.clone());
    }
    crate::mark!("streams:process-id-fresh");
    ProcessId {
        id,
        from_state_dir: false,
    }
}

/// An instance start's process id ([`initialize_process_id`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessId {
    /// The UUID text.
    pub id: String,
    /// Whether it was read back from the state directory (else drawn at this start).
    pub from_state_dir: bool,
}

/// A version-4-shaped UUID from `seed` and `index` (splitmix64 mixing).
fn uuid_from(seed: u64, index: u32) -> String {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let hi = mix(seed ^ (u64::from(index) << 32));
    let lo = mix(hi ^ u64::from(index));
    let bits = (u128::from(hi) << 64) | u128::from(lo);
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The instance's producer: idempotent under at_least_once; under exactly_once_v2 a
/// transactional producer with [`ProcessorConfig::transactional_id`] (the same for every
/// producer of one start, so a recreated producer fences the one it replaces),
/// initialized. Either is retried until it is created (and initialized).
pub async fn new_writer<H: StreamsHost>(
    cfg: &ProcessorConfig,
    host: &H,
) -> Writer<H::Producer, H::Txn> {
    let producer = ProducerConfig {
        enable_idempotence: true,
        ..cfg.producer.clone()
    };
    let id = match cfg.eos() {
        true => cfg.transactional_id(),
        false => String::new(),
    };
    let timeout_ms = cfg.spec.transaction_timeout_ms;
    loop {
        if !cfg.eos() {
            match host.producer(producer.clone()) {
                Ok(p) => return Writer::Alo(p),
                Err(e) => tracing::debug!(%e, "producer"),
            }
            tokio::time::sleep(Duration::from_millis(INIT_RETRY_MS)).await;
            continue;
        }
        match host.txn_producer(id.clone(), timeout_ms, producer.clone()) {
            Ok(p) => match p
                .init_transactions(Duration::from_millis(CALL_TIMEOUT_MS))
                .await
            {
                Ok(()) => return Writer::Eos(p),
                Err(e) => tracing::debug!(%e, "init_transactions"),
            },
            Err(e) => tracing::debug!(%e, "transactional producer"),
        }
        tokio::time::sleep(Duration::from_millis(INIT_RETRY_MS)).await;
    }
}

/// A task: one input partition, its store, the store's record cache and progress.
///
/// Under repartitioning (`group_by`, see `topology`) the entry for partition `p` holds
/// both tasks of that partition: the aggregating task `1_p` (reading repartition partition
/// `p`: store, cache, `position`) and the stateless source task `0_p` (reading source
/// partition `p`: `source_position` only). The Streams assignor here hands both to one
/// client (`streams::partition_assignor`), so they open and close together.
struct Task {
    store: KeyValueStore,
    /// The record cache of the store: dropped with the task, so a task closed without a
    /// commit loses its dirty entries (`ThreadCache.close`).
    cache: NamedCache,
    /// Changelog offset the store is complete up to (next offset after the last write
    /// acknowledged; the sends' acknowledgements are gathered at each commit's flush).
    changelog_end: Offset,
    /// The number this task got when it opened: its changelog acknowledgements are told
    /// from those of an earlier incarnation of the same partition's task.
    incarnation: u64,
    /// Next input offset to process, once a record was processed since the task opened.
    position: Option<Offset>,
    /// Next source offset of the stateless task `0_p` under repartitioning, once it
    /// processed a record since it opened; always `None` without repartitioning.
    source_position: Option<Offset>,
    /// Next table-topic offset of a stream-table join's task, once it applied a table
    /// record since it opened; always `None` for the other topologies.
    table_position: Option<Offset>,
    /// Whether it processed a record since its last commit (Java's
    /// `StreamTask.commitNeeded`): only such tasks are committed.
    commit_needed: bool,
    /// Under `max.task.idle.ms`, the records fetched and not yet processed of the stream
    /// (0) and the table (1) partition (`PartitionGroup`'s record queues); dropped with
    /// the task, whose reopening seeks to the committed offsets.
    buffers: [VecDeque<ConsumedRecord>; 2],
    /// Since when each of the two buffers was found empty while the other was not, ns.
    empty_since_ns: [Option<u64>; 2],
}

impl Task {
    /// A task just opened with `store`, complete up to changelog offset `changelog_end`:
    /// an empty cache, nothing processed yet.
    fn opened(store: KeyValueStore, changelog_end: Offset, incarnation: u64) -> Self {
        Self {
            store,
            cache: NamedCache::default(),
            changelog_end,
            incarnation,
            position: None,
            source_position: None,
            table_position: None,
            commit_needed: false,
            buffers: Default::default(),
            empty_since_ns: [None; 2],
        }
    }
}

/// A running instance: its consumer, producer, tasks and standbys.
pub struct Processor<C, R, H: StreamsHost> {
    cfg: ProcessorConfig,
    host: H,
    consumer: C,
    reader: R,
    writer: Writer<H::Producer, H::Txn>,
    tasks: BTreeMap<u32, Task>,
    /// Standby tasks (`num.standby.replicas > 0`).
    standbys: BTreeMap<u32, StandbyTask>,
    /// The generation the tasks were last confirmed in.
    generation: Option<i32>,
    /// Group metadata of the open transaction (exactly_once_v2) when it began, `None` when
    /// none is open.
    txn_group: Option<ConsumerGroupMetadata>,
    /// The group metadata of the last stable generation seen (cooperative: a transaction
    /// may begin while the group rebalances).
    last_group: Option<ConsumerGroupMetadata>,
    /// Tasks committed and checkpointed on a revocation (suspended): after the rejoin a
    /// task kept resumes, a task that moved is closed clean (see
    /// [`on_revocation`](Self::on_revocation)).
    suspended: BTreeSet<u32>,
    /// The record cache budget of this stream thread (`statestore.cache.max.bytes`).
    thread_cache: ThreadCache,
    /// Kafka's size estimate of the store's cache entries.
    sizer: EntrySizer,
    sent: usize,
    /// The outcomes of the sends not yet flushed (Streams' record collector).
    collector: Collector,
    /// Tasks opened so far (each task's incarnation number).
    opened: u64,
    /// Whether a stateless task consumed input since the last commit that sent nothing:
    /// under exactly_once_v2 the commit then needs a transaction of its own.
    consumed_unsent: bool,
    last_commit_ns: u64,
    /// When the repartition topic was last purged (or the instance started), ns.
    last_purge_ns: u64,
}

impl<C: Consumer, R: ChangelogReader, H: StreamsHost> Processor<C, R, H> {
    /// An instance over a `consumer` already subscribed to the topology's source, the
    /// restore consumer `reader` and the producer `writer` (see [`new_writer`]).
    ///
    /// The instance listens for revocations ([`Consumer::listen_for_revocations`]), as
    /// Streams' `StreamsRebalanceListener` does; a consumer that cannot hand them out
    /// leaves the instance learning of a rebalance from its assignment after the rejoin
    /// (every open transaction then fails as TaskMigrated).
    pub fn new(
        cfg: ProcessorConfig,
        host: H,
        mut consumer: C,
        reader: R,
        writer: Writer<H::Producer, H::Txn>,
    ) -> Self {
        if !consumer.listen_for_revocations() {
            crate::mark!("streams:revocations-seen-after-rejoin");
        }
        let last_commit_ns = host.now_ns();
        let thread_cache = cfg.spec.thread_cache();
        let sizer = EntrySizer::of(&cfg.topology);
        Self {
            cfg,
            host,
            consumer,
            reader,
            writer,
            tasks: BTreeMap::new(),
            standbys: BTreeMap::new(),
            generation: None,
            txn_group: None,
            last_group: None,
            suspended: BTreeSet::new(),
            thread_cache,
            sizer,
            sent: 0,
            collector: Collector::default(),
            opened: 0,
            consumed_unsent: false,
            last_commit_ns,
            last_purge_ns: last_commit_ns,
        }
    }

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.host.record(kind, value, error);
    }

    /// One loop: poll, sync the tasks with the assignment, process, commit when due,
    /// update the standbys.
    pub async fn step(&mut self) {
        let poll_ms = self.cfg.spec.commit_interval_ms().clamp(10, 200);
        let records = match self.consumer.poll(Duration::from_millis(poll_ms)).await {
            Ok(records) => records,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                return;
            }
        };
        if let Some(revocation) = self.consumer.take_revocation() {
            return self.on_revocation(revocation).await;
        }
        let fresh = match self.sync_tasks().await {
            Ok(fresh) => fresh,
            Err(e) => return self.recover(e, false).await,
        };
        if !records.is_empty() && self.consumer.group_metadata().is_none() {
            crate::mark!("streams:processed-during-rebalance");
        }
        if let Err((e, fatal)) = self.process_polled(records, &fresh).await {
            if fatal {
                crate::mark!("streams:producer-fenced");
            }
            return self.recover(e, fatal).await;
        }
        let interval_ns = self.cfg.spec.commit_interval_ms() * 1_000_000;
        let stable = self.consumer.group_metadata().is_some();
        if self.host.now_ns() >= self.last_commit_ns + interval_ns && stable {
            self.commit().await;
        }
        if !self.standbys.is_empty() {
            let topic = self.cfg.spec.changelog_topic();
            let isolation = self.cfg.isolation();
            self.host
                .update_standbys(&topic, isolation, &mut self.standbys)
                .await;
        }
        self.publish_report();
    }

    /// Processes the polled `records` of tasks not opened by this poll (`fresh`), then,
    /// under `max.task.idle.ms`, what the tasks' buffers hold ready.
    async fn process_polled(
        &mut self,
        records: Vec<ConsumedRecord>,
        fresh: &BTreeSet<u32>,
    ) -> Result<(), SendError> {
        for r in records {
            let p = r.tp.partition;
            if fresh.contains(&p) || !self.tasks.contains_key(&p) {
                continue; // re-fetched after the seek to the committed offset
            }
            self.process(r).await?;
        }
        if self.cfg.spec.max_task_idle_ms.is_some() {
            let partitions: Vec<u32> = self.tasks.keys().copied().collect();
            for p in partitions {
                while let Some(r) = self.next_ready(p) {
                    self.process_joined(r).await?;
                }
            }
        }
        Ok(())
    }

    /// What the next JoinGroup reports: active tasks running, standbys at their position,
    /// other tasks at their on-disk checkpoint (Java's `getTaskOffsetSums`).
    fn publish_report(&self) {
        let mut report: BTreeMap<u32, TaskOffset> = self
            .cfg
            .disk
            .checkpoints(self.cfg.index)
            .into_iter()
            .map(|(p, c)| (p, TaskOffset::Position(c)))
            .collect();
        for (p, s) in &self.standbys {
            report.insert(*p, TaskOffset::Position(s.position));
        }
        for p in self.tasks.keys() {
            report.insert(*p, TaskOffset::Running);
        }
        self.host.publish_report(report);
    }

    /// Drops tasks of revoked partitions (recycling them into standbys where assigned) and
    /// opens tasks of new ones; returns the new ones. Nothing changes during a rebalance.
    async fn sync_tasks(&mut self) -> Result<BTreeSet<u32>, String> {
        let source = self.aggregate_source();
        let assigned: BTreeSet<u32> = self
            .consumer
            .assignment()
            .into_iter()
            .filter(|tp| tp.topic == source)
            .map(|tp| tp.partition)
            .collect();
        self.check_migrated(&assigned)?;
        // Eager rebalancing revokes every partition until the new assignment: the tasks
        // are suspended meanwhile (Streams keeps suspended tasks and their stores).
        let Some(group) = self.consumer.group_metadata() else {
            return Ok(BTreeSet::new());
        };
        self.last_group = Some(group.clone());
        // Eager: a task kept from the previous generation may resume; after a missed
        // generation someone else may have run it, so every task is lost (closed dirty).
        // Cooperative: a member keeps what it owns through any number of generations
        // unless the consumer reports it lost (the leader never hands an owned partition
        // to another member, and a member missing from a generation is fenced).
        let previous = self.generation.replace(group.generation);
        let missed = previous.is_some_and(|g| group.generation != g && group.generation != g + 1);
        if missed && !self.cfg.cooperative {
            crate::mark!("streams:tasks-lost-missed-generation");
            let lost: Vec<u32> = self.tasks.keys().copied().collect();
            for p in lost {
                self.close_dirty(p);
            }
        }
        let standbys = self.assigned_standbys();
        for p in self.revoked(&assigned) {
            match standbys.as_ref().is_some_and(|s| s.contains(&p)) {
                true => self.recycle_to_standby(p),
                false if self.suspended.contains(&p) => self.close_clean(p),
                false => self.close_dirty(p),
            }
        }
        for p in std::mem::take(&mut self.suspended) {
            if self.tasks.contains_key(&p) {
                self.resume(p);
            }
        }
        let mut fresh = BTreeSet::new();
        for p in assigned {
            if !self.tasks.contains_key(&p) {
                self.open_task(p).await?;
                fresh.insert(p);
            }
        }
        if let Some(standbys) = standbys {
            self.standbys.retain(|p, _| standbys.contains(p));
            for p in standbys.into_iter().filter(|p| !self.tasks.contains_key(p)) {
                self.standbys.entry(p).or_default();
            }
        }
        Ok(fresh)
    }

    /// The tasks whose partitions are not in `assigned`.
    fn revoked(&self, assigned: &BTreeSet<u32>) -> Vec<u32> {
        let tasks = self.tasks.keys().copied();
        tasks.filter(|p| !assigned.contains(p)).collect()
    }

    /// A rebalance while a transaction is open: its records may belong to a task that
    /// moved (TaskMigratedException). Tasks suspended by a revocation were committed, so
    /// they hold none. Eager: any new generation fails the transaction (its offsets would
    /// be fenced, and no revocation committed it). Cooperative: a transaction of tasks kept
    /// goes on into the new generation and commits with its group metadata, as Java's
    /// `TaskExecutor.commitOffsetsOrTransaction` sends the consumer's current metadata.
    fn check_migrated(&self, assigned: &BTreeSet<u32>) -> Result<(), String> {
        let Some(txn) = &self.txn_group else {
            return Ok(());
        };
        let revoked: Vec<u32> = (self.revoked(assigned).into_iter())
            .filter(|p| !self.suspended.contains(p))
            .collect();
        let now = self.consumer.group_metadata().map(|g| g.generation);
        if self.cfg.cooperative && revoked.is_empty() {
            if now.is_some_and(|g| g != txn.generation) {
                crate::mark!("streams:txn-spans-rebalance");
            }
            return Ok(());
        }
        if !revoked.is_empty() || now != Some(txn.generation) {
            crate::mark!("streams:task-migrated");
            return Err(format!(
                "task migrated: generation {} -> {now:?}, revoked {revoked:?}",
                txn.generation
            ));
        }
        Ok(())
    }

    /// The standby tasks of this member's current generation; `None` without standbys or
    /// outside a stable generation (the standbys are then left as they are).
    fn assigned_standbys(&self) -> Option<BTreeSet<u32>> {
        if self.cfg.spec.num_standby_replicas == 0 {
            return None;
        }
        let group = self.consumer.group_metadata()?;
        self.host.assigned_standbys(&group)
    }

    /// An active task revoked while its standby stays here: it keeps its store (no
    /// transaction is open, so the store holds committed changelog data only).
    fn recycle_to_standby(&mut self, p: u32) {
        if let Some(task) = self.tasks.remove(&p) {
            crate::mark!("streams:active-recycled-to-standby");
            let standby = StandbyTask {
                store: task.store,
                position: task.changelog_end,
            };
            self.standbys.insert(p, standby);
        }
    }

    /// `TaskManager.handleRevocation` (apache/kafka trunk 4.0, `streams/.../internals/
    /// TaskManager.java`), called from `onPartitionsRevoked`: eager, before the rejoin with
    /// every partition; cooperative, after the SyncGroup with those that moved. The revoked
    /// tasks — and with them every task that needs a commit (under exactly_once_v2 they
    /// share the thread's producer and its one open transaction) — are committed now
    /// whatever `commit.interval.ms` says, the revoked ones checkpointed
    /// (`postCommit(true)`: under exactly_once_v2 too) and suspended (eager) or closed
    /// clean (cooperative: the new assignment is already known). A failed commit recovers
    /// as any failed commit (TaskMigrated → every task closed dirty). `onPartitionsLost` →
    /// `handleLostAll`: every task closed dirty and, under exactly_once_v2, the thread's
    /// producer re-initialized, which fences and aborts its open transaction.
    async fn on_revocation(&mut self, revocation: Revocation) {
        if revocation.lost {
            crate::mark!("streams:tasks-lost");
            let eos = self.cfg.eos();
            return self.recover("partitions lost".to_string(), eos).await;
        }
        let source = &self.aggregate_source();
        let revoked: BTreeSet<u32> = revocation
            .partitions
            .iter()
            .filter(|tp| &tp.topic == source && self.tasks.contains_key(&tp.partition))
            .map(|tp| tp.partition)
            .collect();
        if self.txn_group.is_some() {
            crate::mark!("streams:revocation-commits-open-txn");
        }
        let needed = self.commit_needed() || self.txn_group.is_some();
        if !self.commit().await {
            return;
        }
        match needed {
            true => crate::mark!("streams:revoked-tasks-committed"),
            false => crate::mark!("streams:revocation-nothing-to-commit"),
        }
        self.flush_stores(revoked.iter().copied(), true);
        if !self.cfg.cooperative {
            self.suspended = revoked;
            return;
        }
        // Cooperative: the revocation comes with the new generation's assignment, which the
        // tasks kept are confirmed in; the revoked ones close now (Java's
        // `onPartitionsAssigned` → `handleAssignment` follows at once), recycled into
        // standbys where the new generation assigns one here.
        if let Some(group) = self.consumer.group_metadata() {
            self.generation = Some(group.generation);
        }
        let standbys = self.assigned_standbys();
        for p in revoked {
            match standbys.as_ref().is_some_and(|s| s.contains(&p)) {
                true => self.recycle_to_standby(p),
                false => self.close_clean(p),
            }
        }
    }

    /// A suspended task assigned again: it goes on with its store. Under exactly_once_v2
    /// the checkpoint written at suspension is deleted first (`StreamTask.resume`,
    /// KAFKA-10362), since the store runs ahead of it from now on.
    fn resume(&mut self, p: u32) {
        crate::mark!("streams:suspended-task-resumed");
        if self.cfg.eos() && self.cfg.spec.store == StoreKind::Persistent {
            self.cfg.disk.delete_checkpoint(self.cfg.index, p);
        }
    }

    /// Closes a task suspended by [`on_revocation`](Self::on_revocation) that moved: it
    /// was committed and checkpointed, so its store directory stays (`closeClean`).
    fn close_clean(&mut self, p: u32) {
        if self.tasks.remove(&p).is_some() {
            crate::mark!("streams:task-closed-clean");
        }
    }

    /// Closes a task without a commit: under exactly_once_v2 its store directory is wiped.
    fn close_dirty(&mut self, p: u32) {
        if self.tasks.remove(&p).is_some() {
            crate::mark!("streams:task-closed-dirty");
        }
        if self.cfg.eos() {
            self.cfg.disk.wipe(self.cfg.index, p);
        }
    }

    /// The topic the aggregating tasks read (`Topology::aggregate_source`).
    fn aggregate_source(&self) -> String {
        (self.cfg.topology).aggregate_source(&self.cfg.spec.application_id)
    }

    /// Seeks `tp` to its stable committed offset (0 without one).
    async fn seek_to_committed(&mut self, tp: TopicPartition) -> Result<(), String> {
        let committed = self
            .consumer
            .committed(std::slice::from_ref(&tp))
            .await
            .map_err(|e| format!("committed offset of {tp}: {e}"))?;
        let offset = committed.first().map_or(0, |(_, o)| (*o).max(0));
        self.consumer.seek(&tp, offset).map_err(|e| e.to_string())
    }

    /// Opens the task of input partition `p` (with its source task `0_p` under
    /// repartitioning): stable committed offsets, seek, restore.
    async fn open_task(&mut self, p: u32) -> Result<(), String> {
        let input = TopicPartition::new(self.aggregate_source(), p);
        self.seek_to_committed(input.clone()).await?;
        if self.cfg.topology.repartitions() {
            let source = TopicPartition::new(&self.cfg.topology.source, p);
            self.seek_to_committed(source).await?;
        }
        if let Some(table) = self.cfg.topology.table_topic() {
            let table = TopicPartition::new(table, p);
            self.seek_to_committed(table).await?;
        }
        if !self.cfg.topology.stateful() {
            return self.open_stateless_task(input);
        }
        let (mut store, from, label) = match self.standbys.remove(&p) {
            Some(s) => {
                crate::mark!("streams:standby-promoted");
                (s.store, s.position, "standby".to_string())
            }
            None => self.local_state(p),
        };
        let changelog = TopicPartition::new(self.cfg.spec.changelog_topic(), p);
        let isolation = self.cfg.isolation();
        let restored = (self.reader)
            .restore(&changelog, from, isolation, &mut store)
            .await?;
        if restored.records > 0 {
            crate::mark!("streams:restore-replayed-records");
        }
        let value = Value::StreamsRestore {
            tp: input,
            store: label,
            from_offset: from,
            restored: restored.records,
        };
        self.record(OpKind::Ok, value, None);
        let incarnation = self.next_incarnation();
        self.tasks
            .insert(p, Task::opened(store, restored.end_offset, incarnation));
        Ok(())
    }

    /// Opens a stateless task: nothing to restore (history: `streams-restore` with
    /// `store = "stateless"`, 0 records).
    fn open_stateless_task(&mut self, input: TopicPartition) -> Result<(), String> {
        let p = input.partition;
        let value = Value::StreamsRestore {
            tp: input,
            store: "stateless".into(),
            from_offset: 0,
            restored: 0,
        };
        self.record(OpKind::Ok, value, None);
        let incarnation = self.next_incarnation();
        self.tasks
            .insert(p, Task::opened(KeyValueStore::default(), 0, incarnation));
        Ok(())
    }

    /// The incarnation number of the next task to open.
    fn next_incarnation(&mut self) -> u64 {
        self.opened += 1;
        self.opened
    }

    /// The store a task starts from, the changelog offset to restore from, and a label.
    /// A persistent store without checkpoint is corrupted under EOS semantics and wiped.
    fn local_state(&self, p: u32) -> (KeyValueStore, Offset, String) {
        let (disk, index) = (&self.cfg.disk, self.cfg.index);
        match (self.cfg.spec.store, disk.read(index, p)) {
            (StoreKind::InMemory, _) => (KeyValueStore::default(), 0, "in-memory".into()),
            (
                StoreKind::Persistent,
                Some(Flushed {
                    store,
                    checkpoint: Some(c),
                }),
            ) => {
                crate::mark!("streams:store-from-checkpoint");
                if self.cfg.eos() {
                    disk.delete_checkpoint(index, p);
                }
                (store, c, "persistent+checkpoint".into())
            }
            (StoreKind::Persistent, Some(_)) => {
                crate::mark!("streams:store-wiped-no-checkpoint");
                disk.wipe(index, p);
                (KeyValueStore::default(), 0, "persistent-wiped".into())
            }
            (StoreKind::Persistent, None) => (KeyValueStore::default(), 0, "persistent".into()),
        }
    }

    /// Processes one record: the aggregate's update into the store's record cache, then
    /// the output and changelog records of what the cache forwarded (every update when
    /// the cache budget is 0; see `streams::cache`).
    async fn process(&mut self, r: ConsumedRecord) -> Result<(), SendError> {
        let p = r.tp.partition;
        if self.cfg.topology.table_topic().is_some() {
            if self.cfg.spec.max_task_idle_ms.is_some() {
                self.buffer(r);
                return Ok(());
            }
            return self.process_joined(r).await;
        }
        let parsed = StreamRecord::parse(r.key.as_deref(), r.value.as_deref());
        if r.tp.topic != self.aggregate_source() {
            return self.repartition(p, r.offset, parsed).await;
        }
        if !self.cfg.topology.stateful() {
            let task = self.tasks.get_mut(&p).expect("the task exists");
            task.position = Some(r.offset + 1);
            task.commit_needed = true;
            return self.pass_through(parsed).await;
        }
        let other_caches_bytes = self.cache_bytes_except(p);
        let task = self.tasks.get_mut(&p).expect("the task exists");
        task.position = Some(r.offset + 1);
        task.commit_needed = true;
        let (budget, sizer) = (self.thread_cache, self.sizer);
        let mut store = CachingStore::new(
            &mut task.store,
            &mut task.cache,
            budget,
            other_caches_bytes,
            sizer,
        );
        let applied = parsed.and_then(|rec| self.cfg.topology.process(p, rec, &mut store));
        let forwarded = store.forwarded();
        if applied.is_none() {
            // Dropped (a late record): consumed with nothing sent, so under
            // exactly_once_v2 its offset needs a transaction of its own.
            self.consumed_unsent |= self.txn_group.is_none();
            return Ok(());
        }
        if budget.max_bytes > 0 && !forwarded.is_empty() {
            crate::mark!("streams:cache-evicted-dirty");
        }
        if self.cfg.spec.process_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.cfg.spec.process_ms)).await;
        }
        for update in forwarded {
            self.forward(p, update).await?;
        }
        Ok(())
    }

    /// A record of a stream-table join: a table update or a stream record to join.
    async fn process_joined(&mut self, r: ConsumedRecord) -> Result<(), SendError> {
        if self.cfg.topology.table_topic() == Some(r.tp.topic.as_str()) {
            return self.put_table(r);
        }
        let parsed = StreamRecord::parse(r.key.as_deref(), r.value.as_deref());
        self.join(r, parsed).await
    }

    /// Under `max.task.idle.ms`, buffers `r` in its task's queue of its partition
    /// (`PartitionGroup.addRawRecords`): the partition is no longer empty.
    fn buffer(&mut self, r: ConsumedRecord) {
        let side = usize::from(self.cfg.topology.table_topic() == Some(r.tp.topic.as_str()));
        let task = self
            .tasks
            .get_mut(&r.tp.partition)
            .expect("the task exists");
        task.empty_since_ns[side] = None;
        task.buffers[side].push_back(r);
    }

    /// The next record task `p` may process under `max.task.idle.ms` (apache/kafka
    /// `PartitionGroup`, KIP-353 and KIP-695): with both partitions buffered, the head with
    /// the lower event time (the table's on a tie, so an update applies before an event of
    /// its instant); with one empty, the other's head at once under -1, else only once the
    /// empty one has stayed empty for `max.task.idle.ms` of the task's clock (enforced
    /// processing, `readyToProcess`); `None` while the task idles or holds nothing.
    fn next_ready(&mut self, p: u32) -> Option<ConsumedRecord> {
        let idle_ms = self.cfg.spec.max_task_idle_ms?;
        let now = self.host.now_ns();
        let task = self.tasks.get_mut(&p)?;
        let time = |q: &VecDeque<ConsumedRecord>| {
            let value = q.front()?.value.as_deref()?;
            Some(super::input_id_and_time(std::str::from_utf8(value).ok()?).1)
        };
        let side = match (time(&task.buffers[0]), time(&task.buffers[1])) {
            (None, None) => return None,
            (Some(stream), Some(table)) => usize::from(table <= stream),
            (stream, _) => {
                let empty = usize::from(stream.is_some());
                let since = *task.empty_since_ns[empty].get_or_insert(now);
                let waited_ns = now.saturating_sub(since);
                if idle_ms >= 0 && waited_ns < idle_ms.unsigned_abs() * 1_000_000 {
                    crate::mark!("streams:task-idling");
                    return None;
                }
                if idle_ms >= 0 {
                    crate::mark!("streams:enforced-processing");
                }
                1 - empty
            }
        };
        task.buffers[side].pop_front()
    }

    /// A table record of a stream-table join (`streams::join`): the update into task `p`'s
    /// store, which is complete up to the next table offset (the table topic is its
    /// changelog, so nothing is sent). Under exactly_once_v2 a commit with nothing sent
    /// since needs a transaction of its own for the offsets.
    fn put_table(&mut self, r: ConsumedRecord) -> Result<(), SendError> {
        let topology = &self.cfg.topology;
        let task = self
            .tasks
            .get_mut(&r.tp.partition)
            .expect("the task exists");
        task.table_position = Some(r.offset + 1);
        task.commit_needed = true;
        task.changelog_end = task.changelog_end.max(r.offset + 1);
        if topology.put_table(r.key.as_deref(), r.value.as_deref(), &mut task.store) {
            crate::mark!("streams:table-updated");
        }
        self.consumed_unsent |= self.txn_group.is_none();
        Ok(())
    }

    /// Stream record `r` (`parsed`) of a stream-table join: joined with its task's table and, when the
    /// table has a value for its key (inner join), sent to the sink keyed as it came;
    /// under exactly_once_v2 inside the thread's transaction.
    async fn join(
        &mut self,
        r: ConsumedRecord,
        parsed: Option<StreamRecord>,
    ) -> Result<(), SendError> {
        let topology = &self.cfg.topology;
        let task = (self.tasks.get_mut(&r.tp.partition)).expect("the task exists");
        task.position = Some(r.offset + 1);
        task.commit_needed = true;
        let joined = parsed.and_then(|rec| topology.join(rec, &task.store));
        match self.forward_if_kept(joined).await? {
            true => crate::mark!("streams:joined"),
            false => crate::mark!("streams:join-no-table-value"),
        }
        Ok(())
    }

    /// Sub-topology 0 (stateless task `0_p`): re-keys a source record and writes it to the
    /// repartition topic, partitioned by the new key with the default partitioner
    /// (`RecordCollectorImpl.send` with no `StreamPartitioner`: the producer's murmur2 on
    /// the serialized key), under exactly_once_v2 inside the thread's transaction.
    async fn repartition(
        &mut self,
        p: u32,
        offset: Offset,
        parsed: Option<StreamRecord>,
    ) -> Result<(), SendError> {
        let task = self.tasks.get_mut(&p).expect("the task exists");
        task.source_position = Some(offset + 1);
        task.commit_needed = true;
        let Some(rec) = parsed.and_then(|rec| self.cfg.topology.repartition(rec)) else {
            return Ok(());
        };
        self.send_keyed(&self.aggregate_source(), rec).await?;
        crate::mark!("streams:repartition-write");
        Ok(())
    }

    /// A stateless task (`KStream.to` after `filter` / `mapValues`, no store): the record
    /// through the stateless steps and, if kept, to the sink, keyed as it came, with the
    /// default partitioner (`SinkNode.process` → `RecordCollectorImpl.send`); under
    /// exactly_once_v2 inside the thread's transaction, so it commits with the offsets.
    async fn pass_through(&mut self, parsed: Option<StreamRecord>) -> Result<(), SendError> {
        let kept = parsed.and_then(|rec| self.cfg.topology.stateless(rec));
        match self.forward_if_kept(kept).await? {
            true => crate::mark!("streams:stateless-forwarded"),
            false => crate::mark!("streams:filter-dropped"),
        }
        Ok(())
    }

    /// The record of a store-less step (a stateless topology's, a join's result), if it
    /// kept one, to the sink after the simulated processing time: keyed as it is, the
    /// default partitioner (`SinkNode.process` → `RecordCollectorImpl.send`); whether it
    /// was sent. A record dropped leaves input consumed with nothing sent, which under
    /// exactly_once_v2 the next commit needs a transaction of its own for.
    async fn forward_if_kept(&mut self, rec: Option<StreamRecord>) -> Result<bool, SendError> {
        let Some(rec) = rec else {
            self.consumed_unsent |= self.txn_group.is_none();
            return Ok(false);
        };
        if self.cfg.spec.process_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.cfg.spec.process_ms)).await;
        }
        self.send_keyed(&self.cfg.topology.sink.clone(), rec)
            .await?;
        Ok(true)
    }

    /// Sends `rec` to `topic` with its key and value, the partition left to the default
    /// partitioner on the key.
    async fn send_keyed(&mut self, topic: &str, rec: StreamRecord) -> Result<(), SendError> {
        let (key, value) = (Bytes::from(rec.key), Bytes::from(rec.value));
        self.send(record(topic, None, &key, &value), None).await
    }

    /// Bytes the record caches of every task but `p` hold.
    fn cache_bytes_except(&self, p: u32) -> u64 {
        let others = self.tasks.iter().filter(|(q, _)| **q != p);
        others.map(|(_, t)| t.cache.size_bytes()).sum()
    }

    /// Sends one update of task `p` downstream: the output record (unless the entry is
    /// not forwarded: the id sequence, `Topology::forwards`), then the changelog record
    /// (the store already holds it), whose acknowledged offset moves the task's
    /// `changelog_end` at the next flush.
    async fn forward(&mut self, p: u32, update: Update) -> Result<(), SendError> {
        let forwards = self.cfg.topology.forwards(&update.store_key);
        let key = Bytes::from(update.store_key);
        let value = Bytes::from(update.count.to_string());
        if forwards {
            let output = record(&self.cfg.topology.sink, None, &key, &value);
            self.send(output, None).await?;
        }
        let changelog = record(&self.cfg.spec.changelog_topic(), Some(p), &key, &value);
        let task = self.tasks.get(&p).map(|t| (p, t.incarnation));
        self.send(changelog, task).await
    }

    /// Flushes every task's record cache, in task order (`StreamTask.prepareCommit` →
    /// `stateMgr.flushCache()`): the dirty entries into the store and downstream.
    async fn flush_caches(&mut self) -> Result<(), SendError> {
        let partitions: Vec<u32> = self.tasks.keys().copied().collect();
        for p in partitions {
            let Some(task) = self.tasks.get_mut(&p) else {
                continue;
            };
            let updates = cache::flush_into(&mut task.cache, &mut task.store);
            if !updates.is_empty() {
                crate::mark!("streams:cache-flushed-on-commit");
            }
            for update in updates {
                self.forward(p, update).await?;
            }
        }
        Ok(())
    }

    /// Hands one record to the producer (beginning a transaction first under EOS) without
    /// waiting for it (`RecordCollectorImpl.send`): its outcome goes to the collector, a
    /// changelog record's offset under `changelog`. Fails with the error of an earlier
    /// send not yet thrown, or of this one when it failed before it was queued, and
    /// whether the producer is unusable (`checkForException`, before and after).
    async fn send(
        &mut self,
        rec: ProducerRecord,
        changelog: Option<TaskIncarnation>,
    ) -> Result<(), SendError> {
        self.collector.check()?;
        self.sent += 1;
        self.maybe_begin_transaction()?;
        let outcome = self.collector.outcome(changelog);
        match &self.writer {
            Writer::Alo(p) => {
                let callback = move |r: Result<Delivery, ClientError>| {
                    outcome(r.map(|d| d.offset).map_err(|e| (e.to_string(), false)));
                };
                p.send_with_callback(rec, Box::new(callback)).await;
            }
            Writer::Eos(p) => {
                let callback = move |r: Result<Delivery, TxnError>| {
                    outcome(
                        r.map(|d| d.offset)
                            .map_err(|e| (e.to_string(), e.is_fatal())),
                    );
                };
                p.send_with_callback(rec, Box::new(callback)).await;
            }
        }
        self.collector.check()
    }

    /// `RecordCollectorImpl.flush` (`StreamTask.prepareCommit`, after the caches): every
    /// record handed to the producer delivered, the first send error thrown, and the
    /// acknowledged changelog offsets moved into their tasks.
    async fn flush_sends(&mut self) -> Result<(), SendError> {
        let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
        let flushed = match &self.writer {
            Writer::Alo(p) => (p.flush(timeout).await).map_err(|e| (e.to_string(), false)),
            Writer::Eos(p) => (p.flush(timeout).await).map_err(|e| (e.to_string(), e.is_fatal())),
        };
        // Every callback run (a producer may run them in tasks after its flush returned).
        let settled = self.collector.settled(timeout).await;
        self.collector.check()?;
        flushed?;
        settled?;
        for ((p, incarnation), end) in self.collector.take_changelog_ends() {
            match self.tasks.get_mut(&p) {
                Some(task) if task.incarnation == incarnation => {
                    task.changelog_end = task.changelog_end.max(end);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Under exactly_once_v2, begins a transaction unless one is open, with the group
    /// metadata of this moment (`StreamsProducer.maybeBeginTransaction`); nothing under
    /// at_least_once.
    fn maybe_begin_transaction(&mut self) -> Result<(), SendError> {
        let Writer::Eos(p) = &self.writer else {
            return Ok(());
        };
        if self.txn_group.is_some() {
            return Ok(());
        }
        let rebalancing = self.cfg.cooperative.then(|| self.last_group.clone());
        let group = (self.consumer.group_metadata())
            .or(rebalancing.flatten())
            .ok_or_else(|| {
                let e = "no stable group generation to begin a transaction";
                (e.to_string(), false)
            })?;
        p.begin_transaction()
            .map_err(|e| (e.to_string(), e.is_fatal()))?;
        self.txn_group = Some(group);
        Ok(())
    }

    /// The next input offsets of every task that processed a record since its last commit
    /// (the tasks `TaskManager.commit` takes, `StreamTask.commitNeeded`). Under
    /// repartitioning: the source tasks' offsets and the repartition topic's, which
    /// sub-topology 1 consumed (committed together: in one transaction under
    /// exactly_once_v2).
    fn offsets(&self) -> Vec<(TopicPartition, Offset)> {
        let (source, aggregated) = (&self.cfg.topology.source, self.aggregate_source());
        let mut offsets = Vec::new();
        let table = self.cfg.topology.table_topic();
        for (p, t) in self.tasks.iter().filter(|(_, t)| t.commit_needed) {
            if let Some(o) = t.source_position {
                offsets.push((TopicPartition::new(source.as_str(), *p), o));
            }
            if let (Some(o), Some(table)) = (t.table_position, table) {
                offsets.push((TopicPartition::new(table, *p), o));
            }
            if let Some(o) = t.position {
                offsets.push((TopicPartition::new(&aggregated, *p), o));
            }
        }
        offsets
    }

    /// Whether a task processed a record since its last commit.
    fn commit_needed(&self) -> bool {
        self.tasks.values().any(|t| t.commit_needed)
    }

    /// Commits every task that needs it (see the module docs); whether it succeeded (a
    /// failure has been recovered from).
    async fn commit(&mut self) -> bool {
        self.last_commit_ns = self.host.now_ns();
        if !self.commit_needed() && self.txn_group.is_none() {
            // `TaskManager.commit` (apache/kafka trunk 4.0) takes only the tasks whose
            // `commitNeeded()`: with no record processed since the last commit, no offsets
            // are committed (they could only repeat the last ones, or move a newer commit
            // of another member back) and no transaction is begun.
            return true;
        }
        let prepared = match self.flush_caches().await {
            Ok(()) => self.flush_sends().await,
            Err(e) => Err(e),
        };
        if let Err((e, fatal)) = prepared {
            if fatal {
                crate::mark!("streams:producer-fenced");
            }
            self.recover(e, fatal).await;
            return false;
        }
        let offsets = self.offsets();
        for task in self.tasks.values_mut() {
            task.commit_needed = false;
        }
        if offsets.is_empty() && self.txn_group.is_none() {
            return true;
        }
        let value = Value::StreamsCommit {
            guarantee: self.cfg.spec.processing_guarantee.name().to_string(),
            records: std::mem::take(&mut self.sent),
            offsets: offsets.clone(),
        };
        self.record(OpKind::Invoke, value.clone(), None);
        let result = match self.cfg.eos() {
            false => self.commit_alo(&offsets).await,
            true => self.commit_eos(&offsets).await,
        };
        self.consumed_unsent = false;
        match result {
            Ok(()) => {
                self.record(OpKind::Ok, value, None);
                self.maybe_purge_committed_records(&offsets).await;
                true
            }
            Err((e, ambiguous, fatal)) => {
                if fatal && !ambiguous {
                    crate::mark!("streams:producer-fenced");
                }
                let kind = if ambiguous {
                    OpKind::Info
                } else {
                    OpKind::Fail
                };
                self.record(kind, value, Some(e.clone()));
                self.recover(e, fatal || ambiguous).await;
                false
            }
        }
    }

    /// `TaskManager.maybePurgeCommittedRecords` (apache/kafka trunk 4.0), called by
    /// `StreamThread.maybeCommit` after a commit once `repartition.purge.interval.ms` passed
    /// since the last purge: DeleteRecords of each repartition partition below the offset
    /// just committed for it, which no task will read again. Java sends them without
    /// waiting (and skips a purge while the previous one is in flight); here they are
    /// awaited one by one, and a failure is only logged, as Java logs it.
    async fn maybe_purge_committed_records(&mut self, committed: &[(TopicPartition, Offset)]) {
        let Some(topic) = self
            .cfg
            .topology
            .repartition_topic(&self.cfg.spec.application_id)
        else {
            return;
        };
        let interval_ns = self.cfg.spec.repartition_purge_interval_ms() * 1_000_000;
        let now = self.host.now_ns();
        if now < self.last_purge_ns + interval_ns {
            return;
        }
        self.last_purge_ns = now;
        for (tp, before) in committed.iter().filter(|(tp, _)| tp.topic == topic) {
            match self.host.delete_records(tp, *before).await {
                Ok(_) => crate::mark!("streams:repartition-purged"),
                Err(e) => tracing::debug!(%tp, %e, "purge of the repartition topic"),
            }
        }
    }

    /// Persistent stores with their checkpoint (the sends were flushed), then offsets.
    async fn commit_alo(&mut self, offsets: &[(TopicPartition, Offset)]) -> CommitResult {
        self.flush_stores(self.tasks.keys().copied(), true);
        self.consumer
            .commit(offsets)
            .await
            .map_err(|e| (e.to_string(), e.is_ambiguous(), false))
    }

    /// The offsets into the open transaction with its group metadata, then commit.
    async fn commit_eos(&mut self, offsets: &[(TopicPartition, Offset)]) -> CommitResult {
        if self.txn_group.is_none() && self.consumed_unsent {
            // Input consumed and nothing sent (a stateless filter dropped it all): the
            // offsets alone make the transaction (`TaskExecutor.commitOffsetsOrTransaction`
            // commits the tasks that need it; `StreamsProducer.commitTransaction` begins one).
            crate::mark!("streams:offsets-only-transaction");
            self.maybe_begin_transaction()
                .map_err(|(e, fatal)| (e, false, fatal))?;
        }
        let Writer::Eos(p) = &self.writer else {
            unreachable!("EOS has a transactional producer")
        };
        let Some(began) = self.txn_group.clone() else {
            return Ok(()); // nothing consumed since the last commit: nothing to commit
        };
        // The consumer's metadata now (Java's `commitOffsetsOrTransaction`), which is the
        // one the transaction began with unless it spans a cooperative rebalance.
        let group = self.consumer.group_metadata().unwrap_or(began);
        let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
        p.send_offsets_to_transaction(offsets, &group, timeout)
            .await
            .map_err(|e| (e.to_string(), false, e.is_fatal()))?;
        p.commit_transaction(timeout)
            .await
            .map_err(|e| (e.to_string(), true, true))?;
        self.txn_group = None;
        self.flush_stores(self.tasks.keys().copied(), false);
        Ok(())
    }

    /// Flushes the persistent stores of tasks `partitions` to disk, with their checkpoint
    /// (the changelog offset they are complete up to) when `checkpoint`; nothing for
    /// in-memory stores.
    fn flush_stores(&self, partitions: impl Iterator<Item = u32>, checkpoint: bool) {
        if self.cfg.spec.store != StoreKind::Persistent {
            return;
        }
        for p in partitions {
            let t = &self.tasks[&p];
            let flushed = Flushed {
                store: t.store.clone(),
                checkpoint: checkpoint.then_some(t.changelog_end),
            };
            self.cfg.disk.write(self.cfg.index, p, flushed);
        }
    }

    /// After an error: under EOS abort (or recreate the producer when it is unusable or a
    /// commit's outcome is unknown) and wipe every store; then close every task, so that
    /// each reopens at the committed offset with a restored store.
    async fn recover(&mut self, error: String, recreate: bool) {
        let tasks = self.tasks.keys().copied().collect();
        let value = Value::StreamsRecover {
            reason: error,
            tasks,
        };
        self.record(OpKind::Info, value, None);
        crate::mark!("streams:recover");
        self.collector.reset();
        if let Writer::Eos(p) = &self.writer {
            let mut recreate = recreate;
            if self.txn_group.take().is_some() && !recreate {
                let timeout = Duration::from_millis(CALL_TIMEOUT_MS);
                recreate = p.abort_transaction(timeout).await.is_err();
                if !recreate {
                    crate::mark!("streams:txn-aborted");
                }
            }
            if recreate {
                crate::mark!("streams:producer-recreated");
                self.writer = new_writer(&self.cfg, &self.host).await;
            }
            let open: Vec<u32> = self.tasks.keys().copied().collect();
            for p in open {
                self.close_dirty(p);
            }
        }
        self.tasks.clear();
        self.suspended.clear();
        self.sent = 0;
        self.consumed_unsent = false;
        self.publish_report();
    }
}

/// Error text, whether the outcome is unknown, whether the producer must be recreated.
type CommitResult = Result<(), (String, bool, bool)>;

fn record(topic: &str, partition: Option<u32>, key: &Bytes, value: &Bytes) -> ProducerRecord {
    ProducerRecord {
        topic: topic.to_string(),
        partition,
        key: Some(key.clone()),
        value: Some(value.clone()),
        headers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    fn config(store: &str) -> ProcessorConfig {
        let text = format!(
            "name = \"t\"\npipeline = \"streams-count\"\nclaim = \"exactly-once\"\n\
             [streams]\nprocessing_guarantee = \"exactly_once_v2\"\nstore = \"{store}\"\n"
        );
        let s = Scenario::parse(std::path::Path::new("t.toml"), &text).expect("parses");
        s.processor_config(0, Disk::default())
    }

    #[test]
    fn the_transactional_id_carries_a_process_id_that_only_persistent_stores_keep() {
        let mut cfg = config("in-memory");
        let first = initialize_process_id(&cfg, 1_000).id;
        let second = initialize_process_id(&cfg, 2_000).id;
        assert_ne!(
            first, second,
            "a fresh process id per start without persistent stores"
        );
        assert_eq!(first.len(), 36);
        cfg.process_id = first.clone();
        assert_eq!(cfg.transactional_id(), format!("counts-{first}-1"));
        let cfg = config("persistent");
        let first = initialize_process_id(&cfg, 1_000);
        assert!(!first.from_state_dir, "drawn at the first start");
        let again = ProcessId {
            id: first.id,
            from_state_dir: true,
        };
        assert_eq!(
            initialize_process_id(&cfg, 2_000),
            again,
            "read back from the state dir"
        );
    }

    #[test]
    fn the_consumer_keeps_kafka_s_default_max_poll_interval() {
        let cfg = config("in-memory");
        assert_eq!(cfg.consumer_config().max_poll_interval_ms, 300_000);
    }
}

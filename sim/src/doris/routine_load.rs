//! Routine Load jobs as the FE keeps them: properties, state machine, task division,
//! progress and statistics.
//!
//! Sources (apache/doris, `fe/fe-core/src/main/java/org/apache/doris/load/routineload/`):
//! - `RoutineLoadJob`: `JobState` (NEED_SCHEDULE, RUNNING, PAUSED, STOPPED, CANCELLED),
//!   `checkStateTransform`, `updateNumOfData` (pauses the job with
//!   `TOO_MANY_FAILURE_ROWS_ERR` once the error rows of the current window pass
//!   `max_error_number`), `executeBeforeCheck` (a commit whose task the FE no longer
//!   holds is refused: [`DorisError::TaskAborted`]), `afterCommitted` / `afterAborted`
//!   (the progress moves with the attachment of the transaction, committed or aborted
//!   by the BE; a transaction the FE aborted carries none and moves nothing), and the
//!   state change journal, which never logs RUNNING (so a restarted FE finds a running
//!   job in NEED_SCHEDULE, its in-memory task list gone).
//! - `KafkaRoutineLoadJob.divideRoutineLoadJob`: `min(partitions, desired_concurrent_number,
//!   max_routine_load_task_concurrent_num)` tasks, partitions dealt round robin.
//! - `KafkaProgress`: per partition the *next* offset to consume (`OFFSET_BEGINNING` -2,
//!   `OFFSET_END` -1 until the first commit); `SHOW ROUTINE LOAD` prints `next - 1`.
//! - `RLTaskTxnCommitAttachment`: the rows and bytes a task read and the partitions' next
//!   offsets, written into the transaction at commit.
//! - `ScheduleRule.isNeedAutoSchedule`: a job paused for a reason other than its data
//!   (not `TOO_MANY_FAILURE_ROWS_ERR`, not a user's PAUSE) is resumed automatically, at
//!   most 3 times in 5 minutes, after a back-off.
//! - `RoutineLoadTaskInfo` / `KafkaTaskInfo`: the task's timeout is `max_batch_interval`
//!   × `routine_load_task_timeout_multiplier` (10); its label is the task's id.

use super::error::DorisError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// FE `Config.routine_load_task_timeout_multiplier` default.
pub const TASK_TIMEOUT_MULTIPLIER: u64 = 10;
/// FE `Config.max_routine_load_task_concurrent_num` default.
pub const TASK_CONCURRENT_MAX: usize = 256;
/// `ScheduleRule`: automatic resumes allowed per [`AUTO_RESUME_WINDOW_MS`].
pub const AUTO_RESUME_MAX: u32 = 3;
/// `ScheduleRule`: the window of [`AUTO_RESUME_MAX`], 5 minutes.
pub const AUTO_RESUME_WINDOW_MS: u64 = 5 * 60 * 1000;
/// `ScheduleRule`'s back-off before an automatic resume: 5 s × 2^(resumes so far).
pub const AUTO_RESUME_BACKOFF_MS: u64 = 5_000;

/// A Kafka position in `kafka_offsets` / `property.kafka_default_offsets` / `Progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum KafkaOffset {
    /// `OFFSET_BEGINNING`.
    Beginning,
    /// `OFFSET_END`.
    End,
    /// The next offset to consume.
    Next(i64),
}

impl KafkaOffset {
    fn parse(text: &str) -> Result<Self, DorisError> {
        match text.trim() {
            "OFFSET_BEGINNING" => Ok(Self::Beginning),
            "OFFSET_END" => Ok(Self::End),
            t => t.parse::<i64>().map(Self::Next).map_err(|_| {
                DorisError::Analysis(format!(
                    "kafka_offsets: '{t}' is not an offset, OFFSET_BEGINNING or OFFSET_END"
                ))
            }),
        }
    }
}

/// `property.isolation.level` (librdkafka's default `read_committed`): the BE's consumer
/// (apache/doris `be/src/runtime/routine_load/data_consumer.cpp`,
/// `KafkaDataConsumer::init`) sets no `isolation.level` of its own, only the job's
/// `property.*` keys on its `RdKafka::Conf`, so librdkafka's default holds unless the job
/// overrides it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum IsolationLevel {
    /// `read_committed`.
    #[default]
    ReadCommitted,
    /// `read_uncommitted`.
    ReadUncommitted,
}

impl IsolationLevel {
    /// The Kafka consumer's isolation of this level (what the BE's consumer is configured
    /// with).
    pub fn kafka(self) -> crate::kafka::Isolation {
        match self {
            Self::ReadCommitted => crate::kafka::Isolation::ReadCommitted,
            Self::ReadUncommitted => crate::kafka::Isolation::ReadUncommitted,
        }
    }
}

/// `CREATE ROUTINE LOAD` properties (names verbatim in [`RoutineLoadProps::parse`]).
///
/// ## Default values
/// Doris 2.1's: `desired_concurrent_number` 5, `max_batch_interval` 60 s,
/// `max_batch_rows` 20,000,000, `max_batch_size` 1 GiB, `max_error_number` 0,
/// `strict_mode` false, `property.kafka_default_offsets` OFFSET_END,
/// `property.isolation.level` read_committed. The model does not enforce Doris' lower
/// bounds (`max_batch_rows` ≥ 200,000, `max_batch_size` ≥ 100 MB), so scaled-down runs
/// can cut batches of a few rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutineLoadProps {
    /// `desired_concurrent_number`.
    pub desired_concurrent_number: usize,
    /// `max_batch_interval`, seconds.
    pub max_batch_interval_s: u64,
    /// `max_batch_rows`.
    pub max_batch_rows: u64,
    /// `max_batch_size`, bytes.
    pub max_batch_size: u64,
    /// `max_error_number`.
    pub max_error_number: u64,
    /// `strict_mode`.
    pub strict_mode: bool,
    /// `kafka_broker_list`.
    pub kafka_broker_list: String,
    /// `kafka_topic`.
    pub kafka_topic: String,
    /// `kafka_partitions` (empty: all of the topic's).
    pub kafka_partitions: Vec<i32>,
    /// `kafka_offsets`, one per `kafka_partitions` entry (empty: the default).
    pub kafka_offsets: Vec<KafkaOffset>,
    /// `property.group.id`.
    pub group_id: Option<String>,
    /// `property.kafka_default_offsets`.
    pub kafka_default_offsets: KafkaOffset,
    /// `property.isolation.level`.
    pub isolation_level: IsolationLevel,
}

impl Default for RoutineLoadProps {
    fn default() -> Self {
        Self {
            desired_concurrent_number: 5,
            max_batch_interval_s: 60,
            max_batch_rows: 20_000_000,
            max_batch_size: 1 << 30,
            max_error_number: 0,
            strict_mode: false,
            kafka_broker_list: String::new(),
            kafka_topic: String::new(),
            kafka_partitions: Vec::new(),
            kafka_offsets: Vec::new(),
            group_id: None,
            kafka_default_offsets: KafkaOffset::End,
            isolation_level: IsolationLevel::ReadCommitted,
        }
    }
}

impl RoutineLoadProps {
    /// Parses the job and data-source properties, keyed by their Doris names.
    ///
    /// # Errors
    /// [`DorisError::Analysis`] naming the property: unknown key, bad number, missing
    /// `kafka_broker_list` / `kafka_topic`, `kafka_offsets` without matching partitions.
    pub fn parse(props: &BTreeMap<String, String>) -> Result<Self, DorisError> {
        let mut p = Self::default();
        for (key, value) in props {
            p.set(key, value)?;
        }
        if p.kafka_broker_list.is_empty() || p.kafka_topic.is_empty() {
            return Err(DorisError::Analysis(
                "kafka_broker_list and kafka_topic are required".into(),
            ));
        }
        if !p.kafka_offsets.is_empty() && p.kafka_offsets.len() != p.kafka_partitions.len() {
            return Err(DorisError::Analysis(format!(
                "kafka_offsets has {} entries for {} kafka_partitions",
                p.kafka_offsets.len(),
                p.kafka_partitions.len()
            )));
        }
        if p.desired_concurrent_number == 0 || p.max_batch_interval_s == 0 {
            return Err(DorisError::Analysis(
                "desired_concurrent_number and max_batch_interval must be positive".into(),
            ));
        }
        Ok(p)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), DorisError> {
        match key {
            "desired_concurrent_number" => self.desired_concurrent_number = number(key, value)?,
            "max_batch_interval" => self.max_batch_interval_s = number(key, value)?,
            "max_batch_rows" => self.max_batch_rows = number(key, value)?,
            "max_batch_size" => self.max_batch_size = number(key, value)?,
            "max_error_number" => self.max_error_number = number(key, value)?,
            "strict_mode" => self.strict_mode = number::<bool>(key, value)?,
            "format" if value == "json" => {}
            "kafka_broker_list" => self.kafka_broker_list = value.into(),
            "kafka_topic" => self.kafka_topic = value.into(),
            "kafka_partitions" => {
                self.kafka_partitions = list(value)
                    .map(|v| number(key, v))
                    .collect::<Result<_, _>>()?
            }
            "kafka_offsets" => {
                self.kafka_offsets = list(value)
                    .map(KafkaOffset::parse)
                    .collect::<Result<_, _>>()?
            }
            "property.group.id" => self.group_id = Some(value.into()),
            "property.kafka_default_offsets" => {
                self.kafka_default_offsets = KafkaOffset::parse(value)?
            }
            "property.isolation.level" => {
                self.isolation_level = match value {
                    "read_committed" => IsolationLevel::ReadCommitted,
                    "read_uncommitted" => IsolationLevel::ReadUncommitted,
                    _ => return Err(bad(key, value, "read_committed or read_uncommitted")),
                }
            }
            _ => return Err(bad(key, value, "a Routine Load property the model knows")),
        }
        Ok(())
    }

    /// The task timeout, ms (`max_batch_interval` × [`TASK_TIMEOUT_MULTIPLIER`]).
    pub fn task_timeout_ms(&self) -> u64 {
        self.max_batch_interval_s * TASK_TIMEOUT_MULTIPLIER * 1000
    }
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, DorisError> {
    value
        .trim()
        .parse()
        .map_err(|_| bad(key, value, std::any::type_name::<T>()))
}

fn bad(key: &str, value: &str, expected: &str) -> DorisError {
    DorisError::Analysis(format!("property {key} = '{value}': expected {expected}"))
}

/// `RoutineLoadJob.JobState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Waiting for the scheduler to cut tasks.
    NeedSchedule,
    /// Tasks running.
    Running,
    /// Paused, with a reason.
    Paused,
    /// Stopped by the user (final).
    Stopped,
    /// Cancelled by an error (final).
    Cancelled,
}

impl JobState {
    /// STOPPED or CANCELLED.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Stopped | Self::Cancelled)
    }
}

/// `InternalErrorCode` of a pause, as far as auto-resume cares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PauseCode {
    /// `TOO_MANY_FAILURE_ROWS_ERR`: never resumed automatically.
    TooManyFailureRows,
    /// `MANUAL_PAUSE_ERR`: `PAUSE ROUTINE LOAD`; never resumed automatically.
    ManualPause,
    /// A task-side failure (`TASKS_ABORT_ERR`, offset out of range, Kafka unreachable):
    /// resumed automatically per `ScheduleRule`.
    TasksAbort,
}

/// Why a job is paused (`ErrorReason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseReason {
    /// Code.
    pub code: PauseCode,
    /// Message, as `SHOW ROUTINE LOAD`'s `ReasonOfStateChanged`.
    pub msg: String,
}

/// `RLTaskTxnCommitAttachment`: what a task read, recorded in its transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlTaskTxnCommitAttachment {
    /// Job.
    pub job_id: u64,
    /// Task.
    pub task_id: u64,
    /// Rows read (loaded + filtered + unselected).
    pub total_rows: u64,
    /// Rows filtered (error rows).
    pub filtered_rows: u64,
    /// Rows dropped by a WHERE clause (none are modelled).
    pub unselected_rows: u64,
    /// Bytes read.
    pub received_bytes: u64,
    /// Time the task ran, ms.
    pub task_execution_time_ms: u64,
    /// Per partition, the next offset to consume after this batch: the consumer's
    /// position after the batch's last record, never "last offset + 1" (offsets are not
    /// dense).
    pub next_offsets: BTreeMap<i32, i64>,
}

/// `SHOW ROUTINE LOAD`'s `Statistic`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Statistic {
    /// `receivedBytes`.
    pub received_bytes: u64,
    /// `errorRows`.
    pub error_rows: u64,
    /// `committedTaskNum`.
    pub committed_task_num: u64,
    /// `loadedRows` = total − error − unselected.
    pub loaded_rows: u64,
    /// `loadRowsRate`, rows/s over the tasks' execution time.
    pub load_rows_rate: u64,
    /// `abortedTaskNum`.
    pub aborted_task_num: u64,
    /// `totalRows`.
    pub total_rows: u64,
    /// `unselectedRows`.
    pub unselected_rows: u64,
    /// `taskExecuteTimeMs`.
    pub task_execute_time_ms: u64,
}

impl Statistic {
    fn add(&mut self, a: &RlTaskTxnCommitAttachment) {
        self.total_rows += a.total_rows;
        self.error_rows += a.filtered_rows;
        self.unselected_rows += a.unselected_rows;
        self.received_bytes += a.received_bytes;
        self.task_execute_time_ms += a.task_execution_time_ms;
        self.loaded_rows = self.total_rows - self.error_rows - self.unselected_rows;
        self.load_rows_rate = (self.loaded_rows * 1000)
            .checked_div(self.task_execute_time_ms)
            .unwrap_or(0);
    }
}

/// A task (`KafkaTaskInfo`): held in the FE's memory only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutineLoadTask {
    /// Id (Doris: a UUID; the label is its text).
    pub task_id: u64,
    /// Its partitions.
    pub partitions: Vec<i32>,
    /// Its transaction once scheduled.
    pub txn_id: Option<u64>,
}

impl RoutineLoadTask {
    /// The label of its transaction.
    pub fn label(job_id: u64, task_id: u64) -> String {
        format!("rl-{job_id}-task-{task_id}")
    }
}

/// A Routine Load job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutineLoadJob {
    /// Id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// `COLUMNS(...)` and `jsonpaths`.
    pub spec: super::types::LoadSpec,
    /// Properties.
    pub props: RoutineLoadProps,
    /// State.
    pub state: JobState,
    /// Why paused or cancelled.
    pub pause_reason: Option<PauseReason>,
    /// `KafkaProgress`: partition → next offset to consume.
    pub progress: BTreeMap<i32, KafkaOffset>,
    /// Statistics (from the transactions' attachments).
    pub statistic: Statistic,
    /// Latest offsets of the partitions as last fetched (for `Lag`).
    pub latest_offsets: BTreeMap<i32, i64>,
    /// Tasks: in memory only, lost on an FE restart.
    pub tasks: Vec<RoutineLoadTask>,
    current_error_rows: u64,
    current_total_rows: u64,
    auto_resumes: Vec<u64>,
    paused_at_ms: u64,
}

impl RoutineLoadJob {
    /// A new job in NEED_SCHEDULE over `partitions` (the topic's, or `kafka_partitions`).
    pub fn new(
        id: u64,
        name: &str,
        db: &str,
        table: &str,
        spec: super::types::LoadSpec,
        props: RoutineLoadProps,
        partitions: &[i32],
    ) -> Self {
        let parts: Vec<i32> = if props.kafka_partitions.is_empty() {
            partitions.to_vec()
        } else {
            props.kafka_partitions.clone()
        };
        let progress = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                (
                    *p,
                    *props
                        .kafka_offsets
                        .get(i)
                        .unwrap_or(&props.kafka_default_offsets),
                )
            })
            .collect();
        Self {
            id,
            name: name.into(),
            db: db.into(),
            table: table.into(),
            spec,
            props,
            state: JobState::NeedSchedule,
            pause_reason: None,
            progress,
            statistic: Statistic::default(),
            latest_offsets: BTreeMap::new(),
            tasks: Vec::new(),
            current_error_rows: 0,
            current_total_rows: 0,
            auto_resumes: Vec::new(),
            paused_at_ms: 0,
        }
    }

    /// `checkStateTransform` then the change; leaving RUNNING drops the tasks.
    ///
    /// # Errors
    /// [`DorisError::JobStateTransform`] from a final state, or PAUSED → RUNNING
    /// directly (resume goes through NEED_SCHEDULE).
    pub fn set_state(
        &mut self,
        now_ms: u64,
        to: JobState,
        reason: Option<PauseReason>,
    ) -> Result<(), DorisError> {
        let refused =
            self.state.is_final() || (self.state == JobState::Paused && to == JobState::Running);
        if refused {
            return Err(DorisError::JobStateTransform {
                from: format!("{:?}", self.state),
                to: format!("{to:?}"),
            });
        }
        if to != JobState::Running {
            self.tasks.clear();
        }
        if to == JobState::Paused {
            crate::mark!("doris:routine-load-paused");
            self.paused_at_ms = now_ms;
        }
        self.pause_reason = reason;
        self.state = to;
        Ok(())
    }

    /// `divideRoutineLoadJob`: NEED_SCHEDULE → RUNNING with `min(partitions,
    /// desired_concurrent_number, 256)` tasks (Doris 2.x's
    /// `calculateCurrentConcurrentTaskNum`; 1.x also capped it by the alive BEs) once a BE
    /// is alive (`alive_be` > 0); ids from `next_task_id`.
    pub fn divide(&mut self, alive_be: usize, next_task_id: &mut u64) {
        let n = self
            .progress
            .len()
            .min(self.props.desired_concurrent_number)
            .min(TASK_CONCURRENT_MAX);
        if alive_be == 0 || n == 0 {
            return;
        }
        let mut tasks: Vec<Vec<i32>> = vec![Vec::new(); n];
        for (i, p) in self.progress.keys().enumerate() {
            tasks[i % n].push(*p);
        }
        self.tasks = tasks
            .into_iter()
            .map(|partitions| {
                *next_task_id += 1;
                RoutineLoadTask {
                    task_id: *next_task_id,
                    partitions,
                    txn_id: None,
                }
            })
            .collect();
        self.state = JobState::Running;
    }

    /// The task holding `txn_id`.
    pub fn task_of_txn(&self, txn_id: u64) -> Option<&RoutineLoadTask> {
        self.tasks.iter().find(|t| t.txn_id == Some(txn_id))
    }

    /// Applies a task's attachment (commit, or an abort the BE reported with one):
    /// progress of the task's partitions (`checkCommitInfo`: others are ignored),
    /// statistics, the error-rows window. Returns whether the job must pause.
    pub fn apply_attachment(
        &mut self,
        task: &RoutineLoadTask,
        a: &RlTaskTxnCommitAttachment,
    ) -> bool {
        for (p, next) in &a.next_offsets {
            if task.partitions.contains(p) {
                self.progress.insert(*p, KafkaOffset::Next(*next));
            }
        }
        self.statistic.add(a);
        self.current_error_rows += a.filtered_rows;
        self.current_total_rows += a.total_rows;
        let window_full = self.current_total_rows > self.props.max_batch_rows * 10;
        let too_many = self.current_error_rows > self.props.max_error_number;
        if window_full || too_many {
            self.current_error_rows = 0;
            self.current_total_rows = 0;
        }
        too_many
    }

    /// Replaces `task` by a fresh one on the same partitions (`unprotectRenewTask`).
    pub fn renew(&mut self, task_id: u64, next_task_id: &mut u64) {
        if let Some(t) = self.tasks.iter_mut().find(|t| t.task_id == task_id) {
            *next_task_id += 1;
            t.task_id = *next_task_id;
            t.txn_id = None;
        }
    }

    /// Whether a PAUSED job resumes now (`ScheduleRule.isNeedAutoSchedule`).
    pub fn auto_resume_due(&mut self, now_ms: u64) -> bool {
        let resumable = self
            .pause_reason
            .as_ref()
            .is_some_and(|r| r.code == PauseCode::TasksAbort);
        if self.state != JobState::Paused || !resumable {
            return false;
        }
        self.auto_resumes
            .retain(|t| now_ms.saturating_sub(*t) < AUTO_RESUME_WINDOW_MS);
        let count = self.auto_resumes.len() as u32;
        let backoff = AUTO_RESUME_BACKOFF_MS << count.min(6);
        if count >= AUTO_RESUME_MAX || now_ms < self.paused_at_ms + backoff {
            return false;
        }
        self.auto_resumes.push(now_ms);
        crate::mark!("doris:routine-load-auto-resume");
        true
    }

    /// A restarted FE's copy: RUNNING is never journaled, so it reads NEED_SCHEDULE; the
    /// tasks and the error window were memory only.
    pub fn recovered(&self) -> Self {
        let mut job = self.clone();
        job.tasks.clear();
        if job.state == JobState::Running {
            job.state = JobState::NeedSchedule;
        }
        job.auto_resumes.clear();
        job
    }

    /// `SHOW ROUTINE LOAD`.
    pub fn show(&self) -> ShowRoutineLoad {
        let progress = self
            .progress
            .iter()
            .map(|(p, o)| {
                let text = match o {
                    KafkaOffset::Beginning => "OFFSET_BEGINNING".to_string(),
                    KafkaOffset::End => "OFFSET_END".to_string(),
                    KafkaOffset::Next(n) => (n - 1).to_string(),
                };
                (p.to_string(), text)
            })
            .collect();
        let lag = self
            .progress
            .iter()
            .filter_map(|(p, o)| match (o, self.latest_offsets.get(p)) {
                (KafkaOffset::Next(n), Some(latest)) => Some((p.to_string(), latest - n)),
                _ => None,
            })
            .collect();
        ShowRoutineLoad {
            id: self.id,
            name: self.name.clone(),
            state: self.state,
            reason_of_state_changed: self.pause_reason.as_ref().map(|r| r.msg.clone()),
            statistic: self.statistic.clone(),
            progress,
            lag,
        }
    }
}

/// One row of `SHOW ROUTINE LOAD`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowRoutineLoad {
    /// `Id`.
    pub id: u64,
    /// `Name`.
    pub name: String,
    /// `State`.
    pub state: JobState,
    /// `ReasonOfStateChanged`.
    pub reason_of_state_changed: Option<String>,
    /// `Statistic`.
    pub statistic: Statistic,
    /// `Progress`: partition → last consumed offset (next − 1) or OFFSET_BEGINNING/END.
    pub progress: BTreeMap<String, String>,
    /// `Lag`: partition → latest offset − next offset.
    pub lag: BTreeMap<String, i64>,
}

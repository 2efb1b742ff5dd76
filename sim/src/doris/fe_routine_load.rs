//! The FE side of Routine Load: job DDL, the schedulers, and the transaction callbacks
//! that move a job's progress with its tasks' transactions.
//!
//! A task runs outside the model (the harness's Routine Load task executor plays the BE's
//! consumer): [`Doris::take_task`] hands it a task with its transaction begun and the
//! partitions' next offsets read from the job's progress at that moment; the executor
//! consumes one batch, writes it with [`Doris::write`], then [`Doris::commit_task`] with
//! the attachment (its consumer's positions after the batch), or [`Doris::abort_task`].
//! The FE refuses the commit of a task it no longer holds (timed out, job paused, FE
//! restarted): `RoutineLoadJob.executeBeforeCheck`.

use super::error::DorisError;
use super::model::Doris;
use super::routine_load::{
    JobState, KafkaOffset, PauseCode, PauseReason, RlTaskTxnCommitAttachment, RoutineLoadJob,
    RoutineLoadProps, RoutineLoadTask, ShowRoutineLoad,
};
use super::txn::{BeginTxn, LoadSource};
use super::types::LoadSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `CREATE ROUTINE LOAD db.name ON table COLUMNS(...) PROPERTIES(...) FROM KAFKA(...)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateRoutineLoad {
    /// Job name.
    pub name: String,
    /// Database.
    pub db: String,
    /// Table.
    pub table: String,
    /// `COLUMNS(...)` and `jsonpaths` (its `strict_mode` is taken from `props`).
    pub spec: LoadSpec,
    /// Job and data-source properties.
    pub props: RoutineLoadProps,
}

/// A task handed to an executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAssignment {
    /// Job.
    pub job_id: u64,
    /// Task.
    pub task_id: u64,
    /// Its transaction (PREPARE).
    pub txn_id: u64,
    /// Its label.
    pub label: String,
    /// Partition → where to start (the job's progress when the task began).
    pub offsets: BTreeMap<i32, KafkaOffset>,
    /// How to convert the messages (with the job's `strict_mode`).
    pub spec: LoadSpec,
    /// The job's properties (topic, batch limits, isolation level, group id).
    pub props: RoutineLoadProps,
}

impl Doris {
    /// Creates a job over `partitions` (the topic's partitions as the FE fetched them;
    /// ignored when `kafka_partitions` is set). Returns the job id.
    ///
    /// # Errors
    /// Unknown table, a job of that name exists, bad `COLUMNS`.
    pub fn create_routine_load(
        &mut self,
        req: CreateRoutineLoad,
        partitions: &[i32],
    ) -> Result<u64, DorisError> {
        let def = self.table(&req.db, &req.table)?;
        req.spec.validate(def)?;
        let taken = self
            .fe
            .jobs
            .values()
            .any(|j| j.db == req.db && j.name == req.name && !j.state.is_final());
        if taken {
            return Err(DorisError::Analysis(format!(
                "Name {} already used in db {}",
                req.name, req.db
            )));
        }
        self.fe.next_job_id += 1;
        let id = self.fe.next_job_id;
        let mut spec = req.spec;
        spec.strict_mode = req.props.strict_mode;
        let job = RoutineLoadJob::new(
            id, &req.name, &req.db, &req.table, spec, req.props, partitions,
        );
        self.fe.jobs.insert(id, job);
        Ok(id)
    }

    fn job_mut(&mut self, db: &str, name: &str) -> Result<&mut RoutineLoadJob, DorisError> {
        self.fe
            .jobs
            .values_mut()
            .rev()
            .find(|j| j.db == db && j.name == name)
            .ok_or_else(|| DorisError::JobNotFound(name.into()))
    }

    /// `PAUSE ROUTINE LOAD FOR db.name`.
    ///
    /// # Errors
    /// No such job; a final job.
    pub fn pause_routine_load(
        &mut self,
        now_ms: u64,
        db: &str,
        name: &str,
    ) -> Result<(), DorisError> {
        let reason = PauseReason {
            code: PauseCode::ManualPause,
            msg: "ErrorReason{code=errCode = 100, msg='User root pauses routine load job'}".into(),
        };
        self.job_mut(db, name)?
            .set_state(now_ms, JobState::Paused, Some(reason))
    }

    /// `RESUME ROUTINE LOAD FOR db.name`: PAUSED → NEED_SCHEDULE.
    ///
    /// # Errors
    /// No such job; a final job.
    pub fn resume_routine_load(
        &mut self,
        now_ms: u64,
        db: &str,
        name: &str,
    ) -> Result<(), DorisError> {
        self.job_mut(db, name)?
            .set_state(now_ms, JobState::NeedSchedule, None)
    }

    /// `STOP ROUTINE LOAD FOR db.name` (final).
    ///
    /// # Errors
    /// No such job; a final job.
    pub fn stop_routine_load(
        &mut self,
        now_ms: u64,
        db: &str,
        name: &str,
    ) -> Result<(), DorisError> {
        self.job_mut(db, name)?
            .set_state(now_ms, JobState::Stopped, None)
    }

    /// `SHOW ROUTINE LOAD FOR db.name`.
    ///
    /// # Errors
    /// No such job.
    pub fn show_routine_load(&self, db: &str, name: &str) -> Result<ShowRoutineLoad, DorisError> {
        self.fe
            .jobs
            .values()
            .rev()
            .find(|j| j.db == db && j.name == name)
            .map(RoutineLoadJob::show)
            .ok_or_else(|| DorisError::JobNotFound(name.into()))
    }

    /// Records the partitions' latest offsets as the FE fetched them (for `Lag`).
    pub fn update_latest_offsets(&mut self, job_id: u64, latest: BTreeMap<i32, i64>) {
        if let Some(job) = self.fe.jobs.get_mut(&job_id) {
            job.latest_offsets = latest;
        }
    }

    /// `RoutineLoadScheduler` and auto-resume: NEED_SCHEDULE jobs are divided over
    /// `alive_be` BEs (none alive: they wait), PAUSED ones resumed when due.
    pub(super) fn schedule_routine_load(&mut self, now_ms: u64, alive_be: usize) {
        let mut next = self.fe.next_task_id;
        for job in self.fe.jobs.values_mut() {
            if job.auto_resume_due(now_ms) {
                job.set_state(now_ms, JobState::NeedSchedule, None)
                    .expect("PAUSED → NEED_SCHEDULE");
            }
            if job.state == JobState::NeedSchedule {
                job.divide(alive_be, &mut next);
            }
        }
        self.fe.next_task_id = next;
    }

    /// `RoutineLoadTaskScheduler`: the next idle task of a RUNNING job, its transaction
    /// begun with the task's label and timeout.
    pub fn take_task(&mut self, now_ms: u64) -> Option<TaskAssignment> {
        let (job_id, task) = self.fe.jobs.values().find_map(|j| {
            let idle = j.tasks.iter().find(|t| t.txn_id.is_none())?;
            (j.state == JobState::Running).then(|| (j.id, idle.clone()))
        })?;
        let job = &self.fe.jobs[&job_id];
        let label = RoutineLoadTask::label(job_id, task.task_id);
        let req = BeginTxn {
            db: job.db.clone(),
            table: job.table.clone(),
            label: label.clone(),
            source: LoadSource::RoutineLoad {
                job_id,
                task_id: task.task_id,
            },
            timeout_ms: job.props.task_timeout_ms(),
        };
        let offsets = task
            .partitions
            .iter()
            .map(|p| (*p, job.progress[p]))
            .collect();
        let (spec, props) = (job.spec.clone(), job.props.clone());
        let txn_id = self.fe.txns.begin(now_ms, req).ok()?;
        let job = self.fe.jobs.get_mut(&job_id).expect("found above");
        let slot = job.tasks.iter_mut().find(|t| t.task_id == task.task_id);
        slot.expect("found above").txn_id = Some(txn_id);
        if job.tasks.iter().filter(|t| t.txn_id.is_some()).count() >= 2 {
            // Two tasks of one job hold transactions at once: they run concurrently, as
            // `desired_concurrent_number` lets them (`RoutineLoadTaskScheduler` schedules
            // every idle task of a job while BE slots are free).
            crate::mark!("doris:routine-load-tasks-concurrent");
        }
        Some(TaskAssignment {
            job_id,
            task_id: task.task_id,
            txn_id,
            label,
            offsets,
            spec,
            props,
        })
    }

    fn job_of_txn(&self, txn_id: u64) -> Option<u64> {
        match self.fe.txns.get(txn_id)?.source {
            LoadSource::RoutineLoad { job_id, .. } => Some(job_id),
            LoadSource::StreamLoad { .. } => None,
        }
    }

    /// Commits a task's transaction with its attachment: data and progress move together.
    ///
    /// # Errors
    /// [`DorisError::TaskAborted`] when the FE no longer holds the task; the
    /// transaction's own errors (timed out, lost load channel).
    pub fn commit_task(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        a: RlTaskTxnCommitAttachment,
    ) -> Result<(), DorisError> {
        let job_id = self
            .job_of_txn(txn_id)
            .ok_or(DorisError::TxnNotFound(txn_id))?;
        let job = &self.fe.jobs[&job_id];
        let Some(task) = job.task_of_txn(txn_id).cloned() else {
            crate::mark!("doris:commit-of-dropped-task");
            let label = self
                .fe
                .txns
                .get(txn_id)
                .map(|t| t.label.clone())
                .unwrap_or_default();
            return Err(DorisError::TaskAborted { txn_id, label });
        };
        self.commit(now_ms, txn_id, Some(a.clone()))?;
        let mut next = self.fe.next_task_id;
        let job = self.fe.jobs.get_mut(&job_id).expect("found above");
        job.statistic.committed_task_num += 1;
        let pause = job.apply_attachment(&task, &a);
        job.renew(task.task_id, &mut next);
        self.fe.next_task_id = next;
        if pause {
            self.pause_for_errors(now_ms, job_id);
        }
        Ok(())
    }

    fn pause_for_errors(&mut self, now_ms: u64, job_id: u64) {
        let job = self.fe.jobs.get_mut(&job_id).expect("job of a task");
        let msg = format!(
            "ErrorReason{{code=errCode = 102, msg='current error rows is more than max \
             error num: {}'}}",
            job.props.max_error_number
        );
        let reason = PauseReason {
            code: PauseCode::TooManyFailureRows,
            msg,
        };
        if job
            .set_state(now_ms, JobState::Paused, Some(reason))
            .is_ok()
        {
            crate::mark!("doris:routine-load-too-many-error-rows");
        }
    }

    /// Aborts a task's transaction. With an `attachment` (the BE aborted a batch it had
    /// read, e.g. every row filtered) the progress still moves, as `afterAborted` does;
    /// without one nothing moves. `pause` (offset out of range, Kafka unreachable) pauses
    /// the job with an auto-resumable reason instead of renewing the task.
    ///
    /// # Errors
    /// The transaction is not found or already COMMITTED.
    pub fn abort_task(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        reason: &str,
        attachment: Option<RlTaskTxnCommitAttachment>,
        pause: bool,
    ) -> Result<(), DorisError> {
        self.fe
            .txns
            .abort(now_ms, txn_id, reason, attachment.clone())?;
        self.drop_rows(txn_id);
        if pause {
            self.on_task_paused(now_ms, txn_id, reason);
        } else {
            self.on_task_txn_aborted(now_ms, txn_id, attachment, reason);
        }
        Ok(())
    }

    fn on_task_paused(&mut self, now_ms: u64, txn_id: u64, reason: &str) {
        let Some(job_id) = self.job_of_txn(txn_id) else {
            return;
        };
        let job = self.fe.jobs.get_mut(&job_id).expect("job of a task");
        if job.task_of_txn(txn_id).is_none() {
            return;
        }
        job.statistic.aborted_task_num += 1;
        let reason = PauseReason {
            code: PauseCode::TasksAbort,
            msg: format!("ErrorReason{{code=errCode = 104, msg='{reason}'}}"),
        };
        let _ = job.set_state(now_ms, JobState::Paused, Some(reason));
    }

    /// `afterAborted`: a task the FE still holds counts as aborted and is renewed; its
    /// attachment, if any, moves the progress.
    pub(super) fn on_task_txn_aborted(
        &mut self,
        now_ms: u64,
        txn_id: u64,
        attachment: Option<RlTaskTxnCommitAttachment>,
        _reason: &str,
    ) {
        let Some(job_id) = self.job_of_txn(txn_id) else {
            return;
        };
        let mut next = self.fe.next_task_id;
        let job = self.fe.jobs.get_mut(&job_id).expect("job of a task");
        let Some(task) = job.task_of_txn(txn_id).cloned() else {
            return;
        };
        crate::mark!("doris:routine-load-task-aborted");
        job.statistic.aborted_task_num += 1;
        let pause = attachment
            .as_ref()
            .is_some_and(|a| job.apply_attachment(&task, a));
        job.renew(task.task_id, &mut next);
        self.fe.next_task_id = next;
        if pause {
            self.pause_for_errors(now_ms, job_id);
        }
    }
}

//! Running a plan's steps, and the [`SinkTask`] implementation.
//!
//! # Errors in `put` (clickhouse-kafka-connect v1.5.0 `ProxySinkTask.put`)
//! Each topic-partition's records go through `Processing.doLogic` on their own. What it
//! throws goes to `Utils.handleException`: a retriable error (ClickHouse codes such as
//! 159, 209, 210, 242, 319, 999, socket timeouts) fails the whole `put` with a
//! `RetriableException`, so the worker redelivers the batch; anything else fails the task
//! under `errors.tolerance=none`, and under `errors.tolerance=all` is ignored: the
//! partition's records are reported (`Utils.sendTODLQ`) and the next partition is
//! processed. Reports go to the worker's errant record reporter, or nowhere when Connect
//! gave the task none ([`super::ClickHouseSinkConfig::errant_reporter`]).

use super::plan::{self, Phase, Range, StateRecord, Step};
use super::{ClickHouseSinkTask, Stop};
use crate::client::clickhouse::{ClickHouse, KeeperMap};
use crate::connect::task::{
    ConnectError, ErrantRecordReporter, SinkRecord, SinkTask, SinkTaskContext,
};
use crate::mark;
use async_trait::async_trait;
use eosim_sim::clickhouse::types::Insert;
use eosim_sim::kafka::{Offset, TopicPartition};
use std::collections::BTreeMap;

impl<C: ClickHouse + KeeperMap> ClickHouseSinkTask<C> {
    async fn point(&self, name: &'static str) {
        mark!(&format!("fault-point:{name}"));
        self.hooks.fault_point(name).await;
    }

    /// Plans and runs the partition's pending records.
    async fn process(
        &mut self,
        tp: &TopicPartition,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), Stop> {
        let Some(records) = self.pending.get(tp).filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let batch = Range::new(records[0].offset, records[records.len() - 1].offset);
        let seen = self.read_state(tp).await?;
        if self.config.variant.fenced() && !self.still_owner(&seen) {
            mark!("fencing:stale-owner-before-plan");
            return Err(Stop::Fenced);
        }
        let stored = seen.record;
        if stored.is_some_and(|s| batch.min > s.range.max + 1) {
            // Offsets are not dense: transaction markers, aborted records skipped under
            // read_committed, compaction (apache/druid#5404).
            mark!("clickhouse-sink:batch-after-offset-gap");
        }
        let variant = self.config.variant;
        let plan = match plan::decide(variant, stored, batch) {
            Ok(plan) => plan,
            Err(m) => {
                let tolerated = self.config.tolerate_state_mismatch;
                match tolerated.then(|| plan::tolerated(variant, &m)).flatten() {
                    Some(steps) => {
                        mark!(&format!("case:{}:tolerated", m.case.name()));
                        plan::Plan {
                            case: m.case,
                            steps,
                        }
                    }
                    None => {
                        mark!(&format!("case:{}:error", m.case.name()));
                        let e = ConnectError::Fatal(format!("{tp}: {m}"));
                        return Err(Stop::Connect(e));
                    }
                }
            }
        };
        let phase = stored.map_or("none", |s| s.phase.name());
        mark!(&format!("case:{}:{phase}", plan.case.name()));
        if plan.steps == [Step::Hold] {
            mark!("token:hold-until-stored-range-covered");
            return Ok(());
        }
        for step in plan.steps {
            self.step(tp, step, reporter).await?;
        }
        self.committable.insert(tp.clone(), batch.max + 1);
        self.pending.remove(tp);
        Ok(())
    }

    fn records_in(&self, tp: &TopicPartition, range: Range) -> Vec<SinkRecord> {
        let all = self.pending.get(tp).map_or(&[][..], Vec::as_slice);
        all.iter()
            .filter(|r| range.contains(r.offset))
            .cloned()
            .collect()
    }

    async fn step(
        &mut self,
        tp: &TopicPartition,
        step: Step,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), Stop> {
        match step {
            Step::SetBefore(range) => {
                self.point("before-before").await;
                let record = StateRecord {
                    range,
                    phase: Phase::Before,
                };
                self.write_state(tp, Some(record)).await?;
            }
            Step::Insert { rows, token } => {
                self.point("between-before-and-insert").await;
                self.insert(tp, rows, token, reporter).await?;
                self.point("between-insert-and-after").await;
            }
            Step::SetAfter(range) => {
                let record = StateRecord {
                    range,
                    phase: Phase::After,
                };
                self.write_state(tp, Some(record)).await?;
                self.point("after-after").await;
            }
            Step::Drop(range) => mark!(&format!("drop:{}", range_kind(range))),
            Step::Dlq(range) => {
                for record in self.records_in(tp, range) {
                    let why = format!("{tp}: records {range} are not the stored BEFORE range");
                    self.report(reporter, &record, &why)
                        .map_err(Stop::Connect)?;
                }
            }
            Step::Hold => unreachable!("Hold is a plan of its own"),
        }
        Ok(())
    }

    /// Reports `record` to the errant record reporter, or drops it silently when the worker
    /// gave the task none (the connector's `devNullErrorReporter`).
    fn report(
        &self,
        reporter: &mut dyn ErrantRecordReporter,
        record: &SinkRecord,
        why: &str,
    ) -> Result<(), ConnectError> {
        if !self.config.errant_reporter {
            mark!("dlq:no-reporter-dropped");
            return Ok(());
        }
        mark!("dlq:record");
        reporter.report(record, why)
    }

    /// Inserts the records of `range` (with `token`'s deduplication token where the
    /// variant uses one).
    async fn insert(
        &mut self,
        tp: &TopicPartition,
        range: Range,
        token: Range,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), Stop> {
        if self.config.variant.fenced() {
            let seen = self.read_state(tp).await?;
            if !self.still_owner(&seen) {
                mark!("fencing:insert-refused-stale-owner");
                return Err(Stop::Fenced);
            }
        }
        let mut rows = Vec::new();
        for record in self.records_in(tp, range) {
            match &record.value {
                Some(v @ serde_json::Value::Object(_)) => rows.push(v.clone()),
                _ => self
                    .report(reporter, &record, "value is not a JSON object")
                    .map_err(Stop::Connect)?,
            }
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = Insert::new(&self.config.table, rows.clone());
        if let Some(n) = self.config.max_insert_block_size {
            insert = insert.block_size(n);
        }
        insert.settings.min_insert_block_size_rows = self.config.min_insert_block_size_rows;
        insert.settings.min_insert_block_size_bytes = self.config.min_insert_block_size_bytes;
        if self.config.variant.uses_token() {
            // `QueryIdentifier.getDeduplicationToken`: `<topic>-<partition>-<min>-<max>`.
            let token = format!("{}-{}-{}-{}", tp.topic, tp.partition, token.min, token.max);
            insert = insert.token(&token);
        }
        self.point("mid-insert").await;
        self.hooks.inserting(tp, &rows);
        let result = self.client.insert(insert).await.map(drop);
        self.hooks.inserted(tp, &rows, &result);
        result.map_err(Stop::from)
    }
}

impl<C> ClickHouseSinkTask<C> {
    /// Another owner took `tp`: forget what this task holds of it and rewind it to the
    /// first record not handled, so nothing between is skipped if the task keeps it.
    fn fence(&mut self, tp: &TopicPartition) {
        self.fenced.insert(tp.clone());
        let first = self
            .pending
            .remove(tp)
            .and_then(|r| r.first().map(|r| r.offset));
        if let Some(offset) = first {
            mark!("fencing:rewind");
            self.context.offset(tp.clone(), offset);
        }
    }
}

fn range_kind(range: Range) -> &'static str {
    if range.min == range.max {
        "one"
    } else {
        "range"
    }
}

#[async_trait]
impl<C: ClickHouse + KeeperMap> SinkTask for ClickHouseSinkTask<C> {
    fn initialize(&mut self, context: SinkTaskContext) {
        self.context = context;
    }

    async fn open(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        for tp in partitions {
            self.pending.remove(tp);
            self.fenced.remove(tp);
            if self.config.variant.fenced() {
                self.claim(tp).await?;
            }
        }
        Ok(())
    }

    async fn put(
        &mut self,
        records: Vec<SinkRecord>,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), ConnectError> {
        let mut by_tp: BTreeMap<TopicPartition, Vec<SinkRecord>> = BTreeMap::new();
        for r in records {
            by_tp.entry(r.tp.clone()).or_default().push(r);
        }
        let mut handled = false;
        for (tp, records) in by_tp {
            if self.fenced.contains(&tp) {
                // The group still gives this task the partition: take it back first.
                mark!("fencing:reclaim");
                self.claim(&tp).await?;
                self.fenced.remove(&tp);
            }
            let pending = self.pending.entry(tp.clone()).or_default();
            let last = pending.last().map(|r| r.offset);
            pending.extend(
                records
                    .into_iter()
                    .filter(|r| last.is_none_or(|l| r.offset > l)),
            );
            match self.process(&tp, reporter).await {
                Ok(()) => handled |= !self.pending.contains_key(&tp),
                Err(Stop::Fenced) => self.fence(&tp),
                Err(Stop::Connect(ConnectError::Fatal(why)))
                    if self.config.errors_tolerance_all =>
                {
                    // `Utils.handleException` ignores it; `Utils.sendTODLQ` reports the
                    // partition's records, and `put` goes on with the next partition.
                    mark!("tolerance:partition-records-reported");
                    let records = self.pending.remove(&tp).unwrap_or_default();
                    for record in &records {
                        self.report(reporter, record, &why)?;
                    }
                    if let Some(last) = records.last() {
                        self.committable.insert(tp.clone(), last.offset + 1);
                        handled = true;
                    }
                }
                Err(Stop::Connect(e)) => return Err(e),
            }
        }
        if handled {
            self.context.request_commit();
        }
        Ok(())
    }

    async fn pre_commit(
        &mut self,
        offsets: &BTreeMap<TopicPartition, Offset>,
    ) -> Result<BTreeMap<TopicPartition, Offset>, ConnectError> {
        let mut out = BTreeMap::new();
        for (tp, &consumed) in offsets {
            if self.fenced.contains(tp) {
                continue;
            }
            if let Some(&done) = self.committable.get(tp) {
                out.insert(tp.clone(), done.min(consumed));
            }
        }
        Ok(out)
    }

    async fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), ConnectError> {
        for tp in partitions {
            self.pending.remove(tp);
            self.committable.remove(tp);
            self.fenced.remove(tp);
        }
        Ok(())
    }
}

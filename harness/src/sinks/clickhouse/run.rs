//! Running a plan's steps, and the [`SinkTask`] implementation.

use super::plan::{self, Mismatch, Phase, Range, StateRecord, Step};
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

/// With `tolerateStateMismatch`: drop what is at or below the stored max, insert the rest
/// as a new batch.
fn tolerate(m: &Mismatch) -> Vec<Step> {
    let (p, b) = (m.stored.range, m.batch);
    if b.max <= p.max {
        return vec![Step::Drop(b)];
    }
    let mut steps = Vec::new();
    if b.min <= p.max {
        steps.push(Step::Drop(Range::new(b.min, p.max)));
    }
    let rest = Range::new(b.min.max(p.max + 1), b.max);
    steps.extend([
        Step::SetBefore(rest),
        Step::Insert(rest),
        Step::SetAfter(rest),
    ]);
    steps
}

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
        if self.config.variant.fenced() && !self.still_owner(tp, &seen) {
            mark!("fencing:stale-owner-before-plan");
            return Err(Stop::Fenced);
        }
        let stored = seen.record;
        let plan = match plan::decide(self.config.variant, stored, batch) {
            Ok(plan) => plan,
            Err(m) if self.config.tolerate_state_mismatch => {
                mark!(&format!("case:{}:tolerated", m.case.name()));
                plan::Plan {
                    case: m.case,
                    steps: tolerate(&m),
                }
            }
            Err(m) => {
                mark!(&format!("case:{}:error", m.case.name()));
                return Err(Stop::Connect(ConnectError::Fatal(format!("{tp}: {m}"))));
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
            Step::Insert(range) => {
                self.point("between-before-and-insert").await;
                self.insert(tp, range, reporter).await?;
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
                    let why = format!("{tp}: batch {range} is inside a stored BEFORE range");
                    mark!("dlq:record");
                    reporter.report(&record, &why).map_err(Stop::Connect)?;
                }
            }
            Step::Hold => unreachable!("Hold is a plan of its own"),
        }
        Ok(())
    }

    async fn insert(
        &mut self,
        tp: &TopicPartition,
        range: Range,
        reporter: &mut dyn ErrantRecordReporter,
    ) -> Result<(), Stop> {
        if self.config.variant.fenced() {
            let seen = self.read_state(tp).await?;
            if !self.still_owner(tp, &seen) {
                mark!("fencing:insert-refused-stale-owner");
                return Err(Stop::Fenced);
            }
        }
        let mut rows = Vec::new();
        for record in self.records_in(tp, range) {
            match &record.value {
                Some(v @ serde_json::Value::Object(_)) => rows.push(v.clone()),
                _ => {
                    mark!("dlq:record");
                    reporter
                        .report(&record, "value is not a JSON object")
                        .map_err(Stop::Connect)?;
                }
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
            let token = format!("{}-{}-{}-{}", tp.topic, tp.partition, range.min, range.max);
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
        self.versions.remove(tp);
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

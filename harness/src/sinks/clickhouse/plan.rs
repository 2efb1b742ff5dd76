//! The exactly-once state machine as pure functions: from the stored state record of a
//! topic-partition and the offset range of the records at hand, the case and the steps to
//! run. No I/O: the task in [`super`] runs the steps and the fault points between them.
//!
//! # Variants
//! - [`Variant::Seed`]: the table of SPEC.md P1 (the seed document), cases none, Same,
//!   Overlapping, Contains, New; anything else is a [`Mismatch`].
//! - [`Variant::ConnectorCurrent`]: clickhouse-kafka-connect **v1.5.0** (tag `v1.5.0`,
//!   commit `483f7c47`), restated from `RangeContainer.getOverLappingState`,
//!   `Processing.doLogic`, `QueryIdentifier` and `ClickHouseWriter`. Classification: Same
//!   means "same max, min at or below the stored min", New means "min above the stored
//!   max" (gaps allowed), then Contains, Overlapping (max above the stored max), Zero (min
//!   is 0: topic recreated), Previous (stored AFTER: an older batch), else Error. Records
//!   below the stored min are trimmed before inserting, but the insert's
//!   `insert_deduplication_token` is `QueryIdentifier.getDeduplicationToken()`,
//!   `<topic>-<partition>-<min>-<max>` of the *range container* passed to `doInsert`: the
//!   untrimmed batch for None/Same/New/Zero, the left or right chunk for Overlapping.
//!   `ClickHouseWriter` sets the token on every insert whose `QueryIdentifier` has a
//!   partition, i.e. every insert of the exactly-once path (since v1.0.10, commit
//!   `483814e1`, 2023-12; before that, from 2023-08, it was `<first offset><topic>-<partition>`).
//!   What `doLogic` throws (Contains or Error while BEFORE, Previous without
//!   `tolerateStateMismatch`) is a [`Mismatch`]; `ProxySinkTask.put` then fails the task or,
//!   under `errors.tolerance=all`, reports the partition's records and goes on (see
//!   `super::run`).
//! - [`Variant::SeedToken`] and [`Variant::SeedTokenFencing`]: the seed's table, with two
//!   changes that an idempotent insert allows: records below the stored min are trimmed,
//!   and "Contains while BEFORE" holds the records until the redelivered ones cover the
//!   stored range again (then it is Same or Overlapping and the stored range is inserted
//!   with the same token, which the table deduplicates if it had been applied).

use serde::{Deserialize, Serialize};

/// Which state machine the task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Variant {
    /// The design as the seed states it.
    #[serde(rename = "seed")]
    Seed,
    /// The connector's source, clickhouse-kafka-connect v1.5.0.
    #[serde(rename = "connector-current")]
    ConnectorCurrent,
    /// The seed plus `insert_deduplication_token` from (topic, partition, min, max).
    #[serde(rename = "seed+token")]
    SeedToken,
    /// The seed plus the token plus fencing by owner: strict-mode KeeperMap writes
    /// conditional on the record's `owner` column (`ALTER TABLE ... UPDATE ... WHERE owner
    /// = ..`, read back), and no insert by a stale owner (see `super` "Fencing").
    #[serde(rename = "seed+token+fencing")]
    SeedTokenFencing,
}

impl Variant {
    /// The name as in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Seed => "seed",
            Variant::ConnectorCurrent => "connector-current",
            Variant::SeedToken => "seed+token",
            Variant::SeedTokenFencing => "seed+token+fencing",
        }
    }

    /// Whether inserts carry `insert_deduplication_token` (the seed's do not; the
    /// connector's do, `ClickHouseWriter` since v1.0.10).
    pub fn uses_token(self) -> bool {
        matches!(
            self,
            Variant::ConnectorCurrent | Variant::SeedToken | Variant::SeedTokenFencing
        )
    }

    /// Whether state writes are conditional and inserts check ownership first.
    pub fn fenced(self) -> bool {
        self == Variant::SeedTokenFencing
    }
}

/// `BEFORE` (set before the insert) or `AFTER` (set after it succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// The batch's insert may not have happened.
    Before,
    /// The batch is in the table.
    After,
}

impl Phase {
    /// As stored in the state table.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Before => "BEFORE",
            Phase::After => "AFTER",
        }
    }
}

/// An inclusive offset range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Range {
    /// First offset.
    pub min: i64,
    /// Last offset (inclusive).
    pub max: i64,
}

impl Range {
    /// `[min, max]`.
    pub fn new(min: i64, max: i64) -> Self {
        assert!(min <= max, "a range is not empty");
        Self { min, max }
    }

    /// Whether `offset` is in the range.
    pub fn contains(self, offset: i64) -> bool {
        self.min <= offset && offset <= self.max
    }
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}..{}]", self.min, self.max)
    }
}

/// The state record of one topic-partition: `{min_offset, max_offset, BEFORE|AFTER}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The batch's offsets.
    pub range: Range,
    /// Its phase.
    pub phase: Phase,
}

/// How a batch relates to the stored record (the seed's names, plus the connector's and
/// the cases the seed leaves open).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Case {
    /// No stored record.
    None,
    /// Same boundaries.
    Same,
    /// Same min, larger max.
    Overlapping,
    /// Inside the stored range.
    Contains,
    /// Starts right after the stored max.
    New,
    /// Connector: min is 0 below a stored range (the topic was recreated).
    Zero,
    /// Connector: an older batch while the stored record is AFTER.
    Previous,
    /// Seed: starts after `pmax + 1`. Offsets are not dense (transaction markers, aborted
    /// records skipped under read_committed, compaction), so a gap is legitimate and the
    /// seed's table loses there (`p1-transactional-upstream-seed-token-fencing-offset-gap-loses`).
    Gap,
    /// Seed: starts below the stored min.
    BelowMin,
    /// Seed: starts inside the stored range and ends past it.
    Straddle,
    /// Connector: none of its cases.
    Error,
}

impl Case {
    /// The kebab-case name (also the coverage mark suffix).
    pub fn name(self) -> &'static str {
        match self {
            Case::None => "none",
            Case::Same => "same",
            Case::Overlapping => "overlapping",
            Case::Contains => "contains",
            Case::New => "new",
            Case::Zero => "zero",
            Case::Previous => "previous",
            Case::Gap => "gap",
            Case::BelowMin => "below-min",
            Case::Straddle => "straddle",
            Case::Error => "error",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// Store `{range, BEFORE}`.
    SetBefore(Range),
    /// Insert the records whose offsets fall in `rows`; the deduplication token (where the
    /// variant uses one) is `<topic>-<partition>-<min>-<max>` of `token`, which is `rows`
    /// except where the connector trims a batch and keeps the untrimmed range's token.
    Insert {
        /// The records to insert.
        rows: Range,
        /// The range the token names.
        token: Range,
    },
    /// Store `{range, AFTER}`.
    SetAfter(Range),
    /// Drop the records in the range: already in the table.
    Drop(Range),
    /// Report the records in the range to the dead-letter queue.
    Dlq(Range),
    /// Keep the records and wait for more (the stored range is not covered yet).
    Hold,
}

impl Step {
    /// Insert the records of `range`, with `range`'s token.
    pub fn insert(range: Range) -> Self {
        Step::Insert {
            rows: range,
            token: range,
        }
    }
}

/// What to do with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The case found.
    pub case: Case,
    /// Steps in order.
    pub steps: Vec<Step>,
}

/// A case the variant has no answer for: `doLogic` throws; the task reports it as an error
/// unless [`tolerated`] has an answer under `tolerateStateMismatch`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("state mismatch ({}): stored {stored:?}, batch {batch}", case.name())]
pub struct Mismatch {
    /// The case.
    pub case: Case,
    /// The stored record.
    pub stored: StateRecord,
    /// The batch.
    pub batch: Range,
}

/// The plan for `batch` given `stored`, under `variant`.
///
/// # Errors
/// [`Mismatch`] for a case the variant does not cover.
pub fn decide(
    variant: Variant,
    stored: Option<StateRecord>,
    batch: Range,
) -> Result<Plan, Mismatch> {
    let Some(stored) = stored else {
        let steps = vec![
            Step::SetBefore(batch),
            Step::insert(batch),
            Step::SetAfter(batch),
        ];
        return Ok(Plan {
            case: Case::None,
            steps,
        });
    };
    match variant {
        Variant::ConnectorCurrent => connector_current(stored, batch),
        Variant::Seed => seed(stored, batch),
        Variant::SeedToken | Variant::SeedTokenFencing => seed_token(stored, batch),
    }
}

/// The seed's classification (SPEC.md P1).
pub fn seed_case(stored: Range, batch: Range) -> Case {
    let (p, b) = (stored, batch);
    if b == p {
        Case::Same
    } else if b.min == p.min && p.max < b.max {
        Case::Overlapping
    } else if p.min <= b.min && b.max <= p.max {
        Case::Contains
    } else if b.min == p.max + 1 {
        Case::New
    } else if b.min < p.min {
        Case::BelowMin
    } else if b.min > p.max + 1 {
        Case::Gap
    } else {
        Case::Straddle
    }
}

fn new_batch(batch: Range) -> Vec<Step> {
    vec![
        Step::SetBefore(batch),
        Step::insert(batch),
        Step::SetAfter(batch),
    ]
}

fn seed(stored: StateRecord, batch: Range) -> Result<Plan, Mismatch> {
    let case = seed_case(stored.range, batch);
    let before = stored.phase == Phase::Before;
    let p = stored.range;
    let steps = match case {
        Case::Same if before => vec![Step::insert(batch), Step::SetAfter(batch)],
        Case::Same => vec![Step::Drop(batch)],
        Case::Overlapping => {
            let rest = Range::new(p.max + 1, batch.max);
            let mut steps = Vec::new();
            if before {
                let first = Range::new(batch.min, p.max);
                steps.extend([Step::insert(first), Step::SetAfter(first)]);
            }
            steps.extend(new_batch(rest));
            steps
        }
        Case::Contains if before => vec![Step::Dlq(batch)],
        Case::Contains => vec![Step::Drop(batch)],
        Case::New if before => vec![Step::insert(batch), Step::SetAfter(batch)],
        Case::New => new_batch(batch),
        _ => {
            return Err(Mismatch {
                case,
                stored,
                batch,
            })
        }
    };
    Ok(Plan { case, steps })
}

fn seed_token(stored: StateRecord, batch: Range) -> Result<Plan, Mismatch> {
    let p = stored.range;
    if batch.max < p.min {
        return Ok(Plan {
            case: Case::BelowMin,
            steps: vec![Step::Drop(batch)],
        });
    }
    if batch.min < p.min {
        // Below the stored min: already in (a batch is only stored after the one before
        // it is AFTER). Trim and classify the rest.
        let below = Range::new(batch.min, p.min - 1);
        let mut plan = seed_token(stored, Range::new(p.min, batch.max))?;
        plan.steps.insert(0, Step::Drop(below));
        return Ok(plan);
    }
    let case = seed_case(p, batch);
    if case == Case::Contains && stored.phase == Phase::Before && batch.min == p.min {
        return Ok(Plan {
            case,
            steps: vec![Step::Hold],
        });
    }
    seed(stored, batch)
}

/// The connector's classification (`RangeContainer.getOverLappingState`, restated).
pub fn connector_case(stored: StateRecord, batch: Range) -> Case {
    let (p, b) = (stored.range, batch);
    if b.max == p.max && b.min <= p.min {
        Case::Same
    } else if b.min > p.max {
        Case::New
    } else if b.max <= p.max && b.min >= p.min {
        Case::Contains
    } else if b.max > p.max {
        Case::Overlapping
    } else if b.min == 0 {
        Case::Zero
    } else if stored.phase == Phase::After {
        Case::Previous
    } else {
        Case::Error
    }
}

/// `Processing.doLogic` of v1.5.0 for a stored record. Contains and Error while BEFORE,
/// and Previous (AFTER), are what it throws: [`Mismatch`]es.
fn connector_current(stored: StateRecord, batch: Range) -> Result<Plan, Mismatch> {
    let case = connector_case(stored, batch);
    let p = stored.range;
    let trimmed = Range::new(batch.min.max(p.min), batch.max);
    // `doInsert(trimmedRecords, rangeContainer)`: the trimmed records, the batch's token.
    let insert_trimmed = Step::Insert {
        rows: trimmed,
        token: batch,
    };
    let steps = match (case, stored.phase) {
        (Case::Zero, _) => new_batch(batch),
        (Case::Same | Case::New, Phase::Before) => vec![insert_trimmed, Step::SetAfter(batch)],
        (Case::Overlapping, phase) => {
            let rest = Range::new(p.max + 1, batch.max);
            let mut steps = Vec::new();
            if batch.min < p.min {
                steps.push(Step::Drop(Range::new(batch.min, p.min - 1)));
            }
            let left = Range::new(batch.min.max(p.min), p.max);
            match phase {
                // The left chunk is re-inserted only when it has the stored boundaries;
                // otherwise its records go to the errant record reporter
                // (`Utils.sendTODlq`, a `DuplicateException`).
                Phase::Before if left == p => {
                    steps.extend([Step::insert(left), Step::SetAfter(left)]);
                }
                Phase::Before => steps.push(Step::Dlq(left)),
                Phase::After => steps.push(Step::Drop(left)),
            }
            steps.extend(new_batch(rest));
            steps
        }
        (Case::Same | Case::Contains, Phase::After) => vec![Step::Drop(batch)],
        (Case::New, Phase::After) => {
            vec![
                Step::SetBefore(batch),
                insert_trimmed,
                Step::SetAfter(batch),
            ]
        }
        // Contains/Error while BEFORE, Previous while AFTER: `doLogic` throws.
        _ => {
            return Err(Mismatch {
                case,
                stored,
                batch,
            })
        }
    };
    Ok(Plan { case, steps })
}

/// The steps for mismatch `m` under `tolerateStateMismatch=true`, or `None` where the
/// variant still throws.
///
/// - connector-current (v1.5.0 `Processing.doLogic`): only Previous is tolerated (the
///   batch is skipped: "already processed"); Contains and Error while BEFORE throw
///   whatever the setting.
/// - the seed variants (eosim's reading of the setting for the seed's open cases): drop
///   what is at or below the stored max, insert the rest as a new batch.
pub fn tolerated(variant: Variant, m: &Mismatch) -> Option<Vec<Step>> {
    if variant == Variant::ConnectorCurrent {
        return (m.case == Case::Previous).then(|| vec![Step::Drop(m.batch)]);
    }
    let (p, b) = (m.stored.range, m.batch);
    if b.max <= p.max {
        return Some(vec![Step::Drop(b)]);
    }
    let mut steps = Vec::new();
    if b.min <= p.max {
        steps.push(Step::Drop(Range::new(b.min, p.max)));
    }
    steps.extend(new_batch(Range::new(b.min.max(p.max + 1), b.max)));
    Some(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(min: i64, max: i64, phase: Phase) -> Option<StateRecord> {
        Some(StateRecord {
            range: Range::new(min, max),
            phase,
        })
    }
    fn r(min: i64, max: i64) -> Range {
        Range::new(min, max)
    }

    #[test]
    fn seed_same_while_before_inserts_again_and_while_after_drops() {
        let plan = decide(Variant::Seed, st(0, 99, Phase::Before), r(0, 99)).unwrap();
        assert_eq!(
            plan.steps,
            vec![Step::insert(r(0, 99)), Step::SetAfter(r(0, 99))]
        );
        let plan = decide(Variant::Seed, st(0, 99, Phase::After), r(0, 99)).unwrap();
        assert_eq!(plan.steps, vec![Step::Drop(r(0, 99))]);
    }

    #[test]
    fn seed_overlapping_while_before_inserts_both_chunks() {
        let plan = decide(Variant::Seed, st(0, 49, Phase::Before), r(0, 99)).unwrap();
        assert_eq!(plan.case, Case::Overlapping);
        assert_eq!(
            plan.steps,
            vec![
                Step::insert(r(0, 49)),
                Step::SetAfter(r(0, 49)),
                Step::SetBefore(r(50, 99)),
                Step::insert(r(50, 99)),
                Step::SetAfter(r(50, 99)),
            ]
        );
    }

    #[test]
    fn seed_contains_while_before_goes_to_the_dead_letter_queue() {
        let plan = decide(Variant::Seed, st(0, 99, Phase::Before), r(0, 49)).unwrap();
        assert_eq!(plan.steps, vec![Step::Dlq(r(0, 49))]);
    }

    #[test]
    fn seed_new_while_after_brackets_the_insert() {
        let plan = decide(Variant::Seed, st(0, 99, Phase::After), r(100, 199)).unwrap();
        assert_eq!(plan.steps, new_batch(r(100, 199)));
    }

    #[test]
    fn seed_reports_a_gap_and_a_batch_below_the_stored_min_as_mismatches() {
        let gap = decide(Variant::Seed, st(0, 99, Phase::After), r(101, 150)).unwrap_err();
        assert_eq!(gap.case, Case::Gap);
        let below = decide(Variant::Seed, st(10, 99, Phase::After), r(5, 50)).unwrap_err();
        assert_eq!(below.case, Case::BelowMin);
        let straddle = decide(Variant::Seed, st(0, 99, Phase::After), r(50, 150)).unwrap_err();
        assert_eq!(straddle.case, Case::Straddle);
    }

    #[test]
    fn token_variant_holds_a_contained_batch_until_the_stored_range_is_covered() {
        let v = Variant::SeedToken;
        let plan = decide(v, st(0, 99, Phase::Before), r(0, 49)).unwrap();
        assert_eq!(plan.steps, vec![Step::Hold]);
        let plan = decide(v, st(0, 99, Phase::Before), r(0, 99)).unwrap();
        assert_eq!(
            plan.steps,
            vec![Step::insert(r(0, 99)), Step::SetAfter(r(0, 99))]
        );
    }

    #[test]
    fn token_variant_trims_records_below_the_stored_min() {
        let plan = decide(Variant::SeedToken, st(100, 199, Phase::After), r(50, 249)).unwrap();
        assert_eq!(plan.steps[0], Step::Drop(r(50, 99)));
        assert_eq!(plan.case, Case::Overlapping);
    }

    #[test]
    fn connector_treats_a_gap_as_new_and_throws_on_an_older_batch_unless_tolerated() {
        let v = Variant::ConnectorCurrent;
        let plan = decide(v, st(0, 99, Phase::After), r(105, 150)).unwrap();
        assert_eq!(plan.case, Case::New);
        let previous = decide(v, st(100, 199, Phase::After), r(50, 120)).unwrap_err();
        assert_eq!(previous.case, Case::Previous);
        assert_eq!(tolerated(v, &previous), Some(vec![Step::Drop(r(50, 120))]));
    }

    #[test]
    fn connector_throws_on_contains_and_error_while_before_even_when_tolerating() {
        let v = Variant::ConnectorCurrent;
        let contains = decide(v, st(0, 99, Phase::Before), r(0, 49)).unwrap_err();
        assert_eq!(contains.case, Case::Contains);
        assert_eq!(tolerated(v, &contains), None);
        let error = decide(v, st(10, 99, Phase::Before), r(5, 50)).unwrap_err();
        assert_eq!(error.case, Case::Error);
        assert_eq!(tolerated(v, &error), None);
    }

    #[test]
    fn connector_tokens_name_the_untrimmed_batch_and_the_chunks_of_an_overlap() {
        let v = Variant::ConnectorCurrent;
        assert!(v.uses_token());
        // Same while BEFORE with records below the stored min: trimmed rows, batch token.
        let plan = decide(v, st(50, 99, Phase::Before), r(0, 99)).unwrap();
        let insert = Step::Insert {
            rows: r(50, 99),
            token: r(0, 99),
        };
        assert_eq!(plan.steps, vec![insert, Step::SetAfter(r(0, 99))]);
        // Overlapping while BEFORE: the left chunk with the stored boundaries, then the rest.
        let plan = decide(v, st(0, 49, Phase::Before), r(0, 99)).unwrap();
        assert_eq!(plan.steps[0], Step::insert(r(0, 49)));
        assert_eq!(plan.steps[3], Step::insert(r(50, 99)));
    }
}

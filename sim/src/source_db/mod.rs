//! A source database's change log, as a CDC connector reads it: the model behind the
//! `connect-source` pipeline's Debezium-style source task.
//!
//! # Model
//! - A sequence of committed transactions `0..transactions`; transaction `t` commits at
//!   `first_commit_ms + t * transaction_interval_ms` (ms of simulated time) and writes
//!   `rows_per_transaction` rows.
//! - Every row change is one [`ChangeEvent`] at a [`LogPosition`]: the transaction's commit
//!   LSN (`lsn = LSN_STEP * (t + 1)`, increasing) and the row's event serial inside the
//!   transaction (`0..rows_per_transaction`). Several events share one LSN, so a reader
//!   that resumes must remember both, as Debezium's PostgreSQL offsets do (`lsn` plus
//!   `lsn_proc` / the event serial, `PostgresOffsetContext`), to restart *inside* a
//!   transaction.
//! - Each event carries a run-unique `id` (its index in the log): what the checkers count.
//!
//! Pure: no I/O, no clock of its own (readers pass `now_ms`). Not modelled: the replication
//! slot's own confirmed-flush LSN and WAL retention (the log never loses what a slow reader
//! has not read), snapshots, schema changes.

use serde::{Deserialize, Serialize};

/// LSN distance between two consecutive transactions' commit records.
pub const LSN_STEP: u64 = 64;

/// Where an event is in the change log: commit LSN, then the event's serial inside its
/// transaction. Ordered as the log is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default,
)]
pub struct LogPosition {
    /// The transaction's commit LSN.
    pub lsn: u64,
    /// The event's serial within its transaction, from 0.
    pub serial: u32,
}

impl std::fmt::Display for LogPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lsn {} serial {}", self.lsn, self.serial)
    }
}

/// One row change (an insert into table `orders`, key `row`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEvent {
    /// Unique id within the run (the event's index in the log).
    pub id: u64,
    /// Position in the log.
    pub position: LogPosition,
    /// The database transaction id (`txId`).
    pub tx_id: u64,
    /// When the transaction committed, ms of simulated time.
    pub commit_ms: u64,
    /// Number of events in the transaction.
    pub tx_rows: u32,
}

/// The shape of a generated log.
///
/// ## Default values
/// `transactions = 100`, `rows_per_transaction = 3`, `transaction_interval_ms = 50`,
/// `first_commit_ms = 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeLogConfig {
    /// Committed transactions.
    pub transactions: u64,
    /// Rows each transaction writes (at least 1).
    pub rows_per_transaction: u32,
    /// Time between two commits, ms.
    pub transaction_interval_ms: u64,
    /// When the first transaction commits, ms.
    pub first_commit_ms: u64,
}

impl Default for ChangeLogConfig {
    fn default() -> Self {
        Self {
            transactions: 100,
            rows_per_transaction: 3,
            transaction_interval_ms: 50,
            first_commit_ms: 0,
        }
    }
}

/// The change log: every event in position order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChangeLog {
    events: Vec<ChangeEvent>,
}

impl ChangeLog {
    /// The log `config` describes.
    ///
    /// # Panics
    /// When `rows_per_transaction` is 0 (scenario validation refuses it first).
    pub fn generate(config: ChangeLogConfig) -> Self {
        assert!(
            config.rows_per_transaction >= 1,
            "a transaction writes a row"
        );
        let mut events = Vec::new();
        for t in 0..config.transactions {
            let commit_ms = config.first_commit_ms + t * config.transaction_interval_ms;
            for serial in 0..config.rows_per_transaction {
                let position = LogPosition {
                    lsn: LSN_STEP * (t + 1),
                    serial,
                };
                events.push(ChangeEvent {
                    id: events.len() as u64,
                    position,
                    tx_id: 1_000 + t,
                    commit_ms,
                    tx_rows: config.rows_per_transaction,
                });
            }
        }
        let log = Self { events };
        log.assert_ordered();
        log
    }

    /// Positions strictly increase and ids are the indexes.
    fn assert_ordered(&self) {
        for (i, pair) in self.events.windows(2).enumerate() {
            assert!(pair[0].position < pair[1].position, "positions increase");
            assert!(pair[1].id == i as u64 + 1, "ids are indexes");
        }
    }

    /// Every event, committed or not yet.
    pub fn events(&self) -> &[ChangeEvent] {
        &self.events
    }

    /// The last event's position, if the log has any.
    pub fn last_position(&self) -> Option<LogPosition> {
        self.events.last().map(|e| e.position)
    }

    /// At most `max` events committed by `now_ms` whose position is after `after` (all
    /// from the start when `None`), in log order: what a reader resuming after `after`
    /// reads next.
    pub fn read_after(
        &self,
        after: Option<LogPosition>,
        now_ms: u64,
        max: usize,
    ) -> &[ChangeEvent] {
        let start = match after {
            Some(p) => self.events.partition_point(|e| e.position <= p),
            None => 0,
        };
        let committed = self.events.partition_point(|e| e.commit_ms <= now_ms);
        let end = committed.min(start.saturating_add(max));
        if start < end {
            &self.events[start..end]
        } else {
            &[]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> ChangeLog {
        ChangeLog::generate(ChangeLogConfig {
            transactions: 4,
            rows_per_transaction: 3,
            transaction_interval_ms: 10,
            first_commit_ms: 100,
        })
    }

    #[test]
    fn rows_of_one_transaction_share_its_lsn_and_count_serials() {
        let log = log();
        assert_eq!(log.events().len(), 12);
        let first: Vec<LogPosition> = log.events()[..3].iter().map(|e| e.position).collect();
        assert!(first.iter().all(|p| p.lsn == LSN_STEP));
        assert_eq!(
            first.iter().map(|p| p.serial).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(
            log.events()[3].position,
            LogPosition {
                lsn: 2 * LSN_STEP,
                serial: 0
            }
        );
        assert_eq!(
            log.last_position(),
            Some(LogPosition {
                lsn: 4 * LSN_STEP,
                serial: 2
            })
        );
    }

    #[test]
    fn a_reader_sees_only_committed_transactions() {
        let log = log();
        assert!(log.read_after(None, 99, 100).is_empty());
        assert_eq!(log.read_after(None, 100, 100).len(), 3);
        assert_eq!(log.read_after(None, 115, 100).len(), 6);
        assert_eq!(log.read_after(None, 10_000, 5).len(), 5, "at most max");
    }

    #[test]
    fn resuming_inside_a_transaction_continues_after_the_serial() {
        let log = log();
        let inside = LogPosition {
            lsn: 2 * LSN_STEP,
            serial: 1,
        };
        let next = log.read_after(Some(inside), 10_000, 100);
        assert_eq!(
            next[0].position,
            LogPosition {
                lsn: 2 * LSN_STEP,
                serial: 2
            }
        );
        assert_eq!(next.len(), 7);
        assert!(log.read_after(log.last_position(), 10_000, 100).is_empty());
    }
}

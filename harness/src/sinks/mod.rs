//! Sink connectors under test, one file per external system, each a
//! [`crate::connect::task::SinkTask`].
//!
//! Every write attempt a sink makes can be reported to a [`WriteLog`]: an `invoke` before
//! the request leaves, then its completion (`ok`, `fail` when the target certainly did not
//! apply it, `info` when it may have), so a duplicate in the target can be traced to the
//! retried write that made it.

pub mod clickhouse;
pub mod doris;
#[cfg(madsim)]
pub mod doris_routine_load;
pub mod jdbc;

use crate::history::{OpKind, RecordRef};

/// Where a sink reports its write attempts (the run's history in simulation; nothing on
/// the real tier, which reads the target after the drain).
pub trait WriteLog: Send + Sync {
    /// A write of `rows` (source positions; offset `-1` when the sink does not know it) is
    /// about to be sent.
    fn invoked(&self, rows: &[RecordRef]);
    /// The write of `rows` completed with `kind` (`Ok`, `Fail` or `Info`) and, unless ok,
    /// the error's text.
    fn completed(&self, rows: &[RecordRef], kind: OpKind, error: Option<String>);
}

/// A [`WriteLog`] that keeps nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoWriteLog;

impl WriteLog for NoWriteLog {
    fn invoked(&self, _rows: &[RecordRef]) {}
    fn completed(&self, _rows: &[RecordRef], _kind: OpKind, _error: Option<String>) {}
}

/// How a write attempt that returned `result` completes in the history: `Ok`; `Info` (with
/// the error text) when `ambiguous` says the error leaves open whether the target applied
/// it (a timeout, a lost response, `UNKNOWN_STATUS_OF_INSERT`); `Fail` otherwise (the
/// server refused it before applying, or rolled it back).
pub fn completion<T, E: std::fmt::Display>(
    result: &Result<T, E>,
    ambiguous: impl FnOnce(&E) -> bool,
) -> (OpKind, Option<String>) {
    match result {
        Ok(_) => (OpKind::Ok, None),
        Err(e) if ambiguous(e) => (OpKind::Info, Some(e.to_string())),
        Err(e) => (OpKind::Fail, Some(e.to_string())),
    }
}

//! What the exactly-once sinks' state store costs: the calls a client makes to its
//! state-store tables (the ClickHouse sink's KeeperMap records, kept in ZooKeeper on
//! 18.16), counted and timed apart from the data writes, so a sink's rate can be read
//! beside a bulk load with the bookkeeping's share visible (issue 15, item 4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Counters of state-store calls, shared by the clients of one sink task (atomics: the
/// clients are cloned into the task and read by whoever measures it).
#[derive(Debug, Default)]
pub struct StoreMeter {
    reads: AtomicU64,
    writes: AtomicU64,
    busy_ns: AtomicU64,
}

/// A reading of a [`StoreMeter`]: calls so far and the wall time spent in them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreCost {
    /// State reads (`get` of a record, `SELECT` of the table).
    pub reads: u64,
    /// State writes (an `INSERT` into the table, a versioned put).
    pub writes: u64,
    /// Wall time inside those calls, ns (the sink's calls are sequential, so this is time
    /// the sink's `put` spent waiting for its state store).
    pub busy_ns: u64,
}

impl StoreCost {
    /// What happened between `earlier` and `self` (readings of the same meter).
    pub fn since(self, earlier: StoreCost) -> StoreCost {
        StoreCost {
            reads: self.reads.saturating_sub(earlier.reads),
            writes: self.writes.saturating_sub(earlier.writes),
            busy_ns: self.busy_ns.saturating_sub(earlier.busy_ns),
        }
    }
}

/// Which kind of state-store call is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall {
    /// A read.
    Read,
    /// A write.
    Write,
}

impl StoreMeter {
    /// Runs `f`, counting it as one `call` and adding its wall time.
    pub async fn time<T>(&self, call: StoreCall, f: impl std::future::Future<Output = T>) -> T {
        let started = Instant::now();
        let out = f.await;
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy_ns.fetch_add(ns, Ordering::Relaxed);
        let counter = match call {
            StoreCall::Read => &self.reads,
            StoreCall::Write => &self.writes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        out
    }

    /// The counters now.
    pub fn reading(&self) -> StoreCost {
        StoreCost {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_kind_and_timed() {
        let meter = StoreMeter::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let before = meter.reading();
        rt.block_on(async {
            meter.time(StoreCall::Read, async {}).await;
            let slow = tokio::time::sleep(std::time::Duration::from_millis(2));
            meter.time(StoreCall::Write, slow).await;
            meter.time(StoreCall::Write, async {}).await;
        });
        let cost = meter.reading().since(before);
        assert_eq!((cost.reads, cost.writes), (1, 2));
        assert!(cost.busy_ns >= 2_000_000, "{cost:?}");
    }
}

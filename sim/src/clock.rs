//! Wall clocks per simulated process, for the `clock-jump` fault.
//!
//! A real machine has two clocks: a monotonic one (`CLOCK_MONOTONIC`, Java's `nanoTime`)
//! that timers and timeouts use, and a wall clock (`CLOCK_REALTIME`,
//! `System.currentTimeMillis`) that an NTP step or an operator's `date -s` can move
//! backwards or forwards. madsim keeps one simulated time for every node; this module adds
//! an offset per node to the wall clock only, so a jump moves what a process stamps
//! (record `CreateTime`, `models-reference.md` B.6) and never its timers.
//!
//! What reads it: the simulated producers' record timestamps. The brokers keep the true
//! time: their producer-id expiration compares a batch's max timestamp, which is the
//! client's wall clock, with their own (`producer.id.expiration.ms`, KIP-854), which is how
//! a client clock set back makes a broker drop the state of a producer that is still
//! writing.
//!
//! Offsets live in a thread local: every seed runs its own runtime on its own OS thread.

use madsim::task::NodeId;
use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    static OFFSETS_MS: RefCell<BTreeMap<NodeId, i64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Simulated time since the runtime started, ns: the monotonic clock every simulated
/// process shares (a `clock-jump` moves wall clocks, never this one). The time every
/// history op and nemesis fault is stamped with.
pub fn now_ns() -> u64 {
    madsim::time::TimeHandle::current().elapsed().as_nanos() as u64
}

/// Moves `node`'s wall clock by `delta_ms` (negative: back), on top of earlier jumps.
pub fn jump(node: NodeId, delta_ms: i64) {
    OFFSETS_MS.with(|o| *o.borrow_mut().entry(node).or_default() += delta_ms);
}

/// `node`'s wall clock offset from simulated time, ms.
pub fn offset_ms(node: NodeId) -> i64 {
    OFFSETS_MS.with(|o| o.borrow().get(&node).copied().unwrap_or(0))
}

/// Sets every wall clock right again (NTP catching up); returns whether any was off.
pub fn reset_all() -> bool {
    OFFSETS_MS.with(|o| {
        let mut o = o.borrow_mut();
        let any = o.values().any(|&d| d != 0);
        o.clear();
        any
    })
}

/// The calling process's wall clock: simulated ms since the run started plus its node's
/// offset. Can be negative after a jump back early in a run.
pub fn wall_clock_ms() -> i64 {
    let elapsed = madsim::time::TimeHandle::current().elapsed().as_millis() as i64;
    elapsed + offset_ms(madsim::plugin::node())
}

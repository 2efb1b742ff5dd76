//! Coverage marks (after TigerBeetle's `marks.zig` and Antithesis' `sometimes` /
//! `reachable` assertions): models and components call [`mark!`](crate::mark) on the rare
//! branches an exactly-once argument depends on (a leader change, a fenced produce, a
//! deduplicated insert); a run collects them with [`take`], the report lists the marks each
//! scenario hit, and a scenario can require some (`[check] reached = ["..."]`), so a verdict
//! of "holds" comes with evidence that the path it rests on ran.
//!
//! Names are `area:event` in kebab-case (`kafka:leader-change`, `connect:task-failed`,
//! `jdbc:unique-violation-23505`). Marks are per OS thread: every simulation runs on a fresh
//! thread (the harness's `runner::run_seed`), so nothing leaks between seeds.
//!
//! ```
//! eosim_sim::mark!("example:branch");
//! assert_eq!(eosim_sim::marks::take().get("example:branch"), Some(&1));
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    static MARKS: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one hit of mark `name`. Allocates only on a mark's first hit: models hit some
/// marks on every tick.
pub fn hit(name: &str) {
    MARKS.with(|m| {
        let mut m = m.borrow_mut();
        match m.get_mut(name) {
            Some(n) => *n += 1,
            None => {
                m.insert(name.to_string(), 1);
            }
        }
    });
}

/// The marks hit on this thread since the last call, with counts; resets them.
pub fn take() -> BTreeMap<String, u64> {
    MARKS.with(|m| std::mem::take(&mut *m.borrow_mut()))
}

/// Asserts that every mark of `names` was hit on this thread since the last [`take`] (and
/// takes them): what a test says after driving a branch.
///
/// # Panics
/// When one was not hit, naming it and the marks that were.
pub fn assert_hit(names: &[&str]) {
    let marks = take();
    for name in names {
        assert!(marks.contains_key(*name), "{name} not hit: {marks:?}");
    }
}

/// Counts one hit of a coverage mark: `mark!("clickhouse:dedup-hit")`; the name is any
/// `&str` expression.
#[macro_export]
macro_rules! mark {
    ($name:expr) => {
        $crate::marks::hit($name)
    };
}

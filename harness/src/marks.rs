//! Coverage marks (after TigerBeetle's `marks.zig`): components call [`mark!`] on rare
//! branches and fault points; a run collects them with [`take`], and the report lists the
//! marks each seed hit, so a verdict of "holds" comes with evidence the fault path ran.
//!
//! Marks are per OS thread: every simulation runs on a fresh thread
//! ([`crate::runner::run_seed`]), so nothing leaks between seeds.
//!
//! ```
//! eosim::mark!("example_branch");
//! assert_eq!(eosim::marks::take().get("example_branch"), Some(&1));
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    static MARKS: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// Counts one hit of mark `name`.
pub fn hit(name: &str) {
    MARKS.with(|m| *m.borrow_mut().entry(name.to_string()).or_default() += 1);
}

/// The marks hit on this thread since the last call, with counts; resets them.
pub fn take() -> BTreeMap<String, u64> {
    MARKS.with(|m| std::mem::take(&mut *m.borrow_mut()))
}

/// Counts one hit of a coverage mark: `mark!("keeper_state_before_reinsert")`.
#[macro_export]
macro_rules! mark {
    ($name:expr) => {
        $crate::marks::hit($name)
    };
}

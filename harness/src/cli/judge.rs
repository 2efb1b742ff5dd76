//! The exit class of a judged scenario ([`crate::report::judge`] judges it): what a run's
//! exit code is made of.

use super::ExitClass;
use crate::report::{ScenarioResult, Verdict};

/// The exit class of a scenario's result given what its file expects: a `holds` that left
/// something unexercised ([`ScenarioResult::not_exercised`]) is
/// [`ExitClass::NotExercised`], not a pass.
pub fn exit_class(result: &ScenarioResult, expected: Verdict) -> ExitClass {
    match (result.verdict, expected) {
        (Verdict::Crashed, _) => ExitClass::Crash,
        (Verdict::Holds, Verdict::Holds) if !result.not_exercised.is_empty() => {
            ExitClass::NotExercised
        }
        (Verdict::Stalled, Verdict::Stalled) if !result.stalled_otherwise.is_empty() => {
            ExitClass::Stalled
        }
        (v, e) if v == e => ExitClass::Expected,
        (Verdict::Stalled, _) => ExitClass::Stalled,
        (Verdict::Skipped, _) => ExitClass::Skipped,
        _ => ExitClass::Violated,
    }
}

/// The exit class of a settled simulated result: [`exit_class`] against the ledger's
/// expected verdict, and at least [`ExitClass::Violated`] when a seed did not replay to
/// the same history. Without a ledger, the result is expected to hold.
pub fn ledger_class(result: &ScenarioResult) -> ExitClass {
    let expected = result
        .ledger
        .as_ref()
        .map_or(Verdict::Holds, |l| l.expected);
    let class = exit_class(result, expected);
    match &result.ledger {
        Some(l) if !l.determinism_notes.is_empty() => class.max(ExitClass::Violated),
        _ => class,
    }
}

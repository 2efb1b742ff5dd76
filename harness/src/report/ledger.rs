//! A scenario's seed ledger: what each seed of a run came out as, kept in `results.json` so
//! that the reports of disjoint shards of one run (`eosim sim --partition K/N`) merge into
//! the report that one run over all the seeds gives (`eosim report merge`).

use super::Verdict;
use serde::{Deserialize, Serialize};

/// How one seed came out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeedClass {
    /// The history satisfies the claim.
    Holds,
    /// The history shows a forbidden anomaly.
    Invalid,
    /// A checker could not decide (not a pass).
    Unknown,
    /// The pipeline did not catch up within the drain bound; the reason.
    Stalled(String),
    /// A model or component panicked; the message.
    Crashed(String),
}

impl SeedClass {
    /// The class name printed in `FAILED ... class=…`.
    pub fn name(&self) -> &'static str {
        match self {
            SeedClass::Holds => "holds",
            SeedClass::Invalid => "invalid",
            SeedClass::Unknown => "unknown",
            SeedClass::Stalled(_) => "stalled",
            SeedClass::Crashed(_) => "crash",
        }
    }
}

/// One seed of a scenario, as the ledger keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedRecord {
    /// The seed.
    pub seed: u64,
    /// How it came out.
    pub class: SeedClass,
    /// Its `history-hash` (hex SHA-256 of the history), the same for any `--jobs`.
    pub hash: String,
    /// Faults (recoveries not counted) before its first forbidden anomaly: the
    /// counterexample is the failing seed with the fewest, then the smallest seed.
    pub faults_before_anomaly: u64,
    /// Simulated time, ms.
    pub sim_time_ms: u64,
}

/// What merging needs beyond a scenario's totals: the rules its file set, every seed's
/// record, and the notes that came from runs after the seeds (shrinking, the determinism
/// recheck).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// The scenario's place in the run's list (the order a merged report keeps).
    pub position: usize,
    /// The verdict the file expects (`check.expect`).
    pub expected: Verdict,
    /// Marks the file requires (`[check] reached`).
    #[serde(default)]
    pub reached: Vec<String>,
    /// What the file allows to go unexercised (`[check] not_exercised_allowed`).
    #[serde(default)]
    pub not_exercised_allowed: Vec<String>,
    /// The reason every stall must name when the file expects a stall
    /// (`[check] stall_reason`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_reason: Option<String>,
    /// Every seed run, in seed order.
    pub seeds: Vec<SeedRecord>,
    /// Why the counterexample was not shrunk, when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink_note: Option<String>,
    /// `NONDETERMINISTIC …` when a seed run again gave another history hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub determinism_notes: Vec<String>,
}

//! Checkers (being written on the checkers branch).

use serde::{Deserialize, Serialize};

/// The delivery claim a pipeline makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Claim {
    /// Every record lands once.
    ExactlyOnce,
    /// Every record lands, maybe more than once.
    AtLeastOnce,
    /// No record lands twice; some may be lost.
    AtMostOnce,
}

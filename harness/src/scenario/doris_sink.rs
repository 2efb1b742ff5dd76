//! `[doris]` of a `doris-sink` scenario: the Doris FE's configuration, under the FE's own
//! names (`fe.conf`).
//!
//! ```toml
//! [doris]
//! stream_load_default_precommit_timeout_second = 30  # scaled down from 3600
//! ```
//! The connector itself is configured in `[connector]` under its own keys (see
//! [`crate::sinks::doris`]), the Connect workers in `[connect]`.

use serde::{Deserialize, Serialize};

/// `[doris]`.
///
/// ## Default values
/// `stream_load_default_precommit_timeout_second = 3600` (Doris' default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DorisSpec {
    /// `stream_load_default_precommit_timeout_second`: the FE aborts a PRECOMMITTED
    /// transaction this long after its precommit (`TransactionState.isTimeout`), s. A
    /// crashed connector's pre-committed loads wait this long.
    pub stream_load_default_precommit_timeout_second: u64,
}

impl Default for DorisSpec {
    fn default() -> Self {
        Self {
            stream_load_default_precommit_timeout_second: 3_600,
        }
    }
}

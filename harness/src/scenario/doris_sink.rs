//! `[doris]` of a `doris-sink` scenario: the Doris FE's configuration, under the FE's own
//! names (`fe.conf`), and the table's group commit properties.
//!
//! ```toml
//! [doris]
//! stream_load_default_precommit_timeout_second = 30  # scaled down from 3600
//! group_commit_interval_ms = 1000                     # table property, default 10000
//! group_commit_data_bytes = 67108864                  # table property, default 64 MiB
//! ```
//! The connector itself is configured in `[connector]` under its own keys (see
//! [`crate::sinks::doris`]), the Connect workers in `[connect]`.

use serde::{Deserialize, Serialize};

/// `[doris]`.
///
/// ## Default values
/// `stream_load_default_precommit_timeout_second = 3600`, `group_commit_interval_ms =
/// 10000`, `group_commit_data_bytes = 67108864` (Doris' defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DorisSpec {
    /// `stream_load_default_precommit_timeout_second`: the FE aborts a PRECOMMITTED
    /// transaction this long after its precommit (`TransactionState.isTimeout`), s. A
    /// crashed connector's pre-committed loads wait this long.
    pub stream_load_default_precommit_timeout_second: u64,
    /// The table property `group_commit_interval_ms`: a group commit internal load
    /// commits this long after it began, ms (only loads with `sink.properties.group_commit`
    /// are grouped).
    pub group_commit_interval_ms: u64,
    /// The table property `group_commit_data_bytes`: or once it holds this many bytes.
    pub group_commit_data_bytes: u64,
}

impl Default for DorisSpec {
    fn default() -> Self {
        Self {
            stream_load_default_precommit_timeout_second: 3_600,
            group_commit_interval_ms: eosim_sim::doris::group_commit::GROUP_COMMIT_INTERVAL_MS,
            group_commit_data_bytes: eosim_sim::doris::group_commit::GROUP_COMMIT_DATA_BYTES,
        }
    }
}

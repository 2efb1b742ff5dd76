//! `[routine_load]` of a `routine-load` scenario: the Doris Routine Load job (its
//! `CREATE ROUTINE LOAD` properties under their Doris names), the task executors on the
//! BE, and the F7 fault point and bug switch.
//!
//! ```toml
//! [routine_load]
//! executors = 3                           # task slots on doris-be
//! task_fail_probability = 0.2             # a task fails after consuming its batch
//! progress_from_consumer_position = false # F7's bug switch (see sinks::doris_routine_load)
//! malformed_json_every = 0                # every n-th id is sent as JSON cut short
//! bad_datetime_every = 0                  # every n-th id's clickTime is not a DATETIME
//! too_long_every = 0                      # every n-th id's user exceeds VARCHAR(100)
//! [routine_load.properties]               # CREATE ROUTINE LOAD's, verbatim
//! desired_concurrent_number = "3"
//! max_batch_interval = "20"
//! max_batch_rows = "50"
//! strict_mode = "false"
//! ```
//! `kafka_broker_list` and `kafka_topic` are filled in from `[cluster]` and `[topic]`
//! unless set; `format` is `json`; `property.kafka_default_offsets` defaults to
//! `OFFSET_BEGINNING` here (the job is created before the producer starts, as in the
//! seed's run) rather than Doris' `OFFSET_END`.

use eosim_sim::doris::routine_load::RoutineLoadProps;
use eosim_sim::doris::DorisError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `[routine_load]`.
///
/// ## Default values
/// `executors = 3`, `task_fail_probability = 0`, `progress_from_consumer_position =
/// false`, no bad records (`*_every = 0`), `columns = ["clickTime", "id", "type", "user"]` (the seed's `COLUMNS`),
/// `properties = {}` (Doris' defaults, see [`RoutineLoadProps`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutineLoadSpec {
    /// Task executor loops on the `doris-be` node (the BE's task slots).
    pub executors: usize,
    /// Probability that a task fails after consuming its batch, before its commit.
    pub task_fail_probability: f64,
    /// F7's bug switch: a failed task's abort carries its consumer position, so the FE
    /// moves the job's progress past the rows it never loaded.
    pub progress_from_consumer_position: bool,
    /// Ids that are a multiple of this (and not 0) are sent as malformed JSON (the record
    /// cut short): an error row under either `strict_mode`. 0: none.
    pub malformed_json_every: u64,
    /// Ids that are a multiple of this carry a `clickTime` that is not a DATETIME: an
    /// error row under `strict_mode`, NULL without it. 0: none.
    pub bad_datetime_every: u64,
    /// Ids that are a multiple of this carry a `user` of 150 characters, over the
    /// column's VARCHAR(100): an error row under either `strict_mode`. 0: none.
    pub too_long_every: u64,
    /// `COLUMNS(...)`.
    pub columns: Vec<String>,
    /// `CREATE ROUTINE LOAD` job and data-source properties, Doris' names.
    pub properties: BTreeMap<String, String>,
}

impl Default for RoutineLoadSpec {
    fn default() -> Self {
        Self {
            executors: 3,
            task_fail_probability: 0.0,
            progress_from_consumer_position: false,
            malformed_json_every: 0,
            bad_datetime_every: 0,
            too_long_every: 0,
            columns: ["clickTime", "id", "type", "user"]
                .map(String::from)
                .to_vec(),
            properties: BTreeMap::new(),
        }
    }
}

/// Whether `id` is a positive multiple of `every` (0: never).
fn every(id: u64, every: u64) -> bool {
    every > 0 && id > 0 && id.is_multiple_of(every)
}

impl RoutineLoadSpec {
    /// The value `producer-0` sends for `id`: the seed's clicklog record, or the bad
    /// variant the `*_every` keys ask for (malformed first, then bad datetime, then too
    /// long).
    pub fn record_json(&self, id: u64, clicklog: &str) -> String {
        if every(id, self.malformed_json_every) {
            return clicklog[..clicklog.len() - 1].to_string();
        }
        let mut v: serde_json::Value = serde_json::from_str(clicklog).expect("clicklog JSON");
        if every(id, self.bad_datetime_every) {
            v["clickTime"] = "not a datetime".into();
        } else if every(id, self.too_long_every) {
            v["user"] = "u".repeat(150).into();
        } else {
            return clicklog.to_string();
        }
        v.to_string()
    }

    /// The job's properties for `topic` on `brokers` brokers.
    ///
    /// # Errors
    /// The property Doris would refuse, named.
    pub fn props(&self, topic: &str, brokers: u32) -> Result<RoutineLoadProps, DorisError> {
        let mut p = self.properties.clone();
        let list: Vec<String> = (1..=brokers).map(|b| format!("broker-{b}:9092")).collect();
        p.entry("kafka_broker_list".into())
            .or_insert(list.join(","));
        p.entry("kafka_topic".into()).or_insert(topic.into());
        p.entry("format".into()).or_insert("json".into());
        p.entry("property.kafka_default_offsets".into())
            .or_insert("OFFSET_BEGINNING".into());
        RoutineLoadProps::parse(&p)
    }
}

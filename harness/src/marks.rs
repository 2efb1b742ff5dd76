//! Coverage marks: [`eosim_sim::marks`], re-exported so components write `crate::mark!`.
//! The marks live in the bottom crate because the models (Kafka, ClickHouse, PostgreSQL)
//! mark their rare branches too; a run collects every layer's with [`take`].

pub use eosim_sim::marks::{hit, take};

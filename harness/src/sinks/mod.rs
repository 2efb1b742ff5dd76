//! Sink connectors under test, one file per external system, each a
//! [`crate::connect::task::SinkTask`].

pub mod clickhouse;
pub mod jdbc;

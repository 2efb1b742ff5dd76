//! The Kafka Connect side of eosim: the sink task contract ([`task`]), configuration
//! with Connect's own keys ([`config`]), converters ([`converter`]), Debezium change
//! events ([`debezium`]), the distributed herder and its control API ([`herder`]) and,
//! under `--cfg madsim`, the worker processes and the `WorkerSinkTask` loop (`worker`).
//! Behaviour follows `shared/models-reference.md` section E and Kafka Connect's
//! `WorkerSinkTask`.

pub mod config;
pub mod converter;
pub mod debezium;
pub mod herder;
pub mod task;
#[cfg(madsim)]
pub mod worker;

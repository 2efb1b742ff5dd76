//! The Kafka Connect side of eosim: the sink task contract ([`task`]), configuration
//! with Connect's own keys ([`config`]), converters ([`converter`]), errant records and
//! the dead-letter queue ([`errant`]), Debezium change
//! events ([`debezium`]), the distributed herder and its control API ([`herder`]), the
//! `WorkerSinkTask` loop over the client traits ([`sink_loop`]) and, under `--cfg madsim`,
//! the worker processes (`worker`). The source side: the source task contract
//! ([`source_task`]), its configuration with KIP-618's keys ([`source_config`]), the
//! acknowledged-offsets bookkeeping ([`submitted`]), the Debezium PostgreSQL task over the
//! simulated change log ([`postgres_source`]), the `WorkerSourceTask` /
//! `ExactlyOnceWorkerSourceTask` loop ([`source_loop`]), its start over either world's
//! clients ([`source_start`]) and, under `--cfg madsim`, its start on a simulated worker
//! (`source_worker`).
//! Behaviour follows `shared/models-reference.md` section E and Kafka Connect's
//! `WorkerSinkTask`.

pub mod config;
pub mod converter;
pub mod debezium;
pub mod errant;
pub mod herder;
pub mod postgres_source;
pub mod sink_loop;
pub mod source_config;
pub mod source_loop;
pub mod source_start;
pub mod source_task;
#[cfg(madsim)]
pub mod source_worker;
pub mod submitted;
pub mod task;
#[cfg(madsim)]
pub mod worker;

//! The Kafka Connect side of eosim: the sink task contract ([`task`]) and, with the Connect
//! issue, the distributed worker that runs sink tasks (`worker`), converters and error
//! handling. Behaviour follows `shared/models-reference.md` section E and Kafka Connect's
//! `WorkerSinkTask`.

pub mod task;

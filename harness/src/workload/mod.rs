//! Workloads: the processes of a pipeline on the Kafka layer and the shared generator they
//! draw operations from.
//!
//! [`kafka_consume`]: producers write unique ids into a topic; a consumer group copies them
//! into an in-memory sink (a durable store outside every process), committing before or after
//! each write.

pub mod kafka_consume;

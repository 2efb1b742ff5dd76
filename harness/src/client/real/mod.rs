//! The real implementation of the client traits: rdkafka 0.39 (librdkafka 2.12) against a
//! real Kafka, provisioned by [`crate::real::provision`] or the user's own.
//!
//! # Sections
//! - [`kafka`]: [`RealProducer`] (`FutureProducer`), [`RealConsumer`] (`StreamConsumer`
//!   with `subscribe`, range assignor, manual synchronous commits) and [`RealAdmin`].
//! - [`txn`]: [`RealTransactionalProducer`], librdkafka's transactional producer.
//! - [`error`]: librdkafka error codes to [`ClientError`](super::ClientError).
//!
//! Placement matches Java and the model: the producer sets `partitioner=murmur2_random`,
//! so a keyed record lands on `murmur2(key) % partitions` (Java's `BuiltInPartitioner`),
//! and a null key on a random partition.
//!
//! # Differences from Java's client that a component may notice
//! - librdkafka rejoins a rebalancing group in its background thread, without the
//!   application polling; a commit between two polls then goes out in the new generation
//!   and succeeds, even for partitions the member no longer owns. Java's consumer rejoins
//!   only inside `poll`, so the same commit fails with `RebalanceInProgressException` /
//!   `CommitFailedException`. A member that exceeded `max.poll.interval.ms` does get
//!   [`CommitFailed`](super::ClientError::CommitFailed), as in Java.
//! - `enable.idempotence` is applied with `acks=all` only (see
//!   [`kafka::producer_client_config`]).
//!
//! rdkafka's futures run on real tokio (`madsim-tokio` outside `--cfg madsim`); blocking
//! librdkafka calls (synchronous commit, committed offsets) run on tokio's blocking pool.

pub mod error;
pub mod kafka;
pub mod txn;

pub use kafka::{RealAdmin, RealConsumer, RealProducer};
pub use txn::{RealTransactionalProducer, RealTxnConfig};

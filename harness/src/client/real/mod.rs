//! The real implementation of the client traits: rdkafka 0.39 (librdkafka 2.12) against a
//! real Kafka, provisioned by [`crate::real::provision`] or the user's own.
//!
//! # Sections
//! - [`kafka`]: [`RealProducer`] (`FutureProducer`), [`RealConsumer`] (`StreamConsumer`
//!   with `subscribe`, range assignor, manual synchronous commits) and [`RealAdmin`].
//! - `group`: the consumer's group metadata (generation, member id) read from librdkafka.
//! - `rebalance`: the consumer's rebalance callback, which holds a revocation back for an
//!   application that listens for them (Kafka Connect's sink loop).
//! - [`txn`]: [`RealTransactionalProducer`], librdkafka's transactional producer.
//! - [`wall_clock`]: the timestamp a producer stamps records with, moved by `clock-jump`.
//! - [`error`]: librdkafka error codes to [`ClientError`](super::ClientError).
//! - [`clickhouse`]: [`RealClickHouse`], the ClickHouse trait over the `clickhouse` crate
//!   0.15 (HTTP, JSONEachRow; works with Debian's 18.16).
//! - [`meter`]: [`StoreMeter`](meter::StoreMeter), the state-store calls of a sink counted
//!   and timed apart from its data writes.
//! - [`zookeeper`]: [`ZkKeeperMap`], KeeperMap tables kept directly in ZooKeeper (for
//!   servers without KeeperMap), and [`ClickHouseWithZooKeeper`], the two together.
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
//!   `CommitFailedException`. A consumer that listens for revocations (Connect's sink
//!   loop) holds librdkafka's rejoin until the poll after it handed the revocation out. A member that exceeded `max.poll.interval.ms` does get
//!   [`CommitFailed`](super::ClientError::CommitFailed), as in Java.
//! - `enable.idempotence` is applied with `acks=all` only (see
//!   [`kafka::producer_client_config`]).
//!
//! rdkafka's futures run on real tokio (`madsim-tokio` outside `--cfg madsim`); blocking
//! librdkafka calls (synchronous commit, committed offsets) run on tokio's blocking pool.

pub mod clickhouse;
pub mod error;
mod group;
pub mod kafka;
pub mod meter;
pub mod postgres;
mod rebalance;
pub mod txn;
pub mod wall_clock;
pub mod zookeeper;

pub use clickhouse::RealClickHouse;
pub use kafka::{RealAdmin, RealConsumer, RealProducer};
pub use postgres::RealPostgres;
pub use txn::{RealTransactionalProducer, RealTxnConfig};
pub use zookeeper::{ClickHouseWithZooKeeper, ZkKeeperMap};

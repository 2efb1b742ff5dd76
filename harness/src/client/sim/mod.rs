//! The simulated clients: RPC to the model's broker nodes over eosim's network layer.
//!
//! [`conn::Connection`] routes requests to brokers and keeps the metadata cache; the
//! producer, consumer and admin are built on it.

pub mod accumulator;
pub mod admin;
pub mod clickhouse;
pub mod conn;
pub mod consumer;
pub mod doris;
pub mod postgres;
pub mod producer;
pub mod sender;
pub mod txn;

//! Simulation tests: whole scenarios run in madsim, judged by the checkers. Built only with
//! `--cfg madsim` (`cargo xtask test` does that).
#![cfg(madsim)]

mod batching_producer;
mod canaries;
mod clickhouse_sink;
mod connect_jdbc;
mod connect_source;
mod connect_worker;
mod consumer_truncation;
mod doris_connector;
mod kafka_consume;
mod kip848;
mod kop;
mod long_poll;
mod marks;
mod memory;
mod message_faults;
mod parallel;
mod routine_load;
mod streams_cache;
mod streams_count;
mod streams_repartition;
mod streams_topologies;
mod support;
mod transactional_copy;
mod txn_client;
mod upstream_txn;

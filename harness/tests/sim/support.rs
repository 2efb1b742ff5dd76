//! What the simulation tests share: catalogue scenarios by file name, one seed run and
//! checked with the scenario's own check options, and a small Kafka model for the client
//! tests.

use eosim::checker::{check_all, CheckResult, Validity};
use eosim::cli::aggregate::check_options;
use eosim::client::sim::conn::Connection;
use eosim::client::sim::consumer::SimConsumer;
use eosim::client::{Consumer, ConsumerConfig};
use eosim::runner::{run_seed, SeedOutcome};
use eosim::scenario::Scenario;
use eosim_sim::kafka::model::{Cluster, Reply};
use eosim_sim::kafka::{ClusterConfig, Request, Response, TopicConfig};
use std::path::Path;

/// A 3-broker Kafka model for the client tests: `config` with 3-partition internal topics of
/// one replica and no initial rebalance delay, and topic `t` created with `partitions`,
/// `replication_factor` and `topic`.
pub fn three_broker_cluster(
    config: ClusterConfig,
    partitions: u32,
    replication_factor: u32,
    topic: TopicConfig,
) -> Cluster {
    let config = ClusterConfig {
        offsets_topic_num_partitions: 3,
        transaction_state_log_num_partitions: 3,
        offsets_topic_replication_factor: 1,
        group_initial_rebalance_delay_ms: 0,
        ..config
    };
    let mut cluster = Cluster::new(3, config);
    let create = Request::CreateTopic {
        name: "t".into(),
        partitions,
        replication_factor,
        config: topic,
    };
    assert_eq!(
        cluster.handle(0, 1, create),
        Reply::Done(Response::CreateTopic)
    );
    cluster
}

/// A consumer with `config` on the brokers of [`three_broker_cluster`], subscribed to `t`.
pub async fn subscribed_to_t(config: ConsumerConfig) -> SimConsumer {
    let conn = Connection::open(3).await.expect("connection");
    let mut consumer = SimConsumer::new(conn, config);
    consumer
        .subscribe(&["t".to_string()])
        .await
        .expect("subscribe");
    consumer
}

/// The catalogue's `scenarios/<file>` (so a test and the catalogue cannot drift apart).
pub fn catalogue(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(file);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `seed` of `s` (it must not crash) and checks its history.
pub fn run_checked(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let outcome = run_seed(s, seed);
    assert_eq!(outcome.crashed, None, "{} seed {seed} crashed", s.name);
    let result = check_all(&outcome.history, &check_options(s));
    (outcome, result)
}

/// Runs `seed` of `s` and checks it; it must hold: not stalled, valid.
pub fn run_valid(s: &Scenario, seed: u64) -> (SeedOutcome, CheckResult) {
    let (outcome, result) = run_checked(s, seed);
    assert_eq!(outcome.stalled, None, "{} seed {seed} stalled", s.name);
    assert_eq!(
        result.validity,
        Validity::Valid,
        "{} seed {seed}: {:?}",
        s.name,
        result.case_texts(8)
    );
    (outcome, result)
}

/// Runs the catalogue's `file` at `seed` and checks it; it must hold (valid, not stalled).
pub fn run_holding(file: &str, seed: u64) -> (SeedOutcome, CheckResult) {
    run_valid(&catalogue(file), seed)
}

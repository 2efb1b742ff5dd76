//! A seed's memory goes with the seed: once a run is over, no task of it is left holding the
//! Kafka model (issue 15: a broker handler parked on the model's `ticked` notify held its own
//! waker through it, so every seed kept about 1.3 MB for good).

use super::support::catalogue;
use eosim::runner::run_seed_probed;

/// One scenario per pipeline (each has services of its own: PostgreSQL, ClickHouse and
/// Keeper, Streams instances, transactional copiers), run under its faults.
const SCENARIOS: [&str; 5] = [
    "alo-commit-after-acks-all.toml",
    "txn-copy-zombie-pause.toml",
    "canary-bad-record-unsafe.toml",
    "canary-aggregate-sequence-unsafe.toml",
    "f1-zombie-after-rebalance-seed-duplicates.toml",
];

#[test]
fn no_task_of_a_finished_seed_keeps_the_kafka_model() {
    for file in SCENARIOS {
        let s = catalogue(file);
        let (outcome, model) = run_seed_probed(&s, 1, false);
        assert_eq!(outcome.crashed, None, "{file} crashed");
        // A parked broker handler, the ticker, a client or a service task still holding
        // `KafkaWorld` would keep the model alive.
        assert_eq!(
            model.strong_count(),
            0,
            "{file}: the Kafka model outlived its seed"
        );
        assert!(
            outcome.history.ops.len() > 10,
            "{file}: the seed ran (so the model was in use)"
        );
    }
}

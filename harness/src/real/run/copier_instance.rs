//! One copier of `transactional-copy` as an `eosim worker --role copier` process of a real
//! run: the loop of [`crate::copier`] (shared with the simulation) over rdkafka, so that a
//! kill of the process is a real SIGKILL of a copier.
//!
//! `consumer-<i>` is copier `i`: group [`crate::copier::COPY_GROUP`] with librdkafka's
//! assignor over the input topic, read_committed, and a [`RealTransactionalProducer`] with
//! `transactional.id = copier-<i>`, whose `send_offsets_to_transaction` carries the
//! consumer's generation and member id (`RealConsumer::group_metadata`, KIP-447).
//!
//! Transactions are numbered `μs since the run's epoch × 1000 + i`: unique across the
//! copiers (by `i`, below 1000) and across the restarts of one (each transaction takes
//! several round trips, so no two of one process start in one μs), which the checkers need
//! to pair each `txn` invoke with its completion.

use super::worker_spec::{Emit, WorkerSpec};
use crate::client::real::{RealConsumer, RealTransactionalProducer, RealTxnConfig};
use crate::client::TxnSettings;
use crate::copier::{self, CopierConfig, CopierHost};
use crate::history::{OpKind, Value};

/// Copiers a real run can number apart (see the module docs).
pub const COPIERS_MAX: u32 = 1000;

/// The process as a [`CopierHost`]: ops on stdout, rdkafka producers.
struct RealCopierHost {
    emit: Emit,
    bootstrap: String,
    index: u32,
}

impl CopierHost for RealCopierHost {
    type Txn = RealTransactionalProducer;

    fn record(&self, kind: OpKind, value: Value, error: Option<String>) {
        self.emit.op(kind, value, error);
    }

    fn next_txn(&self) -> u64 {
        self.emit.now_ns() / 1000 * u64::from(COPIERS_MAX) + u64::from(self.index)
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<RealTransactionalProducer, String> {
        real_txn_producer(&self.bootstrap, settings)
    }
}

/// An rdkafka transactional producer on `bootstrap` with `settings`, not yet initialized:
/// what the real hosts of [`crate::copier`] and [`crate::upstream`] build.
///
/// # Errors
/// librdkafka refuses the configuration (the text says so).
pub fn real_txn_producer(
    bootstrap: &str,
    settings: &TxnSettings,
) -> Result<RealTransactionalProducer, String> {
    let config = RealTxnConfig {
        transactional_id: settings.transactional_id.clone(),
        transaction_timeout_ms: settings.transaction_timeout_ms,
        producer: settings.producer.clone(),
    };
    RealTransactionalProducer::new(bootstrap, config)
        .map_err(|e| format!("transactional producer: {e}"))
}

/// The copier number of process `consumer-<i>`.
///
/// # Errors
/// Another name, or a number of [`COPIERS_MAX`] or more.
pub fn copier_index(name: &str) -> Result<u32, String> {
    name.strip_prefix("consumer-")
        .and_then(|i| i.parse().ok())
        .filter(|i| *i < COPIERS_MAX)
        .ok_or_else(|| {
            format!("--name {name:?}: a copier is named consumer-<i>, i below {COPIERS_MAX}")
        })
}

/// Runs the copier until the process is killed.
///
/// # Errors
/// A name that is not `consumer-<i>`, a consumer that cannot be created.
pub async fn run_copier(spec: &WorkerSpec) -> Result<(), String> {
    let index = copier_index(&spec.name)?;
    let config = CopierConfig::of_scenario(&spec.scenario, index);
    let consumer = RealConsumer::new(&spec.bootstrap, config.consumer.clone())
        .map_err(|e| format!("{}: consumer: {e}", spec.name))?;
    let host = RealCopierHost {
        emit: Emit {
            name: spec.name.clone(),
            epoch_ns: spec.epoch_ns,
        },
        bootstrap: spec.bootstrap.clone(),
        index,
    };
    copier::run(&host, consumer, &config).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_i_is_copier_i() {
        assert_eq!(copier_index("consumer-0"), Ok(0));
        assert_eq!(copier_index("consumer-12"), Ok(12));
        assert!(copier_index("streams-0").is_err());
        assert!(copier_index("consumer-1000").is_err());
    }

    #[test]
    fn transaction_numbers_of_two_copiers_never_meet() {
        let host = |index| RealCopierHost {
            emit: Emit {
                name: format!("consumer-{index}"),
                epoch_ns: crate::real::clock::run_clock_ns(),
            },
            bootstrap: String::new(),
            index,
        };
        let (a, b) = (host(0), host(1));
        let (x, y) = (a.next_txn(), b.next_txn());
        assert_eq!((x % 1000, y % 1000), (0, 1));
        assert_ne!(x, y);
    }
}

//! The transactional upstream producer of the sink pipelines (`[workload]
//! "transactional.id"`) in the simulation: the session of [`crate::upstream`] (its model
//! and the ops it records) on a [`SimTransactionalProducer`], with the run's
//! [`UpstreamState`] in memory; and the drain's view of a transactional input topic
//! ([`consumed_end`], [`lag_of`], [`committed_lag`]).
//!
//! A producer killed inside a transaction leaves it open in the shared state: the next
//! incarnation's `init_transactions` aborts it and records its `txn` invoke and fail; one
//! still open when the run ends is recorded by [`UpstreamTxn::record_final`] as an invoke
//! without completion (undecided).

use crate::client::sim::conn::Connection;
use crate::client::sim::txn::{SimTransactionalProducer, TxnProducerConfig};
use crate::client::TxnSettings;
use crate::history::{OpKind, Recorder, Value};
use crate::scenario::Scenario;
use crate::upstream::{UpstreamConfig, UpstreamHost, UpstreamState};
use eosim_sim::clock::now_ns;
use eosim_sim::kafka::model::Cluster;
use eosim_sim::kafka::{Isolation, Offset, TopicPartition};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The transactional upstream of one run, shared by its producer processes.
#[derive(Clone)]
pub struct UpstreamTxn {
    config: UpstreamConfig,
    recorder: Recorder,
    /// Outside the producer processes, so that a restarted one (or the final state) can
    /// still name the records of its predecessor's open transaction.
    state: Arc<Mutex<UpstreamState>>,
}

/// One producer process's transactional producer ([`crate::upstream::Session`]) in the
/// simulation.
pub type Session = crate::upstream::Session<SimUpstreamHost>;

impl UpstreamTxn {
    /// The upstream of `scenario`, `None` without `[workload] "transactional.id"`.
    pub fn of(scenario: &Arc<Scenario>, recorder: &Recorder) -> Option<Self> {
        Some(Self {
            config: UpstreamConfig::of_scenario(scenario)?,
            recorder: recorder.clone(),
            state: Arc::default(),
        })
    }

    /// Records, as invokes without completion, the transactions still open at the end of
    /// the run: undecided, neither expected in a sink nor forbidden there.
    pub fn record_final(&self) {
        let open = self
            .state
            .lock()
            .expect("upstream txn lock")
            .take_open_at_end();
        for (process, value) in open {
            self.recorder
                .record(now_ns(), &process, OpKind::Invoke, value, None);
        }
    }

    /// Opens the session of producer process `process` (`producer-<i>`) over `conn`: a
    /// producer of its `transactional.id`, initialized (retried until it is).
    pub async fn session(&self, conn: Connection, process: &str) -> Session {
        let host = SimUpstreamHost {
            upstream: self.clone(),
            conn,
        };
        Session::open(host, self.config.clone(), process).await
    }
}

/// A simulated producer process as an [`UpstreamHost`]: ops into the run's history,
/// producers over its connection, the state in memory.
pub struct SimUpstreamHost {
    upstream: UpstreamTxn,
    conn: Connection,
}

impl UpstreamHost for SimUpstreamHost {
    type Txn = SimTransactionalProducer;

    fn record(&self, process: &str, kind: OpKind, value: Value, error: Option<String>) {
        self.upstream
            .recorder
            .record(now_ns(), process, kind, value, error);
    }

    fn txn_producer(&self, settings: &TxnSettings) -> Result<SimTransactionalProducer, String> {
        let mut config = TxnProducerConfig::new(settings.transactional_id.clone());
        config.transaction_timeout_ms = settings.transaction_timeout_ms;
        config.producer = settings.producer.clone();
        Ok(SimTransactionalProducer::new(self.conn.clone(), config))
    }

    fn update<R>(&self, change: impl FnOnce(&mut UpstreamState) -> R) -> R {
        change(&mut self.upstream.state.lock().expect("upstream txn lock"))
    }
}

/// Where a sink group reading `tp` with `isolation` has consumed everything, for the
/// drain's lag: the offset after the last record such a consumer returns (0 when none),
/// or `None` while a transaction on `tp` is undecided (LSO below the HW). Not the high
/// watermark: the commit or abort marker after a transaction's last record takes an offset
/// no record holds, and consumers commit the offset after the last record they processed
/// (Kafka Connect's `WorkerSinkTask` commits `record.offset() + 1`), so a transactional
/// topic's committed offsets stay one or more below the HW for good.
///
/// # Errors
/// The partition cannot be read (no leader, a fetch error).
pub fn consumed_end(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    isolation: Isolation,
) -> Result<Option<Offset>, String> {
    let hw = cluster.high_watermark(tp).unwrap_or(0);
    if cluster.last_stable_offset(tp).unwrap_or(0) < hw {
        return Ok(None);
    }
    let last = match isolation {
        Isolation::ReadCommitted => super::records::read_committed(cluster, now_ms, tp)?
            .last()
            .map(|r| r.offset),
        Isolation::ReadUncommitted => cluster.records(tp).last().map(|(o, _)| *o),
    };
    Ok(Some(last.map_or(0, |o| o + 1)))
}

/// The drain's lag line of `tp` for a group at committed offset `committed` reading a
/// transactional upstream with `isolation` ([`consumed_end`]); `None` once caught up.
pub fn lag_of(
    cluster: &mut Cluster,
    now_ms: u64,
    tp: &TopicPartition,
    isolation: Isolation,
    committed: Offset,
) -> Option<String> {
    match consumed_end(cluster, now_ms, tp, isolation) {
        Err(e) => Some(format!("not readable: {e}")),
        Ok(None) => Some(format!(
            "{tp}: a transaction is undecided (LSO below the HW)"
        )),
        Ok(Some(end)) if committed < end => Some(format!(
            "{tp}: committed {committed} < {end}, the end of what the group reads"
        )),
        Ok(Some(_)) => None,
    }
}

/// [`committed_lag`] of `group`, read from `cluster`'s committed offsets: what a drain
/// asks of the group that consumes the upstream's partitions.
pub fn group_lag(
    cluster: &mut Cluster,
    now_ms: u64,
    partitions: impl IntoIterator<Item = TopicPartition>,
    group: &str,
    transactional: Option<Isolation>,
) -> Vec<String> {
    let committed = cluster.committed_offsets(group).into_iter().collect();
    committed_lag(cluster, now_ms, partitions, &committed, transactional)
}

/// The drain's lag lines of a sink group whose committed offsets are `committed`, over
/// `partitions`: behind a transactional upstream read with `transactional`'s isolation,
/// [`lag_of`] each; otherwise each partition whose committed offset is below its high
/// watermark.
pub fn committed_lag(
    cluster: &mut Cluster,
    now_ms: u64,
    partitions: impl IntoIterator<Item = TopicPartition>,
    committed: &BTreeMap<TopicPartition, Offset>,
    transactional: Option<Isolation>,
) -> Vec<String> {
    let mut lag = Vec::new();
    for tp in partitions {
        let c = committed.get(&tp).copied().unwrap_or(0);
        if let Some(isolation) = transactional {
            lag.extend(lag_of(cluster, now_ms, &tp, isolation, c));
            continue;
        }
        let hw = cluster.high_watermark(&tp).unwrap_or(0);
        if c < hw {
            lag.push(format!("{tp}: committed {c} < high watermark {hw}"));
        }
    }
    lag
}

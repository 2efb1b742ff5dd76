//! How a scenario configures a Streams instance: `[streams]` over `[topic]` and
//! `[workload]`, for the simulated instances (`workload::streams_count`) and the real
//! tier's (`real::run::streams_instance`) alike.

use super::Scenario;
use crate::client::ProducerConfig;
use crate::streams::processor::ProcessorConfig;
use crate::streams::store::Disk;
use crate::streams::STREAMS_PRODUCER_LINGER_MS;

impl Scenario {
    /// The [`ProcessorConfig`] of Streams instance `index`: `[streams]`, its topology over
    /// `[topic]`, the session timeout (`streams.session_timeout_ms`, else the workload's) and
    /// `[workload]`'s idempotent producer settings (acks, timeouts, retries) with Streams'
    /// batching: `[streams] "producer.linger.ms"` (default [`STREAMS_PRODUCER_LINGER_MS`]),
    /// `"producer.batch.size"` and the Java producer's 5 requests in flight per broker.
    pub fn processor_config(&self, index: u32, disk: Disk) -> ProcessorConfig {
        let s = &self.streams;
        ProcessorConfig {
            index,
            spec: s.clone(),
            topology: s.topology(&self.topic.name, self.topic.partitions),
            session_timeout_ms: s
                .session_timeout_ms
                .unwrap_or(self.workload.session_timeout_ms),
            producer: {
                let base = self.workload.idempotent_producer_config();
                ProducerConfig {
                    linger_ms: s.producer_linger_ms.unwrap_or(STREAMS_PRODUCER_LINGER_MS),
                    batch_size: s.producer_batch_size.unwrap_or(base.batch_size),
                    max_in_flight_requests_per_connection: 5,
                    ..base
                }
            },
            disk,
            process_id: String::new(),
            cooperative: s.cooperative(),
        }
    }
}

//! `[workload]`'s producer keys, under the Java producer's names (`ProducerConfig`): the
//! batching of the `kafka-consume`, `connect-jdbc`, `streams-count`, `clickhouse-sink`,
//! `routine-load` and `doris-sink` input producers.
//!
//! ```toml
//! [workload]
//! "linger.ms" = 5                               # default 0 here; Kafka 4.0: 5 (KIP-1030)
//! "batch.size" = 16384                          # bytes; default 16384 (Kafka's)
//! "max.in.flight.requests.per.connection" = 5   # default 1 here; Kafka: 5
//! "enable.idempotence" = false                  # default false in kafka-consume
//! "delivery.timeout.ms" = 120000               # ms; default here: see below
//! "metadata.max.age.ms" = 300000                # ms; Kafka's default
//! ```
//!
//! ## Default values
//! Unset, the workload keeps the shape every scenario was calibrated with: each record is
//! sent and awaited on its own, one Produce request of one record, one request in flight
//! (`linger.ms=0`, `max.in.flight.requests.per.connection=1`), `kafka-consume`'s and
//! `connect-jdbc`'s producers are not idempotent, and `streams-count`'s is. Kafka's own
//! defaults differ: `linger.ms=5` since Kafka 4.0 (KIP-1030; 0 before),
//! `batch.size=16384`, `max.in.flight.requests.per.connection=5`,
//! `enable.idempotence=true` (Kafka 3.0+, KIP-679). With `linger.ms` > 0 or more than one
//! request in flight the producer process keeps its sends outstanding
//! ([`crate::client::Producer::send_with_callback`], one every `produce_interval_ms`, none
//! between them at 0) and its accumulator batches them (`client::sim::accumulator` under
//! `--cfg madsim`).
//!
//! ## Checks (Kafka's `ConfigException`s)
//! - `max.in.flight.requests.per.connection` at least 1 (`atLeast(1)`), and at most 5 with
//!   `enable.idempotence` (`ProducerConfig.postProcessAndValidateIdempotenceConfigs`).
//! - `enable.idempotence = true` only with `acks = "all"` (same place).
//! - `linger.ms + request.timeout.ms <= delivery.timeout.ms`
//!   (`KafkaProducer.configureDeliveryTimeout`), where, unless `"delivery.timeout.ms"` is
//!   set, `kafka-consume`'s, `connect-jdbc`'s and `streams-count`'s delivery timeout is
//!   `request_timeout_ms × (retries + 1)`: so `linger.ms <= request_timeout_ms × retries`.
//!   The other pipelines' producers make one attempt per batch (`retries = 0`, delivery
//!   timeout `linger.ms + request_timeout_ms`), so any linger fits and
//!   `enable.idempotence = true` is refused (Kafka's "Must set retries to non-zero when
//!   using the idempotent producer").
//! - Only those six pipelines without a transactional upstream read the keys; elsewhere
//!   (transactional-copy) they are refused, so none is silently ignored.

use super::{ensure, Pipeline, Scenario, WorkloadSpec};
use crate::client::ProducerConfig;
use eosim_sim::kafka::Acks;

/// Kafka's cap on `max.in.flight.requests.per.connection` for an idempotent producer.
pub const IDEMPOTENT_MAX_IN_FLIGHT: u32 = 5;

impl WorkloadSpec {
    /// Sets the keys this module documents on `config`, those that are set.
    pub fn apply_producer_keys(&self, config: &mut ProducerConfig) {
        if let Some(linger_ms) = self.linger_ms {
            config.linger_ms = linger_ms;
        }
        if let Some(batch_size) = self.batch_size {
            config.batch_size = batch_size;
        }
        if let Some(n) = self.max_in_flight_requests_per_connection {
            config.max_in_flight_requests_per_connection = n;
        }
        if let Some(idempotent) = self.enable_idempotence {
            config.enable_idempotence = idempotent;
        }
        if let Some(ms) = self.delivery_timeout_ms {
            config.delivery_timeout_ms = ms;
        }
        if let Some(max_age_ms) = self.metadata_max_age_ms {
            config.metadata_max_age_ms = max_age_ms;
        }
    }

    /// The input producer of `kafka-consume` and `connect-jdbc`, in simulation and on the
    /// real tier: `[workload] acks`, `retries` and `request_timeout_ms`, not idempotent
    /// unless `"enable.idempotence"` says so, `delivery.timeout.ms = request_timeout_ms ×
    /// (retries + 1)` unless `"delivery.timeout.ms"` is set, and this module's keys.
    pub fn retrying_producer_config(&self) -> ProducerConfig {
        let mut config = ProducerConfig {
            acks: self.acks,
            enable_idempotence: false,
            request_timeout_ms: self.request_timeout_ms,
            delivery_timeout_ms: self.request_timeout_ms * (u64::from(self.retries) + 1),
            retries: self.retries,
            ..ProducerConfig::default()
        };
        self.apply_producer_keys(&mut config);
        config
    }

    /// The input producer of `streams-count`, in simulation and on the real tier: the
    /// idempotent producer ([`WorkloadSpec::idempotent_producer_config`], as its scenarios
    /// were calibrated, and Kafka's default since 3.0) with this module's keys. Only the
    /// input producer: the Streams instances' own producers do not read `[workload]`.
    pub fn streams_input_producer_config(&self) -> ProducerConfig {
        let mut config = self.idempotent_producer_config();
        self.apply_producer_keys(&mut config);
        config
    }

    /// The input producer of the sink pipelines (clickhouse-sink, routine-load,
    /// doris-sink), in simulation and on the real tier: `[workload] acks`, not idempotent,
    /// one attempt per record (or batch) within `request_timeout_ms` after its linger (a
    /// send that fails is recorded as failed or unknown, never retried into a duplicate the
    /// checkers would blame on the sink); this module's batching keys.
    /// `delivery.timeout.ms` is `linger.ms + request.timeout.ms`, the least Kafka accepts,
    /// unless `"delivery.timeout.ms"` is set.
    pub fn one_attempt_producer_config(&self) -> ProducerConfig {
        let mut config = ProducerConfig {
            acks: self.acks,
            enable_idempotence: false,
            request_timeout_ms: self.request_timeout_ms,
            retries: 0,
            ..ProducerConfig::default()
        };
        config.delivery_timeout_ms = self.linger_ms.unwrap_or(0) + self.request_timeout_ms;
        self.apply_producer_keys(&mut config);
        config
    }

    /// The keys of this module that are set, by their `[workload]` names.
    fn producer_keys_set(&self) -> Vec<&'static str> {
        let keys = [
            ("linger.ms", self.linger_ms.is_some()),
            ("batch.size", self.batch_size.is_some()),
            (
                "max.in.flight.requests.per.connection",
                self.max_in_flight_requests_per_connection.is_some(),
            ),
            ("enable.idempotence", self.enable_idempotence.is_some()),
            ("delivery.timeout.ms", self.delivery_timeout_ms.is_some()),
            ("metadata.max.age.ms", self.metadata_max_age_ms.is_some()),
        ];
        keys.iter()
            .filter(|(_, set)| *set)
            .map(|(k, _)| *k)
            .collect()
    }
}

/// `Err((key, message))` for a key Kafka would refuse or a pipeline would not read.
pub(super) fn check(scenario: &Scenario) -> Result<(), (String, String)> {
    let w = &scenario.workload;
    let Some(first) = w.producer_keys_set().first().copied() else {
        return Ok(());
    };
    let one_attempt = matches!(
        scenario.pipeline,
        Pipeline::ClickhouseSink | Pipeline::RoutineLoad | Pipeline::DorisSink
    );
    ensure(
        matches!(
            scenario.pipeline,
            Pipeline::KafkaConsume | Pipeline::ConnectJdbc | Pipeline::StreamsCount
        ) || one_attempt,
        &format!("workload.{first}"),
        format!(
            "read only by the input producers of pipelines `kafka-consume`, \
             `connect-jdbc`, `streams-count`, `clickhouse-sink`, `routine-load` and \
             `doris-sink`, not `{}`",
            scenario.pipeline.name()
        ),
    )?;
    ensure(
        w.transactional_id.is_none(),
        &format!("workload.{first}"),
        "not with workload.transactional.id: the transactional upstream sends one record \
         per request"
            .into(),
    )?;
    // streams-count's input producer is idempotent unless told otherwise.
    let idempotent = w
        .enable_idempotence
        .unwrap_or(scenario.pipeline == Pipeline::StreamsCount);
    if let Some(n) = w.max_in_flight_requests_per_connection {
        let max = if idempotent {
            IDEMPOTENT_MAX_IN_FLIGHT
        } else {
            u32::MAX
        };
        ensure(
            (1..=max).contains(&n),
            "workload.max.in.flight.requests.per.connection",
            if idempotent {
                format!("expected 1..=5 with enable.idempotence = true, found {n}")
            } else {
                format!("expected at least 1, found {n}")
            },
        )?;
    }
    ensure(
        !idempotent || w.acks == Acks::All,
        "workload.enable.idempotence",
        "the idempotent producer needs acks = \"all\"".into(),
    )?;
    let linger_ms = w.linger_ms.unwrap_or(0);
    if let Some(delivery_ms) = w.delivery_timeout_ms {
        let least = linger_ms + w.request_timeout_ms;
        ensure(
            delivery_ms >= least,
            "workload.delivery.timeout.ms",
            format!(
                "expected at least linger.ms + request.timeout.ms = {least} (Kafka's \
                 KafkaProducer.configureDeliveryTimeout), found {delivery_ms}"
            ),
        )?;
    }
    if one_attempt {
        // `retries = 0` and `delivery.timeout.ms = linger.ms + request.timeout.ms` unless
        // set (`WorkloadSpec::one_attempt_producer_config`): any linger fits.
        return ensure(
            !idempotent,
            "workload.enable.idempotence",
            "this pipeline's input producer makes one attempt per batch (retries = 0), \
             and Kafka refuses an idempotent producer without retries (\"Must set retries \
             to non-zero when using the idempotent producer\")"
                .into(),
        );
    }
    if w.delivery_timeout_ms.is_some() {
        return Ok(());
    }
    let linger_max = w.request_timeout_ms * u64::from(w.retries);
    ensure(
        linger_ms <= linger_max,
        "workload.linger.ms",
        format!(
            "expected at most {linger_max} (linger.ms + request.timeout.ms <= \
             delivery.timeout.ms = request_timeout_ms * (retries + 1)), found {linger_ms}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use crate::scenario::{Scenario, ScenarioError};
    use std::path::Path;

    fn parse(pipeline: &str, workload: &str) -> Result<Scenario, ScenarioError> {
        let text = format!(
            "pipeline = \"{pipeline}\"\nclaim = \"at-least-once\"\n[workload]\n{workload}\n"
        );
        Scenario::parse(Path::new("t.toml"), &text)
    }

    fn refused_key(pipeline: &str, workload: &str) -> String {
        match parse(pipeline, workload) {
            Err(ScenarioError::Invalid { key, .. }) => key,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_batching_keys_reach_the_producer_config() {
        let s = parse(
            "kafka-consume",
            "\"linger.ms\" = 7\n\"batch.size\" = 100\n\
             \"max.in.flight.requests.per.connection\" = 3\n\"enable.idempotence\" = true",
        )
        .expect("valid");
        let mut config = crate::client::ProducerConfig::default();
        s.workload.apply_producer_keys(&mut config);
        assert_eq!(
            (
                config.linger_ms,
                config.batch_size,
                config.max_in_flight_requests_per_connection
            ),
            (7, 100, 3)
        );
        assert!(config.enable_idempotence && config.batching());
    }

    #[test]
    fn unset_keys_keep_one_record_per_request() {
        let s = parse("kafka-consume", "").expect("valid");
        let mut config = crate::client::ProducerConfig::default();
        s.workload.apply_producer_keys(&mut config);
        assert!(!config.batching());
        assert!(!s.to_toml().expect("toml").contains("linger"));
    }

    #[test]
    fn bad_batching_values_are_refused_naming_the_key() {
        let cases = [
            (
                "\"max.in.flight.requests.per.connection\" = 0",
                "workload.max.in.flight.requests.per.connection",
            ),
            (
                "\"enable.idempotence\" = true\n\"max.in.flight.requests.per.connection\" = 6",
                "workload.max.in.flight.requests.per.connection",
            ),
            (
                "\"enable.idempotence\" = true\nacks = \"1\"",
                "workload.enable.idempotence",
            ),
            ("\"linger.ms\" = 25001", "workload.linger.ms"),
            ("\"batch.size\" = -1", "workload.batch.size"),
        ];
        for (workload, key) in cases {
            assert_eq!(refused_key("kafka-consume", workload), key, "{workload}");
        }
    }

    /// The clickhouse-sink producer takes the batching keys with one attempt per batch:
    /// its delivery timeout grows by the linger, and idempotence (which needs retries) is
    /// refused.
    #[test]
    fn the_clickhouse_sink_producer_batches_with_one_attempt() {
        let s = parse(
            "clickhouse-sink",
            "request_timeout_ms = 2000\n\"linger.ms\" = 50000\n\
             \"max.in.flight.requests.per.connection\" = 5",
        )
        .expect("any linger fits one attempt");
        let config = s.workload.one_attempt_producer_config();
        assert_eq!(
            (config.retries, config.linger_ms, config.delivery_timeout_ms),
            (0, 50_000, 52_000)
        );
        assert!(config.batching() && !config.enable_idempotence);
        assert_eq!(
            refused_key(
                "clickhouse-sink",
                "\"enable.idempotence\" = true\n\"linger.ms\" = 5"
            ),
            "workload.enable.idempotence"
        );
        let unset = parse("clickhouse-sink", "").expect("valid");
        let config = unset.workload.one_attempt_producer_config();
        assert!(!config.batching());
        assert_eq!(config.delivery_timeout_ms, config.request_timeout_ms);
    }

    /// streams-count's input producer stays idempotent with the batching keys, so the
    /// idempotent producer's cap on requests in flight applies without
    /// `enable.idempotence` being set; the Streams instances' own producers keep theirs.
    #[test]
    fn the_streams_count_input_producer_batches_idempotently() {
        let s = parse(
            "streams-count",
            "\"linger.ms\" = 5\n\"max.in.flight.requests.per.connection\" = 5",
        )
        .expect("valid");
        let config = s.workload.streams_input_producer_config();
        assert!(config.batching() && config.enable_idempotence);
        assert_eq!(config.linger_ms, 5);
        assert_eq!(s.workload.idempotent_producer_config().linger_ms, 0);
        assert_eq!(
            refused_key(
                "streams-count",
                "\"max.in.flight.requests.per.connection\" = 6"
            ),
            "workload.max.in.flight.requests.per.connection"
        );
        let plain = parse(
            "streams-count",
            "\"enable.idempotence\" = false\n\"max.in.flight.requests.per.connection\" = 6",
        )
        .expect("a producer that is not idempotent takes any number");
        assert!(
            !plain
                .workload
                .streams_input_producer_config()
                .enable_idempotence
        );
    }

    #[test]
    fn the_batching_keys_are_refused_where_no_producer_reads_them() {
        assert_eq!(
            refused_key("transactional-copy", "\"linger.ms\" = 5"),
            "workload.linger.ms"
        );
        assert_eq!(
            refused_key(
                "kafka-consume",
                "\"transactional.id\" = \"up\"\n\"batch.size\" = 10"
            ),
            "workload.batch.size"
        );
    }
}

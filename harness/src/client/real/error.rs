//! librdkafka's error codes in eosim's terms.
//!
//! Broker errors keep Kafka's own numbers in librdkafka (`rd_kafka_resp_err_t` ≥ 0), so
//! they map one to one onto [`KafkaError`] where the model knows the code. Local timeouts
//! (`_MSG_TIMED_OUT` after `delivery.timeout.ms`, `_TIMED_OUT`, `_TIMED_OUT_QUEUE`) and
//! lost connections become [`ClientError::Timeout`]: the outcome is unknown. A commit
//! refused with ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS is
//! [`ClientError::CommitFailed`] (Java's `CommitFailedException`). Everything else is
//! [`ClientError::Fatal`] with librdkafka's own text.

use crate::client::ClientError;
use eosim_sim::kafka::KafkaError;
use rdkafka::error::{KafkaError as RdKafkaError, RDKafkaErrorCode};

/// The model's name for a broker error code, if it knows it.
pub fn kafka_error(code: RDKafkaErrorCode) -> Option<KafkaError> {
    i16::try_from(code as i32)
        .ok()
        .and_then(KafkaError::from_code)
}

/// Whether `code` means "no answer in time": the outcome is unknown.
pub fn is_timeout(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageTimedOut
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::TimedOutQueue
            | RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
    )
}

/// Maps a librdkafka error code; `what` and `timeout_ms` describe the call for a timeout.
pub fn from_code(code: RDKafkaErrorCode, what: &str, timeout_ms: u64) -> ClientError {
    if is_timeout(code) {
        return ClientError::Timeout {
            what: format!("{what} ({code})"),
            timeout_ms,
        };
    }
    match kafka_error(code) {
        Some(e) => ClientError::Kafka(e),
        None => ClientError::Fatal(format!("{what}: {code}")),
    }
}

/// Maps an rdkafka error; see the module docs.
pub fn from_rdkafka(e: &RdKafkaError, what: &str, timeout_ms: u64) -> ClientError {
    match e.rdkafka_error_code() {
        Some(code) => from_code(code, what, timeout_ms),
        None => ClientError::Fatal(format!("{what}: {e}")),
    }
}

/// Maps the error of a synchronous offset commit.
pub fn from_commit(e: &RdKafkaError, timeout_ms: u64) -> ClientError {
    let code = e.rdkafka_error_code();
    match code.and_then(kafka_error) {
        Some(
            k @ (KafkaError::IllegalGeneration
            | KafkaError::UnknownMemberId
            | KafkaError::RebalanceInProgress),
        ) => ClientError::CommitFailed(k),
        _ => from_rdkafka(e, "offset commit", timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_codes_map_to_the_models_errors() {
        assert_eq!(
            kafka_error(RDKafkaErrorCode::NotEnoughReplicas),
            Some(KafkaError::NotEnoughReplicas)
        );
        assert_eq!(
            kafka_error(RDKafkaErrorCode::TopicAlreadyExists),
            Some(KafkaError::TopicAlreadyExists)
        );
        assert_eq!(
            kafka_error(RDKafkaErrorCode::ProducerFenced),
            Some(KafkaError::ProducerFenced)
        );
        assert_eq!(kafka_error(RDKafkaErrorCode::MessageTimedOut), None);
    }

    #[test]
    fn delivery_timeout_is_ambiguous() {
        let e = from_code(RDKafkaErrorCode::MessageTimedOut, "produce", 120_000);
        assert!(matches!(
            e,
            ClientError::Timeout {
                timeout_ms: 120_000,
                ..
            }
        ));
        assert!(e.is_ambiguous());
    }

    #[test]
    fn rebalance_on_commit_is_commit_failed() {
        let e = RdKafkaError::ConsumerCommit(RDKafkaErrorCode::RebalanceInProgress);
        assert_eq!(
            from_commit(&e, 1000),
            ClientError::CommitFailed(KafkaError::RebalanceInProgress)
        );
        let e = RdKafkaError::ConsumerCommit(RDKafkaErrorCode::IllegalGeneration);
        assert_eq!(
            from_commit(&e, 1000),
            ClientError::CommitFailed(KafkaError::IllegalGeneration)
        );
    }
}

//! Broker nodes serving the Kafka model.

//! Kafka's murmur2 and the default partitioner for keyed records.

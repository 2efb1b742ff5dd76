//! Kafka's murmur2 and the default partitioner for keyed records.

/// Partition of a keyed record (placeholder until the kafka-log branch merges).
pub fn partition_for_key(key: &[u8], partition_count: u32) -> u32 {
    let _ = key;
    let _ = partition_count;
    unimplemented!("murmur2 comes with the kafka-log branch")
}

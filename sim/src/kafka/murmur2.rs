//! Kafka's murmur2 and the default partitioner for keyed records.
//!
//! Bit-exact with `org.apache.kafka.common.utils.Utils.murmur2` / `toPositive` and with
//! `BuiltInPartitioner.partitionForKey` (models-reference A.8), so a keyed record lands on
//! the same partition in the model as with the Java client (or librdkafka configured with
//! `partitioner=murmur2_random`). Also Java's `String.hashCode` and `Utils.abs`, which Kafka
//! uses to place a group or a transactional id on a partition of its internal topic.

/// Kafka's murmur2 hash of `data` (`Utils.murmur2`): seed `0x9747b28c`, `m = 0x5bd1e995`,
/// `r = 24`, all arithmetic on wrapping 32-bit ints, returned as Java's signed `int`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // Java's switch with fall-through over the 1..=3 tail bytes.
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `Utils.toPositive`: clears the sign bit (`x & 0x7fffffff`); not `abs`.
pub fn to_positive(x: i32) -> i32 {
    x & 0x7fff_ffff
}

/// The default partitioner's choice for a record with key bytes `key`
/// (`BuiltInPartitioner.partitionForKey`): `toPositive(murmur2(key)) % partition_count`,
/// counting every partition of the topic, available or not.
///
/// Panics when `partition_count` is 0 (a topic has at least one partition).
pub fn partition_for_key(key: &[u8], partition_count: u32) -> u32 {
    assert!(partition_count > 0, "a topic has at least one partition");
    (to_positive(murmur2(key)) as u32) % partition_count
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units,
/// wrapping 32-bit arithmetic.
pub fn java_string_hash_code(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(unit as i32))
}

/// Kafka's `Utils.abs`: `Math.abs` except that `Integer.MIN_VALUE` maps to 0 (this is what
/// the group and transaction coordinators use, not `toPositive`).
pub fn java_utils_abs(x: i32) -> i32 {
    if x == i32::MIN {
        0
    } else {
        x.abs()
    }
}

/// Partition of `__consumer_offsets` (or `__transaction_state`) owning `key`:
/// `Utils.abs(key.hashCode()) % partition_count` (`GroupCoordinatorService.partitionFor`,
/// `TransactionStateManager.partitionFor`).
pub fn coordinator_partition_for(key: &str, partition_count: u32) -> u32 {
    assert!(
        partition_count > 0,
        "an internal topic has at least one partition"
    );
    (java_utils_abs(java_string_hash_code(key)) as u32) % partition_count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test_vectors() {
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"abc"), 479_470_107);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
    }

    #[test]
    fn keyed_records_land_on_to_positive_murmur2_modulo_partition_count() {
        assert_eq!(partition_for_key(b"0", 3), 2);
        assert_eq!(partition_for_key(b"1", 3), 0);
        assert_eq!(partition_for_key(b"key-1", 3), 0);
        assert_eq!(partition_for_key(b"", 3), 0);
    }

    #[test]
    fn to_positive_clears_the_sign_bit_rather_than_negating() {
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(5), 5);
    }

    #[test]
    fn java_string_hash_code_matches_java() {
        // Values from `"…".hashCode()` in Java.
        assert_eq!(java_string_hash_code(""), 0);
        assert_eq!(java_string_hash_code("a"), 97);
        assert_eq!(java_string_hash_code("abc"), 96_354);
        assert_eq!(java_string_hash_code("hello world"), 1_794_106_052);
        assert_eq!(java_utils_abs(i32::MIN), 0);
        assert_eq!(java_utils_abs(-7), 7);
    }
}

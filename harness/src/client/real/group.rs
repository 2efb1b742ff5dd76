//! The consumer's group metadata as data (group id, generation, member id), read from
//! librdkafka: rdkafka 0.39 hands out only an opaque `ConsumerGroupMetadata`, so this asks
//! `rd_kafka_consumer_group_metadata` and decodes what
//! `rd_kafka_consumer_group_metadata_write` serializes (librdkafka 2.12, `rdkafka_cgrp.c`):
//! the magic `CGMDv2\0`, the generation (native-endian `int32`), then the group id and the
//! member id as NUL-terminated strings (then the group instance id, unused here).
//!
//! librdkafka keeps the generation of the last JoinGroup response; outside a joined
//! generation it is -1 and the member id is empty, which reads as `None`. Unlike Java's
//! consumer, librdkafka does not tell "rebalance in progress" apart here: during a rejoin
//! the previous generation is still reported (with the assignment already revoked under
//! the eager protocol).

use crate::client::ConsumerGroupMetadata;
use rdkafka::bindings as rd;
use rdkafka::consumer::{Consumer as _, StreamConsumer};

/// librdkafka's serialization magic of group metadata, version 2.
const MAGIC: &[u8] = b"CGMDv2\0";

/// The group metadata `consumer` holds now; `None` outside a joined generation.
pub(super) fn group_metadata(consumer: &StreamConsumer) -> Option<ConsumerGroupMetadata> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live client handle; the metadata is destroyed after it was
    // written, and the buffer librdkafka allocated is copied, then freed with
    // `rd_kafka_mem_free` on the same handle, as its documentation asks.
    let bytes = unsafe {
        let cgmd = rd::rd_kafka_consumer_group_metadata(rk);
        if cgmd.is_null() {
            return None;
        }
        let mut buffer: *mut std::ffi::c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        let error = rd::rd_kafka_consumer_group_metadata_write(cgmd, &mut buffer, &mut size);
        rd::rd_kafka_consumer_group_metadata_destroy(cgmd);
        if !error.is_null() {
            rd::rd_kafka_error_destroy(error);
            return None;
        }
        let bytes = std::slice::from_raw_parts(buffer as *const u8, size).to_vec();
        rd::rd_kafka_mem_free(rk, buffer);
        bytes
    };
    decode(&bytes).filter(|g| g.generation >= 0 && !g.member_id.is_empty())
}

/// Decodes librdkafka's serialized group metadata (see the module docs).
fn decode(bytes: &[u8]) -> Option<ConsumerGroupMetadata> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let generation = i32::from_ne_bytes(rest.get(..4)?.try_into().ok()?);
    let mut strings = rest[4..].split(|b| *b == 0);
    let group_id = String::from_utf8(strings.next()?.to_vec()).ok()?;
    let member_id = String::from_utf8(strings.next()?.to_vec()).ok()?;
    Some(ConsumerGroupMetadata {
        group_id,
        generation,
        member_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(generation: i32, group: &str, member: &str) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend(generation.to_ne_bytes());
        for s in [group, member] {
            b.extend(s.as_bytes());
            b.push(0);
        }
        b.push(1); // group instance id is null
        b
    }

    #[test]
    fn decodes_librdkafkas_layout() {
        let g = decode(&encoded(7, "app", "rdkafka-1")).expect("decodes");
        assert_eq!((g.group_id.as_str(), g.generation), ("app", 7));
        assert_eq!(g.member_id, "rdkafka-1");
    }

    #[test]
    fn rejects_another_magic_or_a_short_buffer() {
        let mut other = encoded(1, "app", "m");
        other[5] = b'1';
        assert_eq!(decode(&other), None);
        assert_eq!(decode(&MAGIC[..4]), None);
        assert_eq!(decode(MAGIC), None);
    }
}

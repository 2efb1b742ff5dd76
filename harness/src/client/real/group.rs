//! The consumer's group metadata as data (group id, generation, member id), read from
//! librdkafka: rdkafka 0.39 hands out only an opaque `ConsumerGroupMetadata`, so this asks
//! `rd_kafka_consumer_group_metadata` and reads it with librdkafka's accessors
//! (`rd_kafka_consumer_group_metadata_generation_id`, `_group_id`, `_member_id`).
//!
//! librdkafka keeps the generation of the last JoinGroup response; outside a joined
//! generation it is -1 and the member id is empty, which reads as `None`. Unlike Java's
//! consumer, librdkafka does not tell "rebalance in progress" apart here: during a rejoin
//! the previous generation is still reported (with the assignment already revoked under
//! the eager protocol).

use crate::client::ConsumerGroupMetadata;
use rdkafka::bindings as rd;
use rdkafka::consumer::{Consumer as _, ConsumerContext, StreamConsumer};
use std::ffi::CStr;

/// The group metadata `consumer` holds now; `None` outside a joined generation.
pub(super) fn group_metadata<C: ConsumerContext>(
    consumer: &StreamConsumer<C>,
) -> Option<ConsumerGroupMetadata> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live client handle; the strings belong to the metadata, which
    // is destroyed only after they were copied.
    let group = unsafe {
        let cgmd = rd::rd_kafka_consumer_group_metadata(rk);
        if cgmd.is_null() {
            return None;
        }
        let text = |p: *const std::ffi::c_char| match p.is_null() {
            true => String::new(),
            false => CStr::from_ptr(p).to_string_lossy().into_owned(),
        };
        let group = ConsumerGroupMetadata {
            group_id: text(rd::rd_kafka_consumer_group_metadata_group_id(cgmd)),
            generation: rd::rd_kafka_consumer_group_metadata_generation_id(cgmd),
            member_id: text(rd::rd_kafka_consumer_group_metadata_member_id(cgmd)),
        };
        rd::rd_kafka_consumer_group_metadata_destroy(cgmd);
        group
    };
    joined(group)
}

/// `group` when it names a joined generation (generation ≥ 0 and a member id).
fn joined(group: ConsumerGroupMetadata) -> Option<ConsumerGroupMetadata> {
    (group.generation >= 0 && !group.member_id.is_empty()).then_some(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(generation: i32, member_id: &str) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: "app".into(),
            generation,
            member_id: member_id.into(),
        }
    }

    #[test]
    fn only_a_joined_generation_counts() {
        assert_eq!(joined(metadata(3, "m-1")), Some(metadata(3, "m-1")));
        assert_eq!(joined(metadata(-1, "")), None);
        assert_eq!(joined(metadata(-1, "m-1")), None);
        assert_eq!(joined(metadata(0, "")), None);
    }
}

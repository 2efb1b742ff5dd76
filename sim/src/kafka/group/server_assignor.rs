//! KIP-848's server-side assignors (`group.consumer.assignors`, apache/kafka
//! `group-coordinator/.../assignor/UniformAssignor.java`, `RangeAssignor.java`): the
//! coordinator computes each member's *target* assignment when the group epoch moves past
//! the target assignment epoch. Which one a group uses is the one most of its members name
//! in `group.remote.assignor` (`ConsumerGroup.computePreferredServerAssignor`; a tie goes
//! to the name first in alphabetical order here), else the broker's first, `uniform`.
//!
//! # Simplifications
//! - `uniform` is balanced and sticky like Kafka's `OptimizedUniformAssignmentBuilder`
//!   (homogeneous subscriptions) but not its exact algorithm: every member keeps what its
//!   previous target gave it up to its quota (`n / m`, and `n % m` members — the first
//!   by member id among those that held more — one more), then each partition left goes
//!   to the subscribed member with the fewest partitions (ties: smallest member id).
//!   Heterogeneous subscriptions use the same greedy rule, with eligibility.
//! - `range` is the plain range assignment (per topic, subscribers sorted by member id,
//!   consecutive ranges, the first `n % m` one more), without Kafka's stickiness.

use crate::kafka::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet};

/// The assignors the model's brokers have, the default first (Kafka's
/// `group.consumer.assignors` default: `uniform`, `range`).
pub const SERVER_ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// A member's target assignment: member id → partitions.
pub(super) type Target = BTreeMap<String, BTreeSet<TopicPartition>>;

/// The target assignment by `assignor` (one of [`SERVER_ASSIGNORS`]) of the partitions of
/// `partition_counts` (topic → count; topics without metadata are absent) to `members`
/// (member id → subscribed topics); `previous` is the last target, for stickiness. Every
/// member appears in the result.
pub(super) fn assign(
    assignor: &str,
    members: &BTreeMap<String, Vec<String>>,
    partition_counts: &BTreeMap<String, u32>,
    previous: &Target,
) -> Target {
    match assignor {
        "range" => range(members, partition_counts),
        _ => uniform(members, partition_counts, previous),
    }
}

fn range(members: &BTreeMap<String, Vec<String>>, counts: &BTreeMap<String, u32>) -> Target {
    let mut target: Target = members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (topic, &n) in counts {
        let subscribers: Vec<&String> = (members.iter())
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(m, _)| m)
            .collect();
        let m = subscribers.len() as u32;
        for (i, member) in (0u32..).zip(subscribers) {
            let start = (n / m) * i + i.min(n % m);
            let length = n / m + u32::from(i < n % m);
            let partitions = (start..start + length).map(|p| TopicPartition::new(topic, p));
            target.get_mut(member).expect("listed").extend(partitions);
        }
    }
    target
}

fn uniform(
    members: &BTreeMap<String, Vec<String>>,
    counts: &BTreeMap<String, u32>,
    previous: &Target,
) -> Target {
    let eligible = |member: &str, tp: &TopicPartition| {
        members[member].iter().any(|t| *t == tp.topic)
            && counts
                .get(tp.topic.as_str())
                .is_some_and(|&n| tp.partition < n)
    };
    let all: BTreeSet<TopicPartition> = (counts.iter())
        .filter(|(t, _)| members.values().any(|topics| topics.contains(t)))
        .flat_map(|(t, &n)| (0..n).map(move |p| TopicPartition::new(t, p)))
        .collect();
    let member_count = members.len().max(1);
    let min_quota = all.len() / member_count;
    let mut over_min_left = all.len() % member_count;
    let mut target: Target = members
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let mut taken = BTreeSet::new();
    for (member, kept) in target.iter_mut() {
        let held = previous.get(member).into_iter().flatten();
        let mut valid: Vec<&TopicPartition> = held.filter(|tp| eligible(member, tp)).collect();
        let quota = if valid.len() > min_quota && over_min_left > 0 {
            over_min_left -= 1;
            min_quota + 1
        } else {
            min_quota
        };
        valid.truncate(quota);
        for tp in valid {
            if taken.insert(tp.clone()) {
                kept.insert(tp.clone());
            }
        }
    }
    for tp in all.iter().filter(|tp| !taken.contains(*tp)) {
        let fewest = (target.iter_mut())
            .filter(|(m, _)| eligible(m, tp))
            .min_by_key(|(m, owned)| (owned.len(), (*m).clone()));
        if let Some((_, owned)) = fewest {
            owned.insert(tp.clone());
        }
    }
    target
}

/// The assignor a group uses: the name most `choices` give (ties: alphabetical first),
/// else the broker's default, `uniform`.
pub(super) fn preferred<'a>(choices: impl Iterator<Item = Option<&'a str>>) -> &'a str {
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for name in choices.flatten() {
        *votes.entry(name).or_default() += 1;
    }
    let best = votes.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
    best.map_or(SERVER_ASSIGNORS[0], |(name, _)| name)
}

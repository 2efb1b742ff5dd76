//! Kafka's `CooperativeStickyAssignor` (KIP-429), run by the group leader when the group
//! selected the `cooperative-sticky` protocol.
//!
//! After `AbstractStickyAssignor.constrainedAssign` and `CooperativeStickyAssignor.assign`
//! (Kafka 3.x, `clients/.../consumer/internals/AbstractStickyAssignor.java`,
//! `clients/.../consumer/CooperativeStickyAssignor.java`):
//! 1. Ownership claims are trusted only from members of the highest generation their
//!    subscriptions carry (KIP-792's `generationId`); a partition two such members claim is
//!    owned by neither.
//! 2. With `n` partitions and `m` members, `minQuota = n / m`, `maxQuota = ceil(n / m)`,
//!    and `n % m` members get `maxQuota`. In member order each keeps its owned partitions
//!    up to its quota (`maxQuota` while members over the minimum are still wanted, else
//!    `minQuota`); the rest is revoked.
//! 3. The unassigned partitions, in topic-partition order, go round-robin to the members
//!    under `minQuota` (sorted), then one each to the members at exactly `minQuota`.
//! 4. The cooperative step (`adjustAssignment`): a partition that some other member owned
//!    is left out of this generation's assignment altogether. Its owner revokes it and
//!    rejoins, and the next rebalance hands it over: no partition has two owners at once.
//!
//! Members are taken in member-id order where Java iterates a `HashMap`, so the outcome is
//! deterministic. Subscriptions that differ between members (Java's `generalAssign`) are not
//! modelled: then the range assignment stands in, with the same cooperative step, so the
//! two-phase move still holds but stickiness does not.

use super::membership::range_assign;
use eosim_sim::kafka::{OwnedPartitions, TopicPartition};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The `cooperative-sticky` assignment of one generation: `members` maps member id to
/// subscribed topics, `owned` what each member's JoinGroup said it owns (members missing
/// from it own nothing), `partition_counts` every known topic's partition count. Every
/// member appears in the result, its partitions sorted.
pub fn cooperative_sticky_assign(
    members: &BTreeMap<String, Vec<String>>,
    owned: &BTreeMap<String, OwnedPartitions>,
    partition_counts: &BTreeMap<String, u32>,
) -> BTreeMap<String, Vec<TopicPartition>> {
    let subscriptions: BTreeSet<&Vec<String>> = members.values().collect();
    let (mut assignment, transferring) = if subscriptions.len() <= 1 {
        constrained_assign(members, owned, partition_counts)
    } else {
        let assignment = range_assign(members, partition_counts);
        let transferring = transferring_ownership(owned, &assignment);
        (assignment, transferring)
    };
    for (tp, new_owner) in transferring {
        if let Some(partitions) = assignment.get_mut(&new_owner) {
            partitions.retain(|p| *p != tp);
        }
    }
    for partitions in assignment.values_mut() {
        partitions.sort();
    }
    assignment
}

/// Partition to its new owner, for partitions that must be revoked by another first.
type Transfers = BTreeMap<TopicPartition, String>;

/// Each member's trusted owned partitions (step 1), restricted to `partitions`, and the
/// partitions claimed more than once.
fn valid_ownership(
    members: &BTreeMap<String, Vec<String>>,
    owned: &BTreeMap<String, OwnedPartitions>,
    partitions: &BTreeSet<TopicPartition>,
) -> (
    BTreeMap<String, Vec<TopicPartition>>,
    BTreeSet<TopicPartition>,
) {
    let max_generation = members
        .keys()
        .filter_map(|m| owned.get(m).map(|o| o.generation))
        .max()
        .unwrap_or(-1);
    let mut claims: BTreeMap<&TopicPartition, usize> = BTreeMap::new();
    let trusted = |m: &String| owned.get(m).filter(|o| o.generation == max_generation);
    for o in members.keys().filter_map(trusted) {
        for tp in o.partitions.iter().filter(|tp| partitions.contains(*tp)) {
            *claims.entry(tp).or_default() += 1;
        }
    }
    let valid = members
        .keys()
        .map(|m| {
            let mine = trusted(m)
                .map(|o| o.partitions.as_slice())
                .unwrap_or_default();
            let kept = mine.iter().filter(|tp| claims.get(tp) == Some(&1));
            (m.clone(), kept.cloned().collect())
        })
        .collect();
    let doubly = claims.into_iter().filter(|(_, n)| *n > 1);
    (valid, doubly.map(|(tp, _)| tp.clone()).collect())
}

/// Steps 1 to 3, for members that all subscribe to the same topics, with the partitions
/// that change owner (revoked by their owner, or claimed twice) and their new owner.
fn constrained_assign(
    members: &BTreeMap<String, Vec<String>>,
    owned: &BTreeMap<String, OwnedPartitions>,
    partition_counts: &BTreeMap<String, u32>,
) -> (BTreeMap<String, Vec<TopicPartition>>, Transfers) {
    let topics: BTreeSet<&String> = members.values().flatten().collect();
    let all: BTreeSet<TopicPartition> = partition_counts
        .iter()
        .filter(|(t, _)| topics.contains(t))
        .flat_map(|(t, &n)| (0..n).map(move |p| TopicPartition::new(t, p)))
        .collect();
    let m = members.len().max(1);
    let (min_quota, max_quota) = (all.len() / m, all.len().div_ceil(m));
    let expected_over_min = all.len() % m;
    let mut over_min = 0;
    let mut assignment: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
    let mut under_min: Vec<String> = Vec::new();
    let mut at_min: VecDeque<String> = VecDeque::new();
    let (valid, mut moving) = valid_ownership(members, owned, &all);
    for (member, mine) in valid {
        let keep = if mine.len() < min_quota {
            under_min.push(member.clone());
            mine.len()
        } else if mine.len() >= max_quota && over_min < expected_over_min {
            over_min += 1;
            if over_min == expected_over_min {
                at_min.clear();
            }
            max_quota
        } else {
            if over_min < expected_over_min {
                at_min.push_back(member.clone());
            }
            min_quota
        };
        moving.extend(mine[keep..].iter().cloned());
        assignment.insert(member, mine[..keep].to_vec());
    }
    let assigned: BTreeSet<&TopicPartition> = assignment.values().flatten().collect();
    let unassigned: Vec<TopicPartition> = all
        .iter()
        .filter(|tp| !assigned.contains(tp))
        .cloned()
        .collect();
    let filled = fill(&mut assignment, unassigned, (under_min, at_min), min_quota);
    let transfers = filled
        .into_iter()
        .filter(|(tp, _)| moving.contains(tp))
        .collect();
    (assignment, transfers)
}

/// Step 3: round-robin over the members under `min_quota` until each has it, then one more
/// each to the members at exactly `min_quota` (`unfilled` = both lists), in order. Returns
/// where each partition went.
fn fill(
    assignment: &mut BTreeMap<String, Vec<TopicPartition>>,
    unassigned: Vec<TopicPartition>,
    unfilled: (Vec<String>, VecDeque<String>),
    min_quota: usize,
) -> Transfers {
    let (mut under_min, mut at_min) = unfilled;
    let mut placed = Transfers::new();
    under_min.sort();
    let mut next = 0;
    for tp in unassigned {
        let member = if !under_min.is_empty() {
            next %= under_min.len();
            under_min[next].clone()
        } else if let Some(member) = at_min.pop_front() {
            member
        } else {
            // Java throws IllegalStateException here; the quotas make it unreachable.
            unreachable!("every member is at its quota with {tp} unassigned");
        };
        let partitions = assignment.get_mut(&member).expect("listed member");
        partitions.push(tp.clone());
        placed.insert(tp, member.clone());
        if !under_min.is_empty() {
            if partitions.len() == min_quota {
                under_min.remove(next);
                at_min.push_back(member);
            } else {
                next += 1;
            }
        }
    }
    placed
}

/// Partitions another member owned that `assignment` gives to a new one (Java's
/// `computePartitionsTransferringOwnership`), with the new owner.
fn transferring_ownership(
    owned: &BTreeMap<String, OwnedPartitions>,
    assignment: &BTreeMap<String, Vec<TopicPartition>>,
) -> Transfers {
    let mut added = BTreeMap::new();
    let mut revoked = BTreeSet::new();
    for (member, assigned) in assignment {
        let mine: &[TopicPartition] = owned
            .get(member)
            .map(|o| o.partitions.as_slice())
            .unwrap_or_default();
        for tp in assigned.iter().filter(|tp| !mine.contains(tp)) {
            added.insert(tp.clone(), member.clone());
        }
        revoked.extend(mine.iter().filter(|tp| !assigned.contains(tp)).cloned());
    }
    added.retain(|tp, _| revoked.contains(tp));
    added
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(ids: &[&str]) -> BTreeMap<String, Vec<String>> {
        ids.iter()
            .map(|m| (m.to_string(), vec!["t".to_string()]))
            .collect()
    }

    fn tps(ps: &[u32]) -> Vec<TopicPartition> {
        ps.iter().map(|&p| TopicPartition::new("t", p)).collect()
    }

    fn owning(list: &[(&str, &[u32], i32)]) -> BTreeMap<String, OwnedPartitions> {
        list.iter()
            .map(|(m, ps, generation)| {
                let partitions = tps(ps);
                let o = OwnedPartitions {
                    partitions,
                    generation: *generation,
                };
                (m.to_string(), o)
            })
            .collect()
    }

    fn counts(n: u32) -> BTreeMap<String, u32> {
        BTreeMap::from([("t".to_string(), n)])
    }

    /// The partitions of `a`, as numbers.
    fn of(a: &BTreeMap<String, Vec<TopicPartition>>, m: &str) -> Vec<u32> {
        a[m].iter().map(|tp| tp.partition).collect()
    }

    #[test]
    fn a_first_assignment_is_balanced_and_complete() {
        let a = cooperative_sticky_assign(&members(&["a", "b", "c"]), &BTreeMap::new(), &counts(7));
        assert_eq!(of(&a, "a"), vec![0, 3, 6]);
        assert_eq!(of(&a, "b"), vec![1, 4]);
        assert_eq!(of(&a, "c"), vec![2, 5]);
    }

    #[test]
    fn a_joining_member_takes_nothing_owned_in_the_first_phase() {
        // a and b own 3 each; c joins. The balanced target moves one partition from each
        // of a and b to c, but only after they revoked them: c gets nothing yet.
        let owned = owning(&[("a", &[0, 1, 2], 3), ("b", &[3, 4, 5], 3)]);
        let m = members(&["a", "b", "c"]);
        let first = cooperative_sticky_assign(&m, &owned, &counts(6));
        assert_eq!(of(&first, "a"), vec![0, 1]);
        assert_eq!(of(&first, "b"), vec![3, 4]);
        assert!(first["c"].is_empty(), "{first:?}");
        // Second phase: a and b rejoin owning what they kept; c now gets the two.
        let owned = owning(&[("a", &[0, 1], 4), ("b", &[3, 4], 4), ("c", &[], 4)]);
        let second = cooperative_sticky_assign(&m, &owned, &counts(6));
        assert_eq!(of(&second, "a"), vec![0, 1]);
        assert_eq!(of(&second, "b"), vec![3, 4]);
        assert_eq!(of(&second, "c"), vec![2, 5]);
    }

    #[test]
    fn a_leaving_member_s_partitions_go_to_the_others_at_once() {
        let owned = owning(&[("a", &[0, 1], 5), ("b", &[2, 3], 5)]);
        // c (owning 4, 5) is gone: nobody owns its partitions, so no second phase.
        let a = cooperative_sticky_assign(&members(&["a", "b"]), &owned, &counts(6));
        assert_eq!(of(&a, "a"), vec![0, 1, 4]);
        assert_eq!(of(&a, "b"), vec![2, 3, 5]);
    }

    #[test]
    fn claims_of_an_older_generation_are_not_trusted() {
        // b rejoins claiming 0 from generation 2; a owns it in generation 3.
        let owned = owning(&[("a", &[0, 1], 3), ("b", &[0, 2], 2)]);
        let a = cooperative_sticky_assign(&members(&["a", "b"]), &owned, &counts(4));
        assert_eq!(of(&a, "a"), vec![0, 1]);
        // b's stale claims count for nothing, and b is still given 2 and 3.
        assert_eq!(of(&a, "b"), vec![2, 3]);
    }

    #[test]
    fn a_partition_claimed_twice_in_one_generation_is_owned_by_neither() {
        let owned = owning(&[("a", &[0, 1], 3), ("b", &[1, 2], 3)]);
        let a = cooperative_sticky_assign(&members(&["a", "b"]), &owned, &counts(4));
        // 1 is held back a generation: whoever gets it, the other still claims it.
        assert_eq!(of(&a, "a"), vec![0]);
        assert_eq!(of(&a, "b"), vec![2, 3]);
    }

    /// Every generation of a sequence of joins and leaves: no partition given to a member
    /// while another member owns it, balance within one after the second phase, owned
    /// partitions kept where the quota allows.
    #[test]
    fn joins_and_leaves_keep_the_invariants() {
        let mut owned: BTreeMap<String, Vec<TopicPartition>> = BTreeMap::new();
        let sequence: [&[&str]; 6] = [
            &["a"],
            &["a", "b"],
            &["a", "b", "c"],
            &["a", "c"],
            &["a", "c", "d", "e"],
            &["e"],
        ];
        let mut generation = 0;
        for ids in sequence {
            owned.retain(|m, _| ids.contains(&m.as_str()));
            // Two rebalances: the second completes the moves the first held back.
            for phase in 0..2 {
                generation += 1;
                let claims = owned
                    .iter()
                    .map(|(m, ps)| {
                        let o = OwnedPartitions {
                            partitions: ps.clone(),
                            generation: generation - 1,
                        };
                        (m.clone(), o)
                    })
                    .collect();
                let a = cooperative_sticky_assign(&members(ids), &claims, &counts(10));
                for (m, ps) in &a {
                    for tp in ps {
                        let other = owned.iter().find(|(o, p)| *o != m && p.contains(tp));
                        assert!(other.is_none(), "{tp} given to {m} while {other:?} owns it");
                    }
                    let mine = owned.get(m).cloned().unwrap_or_default();
                    let kept = mine.iter().filter(|tp| ps.contains(tp)).count();
                    assert!(
                        kept >= mine.len().min(10 / ids.len()),
                        "{m} lost owned {a:?}"
                    );
                }
                if phase == 1 {
                    let sizes: Vec<usize> = a.values().map(Vec::len).collect();
                    let total: usize = sizes.iter().sum();
                    assert_eq!(total, 10, "{a:?}");
                    let spread = sizes.iter().max().unwrap() - sizes.iter().min().unwrap();
                    assert!(spread <= 1, "unbalanced {a:?}");
                }
                owned = a;
            }
        }
    }
}

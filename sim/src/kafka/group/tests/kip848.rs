//! KIP-848's consumer protocol at the coordinator (`consumer_protocol.rs`): epochs,
//! reconciliation order (revoke, acknowledge, then assign), fencing, and offset commits
//! with member epochs (apache/kafka `GroupMetadataManagerTest`, `CurrentAssignmentBuilderTest`
//! and `ConsumerGroupTest.testValidateOffsetCommit` cover the same ground).

use super::consumer_protocol::MemberState;
use super::*;
use crate::kafka::types::PartitionEpochBookkeeping;

const PARTITIONS: u32 = 4;

fn four_partitions(topic: &str) -> Option<u32> {
    (topic == TOPIC).then_some(PARTITIONS)
}

fn request(member_id: &str, epoch: i32, owned: &[u32]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest {
        group_id: G.into(),
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rebalance_timeout_ms: REBALANCE_MS,
        topics: vec![TOPIC.into()],
        server_assignor: None,
        owned: owned.iter().map(|&p| tp(p)).collect(),
    }
}

fn send(c: &mut GroupCoordinator, now: TimeMs, r: ConsumerGroupHeartbeatRequest) -> Response {
    c.consumer_group_heartbeat(now, r, &four_partitions)
}

/// A heartbeat that must succeed: `(member id, member epoch, assigned partitions)`.
fn beat(
    c: &mut GroupCoordinator,
    now: TimeMs,
    member_id: &str,
    epoch: i32,
    owned: &[u32],
) -> (String, i32, Vec<u32>) {
    match send(c, now, request(member_id, epoch, owned)) {
        Response::ConsumerGroupHeartbeat {
            member_id,
            member_epoch,
            assignment,
            ..
        } => {
            let partitions = assignment.iter().map(|tp| tp.partition).collect();
            (member_id, member_epoch, partitions)
        }
        other => panic!("expected a ConsumerGroupHeartbeat answer, got {other:?}"),
    }
}

fn state_of(c: &GroupCoordinator, member_id: &str) -> MemberState {
    c.consumer_group_members(G)[member_id].state
}

/// Member `a` joined alone and owns every partition at epoch 1.
fn group_of_one(c: &mut GroupCoordinator) -> String {
    let (a, epoch, assigned) = beat(c, 0, "", 0, &[]);
    assert_eq!((epoch, assigned), (1, vec![0, 1, 2, 3]));
    a
}

/// `a` owns everything at epoch 1; `b` joined (epoch 2, nothing yet) and `a` was told to
/// revoke two partitions, keeping `kept`.
fn revocation_pending(c: &mut GroupCoordinator) -> (String, String, Vec<u32>) {
    let a = group_of_one(c);
    let (b, b_epoch, b_assigned) = beat(c, 10, "", 0, &[]);
    assert_eq!(b_epoch, 2, "a joining member moves to the target epoch");
    assert!(
        b_assigned.is_empty(),
        "a's partitions are withheld: {b_assigned:?}"
    );
    assert_eq!(state_of(c, &b), MemberState::UnreleasedPartitions);
    let (_, a_epoch, kept) = beat(c, 20, &a, 1, &[0, 1, 2, 3]);
    assert_eq!(a_epoch, 1, "a keeps its epoch until it has revoked");
    assert_eq!(kept.len(), 2, "a keeps half: {kept:?}");
    assert_eq!(state_of(c, &a), MemberState::UnrevokedPartitions);
    (a, b, kept)
}

#[test]
fn a_first_member_joins_with_epoch_zero_and_gets_every_partition_at_epoch_one() {
    let mut c = GroupCoordinator::new(config());
    let a = group_of_one(&mut c);
    assert_eq!(c.consumer_group_epochs(G), Some((1, 1)));
    assert_eq!(state_of(&c, &a), MemberState::Stable);
    assert_eq!(
        beat(&mut c, 5, &a, 1, &[0, 1, 2, 3]).1,
        1,
        "a steady heartbeat keeps it"
    );
}

#[test]
fn a_moving_partition_reaches_its_new_owner_only_after_the_old_owner_acknowledged_revoking_it() {
    let mut c = GroupCoordinator::new(config());
    let (a, b, kept) = revocation_pending(&mut c);
    // b asks again while a still reports the revoked partitions: still nothing.
    assert!(beat(&mut c, 30, &b, 2, &[]).2.is_empty());
    // a heartbeats again still owning them: no progress, same epoch.
    assert_eq!(beat(&mut c, 40, &a, 1, &[0, 1, 2, 3]).1, 1);
    assert!(beat(&mut c, 50, &b, 2, &[]).2.is_empty());
    // a acknowledges: owns only what it keeps; it moves to epoch 2, Stable.
    let (_, a_epoch, a_assigned) = beat(&mut c, 60, &a, 1, &kept);
    assert_eq!((a_epoch, a_assigned.clone()), (2, kept.clone()));
    assert_eq!(state_of(&c, &a), MemberState::Stable);
    // Now b gets the released partitions.
    let (_, b_epoch, b_assigned) = beat(&mut c, 70, &b, 2, &[]);
    assert_eq!(b_epoch, 2);
    assert_eq!(b_assigned.len(), 2);
    assert!(
        b_assigned.iter().all(|p| !kept.contains(p)),
        "{b_assigned:?} vs {kept:?}"
    );
    assert_eq!(state_of(&c, &b), MemberState::Stable);
}

#[test]
fn a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced_and_its_partitions_move() {
    let mut c = GroupCoordinator::new(config());
    let (a, b, _) = revocation_pending(&mut c);
    // Heartbeating without revoking does not extend the rebalance timeout.
    for now in (1_000..REBALANCE_MS).step_by(5_000) {
        beat(&mut c, now, &a, 1, &[0, 1, 2, 3]);
        c.tick(now);
    }
    c.tick(20 + REBALANCE_MS - 1);
    assert!(
        c.consumer_group_members(G).contains_key(&a),
        "fenced too early"
    );
    c.tick(20 + REBALANCE_MS);
    assert!(!c.consumer_group_members(G).contains_key(&a), "a is fenced");
    let (_, b_epoch, b_assigned) = beat(&mut c, 20 + REBALANCE_MS + 1, &b, 2, &[]);
    assert_eq!((b_epoch, b_assigned), (3, vec![0, 1, 2, 3]));
    let late = send(&mut c, 20 + REBALANCE_MS + 2, request(&a, 1, &[0, 1, 2, 3]));
    assert_eq!(late, Response::Error(KafkaError::UnknownMemberId));
}

#[test]
fn a_silent_member_is_fenced_after_the_session_timeout_and_the_group_epoch_moves() {
    let mut c = GroupCoordinator::new(config());
    let a = group_of_one(&mut c);
    let session_ms = config().group_consumer_session_timeout_ms;
    c.tick(session_ms - 1);
    assert!(c.consumer_group_members(G).contains_key(&a));
    c.tick(session_ms);
    assert!(c.consumer_group_members(G).is_empty());
    assert_eq!(c.consumer_group_epochs(G), Some((2, 1)));
    // It rejoins with epoch 0 under its old id and gets everything at the next epoch.
    assert_eq!(beat(&mut c, session_ms + 1, &a, 0, &[]).1, 3);
}

#[test]
fn a_greater_epoch_is_fenced_and_a_lost_response_is_forgiven_only_with_a_subset() {
    let mut c = GroupCoordinator::new(config());
    let (a, _b, kept) = revocation_pending(&mut c);
    assert_eq!(beat(&mut c, 60, &a, 1, &kept).1, 2);
    let ahead = send(&mut c, 70, request(&a, 3, &kept));
    assert_eq!(ahead, Response::Error(KafkaError::FencedMemberEpoch));
    // The epoch-2 answer was lost: epoch 1 with a subset of the assignment is accepted.
    assert_eq!(beat(&mut c, 80, &a, 1, &kept).1, 2);
    let not_subset = send(&mut c, 90, request(&a, 1, &[0, 1, 2, 3]));
    assert_eq!(not_subset, Response::Error(KafkaError::FencedMemberEpoch));
}

/// KAFKA-19233: a member told FENCED_MEMBER_EPOCH gives up its partitions and rejoins with
/// epoch 0 under its member id; the coordinator takes it back (it used to fence it again
/// until its session expired) and its next heartbeats reconcile as before.
#[test]
fn a_known_member_rejoining_with_epoch_zero_is_taken_back() {
    let mut c = GroupCoordinator::new(config());
    let a = group_of_one(&mut c);
    let ahead = send(&mut c, 10, request(&a, 7, &[0, 1, 2, 3]));
    assert_eq!(ahead, Response::Error(KafkaError::FencedMemberEpoch));
    let (id, epoch, assigned) = beat(&mut c, 20, &a, 0, &[]);
    assert_eq!((id, epoch, assigned), (a.clone(), 1, vec![0, 1, 2, 3]));
    assert_eq!(beat(&mut c, 30, &a, 1, &[0, 1, 2, 3]).1, 1);
}

#[test]
fn offset_commit_with_a_stale_member_epoch_is_refused_and_changes_nothing() {
    let mut c = GroupCoordinator::new(config());
    let (a, b, kept) = revocation_pending(&mut c);
    // While revoking, a keeps epoch 1: its commit of the revoked partitions goes through.
    assert_eq!(commit(&mut c, 30, 1, &a, 7), Response::OffsetCommit);
    assert_eq!(committed_offset(&mut c), 7);
    assert_eq!(beat(&mut c, 40, &a, 1, &kept).1, 2);
    // A commit still carrying epoch 1 is stale now.
    let stale = commit(&mut c, 50, 1, &a, 9);
    assert_eq!(stale, Response::Error(KafkaError::StaleMemberEpoch));
    let ahead = commit(&mut c, 50, 3, &b, 9);
    assert_eq!(ahead, Response::Error(KafkaError::StaleMemberEpoch));
    let unknown = commit(&mut c, 50, 2, "consumer-99", 9);
    assert_eq!(unknown, Response::Error(KafkaError::UnknownMemberId));
    let simple = commit(&mut c, 50, -1, "", 9);
    assert_eq!(simple, Response::Error(KafkaError::UnknownMemberId));
    assert_eq!(
        committed_offset(&mut c),
        7,
        "no refused commit changed the offset"
    );
    assert_eq!(commit(&mut c, 60, 2, &b, 11), Response::OffsetCommit);
    assert_eq!(committed_offset(&mut c), 11);
}

#[test]
fn a_leave_with_epoch_minus_one_frees_its_partitions_and_bumps_the_group_epoch() {
    let mut c = GroupCoordinator::new(config());
    let (a, b, kept) = revocation_pending(&mut c);
    beat(&mut c, 60, &a, 1, &kept);
    let left = send(&mut c, 70, request(&a, LEAVE_EPOCH, &[]));
    assert!(matches!(
        left,
        Response::ConsumerGroupHeartbeat {
            member_epoch: -1,
            ..
        }
    ));
    assert_eq!(c.consumer_group_epochs(G).map(|e| e.0), Some(3));
    let (_, epoch, assigned) = beat(&mut c, 80, &b, 2, &[]);
    assert_eq!((epoch, assigned), (3, vec![0, 1, 2, 3]));
    assert_eq!(
        commit(&mut c, 90, -1, "", 5),
        Response::Error(KafkaError::UnknownMemberId)
    );
    send(&mut c, 90, request(&b, LEAVE_EPOCH, &[]));
    assert_eq!(
        commit(&mut c, 95, -1, "", 5),
        Response::OffsetCommit,
        "empty: admin commit"
    );
}

const LEAVE_EPOCH: i32 = super::consumer_protocol::LEAVE_MEMBER_EPOCH;

#[test]
fn mixed_membership_is_refused_in_both_directions() {
    let mut c = GroupCoordinator::new(config());
    stable_group_of_one(&mut c);
    let refused = send(&mut c, 10, request("", 0, &[]));
    assert_eq!(refused, Response::Error(KafkaError::GroupIdNotFound));
    let mut c = GroupCoordinator::new(config());
    group_of_one(&mut c);
    let join = done(c.handle(10, join_request("")));
    assert_eq!(join, Response::Error(KafkaError::GroupIdNotFound));
}

#[test]
fn static_members_and_unknown_assignors_are_refused_by_name() {
    let mut c = GroupCoordinator::new(config());
    let mut r = request("", 0, &[]);
    r.instance_id = Some("i".into());
    assert_eq!(
        send(&mut c, 0, r),
        Response::Error(KafkaError::InvalidRequest)
    );
    let mut r = request("", 0, &[]);
    r.server_assignor = Some("sticky".into());
    assert_eq!(
        send(&mut c, 0, r),
        Response::Error(KafkaError::UnsupportedAssignor)
    );
    assert_eq!(
        send(&mut c, 0, request("consumer-5", 4, &[])),
        Response::Error(KafkaError::GroupIdNotFound),
        "a non-zero epoch does not create the group"
    );
}

/// A ConsumerGroupHeartbeat answer's member epoch and assignment.
fn answered(answer: Response) -> (i32, Vec<TopicPartition>) {
    match answer {
        Response::ConsumerGroupHeartbeat {
            member_epoch,
            assignment,
            ..
        } => (member_epoch, assignment),
        other => panic!("expected a ConsumerGroupHeartbeat answer, got {other:?}"),
    }
}

/// A heartbeat asking for the `range` server assignor.
fn ranged(member_id: &str, epoch: i32, owned: &[u32]) -> ConsumerGroupHeartbeatRequest {
    let mut r = request(member_id, epoch, owned);
    r.server_assignor = Some("range".into());
    r
}

/// KAFKA-19974: a member that acknowledged one revocation but must revoke more (the target
/// moved on meanwhile) stays in UNREVOKED_PARTITIONS at the same epoch (it was bumped by one
/// before), so no partition is owned by two members at one epoch.
#[test]
fn a_second_revocation_keeps_the_member_epoch_since_kafka_19974() {
    let mut c = GroupCoordinator::new(config());
    send(&mut c, 0, ranged("", 0, &[]));
    let a = "consumer-1";
    send(&mut c, 1, ranged("", 0, &[]));
    // Range over two members: a keeps 0 and 1 and must revoke 2 and 3.
    send(&mut c, 2, ranged(a, 1, &[0, 1, 2, 3]));
    assert_eq!(state_of(&c, a), MemberState::UnrevokedPartitions);
    // Two more members before a acknowledges: a's target is now only 0.
    send(&mut c, 3, ranged("", 0, &[]));
    send(&mut c, 4, ranged("", 0, &[]));
    let answer = send(&mut c, 5, ranged(a, 1, &[0, 1]));
    let (member_epoch, assignment) = answered(answer);
    assert_eq!((member_epoch, assignment), (1, vec![tp(0)]));
    let view = &c.consumer_group_members(G)[a];
    assert_eq!(view.state, MemberState::UnrevokedPartitions);
    assert_eq!(view.pending_revocation, [tp(1)].into_iter().collect());
}

#[test]
fn the_range_assignor_gives_each_member_consecutive_partitions() {
    let mut c = GroupCoordinator::new(config());
    send(&mut c, 0, ranged("", 0, &[]));
    send(&mut c, 1, ranged("", 0, &[]));
    let a = "consumer-1";
    // a revokes what range gives the second member, then both converge.
    send(&mut c, 2, ranged(a, 1, &[0, 1, 2, 3]));
    send(&mut c, 3, ranged(a, 1, &[0, 1]));
    let members = c.consumer_group_members(G);
    let (_, b_assigned) = answered(send(&mut c, 4, ranged("consumer-2", 2, &[])));
    assert_eq!(members[a].assigned, [tp(0), tp(1)].into_iter().collect());
    assert_eq!(b_assigned, vec![tp(2), tp(3)]);
}

#[test]
fn added_partitions_bump_the_group_epoch_and_are_assigned() {
    let mut c = GroupCoordinator::new(config());
    let a = group_of_one(&mut c);
    let six = |t: &str| (t == TOPIC).then_some(6);
    let answer = c.consumer_group_heartbeat(10, request(&a, 1, &[0, 1, 2, 3]), &six);
    let (member_epoch, assignment) = answered(answer);
    assert_eq!(member_epoch, 2);
    assert_eq!(assignment.len(), 6);
}

/// A tiny deterministic generator for the property below (no clock, no global RNG).
fn next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// Clients that follow the protocol (own exactly what their last answer gave them) never
/// own a partition at the same time, whatever the order of joins, heartbeats, partial
/// revocations and leaves; and a group left alone converges to every partition owned.
#[test]
fn clients_that_follow_the_protocol_never_own_a_partition_twice() {
    for seed in 0..200u64 {
        let mut rng = seed;
        let mut c = GroupCoordinator::new(config());
        // member id → (epoch, owned), as each client believes.
        let mut clients: BTreeMap<String, (i32, Vec<u32>)> = BTreeMap::new();
        for step in 0..60u64 {
            let now = step * 10;
            let roll = next(&mut rng) % 10;
            if roll == 0 && clients.len() < 4 {
                let (id, epoch, owned) = beat(&mut c, now, "", 0, &[]);
                clients.insert(id, (epoch, owned));
            } else if roll == 1 && !clients.is_empty() {
                let id = clients
                    .keys()
                    .nth(next(&mut rng) as usize % clients.len())
                    .cloned();
                let id = id.expect("picked");
                send(&mut c, now, request(&id, LEAVE_EPOCH, &[]));
                clients.remove(&id);
            } else if !clients.is_empty() {
                let id = clients
                    .keys()
                    .nth(next(&mut rng) as usize % clients.len())
                    .cloned();
                let id = id.expect("picked");
                let (epoch, owned) = clients[&id].clone();
                let (_, epoch, assigned) = beat(&mut c, now, &id, epoch, &owned);
                clients.insert(id, (epoch, assigned));
            }
            let mut seen = BTreeSet::new();
            for (id, (_, owned)) in &clients {
                for p in owned {
                    assert!(
                        seen.insert(*p),
                        "seed {seed} step {step}: {p} owned twice ({id})"
                    );
                }
            }
        }
        if clients.is_empty() {
            continue;
        }
        for round in 0..6u64 {
            let ids: Vec<String> = clients.keys().cloned().collect();
            for id in ids {
                let (epoch, owned) = clients[&id].clone();
                let (_, epoch, assigned) = beat(&mut c, 1_000 + round, &id, epoch, &owned);
                clients.insert(id, (epoch, assigned));
            }
        }
        let owned: usize = clients.values().map(|(_, o)| o.len()).sum();
        assert_eq!(
            owned, PARTITIONS as usize,
            "seed {seed}: the group converges"
        );
    }
}

/// `a` owns 0..3; `b` joins, so `a` must revoke 2 and 3; `b` leaves before `a`
/// acknowledges, so `a`'s acknowledgement gives 2 and 3 straight back to it (assigned
/// {0, 1}, pending {2, 3} → assigned {0..3}); then `c` joins and its target takes 2 and 3
/// from `a` again. Returns what `c` was given at once, and `a`'s member id.
fn pending_partitions_given_back_then_moved(
    bookkeeping: PartitionEpochBookkeeping,
) -> (Vec<u32>, String) {
    let mut c = GroupCoordinator::new(ClusterConfig {
        kip848_partition_epochs: bookkeeping,
        ..config()
    });
    let (a, b, kept) = revocation_pending(&mut c);
    assert_eq!(kept, vec![0, 1]);
    send(&mut c, 30, request(&b, LEAVE_EPOCH, &[]));
    let (_, _, back) = beat(&mut c, 40, &a, 1, &kept);
    assert_eq!(back, vec![0, 1, 2, 3], "a got its pending partitions back");
    let (_, _, given) = beat(&mut c, 50, "", 0, &[]);
    (given, a)
}

/// KAFKA-16147: with the fixed bookkeeping the newcomer waits for `a` to release 2 and 3;
/// with the pre-fix bookkeeping their epochs were lost when `a` got them back, so the
/// newcomer gets them while `a` still owns them: two owners at once.
#[test]
fn a_partition_given_back_while_pending_revocation_keeps_its_owner_epoch_since_kafka_16147() {
    let (given, a) =
        pending_partitions_given_back_then_moved(PartitionEpochBookkeeping::Kafka16147);
    assert!(given.is_empty(), "withheld until a revokes: {given:?}");
    let (given, a_buggy) =
        pending_partitions_given_back_then_moved(PartitionEpochBookkeeping::PreKafka16147);
    assert_eq!(given, vec![2, 3], "pre-KAFKA-16147: handed over at once");
    assert_eq!(a, a_buggy);
    crate::marks::assert_hit(&[
        "kafka:kip848-partition-epoch-lost",
        "kafka:kip848-partition-assigned-to-two-members",
    ]);
}

/// The `uniform` server assignor: balanced (sizes differ by one at most), sticky (a member
/// keeps what its previous target gave it, up to its quota), each partition once.
#[test]
fn the_uniform_assignor_is_balanced_and_keeps_what_members_held() {
    let topics = vec![TOPIC.to_string()];
    let members: BTreeMap<String, Vec<String>> = ["a", "b", "c"]
        .into_iter()
        .map(|m| (m.to_string(), topics.clone()))
        .collect();
    let counts = BTreeMap::from([(TOPIC.to_string(), 7)]);
    let held = |ps: std::ops::Range<u32>| ps.map(tp).collect::<BTreeSet<_>>();
    let previous = BTreeMap::from([("a".to_string(), held(0..4)), ("b".to_string(), held(4..7))]);
    let target = super::server_assignor::assign("uniform", &members, &counts, &previous);
    let mut sizes: Vec<usize> = target.values().map(BTreeSet::len).collect();
    sizes.sort();
    assert_eq!(sizes, vec![2, 2, 3], "{target:?}");
    assert!(
        target["a"].is_subset(&previous["a"]),
        "a keeps its own: {target:?}"
    );
    assert!(
        target["b"].is_subset(&previous["b"]),
        "b keeps its own: {target:?}"
    );
    let all: BTreeSet<_> = target.values().flatten().cloned().collect();
    assert_eq!(all, held(0..7), "every partition once");
    assert_eq!(target.values().map(BTreeSet::len).sum::<usize>(), 7);
}

//! Tests of the group coordinator: one per line of models-reference checklist D that applies
//! to the coordinator, the protocol table of D.1, and a property over random sequences.

use super::*;

mod kip848;
mod property;
mod static_membership;

const G: &str = "g";
const TOPIC: &str = "t";
const SESSION_MS: u64 = 10_000;
const REBALANCE_MS: u64 = 30_000;

fn config() -> ClusterConfig {
    ClusterConfig {
        group_initial_rebalance_delay_ms: 0,
        ..ClusterConfig::default()
    }
}

fn tp(partition: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, partition)
}

/// JoinGroup of `member_id` offering the assignors `names`, owning partitions `owned`.
fn offering(member_id: &str, names: &[&str], owned: &[u32]) -> Request {
    let mut protocols = GroupProtocols::offering(names);
    protocols.owned.partitions = owned.iter().map(|&p| tp(p)).collect();
    Request::JoinGroup {
        group_id: G.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        topics: vec![TOPIC.into()],
        protocols,
    }
}

fn join_request(member_id: &str) -> Request {
    offering(member_id, &["range"], &[])
}

fn done(reply: Reply) -> Response {
    match reply {
        Reply::Done(response) => response,
        Reply::Parked(token) => panic!("expected an answer, got parked {token:?}"),
    }
}

fn parked(reply: Reply) -> u64 {
    match reply {
        Reply::Parked(ParkToken::Group(token)) => token,
        other => panic!("expected parked, got {other:?}"),
    }
}

/// JoinGroup without an id, then with the handed-out id; the second reply.
fn join_new(c: &mut GroupCoordinator, now: TimeMs) -> (String, Reply) {
    let member_id = match done(c.handle(now, join_request(""))) {
        Response::MemberIdRequired { member_id } => member_id,
        other => panic!("expected MEMBER_ID_REQUIRED, got {other:?}"),
    };
    let reply = c.handle(now, join_request(&member_id));
    (member_id, reply)
}

fn generation_of(response: &Response) -> i32 {
    match response {
        Response::JoinGroup { generation, .. } => *generation,
        other => panic!("expected a JoinGroup response, got {other:?}"),
    }
}

fn sync(c: &mut GroupCoordinator, now: TimeMs, generation: i32, member_id: &str) -> Reply {
    let assignments = BTreeMap::new();
    c.handle(
        now,
        Request::SyncGroup {
            group_id: G.into(),
            generation,
            member_id: member_id.into(),
            assignments,
        },
    )
}

fn leader_sync(
    c: &mut GroupCoordinator,
    now: TimeMs,
    generation: i32,
    member_id: &str,
    assignments: &[(&str, Vec<TopicPartition>)],
) -> Reply {
    let assignments = assignments
        .iter()
        .map(|(m, a)| (m.to_string(), a.clone()))
        .collect();
    c.handle(
        now,
        Request::SyncGroup {
            group_id: G.into(),
            generation,
            member_id: member_id.into(),
            assignments,
        },
    )
}

fn heartbeat(c: &mut GroupCoordinator, now: TimeMs, generation: i32, member_id: &str) -> Response {
    done(c.handle(
        now,
        Request::Heartbeat {
            group_id: G.into(),
            generation,
            member_id: member_id.into(),
        },
    ))
}

fn commit(
    c: &mut GroupCoordinator,
    now: TimeMs,
    generation: i32,
    member_id: &str,
    offset: Offset,
) -> Response {
    let offsets = vec![(tp(0), offset)];
    done(c.handle(
        now,
        Request::OffsetCommit {
            group_id: G.into(),
            generation,
            member_id: member_id.into(),
            offsets,
        },
    ))
}

fn committed_offset(c: &mut GroupCoordinator) -> Offset {
    match done(c.handle(
        0,
        Request::OffsetFetch {
            group_id: G.into(),
            partitions: vec![tp(0)],
        },
    )) {
        Response::OffsetFetch { offsets } => offsets[0].1,
        other => panic!("expected OffsetFetch, got {other:?}"),
    }
}

/// One member, Stable in generation 1, owning partitions 0 and 1.
fn stable_group_of_one(c: &mut GroupCoordinator) -> String {
    let (a, reply) = join_new(c, 0);
    assert_eq!(generation_of(&done(reply)), 1);
    let reply = leader_sync(c, 0, 1, &a, &[(&a, vec![tp(0), tp(1)])]);
    assert_eq!(
        done(reply),
        Response::SyncGroup {
            assignment: vec![tp(0), tp(1)]
        }
    );
    a
}

/// Member `a` of a stable group of one is joined by `b`; `a` rejoins. Both get generation 2;
/// the group is in CompletingRebalance. Returns (a, b).
fn completing_group_of_two(c: &mut GroupCoordinator, now: TimeMs) -> (String, String) {
    let a = stable_group_of_one(c);
    let (b, reply) = join_new(c, now);
    let b_token = parked(reply);
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(generation_of(&done(c.handle(now, join_request(&a)))), 2);
    assert_eq!(
        generation_of(&c.poll_parked(now, b_token).expect("b's join answered")),
        2
    );
    assert_eq!(c.state(G), Some(GroupState::CompletingRebalance));
    (a, b)
}

#[test]
fn first_join_without_member_id_gets_member_id_required_with_an_assigned_id() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(
        done(c.handle(0, join_request(""))),
        Response::MemberIdRequired {
            member_id: "consumer-1".into()
        }
    );
    assert_eq!(
        done(c.handle(0, join_request(""))),
        Response::MemberIdRequired {
            member_id: "consumer-2".into()
        }
    );
    assert_eq!(c.state(G), Some(GroupState::Empty));
    assert!(c.members(G).is_empty());
}

#[test]
fn join_with_a_member_id_never_handed_out_gets_unknown_member_id() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(
        done(c.handle(0, join_request("consumer-9"))),
        Response::Error(KafkaError::UnknownMemberId)
    );
    stable_group_of_one(&mut c);
    assert_eq!(
        done(c.handle(0, join_request("consumer-9"))),
        Response::Error(KafkaError::UnknownMemberId)
    );
}

#[test]
fn session_timeout_outside_the_broker_bounds_is_rejected() {
    let mut c = GroupCoordinator::new(config());
    for session_timeout_ms in [5_999, 1_800_001] {
        let request = Request::JoinGroup {
            group_id: G.into(),
            member_id: String::new(),
            group_instance_id: None,
            session_timeout_ms,
            rebalance_timeout_ms: REBALANCE_MS,
            topics: vec![TOPIC.into()],
            protocols: GroupProtocols::offering(&["range"]),
        };
        assert_eq!(
            done(c.handle(0, request)),
            Response::Error(KafkaError::InvalidSessionTimeout)
        );
    }
}

#[test]
fn a_single_member_leads_generation_one_and_gets_the_assignment_it_sent() {
    let mut c = GroupCoordinator::new(config());
    let (a, reply) = join_new(&mut c, 0);
    let mut members = BTreeMap::new();
    members.insert(a.clone(), vec![TOPIC.to_string()]);
    let expected = Response::JoinGroup {
        generation: 1,
        member_id: a.clone(),
        leader: a.clone(),
        protocol: "range".into(),
        members,
        owned: BTreeMap::from([(a.clone(), GroupProtocols::offering(&[]).owned)]),
        skip_assignment: false,
    };
    assert_eq!(done(reply), expected);
    assert_eq!(c.state(G), Some(GroupState::CompletingRebalance));
    let reply = leader_sync(&mut c, 0, 1, &a, &[(&a, vec![tp(0)])]);
    assert_eq!(
        done(reply),
        Response::SyncGroup {
            assignment: vec![tp(0)]
        }
    );
    assert_eq!(c.state(G), Some(GroupState::Stable));
    assert_eq!(heartbeat(&mut c, 1, 1, &a), Response::Heartbeat);
}

#[test]
fn the_first_rebalance_of_an_empty_group_waits_the_initial_delay() {
    let config = ClusterConfig {
        group_initial_rebalance_delay_ms: 3_000,
        ..config()
    };
    let mut c = GroupCoordinator::new(config);
    let (_, reply) = join_new(&mut c, 0);
    let token = parked(reply);
    assert_eq!(c.poll_parked(2_999, token), None);
    assert_eq!(
        generation_of(&c.poll_parked(3_000, token).expect("answered")),
        1
    );
}

#[test]
fn the_initial_delay_is_extended_while_new_members_arrive() {
    let config = ClusterConfig {
        group_initial_rebalance_delay_ms: 3_000,
        ..config()
    };
    let mut c = GroupCoordinator::new(config);
    let a_token = parked(join_new(&mut c, 0).1);
    let b_token = parked(join_new(&mut c, 2_000).1);
    assert_eq!(
        c.poll_parked(3_000, a_token),
        None,
        "b arrived within the first window"
    );
    assert_eq!(c.poll_parked(5_999, a_token), None);
    let response = c
        .poll_parked(6_000, a_token)
        .expect("answered after the extension");
    assert_eq!(generation_of(&response), 1);
    assert_eq!(
        generation_of(&c.poll_parked(6_000, b_token).expect("answered")),
        1
    );
    assert_eq!(c.members(G).len(), 2);
}

#[test]
fn a_new_member_makes_a_stable_group_rebalance_and_old_members_hear_rebalance_in_progress() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut c = GroupCoordinator::new(config());
    let a = stable_group_of_one(&mut c);
    let b_token = parked(join_new(&mut c, 100).1);
    assert_eq!(
        heartbeat(&mut c, 200, 1, &a),
        Response::Error(KafkaError::RebalanceInProgress)
    );
    assert_eq!(c.poll_parked(300, b_token), None, "a has not rejoined yet");
    assert_eq!(generation_of(&done(c.handle(400, join_request(&a)))), 2);
    assert_eq!(
        generation_of(&c.poll_parked(400, b_token).expect("answered")),
        2
    );
    crate::marks::assert_hit(&["kafka:rebalance"]);
}

#[test]
fn heartbeats_during_completing_rebalance_answer_none() {
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 100);
    assert_eq!(heartbeat(&mut c, 200, 2, &a), Response::Heartbeat);
    assert_eq!(heartbeat(&mut c, 200, 2, &b), Response::Heartbeat);
    assert_eq!(
        heartbeat(&mut c, 200, 1, &a),
        Response::Error(KafkaError::IllegalGeneration)
    );
}

#[test]
fn followers_sync_parks_until_the_leader_sends_the_assignment() {
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 100);
    let b_token = parked(sync(&mut c, 200, 2, &b));
    assert_eq!(c.poll_parked(300, b_token), None);
    let reply = leader_sync(&mut c, 400, 2, &a, &[(&a, vec![tp(0)]), (&b, vec![tp(1)])]);
    assert_eq!(
        done(reply),
        Response::SyncGroup {
            assignment: vec![tp(0)]
        }
    );
    assert_eq!(
        c.poll_parked(400, b_token),
        Some(Response::SyncGroup {
            assignment: vec![tp(1)]
        })
    );
    assert_eq!(c.state(G), Some(GroupState::Stable));
}

#[test]
fn a_member_that_does_not_rejoin_is_removed_when_the_rebalance_timeout_passes() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut c = GroupCoordinator::new(config());
    let a = stable_group_of_one(&mut c);
    // `a` keeps heartbeating (it is told to rejoin) but never sends JoinGroup.
    let b_token = parked(join_new(&mut c, 1_000).1);
    let mut now = 1_000;
    while now < 1_000 + REBALANCE_MS {
        assert_eq!(c.poll_parked(now, b_token), None);
        let _ = heartbeat(&mut c, now, 1, &a);
        now += 3_000;
    }
    let response = c
        .poll_parked(1_000 + REBALANCE_MS, b_token)
        .expect("answered at the timeout");
    assert_eq!(generation_of(&response), 2);
    assert_eq!(c.members(G), vec!["consumer-2".to_string()]);
    assert_eq!(
        heartbeat(&mut c, now, 2, &a),
        Response::Error(KafkaError::UnknownMemberId)
    );
    crate::marks::assert_hit(&["kafka:member-removed-join-timeout"]);
}

/// Checklist D: an OffsetCommit from a member whose generation differs from the group's
/// returns 22 and changes nothing.
#[test]
fn offset_commit_with_a_stale_generation_returns_illegal_generation_and_changes_nothing() {
    let mut c = GroupCoordinator::new(config());
    let a = stable_group_of_one(&mut c);
    assert_eq!(commit(&mut c, 10, 1, &a, 5), Response::OffsetCommit);
    assert_eq!(
        commit(&mut c, 20, 0, &a, 9),
        Response::Error(KafkaError::IllegalGeneration)
    );
    assert_eq!(
        commit(&mut c, 20, 2, &a, 9),
        Response::Error(KafkaError::IllegalGeneration)
    );
    assert_eq!(committed_offset(&mut c), 5);
}

/// Checklist D: a member silent for longer than session.timeout.ms is removed and the group
/// rebalances; its later commits fail.
#[test]
fn a_silent_member_is_removed_after_the_session_timeout_and_its_later_commits_fail() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 0);
    let reply = leader_sync(&mut c, 0, 2, &a, &[(&a, vec![tp(0)]), (&b, vec![tp(1)])]);
    assert_eq!(
        done(reply),
        Response::SyncGroup {
            assignment: vec![tp(0)]
        }
    );
    assert_eq!(
        done(sync(&mut c, 0, 2, &b)),
        Response::SyncGroup {
            assignment: vec![tp(1)]
        }
    );
    // Only `a` heartbeats; `b` is paused.
    let mut now = 0;
    while now < SESSION_MS {
        now += 3_000;
        c.tick(now);
        assert!(matches!(
            heartbeat(&mut c, now, 2, &a),
            Response::Heartbeat | Response::Error(_)
        ));
    }
    assert_eq!(c.members(G), vec![a.clone()]);
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(
        commit(&mut c, now, 2, &b, 7),
        Response::Error(KafkaError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&mut c, now, 2, &b),
        Response::Error(KafkaError::UnknownMemberId)
    );
    assert_eq!(committed_offset(&mut c), -1);
    crate::marks::assert_hit(&["kafka:session-expired"]);
}

/// Checklist D: during CompletingRebalance non-transactional commits return 27.
#[test]
fn commits_during_completing_rebalance_return_rebalance_in_progress() {
    let mut c = GroupCoordinator::new(config());
    let (a, _b) = completing_group_of_two(&mut c, 100);
    assert_eq!(
        commit(&mut c, 200, 2, &a, 3),
        Response::Error(KafkaError::RebalanceInProgress)
    );
    assert_eq!(committed_offset(&mut c), -1);
}

/// Checklist D: during PreparingRebalance current-generation commits succeed.
#[test]
fn current_generation_commits_succeed_during_preparing_rebalance() {
    let mut c = GroupCoordinator::new(config());
    let a = stable_group_of_one(&mut c);
    let _b_token = parked(join_new(&mut c, 100).1);
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(commit(&mut c, 200, 1, &a, 4), Response::OffsetCommit);
    assert_eq!(committed_offset(&mut c), 4);
}

#[test]
fn a_simple_commit_with_generation_minus_one_is_accepted_only_by_an_empty_group() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(commit(&mut c, 0, -1, "", 3), Response::OffsetCommit);
    assert_eq!(c.state(G), Some(GroupState::Empty));
    assert_eq!(committed_offset(&mut c), 3);
    stable_group_of_one(&mut c);
    assert_eq!(
        commit(&mut c, 10, -1, "", 8),
        Response::Error(KafkaError::UnknownMemberId)
    );
    assert_eq!(committed_offset(&mut c), 3);
}

#[test]
fn a_member_commit_to_a_group_that_does_not_exist_is_an_illegal_generation() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(
        commit(&mut c, 0, 1, "consumer-1", 3),
        Response::Error(KafkaError::IllegalGeneration)
    );
    assert_eq!(c.state(G), None);
}

#[test]
fn offset_fetch_returns_minus_one_where_nothing_was_committed() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(committed_offset(&mut c), -1);
    let a = stable_group_of_one(&mut c);
    assert_eq!(committed_offset(&mut c), -1);
    assert_eq!(commit(&mut c, 0, 1, &a, 12), Response::OffsetCommit);
    let request = Request::OffsetFetch {
        group_id: G.into(),
        partitions: vec![tp(0), tp(1)],
    };
    let expected = Response::OffsetFetch {
        offsets: vec![(tp(0), 12), (tp(1), -1)],
    };
    assert_eq!(done(c.handle(0, request)), expected);
}

#[test]
fn leave_group_rebalances_and_the_last_leave_empties_the_group_but_keeps_its_offsets() {
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 0);
    let leave = |m: &str| Request::LeaveGroup {
        group_id: G.into(),
        member_id: m.into(),
    };
    assert_eq!(done(c.handle(10, leave(&b))), Response::LeaveGroup);
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(generation_of(&done(c.handle(20, join_request(&a)))), 3);
    let reply = leader_sync(&mut c, 20, 3, &a, &[(&a, vec![tp(0), tp(1)])]);
    assert_eq!(
        done(reply),
        Response::SyncGroup {
            assignment: vec![tp(0), tp(1)]
        }
    );
    assert_eq!(commit(&mut c, 30, 3, &a, 6), Response::OffsetCommit);
    assert_eq!(done(c.handle(40, leave(&a))), Response::LeaveGroup);
    assert_eq!(c.state(G), Some(GroupState::Empty));
    assert_eq!(c.generation(G), Some(4));
    assert_eq!(committed_offset(&mut c), 6);
    assert_eq!(
        done(c.handle(50, leave(&a))),
        Response::Error(KafkaError::UnknownMemberId)
    );
}

#[test]
fn a_leader_that_never_syncs_is_removed_and_the_group_rebalances() {
    // Marks are per thread: start from none (see `crate::marks`).
    crate::marks::take();
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 0);
    let b_token = parked(sync(&mut c, 10, 2, &b));
    // The leader heartbeats (NONE in CompletingRebalance) but never sends SyncGroup.
    let mut now = 0;
    while now < REBALANCE_MS - 3_000 {
        now += 3_000;
        assert_eq!(heartbeat(&mut c, now, 2, &a), Response::Heartbeat);
    }
    assert_eq!(c.poll_parked(REBALANCE_MS - 1, b_token), None);
    let response = c
        .poll_parked(REBALANCE_MS, b_token)
        .expect("answered at the sync deadline");
    assert_eq!(response, Response::Error(KafkaError::RebalanceInProgress));
    assert_eq!(c.members(G), vec![b.clone()]);
    assert!(!c.members(G).contains(&a));
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    crate::marks::assert_hit(&["kafka:member-removed-sync-timeout"]);
}

#[test]
fn a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() {
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 0);
    let _ = leader_sync(&mut c, 0, 2, &a, &[(&a, vec![tp(0)]), (&b, vec![tp(1)])]);
    let response = done(c.handle(10, join_request(&b)));
    let expected = Response::JoinGroup {
        generation: 2,
        member_id: b,
        leader: a,
        protocol: "range".into(),
        members: BTreeMap::new(),
        owned: BTreeMap::new(),
        skip_assignment: false,
    };
    assert_eq!(response, expected);
    assert_eq!(c.state(G), Some(GroupState::Stable));
}

#[test]
fn sync_and_heartbeat_in_the_wrong_state_or_generation_get_the_table_errors() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(
        done(sync(&mut c, 0, 1, "x")),
        Response::Error(KafkaError::UnknownMemberId)
    );
    assert_eq!(
        heartbeat(&mut c, 0, 1, "x"),
        Response::Error(KafkaError::UnknownMemberId)
    );
    let a = stable_group_of_one(&mut c);
    assert_eq!(
        done(sync(&mut c, 0, 7, &a)),
        Response::Error(KafkaError::IllegalGeneration)
    );
    let _b_token = parked(join_new(&mut c, 100).1);
    assert_eq!(
        done(sync(&mut c, 100, 1, &a)),
        Response::Error(KafkaError::RebalanceInProgress)
    );
}

#[test]
fn a_handed_out_member_id_that_is_never_used_expires_after_the_session_timeout() {
    let mut c = GroupCoordinator::new(config());
    let a = stable_group_of_one(&mut c);
    let _ = done(c.handle(0, join_request("")));
    // `a` rejoins as leader; the rebalance waits for the pending id until it expires.
    let token = parked(c.handle(10, join_request(&a)));
    assert_eq!(c.poll_parked(SESSION_MS - 1, token), None);
    assert_eq!(
        generation_of(&c.poll_parked(SESSION_MS, token).expect("answered")),
        2
    );
}

/// JoinGroup of a new member offering `names`: its id and the second reply (or the
/// refusal of the first, with an empty id).
fn join_offering(c: &mut GroupCoordinator, names: &[&str]) -> (String, Reply) {
    match done(c.handle(0, offering("", names, &[]))) {
        Response::MemberIdRequired { member_id } => {
            let reply = c.handle(0, offering(&member_id, names, &[]));
            (member_id, reply)
        }
        refused => (String::new(), Reply::Done(refused)),
    }
}

/// Kafka's `selectProtocol`: among the names every member offers, the one most members
/// list first. Kafka 3.x's default list [range, cooperative-sticky] next to a member that
/// offers only cooperative-sticky selects cooperative-sticky; the leader gets every
/// member's owned partitions as their JoinGroups carried them.
#[test]
fn the_group_selects_the_protocol_every_member_offers_and_relays_owned_partitions() {
    let mut c = GroupCoordinator::new(config());
    let default_list = ["range", "cooperative-sticky"];
    let (a, first) = join_offering(&mut c, &default_list);
    assert_eq!(generation_of(&done(first)), 1);
    let (b, second) = join_offering(&mut c, &["cooperative-sticky"]);
    let second = parked(second);
    let rejoin = done(c.handle(0, offering(&a, &default_list, &[0])));
    let second = c.poll_parked(0, second).expect("answered");
    for response in [&rejoin, &second] {
        let Response::JoinGroup { protocol, .. } = response else {
            panic!("expected a JoinGroup response, got {response:?}");
        };
        assert_eq!(protocol, "cooperative-sticky");
    }
    let Response::JoinGroup { owned, members, .. } = rejoin else {
        panic!("the first member leads: {rejoin:?}");
    };
    assert_eq!(members.len(), 2);
    assert_eq!(owned[&a].partitions, vec![tp(0)]);
    assert!(owned[&b].partitions.is_empty());
}

/// `supportsProtocols`: a member offering nothing the group's members all offer is refused
/// with INCONSISTENT_GROUP_PROTOCOL, and so is an empty offer.
#[test]
fn a_member_offering_no_common_protocol_is_refused() {
    let mut c = GroupCoordinator::new(config());
    let _ = join_offering(&mut c, &["range"]);
    let (_, refused) = join_offering(&mut c, &["cooperative-sticky"]);
    assert_eq!(
        done(refused),
        Response::Error(KafkaError::InconsistentGroupProtocol)
    );
    let mut empty = GroupCoordinator::new(config());
    let (_, refused) = join_offering(&mut empty, &[]);
    assert_eq!(
        done(refused),
        Response::Error(KafkaError::InconsistentGroupProtocol)
    );
}

/// `ClassicGroupMember.matches` compares the protocol metadata: a follower of a stable
/// group rejoining with other owned partitions (the cooperative second phase) starts a
/// rebalance, where the same metadata would get the current generation.
#[test]
fn a_rejoin_with_other_owned_partitions_starts_a_rebalance() {
    let mut c = GroupCoordinator::new(config());
    let (a, b) = completing_group_of_two(&mut c, 0);
    let _ = leader_sync(&mut c, 0, 2, &a, &[(&a, vec![tp(0)]), (&b, vec![tp(1)])]);
    let mut request = join_request(&b);
    if let Request::JoinGroup { protocols, .. } = &mut request {
        protocols.owned.partitions = vec![tp(1)];
    }
    let _ = parked(c.handle(10, request));
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
}

//! Static membership (KIP-345) and what a restarted static leader is told (KIP-814,
//! KAFKA-13435), after Kafka's `GroupMetadataManager.classicGroupJoinNewStaticMember` and
//! `updateStaticMemberThenRebalanceOrCompleteJoin`.

use super::*;

/// JoinGroup of static member `instance` with `member_id` (empty: a new process).
fn static_join(member_id: &str, instance: &str) -> Request {
    let mut request = join_request(member_id);
    if let Request::JoinGroup {
        group_instance_id, ..
    } = &mut request
    {
        *group_instance_id = Some(instance.to_string());
    }
    request
}

fn joined(response: Response) -> (String, String, i32, bool, usize) {
    match response {
        Response::JoinGroup {
            member_id,
            leader,
            generation,
            skip_assignment,
            members,
            ..
        } => (
            member_id,
            leader,
            generation,
            skip_assignment,
            members.len(),
        ),
        other => panic!("expected a JoinGroup response, got {other:?}"),
    }
}

/// The initial rebalance delay, ms.
const INITIAL_DELAY_MS: u64 = 100;

/// When the pair's first join phase ends, ms: b's arrival extends the delay once.
const DELAY_MS: u64 = 2 * INITIAL_DELAY_MS;

/// A coordinator whose first rebalance waits [`INITIAL_DELAY_MS`], answering restarted static
/// members as `rejoin` says.
fn coordinator(rejoin: StaticMemberRejoin) -> GroupCoordinator {
    GroupCoordinator::new(ClusterConfig {
        group_initial_rebalance_delay_ms: INITIAL_DELAY_MS,
        static_member_rejoin: rejoin,
        ..config()
    })
}

/// Static members `a` and `b` join an empty group together; after the initial delay both
/// are in generation 1 (CompletingRebalance) at [`DELAY_MS`]. Their member ids, `a` the leader.
fn completing_static_pair(c: &mut GroupCoordinator) -> (String, String) {
    let a_token = parked(c.handle(0, static_join("", "a")));
    let b_token = parked(c.handle(0, static_join("", "b")));
    let (a, leader, generation, ..) = joined(c.poll_parked(DELAY_MS, a_token).expect("joined"));
    let (b, ..) = joined(c.poll_parked(DELAY_MS, b_token).expect("joined"));
    assert_eq!((leader.as_str(), generation), (a.as_str(), 1));
    assert_eq!(c.state(G), Some(GroupState::CompletingRebalance));
    (a, b)
}

/// [`completing_static_pair`], then synced: `a` owns partition 0, `b` partition 1.
fn stable_static_pair(c: &mut GroupCoordinator) -> (String, String) {
    let (a, b) = completing_static_pair(c);
    let b_sync = parked(sync(c, DELAY_MS, 1, &b));
    let assignments = [(a.as_str(), vec![tp(0)]), (b.as_str(), vec![tp(1)])];
    done(leader_sync(c, DELAY_MS, 1, &a, &assignments));
    assert!(c.poll_parked(DELAY_MS, b_sync).is_some());
    assert_eq!(c.state(G), Some(GroupState::Stable));
    (a, b)
}

/// `member_id`'s SyncGroup at `now` in generation 1 answers its old partition
/// `partition` (no rebalance, the assignment kept).
fn assert_synced_to(c: &mut GroupCoordinator, now: TimeMs, member_id: &str, partition: u32) {
    let assignment = done(sync(c, now, 1, member_id));
    let expected = Response::SyncGroup {
        assignment: vec![tp(partition)],
    };
    assert_eq!(assignment, expected);
}

#[test]
fn a_static_member_joins_at_once_under_an_id_made_from_its_instance_id() {
    let mut c = GroupCoordinator::new(config());
    let (member_id, leader, generation, skip, members) =
        joined(done(c.handle(0, static_join("", "a"))));
    assert!(member_id.starts_with("a-"), "{member_id}");
    assert_eq!(
        (leader, generation, skip, members),
        (member_id, 1, false, 1)
    );
}

#[test]
fn a_restarted_static_leader_is_told_it_leads_and_skips_the_assignment_under_kip_814() {
    let mut c = coordinator(StaticMemberRejoin::Kip814);
    let (a, b) = stable_static_pair(&mut c);
    let response = done(c.handle(10, static_join("", "a")));
    let (new_a, leader, generation, skip, members) = joined(response);
    assert_ne!(new_a, a);
    assert_eq!(
        (leader.as_str(), generation, skip, members),
        (new_a.as_str(), 1, true, 2)
    );
    // No rebalance: the generation stays, the new id syncs to the old assignment.
    assert_eq!(c.state(G), Some(GroupState::Stable));
    assert_synced_to(&mut c, 10, &new_a, 0);
    assert_eq!(heartbeat(&mut c, 10, 1, &b), Response::Heartbeat);
    assert_eq!(
        heartbeat(&mut c, 10, 1, &a),
        Response::Error(KafkaError::UnknownMemberId)
    );
}

#[test]
fn before_kip_814_a_restarted_static_leader_is_told_the_old_member_id_leads() {
    let mut c = coordinator(StaticMemberRejoin::PreKip814);
    let (a, _b) = stable_static_pair(&mut c);
    let response = done(c.handle(10, static_join("", "a")));
    let (new_a, leader, generation, skip, members) = joined(response);
    // KAFKA-13435: the leader field names the replaced id, so the client thinks it follows.
    assert_eq!((leader, generation, skip, members), (a, 1, false, 0));
    assert_eq!(c.state(G), Some(GroupState::Stable));
    assert_synced_to(&mut c, 10, &new_a, 0);
}

#[test]
fn a_restarted_static_follower_keeps_its_partitions_and_is_not_told_to_lead() {
    let mut c = coordinator(StaticMemberRejoin::Kip814);
    let (a, b) = stable_static_pair(&mut c);
    let (new_b, leader, generation, skip, members) =
        joined(done(c.handle(10, static_join("", "b"))));
    assert_ne!(new_b, b);
    assert_eq!((leader, generation, skip, members), (a, 1, false, 0));
    assert_synced_to(&mut c, 10, &new_b, 1);
}

#[test]
fn the_replaced_member_id_is_fenced() {
    let mut c = coordinator(StaticMemberRejoin::Kip814);
    let (a, _b) = stable_static_pair(&mut c);
    done(c.handle(10, static_join("", "a")));
    assert_eq!(
        done(c.handle(20, static_join(&a, "a"))),
        Response::Error(KafkaError::FencedInstanceId)
    );
}

#[test]
fn a_static_member_restarting_while_the_leader_assigns_makes_the_group_rebalance() {
    let mut c = coordinator(StaticMemberRejoin::Kip814);
    let (a, b) = completing_static_pair(&mut c);
    // b restarts before the leader's SyncGroup, whose assignment names b's old id.
    let new_b_token = parked(c.handle(DELAY_MS + 5, static_join("", "b")));
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(
        done(leader_sync(
            &mut c,
            DELAY_MS + 6,
            1,
            &a,
            &[(&b, vec![tp(1)])]
        )),
        Response::Error(KafkaError::RebalanceInProgress)
    );
    let a_join = done(c.handle(DELAY_MS + 7, static_join(&a, "a")));
    assert_eq!(generation_of(&a_join), 2);
    let new_b = c.poll_parked(DELAY_MS + 7, new_b_token).expect("joined");
    assert_eq!(generation_of(&new_b), 2);
    assert_eq!(c.members(G).len(), 2);
}

#[test]
fn a_silent_static_member_leaves_by_session_timeout() {
    let mut c = coordinator(StaticMemberRejoin::Kip814);
    let (a, _b) = stable_static_pair(&mut c);
    assert_eq!(heartbeat(&mut c, SESSION_MS, 1, &a), Response::Heartbeat);
    c.tick(DELAY_MS + SESSION_MS);
    assert_eq!(c.state(G), Some(GroupState::PreparingRebalance));
    assert_eq!(c.members(G), vec![a]);
}

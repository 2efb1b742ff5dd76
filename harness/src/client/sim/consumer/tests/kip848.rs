//! The consumer protocol (KIP-848, `group.protocol = consumer`) against the fake broker's
//! real coordinator: members never own a partition at once, a listening member is handed
//! what it must revoke while it can still commit it, a fenced member loses everything and
//! rejoins with epoch 0.

use super::*;
use crate::client::GroupProtocol;

fn kip848_config() -> ConsumerConfig {
    let mut config = test_config();
    config.group_protocol = GroupProtocol::Consumer;
    config
}

/// Every member's assignment after its last poll, by member name.
type Owners = Arc<Mutex<BTreeMap<String, Vec<u32>>>>;

/// What a member saw: the revocations it was handed with whether committing their
/// partitions then succeeded, and its assignment at the end (partition numbers).
#[derive(Debug, Default)]
struct Kip848Seen {
    revocations: Vec<(Revocation, bool)>,
    last: Vec<u32>,
}

/// Polls for `run_for`, committing after each poll ([`commit_polled`]).
/// After every poll it publishes its assignment in `owners` and asserts that no other
/// member's published assignment shares a partition with it.
async fn consume_kip848(
    name: &str,
    owners: Owners,
    seen: Seen,
    listen: bool,
    run_for: Duration,
) -> Kip848Seen {
    let mut consumer = subscribed(kip848_config(), listen).await;
    let mut out = Kip848Seen::default();
    let mut next = BTreeMap::new();
    let end = Instant::now() + run_for;
    while Instant::now() < end {
        let records = poll_tracking(&mut consumer, &mut next).await;
        for r in &records {
            seen.lock().expect("lock").push((r.tp.clone(), r.offset));
        }
        if let Some(revoked) = commit_polled(&mut consumer, &records, &next).await {
            out.revocations.push(revoked);
        }
        let mine = partition_numbers(&consumer);
        let mut owners = owners.lock().expect("lock");
        for (other, theirs) in owners.iter().filter(|(o, _)| o.as_str() != name) {
            let shared: Vec<_> = mine.iter().filter(|p| theirs.contains(p)).collect();
            assert!(shared.is_empty(), "{name} and {other} both own {shared:?}");
        }
        owners.insert(name.to_string(), mine.clone());
        out.last = mine;
    }
    consumer.close().await;
    owners.lock().expect("lock").remove(name);
    out
}

/// Runs member `a` (listening if `listen_a`) from the start for 30 s and `b` from 5 s for
/// 15 s (it then leaves), each on its own node; returns what they saw and every record
/// polled.
fn run_two_members(listen_a: bool) -> (Kip848Seen, Kip848Seen, Vec<(TopicPartition, Offset)>) {
    let runtime = madsim::runtime::Runtime::new();
    runtime.block_on(async move {
        let handle = madsim::runtime::Handle::current();
        start_fake_broker(&handle);
        let (owners, seen) = (Owners::default(), Seen::default());
        let node = |i: u8| {
            let name = format!("consumer-{i}");
            handle
                .create_node()
                .name(name)
                .ip([10, 0, 2, i].into())
                .build()
        };
        let (a, b) = (node(1), node(2));
        let task_a = a.spawn(consume_kip848(
            "a",
            owners.clone(),
            seen.clone(),
            listen_a,
            Duration::from_secs(30),
        ));
        sleep(Duration::from_secs(5)).await;
        let task_b = b.spawn(consume_kip848(
            "b",
            owners,
            seen.clone(),
            false,
            Duration::from_secs(15),
        ));
        let b_seen = task_b.await.expect("consumer b");
        let a_seen = task_a.await.expect("consumer a");
        let records = seen.lock().expect("lock").clone();
        (a_seen, b_seen, records)
    })
}

/// KIP-848 reconciliation end to end: a joins alone and takes every partition; b joins,
/// gets nothing until a has revoked what moves (the coordinator withholds it), then its
/// share; b leaves (epoch -1) and a gets everything back. The members' own assignments
/// never overlap (asserted after every poll) and every record is read.
#[test]
fn consumer_protocol_members_never_own_a_partition_at_once_and_read_every_record() {
    let (a, b, mut records) = run_two_members(false);
    assert!(!b.last.is_empty(), "b had a share before it left");
    assert_eq!(a.last, vec![0, 1, 2], "a took b's share back after b left");
    records.sort();
    records.dedup();
    let expected = fake_broker::PARTITIONS as usize * fake_broker::RECORDS_PER_PARTITION as usize;
    assert_eq!(records.len(), expected, "every record read");
    eosim_sim::marks::assert_hit(&[
        "client:kip848-joined",
        "client:kip848-reconcile-revoke",
        "client:kip848-reconcile-assign",
        "kafka:kip848-revocation-requested",
        "kafka:kip848-revocation-acknowledged",
        "kafka:kip848-partitions-withheld-unreleased",
    ]);
}

/// With a rebalance listener the member is handed only the partitions that move, before it
/// acknowledges their revocation: its epoch is still valid, so committing them succeeds.
#[test]
fn a_listening_consumer_protocol_member_commits_what_it_revokes_before_acknowledging() {
    let (a, b, _) = run_two_members(true);
    let [(revocation, committed)] = a.revocations.as_slice() else {
        panic!("one revocation expected: {:?}", a.revocations);
    };
    assert!(!revocation.lost, "the member epoch was valid");
    assert!(*committed, "the revoked partitions' offsets were committed");
    let revoked: Vec<u32> = revocation
        .partitions
        .iter()
        .map(|tp| tp.partition)
        .collect();
    assert_eq!(revoked, b.last, "what a revoked is what b got");
}

/// A member cut off from the coordinator past the broker's session timeout is fenced; when
/// it comes back its heartbeat is refused (UNKNOWN_MEMBER_ID), it gives up its partitions
/// as lost, and rejoins with epoch 0, getting them back.
#[test]
fn a_fenced_consumer_protocol_member_loses_its_partitions_and_rejoins_with_epoch_zero() {
    let runtime = madsim::runtime::Runtime::new();
    let (before, after) = runtime.block_on(async {
        let handle = madsim::runtime::Handle::current();
        let broker = start_fake_broker(&handle);
        let node = handle
            .create_node()
            .name("consumer")
            .ip([10, 0, 2, 1].into())
            .build();
        let task = node.spawn(async {
            let mut consumer = subscribed(kip848_config(), true).await;
            let mut next = BTreeMap::new();
            while consumer.assignment().is_empty() {
                poll_tracking(&mut consumer, &mut next).await;
            }
            let before = consumer.group_metadata().expect("in the group").generation;
            // The link is cut from 5 s to 55 s (the broker's session timeout is 45 s).
            sleep(Duration::from_secs(60)).await;
            let mut lost = None;
            for _ in 0..40 {
                poll_tracking(&mut consumer, &mut next).await;
                if let Some(r) = consumer.take_revocation() {
                    lost.get_or_insert(r);
                }
            }
            let after = consumer.group_metadata().map(|m| m.generation);
            let lost = lost.expect("the partitions were handed out as lost");
            assert!(lost.lost, "onPartitionsLost, not onPartitionsRevoked");
            assert_eq!(consumer.assignment().len(), 3, "it got them back");
            (before, after)
        });
        cut_link(
            &node,
            &broker,
            Duration::from_secs(5),
            Duration::from_secs(50),
        )
        .await;
        task.await.expect("consumer task")
    });
    assert_eq!(before, 1);
    assert!(
        after.is_some_and(|epoch| epoch > before),
        "rejoined at a later epoch: {after:?}"
    );
    eosim_sim::marks::assert_hit(&[
        "kafka:kip848-member-fenced-session-timeout",
        "client:kip848-fenced-rejoin",
    ]);
}

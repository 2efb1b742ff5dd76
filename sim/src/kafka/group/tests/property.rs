//! Random join / sync / heartbeat / leave / commit / time-advance sequences from a few
//! clients that behave like Kafka's (they keep the member id and generation they were
//! given and forget them on UNKNOWN_MEMBER_ID), checking after every step:
//! 1. no partition is assigned to two members of the same generation;
//! 2. the group's generation only increases;
//! 3. a commit with a generation other than the group's never changes offsets;
//!
//! and at the end that every parked request is answered once time passes the timeouts.

use super::*;
use proptest::prelude::*;

const CLIENTS: usize = 3;
const PARTITIONS: u32 = 5;

#[derive(Debug, Clone)]
enum Op {
    Join(usize),
    Sync(usize),
    Heartbeat(usize),
    Leave(usize),
    Commit(usize, Offset),
    StaleCommit(usize, Offset),
    Advance(u64),
    /// The next step a well-behaved Java consumer would take.
    Progress(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let client = 0..CLIENTS;
    prop_oneof![
        3 => client.clone().prop_map(Op::Join),
        3 => client.clone().prop_map(Op::Sync),
        2 => client.clone().prop_map(Op::Heartbeat),
        1 => client.clone().prop_map(Op::Leave),
        2 => (client.clone(), 0..1_000i64).prop_map(|(c, o)| Op::Commit(c, o)),
        1 => (client.clone(), 0..1_000i64).prop_map(|(c, o)| Op::StaleCommit(c, o)),
        3 => (0..3_000u64).prop_map(Op::Advance),
        1 => (0..15_000u64).prop_map(Op::Advance),
        8 => client.clone().prop_map(Op::Progress),
    ]
}

#[derive(Debug, Default)]
struct Client {
    member_id: String,
    generation: i32,
    /// The members list when this client leads its generation.
    members: Option<Vec<String>>,
    join_token: Option<u64>,
    /// A parked SyncGroup and the generation it was sent for.
    sync_token: Option<(u64, i32)>,
    /// The last generation whose assignment this client received.
    synced_generation: i32,
}

#[derive(Default)]
struct World {
    now: TimeMs,
    clients: Vec<Client>,
    /// generation → member → assignment received through SyncGroup.
    assigned: BTreeMap<i32, BTreeMap<String, Vec<TopicPartition>>>,
    last_generation: i32,
}

/// Kafka's range assignor over one topic: members sorted, the first `n % m` get one more.
fn range(members: &[String]) -> BTreeMap<String, Vec<TopicPartition>> {
    let (n, m) = (PARTITIONS as usize, members.len());
    let mut next = 0;
    let mut out = BTreeMap::new();
    for (i, member) in members.iter().enumerate() {
        let count = n / m + usize::from(i < n % m);
        out.insert(
            member.clone(),
            (next..next + count).map(|p| tp(p as u32)).collect(),
        );
        next += count;
    }
    out
}

impl World {
    fn on_join(&mut self, i: usize, response: Response) {
        let client = &mut self.clients[i];
        match response {
            Response::MemberIdRequired { member_id } => client.member_id = member_id,
            Response::JoinGroup {
                generation,
                member_id,
                leader,
                members,
                ..
            } => {
                client.generation = generation;
                client.members = (leader == member_id).then(|| members.into_keys().collect());
            }
            Response::Error(KafkaError::UnknownMemberId) => *client = Client::default(),
            Response::Error(_) => {}
            other => panic!("unexpected JoinGroup answer {other:?}"),
        }
    }

    fn on_sync(&mut self, i: usize, generation: i32, response: Response) {
        let client = &mut self.clients[i];
        match response {
            Response::SyncGroup { assignment } => {
                let members = self.assigned.entry(generation).or_default();
                if let Some(previous) = members.get(&client.member_id) {
                    assert_eq!(
                        previous, &assignment,
                        "one assignment per member and generation"
                    );
                }
                members.insert(client.member_id.clone(), assignment);
                client.synced_generation = generation;
            }
            Response::Error(KafkaError::UnknownMemberId) => *client = Client::default(),
            Response::Error(_) => {}
            other => panic!("unexpected SyncGroup answer {other:?}"),
        }
    }

    fn poll_all(&mut self, c: &mut GroupCoordinator) {
        for i in 0..CLIENTS {
            if let Some(token) = self.clients[i].join_token {
                if let Some(response) = c.poll_parked(self.now, token) {
                    self.clients[i].join_token = None;
                    self.on_join(i, response);
                }
            }
            if let Some((token, generation)) = self.clients[i].sync_token {
                if let Some(response) = c.poll_parked(self.now, token) {
                    self.clients[i].sync_token = None;
                    self.on_sync(i, generation, response);
                }
            }
        }
    }

    fn join(&mut self, c: &mut GroupCoordinator, i: usize) {
        match c.handle(self.now, join_request(&self.clients[i].member_id)) {
            Reply::Done(response) => self.on_join(i, response),
            Reply::Parked(ParkToken::Group(token)) => self.clients[i].join_token = Some(token),
            Reply::Parked(other) => panic!("foreign token {other:?}"),
        }
    }

    fn sync(&mut self, c: &mut GroupCoordinator, i: usize) {
        let client = &self.clients[i];
        let assignments = client.members.as_deref().map(range).unwrap_or_default();
        let generation = client.generation;
        let request = Request::SyncGroup {
            group_id: G.into(),
            generation,
            member_id: client.member_id.clone(),
            assignments,
        };
        match c.handle(self.now, request) {
            Reply::Done(response) => self.on_sync(i, generation, response),
            Reply::Parked(ParkToken::Group(token)) => {
                self.clients[i].sync_token = Some((token, generation))
            }
            Reply::Parked(other) => panic!("foreign token {other:?}"),
        }
    }

    fn commit(&mut self, c: &mut GroupCoordinator, i: usize, generation: i32, offset: Offset) {
        let before = c.committed(G);
        let current = c.generation(G);
        let member_id = self.clients[i].member_id.clone();
        let response = commit(c, self.now, generation, &member_id, offset);
        let stale = generation >= 0 && current.is_some_and(|g| g != generation);
        if stale {
            assert!(
                matches!(response, Response::Error(_)),
                "stale commit accepted"
            );
            assert_eq!(c.committed(G), before, "a stale commit changed offsets");
        }
    }

    /// Join without an id, join with it, sync a new generation, else heartbeat and rejoin
    /// when told to.
    fn progress(&mut self, c: &mut GroupCoordinator, i: usize) {
        let client = &self.clients[i];
        if client.join_token.is_some() || client.sync_token.is_some() {
            return;
        }
        if client.member_id.is_empty() {
            self.join(c, i);
            self.join(c, i);
        } else if client.generation > client.synced_generation {
            self.sync(c, i);
        } else {
            let member_id = client.member_id.clone();
            let response = heartbeat(c, self.now, client.generation, &member_id);
            match response {
                Response::Error(KafkaError::UnknownMemberId) => self.clients[i] = Client::default(),
                Response::Error(_) => self.join(c, i),
                _ => {}
            }
        }
    }

    fn apply(&mut self, c: &mut GroupCoordinator, op: Op) {
        match op {
            Op::Join(i) => self.join(c, i),
            Op::Sync(i) => self.sync(c, i),
            Op::Heartbeat(i) => {
                let client = &self.clients[i];
                let response = heartbeat(c, self.now, client.generation, &client.member_id.clone());
                if response == Response::Error(KafkaError::UnknownMemberId) {
                    self.clients[i] = Client::default();
                }
            }
            Op::Leave(i) => {
                let request = Request::LeaveGroup {
                    group_id: G.into(),
                    member_id: self.clients[i].member_id.clone(),
                };
                let _ = c.handle(self.now, request);
                self.clients[i] = Client::default();
            }
            Op::Commit(i, offset) => self.commit(c, i, self.clients[i].generation, offset),
            Op::StaleCommit(i, offset) => {
                let generation = c.generation(G).unwrap_or(0) - 1;
                if generation >= 0 {
                    self.commit(c, i, generation, offset);
                }
            }
            Op::Progress(i) => self.progress(c, i),
            Op::Advance(ms) => {
                self.now += ms;
                c.tick(self.now);
            }
        }
        self.poll_all(c);
    }

    fn check(&mut self, c: &GroupCoordinator) {
        let generation = c.generation(G).unwrap_or(0);
        assert!(generation >= self.last_generation, "generation went back");
        self.last_generation = generation;
        for (generation, members) in &self.assigned {
            let mut owners = BTreeMap::new();
            for (member, partitions) in members {
                for p in partitions {
                    let owner = owners.insert(p.clone(), member.clone());
                    assert_eq!(owner, None, "{p} assigned twice in generation {generation}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_keep_assignments_disjoint_and_stale_commits_harmless(
        ops in proptest::collection::vec(op(), 1..80)
    ) {
        let mut c = GroupCoordinator::new(ClusterConfig {
            group_initial_rebalance_delay_ms: 500,
            ..config()
        });
        let clients = (0..CLIENTS).map(|_| Client::default()).collect();
        let mut world = World { clients, ..World::default() };
        for op in ops {
            world.apply(&mut c, op);
            world.check(&c);
        }
        // Liveness: once the timeouts pass, nothing stays parked.
        world.now += 2 * REBALANCE_MS + SESSION_MS;
        c.tick(world.now);
        world.poll_all(&mut c);
        for client in &world.clients {
            prop_assert!(client.join_token.is_none(), "a JoinGroup stayed parked");
            prop_assert!(client.sync_token.is_none(), "a SyncGroup stayed parked");
        }
    }
}

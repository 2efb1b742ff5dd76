//! The simulated world of one run: named madsim nodes, what the nemesis has done to them,
//! and the history recorder every process writes to.
//!
//! Node names and addresses: `controller` 10.0.0.2 (runs the model's tick loop),
//! `broker-b` 10.0.1.b, `producer-i` 10.0.2.(i+1), `consumer-i` 10.0.3.(i+1),
//! `streams-i` 10.0.4.(i+1), `admin` 10.0.9.1. Group names a fault may target: `brokers`,
//! `producers`, `consumers`, `streams`, `clients` (producers, consumers, streams), `all`.

use crate::history::{OpKind, Recorder, Value};
use eosim_sim::clock::now_ns;
use eosim_sim::effects::kind;
use eosim_sim::kafka::model::{CrashMode, Env};
use eosim_sim::kafka::service::{broker_ip, KafkaWorld};
use eosim_sim::kafka::BrokerId;
use eosim_sim::nemesis::{group_member, is_group};
use madsim::runtime::Handle;
use madsim::task::NodeId;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

/// What the nemesis has done to nodes and links, by node name.
#[derive(Debug, Default)]
pub struct NetState {
    /// Killed and not yet restarted.
    pub down: BTreeSet<String>,
    /// Paused and not yet resumed.
    pub paused: BTreeSet<String>,
    /// Directed links cut (source, target).
    pub cut: BTreeSet<(String, String)>,
    /// Nodes isolated from everyone.
    pub clogged: BTreeSet<String>,
    /// Broker-to-broker and controller links the model found down since the last heal,
    /// each recorded once as an effect of the partition or clog that cut it.
    pub blocked_seen: BTreeSet<(String, String)>,
}

impl NetState {
    /// Whether `from` reaches `to`; `None` when it does, else the fault kind that cut it.
    /// Allocation-free: the model asks for every link on every tick.
    fn cut_by(&self, from: &str, to: &str) -> Option<&'static str> {
        if self.clogged.contains(from) || self.clogged.contains(to) {
            Some(kind::CLOG)
        } else if self.cut.iter().any(|(a, b)| a == from && b == to) {
            Some(kind::PARTITION)
        } else {
            None
        }
    }

    /// Whether no node is down, paused or cut off: every reachability question answers
    /// yes without looking further.
    fn is_quiet(&self) -> bool {
        self.down.is_empty()
            && self.paused.is_empty()
            && self.cut.is_empty()
            && self.clogged.is_empty()
    }
}

/// Node name of the KRaft controller (the model's tick loop runs there).
const CONTROLLER: &str = "controller";

/// The model's view of the nemesis' work.
#[derive(Clone)]
pub struct EnvView {
    net: Arc<Mutex<NetState>>,
    /// `broker-<b>` at `b - 1`, made once: the model asks about every broker and link on
    /// every tick, and the lookups must not allocate.
    names: Arc<[String]>,
}

impl EnvView {
    /// A view of `net` for a cluster of `broker_count` brokers.
    pub fn new(net: Arc<Mutex<NetState>>, broker_count: u32) -> Self {
        let names = (1..=broker_count).map(broker_name).collect();
        Self { net, names }
    }

    /// The name of broker `b`; allocates only for an id outside the cluster.
    fn name(&self, b: BrokerId) -> std::borrow::Cow<'_, str> {
        match b.checked_sub(1).and_then(|i| self.names.get(i as usize)) {
            Some(name) => std::borrow::Cow::Borrowed(name),
            None => std::borrow::Cow::Owned(broker_name(b)),
        }
    }
}

impl Env for EnvView {
    fn broker_up(&self, b: BrokerId) -> bool {
        let state = self.net.lock().expect("net state lock");
        if state.is_quiet() {
            return true;
        }
        let name = self.name(b);
        !state.down.contains(name.as_ref()) && !state.paused.contains(name.as_ref())
    }

    fn link_up(&self, from: BrokerId, to: BrokerId) -> bool {
        self.reach(&self.name(from), &self.name(to), "replication")
    }

    fn controller_link_up(&self, b: BrokerId) -> bool {
        let name = self.name(b);
        self.reach(&name, CONTROLLER, "heartbeats") && self.reach(CONTROLLER, &name, "heartbeats")
    }

    /// One lock: no broker is down or paused, neither a broker nor the controller is
    /// clogged, and no cut link joins two of them (faults on clients and other services
    /// leave the model's own traffic alone). The answer is exactly whether every question
    /// above would answer yes.
    fn all_up(&self) -> bool {
        let state = self.net.lock().expect("net state lock");
        if state.is_quiet() {
            return true;
        }
        let broker = |n: &str| self.names.iter().any(|b| b == n);
        let kafka = |n: &str| n == CONTROLLER || broker(n);
        let any = |set: &BTreeSet<String>, of: &dyn Fn(&str) -> bool| set.iter().any(|n| of(n));
        !any(&state.down, &broker)
            && !any(&state.paused, &broker)
            && !any(&state.clogged, &kafka)
            && !state.cut.iter().any(|(a, b)| kafka(a) && kafka(b))
    }
}

impl EnvView {
    /// Whether `from` reaches `to` for the model's own traffic (`what`: replication
    /// fetches, controller heartbeats). A link found cut is recorded as an effect of the
    /// partition or clog, once per link until the next heal: the model asks every tick.
    /// Allocates only when a cut link is seen for the first time.
    fn reach(&self, from: &str, to: &str, what: &str) -> bool {
        let mut state = self.net.lock().expect("net state lock");
        if state.cut.is_empty() && state.clogged.is_empty() {
            return true;
        }
        let Some(kind) = state.cut_by(from, to) else {
            return true;
        };
        let seen = state.blocked_seen.iter().any(|(a, b)| a == from && b == to);
        if !seen {
            state
                .blocked_seen
                .insert((from.to_string(), to.to_string()));
        }
        drop(state);
        if !seen {
            let detail = format!("{what} from {from} to {to} blocked (until the heal)");
            eosim_sim::effects::record(kind, from, detail);
        }
        false
    }
}

/// Name of broker `b`.
pub fn broker_name(b: BrokerId) -> String {
    format!("broker-{b}")
}

/// The nodes of one run.
pub struct World {
    /// The Kafka model and its clock.
    pub kafka: KafkaWorld,
    /// What the nemesis did.
    pub net: Arc<Mutex<NetState>>,
    /// The history.
    pub recorder: Recorder,
    handle: Handle,
    nodes: BTreeMap<String, (NodeId, IpAddr)>,
    broker_count: u32,
    kill_hooks: Vec<KillHook>,
}

/// Told the name, IP and crash mode of every node the nemesis kills (a pipeline's servers
/// outside Kafka need it: PostgreSQL loses its sessions, or notices a client's sockets
/// closing; a Doris BE's machine crash loses its unsynced WAL). Returns what the kill lost
/// in that service, for the kill's effect (`postgres lost 3 sessions`), or `None` when it
/// lost nothing there.
pub type KillHook = Box<dyn Fn(&str, IpAddr, CrashMode) -> Option<String>>;

impl World {
    /// A world around `kafka` with `broker_count` brokers still to be added.
    pub fn new(kafka: KafkaWorld, broker_count: u32) -> Self {
        Self {
            kafka,
            net: Arc::default(),
            recorder: Recorder::default(),
            handle: Handle::current(),
            nodes: BTreeMap::new(),
            broker_count,
            kill_hooks: Vec::new(),
        }
    }

    /// Registers a hook called for every killed node.
    pub fn on_kill(&mut self, hook: KillHook) {
        self.kill_hooks.push(hook);
    }

    /// Calls the kill hooks for `name` (the nemesis does, after killing it); what they say
    /// the kill lost, one entry per hook that lost something.
    pub fn notify_kill(&self, name: &str, mode: CrashMode) -> Vec<String> {
        let Some((_, ip)) = self.node(name) else {
            return Vec::new();
        };
        self.kill_hooks
            .iter()
            .filter_map(|hook| hook(name, ip, mode))
            .collect()
    }

    /// Number of brokers.
    pub fn broker_count(&self) -> u32 {
        self.broker_count
    }

    /// Adds a node named `name` at `ip` whose process is `init` (run again on restart).
    pub fn add_node<F, Fut>(&mut self, name: &str, ip: IpAddr, init: F)
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let node = self
            .handle
            .create_node()
            .name(name)
            .ip(ip)
            .init(init)
            .build();
        eosim_sim::net::register_node(node.id(), ip, name);
        self.nodes.insert(name.to_string(), (node.id(), ip));
    }

    /// Adds the controller node (tick loop) and the broker nodes.
    pub fn add_kafka(&mut self) {
        let kafka = self.kafka.clone();
        let env = EnvView::new(self.net.clone(), self.broker_count);
        self.add_node(
            CONTROLLER,
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            move || kafka.clone().run_ticker(Arc::new(env.clone())),
        );
        for b in 1..=self.broker_count {
            let kafka = self.kafka.clone();
            self.add_node(&broker_name(b), broker_ip(b), move || {
                eosim_sim::kafka::service::serve_broker(b, kafka.clone())
            });
        }
    }

    /// Resolves node names and groups to node names, in a stable order.
    pub fn resolve(&self, targets: &[String]) -> Result<Vec<String>, String> {
        let mut out = BTreeSet::new();
        for target in targets {
            if !is_group(target) {
                if !self.nodes.contains_key(target.as_str()) {
                    return Err(format!("unknown node or group `{target}`"));
                }
                out.insert(target.clone());
                continue;
            }
            for name in self.nodes.keys() {
                let hit = group_member(target, name).unwrap_or(name != CONTROLLER);
                if hit {
                    out.insert(name.clone());
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// The madsim node id and IP of `name`.
    pub fn node(&self, name: &str) -> Option<(NodeId, IpAddr)> {
        self.nodes.get(name).copied()
    }

    /// Every node name.
    pub fn names(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// Kills every node of the run, so that madsim drops each of their tasks before the
    /// runtime goes. Call it once the run's outcome is taken: a task parked on a bell it
    /// keeps alive itself (a broker handler waiting on the model's `ticked` notify, the
    /// ticker on `dirty`) holds its own waker through that bell, and without a kill the
    /// cycle outlives the runtime with the model in it (issue 15: 1.3 MB per seed).
    pub fn shutdown(&self) {
        for (id, _) in self.nodes.values() {
            self.handle.kill(*id);
        }
    }

    /// The madsim handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Simulated ns since the run started.
    pub fn now_ns(&self) -> u64 {
        now_ns()
    }

    /// Records a nemesis op and prints its one-line status.
    pub fn record_fault(&self, name: &str, detail: String, verbose: bool) {
        let t = now_ns();
        if verbose {
            println!("t={:.3}s nemesis {name} {detail}", t as f64 / 1e9);
        }
        let value = Value::Fault {
            name: name.to_string(),
            detail,
        };
        self.recorder
            .record(t, "nemesis", OpKind::Info, value, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state built from these faults: each node down, paused or clogged, and each
    /// directed link among them cut, one fault at a time and in pairs.
    fn states() -> Vec<NetState> {
        let nodes = ["broker-1", "broker-2", "broker-3", CONTROLLER, "consumer-0"];
        type Fault = Box<dyn Fn(&mut NetState)>;
        let mut faults: Vec<Fault> = Vec::new();
        for n in nodes {
            faults.push(Box::new(move |s| {
                s.down.insert(n.to_string());
            }));
            faults.push(Box::new(move |s| {
                s.paused.insert(n.to_string());
            }));
            faults.push(Box::new(move |s| {
                s.clogged.insert(n.to_string());
            }));
            for m in nodes.into_iter().filter(|&m| m != n) {
                faults.push(Box::new(move |s| {
                    s.cut.insert((n.to_string(), m.to_string()));
                }));
            }
        }
        let mut out = vec![NetState::default()];
        for (i, a) in faults.iter().enumerate() {
            let mut one = NetState::default();
            a(&mut one);
            out.push(one);
            for b in &faults[i + 1..] {
                let mut two = NetState::default();
                a(&mut two);
                b(&mut two);
                out.push(two);
            }
        }
        out
    }

    /// `all_up` answers yes exactly when every question the model would ask one by one
    /// answers yes, so the tick's fast path never hides a fault from the model.
    #[test]
    fn all_up_is_exactly_every_broker_and_link_up() {
        let brokers = 3;
        let (mut fast, mut slow) = (0, 0);
        for state in states() {
            let env = EnvView::new(Arc::new(Mutex::new(state)), brokers);
            let ids = 1..=brokers;
            let each = ids
                .clone()
                .all(|b| env.broker_up(b) && env.controller_link_up(b))
                && ids.clone().all(|a| ids.clone().all(|b| env.link_up(a, b)));
            assert_eq!(
                env.all_up(),
                each,
                "{:?}",
                env.net.lock().expect("net state lock")
            );
            if each {
                fast += 1;
            } else {
                slow += 1;
            }
        }
        // Faults on a client leave the model's own traffic up: both answers occur.
        assert!(fast > 1 && slow > 0, "fast {fast}, slow {slow}");
    }
}

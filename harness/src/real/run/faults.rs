//! The scenario's fault schedule as real faults (the explicit `[[faults.schedule]]` and
//! the `[faults.swarm]` drawn from `eosim run --seed`, as the simulation draws a seed's),
//! and the heal before the drain.
//!
//! | fault | real effect |
//! |---|---|
//! | `kill` of `broker-N` (process-kill) | SIGKILL to the broker's JVM (its page cache survives) |
//! | `kill` of `producer-i` / `consumer-i` / `connect-i` | SIGKILL to the worker process |
//! | `kill` of `postgres` (`connect-jdbc`) | SIGKILL to the postmaster and its backends |
//! | `kill` / `pause` of `clickhouse`, `keeper` (`clickhouse-sink`) | SIGKILL / SIGSTOP to ClickHouse, to its ZooKeeper |
//! | `restart` | the process started again (a broker waits until it is registered) |
//! | `pause` / `resume` | SIGSTOP / SIGCONT |
//! | `kill-leader` | SIGKILL to the partition's current leader, from metadata |
//! | `partition` (full, `one_way`), `clog` | nftables drops between the processes' cgroups ([`crate::real::net`]) |
//! | `heal` | every cut link restored; each one's dropped packets recorded as its effect |
//! | `messages` on `clickhouse` | a proxy in front of its HTTP listener drops / delays / duplicates requests, loses responses ([`crate::real::net::proxy`]) |
//! | `messages` on brokers | the same through a Kafka-framed proxy in front of each broker, whose port it advertises |
//! | `messages` on `postgres` | the same through a proxy reading PostgreSQL's messages in front of its listener (no duplicates: noted) |
//! | `messages` on `keeper` (`clickhouse-sink`) | the same through a proxy reading ZooKeeper's frames in front of its client port, started before ClickHouse (no duplicates: noted) |
//! | any link fault to `keeper` from `clickhouse` | also on the links from each sink task's worker to ZooKeeper: ClickHouse 18.16 has no KeeperMap, so the workers keep its rows in ZooKeeper themselves (`keeper_links`) |
//! | `partition` or `clog` of a sink task's worker from `clickhouse` | also of that worker from ZooKeeper: its KeeperMap queries, requests to ClickHouse in the simulation, go to ZooKeeper on real (`keeper_links`) |
//! | `kill` or `kill-leader` of brokers, `mode = "machine-crash"` | SIGKILL to each broker's JVM at once, then its data directory's lossy file system ([`crate::real::lazyfs`], after Jepsen's lazyfs) drops every write not fsynced; the effect names the bytes and files dropped |
//! | `kill`, `mode = "machine-crash"`, of anything else | not injected, noted (only brokers' data directories are on the lossy file system) |
//! | `clock-jump` of a worker (`producer-i`, `consumer-i`, `connect-i`, `streams-i`) | its wall-clock offset stepped by `delta_ms` ([`crate::real::clock`]): every record its producers send after it carries that `CreateTime` (an explicit timestamp), its timers do not move, as in the simulation; the process records the effect when a record first carries it |
//! | `clock-jump` of a broker or a database | not injected, noted (they keep the true time, as in the simulation) |
//! | `delete-records` | `Admin.deleteRecords` through librdkafka, the records below the target read first |
//! | `add-partitions` | `Admin.createPartitions` through librdkafka; the drain and final read follow the cluster's partition count |
//! | `[sink.fault_point]` crash | worker-0 exits there ([`fault_point`]), restarted later |
//!
//! Histories record faults as the simulation does: `kill target=[consumer-0]
//! mode=process-kill`, `restart target=[consumer-0]`; and each time a fault acted, an
//! `effect` op as the simulation's ([`eosim_sim::effects::kind`]): a kill of a running
//! process, a pause, a fault point's crash, the packets a cut link dropped (recorded at the
//! heal, per link, from the drop rules' counters; a link nothing crossed has none), the
//! unsynced bytes a machine crash dropped. Network faults need root, `nft` and cgroup v2
//! ([`Network::open`]); where one is missing every `partition` and `clog` is noted as not
//! injected with what is missing, never run silently without its cuts. Machine crashes need
//! root and `/dev/fuse` (the brokers' data directories are lossy file systems only when the
//! scenario crashes a broker's machine, [`super::needs`]); without them each is noted as not
//! injected with the reason, never downgraded to a process kill. A fault that is not
//! injected has no effect, so the report counts it as scheduled and never acted, and a
//! `holds` under it is *not exercised* (exit 5), never a plain pass.

use super::cluster;
use super::fault_point::{self, FAULT_POINT_EXIT_CODE};
use super::pipelines::Target;
use super::Run;
use crate::history::{RecordRef, Value};
use crate::real::net::proxy::{MessageFaults, Proxy};
use crate::real::net::rules::Cut;
use crate::real::net::Network;
use crate::real::provision::{Kafka, ServiceFaults, ServiceState};
use eosim_sim::effects::kind;
use eosim_sim::kafka::model::CrashMode;
use eosim_sim::kafka::{Offset, TopicPartition};
use eosim_sim::nemesis::{group_member, swarm, DeleteBefore, DeletePoint, Fault, ScheduledFault};
use madsim::rand::rngs::StdRng;
use madsim::rand::SeedableRng;
use std::collections::BTreeMap;
use std::time::Duration;

/// The databases a message-fault proxy may sit in front of ([`Run::proxy`]; brokers have
/// theirs too).
const PROXIED_DATABASES: [&str; 3] = ["clickhouse", "keeper", "postgres"];

impl Run<'_> {
    /// Applies every scheduled fault before `faults.until_ms` (the file's and the swarm's),
    /// at its time, then waits until `faults.until_ms`; returns that schedule.
    pub(super) fn run_faults(&mut self) -> Vec<ScheduledFault> {
        let until_ms = self.scenario.faults.until_ms;
        let mut schedule = self.scenario.faults.schedule.clone();
        schedule.extend(self.swarm_schedule());
        schedule.retain(|f| f.at_ms < until_ms);
        schedule.sort_by_key(|f| f.at_ms);
        for scheduled in &schedule {
            self.create_connector_by(scheduled.at_ms);
            self.sleep_until_ms(scheduled.at_ms);
            self.apply(&scheduled.fault);
        }
        self.create_connector_by(until_ms);
        self.sleep_until_ms(until_ms);
        schedule
    }

    /// Starts the Connect tasks (sink or source) at `connect.connector_create_at_ms` (when
    /// the operator creates the connector in simulation) if that comes before `by_ms`.
    pub(super) fn create_connector_by(&mut self, by_ms: u64) {
        let at_ms = self.scenario.connect.connector_create_at_ms;
        if !self.connector_pending || at_ms > by_ms {
            return;
        }
        self.sleep_until_ms(at_ms);
        self.connector_pending = false;
        if let super::pipelines::Target::Postgres(t) = &self.target {
            let (op, note) = super::pipelines::connector_op(t, self.scenario, self.now_ns());
            self.notes.extend(note);
            self.env.ops.lock().expect("ops lock").push(op);
        }
        if let super::pipelines::Target::Source = &self.target {
            let raw = &self.scenario.connector;
            let name = raw.get("name").map_or("", String::as_str);
            let op = super::pipelines::connector_config_op(name, raw, self.now_ns());
            self.env.ops.lock().expect("ops lock").push(op);
        }
        for i in 0..self.workers.len() {
            if !self.workers[i].role.is_connect_task() {
                continue;
            }
            if let Err(e) = self.workers[i].start(&self.env) {
                self.fail(e);
            }
        }
    }

    /// Sleeps until `at_ms`, meanwhile restarting workers that crashed at their fault
    /// point when their `restart_after_ms` is up (checked every 100 ms).
    fn sleep_until_ms(&mut self, at_ms: u64) {
        loop {
            self.restart_fault_point_crashes();
            let now_ms = self.now_ns() / 1_000_000;
            if at_ms <= now_ms {
                return;
            }
            std::thread::sleep(Duration::from_millis((at_ms - now_ms).min(100)));
        }
    }

    /// Reaps the sink tasks that ended at their armed fault point
    /// ([`FAULT_POINT_EXIT_CODE`]), schedules each one's restart `restart_after_ms` later,
    /// and starts those whose time has come (recording `restart`, as a scheduled one).
    pub(super) fn restart_fault_point_crashes(&mut self) {
        let now_ms = self.now_ns() / 1_000_000;
        let after_ms = fault_point::spec(self.scenario).map_or(0, |f| f.restart_after_ms);
        let mut fault_point_effects = Vec::new();
        for w in &mut self.workers {
            if w.exit_status().and_then(|s| s.code()) != Some(FAULT_POINT_EXIT_CODE) {
                continue;
            }
            w.reap(&self.env);
            self.fault_point_restarts
                .insert(w.name.clone(), now_ms + after_ms);
            let detail = format!(
                "{} exited at its armed fault point (exit {FAULT_POINT_EXIT_CODE})",
                w.name
            );
            let value = Value::Effect {
                kind: kind::FAULT_POINT.into(),
                detail,
            };
            fault_point_effects.push((w.name.clone(), value));
            self.notes.push(format!(
                "{} crashed at its fault point (exit {FAULT_POINT_EXIT_CODE}); started again \
                 {after_ms} ms later",
                w.name
            ));
        }
        for (process, value) in fault_point_effects {
            self.push(self.now_ns(), &process, value);
        }
        let due: Vec<String> = self
            .fault_point_restarts
            .iter()
            .filter(|(_, at_ms)| **at_ms <= now_ms)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            self.fault_point_restarts.remove(&name);
            self.restart(&name);
        }
    }

    fn unsupported(&mut self, fault: &Fault, why: &str) {
        let now_s = self.now_ns() as f64 / 1e9;
        let note = format!(
            "t={now_s:.3}s fault `{}` not injected: {why} (real backend)",
            fault.name()
        );
        if self.verbose {
            println!("{note}");
        }
        self.notes.push(note);
    }

    fn apply(&mut self, fault: &Fault) {
        let targets = match fault {
            Fault::Kill { target, .. }
            | Fault::Restart { target }
            | Fault::Pause { target }
            | Fault::Resume { target } => self.resolve(target),
            _ => Vec::new(),
        };
        match fault {
            Fault::Kill {
                mode: CrashMode::MachineCrash,
                ..
            } => self.machine_crash(fault, &targets, kind::KILL),
            Fault::Kill { .. } => targets.iter().for_each(|n| self.kill(n, kind::KILL)),
            Fault::Restart { .. } => self.restart_all(&targets),
            Fault::Pause { .. } => targets.iter().for_each(|n| self.pause(n, true)),
            Fault::Resume { .. } => targets.iter().for_each(|n| self.pause(n, false)),
            Fault::KillLeader {
                topic,
                partition,
                mode,
            } => self.kill_leader(fault, topic, *partition, *mode),
            Fault::Partition {
                source,
                target,
                one_way,
            } => self.partition(fault, source, target, *one_way),
            Fault::Clog { target } => self.clog(fault, target),
            Fault::Messages {
                source,
                target,
                drop_request_probability,
                drop_response_probability,
                duplicate_probability,
                delay_ms_max,
            } => {
                let settings = MessageFaults {
                    drop_request_probability: *drop_request_probability,
                    drop_response_probability: *drop_response_probability,
                    duplicate_probability: *duplicate_probability,
                    delay_ms_max: *delay_ms_max,
                };
                self.messages(fault, source, target, settings)
            }
            Fault::ClockJump { target, delta_ms } => self.clock_jump(fault, target, *delta_ms),
            Fault::DeleteRecords {
                topic,
                partition,
                before,
                group,
            } => self.delete_records(topic, *partition, *before, group.as_deref()),
            Fault::AddPartitions { topic, count } => self.add_partitions(topic, *count),
            Fault::Heal => self.heal_network(),
        }
    }

    /// The run's processes as network nodes: the brokers it started, the workers, the
    /// databases (`postgres`; `clickhouse` and its ZooKeeper `keeper`).
    fn net_nodes(&self) -> Vec<String> {
        let mut out: Vec<String> = match self.brokers {
            super::Brokers::Native { .. } => (1..=self.scenario.cluster.brokers)
                .map(|b| format!("broker-{b}"))
                .collect(),
            super::Brokers::External(_) => Vec::new(),
        };
        out.extend(self.workers.iter().map(|w| w.name.clone()));
        match &self.target {
            super::pipelines::Target::Postgres(_) => out.push("postgres".into()),
            super::pipelines::Target::ClickHouse(_) => {
                out.extend(["clickhouse".to_string(), "keeper".to_string()])
            }
            _ => {}
        }
        out
    }

    /// The real links that carry the simulation's link from `from` to `to`
    /// ([`keeper_links`] over the run's sink task workers).
    pub(super) fn keeper_links(&self, from: &str, to: &str) -> Vec<(String, String)> {
        let sink_workers: Vec<&str> = (self.workers.iter())
            .filter(|w| w.role == super::worker_spec::Role::SinkTask)
            .map(|w| w.name.as_str())
            .collect();
        keeper_links(&sink_workers, from, to)
    }

    /// Node names and groups of a network fault: as [`Run::resolve`], with `all` every
    /// network node (the databases too, as the simulation's `all`), distinct, in order.
    fn resolve_net(&self, targets: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in targets {
            let names = match t.as_str() {
                "all" => self.net_nodes(),
                _ => self.resolve(std::slice::from_ref(t)),
            };
            for n in names {
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }

    /// The run's network, or `None` with `fault` noted as not injected and why.
    fn network_for(&mut self, fault: &Fault) -> Option<&mut Network> {
        let why = match &self.net {
            Some(Ok(_)) => None,
            Some(Err(e)) => Some(e.clone()),
            None if matches!(self.brokers, super::Brokers::External(_)) => {
                Some("the brokers are external (not ours to cut off)".to_string())
            }
            None => Some("the network was not set up for this run".to_string()),
        };
        if let Some(why) = why {
            self.unsupported(fault, &why);
            return None;
        }
        self.net.as_mut().and_then(|n| n.as_mut().ok())
    }

    /// Cuts every link from each `source` node to each `target` node (and back unless
    /// `one_way`), recorded as the simulation records a partition.
    fn partition(&mut self, fault: &Fault, source: &[String], target: &[String], one_way: bool) {
        let (src, dst) = (self.resolve_net(source), self.resolve_net(target));
        let mut cuts = Vec::new();
        for a in &src {
            for b in dst.iter().filter(|b| *b != a) {
                let mut links = self.keeper_links(a, b);
                if !one_way {
                    links.extend(self.keeper_links(b, a));
                }
                cuts.extend(links.into_iter().map(|(from, to)| Cut {
                    kind: kind::PARTITION,
                    from,
                    to,
                }));
            }
        }
        let detail = format!(
            "source=[{}] target=[{}] one_way={one_way}",
            src.join(","),
            dst.join(",")
        );
        if self.cut(fault, cuts) {
            self.record_fault("partition", detail);
        }
    }

    /// Isolates each target node from every other process of the run, both ways.
    fn clog(&mut self, fault: &Fault, target: &[String]) {
        let nodes = self.net_nodes();
        for name in self.resolve_net(target) {
            let mut cuts = Vec::new();
            for other in nodes.iter().filter(|o| **o != name) {
                let mut links = self.keeper_links(&name, other);
                links.extend(self.keeper_links(other, &name));
                cuts.extend(links.into_iter().map(|(from, to)| Cut {
                    kind: kind::CLOG,
                    from,
                    to,
                }));
            }
            if self.cut(fault, cuts) {
                self.record_fault("clog", format!("target=[{name}]"));
            }
        }
    }

    /// The message-fault proxy in front of `server`, if the run has one (ClickHouse's
    /// HTTP listener when the scenario has `messages` faults on `clickhouse`, ZooKeeper's
    /// when it has them on `keeper`, PostgreSQL's when it has them on `postgres`; each
    /// broker's listener when it has them on brokers, [`super::needs::messages_on_brokers`]).
    fn proxy(&self, server: &str) -> Option<&Proxy> {
        if let Some(p) = self.broker_proxies.get(server) {
            return Some(p);
        }
        match &self.target {
            Target::ClickHouse(t) if server == "clickhouse" => t.proxy.as_ref(),
            Target::ClickHouse(t) if server == "keeper" => t.services.zk_proxy.as_ref(),
            Target::Postgres(t) if server == "postgres" => t.proxy.as_ref(),
            _ => None,
        }
    }

    /// Sets `settings` on the requests from each `source` node to each `target` node that
    /// has a proxy in front of it, recorded as the simulation records a `messages` fault;
    /// a target without one is noted as not injected.
    fn messages(
        &mut self,
        fault: &Fault,
        source: &[String],
        target: &[String],
        settings: MessageFaults,
    ) {
        if self.network_for(fault).is_none() {
            return;
        }
        let (src, dst) = (self.resolve_net(source), self.resolve_net(target));
        let (mut faulted, mut without) = (Vec::new(), Vec::new());
        for b in &dst {
            let Some(proxy) = self.proxy(b) else {
                without.push(b.clone());
                continue;
            };
            for a in src.iter().filter(|a| *a != b) {
                for (client, _) in self.keeper_links(a, b) {
                    proxy.set_faults(&client, settings);
                }
            }
            faulted.push(b.clone());
        }
        if !without.is_empty() {
            let why = format!(
                "message faults act through the proxies in front of ClickHouse's HTTP \
                 listener, ZooKeeper's, PostgreSQL's and the brokers' listeners only; [{}] \
                 have none",
                without.join(",")
            );
            self.unsupported(fault, &why);
        }
        let sessions = ["postgres", "keeper"];
        let duplicated = faulted.iter().filter(|t| sessions.contains(&t.as_str()));
        for server in duplicated.filter(|_| settings.duplicate_probability > 0.0) {
            let why = format!(
                "duplicates to {server}: a request belongs to its session (an open \
                 transaction and prepared statements; a ZooKeeper session and its order), \
                 so the proxy sends none again"
            );
            self.unsupported(fault, &why);
        }
        if faulted.is_empty() {
            return;
        }
        let detail = format!(
            "source=[{}] target=[{}] drop_request={:.2} drop_response={:.2} duplicate={:.2} \
             delay_ms_max={}",
            src.join(","),
            faulted.join(","),
            settings.drop_request_probability,
            settings.drop_response_probability,
            settings.duplicate_probability,
            settings.delay_ms_max
        );
        self.record_fault("messages", detail);
    }

    /// Puts `cuts` in force; whether they are (a failure to load them fails the run).
    /// Each link once: a sink task's link to `keeper` may come from two sources
    /// ([`Run::keeper_links`]).
    fn cut(&mut self, fault: &Fault, mut cuts: Vec<Cut>) -> bool {
        let mut seen = std::collections::BTreeSet::new();
        cuts.retain(|c| seen.insert(c.clone()));
        let nodes = self.net_nodes();
        // A proxy listens for its server: its port is the server's in the rules. Clients
        // (brokers among them: each advertises its proxy) reach a proxied server through
        // its proxy, so cutting the client's leg cuts the link; the proxy's own leg to the
        // server comes from eosim, no node, and is never cut.
        let servers = PROXIED_DATABASES.into_iter().map(String::from);
        let proxy_ports: Vec<(String, u16)> = (self.broker_proxies.keys().cloned())
            .chain(servers)
            .filter_map(|s| {
                let port = self.proxy(&s)?.port();
                Some((s, port))
            })
            .collect();
        let Some(net) = self.network_for(fault) else {
            return false;
        };
        for (server, port) in proxy_ports {
            net.add_ports(&server, &[port]);
        }
        match net.cut(&nodes, cuts) {
            Ok(()) => true,
            Err(e) => {
                self.fail(format!("{}: {e}", fault.name()));
                false
            }
        }
    }

    /// Heals every cut link and clears every message fault (nothing when none is in
    /// force), recording each link's dropped packets and each message fault that acted as
    /// effects, and the heal.
    fn heal_network(&mut self) {
        let messages = self.heal_messages();
        let nodes = self.net_nodes();
        let Some(Ok(net)) = &mut self.net else {
            return;
        };
        if !net.is_cut() {
            if messages {
                self.record_fault("heal", String::new());
            }
            return;
        }
        let dropped = match net.heal(&nodes) {
            Ok(d) => d,
            Err(e) => return self.fail(format!("heal: {e}")),
        };
        let (links, packets) = (
            dropped.len(),
            dropped.iter().map(|d| d.packets).sum::<u64>(),
        );
        for d in dropped.into_iter().filter(|d| d.packets > 0) {
            let on = if d.cut.kind == kind::CLOG {
                "clogged"
            } else {
                "cut"
            };
            let detail = format!(
                "{} packets from {} to {} dropped (link {on})",
                d.packets, d.cut.from, d.cut.to
            );
            self.effect(d.cut.kind, &d.cut.from, detail);
        }
        let now_s = self.now_ns() as f64 / 1e9;
        self.notes.push(format!(
            "t={now_s:.3}s heal: {links} cut link(s) restored, {packets} packet(s) dropped on \
             them while cut (nftables counters)"
        ));
        self.record_fault("heal", String::new());
    }

    /// Clears the proxy's message faults and records the faults that acted through it, at
    /// their times; whether any fault was set.
    fn heal_messages(&mut self) -> bool {
        let mut proxies: Vec<&Proxy> = self.broker_proxies.values().collect();
        for server in PROXIED_DATABASES {
            proxies.extend(self.proxy(server));
        }
        let mut was_set = false;
        let mut events = Vec::new();
        for proxy in proxies {
            was_set |= proxy.is_faulted();
            proxy.clear_faults();
            events.extend(proxy.take_events());
        }
        events.sort_by_key(|e| e.at_ns);
        let epoch_ns = self.env.epoch_ns;
        for e in events {
            let value = Value::Effect {
                kind: e.kind.into(),
                detail: e.detail,
            };
            self.push(e.at_ns.saturating_sub(epoch_ns), &e.client, value);
        }
        was_set
    }

    /// The swarm's faults for this run's seed, drawn as the simulation draws a seed's
    /// ([`swarm::draw`], [`swarm::schedule`]) from an RNG seeded with [`RunOptions::seed`]
    /// over this run's node names; the drawn parameters go into the notes.
    ///
    /// [`RunOptions::seed`]: super::RunOptions::seed
    fn swarm_schedule(&mut self) -> Vec<ScheduledFault> {
        let Some(spec) = &self.scenario.faults.swarm else {
            return Vec::new();
        };
        let rng = &mut StdRng::seed_from_u64(self.seed);
        let drawn = swarm::draw(spec, rng);
        // Sorted and distinct, as the simulation's node names are.
        let sorted = |mut names: Vec<String>| {
            names.sort();
            names.dedup();
            names
        };
        let targets = sorted(self.resolve(&spec.targets));
        let mut names = self.resolve(&["all".to_string()]);
        if matches!(self.target, super::pipelines::Target::Postgres(_)) {
            names.push("postgres".into());
        }
        let names = sorted(names);
        let topology = swarm::Topology {
            targets: &targets,
            names: &names,
            topic: &self.scenario.topic.name,
            partitions: self.scenario.topic.partitions,
        };
        let window = (swarm::START_MS, self.scenario.faults.until_ms);
        let faults = swarm::schedule(&drawn, topology, window, rng);
        self.notes.push(format!(
            "swarm of seed {}: {} ({} faults with their recoveries)",
            self.seed,
            drawn.lines().join(" "),
            faults.len() / 2
        ));
        faults
    }

    /// Node names and groups to node names, distinct, in order: a group by
    /// [`group_member`] over the brokers and the run's worker processes, as the simulation
    /// resolves it (Connect workers are in no group but `all`); `all` every broker and
    /// worker ([`Run::resolve_net`] adds the databases for network faults).
    fn resolve(&self, targets: &[String]) -> Vec<String> {
        let nodes: Vec<String> = (1..=self.scenario.cluster.brokers)
            .map(|b| format!("broker-{b}"))
            .chain(self.workers.iter().map(|w| w.name.clone()))
            .collect();
        let mut out: Vec<String> = Vec::new();
        for t in targets {
            let names: Vec<&String> = match (t.as_str(), group_member(t, "")) {
                ("all", _) => nodes.iter().collect(),
                (_, Some(_)) => (nodes.iter())
                    .filter(|n| group_member(t, n) == Some(true))
                    .collect(),
                (_, None) => vec![t],
            };
            for n in names {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        }
        out
    }

    fn broker_id(name: &str) -> Option<i32> {
        name.strip_prefix("broker-").and_then(|b| b.parse().ok())
    }

    fn worker_index(&self, name: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.name == name)
    }

    fn kafka(
        &mut self,
    ) -> Option<(
        &mut Kafka,
        &mut std::collections::BTreeSet<i32>,
        &mut std::collections::BTreeSet<i32>,
    )> {
        match &mut self.brokers {
            super::Brokers::Native {
                kafka,
                down,
                paused,
                ..
            } => Some((kafka, down, paused)),
            super::Brokers::External(_) => None,
        }
    }

    /// The database service named `name` (`postgres`; `clickhouse` and its ZooKeeper,
    /// `keeper`) with what the nemesis did to it; `None` for any other name.
    fn service(&mut self, name: &str) -> Option<(&mut dyn ServiceFaults, &mut ServiceState)> {
        match (&mut self.target, name) {
            (Target::Postgres(t), "postgres") => Some((&mut t.pg, &mut t.state)),
            (Target::ClickHouse(t), "clickhouse") => {
                let s = &mut t.services;
                Some((&mut s.ch, &mut s.ch_state))
            }
            (Target::ClickHouse(t), "keeper") => {
                let s = &mut t.services;
                Some((&mut s.zk, &mut s.zk_state))
            }
            _ => None,
        }
    }

    /// The names [`Run::service`] knows in this run.
    fn service_names(&self) -> Vec<String> {
        match &self.target {
            Target::Postgres(_) => vec!["postgres".into()],
            Target::ClickHouse(_) => vec!["clickhouse".into(), "keeper".into()],
            _ => Vec::new(),
        }
    }

    /// Records that a fault of `kind` acted on `process` ([`Value::Effect`]).
    fn effect(&mut self, kind: &'static str, process: &str, detail: String) {
        let value = Value::Effect {
            kind: kind.into(),
            detail,
        };
        self.push(self.now_ns(), process, value);
    }

    /// SIGKILLs `name` if it runs, recording the kill and its effect (of `kind`: a plain
    /// kill or the kill of a partition's leader).
    fn kill(&mut self, name: &str, kind: &'static str) {
        if let Some((service, state)) = self.service(name) {
            if state.down {
                return;
            }
            (state.down, state.paused) = (true, false);
            service.kill();
        } else if let Some(b) = Self::broker_id(name) {
            let Some((kafka, down, paused)) = self.kafka() else {
                return self.note_external(name);
            };
            if !down.insert(b) {
                return;
            }
            if let Err(e) = kafka.kill(b) {
                return self.fail(format!("kill {name}: {e}"));
            }
            paused.remove(&b);
        } else if let Some(i) = self.worker_index(name) {
            if !self.workers[i].is_running() {
                return;
            }
            self.workers[i].kill(&self.env);
        } else {
            return self.fail(format!("kill: no node named {name}"));
        }
        self.record_fault("kill", format!("target=[{name}] mode=process-kill"));
        self.effect(kind, name, format!("{name} killed (SIGKILL)"));
    }

    /// A machine crash (power loss) of `names` at once: brokers only, each SIGKILLed, then
    /// its lossy file system's unsynced writes dropped ([`Kafka::machine_crash`]); recorded
    /// as the simulation records it (`kill ... mode=machine-crash`), with an effect of
    /// `kind` per broker naming what it lost. Other targets, and brokers without the lossy
    /// file system, are noted as not injected with the reason; brokers already down are
    /// left, as a kill of a dead process does nothing.
    fn machine_crash(&mut self, fault: &Fault, names: &[String], kind: &'static str) {
        let mut brokers = Vec::new();
        for name in names {
            match Self::broker_id(name) {
                Some(b) => brokers.push(b),
                None => self.unsupported(
                    fault,
                    &format!(
                        "a machine crash of {name}: only the brokers' data directories are on \
                         the lossy file system (lazyfs)"
                    ),
                ),
            }
        }
        if brokers.is_empty() {
            return;
        }
        let why = match self.kafka() {
            None => return self.note_external("the crashed machines' brokers"),
            Some((kafka, ..)) => kafka.lossy_page_cache().err(),
        };
        if let Some(why) = why {
            let names: Vec<String> = brokers.iter().map(|b| format!("broker-{b}")).collect();
            return self.unsupported(
                fault,
                &format!("a machine crash of [{}]: {why}", names.join(",")),
            );
        }
        let Some((kafka, down, paused)) = self.kafka() else {
            return;
        };
        brokers.retain(|b| down.insert(*b));
        for b in &brokers {
            paused.remove(b);
        }
        let dropped = match kafka.machine_crash(&brokers) {
            Ok(d) => d,
            Err(e) => return self.fail(format!("machine crash: {e}")),
        };
        for (b, d) in brokers.iter().zip(dropped) {
            let name = format!("broker-{b}");
            self.record_fault("kill", format!("target=[{name}] mode=machine-crash"));
            let detail = format!(
                "{name} killed (machine-crash); lost: {} unsynced bytes in {} file(s), {} \
                 unsynced truncation(s) (lazyfs cache cleared)",
                d.bytes, d.files, d.truncations
            );
            self.effect(kind, &name, detail);
            let now_s = self.now_ns() as f64 / 1e9;
            self.notes.push(format!(
                "t={now_s:.3}s machine crash of {name}: SIGKILL, then {} unsynced bytes in {} \
                 file(s) dropped by its lossy file system",
                d.bytes, d.files
            ));
        }
    }

    /// A fault the schedule asked for that could not be carried out (a restart that failed,
    /// a node that is not there): the run goes on, and ends as crashed with it, since what
    /// it then checks is not the run the scenario describes.
    fn fail(&mut self, what: String) {
        if self.verbose {
            println!("fault failed: {what}");
        }
        self.failures.push(what);
    }

    fn restart(&mut self, name: &str) {
        if let Some((service, state)) = self.service(name) {
            if !state.down {
                return;
            }
            state.down = false;
            if let Err(e) = service.restart() {
                return self.fail(format!("restart {name}: {e}"));
            }
        } else if let Some(b) = Self::broker_id(name) {
            return self.restart_brokers(&[b]);
        } else if let Some(i) = self.worker_index(name) {
            let w = &mut self.workers[i];
            if w.is_running() || !w.has_work() {
                return;
            }
            if let Err(e) = w.start(&self.env) {
                return self.fail(format!("restart {name}: {e}"));
            }
        } else {
            return self.fail(format!("restart: no node named {name}"));
        }
        self.record_fault("restart", format!("target=[{name}]"));
    }

    /// Restarts `names`: the brokers among them together (each started, then all awaited:
    /// three combined KRaft nodes all down need two of them up to elect a controller, so
    /// one restarted alone would never register), then the others one by one.
    fn restart_all(&mut self, names: &[String]) {
        let brokers: Vec<i32> = names.iter().filter_map(|n| Self::broker_id(n)).collect();
        if !brokers.is_empty() {
            self.restart_brokers(&brokers);
        }
        for name in names.iter().filter(|n| Self::broker_id(n).is_none()) {
            self.restart(name);
        }
    }

    /// Restarts the brokers `ids` that are down ([`Kafka::restart_all`]) and records a
    /// `restart` per broker; a failure fails the run.
    fn restart_brokers(&mut self, ids: &[i32]) {
        let Some((kafka, down, _)) = self.kafka() else {
            return self.note_external("the brokers");
        };
        let ids: Vec<i32> = ids.iter().copied().filter(|b| down.remove(b)).collect();
        if ids.is_empty() {
            return;
        }
        let names: Vec<String> = ids.iter().map(|b| format!("broker-{b}")).collect();
        if let Err(e) = kafka.restart_all(&ids) {
            return self.fail(format!("restart [{}]: {e}", names.join(",")));
        }
        for name in names {
            self.record_fault("restart", format!("target=[{name}]"));
        }
    }

    fn pause(&mut self, name: &str, pause: bool) {
        let changed = if let Some((service, state)) = self.service(name) {
            let changed = !state.down && state.paused != pause;
            if changed {
                state.paused = pause;
                if pause {
                    service.pause();
                } else {
                    service.resume();
                }
            }
            changed
        } else if let Some(b) = Self::broker_id(name) {
            let Some((kafka, down, paused)) = self.kafka() else {
                return self.note_external(name);
            };
            let changed = !down.contains(&b)
                && if pause {
                    paused.insert(b)
                } else {
                    paused.remove(&b)
                };
            if changed {
                let _ = if pause {
                    kafka.pause(b)
                } else {
                    kafka.resume(b)
                };
            }
            changed
        } else if let Some(i) = self.worker_index(name) {
            self.workers[i].signal_pause(pause)
        } else {
            false
        };
        if changed {
            let verb = if pause { "pause" } else { "resume" };
            self.record_fault(verb, format!("target=[{name}]"));
            if pause {
                self.effect(kind::PAUSE, name, format!("{name} paused (SIGSTOP)"));
            }
        }
    }

    fn kill_leader(&mut self, fault: &Fault, topic: &str, partition: u32, mode: CrashMode) {
        let leader = match self.kafka() {
            Some((kafka, ..)) => kafka.partition_leader(topic, partition as i32),
            None => return self.note_external("the partition leader"),
        };
        match leader {
            Ok(Some(b)) if mode == CrashMode::MachineCrash => {
                self.machine_crash(fault, &[format!("broker-{b}")], kind::KILL_LEADER)
            }
            Ok(Some(b)) => self.kill(&format!("broker-{b}"), kind::KILL_LEADER),
            Ok(None) => {
                self.record_fault("kill-leader", format!("{topic}-{partition} has no leader"))
            }
            Err(e) => self
                .notes
                .push(format!("kill-leader {topic}-{partition}: {e}")),
        }
    }

    /// `delete-records` on the real brokers, recorded as the simulation's nemesis records
    /// it (`runner::nemesis`): each partition's target (the offset, the high watermark, or
    /// `group`'s committed offset) is found first, and the records below it read
    /// (read_uncommitted, from the log start) before `Admin.deleteRecords` removes them;
    /// then the fault with the old and new log start, the deleted records as
    /// `records-deleted` (kafka-consume's ids: the value), and a `delete-records` effect on
    /// the partition when any went. A refusal is the fault's detail and acts on nothing.
    fn delete_records(
        &mut self,
        topic: &str,
        partition: Option<u32>,
        before: DeleteBefore,
        group: Option<&str>,
    ) {
        let bootstrap = self.env.bootstrap.clone();
        let partitions = self.scenario.topic.partitions;
        let probe_group = group.unwrap_or("eosim-delete-records");
        let read = cluster::Probe::new(&bootstrap, topic, partitions, probe_group).and_then(|p| {
            // The group's coordinator may be moving (NOT_COORDINATOR): asked again for 5 s.
            let committed = match group {
                Some(_) => p.committed_retrying(Duration::from_secs(5), Duration::from_millis(500)),
                None => Ok(Vec::new()),
            };
            Ok((p.watermarks()?, committed?))
        });
        let (marks, committed) = match read {
            Ok(read) => read,
            Err(e) => return self.record_fault("delete-records", format!("refused: {e}")),
        };
        let mut targets: Vec<(TopicPartition, Offset)> = Vec::new();
        for (tp, _) in marks
            .iter()
            .filter(|(tp, _)| partition.is_none_or(|p| tp.partition == p))
        {
            let (_, high) = marks[tp];
            let target = match before {
                DeleteBefore::Offset(o) => o,
                DeleteBefore::Named(DeletePoint::HighWatermark) => high,
                DeleteBefore::Named(DeletePoint::Committed) => {
                    match committed.iter().find(|(t, _)| t == tp) {
                        Some(&(_, o)) => o,
                        None => {
                            let g = probe_group;
                            let detail =
                                format!("tp={tp} refused: group {g} has no committed offset");
                            self.record_fault("delete-records", detail);
                            continue;
                        }
                    }
                }
            };
            targets.push((tp.clone(), target));
        }
        if targets.is_empty() {
            return;
        }
        // What goes, read while it is still there: from the log start up to each target
        // (bounded by the high watermark; nothing to read where the target is at or below
        // the log start).
        let reads: BTreeMap<TopicPartition, Offset> = targets
            .iter()
            .filter(|(tp, target)| *target > marks[tp].0)
            .map(|(tp, target)| (tp.clone(), (*target).min(marks[tp].1)))
            .collect();
        let held = match cluster::read_log(&bootstrap, &reads, 30_000) {
            Ok(held) => held,
            Err(e) => return self.record_fault("delete-records", format!("refused: {e}")),
        };
        let request: Vec<(TopicPartition, Option<Offset>)> = targets
            .iter()
            .map(|(tp, o)| (tp.clone(), Some(*o)))
            .collect();
        let results = match cluster::delete_records(&bootstrap, &request) {
            Ok(results) => results,
            Err(e) => return self.record_fault("delete-records", format!("refused: {e}")),
        };
        for (tp, result) in results {
            let old = marks.get(&tp).map_or(0, |m| m.0);
            let new = match result {
                Ok(low) => low,
                Err(e) => {
                    self.record_fault("delete-records", format!("tp={tp} refused: {e}"));
                    continue;
                }
            };
            self.record_fault(
                "delete-records",
                format!("tp={tp} log_start_offset {old} -> {new}"),
            );
            let gone: Vec<RecordRef> = held
                .get(&tp)
                .into_iter()
                .flatten()
                .filter(|r| r.offset < new)
                .map(|r| r.record_ref(&tp, r.value_id()))
                .collect();
            if gone.is_empty() {
                continue;
            }
            let detail = format!(
                "{} records of {tp} deleted (log start {old} -> {new})",
                gone.len()
            );
            self.effect(kind::DELETE_RECORDS, &tp.to_string(), detail);
            let value = Value::RecordsDeleted {
                tp,
                log_start_offset: new,
                records: gone,
            };
            self.push_ok(self.now_ns(), "nemesis", value);
        }
    }

    /// `add-partitions`: `topic` grows to `count` partitions through the admin client,
    /// recorded as the fault's detail and as an `add-partitions` effect on the topic (the
    /// count before it read from metadata); a refusal is the detail alone, acting on
    /// nothing, as in simulation.
    fn add_partitions(&mut self, topic: &str, count: u32) {
        let bootstrap = self.env.bootstrap.clone();
        let before = cluster::Probe::of_scenario(&bootstrap, self.scenario, "eosim-add-partitions")
            .and_then(|p| p.partition_count(topic));
        let result = before
            .and_then(|old| cluster::create_partitions(&bootstrap, topic, count).map(|()| old));
        match result {
            Ok(old) => {
                let detail = format!("topic={topic} partitions {old} -> {count}");
                self.record_fault("add-partitions", detail);
                let effect = format!("{topic}: {old} -> {count} partitions (new: {old}..{count})");
                self.effect(kind::ADD_PARTITIONS, topic, effect);
            }
            Err(e) => {
                let detail = format!("topic={topic} count={count} refused: {e}");
                self.record_fault("add-partitions", detail);
            }
        }
    }

    /// `clock-jump`: each target worker's wall-clock offset stepped by `delta_ms` on top of
    /// earlier jumps ([`crate::real::clock::ClockOffsets::jump`]), recorded as the simulation
    /// records it. The effect is not recorded here: the worker records it when a record
    /// first carries the new offset ([`crate::client::real::wall_clock::take_moved`]), so a
    /// jump no record carried (a producer that had sent everything) counts as never acted.
    /// Brokers and databases keep the true time: a jump aimed at them is noted as not
    /// injected.
    fn clock_jump(&mut self, fault: &Fault, target: &[String], delta_ms: i64) {
        let clocks = match &self.clocks {
            Some(Ok(clocks)) => clocks.clone(),
            Some(Err(why)) => return self.unsupported(fault, &why.clone()),
            None => return self.unsupported(fault, "the run's workers were not given clock files"),
        };
        for name in self.resolve(target) {
            if !self.workers.iter().any(|w| w.name == name) {
                let why = format!(
                    "{name} keeps the true time: the real tier fakes the wall clocks of eosim's \
                     worker processes only, as the simulation's brokers and databases keep \
                     the true time"
                );
                self.unsupported(fault, &why);
                continue;
            }
            match clocks.jump(&name, delta_ms) {
                Ok(offset_ms) => self.record_fault(
                    "clock-jump",
                    format!("target=[{name}] delta_ms={delta_ms} (offset now {offset_ms:+} ms)"),
                ),
                Err(why) => self.unsupported(fault, &why),
            }
        }
    }

    /// Sets every worker's wall clock right again before the drain, as the simulation does
    /// at its heal (`clock-reset`, NTP catching up).
    fn reset_clocks(&mut self) {
        let Some(Ok(clocks)) = &self.clocks else {
            return;
        };
        match clocks.reset_all() {
            Ok(off) if off.is_empty() => {}
            Ok(off) => self.record_fault("clock-reset", format!("target=[{}]", off.join(", "))),
            Err(e) => self
                .notes
                .push(format!("the clocks could not be set right: {e}")),
        }
    }

    fn note_external(&mut self, name: &str) {
        self.notes.push(format!(
            "a fault on {name} was not injected: the brokers are external (not ours to signal)"
        ));
    }

    /// Undoes every fault: the network healed, killed brokers and workers restarted,
    /// paused ones resumed.
    pub(super) fn heal(&mut self) {
        self.heal_network();
        self.reset_clocks();
        // A process that ended by itself is not a killed one: classify it first.
        self.restart_exited();
        let mut names: Vec<String> = (1..=self.scenario.cluster.brokers)
            .map(|b| format!("broker-{b}"))
            .collect();
        names.extend(self.service_names());
        names.extend(self.workers.iter().map(|w| w.name.clone()));
        // A fault point's crash is restarted when its own `restart_after_ms` is up.
        names.retain(|n| !self.fault_point_restarts.contains_key(n));
        if matches!(self.brokers, super::Brokers::External(_)) {
            names.retain(|n| Self::broker_id(n).is_none());
        }
        for name in &names {
            self.pause(name, false);
        }
        self.restart_all(&names);
    }
}

/// The real links that carry the simulation's link from `from` to `to`, given the sink
/// tasks' workers `sink_workers`: the link itself, and where it carries KeeperMap traffic
/// in the simulation, also the sink tasks' links to ZooKeeper. In the simulation ClickHouse
/// alone talks to Keeper (its KeeperMap tables and Replicated tables) and a sink task's
/// KeeperMap queries are requests to ClickHouse; Debian's ClickHouse 18.16 has no KeeperMap,
/// so on real each worker keeps the sink's KeeperMap rows in ZooKeeper itself
/// ([`crate::client::real::zookeeper`]). Hence:
/// - `clickhouse` → `keeper` also cuts each sink worker → `keeper` (and back for back);
/// - a sink worker → `clickhouse` also cuts that worker → `keeper` (its KeeperMap queries
///   do not arrive), and `clickhouse` → the worker also cuts `keeper` → the worker (their
///   answers do not).
///
/// Used for partitions and clogs. A `messages` fault sets faults per client on the proxy of
/// the link's server only, so a worker → `clickhouse` one stays on ClickHouse's HTTP proxy
/// (mapping it would need one draw per KeeperMap query; the ZooKeeper proxy draws per
/// request).
pub(super) fn keeper_links(sink_workers: &[&str], from: &str, to: &str) -> Vec<(String, String)> {
    let mut links = vec![(from.to_string(), to.to_string())];
    let link = |a: &str, b: &str| (a.to_string(), b.to_string());
    match (from, to) {
        ("clickhouse", "keeper") => links.extend(sink_workers.iter().map(|w| link(w, to))),
        ("keeper", "clickhouse") => links.extend(sink_workers.iter().map(|w| link(from, w))),
        (w, "clickhouse") if sink_workers.contains(&w) => links.push(link(w, "keeper")),
        ("clickhouse", w) if sink_workers.contains(&w) => links.push(link("keeper", w)),
        _ => {}
    }
    links
}

#[cfg(test)]
mod tests {
    use super::keeper_links;

    fn links(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn keeper_traffic_of_the_simulation_maps_to_the_sink_workers_zookeeper_links() {
        let workers = ["worker-0", "worker-1"];
        assert_eq!(
            keeper_links(&workers, "clickhouse", "keeper"),
            links(&[
                ("clickhouse", "keeper"),
                ("worker-0", "keeper"),
                ("worker-1", "keeper")
            ])
        );
        assert_eq!(
            keeper_links(&workers, "keeper", "clickhouse"),
            links(&[
                ("keeper", "clickhouse"),
                ("keeper", "worker-0"),
                ("keeper", "worker-1")
            ])
        );
        // A sink worker's link to ClickHouse carries its KeeperMap queries in simulation.
        assert_eq!(
            keeper_links(&workers, "worker-1", "clickhouse"),
            links(&[("worker-1", "clickhouse"), ("worker-1", "keeper")])
        );
        assert_eq!(
            keeper_links(&workers, "clickhouse", "worker-0"),
            links(&[("clickhouse", "worker-0"), ("keeper", "worker-0")])
        );
        // Other links, and workers that are no sink tasks, are only themselves.
        for (from, to) in [("worker-2", "clickhouse"), ("broker-1", "clickhouse")] {
            assert_eq!(keeper_links(&workers, from, to), links(&[(from, to)]));
        }
        assert_eq!(
            keeper_links(&workers, "worker-0", "broker-1"),
            links(&[("worker-0", "broker-1")])
        );
    }
}

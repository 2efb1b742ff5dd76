//! What a scenario's faults ask of a real run before anything starts: whether its
//! processes go into cgroups for network faults, and which servers get a message-fault
//! proxy in front of them. Read by the runner when it starts the services and by the fault
//! injector ([`faults`](super::faults)); reads only the scenario.

use crate::scenario::Scenario;
use eosim_sim::kafka::model::CrashMode;
use eosim_sim::nemesis::{Fault, FaultKind};

/// Whether `scenario` schedules a network fault the real runner injects (`partition`,
/// `clog`, `messages`, in its schedule or its swarm's kinds): then the run places its
/// processes in cgroups (which also tell a proxy its clients) and opens its
/// [`Network`](crate::real::net::Network).
pub(crate) fn needs_network(scenario: &Scenario) -> bool {
    let scheduled = scenario.faults.schedule.iter().any(|f| {
        matches!(
            f.fault,
            Fault::Partition { .. } | Fault::Clog { .. } | Fault::Messages { .. }
        )
    });
    scheduled || swarms(scenario, FaultKind::Partition) || swarms(scenario, FaultKind::Messages)
}

/// Whether the scenario has `messages` faults whose targets take in a broker (`brokers`,
/// `broker-N`, `all`), scheduled or in its swarm: the run puts a proxy in front of each
/// broker's listener then.
pub(crate) fn messages_on_brokers(scenario: &Scenario) -> bool {
    let scheduled = scenario.faults.schedule.iter().any(|f| match &f.fault {
        Fault::Messages { target, .. } => names_a_broker(target),
        _ => false,
    });
    scheduled || swarms(scenario, FaultKind::Messages)
}

/// Whether the scenario crashes a broker's machine (`kill` with `mode = "machine-crash"`
/// of brokers, any `kill-leader` with it, or its swarm's `machine-crash` kind): the run
/// puts each broker's data directory on a lossy file system then ([`crate::real::lazyfs`]).
pub(crate) fn machine_crash_of_brokers(scenario: &Scenario) -> bool {
    let scheduled = scenario.faults.schedule.iter().any(|f| match &f.fault {
        Fault::Kill {
            target,
            mode: CrashMode::MachineCrash,
        } => names_a_broker(target),
        Fault::KillLeader {
            mode: CrashMode::MachineCrash,
            ..
        } => true,
        _ => false,
    });
    scheduled || swarms(scenario, FaultKind::MachineCrash)
}

/// Whether the scenario jumps a clock (`clock-jump` in its schedule or its swarm's kinds):
/// its workers then start with wall-clock offset files ([`crate::real::clock::ClockOffsets`]).
pub(crate) fn clock_jumps(scenario: &Scenario) -> bool {
    let scheduled = scenario
        .faults
        .schedule
        .iter()
        .any(|f| matches!(f.fault, Fault::ClockJump { .. }));
    scheduled || swarms(scenario, FaultKind::ClockJump)
}

/// Whether fault targets `names` take in a broker: `brokers`, `all` or a `broker-N`.
fn names_a_broker(names: &[String]) -> bool {
    names
        .iter()
        .any(|t| t == "brokers" || t == "all" || t.starts_with("broker-"))
}

/// Whether the scenario's swarm draws faults of `kind`.
fn swarms(scenario: &Scenario, kind: FaultKind) -> bool {
    scenario
        .faults
        .swarm
        .as_ref()
        .is_some_and(|s| s.kinds.contains(&kind))
}

/// Whether `scenario` schedules a `messages` fault whose target names `server` (or `all`),
/// or its swarm's kinds include `messages`: then a proxy goes in front of it. For a swarm
/// this is every database of the run, whether or not the seed's draw falls on it (the
/// draw needs the run's node names, known only once its processes start); a proxy without
/// faults passes everything.
pub(crate) fn messages_on(scenario: &Scenario, server: &str) -> bool {
    let scheduled = scenario.faults.schedule.iter().any(|f| match &f.fault {
        Fault::Messages { target, .. } => target.iter().any(|t| t == server || t == "all"),
        _ => false,
    });
    scheduled || swarms(scenario, FaultKind::Messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn scenario(faults: &str) -> Scenario {
        scenario_of("pipeline = \"kafka-consume\"\n", faults)
    }

    /// A scenario of `head` (its pipeline and sections) with `faults`.
    fn scenario_of(head: &str, faults: &str) -> Scenario {
        let text = format!("claim = \"at-least-once\"\n{head}[faults]\nuntil_ms = 9000\n{faults}");
        Scenario::parse(Path::new("scenarios/real/x.toml"), &text).unwrap()
    }

    /// Only a scheduled partition, clog or message fault, or a swarm that may draw one,
    /// opens the network (root and nft are needed then, and only then); a proxy goes in
    /// front of the servers a message fault names.
    #[test]
    fn the_network_is_opened_for_partitions_and_clogs_only() {
        let at = |fault: &str| format!("[[faults.schedule]]\nat_ms = 1000\n{fault}\n");
        assert!(!needs_network(&scenario("")));
        assert!(!needs_network(&scenario(&at(
            "fault = \"kill\"\ntarget = [\"consumer-0\"]"
        ))));
        let messages = scenario_of(
            "pipeline = \"clickhouse-sink\"\n[sink]\ntasks = 2\n",
            &at(
                "fault = \"messages\"\nsource = [\"consumer-0\"]\ntarget = [\"clickhouse\"]\n\
             drop_request_probability = 0.5",
            ),
        );
        assert!(needs_network(&messages));
        assert!(messages_on(&messages, "clickhouse"));
        assert!(!messages_on(&messages, "keeper"));
        assert!(!messages_on(&messages, "postgres"));
        let swarm = |kinds: &str| {
            let head = "pipeline = \"clickhouse-sink\"\n[sink]\ntasks = 2\n";
            scenario_of(head, &format!("[faults.swarm]\nkinds = [{kinds}]\n"))
        };
        assert!(messages_on(&swarm("\"kill\", \"messages\""), "keeper"));
        assert!(!messages_on(&swarm("\"kill\", \"partition\""), "keeper"));
        assert!(needs_network(&scenario(&at(
            "fault = \"partition\"\nsource = [\"consumer-0\"]\ntarget = [\"brokers\"]\n\
             one_way = true"
        ))));
        assert!(needs_network(&scenario(&at(
            "fault = \"clog\"\ntarget = [\"broker-1\"]"
        ))));
        assert!(needs_network(&scenario(
            "[faults.swarm]\nkinds = [\"kill\", \"partition\"]\n"
        )));
        assert!(!needs_network(&scenario(
            "[faults.swarm]\nkinds = [\"pause\"]\n"
        )));
    }

    /// Workers get wall-clock offset files for a scheduled `clock-jump` or a swarm that may
    /// draw one, and only then (each stamped record then costs a file read).
    #[test]
    fn workers_get_clock_files_only_when_a_clock_may_jump() {
        let at = |fault: &str| format!("[[faults.schedule]]\nat_ms = 1000\n{fault}\n");
        assert!(!clock_jumps(&scenario("")));
        assert!(!clock_jumps(&scenario(&at(
            "fault = \"kill\"\ntarget = [\"producer-0\"]"
        ))));
        assert!(clock_jumps(&scenario(&at(
            "fault = \"clock-jump\"\ntarget = [\"producer-0\"]\ndelta_ms = -1000"
        ))));
        assert!(clock_jumps(&scenario(
            "[faults.swarm]\nkinds = [\"kill\", \"clock-jump\"]\n"
        )));
        assert!(!clock_jumps(&scenario(
            "[faults.swarm]\nkinds = [\"pause\"]\n"
        )));
    }

    /// Brokers get message proxies for `messages` naming them, and only then.
    #[test]
    fn message_proxies_go_in_front_of_brokers_that_messages_name() {
        let at = |fault: &str| format!("[[faults.schedule]]\nat_ms = 1000\n{fault}\n");
        let on = |target: &str| {
            scenario(&at(&format!(
                "fault = \"messages\"\nsource = [\"producer-0\"]\ntarget = [\"{target}\"]\n\
                 duplicate_probability = 1.0"
            )))
        };
        assert!(messages_on_brokers(&on("brokers")));
        assert!(messages_on_brokers(&on("broker-2")));
        assert!(!messages_on_brokers(&on("consumer-0")));
        let cut = scenario(&at(
            "fault = \"partition\"\nsource = [\"consumer-0\"]\ntarget = [\"broker-1\"]",
        ));
        assert!(!messages_on_brokers(&cut));
    }
}

//! Network faults on real processes (`eosim::real::net`): a cut link really stops the
//! traffic between two processes of a run, both ways and one way, the heal restores it, the
//! drop counters see the packets, eosim's own connections are never cut, and nothing (table,
//! cgroups) is left behind. The server is a real PostgreSQL, the client a shell loop of
//! `pg_isready` probes, each in its own cgroup. Runs only with `EOSIM_REAL=1`, as root.
#![cfg(not(madsim))]

mod real_support;

use eosim::real::net::rules::Cut;
use eosim::real::net::Network;
use eosim::real::process::{Launch, ServiceProcess};
use eosim::real::provision::Postgres;
use eosim_sim::effects::kind;
use real_support::{real_enabled, service_dir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The client's probe results so far, one `ok` / `fail` per probe.
fn probes(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "ok" || *l == "fail")
        .map(str::to_string)
        .collect()
}

/// Waits (at most `max`, a bound on a hang, not a measured time) until the probes after
/// the first `from` satisfy `done`; returns them.
fn wait_probes(
    log: &Path,
    from: usize,
    max: Duration,
    done: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + max;
    loop {
        let all = probes(log);
        let new = all.get(from..).unwrap_or_default().to_vec();
        if done(&new) {
            return new;
        }
        assert!(
            Instant::now() < deadline,
            "the probes never got there; after probe {from}: {new:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cut(kind: &'static str, from: &str, to: &str) -> Cut {
    Cut {
        kind,
        from: from.into(),
        to: to.into(),
    }
}

/// Whether the probes after the first one of a cut are all failures, three of them at
/// least (the first may have been on its way when the cut came).
fn cut_off(new: &[String]) -> bool {
    new.len() >= 4 && new[1..].iter().all(|p| p == "fail")
}

fn answered(new: &[String]) -> bool {
    new.iter().any(|p| p == "ok")
}

#[test]
fn a_cut_link_stops_traffic_both_ways_and_one_way_and_the_heal_restores_it() {
    if !real_enabled("a_cut_link_stops_traffic_both_ways_and_one_way_and_the_heal_restores_it") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: network faults need root");
        return;
    }
    let mut net = Network::open().expect("root, nft and cgroup v2 are here");
    let table = net.table().to_string();
    let dir = service_dir("net");
    let pg = Postgres::start(&dir.path().join("pg")).expect("postgres starts in its cgroup");
    let bin = std::env::var_os("EOSIM_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
    let log = dir.path().join("client.log");
    let script = format!(
        "while :; do if {} -h 127.0.0.1 -p {} -t 1 >/dev/null 2>&1; then echo ok; \
         else echo fail; fi; sleep 0.1; done",
        bin.join("pg_isready").display(),
        pg.port()
    );
    let client = ServiceProcess::spawn(Launch {
        service: "client".into(),
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script],
        env: Vec::new(),
        cwd: dir.path().to_path_buf(),
        log_path: log.clone(),
        user: None,
    })
    .expect("the client starts in its cgroup");
    let nodes = ["client".to_string(), "postgres".to_string()];
    let wait = Duration::from_secs(30);
    wait_probes(&log, 0, wait, answered);

    // Both ways.
    let at = probes(&log).len();
    net.cut(
        &nodes,
        vec![
            cut(kind::PARTITION, "client", "postgres"),
            cut(kind::PARTITION, "postgres", "client"),
        ],
    )
    .expect("cut");
    wait_probes(&log, at, wait, cut_off);
    // eosim itself is no node: its connections go through.
    std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], pg.port()).into(),
        Duration::from_secs(5),
    )
    .expect("the bench reaches postgres through a partition of its processes");
    let healed = net.heal(&nodes).expect("heal");
    let to_pg = healed
        .iter()
        .find(|d| d.cut.from == "client" && d.cut.to == "postgres")
        .expect("the link client → postgres was cut");
    assert!(
        to_pg.packets > 0,
        "the client's SYNs were dropped: {healed:?}"
    );
    let at = probes(&log).len();
    wait_probes(&log, at, wait, answered);

    // One way, postgres → client: the SYN-ACKs (sent before postgres has a full socket,
    // caught by its listening port) and everything after them are dropped.
    let at = probes(&log).len();
    net.cut(&nodes, vec![cut(kind::PARTITION, "postgres", "client")])
        .expect("cut one way");
    wait_probes(&log, at, wait, cut_off);
    let healed = net.heal(&nodes).expect("heal");
    assert_eq!(healed.len(), 1, "{healed:?}");
    assert_eq!(
        (healed[0].cut.from.as_str(), healed[0].cut.to.as_str()),
        ("postgres", "client")
    );
    assert!(healed[0].packets > 0, "{healed:?}");
    let at = probes(&log).len();
    wait_probes(&log, at, wait, answered);

    drop(client);
    drop(pg);
    let cgroups = {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        eosim::real::net::cgroup::cgroup2_mount(&mounts)
            .unwrap()
            .join(format!("eosim-{}", std::process::id()))
    };
    assert!(
        cgroups.join("postgres").is_dir(),
        "postgres ran in its cgroup"
    );
    drop(net);
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft");
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(
        !tables.contains(&table),
        "table {table} left behind: {tables}"
    );
    assert!(!cgroups.exists(), "{} left behind", cgroups.display());
}

//! Network faults on real processes (`eosim::real::net`): a cut link really stops the
//! traffic between two processes of a run, both ways and one way, the heal restores it, the
//! drop counters see the packets, eosim's own connections are never cut, and nothing (table,
//! cgroups) is left behind. The server is a real PostgreSQL, the client a shell loop of
//! `pg_isready` probes, each in its own cgroup. Runs only with `EOSIM_REAL=1`, as root.
#![cfg(not(madsim))]

mod real_support;

use eosim::real::net::proxy::{Framing, Identify, MessageFaults, Proxy};
use eosim::real::net::rules::Cut;
use eosim::real::net::{node_of_connection, Network};
use eosim::real::process::{Launch, ServiceProcess};
use eosim::real::provision::Postgres;
use eosim_sim::effects::kind;
use real_support::{real_enabled, service_dir};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
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

/// Starts node `client`: a shell loop of `pg_isready` probes of `127.0.0.1:<port>`, one
/// `ok` / `fail` line per probe into `log`.
fn probe_client(dir: &Path, log: &Path, port: u16) -> ServiceProcess {
    let bin = std::env::var_os("EOSIM_PG_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"));
    let script = format!(
        "while :; do if {} -h 127.0.0.1 -p {port} -t 1 >/dev/null 2>&1; then echo ok; \
         else echo fail; fi; sleep 0.1; done",
        bin.join("pg_isready").display(),
    );
    ServiceProcess::spawn(Launch {
        service: "client".into(),
        program: PathBuf::from("/bin/sh"),
        args: vec!["-c".into(), script],
        env: Vec::new(),
        cwd: dir.to_path_buf(),
        log_path: log.to_path_buf(),
        user: None,
        container: None,
    })
    .expect("the client starts in its cgroup")
}

/// One [`Network`] per process at a time: the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// The test's turn when it can run here (`EOSIM_REAL=1` and root: network faults need
/// it), else `None`.
fn enabled(test: &str) -> Option<MutexGuard<'static, ()>> {
    if !real_enabled(test) {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: {test}: network faults need root");
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

#[test]
fn a_cut_link_stops_traffic_both_ways_and_one_way_and_the_heal_restores_it() {
    let Some(_turn) =
        enabled("a_cut_link_stops_traffic_both_ways_and_one_way_and_the_heal_restores_it")
    else {
        return;
    };
    let mut net = Network::open().expect("root, nft and cgroup v2 are here");
    let table = net.table().to_string();
    // A second run in this process is refused and leaves the first's table alone.
    let second = Network::open().expect_err("one network per process");
    assert!(second.contains("another run"), "{second}");
    let listed = std::process::Command::new("nft")
        .args(["list", "table", "inet", &table])
        .output()
        .expect("nft");
    assert!(listed.status.success(), "the refused open deleted {table}");
    let dir = service_dir("net");
    let pg = Postgres::start(&dir.path().join("pg")).expect("postgres starts in its cgroup");
    let log = dir.path().join("client.log");
    let client = probe_client(dir.path(), &log, pg.port());
    let nodes = ["client".to_string(), "postgres".to_string()];
    let wait = Duration::from_secs(30);
    wait_probes(&log, 0, wait, answered);

    // Both ways. The probes are counted once `cut` returned, the rules in: counted before,
    // a probe could start and succeed while nft was still loading them, the second after
    // `at` would be an `ok` and `cut_off` never true. Counted after, only the first one
    // after `at` may have been on its way before the rules, which `cut_off` allows.
    net.cut(
        &nodes,
        vec![
            cut(kind::PARTITION, "client", "postgres"),
            cut(kind::PARTITION, "postgres", "client"),
        ],
    )
    .expect("cut");
    let at = probes(&log).len();
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
    net.cut(&nodes, vec![cut(kind::PARTITION, "postgres", "client")])
        .expect("cut one way");
    let at = probes(&log).len();
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

/// The message-fault proxy in front of a real PostgreSQL tells its clients apart by their
/// cgroups: node `client`'s requests are dropped (its probes fail), eosim's own connection
/// through the same proxy is no node's and is answered, and the drops are the proxy's
/// events, named by the client's node.
#[test]
fn the_proxy_names_each_client_by_its_cgroup_and_faults_only_that_node() {
    let Some(_turn) =
        enabled("the_proxy_names_each_client_by_its_cgroup_and_faults_only_that_node")
    else {
        return;
    };
    let net = Network::open().expect("root, nft and cgroup v2 are here");
    let dir = service_dir("net-proxy");
    let pg = Postgres::start(&dir.path().join("pg")).expect("postgres starts in its cgroup");
    let identify: Identify = Arc::new(|peer, local| node_of_connection(peer.port(), local.port()));
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], pg.port()));
    let proxy = Proxy::start("postgres", upstream, 1, identify).expect("proxy");
    let log = dir.path().join("client.log");
    let client = probe_client(dir.path(), &log, proxy.port());
    let wait = Duration::from_secs(30);
    wait_probes(&log, 0, wait, answered);
    let drop_all = MessageFaults {
        drop_request_probability: 1.0,
        ..MessageFaults::default()
    };
    proxy.set_faults("client", drop_all);
    let at = probes(&log).len();
    wait_probes(&log, at, wait, cut_off);
    // eosim's connection through the proxy: a startup packet is answered (no node's).
    let mut own = std::net::TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
    own.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // SSLRequest (protocol 1234.5679): the server answers one byte, `N` or `S`.
    use std::io::{Read, Write};
    own.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .unwrap();
    let mut answer = [0u8; 1];
    own.read_exact(&mut answer)
        .expect("eosim's own request through the proxy is answered");
    assert!(matches!(&answer, b"N" | b"S"), "{answer:?}");
    let events = proxy.take_events();
    assert!(!events.is_empty(), "the dropped probes are events");
    assert!(
        events
            .iter()
            .all(|e| e.client == "client" && e.kind == kind::DROP_REQUEST),
        "{events:?}"
    );
    proxy.clear_faults();
    let at = probes(&log).len();
    wait_probes(&log, at, wait, answered);
    drop(client);
    drop(proxy);
    drop(pg);
    drop(net);
}

/// The proxy reading PostgreSQL's messages ([`Framing::Postgres`]) in front of a real
/// server, a tokio-postgres client as node `worker-0`: authentication goes through
/// unfaulted; a COMMIT whose answer is lost leaves the client waiting while the row is
/// committed (what the JDBC sink's ambiguous commit is); a dropped INSERT is never
/// applied; each is one event of its kind, and after the heal a new connection is served.
#[test]
fn the_postgres_framed_proxy_loses_a_commit_answer_after_the_commit_and_drops_requests_whole() {
    if !real_enabled("the_postgres_framed_proxy") {
        return;
    }
    let dir = service_dir("net-proxy-postgres");
    let pg = Postgres::start(&dir.path().join("pg")).expect("postgres starts");
    let identify: Identify = Arc::new(|_, _| Some("worker-0".to_string()));
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], pg.port()));
    let proxy =
        Proxy::start_framed("postgres", upstream, 3, identify, Framing::Postgres).expect("proxy");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect = |port: u16| {
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
        let (client, connection) = runtime
            .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
            .expect("authentication through the proxy is never faulted");
        runtime.spawn(connection);
        client
    };
    let wait = Duration::from_secs(3);
    let direct = connect(pg.port());
    runtime
        .block_on(direct.batch_execute("CREATE TABLE t (id int PRIMARY KEY)"))
        .unwrap();
    let count = |id: i32| -> i64 {
        let row = runtime
            .block_on(direct.query_one("SELECT count(*) FROM t WHERE id = $1", &[&id]))
            .unwrap();
        row.get(0)
    };
    // A lost COMMIT answer: committed, unheard.
    let client = connect(proxy.port());
    runtime
        .block_on(client.batch_execute("BEGIN; INSERT INTO t VALUES (1)"))
        .unwrap();
    let lost = MessageFaults {
        drop_response_probability: 1.0,
        ..MessageFaults::default()
    };
    proxy.set_faults("worker-0", lost);
    let commit = runtime
        .block_on(async { tokio::time::timeout(wait, client.batch_execute("COMMIT")).await });
    assert!(commit.is_err(), "the COMMIT's answer was lost: {commit:?}");
    assert_eq!(count(1), 1, "the lost answer's COMMIT was applied");
    let events = proxy.take_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, kind::DROP_RESPONSE);
    // A dropped INSERT: never applied.
    proxy.clear_faults();
    let client = connect(proxy.port());
    let dropped = MessageFaults {
        drop_request_probability: 1.0,
        ..MessageFaults::default()
    };
    proxy.set_faults("worker-0", dropped);
    let insert = runtime.block_on(async {
        tokio::time::timeout(wait, client.execute("INSERT INTO t VALUES (2)", &[])).await
    });
    assert!(insert.is_err(), "the INSERT was dropped: {insert:?}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(2), 0, "a dropped request is never applied");
    let events = proxy.take_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind, kind::DROP_REQUEST);
    // Healed: served again on a new connection, pipelined statements included.
    proxy.clear_faults();
    let client = connect(proxy.port());
    runtime
        .block_on(client.batch_execute("INSERT INTO t VALUES (3); INSERT INTO t VALUES (4)"))
        .unwrap();
    assert_eq!(count(3) + count(4), 2);
    assert!(proxy.take_events().is_empty());
    drop(proxy);
    drop(pg);
}

/// The real JDBC client ([`RealPostgres`]) through the PostgreSQL proxy: a batch whose
/// first answer is lost times out, and the client closes that session at once, as pgJDBC
/// closes a connection whose socket timed out, so the server ends the backend and rolls
/// back the transaction the batch had opened. Before, tokio-postgres kept the silenced
/// connection up while its requests waited for answers: the backend stayed idle in
/// transaction holding its row locks, and every later batch on those rows timed out (the
/// real P2 stall under lost answers). The same client's next batch on the same row is
/// served.
#[test]
fn a_batch_whose_answer_is_lost_ends_its_session_and_the_next_batch_is_served() {
    use eosim::client::postgres::PostgresClient;
    use eosim::client::real::RealPostgres;
    use eosim_sim::postgres::{Statement, Value};
    if !real_enabled("a_batch_whose_answer_is_lost_ends_its_session") {
        return;
    }
    let dir = service_dir("net-proxy-postgres-session");
    let pg = Postgres::start(&dir.path().join("pg")).expect("postgres starts");
    let identify: Identify = Arc::new(|_, _| Some("connect-1".to_string()));
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], pg.port()));
    let proxy =
        Proxy::start_framed("postgres", upstream, 5, identify, Framing::Postgres).expect("proxy");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port()
    );
    let (direct, connection) = runtime
        .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
        .unwrap();
    runtime.spawn(connection);
    runtime
        .block_on(direct.batch_execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, v bigint); INSERT INTO t VALUES (1, 0)",
        ))
        .unwrap();
    let in_transaction = || -> i64 {
        let q = "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'";
        runtime.block_on(direct.query_one(q, &[])).unwrap().get(0)
    };
    let proxied = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.port()
    );
    let mut client = RealPostgres::from_connection_string(&proxied, 2_000).expect("client");
    let update = |v: i64| {
        vec![Statement::Update {
            table: "t".into(),
            set: vec![("v".into(), Value::Int(v))],
            where_pk: vec![Value::Int(1)],
        }]
    };
    runtime
        .block_on(client.execute_batch(update(1)))
        .expect("served before the fault");
    proxy.set_faults(
        "connect-1",
        MessageFaults {
            drop_response_probability: 1.0,
            ..MessageFaults::default()
        },
    );
    let lost = runtime.block_on(client.execute_batch(update(2)));
    assert!(lost.is_err(), "the batch's answer was lost: {lost:?}");
    proxy.clear_faults();
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_transaction() > 0 {
        assert!(
            Instant::now() < deadline,
            "the timed-out session still holds its transaction open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    runtime
        .block_on(client.execute_batch(update(3)))
        .expect("the next batch on the same row is served");
    let v: i64 = runtime
        .block_on(direct.query_one("SELECT v FROM t WHERE id = 1", &[]))
        .unwrap()
        .get(0);
    assert_eq!(v, 3);
    drop(proxy);
    drop(pg);
}

//! The testcontainers backend: Kafka, PostgreSQL, ClickHouse and ZooKeeper as containers of
//! the images `eosim images` builds, each starting, answering, surviving `docker kill -s
//! KILL` + `docker start` with its committed data, and `docker pause` + `unpause`; every
//! container removed when its handle drops, and a killed run's swept by the next.
//!
//! Runs with `EOSIM_REAL=1 EOSIM_CONTAINERS=1` (a Docker daemon and the images needed: CI
//! installs `docker.io`, starts `dockerd` and runs `eosim images`); with `EOSIM_REAL=1`
//! alone it says it skipped.
#![cfg(not(madsim))]

mod real_support;

use eosim::real::container::{sweep_leftovers, Runtime};
use eosim::real::provision::{ClickHouse, Kafka, KafkaOptions, Kill, Pause, Postgres, ZooKeeper};
use real_support::{http_query, real_enabled, runtime, service_dir, timed};
use std::io::Write;
use std::process::Command;
use std::time::Duration;

/// Whether the container tests run: `EOSIM_REAL=1` and `EOSIM_CONTAINERS=1`.
fn containers_enabled(test: &str) -> bool {
    if !real_enabled(test) {
        return false;
    }
    if std::env::var("EOSIM_CONTAINERS").as_deref() == Ok("1") {
        return true;
    }
    let line = format!(
        "skipped: {test}: set EOSIM_CONTAINERS=1 to run the testcontainers backend (needs a \
         Docker daemon and `eosim images`)\n"
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

/// `docker ps -a` of this process's containers whose name holds `service`: (name, status).
fn containers(service: &str) -> Vec<(String, String)> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--filter"])
        .arg(format!("label=eosim.owner={}", std::process::id()))
        .args(["--format", "{{.Names}}\t{{.Status}}"])
        .output()
        .expect("docker ps runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(name, _)| name.contains(&format!("-{service}-")))
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect()
}

fn assert_one_running(service: &str) {
    let found = containers(service);
    assert_eq!(found.len(), 1, "{service}: one container, found {found:?}");
    assert!(
        found[0].1.starts_with("Up"),
        "{service}'s container is not running: {found:?}"
    );
}

async fn pg_query(
    conn: &str,
    sql: &str,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    let rows = client.query(sql, &[]).await?;
    drop(client);
    let _ = task.await;
    Ok(rows)
}

async fn pg_batch(conn: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    client.batch_execute(sql).await?;
    drop(client);
    let _ = task.await;
    Ok(())
}

#[test]
fn postgres_in_a_container_keeps_committed_rows_across_a_kill_and_freezes_when_paused() {
    if !containers_enabled("postgres_in_a_container_keeps_committed_rows_across_a_kill") {
        return;
    }
    let dir = service_dir("postgres");
    let mut pg = timed("postgres container start", || {
        Postgres::start_on(dir.path(), Runtime::Containers)
    })
    .expect("postgres starts in a container");
    assert_one_running("postgres");
    let conn = pg.connection_string();
    let rt = runtime();
    rt.block_on(pg_batch(
        &conn,
        "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)",
    ))
    .expect("create and insert");
    let version: String = rt
        .block_on(pg_query(&conn, "SHOW server_version"))
        .expect("SHOW")[0]
        .get(0);
    assert!(version.starts_with("15."), "PostgreSQL 15, got {version}");
    let fsync: String = rt.block_on(pg_query(&conn, "SHOW fsync")).expect("SHOW")[0].get(0);
    assert_eq!(fsync, "on", "the container's PostgreSQL must fsync");

    pg.kill();
    assert!(
        pg.pid().is_none(),
        "a killed container has no running process"
    );
    assert!(
        rt.block_on(pg_query(&conn, "SELECT 1")).is_err(),
        "a killed postgres answered"
    );
    timed("postgres container restart", || pg.restart()).expect("docker start");
    let count: i64 = rt
        .block_on(pg_query(&conn, "SELECT count(*) FROM t"))
        .expect("count")[0]
        .get(0);
    assert_eq!(count, 2, "committed rows must survive the crash");

    pg.pause();
    let paused = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(1500), pg_query(&conn, "SELECT 1")).await
    });
    assert!(paused.is_err(), "a paused postgres must not answer");
    pg.resume();
    assert!(rt.block_on(pg_query(&conn, "SELECT 1")).is_ok());
    pg.stop();
    assert!(
        containers("postgres").is_empty(),
        "the container outlived its handle: {:?}",
        containers("postgres")
    );
}

fn metadata_brokers(kafka: &Kafka) -> usize {
    kafka
        .metadata(10_000)
        .map(|m| m.brokers().len())
        .unwrap_or(0)
}

#[test]
fn kafka_in_a_container_restarts_after_a_kill_and_stops_answering_when_paused() {
    if !containers_enabled("kafka_in_a_container_restarts_after_a_kill") {
        return;
    }
    let dir = service_dir("kafka");
    let options = KafkaOptions {
        runtime: Runtime::Containers,
        ..KafkaOptions::brokers(1)
    };
    let mut kafka = timed("kafka container start", || {
        Kafka::start_with(dir.path(), options)
    })
    .expect("kafka starts in a container");
    assert_one_running("kafka-1");
    assert_eq!(metadata_brokers(&kafka), 1);
    kafka.kill(1).expect("kill");
    assert!(kafka.pids().is_empty(), "the killed node still runs");
    timed("kafka container restart", || kafka.restart(1)).expect("restart");
    assert_eq!(metadata_brokers(&kafka), 1);
    kafka.pause(1).expect("pause");
    assert!(
        kafka.metadata(1_500).is_err(),
        "a paused broker answered a metadata request"
    );
    kafka.resume(1).expect("resume");
    assert_eq!(metadata_brokers(&kafka), 1);
    drop(kafka);
    assert!(containers("kafka").is_empty(), "{:?}", containers("kafka"));
}

#[test]
fn clickhouse_with_zookeeper_in_containers_keeps_its_parts_across_a_kill() {
    if !containers_enabled("clickhouse_with_zookeeper_in_containers") {
        return;
    }
    let zk_dir = service_dir("zookeeper");
    let zk = timed("zookeeper container start", || {
        ZooKeeper::start_on(zk_dir.path(), Runtime::Containers)
    })
    .expect("zookeeper starts in a container");
    let ch_dir = service_dir("clickhouse");
    let mut ch = timed("clickhouse container start", || {
        ClickHouse::start_on(
            ch_dir.path(),
            Some(&zk.connect_string()),
            Runtime::Containers,
        )
    })
    .expect("clickhouse starts in a container");
    assert_one_running("clickhouse");
    assert_one_running("zookeeper");
    let port = ch.http_port();
    assert_eq!(
        http_query(port, "SELECT version()").unwrap().trim(),
        "18.16.1"
    );
    let zk_root = http_query(
        port,
        "SELECT count() FROM system.zookeeper WHERE path = '/'",
    )
    .unwrap();
    assert!(
        zk_root.trim().parse::<u64>().is_ok_and(|n| n >= 1),
        "ClickHouse does not reach ZooKeeper: {zk_root}"
    );
    http_query(
        port,
        "CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x",
    )
    .unwrap();
    http_query(port, "INSERT INTO t VALUES (1), (2), (3)").unwrap();
    ch.kill();
    assert!(
        http_query(port, "SELECT 1").is_err(),
        "a killed server answered"
    );
    timed("clickhouse container restart", || ch.restart()).expect("docker start");
    assert_eq!(
        http_query(port, "SELECT count() FROM t").unwrap().trim(),
        "3"
    );
    ch.stop();
    zk.stop();
    assert!(containers("clickhouse").is_empty() && containers("zookeeper").is_empty());
}

#[test]
fn a_killed_runs_containers_are_swept_by_the_next_and_live_ones_are_not() {
    if !containers_enabled("a_killed_runs_containers_are_swept") {
        return;
    }
    // A container labelled as owned by a pid that does not exist (above pid_max's
    // default), as a SIGKILLed eosim leaves one; and one owned by this live process.
    let start = |owner: String, name: &str| {
        let out = Command::new("docker")
            .args(["run", "-d", "--name", name, "--label"])
            .arg(format!("eosim.owner={owner}"))
            .args([eosim::real::container::images::BASE_IMAGE, "sleep", "300"])
            .output()
            .expect("docker run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let me = std::process::id();
    let dead = format!("eosim-test-dead-owner-{me}");
    let live = format!("eosim-test-live-owner-{me}");
    start("4194304".into(), &dead);
    start(me.to_string(), &live);
    let removed = sweep_leftovers().expect("sweep");
    let _ = Command::new("docker").args(["rm", "-f", &live]).output();
    assert!(removed.contains(&dead), "{dead} not swept: {removed:?}");
    assert!(
        !removed.contains(&live),
        "a live owner's container was swept"
    );
}

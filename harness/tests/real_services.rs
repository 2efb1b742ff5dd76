//! PostgreSQL, ClickHouse and ZooKeeper from Debian's packages, started natively: each
//! starts, answers, survives SIGKILL + restart and SIGSTOP + SIGCONT, stops, and leaves no
//! process behind; Ctrl-C tears everything down. Runs only with `EOSIM_REAL=1`.
#![cfg(not(madsim))]

mod real_support;

use eosim::real::process::{group_exists, EXIT_CODE_SIGNALLED};
use eosim::real::provision::{ClickHouse, Kill, Pause, Postgres, ZooKeeper};
use real_support::{assert_group_gone, http_query, real_enabled, runtime, service_dir, timed};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

async fn pg_select_one(conn: &str) -> Result<i32, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls).await?;
    let task = tokio::spawn(connection);
    let row = client.query_one("SELECT 1 + 0", &[]).await?;
    drop(client);
    let _ = task.await;
    Ok(row.get(0))
}

#[test]
fn postgres_starts_answers_survives_kill_and_pause_and_leaves_nothing() {
    if !real_enabled("postgres_starts_answers_survives_kill_and_pause_and_leaves_nothing") {
        return;
    }
    let dir = service_dir("postgres");
    let mut pg = timed("postgres start", || Postgres::start(dir.path())).expect("postgres starts");
    let rt = runtime();
    assert_eq!(
        rt.block_on(pg_select_one(&pg.connection_string()))
            .expect("SELECT 1"),
        1
    );
    let first = pg.pid().expect("running");
    pg.kill();
    assert_group_gone("postgres", first);
    timed("postgres restart after SIGKILL", || pg.restart()).expect("restarts");
    assert_eq!(
        rt.block_on(pg_select_one(&pg.connection_string()))
            .expect("SELECT 1"),
        1
    );
    pg.pause();
    let paused = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_millis(1500),
            pg_select_one(&pg.connection_string()),
        )
        .await
    });
    assert!(paused.is_err(), "a paused postgres must not answer");
    pg.resume();
    assert_eq!(
        rt.block_on(pg_select_one(&pg.connection_string()))
            .expect("SELECT 1"),
        1
    );
    let pgid = pg.pid().expect("running");
    pg.stop();
    assert_group_gone("postgres", pgid);
}

#[test]
fn clickhouse_starts_answers_survives_kill_and_leaves_nothing() {
    if !real_enabled("clickhouse_starts_answers_survives_kill_and_leaves_nothing") {
        return;
    }
    let dir = service_dir("clickhouse");
    let mut ch =
        timed("clickhouse start", || ClickHouse::start(dir.path())).expect("clickhouse starts");
    assert_eq!(
        http_query(ch.http_port(), "SELECT version()")
            .unwrap()
            .trim(),
        "18.16.1"
    );
    http_query(
        ch.http_port(),
        "CREATE TABLE t (x UInt64) ENGINE = MergeTree ORDER BY x",
    )
    .unwrap();
    http_query(ch.http_port(), "INSERT INTO t VALUES (1), (2), (3)").unwrap();
    let first = ch.pid().expect("running");
    ch.kill();
    assert_group_gone("clickhouse", first);
    timed("clickhouse restart after SIGKILL", || ch.restart()).expect("restarts");
    assert_eq!(
        http_query(ch.http_port(), "SELECT count() FROM t")
            .unwrap()
            .trim(),
        "3"
    );
    ch.pause();
    ch.resume();
    assert_eq!(http_query(ch.http_port(), "SELECT 1").unwrap().trim(), "1");
    let pgid = ch.pid().expect("running");
    ch.stop();
    assert_group_gone("clickhouse", pgid);
}

fn four_letter(port: u16, word: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(word.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

#[test]
fn zookeeper_starts_answers_survives_kill_and_leaves_nothing() {
    if !real_enabled("zookeeper_starts_answers_survives_kill_and_leaves_nothing") {
        return;
    }
    let dir = service_dir("zookeeper");
    let mut zk =
        timed("zookeeper start", || ZooKeeper::start(dir.path())).expect("zookeeper starts");
    assert_eq!(four_letter(zk.port(), "ruok").unwrap(), "imok");
    assert!(four_letter(zk.port(), "srvr")
        .unwrap()
        .contains("Mode: standalone"));
    let first = zk.pid().expect("running");
    zk.kill();
    assert_group_gone("zookeeper", first);
    timed("zookeeper restart after SIGKILL", || zk.restart()).expect("restarts");
    assert_eq!(four_letter(zk.port(), "ruok").unwrap(), "imok");
    let pgid = zk.pid().expect("running");
    drop(zk);
    assert_group_gone("zookeeper", pgid);
}

/// Run by [`ctrl_c_kills_every_service_process`] in a child process of this test binary:
/// starts ClickHouse, prints its pid, and waits to be interrupted.
#[test]
#[ignore = "helper: run by ctrl_c_kills_every_service_process in a child process"]
fn ctrl_c_helper_starts_clickhouse_and_waits() {
    if std::env::var("EOSIM_CTRL_C_HELPER").as_deref() != Ok("1") {
        return;
    }
    let dir = service_dir("clickhouse-ctrl-c");
    let ch = ClickHouse::start(dir.path()).expect("clickhouse starts");
    // The process exits on the signal, so the temp dir is not dropped: the parent removes it.
    let line = format!(
        "SERVICE_DIR={}\nSERVICE_PID={}\n",
        dir.path().display(),
        ch.pid().expect("running")
    );
    let _ = std::io::stdout().write_all(line.as_bytes());
    let _ = std::io::stdout().flush();
    std::thread::sleep(Duration::from_secs(120));
    panic!("not interrupted within 120 s");
}

/// Starts [`ctrl_c_helper_starts_clickhouse_and_waits`] in a child process; returns it,
/// its service directory and ClickHouse's pid (its process group).
fn start_helper() -> (std::process::Child, String, i32) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = std::process::Command::new(exe)
        .args([
            "--exact",
            "ctrl_c_helper_starts_clickhouse_and_waits",
            "--ignored",
            "--nocapture",
        ])
        .env("EOSIM_CTRL_C_HELPER", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("helper starts");
    let stdout = child.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let dir = lines.find_map(|l| l.strip_prefix("SERVICE_DIR=").map(str::to_string));
    let dir = dir.expect("helper printed its directory");
    let pid: i32 = lines
        .find_map(|l| {
            l.strip_prefix("SERVICE_PID=")
                .map(|p| p.trim().parse().expect("pid"))
        })
        .expect("helper printed the service pid");
    assert!(group_exists(pid), "clickhouse runs before the signal");
    (child, dir, pid)
}

#[test]
fn ctrl_c_kills_every_service_process() {
    if !real_enabled("ctrl_c_kills_every_service_process") {
        return;
    }
    let (mut child, dir, pid) = start_helper();
    // SAFETY: kill with a pid we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("helper exits");
    assert_eq!(
        status.code(),
        Some(EXIT_CODE_SIGNALLED),
        "exit code after Ctrl-C"
    );
    assert_group_gone("clickhouse (after Ctrl-C)", pid);
    std::fs::remove_dir_all(&dir).expect("remove the helper's directory");
}

#[test]
fn a_sigkilled_eosim_leaves_no_service_behind() {
    if !real_enabled("a_sigkilled_eosim_leaves_no_service_behind") {
        return;
    }
    let (mut child, dir, pid) = start_helper();
    // SIGKILL runs no handler: only the group's watchdog can take ClickHouse down.
    child.kill().expect("SIGKILL the helper");
    child.wait().expect("helper reaped");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while group_exists(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_group_gone("clickhouse (after SIGKILL of its owner)", pid);
    std::fs::remove_dir_all(&dir).expect("remove the helper's directory");
}

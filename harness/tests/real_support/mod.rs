//! Shared by the real-tier tests (`real_*.rs`): the `EOSIM_REAL=1` gate, a runtime, and
//! checks that no process was left behind.
#![allow(dead_code)]

use std::io::{Read, Write};

/// Whether the real tier is enabled; prints a visible skip line (past libtest's output
/// capture) when it is not.
pub fn real_enabled(test: &str) -> bool {
    if std::env::var("EOSIM_REAL").as_deref() == Ok("1") {
        return true;
    }
    let line = format!(
        "skipped: {test}: set EOSIM_REAL=1 to run the real tier (needs .ci/install-real-services)\n"
    );
    // Straight to the stderr handle: libtest captures only the print macros.
    let _ = std::io::stderr().write_all(line.as_bytes());
    false
}

pub mod model_world;

/// A multi-threaded tokio runtime (rdkafka's futures and blocking calls run on it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// One native Kafka broker (KRaft) in a fresh [`service_dir`] named `name`, its start
/// timed. The directory comes second so that it outlives the broker when the pair drops.
///
/// # Panics
/// When the broker does not start.
pub fn one_broker(name: &str) -> (eosim::real::provision::Kafka, tempfile::TempDir) {
    let dir = service_dir(name);
    let kafka = timed("kafka (1 broker) start", || {
        eosim::real::provision::Kafka::start(dir.path(), 1)
    })
    .expect("kafka starts");
    (kafka, dir)
}

/// A temporary directory for one service; kept (not deleted) when `EOSIM_KEEP_DIRS=1`.
pub fn service_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("eosim-{name}-"))
        .tempdir()
        .expect("temp dir");
    if std::env::var("EOSIM_KEEP_DIRS").as_deref() == Ok("1") {
        let _ =
            std::io::stderr().write_all(format!("{name}: {}\n", dir.path().display()).as_bytes());
    }
    dir
}

/// Processes whose process group is `pgid`, from `pgrep -g` (empty when none).
pub fn processes_in_group(pgid: i32) -> Vec<String> {
    let out = std::process::Command::new("pgrep")
        .args(["-g", &pgid.to_string(), "-a"])
        .output()
        .expect("pgrep runs (procps)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Asserts that no process of group `pgid` is left.
pub fn assert_group_gone(service: &str, pgid: i32) {
    let left = processes_in_group(pgid);
    assert!(
        left.is_empty(),
        "{service}: processes left behind in group {pgid}: {left:?}"
    );
}

/// Times `f`, prints `<what> took <ms> ms` past the capture, returns its value.
pub fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = std::time::Instant::now();
    let v = f();
    let line = format!("{what} took {} ms\n", started.elapsed().as_millis());
    let _ = std::io::stderr().write_all(line.as_bytes());
    v
}

/// The number of generated cases of a model-versus-real suite: `EOSIM_DIFF_CASES`, or
/// `default`.
pub fn diff_cases(default: u32) -> u32 {
    std::env::var("EOSIM_DIFF_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A proptest runner for a model-versus-real suite: `cases` cases, at most
/// `max_shrink_iters` shrink steps, generation seeded from `EOSIM_DIFF_SEED` (default 1,
/// printed) so that a run generates the same sequences again and a suite's check of what it
/// exercised does not depend on luck, and the regression corpus `corpus` (proptest's
/// failure persistence file, see [`corpus_path`]): the cases kept there run first, and a
/// new failure's seed (after shrinking) is appended to it.
pub fn diff_runner(
    cases: u32,
    max_shrink_iters: u32,
    corpus: &'static str,
) -> proptest::test_runner::TestRunner {
    use proptest::test_runner::{Config, FileFailurePersistence, RngSeed, TestRunner};
    let seed = std::env::var("EOSIM_DIFF_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let line = format!(
        "differential: {cases} cases, generation seed {seed} (EOSIM_DIFF_SEED), corpus {corpus}\n"
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    TestRunner::new(Config {
        cases,
        max_shrink_iters,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(corpus))),
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    })
}

/// The regression corpus of `suite`: `harness/tests/differential-corpus/<suite>.txt`
/// (lower case, spaces as dashes), committed, one `cc <seed>` line per difference ever
/// found. Proptest replays each kept seed through the suite's strategy before the
/// generated cases.
pub fn corpus_path(suite: &str) -> &'static str {
    let slug: String = suite
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '-',
        })
        .collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/differential-corpus");
    Box::leak(format!("{dir}/{slug}.txt").into_boxed_str())
}

/// Runs a model-versus-real suite: the cases of its regression corpus ([`corpus_path`]),
/// then `cases` sequences generated from `strategy` by [`diff_runner`] (at most `max_shrink_iters` shrink steps), each handed to `case` with its
/// number (0, 1, ..., shrink runs included; real-side names such as topics and groups are
/// made unique from it). `case` runs the sequence against the model and the real service and
/// returns the kinds of what it exercised (each counted once per occurrence), or the
/// difference as a failure.
///
/// Returns (cases agreeing, cases run, the tally of kinds over the agreeing cases), as
/// [`report_agreement`] takes them.
///
/// # Panics
/// On the first difference, after shrinking, with `suite`, the agreement so far and the
/// failure `case` gave.
pub fn run_differential<S: proptest::strategy::Strategy>(
    suite: &str,
    cases: u32,
    max_shrink_iters: u32,
    strategy: S,
    case: impl Fn(u32, S::Value) -> Result<Vec<String>, proptest::test_runner::TestCaseError>,
) -> (u32, u32, std::collections::BTreeMap<String, u32>) {
    use std::sync::atomic::{AtomicU32, Ordering};
    let mut runner = diff_runner(cases, max_shrink_iters, corpus_path(suite));
    let ran = AtomicU32::new(0);
    let agreed = AtomicU32::new(0);
    let tally = std::sync::Mutex::new(std::collections::BTreeMap::<String, u32>::new());
    let result = runner.run(&strategy, |value| {
        let exercised = case(ran.fetch_add(1, Ordering::Relaxed), value)?;
        agreed.fetch_add(1, Ordering::Relaxed);
        let mut tally = tally.lock().expect("tally lock");
        for kind in exercised {
            *tally.entry(kind).or_default() += 1;
        }
        Ok(())
    });
    let (agreed, ran) = (agreed.into_inner(), ran.into_inner());
    if let Err(e) = result {
        panic!("model and real differ: {suite} ({agreed} of {ran} runs agreed, shrink runs included): {e}");
    }
    (agreed, ran, tally.into_inner().expect("tally lock"))
}

/// Asserts that the agreeing cases of a suite exercised each of `kinds`: some key of
/// `tally` starts with it (a suite that never reached what it is about proves nothing).
///
/// # Panics
/// Naming the first kind missing, with the tally.
pub fn assert_exercised(tally: &std::collections::BTreeMap<String, u32>, kinds: &[&str]) {
    for kind in kinds {
        assert!(
            tally.keys().any(|k| k.starts_with(kind)),
            "the generated cases never exercised `{kind}`: {tally:?}"
        );
    }
}

/// Where the model-versus-real suites write their agreement lines:
/// `EOSIM_DIFF_REPORT`, or `reports/real/differential.md` under the workspace.
pub fn diff_report_path() -> std::path::PathBuf {
    match std::env::var_os("EOSIM_DIFF_REPORT") {
        Some(p) => p.into(),
        None => {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/real/differential.md")
        }
    }
}

/// Reports a suite's agreement: `agreed` of `ran` cases, and the tally of what the cases
/// exercised, to stderr (past the capture) and as a line appended to
/// [`diff_report_path`] (a Markdown table row: suite, agreed, cases, rate, exercised).
pub fn report_agreement<K: std::fmt::Display>(
    suite: &str,
    agreed: u32,
    ran: u32,
    tally: &std::collections::BTreeMap<K, u32>,
) {
    let rate = if ran == 0 {
        0.0
    } else {
        100.0 * f64::from(agreed) / f64::from(ran)
    };
    let exercised: Vec<String> = tally.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
    let line = format!(
        "| {suite} | {agreed} | {ran} | {rate:.0} % | {} |\n",
        exercised.join(", ")
    );
    let _ = std::io::stderr().write_all(
        format!("differential agreement: {suite}: {agreed} of {ran} cases\n").as_bytes(),
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    let path = diff_report_path();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let new = !path.exists();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path);
    match file {
        Ok(mut f) => {
            if new {
                let _ = f.write_all(
                    b"| suite | agreed | cases | agreement | exercised |\n|---|---|---|---|---|\n",
                );
            }
            let _ = f.write_all(line.as_bytes());
        }
        Err(e) => {
            let _ = std::io::stderr()
                .write_all(format!("differential report {}: {e}\n", path.display()).as_bytes());
        }
    }
}

/// `sql` over ClickHouse's HTTP interface on `127.0.0.1:port` (HTTP/1.0, no client): the
/// body of the answer.
pub fn http_query(port: u16, sql: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let body = sql.as_bytes();
    let head = format!(
        "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string())
}

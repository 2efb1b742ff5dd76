//! `index.html` rendered in headless Chromium (Debian's `chromium`): the page's script runs,
//! the DOM shows the claims matrix (a row per scenario), the fault timeline and SVG plots
//! with data points, and a screenshot lands in the test's output dir
//! (`$CARGO_TARGET_TMPDIR/html_report/index.png`).
//!
//! The report is built from a small literal history (sends, writes, a broker kill and
//! restart, a partition healed, fault effects) written where a run writes a failing seed's
//! history, so the test needs no simulation. Without `/usr/bin/chromium` it prints why and
//! skips; `.ci/run` installs it, so in CI it runs.

use eosim::history::{History, OpKind, RecordRef, Value};
use eosim::report::{
    write_report, Counterexample, EffectCount, RunReport, ScenarioResult, Verdict,
};
use eosim_sim::kafka::TopicPartition;
use std::path::{Path, PathBuf};
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";
const S: u64 = 1_000_000_000;

fn fault(h: &mut History, t: u64, name: &str, detail: &str) {
    let value = Value::Fault {
        name: name.into(),
        detail: detail.into(),
    };
    h.push(t, "nemesis", OpKind::Info, value, None);
}

/// 40 records sent over 20 s and written 0.3 s later, except while broker-1 is down
/// (kill at 5 s, restart at 9 s): those are written after the restart. A partition from 12
/// s to 14 s, and an effect per fault.
fn history() -> History {
    let mut h = History::default();
    for id in 0..40u64 {
        let t = id * S / 2;
        let send = |tp, offset| Value::Send {
            id,
            key: None,
            tp,
            offset,
        };
        h.push(t, "producer-0", OpKind::Invoke, send(None, None), None);
        let tp = TopicPartition::new("events", 0);
        h.push(
            t + S / 10,
            "producer-0",
            OpKind::Ok,
            send(Some(tp.clone()), Some(id as i64)),
            None,
        );
        let written = if (5 * S..9 * S).contains(&t) {
            9 * S + id
        } else {
            t + S * 3 / 10
        };
        let rows = vec![RecordRef {
            id,
            key: None,
            tp,
            offset: id as i64,
        }];
        h.push(written, "worker-0", OpKind::Ok, Value::Write { rows }, None);
        if id == 10 {
            fault(&mut h, 5 * S, "kill", "target=[broker-1] mode=process-kill");
            let effect = Value::Effect {
                kind: "kill".into(),
                detail: "broker-1 killed (process-kill); lost: 2 requests in flight".into(),
            };
            h.push(5 * S, "broker-1", OpKind::Info, effect, None);
        }
        if id == 18 {
            fault(&mut h, 9 * S, "restart", "target=[broker-1]");
        }
        if id == 24 {
            fault(
                &mut h,
                12 * S,
                "partition",
                "source=[worker-0] target=[broker-1] one_way=false",
            );
        }
        if id == 28 {
            fault(&mut h, 14 * S, "heal", "");
        }
    }
    h.ops.sort_by_key(|op| op.time_ns);
    for (i, op) in h.ops.iter_mut().enumerate() {
        op.index = i;
    }
    h
}

fn report(dir: &Path) -> RunReport {
    let history_path = dir.join("demo-violated").join("3").join("history.jsonl");
    std::fs::create_dir_all(history_path.parent().unwrap()).unwrap();
    std::fs::write(&history_path, history().to_jsonl()).unwrap();
    let mut violated = ScenarioResult::new("demo-violated", "connect-jdbc", "exactly-once");
    violated.verdict = Verdict::Violated;
    violated.seeds = 5;
    violated.faults_injected = 2;
    violated
        .forbidden_anomalies
        .insert("sink-duplicate".into(), 3);
    violated.anomalies.insert("sink-duplicate".into(), 3);
    violated.marks.insert("jdbc:upsert".into(), 40);
    let kill = EffectCount {
        scheduled: 5,
        acted: 5,
        seeds_scheduled: 5,
        seeds_acted: 5,
    };
    violated.fault_effects.insert("kill".into(), kill);
    violated.counterexample = Some(Counterexample {
        seed: 3,
        replay: "cargo xtask sim --scenario scenarios/demo-violated.toml --seed 3".into(),
        faults: vec!["t=5.000s kill target=[broker-1] mode=process-kill".into()],
        history_path: history_path.display().to_string(),
        anomalies: vec!["sink-duplicate: id 12 written twice <b>not bold</b>".into()],
        explanations: vec![],
        shrunk: None,
    });
    let mut holds = ScenarioResult::new("demo-holds", "kafka-consume", "at-least-once");
    holds.verdict = Verdict::Holds;
    holds.seeds = 5;
    RunReport {
        run_id: "html-test".into(),
        build: "test".into(),
        started_at: "2026-12-02T00:00:00Z".into(),
        scenarios: vec![violated, holds],
    }
}

fn chromium(dir: &Path, args: &[String]) -> std::process::Output {
    let profile = dir.join(format!("profile-{}", args.len()));
    Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .expect("chromium runs")
}

#[test]
fn index_html_renders_the_matrix_a_timeline_and_plots_in_headless_chromium() {
    if !Path::new(CHROMIUM).exists() {
        println!("SKIPPED: {CHROMIUM} is missing (apt-get install -y chromium); not rendered");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("html_report");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    write_report(&dir, &report(&dir)).unwrap();
    let page = std::fs::canonicalize(dir.join("index.html")).unwrap();
    let url = format!("file://{}", page.display());
    let dom = chromium(&dir, &["--dump-dom".into(), url.clone()]);
    let dom = String::from_utf8_lossy(&dom.stdout).to_string();
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page's script ran: {}",
        &dom[..dom.len().min(400)]
    );
    assert_eq!(
        dom.matches("class=\"scenario-row\"").count(),
        2,
        "a matrix row per scenario"
    );
    assert!(
        dom.contains("showing 2 of 2 scenarios"),
        "the filter counted the rows"
    );
    let timeline = dom
        .split("class=\"plot timeline\"")
        .nth(1)
        .expect("a timeline");
    let timeline = &timeline[..timeline.find("</svg>").expect("the timeline is an svg")];
    assert!(
        timeline.contains(">\nkill\n</text>") && timeline.contains(">\npartition\n</text>"),
        "fault lanes"
    );
    assert!(
        timeline.matches("<rect").count() >= 4,
        "background, area, two bands, a tick"
    );
    let points = dom
        .split("<polyline")
        .skip(1)
        .filter_map(|p| p.split("points=\"").nth(1)?.split('"').next())
        .map(|p| p.split_whitespace().count())
        .max()
        .unwrap_or(0);
    assert!(points >= 10, "a plot line with data points, got {points}");
    assert!(
        dom.contains("&lt;b&gt;not bold&lt;/b&gt;"),
        "case text is escaped"
    );
    let shot = dir.join("index.png");
    let args = [
        format!("--screenshot={}", shot.display()),
        "--window-size=1280,2000".into(),
        url,
    ];
    let out = chromium(&dir, &args);
    assert!(
        shot.is_file(),
        "screenshot written: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("screenshot: {}", shot.display());
}

//! One-line renderings for the terminal: history ops, durations, run headers (STYLE §15).

use super::ExitClass;
use crate::history::{Op, OpKind, Value};
use crate::report::{ScenarioResult, Verdict};
use eosim_sim::kafka::{Offset, TopicPartition};

/// Ids listed per poll or write line before eliding the rest.
const IDS_SHOWN_MAX: usize = 8;

/// One op as a line: `t=12.345s nemesis kill broker-2`,
/// `t=0.120s producer-0 ok send id=3 key=k3 tp=events-1 offset=5`.
pub fn format_op(op: &Op) -> String {
    let t = format!(
        "t={}.{:03}s",
        op.time_ns / 1_000_000_000,
        op.time_ns / 1_000_000 % 1_000
    );
    let body = match &op.value {
        // Faults read as the nemesis's verbs, without the phase.
        Value::Fault { name, detail } => format!("{name} {detail}").trim_end().to_string(),
        // Effects read as what happened: `effect messages.duplicate: Produce ... twice`.
        Value::Effect { kind, detail } => format!("effect {kind}: {detail}"),
        value => format!("{} {}", kind_name(op.kind), format_value(value)),
    };
    let mut line = format!("{t} {} {body}", op.process);
    if let Some(error) = &op.error {
        line.push_str(&format!(" error={error:?}"));
    }
    line
}

/// The phase as the history spells it: `invoke`, `ok`, `fail`, `info`.
pub fn kind_name(kind: OpKind) -> &'static str {
    match kind {
        OpKind::Invoke => "invoke",
        OpKind::Ok => "ok",
        OpKind::Fail => "fail",
        OpKind::Info => "info",
    }
}

fn format_value(value: &Value) -> String {
    match value {
        Value::Send {
            id,
            key,
            tp,
            offset,
        } => {
            let mut s = format!("send id={id}");
            if let Some(key) = key {
                s.push_str(&format!(" key={key}"));
            }
            if let Some(tp) = tp {
                s.push_str(&format!(" tp={tp}"));
            }
            if let Some(offset) = offset {
                s.push_str(&format!(" offset={offset}"));
            }
            s
        }
        Value::Poll { records } => format!("poll {}", ids(records.iter().map(|r| r.id))),
        Value::Write { rows } => format!("write {}", ids(rows.iter().map(|r| r.id))),
        Value::SinkState { rows } => format!("sink-state {}", ids(rows.iter().map(|r| r.id))),
        Value::Commit { offsets } => format!("commit {}", offsets_text(offsets)),
        Value::CommittedOffsets { offsets } => {
            format!("committed-offsets {}", offsets_text(offsets))
        }
        Value::LogState { tp, records } => {
            format!("log-state tp={tp} {}", ids(records.iter().map(|r| r.id)))
        }
        Value::Txn {
            id,
            transactional_id,
            sends,
            offsets,
        } => format!(
            "txn id={id} transactional_id={transactional_id} sends {} offsets {}",
            ids(sends.iter().map(|r| r.id)),
            offsets_text(offsets)
        ),
        Value::PartitionState {
            tp,
            high_watermark,
            last_stable_offset,
        } => format!(
            "partition-state tp={tp} high_watermark={high_watermark} \
             last_stable_offset={last_stable_offset}"
        ),
        Value::StreamsInput { tp, records } => {
            format!(
                "streams-input tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::StreamsOutput { tp, records } => format!(
            "streams-output tp={tp} updates={} last={}",
            records.len(),
            records.last().map_or(String::new(), |u| format!(
                "{}@{}->{}",
                u.key, u.window_start_ms, u.count
            ))
        ),
        Value::StreamsRecover { reason, tasks } => {
            format!("streams-recover tasks={tasks:?} reason={reason}")
        }
        Value::StreamsWindow { window_size_ms } => {
            format!("streams-window window_size_ms={window_size_ms}")
        }
        Value::StreamsCommit {
            guarantee,
            records,
            offsets,
        } => format!(
            "streams-commit {guarantee} records={records} offsets {}",
            offsets_text(offsets)
        ),
        Value::StreamsRestore {
            tp,
            store,
            from_offset,
            restored,
        } => format!(
            "streams-restore tp={tp} store={store} from_offset={from_offset} restored={restored}"
        ),
        Value::CommittedLogState { tp, records } => {
            format!(
                "committed-log-state tp={tp} {}",
                ids(records.iter().map(|r| r.id))
            )
        }
        Value::Fault { name, detail } => format!("{name} {detail}"),
        Value::LoadErrors { label, rows } => {
            format!(
                "load-errors label={label} {}",
                ids(rows.iter().map(|r| r.id))
            )
        }
        Value::DorisState { jobs, txns } => format!(
            "doris-state jobs={} txns={} {}",
            jobs.len(),
            txns.len(),
            jobs.iter()
                .map(|j| format!(
                    "{}={} loaded={} errors={}",
                    j.name, j.state, j.loaded_rows, j.error_rows
                ))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Value::Drain => "drain".to_string(),
        other => other.connect_text().unwrap_or_default(),
    }
}

fn ids(ids: impl ExactSizeIterator<Item = u64>) -> String {
    let n = ids.len();
    let shown: Vec<String> = ids.take(IDS_SHOWN_MAX).map(|id| id.to_string()).collect();
    let more = if n > IDS_SHOWN_MAX { ",…" } else { "" };
    format!("n={n} ids=[{}{more}]", shown.join(","))
}

fn offsets_text(offsets: &[(TopicPartition, Offset)]) -> String {
    let parts: Vec<String> = offsets.iter().map(|(tp, o)| format!("{tp}={o}")).collect();
    parts.join(" ")
}

/// Simulated time as `3h12m`, `4m05s` or `12.3s`.
pub fn format_sim_time(seconds: f64) -> String {
    // Truncation to whole seconds is intended above a minute.
    let whole = seconds.max(0.0) as u64;
    if whole >= 3_600 {
        format!("{}h{:02}m", whole / 3_600, whole % 3_600 / 60)
    } else if whole >= 60 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{seconds:.1}s")
    }
}

/// The run header of one seed: `SEED=… scenario=… build=…`, then each drawn swarm
/// parameter as its own `key=value` line.
pub fn seed_header(seed: u64, scenario: &str, build: &str, drawn: &[String]) -> String {
    let mut s = format!("SEED={seed} scenario={scenario} build={build}");
    for line in drawn {
        s.push_str("\n  ");
        s.push_str(line);
    }
    s
}

/// The build id: the git commit the binary was built from (`-dirty` when tracked files
/// differed), or the `EOSIM_BUILD` the build was given; `unknown` outside a git checkout.
/// Set at compile time by `harness/build.rs`, for every build.
pub fn build_id() -> String {
    env!("EOSIM_BUILD").to_string()
}

/// The scenario's closing lines: `PASSED …` or `FAILED …`, its effects and the replay.
pub fn print_scenario_end(result: &ScenarioResult, class: ExitClass, say: &dyn Fn(&str)) {
    let stats = format!(
        "scenario={} seeds={} faults={} sim_time={}",
        result.scenario,
        result.seeds,
        result.faults_injected,
        format_sim_time(result.sim_time_s)
    );
    let effects = effects_line(result);
    if class == ExitClass::NotExercised {
        say(&format!(
            "FAILED scenario={} class=not-exercised {}: {}",
            result.scenario,
            stats_tail(result),
            result.not_exercised.join("; ")
        ));
        say(&effects);
        return;
    }
    if class == ExitClass::Expected && result.verdict == Verdict::Holds {
        say(&format!("PASSED {stats}"));
        say(&effects);
        return;
    }
    say(&effects);
    let replay = result.counterexample.as_ref().map(|c| (c.seed, &c.replay));
    if class == ExitClass::Expected {
        let forbidden: Vec<&str> = result
            .forbidden_anomalies
            .keys()
            .map(String::as_str)
            .collect();
        say(&format!(
            "PASSED {stats} verdict={} forbidden={} (expected: demonstrates a known failure)",
            result.verdict.name(),
            forbidden.join(",")
        ));
    } else {
        let seed = replay
            .map(|(s, _)| format!(" seed={s}"))
            .unwrap_or_default();
        say(&format!(
            "FAILED scenario={} class={}{seed} {}",
            result.scenario,
            failure_class(result.verdict),
            stats_tail(result)
        ));
    }
    for line in &result.stalled_otherwise {
        say(&format!("  {line}"));
    }
    if let Some((_, command)) = replay {
        say(&format!("  replay: {command}"));
    }
}

/// The `class=` of a `FAILED` line for a verdict that was not the expected one.
pub fn failure_class(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Violated => "invalid",
        Verdict::Stalled => "stalled",
        Verdict::Crashed => "crash",
        Verdict::Holds => "expected-violation-not-found",
        Verdict::Skipped => "skipped",
    }
}

/// `  effects: kill 4/4 (scheduled/acted), messages.delay 1/37, ...`: for every effect kind,
/// faults scheduled over all seeds and times they acted.
fn effects_line(result: &ScenarioResult) -> String {
    if result.fault_effects.is_empty() {
        return "  effects (scheduled/acted): none scheduled".to_string();
    }
    let parts: Vec<String> = result
        .fault_effects
        .iter()
        .map(|(kind, c)| format!("{kind} {}/{}", c.scheduled, c.acted))
        .collect();
    format!("  effects (scheduled/acted): {}", parts.join(", "))
}

fn stats_tail(result: &ScenarioResult) -> String {
    format!("seeds={} faults={}", result.seeds, result.faults_injected)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every build knows its commit (release builds printed `build=unknown` when the id came
    /// only from `cargo xtask`'s environment).
    #[test]
    fn the_build_id_is_the_checked_out_commit() {
        let head = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        match head {
            Some(sha) => assert!(build_id().starts_with(&sha), "{} vs HEAD {sha}", build_id()),
            None => assert_eq!(build_id(), "unknown"),
        }
    }

    #[test]
    fn a_fault_reads_as_the_nemesis_verb() {
        let op = Op {
            index: 4,
            time_ns: 12_345_000_000,
            process: "nemesis".into(),
            kind: OpKind::Info,
            value: Value::Fault {
                name: "kill".into(),
                detail: "broker-2".into(),
            },
            error: None,
        };
        assert_eq!(format_op(&op), "t=12.345s nemesis kill broker-2");
    }

    #[test]
    fn sim_time_uses_the_largest_units() {
        assert_eq!(format_sim_time(11_520.0), "3h12m");
        assert_eq!(format_sim_time(245.0), "4m05s");
        assert_eq!(format_sim_time(12.34), "12.3s");
    }
}

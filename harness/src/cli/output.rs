//! One-line renderings for the terminal: history ops, durations, run headers (STYLE §15).

use super::ExitClass;
pub use crate::history::text::{format_op, kind_name};
use crate::report::{ScenarioResult, Verdict};

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
    use crate::history::{Op, OpKind, Value};

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

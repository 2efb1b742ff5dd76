//! A run's report directory: `<out>/<run-id>` named after the UTC start time, and the
//! `<out>/latest` link to it. Shared by `eosim sim` and `eosim run`.

use super::output::build_id;
use super::{config_error, ExitClass};
use crate::report::{write_report, RunReport, ScenarioResult};
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One run of `scenarios`, as `eosim run` does it: `run_one(path, scenario, run_dir,
/// build)` for each scenario in turn, inside [`write_run`]. Returns the highest exit class
/// of the scenarios, or [`ExitClass::Config`] when the run dir or the report cannot be
/// written.
pub fn run_scenarios(
    out: &Path,
    scenarios: &[(PathBuf, Scenario)],
    mut run_one: impl FnMut(&Path, &Scenario, &Path, &str) -> (ScenarioResult, ExitClass),
) -> ExitClass {
    let run_all = |run_dir: &Path, build: &str| {
        let results = scenarios
            .iter()
            .map(|(path, scenario)| run_one(path, scenario, run_dir, build));
        Ok(results.collect())
    };
    write_run(out, run_all).0
}

/// One run: a fresh run dir under `out` (named after the UTC start time), `run_all(run_dir,
/// build)` for the scenarios' results, then the report written, `<out>/latest` pointed at
/// it (only a warning if that fails) and the summary's path printed. Returns the highest
/// exit class of the scenarios with the report written, or [`ExitClass::Config`] (and no
/// report) when the run dir or the report cannot be written or `run_all` fails.
pub fn write_run(
    out: &Path,
    run_all: impl FnOnce(&Path, &str) -> Result<Vec<(ScenarioResult, ExitClass)>, String>,
) -> (ExitClass, Option<RunReport>) {
    let build = build_id();
    let started_at = rfc3339(SystemTime::now());
    let (run_id, run_dir) = match create_run_dir(out) {
        Ok(r) => r,
        Err(e) => {
            let e = format!("cannot create a run dir in {}: {e}", out.display());
            return (config_error(e), None);
        }
    };
    let results = match run_all(&run_dir, &build) {
        Ok(r) => r,
        Err(e) => return (config_error(e), None),
    };
    let exit = results
        .iter()
        .map(|(_, c)| *c)
        .max()
        .unwrap_or(ExitClass::Expected);
    let report = RunReport {
        run_id,
        build,
        started_at,
        scenarios: results.into_iter().map(|(r, _)| r).collect(),
    };
    match publish(out, &run_dir, &report) {
        Ok(()) => (exit, Some(report)),
        Err(e) => (config_error(e), None),
    }
}

/// Writes `report` into `run_dir`, points `<out>/latest` at it and prints the summary's
/// path. `Err` when the report cannot be written.
pub fn publish(out: &Path, run_dir: &Path, report: &RunReport) -> Result<(), String> {
    if let Err(e) = write_report(run_dir, report) {
        return Err(format!(
            "cannot write the report in {}: {e}",
            run_dir.display()
        ));
    }
    if let Err(e) = point_latest(out, &report.run_id) {
        eprintln!(
            "eosim: warning: cannot update {}/latest: {e}",
            out.display()
        );
    }
    println!("report: {}", run_dir.join("summary.md").display());
    Ok(())
}

/// Creates `<out>/<run-id>`; the id is the UTC start time, made unique with a suffix.
pub fn create_run_dir(out: &Path) -> std::io::Result<(String, PathBuf)> {
    std::fs::create_dir_all(out)?;
    let stamp = run_stamp(SystemTime::now());
    for n in 1u32.. {
        let run_id = if n == 1 {
            stamp.clone()
        } else {
            format!("{stamp}-{n}")
        };
        let dir = out.join(&run_id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((run_id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!("u32 run-id suffixes exhausted")
}

/// Points `<out>/latest` at the run dir (a relative symlink, replaced atomically).
#[cfg(unix)]
pub fn point_latest(out: &Path, run_id: &str) -> std::io::Result<()> {
    let tmp = out.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(run_id, &tmp)?;
    std::fs::rename(&tmp, out.join("latest"))
}

/// Without symlinks, `latest` is a file naming the run dir.
#[cfg(not(unix))]
pub fn point_latest(out: &Path, run_id: &str) -> std::io::Result<()> {
    std::fs::write(out.join("latest"), run_id)
}

/// `20261129T184919Z`.
pub fn run_stamp(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(time);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// `2026-11-29T18:49:19Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = utc_fields(time);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// Civil UTC date and time (Howard Hinnant's days-to-civil algorithm).
fn utc_fields(time: SystemTime) -> (i64, u32, u32, u64, u64, u64) {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rem / 3_600, rem % 3_600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn run_stamps_are_utc_civil_time() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_891_759);
        assert_eq!(rfc3339(t), "2026-11-28T18:49:19Z");
        assert_eq!(run_stamp(UNIX_EPOCH), "19700101T000000Z");
    }
}

//! The real tier's clocks: the run's clock every process shares, and a wall-clock offset
//! per worker process for the `clock-jump` fault.
//!
//! A machine has two clocks (`sim/src/clock.rs` says the same of the simulation): a
//! monotonic one (`CLOCK_MONOTONIC`, Java's `nanoTime`, Rust's `Instant`) that timers and
//! timeouts use, and a wall clock (`CLOCK_REALTIME`) that an NTP step moves. A clock jump
//! moves the wall clock of one process, and what it moves is what the simulation moves:
//!
//! - **The run's clock** ([`run_clock_ns`]) is `CLOCK_MONOTONIC`, which every process of
//!   the machine shares. The history's op times are taken from it (in the runner, its
//!   proxies and every `eosim worker`).
//! - **A wall-clock offset per worker** ([`ClockOffsets`]): each `eosim worker` of a scenario
//!   with clock jumps is told its own offset file (`EOSIM_CLOCK_FILE`), which a jump
//!   rewrites, atomically by rename. The worker's producers stamp every record's
//!   `CreateTime` with the machine's wall clock plus that offset
//!   ([`crate::client::real::wall_clock`], which also says why the whole process is not put
//!   on a fake clock), as the simulation's producers stamp `eosim_sim::clock::wall_clock_ms`;
//!   timers keep their pace. When a record first carries a new offset the worker records
//!   the `clock-jump` effect.
//!
//! Brokers and databases keep the true time, as in the simulation, whose brokers compare
//! a batch's client-stamped timestamps with their own clock (`producer.id.expiration.ms`,
//! KIP-854, Kafka's `ProducerStateManager.isProducerExpired`; KIP-937's
//! `log.message.timestamp.*.max.ms`). A jump aimed at them is refused by name
//! ([`crate::real::run::faults`]).

use crate::client::real::wall_clock::{format_offset, parse_offset_ms, CLOCK_FILE_ENV};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The run's clock: `CLOCK_MONOTONIC` in ns (since boot), the same in every process of the
/// machine and never moved by a clock jump.
pub fn run_clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC is always supported on
    // Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The wall-clock offsets of one run's workers: a file per process under a directory of
/// the run (kept in its report: `clocks/<name>`).
#[derive(Debug, Clone)]
pub struct ClockOffsets {
    dir: PathBuf,
}

impl ClockOffsets {
    /// The clocks of a run whose files go in `dir` (created).
    ///
    /// # Errors
    /// `dir` cannot be created: the jumps are then noted as not injected with this reason.
    pub fn open(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Gives `cmd` (the process `name`) its offset file: created at offset 0 unless an
    /// earlier incarnation's jump left it off (a restart keeps its machine's clock, as in
    /// the simulation).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn apply(&self, name: &str, cmd: &mut Command) -> Result<(), String> {
        let file = self.file(name);
        if !file.exists() {
            self.write(name, 0)?;
        }
        cmd.env(CLOCK_FILE_ENV, &file);
        Ok(())
    }

    /// `name`'s wall-clock offset from the true time, ms (0 when it never jumped).
    pub fn offset_ms(&self, name: &str) -> i64 {
        std::fs::read_to_string(self.file(name))
            .ok()
            .and_then(|s| parse_offset_ms(&s))
            .unwrap_or(0)
    }

    /// Steps `name`'s wall clock by `delta_ms` on top of earlier jumps; returns the new
    /// offset, ms. A process that is down reads it when it starts again.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn jump(&self, name: &str, delta_ms: i64) -> Result<i64, String> {
        let offset = self.offset_ms(name).saturating_add(delta_ms);
        self.write(name, offset)?;
        Ok(offset)
    }

    /// Sets every wall clock right again (NTP catching up, as the simulation does when
    /// the faults end); returns the processes whose clock was off.
    ///
    /// # Errors
    /// A file cannot be read or written.
    pub fn reset_all(&self) -> Result<Vec<String>, String> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let mut off = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", self.dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || self.offset_ms(&name) == 0 {
                continue;
            }
            self.write(&name, 0)?;
            off.push(name);
        }
        off.sort();
        Ok(off)
    }

    /// Writes `name`'s offset (`+12.345`, seconds), by rename, so that a process never reads
    /// half a file.
    fn write(&self, name: &str, offset_ms: i64) -> Result<(), String> {
        let (file, tmp) = (self.file(name), self.dir.join(format!(".{name}.tmp")));
        std::fs::write(&tmp, format_offset(offset_ms))
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(|e| format!("clock offset {}: {e}", file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_add_up_per_process_and_reset_sets_them_right() {
        let dir = tempfile::tempdir().expect("temp dir");
        let clocks = ClockOffsets::open(dir.path()).expect("opens");
        let mut cmd = Command::new("true");
        clocks.apply("producer-0", &mut cmd).expect("applies");
        assert_eq!(clocks.offset_ms("producer-0"), 0);
        assert_eq!(clocks.jump("producer-0", -3_600_000), Ok(-3_600_000));
        assert_eq!(clocks.jump("producer-0", -1_500), Ok(-3_601_500));
        assert_eq!(clocks.offset_ms("consumer-0"), 0);
        // A restart keeps the offset its machine's clock had.
        clocks.apply("producer-0", &mut cmd).expect("applies");
        assert_eq!(clocks.offset_ms("producer-0"), -3_601_500);
        let file = cmd
            .get_envs()
            .find(|(k, _)| *k == CLOCK_FILE_ENV)
            .and_then(|(_, v)| v.map(PathBuf::from))
            .expect("the worker is told its file");
        let text = std::fs::read_to_string(file).expect("the file is there");
        assert_eq!(parse_offset_ms(&text), Some(-3_601_500));
        assert_eq!(clocks.reset_all(), Ok(vec!["producer-0".to_string()]));
        assert_eq!(clocks.offset_ms("producer-0"), 0);
        assert_eq!(clocks.reset_all(), Ok(Vec::new()));
    }

    /// The run's clock is the machine's monotonic one, which `Instant` reads too: the run
    /// clock's interval lies between the `Instant` intervals just inside and just outside
    /// it, however loaded the machine (no tolerance to tune).
    #[test]
    fn the_run_clock_moves_with_real_time() {
        use std::time::Instant;
        let (t0, a, t1) = (Instant::now(), run_clock_ns(), Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (t2, b, t3) = (Instant::now(), run_clock_ns(), Instant::now());
        let (inner, outer) = ((t2 - t1).as_nanos() as u64, (t3 - t0).as_nanos() as u64);
        assert!(inner >= 20_000_000, "slept {inner} ns");
        assert!(
            inner <= b - a && b - a <= outer,
            "{inner} <= {} <= {outer}",
            b - a
        );
    }
}

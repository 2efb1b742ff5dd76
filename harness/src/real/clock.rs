//! The real tier's clocks: the run's clock every process shares, and a fake wall clock per
//! worker process for the `clock-jump` fault.
//!
//! A machine has two clocks (`sim/src/clock.rs` says the same of the simulation): a
//! monotonic one (`CLOCK_MONOTONIC`, Java's `nanoTime`, Rust's `Instant`) that timers and
//! timeouts use, and a wall clock (`CLOCK_REALTIME`, `gettimeofday`) that an NTP step moves.
//! A clock jump moves the wall clock of one process only, as the simulation's does:
//!
//! - **The run's clock** ([`run_clock_ns`]) is `CLOCK_MONOTONIC`, which every process of
//!   the machine shares and no jump moves. The history's op times are taken from it (in
//!   the runner and in every `eosim worker`), so a process whose wall clock was stepped back
//!   two days still stamps its ops in the run's order.
//! - **A fake wall clock per worker** ([`FakeClocks`]): each `eosim worker` of a scenario
//!   with clock jumps runs under Debian's libfaketime (`LD_PRELOAD` of
//!   `libfaketimeMT.so.1`) with `DONT_FAKE_MONOTONIC=1`, reading its offset from a file of
//!   its own on every call (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`). A jump
//!   rewrites that file (a relative offset in seconds, `-172800.000`), atomically by
//!   rename. What moves is what the process reads from the wall clock: librdkafka stamps a
//!   record's `CreateTime` with `rd_uclock()`, which is `gettimeofday` (`src/rdtime.h`),
//!   while its timers run on `rd_clock()`, `CLOCK_MONOTONIC`; so the producer's records are
//!   stamped in the past, its retries and timeouts keep their pace, as in the simulation's
//!   producer (`client/sim/producer.rs` stamps `eosim_sim::clock::wall_clock_ms`).
//! - **Evidence from inside the process** ([`WallWatch`]): a worker compares its wall clock
//!   with the true one (the run's wall-clock epoch plus the run's clock since) whenever it
//!   records an op, and records a `clock-jump` effect when the difference moved, so the
//!   effect says the jump reached the process that stamps records, not only its file.
//!
//! Brokers and databases keep the true time, as in the simulation, whose brokers compare
//! a batch's client-stamped max timestamp with their own clock (`producer.id.expiration.ms`,
//! KIP-854; Kafka's `ProducerStateManager.isProducerExpired`). A jump aimed at them is
//! refused by name ([`crate::real::run::faults`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where Debian's `libfaketime` package puts its multithreaded library (the workers run
/// tokio and librdkafka threads), tried in order; `EOSIM_LIBFAKETIME` goes first.
const LIBFAKETIME_PATHS: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
];

/// A change of a process's wall-clock offset smaller than this is noise, not a jump, ms: a
/// comparison's clock reads are bracketed within [`READ_GAP_NS_MAX`], and NTP slews both
/// clocks alike. The swarm's jumps are drawn up to two days either way.
const WALL_MOVE_MS_MIN: i64 = 100;

/// The widest gap between the two monotonic reads around a wall-clock read that a
/// comparison accepts (a process preempted between them retries), ns.
const READ_GAP_NS_MAX: u64 = 1_000_000;

/// The run's clock: `CLOCK_MONOTONIC` in ns (since boot), the same in every process of the
/// machine and never moved by a clock jump (libfaketime runs with `DONT_FAKE_MONOTONIC=1`).
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

/// This process's wall clock, ns since the Unix epoch (0 before it): the one a clock jump
/// moves.
pub fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The fake wall clocks of one run's workers: a file per process under a directory of
/// the run (kept in its report: `clocks/<name>`), and the library that reads them.
#[derive(Debug, Clone)]
pub struct FakeClocks {
    lib: PathBuf,
    dir: PathBuf,
}

impl FakeClocks {
    /// The clocks of a run whose files go in `dir` (created).
    ///
    /// # Errors
    /// libfaketime is not installed (Debian's `libfaketime`; `.ci/install-real-services`
    /// installs it), or `dir` cannot be created: the jumps are then noted as not injected
    /// with this reason.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let from_env = std::env::var_os("EOSIM_LIBFAKETIME").map(PathBuf::from);
        let lib = from_env
            .into_iter()
            .chain(LIBFAKETIME_PATHS.iter().map(PathBuf::from))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "libfaketime is not installed (looked for {} and $EOSIM_LIBFAKETIME; \
                     `apt-get install libfaketime`, as .ci/install-real-services does)",
                    LIBFAKETIME_PATHS.join(", ")
                )
            })?;
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self {
            lib,
            dir: dir.to_path_buf(),
        })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Makes `cmd` (the process `name`) run on its fake wall clock: the file is created at
    /// offset 0 unless an earlier incarnation's jump left it off (a restart keeps its
    /// machine's clock, as in the simulation).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn apply(&self, name: &str, cmd: &mut Command) -> Result<(), String> {
        let file = self.file(name);
        if !file.exists() {
            self.write(name, 0)?;
        }
        cmd.env("LD_PRELOAD", &self.lib)
            .env("FAKETIME_TIMESTAMP_FILE", &file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("DONT_FAKE_MONOTONIC", "1");
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

    /// Writes `name`'s offset as libfaketime reads a relative one (`+12.345`, seconds), by
    /// rename, so that a process never reads half a file.
    fn write(&self, name: &str, offset_ms: i64) -> Result<(), String> {
        let (file, tmp) = (self.file(name), self.dir.join(format!(".{name}.tmp")));
        std::fs::write(&tmp, format_offset(offset_ms))
            .and_then(|()| std::fs::rename(&tmp, &file))
            .map_err(|e| format!("fake clock {}: {e}", file.display()))
    }
}

/// libfaketime's relative offset for `offset_ms`: a sign, seconds, 3 decimals, a newline.
fn format_offset(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000)
}

/// [`format_offset`] read back; `None` for anything else.
fn parse_offset_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => return None,
    };
    let (secs, millis) = rest.split_once('.').unwrap_or((rest, "0"));
    let millis = format!("{millis:0<3}");
    let ms = secs.parse::<i64>().ok()? * 1000 + millis.get(..3)?.parse::<i64>().ok()?;
    Some(if negative { -ms } else { ms })
}

/// The worker side: whether this process's wall clock moved from the true time since it
/// last looked. One per process (a worker is one process).
#[derive(Debug)]
pub struct WallWatch {
    /// The run's epoch on the run's clock ([`run_clock_ns`]).
    epoch_ns: u64,
    /// The same instant on the true wall clock, ns since the Unix epoch.
    wall_epoch_ns: u64,
    /// The offset last reported, ms.
    last_ms: AtomicI64,
}

static WATCH: OnceLock<WallWatch> = OnceLock::new();

impl WallWatch {
    /// Starts watching this process's wall clock against the run's epoch, given on both
    /// clocks (`eosim worker --epoch-ns --wall-epoch-ns`); a `wall_epoch_ns` of 0 (not
    /// given) watches nothing. Later calls keep the first.
    pub fn install(epoch_ns: u64, wall_epoch_ns: u64) {
        if wall_epoch_ns == 0 {
            return;
        }
        let _ = WATCH.set(WallWatch {
            epoch_ns,
            wall_epoch_ns,
            last_ms: AtomicI64::new(0),
        });
    }

    /// The process's wall-clock offset from the true time, ms: the wall clock read between
    /// two reads of the run's clock, taken at their midpoint; a pair further apart than
    /// [`READ_GAP_NS_MAX`] (the process was preempted) is read again, up to 5 times.
    fn offset_ms(&self) -> i64 {
        let read = || {
            let before = run_clock_ns();
            let wall = wall_clock_ns();
            let after = run_clock_ns();
            (before + (after - before) / 2, wall, after - before)
        };
        let mut sample = read();
        for _ in 0..4 {
            if sample.2 <= READ_GAP_NS_MAX {
                break;
            }
            sample = read();
        }
        let (mono, wall, _) = sample;
        let truth = i128::from(self.wall_epoch_ns) + i128::from(mono.saturating_sub(self.epoch_ns));
        ((i128::from(wall) - truth) / 1_000_000) as i64
    }

    /// When this process's wall clock moved by [`WALL_MOVE_MS_MIN`] ms or more since the
    /// last call that returned one (from 0 at start): `(previous, now)` offsets in ms.
    pub fn moved() -> Option<(i64, i64)> {
        WATCH.get()?.moved_since_last()
    }

    fn moved_since_last(&self) -> Option<(i64, i64)> {
        let now = self.offset_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if (now - last).abs() < WALL_MOVE_MS_MIN {
            return None;
        }
        self.last_ms.store(now, Ordering::Relaxed);
        Some((last, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_written_as_libfaketime_reads_them_and_read_back() {
        for (ms, text) in [
            (0, "+0.000\n"),
            (-172_800_000, "-172800.000\n"),
            (-3_600_500, "-3600.500\n"),
            (1_250, "+1.250\n"),
            (-7, "-0.007\n"),
        ] {
            assert_eq!(format_offset(ms), text);
            assert_eq!(parse_offset_ms(text), Some(ms), "{text}");
        }
        assert_eq!(parse_offset_ms("+2.5"), Some(2_500));
        assert_eq!(parse_offset_ms("+3"), Some(3_000));
        assert_eq!(parse_offset_ms("2d"), None);
        assert_eq!(parse_offset_ms(""), None);
    }

    #[test]
    fn jumps_add_up_per_process_and_reset_sets_them_right() {
        let dir = tempfile::tempdir().expect("temp dir");
        let clocks = FakeClocks {
            lib: PathBuf::from("/nonexistent/libfaketimeMT.so.1"),
            dir: dir.path().to_path_buf(),
        };
        let mut cmd = Command::new("true");
        clocks.apply("producer-0", &mut cmd).expect("applies");
        assert_eq!(clocks.offset_ms("producer-0"), 0);
        assert_eq!(clocks.jump("producer-0", -3_600_000), Ok(-3_600_000));
        assert_eq!(clocks.jump("producer-0", -1_500), Ok(-3_601_500));
        assert_eq!(clocks.offset_ms("consumer-0"), 0);
        // A restart keeps the offset its machine's clock had.
        clocks.apply("producer-0", &mut cmd).expect("applies");
        assert_eq!(clocks.offset_ms("producer-0"), -3_601_500);
        let envs: Vec<_> = cmd
            .get_envs()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for key in [
            "LD_PRELOAD",
            "FAKETIME_TIMESTAMP_FILE",
            "FAKETIME_NO_CACHE",
            "DONT_FAKE_MONOTONIC",
        ] {
            assert!(envs.iter().any(|k| k == key), "{key} in {envs:?}");
        }
        assert_eq!(clocks.reset_all(), Ok(vec!["producer-0".to_string()]));
        assert_eq!(clocks.offset_ms("producer-0"), 0);
        assert_eq!(clocks.reset_all(), Ok(Vec::new()));
    }

    /// A worker's watch: a wall clock that reads the true time reports nothing; one two
    /// hours behind the run's epoch (as after a jump) reports the move once, then nothing
    /// until it moves again.
    #[test]
    fn the_watch_reports_each_move_of_the_wall_clock_once() {
        let watch = |behind_ms: u64| WallWatch {
            epoch_ns: run_clock_ns(),
            wall_epoch_ns: wall_clock_ns() + behind_ms * 1_000_000,
            last_ms: AtomicI64::new(0),
        };
        assert_eq!(watch(0).moved_since_last(), None);
        let behind = watch(7_200_000);
        let (was, now) = behind.moved_since_last().expect("a move");
        assert_eq!(was, 0);
        assert!((now + 7_200_000).abs() < WALL_MOVE_MS_MIN, "{now}");
        assert_eq!(behind.moved_since_last(), None);
    }

    /// The canary of the mechanism: a child under libfaketime whose file says two days
    /// back reads a wall clock two days behind ours, and the same monotonic clock.
    #[test]
    fn a_process_under_its_fake_clock_reads_the_jumped_wall_clock_and_the_true_monotonic_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let Ok(clocks) = FakeClocks::open(dir.path()) else {
            eprintln!("skipped: libfaketime is not installed here");
            return;
        };
        // Python's `time.time` and `time.monotonic` are libc's clock_gettime with
        // CLOCK_REALTIME and CLOCK_MONOTONIC, as librdkafka's `rd_uclock` and `rd_clock`.
        let mut cmd = Command::new("python3");
        cmd.args(["-c", "import time; print(time.time(), time.monotonic())"]);
        clocks.apply("producer-0", &mut cmd).expect("applies");
        clocks.jump("producer-0", -172_800_000).expect("jumps");
        let Ok(out) = cmd.output() else {
            eprintln!("skipped: no python3 here");
            return;
        };
        let (ours_wall_s, ours_mono_s) =
            (wall_clock_ns() as f64 / 1e9, run_clock_ns() as f64 / 1e9);
        let text = String::from_utf8_lossy(&out.stdout);
        let read: Vec<f64> = text
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        let [child_wall_s, child_mono_s] = read[..] else {
            panic!(
                "python3 printed {text:?}, stderr {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        assert!(
            (ours_wall_s - child_wall_s - 172_800.0).abs() < 2.0,
            "child wall clock {child_wall_s}, ours {ours_wall_s}"
        );
        assert!(
            (ours_mono_s - child_mono_s).abs() < 2.0,
            "monotonic {child_mono_s} vs {ours_mono_s}"
        );
    }
}

//! One child process measured: its exit code, CPU time, peak resident memory and wall time,
//! its standard output kept in a file to read afterwards.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// What one process cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Cost {
    /// Exit code, or 128 + signal like a shell.
    pub code: u8,
    /// User + system CPU time, s.
    pub cpu_s: f64,
    /// Of which system time, s: the kernel zeroing the fresh pages a run touches, which
    /// varies more between identical runs than user time does.
    pub sys_s: f64,
    /// Peak resident memory, KiB (`ru_maxrss`; 0 off Unix).
    pub max_rss_kib: u64,
    /// Wall time from spawn to exit, s.
    pub wall_s: f64,
}

/// Runs `cmd` to its end with its standard output in the file `stdout` (standard error
/// stays the terminal's) and returns what that one child cost.
pub(super) fn run(cmd: &mut Command, stdout: &Path) -> Result<Cost> {
    if let Some(dir) = stdout.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let file = std::fs::File::create(stdout)
        .with_context(|| format!("cannot create {}", stdout.display()))?;
    cmd.stdout(Stdio::from(file));
    let started = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let (code, [user_s, sys_s], max_rss_kib) = wait(child)?;
    Ok(Cost {
        code,
        cpu_s: user_s + sys_s,
        sys_s,
        max_rss_kib,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Waits for `child` with `wait4`: its exit code, user and system CPU time (s) and peak RSS
/// (KiB), its own and not those of other children (as `RUSAGE_CHILDREN` would add up).
#[cfg(unix)]
fn wait(child: std::process::Child) -> Result<(u8, [f64; 2], u64)> {
    let pid = libc::pid_t::try_from(child.id()).context("a process id fits pid_t")?;
    let mut status = 0;
    // SAFETY: `wait4` only writes the status and the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: as above; `pid` is our child, not yet waited for (`child` never waits).
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4");
        }
    }
    let code = if libc::WIFEXITED(status) {
        u8::try_from(libc::WEXITSTATUS(status)).unwrap_or(1)
    } else if libc::WIFSIGNALED(status) {
        u8::try_from(128 + libc::WTERMSIG(status)).unwrap_or(1)
    } else {
        1
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = [s(usage.ru_utime), s(usage.ru_stime)];
    Ok((code, cpu, u64::try_from(usage.ru_maxrss).unwrap_or(0)))
}

/// Off Unix: the exit code only.
#[cfg(not(unix))]
fn wait(mut child: std::process::Child) -> Result<(u8, f64, u64)> {
    let status = child.wait().context("waiting for a child")?;
    Ok((
        status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1)),
        0.0,
        0,
    ))
}

/// The value of `key=` in a line of `key=value` words.
pub(super) fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// The number after `key=` in the last line of `text` that starts with `prefix` and has one.
pub(super) fn number(text: &str, prefix: &str, key: &str) -> Option<f64> {
    text.lines()
        .rev()
        .filter(|l| l.starts_with(prefix))
        .find_map(|l| field(l, key)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_the_word_after_its_exact_key() {
        let line = "soak scenario=x rss_kib_after_100=1200 rss_kib_after_1000=1500 ratio=1.25";
        assert_eq!(field(line, "rss_kib_after_100"), Some("1200"));
        assert_eq!(field(line, "rss_kib_after_1000"), Some("1500"));
        assert_eq!(field(line, "rss_kib"), None);
        assert_eq!(field(line, "scenario"), Some("x"));
    }

    #[test]
    fn a_number_comes_from_the_last_line_that_has_it() {
        let text = "soak seeds=100 rss_kib=10 seeds_per_s=2.0\nother seeds=9\n\
                    soak seeds=1000 rss_kib=12 seeds_per_s=2.5\nsoak classes holds=1000\n";
        assert_eq!(number(text, "soak seeds=", "seeds_per_s"), Some(2.5));
        assert_eq!(number(text, "soak classes", "holds"), Some(1000.0));
        assert_eq!(number(text, "soak classes", "stalled"), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_child_is_measured_alone_with_its_code_and_output() {
        let dir = std::env::temp_dir().join(format!("xtask-measure-{}", std::process::id()));
        let out = dir.join("out.txt");
        // Busy for a while in user space, then exit 3.
        let cost = run(
            Command::new("sh").args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; exit 3",
            ]),
            &out,
        )
        .unwrap();
        assert_eq!(cost.code, 3);
        assert!(cost.cpu_s > 0.0 && cost.sys_s <= cost.cpu_s, "{cost:?}");
        assert!(cost.cpu_s <= cost.wall_s + 0.05, "{cost:?}");
        assert!(cost.max_rss_kib > 0, "{cost:?}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "done\n");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

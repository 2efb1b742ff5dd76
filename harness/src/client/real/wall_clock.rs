//! The wall clock a real producer stamps its records with, for the `clock-jump` fault.
//!
//! As in the simulation (`sim/src/clock.rs`, read by `client/sim/producer.rs`), a jump moves
//! only what the process stamps: each record's `CreateTime`. The real producers send every
//! record with an explicit timestamp, [`stamp_ms`], which is the machine's wall clock plus
//! the process's own offset, read from the file `$EOSIM_CLOCK_FILE` names on every send (the
//! runner rewrites it at each jump: [`crate::real::clock::ClockOffsets`]). Without that
//! variable librdkafka stamps records itself, as it always does.
//!
//! Why not a fake clock under the whole process (libfaketime): librdkafka waits on C11
//! condition variables (`cnd_timedwait`, CLOCK_REALTIME deadlines computed from the wall
//! clock), which glibc serves without the interposable `pthread_cond_timedwait`, so a
//! process whose faked clock runs two hours ahead sleeps in every timed wait until woken,
//! for up to two hours: an artifact of the faking, not what a real clock step does (tried
//! 2026-12-06: a producer stepped ahead never finished). The brokers, which decide what a
//! stepped clock breaks (`producer.id.expiration.ms`, `log.message.timestamp.*.max.ms`),
//! see the same timestamps either way.
//!
//! The file holds a relative offset in seconds with 3 decimals, `-172800.000`
//! ([`format_offset`]).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable that names a process's clock offset file.
pub const CLOCK_FILE_ENV: &str = "EOSIM_CLOCK_FILE";

/// What this process stamped and reported: the one [`Stamps`] of the process.
static STAMPS: Stamps = Stamps::new();

/// The offsets records were stamped with, and which of them the history has heard of.
#[derive(Debug)]
struct Stamps {
    /// The offset the last stamped record carried, ms.
    stamped_ms: AtomicI64,
    /// The offset last reported by [`Stamps::take_moved`], ms.
    reported_ms: AtomicI64,
    /// Whether a record was stamped with an offset not reported yet.
    pending: AtomicBool,
}

impl Stamps {
    const fn new() -> Self {
        Self {
            stamped_ms: AtomicI64::new(0),
            reported_ms: AtomicI64::new(0),
            pending: AtomicBool::new(false),
        }
    }

    /// Notes a record stamped with `offset_ms`.
    fn stamped(&self, offset_ms: i64) {
        if self.stamped_ms.swap(offset_ms, Ordering::Relaxed) != offset_ms {
            self.pending.store(true, Ordering::Relaxed);
        }
    }

    fn take_moved(&self) -> Option<(i64, i64)> {
        if !self.pending.swap(false, Ordering::Relaxed) {
            return None;
        }
        let now = self.stamped_ms.load(Ordering::Relaxed);
        let was = self.reported_ms.swap(now, Ordering::Relaxed);
        (was != now).then_some((was, now))
    }
}

/// The timestamp to send a record with, ms since the Unix epoch: the machine's wall clock
/// plus this process's offset; `None` when the process has no clock file (librdkafka
/// stamps it). An unreadable file counts as offset 0.
pub fn stamp_ms() -> Option<i64> {
    let file = std::env::var_os(CLOCK_FILE_ENV)?;
    let offset_ms = std::fs::read_to_string(file)
        .ok()
        .and_then(|s| parse_offset_ms(&s))
        .unwrap_or(0);
    STAMPS.stamped(offset_ms);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Some(now_ms.saturating_add(offset_ms))
}

/// When a record was stamped with another offset than the last one reported: `(previous,
/// now)`, ms. The worker records it as the jump's effect, so the effect says a record
/// carried the stepped clock, not only that a file changed.
pub fn take_moved() -> Option<(i64, i64)> {
    STAMPS.take_moved()
}

/// A relative offset as the clock file holds it: a sign, seconds, 3 decimals, a newline.
pub fn format_offset(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { '-' } else { '+' };
    let abs = offset_ms.unsigned_abs();
    format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000)
}

/// [`format_offset`] read back (fewer decimals, or none, taken too); `None` for anything
/// else.
pub fn parse_offset_ms(text: &str) -> Option<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_written_and_read_back() {
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

    /// A move is reported once, when a record carried it; a jump back to where the last
    /// report was is no move.
    #[test]
    fn each_stamped_move_is_reported_once() {
        let stamps = Stamps::new();
        assert_eq!(stamps.take_moved(), None);
        stamps.stamped(0);
        assert_eq!(stamps.take_moved(), None);
        stamps.stamped(-3_600_000);
        stamps.stamped(-3_600_000);
        assert_eq!(stamps.take_moved(), Some((0, -3_600_000)));
        assert_eq!(stamps.take_moved(), None);
        stamps.stamped(0);
        assert_eq!(stamps.take_moved(), Some((-3_600_000, 0)));
        stamps.stamped(5);
        stamps.stamped(0);
        assert_eq!(stamps.take_moved(), None);
    }
}

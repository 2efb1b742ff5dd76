//! ISO 8601 input and PostgreSQL's output for `date`, `time with time zone` and
//! `timestamp with time zone`, after "Date/Time Types"
//! (<https://www.postgresql.org/docs/current/datatype-datetime.html>) with `DateStyle = ISO`
//! and `TimeZone = UTC`.
//!
//! Accepted input: `YYYY-MM-DD`; times `HH:MM[:SS[.ffffff]]`; a date and time separated by
//! `T` or blanks; zones `Z`, `UTC`, `GMT`, `±HH`, `±HHMM`, `±HH:MM[:SS]` (no zone means
//! the session's, UTC). PostgreSQL also reads month names, `MM/DD/YYYY`, `BC`, named zones
//! (`Europe/Berlin`), `epoch`, `infinity` and `allballs`; the model rejects those with
//! `22007`, the code PostgreSQL gives any text it cannot parse.

use super::types::{Date, TimeTz, TimestampTz};

/// Why a date/time text did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DateTimeError {
    /// `22007`: not a date/time PostgreSQL (as modelled) can read.
    BadFormat,
    /// `22008`: a field outside its range (month 13, February 30, minute 60).
    FieldOverflow,
    /// `22008`: the value is outside the type's range.
    OutOfRange,
    /// `22009`: a zone offset beyond ±15:59:59 (hours above 15, minutes or seconds above
    /// 59; PostgreSQL's `DTERR_TZDISP_OVERFLOW`).
    ZoneOverflow,
}

const MICROS_PER_DAY: i64 = 86_400_000_000;
/// Largest year a `timestamp with time zone` holds (294276 AD).
const TIMESTAMP_YEAR_MAX: i64 = 294_276;
/// Largest year a `date` holds (5874897 AD).
const DATE_YEAR_MAX: i64 = 5_874_897;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The (year, month, day) of a day number (inverse of [`days_from_civil`]).
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    match m {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A byte cursor over the input.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += hit as usize;
        hit
    }

    fn blanks(&mut self) -> bool {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
        self.i > start
    }

    /// Between `min` and `max` ASCII digits, as a number and a count.
    fn digits(&mut self, min: usize, max: usize) -> Result<(i64, usize), DateTimeError> {
        let start = self.i;
        let mut n: i64 = 0;
        while self.i - start < max && self.peek().is_some_and(|c| c.is_ascii_digit()) {
            n = n * 10 + i64::from(self.s[self.i] - b'0');
            self.i += 1;
        }
        if self.i - start < min || self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(DateTimeError::BadFormat);
        }
        Ok((n, self.i - start))
    }

    fn done(&self) -> bool {
        self.i == self.s.len()
    }
}

/// `YYYY-MM-DD` → (year, day number).
fn date_part(c: &mut Cursor) -> Result<(i64, i64), DateTimeError> {
    let (y, _) = c.digits(1, 7)?;
    if !c.eat(b'-') {
        return Err(DateTimeError::BadFormat);
    }
    let (m, _) = c.digits(1, 2)?;
    if !c.eat(b'-') {
        return Err(DateTimeError::BadFormat);
    }
    let (d, _) = c.digits(1, 2)?;
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) || y == 0 {
        return Err(DateTimeError::FieldOverflow);
    }
    Ok((y, days_from_civil(y, m, d)))
}

/// `HH:MM[:SS[.f...]]` → microseconds since midnight (24:00:00 allowed, as in PostgreSQL).
fn time_part(c: &mut Cursor) -> Result<i64, DateTimeError> {
    let (h, _) = c.digits(1, 2)?;
    if !c.eat(b':') {
        return Err(DateTimeError::BadFormat);
    }
    let (mi, _) = c.digits(2, 2)?;
    let (mut s, mut us) = (0, 0);
    if c.eat(b':') {
        s = c.digits(2, 2)?.0;
        if c.eat(b'.') {
            let (f, n) = c.digits(1, 18)?;
            // Round to microseconds, half away from zero.
            us = if n <= 6 {
                f * 10i64.pow(6 - n as u32)
            } else {
                let scale = 10i64.pow(n as u32 - 6);
                (f + scale / 2) / scale
            };
        }
    }
    let total = ((h * 60 + mi) * 60 + s) * 1_000_000 + us;
    if h > 24 || mi > 59 || s > 60 || total > MICROS_PER_DAY {
        return Err(DateTimeError::FieldOverflow);
    }
    Ok(total)
}

/// An optional zone → offset in seconds east of UTC (`None` when absent).
fn zone_part(c: &mut Cursor) -> Result<Option<i32>, DateTimeError> {
    c.blanks();
    let rest = std::str::from_utf8(&c.s[c.i..]).map_err(|_| DateTimeError::BadFormat)?;
    for name in ["z", "utc", "gmt"] {
        if rest.eq_ignore_ascii_case(name) {
            c.i = c.s.len();
            return Ok(Some(0));
        }
    }
    let sign = match c.peek() {
        None => return Ok(None),
        Some(b'+') => 1,
        Some(b'-') => -1,
        Some(_) => return Err(DateTimeError::BadFormat),
    };
    c.i += 1;
    let (h, n) = c.digits(1, 4)?;
    let (h, mut m, mut s) = if n > 2 {
        (h / 100, h % 100, 0)
    } else {
        (h, 0, 0)
    };
    if n <= 2 && c.eat(b':') {
        m = c.digits(2, 2)?.0;
        if c.eat(b':') {
            s = c.digits(2, 2)?.0;
        }
    }
    if h > 15 || m > 59 || s > 59 {
        return Err(DateTimeError::ZoneOverflow);
    }
    Ok(Some(sign * (h * 3600 + m * 60 + s) as i32))
}

/// `date` input: a date, optionally followed by a time (ignored, as PostgreSQL does).
pub fn parse_date(text: &str) -> Result<Date, DateTimeError> {
    let mut c = Cursor {
        s: text.trim().as_bytes(),
        i: 0,
    };
    let (y, days) = date_part(&mut c)?;
    if !c.done() {
        let sep = c.eat(b'T') || c.blanks();
        if !sep {
            return Err(DateTimeError::BadFormat);
        }
        time_part(&mut c)?;
        zone_part(&mut c)?;
    }
    if !c.done() {
        return Err(DateTimeError::BadFormat);
    }
    if y > DATE_YEAR_MAX {
        return Err(DateTimeError::OutOfRange);
    }
    Ok(Date(days as i32))
}

/// `time with time zone` input.
pub fn parse_timetz(text: &str) -> Result<TimeTz, DateTimeError> {
    let mut c = Cursor {
        s: text.trim().as_bytes(),
        i: 0,
    };
    let micros = time_part(&mut c)?;
    let offset_s = zone_part(&mut c)?.unwrap_or(0);
    if !c.done() {
        return Err(DateTimeError::BadFormat);
    }
    Ok(TimeTz { micros, offset_s })
}

/// `timestamp with time zone` input: a date, an optional time, an optional zone.
pub fn parse_timestamptz(text: &str) -> Result<TimestampTz, DateTimeError> {
    let mut c = Cursor {
        s: text.trim().as_bytes(),
        i: 0,
    };
    let (y, days) = date_part(&mut c)?;
    let mut micros = 0;
    let mut offset_s = 0;
    if !c.done() {
        let sep = c.eat(b'T') || c.blanks();
        if c.peek().is_some_and(|b| b.is_ascii_digit()) && sep {
            micros = time_part(&mut c)?;
        }
        offset_s = zone_part(&mut c)?.unwrap_or(0);
    }
    if !c.done() {
        return Err(DateTimeError::BadFormat);
    }
    if y > TIMESTAMP_YEAR_MAX {
        return Err(DateTimeError::OutOfRange);
    }
    Ok(TimestampTz(
        days * MICROS_PER_DAY + micros - i64::from(offset_s) * 1_000_000,
    ))
}

fn format_time(micros: i64) -> String {
    let (s, us) = (micros / 1_000_000, micros % 1_000_000);
    let mut out = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    if us != 0 {
        let frac = format!("{us:06}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out
}

fn format_offset(offset_s: i32) -> String {
    let sign = if offset_s < 0 { '-' } else { '+' };
    let a = offset_s.unsigned_abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    let mut out = format!("{sign}{h:02}");
    if m > 0 || s > 0 {
        out.push_str(&format!(":{m:02}"));
    }
    if s > 0 {
        out.push_str(&format!(":{s:02}"));
    }
    out
}

/// `2024-01-31`.
pub fn format_date(date: Date) -> String {
    let (y, m, d) = civil_from_days(i64::from(date.0));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `12:30:00.5+02`.
pub fn format_timetz(t: TimeTz) -> String {
    format!("{}{}", format_time(t.micros), format_offset(t.offset_s))
}

/// `2024-01-31 12:30:00+00` (in UTC, the model's session time zone).
pub fn format_timestamptz(t: TimestampTz) -> String {
    let days = t.0.div_euclid(MICROS_PER_DAY);
    let micros = t.0.rem_euclid(MICROS_PER_DAY);
    format!(
        "{} {}+00",
        format_date(Date(days as i32)),
        format_time(micros)
    )
}

//! Time, injected: every component that needs "now" takes a [`Clock`], so replay and conformance
//! runs are reproducible. Also the one timestamp form cra emits on the wire,
//! `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC, exactly six fractional digits), and an RFC 3339 parser for
//! timestamps that arrive from outside.

use std::fmt;
use std::sync::Mutex;

use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime, UtcOffset};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant, in UTC.
    fn now(&self) -> OffsetDateTime;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that stands still until told to move: for tests, replay and conformance fixtures.
#[derive(Debug)]
pub struct FixedClock {
    now: Mutex<OffsetDateTime>,
}

impl FixedClock {
    /// A clock frozen at `at`.
    pub fn new(at: OffsetDateTime) -> Self {
        Self {
            now: Mutex::new(at.to_offset(UtcOffset::UTC)),
        }
    }

    /// A clock frozen at the RFC 3339 instant `at`.
    pub fn parse(at: &str) -> Result<Self, TimestampError> {
        parse_rfc3339(at).map(Self::new)
    }

    /// Moves the clock to `at`.
    pub fn set(&self, at: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = at.to_offset(UtcOffset::UTC);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }
}

impl Clock for FixedClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A timestamp that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{input}` is not an RFC 3339 timestamp with a time zone (expected e.g. 2026-01-31T09:30:00Z): {reason}"
)]
pub struct TimestampError {
    /// The text that was given.
    pub input: String,
    /// What the parser objected to.
    pub reason: String,
}

/// Whole milliseconds from `from` to `to` (0 when `to` is earlier): the `duration_ms` of TRACE
/// payloads, measured on the injected clock.
pub fn millis_between(from: OffsetDateTime, to: OffsetDateTime) -> u64 {
    u64::try_from((to - from).whole_milliseconds()).unwrap_or(0)
}

/// Renders `t` in cra's wire form: UTC, microseconds, `Z` (`2024-12-28T12:00:00.000123Z`).
pub fn format_timestamp(t: OffsetDateTime) -> String {
    utc_text(t, false)
}

/// Renders `t` in UTC with nanoseconds and `Z` (`2024-12-28T12:00:00.000123456Z`): fixed width,
/// so the texts of instants order as the instants do (years 0-9999).
pub fn format_timestamp_nanos(t: OffsetDateTime) -> String {
    utc_text(t, true)
}

/// `t` in UTC, with six fractional digits or (`nanos`) nine, then `Z`.
fn utc_text(t: OffsetDateTime, nanos: bool) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    let (fraction, digits) = if nanos {
        (t.nanosecond(), 9)
    } else {
        (t.microsecond(), 6)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{fraction:0digits$}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
    )
}

/// Reads an RFC 3339 timestamp (any offset, any number of fractional digits) as a UTC instant.
/// A local time whose UTC instant is after year 9999 (`9999-12-31T23:30:00-01:00`) is refused,
/// not a panic.
pub fn parse_rfc3339(input: &str) -> Result<OffsetDateTime, TimestampError> {
    let error = |reason: String| TimestampError {
        input: input.to_owned(),
        reason,
    };
    let local = OffsetDateTime::parse(input, &Rfc3339).map_err(|e| error(e.to_string()))?;
    local
        .checked_to_offset(UtcOffset::UTC)
        .ok_or_else(|| error("its UTC instant is after year 9999".to_owned()))
}

/// True when `s` is exactly in cra's emitted form `YYYY-MM-DDTHH:MM:SS.ffffffZ` and is a real instant.
pub fn is_wire_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let shape_ok = b.len() == 27
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            26 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    shape_ok && parse_rfc3339(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole milliseconds, truncated; a clock that went back gives 0, never a wrapped number.
    #[test]
    fn millis_between_truncates_and_never_goes_negative() {
        let t0 = parse_rfc3339("2026-03-02T10:00:00Z").unwrap();
        let later = t0 + Duration::microseconds(1_500_999);
        assert_eq!(millis_between(t0, later), 1500);
        assert_eq!(millis_between(later, t0), 0);
        assert_eq!(millis_between(t0, t0), 0);
    }

    #[test]
    fn wire_form_has_six_fraction_digits_and_z() {
        let t = parse_rfc3339("2024-12-28T13:00:00.000123+01:00").unwrap();
        assert_eq!(format_timestamp(t), "2024-12-28T12:00:00.000123Z");
        assert!(is_wire_timestamp("2024-12-28T12:00:00.000123Z"));
        assert!(!is_wire_timestamp("2024-12-28T12:00:00.000Z"));
        assert!(!is_wire_timestamp("2024-13-28T12:00:00.000000Z"));
    }

    #[test]
    fn an_instant_beyond_year_9999_in_utc_is_refused_not_a_panic() {
        assert!(parse_rfc3339("9999-12-31T23:30:00-01:00").is_err());
        assert!(parse_rfc3339("9999-12-31T22:30:00-01:00").is_ok());
        // Year -1 in UTC is within range.
        assert!(parse_rfc3339("0000-01-01T00:30:00+01:00").is_ok());
    }

    #[test]
    fn fixed_clock_moves_only_when_told() {
        let c = FixedClock::parse("2026-01-01T00:00:00Z").unwrap();
        assert_eq!(format_timestamp(c.now()), "2026-01-01T00:00:00.000000Z");
        c.advance(Duration::seconds(90));
        assert_eq!(format_timestamp(c.now()), "2026-01-01T00:01:30.000000Z");
    }

    #[test]
    fn bad_timestamps_say_what_was_expected() {
        let e = parse_rfc3339("yesterday").unwrap_err();
        assert!(e.to_string().contains("RFC 3339"));
    }
}

//! The §4.2 field rules: what each event of a TRACE 1.0 chain must say besides being hashed and
//! linked correctly.
//!
//! Checked on every well-formed event, on the decoded values (the ones the hash reads):
//! * `trace_version` is exactly `"1.0"` ([`Code::InvalidTraceVersion`]);
//! * `event_id`, `trace_id`, `span_id`, `session_id` and a non-null `parent_span_id` are
//!   canonical UUIDs: 36 characters, lowercase hex digits in groups of 8-4-4-4-12 joined by `-`,
//!   of any version (errata: cra writes v7, but the spec's own examples are not v7)
//!   ([`Code::InvalidId`]);
//! * `timestamp` is an RFC 3339 instant with a zone: `YYYY-MM-DDTHH:MM:SS`, an optional `.` and
//!   one or more fraction digits, then `Z` or `±hh:mm`; uppercase `T` and `Z` (the forms ISO 8601
//!   and RFC 3339 share); a real calendar date and time of day, no leap second (`:60`), and a UTC
//!   instant no later than year 9999 ([`Code::InvalidTimestamp`]). The timestamp is only read
//!   here: the hash always takes it as written.
//!
//! The chain-wide rule (one `session_id` per chain, [`Code::SessionMixed`]) is the chain
//! checker's; this module keeps the `session_id` it compares ([`SessionText`]).
//!
//! Pure byte checks that allocate nothing unless a rule is broken: they run on every event of
//! the verifier's hot path.

use cra_wire::id::is_canonical_uuid_bytes;

use crate::verify::Code;

/// The values the rules read, decoded from JSON (escapes resolved).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub(crate) trace_version: &'a [u8],
    pub(crate) event_id: &'a [u8],
    pub(crate) trace_id: &'a [u8],
    pub(crate) span_id: &'a [u8],
    pub(crate) parent_span_id: Option<&'a [u8]>,
    pub(crate) session_id: &'a [u8],
    pub(crate) timestamp: &'a [u8],
}

/// One broken field rule of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) code: Code,
    /// The field's name (`event_id`, ...).
    pub(crate) field: &'static str,
    /// What is wrong, for people (names the field and shows its value).
    pub(crate) message: String,
}

/// The rules `fields` breaks, in field order (empty, and not allocated, when it breaks none).
#[inline]
pub(crate) fn faults(fields: &Fields<'_>) -> Vec<Fault> {
    if follows_every_rule(fields) {
        Vec::new()
    } else {
        broken_rules(fields)
    }
}

/// Whether `fields` breaks no rule: the hot path, without building anything.
#[inline]
fn follows_every_rule(fields: &Fields<'_>) -> bool {
    matches!(fields.trace_version, b"1.0")
        && is_canonical_uuid_bytes(fields.event_id)
        && is_canonical_uuid_bytes(fields.trace_id)
        && is_canonical_uuid_bytes(fields.span_id)
        && fields.parent_span_id.is_none_or(is_canonical_uuid_bytes)
        && is_canonical_uuid_bytes(fields.session_id)
        && check_timestamp(fields.timestamp).is_ok()
}

/// Every rule `fields` breaks, with its message.
#[cold]
fn broken_rules(fields: &Fields<'_>) -> Vec<Fault> {
    let mut out = Vec::new();
    if !matches!(fields.trace_version, b"1.0") {
        out.push(Fault {
            code: Code::InvalidTraceVersion,
            field: "trace_version",
            message: format!(
                "trace_version is {}; a TRACE 1.0 event must say \"1.0\"",
                shown(fields.trace_version)
            ),
        });
    }
    let ids = [
        ("event_id", Some(fields.event_id)),
        ("trace_id", Some(fields.trace_id)),
        ("span_id", Some(fields.span_id)),
        ("parent_span_id", fields.parent_span_id),
        ("session_id", Some(fields.session_id)),
    ];
    for (field, value) in ids {
        if let Some(value) = value.filter(|v| !is_canonical_uuid_bytes(v)) {
            out.push(Fault {
                code: Code::InvalidId,
                field,
                message: format!(
                    "{field} is {}, not a UUID in canonical form (8-4-4-4-12 lowercase hex digits)",
                    shown(value)
                ),
            });
        }
    }
    if let Err(reason) = check_timestamp(fields.timestamp) {
        out.push(Fault {
            code: Code::InvalidTimestamp,
            field: "timestamp",
            message: format!(
                "timestamp {} is not an RFC 3339 instant with a zone \
                 (YYYY-MM-DDTHH:MM:SS[.fraction] then Z or ±hh:mm): {reason}",
                shown(fields.timestamp)
            ),
        });
    }
    out
}

/// A value for a message: quoted, escaped, and cut after 80 characters.
fn shown(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// A `session_id` as written: inline when it has a UUID's 36 bytes (so comparing the sessions of
/// a valid chain allocates nothing), boxed otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SessionText {
    Inline([u8; 36]),
    Other(Box<[u8]>),
}

impl SessionText {
    pub(crate) fn new(value: &[u8]) -> Self {
        match <[u8; 36]>::try_from(value) {
            Ok(a) => SessionText::Inline(a),
            Err(_) => SessionText::Other(value.into()),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            SessionText::Inline(a) => a,
            SessionText::Other(b) => b,
        }
    }

    /// For messages.
    pub(crate) fn shown(&self) -> String {
        shown(self.as_bytes())
    }
}

/// The value of the two ASCII digits at `at`, if they are digits.
#[inline]
fn two_digits(b: &[u8], at: usize) -> Option<u32> {
    match b.get(at..at + 2)? {
        &[t @ b'0'..=b'9', u @ b'0'..=b'9'] => Some(u32::from(t - b'0') * 10 + u32::from(u - b'0')),
        _ => None,
    }
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

const SHAPE: &str = "it does not have that form";

/// Whether `h` is `DDDD-DD-DDTDD:DD:DD` (D an ASCII digit).
#[inline]
fn date_time_shape(h: &[u8; 19]) -> bool {
    h.iter().enumerate().all(|(i, &c)| match i {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        _ => c.is_ascii_digit(),
    })
}

/// Checks a timestamp against the accepted form (see the module documentation); the error says
/// what is wrong.
#[inline]
pub(crate) fn check_timestamp(b: &[u8]) -> Result<(), &'static str> {
    // `YYYY-MM-DDTHH:MM:SS` as a fixed-size head, so the checks below need no bounds checks.
    let Some(head) = b.first_chunk::<19>() else {
        return Err(SHAPE);
    };
    if !date_time_shape(head) {
        return Err(SHAPE);
    }
    let num = |i: usize| u32::from(head[i] - b'0') * 10 + u32::from(head[i + 1] - b'0');
    let (year, month, day) = (num(0) * 100 + num(2), num(5), num(8));
    let (hour, minute, second) = (num(11), num(14), num(17));
    let mut at = 19;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return Err("the fraction after `.` has no digits");
        }
    }
    let offset = zone(b, at)?;
    if !(1..=12).contains(&month) {
        return Err("the month is not 01-12");
    }
    if day == 0 || day > days_in_month(year, month) {
        return Err("that day does not exist in that month");
    }
    if hour > 23 || minute > 59 {
        return Err("the time of day does not exist");
    }
    if second > 59 {
        return Err("the seconds are above 59 (leap seconds are refused)");
    }
    // Only a negative offset on the year's last day can move the instant past year 9999.
    if year == 9999 && month == 12 && day == 31 && i64::from(hour * 60 + minute) - offset >= 24 * 60
    {
        return Err("its UTC instant is after year 9999");
    }
    Ok(())
}

/// Reads the zone at `at` (which must end `b`) as minutes east of UTC.
fn zone(b: &[u8], at: usize) -> Result<i64, &'static str> {
    let sign = match b.get(at) {
        None => return Err("it has no time zone (Z or ±hh:mm)"),
        Some(b'Z') if b.len() == at + 1 => return Ok(0),
        Some(b'+') => 1,
        Some(b'-') => -1,
        Some(_) => return Err(SHAPE),
    };
    let hours = two_digits(b, at + 1).ok_or(SHAPE)?;
    let minutes = two_digits(b, at + 4).ok_or(SHAPE)?;
    if b.get(at + 3) != Some(&b':') || b.len() != at + 6 {
        return Err(SHAPE);
    }
    if hours > 23 || minutes > 59 {
        return Err("the zone offset is not within ±23:59");
    }
    Ok(sign * i64::from(hours * 60 + minutes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_timestamps() {
        for ok in [
            "2026-01-15T09:30:00.000000Z",
            "2026-01-15T09:30:00Z",
            "2026-01-15T09:30:00.1Z",
            "2026-01-15T09:30:00.123456789012Z",
            "2026-01-15T10:30:00.123456+01:00",
            "2026-01-15T09:30:00-00:00",
            "2024-02-29T23:59:59.999999-23:59",
            "2000-02-29T00:00:00Z",
            "0000-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59.999999Z",
            "9999-12-31T22:59:59-01:00",
        ] {
            assert_eq!(check_timestamp(ok.as_bytes()), Ok(()), "{ok}");
            // Whatever is accepted here can be ordered by the lifecycle rules.
            assert!(cra_wire::clock::parse_rfc3339(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refused_timestamps() {
        for bad in [
            "",
            "2026-01-15T09:30:00",
            "2026-01-15T09:30:00.000000",
            "2026-01-15",
            "2026-01-15T09:30Z",
            "2026-01-15 09:30:00Z",
            "2026-01-15t09:30:00Z",
            "2026-01-15T09:30:00z",
            "2026-01-15T09:30:00.Z",
            "2026-01-15T09:30:00.000000ZZ",
            "2026-01-15T09:30:00+0100",
            "2026-01-15T09:30:00+01",
            "2026-01-15T09:30:00+01:00 ",
            "2026-01-15T09:30:00+24:00",
            "2026-01-15T09:30:00+01:60",
            "2026-13-15T09:30:00Z",
            "2026-00-15T09:30:00Z",
            "2026-02-29T09:30:00Z",
            "1900-02-29T09:30:00Z",
            "2026-04-31T09:30:00Z",
            "2026-01-00T09:30:00Z",
            "2026-01-15T24:00:00Z",
            "2026-01-15T09:60:00Z",
            "2016-12-31T23:59:60Z",
            "9999-12-31T23:30:00-01:00",
            "+2026-01-15T09:30:00Z",
            "２026-01-15T09:30:00Z",
            "1767000000",
        ] {
            assert!(check_timestamp(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(
            check_timestamp(b"2026-01-15T09:30:00.000000"),
            Err("it has no time zone (Z or ±hh:mm)")
        );
    }

    #[test]
    fn a_valid_event_has_no_faults() {
        let id = b"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71";
        let fields = Fields {
            trace_version: b"1.0",
            event_id: id,
            trace_id: id,
            span_id: id,
            parent_span_id: None,
            session_id: id,
            timestamp: b"2026-01-15T09:30:00.000000Z",
        };
        assert_eq!(faults(&fields), vec![]);
        let broken = Fields {
            trace_version: b"2.0",
            parent_span_id: Some(b"p"),
            timestamp: b"noon",
            ..fields
        };
        let found: Vec<_> = faults(&broken).iter().map(|f| (f.code, f.field)).collect();
        assert_eq!(
            found,
            [
                (Code::InvalidTraceVersion, "trace_version"),
                (Code::InvalidId, "parent_span_id"),
                (Code::InvalidTimestamp, "timestamp"),
            ]
        );
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let long = "x".repeat(10_000);
        let fields = Fields {
            trace_version: b"1.0",
            event_id: long.as_bytes(),
            trace_id: b"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
            span_id: b"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
            parent_span_id: None,
            session_id: b"0190f5d2-8a4e-7b3c-9d1e-2f3a4b5c6d71",
            timestamp: b"2026-01-15T09:30:00Z",
        };
        let found = faults(&fields);
        assert_eq!(found.len(), 1);
        assert!(found[0].message.len() < 200, "{}", found[0].message);
        assert!(found[0].message.starts_with("event_id is \"xxx"));
    }
}

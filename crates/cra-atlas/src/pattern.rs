//! Policy action patterns (errata, "Policy shape").
//!
//! A pattern is a dot-separated list of segments, each one of:
//! * a literal segment (`[a-z][a-z0-9]*`), which matches that segment exactly;
//! * `*`, which matches exactly one segment;
//! * `**`, which matches one or more segments.
//!
//! The pattern `*` on its own is special: it matches every action id, whatever its number of
//! segments (errata). Mixed segments such as `ticket*` are not patterns: [`validate_pattern`]
//! refuses them, and [`matches`] treats them as literals (so they never match a valid action id).
//!
//! Matching is pure and allocation-free; CARP's evaluator calls [`matches`] for every
//! (policy, action) pair.

/// Why a string is not a valid action pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern is the empty string.
    #[error(
        "the pattern is empty: write an action id, `*`, or a dotted pattern such as `ticket.*`"
    )]
    Empty,
    /// One segment is empty (`a..b`, a leading or trailing dot).
    #[error("segment {index} of `{pattern}` is empty: remove the extra dot")]
    EmptySegment {
        /// The pattern.
        pattern: String,
        /// 0-based segment index.
        index: usize,
    },
    /// One segment is neither a literal nor a wildcard.
    #[error(
        "segment `{segment}` of `{pattern}` is not valid: a segment is `*`, `**`, or lowercase \
         letters and digits starting with a letter"
    )]
    BadSegment {
        /// The pattern.
        pattern: String,
        /// The bad segment.
        segment: String,
    },
}

/// Checks that `pattern` is a well-formed action pattern (see the module documentation).
pub fn validate_pattern(pattern: &str) -> Result<(), PatternError> {
    if pattern.is_empty() {
        return Err(PatternError::Empty);
    }
    for (index, segment) in pattern.split('.').enumerate() {
        if segment.is_empty() {
            return Err(PatternError::EmptySegment {
                pattern: pattern.to_owned(),
                index,
            });
        }
        if segment == "*" || segment == "**" {
            continue;
        }
        let mut bytes = segment.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
        if !first_ok || !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err(PatternError::BadSegment {
                pattern: pattern.to_owned(),
                segment: segment.to_owned(),
            });
        }
    }
    Ok(())
}

/// True when `pattern` matches `action_id` (see the module documentation).
pub fn matches(pattern: &str, action_id: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let pat: Vec<&str> = pattern.split('.').collect();
    let id: Vec<&str> = action_id.split('.').collect();
    match_segments(&pat, &id)
}

/// True when any of `patterns` matches `action_id`.
pub fn matches_any<S: AsRef<str>>(patterns: &[S], action_id: &str) -> bool {
    patterns.iter().any(|p| matches(p.as_ref(), action_id))
}

/// True when the pattern is a plain action id (no wildcard segment).
pub fn is_exact(pattern: &str) -> bool {
    !pattern.split('.').any(|s| s == "*" || s == "**")
}

fn match_segments(pat: &[&str], id: &[&str]) -> bool {
    match pat.split_first() {
        None => id.is_empty(),
        Some((&"**", rest)) => {
            // One or more segments: try every split that consumes at least one.
            (1..=id.len()).any(|taken| match_segments(rest, &id[taken..]))
        }
        Some((&"*", rest)) => !id.is_empty() && match_segments(rest, &id[1..]),
        Some((lit, rest)) => id.first() == Some(lit) && match_segments(rest, &id[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases: &[(&str, &str, bool)] = &[
            ("ticket.lookup", "ticket.lookup", true),
            ("ticket.lookup", "ticket.lookups", false),
            ("ticket.lookup", "ticket.lookup.all", false),
            ("ticket.*", "ticket.lookup", true),
            ("ticket.*", "ticket", false),
            ("ticket.*", "ticket.note.add", false),
            ("ticket.**", "ticket.note.add", true),
            ("ticket.**", "ticket.lookup", true),
            ("ticket.**", "ticket", false),
            ("*.delete", "resource.delete", true),
            ("*.delete", "repo.branch.delete", false),
            ("**.delete", "repo.branch.delete", true),
            ("**.delete", "resource.delete", true),
            ("**.delete", "delete", false),
            ("a.**.z", "a.b.c.z", true),
            ("a.**.z", "a.z", false),
            ("*.*", "a.b", true),
            ("*.*", "a.b.c", false),
            ("*", "a.b.c", true),
            ("*", "anything.at.all.here", true),
            ("**", "a.b", true),
            ("**.**", "a", false),
            ("**.**", "a.b", true),
            ("ticket*", "ticket.lookup", false),
        ];
        for (p, id, want) in cases {
            assert_eq!(matches(p, id), *want, "pattern {p:?} against {id:?}");
        }
    }

    #[test]
    fn validation() {
        for ok in ["*", "**", "a.b", "a.*", "a.**.c", "payment2.refund"] {
            assert_eq!(validate_pattern(ok), Ok(()), "{ok}");
        }
        assert_eq!(validate_pattern(""), Err(PatternError::Empty));
        assert!(matches!(
            validate_pattern("a..b"),
            Err(PatternError::EmptySegment { index: 1, .. })
        ));
        for bad in ["ticket*", "Ticket.x", "a.b-c", "a.1b", "a.***"] {
            assert!(
                matches!(validate_pattern(bad), Err(PatternError::BadSegment { .. })),
                "{bad}"
            );
        }
        assert!(is_exact("a.b"));
        assert!(!is_exact("a.*"));
        assert!(matches_any(&["x.y", "a.*"], "a.b"));
    }
}

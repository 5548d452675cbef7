//! Policy action patterns (errata, "Policy shape").
//!
//! A pattern is a dot-separated list of segments, each one of:
//! * a literal segment (`[a-z][a-z0-9]*`), which matches that segment exactly;
//! * `*`, which matches exactly one segment;
//! * `**`, which matches one or more segments.
//!
//! The pattern `*` on its own is special: it matches every action id, whatever its number of
//! segments (errata). Mixed segments such as `ticket*` are not patterns: [`validate_pattern`]
//! refuses them, and [`matches`](fn@matches) treats them as literals (so they never match a valid action id).
//!
//! Matching is pure and allocation-free; CARP's evaluator calls [`matches`](fn@matches) for every
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

/// True when `pattern` matches `action_id` (see the module documentation). Allocation-free.
pub fn matches(pattern: &str, action_id: &str) -> bool {
    pattern == "*" || match_segments(pattern.split('.'), action_id.split('.'))
}

/// True when any of `patterns` matches `action_id`.
pub fn matches_any<S: AsRef<str>>(patterns: &[S], action_id: &str) -> bool {
    patterns.iter().any(|p| matches(p.as_ref(), action_id))
}

/// True when the pattern is a plain action id (no wildcard segment).
pub fn is_exact(pattern: &str) -> bool {
    !pattern.split('.').any(|s| s == "*" || s == "**")
}

type Segments<'a> = std::str::Split<'a, char>;

fn match_segments(mut pat: Segments<'_>, mut id: Segments<'_>) -> bool {
    loop {
        match pat.next() {
            None => return id.next().is_none(),
            Some("**") => {
                // One or more segments: consume one, then try every further split.
                if id.next().is_none() {
                    return false;
                }
                loop {
                    if match_segments(pat.clone(), id.clone()) {
                        return true;
                    }
                    if id.next().is_none() {
                        return false;
                    }
                }
            }
            Some("*") => {
                if id.next().is_none() {
                    return false;
                }
            }
            Some(literal) => {
                if id.next() != Some(literal) {
                    return false;
                }
            }
        }
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

    /// The pattern as an anchored regular expression: the specification in another form.
    fn reference(pattern: &str) -> regex::Regex {
        if pattern == "*" {
            return regex::Regex::new("^.*$").unwrap();
        }
        let parts: Vec<String> = pattern
            .split('.')
            .map(|s| match s {
                "*" => "[a-z0-9]+".to_owned(),
                "**" => "[a-z0-9]+(?:\\.[a-z0-9]+)*".to_owned(),
                lit => regex::escape(lit),
            })
            .collect();
        regex::Regex::new(&format!("^{}$", parts.join("\\."))).unwrap()
    }

    #[test]
    fn agrees_with_a_regex_reference_exhaustively() {
        // Every pattern of up to 3 segments over {a, b, *, **} against every id of 1 to 4
        // segments over {a, b}: 84 patterns x 30 ids.
        let seg = ["a", "b", "*", "**"];
        let mut patterns = Vec::new();
        let mut frontier: Vec<String> = seg.iter().map(|s| (*s).to_owned()).collect();
        for _ in 0..3 {
            patterns.extend(frontier.iter().cloned());
            frontier = frontier
                .iter()
                .flat_map(|p| seg.iter().map(move |s| format!("{p}.{s}")))
                .collect();
        }
        let mut ids = Vec::new();
        let mut frontier: Vec<String> = vec!["a".into(), "b".into()];
        for _ in 0..4 {
            ids.extend(frontier.iter().cloned());
            frontier = frontier
                .iter()
                .flat_map(|p| ["a", "b"].iter().map(move |s| format!("{p}.{s}")))
                .collect();
        }
        assert_eq!((patterns.len(), ids.len()), (84, 30));
        for p in &patterns {
            let re = reference(p);
            for id in &ids {
                assert_eq!(matches(p, id), re.is_match(id), "pattern {p} id {id}");
            }
        }
    }
}

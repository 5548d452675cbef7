//! The report: per-case status, aggregation per level and surface, the verdict on each claimed
//! level, and the human and JSON renderings. The last line of the human report is always
//! `results: N passed, M failed`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::matcher::Mismatch;
use crate::verbs;

/// How one case ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// The answer matched.
    Passed,
    /// The answer did not match: the differences and the full answer.
    Failed {
        /// Every difference.
        mismatches: Vec<Mismatch>,
        /// What the implementation answered.
        actual: Value,
        /// The pattern.
        expected: Value,
    },
    /// The case could not be played.
    Errored(String),
    /// The implementation does not offer this verb or capability.
    NotImplemented(String),
}

impl Status {
    /// `passed`, `failed`, `errored` or `not_implemented`.
    pub fn label(&self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed { .. } => "failed",
            Status::Errored(_) => "errored",
            Status::NotImplemented(_) => "not_implemented",
        }
    }
}

/// The result of one fixture.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// Fixture id.
    pub id: String,
    /// Suite.
    pub suite: String,
    /// Level.
    pub level: String,
    /// Surface.
    pub surface: String,
    /// Outcome.
    pub status: Status,
}

/// Counts of one group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Matched.
    pub passed: usize,
    /// Did not match.
    pub failed: usize,
    /// Could not be played.
    pub errored: usize,
    /// Not offered by the implementation.
    pub not_implemented: usize,
}

impl Counts {
    fn add(&mut self, s: &Status) {
        match s {
            Status::Passed => self.passed += 1,
            Status::Failed { .. } => self.failed += 1,
            Status::Errored(_) => self.errored += 1,
            Status::NotImplemented(_) => self.not_implemented += 1,
        }
    }

    fn total(&self) -> usize {
        self.passed + self.failed + self.errored + self.not_implemented
    }

    fn to_json(self) -> Value {
        json!({"passed": self.passed, "failed": self.failed, "errored": self.errored,
               "not_implemented": self.not_implemented})
    }
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The target's name.
    pub target: String,
    /// The levels the target declares.
    pub claims: Vec<String>,
    /// Every case, in fixture-id order.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// Totals over every case.
    pub fn totals(&self) -> Counts {
        let mut c = Counts::default();
        for r in &self.cases {
            c.add(&r.status);
        }
        c
    }

    /// Counts per (level, surface).
    pub fn by_level_surface(&self) -> BTreeMap<(String, String), Counts> {
        let mut m: BTreeMap<(String, String), Counts> = BTreeMap::new();
        for r in &self.cases {
            m.entry((r.level.clone(), r.surface.clone()))
                .or_default()
                .add(&r.status);
        }
        m
    }

    /// For each claimed level: the counts of the cases it covers. A claim holds only when every
    /// covered case passed (a `not_implemented` answer never counts as a pass of a claimed level)
    /// and at least one case was played.
    pub fn claim_verdicts(&self) -> Vec<(String, Counts, bool)> {
        self.claims
            .iter()
            .map(|level| {
                let mut c = Counts::default();
                for r in self
                    .cases
                    .iter()
                    .filter(|r| verbs::level_covers(level, &r.level))
                {
                    c.add(&r.status);
                }
                let holds = c.total() > 0 && c.passed == c.total();
                (level.clone(), c, holds)
            })
            .collect()
    }

    /// The failed cases.
    pub fn failures(&self) -> impl Iterator<Item = &CaseResult> {
        self.cases
            .iter()
            .filter(|r| matches!(r.status, Status::Failed { .. }))
    }

    /// Ids of the failed cases.
    pub fn failed_ids(&self) -> Vec<String> {
        self.failures().map(|r| r.id.clone()).collect()
    }

    /// Process status: 0 when nothing failed or errored and every exercised claim holds, else 2.
    pub fn exit_code(&self) -> u8 {
        let t = self.totals();
        let claims_ok = self
            .claim_verdicts()
            .iter()
            .all(|(_, c, holds)| *holds || c.total() == 0);
        if t.failed == 0 && t.errored == 0 && claims_ok {
            0
        } else {
            2
        }
    }

    /// The human report.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "conformance run against {}", self.target);
        let _ = writeln!(
            s,
            "{:<12} {:<20} {:>6} {:>6} {:>7} {:>7}",
            "level", "surface", "passed", "failed", "errored", "not-impl"
        );
        for ((level, surface), c) in self.by_level_surface() {
            let _ = writeln!(
                s,
                "{level:<12} {surface:<20} {:>6} {:>6} {:>7} {:>7}",
                c.passed, c.failed, c.errored, c.not_implemented
            );
        }
        for r in &self.cases {
            match &r.status {
                Status::Failed {
                    mismatches,
                    actual,
                    expected,
                } => {
                    let _ = writeln!(s, "\nFAILED {} ({}/{})", r.id, r.level, r.surface);
                    for m in mismatches {
                        let _ = writeln!(s, "  {m}");
                    }
                    let _ = writeln!(s, "  expected: {}", clip(&expected.to_string()));
                    let _ = writeln!(s, "  actual:   {}", clip(&actual.to_string()));
                }
                Status::Errored(e) => {
                    let _ = writeln!(s, "\nERRORED {} ({}/{}): {e}", r.id, r.level, r.surface);
                }
                _ => {}
            }
        }
        let ni: BTreeMap<&str, usize> = self
            .cases
            .iter()
            .filter(|r| matches!(r.status, Status::NotImplemented(_)))
            .fold(BTreeMap::new(), |mut m, r| {
                *m.entry(r.surface.as_str()).or_default() += 1;
                m
            });
        if !ni.is_empty() {
            let list: Vec<String> = ni.iter().map(|(k, v)| format!("{k} ({v})")).collect();
            let _ = writeln!(s, "\nnot implemented: {}", list.join(", "));
        }
        for (level, c, holds) in self.claim_verdicts() {
            if c.total() == 0 {
                let _ = writeln!(s, "claim {level}: not exercised by this selection");
            } else {
                let verdict = if holds { "holds" } else { "DOES NOT HOLD" };
                let _ = writeln!(
                    s,
                    "claim {level} (over the selected cases): {verdict} ({} passed, {} failed, {} errored, {} not implemented)",
                    c.passed, c.failed, c.errored, c.not_implemented
                );
            }
        }
        let t = self.totals();
        let _ = writeln!(
            s,
            "errored: {}, not implemented: {}",
            t.errored, t.not_implemented
        );
        let _ = writeln!(s, "results: {} passed, {} failed", t.passed, t.failed);
        s
    }

    /// The JSON report.
    pub fn to_json(&self) -> Value {
        let groups: Vec<Value> = self
            .by_level_surface()
            .into_iter()
            .map(|((level, surface), c)| {
                let mut v = c.to_json();
                v["level"] = json!(level);
                v["surface"] = json!(surface);
                v
            })
            .collect();
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|r| {
                let mut v = json!({"id": r.id, "suite": r.suite, "level": r.level,
                                   "surface": r.surface, "status": r.status.label()});
                match &r.status {
                    Status::Failed { mismatches, actual, expected } => {
                        v["expected"] = expected.clone();
                        v["actual"] = actual.clone();
                        v["mismatches"] = mismatches
                            .iter()
                            .map(|m| json!({"pointer": m.pointer, "expected": m.expected, "actual": m.actual}))
                            .collect();
                    }
                    Status::Errored(m) | Status::NotImplemented(m) => v["reason"] = json!(m),
                    Status::Passed => {}
                }
                v
            })
            .collect();
        let claims: Vec<Value> = self
            .claim_verdicts()
            .into_iter()
            .map(|(level, c, holds)| {
                let mut v = c.to_json();
                v["level"] = json!(level);
                v["holds"] = json!(holds);
                v
            })
            .collect();
        let t = self.totals();
        json!({"target": self.target, "totals": t.to_json(), "by_level_surface": groups,
               "claims": claims, "cases": cases,
               "results": format!("results: {} passed, {} failed", t.passed, t.failed)})
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() > 600 {
        let c: String = s.chars().take(600).collect();
        format!("{c}...")
    } else {
        s.to_owned()
    }
}

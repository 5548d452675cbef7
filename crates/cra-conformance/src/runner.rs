//! Plays the selected fixtures against a target and judges every answer with the matcher.

use crate::fixture::{Filter, Fixture};
use crate::matcher::match_value;
use crate::report::{CaseResult, Report, Status};
use crate::target::{Outcome, Target};

/// Judges one outcome against the fixture's expectation.
pub fn judge(fixture: &Fixture, outcome: Outcome) -> Status {
    match outcome {
        Outcome::Answer(actual) => {
            let mismatches = match_value(&fixture.expected, &actual);
            if mismatches.is_empty() {
                Status::Passed
            } else {
                Status::Failed {
                    mismatches,
                    actual,
                    expected: fixture.expected.clone(),
                }
            }
        }
        Outcome::NotImplemented(m) => Status::NotImplemented(m),
        Outcome::Errored(m) => Status::Errored(m),
    }
}

/// Plays every fixture `filter` accepts against `target`, in id order.
pub fn run(target: &dyn Target, fixtures: &[Fixture], filter: &Filter) -> Report {
    let cases = fixtures
        .iter()
        .filter(|f| filter.accepts(f))
        .map(|f| CaseResult {
            id: f.id.clone(),
            suite: f.suite.clone(),
            level: f.level.clone(),
            surface: f.surface.clone(),
            status: judge(f, target.play(f)),
        })
        .collect();
    Report {
        target: target.name(),
        claims: target.claims(),
        cases,
    }
}

//! `cra-conformance`: the runner of the language-neutral conformance suite in `conformance/`.
//!
//! * [`fixture`]: the fixture file format (one JSON file per case), loading and filtering.
//! * [`verbs`]: the abstract verbs, setup keys, suites, levels and surfaces the format allows.
//! * [`matcher`]: the partial structural matcher (`$any`, `$prefix`, `$unordered`, ...), applied
//!   by the runner itself so an implementation never judges its own answer.
//! * [`target`]: where fixtures are played: [`target::inproc`] calls the cra crates directly,
//!   [`target::http`] talks to any server over plain HTTP.
//! * [`runner`] plays fixtures against a target; [`report`] aggregates per level and surface and
//!   renders the human and JSON reports.

pub mod fixture;
pub mod matcher;
pub mod report;
pub mod runner;
pub mod target;
pub mod verbs;

pub use fixture::{Filter, Fixture, FixtureError, load_dir};
pub use matcher::{Mismatch, match_value};
pub use report::{Report, Status};
pub use runner::run;
pub use target::{Outcome, Target};

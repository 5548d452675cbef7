//! `cra trace replay FILE --atlas DIR|ARCHIVE...`: re-run every CARP resolve recorded in a trace
//! against the given atlases and compare each new resolution with the recorded one (spec §4.5,
//! deterministic replay; the engine is [`cra_carp::replay::replay_library`]).
//!
//! Each request is re-resolved at its recorded time, with the counters recorded with it, against
//! the supplied atlas whose digest the request recorded (several versions of one atlas may be
//! given). When a recorded digest matches no supplied atlas, the replay still runs (against the
//! supplied atlas of that id) and the report warns: that is how a changed atlas shows up as a
//! divergence. The chain is verified first, with the lifecycle rules.
//!
//! Every execute the trace recorded is then decided again under the resolution its resolve was
//! made again into, on the history the trace recorded before it
//! ([`cra_carp::execute_replay`]); one decided otherwise (outcome or refusing policy) is a
//! divergence too.
//!
//! Exit codes: 0 every resolve and execute replayed identically; 2 a divergence, a request that
//! could not be re-decided, or a chain that does not verify; 1 the trace could not be read; 3 an
//! atlas is invalid.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;
use cra_carp::execute_replay::{ExecuteCase, ExecuteReplay, replay_executes};
use cra_carp::replay::{
    AtlasNote, CaseOutcome, ReplayCase, ReplayClock, ReplayOptions, replay_library,
};
use cra_trace::{Finding, VerifyOptions, verify_events_with};
use cra_wire::Token;
use serde_json::{Value, json};

use crate::cmd::trace_io::{Failure, input_name, read_events};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra trace replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The trace; `-` or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// Atlas directories or `.atlas.tar.gz` archives (repeat; several versions of one atlas may
    /// be given, each request uses the one with its recorded digest).
    #[arg(long = "atlas", required = true)]
    pub atlases: Vec<PathBuf>,
    /// Re-resolve at the timestamp of each request event (the chain's clock) instead of the
    /// instant the recorded resolution states it was made.
    #[arg(long)]
    pub now_from_trace: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What a replay found, for printing.
#[derive(Debug)]
pub struct ReplayReport {
    /// The input's name.
    pub name: String,
    /// Events read.
    pub events: usize,
    /// Chain and lifecycle findings.
    pub findings: Vec<Finding>,
    /// One per recorded resolve.
    pub cases: Vec<ReplayCase>,
    /// One per recorded execute, in the order they were recorded.
    pub executes: Vec<ExecuteCase>,
    /// The clock used.
    pub clock: ReplayClock,
    /// The atlases supplied: (id, version, digest, source).
    pub atlases: Vec<(String, String, String, String)>,
}

impl ReplayReport {
    fn count(&self, f: impl Fn(&CaseOutcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }

    /// Cases replayed identically.
    pub fn same(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Same))
    }

    /// Cases that diverged.
    pub fn diverged(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Diverged { .. }))
    }

    /// Cases that could not be replayed.
    pub fn errors(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Error(_)))
    }

    /// Executes decided otherwise, or that could not be decided again. One decided otherwise
    /// on history of an agent or global scope that the call did not record reading is not:
    /// other chains hold part of that history (`cra atlas simulate` over every chain decides
    /// those).
    pub fn executes_failed(&self) -> impl Iterator<Item = &ExecuteCase> {
        self.executes.iter().filter(|c| {
            (c.diverged() && !c.reads_beyond_session)
                || matches!(c.now, ExecuteReplay::NotDecided(_))
        })
    }

    /// True when the chain verifies and every resolve and execute replayed the same.
    pub fn identical(&self) -> bool {
        self.findings.is_empty()
            && self.same() == self.cases.len()
            && self.executes_failed().next().is_none()
    }

    /// Distinct atlas notes with the number of requests each concerns, in order.
    pub fn warnings(&self) -> Vec<(AtlasNote, usize)> {
        let mut m: BTreeMap<AtlasNote, usize> = BTreeMap::new();
        for c in &self.cases {
            for n in &c.atlas_notes {
                *m.entry(n.clone()).or_default() += 1;
            }
        }
        m.into_iter().collect()
    }
}

/// `cra trace replay` as a library function.
pub fn replay(
    args: &ReplayArgs,
    stdin: impl Read,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    const CMD: &str = "cra trace replay";
    let events = match read_events(args.file.as_deref(), stdin) {
        Ok(e) => e,
        Err(f) => return f.report(CMD, args.output, out, err),
    };
    let mut library = Vec::with_capacity(args.atlases.len());
    for p in &args.atlases {
        match cra_carp::atlas_check::load(p) {
            Ok(a) => library.push(a),
            Err(e) => {
                let io = matches!(e, cra_atlas::LoadError::Io { .. });
                let f = Failure::new(
                    if io {
                        Token::NotFound
                    } else {
                        Token::InvalidRequest
                    },
                    format!("atlas {}: {e}", p.display()),
                );
                let exit = f.report(CMD, args.output, out, err);
                return if io { exit } else { Exit::InvalidAtlas };
            }
        }
    }
    let report = run_replay(args, &events, &library);
    let printed = match args.output {
        OutputFormat::Json => writeln!(out, "{}", report_json(&report)),
        OutputFormat::Text => print_text(out, &report),
    };
    if let Err(e) = printed {
        let _ = writeln!(err, "{CMD}: cannot write the result: {e}");
        return Exit::CouldNotRun;
    }
    if report.identical() {
        Exit::Success
    } else {
        Exit::Negative
    }
}

/// Verifies the chain (with the lifecycle rules) and replays every recorded resolve.
pub fn run_replay(
    args: &ReplayArgs,
    events: &[cra_trace::TraceEvent],
    library: &[cra_atlas::LoadedAtlas],
) -> ReplayReport {
    let verify = verify_events_with(
        events,
        &VerifyOptions {
            all_errors: true,
            lifecycle: true,
            ..VerifyOptions::default()
        },
    );
    let clock = if args.now_from_trace {
        ReplayClock::Event
    } else {
        ReplayClock::Resolution
    };
    let cases = replay_library(events, library, &ReplayOptions { clock });
    let executes = replay_executes(&[events], &cases, None);
    ReplayReport {
        name: input_name(args.file.as_deref()),
        events: events.len(),
        findings: verify.findings,
        cases,
        executes,
        clock,
        atlases: library
            .iter()
            .map(|a| {
                (
                    a.id().to_owned(),
                    a.manifest.version.to_string(),
                    a.digest.clone(),
                    a.source.display().to_string(),
                )
            })
            .collect(),
    }
}

fn clock_name(c: ReplayClock) -> &'static str {
    match c {
        ReplayClock::Resolution => "resolution",
        ReplayClock::Event => "event",
    }
}

fn case_json(c: &ReplayCase) -> Value {
    let (outcome, error) = match &c.outcome {
        CaseOutcome::Same => ("same", Value::Null),
        CaseOutcome::Diverged { .. } => ("diverged", Value::Null),
        CaseOutcome::Error(m) => ("error", json!(m)),
    };
    let mut v = json!({
        "request_id": c.request_id,
        "trace_id": c.trace_id,
        "sequence": c.sequence,
        "goal": c.goal,
        "now": c.now,
        "outcome": outcome,
        "atlas_notes": c.atlas_notes,
        "differences": c.differences,
    });
    if !error.is_null() {
        v["error"] = error;
    }
    v
}

fn finding_json(f: &Finding) -> Value {
    json!({"sequence": f.sequence, "line": f.line, "code": f.code.as_str(), "message": f.message})
}

/// The `-o json` document.
pub fn report_json(r: &ReplayReport) -> Value {
    let first = r.cases.iter().find_map(|c| match &c.outcome {
        CaseOutcome::Diverged {
            pointer,
            recorded,
            replayed,
        } => Some(json!({
            "request_id": c.request_id,
            "sequence": c.sequence,
            "goal": c.goal,
            "pointer": pointer,
            "recorded": recorded,
            "replayed": replayed,
        })),
        _ => None,
    });
    json!({
        "identical": r.identical(),
        "file": r.name,
        "events": r.events,
        "chain": {
            "valid": r.findings.is_empty(),
            "findings": r.findings.iter().map(finding_json).collect::<Vec<_>>(),
        },
        "clock": clock_name(r.clock),
        "atlases": r.atlases.iter().map(|(id, version, digest, source)| json!({
            "atlas_id": id, "version": version, "digest": digest, "source": source,
        })).collect::<Vec<_>>(),
        "cases": r.cases.len(),
        "same": r.same(),
        "diverged": r.diverged(),
        "errors": r.errors(),
        "warnings": r.warnings().into_iter().map(|(n, count)| {
            let mut v = serde_json::to_value(&n).unwrap_or(Value::Null);
            v["requests"] = json!(count);
            v["message"] = json!(n.to_string());
            v
        }).collect::<Vec<_>>(),
        "first_divergence": first.unwrap_or(Value::Null),
        "results": r.cases.iter().map(case_json).collect::<Vec<_>>(),
        "executes": r.executes.iter().map(execute_json).collect::<Vec<_>>(),
        "first_execute_divergence": r.executes_failed().next().map_or(Value::Null, execute_json),
    })
}

fn execute_json(c: &ExecuteCase) -> Value {
    let (outcome, now, why) = match &c.now {
        ExecuteReplay::Decided(v) if c.diverged() && c.reads_beyond_session => (
            "not_comparable",
            json!(v),
            json!(
                "decided on agent or global history the call did not record reading, which other chains hold part of"
            ),
        ),
        ExecuteReplay::Decided(v) if c.diverged() => ("diverged", json!(v), Value::Null),
        ExecuteReplay::Decided(v) => ("same", json!(v), Value::Null),
        ExecuteReplay::LeftOut(why) => ("left_out", Value::Null, json!(why)),
        ExecuteReplay::NotDecided(why) => ("error", Value::Null, json!(why)),
    };
    json!({
        "sequence": c.sequence, "execution_id": c.execution_id, "action_id": c.action_id,
        "resolution_id": c.resolution_id, "outcome": outcome, "recorded": c.recorded,
        "replayed": now, "reason": why,
    })
}

/// One line per execute decided otherwise or not decided again, and the first divergence.
fn print_executes(out: &mut dyn Write, r: &ReplayReport) -> std::io::Result<()> {
    if r.executes.is_empty() {
        return Ok(());
    }
    let left_out = r
        .executes
        .iter()
        .filter(|c| matches!(c.now, ExecuteReplay::LeftOut(_)))
        .count();
    writeln!(
        out,
        "executes: {} recorded, {} decided otherwise or not decided again, {left_out} left out",
        r.executes.len(),
        r.executes_failed().count()
    )?;
    for c in r.executes_failed() {
        let now = match &c.now {
            ExecuteReplay::Decided(v) => v.describe(),
            ExecuteReplay::LeftOut(why) | ExecuteReplay::NotDecided(why) => why.clone(),
        };
        let label = if c.diverged() { "DIVERGED" } else { "ERROR   " };
        writeln!(
            out,
            "  {label}  #{}  {} ({}): recorded {}, now {now}",
            c.sequence,
            c.action_id,
            c.execution_id,
            c.recorded.describe()
        )?;
    }
    Ok(())
}

fn print_text(out: &mut dyn Write, r: &ReplayReport) -> std::io::Result<()> {
    writeln!(
        out,
        "replaying {}: {} recorded resolve{} in {} events, against {} atlas{} (clock: {})",
        r.name,
        r.cases.len(),
        if r.cases.len() == 1 { "" } else { "s" },
        r.events,
        r.atlases.len(),
        if r.atlases.len() == 1 { "" } else { "es" },
        match r.clock {
            ReplayClock::Resolution => "the recorded resolution instants",
            ReplayClock::Event => "the request events' timestamps",
        }
    )?;
    for f in &r.findings {
        writeln!(out, "chain: {f}")?;
    }
    for (note, n) in r.warnings() {
        writeln!(
            out,
            "warning: {note} ({n} request{})",
            if n == 1 { "" } else { "s" }
        )?;
    }
    for c in &r.cases {
        let label = match &c.outcome {
            CaseOutcome::Same => "same    ".to_owned(),
            CaseOutcome::Diverged { .. } => "DIVERGED".to_owned(),
            CaseOutcome::Error(_) => "ERROR   ".to_owned(),
        };
        writeln!(out, "  {label}  #{}  {:?}", c.sequence, c.goal)?;
        if let CaseOutcome::Error(m) = &c.outcome {
            writeln!(out, "            {m}")?;
        }
    }
    if let Some(c) = r
        .cases
        .iter()
        .find(|c| matches!(c.outcome, CaseOutcome::Diverged { .. }))
    {
        writeln!(
            out,
            "first divergence: request {} (sequence {}, goal {:?}), resolved at {}",
            c.request_id, c.sequence, c.goal, c.now
        )?;
        if let Some(d) = c.differences.first() {
            writeln!(out, "  at {}", d.pointer)?;
            writeln!(out, "  - recorded: {}", d.recorded)?;
            writeln!(out, "  + replayed: {}", d.replayed)?;
        }
        let more = c.differences.len().saturating_sub(1);
        if more > 0 {
            writeln!(
                out,
                "  ({more} more difference{} in this resolution; -o json lists every one)",
                if more == 1 { "" } else { "s" }
            )?;
        }
    }
    print_executes(out, r)?;
    let verdict = if r.identical() {
        "identical"
    } else if r.findings.is_empty() {
        "not identical"
    } else {
        "not identical (the chain does not verify)"
    };
    writeln!(
        out,
        "{verdict}: {} same, {} diverged, {} could not be replayed",
        r.same(),
        r.diverged(),
        r.errors()
    )
}

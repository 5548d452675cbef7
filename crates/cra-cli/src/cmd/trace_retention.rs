//! `cra trace retention`: apply a retention policy (TRACE §4.6) once to a stopped server's store,
//! the rule `cra serve` runs on a schedule under `[retention]` (`cra_store::retention`): every
//! ended session whose last event is older than `--days` days is recorded in the operator audit
//! chain, then removed whole. Open sessions are never removed; the audit chain never is.
//!
//! `--dry-run` lists what would be removed and changes nothing. Reads `--data DIR` (default
//! `./cra-data`; a running server holds it: stop it, or let the server's own `[retention]` do
//! the work) or `--postgres URL`.
//!
//! Exit codes: 0 applied (or listed); 1 could not run (a policy under one day, an unopenable
//! store).

use std::io::Write;
use std::path::Path;

use clap::Args;
use cra_store::RetentionPolicy;
use cra_store::retention::{OPERATOR_AUDIT_SESSION, apply_retention, eligible_sessions};
use cra_trace::store::SessionSummary;
use cra_wire::{SystemClock, Token, UuidV7Ids};
use serde_json::{Value, json};

use crate::cmd::trace_io::{Failure, StoreArgs};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra trace retention`.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// Keep an ended session this many days after its last event (at least 1; 30 is the
    /// usual choice).
    #[arg(long)]
    pub days: u32,
    /// List what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The store (--data DIR or --postgres URL; default ./cra-data).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// `cra trace retention` as a library function, at the system clock with fresh UUIDv7 ids.
pub fn retention(args: &RetentionArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    match run(args, &SystemClock, &UuidV7Ids) {
        Ok(report) => {
            print(&report, args.output, out);
            Exit::Success
        }
        Err(f) => f.report("cra trace retention", args.output, out, err),
    }
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionOutcome {
    /// Sessions whose last event is before this instant were eligible.
    pub cutoff: String,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// The sessions removed (or that would be).
    pub sessions: Vec<SessionSummary>,
    /// The audit event recorded: (sequence, event hash) in the operator audit chain.
    pub recorded: Option<(u64, String)>,
}

/// Applies (or lists) the policy at `clock` with `ids`.
pub fn run(
    args: &RetentionArgs,
    clock: &dyn cra_wire::Clock,
    ids: &dyn cra_wire::IdGenerator,
) -> Result<RetentionOutcome, Failure> {
    let policy = RetentionPolicy::days(args.days)
        .map_err(|e| Failure::new(Token::InvalidRequest, format!("--days {}: {e}", args.days)))?;
    let store = args
        .store
        .open(Some(Path::new("./cra-data")))?
        .ok_or_else(|| Failure::new(Token::NotFound, "name a store with --data or --postgres"))?;
    let failed = |e: cra_trace::store::ChainStoreError| Failure::new(e.token(), e.to_string());
    if args.dry_run {
        let (cutoff, sessions) =
            eligible_sessions(&*store.retention, &policy, clock).map_err(failed)?;
        return Ok(RetentionOutcome {
            cutoff,
            dry_run: true,
            sessions,
            recorded: None,
        });
    }
    let report = apply_retention(&*store.retention, &policy, clock, ids).map_err(failed)?;
    Ok(RetentionOutcome {
        cutoff: report.cutoff,
        dry_run: false,
        sessions: report.removed,
        recorded: report
            .audit_event
            .map(|e| (e.sequence, e.event_hash.clone())),
    })
}

fn print(report: &RetentionOutcome, output: OutputFormat, out: &mut dyn Write) {
    let sessions: Vec<Value> = report
        .sessions
        .iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "events": s.head.next_sequence,
                "last_timestamp": s.last_timestamp,
            })
        })
        .collect();
    if output == OutputFormat::Json {
        let recorded = report.recorded.as_ref().map(|(sequence, hash)| {
            json!({"session_id": OPERATOR_AUDIT_SESSION, "sequence": sequence, "event_hash": hash})
        });
        let doc = json!({
            "cutoff": report.cutoff,
            "dry_run": report.dry_run,
            "sessions": sessions,
            "recorded": recorded,
        });
        let _ = writeln!(out, "{doc}");
        return;
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let _ = writeln!(
        out,
        "{verb} {} ended session(s) whose last event is before {}",
        report.sessions.len(),
        report.cutoff
    );
    for s in &report.sessions {
        let _ = writeln!(
            out,
            "  {} ({} events, last {})",
            s.session_id, s.head.next_sequence, s.last_timestamp
        );
    }
    if let Some((sequence, _)) = &report.recorded {
        let _ = writeln!(
            out,
            "recorded in the operator audit chain {OPERATOR_AUDIT_SESSION} at sequence {sequence}"
        );
    }
}

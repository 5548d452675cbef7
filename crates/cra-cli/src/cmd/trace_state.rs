//! `cra trace state FILE [--data DIR | --postgres URL]` (or `--session ID` to read the chain
//! from a running server, `--url`/`--token`): rebuild a session's CARP state from its trace
//! alone (spec §4.5, state reconstruction; [`cra_carp::reconstruct`]) and, when a store is
//! named, compare it with what the store holds for that session.
//!
//! Exit codes: 0 the chain verifies and (when a store is named) the store holds the same state;
//! 2 the chain does not verify or the store differs; 1 the trace or the store could not be read.

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;
use cra_carp::reconstruct::{SessionState, StateComparison, compare_with_store, reconstruct};
use cra_trace::{Finding, VerifyOptions, verify_events_with};
use cra_wire::Token;
use serde_json::{Value, json};

use crate::cmd::client::{DEFAULT_URL, token_or_local};
use crate::cmd::trace_export::server_chain;
use crate::cmd::trace_io::{Failure, StoreArgs, input_name, read_events};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// Arguments of `cra trace state`.
#[derive(Debug, Clone, Args)]
pub struct StateArgs {
    /// The session's trace; `-` or nothing reads standard input.
    #[arg(conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// Read this session's chain from a running server instead (`--url`, `--token`).
    #[arg(long)]
    pub session: Option<String>,
    /// The server, with --session (default: $CRA_URL or http://127.0.0.1:8421).
    #[arg(long, env = "CRA_URL")]
    pub url: Option<String>,
    /// Bearer token, with --session (default: $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where the stored state lives (optional: without it the state is only printed).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What `cra trace state` found.
#[derive(Debug)]
pub struct StateReport {
    /// The input's name.
    pub name: String,
    /// Events read.
    pub events: usize,
    /// Chain findings (the first, if any).
    pub findings: Vec<Finding>,
    /// The reconstructed state.
    pub state: SessionState,
    /// The comparison with the store, when one was named: (backend, location, result).
    pub store: Option<(String, String, StateComparison)>,
}

impl StateReport {
    /// True when the chain verifies and the store (if any) agrees.
    pub fn ok(&self) -> bool {
        self.findings.is_empty() && self.store.as_ref().is_none_or(|(_, _, c)| c.is_equal())
    }
}

/// Reconstructs and (with a store) compares; `Err` when the store cannot be opened or read.
pub fn run_state(
    args: &StateArgs,
    events: &[cra_trace::TraceEvent],
) -> Result<StateReport, Failure> {
    let verify = verify_events_with(events, &VerifyOptions::default());
    let state = reconstruct(events);
    let store = match args.store.open(None)? {
        None => None,
        Some(opened) => {
            if state.session.session_id.is_none() {
                return Err(Failure::new(
                    Token::InvalidRequest,
                    "the trace holds no events, so there is no session to compare",
                ));
            }
            let cmp = compare_with_store(&state, opened.carp.as_ref())
                .map_err(|e| Failure::new(Token::Unavailable, e.to_string()))?;
            Some((opened.kind.to_owned(), opened.location.clone(), cmp))
        }
    };
    Ok(StateReport {
        name: match &args.session {
            Some(id) => format!("session {id} at the server"),
            None => input_name(args.file.as_deref()),
        },
        events: events.len(),
        findings: verify.findings,
        state,
        store,
    })
}

/// `cra trace state` as a library function.
pub fn state(args: &StateArgs, stdin: impl Read, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    const CMD: &str = "cra trace state";
    let events = match &args.session {
        Some(id) => events_from_server(args, id),
        None => read_events(args.file.as_deref(), stdin),
    };
    let events = match events {
        Ok(e) => e,
        Err(f) => return f.report(CMD, args.output, out, err),
    };
    let report = match run_state(args, &events) {
        Ok(r) => r,
        Err(f) => return f.report(CMD, args.output, out, err),
    };
    let printed = match args.output {
        OutputFormat::Json => writeln!(out, "{}", report_json(&report)),
        OutputFormat::Text => print_text(out, &report),
    };
    if let Err(e) = printed {
        let _ = writeln!(err, "{CMD}: cannot write the result: {e}");
        return Exit::CouldNotRun;
    }
    if report.ok() {
        Exit::Success
    } else {
        Exit::Negative
    }
}

/// The chain of session `id` from the server `--url` names.
fn events_from_server(args: &StateArgs, id: &str) -> Result<Vec<cra_trace::TraceEvent>, Failure> {
    let base = args.url.clone().unwrap_or_else(|| DEFAULT_URL.to_owned());
    let token = token_or_local(args.token.clone()).ok_or_else(|| {
        Failure::new(
            Token::Unauthenticated,
            "no credential: pass --token or set CRA_TOKEN (or run next to a local server's ./cra-data)",
        )
    })?;
    let lines = server_chain(&base, id, &token)?;
    cra_trace::diff::parse_events(&lines)
        .map_err(|e| Failure::new(Token::InvalidRequest, format!("session {id}: {e}")))
}

/// The `-o json` document.
pub fn report_json(r: &StateReport) -> Value {
    json!({
        "ok": r.ok(),
        "file": r.name,
        "chain": {
            "valid": r.findings.is_empty(),
            "events": r.events,
            "first_error": r.findings.first().map(|f| json!({
                "sequence": f.sequence, "line": f.line, "code": f.code.as_str(), "message": f.message,
            })),
        },
        "state": r.state,
        "store": r.store.as_ref().map(|(kind, location, c)| json!({
            "backend": kind,
            "location": location,
            "equal": c.is_equal(),
            "checked": c.checked,
            "differences": c.differences,
            "unchecked": c.unchecked,
        })),
    })
}

fn print_text(out: &mut dyn Write, r: &StateReport) -> std::io::Result<()> {
    let s = &r.state;
    writeln!(
        out,
        "session {} (agent {}){}: {} events in {}",
        s.session.session_id.as_deref().unwrap_or("-"),
        s.session.agent_id.as_deref().unwrap_or("-"),
        if s.session.ended { ", ended" } else { "" },
        r.events,
        r.name
    )?;
    match r.findings.first() {
        None => writeln!(out, "chain: valid")?,
        Some(f) => writeln!(out, "chain: INVALID: {f}")?,
    }
    writeln!(out, "resolutions: {}", s.resolutions.len())?;
    for (id, res) in &s.resolutions {
        writeln!(
            out,
            "  {id}  {}  allowed [{}]  denied [{}]{}",
            res.decision,
            res.allowed.join(", "),
            res.denied.join(", "),
            res.approval_id
                .as_deref()
                .map(|a| format!("  approval {a}"))
                .unwrap_or_default()
        )?;
    }
    if !s.rejected_requests.is_empty() {
        writeln!(out, "rejected requests: {}", s.rejected_requests.len())?;
        for (id, token) in &s.rejected_requests {
            writeln!(out, "  {id}  {token}")?;
        }
    }
    writeln!(out, "executions: {}", s.executions.len())?;
    for (id, x) in &s.executions {
        let status = serde_json::to_value(x.status).unwrap_or(Value::Null);
        writeln!(
            out,
            "  {id}  {}  {}{}{}{}",
            x.action_id.as_deref().unwrap_or("-"),
            status.as_str().unwrap_or("-"),
            x.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            x.idempotency_key
                .as_deref()
                .map(|k| format!("  key {k}"))
                .unwrap_or_default(),
            if x.deduplicated > 0 {
                format!("  repeated {}x", x.deduplicated)
            } else {
                String::new()
            }
        )?;
    }
    writeln!(out, "approvals: {}", s.approvals.len())?;
    for (id, a) in &s.approvals {
        writeln!(
            out,
            "  {id}  {}{}  actions [{}]",
            a.status.as_str(),
            a.decided_by
                .as_deref()
                .map(|d| format!(" by {d}"))
                .unwrap_or_default(),
            a.actions.join(", ")
        )?;
    }
    writeln!(out, "counters: {}", s.counters.len())?;
    for c in &s.counters {
        let kind = serde_json::to_value(c.kind).unwrap_or(Value::Null);
        writeln!(
            out,
            "  {}  {}  {} {}",
            c.policy_id,
            c.scope_key,
            kind.as_str().unwrap_or("-"),
            c.value
        )?;
    }
    for i in &s.issues {
        writeln!(out, "not rebuilt (sequence {}): {}", i.sequence, i.message)?;
    }
    if let Some((kind, location, c)) = &r.store {
        let checked: Vec<String> = c.checked.iter().map(|(k, n)| format!("{n} {k}")).collect();
        if c.is_equal() {
            writeln!(
                out,
                "store ({kind}, {location}): equal ({} compared)",
                checked.join(", ")
            )?;
        } else {
            writeln!(
                out,
                "store ({kind}, {location}): DIFFERS in {} place{} ({} compared)",
                c.differences.len(),
                if c.differences.len() == 1 { "" } else { "s" },
                checked.join(", ")
            )?;
            for d in &c.differences {
                writeln!(
                    out,
                    "  {}: trace {} / store {}",
                    d.pointer, d.trace, d.store
                )?;
            }
        }
        for u in &c.unchecked {
            writeln!(out, "  not compared: {u}")?;
        }
    }
    Ok(())
}

//! `cra trace ...`: offline work on TRACE/1.0 chains.
//!
//! `cra trace verify [FILE|-]` checks a `.trace.jsonl` chain with the streaming verifier of
//! `cra-trace` (every event, event 0 included). Exit codes: 0 the chain is valid, 2 it is not,
//! 1 the input could not be read. [`verify`] is the command as a library function: the binary
//! and the tests both call it with their own input and output streams.
//!
//! The other subcommands live in their own modules, each as a library function too:
//! `replay` ([`crate::cmd::trace_replay`]), `diff` ([`crate::cmd::trace_diff`]), `state`
//! ([`crate::cmd::trace_state`]), `export` ([`crate::cmd::trace_export`]) and `tail`
//! ([`crate::cmd::tail`]).

use std::fs::File;
use std::io::{self, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use cra_trace::{Finding, Report, VerifyOptions, verify_reader};
use cra_wire::{ErrorBody, Token};
use serde_json::{Value, json};

use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra trace` subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Verify a `.trace.jsonl` chain offline: sequence, links, hashes, event 0 included.
    ///
    /// Every line must be one TRACE/1.0 event. Each event is checked in order for its sequence
    /// (sequence_gap), its link to the previous event (chain_broken, or invalid_genesis for the
    /// first event, whose previous_event_hash must be 64 zeros) and its own hash, recomputed
    /// with the Appendix B algorithm (hash_mismatch). A line that is not a well-formed event
    /// (not JSON, a duplicate key anywhere, a missing or ill-typed field) is malformed_event.
    /// Then its fields must follow TRACE §4.2: trace_version "1.0" (invalid_trace_version),
    /// canonical UUID ids (invalid_id), an RFC 3339 timestamp with Z or ±hh:mm
    /// (invalid_timestamp), and the first event's session_id throughout (session_mixed).
    ///
    /// Exit status: 0 valid, 2 invalid, 1 the input could not be read.
    ///
    /// With `-o json` one object is printed:
    /// {"valid", "events", "first_error": {"sequence", "line", "code", "field"?, "message"} |
    /// null}, plus "errors" (every finding) with --all. "sequence" is the sequence the chain
    /// expected at that line; "line" is 1-based; "field" names the event field of a §4.2 code.
    #[command(verbatim_doc_comment)]
    Verify(VerifyArgs),
    /// Follow TRACE events live from a running server (WebSocket), resuming by itself.
    ///
    /// One session with `--session ID`, or every session with `--all` (operator role), filtered
    /// by `--type PREFIX`, `--agent` and `--decision`. On a dropped connection, or when the
    /// server closes a consumer that fell behind, it reconnects with `since_seq` so no event is
    /// missed or printed twice.
    Tail(crate::cmd::tail::TailArgs),
    /// Re-run every CARP resolve recorded in a trace against atlases and compare the resolutions.
    ///
    /// Each request is re-resolved at its recorded time (the instant the recorded resolution was
    /// made; --now-from-trace: the request event's timestamp), with the counters recorded with it,
    /// against the supplied atlas whose digest the request recorded. A recorded digest that no
    /// supplied atlas has is a warning and the replay runs anyway: that is how a changed atlas
    /// shows up as a divergence. The chain is verified first (with the lifecycle rules).
    ///
    /// The first divergence is printed as a JSON pointer with the recorded and replayed values;
    /// -o json lists every difference of every request.
    ///
    /// Exit status: 0 identical, 2 a divergence (or a request that could not be re-resolved, or a
    /// chain that does not verify), 1 the trace could not be read, 3 an atlas is invalid.
    #[command(verbatim_doc_comment)]
    Replay(crate::cmd::trace_replay::ReplayArgs),
    /// Compare two traces semantically: which events were added, removed or changed.
    ///
    /// Events are paired by their place in the span tree (span_id/parent_span_id), their
    /// event type and their subject (action_id, block_id or goal), never by position or id.
    /// Paired events are compared field by field (JSON pointers); ids, timestamps and hashes
    /// are ignored unless --include names them.
    ///
    /// Exit status: 0 same, 2 different, 1 a trace could not be read.
    #[command(verbatim_doc_comment)]
    Diff(crate::cmd::trace_diff::DiffArgs),
    /// Rebuild a session's CARP state from its trace and compare it with the store.
    ///
    /// Rebuilds resolutions (decisions), executions (status), approvals (status) and the
    /// rate-limit and budget counters the session charged, from the trace alone. With
    /// --data DIR or --postgres URL, compares them with the stored records of the session.
    ///
    /// Exit status: 0 the chain verifies and the store (if given) agrees, 2 it does not,
    /// 1 the trace or the store could not be read.
    #[command(verbatim_doc_comment)]
    State(crate::cmd::trace_state::StateArgs),
    /// Write stored chains as .trace.jsonl files (verifiable with `cra trace verify`).
    ///
    /// --session ID writes one chain (to --out FILE or standard output); --all writes one
    /// <session_id>.trace.jsonl per session into --out DIR. Reads --data DIR (default ./cra-data;
    /// a running server holds it), --postgres URL, or a server (--url / CRA_URL, --session only).
    ///
    /// Exit status: 0 exported, 1 could not run.
    #[command(verbatim_doc_comment)]
    Export(crate::cmd::trace_export::ExportArgs),
    /// Remove ended sessions older than a retention policy, recording each removal first.
    ///
    /// TRACE §4.6: every session whose chain has ended and whose last event is more than
    /// --days days old is named in an operator.retention.applied event of the operator audit
    /// chain, then removed whole (with its CARP records). Open sessions are never removed.
    /// --dry-run lists them and changes nothing. A server does this itself on a schedule with
    /// `[retention] days = N` in its configuration; this command is for a stopped server's
    /// --data DIR (default ./cra-data) or a --postgres URL.
    ///
    /// Exit status: 0 applied or listed, 1 could not run (--days 0, no store).
    #[command(verbatim_doc_comment)]
    Retention(crate::cmd::trace_retention::RetentionArgs),
}

/// Arguments of `cra trace verify`.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    /// The chain to verify; `-` or nothing reads standard input.
    pub file: Option<PathBuf>,
    /// List every failure instead of stopping at the first.
    #[arg(long)]
    pub all: bool,
    /// Also check the session lifecycle: the first event is session.started, nothing follows
    /// session.ended, every action.executed|failed|denied|pending_approval answers an earlier
    /// action.requested (same payload.execution_id), every carp.resolution.completed an earlier
    /// carp.request.received (same trace_id), and timestamps never go backwards. Codes:
    /// lifecycle_not_started, lifecycle_after_end, lifecycle_unmatched_action,
    /// lifecycle_unmatched_resolution, lifecycle_time_regression.
    #[arg(long)]
    pub lifecycle: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Worker threads for parsing and hashing (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Also check the chain's head is in the server's transparency log: the tlog-proof@v1 file
    /// `cra trace export --with-proofs` wrote (needs --log-key; the chain must be a file).
    #[arg(long, requires = "log_key")]
    pub checkpoint: Option<PathBuf>,
    /// The log's verifier key string (or a file holding it), as `GET /v1/log/key` serves it.
    #[arg(long, requires = "checkpoint")]
    pub log_key: Option<String>,
    /// Progress bar on standard error: auto shows it for large files when standard error is
    /// a terminal.
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    pub progress: Progress,
}

/// When to draw the progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Progress {
    /// For files of 64 MiB or more, when standard error is a terminal.
    Auto,
    /// Always (standard error).
    Always,
    /// Never.
    Never,
}

/// Files at least this large get a progress bar under `--progress auto`.
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

/// Runs a `cra trace` subcommand with the process's standard streams.
pub fn run(cmd: TraceCommand) -> Exit {
    match cmd {
        TraceCommand::Tail(args) => crate::cmd::tail::run(args),
        TraceCommand::Replay(args) => crate::cmd::trace_replay::replay(
            &args,
            io::stdin(),
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        ),
        TraceCommand::Diff(args) => crate::cmd::trace_diff::diff(
            &args,
            io::stdin(),
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        ),
        TraceCommand::State(args) => crate::cmd::trace_state::state(
            &args,
            io::stdin(),
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        ),
        TraceCommand::Export(args) => {
            let terminal = io::stderr().is_terminal();
            crate::cmd::trace_export::export(
                &args,
                &mut io::stdout().lock(),
                &mut io::stderr().lock(),
                terminal,
            )
        }
        TraceCommand::Retention(args) => crate::cmd::trace_retention::retention(
            &args,
            &mut io::stdout().lock(),
            &mut io::stderr().lock(),
        ),
        TraceCommand::Verify(args) => {
            let stdout = io::stdout();
            let stderr = io::stderr();
            let terminal = stderr.is_terminal();
            verify(
                &args,
                io::stdin(),
                &mut stdout.lock(),
                &mut stderr.lock(),
                terminal,
            )
        }
    }
}

/// `cra trace verify` as a library function: reads `args.file` (or `stdin`), writes the result
/// to `out` and diagnostics (and the progress bar) to `err`. `err_is_terminal` says whether
/// `err` is a terminal (for `--progress auto`).
pub fn verify(
    args: &VerifyArgs,
    stdin: impl Read + Send,
    out: &mut dyn Write,
    err: &mut dyn Write,
    err_is_terminal: bool,
) -> Exit {
    let options = VerifyOptions {
        all_errors: args.all,
        threads: args.threads,
        lifecycle: args.lifecycle,
        ..VerifyOptions::default()
    };
    let from_stdin = args.file.as_ref().is_none_or(|p| p.as_os_str() == "-");
    let name = if from_stdin {
        "standard input".to_owned()
    } else {
        args.file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let result = if from_stdin {
        let show = args.progress == Progress::Always;
        with_progress(err, show, None, |p| verify_reader(stdin, &options, p))
    } else {
        let path = args.file.clone().unwrap_or_default();
        match File::open(&path) {
            Ok(file) => {
                let size = file
                    .metadata()
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| m.len());
                let show = match args.progress {
                    Progress::Always => true,
                    Progress::Never => false,
                    Progress::Auto => {
                        err_is_terminal && size.is_some_and(|s| s >= PROGRESS_MIN_BYTES)
                    }
                };
                with_progress(err, show, size, |p| verify_reader(file, &options, p))
            }
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(report) => {
            if args.checkpoint.is_some() && (from_stdin || args.file.is_none()) {
                let _ = writeln!(
                    err,
                    "cra trace verify: --checkpoint needs the chain as a file, not standard input"
                );
                return Exit::CouldNotRun;
            }
            // The log is checked only for a chain that verifies; its finding joins the report.
            let logged = match (&args.checkpoint, &args.log_key, &args.file) {
                (Some(proof), Some(key), Some(file)) if report.is_valid() => {
                    Some(crate::cmd::trace_proof::check_proof(file, proof, key))
                }
                _ => None,
            };
            let printed = match args.output {
                OutputFormat::Json => {
                    let mut doc = report_json(&report, args.all);
                    if let Some(checked) = &logged {
                        doc["log"] = log_json(checked);
                    }
                    writeln!(out, "{doc}")
                }
                OutputFormat::Text => {
                    print_text(out, &report, &name).and_then(|()| match &logged {
                        Some(checked) => writeln!(out, "{}", log_text(checked)),
                        None => Ok(()),
                    })
                }
            };
            if let Err(e) = printed {
                let _ = writeln!(err, "cra trace verify: cannot write the result: {e}");
                return Exit::CouldNotRun;
            }
            match logged {
                _ if !report.is_valid() => Exit::Negative,
                Some(Err(_)) => Exit::Negative,
                Some(Ok(_)) | None => Exit::Success,
            }
        }
        Err(e) => {
            let message = format!("cannot read {name}: {e}");
            if args.output == OutputFormat::Json {
                let token = if e.kind() == io::ErrorKind::NotFound {
                    Token::NotFound
                } else {
                    Token::InvalidRequest
                };
                let body = ErrorBody::new(token, message.clone());
                let _ = writeln!(out, "{}", serde_json::to_string(&body).unwrap_or_default());
            }
            let _ = writeln!(err, "cra trace verify: {message}");
            Exit::CouldNotRun
        }
    }
}

fn finding_json(f: &Finding) -> Value {
    let mut doc = json!({
        "sequence": f.sequence,
        "line": f.line,
        "code": f.code.as_str(),
        "message": f.message,
    });
    if let Some(field) = f.field {
        doc["field"] = json!(field);
    }
    doc
}

/// The `-o json` document for `report`.
pub fn report_json(report: &Report, all: bool) -> Value {
    let mut doc = json!({
        "valid": report.is_valid(),
        "events": report.events,
        "first_error": report.first_error().map_or(Value::Null, finding_json),
    });
    if all {
        doc["errors"] = Value::Array(report.findings.iter().map(finding_json).collect());
    }
    doc
}

/// The text line of the offline log check of `--checkpoint`.
fn log_text(checked: &Result<crate::cmd::trace_proof::ProofCheck, String>) -> String {
    match checked {
        Ok(c) => format!(
            "in the log: the head is leaf {} of a checkpoint of {} leaves signed by {}",
            c.leaf_index, c.tree_size, c.origin
        ),
        Err(e) => format!("NOT in the log: {e}"),
    }
}

/// The `log` member of the `-o json` document when `--checkpoint` was given.
fn log_json(checked: &Result<crate::cmd::trace_proof::ProofCheck, String>) -> Value {
    match checked {
        Ok(c) => json!({
            "included": true, "origin": c.origin, "leaf_index": c.leaf_index, "tree_size": c.tree_size
        }),
        Err(e) => json!({"included": false, "message": e}),
    }
}

fn print_text(out: &mut dyn Write, report: &Report, name: &str) -> io::Result<()> {
    if report.is_valid() {
        writeln!(out, "valid: {} events in {name}", report.events)
    } else {
        for f in &report.findings {
            writeln!(out, "invalid: {f}")?;
        }
        let n = report.findings.len();
        writeln!(
            out,
            "{name}: not a valid chain ({n} finding{}, {} events read)",
            if n == 1 { "" } else { "s" },
            report.events
        )
    }
}

/// Runs `work` with a progress callback that draws a one-line bar on `err` (when `show`).
fn with_progress<T>(
    err: &mut dyn Write,
    show: bool,
    total: Option<u64>,
    work: impl FnOnce(&mut dyn FnMut(u64)) -> T,
) -> T {
    if !show {
        return work(&mut |_| {});
    }
    let start = Instant::now();
    let mut last: Option<Instant> = None;
    let mut drew = false;
    let result = work(&mut |done| {
        if last.is_some_and(|l| l.elapsed() < Duration::from_millis(100)) {
            return;
        }
        last = Some(Instant::now());
        drew = true;
        let _ = write!(err, "\r{}", progress_line(done, total, start.elapsed()));
        let _ = err.flush();
    });
    if drew {
        let _ = write!(err, "\r{:width$}\r", "", width = 72);
    }
    result
}

/// One progress line: a bar when the total is known, bytes and rate otherwise.
pub fn progress_line(done: u64, total: Option<u64>, elapsed: Duration) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let rate = done as f64 / MIB / elapsed.as_secs_f64().max(1e-3);
    match total {
        Some(total) if total > 0 => {
            let frac = (done as f64 / total as f64).clamp(0.0, 1.0);
            let width = 30;
            let filled = (frac * width as f64).round() as usize;
            format!(
                "verifying [{}{}] {:5.1}% {:.0}/{:.0} MiB {:.0} MiB/s",
                "#".repeat(filled),
                "-".repeat(width - filled),
                frac * 100.0,
                done as f64 / MIB,
                total as f64 / MIB,
                rate
            )
        }
        _ => format!("verifying {:.0} MiB {:.0} MiB/s", done as f64 / MIB, rate),
    }
}

//! `cra resolve`: resolve a CARP request in-process against atlas directories or archives, no
//! server needed. The command opens the requester's session itself (so the session rules pass),
//! checks the request's shape and clock skew, and prints the resolution.
//!
//! Exit codes ([`crate::exit`]): 0 resolved; 1 could not run (unreadable file, invalid request,
//! unknown atlas); 3 an atlas is invalid; with `--fail-on deny`, 2 when the decision is `deny`
//! and 4 when it is `requires_approval`; with `--fail-on approval`, 4 on `requires_approval`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use cra_carp::eval::{CountersSnapshot, ExplainLevel, ResolveOptions, resolve};
use cra_carp::events::SessionStarted;
use cra_carp::index::AtlasSet;
use cra_carp::replay::{resolve_drafts, seal_session};
use cra_carp::store::SessionRecord;
use cra_carp::types::DecisionType;
use cra_carp::validate::{CarpError, check_clock_skew, check_session, parse_request_text};
use cra_wire::clock::{format_timestamp, parse_rfc3339};
use cra_wire::{IdGenerator, UuidV7Ids};

use crate::exit::Exit;
use crate::output::OutputFormat;

/// The goal of a session recorded by `--record` when the request states no task.
const RECORDED_GOAL: &str = "cra resolve --record";

/// Which decisions make `cra resolve` exit non-zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    /// Exit 2 on `deny`, 4 on `requires_approval`.
    Deny,
    /// Exit 4 on `requires_approval`.
    Approval,
}

/// Arguments of `cra resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// Atlas directories or `.atlas.tar.gz` archives (repeat for several).
    #[arg(long = "atlas", required = true)]
    pub atlases: Vec<PathBuf>,
    /// The CARP request (JSON file; `-` for standard input).
    #[arg(long)]
    pub request: PathBuf,
    /// The evaluation instant (RFC 3339). Default: the request's own timestamp.
    #[arg(long)]
    pub now: Option<String>,
    /// Attach the explanation (deciding policy and conditions per action).
    #[arg(long)]
    pub explain: bool,
    /// Resolution lifetime in seconds.
    #[arg(long, default_value_t = cra_carp::eval::DEFAULT_TTL_SECONDS)]
    pub ttl: u64,
    /// Exit non-zero on these decisions (see the exit codes).
    #[arg(long = "fail-on", value_enum)]
    pub fail_on: Option<FailOn>,
    /// Also write the resolve's TRACE events (a new, verifiable session chain) to this file,
    /// e.g. an atlas's `tests/<name>.trace.jsonl`.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t)]
    pub output: OutputFormat,
}

/// Loads atlases for resolution; `Err` carries the exit status after printing why.
pub fn load_atlases(paths: &[PathBuf], who: &str) -> Result<AtlasSet, Exit> {
    let mut loaded = Vec::with_capacity(paths.len());
    for p in paths {
        match cra_carp::atlas_check::load(p) {
            Ok(a) => loaded.push(a),
            Err(e) => {
                eprintln!("{who}: {}: {e}", p.display());
                return Err(match e {
                    cra_atlas::LoadError::Io { .. } => Exit::CouldNotRun,
                    _ => Exit::InvalidAtlas,
                });
            }
        }
    }
    AtlasSet::from_loaded(&loaded).map_err(|e| {
        eprintln!("{who}: {e}");
        Exit::InvalidAtlas
    })
}

/// The text of `path`, or of standard input for `-`.
pub(crate) fn read_text(path: &Path) -> std::io::Result<String> {
    if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
}

fn report(e: &CarpError, output: OutputFormat) {
    match output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&e.to_body()).unwrap_or_default()
        ),
        OutputFormat::Text => {
            eprintln!("cra resolve: {} ({})", e.message, e.token.as_str());
            for f in &e.errors {
                eprintln!("  at {}: {}", f.pointer, f.message);
            }
        }
    }
}

/// Runs `cra resolve`.
pub fn run(args: ResolveArgs) -> Exit {
    let set = match load_atlases(&args.atlases, "cra resolve") {
        Ok(s) => s,
        Err(x) => return x,
    };
    let text = match read_text(&args.request) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "cra resolve: could not read {}: {e}",
                args.request.display()
            );
            return Exit::CouldNotRun;
        }
    };
    let request = match parse_request_text(&text) {
        Ok(r) => r,
        Err(e) => {
            report(&e, args.output);
            return Exit::CouldNotRun;
        }
    };
    let now_text = args
        .now
        .clone()
        .unwrap_or_else(|| request.timestamp.clone());
    let now = match parse_rfc3339(&now_text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cra resolve: --now: {e}");
            return Exit::CouldNotRun;
        }
    };
    // The in-process session: opened for the requester, so the session rules hold.
    let session = SessionRecord {
        session_id: request.requester.session_id.clone(),
        agent_id: request.requester.agent_id.clone(),
        parent_session_id: request.requester.parent_session_id.clone(),
        created_at: format_timestamp(now),
        ended_at: None,
    };
    let checks = check_clock_skew(&request, now, cra_carp::validate::DEFAULT_MAX_SKEW_SECONDS)
        .and_then(|()| check_session(&request, Some(&session)));
    if let Err(e) = checks {
        report(&e, args.output);
        return Exit::CouldNotRun;
    }
    let ids = UuidV7Ids;
    let counters = CountersSnapshot::empty();
    let record_explain = args.record.is_some();
    let options = ResolveOptions {
        ttl_seconds: args.ttl,
        // A recorded trace needs each action's deciding policy; the trail only when asked for.
        explain: if args.explain {
            ExplainLevel::Full
        } else if record_explain {
            ExplainLevel::Outcomes
        } else {
            ExplainLevel::Off
        },
        trace_id: None,
    };
    let mut res = match resolve(&request, &set, &counters, now, &ids, &options) {
        Ok(r) => r,
        Err(e) => {
            report(&CarpError::new(e.token(), e.to_string()), args.output);
            return Exit::CouldNotRun;
        }
    };
    if let Some(path) = &args.record {
        let drafts = resolve_drafts(&request, &res, set.digests(), &counters);
        let goal = request
            .task
            .as_ref()
            .map_or(RECORDED_GOAL, |t| t.goal.as_str());
        let started = SessionStarted::unattended(&request.requester.agent_id, goal);
        let events = seal_session(
            &request.requester.session_id,
            &started,
            &format_timestamp(now),
            drafts,
            &ids as &dyn IdGenerator,
        );
        let mut out = String::new();
        for e in &events {
            match serde_json::to_string(e) {
                Ok(line) => {
                    out.push_str(&line);
                    out.push('\n');
                }
                Err(e) => {
                    eprintln!("cra resolve: could not serialise an event: {e}");
                    return Exit::CouldNotRun;
                }
            }
        }
        if let Err(e) = std::fs::write(path, out) {
            eprintln!("cra resolve: could not write {}: {e}", path.display());
            return Exit::CouldNotRun;
        }
    }
    if !args.explain {
        res.explain = None;
    }
    match args.output {
        OutputFormat::Json => match serde_json::to_string_pretty(&res) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cra resolve: {e}");
                return Exit::CouldNotRun;
            }
        },
        OutputFormat::Text => print_text(&res),
    }
    match (args.fail_on, res.decision.kind) {
        (Some(FailOn::Deny), DecisionType::Deny) => Exit::Negative,
        (Some(_), DecisionType::RequiresApproval) => Exit::RequiresApproval,
        _ => Exit::Success,
    }
}

fn print_text(res: &cra_carp::Resolution) {
    println!(
        "decision: {}{}",
        res.decision.kind.as_str(),
        res.decision
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    if let Some(a) = &res.decision.approval_id {
        println!(
            "approval: {a} (expires {})",
            res.decision.expires_at.as_deref().unwrap_or("-")
        );
    }
    for a in &res.allowed_actions {
        println!(
            "  allow  {}{}",
            a.action_id,
            if a.requires_confirmation {
                "  (needs approval)"
            } else {
                ""
            }
        );
    }
    for d in &res.denied_actions {
        println!("  deny   {}  by {}: {}", d.action_id, d.policy_id, d.reason);
    }
    for c in &res.constraints {
        println!("  constraint {}", c.constraint_id);
    }
    for b in &res.context_blocks {
        println!(
            "  context {} (priority {}, ~{} tokens)",
            b.block_id, b.priority, b.token_estimate
        );
    }
    if let Some(ex) = &res.explain {
        println!("explain:");
        for a in &ex.actions {
            println!("  {} -> {:?} by {}", a.action_id, a.outcome, a.decided_by);
            for p in &a.policies {
                let conds: Vec<String> = p
                    .conditions
                    .iter()
                    .map(|c| format!("{}={}", c.condition, if c.held { "held" } else { "failed" }))
                    .collect();
                println!(
                    "      {} {} [{}] {}",
                    p.kind,
                    p.policy_id,
                    p.effect,
                    conds.join(" ")
                );
            }
        }
    }
}

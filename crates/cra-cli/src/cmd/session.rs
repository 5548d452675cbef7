//! `cra session open|show|resolve|execute|end`: an agent's whole CARP flow against a running
//! server, without writing a request by hand. Each command fills in what CARP asks of a request
//! (`carp_version`, a fresh `request_id`, the `timestamp`, the requester: `--agent`, else the
//! session's own agent, read from the server) and prints, as text, what a script needs next
//! (`open` the session id, `resolve` the resolution id, `execute` the status and result) with
//! a summary for people on standard error; `-o json` prints the server's answer.
//!
//! Exit codes: 0 done (`execute`: the action succeeded); 1 could not run (unreachable server,
//! no credential, parameters that are not a JSON object); 2 the server refused (its error is
//! printed), the action was denied or failed, or, with `--fail-on deny`, the resolution denies;
//! 4 the call waits for a human's approval, or, with `--fail-on`, the resolution requires one.

use std::io::Write;

use clap::{Args, Subcommand};
use cra_wire::clock::format_timestamp;
use cra_wire::{Clock, IdGenerator, SystemClock, UuidV7Ids};
use serde_json::{Map, Value, json};

use crate::cmd::client::{Failure, ServerArgs, call, enc};
use crate::cmd::resolve::FailOn;
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra session` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Open a session for an agent; prints its id.
    Open(OpenArgs),
    /// Show a session: status, agent, events, goal.
    Show(SessionArgs),
    /// Ask what the session may do for a goal (CARP resolve); prints the resolution id.
    Resolve(ResolveArgs),
    /// Run one action a resolution allowed (CARP execute); prints its status and result.
    Execute(ExecuteArgs),
    /// End a session (idempotent).
    End(SessionArgs),
}

/// `cra session open`.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// What the session is for.
    #[arg(long)]
    pub goal: String,
    /// The agent that owns it (an agent's key may only name itself).
    #[arg(long, env = "CRA_AGENT")]
    pub agent: String,
    /// The parent session, for nested agents.
    #[arg(long)]
    pub parent: Option<String>,
    /// The Relay project the session works in.
    #[arg(long)]
    pub project: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `cra session show` and `end`.
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// The session id.
    pub session_id: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `cra session resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The session id.
    pub session_id: String,
    /// What the agent wants to do.
    #[arg(long)]
    pub goal: String,
    /// The task's risk tier (low, medium, high, critical).
    #[arg(long)]
    pub risk_tier: Option<String>,
    /// A hint for context selection (repeat for several).
    #[arg(long = "hint", value_name = "TEXT")]
    pub hints: Vec<String>,
    /// The parameters the agent means to call an action with, so policies decide on them now:
    /// `ACTION={"k": ...}` (repeat for several actions).
    #[arg(long = "intend", value_name = "ACTION=JSON")]
    pub intend: Vec<String>,
    /// The requesting agent (default: the session's).
    #[arg(long, env = "CRA_AGENT")]
    pub agent: Option<String>,
    /// Exit non-zero on these decisions (2 on deny, 4 on requires_approval).
    #[arg(long = "fail-on", value_enum)]
    pub fail_on: Option<FailOn>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `cra session execute`.
#[derive(Debug, Args)]
pub struct ExecuteArgs {
    /// The session id.
    pub session_id: String,
    /// The resolution that allowed the action.
    #[arg(long)]
    pub resolution: String,
    /// The action to run.
    #[arg(long)]
    pub action: String,
    /// The parameters, a JSON object (or `@FILE` to read it from a file).
    #[arg(long, default_value = "{}")]
    pub parameters: String,
    /// Repeats with the same key answer the first execution's response.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// The requesting agent (default: the session's).
    #[arg(long, env = "CRA_AGENT")]
    pub agent: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs one `cra session` command on the process's standard output and error.
pub fn run(cmd: SessionCommand) -> Exit {
    execute(cmd, &mut std::io::stdout(), &mut std::io::stderr())
}

/// Runs one `cra session` command, writing its answer to `out` and its summary and complaints
/// to `err`.
pub fn execute(cmd: SessionCommand, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let (server, answer) = match cmd {
        SessionCommand::Open(a) => {
            let answer = open(&a);
            (a.server, answer.map(Answer::Session))
        }
        SessionCommand::Show(a) => {
            let answer = get_session(&a.server, &a.session_id);
            (a.server, answer.map(Answer::Session))
        }
        SessionCommand::End(a) => {
            let answer = end(&a.server, &a.session_id);
            (a.server, answer.map(Answer::Ended))
        }
        SessionCommand::Resolve(a) => {
            let answer = resolve(&a);
            (a.server, answer.map(|v| Answer::Resolution(v, a.fail_on)))
        }
        SessionCommand::Execute(a) => {
            let answer = execute_action(&a);
            (a.server, answer.map(Answer::Executed))
        }
    };
    // A closed output stream changes nothing the command did: the exit status still tells.
    match answer {
        Ok(answer) => answer.report(server.output, out, err),
        Err(Failure::CouldNotRun(m)) => {
            let _ = writeln!(err, "cra session: {m}");
            Exit::CouldNotRun
        }
        Err(Failure::Refused(body)) => {
            let _ = match server.output {
                OutputFormat::Json => writeln!(out, "{body}"),
                OutputFormat::Text => writeln!(err, "cra session: refused: {}", why(&body)),
            };
            Exit::Negative
        }
    }
}

/// What a command got from the server.
enum Answer {
    Session(Value),
    Ended(String),
    Resolution(Value, Option<FailOn>),
    Executed(Value),
}

impl Answer {
    fn report(self, output: OutputFormat, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
        let (value, exit) = match &self {
            Answer::Session(v) => (v.clone(), Exit::Success),
            Answer::Ended(id) => (json!({"session_id": id, "status": "ended"}), Exit::Success),
            Answer::Resolution(v, fail_on) => (v.clone(), resolution_exit(v, *fail_on)),
            Answer::Executed(v) => (v.clone(), execution_exit(v)),
        };
        let _ = match output {
            OutputFormat::Json => writeln!(out, "{value}"),
            OutputFormat::Text => self.write_text(out, err),
        };
        exit
    }

    fn write_text(&self, out: &mut dyn Write, err: &mut dyn Write) -> std::io::Result<()> {
        let s = |v: &Value, k: &str| v[k].as_str().unwrap_or("-").to_owned();
        match self {
            Answer::Session(v) => {
                writeln!(out, "{}", s(v, "session_id"))?;
                writeln!(
                    err,
                    "session {}: {}, agent {}, {} events, goal {:?}",
                    s(v, "callsign"),
                    s(v, "status"),
                    s(v, "agent_id"),
                    v["event_count"],
                    s(v, "goal")
                )
            }
            Answer::Ended(id) => writeln!(err, "session {id} ended"),
            Answer::Resolution(v, _) => {
                writeln!(out, "{}", s(v, "resolution_id"))?;
                writeln!(err, "{}", resolution_summary(v))
            }
            Answer::Executed(v) => {
                writeln!(out, "{}", s(v, "status"))?;
                if !v["result"].is_null() {
                    writeln!(out, "{}", v["result"])?;
                }
                if v["error"].is_object() {
                    writeln!(err, "{}", why(&v["error"]))?;
                }
                Ok(())
            }
        }
    }
}

/// The decision, what it allows, and what a human must approve, in one line.
fn resolution_summary(v: &Value) -> String {
    let ids = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|a| a["action_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let decision = &v["decision"];
    let mut line = format!(
        "decision {}; allowed: {}",
        decision["type"].as_str().unwrap_or("-"),
        ids("allowed_actions").join(", ")
    );
    if let Some(approval) = decision["approval_id"].as_str() {
        line.push_str(&format!(
            "; approval {approval} (`cra approvals show {approval} --wait 60`)"
        ));
    }
    let denied = ids("denied_actions");
    if !denied.is_empty() {
        line.push_str(&format!("; denied: {}", denied.join(", ")));
    }
    line
}

/// An error body's or CARP error's message and token.
fn why(body: &Value) -> String {
    let message = body["message"].as_str().unwrap_or("no message");
    let token = body["error"]
        .as_str()
        .or_else(|| body["code"].as_str())
        .unwrap_or("no token");
    format!("{message} ({token})")
}

fn resolution_exit(v: &Value, fail_on: Option<FailOn>) -> Exit {
    match (v["decision"]["type"].as_str(), fail_on) {
        (Some("deny"), Some(FailOn::Deny)) => Exit::Negative,
        (Some("requires_approval"), Some(_)) => Exit::RequiresApproval,
        _ => Exit::Success,
    }
}

fn execution_exit(v: &Value) -> Exit {
    match v["status"].as_str() {
        Some("success") => Exit::Success,
        Some("pending_approval") => Exit::RequiresApproval,
        _ => Exit::Negative,
    }
}

fn open(a: &OpenArgs) -> Result<Value, Failure> {
    let mut body = json!({"agent_id": a.agent, "goal": a.goal});
    if let Some(p) = &a.parent {
        body["parent_session_id"] = json!(p);
    }
    if let Some(p) = &a.project {
        body["project_id"] = json!(p);
    }
    post(&a.server, "/v1/sessions", &body)
}

fn get_session(server: &ServerArgs, id: &str) -> Result<Value, Failure> {
    call(server, |c, base| {
        c.get(format!("{base}/v1/sessions/{}", enc(id)))
    })
}

fn end(server: &ServerArgs, id: &str) -> Result<String, Failure> {
    call(server, |c, base| {
        c.delete(format!("{base}/v1/sessions/{}", enc(id)))
    })?;
    Ok(id.to_owned())
}

fn resolve(a: &ResolveArgs) -> Result<Value, Failure> {
    let mut task = json!({"goal": a.goal});
    if let Some(tier) = &a.risk_tier {
        task["risk_tier"] = json!(tier);
    }
    if !a.hints.is_empty() {
        task["context_hints"] = json!(a.hints);
    }
    if !a.intend.is_empty() {
        task["intended_parameters"] = Value::Object(intended(&a.intend)?);
    }
    let mut body = envelope(&a.server, &a.session_id, a.agent.as_deref(), "resolve")?;
    body["task"] = task;
    post(&a.server, "/v1/resolve", &body)
}

fn execute_action(a: &ExecuteArgs) -> Result<Value, Failure> {
    let parameters = object_arg("--parameters", &a.parameters)?;
    let mut execution = json!({
        "resolution_id": a.resolution,
        "action_id": a.action,
        "parameters": parameters,
    });
    if let Some(key) = &a.idempotency_key {
        execution["idempotency_key"] = json!(key);
    }
    let mut body = envelope(&a.server, &a.session_id, a.agent.as_deref(), "execute")?;
    body["execution"] = execution;
    // A governed outcome (denied, pending approval) is answered with an error status and a CARP
    // execute response: that is the command's answer, not a refusal.
    match post(&a.server, "/v1/execute", &body) {
        Err(Failure::Refused(v)) if v.get("carp_version").is_some() => Ok(v),
        other => other,
    }
}

/// The members CARP asks of every request; the requester is `agent`, else the session's agent.
fn envelope(
    server: &ServerArgs,
    session_id: &str,
    agent: Option<&str>,
    operation: &str,
) -> Result<Value, Failure> {
    let agent = match agent {
        Some(a) => a.to_owned(),
        None => get_session(server, session_id)?["agent_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    Ok(json!({
        "carp_version": "1.0",
        "request_id": UuidV7Ids.new_id(),
        "timestamp": format_timestamp(SystemClock.now()),
        "operation": operation,
        "requester": {"agent_id": agent, "session_id": session_id},
    }))
}

/// `ACTION=JSON` arguments as one object of per-action parameters.
fn intended(args: &[String]) -> Result<Map<String, Value>, Failure> {
    let mut out = Map::new();
    for arg in args {
        let (action, parameters) = arg.split_once('=').ok_or_else(|| {
            Failure::CouldNotRun(format!(
                "--intend {arg}: write ACTION={{\"name\": value, ...}}"
            ))
        })?;
        out.insert(
            action.to_owned(),
            object_arg(&format!("--intend {action}"), parameters)?,
        );
    }
    Ok(out)
}

/// A JSON object given on the command line, or read from `@FILE`, read strictly.
fn object_arg(flag: &str, text: &str) -> Result<Value, Failure> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| Failure::CouldNotRun(format!("{flag}: cannot read {path}: {e}")))?,
        None => text.to_owned(),
    };
    match cra_wire::json::parse_input(text.as_bytes()) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(Failure::CouldNotRun(format!(
            "{flag}: give a JSON object, e.g. '{{\"message\": \"hello\"}}'"
        ))),
        Err(e) => Err(Failure::CouldNotRun(format!("{flag}: not JSON: {e}"))),
    }
}

fn post(server: &ServerArgs, path: &str, body: &Value) -> Result<Value, Failure> {
    call(server, |c, base| {
        c.post(format!("{base}{path}"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
    })
}

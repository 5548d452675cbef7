//! `cra approvals list|show|grant|reject`: the human side of CARP approvals, against a running
//! server (`GET /v1/approvals`, `GET /v1/approvals/{id}?wait=N`, `POST /v1/approvals/{id}`).
//!
//! Exit codes: 0 done (for `show`: granted); 1 could not run (unreachable server, no
//! credential); 2 the server refused (its error is printed), or `show` found the approval
//! rejected or lapsed (pending in a session that ended); 4 `show` found it still pending (after
//! `--wait`, if given).

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::cmd::client::{Failure, ServerArgs, call, enc};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra approvals` subcommands.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the approvals waiting for a decision (operators, auditors).
    List(ServerArgs),
    /// Show one approval; with --wait, wait for its decision first.
    Show {
        /// The approval id.
        approval_id: String,
        /// Seconds to wait while it is pending (at most 60 per request; longer waits repeat).
        #[arg(long, default_value_t = 0)]
        wait: u64,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Grant an approval (operators): the gated call may run.
    Grant(DecideArgs),
    /// Reject an approval (operators): the gated call is refused.
    Reject(DecideArgs),
}

/// `grant` and `reject` arguments.
#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The approval id.
    pub approval_id: String,
    /// Why (recorded in the session's chain).
    #[arg(long)]
    pub note: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs one `cra approvals` command on the process's standard output and error.
pub fn run(cmd: ApprovalsCommand) -> Exit {
    execute(cmd, &mut std::io::stdout(), &mut std::io::stderr())
}

/// Runs one `cra approvals` command, writing its answer to `out` and complaints to `err`.
pub fn execute(cmd: ApprovalsCommand, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let (server, answer) = match cmd {
        ApprovalsCommand::List(server) => {
            let a = call(&server, |c, base| c.get(format!("{base}/v1/approvals")));
            (server, a)
        }
        ApprovalsCommand::Show {
            approval_id,
            wait,
            server,
        } => {
            let a = show(&server, &approval_id, wait);
            (server, a)
        }
        ApprovalsCommand::Grant(d) => decide(d, "grant"),
        ApprovalsCommand::Reject(d) => decide(d, "reject"),
    };
    // A closed output stream changes nothing the command did: the exit status still tells.
    match answer {
        Ok(v) => {
            let _ = write_answer(out, &v, server.output);
            exit_of(&v)
        }
        Err(Failure::CouldNotRun(m)) => {
            let _ = writeln!(err, "cra approvals: {m}");
            Exit::CouldNotRun
        }
        Err(Failure::Refused(body)) => {
            let _ = match server.output {
                OutputFormat::Json => writeln!(out, "{body}"),
                OutputFormat::Text => writeln!(
                    err,
                    "cra approvals: refused: {} ({})",
                    body["message"].as_str().unwrap_or("no message"),
                    body["error"].as_str().unwrap_or("no token")
                ),
            };
            Exit::Negative
        }
    }
}

/// 0 for a list or a granted approval, 2 rejected or lapsed, 4 still pending.
fn exit_of(v: &Value) -> Exit {
    if v["lapsed"] == true {
        return Exit::Negative;
    }
    match v.get("status").and_then(Value::as_str) {
        Some("pending") => Exit::RequiresApproval,
        Some("rejected") => Exit::Negative,
        _ => Exit::Success,
    }
}

/// Waits in steps of at most 60 s (the server's cap) until decided or `wait` runs out.
fn show(server: &ServerArgs, id: &str, wait: u64) -> Result<Value, Failure> {
    let deadline = std::time::Instant::now() + Duration::from_secs(wait);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let step = left.as_secs().min(60);
        let v = call(server, |c, base| {
            c.get(format!("{base}/v1/approvals/{}?wait={step}", enc(id)))
        })?;
        if step == 0 || v["status"] != "pending" || v["lapsed"] == true {
            return Ok(v);
        }
    }
}

fn decide(d: DecideArgs, decision: &str) -> (ServerArgs, Result<Value, Failure>) {
    let mut body = json!({"decision": decision});
    if let Some(n) = &d.note {
        body["note"] = json!(n);
    }
    let a = call(&d.server, |c, base| {
        c.post(format!("{base}/v1/approvals/{}", enc(&d.approval_id)))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
    });
    (d.server, a)
}

fn write_answer(out: &mut dyn Write, v: &Value, output: OutputFormat) -> std::io::Result<()> {
    match output {
        OutputFormat::Json => writeln!(out, "{v}"),
        OutputFormat::Text => match v.as_array() {
            Some(list) if list.is_empty() => writeln!(out, "no approval is pending"),
            Some(list) => list.iter().try_for_each(|a| writeln!(out, "{}", line(a))),
            None => writeln!(out, "{}", line(v)),
        },
    }
}

/// One approval for people: id, status, who asked, for what, and who decided.
fn line(a: &Value) -> String {
    let s = |k: &str| a[k].as_str().unwrap_or("-").to_owned();
    let actions: Vec<&str> = a["actions"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = format!(
        "{}  {}  agent {}  session {}  actions {}  asked {}",
        s("approval_id"),
        s("status"),
        s("agent_id"),
        s("session_id"),
        actions.join(","),
        s("created_at"),
    );
    let call = &a["call"];
    if let (Some(hash), Some(atlas)) = (call["parameters_hash"].as_str(), call["atlas_id"].as_str())
    {
        out.push_str(&format!(
            "  for the call with parameters {hash} under atlas {atlas}"
        ));
    }
    if a["lapsed"] == true {
        out.push_str("  lapsed: its session ended");
    }
    if let Some(by) = a["decided_by"].as_str() {
        out.push_str(&format!("  decided by {by} at {}", s("decided_at")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_status() {
        assert_eq!(exit_of(&json!({"status": "granted"})), Exit::Success);
        assert_eq!(exit_of(&json!({"status": "rejected"})), Exit::Negative);
        assert_eq!(
            exit_of(&json!({"status": "pending"})),
            Exit::RequiresApproval
        );
        assert_eq!(
            exit_of(&json!({"status": "pending", "lapsed": true})),
            Exit::Negative
        );
        assert_eq!(exit_of(&json!([])), Exit::Success);
    }

    #[test]
    fn a_line_names_who_asked_and_who_decided() {
        let a = json!({"approval_id": "a1", "status": "granted", "agent_id": "bot",
            "session_id": "s1", "actions": ["x.y", "z.w"], "created_at": "t0",
            "decided_by": "oscar", "decided_at": "t1"});
        assert_eq!(
            line(&a),
            "a1  granted  agent bot  session s1  actions x.y,z.w  asked t0  decided by oscar at t1"
        );
    }

    #[test]
    fn a_line_names_the_call_an_approval_was_asked_for() {
        let a = json!({"approval_id": "a1", "status": "pending", "agent_id": "bot",
            "session_id": "s1", "actions": ["x.y"], "created_at": "t0",
            "call": {"execution_id": "e1", "action_id": "x.y", "parameters_hash": "sha256:ab",
                     "atlas_id": "at", "atlas_digest": "cd"}});
        assert_eq!(
            line(&a),
            "a1  pending  agent bot  session s1  actions x.y  asked t0  for the call with parameters sha256:ab under atlas at"
        );
    }
}

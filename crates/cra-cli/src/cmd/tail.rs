//! `cra trace tail`: the operator's live view of TRACE events over the runtime's WebSocket stream,
//! one readable line per event (time, session and sequence, type, and the action, decision,
//! deciding policy and approval the payload names). It resumes by itself: when the connection
//! drops or the server closes it as too slow, it reconnects with `since_seq` one past the last
//! event printed, so nothing is missed or repeated, backing off from 100 ms to 2 s; after
//! `--retry-for` seconds without a connection it gives up (exit 1) saying why. A session's
//! stream ends, exit 0, when the server closes it normally after `session.ended`.
//!
//! Exposed as [`run`] with [`TailArgs`] so the `cra trace` command group can mount it.

use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::cmd::client::{self, enc};
use crate::exit::Exit;
use crate::output::OutputFormat;

/// `cra trace tail` options.
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    /// Follow one session.
    #[arg(long, conflicts_with = "all")]
    pub session: Option<String>,
    /// Follow every session (operator role).
    #[arg(long)]
    pub all: bool,
    /// Start at this sequence (session mode); earlier events are skipped.
    #[arg(long)]
    pub since_seq: Option<u64>,
    /// Only events whose type starts with this prefix (e.g. `action.`).
    #[arg(long = "type")]
    pub type_prefix: Option<String>,
    /// Only events of this agent (with --all).
    #[arg(long)]
    pub agent: Option<String>,
    /// Only events carrying this decision (with --all).
    #[arg(long)]
    pub decision: Option<String>,
    /// The server (default: $CRA_URL or http://127.0.0.1:8421).
    #[arg(long, env = "CRA_URL")]
    pub url: Option<String>,
    /// Bearer token (default: $CRA_TOKEN, else the admin key of ./cra-data).
    #[arg(long, env = "CRA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Give up after this many seconds of failed connection attempts in a row.
    #[arg(long, default_value_t = 30)]
    pub retry_for: u64,
    /// Stop after this many events (for scripts and tests).
    #[arg(long)]
    pub limit: Option<u64>,
    /// How to print each event.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// What ended one connection.
enum Ended {
    /// The limit was reached.
    Done,
    /// The connection ended; reconnect.
    Reconnect(String),
    /// A refusal that reconnecting will not fix.
    Fatal(String),
}

/// Builds the stream URL for `args` resuming at `since`.
pub fn stream_url(base: &str, args: &TailArgs, since: Option<u64>) -> String {
    let ws = if let Some(rest) = base.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = base.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        base.to_owned()
    };
    let mut q: Vec<String> = Vec::new();
    if let Some(s) = &args.session {
        q.push(format!("session_id={}", enc(s)));
        if let Some(n) = since {
            q.push(format!("since_seq={n}"));
        }
    }
    if args.all {
        q.push("all=true".into());
    }
    if let Some(t) = &args.type_prefix {
        q.push(format!("type={}", enc(t)));
    }
    if let Some(a) = &args.agent {
        q.push(format!("agent={}", enc(a)));
    }
    if let Some(d) = &args.decision {
        q.push(format!("decision={}", enc(d)));
    }
    format!(
        "{}/v1/traces/stream?{}",
        ws.trim_end_matches('/'),
        q.join("&")
    )
}

/// Runs `cra trace tail`.
pub fn run(args: TailArgs) -> Exit {
    if args.session.is_none() && !args.all {
        eprintln!("cra trace tail: give --session ID or --all");
        return Exit::CouldNotRun;
    }
    let base = args
        .url
        .clone()
        .unwrap_or_else(|| client::DEFAULT_URL.to_owned());
    let token = match client::token_or_local(args.token.clone()) {
        Some(t) => t,
        None => {
            eprintln!(
                "cra trace tail: no credentials; pass --token or set CRA_TOKEN (or run next to a local server's ./cra-data)"
            );
            return Exit::CouldNotRun;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cra trace tail: {e}");
            return Exit::CouldNotRun;
        }
    };
    rt.block_on(tail_loop(base, token, args))
}

async fn tail_loop(base: String, token: String, args: TailArgs) -> Exit {
    let mut next = args.since_seq;
    let mut printed = 0u64;
    let mut failing_since: Option<std::time::Instant> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        let url = stream_url(&base, &args, next);
        let before = printed;
        match connect_once(&url, &token, &args, &mut next, &mut printed).await {
            Ended::Done => return Exit::Success,
            Ended::Fatal(why) => {
                eprintln!("cra trace tail: {why}");
                return Exit::CouldNotRun;
            }
            Ended::Reconnect(why) => {
                if printed > before {
                    // The connection delivered: a new outage starts its own count.
                    failing_since = None;
                    backoff = Duration::from_millis(100);
                }
                let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() >= Duration::from_secs(args.retry_for) {
                    eprintln!(
                        "cra trace tail: giving up after {} s without a connection: {why}; is `cra serve` running at {base}?",
                        args.retry_for
                    );
                    return Exit::CouldNotRun;
                }
                eprintln!(
                    "cra trace tail: {why}; retrying in {} ms",
                    backoff.as_millis()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

async fn connect_once(
    url: &str,
    token: &str,
    args: &TailArgs,
    next: &mut Option<u64>,
    printed: &mut u64,
) -> Ended {
    let mut req = match url.into_client_request() {
        Ok(r) => r,
        Err(e) => return Ended::Fatal(format!("bad url {url}: {e}")),
    };
    match format!("Bearer {token}").parse() {
        Ok(v) => {
            req.headers_mut().insert("authorization", v);
        }
        Err(_) => return Ended::Fatal("CRA_TOKEN is not a valid header value".into()),
    }
    let (mut ws, _) = match cra_runtime::tls::ws_connect(req).await {
        Ok(x) => x,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let status = resp.status().as_u16();
            let body = resp
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            return if (400..500).contains(&status) {
                Ended::Fatal(format!("the server refused the stream ({status}): {body}"))
            } else {
                Ended::Reconnect(format!("the server answered {status}"))
            };
        }
        Err(e) => {
            let why = cra_runtime::tls::explain(&e);
            return Ended::Reconnect(format!("cannot connect to {url}: {why}"));
        }
    };
    while let Some(msg) = ws.next().await {
        match msg {
            Ok(Message::Text(text)) => {
                let Ok(event) = serde_json::from_str::<Value>(text.as_str()) else {
                    continue;
                };
                if let Some(seq) = event.get("sequence").and_then(Value::as_u64)
                    && args.session.is_some()
                {
                    *next = Some(seq + 1);
                }
                print_event(&event, text.as_str(), args.output);
                *printed += 1;
                if args.limit.is_some_and(|l| *printed >= l) {
                    let _ = ws.close(None).await;
                    return Ended::Done;
                }
            }
            Ok(Message::Close(Some(frame)))
                if args.session.is_some() && u16::from(frame.code) == 1000 =>
            {
                return Ended::Done; // after `session.ended`: the stream is complete
            }
            Ok(Message::Close(frame)) => {
                let why = frame
                    .map(|f| format!("closed by the server ({}: {})", u16::from(f.code), f.reason))
                    .unwrap_or_else(|| "closed by the server".into());
                return Ended::Reconnect(why);
            }
            Ok(_) => {}
            Err(e) => return Ended::Reconnect(format!("connection lost: {e}")),
        }
    }
    Ended::Reconnect("connection ended".into())
}

fn print_event(event: &Value, raw: &str, output: OutputFormat) {
    match output {
        OutputFormat::Json => println!("{raw}"),
        OutputFormat::Text => println!("{}", line(event)),
    }
}

/// One event for people: time, `session#sequence`, type, then what its payload says of the
/// action, the decision, the deciding policy and the approval, when it says it.
pub fn line(event: &Value) -> String {
    let s = |k: &str| event[k].as_str().unwrap_or("-").to_owned();
    let seq = event["sequence"]
        .as_u64()
        .map_or_else(|| "-".into(), |n| n.to_string());
    let mut out = format!(
        "{} {}#{} {}",
        s("timestamp"),
        s("session_id"),
        seq,
        s("event_type")
    );
    let payload = &event["payload"];
    let text = |k: &str| payload[k].as_str().map(str::to_owned);
    let action = text("action_id").or_else(|| {
        let list: Vec<&str> = payload["actions"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        (!list.is_empty()).then(|| list.join(","))
    });
    // `decision` is a string on action events; a resolution says `decision_type`; a policy
    // evaluation its `result`; an execution its `status`.
    let decision = text("decision")
        .or_else(|| text("decision_type"))
        .or_else(|| text("result"))
        .or_else(|| text("status"));
    for (name, value) in [
        ("action", action),
        ("decision", decision),
        ("policy", text("policy_id")),
        ("approval", text("approval_id")),
    ] {
        if let Some(v) = value {
            out.push_str(&format!(" {name}={v}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_names_the_action_decision_policy_and_approval() {
        let denied = json!({"timestamp": "t", "session_id": "s", "sequence": 7,
            "event_type": "action.denied", "payload": {"action_id": "branch.delete",
            "decision": "deny", "policy_id": "deny-protected-branches", "reason": "no"}});
        assert_eq!(
            line(&denied),
            "t s#7 action.denied action=branch.delete decision=deny policy=deny-protected-branches"
        );
        let asked = json!({"timestamp": "t", "session_id": "s", "sequence": 3,
            "event_type": "approval.requested",
            "payload": {"approval_id": "a1", "actions": ["refund.issue", "x.y"]}});
        assert_eq!(
            line(&asked),
            "t s#3 approval.requested action=refund.issue,x.y approval=a1"
        );
        let resolved = json!({"timestamp": "t", "session_id": "s", "sequence": 2,
            "event_type": "carp.resolution.completed",
            "payload": {"decision": {"type": "allow"}, "decision_type": "allow"}});
        assert_eq!(
            line(&resolved),
            "t s#2 carp.resolution.completed decision=allow"
        );
        assert_eq!(line(&json!({})), "- -#- -");
    }

    #[test]
    fn urls_carry_the_resume_point_and_filters() {
        let args = TailArgs {
            session: Some("s 1".into()),
            all: false,
            since_seq: None,
            type_prefix: Some("action.".into()),
            agent: None,
            decision: None,
            url: None,
            token: None,
            retry_for: 30,
            limit: None,
            output: OutputFormat::Text,
        };
        assert_eq!(
            stream_url("http://h:1/", &args, Some(7)),
            "ws://h:1/v1/traces/stream?session_id=s%201&since_seq=7&type=action."
        );
    }
}

//! `cra trace tail`: the operator's live view of TRACE events over the runtime's WebSocket stream.
//! It resumes by itself: when the connection drops or the server closes it as too slow, it
//! reconnects with `since_seq` one past the last event printed, so nothing is missed or repeated.
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
    let mut failures = 0u32;
    loop {
        let url = stream_url(&base, &args, next);
        match connect_once(&url, &token, &args, &mut next, &mut printed).await {
            Ended::Done => return Exit::Success,
            Ended::Fatal(why) => {
                eprintln!("cra trace tail: {why}");
                return Exit::CouldNotRun;
            }
            Ended::Reconnect(why) => {
                failures += 1;
                if failures > 30 {
                    eprintln!("cra trace tail: giving up after 30 attempts: {why}");
                    return Exit::CouldNotRun;
                }
                eprintln!("cra trace tail: {why}; resuming");
                let backoff = Duration::from_millis(100 * u64::from(failures.min(20)));
                tokio::time::sleep(backoff).await;
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
        OutputFormat::Text => {
            let s = |k: &str| {
                event
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("-")
                    .to_owned()
            };
            let seq = event
                .get("sequence")
                .and_then(Value::as_u64)
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into());
            println!(
                "{} {}#{} {}",
                s("timestamp"),
                s("session_id"),
                seq,
                s("event_type")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            limit: None,
            output: OutputFormat::Text,
        };
        assert_eq!(
            stream_url("http://h:1/", &args, Some(7)),
            "ws://h:1/v1/traces/stream?session_id=s%201&since_seq=7&type=action."
        );
    }
}

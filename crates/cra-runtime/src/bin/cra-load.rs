//! `cra-load`: the runtime's load generator. Starts a real server in-process on 127.0.0.1:0 over
//! a fresh redb data directory (or targets `--url`), opens one session per client, and drives
//! distinct CARP requests over HTTP against the `dev.cra.github-ops` atlas; every TRACE event is
//! durable before each answer. Prints resolves/s and executes/s.
//!
//! ```text
//! cargo run --release -p cra-runtime --bin cra-load -- --clients 64 --seconds 10
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cra_runtime::config::{HttpExecutorConfig, RuntimeConfig};
use serde_json::{Value, json};

struct Options {
    clients: usize,
    seconds: u64,
    executes_per_client: usize,
    atlas: PathBuf,
    data: Option<PathBuf>,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        clients: 64,
        seconds: 10,
        executes_per_client: 45,
        atlas: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../atlases/dev.cra.github-ops"
        )),
        data: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--clients" => o.clients = val()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--seconds" => o.seconds = val()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--executes-per-client" => {
                o.executes_per_client = val()?
                    .parse()
                    .map_err(|e| format!("--executes-per-client: {e}"))?
            }
            "--atlas" => o.atlas = PathBuf::from(val()?),
            "--data" => o.data = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                return Err("usage: cra-load [--clients N] [--seconds S] [--executes-per-client N] [--atlas DIR] [--data DIR]".into());
            }
            other => return Err(format!("unknown argument `{other}`; see --help")),
        }
    }
    Ok(o)
}

const TOKEN: &str = "load-agent-key-0123456789abcdef";
const AGENT: &str = "load-agent";

fn now() -> String {
    cra_wire::clock::format_timestamp(time::OffsetDateTime::now_utc())
}

fn rid() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> Result<(u16, Value), String> {
    let resp = client
        .post(url)
        .bearer_auth(TOKEN)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let v = resp.json::<Value>().await.map_err(|e| e.to_string())?;
    Ok((status, v))
}

fn resolve_body(session: &str, i: u64, client: usize) -> Value {
    json!({
        "carp_version": "1.0",
        "request_id": rid(),
        "timestamp": now(),
        "operation": "resolve",
        "requester": {"agent_id": AGENT, "session_id": session},
        "task": {
            "goal": format!("client {client} task {i}: read the ci workflow and open a pull request"),
            "risk_tier": if i.is_multiple_of(3) { "medium" } else { "low" },
            "context_hints": [format!("hint-{}", i % 7)],
            "required_capabilities": ["repo-read", "contribute"]
        },
        "atlas_ids": ["dev.cra.github-ops"]
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("cra-load: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match run(opts).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cra-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// A stand-in for the GitHub API the `http:github` executor is bound to.
async fn executor_endpoint() -> Result<String, String> {
    let app = axum::Router::new().route(
        "/exec",
        axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
            axum::Json(json!({"ok": true, "action_id": body["action_id"]}))
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok(format!("http://{addr}/exec"))
}

async fn run(o: Options) -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = o.data.clone().unwrap_or_else(|| tmp.path().join("data"));
    let keys = tmp.path().join("keys.toml");
    std::fs::write(
        &keys,
        format!("[[keys]]\ntoken = \"{TOKEN}\"\nactor_id = \"{AGENT}\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n"),
    )
    .map_err(|e| e.to_string())?;
    let mut config = RuntimeConfig {
        addr: "127.0.0.1:0".into(),
        data: data.clone(),
        api_keys: Some(keys),
        atlases: vec![o.atlas.clone()],
        ..RuntimeConfig::default()
    };
    config.limits.requests_per_second = 0;
    config.executors.insert(
        "github".into(),
        HttpExecutorConfig {
            url: executor_endpoint().await?,
            timeout_ms: 5000,
        },
    );
    let (state, _) = cra_runtime::build_runtime(
        config,
        Arc::new(cra_wire::SystemClock),
        Arc::new(cra_wire::UuidV7Ids),
    )
    .map_err(|e| e.to_string())?;
    let server = cra_runtime::start(state.clone(), std::future::pending())
        .await
        .map_err(|e| e.to_string())?;
    let base = format!("http://{}", server.addr);
    println!(
        "cra-load: server on {base}, store redb in {}, {} clients",
        data.display(),
        o.clients
    );

    // One session per client.
    let mut sessions = Vec::new();
    for c in 0..o.clients {
        let client = reqwest::Client::new();
        let (st, v) = post(
            &client,
            &format!("{base}/v1/sessions"),
            &json!({"agent_id": AGENT, "goal": format!("load client {c}")}),
        )
        .await?;
        if st != 201 {
            return Err(format!("session: {st} {v}"));
        }
        let sid = v["session_id"].as_str().unwrap_or_default().to_owned();
        sessions.push((client, sid));
    }

    // Phase 1: resolves for `seconds`.
    let events_before = state.metrics.trace_events.load(Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, (client, sid)) in sessions.iter().enumerate() {
        let (client, sid, stop, done, errors, base) = (
            client.clone(),
            sid.clone(),
            stop.clone(),
            done.clone(),
            errors.clone(),
            base.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let url = format!("{base}/v1/resolve");
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match post(&client, &url, &resolve_body(&sid, i, c)).await {
                    Ok((200, _)) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let secs = start.elapsed().as_secs_f64();
    let resolves = done.load(Ordering::Relaxed);
    let events = state.metrics.trace_events.load(Ordering::Relaxed) - events_before;
    println!(
        "resolve: {resolves} in {secs:.2} s = {:.0} resolves/s ({} errors), {events} TRACE events = {:.1} events/resolve, {:.0} events/s",
        resolves as f64 / secs,
        errors.load(Ordering::Relaxed),
        events as f64 / resolves.max(1) as f64,
        events as f64 / secs
    );

    // Phase 2: executes (the atlas's global rate limit allows 3000 per hour: stay under it).
    let mut resolutions = Vec::new();
    for (c, (client, sid)) in sessions.iter().enumerate() {
        let (st, v) = post(
            client,
            &format!("{base}/v1/resolve"),
            &resolve_body(sid, u64::MAX, c),
        )
        .await?;
        if st != 200 {
            return Err(format!("resolve: {st} {v}"));
        }
        resolutions.push(v["resolution_id"].as_str().unwrap_or_default().to_owned());
    }
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for ((client, sid), res) in sessions.iter().zip(resolutions) {
        let (client, sid, done, errors, base) = (
            client.clone(),
            sid.clone(),
            done.clone(),
            errors.clone(),
            base.clone(),
        );
        let n = o.executes_per_client;
        tasks.push(tokio::spawn(async move {
            let url = format!("{base}/v1/execute");
            for i in 0..n {
                let body = json!({
                    "carp_version": "1.0",
                    "request_id": rid(),
                    "timestamp": now(),
                    "operation": "execute",
                    "requester": {"agent_id": AGENT, "session_id": sid},
                    "execution": {"resolution_id": res, "action_id": "repo.get",
                                  "parameters": {"owner": "octo", "repo": format!("repo-{i}")}}
                });
                match post(&client, &url, &body).await {
                    Ok((200, v)) if v["status"] == "success" => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = start.elapsed().as_secs_f64();
    let executes = done.load(Ordering::Relaxed);
    println!(
        "execute: {executes} in {secs:.2} s = {:.0} executes/s ({} errors; each runs the http executor and writes 3 events)",
        executes as f64 / secs,
        errors.load(Ordering::Relaxed)
    );
    server.shutdown().await.map_err(|e| e.to_string())?;
    Ok(())
}

//! `http-load`: HTTP and WebSocket load against a real `cra serve` process on loopback.
//!
//! The driver starts `cra serve` (the release binary given with `--cra`) on `127.0.0.1:0` over a
//! fresh redb data directory, with an API key file it writes itself, the `dev.cra.github-ops`
//! atlas, request rate limiting off and the atlas's `http:github` executor pointed at a tiny
//! stand-in HTTP endpoint served by this process. Every TRACE event the server writes is durable
//! (group-committed and fsync'd) before its HTTP answer and before it is streamed.
//!
//! * **HTTP** (`--clients 1,16,64`): for each client count, a fresh server; every client has its
//!   own session (and its own Relay project) and its own connection pool, and sends distinct
//!   requests back to back for `--seconds`:
//!   - resolve: `POST /v1/resolve`, a new request id and goal each time (200 expected);
//!   - execute: `POST /v1/execute` of `repo.get` under a resolution the client obtained first,
//!     run by the `http:github` executor (200 with status `success` expected). The atlas's global
//!     rate limit (3,000 executes per hour) caps one server at [`EXECUTE_CAP`] executes;
//!   - deposit: `POST /v1/projects/{p}/packages` of a new Relay package whose
//!     `created_by.session_id` is the client's session, so its event lands in that chain (201).
//!
//!   Reported per phase: requests/s, p50/p99/max latency (each request timed alone, send to
//!   complete body), errors, and TRACE events/s (from the sessions' `event_count`). The first
//!   client's chain is verified by the server at the end of each server's life.
//! * **WebSocket fan-out** (`--subscribers 1,100,1000`): one busy session emitting 100 events/s
//!   (one Relay deposit every 10 ms, each recorded as one `relay.package.deposited` event in that
//!   session's chain) and N subscribers of `GET /v1/traces/stream?session_id=..&since_seq=..`.
//!   Delivery latency = the subscriber's receive time minus the event's own `timestamp` (stamped
//!   by the server when the event is sealed, before the durable commit; same machine, same clock),
//!   so it includes the fsync. A warm-up event confirms every subscriber is live before timing.
//! * **Slow clients** (`--only slow`, `--slow 1000`): one server, one agent resolving back to
//!   back (each request timed alone), first alone, then while 1,000 slow connections hold the
//!   server: each sends part of a request head, then one byte a second, and reconnects whenever
//!   the server closes it (the probe's slowloris). Reported: the agent's p50/p99/max in both
//!   phases, and the server's resident memory (`VmRSS`) before the slow connections, once they
//!   are all held, after the timed phase under them (the server has closed and they have reopened
//!   many by then: flat means these two agree) and after they left. The target (issue 29): p99 under 100 ms, memory flat.
//! * **Baseline** (same run, same process): a bare `tokio::sync::broadcast` of the same number of
//!   ~1 KB messages to N receiver tasks doing the same per-message bookkeeping, at full speed: the
//!   in-process ceiling of deliveries/s with no I/O, no JSON and no durability.
//!
//! * **Replicas** (`--replicas N`, with `--server-config` naming a PostgreSQL store): every server
//!   above is N `cra serve` processes on one schema. In the HTTP phases client `i` opens its
//!   session on replica `i % N` and sends every request there, so the figures are the replicas'
//!   total; in the fan-out the busy session is written through replica 2 and every subscriber
//!   listens on replica 1, so the latency is cross-replica delivery (the store's append feed,
//!   then a read of the announced events).
//!
//! Output: one JSON document on stdout. Usage:
//! `http-load --cra PATH --atlas DIR --work DIR [--quick | --smoke] [--runs N] [--seconds S]
//!  [--clients 1,16,64] [--subscribers 1,100,1000] [--ws-seconds S] [--only http|ws|slow] [--slow N]
//!  [--replicas N] [--server-config 'key = value']` (a top-level line added to the server's configuration, for
//!  same-run A/B pairs such as `resolution_cache_entries = 0`)

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const TOKEN: &str = "bench-agent-key-0123456789abcdef";
const AGENT: &str = "bench-agent";
const ATLAS_ID: &str = "dev.cra.github-ops";
/// Executes one server may run: the atlas's global rate limit is 3,000 per hour.
const EXECUTE_CAP: u64 = 2_900;
/// Events per second the busy session emits in the fan-out benchmark.
const EMIT_RATE: u64 = 100;

struct Options {
    cra: PathBuf,
    atlas: PathBuf,
    work: PathBuf,
    runs: usize,
    seconds: f64,
    clients: Vec<usize>,
    subscribers: Vec<usize>,
    ws_seconds: f64,
    /// Seconds to wait, after the last emit, for deliveries still on their way.
    ws_wait: u64,
    only: Option<String>,
    server_config: Vec<String>,
    /// `cra serve` processes per server (on one PostgreSQL schema when more than one).
    replicas: usize,
    /// Slow connections held in the slow-client benchmark.
    slow: usize,
    /// Requests the agent times in each slow-client phase.
    slow_requests: usize,
}

fn list(v: &str) -> anyhow::Result<Vec<usize>> {
    v.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .context("a comma-separated list of counts")
        })
        .collect()
}

fn parse_args() -> anyhow::Result<Options> {
    let mut o = Options {
        cra: PathBuf::from("bench/target/release/cra"),
        atlas: PathBuf::from("atlases/dev.cra.github-ops"),
        work: PathBuf::from("bench/target/bench/http-load"),
        runs: 3,
        seconds: 10.0,
        clients: vec![1, 16, 64],
        subscribers: vec![1, 100, 1000],
        ws_seconds: 20.0,
        ws_wait: 20,
        only: None,
        server_config: Vec::new(),
        replicas: 1,
        slow: 1000,
        slow_requests: 2000,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--cra" => o.cra = PathBuf::from(val()?),
            "--atlas" => o.atlas = PathBuf::from(val()?),
            "--work" => o.work = PathBuf::from(val()?),
            "--runs" => o.runs = val()?.parse()?,
            "--seconds" => o.seconds = val()?.parse()?,
            "--clients" => o.clients = list(&val()?)?,
            "--subscribers" => o.subscribers = list(&val()?)?,
            "--ws-seconds" => o.ws_seconds = val()?.parse()?,
            "--only" => o.only = Some(val()?),
            "--server-config" => o.server_config.push(val()?),
            "--replicas" => o.replicas = val()?.parse::<usize>()?.max(1),
            "--slow" => o.slow = val()?.parse()?,
            "--quick" => {
                o.slow_requests = 500;
                o.runs = 1;
                o.seconds = 1.5;
                o.ws_seconds = 3.0;
                o.ws_wait = 5;
            }
            // CI's smoke run against a debug build: every phase briefly, figures meaningless.
            "--smoke" => {
                o.runs = 1;
                o.seconds = 0.3;
                o.clients = vec![1, 4];
                o.subscribers = vec![1, 10];
                o.ws_seconds = 0.5;
                o.ws_wait = 5;
                o.slow = 50;
                o.slow_requests = 50;
            }
            other => bail!("unknown argument `{other}` (see the module documentation)"),
        }
    }
    Ok(o)
}

fn now() -> String {
    cra_wire::clock::format_timestamp(time::OffsetDateTime::now_utc())
}

fn rid() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// Microseconds since the Unix epoch, now.
fn now_us() -> i64 {
    let t = time::OffsetDateTime::now_utc();
    (t.unix_timestamp_nanos() / 1000) as i64
}

/// A `cra serve` child process.
struct Server {
    child: Child,
    base: String,
    /// The server's data directory, removed once it has stopped (a full run would otherwise
    /// leave gigabytes of TRACE behind); its log stays beside it.
    data: PathBuf,
}

impl Server {
    async fn start(o: &Options, name: &str, executor_url: &str) -> anyhow::Result<Self> {
        let dir = o.work.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let keys = dir.join("keys.toml");
        std::fs::write(
            &keys,
            format!(
                "[[keys]]\ntoken = \"{TOKEN}\"\nactor_id = \"{AGENT}\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n"
            ),
        )?;
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "{}\n[limits]\nrequests_per_second = 0\n\n[executors.github]\nurl = \"{executor_url}\"\ntimeout_ms = 5000\n",
                o.server_config.join("\n")
            ),
        )?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        let mut child = Command::new(&o.cra)
            .arg("serve")
            .arg("--addr")
            .arg("127.0.0.1:0")
            .arg("--data")
            .arg(dir.join("data"))
            .arg("--atlas")
            .arg(&o.atlas)
            .arg("--api-keys")
            .arg(&keys)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", o.cra.display()))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let base = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = lines.next_line().await? {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    return Ok::<_, anyhow::Error>(rest.trim().to_owned());
                }
            }
            bail!("cra serve exited before listening (see {})", dir.display())
        })
        .await
        .context("cra serve did not start within 120 s")??;
        // Keep draining its stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            base,
            data: dir.join("data"),
        })
    }

    /// `o.replicas` servers named `name` (one schema when `o.server_config` names PostgreSQL),
    /// started one after the other.
    async fn start_replicas(o: &Options, name: &str, executor_url: &str) -> anyhow::Result<Vec<Self>> {
        let mut servers = Vec::with_capacity(o.replicas);
        for k in 0..o.replicas {
            let named = if o.replicas == 1 {
                name.to_owned()
            } else {
                format!("{name}-r{}", k + 1)
            };
            servers.push(Self::start(o, &named, executor_url).await?);
        }
        Ok(servers)
    }

    /// SIGTERM (graceful: in-flight requests finish, stores close), then wait.
    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(s) => {
                s?;
            }
            Err(_) => {
                self.child.start_kill()?;
                self.child.wait().await?;
            }
        }
        // A server on PostgreSQL may never have made its data directory.
        match std::fs::remove_dir_all(&self.data) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", self.data.display()))
            }
            _ => Ok(()),
        }
    }
}

/// A stand-in for the GitHub API behind the atlas's `http:github` executor: answers every POST
/// with `{"ok":true}` over keep-alive HTTP/1.1.
async fn executor_stub() -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            tokio::spawn(serve_stub(sock));
        }
    });
    Ok(format!("http://{addr}/exec"))
}

async fn serve_stub(sock: TcpStream) -> std::io::Result<()> {
    let _ = sock.set_nodelay(true);
    let mut r = BufReader::new(sock);
    let mut line = String::new();
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        loop {
            line.clear();
            if r.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let t = line.trim_end();
            if t.is_empty() {
                break;
            }
            if let Some((k, v)) = t.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        r.get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}")
            .await?;
    }
}

async fn send(
    c: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut req = c.request(method, url).bearer_auth(TOKEN);
    if let Some(b) = body {
        req = req.json(b);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await?;
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, v))
}

/// POSTs an already serialised JSON body; the answer's status and bytes.
async fn post_raw(
    c: &reqwest::Client,
    url: &str,
    body: Vec<u8>,
) -> anyhow::Result<(u16, bytes::Bytes)> {
    let resp = c
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = resp.status().as_u16();
    Ok((status, resp.bytes().await?))
}

async fn post(c: &reqwest::Client, url: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
    send(c, reqwest::Method::POST, url, Some(body)).await
}

async fn expect(
    c: &reqwest::Client,
    url: &str,
    body: &Value,
    status: u16,
) -> anyhow::Result<Value> {
    let (st, v) = post(c, url, body).await?;
    if st != status {
        bail!("POST {url}: {st} {v}");
    }
    Ok(v)
}

/// One load client: its own connection pool, session and project.
struct LoadClient {
    http: reqwest::Client,
    /// The replica this client talks to.
    base: String,
    index: usize,
    session: String,
    project: String,
}

async fn open_client(base: &str, index: usize, tag: &str) -> anyhow::Result<LoadClient> {
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(4)
        .build()?;
    let project = format!("proj_bench_{tag}_{index}");
    expect(
        &http,
        &format!("{base}/v1/projects"),
        &json!({"project_id": project, "name": format!("bench project {index}")}),
        201,
    )
    .await?;
    let v = expect(
        &http,
        &format!("{base}/v1/sessions"),
        &json!({"agent_id": AGENT, "goal": format!("benchmark client {index}")}),
        201,
    )
    .await?;
    let session = v["session_id"]
        .as_str()
        .context("session without id")?
        .to_owned();
    Ok(LoadClient {
        http,
        base: base.to_owned(),
        index,
        session,
        project,
    })
}

fn resolve_body(session: &str, client: usize, i: u64) -> Value {
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
        "atlas_ids": [ATLAS_ID]
    })
}

fn execute_body(session: &str, resolution: &str, client: usize, i: u64) -> Value {
    json!({
        "carp_version": "1.0",
        "request_id": rid(),
        "timestamp": now(),
        "operation": "execute",
        "requester": {"agent_id": AGENT, "session_id": session},
        "execution": {"resolution_id": resolution, "action_id": "repo.get",
                      "parameters": {"owner": "octo", "repo": format!("repo-{client}-{i}")}}
    })
}

fn package_body(project: &str, session: &str, id: &str, i: u64) -> Value {
    json!({
        "package_id": id,
        "project_id": project,
        "relay_version": "0.1",
        "title": format!("Benchmark package {id}"),
        "status": "complete",
        "package_type": "standard",
        "review_type": "none",
        "created_at": now(),
        "created_by": {"id": AGENT, "type": "agent", "session_id": session},
        "open_questions": [format!("question {}", i % 13)],
        "decisions_made": [format!("decided {id}")],
        "handoff_note": format!("handoff from {id}"),
        "content_md": format!("# {id}\n\nNotes of step {i} of the benchmark: the retrieval index and its latency.\n"),
        "tags": ["bench", format!("t{}", i % 5)]
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Resolve,
    Execute,
    Deposit,
}

impl Op {
    /// Whether a body answered with the expected status shows this operation's success: the
    /// resolution's id, an execute's `success`, the deposited package's id. (A vectorised search:
    /// the marker may sit at the end of a 13 kB resolution, and a naive scan of every answer took
    /// a share of the two cores from the server being measured.)
    fn succeeded(self, body: &[u8]) -> bool {
        let marker: &[u8] = match self {
            Op::Resolve => b"\"resolution_id\"",
            Op::Execute => b"\"status\":\"success\"",
            Op::Deposit => b"\"package_id\"",
        };
        memchr::memmem::find(body, marker).is_some()
    }

    fn name(self) -> &'static str {
        match self {
            Op::Resolve => "resolve",
            Op::Execute => "execute",
            Op::Deposit => "deposit",
        }
    }
}

/// Sum of the clients' sessions' `event_count`.
async fn events(base: &str, clients: &[Arc<LoadClient>]) -> anyhow::Result<u64> {
    let mut total = 0;
    for c in clients {
        let (st, v) = send(
            &c.http,
            reqwest::Method::GET,
            &format!("{base}/v1/sessions/{}", c.session),
            None,
        )
        .await?;
        if st != 200 {
            bail!("GET session: {st} {v}");
        }
        total += v["event_count"]
            .as_u64()
            .context("session without event_count")?;
    }
    Ok(total)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[i])
}

/// One timed phase: every client sends `op` requests back to back for `seconds` (or until the
/// shared budget is spent). Latencies in microseconds.
async fn phase(
    base: &str,
    clients: &[Arc<LoadClient>],
    op: Op,
    seconds: f64,
    run: usize,
) -> anyhow::Result<Value> {
    // Execute needs a resolution per client (obtained before timing).
    let mut resolutions = Vec::new();
    if op == Op::Execute {
        for c in clients {
            let v = expect(
                &c.http,
                &format!("{}/v1/resolve", c.base),
                &resolve_body(&c.session, c.index, u64::MAX),
                200,
            )
            .await?;
            resolutions.push(
                v["resolution_id"]
                    .as_str()
                    .context("resolution without id")?
                    .to_owned(),
            );
        }
    }
    let events_before = events(base, clients).await?;
    let budget = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for (k, c) in clients.iter().enumerate() {
        let c = c.clone();
        let base = c.base.clone();
        let budget = budget.clone();
        let resolution = resolutions.get(k).cloned().unwrap_or_default();
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            let mut first_error: Option<String> = None;
            let mut i = 0u64;
            while Instant::now() < deadline {
                if op == Op::Execute && budget.fetch_add(1, Ordering::Relaxed) >= EXECUTE_CAP {
                    break;
                }
                let (url, body, ok_status) = match op {
                    Op::Resolve => (
                        format!("{base}/v1/resolve"),
                        resolve_body(&c.session, c.index, i),
                        200,
                    ),
                    Op::Execute => (
                        format!("{base}/v1/execute"),
                        execute_body(&c.session, &resolution, c.index, i),
                        200,
                    ),
                    Op::Deposit => (
                        format!("{base}/v1/projects/{}/packages", c.project),
                        package_body(
                            &c.project,
                            &c.session,
                            &format!("pkg_r{run}_c{}_{i}", c.index),
                            i,
                        ),
                        201,
                    ),
                };
                // Serialised before the clock starts; the answer is checked by its status and one
                // marker of success found in its bytes, not parsed into a tree: the driver shares
                // the server's two cores, and parsing a 14 kB resolution per request cost it more
                // than sending it.
                // Serialising a `Value` cannot fail (string keys only).
                let body = serde_json::to_vec(&body).unwrap_or_default();
                let t = Instant::now();
                let r = post_raw(&c.http, &url, body).await;
                let us = t.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                match r {
                    Ok((st, bytes)) if st == ok_status && op.succeeded(&bytes) => {
                        lat.push(us);
                    }
                    Ok((st, bytes)) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| {
                            format!("{st} {}", String::from_utf8_lossy(&bytes))
                        });
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                }
                i += 1;
            }
            (lat, errors, first_error)
        }));
    }
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0u64;
    let mut first_error = None;
    for t in tasks {
        let (lat, e, fe) = t.await?;
        all.extend(lat);
        errors += e;
        if first_error.is_none() {
            first_error = fe;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let events_after = events(base, clients).await?;
    all.sort_unstable();
    let ok = all.len() as f64;
    if all.is_empty() {
        bail!(
            "{} with {} clients: no request succeeded ({errors} errors; first: {})",
            op.name(),
            clients.len(),
            first_error.unwrap_or_default()
        );
    }
    let r = json!({
        "op": op.name(),
        "clients": clients.len(),
        "requests": all.len(),
        "errors": errors,
        "first_error": first_error,
        "seconds": secs,
        "requests_per_second": ok / secs,
        "p50_ms": percentile(&all, 0.50) / 1000.0,
        "p99_ms": percentile(&all, 0.99) / 1000.0,
        "max_ms": percentile(&all, 1.0) / 1000.0,
        "trace_events": events_after - events_before,
        "trace_events_per_second": (events_after - events_before) as f64 / secs,
    });
    eprintln!(
        "http-load: {:>7} x {:>2} clients: {:>6.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors, {:.0} TRACE events/s",
        op.name(),
        clients.len(),
        ok / secs,
        percentile(&all, 0.50) / 1000.0,
        percentile(&all, 0.99) / 1000.0,
        errors,
        (events_after - events_before) as f64 / secs
    );
    Ok(r)
}

async fn http_bench(o: &Options, executor: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for run in 0..o.runs {
        for &n in &o.clients {
            let servers = Server::start_replicas(o, &format!("http-{n}"), executor).await?;
            let base = servers[0].base.clone();
            let mut clients = Vec::new();
            for i in 0..n {
                let on = &servers[i % servers.len()].base;
                clients.push(Arc::new(open_client(on, i, "h").await?));
            }
            for op in [Op::Resolve, Op::Execute, Op::Deposit] {
                let mut r = phase(&base, &clients, op, o.seconds, run).await?;
                r["run"] = json!(run);
                r["replicas"] = json!(servers.len());
                out.push(r);
            }
            // The server verifies the first client's whole chain.
            let c = &clients[0];
            let v = expect(
                &c.http,
                &format!("{base}/v1/traces/{}/verify", c.session),
                &json!({}),
                200,
            )
            .await?;
            if v["valid"] != json!(true) {
                bail!("the chain of {} does not verify: {v}", c.session);
            }
            drop(clients);
            for s in servers {
                s.stop().await?;
            }
        }
    }
    Ok(out)
}

/// `"key":` followed by a JSON string or number, found without parsing the whole event (the
/// first occurrence; `sequence` is looked up from the end, where the envelope keeps it, after the
/// payload).
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = if key == "sequence" {
        text.rfind(&pat)?
    } else {
        text.find(&pat)?
    } + pat.len();
    let rest = text[at..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        s.split('"').next()
    } else {
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }
}

fn timestamp_us(ts: &str) -> Option<i64> {
    let t = cra_wire::clock::parse_rfc3339(ts).ok()?;
    Some((t.unix_timestamp_nanos() / 1000) as i64)
}

/// What one subscriber saw: events with `sequence >= first_timed`, their delivery latencies.
#[derive(Default)]
struct Seen {
    latencies_us: Vec<u32>,
    /// Sequence numbers of the timed events, in arrival order.
    sequences: Vec<u64>,
    /// When the last timed event arrived (µs since the epoch).
    last_us: i64,
    warmed: bool,
    closed_slow: bool,
    error: Option<String>,
}

/// What a subscriber shares with the benchmark's conductor.
#[derive(Clone)]
struct Shared {
    connected: Arc<AtomicUsize>,
    warm: Arc<AtomicUsize>,
    received: Arc<AtomicU64>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// At most this many handshakes at a time (the listen backlog is finite).
    gate: Arc<tokio::sync::Semaphore>,
}

async fn subscriber(
    base: String,
    session: String,
    since: u64,
    first_timed: u64,
    mut sh: Shared,
) -> Seen {
    let mut seen = Seen::default();
    let url = format!(
        "{}/v1/traces/stream?session_id={session}&since_seq={since}",
        base.replacen("http://", "ws://", 1)
    );
    let mut req = match url.into_client_request() {
        Ok(r) => r,
        Err(e) => {
            seen.error = Some(e.to_string());
            return seen;
        }
    };
    if let Ok(h) = format!("Bearer {TOKEN}").parse() {
        req.headers_mut().insert("authorization", h);
    }
    let permit = sh.gate.clone().acquire_owned().await;
    let conn = tokio::time::timeout(
        Duration::from_secs(30),
        tokio_tungstenite::connect_async(req),
    )
    .await;
    drop(permit);
    sh.connected.fetch_add(1, Ordering::Relaxed);
    let mut ws = match conn {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(e)) => {
            seen.error = Some(format!("connect: {e}"));
            return seen;
        }
        Err(_) => {
            seen.error = Some("connect: no handshake within 30 s".to_owned());
            return seen;
        }
    };
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = sh.stop.changed() => break,
        };
        let Some(msg) = msg else { break };
        match msg {
            Ok(Message::Text(t)) => {
                let recv = now_us();
                let seq: u64 = field(&t, "sequence")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if seq < first_timed {
                    if !seen.warmed {
                        seen.warmed = true;
                        sh.warm.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                let sent = field(&t, "timestamp")
                    .and_then(timestamp_us)
                    .unwrap_or(recv);
                seen.latencies_us
                    .push((recv - sent).clamp(0, i64::from(u32::MAX)) as u32);
                seen.sequences.push(seq);
                seen.last_us = recv;
                sh.received.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Message::Close(frame)) => {
                if frame.is_some_and(|f| u16::from(f.code) == 4008) {
                    seen.closed_slow = true;
                }
                break;
            }
            Ok(_) => {}
            Err(e) => {
                seen.error = Some(e.to_string());
                break;
            }
        }
    }
    seen
}

async fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while !done() {
        if t.elapsed() > timeout {
            eprintln!("http-load: timed out waiting for {what}");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn ws_bench(o: &Options, executor: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    let servers = Server::start_replicas(o, "ws", executor).await?;
    // Subscribers listen on the first replica; the busy session is written through the last.
    let base = servers[0].base.clone();
    let emitter = Arc::new(open_client(&servers[servers.len() - 1].base, 0, "w").await?);
    let mut next_pkg = 0u64;
    for run in 0..o.runs {
        for &n in &o.subscribers {
            let since = events(&base, std::slice::from_ref(&emitter)).await?;
            // Event `since` is the warm-up; timed events follow it.
            let first_timed = since + 1;
            let connected = Arc::new(AtomicUsize::new(0));
            let warm = Arc::new(AtomicUsize::new(0));
            let received = Arc::new(AtomicU64::new(0));
            let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
            let shared = Shared {
                connected: connected.clone(),
                warm: warm.clone(),
                received: received.clone(),
                stop: stop_rx,
                gate: Arc::new(tokio::sync::Semaphore::new(64)),
            };
            let subs: Vec<_> = (0..n)
                .map(|_| {
                    tokio::spawn(subscriber(
                        base.clone(),
                        emitter.session.clone(),
                        since,
                        first_timed,
                        shared.clone(),
                    ))
                })
                .collect();
            drop(shared);
            wait_until(
                "the subscribers to connect",
                Duration::from_secs(60),
                || connected.load(Ordering::Relaxed) >= n,
            )
            .await;
            let deposit = |i: u64| {
                let e = emitter.clone();
                let base = e.base.clone();
                async move {
                    let id = format!("pkg_ws_{i}");
                    post(
                        &e.http,
                        &format!("{base}/v1/projects/{}/packages", e.project),
                        &package_body(&e.project, &e.session, &id, i),
                    )
                    .await
                }
            };
            // Warm-up: one event every subscriber must see before timing starts.
            let (st, v) = deposit(next_pkg).await?;
            next_pkg += 1;
            if st != 201 {
                bail!("warm-up deposit: {st} {v}");
            }
            wait_until("the warm-up event", Duration::from_secs(60), || {
                warm.load(Ordering::Relaxed) >= n
            })
            .await;
            let live = warm.load(Ordering::Relaxed);
            // Emit EMIT_RATE events per second, each on its own task so a slow answer never
            // delays the next tick.
            let total = (o.ws_seconds * EMIT_RATE as f64).round() as u64;
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / EMIT_RATE));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            let start = Instant::now();
            let mut emits = Vec::new();
            for _ in 0..total {
                tick.tick().await;
                emits.push(tokio::spawn(deposit(next_pkg)));
                next_pkg += 1;
            }
            let mut emit_errors = 0u64;
            for e in emits {
                match e.await? {
                    Ok((201, _)) => {}
                    _ => emit_errors += 1,
                }
            }
            let emitted = start.elapsed().as_secs_f64();
            let expected = (total - emit_errors) * n as u64;
            wait_until("every delivery", Duration::from_secs(o.ws_wait), || {
                received.load(Ordering::Relaxed) >= expected
            })
            .await;
            let start_us = now_us() - (start.elapsed().as_micros() as i64);
            stop_tx.send_replace(true);
            let mut lat: Vec<u32> = Vec::new();
            let mut complete = 0usize;
            let mut slow = 0usize;
            let mut errors = 0usize;
            let mut first_error = None;
            let mut missing: Vec<u64> = Vec::new();
            let mut out_of_order = 0usize;
            let mut duplicates = 0usize;
            let timed = total - emit_errors;
            let mut last_us = start_us;
            for s in subs {
                let seen = s.await?;
                last_us = last_us.max(seen.last_us);
                out_of_order += seen.sequences.windows(2).filter(|w| w[1] < w[0]).count();
                let mut seqs = seen.sequences.clone();
                seqs.sort_unstable();
                let before = seqs.len();
                seqs.dedup();
                duplicates += before - seqs.len();
                if missing.len() < 20 {
                    missing.extend(
                        (first_timed..first_timed + timed)
                            .filter(|q| seqs.binary_search(q).is_err())
                            .take(20),
                    );
                }
                if seen.latencies_us.len() as u64 >= total - emit_errors {
                    complete += 1;
                }
                if seen.closed_slow {
                    slow += 1;
                }
                if let Some(e) = seen.error {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
                lat.extend(seen.latencies_us);
            }
            lat.sort_unstable();
            let deliveries = lat.len() as u64;
            // From the first emit to the last delivery (not to the end of a wait for
            // deliveries that never came).
            let delivered_secs = ((last_us - start_us) as f64 / 1e6).max(1e-3);
            let r = json!({
                "run": run,
                "replicas": servers.len(),
                "subscribers": n,
                "subscribers_live_before_timing": live,
                "events_emitted": total - emit_errors,
                "emit_errors": emit_errors,
                "emit_seconds": emitted,
                "deliveries": deliveries,
                "deliveries_expected": expected,
                "subscribers_complete": complete,
                "closed_slow_consumer": slow,
                "subscriber_errors": errors,
                "missing_sequences_examples": missing,
                "out_of_order_deliveries": out_of_order,
                "duplicate_deliveries": duplicates,
                "first_error": first_error,
                "deliveries_per_second": deliveries as f64 / delivered_secs,
                "p50_ms": percentile(&lat, 0.50) / 1000.0,
                "p99_ms": percentile(&lat, 0.99) / 1000.0,
                "max_ms": percentile(&lat, 1.0) / 1000.0,
                "latency": "subscriber receive time minus the event's timestamp (sealed by the server before the durable commit)",
            });
            eprintln!(
                "http-load: fan-out to {n:>4}: {deliveries}/{expected} delivered ({complete} complete, {slow} slow-closed), {:.0} deliveries/s, p50 {:.1} ms, p99 {:.1} ms",
                deliveries as f64 / delivered_secs,
                percentile(&lat, 0.50) / 1000.0,
                percentile(&lat, 0.99) / 1000.0
            );
            out.push(r);
        }
    }
    for s in servers {
        s.stop().await?;
    }
    Ok(out)
}

/// The in-process ceiling: `tokio::sync::broadcast` of `messages` ~1 KB events to `n` receiver
/// tasks that do the subscribers' bookkeeping (find the sequence and timestamp, parse the
/// timestamp, keep the latency).
async fn broadcast_baseline(n: usize, messages: usize) -> anyhow::Result<Value> {
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<String>>(messages + 1);
    let mut tasks = Vec::new();
    for _ in 0..n {
        let mut rx = tx.subscribe();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(messages);
            let mut lagged = 0u64;
            loop {
                match rx.recv().await {
                    Ok(m) => {
                        let recv = now_us();
                        let _seq: u64 = field(&m, "sequence")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        let sent = field(&m, "timestamp")
                            .and_then(timestamp_us)
                            .unwrap_or(recv);
                        lat.push((recv - sent).clamp(0, i64::from(u32::MAX)) as u32);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => lagged += k,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
            (lat.len(), lagged)
        }));
    }
    let pad = "x".repeat(700);
    let start = Instant::now();
    for i in 0..messages {
        let ev = format!(
            "{{\"event_id\":\"{}\",\"sequence\":{i},\"timestamp\":\"{}\",\"event_type\":\"relay.package.deposited\",\"payload\":{{\"pad\":\"{pad}\"}}}}",
            rid(),
            now()
        );
        tx.send(Arc::new(ev)).ok();
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    drop(tx);
    let mut delivered = 0usize;
    let mut lagged = 0u64;
    for t in tasks {
        let (d, l) = t.await?;
        delivered += d;
        lagged += l;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "http-load: bare broadcast to {n:>4}: {:.0} deliveries/s",
        delivered as f64 / secs
    );
    Ok(json!({
        "subscribers": n,
        "messages": messages,
        "deliveries": delivered,
        "lagged": lagged,
        "seconds": secs,
        "deliveries_per_second": delivered as f64 / secs,
    }))
}

async fn run(o: Options) -> anyhow::Result<Value> {
    if !o.cra.exists() {
        bail!("{} does not exist (build cra-cli first)", o.cra.display());
    }
    if !o.atlas.join("atlas.json").exists() {
        bail!("{} is not an atlas directory", o.atlas.display());
    }
    std::fs::create_dir_all(&o.work)?;
    let executor = executor_stub().await?;
    let mut doc = json!({
        "server": "cra serve (redb, fresh data directory per server), 127.0.0.1",
        "atlas": ATLAS_ID,
        "runs": o.runs,
        "seconds_per_phase": o.seconds,
        "ws_seconds": o.ws_seconds,
        "emit_rate_per_second": EMIT_RATE,
    });
    let wants = |what: &str| o.only.as_deref().is_none_or(|only| only == what);
    if wants("http") {
        doc["http"] = json!(http_bench(&o, &executor).await?);
    }
    if wants("slow") {
        doc["slow_clients"] = slow_bench(&o, &executor).await?;
    }
    if wants("ws") {
        doc["ws"] = json!(ws_bench(&o, &executor).await?);
        let messages = (o.ws_seconds * EMIT_RATE as f64).round() as usize;
        let mut base = Vec::new();
        for &n in &o.subscribers {
            base.push(broadcast_baseline(n, messages).await?);
        }
        doc["ws_baseline_broadcast"] = json!(base);
    }
    Ok(doc)
}

/// The `field` (`VmRSS`, `VmHWM`) of process `pid`, in KiB.
fn memory_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The agent's resolves, `n` back to back, each timed alone: p50, p99 and max in ms.
async fn timed_resolves(c: &LoadClient, n: usize) -> anyhow::Result<Value> {
    let url = format!("{}/v1/resolve", c.base);
    let mut micros = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let body = serde_json::to_vec(&resolve_body(&c.session, 0, i))?;
        let t = Instant::now();
        let (status, bytes) = post_raw(&c.http, &url, body).await?;
        micros.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
        if status != 200 {
            bail!("resolve answered {status}: {}", String::from_utf8_lossy(&bytes));
        }
    }
    micros.sort_unstable();
    Ok(json!({
        "requests": n,
        "p50_ms": percentile(&micros, 0.50) / 1000.0,
        "p99_ms": percentile(&micros, 0.99) / 1000.0,
        "max_ms": percentile(&micros, 1.0) / 1000.0,
    }))
}

/// One slow client: part of a request head, then a byte a second, reconnecting whenever the
/// server closes the connection, until `stop`. Counts its connections in `opened`.
async fn slow_client(addr: String, stop: Arc<AtomicBool>, opened: Arc<AtomicU64>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut tcp) = TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        opened.fetch_add(1, Ordering::Relaxed);
        if tcp.write_all(b"GET /v1/health HTTP/1.1\r\nHost: cra\r\nX-Slow: ").await.is_err() {
            continue;
        }
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if tcp.write_all(b"a").await.is_err() {
                break;
            }
        }
    }
}

/// The slow-client benchmark (module documentation).
async fn slow_bench(o: &Options, executor: &str) -> anyhow::Result<Value> {
    let server = Server::start(o, "slow", executor).await?;
    let pid = server.child.id().context("the server has no pid")?;
    let agent = open_client(&server.base, 0, "slow").await?;
    // Warm the agent's connection and the server's caches before timing.
    timed_resolves(&agent, 20).await?;
    let alone = timed_resolves(&agent, o.slow_requests).await?;
    let rss_before = memory_kib(pid, "VmRSS")?;
    let (stop, opened) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let addr = server.base.trim_start_matches("http://").to_owned();
    let tasks: Vec<_> = (0..o.slow)
        .map(|_| tokio::spawn(slow_client(addr.clone(), stop.clone(), opened.clone())))
        .collect();
    let connected = wait_until("the slow connections", Duration::from_secs(60), || {
        opened.load(Ordering::Relaxed) >= o.slow as u64
    })
    .await;
    if !connected {
        bail!("only {} of {} slow connections opened", opened.load(Ordering::Relaxed), o.slow);
    }
    let rss_held = memory_kib(pid, "VmRSS")?;
    let under = timed_resolves(&agent, o.slow_requests).await?;
    let rss_under = memory_kib(pid, "VmRSS")?;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.abort();
    }
    // Once the server has closed what the slow clients left.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = memory_kib(pid, "VmRSS")?;
    let connections = opened.load(Ordering::Relaxed);
    server.stop().await?;
    Ok(json!({
        "slow_connections": o.slow,
        "slow_connections_opened": connections,
        "alone": alone,
        "under_slow_clients": under,
        "rss_kib": {
            "before": rss_before,
            "held": rss_held,
            "under": rss_under,
            "after": rss_after,
        },
    }))
}

fn main() -> std::process::ExitCode {
    let result = parse_args().and_then(|o| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(run(o))
    });
    match result {
        Ok(doc) => match serde_json::to_string_pretty(&doc) {
            Ok(s) => {
                println!("{s}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("http-load: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("http-load: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn field_finds_strings_and_numbers() {
        let t = r#"{"sequence":42,"timestamp":"2026-01-01T00:00:00.000001Z","x":1}"#;
        assert_eq!(field(t, "sequence"), Some("42"));
        assert_eq!(field(t, "timestamp"), Some("2026-01-01T00:00:00.000001Z"));
        assert_eq!(field(t, "missing"), None);
    }
}

//! Crash and concurrency test against a real server process, on redb and on PostgreSQL.
//!
//! The server is this test binary re-run with `CRA_RT_CRASH_CHILD` set ([`child_server`]): it
//! starts `cra_runtime` on `127.0.0.1:0` over the run's data directory (or PostgreSQL schema) and
//! prints its port. Several agents then work against it concurrently over HTTP: they open and end
//! sessions, resolve, execute allowed actions (through an `http` executor served by this
//! process), deposit Relay packages and assert facts on a few (subject, predicate) pairs that all
//! of them share. After a seeded random number of acknowledged writes the parent kills the server
//! with SIGKILL (whatever is in flight is cut off) and starts it again on the same data.
//!
//! Every answer a client received as a success is written in a ledger. After each restart the
//! previous cycle's entries are checked against the new server, and at the end all of them are:
//! sessions, resolutions (the chain holds the answered resolution exactly), executions (their
//! three events), packages (by id and content hash), facts (by id in the history) and the TRACE
//! events each acknowledged request produced. Every fact history must be contiguous (no overlap,
//! no hole), and every chain in the store is fetched as NDJSON over HTTP and verified by
//! `tools/appendix_b.py` (the spec's algorithm in Python, independent of the Rust code) and by
//! `POST /v1/traces/{id}/verify`. The transparency log must hold exactly one leaf per stored
//! event after every kill, and the last checkpoint published must sign the tree the store holds
//! at its size (`check_log`). A chain may hold more events than its head said while the
//! server was down only where the restart appended what the kill cut off: outcomes of
//! interrupted executions, and the events of Relay writes left in the store's outbox
//! (`recovered_relay_events` in the summary).
//!
//! Knobs (environment): `CRA_CRASH_SEED` repeats a run (the seed is printed), `CRA_CRASH_CYCLES`
//! (default 50) or `CRA_CRASH_SECONDS` (run cycles until that much time has passed: the soak of
//! `cargo xtask soak`), `CRA_CRASH_MAX_ACKS` (most acknowledged writes in a cycle before the
//! kill, default 12). The run ends with one `CRASH-SUMMARY key=value ...` line on stdout.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cra_carp::CarpStore;
use cra_carp::store::SessionRecord;
use cra_runtime::config::RuntimeConfig;
use cra_runtime::{build_runtime, start};
use cra_store::testing::{TestSchema, postgres_url};
use cra_trace::store::ChainStore;
use cra_wire::{Clock, SequentialIds};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use time::OffsetDateTime;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

use crate::support::executor_endpoint;

mod audit;

const CHILD_VAR: &str = "CRA_RT_CRASH_CHILD";
const CYCLE_VAR: &str = "CRA_RT_CRASH_CYCLE";
const PG_URL_VAR: &str = "CRA_RT_CRASH_PG_URL";
const PG_SCHEMA_VAR: &str = "CRA_RT_CRASH_PG_SCHEMA";
const EXECUTOR_VAR: &str = "CRA_RT_CRASH_EXECUTOR";
const SEED_VAR: &str = "CRA_CRASH_SEED";
const CYCLES_VAR: &str = "CRA_CRASH_CYCLES";
const SECONDS_VAR: &str = "CRA_CRASH_SECONDS";
const MAX_ACKS_VAR: &str = "CRA_CRASH_MAX_ACKS";
const PORT_LINE: &str = "CRA-CRASH-PORT ";

/// Agents working concurrently.
const AGENTS: usize = 6;
/// A new project (fresh shared fact pairs and audit chain) every this many cycles.
const CYCLES_PER_PROJECT: u64 = 20;
/// The shared (subject, predicate) pairs of every project.
const SUBJECTS: [&str; 2] = ["svc-api", "svc-db"];
const PREDICATES: [&str; 2] = ["owner", "state"];
const ADMIN_KEY: &str = "crash-admin-key-0000000000";

fn agent_id(i: usize) -> String {
    format!("crash-agent-{i}")
}

fn agent_key(i: usize) -> String {
    format!("crash-agent-key-{i}-000000000")
}

fn keys_toml() -> String {
    let mut s = format!(
        "[[keys]]\ntoken = \"{ADMIN_KEY}\"\nactor_id = \"crash-admin\"\nactor_type = \"human\"\nroles = [\"admin\"]\n"
    );
    for i in 0..AGENTS {
        s.push_str(&format!(
            "\n[[keys]]\ntoken = \"{}\"\nactor_id = \"{}\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n",
            agent_key(i),
            agent_id(i)
        ));
    }
    s
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// The server's clock in cycle `cycle`: one hour later per cycle, so resolutions and rate-limit
/// windows of earlier cycles have expired; within a cycle it ticks one microsecond per reading,
/// so every recorded instant is distinct and follows the order of the readings.
#[derive(Debug)]
struct TickingClock {
    base: OffsetDateTime,
    ticks: AtomicI64,
}

impl Clock for TickingClock {
    fn now(&self) -> OffsetDateTime {
        self.base + time::Duration::microseconds(self.ticks.fetch_add(1, Ordering::SeqCst))
    }
}

fn cycle_start(cycle: u64) -> OffsetDateTime {
    let t0 = cra_wire::clock::parse_rfc3339(crate::support::T0).unwrap();
    t0 + time::Duration::hours(i64::try_from(cycle).unwrap())
}

/// A CARP timestamp in cycle `cycle` (the server accepts five minutes of skew).
fn request_time(cycle: u64) -> String {
    cra_wire::clock::format_timestamp(cycle_start(cycle))
}

/// The server process: does nothing unless started by the crash test.
#[test]
fn child_server() {
    let Some(run) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let run = PathBuf::from(run);
    let cycle = env_u64(CYCLE_VAR).unwrap();
    let mut config = RuntimeConfig {
        // One replica restarted: its restart closes the executions its crash cut off.
        replica_id: Some("crash-replica".into()),
        addr: "127.0.0.1:0".into(),
        data: run.join("data"),
        api_keys: Some(run.join("keys.toml")),
        ..RuntimeConfig::default()
    };
    config.limits.requests_per_second = 0;
    config.atlases = vec![PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../atlases/dev.cra.github-ops"
    ))];
    if let Ok(url) = std::env::var(PG_URL_VAR) {
        config.postgres = Some(url);
        config.postgres_schema = std::env::var(PG_SCHEMA_VAR).unwrap();
        config.postgres_pool = 8;
        // Each cycle's own clock, not the database's.
        config.clock = cra_runtime::ClockSource::Local;
    }
    config.executors.insert(
        "github".into(),
        cra_runtime::config::ExecutorConfig::http(std::env::var(EXECUTOR_VAR).unwrap(), 30_000),
    );
    let base = cycle_start(cycle);
    let clock = Arc::new(TickingClock {
        base,
        ticks: AtomicI64::new(0),
    });
    let ms = u64::try_from(base.unix_timestamp_nanos() / 1_000_000).unwrap();
    let ids = Arc::new(SequentialIds::new(ms, cycle));
    // Built before the async runtime starts: the PostgreSQL client connects synchronously.
    let (state, _) = build_runtime(config, clock, ids).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let server = start(state, std::future::pending()).await.unwrap();
        let mut out = std::io::stdout();
        writeln!(out, "{PORT_LINE}{}", server.addr.port()).unwrap();
        out.flush().unwrap();
        let _ = server.wait().await;
    });
}

/// A write the server acknowledged, with what it answered.
#[derive(Debug, Clone)]
enum Ack {
    Project {
        project_id: String,
        audit: String,
    },
    Session {
        session_id: String,
        agent: String,
    },
    Resolve {
        session_id: String,
        request_id: String,
        resolution: Value,
    },
    Execute {
        session_id: String,
        execution_id: String,
    },
    Deposit {
        package_id: String,
        content_hash: String,
        chain: String,
    },
    Fact {
        project_id: String,
        fact: Value,
        chain: String,
    },
    End {
        session_id: String,
    },
}

/// Where the server keeps its data.
enum Store {
    Redb,
    Pg { url: String, schema: String },
}

/// Figures of one run.
#[derive(Debug, Default)]
struct Figures {
    cycles: u64,
    requests: u64,
    acked: u64,
    lost: Vec<String>,
    chains: u64,
    events: u64,
    fact_pairs: u64,
    /// Events of Relay writes the kills cut off, appended by the next start.
    recovered: u64,
    /// Fault points the server aborted at ([`Plan::EveryPoint`]).
    points: u64,
    /// Projects whose interrupted creation left them neither usable nor creatable again.
    stuck: Vec<String>,
    /// What the store holds without the events that tell of it.
    unaudited: Vec<String>,
}

struct Run {
    backend: &'static str,
    store: Store,
    dir: tempfile::TempDir,
    exe: PathBuf,
    executor: String,
    seed: u64,
    child: Option<tokio::process::Child>,
    base: String,
    http: reqwest::Client,
    figures: Figures,
}

/// What one agent knows between requests.
struct Agent {
    index: usize,
    id: String,
    key: String,
    rng: StdRng,
    sessions: Vec<(String, u32)>,
    resolutions: Vec<(String, String)>,
    n: u64,
}

/// What the agents of one cycle share.
struct Cycle {
    cycle: u64,
    base: String,
    http: reqwest::Client,
    project: String,
    audit: String,
    ledger: Mutex<Vec<Ack>>,
    acked: AtomicUsize,
    requests: AtomicU64,
    running: AtomicUsize,
    stop: AtomicBool,
    wake: Notify,
    unexpected: Mutex<Vec<String>>,
    /// Projects whose creation got no answer (the server died): each must afterwards exist
    /// whole, or be creatable again (never stuck between the two).
    unanswered_projects: Mutex<Vec<String>>,
}

enum Outcome {
    Acked(Ack),
    /// No answer (the server is gone): the write may or may not have happened.
    Unknown,
    /// An answer that is not a success: the workload only sends valid requests.
    Refused(String),
}

impl Run {
    fn new(backend: &'static str, store: Store, executor: String, seed: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keys.toml"), keys_toml()).unwrap();
        Self {
            backend,
            store,
            dir,
            exe: std::env::current_exe().unwrap(),
            executor,
            seed,
            child: None,
            base: String::new(),
            http: cra_runtime::tls::http_client().build().unwrap(),
            figures: Figures::default(),
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the server for `cycle`, armed to abort at fault point `armed` if given, and waits
    /// for its port. `false`: the server died at the armed point before it served.
    async fn start_server(&mut self, cycle: u64, armed: Option<&str>) -> bool {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut command = tokio::process::Command::new(&self.exe);
        command
            .args([
                "--exact",
                "crash::child_server",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_VAR, self.dir.path())
            .env(CYCLE_VAR, cycle.to_string())
            .env(EXECUTOR_VAR, &self.executor)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        match armed {
            Some(point) => command.env(cra_store::fault::ARM_VAR, point),
            None => command.env_remove(cra_store::fault::ARM_VAR),
        };
        match &self.store {
            Store::Redb => command.env_remove(PG_URL_VAR).env_remove(PG_SCHEMA_VAR),
            Store::Pg { url, schema } => command
                .env(PG_URL_VAR, child_url(url, schema))
                .env(PG_SCHEMA_VAR, schema),
        };
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The harness may print `test crash::child_server ... ` on the same line first.
        let port = loop {
            let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await;
            match line {
                Ok(Ok(Some(line))) => {
                    if let Some(at) = line.find(PORT_LINE) {
                        break line[at + PORT_LINE.len()..].trim().parse::<u16>().unwrap();
                    }
                }
                Ok(Ok(None)) if armed.is_some() => {
                    self.child = Some(child);
                    self.reap_fault(cycle, armed.unwrap_or_default()).await;
                    return false;
                }
                _ => panic!(
                    "{}: the server of cycle {cycle} (seed {}) did not print its port within 120 s; its log:\n{}",
                    self.backend,
                    self.seed,
                    std::fs::read_to_string(self.log_path()).unwrap_or_default()
                ),
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        self.child = Some(child);
        self.base = format!("http://127.0.0.1:{port}");
        self.http = cra_runtime::tls::http_client()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        true
    }

    /// Waits for the server armed with fault point `point` to die, and checks that it aborted
    /// there (its log names the point once: each point is armed once a run).
    async fn reap_fault(&mut self, cycle: u64, point: &str) {
        use std::os::unix::process::ExitStatusExt;
        let mut child = self.child.take().unwrap();
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait()).await;
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let mark = format!("{}{point}", cra_store::fault::HIT_MARK);
        let hits = log
            .lines()
            .filter(|l| l.trim_end().ends_with(&mark))
            .count();
        match status {
            Ok(Ok(st)) if st.signal() == Some(6) && hits == 1 => {}
            other => panic!(
                "{}: cycle {cycle} (seed {}): the server armed at `{point}` did not abort there \
                 once ({other:?}, {hits} hit lines); its log:\n{log}",
                self.backend, self.seed
            ),
        }
    }

    /// SIGKILL, then reap. Panics if the server had already died by itself.
    async fn kill_server(&mut self, cycle: u64) {
        let mut child = self.child.take().unwrap();
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{}: the server of cycle {cycle} (seed {}) exited by itself ({status}); its log:\n{}",
                self.backend,
                self.seed,
                std::fs::read_to_string(self.log_path()).unwrap_or_default()
            );
        }
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }

    async fn request(
        &self,
        method: reqwest::Method,
        key: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Option<(u16, Value)> {
        request(&self.http, &self.base, method, key, path, body).await
    }

    /// `GET /v1/traces/{sid}` as JSON Lines, as an admin: the status and the body.
    async fn chain_ndjson(&self, sid: &str) -> Result<(u16, Vec<u8>), String> {
        let resp = self
            .http
            .get(format!("{}/v1/traces/{sid}", self.base))
            .bearer_auth(ADMIN_KEY)
            .header("accept", "application/x-ndjson")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        Ok((status, bytes.to_vec()))
    }

    /// The §7 facts of `project`'s (subject, predicate) history, as the server lists them.
    async fn fact_history(
        &self,
        project: &str,
        subject: &str,
        predicate: &str,
    ) -> Result<Vec<Value>, String> {
        let rows = self
            .get(&format!(
                "/v1/projects/{project}/facts?subject={subject}&predicate={predicate}&history=true"
            ))
            .await?;
        let rows = rows.as_array().map(Vec::as_slice).unwrap_or_default();
        Ok(rows.iter().map(|r| wire_fact(r).clone()).collect())
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        match self
            .request(reqwest::Method::GET, ADMIN_KEY, path, None)
            .await
        {
            Some((200, v)) => Ok(v),
            Some((st, v)) => Err(format!("GET {path}: {st} {v}")),
            None => Err(format!("GET {path}: no answer")),
        }
    }

    /// Creates `project_id` with every agent as a member (before the cycle's agents start, so
    /// no kill falls inside it). Returns the audit chain's session id.
    async fn create_project(&mut self, project_id: &str) -> String {
        let members: Vec<String> = (0..AGENTS).map(agent_id).collect();
        let (st, body) = self
            .request(
                reqwest::Method::POST,
                ADMIN_KEY,
                "/v1/projects",
                Some(&json!({"project_id": project_id, "name": project_id, "members": members})),
            )
            .await
            .expect("the server answers the project creation");
        assert_eq!(st, 201, "{}: create {project_id}: {body}", self.backend);
        body["audit_session_id"].as_str().unwrap().to_owned()
    }
}

async fn request(
    http: &reqwest::Client,
    base: &str,
    method: reqwest::Method,
    key: &str,
    path: &str,
    body: Option<&Value>,
) -> Option<(u16, Value)> {
    let mut rb = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(key);
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = rb.send().await.ok()?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.ok()?;
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Some((status, v))
}

impl Cycle {
    async fn call(
        &self,
        agent: &Agent,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Value, Outcome> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match request(
            &self.http,
            &self.base,
            method.clone(),
            &agent.key,
            path,
            body,
        )
        .await
        {
            None => Err(Outcome::Unknown),
            Some((st, v)) if st == want => Ok(v),
            Some((st, v)) => Err(Outcome::Refused(format!(
                "{} {method} {path}: {st} {v}",
                agent.id
            ))),
        }
    }
}

/// One request of `agent`, chosen at random.
async fn step(c: &Cycle, a: &mut Agent) -> Outcome {
    use reqwest::Method;
    a.n += 1;
    let n = a.n;
    let roll = a.rng.random_range(0..100u32);
    let has_sessions = !a.sessions.is_empty();
    // Sessions age: one that has served many requests is ended, so chains stay short.
    if has_sessions && (roll >= 96 || a.sessions[0].1 > 40) {
        let (sid, _) = a.sessions.remove(0);
        a.resolutions.retain(|(s, _)| *s != sid);
        return match c
            .call(a, Method::DELETE, &format!("/v1/sessions/{sid}"), None, 204)
            .await
        {
            Ok(_) => Outcome::Acked(Ack::End { session_id: sid }),
            Err(o) => o,
        };
    }
    if !has_sessions || (roll < 8 && a.sessions.len() < 3) {
        let body = json!({"agent_id": a.id, "goal": format!("crash cycle {}", c.cycle)});
        return match c
            .call(a, Method::POST, "/v1/sessions", Some(&body), 201)
            .await
        {
            Ok(v) => {
                let sid = v["session_id"].as_str().unwrap_or_default().to_owned();
                a.sessions.push((sid.clone(), 0));
                Outcome::Acked(Ack::Session {
                    session_id: sid,
                    agent: a.id.clone(),
                })
            }
            Err(o) => o,
        };
    }
    let si = a.rng.random_range(0..a.sessions.len());
    a.sessions[si].1 += 1;
    let sid = a.sessions[si].0.clone();
    let time = request_time(c.cycle);
    if roll < 55 && (roll < 35 || a.resolutions.is_empty()) {
        let request_id = uuid::Uuid::now_v7().hyphenated().to_string();
        let mut body = crate::support::resolve_request(&a.id, &sid, &request_id, &["repo-read"]);
        body["timestamp"] = json!(time);
        return match c
            .call(a, Method::POST, "/v1/resolve", Some(&body), 200)
            .await
        {
            Ok(v) => {
                let rid = v["resolution_id"].as_str().unwrap_or_default().to_owned();
                a.resolutions.push((sid.clone(), rid));
                Outcome::Acked(Ack::Resolve {
                    session_id: sid,
                    request_id,
                    resolution: v,
                })
            }
            Err(o) => o,
        };
    }
    if roll < 55 {
        let (rsid, rid) = a.resolutions[a.rng.random_range(0..a.resolutions.len())].clone();
        let mut body = crate::support::execute_request(
            &a.id,
            &rsid,
            &uuid::Uuid::now_v7().hyphenated().to_string(),
            &rid,
            "repo.get",
            json!({"owner": "octo", "repo": format!("r{n}")}),
        );
        body["timestamp"] = json!(time);
        return match c
            .call(a, Method::POST, "/v1/execute", Some(&body), 200)
            .await
        {
            Ok(v) if v["status"] == "success" => Outcome::Acked(Ack::Execute {
                session_id: rsid,
                execution_id: v["execution_id"].as_str().unwrap_or_default().to_owned(),
            }),
            Ok(v) => Outcome::Refused(format!("{} execute: not a success: {v}", a.id)),
            Err(o) => o,
        };
    }
    if (75..78).contains(&roll) {
        return create_project(c, a, n).await;
    }
    // Relay writes go to the agent's session chain, or (one in five) to the project's.
    let in_session = a.rng.random_range(0..5u32) > 0;
    let chain = if in_session {
        sid.clone()
    } else {
        c.audit.clone()
    };
    if roll < 75 {
        let package_id = format!("pkg_c{}_a{}_{n}", c.cycle, a.index);
        let body = json!({
            "package_id": package_id,
            "project_id": c.project,
            "relay_version": "0.1",
            "title": format!("Handoff {n} of {}", a.id),
            "status": "complete",
            "package_type": "standard",
            "review_type": "none",
            "created_at": time,
            "created_by": {"id": a.id, "type": "agent", "session_id": if in_session { Some(&sid) } else { None }},
            "decisions_made": [format!("decision {n}")],
            "handoff_note": format!("cycle {} request {n}", c.cycle)
        });
        return match c
            .call(
                a,
                Method::POST,
                &format!("/v1/projects/{}/packages", c.project),
                Some(&body),
                201,
            )
            .await
        {
            Ok(v) => Outcome::Acked(Ack::Deposit {
                package_id,
                content_hash: v["content_hash"].as_str().unwrap_or_default().to_owned(),
                chain,
            }),
            Err(o) => o,
        };
    }
    let subject = SUBJECTS[a.rng.random_range(0..SUBJECTS.len())];
    let predicate = PREDICATES[a.rng.random_range(0..PREDICATES.len())];
    let mut body = json!({
        "subject": subject,
        "predicate": predicate,
        "value": format!("{}-c{}-{n}", a.id, c.cycle),
    });
    if in_session {
        body["session_id"] = json!(sid);
    }
    match c
        .call(
            a,
            Method::POST,
            &format!("/v1/projects/{}/facts", c.project),
            Some(&body),
            201,
        )
        .await
    {
        Ok(v) => Outcome::Acked(Ack::Fact {
            project_id: c.project.clone(),
            fact: wire_fact(&v).clone(),
            chain,
        }),
        Err(o) => o,
    }
}

/// A project of the agent's own (a Relay write that opens an audit chain: its creation is cut
/// off by kills too).
async fn create_project(c: &Cycle, a: &Agent, n: u64) -> Outcome {
    let project_id = format!("crash-c{}-a{}-{n}", c.cycle, a.index);
    let body = json!({"project_id": project_id, "name": project_id, "members": [a.id]});
    match c
        .call(a, reqwest::Method::POST, "/v1/projects", Some(&body), 201)
        .await
    {
        Ok(v) => Outcome::Acked(Ack::Project {
            project_id,
            audit: v["audit_session_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        }),
        Err(Outcome::Unknown) => {
            c.unanswered_projects.lock().unwrap().push(project_id);
            Outcome::Unknown
        }
        Err(o) => o,
    }
}

/// A project whose creation got no answer must now exist whole (readable, its audit chain
/// opened by `session.started` and `relay.project.created`) or not at all, in which case
/// creating it again succeeds. Returns it as acknowledged, to be checked with the rest.
async fn check_not_stuck(run: &Run, project_id: &str) -> Result<Ack, String> {
    let ack = |v: &Value| Ack::Project {
        project_id: project_id.to_owned(),
        audit: v["audit_session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    let path = format!("/v1/projects/{project_id}");
    match run
        .request(reqwest::Method::GET, ADMIN_KEY, &path, None)
        .await
    {
        Some((200, _)) => Ok(Ack::Project {
            project_id: project_id.to_owned(),
            audit: cra_runtime::service::relay::project_audit_session(project_id),
        }),
        Some((404, _)) => {
            let body = json!({"project_id": project_id, "name": project_id, "members": []});
            match run
                .request(
                    reqwest::Method::POST,
                    ADMIN_KEY,
                    "/v1/projects",
                    Some(&body),
                )
                .await
            {
                Some((201, v)) => Ok(ack(&v)),
                other => Err(format!(
                    "project {project_id}: 404 after an interrupted creation, and creating it again answers {other:?}"
                )),
            }
        }
        other => Err(format!(
            "project {project_id} after an interrupted creation: GET answers {other:?}"
        )),
    }
}

/// An agent's loop for one cycle: requests until told to stop or the server stops answering.
async fn agent_loop(c: Arc<Cycle>, mut a: Agent) -> Agent {
    while !c.stop.load(Ordering::SeqCst) {
        match step(&c, &mut a).await {
            Outcome::Acked(ack) => {
                c.ledger.lock().unwrap().push(ack);
                c.acked.fetch_add(1, Ordering::SeqCst);
                c.wake.notify_one();
            }
            Outcome::Unknown => break,
            Outcome::Refused(why) => {
                c.unexpected.lock().unwrap().push(why);
                break;
            }
        }
    }
    c.running.fetch_sub(1, Ordering::SeqCst);
    c.wake.notify_one();
    a
}

/// Checks acknowledged writes against a running server; fetches each chain once.
struct Checker<'a> {
    run: &'a Run,
    chains: HashMap<String, Vec<Value>>,
}

impl Checker<'_> {
    async fn chain(&mut self, sid: &str) -> Result<&Vec<Value>, String> {
        if !self.chains.contains_key(sid) {
            let v = self.run.get(&format!("/v1/traces/{sid}")).await?;
            let events = v.as_array().cloned().ok_or("the trace is not an array")?;
            self.chains.insert(sid.to_owned(), events);
        }
        Ok(&self.chains[sid])
    }

    async fn check(&mut self, ack: &Ack) -> Result<(), String> {
        match ack {
            Ack::Project { project_id, audit } => {
                self.run.get(&format!("/v1/projects/{project_id}")).await?;
                let types: Vec<&str> = self
                    .chain(audit)
                    .await?
                    .iter()
                    .take(2)
                    .map(|e| e["event_type"].as_str().unwrap_or_default())
                    .collect();
                if types != ["session.started", "relay.project.created"] {
                    return Err(format!(
                        "project {project_id}: audit chain starts {types:?}"
                    ));
                }
            }
            Ack::Session { session_id, agent } => {
                let s = self.run.get(&format!("/v1/sessions/{session_id}")).await?;
                if s["agent_id"] != agent.as_str() {
                    return Err(format!("session {session_id}: {s}"));
                }
                let first = self.chain(session_id).await?.first().cloned();
                if first.as_ref().map(|e| &e["event_type"]) != Some(&json!("session.started"))
                    || first.as_ref().map(|e| &e["payload"]["agent_id"]) != Some(&json!(agent))
                {
                    return Err(format!("session {session_id}: first event {first:?}"));
                }
            }
            Ack::Resolve {
                session_id,
                request_id,
                resolution,
            } => {
                let rid = resolution["resolution_id"].clone();
                let events = self.chain(session_id).await?;
                // The request is recorded in the span that made the resolution, or, answered
                // by an earlier one, in a span of its own that names it (`carp.resolution.cached`).
                let received = events
                    .iter()
                    .find(|e| {
                        e["event_type"] == "carp.request.received"
                            && e["payload"]["request_id"] == request_id.as_str()
                    })
                    .is_some_and(|r| {
                        r["span_id"] == rid
                            || events.iter().any(|e| {
                                e["event_type"] == "carp.resolution.cached"
                                    && e["span_id"] == r["span_id"]
                                    && e["payload"]["resolution_id"] == rid
                            })
                    });
                let completed = events.iter().any(|e| {
                    e["event_type"] == "carp.resolution.completed"
                        && e["payload"]["resolution"] == *resolution
                });
                if !(received && completed) {
                    return Err(format!(
                        "resolution {rid} in {session_id}: received {received}, completed (as answered) {completed}"
                    ));
                }
            }
            Ack::Execute {
                session_id,
                execution_id,
            } => {
                let types: Vec<&str> = self
                    .chain(session_id)
                    .await?
                    .iter()
                    .filter(|e| e["payload"]["execution_id"] == execution_id.as_str())
                    .map(|e| e["event_type"].as_str().unwrap_or_default())
                    .collect();
                if types != ["action.requested", "action.approved", "action.executed"] {
                    return Err(format!(
                        "execution {execution_id} in {session_id}: events {types:?}"
                    ));
                }
            }
            Ack::Deposit {
                package_id,
                content_hash,
                chain,
            } => {
                let p = self.run.get(&format!("/v1/packages/{package_id}")).await?;
                if p["content_hash"] != content_hash.as_str() {
                    return Err(format!(
                        "package {package_id}: stored hash {} != acknowledged {content_hash}",
                        p["content_hash"]
                    ));
                }
                let found = self.chain(chain).await?.iter().any(|e| {
                    e["event_type"] == "relay.package.deposited"
                        && e["payload"]["package_id"] == package_id.as_str()
                        && e["payload"]["content_hash"] == content_hash.as_str()
                });
                if !found {
                    return Err(format!("package {package_id}: no deposit event in {chain}"));
                }
            }
            Ack::Fact {
                project_id,
                fact,
                chain,
            } => {
                let rows = self
                    .run
                    .fact_history(
                        project_id,
                        fact["subject"].as_str().unwrap_or_default(),
                        fact["predicate"].as_str().unwrap_or_default(),
                    )
                    .await?;
                let row = rows.iter().find(|r| r["fact_id"] == fact["fact_id"]);
                let same = row.is_some_and(|r| {
                    ["value", "valid_from", "created_at", "subject", "predicate"]
                        .iter()
                        .all(|k| r[k] == fact[k])
                });
                if !same {
                    return Err(format!("fact {}: history row {row:?}", fact["fact_id"]));
                }
                let found = self.chain(chain).await?.iter().any(|e| {
                    e["event_type"] == "relay.fact.asserted"
                        && *wire_fact(&e["payload"]["fact"]) == *fact
                });
                if !found {
                    return Err(format!(
                        "fact {}: no assertion event in {chain}",
                        fact["fact_id"]
                    ));
                }
            }
            Ack::End { session_id } => {
                let s = self.run.get(&format!("/v1/sessions/{session_id}")).await?;
                let last = self.chain(session_id).await?.last().cloned();
                if s["status"] != "ended"
                    || last.map(|e| e["event_type"].clone()) != Some(json!("session.ended"))
                {
                    return Err(format!("ended session {session_id}: {s}"));
                }
            }
        }
        Ok(())
    }

    /// Checks every entry, one chain at a time (so a long soak never holds every chain in
    /// memory); returns the failures.
    async fn check_all(&mut self, acks: &[Ack]) -> Vec<String> {
        let mut by_chain: BTreeMap<&str, Vec<&Ack>> = BTreeMap::new();
        for ack in acks {
            by_chain.entry(ack.chain()).or_default().push(ack);
        }
        let mut lost = Vec::new();
        for group in by_chain.values() {
            for ack in group {
                if let Err(e) = self.check(ack).await {
                    lost.push(e);
                }
            }
            self.chains.clear();
        }
        lost
    }
}

impl Ack {
    /// The chain the entry's events are in.
    fn chain(&self) -> &str {
        match self {
            Ack::Project { audit, .. } => audit,
            Ack::Session { session_id, .. }
            | Ack::Resolve { session_id, .. }
            | Ack::Execute { session_id, .. }
            | Ack::End { session_id } => session_id,
            Ack::Deposit { chain, .. } | Ack::Fact { chain, .. } => chain,
        }
    }
}

/// The §7 fact of an answer or history row (a bare fact, or one wrapped with recorded time).
fn wire_fact(v: &Value) -> &Value {
    match v.get("fact") {
        Some(f) if f.is_object() => f,
        _ => v,
    }
}

/// Every (subject, predicate) history of `project_id` must be one contiguous succession in
/// recorded order: each row's `valid_to` is the next row's `valid_from` (no overlap, no hole),
/// intervals never run backwards, and only the last row is current. Returns the pairs checked.
async fn check_fact_histories(run: &Run, project_id: &str) -> Result<u64, String> {
    let mut pairs = 0;
    for s in SUBJECTS {
        for p in PREDICATES {
            let mut rows = run.fact_history(project_id, s, p).await?;
            let key = |r: &Value| {
                (
                    r["created_at"].as_str().unwrap_or_default().to_owned(),
                    r["fact_id"].as_str().unwrap_or_default().to_owned(),
                )
            };
            rows.sort_by_key(key);
            for (i, f) in rows.iter().enumerate() {
                if let Some(end) = f["valid_to"].as_str()
                    && f["valid_from"].as_str().is_none_or(|start| start > end)
                {
                    return Err(format!(
                        "{project_id} {s}/{p}: interval runs backwards: {f}"
                    ));
                }
                match rows.get(i + 1) {
                    Some(next) if f["valid_to"] != next["valid_from"] => {
                        return Err(format!(
                            "{project_id} {s}/{p}: rows {i} and {} overlap or leave a hole: {f} then {next}",
                            i + 1
                        ));
                    }
                    Some(_) => {}
                    None if !f["valid_to"].is_null() => {
                        return Err(format!("{project_id} {s}/{p}: the last row is closed: {f}"));
                    }
                    None => {}
                }
            }
            pairs += 1;
        }
    }
    Ok(pairs)
}

const PY_DRIVER: &str = r#"
import os, sys
sys.path.insert(0, sys.argv[1])
import appendix_b
d = sys.argv[2]
chains = events = bad = 0
for name in sorted(os.listdir(d)):
    with open(os.path.join(d, name), "rb") as f:
        n, findings = appendix_b.verify(f)
    chains += 1
    events += n
    if findings:
        bad += 1
        print("INVALID %s %r" % (name, findings[0]))
    else:
        print("VALID %s %d" % (name, n))
print("CHAINS %d %d %d" % (chains, events, bad))
sys.exit(2 if bad else 0)
"#;

/// Whether the events `from..to` of the NDJSON chain at `path` are all what the restarted
/// server appended before it served (and there is at least one): outcomes of executions cut
/// off by the kill, and events of Relay writes whose append the kill cut off, each taken from
/// `owed` (the event types the store's outbox held, over every chain: events owed to a session
/// that has ended go to the project's audit chain).
fn only_recovered_after(
    path: &std::path::Path,
    from: u64,
    to: u64,
    owed: &mut Vec<String>,
) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let (Ok(from), Ok(to)) = (usize::try_from(from), usize::try_from(to)) else {
        return false;
    };
    let extra: Vec<Value> = text
        .lines()
        .skip(from)
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    to > from
        && extra.len() == to - from
        && extra.iter().all(|e| {
            let interrupted = e["event_type"] == "action.failed"
                && e["payload"]["error"]["code"] == "executor_interrupted";
            interrupted || take_owed(owed, e["event_type"].as_str().unwrap_or_default())
        })
}

fn take_owed(owed: &mut Vec<String>, event_type: &str) -> bool {
    match owed.iter().position(|t| t == event_type) {
        Some(i) => {
            owed.swap_remove(i);
            true
        }
        None => false,
    }
}

/// The event types the Relay outbox holds, every entry's drafts (read with the server down).
fn owed_event_types(relay: &dyn cra_relay::RelayStore) -> Vec<String> {
    let mut owed = Vec::new();
    for entry in relay.outbox().unwrap() {
        let body: Value = serde_json::from_str(&entry.body).unwrap();
        for d in body["drafts"].as_array().unwrap() {
            owed.push(d["event_type"].as_str().unwrap().to_owned());
        }
    }
    owed
}

/// The PostgreSQL URL the server of schema `schema` connects with: its connections carry the
/// application name [`child_application`], so the checks can wait for the last of them to end.
fn child_url(url: &str, schema: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}application_name={}", child_application(schema))
}

fn child_application(schema: &str) -> String {
    format!("cra-crash-{schema}")
}

/// Every chain in the store (listed by opening the store while the server is down), fetched as
/// NDJSON, verified by the Python Appendix B code and by the server's verify route; each must
/// hold as many events as its stored head says.
/// Also returns the session records of the agents and of the audit chains of `projects`, read
/// from the store while the server was down.
async fn verify_every_chain(
    run: &mut Run,
    next_cycle: u64,
    projects: Vec<String>,
) -> Result<Vec<SessionRecord>, String> {
    let (data, pg) = match &run.store {
        Store::Redb => (run.dir.path().join("data"), None),
        Store::Pg { url, schema } => (PathBuf::new(), Some((url.clone(), schema.clone()))),
    };
    // The synchronous stores are opened and closed on a blocking thread.
    type Stores = (
        Box<dyn ChainStore>,
        Box<dyn cra_relay::RelayStore>,
        Box<dyn cra_store::tlog::LogStore>,
        Box<dyn CarpStore>,
    );
    type Read = (
        BTreeMap<String, u64>,
        Vec<String>,
        Result<(), String>,
        Vec<SessionRecord>,
    );
    let (heads, mut owed, log_check, records): Read = tokio::task::spawn_blocking(move || {
        let (store, relay, log, carp): Stores = match pg {
            None => {
                let redb = cra_store::RedbStore::open(data).unwrap();
                let relay = cra_store::relay::RedbRelay::open(&redb).unwrap();
                (
                    Box::new(redb.clone()),
                    Box::new(relay),
                    Box::new(redb.clone()),
                    Box::new(redb),
                )
            }
            Some((url, schema)) => {
                let pg = cra_store::PgStore::connect_with(
                    &url,
                    &schema,
                    cra_store::StoreConfig::default(),
                    2,
                )
                .unwrap();
                // A commit the killed server sent just before SIGKILL may still be landing:
                // end its connections and wait (inside PostgreSQL) until they are gone, so
                // what is read here is final.
                pg.client()
                    .unwrap()
                    .query(
                        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity
                              WHERE application_name = $1",
                        &[&child_application(&schema)],
                    )
                    .unwrap();
                let relay = cra_store::relay::PgRelay::new(pg.clone());
                (
                    Box::new(pg.clone()),
                    Box::new(relay),
                    Box::new(pg.clone()),
                    Box::new(pg),
                )
            }
        };
        let heads: BTreeMap<String, u64> = store
            .sessions()
            .unwrap()
            .into_iter()
            .map(|s| (s.session_id, s.head.next_sequence))
            .collect();
        let log_check = check_log(log.as_ref(), heads.values().sum());
        let records = audit::session_records(carp.as_ref(), AGENTS, &projects);
        (heads, owed_event_types(relay.as_ref()), log_check, records)
    })
    .await
    .unwrap();
    log_check?;
    assert!(run.start_server(next_cycle, None).await);
    let out = run.dir.path().join("chains");
    std::fs::create_dir_all(&out).unwrap();
    for sid in heads.keys() {
        let (status, bytes) = run.chain_ndjson(sid).await?;
        if status != 200 {
            return Err(format!("GET trace {sid}: {status}"));
        }
        std::fs::write(out.join(format!("{sid}.jsonl")), &bytes).unwrap();
        let (st, v) = run
            .request(
                reqwest::Method::POST,
                ADMIN_KEY,
                &format!("/v1/traces/{sid}/verify"),
                Some(&json!({})),
            )
            .await
            .ok_or("verify: no answer")?;
        if st != 200 || v["valid"] != true {
            return Err(format!("POST /v1/traces/{sid}/verify: {st} {v}"));
        }
    }
    let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools");
    let py = std::process::Command::new("python3")
        .args(["-c", PY_DRIVER, tools])
        .arg(&out)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&py.stdout).into_owned();
    if !py.status.success() {
        return Err(format!(
            "appendix_b.py: {}\n{text}{}",
            py.status,
            String::from_utf8_lossy(&py.stderr)
        ));
    }
    let owed_total = owed.len();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["VALID", name, n] => {
                let sid = name.trim_end_matches(".jsonl");
                let want = heads.get(sid).copied().unwrap_or(u64::MAX);
                let got = n.parse::<u64>().unwrap_or(u64::MAX);
                // The restarted server closes the executions its kill cut off before it serves
                // (`action.failed`, `executor_interrupted`) and appends the events of Relay
                // writes whose append it cut off: those may follow the stored head.
                if got != want && !only_recovered_after(&out.join(name), want, got, &mut owed) {
                    let text = std::fs::read_to_string(out.join(name)).unwrap_or_default();
                    let extra: Vec<String> = text
                        .lines()
                        .skip(usize::try_from(want).unwrap_or(usize::MAX))
                        .map(|l| l.chars().take(400).collect())
                        .collect();
                    return Err(format!(
                        "chain {sid}: {n} events verified, its head says {want}; after it: {extra:#?}; the outbox owed {owed:?}"
                    ));
                }
            }
            ["CHAINS", chains, events, _] => {
                run.figures.chains = chains.parse().unwrap_or(0);
                run.figures.events = events.parse().unwrap_or(0);
            }
            _ => {}
        }
    }
    // What is left was owed to chains the kill cut off before their first event (a project's
    // audit chain), which the stored heads do not list.
    run.figures.recovered += (owed_total - owed.len()) as u64;
    if run.figures.chains != heads.len() as u64 {
        return Err(format!(
            "python verified {} chains of {}",
            run.figures.chains,
            heads.len()
        ));
    }
    Ok(records)
}

/// The transparency log after a kill: exactly one leaf per stored event (the leaves were
/// committed with their events or not at all), and the last published checkpoint signs the
/// tree the store now holds at its size.
fn check_log(log: &dyn cra_store::tlog::LogStore, events: u64) -> Result<(), String> {
    let size = log.log_size().map_err(|e| e.to_string())?;
    if size != events {
        return Err(format!(
            "the log holds {size} leaves for {events} stored events"
        ));
    }
    let Some(note) = log.checkpoints(1).map_err(|e| e.to_string())?.pop() else {
        return Ok(());
    };
    let note = cra_tlog::Note::parse(note.as_bytes()).map_err(|e| e.to_string())?;
    let cp = cra_tlog::Checkpoint::parse(note.text()).map_err(|e| e.to_string())?;
    let root = cra_store::tlog::LogReader::at(log, size)
        .root(cp.size())
        .map_err(|e| format!("the checkpoint of {} leaves: {e}", cp.size()))?;
    if root != *cp.root() {
        return Err(format!(
            "the last published checkpoint ({} leaves) signs another tree than the store holds",
            cp.size()
        ));
    }
    Ok(())
}

/// How a run chooses where its server dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// SIGKILL after a seeded random number of acknowledged writes, every cycle.
    Random,
    /// After a random cycle 0, cycle `i` arms the `i`-th declared fault point
    /// ([`cra_store::fault::POINTS`]) and runs until the server aborts there; a cycle of
    /// [`POINT_BUDGET`] acknowledged writes that never reaches it fails the run.
    EveryPoint,
}

/// Acknowledged writes a cycle of [`Plan::EveryPoint`] may take to reach its point.
const POINT_BUDGET: usize = 400;

async fn crash_run(backend: &'static str, store: Store, plan: Plan) {
    let seed = env_u64(SEED_VAR).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let deadline = env_u64(SECONDS_VAR).map(|s| Instant::now() + Duration::from_secs(s));
    let points = cra_store::fault::POINTS;
    let (deadline, cycles) = match plan {
        Plan::Random => (deadline, env_u64(CYCLES_VAR).unwrap_or(50)),
        // Cycle 0 creates the shared project and is killed as a random cycle is.
        Plan::EveryPoint => (None, points.len() as u64 + 1),
    };
    let max_acks = env_u64(MAX_ACKS_VAR).unwrap_or(12).max(1) as usize;
    eprintln!(
        "crash test ({backend}): seed {seed} ({SEED_VAR}={seed} to repeat), {}",
        match (plan, deadline) {
            (Plan::EveryPoint, _) => format!("one cycle per fault point ({cycles})"),
            (_, Some(_)) => format!("for {} s", env_u64(SECONDS_VAR).unwrap_or(0)),
            (_, None) => format!("{cycles} cycles"),
        }
    );
    let started = Instant::now();
    let (executor, _calls) = executor_endpoint().await;
    let mut run = Run::new(backend, store, executor, seed);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut agents: Vec<Agent> = (0..AGENTS)
        .map(|i| Agent {
            index: i,
            id: agent_id(i),
            key: agent_key(i),
            rng: StdRng::seed_from_u64(seed ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            sessions: Vec::new(),
            resolutions: Vec::new(),
            n: 0,
        })
        .collect();
    let mut ledger: Vec<Ack> = Vec::new();
    let mut projects: Vec<String> = Vec::new();
    let mut unchecked = 0usize;
    let mut unanswered: Vec<String> = Vec::new();
    let (mut project, mut audit) = (String::new(), String::new());
    let mut cycle = 0u64;
    loop {
        let more = match deadline {
            Some(d) => Instant::now() < d || cycle == 0,
            None => cycle < cycles,
        };
        if !more {
            break;
        }
        let armed = match (plan, cycle) {
            (Plan::EveryPoint, 1..) => Some(points[cycle as usize - 1].name),
            _ => None,
        };
        // The checks run on an unarmed server (some reads write: a package read is recorded).
        assert!(run.start_server(cycle, None).await);
        // What the previous cycle acknowledged must have survived its kill.
        let mut checker = Checker {
            run: &run,
            chains: HashMap::new(),
        };
        let lost = checker.check_all(&ledger[unchecked..]).await;
        for l in &lost {
            eprintln!("crash test ({backend}): cycle {cycle} (seed {seed}): LOST {l}");
        }
        run.figures.lost.extend(lost);
        unchecked = ledger.len();
        for p in std::mem::take(&mut unanswered) {
            match check_not_stuck(&run, &p).await {
                Ok(ack) => ledger.push(ack),
                Err(e) => run.figures.stuck.push(format!("cycle {cycle}: {e}")),
            }
        }
        if !project.is_empty() {
            run.figures.fact_pairs += check_fact_histories(&run, &project)
                .await
                .unwrap_or_else(|e| panic!("{backend}: cycle {cycle} (seed {seed}): {e}"));
        }
        if cycle.is_multiple_of(CYCLES_PER_PROJECT) {
            project = format!("crash-p{}", cycle / CYCLES_PER_PROJECT);
            audit = run.create_project(&project).await;
            ledger.push(Ack::Project {
                project_id: project.clone(),
                audit: audit.clone(),
            });
            projects.push(project.clone());
            run.figures.acked += 1;
        }
        if let Some(point) = armed {
            run.kill_server(cycle).await;
            if !run.start_server(cycle, armed).await {
                // Died at a point of the start itself: the next start must repair that too.
                eprintln!("crash test ({backend}): cycle {cycle}: the start aborted at {point}");
                run.figures.points += 1;
                cycle += 1;
                continue;
            }
        }
        let shared = Arc::new(Cycle {
            cycle,
            base: run.base.clone(),
            http: run.http.clone(),
            project: project.clone(),
            audit: audit.clone(),
            ledger: Mutex::new(Vec::new()),
            acked: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            running: AtomicUsize::new(AGENTS),
            stop: AtomicBool::new(false),
            wake: Notify::new(),
            unexpected: Mutex::new(Vec::new()),
            unanswered_projects: Mutex::new(Vec::new()),
        });
        let kill_after = match armed {
            Some(_) => POINT_BUDGET,
            None => rng.random_range(1..=max_acks),
        };
        let tasks: Vec<_> = agents
            .drain(..)
            .map(|mut a| {
                // Resolutions of earlier cycles have expired (the clock moved an hour).
                a.resolutions.clear();
                tokio::spawn(agent_loop(shared.clone(), a))
            })
            .collect();
        loop {
            let wait = shared.wake.notified();
            if shared.acked.load(Ordering::SeqCst) >= kill_after
                || shared.running.load(Ordering::SeqCst) == 0
            {
                break;
            }
            wait.await;
        }
        match armed {
            Some(point) => {
                let reached = run.child.as_mut().unwrap().try_wait().unwrap().is_some()
                    || shared.running.load(Ordering::SeqCst) == 0;
                assert!(
                    reached,
                    "{backend}: cycle {cycle} (seed {seed}): {POINT_BUDGET} acknowledged writes \
                     never reached the fault point `{point}`"
                );
                run.reap_fault(cycle, point).await;
                run.figures.points += 1;
            }
            None => run.kill_server(cycle).await,
        }
        shared.stop.store(true, Ordering::SeqCst);
        for t in tasks {
            agents.push(t.await.unwrap());
        }
        agents.sort_by_key(|a| a.index);
        let unexpected = shared.unexpected.lock().unwrap().clone();
        assert!(
            unexpected.is_empty(),
            "{backend}: cycle {cycle} (seed {seed}): the live server refused valid requests: {unexpected:#?}"
        );
        let acked = shared.acked.load(Ordering::SeqCst);
        // A point may come before the cycle's first answer.
        assert!(
            acked >= 1 || armed.is_some(),
            "{backend}: cycle {cycle} (seed {seed}): no write was acknowledged"
        );
        run.figures.acked += acked as u64;
        run.figures.requests += shared.requests.load(Ordering::SeqCst);
        ledger.extend(shared.ledger.lock().unwrap().drain(..));
        unanswered.extend(shared.unanswered_projects.lock().unwrap().drain(..));
        cycle += 1;
    }
    run.figures.cycles = cycle;
    // Afterwards: everything, on a server started once more.
    let all_projects: Vec<String> = ledger
        .iter()
        .filter_map(|a| match a {
            Ack::Project { project_id, .. } => Some(project_id.clone()),
            _ => None,
        })
        .chain(unanswered.iter().cloned())
        .collect();
    let chains = verify_every_chain(&mut run, cycle, all_projects).await;
    for p in std::mem::take(&mut unanswered) {
        match check_not_stuck(&run, &p).await {
            Ok(ack) => ledger.push(ack),
            Err(e) => run.figures.stuck.push(format!("at the end: {e}")),
        }
    }
    if let Ok(records) = &chains {
        let found = audit::unaudited(&run, records, &projects).await;
        run.figures.unaudited.extend(found);
    }
    let mut checker = Checker {
        run: &run,
        chains: HashMap::new(),
    };
    let lost = checker.check_all(&ledger).await;
    let mut fact_pairs = 0;
    let mut histories = Ok(());
    for p in &projects {
        match check_fact_histories(&run, p).await {
            Ok(n) => fact_pairs += n,
            Err(e) => histories = Err(e),
        }
    }
    run.figures.fact_pairs += fact_pairs;
    // Entries lost and found again later would be counted twice: keep the distinct ones.
    let mut all_lost: BTreeSet<String> = run.figures.lost.drain(..).collect();
    all_lost.extend(lost);
    let f = &run.figures;
    let summary = format!(
        "CRASH-SUMMARY backend={backend} seed={seed} cycles={} fault_points={} requests={} acked={} lost={} stuck={} unaudited={} chains={} events={} fact_histories={} recovered_relay_events={} seconds={:.1}",
        f.cycles,
        f.points,
        f.requests,
        f.acked,
        all_lost.len(),
        f.stuck.len(),
        f.unaudited.len(),
        f.chains,
        f.events,
        f.fact_pairs,
        f.recovered,
        started.elapsed().as_secs_f64()
    );
    println!("{summary}");
    if let Some(mut child) = run.child.take() {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    assert!(
        all_lost.is_empty(),
        "{backend} (seed {seed}): acknowledged writes lost: {all_lost:#?}"
    );
    let f = &run.figures;
    assert!(
        f.stuck.is_empty(),
        "{backend} (seed {seed}): projects stuck by an interrupted creation: {:#?}",
        f.stuck
    );
    assert!(
        f.unaudited.is_empty(),
        "{backend} (seed {seed}): stored without the events that tell of it: {:#?}",
        f.unaudited
    );
    chains.unwrap_or_else(|e| panic!("{backend} (seed {seed}): {e}"));
    histories.unwrap_or_else(|e| panic!("{backend} (seed {seed}): {e}"));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn postgres_run(test: &str, plan: Plan) {
    let Some(url) = postgres_url(test) else {
        return;
    };
    // One schema for every cycle, dropped (outside the async runtime) when the test ends.
    let schema = TestSchema::new(&url, "rtcrash");
    let name = schema.name().to_owned();
    runtime().block_on(crash_run("postgres", Store::Pg { url, schema: name }, plan));
}

#[test]
fn kill_nine_server_loses_no_acknowledged_write_redb() {
    runtime().block_on(crash_run("redb", Store::Redb, Plan::Random));
}

#[test]
fn kill_nine_server_loses_no_acknowledged_write_postgres() {
    postgres_run(
        "kill_nine_server_loses_no_acknowledged_write_postgres",
        Plan::Random,
    );
}

#[test]
fn a_crash_at_every_fault_point_leaves_nothing_lost_stuck_or_unaudited_redb() {
    runtime().block_on(crash_run("redb", Store::Redb, Plan::EveryPoint));
}

#[test]
fn a_crash_at_every_fault_point_leaves_nothing_lost_stuck_or_unaudited_postgres() {
    postgres_run(
        "a_crash_at_every_fault_point_leaves_nothing_lost_stuck_or_unaudited_postgres",
        Plan::EveryPoint,
    );
}

//! Races, each driven to its worst interleaving by a hook (no sleeps): a rate limit under
//! concurrent executes (a gate in the CARP store), two first uses of one idempotency key (a
//! gated executor), two servers on one PostgreSQL schema whose clocks are 120 s apart sharing
//! one quota, and a session ending between a decision's check and its write (decisions held in
//! the state log).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use cra_carp::CarpStore;
use cra_carp::store::{
    ApprovalDecision, ApprovalRecord, CarpStoreError, Charge, ClaimOutcome, ConsumeOutcome,
    ExecutionLease, ExecutionRecord, SessionRecord, StateChange, StateDone, StateLog,
    StoredResolution,
};
use cra_runtime::{AppState, build_runtime, start};
use cra_store::testing::{SkewedClock, TestSchema, postgres_url};
use cra_wire::{Clock, FixedClock, SequentialIds};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::support::{MAINT, T0, TestServer, execute_request, resolve_request, rid};

/// A clock one microsecond later at every reading, from [`T0`].
#[derive(Debug)]
struct TickingClock {
    base: OffsetDateTime,
    ticks: AtomicI64,
}

impl TickingClock {
    fn new() -> Self {
        Self {
            base: cra_wire::clock::parse_rfc3339(T0).unwrap(),
            ticks: AtomicI64::new(0),
        }
    }
}

impl Clock for TickingClock {
    fn now(&self) -> OffsetDateTime {
        self.base + time::Duration::microseconds(self.ticks.fetch_add(1, Ordering::SeqCst))
    }
}

/// Parks every consume until `n` have arrived, then lets them through one at a time, latest
/// instant first: the order in which a consume counting at an instant read before the lock
/// misses every charge recorded before it.
#[derive(Debug)]
struct Gate {
    n: usize,
    state: Mutex<(usize, Vec<i64>)>,
    turn: Condvar,
}

impl Gate {
    fn pass<T>(&self, key: i64, f: impl FnOnce() -> T) -> T {
        let mut s = self.state.lock().unwrap();
        s.0 += 1;
        s.1.push(key);
        self.turn.notify_all();
        while !(s.0 >= self.n && s.1.iter().max() == Some(&key)) {
            s = self.turn.wait(s).unwrap();
        }
        drop(s);
        let out = f();
        let mut s = self.state.lock().unwrap();
        s.1.retain(|k| *k != key);
        self.turn.notify_all();
        out
    }
}

/// The runtime's CARP store with a [`Gate`] in front of its consumes.
#[derive(Debug)]
struct Gated {
    inner: Arc<dyn CarpStore>,
    gate: Gate,
    arrivals: AtomicI64,
}

impl CarpStore for Gated {
    fn create_session(&self, s: &SessionRecord) -> Result<(), CarpStoreError> {
        self.inner.create_session(s)
    }
    fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, CarpStoreError> {
        self.inner.get_session(id)
    }
    fn sessions_of(&self, agent: &str) -> Result<Option<Vec<String>>, CarpStoreError> {
        self.inner.sessions_of(agent)
    }
    fn end_session(&self, id: &str, at: &str) -> Result<SessionRecord, CarpStoreError> {
        self.inner.end_session(id, at)
    }
    fn insert_request_id(&self, s: &str, r: &str) -> Result<bool, CarpStoreError> {
        self.inner.insert_request_id(s, r)
    }
    fn has_request_id(&self, s: &str, r: &str) -> Result<bool, CarpStoreError> {
        self.inner.has_request_id(s, r)
    }
    fn put_resolution(&self, r: &StoredResolution) -> Result<(), CarpStoreError> {
        self.inner.put_resolution(r)
    }
    fn get_resolution(&self, id: &str) -> Result<Option<StoredResolution>, CarpStoreError> {
        self.inner.get_resolution(id)
    }
    fn get_execution_by_key(
        &self,
        s: &str,
        k: &str,
    ) -> Result<Option<ExecutionRecord>, CarpStoreError> {
        self.inner.get_execution_by_key(s, k)
    }
    fn record_execution(&self, e: &ExecutionRecord) -> Result<ExecutionRecord, CarpStoreError> {
        self.inner.record_execution(e)
    }
    fn rate_count(&self, p: &str, s: &str, a: i64, b: i64) -> Result<u64, CarpStoreError> {
        self.inner.rate_count(p, s, a, b)
    }
    fn budget_spent(&self, p: &str, s: &str) -> Result<u64, CarpStoreError> {
        self.inner.budget_spent(p, s)
    }
    fn try_consume(&self, c: &[Charge], at: i64) -> Result<ConsumeOutcome, CarpStoreError> {
        self.gate.pass(at, || self.inner.try_consume(c, at))
    }
    fn try_consume_now(
        &self,
        c: &[Charge],
        clock: &dyn Clock,
    ) -> Result<(ConsumeOutcome, i64), CarpStoreError> {
        let key = self.arrivals.fetch_add(1, Ordering::SeqCst);
        self.gate.pass(key, || self.inner.try_consume_now(c, clock))
    }
    fn claim_execution(&self, l: &ExecutionLease) -> Result<ClaimOutcome, CarpStoreError> {
        self.inner.claim_execution(l)
    }
    fn release_execution(&self, id: &str) -> Result<(), CarpStoreError> {
        self.inner.release_execution(id)
    }
    fn leases_of(&self, owner: &str) -> Result<Vec<ExecutionLease>, CarpStoreError> {
        self.inner.leases_of(owner)
    }
    fn create_approval(&self, a: &ApprovalRecord) -> Result<(), CarpStoreError> {
        self.inner.create_approval(a)
    }
    fn get_approval(&self, id: &str) -> Result<Option<ApprovalRecord>, CarpStoreError> {
        self.inner.get_approval(id)
    }
    fn decide_approval(
        &self,
        id: &str,
        d: ApprovalDecision,
        by: &str,
        note: Option<&str>,
        at: &str,
    ) -> Result<ApprovalRecord, CarpStoreError> {
        self.inner.decide_approval(id, d, by, note, at)
    }
    fn list_pending_approvals(&self) -> Result<Vec<ApprovalRecord>, CarpStoreError> {
        self.inner.list_pending_approvals()
    }
    fn list_decided_approvals(&self, limit: usize) -> Result<Vec<ApprovalRecord>, CarpStoreError> {
        self.inner.list_decided_approvals(limit)
    }
}

/// An executor endpoint whose calls are counted and held until `open` is called.
pub(crate) struct HeldExecutor {
    pub(crate) url: String,
    pub(crate) calls: Arc<AtomicU64>,
    arrived: Arc<tokio::sync::Notify>,
    gate: tokio::sync::watch::Sender<bool>,
}

impl HeldExecutor {
    pub(crate) async fn start() -> Self {
        use axum::routing::post;
        let calls = Arc::new(AtomicU64::new(0));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (gate, open) = tokio::sync::watch::channel(false);
        let (c, a) = (calls.clone(), arrived.clone());
        let app = axum::Router::new().route(
            "/exec",
            post(move |axum::Json(body): axum::Json<Value>| {
                let (c, a, mut open) = (c.clone(), a.clone(), open.clone());
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    a.notify_waiters();
                    let _ = open.wait_for(|o| *o).await;
                    axum::Json(json!({"ok": true, "action_id": body["action_id"]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/exec"),
            calls,
            arrived,
            gate,
        }
    }

    /// Waits until the executor has been called `n` times in all.
    pub(crate) async fn wait_calls(&self, n: u64) {
        loop {
            let wait = self.arrived.notified();
            if self.calls.load(Ordering::SeqCst) >= n {
                return;
            }
            wait.await;
        }
    }

    fn open(&self) {
        let _ = self.gate.send(true);
    }
}

pub(crate) fn with_executor(url: String) -> impl FnOnce(&mut cra_runtime::config::RuntimeConfig) {
    move |c| {
        c.executors.insert(
            "github".into(),
            cra_runtime::config::ExecutorConfig::http(url, 60_000),
        );
    }
}

/// Opens a session of `maintainer-bot` and resolves `contribute`; returns (session, resolution).
pub(crate) async fn resolved(s: &TestServer) -> (String, String) {
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let (st, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["contribute"]),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    (sid, res["resolution_id"].as_str().unwrap().to_owned())
}

pub(crate) fn comment(sid: &str, resolution_id: &str, key: Option<&str>) -> Value {
    let mut req = execute_request(
        "maintainer-bot",
        sid,
        &rid(),
        resolution_id,
        "pr.comment",
        json!({"owner": "octo", "repo": "hello", "number": 1, "body": "looks good"}),
    );
    if let Some(k) = key {
        req["execution"]["idempotency_key"] = json!(k);
    }
    req
}

/// `comment-rate-limit` allows 20 `pr.comment` per agent per 600 s. 28 concurrent executes each
/// read the clock, then consume one at a time, latest reading first: exactly 20 run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_executes_never_exceed_a_rate_limit() {
    const N: usize = 28;
    let exec = HeldExecutor::start().await;
    exec.open();
    let dir = tempfile::tempdir().unwrap();
    let (mut config, data) = crate::support::test_config(dir.path());
    with_executor(exec.url.clone())(&mut config);
    let clock = Arc::new(TickingClock::new());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 42));
    let (mut state, _) = build_runtime(config, clock, ids).unwrap();
    let rt = Arc::get_mut(&mut state.0).unwrap();
    rt.backends.carp = Arc::new(Gated {
        inner: rt.backends.carp.clone(),
        gate: Gate {
            n: N,
            state: Mutex::new((0, Vec::new())),
            turn: Condvar::new(),
        },
        arrivals: AtomicI64::new(0),
    });
    let s = serve(state, dir, data).await;
    let (sid, resolution_id) = resolved(&s).await;
    let s = Arc::new(s);
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let (s, body) = (s.clone(), comment(&sid, &resolution_id, None));
            tokio::spawn(async move { s.post(Some(MAINT), "/v1/execute", &body).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap().0);
    }
    let ok = statuses.iter().filter(|st| **st == 200).count();
    let limited = statuses.iter().filter(|st| **st == 429).count();
    assert_eq!((ok, limited), (20, N - 20), "statuses {statuses:?}");
    assert_eq!(exec.calls.load(Ordering::SeqCst), 20);
}

async fn serve(state: AppState, dir: tempfile::TempDir, data: std::path::PathBuf) -> TestServer {
    let server = start(state, std::future::pending()).await.unwrap();
    TestServer {
        base: format!("http://{}", server.addr),
        server: Some(server),
        http: cra_runtime::tls::http_client().build().unwrap(),
        clock: Arc::new(FixedClock::parse(T0).unwrap()),
        _dir: dir,
        data,
    }
}

/// Two first uses of one idempotency key: the second arrives while the first's executor runs.
/// It is refused with `execution_in_progress` and the executor runs once; a third use after
/// the first finished gets the first's response.
async fn first_uses_race(s: &TestServer, exec: &HeldExecutor) {
    let (sid, resolution_id) = resolved(s).await;
    let first = {
        let (http, url) = (s.http.clone(), s.url("/v1/execute"));
        let body = comment(&sid, &resolution_id, Some("once"));
        tokio::spawn(crate::support::send(
            http.post(url).bearer_auth(MAINT).json(&body),
        ))
    };
    exec.wait_calls(1).await;
    let second = {
        let (http, url) = (s.http.clone(), s.url("/v1/execute"));
        let body = comment(&sid, &resolution_id, Some("once"));
        tokio::spawn(crate::support::send(
            http.post(url).bearer_auth(MAINT).json(&body),
        ))
    };
    // Either the second answers, or it reached the executor too (the race was lost).
    let second_done = tokio::select! {
        r = second => Some(r.unwrap()),
        () = exec.wait_calls(2) => None,
    };
    exec.open();
    let first = first.await.unwrap();
    assert_eq!(first.0, 200, "{}", first.1);
    assert_eq!(
        exec.calls.load(Ordering::SeqCst),
        1,
        "the executor ran for the second use too"
    );
    let second = second_done.unwrap();
    crate::support::assert_refused(&second, 409, "execution_in_progress");
    let (st, third) = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &comment(&sid, &resolution_id, Some("once")),
        )
        .await;
    assert_eq!(st, 200, "{third}");
    assert_eq!(third["execution_id"], first.1["execution_id"]);
    assert_eq!(exec.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_uses_of_an_idempotency_key_run_once_redb() {
    let exec = HeldExecutor::start().await;
    let s = TestServer::start_with(with_executor(exec.url.clone())).await;
    first_uses_race(&s, &exec).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_uses_of_an_idempotency_key_run_once_postgres() {
    let Some(url) = postgres_url("racing_first_uses_of_an_idempotency_key_run_once_postgres")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "idem_race");
    let exec = HeldExecutor::start().await;
    let (name, executor) = (schema.name().to_owned(), exec.url.clone());
    let s = TestServer::start_blocking_with(move |c| {
        c.postgres = Some(url);
        c.postgres_schema = name;
        with_executor(executor)(c);
    })
    .await;
    first_uses_race(&s, &exec).await;
    s.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// Three replicas on one schema: the first use of a key runs on replica 1 and is held in its
/// executor; the same key's first uses on replicas 2 and 3 meanwhile are refused with
/// `execution_in_progress`, the executor runs once, and a use after it finished, on replica 3,
/// gets replica 1's response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_first_uses_of_an_idempotency_key_on_three_replicas_run_once_postgres() {
    let Some(url) = postgres_url("racing_first_uses_of_an_idempotency_key_on_three_replicas")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "idem_replicas");
    let exec = HeldExecutor::start().await;
    let t0 = cra_wire::clock::parse_rfc3339(T0).unwrap();
    let mut replicas = Vec::new();
    for k in 0..3 {
        let at = t0 + time::Duration::seconds(k);
        replicas.push(pg_server(&url, schema.name(), at, &exec.url).await);
    }
    let (sid, resolution_id) = resolved(&replicas[0]).await;
    // Each use is its own request (its own request id) with the one key.
    let use_on = |s: &TestServer| {
        let body = comment(&sid, &resolution_id, Some("once"));
        let request = s.http.post(s.url("/v1/execute")).bearer_auth(MAINT);
        tokio::spawn(crate::support::send(request.json(&body)))
    };
    let first = use_on(&replicas[0]);
    exec.wait_calls(1).await;
    for other in &replicas[1..] {
        let racing = use_on(other);
        let answered = tokio::select! {
            r = racing => Some(r.unwrap()),
            () = exec.wait_calls(2) => None,
        };
        let answered = answered.expect("another replica ran the executor for the same key");
        crate::support::assert_refused(&answered, 409, "execution_in_progress");
    }
    exec.open();
    let first = first.await.unwrap();
    assert_eq!(first.0, 200, "{}", first.1);
    let later = use_on(&replicas[2]).await.unwrap();
    assert_eq!(later.0, 200, "{}", later.1);
    assert_eq!(later.1["execution_id"], first.1["execution_id"]);
    assert_eq!(
        exec.calls.load(Ordering::SeqCst),
        1,
        "the executor ran once"
    );
    for s in replicas {
        s.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// A server on PostgreSQL schema `schema` whose clock reads `at`.
async fn pg_server(url: &str, schema: &str, at: OffsetDateTime, executor: &str) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, data) = crate::support::test_config(dir.path());
    config.postgres = Some(url.to_owned());
    config.postgres_schema = schema.to_owned();
    with_executor(executor.to_owned())(&mut config);
    let clock = Arc::new(FixedClock::new(at));
    let seed = u64::try_from(at.unix_timestamp()).unwrap();
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, seed));
    let (state, _) = tokio::task::spawn_blocking(move || build_runtime(config, clock, ids))
        .await
        .unwrap()
        .unwrap();
    serve(state, dir, data).await
}

/// Two servers on one schema, the second's clock 120 s behind the first's: 20 executes on each
/// against a limit of 20 per 600 s admit 20 in all (the slow server's window must not miss the
/// first server's charges).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_skewed_clocks_share_one_rate_limit_postgres() {
    let Some(url) = postgres_url("replicas_with_skewed_clocks_share_one_rate_limit_postgres")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "skew_quota");
    let exec = HeldExecutor::start().await;
    exec.open();
    let t0 = cra_wire::clock::parse_rfc3339(T0).unwrap();
    let a = pg_server(&url, schema.name(), t0, &exec.url).await;
    let b = pg_server(
        &url,
        schema.name(),
        t0 - time::Duration::seconds(120),
        &exec.url,
    )
    .await;
    let (sid, resolution_id) = resolved(&a).await;
    let mut ok = 0;
    for s in [&a, &b] {
        for _ in 0..20 {
            let (st, body) = s
                .post(
                    Some(MAINT),
                    "/v1/execute",
                    &comment(&sid, &resolution_id, None),
                )
                .await;
            assert!(st == 200 || st == 429, "{st} {body}");
            ok += usize::from(st == 200);
        }
    }
    assert_eq!(ok, 20, "one quota across both replicas");
    a.stop_blocking().await;
    b.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// Two replicas on one schema whose clocks are an hour apart (and stand still), with an HTTP
/// limit of 1 request a second and a burst of 10: 12 requests on each admit the burst once
/// between them, plus what the database's clock refilled meanwhile, not 10 on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_rate_limit_is_one_for_replicas_with_skewed_clocks_postgres() {
    let Some(url) =
        postgres_url("the_http_rate_limit_is_one_for_replicas_with_skewed_clocks_postgres")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "http_limit");
    let t0 = cra_wire::clock::parse_rfc3339(T0).unwrap();
    let mut servers = Vec::new();
    for at in [t0, t0 - time::Duration::hours(1)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut config, data) = crate::support::test_config(dir.path());
        config.postgres = Some(url.clone());
        config.postgres_schema = schema.name().to_owned();
        config.limits.requests_per_second = 1;
        config.limits.burst = 10;
        let clock = Arc::new(FixedClock::new(at));
        let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 7));
        let (state, _) = tokio::task::spawn_blocking(move || build_runtime(config, clock, ids))
            .await
            .unwrap()
            .unwrap();
        servers.push(serve(state, dir, data).await);
    }
    let started = std::time::Instant::now();
    let mut admitted = 0;
    for s in &servers {
        for _ in 0..12 {
            let (st, body) = s.get(Some(MAINT), "/v1/traces").await;
            assert!(st == 200 || st == 429, "{st} {body}");
            admitted += u64::from(st == 200);
        }
    }
    let refilled = started.elapsed().as_secs() + 1;
    assert!(
        (10..=10 + refilled).contains(&admitted),
        "admitted {admitted} of 24 in {:?}: one burst of 10 for both replicas",
        started.elapsed()
    );
    for s in servers {
        s.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// Invariant (`cra_store::pg::clock`, issue 28 item 3): on PostgreSQL every time a replica
/// records is the database's. Two replicas whose own clocks are an hour ahead and an hour behind
/// serve one session; every event of its chain carries the database's time (without it, the
/// hour-ahead replica's events, and by the chain's clamp every later one, would be an hour
/// ahead), and each replica's health says how far its clock is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_clocks_an_hour_off_record_the_database_s_time_postgres() {
    let Some(url) =
        postgres_url("replicas_with_clocks_an_hour_off_record_the_database_s_time_postgres")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "db_clock");
    let hour = time::Duration::hours(1);
    let mut servers = Vec::new();
    for (seed, skew) in [(7, hour), (8, -hour)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut config, data) = crate::support::test_config(dir.path());
        config.postgres = Some(url.clone());
        config.postgres_schema = schema.name().to_owned();
        config.clock = cra_runtime::ClockSource::Database;
        let clock = Arc::new(SkewedClock(skew));
        let ids = Arc::new(SequentialIds::new(1_772_445_600_000, seed));
        let (state, _) = tokio::task::spawn_blocking(move || build_runtime(config, clock, ids))
            .await
            .unwrap()
            .unwrap();
        servers.push(serve(state, dir, data).await);
    }
    for (s, skew) in servers.iter().zip([hour, -hour]) {
        let (st, health) = s.get(None, "/v1/health").await;
        assert_eq!(st, 200, "{health}");
        let off = health["clock_offset_ms"].as_i64().unwrap();
        let expected = -i64::try_from(skew.whole_milliseconds()).unwrap();
        assert!(
            (off - expected).abs() < 1000,
            "offset {off} ms for a skew of {skew}"
        );
    }
    let before = OffsetDateTime::now_utc();
    let sid = servers[0].open_session(MAINT, "maintainer-bot").await;
    for (i, s) in servers.iter().chain(servers.iter()).enumerate() {
        let mut body = resolve_request("maintainer-bot", &sid, &rid(), &["contribute"]);
        body["timestamp"] = json!(cra_wire::clock::format_timestamp(OffsetDateTime::now_utc()));
        let (st, answer) = s.post(Some(MAINT), "/v1/resolve", &body).await;
        assert_eq!(st, 200, "resolve {i}: {answer}");
    }
    let after = OffsetDateTime::now_utc();
    let events = servers[1].events(&sid).await;
    assert!(events.len() >= 5, "{events:?}");
    // This machine's clock is the database's (one machine): a generous second either side.
    let slack = time::Duration::seconds(1);
    for e in &events {
        let t = cra_wire::clock::parse_rfc3339(e["timestamp"].as_str().unwrap()).unwrap();
        assert!(
            t >= before - slack && t <= after + slack,
            "event {} at {t}, outside [{before}, {after}]",
            e["sequence"]
        );
    }
    for s in servers {
        s.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// The runtime's state log, holding every decision until [`HeldDecisions::release`]: the hook
/// that puts a session's end between a decision's check and its write. It holds without
/// blocking (the runtime may call it on an async worker).
struct HeldDecisions {
    inner: Arc<dyn StateLog>,
    held: Mutex<Vec<(StateChange, Vec<cra_trace::PreparedDraft>, StateDone)>>,
    arrived: tokio::sync::Notify,
}

impl StateLog for HeldDecisions {
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: StateDone,
    ) {
        if matches!(change, StateChange::Decide(_)) {
            self.held.lock().unwrap().push((change, drafts, done));
            self.arrived.notify_one();
        } else {
            self.inner.record_and_append_then(change, drafts, done);
        }
    }
}

impl HeldDecisions {
    /// Lets every held decision through to the store.
    fn release(&self) {
        let held = std::mem::take(&mut *self.held.lock().unwrap());
        for (change, drafts, done) in held {
            self.inner.record_and_append_then(change, drafts, done);
        }
    }
}

/// Issue 22 A.3/B.14: the session ends after a decision was checked (the session open, the
/// approval pending) and before it is written. The decision is refused with 403
/// `session_inactive` and changes nothing: the approval stays pending in the store and no
/// decision event follows `session.ended`, which names the approval as lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ending_before_a_decision_is_written_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (config, data) = crate::support::test_config(dir.path());
    let clock = Arc::new(TickingClock::new());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 7));
    let (mut state, _) = build_runtime(config, clock, ids).unwrap();
    let rt = Arc::get_mut(&mut state.0).unwrap();
    let held = Arc::new(HeldDecisions {
        inner: rt.backends.state_log.clone(),
        held: Mutex::new(Vec::new()),
        arrived: tokio::sync::Notify::new(),
    });
    rt.backends.state_log = held.clone();
    let carp = rt.backends.carp.clone();
    let s = serve(state, dir, data).await;

    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let req = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    let approval_id = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let decision = {
        let (http, url) = (
            s.http.clone(),
            s.url(&format!("/v1/approvals/{approval_id}")),
        );
        tokio::spawn(crate::support::send(
            http.post(url)
                .bearer_auth(crate::support::OPERATOR)
                .json(&json!({"decision": "grant"})),
        ))
    };
    held.arrived.notified().await;
    let (st, body) = s.delete(Some(MAINT), &format!("/v1/sessions/{sid}")).await;
    assert_eq!(st, 204, "{body}");
    held.release();

    let (st, body) = decision.await.unwrap();
    assert_eq!(st, 403, "{body}");
    assert_eq!(body["error"], "session_inactive", "{body}");
    let stored = carp.get_approval(&approval_id).unwrap().unwrap();
    assert_eq!(
        stored.status,
        cra_carp::store::ApprovalStatus::Pending,
        "the refused decision changed the store"
    );
    let events = s.events(&sid).await;
    let end = events.last().unwrap();
    assert_eq!(
        end["event_type"], "session.ended",
        "a decision followed the end"
    );
    assert_eq!(end["payload"]["lapsed_approvals"], json!([approval_id]));
    assert!(
        !events.iter().any(
            |e| e["event_type"] == "approval.granted" || e["event_type"] == "approval.rejected"
        ),
        "no decision event was written"
    );
    s.stop().await;
}

/// The runtime's state log, with another execute opening the same approval first: just before
/// an execute's `StateChange::Open` is written, the approval is stored bound to another call,
/// as a concurrent execute on another replica would have stored it.
struct OpenedElsewhere {
    inner: Arc<dyn StateLog>,
    carp: Arc<dyn CarpStore>,
}

impl StateLog for OpenedElsewhere {
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: StateDone,
    ) {
        if let StateChange::Open(a) = &change {
            let mut other = a.clone();
            if let Some(call) = other.call.as_mut() {
                call.execution_id = "another-execute".into();
                call.parameters_hash = cra_wire::hash::canonical_digest(
                    &json!({"owner": "acme", "repo": "widgets", "number": 43}),
                );
            }
            self.carp.create_approval(&other).unwrap();
        }
        self.inner.record_and_append_then(change, drafts, done);
    }
}

/// Of two executes opening one approval, the one whose open is refused (the approval was opened
/// first for another call) writes nothing of its open and is decided again on the approval as
/// it stands: here, bound to the other call, so `approval_mismatch`, recorded as a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execute_whose_approval_was_opened_first_elsewhere_is_decided_again() {
    let dir = tempfile::tempdir().unwrap();
    let (config, data) = crate::support::test_config(dir.path());
    let clock = Arc::new(TickingClock::new());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 7));
    let (mut state, _) = build_runtime(config, clock, ids).unwrap();
    let rt = Arc::get_mut(&mut state.0).unwrap();
    let carp = rt.backends.carp.clone();
    rt.backends.state_log = Arc::new(OpenedElsewhere {
        inner: rt.backends.state_log.clone(),
        carp: carp.clone(),
    });
    let s = serve(state, dir, data).await;

    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let req = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    let call = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        res["resolution_id"].as_str().unwrap(),
        "pr.merge",
        crate::support::MERGE_42.clone(),
    );
    let (st, body) = s.post(Some(MAINT), "/v1/execute", &call).await;
    assert_eq!(st, 403, "{body}");
    assert_eq!(body["error"]["code"], "approval_mismatch", "{body}");
    let approval_id = res["decision"]["approval_id"].as_str().unwrap();
    let stored = carp.get_approval(approval_id).unwrap().unwrap();
    assert_eq!(
        stored.call.unwrap().execution_id,
        "another-execute",
        "the approval is the one opened first"
    );
    let types = s.event_types(&sid).await;
    assert!(
        !types
            .iter()
            .any(|t| t == "approval.requested" || t == "action.pending_approval"),
        "the refused open wrote its events: {types:?}"
    );
    assert_eq!(
        &types[types.len() - 3..],
        ["action.requested", "action.denied", "policy.violated"]
    );
    s.stop().await;
}

/// An end that races an execute: while the action runs, the session refuses to end (409
/// `execution_in_progress`), so the outcome is never shut out of a closed chain; once the
/// execute has answered, the end goes through after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_only_once_its_running_action_has_its_outcome() {
    let exec = HeldExecutor::start().await;
    let s = Arc::new(TestServer::start_with(with_executor(exec.url.clone())).await);
    let (sid, resolution_id) = resolved(&s).await;
    let body = comment(&sid, &resolution_id, None);
    let server = s.clone();
    let running = tokio::spawn(async move { server.post(Some(MAINT), "/v1/execute", &body).await });
    exec.wait_calls(1).await;
    let path = format!("/v1/sessions/{sid}");
    let refused = s.delete(Some(MAINT), &path).await;
    crate::support::assert_error(&refused, 409, "execution_in_progress");
    assert!(
        refused.1["message"]
            .as_str()
            .unwrap()
            .contains("end it again"),
        "{}",
        refused.1
    );
    exec.open();
    let (st, v) = running.await.unwrap();
    assert_eq!((st, &v["status"]), (200, &json!("success")), "{v}");
    assert_eq!(s.delete(Some(MAINT), &path).await.0, 204);
    let types = s.event_types(&sid).await;
    assert_eq!(
        types[types.len() - 2..],
        ["action.executed", "session.ended"],
        "{types:?}"
    );
}

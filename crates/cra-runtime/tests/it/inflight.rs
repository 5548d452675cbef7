//! An execute in flight when its server is killed with SIGKILL: the server (this test binary
//! re-run with `CRA_RT_INFLIGHT_CHILD` set) holds the execution's lease while its executor, an
//! endpoint of this process, is held; the parent kills it there. When the same instance starts
//! again it closes the execution with `action.failed` (`executor_interrupted`); on PostgreSQL
//! another replica starting in between leaves it alone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cra_runtime::{build_runtime, start};
use cra_store::testing::{TestSchema, postgres_url};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::concurrency::{HeldExecutor, comment, resolved, with_executor};
use crate::support::{ADMIN, MAINT, T0, TestServer, appendix_b_verify};

const CHILD_VAR: &str = "CRA_RT_INFLIGHT_CHILD";
const EXECUTOR_VAR: &str = "CRA_RT_INFLIGHT_EXECUTOR";
const REPLICA_VAR: &str = "CRA_RT_INFLIGHT_REPLICA";
const SEED_VAR: &str = "CRA_RT_INFLIGHT_SEED";
const PG_URL_VAR: &str = "CRA_RT_INFLIGHT_PG_URL";
const PG_SCHEMA_VAR: &str = "CRA_RT_INFLIGHT_PG_SCHEMA";
const PORT_LINE: &str = "CRA-INFLIGHT-PORT ";

/// The server process: does nothing unless started by a test of this module.
#[test]
fn inflight_child_server() {
    let Some(dir) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let (mut config, _) = crate::support::test_config(Path::new(&dir));
    with_executor(var(EXECUTOR_VAR))(&mut config);
    config.replica_id = Some(var(REPLICA_VAR));
    if let Ok(url) = std::env::var(PG_URL_VAR) {
        config.postgres = Some(url);
        config.postgres_schema = var(PG_SCHEMA_VAR);
        config.postgres_pool = 4;
    }
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let ids = Arc::new(SequentialIds::new(
        1_772_445_600_000,
        var(SEED_VAR).parse().unwrap(),
    ));
    let (state, _) = build_runtime(config, clock, ids).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let server = start(state, std::future::pending()).await.unwrap();
        let mut out = std::io::stdout();
        writeln!(out, "{PORT_LINE}{}", server.addr.port()).unwrap();
        out.flush().unwrap();
        let _ = server.wait().await;
    });
}

/// A server process over `dir` and what talks to it.
struct Child {
    process: tokio::process::Child,
    server: TestServer,
}

/// Starts the child server as `replica` (ids from `seed`) and waits for its port.
async fn spawn(
    dir: &Path,
    executor: &str,
    replica: &str,
    seed: u64,
    pg: Option<(&str, &str)>,
) -> Child {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "inflight::inflight_child_server",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_VAR, dir)
        .env(EXECUTOR_VAR, executor)
        .env(REPLICA_VAR, replica)
        .env(SEED_VAR, seed.to_string())
        .env_remove(PG_URL_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    if let Some((url, schema)) = pg {
        command.env(PG_URL_VAR, url).env(PG_SCHEMA_VAR, schema);
    }
    let mut process = command.spawn().unwrap();
    let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
    let port = loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the child printed its port");
        if let Some(at) = line.find(PORT_LINE) {
            break line[at + PORT_LINE.len()..].trim().parse::<u16>().unwrap();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let server = TestServer {
        server: None,
        base: format!("http://127.0.0.1:{port}"),
        http: cra_runtime::tls::http_client().build().unwrap(),
        clock: Arc::new(FixedClock::parse(T0).unwrap()),
        _dir: tempfile::tempdir().unwrap(),
        data: PathBuf::new(),
    };
    Child { process, server }
}

impl Child {
    async fn kill(mut self) {
        self.process.start_kill().unwrap();
        self.process.wait().await.unwrap();
    }
}

/// Starts an execute of `pr.comment` (key `k1`) and returns once its executor was called:
/// (session, resolution, execution id from the chain's `action.approved`).
async fn execute_in_flight(c: &Child, exec: &HeldExecutor) -> (String, String, String) {
    let (sid, resolution_id) = resolved(&c.server).await;
    let body = comment(&sid, &resolution_id, Some("k1"));
    let request = c
        .server
        .http
        .post(c.server.url("/v1/execute"))
        .bearer_auth(MAINT)
        .json(&body);
    // Cut off by the kill: no answer.
    tokio::spawn(async move { request.send().await.map(|_| ()).ok() });
    exec.wait_calls(1).await;
    let events = c.server.events(&sid).await;
    let approved = events.last().unwrap();
    assert_eq!(approved["event_type"], "action.approved");
    let execution_id = approved["payload"]["execution_id"].as_str().unwrap();
    (sid, resolution_id, execution_id.to_owned())
}

/// After the owner's restart: the chain closes the execution with `action.failed`
/// (`executor_interrupted`) and verifies (server and Appendix B); the idempotency key answers
/// that outcome without running the action again.
async fn assert_closed(c: &Child, exec: &HeldExecutor, ids: &(String, String, String)) {
    let (sid, resolution_id, execution_id) = ids;
    let events = c.server.events(sid).await;
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "action.failed", "{last}");
    assert_eq!(last["span_id"], execution_id.as_str());
    assert_eq!(last["parent_span_id"], resolution_id.as_str());
    assert_eq!(last["payload"]["execution_id"], execution_id.as_str());
    assert_eq!(last["payload"]["error"]["code"], "executor_interrupted");
    let (st, v) = c
        .server
        .post(Some(ADMIN), &format!("/v1/traces/{sid}/verify"), &json!({}))
        .await;
    assert_eq!((st, &v["valid"]), (200, &Value::Bool(true)), "{v}");
    let ndjson = c.server.export_ndjson(sid).await;
    assert_eq!(appendix_b_verify(&ndjson)["valid"], true);
    let (st, again) = c
        .server
        .post(
            Some(MAINT),
            "/v1/execute",
            &comment(sid, resolution_id, Some("k1")),
        )
        .await;
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["status"], "error");
    assert_eq!(again["error"]["code"], "executor_interrupted");
    assert_eq!(exec.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_cut_off_by_kill_nine_is_closed_on_restart_redb() {
    let dir = tempfile::tempdir().unwrap();
    let exec = HeldExecutor::start().await;
    let first = spawn(dir.path(), &exec.url, "local", 1, None).await;
    let ids = execute_in_flight(&first, &exec).await;
    first.kill().await;
    let again = spawn(dir.path(), &exec.url, "local", 2, None).await;
    assert_closed(&again, &exec, &ids).await;
    again.kill().await;
}

/// A front door opening the directory with atlases (`open_local`, as `cra mcp serve|proxy` do)
/// closes what a killed server left in flight, as that server's restart would: every process on
/// an embedded store leases as `local`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_front_door_opening_the_directory_closes_what_a_killed_server_left() {
    let dir = tempfile::tempdir().unwrap();
    let exec = HeldExecutor::start().await;
    let first = spawn(dir.path(), &exec.url, "local", 1, None).await;
    let (sid, _, execution_id) = execute_in_flight(&first, &exec).await;
    first.kill().await;

    let atlas = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../atlases/dev.cra.github-ops"
    ));
    let (state, notices) = cra_runtime::open_local(
        &dir.path().join("data"),
        &[atlas],
        Arc::new(FixedClock::parse(T0).unwrap()),
        Arc::new(SequentialIds::new(1_772_445_600_000, 3)),
    )
    .unwrap();
    assert!(
        notices
            .iter()
            .any(|n| format!("{n:?}").contains("closed 1 execution")),
        "{notices:?}"
    );
    let auditor = cra_runtime::auth::Actor::local("auditor", cra_runtime::auth::ActorType::Human);
    let events = state.trace(&auditor, &sid).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "action.failed");
    assert_eq!(last.payload["execution_id"], execution_id.as_str());
    assert_eq!(last.payload["error"]["code"], "executor_interrupted");
    assert!(state.verify_chain(&auditor, sid).await.unwrap().valid);
    assert_eq!(exec.calls.load(Ordering::SeqCst), 1, "nothing ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_closes_its_cut_off_execute_postgres() {
    let Some(url) = postgres_url("only_the_owner_closes_its_cut_off_execute_postgres") else {
        return;
    };
    let schema = TestSchema::new(&url, "inflight");
    let pg = Some((url.as_str(), schema.name()));
    let dir = tempfile::tempdir().unwrap();
    let exec = HeldExecutor::start().await;
    let a = spawn(dir.path(), &exec.url, "replica-a", 1, pg).await;
    let ids = execute_in_flight(&a, &exec).await;
    a.kill().await;
    // Another replica's (re)start leaves replica-a's execution open.
    let b = spawn(dir.path(), &exec.url, "replica-b", 2, pg).await;
    let events = b.server.events(&ids.0).await;
    assert_eq!(events.last().unwrap()["event_type"], "action.approved");
    b.kill().await;
    let b = spawn(dir.path(), &exec.url, "replica-b", 3, pg).await;
    let events = b.server.events(&ids.0).await;
    assert_eq!(events.last().unwrap()["event_type"], "action.approved");
    let a = spawn(dir.path(), &exec.url, "replica-a", 4, pg).await;
    assert_closed(&a, &exec, &ids).await;
    a.kill().await;
    b.kill().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

/// The start-up recovery's two quiet cases, on the store directly: a lease whose execution was
/// never approved (the server stopped before its executor could run) and one whose session's
/// chain has already ended (nothing may follow `session.ended`) are both released, and neither
/// writes an event; a lease of another owner is left alone.
#[test]
fn recovery_releases_unapproved_and_ended_leases_without_events() {
    use cra_carp::CarpStore;
    use cra_carp::store::ClaimOutcome;
    use cra_trace::EventDraft;
    use cra_trace::store::ChainStore;

    const OPEN: &str = "0190f5d2-8a4e-7b3c-9d1e-5e5510000001";
    const ENDED: &str = "0190f5d2-8a4e-7b3c-9d1e-5e5510000002";
    let dir = tempfile::tempdir().unwrap();
    let store = cra_store::RedbStore::open(dir.path()).unwrap();
    let event = |span: &str, event_type: &str| EventDraft {
        trace_id: "0190f5d2-8a4e-7b3c-9d1e-a00000000001".into(),
        span_id: span.into(),
        parent_span_id: None,
        event_type: event_type.into(),
        payload: json!({}),
    };
    let lease = |id: &str, session: &str, owner: &str| cra_carp::store::ExecutionLease {
        execution_id: id.into(),
        owner: owner.into(),
        session_id: session.into(),
        agent_id: "ops-bot".into(),
        idempotency_key: None,
        action_id: "repo.get".into(),
        request_id: "0190f5d2-8a4e-7b3c-9d1e-a00000000002".into(),
        resolution_id: "0190f5d2-8a4e-7b3c-9d1e-a00000000003".into(),
        trace_id: "0190f5d2-8a4e-7b3c-9d1e-a00000000001".into(),
        claimed_at: "2026-03-02T10:00:00.000000Z".into(),
        parameters_hash: None,
    };
    // Session OPEN: execution e1 was requested but never approved.
    let (e1, e2, e3) = (
        "0190f5d2-8a4e-7b3c-9d1e-e00000000001",
        "0190f5d2-8a4e-7b3c-9d1e-e00000000002",
        "0190f5d2-8a4e-7b3c-9d1e-e00000000003",
    );
    store
        .append(
            OPEN,
            vec![
                event(OPEN, "session.started"),
                event(e1, "action.requested"),
            ],
        )
        .unwrap();
    // Session ENDED: execution e2 was approved, then the session ended before its outcome.
    store
        .append(
            ENDED,
            vec![
                event(ENDED, "session.started"),
                event(e2, "action.approved"),
                event(ENDED, "session.ended"),
            ],
        )
        .unwrap();
    for l in [
        lease(e1, OPEN, "local"),
        lease(e2, ENDED, "local"),
        lease(e3, OPEN, "other"),
    ] {
        assert_eq!(store.claim_execution(&l).unwrap(), ClaimOutcome::Claimed);
    }
    let clock = FixedClock::parse(T0).unwrap();
    let atlases = cra_runtime::atlases::AtlasState::empty();
    let closed = cra_runtime::close_interrupted(&store, &store, &atlases, &clock, "local").unwrap();
    assert_eq!(closed, 0, "no outcome event could or should be written");
    assert!(
        store.leases_of("local").unwrap().is_empty(),
        "both leases released"
    );
    assert_eq!(
        store.leases_of("other").unwrap().len(),
        1,
        "another owner's lease stays"
    );
    let types = |sid: &str| -> Vec<String> {
        store
            .read_after(sid, None, 100)
            .unwrap()
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    };
    assert_eq!(types(OPEN), ["session.started", "action.requested"]);
    assert_eq!(
        types(ENDED),
        ["session.started", "action.approved", "session.ended"]
    );
}

//! The governance core without HTTP: CARP's and Relay's operations called as functions on a
//! runtime that serves no port, as the next front doors (MCP, the CLI's local mode) will call them.

use std::sync::Arc;

use cra_carp::types::ExecuteStatus;
use cra_runtime::AppState;
use cra_runtime::auth::Actor;
use cra_runtime::service::carp as service;
use cra_runtime::service::relay::{CreateProject, project_audit_session};
use cra_trace::TraceEvent;
use cra_wire::{FixedClock, SequentialIds, Token};
use serde_json::{Value, json};

use crate::support::{
    AGENT2, AUTHOR, MAINT, T0, execute_request, resolve_request, rid, test_config,
};

/// A runtime over a fresh data directory (no server), the maintainer bot's actor and an open
/// session of it.
fn runtime() -> (AppState, Actor, String, tempfile::TempDir) {
    let (state, actor, session, dir, _) = runtime_and_clock();
    (state, actor, session, dir)
}

/// As [`runtime`], with the runtime's clock, which a test may move.
fn runtime_and_clock() -> (AppState, Actor, String, tempfile::TempDir, Arc<FixedClock>) {
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let (state, actor, dir) = runtime_with(clock.clone(), |_| {});
    let engine = service::engine(&state, state.atlases().set.clone());
    let session = engine.open_session(&actor.id, None, None).unwrap();
    (state, actor, session.session_id, dir, clock)
}

/// A runtime over a fresh data directory on `clock`, its test configuration changed by
/// `tweak`, and the maintainer bot's actor.
fn runtime_with(
    clock: Arc<FixedClock>,
    tweak: impl FnOnce(&mut cra_runtime::RuntimeConfig),
) -> (AppState, Actor, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, _) = test_config(dir.path());
    tweak(&mut config);
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 7));
    let (state, _) = cra_runtime::build_runtime(config, clock, ids).unwrap();
    let actor = state
        .auth
        .current()
        .authenticate(Some(&format!("Bearer {MAINT}")), state.clock.now())
        .unwrap();
    (state, actor, dir)
}

async fn chain(state: &AppState, sid: &str) -> Vec<TraceEvent> {
    state.read_events_after(sid, None, 1000).await.unwrap()
}

fn types(events: &[TraceEvent]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

/// A resolve answers the bytes its chain hashed, records received, injected context, the
/// approval it opened and its completion under one trace and span, and the chain verifies.
#[tokio::test]
async fn a_resolve_answers_the_bytes_its_chain_recorded() {
    let (state, actor, sid, _dir) = runtime();
    let body = resolve_request(&actor.id, &sid, &rid(), &[]);
    let answer = service::resolve(&state, &actor, &body, false)
        .await
        .unwrap();
    let text = answer
        .canonical
        .expect("an unexplained answer is the chain's text");
    let events = chain(&state, &sid).await;
    assert_eq!(types(&events).first(), Some(&"carp.request.received"));
    assert_eq!(types(&events).last(), Some(&"carp.resolution.completed"));
    let completed = &events.last().unwrap().payload["resolution"];
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), *completed);
    assert_eq!(
        completed["resolution_id"],
        answer.resolution.resolution_id.as_str()
    );
    for e in &events {
        assert_eq!(e.trace_id, answer.resolution.trace_id);
        assert_eq!(e.span_id, answer.resolution.resolution_id);
    }
    assert!(cra_trace::verify::verify_events(&events, true).is_valid());
}

/// An explained resolve answers the explanation, which the chain does not hold, and records one
/// `policy.evaluated` per candidate action either way.
#[tokio::test]
async fn an_explained_resolve_answers_its_explanation() {
    let (state, actor, sid, _dir) = runtime();
    let body = resolve_request(&actor.id, &sid, &rid(), &[]);
    let answer = service::resolve(&state, &actor, &body, true).await.unwrap();
    assert!(
        answer.canonical.is_none(),
        "the answer is not the chain's text"
    );
    let explained = answer.resolution.explain.expect("explained");
    let events = chain(&state, &sid).await;
    let evaluated = types(&events)
        .iter()
        .filter(|t| **t == "policy.evaluated")
        .count();
    assert_eq!(evaluated, explained.actions.len());
    assert!(
        events.last().unwrap().payload["resolution"]
            .get("explain")
            .is_none()
    );
}

/// A validate records its request and a dry-run completion, and stores no resolution: an
/// execute under its id is refused as unknown.
#[tokio::test]
async fn a_validate_records_a_dry_run_and_stores_nothing() {
    let (state, actor, sid, _dir) = runtime();
    let mut body = resolve_request(&actor.id, &sid, &rid(), &[]);
    body["operation"] = json!("validate");
    let answer = service::resolve(&state, &actor, &body, false)
        .await
        .unwrap();
    let events = chain(&state, &sid).await;
    assert_eq!(
        types(&events),
        ["carp.request.received", "carp.resolution.completed"]
    );
    assert_eq!(events[1].payload["dry_run"], true);
    let exec = execute_request(
        &actor.id,
        &sid,
        &rid(),
        &answer.resolution.resolution_id,
        "repo.get",
        json!({"owner": "octo", "repo": "hello"}),
    );
    let refused = service::execute(&state, &actor, &exec).await.unwrap();
    assert_eq!(refused.status, ExecuteStatus::Denied);
    let error = refused.error.expect("a refusal names its token");
    assert_eq!(error.code, Token::ResolutionNotFound.as_str());
}

/// An allowed execute runs its executor (here not configured: a recorded failure, not a
/// refusal) and records requested, approved and the outcome as children of the resolve's span.
#[tokio::test]
async fn an_execute_records_its_request_approval_and_outcome() {
    let (state, actor, sid, _dir) = runtime();
    let body = resolve_request(&actor.id, &sid, &rid(), &[]);
    let resolution = service::resolve(&state, &actor, &body, false)
        .await
        .unwrap()
        .resolution;
    let before = chain(&state, &sid).await.len();
    let exec = execute_request(
        &actor.id,
        &sid,
        &rid(),
        &resolution.resolution_id,
        "repo.get",
        json!({"owner": "octo", "repo": "hello"}),
    );
    let response = service::execute(&state, &actor, &exec).await.unwrap();
    let error = response
        .error
        .as_ref()
        .expect("the executor is not configured");
    assert_eq!(error.code, "executor_not_configured");
    let events = chain(&state, &sid).await;
    let run = &events[before..];
    assert_eq!(
        types(run),
        ["action.requested", "action.approved", "action.failed"]
    );
    for e in run {
        assert_eq!(e.span_id, response.execution_id);
        assert_eq!(
            e.parent_span_id.as_deref(),
            Some(resolution.resolution_id.as_str())
        );
    }
    assert_eq!(run[2].payload["executor"], "http:github");
    assert_eq!(
        run[1].payload["resolution_id"],
        resolution.resolution_id.as_str(),
        "action.approved names its resolution (CRA 4.3.3)"
    );
    assert_eq!(run[2].payload["error_code"], "executor_not_configured");
    assert_eq!(run[2].payload["error_message"], error.message.as_str());
    assert!(cra_trace::verify::verify_events(&events, true).is_valid());
}

/// A caller who is not the requester is refused before anything is recorded.
#[tokio::test]
async fn another_callers_request_is_refused_and_records_nothing() {
    let (state, actor, sid, _dir) = runtime();
    let body = resolve_request("ops-bot", &sid, &rid(), &[]);
    let err = service::resolve(&state, &actor, &body, false)
        .await
        .unwrap_err();
    assert_eq!(err.token(), Some(Token::IdentityMismatch));
    assert!(chain(&state, &sid).await.is_empty());
}

/// Relay through the service: a project's audit chain opens with `session.started` and the
/// grants; a writer's deposit is recorded there under the authenticated depositor, once; a
/// caller without a grant is refused, and nothing is stored or recorded for it.
#[tokio::test]
async fn relay_writes_are_granted_and_recorded_without_http() {
    let (state, maint, _sid, _dir) = runtime();
    let stranger = state
        .auth
        .current()
        .authenticate(Some(&format!("Bearer {AGENT2}")), state.clock.now())
        .unwrap();
    let input = CreateProject {
        project_id: "proj-svc".into(),
        name: "Service".into(),
        members: Vec::new(),
    };
    let created = state.create_project(&maint, input).await.unwrap();
    let audit = created.audit_session_id;
    assert_eq!(audit, project_audit_session("proj-svc"));
    let package = || crate::relay::package("pkg_s", "proj-svc", "maintainer-bot", None);
    let refused = state
        .deposit(&stranger, "proj-svc", package())
        .await
        .unwrap_err();
    assert_eq!(refused.token(), Some(Token::Unauthorized));
    assert!(
        state.package(&maint, "pkg_s", None).await.is_err(),
        "not stored"
    );
    assert_eq!(chain(&state, &audit).await.len(), 2, "not recorded");
    let deposited = state.deposit(&maint, "proj-svc", package()).await.unwrap();
    assert!(deposited.created);
    let again = state.deposit(&maint, "proj-svc", package()).await.unwrap();
    assert!(!again.created, "an identical package is answered as stored");
    let events = chain(&state, &audit).await;
    assert_eq!(
        types(&events),
        [
            "session.started",
            "relay.project.created",
            "relay.package.deposited"
        ]
    );
    let me = json!({"id": "maintainer-bot", "type": "agent"});
    assert_eq!(events[0].payload["actor"], me);
    assert_eq!(events[1].payload["created_by"], me);
    assert_eq!(events[2].payload["created_by"], me);
    assert_eq!(
        events[2].payload["content_hash"],
        deposited.stored.content_hash.as_str()
    );
    assert!(cra_trace::verify::verify_events(&events, true).is_valid());
}

/// Atlas installs through the service: an agent is refused and nothing changes; an author's
/// changed atlas at the same version is refused, at a new version it replaces the one in force
/// with its id, and the same atlas again changes nothing.
#[tokio::test]
async fn atlas_installs_are_authorised_and_idempotent_without_http() {
    let (state, agent, _sid, _dir) = runtime();
    let author = state
        .auth
        .current()
        .authenticate(Some(&format!("Bearer {AUTHOR}")), state.clock.now())
        .unwrap();
    let digests = || -> Vec<(String, String)> {
        let all = state.atlas_summaries().into_iter();
        all.map(|a| (a.atlas_id, a.digest)).collect()
    };
    let before = digests();
    let (_, old_digest) = before
        .iter()
        .find(|(id, _)| id == "dev.cra.github-ops")
        .cloned()
        .expect("the test configuration loads the example atlas");
    let mut inline = crate::system::inline_example("dev.cra.github-ops");
    inline["manifest"]["description"] = json!("changed by the service test");
    // The same version with other content is refused: a published version never changes.
    let conflict = state
        .0
        .install_inline_atlas(&author, inline.clone())
        .await
        .unwrap_err();
    assert_eq!(conflict.token(), Some(Token::AtlasVersionConflict));
    assert_eq!(digests(), before, "a refused install changes nothing");
    inline["manifest"]["version"] = json!("9.0.0");
    let refused = state
        .0
        .install_inline_atlas(&agent, inline.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.token(), Some(Token::Forbidden));
    assert_eq!(digests(), before, "a refused install changes nothing");
    // An author replaces an atlas in force only with a trusted signature; an operator may.
    let refused = state
        .0
        .install_inline_atlas(&author, inline.clone())
        .await
        .unwrap_err();
    assert_eq!(refused.token(), Some(Token::Forbidden));
    assert_eq!(digests(), before, "a refused install changes nothing");
    let operator = state
        .auth
        .current()
        .authenticate(
            Some(&format!("Bearer {}", crate::support::OPERATOR)),
            state.clock.now(),
        )
        .unwrap();
    let installed = state
        .0
        .install_inline_atlas(&operator, inline.clone())
        .await
        .unwrap();
    assert!(!installed.unchanged);
    let replaced = installed.replaced.expect("it replaced the atlas in force");
    assert_eq!(replaced.digest, old_digest);
    assert_ne!(installed.atlas.digest, old_digest);
    let again = state.0.install_inline_atlas(&author, inline).await.unwrap();
    assert!(again.unchanged && again.replaced.is_none());
    assert_eq!(again.atlas.digest, installed.atlas.digest);
    assert_eq!(digests().len(), before.len());
}

/// `session.ended` says how long the session lasted on the injected clock (CRA 4.3.1).
#[tokio::test]
async fn a_session_end_records_its_duration_on_the_injected_clock() {
    let (state, actor, sid, _dir, clock) = runtime_and_clock();
    clock.advance(time::Duration::milliseconds(1500));
    cra_runtime::service::sessions::end(&state, &actor, &sid)
        .await
        .unwrap();
    let events = chain(&state, &sid).await;
    let ended = events.last().unwrap();
    assert_eq!(ended.event_type, "session.ended");
    assert_eq!(ended.payload["duration_ms"], 1500);
    for e in &events {
        let value = serde_json::to_value(e).unwrap();
        let errors = cra_carp::events::event_schema_errors(&value);
        assert!(errors.is_empty(), "{}: {errors:?}", e.event_type);
    }
    assert_eq!(ended.payload["reason"], "ended by request");
}

/// `action.executed.duration_ms` is the executor's time on the injected clock (CRA §4.3.3): an
/// executor that takes 1,500 ms of it is recorded as 1500.
#[tokio::test]
async fn an_execution_records_its_executor_duration_on_the_injected_clock() {
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let moved = clock.clone();
    let app = axum::Router::new().route(
        "/exec",
        axum::routing::post(move || {
            let clock = moved.clone();
            async move {
                clock.advance(time::Duration::milliseconds(1500));
                axum::Json(json!({"ok": true}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let executor = cra_runtime::config::ExecutorConfig::http(format!("http://{addr}/exec"), 10_000);
    let (state, actor, _dir) = runtime_with(clock, |c| {
        c.executors.insert("github".into(), executor);
    });
    let engine = service::engine(&state, state.atlases().set.clone());
    let sid = engine
        .open_session(&actor.id, None, None)
        .unwrap()
        .session_id;
    let body = resolve_request(&actor.id, &sid, &rid(), &[]);
    let resolution = service::resolve(&state, &actor, &body, false)
        .await
        .unwrap()
        .resolution;
    let parameters = json!({"owner": "octo", "repo": "hello"});
    let exec = execute_request(
        &actor.id,
        &sid,
        &rid(),
        &resolution.resolution_id,
        "repo.get",
        parameters,
    );
    let response = service::execute(&state, &actor, &exec).await.unwrap();
    assert_eq!(response.status, ExecuteStatus::Success, "{response:?}");
    let events = chain(&state, &sid).await;
    let executed = events.last().unwrap();
    assert_eq!(executed.event_type, "action.executed");
    assert_eq!(executed.payload["duration_ms"], 1500);
}

/// A runtime whose configuration keeps ended sessions one day ([retention] days = 1), the
/// maintainer bot's actor, a session it opened and ended at T0, and the runtime's clock.
async fn runtime_with_an_ended_session()
-> (AppState, Actor, String, tempfile::TempDir, Arc<FixedClock>) {
    use cra_runtime::service::sessions::{CreateSession, end, open};
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let (state, actor, dir) = runtime_with(clock.clone(), |c| {
        c.retention = Some(cra_runtime::config::RetentionConfig {
            days: 1,
            interval_seconds: 3600,
        });
    });
    let input = CreateSession {
        agent_id: actor.id.clone(),
        goal: "kept a day".into(),
        project_id: None,
        parent_session_id: None,
    };
    let sid = open(&state, &actor, input).await.unwrap().session_id;
    end(&state, &actor, &sid).await.unwrap();
    (state, actor, sid, dir, clock)
}

/// TRACE 4.6: retention removes a whole ended session once its last event is older than the
/// policy, and records the removal first in the operator audit chain; within the policy it
/// keeps it, and an open session is never removed.
#[tokio::test]
async fn retention_removes_an_expired_ended_session_and_records_it() {
    use cra_runtime::service::retention::apply;
    use cra_store::retention::{OPERATOR_AUDIT_SESSION, RETENTION_EVENT};
    let (state, actor, sid, _dir, clock) = runtime_with_an_ended_session().await;
    let engine = service::engine(&state, state.atlases().set.clone());
    let open = engine
        .open_session(&actor.id, None, None)
        .unwrap()
        .session_id;
    let policy = cra_store::RetentionPolicy::days(1).unwrap();

    clock.advance(time::Duration::hours(23));
    let early = apply(&state, policy).await.unwrap();
    assert!(early.removed.is_empty(), "kept within its day: {early:?}");
    assert!(!chain(&state, &sid).await.is_empty());

    clock.advance(time::Duration::hours(2));
    let run = apply(&state, policy).await.unwrap();
    assert_eq!(run.removed, [sid.as_str()], "only the ended session goes");
    assert!(chain(&state, &sid).await.is_empty());
    let audit = chain(&state, OPERATOR_AUDIT_SESSION).await;
    let recorded = audit.last().unwrap();
    assert_eq!(recorded.event_type, RETENTION_EVENT);
    assert_eq!(recorded.payload["sessions"][0]["session_id"], sid.as_str());
    assert!(cra_trace::verify::verify_events(&audit, true).is_valid());
    assert!(state.session_record(&open).await.is_ok(), "open: kept");
}

/// `cra serve` with `[retention]` applies it when it starts (and then every interval): a
/// session that ended two days before the start is gone after the first run.
#[tokio::test]
async fn a_server_with_retention_configured_applies_it_at_start() {
    let (state, _actor, sid, _dir, clock) = runtime_with_an_ended_session().await;
    clock.advance(time::Duration::days(2));
    let server = cra_runtime::start(state.clone(), std::future::pending())
        .await
        .unwrap();
    let mut runs = server.retention_runs.clone();
    let run = runs
        .wait_for(Option::is_some)
        .await
        .unwrap()
        .clone()
        .unwrap()
        .unwrap();
    assert_eq!(run.removed, [sid.as_str()]);
    assert!(chain(&state, &sid).await.is_empty());
    server.shutdown().await.unwrap();
}

/// A chain reader is a snapshot: it reads, page after page, up to the head the chain had when it
/// was opened (what `GET /v1/traces/{id}` announces in `CRA-Chain-Events`), however many events
/// are appended while it reads; a reader opened afterwards has them.
#[tokio::test]
async fn a_chain_reader_reads_the_chain_as_it_was_when_opened() {
    let (state, actor, sid, _dir) = runtime();
    let resolve = || async {
        let body = resolve_request(&actor.id, &sid, &rid(), &[]);
        service::resolve(&state, &actor, &body, false)
            .await
            .unwrap();
    };
    for _ in 0..40 {
        resolve().await;
    }
    let before = chain(&state, &sid).await.len();
    let mut reader = state.open_chain(&actor, &sid).await.unwrap();
    assert_eq!(reader.event_count(), before as u64);
    let first = reader.next_page().await.unwrap().unwrap();
    assert!(
        first.events.len() < before,
        "the chain takes more than one page"
    );
    for _ in 0..5 {
        resolve().await;
    }
    let mut read = first.events;
    while let Some(page) = reader.next_page().await.unwrap() {
        assert!(page.unreadable.is_none());
        read.extend(page.events);
    }
    assert_eq!(read, chain(&state, &sid).await[..before].to_vec());
    let later = state.open_chain(&actor, &sid).await.unwrap();
    assert!(later.event_count() > before as u64);
}

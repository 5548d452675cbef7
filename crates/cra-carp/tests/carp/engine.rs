//! The CARP operations over the in-memory store: one token per §3.6 rule, execute
//! authorisation (limits counted on executions, approvals, idempotency), and emitted objects
//! validating against our published schemas.

use std::sync::Arc;

use cra_carp::engine::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::memory::MemoryStore;
use cra_carp::store::ApprovalDecision;
use cra_carp::types::ExecuteStatus;
use cra_carp::validate::{parse_request, schemas, shape_errors};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

use crate::table::{SESSION, table_atlases, table_engine};

struct World {
    carp: Carp,
    clock: Arc<FixedClock>,
    n: std::cell::Cell<u32>,
}

impl World {
    fn new() -> Self {
        let (carp, clock, _) = table_engine(3);
        Self {
            carp,
            clock,
            n: std::cell::Cell::new(0),
        }
    }

    fn now(&self) -> String {
        cra_wire::clock::format_timestamp(cra_wire::Clock::now(self.clock.as_ref()))
    }

    fn next_id(&self) -> String {
        self.n.set(self.n.get() + 1);
        format!("0190a000-0000-7000-8000-{:012x}", self.n.get())
    }

    fn resolve_req(&self, atlas: &str, goal: &str) -> Value {
        json!({
            "carp_version": "1.0", "request_id": self.next_id(), "timestamp": self.now(),
            "operation": "resolve",
            "requester": {"agent_id": "agent-1", "session_id": SESSION},
            "task": {"goal": goal}, "atlas_ids": [atlas],
        })
    }

    fn exec_req(
        &self,
        resolution_id: &str,
        action: &str,
        params: Value,
        key: Option<&str>,
    ) -> Value {
        let mut e =
            json!({"resolution_id": resolution_id, "action_id": action, "parameters": params});
        if let Some(k) = key {
            e["idempotency_key"] = json!(k);
        }
        json!({
            "carp_version": "1.0", "request_id": self.next_id(), "timestamp": self.now(),
            "operation": "execute",
            "requester": {"agent_id": "agent-1", "session_id": SESSION},
            "execution": e,
        })
    }

    fn resolve(&self, v: Value) -> Result<cra_carp::Resolution, cra_carp::validate::CarpError> {
        self.carp.resolve(&parse_request(&v).unwrap(), false, None)
    }

    fn execute(&self, v: Value) -> Result<ExecuteOutcome, cra_carp::validate::CarpError> {
        self.carp.execute_in_store(&parse_request(&v).unwrap())
    }

    /// Executes and, when cleared, "runs" an echo executor.
    fn run(
        &self,
        v: Value,
    ) -> Result<cra_carp::types::ExecuteResponse, cra_carp::validate::CarpError> {
        match self.execute(v)? {
            ExecuteOutcome::Run(run) => {
                let params = run.parameters.clone();
                self.carp.finish_execution(run, Ok(json!({"echo": params})))
            }
            ExecuteOutcome::Answered(r) | ExecuteOutcome::OpenApproval { response: r, .. } => Ok(r),
        }
    }
}

fn token(r: Result<impl std::fmt::Debug, cra_carp::validate::CarpError>) -> String {
    r.unwrap_err().token.as_str().to_owned()
}

fn validates(schema_text: &str, value: &Value) {
    let schema: Value = serde_json::from_str(schema_text).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{value:#}");
}

#[test]
fn shape_errors_name_every_bad_member() {
    let w = World::new();
    let mut r = w.resolve_req("com.example.ops", "x");
    r["carp_version"] = json!("2.0");
    r["requester"]["session_id"] = json!("not-a-uuid");
    r["task"]["risk_tier"] = json!("extreme");
    r["timestamp"] = json!("yesterday");
    r["atlas_ids"] = json!("com.example.ops");
    let errors = shape_errors(&r).unwrap();
    let mut pointers: Vec<&str> = errors.iter().map(|e| e.pointer.as_str()).collect();
    pointers.sort();
    assert_eq!(
        pointers,
        [
            "/atlas_ids",
            "/carp_version",
            "/requester/session_id",
            "/task/risk_tier",
            "/timestamp"
        ]
    );
    let e = parse_request(&r).unwrap_err();
    assert_eq!(e.token.as_str(), "invalid_request");
    assert_eq!(e.to_body().details.unwrap().errors.len(), 5);

    let mut no_task = w.resolve_req("com.example.ops", "x");
    no_task.as_object_mut().unwrap().remove("task");
    assert_eq!(shape_errors(&no_task).unwrap()[0].pointer, "/task");
    let mut exec = w.exec_req(
        "0190a000-0000-7000-8000-000000000001",
        "log.read",
        json!({}),
        None,
    );
    exec.as_object_mut().unwrap().remove("execution");
    assert_eq!(shape_errors(&exec).unwrap()[0].pointer, "/execution");
}

#[test]
fn peer_conformance_request_cases_agree() {
    let cases = crate::common::json(&crate::common::fixture("peer-conformance-cases.json"));
    let mut checked = 0;
    for c in cases["cases"].as_array().unwrap() {
        let id = c["test_id"].as_str().unwrap();
        if !id.starts_with("schema.carp.request") {
            continue;
        }
        let errors = shape_errors(&c["input"]).unwrap();
        match c["expected"].as_str().unwrap() {
            "VALID" => assert!(errors.is_empty(), "{id}: {errors:?}"),
            _ => assert!(
                errors
                    .iter()
                    .any(|e| e.pointer == c["error_path"].as_str().unwrap()),
                "{id}: expected an error at {}, got {errors:?}",
                c["error_path"]
            ),
        }
        checked += 1;
    }
    assert!(checked >= 3);
}

#[test]
fn session_rules_have_their_own_tokens() {
    let w = World::new();
    let mut r = w.resolve_req("com.example.ops", "x");
    r["requester"]["session_id"] = json!("0190a000-0000-7000-8000-0000000000ee");
    assert_eq!(token(w.resolve(r)), "session_not_found");

    let r = w.resolve_req("com.example.ops", "x");
    w.resolve(r.clone()).unwrap();
    assert_eq!(token(w.resolve(r)), "duplicate_request_id");

    let mut r = w.resolve_req("com.example.ops", "x");
    r["timestamp"] = json!("2026-01-05T10:05:01Z");
    assert_eq!(token(w.resolve(r)), "clock_skew");
    let mut r = w.resolve_req("com.example.ops", "x");
    r["timestamp"] = json!("2026-01-05T11:04:59+01:00");
    w.resolve(r).unwrap();

    let mut r = w.resolve_req("com.example.ops", "x");
    r["requester"]["agent_id"] = json!("agent-2");
    assert_eq!(token(w.resolve(r)), "forbidden");

    w.carp.end_session(SESSION).unwrap();
    assert_eq!(
        token(w.resolve(w.resolve_req("com.example.ops", "x"))),
        "session_inactive"
    );
}

/// `Carp::with_session`: the checks judge a request in the given session against the record the
/// caller read, not a second reading of the store (here the store says the session is open, the
/// record says it ended, and the record decides); a request in another session reads the store.
#[test]
fn a_session_given_to_the_engine_is_the_one_judged() {
    let w = World::new();
    let mut ended = w
        .carp
        .open_session(
            "agent-1",
            Some("0190a000-0000-7000-8000-0000000000e1"),
            None,
        )
        .unwrap();
    ended.ended_at = Some(w.now());
    let carp = w.carp.clone().with_session(ended.clone());
    let mut r = w.resolve_req("com.example.ops", "x");
    r["requester"]["session_id"] = json!(ended.session_id);
    let refused = carp.resolve(&parse_request(&r).unwrap(), false, None);
    assert_eq!(token(refused), "session_inactive");
    // The same request without the record: the store's open session admits it.
    w.carp
        .resolve(&parse_request(&r).unwrap(), false, None)
        .unwrap();
    // A request in another session is checked against the store.
    let other = carp.resolve(
        &parse_request(&w.resolve_req("com.example.ops", "x")).unwrap(),
        false,
        None,
    );
    other.unwrap();
}

#[test]
fn execute_rules_have_their_own_tokens() {
    let w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.support", "help"))
        .unwrap();
    let rid = res.resolution_id.clone();
    assert_eq!(
        token(w.execute(w.exec_req(
            "0190a000-0000-7000-8000-0000000000ee",
            "ticket.lookup",
            json!({}),
            None
        ))),
        "resolution_not_found"
    );
    assert_eq!(
        token(w.execute(w.exec_req(&rid, "ticket.delete", json!({}), None))),
        "action_not_allowed"
    );
    let ok = w
        .run(w.exec_req(&rid, "ticket.lookup", json!({"id": 1}), None))
        .unwrap();
    assert_eq!(ok.status, ExecuteStatus::Success);
    assert_eq!(ok.result, Some(json!({"echo": {"id": 1}})));
    validates(
        schemas::EXECUTE_RESPONSE,
        &serde_json::to_value(&ok).unwrap(),
    );
    validates(schemas::RESOLUTION, &serde_json::to_value(&res).unwrap());

    w.clock.advance(time::Duration::seconds(3600));
    assert_eq!(
        token(w.execute(w.exec_req(&rid, "ticket.lookup", json!({}), None))),
        "resolution_expired"
    );
}

#[test]
fn parameters_are_checked_against_the_schema_with_pointers() {
    let w = World::new();
    let res = w.resolve(w.resolve_req("golden", "x"));
    // The golden atlas is not in the table set; use the support atlas, whose schemas are open,
    // and the peer's atlas via its own world below.
    assert_eq!(res.unwrap_err().token.as_str(), "atlas_not_found");

    let clock = Arc::new(FixedClock::parse("2024-12-28T12:00:00Z").unwrap());
    let set = crate::common::atlas_set(&[crate::common::fixture("golden/simple-resolve/atlas")]);
    let carp = Carp::new(
        Arc::new(MemoryStore::new()),
        Arc::new(set),
        clock,
        Arc::new(SequentialIds::new(1, 1)),
        CarpConfig::default(),
    );
    carp.open_session(
        "conformance-test-agent",
        Some("00000000-0000-0000-0000-000000000100"),
        None,
    )
    .unwrap();
    let req = crate::common::json(&crate::common::fixture(
        "golden/simple-resolve/request.json",
    ));
    let res = carp
        .resolve(&parse_request(&req).unwrap(), false, None)
        .unwrap();
    let exec = json!({
        "carp_version": "1.0", "request_id": "00000000-0000-0000-0000-000000000002",
        "timestamp": "2024-12-28T12:00:00Z", "operation": "execute",
        "requester": {"agent_id": "conformance-test-agent", "session_id": "00000000-0000-0000-0000-000000000100"},
        "execution": {"resolution_id": res.resolution_id, "action_id": "resource.list",
                      "parameters": {"limit": 0, "offset": "x"}},
    });
    let e = carp.execute(&parse_request(&exec).unwrap()).unwrap_err();
    assert_eq!(e.token.as_str(), "invalid_parameters");
    let mut pointers: Vec<&str> = e.errors.iter().map(|f| f.pointer.as_str()).collect();
    pointers.sort();
    assert_eq!(
        pointers,
        [
            "/execution/parameters/limit",
            "/execution/parameters/offset"
        ]
    );
    let mut missing = exec.clone();
    missing["request_id"] = json!("00000000-0000-0000-0000-000000000003");
    missing["execution"]["action_id"] = json!("resource.get");
    missing["execution"]["parameters"] = json!({});
    let e = carp.execute(&parse_request(&missing).unwrap()).unwrap_err();
    assert_eq!(e.errors[0].pointer, "/execution/parameters/resource_id");
}

#[test]
fn rate_limits_count_executions_per_scope_and_window() {
    let w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap();
    let rid = res.resolution_id;
    for _ in 0..2 {
        let r = w
            .run(w.exec_req(&rid, "log.read", json!({}), None))
            .unwrap();
        assert_eq!(r.status, ExecuteStatus::Success);
    }
    let third = w
        .run(w.exec_req(&rid, "log.read", json!({}), None))
        .unwrap();
    assert_eq!(third.status, ExecuteStatus::Denied);
    assert_eq!(third.error.as_ref().unwrap().code, "rate_limit_exceeded");
    let limiter = res.constraints.iter().find(|c| {
        c.kind == cra_carp::types::ConstraintType::RateLimit && c.parameters.binds("log.read")
    });
    let limiter = limiter.and_then(|c| c.parameters.get("policy_id")).cloned();
    assert!(limiter.is_some(), "the resolution carries the rate limit");
    assert_eq!(
        third.error.as_ref().unwrap().details.as_ref().unwrap()["policy_id"],
        limiter.unwrap(),
        "the denial names the rate limit that refused it"
    );
    validates(
        schemas::EXECUTE_RESPONSE,
        &serde_json::to_value(&third).unwrap(),
    );
    // A new resolution now sees the exhausted session counter and denies log.read up front.
    let again = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap();
    assert!(
        again
            .denied_actions
            .iter()
            .any(|d| &*d.action_id == "log.read" && &*d.policy_id == "rl-logs")
    );
    // The 10 s window slides.
    w.clock.advance(time::Duration::seconds(10));
    let later = w
        .run(w.exec_req(&rid, "log.read", json!({}), None))
        .unwrap();
    assert_eq!(later.status, ExecuteStatus::Success);
}

#[test]
fn budgets_count_units_and_refuse_the_overdraft() {
    let w = World::new();
    let rid = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap()
        .resolution_id;
    for _ in 0..3 {
        assert_eq!(
            w.run(w.exec_req(&rid, "deploy.status", json!({}), None))
                .unwrap()
                .status,
            ExecuteStatus::Success
        );
    }
    let r = w
        .run(w.exec_req(&rid, "deploy.start", json!({}), None))
        .unwrap();
    let error = r.error.unwrap();
    assert_eq!(error.code, "budget_exhausted");
    // Spent units do not come back by waiting: a budget refusal says no wait.
    assert!(error.details.unwrap().get("retry_after_seconds").is_none());
}

#[test]
fn idempotency_key_returns_the_first_response() {
    let w = World::new();
    let rid = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap()
        .resolution_id;
    let first = w
        .run(w.exec_req(&rid, "deploy.status", json!({"n": 1}), Some("k1")))
        .unwrap();
    let second = w
        .run(w.exec_req(&rid, "deploy.status", json!({"n": 1}), Some("k1")))
        .unwrap();
    assert_eq!(
        first, second,
        "the repeat is answered with the first response"
    );
    // The key names that call: another one under it is refused, never answered as the first.
    let other = w
        .run(w.exec_req(&rid, "deploy.status", json!({"n": 2}), Some("k1")))
        .unwrap_err();
    assert_eq!(
        other.token,
        cra_wire::Token::IdempotencyKeyReused,
        "{other}"
    );
    // And it did not run again: the budget (3) still has two units.
    assert_eq!(
        w.run(w.exec_req(&rid, "deploy.status", json!({}), None))
            .unwrap()
            .status,
        ExecuteStatus::Success
    );
    assert_eq!(
        w.run(w.exec_req(&rid, "deploy.status", json!({}), None))
            .unwrap()
            .status,
        ExecuteStatus::Success
    );
    assert_eq!(
        w.run(w.exec_req(&rid, "deploy.status", json!({}), None))
            .unwrap()
            .status,
        ExecuteStatus::Denied
    );
}

#[test]
fn approval_gates_execution_until_granted() {
    let w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.ops", "deploy to production"))
        .unwrap();
    let approval_id = res.decision.approval_id.clone().unwrap();
    let pending = w
        .run(w.exec_req(&res.resolution_id, "deploy.start", json!({}), None))
        .unwrap();
    assert_eq!(pending.status, ExecuteStatus::PendingApproval);
    assert_eq!(pending.error.unwrap().code, "approval_pending");
    assert_eq!(w.carp.pending_approvals().unwrap().len(), 1);
    w.carp
        .decide_approval(&approval_id, ApprovalDecision::Grant, "human", Some("ok"))
        .unwrap();
    assert!(
        w.carp
            .decide_approval(&approval_id, ApprovalDecision::Reject, "human", None)
            .is_err()
    );
    let ran = w
        .run(w.exec_req(&res.resolution_id, "deploy.start", json!({}), None))
        .unwrap();
    assert_eq!(ran.status, ExecuteStatus::Success);

    // The approval ran its call: the same call again needs a new approval.
    let again = w
        .run(w.exec_req(&res.resolution_id, "deploy.start", json!({}), None))
        .unwrap();
    assert_eq!(again.status, ExecuteStatus::Denied);
    assert_eq!(again.error.unwrap().code, "approval_used");

    let res2 = w
        .resolve(w.resolve_req("com.example.ops", "deploy to production"))
        .unwrap();
    let ask = |params| w.run(w.exec_req(&res2.resolution_id, "deploy.start", params, None));
    assert_eq!(
        ask(json!({"env": "prod"})).unwrap().status,
        ExecuteStatus::PendingApproval
    );
    w.carp
        .decide_approval(
            res2.decision.approval_id.as_deref().unwrap(),
            ApprovalDecision::Reject,
            "human",
            None,
        )
        .unwrap();
    let denied = ask(json!({"env": "prod"})).unwrap();
    assert_eq!(denied.status, ExecuteStatus::Denied);
    assert_eq!(denied.error.unwrap().code, "approval_rejected");
}

#[test]
fn a_resolve_opens_no_approval_and_the_execute_opens_one_for_its_call() {
    let w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.ops", "deploy to production"))
        .unwrap();
    let approval_id = res.decision.approval_id.clone().unwrap();
    assert!(w.carp.pending_approvals().unwrap().is_empty());
    let rid = res.resolution_id.clone();
    let ask = |params| {
        w.run(w.exec_req(&rid, "deploy.start", params, None))
            .unwrap()
    };
    let pending = ask(json!({"env": "prod"}));
    assert_eq!(pending.status, ExecuteStatus::PendingApproval);
    let opened = w.carp.pending_approvals().unwrap();
    assert_eq!(opened.len(), 1);
    let call = opened[0].call.clone().unwrap();
    assert_eq!(opened[0].approval_id, approval_id);
    assert_eq!(call.execution_id, pending.execution_id);
    assert_eq!(call.action_id, "deploy.start");
    assert_eq!(
        call.parameters_hash,
        cra_wire::hash::canonical_digest(&json!({"env": "prod"}))
    );
    assert_eq!(
        Some(&call.atlas_digest),
        w.carp.atlases().digests().get(&call.atlas_id)
    );
    // Another call under the resolution is refused while the first waits, and once granted;
    // the refusal names the policy that gates the action.
    let other = ask(json!({"env": "staging"})).error.unwrap();
    assert_eq!(other.code, "approval_mismatch");
    assert_eq!(
        other.details.unwrap()["policy_id"],
        json!("approve-deploy-prod")
    );
    w.carp
        .decide_approval(&approval_id, ApprovalDecision::Grant, "human", None)
        .unwrap();
    let other = ask(json!({"env": "staging"}));
    assert_eq!(other.status, ExecuteStatus::Denied);
    assert_eq!(other.error.unwrap().code, "approval_mismatch");
    assert_eq!(ask(json!({"env": "prod"})).status, ExecuteStatus::Success);
    let twice = ask(json!({"env": "prod"})).error.unwrap();
    assert_eq!(twice.code, "approval_used");
    let details = twice.details.unwrap_or_default();
    assert!(details.get("retry_after_seconds").is_none());
}

/// A grant does not carry over to another version of the atlas it was asked under: the call,
/// executed after the atlas changed, is refused `approval_mismatch` naming both digests.
#[test]
fn an_approval_asked_under_one_atlas_version_does_not_run_under_another() {
    let mut w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.ops", "deploy to production"))
        .unwrap();
    let approval_id = res.decision.approval_id.clone().unwrap();
    let call = || {
        w.exec_req(
            &res.resolution_id,
            "deploy.start",
            json!({"env": "prod"}),
            None,
        )
    };
    assert_eq!(
        w.run(call()).unwrap().status,
        ExecuteStatus::PendingApproval
    );
    w.carp
        .decide_approval(&approval_id, ApprovalDecision::Grant, "human", None)
        .unwrap();
    // The same atlases, the ops atlas at another digest (as a new version of it would be).
    let changed = with_new_digest(&TABLE, "com.example.ops");
    let call = w.exec_req(
        &res.resolution_id,
        "deploy.start",
        json!({"env": "prod"}),
        None,
    );
    w.carp.set_atlases(Arc::new(changed));
    let refused = w.run(call).unwrap();
    assert_eq!(refused.status, ExecuteStatus::Denied);
    let error = refused.error.unwrap();
    assert_eq!(error.code, "approval_mismatch");
    assert!(error.message.contains(&"0".repeat(64)), "{}", error.message);
}

/// The table atlases (of `names`) as loaded, `atlas_id`'s at another digest, as a new version
/// of it would be.
fn with_new_digest(names: &[&str], atlas_id: &str) -> cra_carp::index::AtlasSet {
    let mut loaded: Vec<_> = names
        .iter()
        .map(|n| {
            let dir = crate::common::fixture(&format!("table/atlases/{n}"));
            cra_atlas::load_dir(&dir).unwrap()
        })
        .collect();
    if let Some(a) = loaded.iter_mut().find(|a| a.manifest.atlas_id == atlas_id) {
        a.digest = "0".repeat(64);
    }
    cra_carp::index::AtlasSet::from_loaded(&loaded).unwrap()
}

/// The table's atlases.
const TABLE: [&str; 5] = ["support", "ops", "empty", "priority", "priority-reversed"];

/// Issue 29, item 9: an emergency deny applies to outstanding resolutions. On `fda2190` a call
/// allowed by a resolution ran after its atlas had changed to deny it (execute walked only what
/// the resolution recorded).
#[test]
fn a_call_under_a_resolution_made_before_its_atlas_changed_is_resolution_stale() {
    let mut w = World::new();
    let lookup = |w: &World, rid: &str| w.exec_req(rid, "ticket.lookup", json!({"id": 1}), None);
    let before = w
        .resolve(w.resolve_req("com.example.support", "help"))
        .unwrap()
        .resolution_id;
    assert_eq!(
        w.run(lookup(&w, &before)).unwrap().status,
        ExecuteStatus::Success
    );
    // The support atlas changes (here only its digest, as any new version's): the resolution
    // made before no longer runs anything.
    w.carp
        .set_atlases(Arc::new(with_new_digest(&TABLE, "com.example.support")));
    let stale = w.execute(lookup(&w, &before)).err().unwrap();
    assert_eq!(stale.token, cra_wire::Token::ResolutionStale);
    assert!(
        stale.message.contains("com.example.support"),
        "{}",
        stale.message
    );
    // A resolution made under the atlas in force runs.
    let after = w
        .resolve(w.resolve_req("com.example.support", "help"))
        .unwrap()
        .resolution_id;
    assert_eq!(
        w.run(lookup(&w, &after)).unwrap().status,
        ExecuteStatus::Success
    );
    // An atlas no longer loaded allows nothing either.
    w.carp
        .set_atlases(Arc::new(with_new_digest(&["ops", "empty"], "none")));
    let gone = w.execute(lookup(&w, &after)).err().unwrap();
    assert_eq!(gone.token, cra_wire::Token::ResolutionStale);
    assert!(
        gone.message.contains("no longer loaded"),
        "{}",
        gone.message
    );
}

#[test]
fn time_windows_bind_executions() {
    let w = World::new();
    let mut r = w.resolve_req("com.example.support", "help");
    r["task"]["required_capabilities"] = json!(["payments"]);
    let res = w.resolve(r).unwrap();
    assert_eq!(
        w.run(w.exec_req(&res.resolution_id, "payment.charge", json!({}), None))
            .unwrap()
            .status,
        ExecuteStatus::Success
    );
    w.clock.advance(time::Duration::minutes(50)); // 10:50 still inside
    w.clock
        .set(cra_wire::clock::parse_rfc3339("2026-01-05T10:59:00Z").unwrap());
    assert_eq!(
        w.run(w.exec_req(&res.resolution_id, "payment.charge", json!({}), None))
            .unwrap()
            .status,
        ExecuteStatus::Success
    );
    // A resolution made at 17:30 is still valid at 18:10, but the window has closed.
    w.clock
        .set(cra_wire::clock::parse_rfc3339("2026-01-05T17:30:00Z").unwrap());
    let mut r = w.resolve_req("com.example.support", "help");
    r["task"]["required_capabilities"] = json!(["payments"]);
    let late = w.resolve(r).unwrap();
    w.clock
        .set(cra_wire::clock::parse_rfc3339("2026-01-05T18:10:00Z").unwrap());
    let out = w
        .run(w.exec_req(&late.resolution_id, "payment.charge", json!({}), None))
        .unwrap();
    assert_eq!(out.status, ExecuteStatus::Denied);
    assert_eq!(out.error.unwrap().code, "action_not_allowed");
}

#[test]
fn validate_evaluates_without_storing() {
    let w = World::new();
    let mut r = w.resolve_req("com.example.ops", "check");
    r["operation"] = json!("validate");
    let res = w.resolve(r).unwrap();
    assert_eq!(
        token(w.execute(w.exec_req(&res.resolution_id, "log.read", json!({}), None))),
        "resolution_not_found"
    );
    validates(schemas::REQUEST, &w.resolve_req("com.example.ops", "check"));
    validates(
        schemas::EXECUTE_REQUEST,
        &w.exec_req(&res.resolution_id, "log.read", json!({}), None),
    );
}

#[test]
fn explain_is_opt_in_and_names_deciders() {
    let w = World::new();
    let plain = w
        .resolve(w.resolve_req("com.example.support", "help"))
        .unwrap();
    assert!(plain.explain.is_none());
    assert!(
        !serde_json::to_value(&plain)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("explain")
    );
    let req = parse_request(&w.resolve_req("com.example.support", "help")).unwrap();
    let res = w.carp.resolve(&req, true, None).unwrap();
    validates(schemas::RESOLUTION, &serde_json::to_value(&res).unwrap());
    let ex = res.explain.unwrap();
    let by = |id: &str| ex.actions.iter().find(|a| a.action_id == id).unwrap();
    assert_eq!(by("ticket.delete").decided_by, "deny-ticket-delete");
    assert_eq!(
        serde_json::to_value(by("ticket.delete").deny_kind).unwrap(),
        "explicit"
    );
    assert_eq!(by("customer.export").decided_by, "default_deny");
    assert_eq!(
        serde_json::to_value(by("customer.export").deny_kind).unwrap(),
        "default"
    );
    let export = by("customer.export");
    let cap = export
        .policies
        .iter()
        .find(|p| p.policy_id == "allow-export")
        .unwrap();
    assert!(!cap.applies);
    assert_eq!(cap.conditions[0].condition, "capabilities");
    assert!(!cap.conditions[0].held);
    let charge = by("payment.charge");
    assert_eq!(charge.decided_by, "allow-charge");
    assert!(
        charge
            .policies
            .iter()
            .any(|p| p.policy_id == "budget-payments" && p.effect == "constraint")
    );
}

/// The resolution kept for executes is the answered one without its context blocks (they are in
/// the TRACE completion event), and an execute under it still works.
#[test]
fn stored_resolution_keeps_everything_but_the_context_blocks() {
    use cra_carp::store::{CarpStore, StoredResolution};
    let store = Arc::new(MemoryStore::new());
    let clock = Arc::new(FixedClock::parse("2026-01-05T10:00:00Z").unwrap());
    let carp = Carp::new(
        store.clone(),
        Arc::new(table_atlases()),
        clock,
        Arc::new(SequentialIds::new(1_767_607_200_000, 3)),
        CarpConfig::default(),
    );
    carp.open_session("agent-1", Some(SESSION), None).unwrap();
    let w = World::new();
    let answered = carp
        .resolve(
            &parse_request(&w.resolve_req("com.example.support", "help")).unwrap(),
            false,
            None,
        )
        .unwrap();
    assert!(
        !answered.context_blocks.is_empty(),
        "the support atlas has context"
    );
    let stored = store
        .get_resolution(&answered.resolution_id)
        .unwrap()
        .unwrap();
    assert!(stored.resolution.context_blocks.is_empty());
    assert_eq!(stored.resolution, StoredResolution::stored_form(&answered));
    let mut without = answered.clone();
    without.context_blocks.clear();
    assert_eq!(stored.resolution, without);
}

/// CARP 3.5: a refusal is still an execute response. `Carp::refused` answers the request with
/// status `denied` and the token, message and details in `error`; `approval_pending` with
/// status `pending_approval`.
#[test]
fn a_refusal_is_an_execute_response_naming_its_token() {
    let w = World::new();
    let res = w
        .resolve(w.resolve_req("com.example.ops", "deploy to production"))
        .unwrap();
    let req = w.exec_req(&res.resolution_id, "no.such.action", json!({}), None);
    let refusal = w.execute(req.clone()).unwrap_err();
    let parsed = parse_request(&req).unwrap();
    let response = w.carp.refused(&parsed, &refusal);
    assert_eq!(response.status, ExecuteStatus::Denied);
    assert_eq!(response.request_id, parsed.request_id);
    assert_eq!(response.resolution_id, res.resolution_id);
    assert!(response.result.is_none());
    let error = response.error.expect("a refusal names its token");
    assert_eq!(error.code, refusal.token.as_str());
    assert_eq!(error.message, refusal.message);

    let pending = cra_carp::validate::CarpError::new(cra_wire::Token::ApprovalPending, "wait");
    let waiting = w.carp.refused(&parsed, &pending);
    assert_eq!(waiting.status, ExecuteStatus::PendingApproval);
}

/// Issue 29, item 11: on `fda2190` the skew was compared in whole seconds, so a timestamp
/// 300.999999 s away passed a 300 s limit.
#[test]
fn clock_skew_is_checked_to_the_microsecond() {
    let w = World::new();
    let mut request = w.resolve_req("com.example.ops", "check");
    let at = |offset: time::Duration| {
        cra_wire::clock::format_timestamp(cra_wire::Clock::now(w.clock.as_ref()) + offset)
    };
    request["timestamp"] = json!(at(time::Duration::microseconds(300_000_001)));
    let e = w.resolve(request.clone()).unwrap_err();
    assert_eq!(e.token.as_str(), "clock_skew");
    assert!(e.message.contains("300.000001 s"), "{}", e.message);
    request["timestamp"] = json!(at(-time::Duration::microseconds(300_000_001)));
    assert_eq!(
        w.resolve(request.clone()).unwrap_err().token.as_str(),
        "clock_skew"
    );
    request["timestamp"] = json!(at(time::Duration::seconds(300)));
    assert!(w.resolve(request).is_ok(), "exactly the limit is accepted");
}

/// Issue 29, item 11: an execute at an instant before its resolution was made (a clock that went
/// back, or a replica far behind another) was accepted on `fda2190`; replicas' clocks may still
/// disagree by the allowed skew.
#[test]
fn an_execute_before_its_resolution_by_more_than_the_skew_is_refused() {
    let w = World::new();
    let rid = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap()
        .resolution_id;
    // Replicas' clocks may disagree by the allowed skew (300 s here), not more.
    w.clock.advance(-time::Duration::microseconds(300_000_001));
    let mut request = w.exec_req(&rid, "deploy.status", json!({}), None);
    request["timestamp"] = json!(cra_wire::clock::format_timestamp(
        cra_wire::Clock::now(w.clock.as_ref()) + time::Duration::seconds(1)
    ));
    let e = w.execute(request).unwrap_err();
    assert_eq!(e.token.as_str(), "clock_skew", "{}", e.message);
    assert_eq!(e.errors[0].pointer, "/execution/resolution_id");
    w.clock.advance(time::Duration::microseconds(1));
    let ok = w
        .run(w.exec_req(&rid, "deploy.status", json!({}), None))
        .unwrap();
    assert_eq!(ok.status, ExecuteStatus::Success, "at its instant it runs");
}

/// Issue 29, item 11: on `fda2190` an idempotency key answered its first response forever, even
/// once its resolution had expired; a key lives no longer than its resolution.
#[test]
fn an_idempotency_key_expires_with_its_resolution() {
    let w = World::new();
    let rid = w
        .resolve(w.resolve_req("com.example.ops", "check"))
        .unwrap()
        .resolution_id;
    let first = w
        .run(w.exec_req(&rid, "deploy.status", json!({}), Some("k1")))
        .unwrap();
    assert_eq!(first.status, ExecuteStatus::Success);
    w.clock.advance(time::Duration::seconds(3600));
    assert_eq!(
        token(w.execute(w.exec_req(&rid, "deploy.status", json!({}), Some("k1")))),
        "resolution_expired"
    );
}

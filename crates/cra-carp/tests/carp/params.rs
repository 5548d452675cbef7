//! Conditions on a call's parameters through the engine (`specs/carp.md`, "Conditions on
//! parameters"): pending at resolve without intended parameters, decided at resolve with them,
//! always decided at execute; approvals bound to the parameters they were asked for; limits
//! charged only when their tests hold; and `risk_tiers` judged on the riskier of the task's and
//! the action's tier. The atlas is `tests/fixtures/params/atlas`.

use std::cell::Cell;
use std::sync::Arc;

use cra_carp::Resolution;
use cra_carp::engine::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::memory::MemoryStore;
use cra_carp::store::ApprovalDecision;
use cra_carp::types::{ConstraintType, ExecuteStatus};
use cra_carp::validate::parse_request;
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};

use crate::common::{atlas_set, fixture};

const SESSION: &str = "0190a000-0000-7000-8000-00000000e001";

struct World {
    carp: Carp,
    clock: Arc<FixedClock>,
    n: Cell<u32>,
}

impl World {
    fn new() -> Self {
        Self::with_store(Arc::new(MemoryStore::new()))
    }

    fn with_store(store: Arc<MemoryStore>) -> Self {
        let clock = Arc::new(FixedClock::parse("2026-01-05T10:00:00Z").unwrap());
        let carp = Carp::new(
            store,
            Arc::new(atlas_set(&[fixture("params/atlas")])),
            clock.clone(),
            Arc::new(SequentialIds::new(1_767_607_200_000, 7)),
            CarpConfig::default(),
        );
        carp.open_session("agent-1", Some(SESSION), None).unwrap();
        Self {
            carp,
            clock,
            n: Cell::new(0),
        }
    }

    fn header(&self, operation: &str) -> Value {
        self.n.set(self.n.get() + 1);
        json!({
            "carp_version": "1.0",
            "request_id": format!("0190a000-0000-7000-8000-{:012x}", self.n.get()),
            "timestamp": cra_wire::clock::format_timestamp(cra_wire::Clock::now(self.clock.as_ref())),
            "operation": operation,
            "requester": {"agent_id": "agent-1", "session_id": SESSION},
        })
    }

    /// Resolves `goal` with these intended parameters (`null`: none).
    fn resolve(&self, goal: &str, intended: Value) -> Resolution {
        let mut r = self.header("resolve");
        r["task"] = json!({"goal": goal});
        if !intended.is_null() {
            r["task"]["intended_parameters"] = intended;
        }
        self.carp
            .resolve(&parse_request(&r).unwrap(), false, None)
            .unwrap()
    }

    /// Executes and runs the echo executor when cleared: `(status, error token, policy id)`.
    fn run(&self, res: &Resolution, action: &str, params: Value) -> (String, String, String) {
        let mut r = self.header("execute");
        r["execution"] = json!({
            "resolution_id": res.resolution_id, "action_id": action, "parameters": params,
        });
        let request = parse_request(&r).unwrap();
        let resp = match self.carp.execute_in_store(&request) {
            Ok(ExecuteOutcome::Run(run)) => self
                .carp
                .finish_execution(run, Ok(json!({"ok": true})))
                .unwrap(),
            Ok(
                ExecuteOutcome::Answered(resp)
                | ExecuteOutcome::OpenApproval { response: resp, .. },
            ) => resp,
            Err(e) => {
                let policy = e.policy_id.clone().unwrap_or_default();
                return ("refused".into(), e.token.as_str().into(), policy);
            }
        };
        let status = match resp.status {
            ExecuteStatus::Success => "success",
            ExecuteStatus::Error => "error",
            ExecuteStatus::Denied => "denied",
            ExecuteStatus::PendingApproval => "pending_approval",
        };
        let err = resp.error.as_ref();
        let token = err.map(|e| e.code.clone()).unwrap_or_default();
        let policy = err
            .and_then(|e| {
                e.details
                    .as_ref()?
                    .get("policy_id")?
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        (status.into(), token, policy)
    }
}

impl World {
    /// The `retry_after_seconds` of a refused `log.write`, if it was refused with one.
    fn retry_after(&self, res: &Resolution, params: Value) -> Option<u64> {
        let mut r = self.header("execute");
        r["execution"] = json!({
            "resolution_id": res.resolution_id, "action_id": "log.write", "parameters": params,
        });
        match self.carp.execute_in_store(&parse_request(&r).unwrap()) {
            Ok(
                ExecuteOutcome::Answered(resp)
                | ExecuteOutcome::OpenApproval { response: resp, .. },
            ) => resp.error?.details?.get("retry_after_seconds")?.as_u64(),
            _ => None,
        }
    }
}

fn allowed(res: &Resolution) -> Vec<&str> {
    res.allowed_actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect()
}

fn denied_by<'a>(res: &'a Resolution, action: &str) -> Option<&'a str> {
    res.denied_actions
        .iter()
        .find(|d| d.action_id.as_str() == action)
        .map(|d| d.policy_id.as_str())
}

fn gated(res: &Resolution, action: &str) -> bool {
    res.allowed_actions
        .iter()
        .any(|a| a.action_id.as_str() == action && a.requires_confirmation)
}

fn ok() -> (String, String, String) {
    ("success".into(), String::new(), String::new())
}

fn refused(token: &str, policy: &str) -> (String, String, String) {
    ("denied".into(), token.into(), policy.into())
}

#[test]
fn a_pending_deny_lists_the_action_and_execute_decides_on_the_branch() {
    let w = World::new();
    let res = w.resolve("Tidy up old branches", Value::Null);
    assert!(allowed(&res).contains(&"branch.delete"));
    let c = res
        .constraints
        .iter()
        .find(|c| c.constraint_id == "parameters:branch.delete")
        .expect("a parameters constraint for branch.delete");
    assert_eq!(c.kind, ConstraintType::Parameters);
    assert_eq!(
        serde_json::to_value(&c.parameters).unwrap()["steps"],
        json!([
            {"policy_id": "deny-protected-branches", "type": "deny",
             "reason": "Protected branches cannot be deleted.",
             "when": [{"pointer": "/branch", "matches": ["main", "release/*"]}]},
            {"policy_id": "allow-work", "type": "allow"}
        ])
    );
    let deny = refused("action_not_allowed", "deny-protected-branches");
    for (branch, want) in [
        (json!({"branch": "main"}), deny.clone()),
        (json!({"branch": "release/1.4"}), deny.clone()),
        (json!({"branch": "maintenance"}), ok()),
        (json!({"branch": "mainline-docs"}), ok()),
        (json!({"branch": "feature/main"}), ok()),
        // An absent member satisfies no test, so the deny does not hold.
        (json!({}), ok()),
    ] {
        assert_eq!(
            w.run(&res, "branch.delete", branch.clone()),
            want,
            "{branch}"
        );
    }
}

/// The `parameters` constraint's fields depend only on the steps walked (without intended
/// parameters): a second resolve shares the first one's, equal to what it would have written;
/// a resolve with intended parameters writes its own, with their digest.
#[test]
fn resolves_walking_the_same_steps_share_one_parameters_constraint() {
    let w = World::new();
    let fields = |res: &Resolution| {
        res.constraints
            .iter()
            .find(|c| c.constraint_id == "parameters:branch.delete")
            .map(|c| c.parameters.fields.clone())
            .expect("a parameters constraint for branch.delete")
    };
    let (first, second) = (
        w.resolve("Tidy up", Value::Null),
        w.resolve("Clean", Value::Null),
    );
    assert!(Arc::ptr_eq(&fields(&first), &fields(&second)));
    assert_eq!(
        fields(&second)["steps"][0]["policy_id"],
        "deny-protected-branches"
    );
    let intended = w.resolve("Tidy up", json!({"branch.delete": {"branch": "feature/x"}}));
    let own = fields(&intended);
    assert!(!Arc::ptr_eq(&fields(&first), &own));
    assert_eq!(own["steps"], fields(&first)["steps"]);
    assert!(own["intended_parameters_hash"].is_string());
    assert!(fields(&first).get("intended_parameters_hash").is_none());
}

#[test]
fn the_goal_cannot_talk_around_a_deny_on_parameters() {
    let w = World::new();
    for goal in [
        "Delete main",
        "Clean up",
        "Remove the default branch, not main",
    ] {
        let res = w.resolve(goal, Value::Null);
        let got = w.run(&res, "branch.delete", json!({"branch": "main"}));
        assert_eq!(
            got,
            refused("action_not_allowed", "deny-protected-branches"),
            "{goal}"
        );
    }
}

#[test]
fn intended_parameters_decide_at_resolve() {
    let w = World::new();
    let res = w.resolve(
        "Clean up",
        json!({"branch.delete": {"branch": "release/2"}}),
    );
    assert_eq!(
        denied_by(&res, "branch.delete"),
        Some("deny-protected-branches")
    );
    assert!(
        !res.constraints
            .iter()
            .any(|c| c.constraint_id == "parameters:branch.delete")
    );
    let fine = w.resolve("Clean up", json!({"branch.delete": {"branch": "old"}}));
    assert!(allowed(&fine).contains(&"branch.delete"));
    // Execute still decides on the call: other parameters than the intended ones are judged.
    assert_eq!(
        w.run(&fine, "branch.delete", json!({"branch": "main"})),
        refused("action_not_allowed", "deny-protected-branches")
    );
}

#[test]
fn an_approval_on_parameters_binds_the_call_it_was_asked_for() {
    let w = World::new();
    // Without intended parameters: allowed, not gated; a large refund needs an approval the
    // resolution did not ask for, a small one runs.
    let open = w.resolve("Refund the customer", Value::Null);
    assert!(!gated(&open, "refund.issue"));
    assert_eq!(
        w.run(&open, "refund.issue", json!({"amount": 600})),
        refused("approval_required", "approve-large-refunds")
    );
    assert_eq!(w.run(&open, "refund.issue", json!({"amount": 500})), ok());

    // With them: gated, and the approval runs only that call.
    let asked = w.resolve(
        "Refund the customer",
        json!({"refund.issue": {"amount": 600}}),
    );
    assert!(gated(&asked, "refund.issue"));
    let approval = asked.decision.approval_id.clone().unwrap();
    assert_eq!(
        w.run(&asked, "refund.issue", json!({"amount": 600})).0,
        "pending_approval"
    );
    w.carp
        .decide_approval(&approval, ApprovalDecision::Grant, "lead", None)
        .unwrap();
    assert_eq!(
        w.run(&asked, "refund.issue", json!({"amount": 700})),
        refused("approval_mismatch", "approve-large-refunds")
    );
    // The digest is of the canonical form, so 600.0 is another call than 600.
    assert_eq!(
        w.run(&asked, "refund.issue", json!({"amount": 600.0})).1,
        "approval_mismatch"
    );
    assert_eq!(w.run(&asked, "refund.issue", json!({"amount": 600})), ok());
    // A call that needs no approval runs under the gated resolution too.
    assert_eq!(w.run(&asked, "refund.issue", json!({"amount": 20})), ok());
}

#[test]
fn a_limit_on_parameters_charges_only_the_calls_it_tests() {
    let w = World::new();
    let res = w.resolve("Write logs", Value::Null);
    assert_eq!(w.run(&res, "log.write", json!({"level": "debug"})), ok());
    assert_eq!(
        w.run(&res, "log.write", json!({"level": "debug"})),
        refused("rate_limit_exceeded", "limit-debug-logs")
    );
    for _ in 0..3 {
        assert_eq!(w.run(&res, "log.write", json!({"level": "info"})), ok());
    }
    // The refusal says when the debug allowance comes back: a full window after the one
    // charge, less the time since.
    assert_eq!(w.retry_after(&res, json!({"level": "debug"})), Some(60));
    w.clock.advance(time::Duration::seconds(45));
    assert_eq!(w.retry_after(&res, json!({"level": "debug"})), Some(15));
    w.clock.advance(time::Duration::seconds(15));
    assert_eq!(w.run(&res, "log.write", json!({"level": "debug"})), ok());
    // The exhausted limit does not deny at resolve: it may not apply to the call.
    let again = w.resolve("Write logs", Value::Null);
    assert!(allowed(&again).contains(&"log.write"));
    // With intended parameters it applies, and it is exhausted.
    let debug = w.resolve("Write logs", json!({"log.write": {"level": "debug"}}));
    assert_eq!(denied_by(&debug, "log.write"), Some("limit-debug-logs"));
}

#[test]
fn a_pending_allow_keeps_the_action_and_execute_applies_the_default_deny() {
    let w = World::new();
    let res = w.resolve("Deploy", Value::Null);
    assert!(allowed(&res).contains(&"deploy.run"));
    assert_eq!(w.run(&res, "deploy.run", json!({"env": "prod"})), ok());
    assert_eq!(
        w.run(&res, "deploy.run", json!({"env": "dev"})),
        refused("action_not_allowed", "default_deny")
    );
    assert_eq!(
        w.run(&res, "deploy.run", json!({})),
        refused("action_not_allowed", "default_deny")
    );
    let dev = w.resolve("Deploy", json!({"deploy.run": {"env": "dev"}}));
    assert_eq!(denied_by(&dev, "deploy.run"), Some("default_deny"));
}

#[test]
fn risk_tiers_read_the_action_tier_when_riskier_than_the_task() {
    let w = World::new();
    // db.drop is critical in the atlas; a task declared low cannot lower it.
    let mut r = w.header("resolve");
    r["task"] = json!({"goal": "Drop the scratch database", "risk_tier": "low"});
    let res = w
        .carp
        .resolve(&parse_request(&r).unwrap(), false, None)
        .unwrap();
    assert!(gated(&res, "db.drop"), "{:#?}", res.allowed_actions);
}

#[test]
fn a_resolution_without_parameter_conditions_has_no_parameters_constraint() {
    let w = World::new();
    let res = w.resolve("Drop the scratch database", Value::Null);
    assert!(
        !res.constraints
            .iter()
            .any(|c| c.kind == ConstraintType::Parameters && c.parameters.binds("db.drop"))
    );
}

/// Shadow mode: a `log_only` deny never changes the answer, and the resolve's outcomes say what
/// it would have decided.
#[test]
fn a_log_only_policy_is_recorded_and_never_decides() {
    let w = World::new();
    let mut r = w.header("resolve");
    r["task"] = json!({"goal": "Deploy"});
    let request = parse_request(&r).unwrap();
    let res = w.resolve("Deploy", Value::Null);
    assert!(
        allowed(&res).contains(&"deploy.run"),
        "the shadow deny decided"
    );
    let (explained, _) = cra_carp::eval::resolve_with_origins(
        &request,
        w.carp.atlases(),
        &cra_carp::eval::CountersSnapshot::empty(),
        cra_wire::Clock::now(w.clock.as_ref()),
        &SequentialIds::new(0, 0),
        &cra_carp::eval::ResolveOptions {
            explain: cra_carp::eval::ExplainLevel::Outcomes,
            ..Default::default()
        },
    )
    .unwrap();
    let deploy = explained
        .explain
        .unwrap()
        .actions
        .into_iter()
        .find(|a| a.action_id == "deploy.run")
        .unwrap();
    assert_eq!(deploy.outcome, cra_carp::explain::Outcome::Allow);
    let shadow = deploy.shadow.expect("the shadow outcome");
    assert_eq!(shadow.outcome, cra_carp::explain::Outcome::Deny);
    assert_eq!(shadow.decided_by, "shadow-deny-deploys");
    // Execute ignores it too.
    assert_eq!(w.run(&res, "deploy.run", json!({"env": "prod"})), ok());
}

/// Shadow mode at execute through the engine: a deploy the `log_only` deny covers is decided as
/// enforced, with the shadow's deny beside it; a stored plan that cannot be walked records no
/// shadow and refuses nothing.
#[test]
fn an_execute_carries_its_shadow_and_a_broken_plan_changes_nothing() {
    use cra_carp::store::CarpStore;
    let store = Arc::new(MemoryStore::new());
    let w = World::with_store(store.clone());
    let res = w.resolve("Deploy", Value::Null);
    let execute = |w: &World, resolution_id: &str| {
        let mut r = w.header("execute");
        r["execution"] = json!({
            "resolution_id": resolution_id, "action_id": "deploy.run", "parameters": {"env": "prod"},
        });
        w.carp
            .decide_execute(&parse_request(&r).unwrap(), false)
            .unwrap()
    };
    let decided = execute(&w, &res.resolution_id);
    assert!(matches!(decided.outcome, ExecuteOutcome::Run(_)));
    let shadow = decided.shadow.expect("the log_only deny disagrees");
    assert_eq!(
        (shadow.outcome, shadow.decided_by.as_str()),
        (cra_carp::explain::Outcome::Deny, "shadow-deny-deploys")
    );

    let mut broken = store.get_resolution(&res.resolution_id).unwrap().unwrap();
    broken.resolution.resolution_id = "0190a000-0000-7000-8000-0000000b0000".into();
    let plan = broken.origins.get_mut("deploy.run").unwrap();
    plan.shadow.as_mut().expect("a stored plan").enforced = vec![json!({"type": "allow"})];
    store.put_resolution(&broken).unwrap();
    let decided = execute(&w, &broken.resolution.resolution_id);
    assert!(matches!(decided.outcome, ExecuteOutcome::Run(_)), "refused");
    assert_eq!(decided.shadow, None);
}

/// Shadow mode never changes an answer: a `log_only` limit whose counter cannot be read records
/// no shadow, and the call runs as enforced; readable, the same limit reports the second call
/// within its hour as a disagreement.
#[test]
fn a_shadow_limit_whose_counter_cannot_be_read_records_nothing_and_refuses_nothing() {
    let store = Arc::new(MemoryStore::new());
    let w = World::with_store(store.clone());
    let res = w.resolve("Send the weekly report", Value::Null);
    let send = |w: &World| {
        let mut r = w.header("execute");
        r["execution"] = json!({
            "resolution_id": res.resolution_id, "action_id": "report.send", "parameters": {},
        });
        let request = parse_request(&r).unwrap();
        let decided = w.carp.decide_execute(&request, false).unwrap();
        let ExecuteOutcome::Run(run) = decided.outcome else {
            panic!("refused: {:?}", decided.outcome);
        };
        w.carp
            .finish_execution(run, Ok(json!({"ok": true})))
            .unwrap();
        decided.shadow.map(|s| s.decided_by)
    };
    assert_eq!(send(&w), None, "the first report fits the shadow limit");
    assert_eq!(send(&w).as_deref(), Some("shadow-limit-reports"));
    store.set_counters_unreadable(true);
    assert_eq!(send(&w), None, "an unreadable counter records no shadow");
}

//! Issue 25's "deny main" scenario over HTTP with the example github-ops atlas: the protected
//! branch deny decides on the call's `/branch`, so no wording of the goal gets `main` deleted,
//! the executor is never reached, and the refusal is recorded with the deciding policy.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::support::{
    MAINT, TestServer, assert_refused, execute_request, rid, start_with_executor,
};

const DENY: &str = "deny-protected-branch-deletion";

async fn resolve(s: &TestServer, sid: &str, goal: &str, intended: Option<Value>) -> Value {
    let mut req = crate::support::resolve_request("maintainer-bot", sid, &rid(), &["maintain"]);
    req["task"]["goal"] = json!(goal);
    if let Some(i) = intended {
        req["task"]["intended_parameters"] = i;
    }
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    res
}

fn delete(sid: &str, resolution: &Value, branch: &str) -> Value {
    execute_request(
        "maintainer-bot",
        sid,
        &rid(),
        resolution["resolution_id"].as_str().unwrap(),
        "branch.delete",
        json!({"owner": "acme", "repo": "widgets", "branch": branch}),
    )
}

#[tokio::test]
async fn main_is_never_deleted_whatever_the_goal_says() {
    let (s, calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    for goal in [
        "Delete main",
        "Tidy up stale branches",
        "Remove mainline-docs",
    ] {
        let res = resolve(&s, &sid, goal, None).await;
        let listed = res["allowed_actions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action_id"] == "branch.delete");
        assert!(listed, "{goal}: branch.delete is decided at execute: {res}");
        for branch in ["main", "release/2.1"] {
            let got = s
                .post(Some(MAINT), "/v1/execute", &delete(&sid, &res, branch))
                .await;
            assert_refused(&got, 403, "action_not_allowed");
            assert_eq!(
                got.1["error"]["details"]["policy_id"], DENY,
                "{goal} {branch}"
            );
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the executor was reached");
    let violations: Vec<Value> = s
        .events(&sid)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "policy.violated")
        .map(|e| e["payload"]["policy_id"].clone())
        .collect();
    assert_eq!(violations, vec![json!(DENY); 6]);
    s.stop().await;
}

#[tokio::test]
async fn intended_parameters_decide_the_resolve_and_risk_comes_from_the_atlas() {
    let (s, _calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let main = json!({"branch.delete": {"owner": "acme", "repo": "widgets", "branch": "main"}});
    let res = resolve(&s, &sid, "Clean up", Some(main)).await;
    let denied = res["denied_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["action_id"] == "branch.delete")
        .cloned();
    assert_eq!(denied.unwrap()["policy_id"], DENY, "{res}");

    // Another branch: allowed, and gated, because branch.delete is high-risk in the atlas even
    // though the request says the task is low-risk.
    let other = json!({"branch.delete": {"owner": "acme", "repo": "widgets", "branch": "agent/x"}});
    let res = resolve(&s, &sid, "Clean up", Some(other)).await;
    let entry = res["allowed_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["action_id"] == "branch.delete")
        .cloned()
        .unwrap();
    assert_eq!(entry["requires_confirmation"], true, "{res}");
    let got = s
        .post(Some(MAINT), "/v1/execute", &delete(&sid, &res, "agent/x"))
        .await;
    assert_eq!(got.1["status"], "pending_approval", "{}", got.1);
    s.stop().await;
}

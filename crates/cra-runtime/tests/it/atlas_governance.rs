//! Issue 29, item 9: who may put an atlas in force, and what a changed atlas does to what was
//! decided under the one before. On `fda2190` any author installed or replaced any atlas, and a
//! resolution made before an emergency deny still ran its calls.

use serde_json::{Value, json};

use crate::support::*;
use crate::system::inline_example;

/// `dev.cra.github-ops` at version 1.2.0 with an emergency deny of every action.
fn emergency_version() -> Value {
    let mut atlas = inline_example("dev.cra.github-ops");
    atlas["manifest"]["version"] = json!("1.2.0");
    let path = "policies/guardrails.json";
    let mut policies: Value = serde_json::from_str(atlas["files"][path].as_str().unwrap()).unwrap();
    policies.as_array_mut().unwrap().push(json!({
        "policy_id": "emergency-stop",
        "type": "deny",
        "description": "An incident is open: agents act on no repository until it is closed.",
        "actions": ["*"],
        "priority": 10000,
        "parameters": {"reason": "incident open: every action is stopped"}
    }));
    atlas["files"][path] = json!(policies.to_string());
    atlas
}

#[tokio::test]
async fn an_emergency_deny_applies_to_outstanding_resolutions_and_pending_approvals() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let resolve = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &resolve).await;
    assert_eq!(st, 200, "{res}");
    let resolution = res["resolution_id"].as_str().unwrap().to_owned();
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;

    let (st, installed) = s
        .post(Some(OPERATOR), "/v1/atlases", &emergency_version())
        .await;
    assert_eq!(st, 201, "{installed}");
    assert_eq!(installed["replaced"]["version"], "1.1.0");

    // The resolution made before the deny runs nothing, and the refusal is in the chain.
    let params = json!({"owner": "acme", "repo": "widgets", "number": 42});
    let read = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution,
        "pr.get",
        params.clone(),
    );
    let refused = s.post(Some(MAINT), "/v1/execute", &read).await;
    assert_refused(&refused, 409, "resolution_stale");
    let message = refused.1["error"]["message"].as_str().unwrap();
    assert!(message.contains("dev.cra.github-ops"), "{message}");
    let events = s.events(&sid).await;
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "policy.violated", "{last}");
    assert_eq!(last["payload"]["rule"], "resolution_stale", "{last}");

    // The approval asked before: granted, its call still does not run.
    let path = format!("/v1/approvals/{approval}");
    let (st, decided) = s
        .post(Some(OPERATOR), &path, &json!({"decision": "grant"}))
        .await;
    assert_eq!(st, 200, "{decided}");
    let merge = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution,
        "pr.merge",
        MERGE_42.clone(),
    );
    let (st, answer) = s.post(Some(MAINT), "/v1/execute", &merge).await;
    assert_ne!(answer["status"], "success", "{answer}");
    assert_eq!(st, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "approval_mismatch", "{answer}");

    // A new resolution is decided under the atlas in force: everything is denied.
    let again = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &again).await;
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["allowed_actions"], json!([]), "{res}");
    let denied = res["denied_actions"].as_array().unwrap();
    assert!(
        denied.iter().all(|d| d["policy_id"] == "emergency-stop"),
        "{res}"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_author_installs_only_in_granted_namespaces_and_never_replaces_without_an_operator() {
    let s = TestServer::start().await;
    // alice's namespaces are com.example and dev.cra (the test keys file).
    let mut foreign = inline_example("com.example.payments");
    foreign["manifest"]["atlas_id"] = json!("org.elsewhere.payments");
    let refused = s.post(Some(AUTHOR), "/v1/atlases", &foreign).await;
    assert_error(&refused, 403, "forbidden");
    let message = refused.1["message"].as_str().unwrap();
    assert!(message.contains("com.example, dev.cra"), "{message}");
    // `com.example` grants ids under it, not ids that only start with its text.
    let mut lookalike = foreign.clone();
    lookalike["manifest"]["atlas_id"] = json!("com.examplebank.payments");
    assert_error(
        &s.post(Some(AUTHOR), "/v1/atlases", &lookalike).await,
        403,
        "forbidden",
    );
    let (st, _) = s
        .get(Some(AGENT), "/v1/atlases/org.elsewhere.payments")
        .await;
    assert_eq!(st, 404, "a refused install changes nothing");

    // In a granted namespace, a new atlas is installed; the atlas in force is not replaced.
    let payments = inline_example("com.example.payments");
    let (st, body) = s.post(Some(AUTHOR), "/v1/atlases", &payments).await;
    assert_eq!(st, 201, "{body}");
    let mut ops = emergency_version();
    ops["manifest"]["description"] = json!("an author's rewrite");
    let refused = s.post(Some(AUTHOR), "/v1/atlases", &ops).await;
    assert_error(&refused, 403, "forbidden");
    assert!(
        refused.1["message"].as_str().unwrap().contains("operator"),
        "{}",
        refused.1
    );
    let (_, manifest) = s.get(Some(AGENT), "/v1/atlases/dev.cra.github-ops").await;
    assert_eq!(manifest["version"], "1.1.0", "the atlas in force stays");

    // Each refusal is recorded in the operator audit chain.
    let audit = cra_store::retention::OPERATOR_AUDIT_SESSION;
    let kinds = s.event_types(audit).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "atlas.refused").count(),
        3,
        "{kinds:?}"
    );
    s.stop().await;
}

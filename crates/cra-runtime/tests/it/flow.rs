//! The end-to-end flow of the issue: resolve, an allowed execute, a denied execute, the approval
//! flow, each producing exactly the expected TRACE events; the chain fetched over HTTP verifies
//! with the Appendix B Python code.

use serde_json::json;

use crate::support::*;

fn count(types: &[String], t: &str) -> usize {
    types.iter().filter(|x| *x == t).count()
}

#[tokio::test]
async fn resolve_execute_deny_and_approve_are_traced_in_order() {
    let (s, calls) = start_with_executor().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;

    // Resolve: merges need approval.
    let (st, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]),
        )
        .await;
    assert_eq!(st, 200, "{res}");
    assert_eq!(res["decision"]["type"], "requires_approval", "{res}");
    assert!(res.get("explain").is_none());
    let resolution_id = res["resolution_id"].as_str().unwrap().to_owned();
    let approval_id = res["decision"]["approval_id"].as_str().unwrap().to_owned();
    let trace_id = res["trace_id"].as_str().unwrap().to_owned();
    let candidates = res["allowed_actions"].as_array().unwrap().len()
        + res["denied_actions"].as_array().unwrap().len();
    let blocks = res["context_blocks"].as_array().unwrap().len();
    let types = s.event_types(&sid).await;
    let mut expected = vec![
        "session.started".to_owned(),
        "carp.request.received".to_owned(),
    ];
    expected.extend(std::iter::repeat_n(
        "policy.evaluated".to_owned(),
        candidates,
    ));
    expected.extend(std::iter::repeat_n("context.injected".to_owned(), blocks));
    // A resolve opens no approval: the execute of the gated action does (below).
    expected.push("carp.resolution.completed".into());
    assert_eq!(types, expected);
    let events = s.events(&sid).await;
    for e in &events[1..] {
        assert_eq!(e["trace_id"], trace_id.as_str(), "one trace per resolve");
        assert_eq!(e["span_id"], resolution_id.as_str());
    }
    assert_eq!(
        events[1]["payload"]["atlas_digests"]["dev.cra.github-ops"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    assert_eq!(events.last().unwrap()["payload"]["resolution"], res);

    // Allowed execute through the operator's http executor.
    let (st, ex) = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &execute_request(
                "maintainer-bot",
                &sid,
                &rid(),
                &resolution_id,
                "repo.get",
                json!({"owner": "octo", "repo": "hello"}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{ex}");
    assert_eq!(ex["status"], "success");
    assert_eq!(ex["result"]["ok"], true);
    assert_eq!(ex["trace_id"], trace_id.as_str());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    let execution_id = ex["execution_id"].as_str().unwrap().to_owned();
    let events = s.events(&sid).await;
    let tail: Vec<&str> = events[events.len() - 3..]
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        tail,
        ["action.requested", "action.approved", "action.executed"]
    );
    for e in &events[events.len() - 3..] {
        assert_eq!(e["payload"]["execution_id"], execution_id.as_str());
        assert_eq!(e["span_id"], execution_id.as_str());
        assert_eq!(e["parent_span_id"], resolution_id.as_str());
        assert_eq!(e["trace_id"], trace_id.as_str());
    }
    assert!(
        events[events.len() - 3]["payload"]["parameters_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    // Denied execute: force pushes are never allowed; the attempt is recorded.
    let before = s.events(&sid).await.len();
    let r = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &execute_request(
                "maintainer-bot",
                &sid,
                &rid(),
                &resolution_id,
                "branch.forcepush",
                json!({"owner": "o", "repo": "r", "branch": "main"}),
            ),
        )
        .await;
    assert_refused(&r, 403, "action_not_allowed");
    let types = s.event_types(&sid).await;
    assert_eq!(
        &types[before..],
        ["action.requested", "action.denied", "policy.violated"]
    );
    // Both name the policy that denied the action at resolve time (CRA 4.3.3, 4.3.4).
    let denier = res["denied_actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["action_id"] == "branch.forcepush")
        .map(|d| d["policy_id"].clone())
        .expect("the resolution denies force pushes");
    assert_ne!(denier, "default_deny", "a deny policy, named");
    let events = s.events(&sid).await;
    assert_eq!(events[before + 1]["payload"]["policy_id"], denier);
    let violated = &events[before + 2]["payload"];
    assert_eq!(violated["policy_id"], denier);
    assert_eq!(violated["violation_type"], "action_not_allowed");
    assert!(violated["details"].as_str().is_some_and(|d| !d.is_empty()));

    // Merge before approval: pending, recorded, not run.
    let merge = json!({"owner": "octo", "repo": "hello", "number": 42});
    let r = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &execute_request(
                "maintainer-bot",
                &sid,
                &rid(),
                &resolution_id,
                "pr.merge",
                merge.clone(),
            ),
        )
        .await;
    assert_refused(&r, 409, "approval_pending");
    let types = s.event_types(&sid).await;
    assert_eq!(
        &types[types.len() - 3..],
        [
            "action.requested",
            "approval.requested",
            "action.pending_approval"
        ],
        "the execute opens the approval for its call, and waits: not a denial"
    );
    let events = s.events(&sid).await;
    let opened = &events[events.len() - 2]["payload"];
    assert_eq!(opened["approval_id"], approval_id.as_str());
    assert_eq!(opened["execution_id"], r.1["execution_id"]);
    assert_eq!(opened["action_id"], "pr.merge");
    assert_eq!(
        opened["parameters_hash"].as_str().unwrap(),
        cra_wire::hash::canonical_digest(&merge)
    );
    let pending = events.last().unwrap().clone();
    assert_eq!(
        pending["payload"]["approval_id"],
        res["decision"]["approval_id"]
    );
    assert_eq!(pending["payload"]["execution_id"], r.1["execution_id"]);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    // The operator sees and grants it; agents may not.
    let (st, pending) = s.get(Some(OPERATOR), "/v1/approvals?status=pending").await;
    assert_eq!(st, 200);
    assert_eq!(pending[0]["approval_id"], approval_id.as_str());
    assert_error(
        &s.post(
            Some(MAINT),
            &format!("/v1/approvals/{approval_id}"),
            &json!({"decision": "grant"}),
        )
        .await,
        403,
        "forbidden",
    );
    let (st, dec) = s
        .post(
            Some(OPERATOR),
            &format!("/v1/approvals/{approval_id}"),
            &json!({"decision": "grant", "note": "checked"}),
        )
        .await;
    assert_eq!(st, 200, "{dec}");
    assert_eq!(dec["status"], "granted");
    assert_error(
        &s.post(
            Some(OPERATOR),
            &format!("/v1/approvals/{approval_id}"),
            &json!({"decision": "reject"}),
        )
        .await,
        409,
        "already_exists",
    );
    assert_eq!(
        s.event_types(&sid).await.last().unwrap(),
        "approval.granted"
    );

    // Now the merge runs.
    let (st, ex) = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &execute_request(
                "maintainer-bot",
                &sid,
                &rid(),
                &resolution_id,
                "pr.merge",
                merge,
            ),
        )
        .await;
    assert_eq!(st, 200, "{ex}");
    assert_eq!(ex["status"], "success");
    let types = s.event_types(&sid).await;
    assert_eq!(
        &types[types.len() - 3..],
        ["action.requested", "action.approved", "action.executed"]
    );
    assert_eq!(count(&types, "action.executed"), 2);

    // A Relay deposit made in this session lands in its chain.
    let (st, _) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "flow", "name": "Flow"}),
        )
        .await;
    assert_eq!(st, 201);
    let (st, d) = s
        .post(
            Some(MAINT),
            "/v1/projects/flow/packages",
            &crate::relay::package("pkg_flow", "flow", "maintainer-bot", Some(&sid)),
        )
        .await;
    assert_eq!(st, 201, "{d}");
    let events = s.events(&sid).await;
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "relay.package.deposited");
    assert_eq!(last["payload"]["content_hash"], d["content_hash"]);

    // The whole sequence, start to end.
    let types = s.event_types(&sid).await;
    let mut want: Vec<String> = vec!["session.started".into(), "carp.request.received".into()];
    want.extend(std::iter::repeat_n(
        "policy.evaluated".to_owned(),
        candidates,
    ));
    want.extend(std::iter::repeat_n("context.injected".to_owned(), blocks));
    for t in [
        "carp.resolution.completed",
        "action.requested",
        "action.approved",
        "action.executed",
        "action.requested",
        "action.denied",
        "policy.violated",
        "action.requested",
        "approval.requested",
        "action.pending_approval",
        "approval.granted",
        "action.requested",
        "action.approved",
        "action.executed",
        "relay.package.deposited",
    ] {
        want.push(t.into());
    }
    assert_eq!(types, want);
    // Every event has the envelope and the payload members TRACE 4.3 requires of its type.
    for e in s.events(&sid).await {
        let errors = cra_carp::events::event_schema_errors(&e);
        assert!(errors.is_empty(), "{}: {errors:?}", e["event_type"]);
    }

    // The chain fetched over HTTP verifies with the Appendix B Python code.
    assert_eq!(
        s.delete(Some(MAINT), &format!("/v1/sessions/{sid}"))
            .await
            .0,
        204
    );
    verify_with_python(&s, &sid).await;
    s.stop().await;
}

/// Fetches the JSONL export and runs `tools/appendix_b.py verify` on it.
pub(crate) async fn verify_with_python(s: &TestServer, sid: &str) {
    let text = s
        .http
        .get(s.url(&format!("/v1/traces/{sid}")))
        .bearer_auth(ADMIN)
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chain.trace.jsonl");
    std::fs::write(&path, &text).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/appendix_b.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "appendix_b.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn builtin_and_agent_performed_actions_and_idempotent_repeats() {
    let s = TestServer::start().await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let (_, res) = s
        .post(
            Some(MAINT),
            "/v1/resolve",
            &resolve_request("maintainer-bot", &sid, &rid(), &["repo-read"]),
        )
        .await;
    let resolution_id = res["resolution_id"].as_str().unwrap().to_owned();
    // No executor configured for http:github: the failure is answered and recorded.
    let (st, ex) = s
        .post(
            Some(MAINT),
            "/v1/execute",
            &execute_request(
                "maintainer-bot",
                &sid,
                &rid(),
                &resolution_id,
                "repo.get",
                json!({"owner": "o", "repo": "r"}),
            ),
        )
        .await;
    assert_eq!(st, 200, "{ex}");
    assert_eq!(ex["status"], "error");
    assert_eq!(ex["error"]["code"], "executor_not_configured");
    assert_eq!(s.event_types(&sid).await.last().unwrap(), "action.failed");
    // Idempotency: the same key returns the first response without running again.
    let mut req = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution_id,
        "repo.get",
        json!({"owner": "o", "repo": "r"}),
    );
    req["execution"]["idempotency_key"] = json!("k-1");
    let (_, first) = s.post(Some(MAINT), "/v1/execute", &req).await;
    req["request_id"] = json!(rid());
    let (st, again) = s.post(Some(MAINT), "/v1/execute", &req).await;
    assert_eq!(st, 200);
    assert_eq!(first, again);
    assert_eq!(
        s.event_types(&sid).await.last().unwrap(),
        "action.deduplicated"
    );
    s.stop().await;
}

//! Relay over HTTP: projects with grants, deposits recorded in the depositor's session or the
//! project's audit chain, facts, review, and refusals.

use serde_json::{Value, json};

use crate::support::*;

pub fn package(id: &str, project: &str, agent: &str, session: Option<&str>) -> Value {
    json!({
        "package_id": id,
        "project_id": project,
        "relay_version": "0.1",
        "title": format!("Package {id}"),
        "status": "complete",
        "package_type": "standard",
        "review_type": "none",
        "created_at": "2026-03-02T10:00:00Z",
        "created_by": {"id": agent, "type": "agent", "session_id": session},
        "open_questions": ["Who owns the dashboard?"],
        "decisions_made": ["ship it"],
        "handoff_note": "handoff"
    })
}

#[tokio::test]
async fn deposits_go_to_the_session_or_the_project_chain_and_grants_hold() {
    let s = TestServer::start().await;
    let (st, p) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "proj-a", "name": "A"}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let audit = p["audit_session_id"].as_str().unwrap().to_owned();
    assert!(cra_wire::id::is_uuid_v7(&audit));
    let sid = s.open_session(MAINT, "maintainer-bot").await;

    // With created_by.session_id of the depositor's own session: recorded there.
    let (st, d) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-a/packages",
            &package("pkg_1", "proj-a", "maintainer-bot", Some(&sid)),
        )
        .await;
    assert_eq!(st, 201, "{d}");
    assert!(d["content_hash"].as_str().unwrap().starts_with("sha256:"));
    let types = s.event_types(&sid).await;
    assert_eq!(types.last().unwrap(), "relay.package.deposited");
    // Identical replay: 200, nothing new recorded.
    let (st, _) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-a/packages",
            &package("pkg_1", "proj-a", "maintainer-bot", Some(&sid)),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.event_types(&sid).await.len(), types.len());
    // Without a session: the project's audit chain.
    let (st, _) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-a/packages",
            &package("pkg_2", "proj-a", "maintainer-bot", None),
        )
        .await;
    assert_eq!(st, 201);
    let audit_types = s.event_types(&audit).await;
    assert_eq!(
        audit_types,
        [
            "session.started",
            "relay.project.created",
            "relay.package.deposited"
        ]
    );
    let (_, sess) = s.get(Some(ADMIN), &format!("/v1/sessions/{audit}")).await;
    assert_eq!(sess["agent_id"], "project:proj-a");

    // Facts: assert, query, invalidate, each recorded.
    let (st, f) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-a/facts",
            &json!({"subject": "svc", "predicate": "owner", "value": "team-a"}),
        )
        .await;
    assert_eq!(st, 201, "{f}");
    let (st, cur) = s
        .get(Some(MAINT), "/v1/projects/proj-a/facts?subject=svc")
        .await;
    assert_eq!(st, 200);
    assert_eq!(cur.as_array().unwrap().len(), 1, "{cur}");
    let (st, inv) = s
        .delete(
            Some(MAINT),
            "/v1/projects/proj-a/facts?subject=svc&predicate=owner",
        )
        .await;
    assert_eq!(st, 200, "{inv}");
    assert_eq!(inv["invalidated"], 1);
    let audit_types = s.event_types(&audit).await;
    assert_eq!(
        &audit_types[3..],
        ["relay.fact.asserted", "relay.fact.invalidated"]
    );

    // Reads: pull specific, latest, orient.
    assert_eq!(s.get(Some(MAINT), "/v1/packages/pkg_1").await.0, 200);
    let (st, latest) = s
        .get(
            Some(MAINT),
            "/v1/projects/proj-a/packages?mode=latest&limit=5",
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(latest["packages"].as_array().unwrap().len(), 2);
    assert_eq!(
        s.get(Some(MAINT), "/v1/projects/proj-a/orient").await.0,
        200
    );

    // Grants: another agent may neither read nor write; an auditor reads; identity is checked.
    assert_error(
        &s.get(Some(AGENT2), "/v1/packages/pkg_1").await,
        403,
        "unauthorized",
    );
    assert_error(
        &s.post(
            Some(AGENT2),
            "/v1/projects/proj-a/packages",
            &package("pkg_3", "proj-a", "other-bot", None),
        )
        .await,
        403,
        "unauthorized",
    );
    assert_eq!(s.get(Some(AUDITOR), "/v1/packages/pkg_1").await.0, 200);
    assert_error(
        &s.post(
            Some(MAINT),
            "/v1/projects/proj-a/packages",
            &package("pkg_4", "proj-a", "other-bot", None),
        )
        .await,
        403,
        "identity_mismatch",
    );
    // Archived projects refuse writes.
    assert_eq!(
        s.post(Some(MAINT), "/v1/projects/proj-a/archive", &json!({}))
            .await
            .0,
        200
    );
    assert_error(
        &s.post(
            Some(MAINT),
            "/v1/projects/proj-a/packages",
            &package("pkg_5", "proj-a", "maintainer-bot", None),
        )
        .await,
        403,
        "project_archived",
    );
    assert_error(
        &s.get(Some(MAINT), "/v1/projects/nope").await,
        404,
        "project_not_found",
    );
    // Every chain verifies.
    for id in [&sid, &audit] {
        let (_, r) = s
            .post(Some(ADMIN), &format!("/v1/traces/{id}/verify"), &json!({}))
            .await;
        assert_eq!(r["valid"], true, "{r}");
    }
    s.stop().await;
}

/// flag_for_review and review over HTTP: the refusals (unknown package, no grant, a transition
/// §5.3 forbids) change nothing; the allowed transitions are answered and recorded.
#[tokio::test]
async fn flag_and_review_follow_the_transitions_and_are_recorded() {
    let s = TestServer::start().await;
    let (st, p) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "proj-r", "name": "R"}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let audit = p["audit_session_id"].as_str().unwrap().to_owned();
    let mut draft = package("pkg_r", "proj-r", "maintainer-bot", None);
    draft["status"] = json!("draft");
    let (st, d) = s
        .post(Some(MAINT), "/v1/projects/proj-r/packages", &draft)
        .await;
    assert_eq!(st, 201, "{d}");
    let recorded = s.event_types(&audit).await.len();

    let flag = json!({"review_type": "human", "note": "please check the numbers"});
    assert_error(
        &s.post(Some(MAINT), "/v1/packages/pkg_missing/flag", &flag)
            .await,
        404,
        "package_not_found",
    );
    assert_error(
        &s.post(Some(AGENT2), "/v1/packages/pkg_r/flag", &flag).await,
        403,
        "unauthorized",
    );
    assert_eq!(
        s.event_types(&audit).await.len(),
        recorded,
        "refusals record nothing"
    );

    let (st, flagged) = s.post(Some(MAINT), "/v1/packages/pkg_r/flag", &flag).await;
    assert_eq!(st, 200, "{flagged}");
    assert_eq!(flagged["status"], "awaiting_review");
    assert_eq!(flagged["review_type"], "human");
    let (st, reviewed) = s
        .post(
            Some(MAINT),
            "/v1/packages/pkg_r/review",
            &json!({"outcome": "complete", "note": "numbers match"}),
        )
        .await;
    assert_eq!(st, 200, "{reviewed}");
    assert_eq!(reviewed["status"], "complete");
    assert_eq!(
        &s.event_types(&audit).await[recorded..],
        ["relay.package.flagged", "relay.package.reviewed"]
    );

    // Nothing leaves `complete`.
    assert_error(
        &s.post(Some(MAINT), "/v1/packages/pkg_r/flag", &flag).await,
        400,
        "invalid_transition",
    );
    assert_eq!(s.event_types(&audit).await.len(), recorded + 2);
}

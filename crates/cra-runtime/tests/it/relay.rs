//! Relay over HTTP: projects with grants, deposits recorded in the depositor's session or the
//! project's audit chain, facts, review, and refusals.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::*;

pub(crate) fn package(id: &str, project: &str, agent: &str, session: Option<&str>) -> Value {
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
        404,
        "package_not_found",
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
        404,
        "package_not_found",
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
            Some(ADMIN),
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

/// Human review gates (Relay §5.3, L3; specs/relay.md "Review gates"): the reviewer is the
/// authenticated key's actor, never the body. A human review is completed by a human key that is
/// not the author's (200); the author's own human key and any agent key get 403
/// `review_not_allowed`, and a refusal changes and records nothing.
#[tokio::test]
async fn human_reviews_need_a_human_key_other_than_the_authors() {
    let s = TestServer::start().await;
    let (st, p) = s
        .post(
            Some(AUTHOR),
            "/v1/projects",
            &json!({"project_id": "proj-h", "name": "H", "members": ["ops-bot", "maintainer-bot", "oscar"]}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let audit = p["audit_session_id"].as_str().unwrap().to_owned();
    let mut draft = package("pkg_h", "proj-h", "alice", None);
    draft["status"] = json!("draft");
    draft["created_by"]["type"] = json!("human");
    let (st, d) = s
        .post(Some(AUTHOR), "/v1/projects/proj-h/packages", &draft)
        .await;
    assert_eq!(st, 201, "{d}");
    let (st, flagged) = s
        .post(
            Some(AUTHOR),
            "/v1/packages/pkg_h/flag",
            &json!({"review_type": "human"}),
        )
        .await;
    assert_eq!(st, 200, "{flagged}");
    let recorded = s.event_types(&audit).await.len();
    let complete = json!({"outcome": "complete", "note": "looks right"});
    for key in [AUTHOR, AGENT, MAINT] {
        let r = s
            .post(Some(key), "/v1/packages/pkg_h/review", &complete)
            .await;
        assert_error(&r, 403, "review_not_allowed");
    }
    let (_, still) = s.get(Some(ADMIN), "/v1/packages/pkg_h").await;
    assert_eq!(still, flagged, "refusals change nothing");
    assert_eq!(
        s.event_types(&audit).await.len(),
        recorded,
        "nor record anything"
    );

    let (st, done) = s
        .post(Some(OPERATOR), "/v1/packages/pkg_h/review", &complete)
        .await;
    assert_eq!(st, 200, "{done}");
    assert_eq!(done["status"], "complete");
    let events = s.events(&audit).await;
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "relay.package.reviewed");
    assert_eq!(
        last["payload"]["reviewer"],
        json!({"id": "oscar", "type": "human"})
    );

    // An agent review is completed by an agent that is not the author.
    let mut bot_draft = package("pkg_b", "proj-h", "ops-bot", None);
    bot_draft["status"] = json!("draft");
    assert_eq!(
        s.post(Some(AGENT), "/v1/projects/proj-h/packages", &bot_draft)
            .await
            .0,
        201
    );
    let flag = json!({"review_type": "agent"});
    assert_eq!(
        s.post(Some(AGENT), "/v1/packages/pkg_b/flag", &flag)
            .await
            .0,
        200
    );
    for key in [AGENT, OPERATOR] {
        let r = s
            .post(Some(key), "/v1/packages/pkg_b/review", &complete)
            .await;
        assert_error(&r, 403, "review_not_allowed");
    }
    let (st, done) = s
        .post(Some(MAINT), "/v1/packages/pkg_b/review", &complete)
        .await;
    assert_eq!(st, 200, "{done}");
    s.stop().await;
}

/// Attribution comes from the authenticated key: an agent key cannot deposit a package as
/// `created_by.type: human` nor assert a fact as `asserted_by.type: human` (403
/// `identity_mismatch` with the pointer of the field), and nothing is stored.
#[tokio::test]
async fn an_agent_key_cannot_write_as_a_human() {
    let s = TestServer::start().await;
    let audit = new_project(&s, MAINT, "proj-t").await;
    let recorded = s.event_types(&audit).await.len();
    let mut forged = package("pkg_t", "proj-t", "maintainer-bot", None);
    forged["created_by"]["type"] = json!("human");
    let r = s
        .post(Some(MAINT), "/v1/projects/proj-t/packages", &forged)
        .await;
    assert_error(&r, 403, "identity_mismatch");
    assert_eq!(r.1["details"]["errors"][0]["pointer"], "/created_by/type");
    assert_error(
        &s.get(Some(MAINT), "/v1/packages/pkg_t").await,
        404,
        "package_not_found",
    );
    let r = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-t/facts",
            &json!({"subject": "svc", "predicate": "owner", "value": "v",
                    "asserted_by": {"id": "maintainer-bot", "type": "human"}}),
        )
        .await;
    assert_error(&r, 403, "identity_mismatch");
    assert_eq!(r.1["details"]["errors"][0]["pointer"], "/asserted_by/type");
    let (_, facts) = s
        .get(Some(MAINT), "/v1/projects/proj-t/facts?history=true")
        .await;
    assert_eq!(facts, json!([]));
    assert_eq!(s.event_types(&audit).await.len(), recorded);
    s.stop().await;
}

/// Recorded time with two runtimes on one PostgreSQL schema whose test clocks are 120 s apart:
/// in commit order the recorded instants (`created_at`) never decrease, and `recorded_as_of` at
/// each of them answers, from either server, what was believed after the last write stamped at
/// or before it.
#[tokio::test]
async fn recorded_time_never_goes_back_across_skewed_servers_on_one_postgres() {
    let Some(url) = cra_store::testing::postgres_url(
        "recorded_time_never_goes_back_across_skewed_servers_on_one_postgres",
    ) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "relay_skew");
    let on_schema = |url: String, name: String| {
        move |c: &mut cra_runtime::config::RuntimeConfig| {
            c.postgres = Some(url);
            c.postgres_schema = name;
            c.postgres_pool = 4;
        }
    };
    let name = schema.name().to_owned();
    let a = TestServer::start_blocking_seeded(42, on_schema(url.clone(), name.clone())).await;
    let b = TestServer::start_blocking_seeded(4242, on_schema(url, name)).await;
    b.clock.advance(time::Duration::seconds(-120));
    new_project(&a, MAINT, "proj-skew").await;

    let mut commits: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let mut state = BTreeMap::new();
    for i in 0..12 {
        let (server, subject) = (if i % 3 == 1 { &b } else { &a }, ["x", "y"][i % 2]);
        let value = format!("v{i}");
        let (st, f) = server
            .post(
                Some(MAINT),
                "/v1/projects/proj-skew/facts",
                &json!({"subject": subject, "predicate": "status", "value": value}),
            )
            .await;
        assert_eq!(st, 201, "{f}");
        state.insert(subject.to_owned(), value);
        commits.push((f["created_at"].as_str().unwrap().to_owned(), state.clone()));
        a.clock.advance(time::Duration::seconds(1));
        b.clock.advance(time::Duration::seconds(1));
    }
    // Every answer is gathered first and the servers and schema are released before asserting,
    // so a failure reports itself instead of aborting in a destructor.
    let mut answers = Vec::new();
    for (t, _) in &commits {
        for server in [&a, &b] {
            let (st, facts) = server
                .get(
                    Some(MAINT),
                    &format!("/v1/projects/proj-skew/facts?recorded_as_of={t}"),
                )
                .await;
            answers.push((t.clone(), st, facts));
        }
    }
    a.stop_blocking().await;
    b.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();

    for pair in commits.windows(2) {
        assert!(
            pair[0].0 <= pair[1].0,
            "recorded {} then {}",
            pair[0].0,
            pair[1].0
        );
    }
    for (t, st, facts) in answers {
        assert_eq!(st, 200, "{facts}");
        let want = &commits.iter().rev().find(|(r, _)| *r <= t).unwrap().1;
        let got: BTreeMap<String, String> = facts
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["subject"].as_str().unwrap().to_owned(),
                    f["value"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        assert_eq!(&got, want, "believed as recorded at {t}");
    }
}

/// The §7 fields a fact carries on the wire, and nothing else unless the asserter sent it.
const FACT_KEYS: [&str; 12] = [
    "asserted_by",
    "confidence",
    "created_at",
    "fact_id",
    "predicate",
    "project_id",
    "source_package_id",
    "subject",
    "tags",
    "valid_from",
    "valid_to",
    "value",
];

#[track_caller]
fn assert_wire_fact(f: &Value, extra: &[&str]) {
    let mut want: Vec<&str> = FACT_KEYS
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect();
    want.sort_unstable();
    let got: Vec<&str> = f.as_object().unwrap().keys().map(String::as_str).collect();
    let mut got = got;
    got.sort_unstable();
    assert_eq!(got, want, "{f}");
}

/// Creates project `id` as `key`'s actor (201); answers its audit chain's session id.
pub(crate) async fn new_project(s: &TestServer, key: &str, id: &str) -> String {
    let (st, p) = s
        .post(
            Some(key),
            "/v1/projects",
            &json!({"project_id": id, "name": id}),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    p["audit_session_id"].as_str().unwrap().to_owned()
}

/// Fact routes answer §7 wire objects: POST the stored fact, GET a bare array for current,
/// as-of-valid-time, as-recorded-at and history views, DELETE the count; the recorded times stay
/// internal and the TRACE event carries the same wire fact.
#[tokio::test]
async fn fact_routes_answer_wire_facts_in_every_view() {
    let s = TestServer::start().await;
    let audit = new_project(&s, MAINT, "proj-f").await;
    let facts = "/v1/projects/proj-f/facts";

    let (st, f1) = s
        .post(
            Some(MAINT),
            facts,
            &json!({"subject": "svc", "predicate": "owner", "value": "team-a",
                    "valid_from": "2026-03-01T00:00:00Z", "tags": ["ops"], "x-note": {"why": "handover"}}),
        )
        .await;
    assert_eq!(st, 201, "{f1}");
    assert_wire_fact(&f1, &["x-note"]);
    assert_eq!(f1["x-note"]["why"], "handover");
    assert_eq!(f1["valid_to"], Value::Null);
    assert_eq!(f1["asserted_by"]["id"], "maintainer-bot");
    assert_eq!(f1["created_at"], "2026-03-02T10:00:00.000000Z");
    // The event in the project's audit chain carries the same wire fact.
    let events = s.events(&audit).await;
    let ev = events.last().unwrap();
    assert_eq!(ev["event_type"], "relay.fact.asserted");
    assert_eq!(ev["payload"]["fact"], f1);

    // An hour later the owner changes (valid_from defaults to "now").
    s.clock.advance(time::Duration::hours(1));
    let (st, f2) = s
        .post(
            Some(MAINT),
            facts,
            &json!({"subject": "svc", "predicate": "owner", "value": "team-b"}),
        )
        .await;
    assert_eq!(st, 201, "{f2}");
    assert_wire_fact(&f2, &[]);
    assert_eq!(f2["valid_from"], "2026-03-02T11:00:00.000000Z");
    // Another predicate is untouched by the supersession.
    s.post(
        Some(MAINT),
        facts,
        &json!({"subject": "svc", "predicate": "tier", "value": "1"}),
    )
    .await;

    let values = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("a bare array, got {v}"))
            .iter()
            .map(|f| {
                assert_wire_fact(
                    f,
                    if f.get("x-note").is_some() {
                        &["x-note"]
                    } else {
                        &[]
                    },
                );
                f["value"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let sr = &s;
    let get = move |q: &str| {
        let path = format!("{facts}?{q}");
        async move { sr.get(Some(MAINT), &path).await }
    };
    let (st, cur) = get("subject=svc&predicate=owner").await;
    assert_eq!((st, values(&cur)), (200, vec!["team-b".to_owned()]));
    let (_, all_current) = get("subject=svc").await;
    assert_eq!(values(&all_current), ["team-b", "1"]);
    let (_, then) = get("subject=svc&predicate=owner&as_of=2026-03-01T12:00:00Z").await;
    assert_eq!(values(&then), ["team-a"]);
    let (_, before) = get("subject=svc&predicate=owner&as_of=2026-02-01T00:00:00Z").await;
    assert_eq!(values(&before), Vec::<String>::new());
    // What we believed at T0 (only team-a recorded) and half an hour later (still team-a), and
    // after the second assert.
    let (_, believed) =
        get("subject=svc&predicate=owner&recorded_as_of=2026-03-02T10:30:00Z").await;
    assert_eq!(values(&believed), ["team-a"]);
    let (_, believed) =
        get("subject=svc&predicate=owner&recorded_as_of=2026-03-02T11:00:00Z").await;
    assert_eq!(values(&believed), ["team-b"]);
    let (_, believed) =
        get("subject=svc&predicate=owner&recorded_as_of=2026-03-02T09:00:00Z").await;
    assert_eq!(values(&believed), Vec::<String>::new());
    let (_, hist) = get("subject=svc&predicate=owner&history=true").await;
    assert_eq!(values(&hist), ["team-a", "team-b"]);
    assert_eq!(hist[0]["valid_to"], hist[1]["valid_from"]);
    assert_eq!(hist[1]["valid_to"], Value::Null);

    // Refusals: a view that is not one, two views at once, a time that is not RFC 3339.
    assert_error(&get("history=yes").await, 400, "invalid_request");
    assert_error(
        &get("history=true&as_of=2026-03-01T00:00:00Z").await,
        400,
        "invalid_request",
    );
    let bad = get("as_of=yesterday").await;
    assert_error(&bad, 400, "invalid_schema");
    assert_eq!(bad.1["details"]["errors"][0]["pointer"], "/as_of");
    assert_error(&get("colour=blue").await, 400, "invalid_request");

    // Invalidation answers the count; a second one finds nothing current.
    s.clock.advance(time::Duration::hours(1));
    let del = "/v1/projects/proj-f/facts?subject=svc&predicate=owner";
    let (st, n) = s.delete(Some(MAINT), del).await;
    assert_eq!((st, n), (200, json!({"invalidated": 1})));
    let (st, n) = s.delete(Some(MAINT), del).await;
    assert_eq!((st, n), (200, json!({"invalidated": 0})));
    let (_, cur) = get("subject=svc&predicate=owner").await;
    assert_eq!(values(&cur), Vec::<String>::new());
    let (_, hist) = get("subject=svc&predicate=owner&history=true").await;
    assert_eq!(hist[1]["valid_to"], "2026-03-02T12:00:00.000000Z");
    // A reader without a grant reads nothing.
    assert_error(&s.get(Some(AGENT2), facts).await, 403, "unauthorized");
    s.stop().await;
}

fn searchable(id: &str, title: &str, body: &str, extra: Value) -> Value {
    let mut p = package(id, "proj-s", "maintainer-bot", None);
    p["title"] = json!(title);
    p["content_md"] = json!(body);
    p["open_questions"] = json!([]);
    p["decisions_made"] = json!([]);
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

/// `pull` mode `relevant` answers packages (best chunk per package) with their scores, in the
/// shape of `latest` plus `matches`; the filters apply to both modes; bad filters are refused.
#[tokio::test]
async fn pull_relevant_answers_packages_with_scores_and_filters() {
    let s = TestServer::start().await;
    new_project(&s, MAINT, "proj-s").await;
    let docs = [
        searchable(
            "pkg_s1",
            "Vector index latency",
            "Retrieval latency of the vector index doubled after the upgrade.",
            json!({"topic": "search", "tags": ["perf", "retrieval"], "created_at": "2026-02-01T10:00:00Z"}),
        ),
        searchable(
            "pkg_s2",
            "Dashboard colours",
            "The dashboard uses a blue theme.",
            json!({"topic": "ui", "tags": ["design"], "created_at": "2026-02-05T10:00:00Z"}),
        ),
        searchable(
            "pkg_s3",
            "Retrieval benchmark",
            "Recall at five for retrieval improved; retrieval is now the bottleneck.",
            json!({"topic": "search", "tags": ["retrieval"], "package_type": "milestone", "created_at": "2026-02-10T10:00:00Z"}),
        ),
        searchable(
            "pkg_s4",
            "Retrieval cache",
            "A cache in front of retrieval.",
            json!({"topic": "infra", "tags": ["perf", "retrieval"], "created_at": "2026-02-20T10:00:00Z"}),
        ),
    ];
    for d in &docs {
        let (st, b) = s.post(Some(MAINT), "/v1/projects/proj-s/packages", d).await;
        assert_eq!(st, 201, "{b}");
    }
    let sr = &s;
    let list = move |q: &str| {
        let path = format!("/v1/projects/proj-s/packages?{q}");
        async move { sr.get(Some(MAINT), &path).await }
    };
    let ids = |v: &Value| -> Vec<String> {
        let mut ids: Vec<String> = v["packages"]
            .as_array()
            .unwrap_or_else(|| panic!("packages in {v}"))
            .iter()
            .map(|p| p["package_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };

    let (st, r) = list("mode=relevant&query=retrieval&limit=5").await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(ids(&r), ["pkg_s1", "pkg_s3", "pkg_s4"]);
    assert_eq!(r["quarantined"], json!([]));
    let (packages, matches) = (
        r["packages"].as_array().unwrap(),
        r["matches"].as_array().unwrap(),
    );
    assert_eq!(packages.len(), matches.len());
    let mut last = f64::INFINITY;
    for (p, m) in packages.iter().zip(matches) {
        // The package exactly as deposited plus its hash; the match beside it, in the same order.
        let deposited = docs
            .iter()
            .find(|d| d["package_id"] == p["package_id"])
            .unwrap();
        let mut bare = p.clone();
        let hash = bare
            .as_object_mut()
            .unwrap()
            .remove("content_hash")
            .unwrap();
        assert!(hash.as_str().unwrap().starts_with("sha256:"));
        assert_eq!(&bare, deposited);
        assert_eq!(m["package_id"], p["package_id"]);
        let score = m["score"].as_f64().unwrap();
        assert!(score > 0.0 && score <= last, "scores best first: {r}");
        last = score;
        assert!(
            ["title", "content_md"].contains(&m["field"].as_str().unwrap()),
            "{m}"
        );
        assert!(
            m["chunk"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("retrieval"),
            "{m}"
        );
    }
    // Each filter narrows the same search.
    for (filter, want) in [
        ("topic=search", vec!["pkg_s1", "pkg_s3"]),
        ("package_type=milestone", vec!["pkg_s3"]),
        ("tags=perf,retrieval", vec!["pkg_s1", "pkg_s4"]),
        ("tags=perf", vec!["pkg_s1", "pkg_s4"]),
        ("since=2026-02-05T00:00:00Z", vec!["pkg_s3", "pkg_s4"]),
        ("until=2026-02-15T00:00:00Z", vec!["pkg_s1", "pkg_s3"]),
        (
            "since=2026-02-05T00:00:00Z&until=2026-02-15T00:00:00Z&topic=search",
            vec!["pkg_s3"],
        ),
        ("topic=none", vec![]),
    ] {
        let (st, r) = list(&format!("mode=relevant&query=retrieval&{filter}")).await;
        assert_eq!(
            (st, ids(&r)),
            (200, want.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            "{filter}: {r}"
        );
        assert_eq!(
            r["packages"].as_array().unwrap().len(),
            r["matches"].as_array().unwrap().len()
        );
    }
    // The limit holds.
    let (_, r) = list("mode=relevant&query=retrieval&limit=2").await;
    assert_eq!(r["packages"].as_array().unwrap().len(), 2);
    // The same filters on latest: newest deposit first, no matches member.
    let (st, r) = list("mode=latest&tags=retrieval&limit=5").await;
    assert_eq!(st, 200, "{r}");
    let order: Vec<&str> = r["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["package_id"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["pkg_s4", "pkg_s3", "pkg_s1"]);
    assert!(r.get("matches").is_none());
    let (_, r) = list("tags=retrieval&since=2026-02-05T00:00:00Z&limit=1").await;
    assert_eq!(ids(&r), ["pkg_s4"]);

    // Refusals.
    let bad = list("mode=relevant&query=retrieval&since=last-week").await;
    assert_error(&bad, 400, "invalid_schema");
    assert_eq!(bad.1["details"]["errors"][0]["pointer"], "/since");
    let bad = list("mode=relevant").await;
    assert_error(&bad, 400, "invalid_schema");
    assert_eq!(bad.1["details"]["errors"][0]["pointer"], "/query");
    assert_error(
        &list("mode=relevant&query=x&limit=5000").await,
        400,
        "invalid_schema",
    );
    assert_error(
        &list("mode=latest&query=retrieval").await,
        400,
        "invalid_request",
    );
    assert_error(
        &list("mode=fuzzy&query=retrieval").await,
        400,
        "invalid_request",
    );
    assert_error(
        &list("status=awaiting_review&topic=search").await,
        400,
        "invalid_request",
    );
    assert_error(&list("colour=blue").await, 400, "invalid_request");
    s.stop().await;
}

/// orient answers the bundle, or with `format=markdown` the briefing as text/markdown.
#[tokio::test]
async fn orient_answers_the_bundle_or_the_markdown_briefing() {
    let s = TestServer::start().await;
    new_project(&s, MAINT, "proj-o").await;
    let (st, _) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-o/packages",
            &package("pkg_o1", "proj-o", "maintainer-bot", None),
        )
        .await;
    assert_eq!(st, 201);
    let (st, b) = s.get(Some(MAINT), "/v1/projects/proj-o/orient").await;
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["open_questions"], json!(["Who owns the dashboard?"]));
    let resp = s
        .http
        .get(s.url("/v1/projects/proj-o/orient?format=markdown"))
        .bearer_auth(MAINT)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown")
    );
    let md = resp.text().await.unwrap();
    assert!(md.starts_with("# Orientation: proj-o"), "{md}");
    assert!(md.contains("Who owns the dashboard?"), "{md}");
    assert_error(
        &s.get(Some(MAINT), "/v1/projects/proj-o/orient?format=xml")
            .await,
        400,
        "invalid_request",
    );
    s.stop().await;
}

async fn bundle_of(s: &TestServer, path: &str) -> Vec<u8> {
    let resp = s
        .http
        .get(s.url(path))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    resp.bytes().await.unwrap().to_vec()
}

async fn post_bundle(s: &TestServer, query: &str, bytes: Vec<u8>) -> (u16, Value) {
    s.post_raw(
        Some(ADMIN),
        &format!("/v1/import{query}"),
        "application/x-ndjson",
        bytes,
    )
    .await
}

/// Export and import over HTTP: admin only; the bundle holds byte for byte the files of an
/// export directory; a tampered bundle is refused naming the package and imports nothing; an
/// import into an empty server grants the projects and re-exports byte-identically.
#[tokio::test]
async fn export_and_import_over_http_round_trip_byte_identically() {
    use cra_relay::export::{FILES, MANIFEST, parse, unbundle};
    let a = TestServer::start().await;
    new_project(&a, MAINT, "proj-x").await;
    new_project(&a, MAINT, "proj-y").await;
    for (id, project) in [
        ("pkg_x1", "proj-x"),
        ("pkg_x2", "proj-x"),
        ("pkg_y1", "proj-y"),
    ] {
        let mut p = package(id, project, "maintainer-bot", None);
        p["x-extra"] = json!({"kept": [1, 2.5, null]});
        if id == "pkg_x2" {
            p["status"] = json!("draft");
        }
        let (st, b) = a
            .post(Some(MAINT), &format!("/v1/projects/{project}/packages"), &p)
            .await;
        assert_eq!(st, 201, "{b}");
    }
    for v in ["a", "b", "c"] {
        a.clock.advance(time::Duration::minutes(5));
        a.post(
            Some(MAINT),
            "/v1/projects/proj-x/facts",
            &json!({"subject": "svc", "predicate": "owner", "value": v}),
        )
        .await;
    }
    a.post(
        Some(MAINT),
        "/v1/packages/pkg_x2/flag",
        &json!({"review_type": "human"}),
    )
    .await;
    a.post(
        Some(ADMIN),
        "/v1/packages/pkg_x2/review",
        &json!({"outcome": "complete"}),
    )
    .await;

    // Admin only; an unknown project is 404.
    assert_error(&a.get(Some(MAINT), "/v1/export").await, 403, "forbidden");
    assert_error(
        &a.get(Some(AUDITOR), "/v1/projects/proj-x/export").await,
        403,
        "forbidden",
    );
    assert_error(
        &a.get(Some(ADMIN), "/v1/projects/nope/export").await,
        404,
        "project_not_found",
    );

    let all = bundle_of(&a, "/v1/export").await;
    assert_eq!(
        all,
        bundle_of(&a, "/v1/export").await,
        "two exports are identical"
    );
    let files = unbundle(&all).unwrap();
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    let mut want: Vec<&str> = FILES.to_vec();
    want.push(MANIFEST);
    assert_eq!(names, want, "manifest last");
    let snap = parse(&files).unwrap();
    assert_eq!(
        (
            snap.projects.len(),
            snap.packages.len(),
            snap.facts.len(),
            snap.reviews.len()
        ),
        (2, 3, 3, 2)
    );
    let one =
        parse(&unbundle(&bundle_of(&a, "/v1/projects/proj-y/export").await).unwrap()).unwrap();
    assert_eq!(
        (one.projects.len(), one.packages.len(), one.facts.len()),
        (1, 1, 0)
    );

    let b = TestServer::start().await;
    // A tampered bundle: refused, naming the package, and nothing is imported.
    let text = String::from_utf8(all.clone()).unwrap();
    let tampered = text.replacen("Package pkg_x1", "Package pkg_x1 (edited)", 1);
    assert_ne!(tampered, text);
    let r = post_bundle(&b, "", tampered.into_bytes()).await;
    assert_error(&r, 409, "integrity_error");
    assert!(
        r.1["message"].as_str().unwrap().contains("pkg_x1"),
        "{}",
        r.1
    );
    assert_error(
        &b.get(Some(ADMIN), "/v1/projects/proj-x").await,
        404,
        "project_not_found",
    );
    // Not a bundle, the wrong media type, not an admin.
    assert_error(
        &post_bundle(&b, "", b"{\"file\":\"../etc\",\"lines\":0}\n".to_vec()).await,
        400,
        "invalid_request",
    );
    assert_error(
        &b.post_raw(Some(ADMIN), "/v1/import", "application/json", all.clone())
            .await,
        415,
        "unsupported_media_type",
    );
    assert_error(
        &b.post_raw(
            Some(MAINT),
            "/v1/import",
            "application/x-ndjson",
            all.clone(),
        )
        .await,
        403,
        "forbidden",
    );
    // Nothing was imported: the store's export is empty.
    let empty = bundle_of(&b, "/v1/export").await;
    assert_eq!(parse(&unbundle(&empty).unwrap()).unwrap().projects.len(), 0);

    let (st, r) = post_bundle(&b, "?members=maintainer-bot", all.clone()).await;
    assert_eq!(st, 201, "{r}");
    assert_eq!(r["imported"]["packages"], 3);
    assert_eq!(r["imported"]["facts"], 3);
    assert_eq!(
        bundle_of(&b, "/v1/export").await,
        all,
        "export -> import -> export is byte-identical"
    );
    // The grants: the listed member reads and writes; the import is in the project's chain.
    let (st, p) = b.get(Some(MAINT), "/v1/packages/pkg_x1").await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["x-extra"], json!({"kept": [1, 2.5, null]}));
    assert_error(
        &b.get(Some(AGENT2), "/v1/packages/pkg_x1").await,
        404,
        "package_not_found",
    );
    let audit = cra_runtime::service::relay::project_audit_session("proj-x");
    let events = b.events(&audit).await;
    assert_eq!(events[1]["event_type"], "relay.project.created");
    assert_eq!(events[1]["payload"]["created_by"]["id"], "root");
    assert_eq!(events[1]["payload"]["imported"]["packages"], 2);
    let (st, _) = b
        .post(
            Some(MAINT),
            "/v1/projects/proj-x/facts",
            &json!({"subject": "svc", "predicate": "owner", "value": "d"}),
        )
        .await;
    assert_eq!(st, 201);
    // A second import finds a non-empty store.
    assert_error(&post_bundle(&b, "", all).await, 409, "already_exists");
    a.stop().await;
    b.stop().await;
}

/// B.13: Relay sessions (§5.5) over HTTP. A writer starts one (a `sess_` id and a callsign), a
/// deposit naming it in `created_by.session_id` is listed in it, readers see it, only its own
/// actor ends it (once), and start and end are recorded in the project's audit chain.
#[tokio::test]
async fn relay_sessions_start_collect_deposits_and_end_by_their_actor_only() {
    let s = TestServer::start().await;
    let audit = {
        let (st, p) = s
            .post(
                Some(MAINT),
                "/v1/projects",
                &json!({"project_id": "proj-s", "name": "S", "members": ["other-bot"]}),
            )
            .await;
        assert_eq!(st, 201, "{p}");
        p["audit_session_id"].as_str().unwrap().to_owned()
    };
    let (st, started) = s
        .post(Some(MAINT), "/v1/projects/proj-s/sessions", &json!({}))
        .await;
    assert_eq!(st, 201, "{started}");
    let sess = started["session_id"].as_str().unwrap().to_owned();
    assert!(sess.starts_with("sess_") && sess.len() == 37, "{started}");
    assert!(cra_relay::session::is_callsign(
        started["callsign"].as_str().unwrap()
    ));
    assert_eq!(started["actor_id"], "maintainer-bot");
    assert_eq!(started["ended_at"], Value::Null);

    let (st, d) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-s/packages",
            &package("pkg_s1", "proj-s", "maintainer-bot", Some(&sess)),
        )
        .await;
    assert_eq!(st, 201, "{d}");
    let path = format!("/v1/projects/proj-s/sessions/{sess}");
    let (st, shown) = s.get(Some(AUDITOR), &path).await;
    assert_eq!(st, 200, "{shown}");
    assert_eq!(shown["packages_deposited"], json!(["pkg_s1"]));
    assert_error(
        &s.get(
            Some(MAINT),
            "/v1/projects/proj-s/sessions/sess_0000000000000000000000000000beef",
        )
        .await,
        404,
        "session_not_found",
    );
    assert_error(
        &s.post(Some(AGENT), "/v1/projects/proj-s/sessions", &json!({}))
            .await,
        403,
        "unauthorized",
    );

    let end = format!("{path}/end");
    assert_error(
        &s.post(Some(AGENT2), &end, &json!({})).await,
        403,
        "unauthorized",
    );
    let (st, ended) = s.post(Some(MAINT), &end, &json!({})).await;
    assert_eq!(st, 200, "{ended}");
    assert!(ended["ended_at"].is_string(), "{ended}");
    assert_eq!(ended["packages_deposited"], json!(["pkg_s1"]));
    let (st, again) = s.post(Some(MAINT), &end, &json!({})).await;
    assert_eq!((st, &again), (200, &ended), "ending twice changes nothing");

    let events = s.events(&audit).await;
    let of = |t: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["event_type"] == t)
            .map(|e| &e["payload"])
            .collect()
    };
    let starts = of("relay.session.started");
    assert_eq!(starts.len(), 1);
    assert_eq!(starts[0]["session_id"], sess.as_str());
    assert_eq!(starts[0]["callsign"], started["callsign"]);
    let ends = of("relay.session.ended");
    assert_eq!(ends.len(), 1, "the second end recorded nothing");
    assert_eq!(ends[0]["packages_deposited"], json!(["pkg_s1"]));
    s.stop().await;
}

/// B.13: the project-scoped package routes (`/v1/projects/{p}/packages/{id}[/flag|/review]`)
/// and `?project_id=` on `/v1/packages/{id}` reach a package only in the project named: another
/// project's package is 404 `package_not_found`, and a refused flag changes and records nothing.
#[tokio::test]
async fn project_scoped_package_routes_reach_only_the_named_projects_packages() {
    let s = TestServer::start().await;
    let audit = new_project(&s, MAINT, "proj-x").await;
    new_project(&s, MAINT, "proj-y").await;
    let mut draft = package("pkg_x", "proj-x", "maintainer-bot", None);
    draft["status"] = json!("draft");
    let (st, d) = s
        .post(Some(MAINT), "/v1/projects/proj-x/packages", &draft)
        .await;
    assert_eq!(st, 201, "{d}");

    let (st, got) = s
        .get(Some(MAINT), "/v1/projects/proj-x/packages/pkg_x")
        .await;
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["content_hash"], d["content_hash"]);
    let (st, same) = s
        .get(Some(MAINT), "/v1/packages/pkg_x?project_id=proj-x")
        .await;
    assert_eq!((st, &same), (200, &got));
    for path in [
        "/v1/projects/proj-y/packages/pkg_x",
        "/v1/packages/pkg_x?project_id=proj-y",
    ] {
        assert_error(&s.get(Some(MAINT), path).await, 404, "package_not_found");
    }
    assert_error(
        &s.get(Some(MAINT), "/v1/packages/pkg_x?project=proj-x")
            .await,
        400,
        "invalid_request",
    );

    let recorded = s.event_types(&audit).await.len();
    let flag = json!({"review_type": "human"});
    assert_error(
        &s.post(
            Some(MAINT),
            "/v1/projects/proj-y/packages/pkg_x/flag",
            &flag,
        )
        .await,
        404,
        "package_not_found",
    );
    assert_eq!(
        s.event_types(&audit).await.len(),
        recorded,
        "the refusal recorded nothing"
    );
    let (st, flagged) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-x/packages/pkg_x/flag",
            &flag,
        )
        .await;
    assert_eq!(
        (st, &flagged["status"]),
        (200, &json!("awaiting_review")),
        "{flagged}"
    );
    let review = json!({"outcome": "complete"});
    assert_error(
        &s.post(
            Some(ADMIN),
            "/v1/projects/proj-y/packages/pkg_x/review",
            &review,
        )
        .await,
        404,
        "package_not_found",
    );
    let (st, reviewed) = s
        .post(
            Some(ADMIN),
            "/v1/projects/proj-x/packages/pkg_x/review",
            &review,
        )
        .await;
    assert_eq!(
        (st, &reviewed["status"]),
        (200, &json!("complete")),
        "{reviewed}"
    );
    s.stop().await;
}

/// B.13: a package id unique within its project is accepted although another project uses it
/// (Relay §6). Where the id exists in several projects the caller may read, the unscoped routes
/// answer 409 `ambiguous_package_id` (naming the projects) and change nothing; `?project_id=`
/// and the project-scoped routes reach each project's own package; a caller who may read only
/// one of the projects reaches that one unscoped, and never learns of the other.
#[tokio::test]
async fn a_package_id_may_be_used_in_two_projects_and_unscoped_routes_name_the_ambiguity() {
    let s = TestServer::start().await;
    let audit_x = new_project(&s, MAINT, "proj-x").await;
    new_project(&s, AGENT, "proj-z").await;
    let mut x = package("pkg_same", "proj-x", "maintainer-bot", None);
    x["status"] = json!("draft");
    let mut z = package("pkg_same", "proj-z", "ops-bot", None);
    z["status"] = json!("draft");
    z["title"] = json!("the other project's package");
    let (st, dx) = s
        .post(Some(MAINT), "/v1/projects/proj-x/packages", &x)
        .await;
    assert_eq!(st, 201, "{dx}");
    let (st, dz) = s
        .post(Some(AGENT), "/v1/projects/proj-z/packages", &z)
        .await;
    assert_eq!(st, 201, "the second project's id is accepted: {dz}");
    assert_ne!(dx["content_hash"], dz["content_hash"]);

    // Each caller reads only its own project: the unscoped route is its package.
    let (st, mine) = s.get(Some(MAINT), "/v1/packages/pkg_same").await;
    assert_eq!((st, &mine["project_id"]), (200, &json!("proj-x")), "{mine}");
    let (st, theirs) = s.get(Some(AGENT), "/v1/packages/pkg_same").await;
    assert_eq!(
        (st, &theirs["project_id"]),
        (200, &json!("proj-z")),
        "{theirs}"
    );

    // The admin reads both: unscoped is ambiguous, scoped is exact.
    let (st, body) = s.get(Some(ADMIN), "/v1/packages/pkg_same").await;
    assert_error(&(st, body.clone()), 409, "ambiguous_package_id");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("`proj-x`") && message.contains("`proj-z`"),
        "{message}"
    );
    for (path, project) in [
        ("/v1/packages/pkg_same?project_id=proj-z", "proj-z"),
        ("/v1/projects/proj-x/packages/pkg_same", "proj-x"),
    ] {
        let (st, got) = s.get(Some(ADMIN), path).await;
        assert_eq!((st, &got["project_id"]), (200, &json!(project)), "{got}");
    }

    // An ambiguous flag changes and records nothing; a scoped one flags only its package.
    let recorded = s.event_types(&audit_x).await.len();
    let flag = json!({"review_type": "human"});
    assert_error(
        &s.post(Some(ADMIN), "/v1/packages/pkg_same/flag", &flag)
            .await,
        409,
        "ambiguous_package_id",
    );
    assert_eq!(s.event_types(&audit_x).await.len(), recorded);
    let (st, flagged) = s
        .post(
            Some(ADMIN),
            "/v1/packages/pkg_same/flag?project_id=proj-x",
            &flag,
        )
        .await;
    assert_eq!(st, 200, "{flagged}");
    let (_, x_now) = s
        .get(Some(ADMIN), "/v1/projects/proj-x/packages/pkg_same")
        .await;
    let (_, z_now) = s
        .get(Some(ADMIN), "/v1/projects/proj-z/packages/pkg_same")
        .await;
    assert_eq!(x_now["status"], "awaiting_review");
    assert_eq!(
        z_now["status"], "draft",
        "the other project's package is untouched"
    );
    let types = s.event_types(&audit_x).await;
    assert_eq!(types.last().unwrap(), "relay.package.flagged");
    s.stop().await;
}

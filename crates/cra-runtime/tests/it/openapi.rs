//! The API's description against the API (issue 27, item 5): no request or response schema of
//! `schemas/openapi.json` is an untyped object but the protocols' free-form members, and the
//! server's real answers along a session's flow validate against the schema each route
//! declares for its status, so a description that drifts from the code fails here.

use cra_runtime::openapi::wire::{FREE_FORM, is_untyped_object};
use serde_json::{Value, json};

use crate::relay::package;
use crate::support::*;

fn document() -> Value {
    serde_json::from_str(&cra_runtime::openapi::openapi_json()).unwrap()
}

/// Every untyped object schema of `node`, by pointer, except under a free-form member.
fn untyped(node: &Value, path: &str, member: Option<&str>, out: &mut Vec<String>) {
    match node {
        Value::Object(o) => {
            if is_untyped_object(node) && !member.is_some_and(|m| FREE_FORM.contains(&m)) {
                out.push(path.to_owned());
            }
            for (k, v) in o {
                let here = format!("{path}/{k}");
                match k.as_str() {
                    "properties" => {
                        for (name, p) in v.as_object().into_iter().flatten() {
                            untyped(p, &format!("{here}/{name}"), Some(name), out);
                        }
                    }
                    "items" | "additionalProperties" => untyped(v, &here, member, out),
                    _ => untyped(v, &here, None, out),
                }
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                untyped(v, &format!("{path}/{i}"), member, out);
            }
        }
        _ => {}
    }
}

/// Invariant: every body the API describes says what its members are, but `payload`,
/// `parameters`, `result` and the other members free-form by their protocol.
#[test]
fn no_body_is_an_untyped_object_but_the_free_form_members() {
    let mut found = Vec::new();
    untyped(&document(), "", None, &mut found);
    assert!(
        found.is_empty(),
        "untyped objects in the API description:\n{}",
        found.join("\n")
    );
}

/// How `body` departs from the schema `route` declares for `method` and `status` (none when it
/// conforms).
fn mismatches(doc: &Value, method: &str, route: &str, status: u16, body: &Value) -> Vec<String> {
    let path = route.replace('~', "~0").replace('/', "~1");
    let pointer =
        format!("#/paths/{path}/{method}/responses/{status}/content/application~1json/schema");
    assert!(
        doc.pointer(&pointer[1..]).is_some(),
        "{method} {route} declares no JSON body for {status}"
    );
    let mut root = doc.clone();
    // A URI fragment: the template's braces are percent-encoded.
    root["$ref"] = json!(pointer.replace('{', "%7B").replace('}', "%7D"));
    root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    let validator = jsonschema::validator_for(&root).unwrap();
    validator
        .iter_errors(body)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Asserts that `body` conforms to the schema `route` declares for `method` and `status`.
fn conforms(doc: &Value, method: &str, route: &str, status: u16, body: &Value) {
    let errors = mismatches(doc, method, route, status, body);
    assert!(
        errors.is_empty(),
        "{method} {route} {status} does not match its schema:\n{}\nbody: {body}",
        errors.join("\n")
    );
}

/// The check can fail: bodies that break their schemas are caught.
#[test]
fn a_body_that_breaks_its_schema_is_caught() {
    let doc = document();
    let wrong = [
        (
            "get",
            "/v1/whoami",
            json!({"actor_id": 5, "actor_type": "agent", "roles": [], "key_fingerprint": "x"}),
        ),
        ("get", "/v1/approvals", json!([{"approval_id": "a"}])),
        ("post", "/v1/resolve", json!({"resolution_id": "r"})),
        ("get", "/v1/traces/{session_id}", json!([{"event_type": 1}])),
        ("get", "/v1/orchestrate", json!({"projects": "none"})),
    ];
    for (method, route, body) in wrong {
        assert!(
            !mismatches(&doc, method, route, 200, &body).is_empty(),
            "{method} {route} took {body}"
        );
    }
}

/// Invariant: what the server answers is what its description says, route by route.
#[tokio::test]
async fn answers_match_the_schemas_their_routes_declare() {
    let doc = document();
    let (s, _calls) = start_with_executor().await;
    let (st, who) = s.get(Some(MAINT), "/v1/whoami").await;
    conforms(&doc, "get", "/v1/whoami", st, &who);
    let sid = s.open_session(MAINT, "maintainer-bot").await;
    let (st, session) = s.get(Some(MAINT), &format!("/v1/sessions/{sid}")).await;
    conforms(&doc, "get", "/v1/sessions/{session_id}", st, &session);

    // CARP: a resolve, an execute that runs, one that waits, the approval's life.
    let request = resolve_request("maintainer-bot", &sid, &rid(), &["repo-read", "maintain"]);
    let (st, res) = s.post(Some(MAINT), "/v1/resolve", &request).await;
    conforms(&doc, "post", "/v1/resolve", st, &res);
    let resolution = res["resolution_id"].as_str().unwrap().to_owned();
    let get = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution,
        "repo.get",
        json!({"owner": "o", "repo": "r"}),
    );
    let (st, ran) = s.post(Some(MAINT), "/v1/execute", &get).await;
    assert_eq!(st, 200, "{ran}");
    conforms(&doc, "post", "/v1/execute", st, &ran);
    let approval = s
        .ask_merge_approval(MAINT, "maintainer-bot", &sid, &res)
        .await;
    let merge = execute_request(
        "maintainer-bot",
        &sid,
        &rid(),
        &resolution,
        "pr.merge",
        MERGE_42.clone(),
    );
    let (st, waiting) = s.post(Some(MAINT), "/v1/execute", &merge).await;
    conforms(&doc, "post", "/v1/execute", st, &waiting);
    let (st, refused) = s.post(Some(AGENT), "/v1/execute", &merge).await;
    conforms(&doc, "post", "/v1/execute", st, &refused);
    let (st, pending) = s.get(Some(OPERATOR), "/v1/approvals").await;
    conforms(&doc, "get", "/v1/approvals", st, &pending);
    let (st, shown) = s
        .get(Some(OPERATOR), &format!("/v1/approvals/{approval}"))
        .await;
    conforms(&doc, "get", "/v1/approvals/{approval_id}", st, &shown);
    let decide = json!({"decision": "grant", "note": "ok"});
    let (st, decided) = s
        .post(
            Some(OPERATOR),
            &format!("/v1/approvals/{approval}"),
            &decide,
        )
        .await;
    conforms(&doc, "post", "/v1/approvals/{approval_id}", st, &decided);
    let (st, history) = s.get(Some(OPERATOR), "/v1/approvals?status=decided").await;
    conforms(&doc, "get", "/v1/approvals", st, &history);

    // Chains and the log.
    let (st, chains) = s.get(Some(OPERATOR), "/v1/traces").await;
    conforms(&doc, "get", "/v1/traces", st, &chains);
    let (st, events) = s.get(Some(OPERATOR), &format!("/v1/traces/{sid}")).await;
    conforms(&doc, "get", "/v1/traces/{session_id}", st, &events);
    let (st, verified) = s
        .post(
            Some(OPERATOR),
            &format!("/v1/traces/{sid}/verify"),
            &json!({}),
        )
        .await;
    conforms(
        &doc,
        "post",
        "/v1/traces/{session_id}/verify",
        st,
        &verified,
    );

    // Atlases.
    let (st, atlases) = s.get(Some(OPERATOR), "/v1/atlases").await;
    conforms(&doc, "get", "/v1/atlases", st, &atlases);
    let (st, manifest) = s
        .get(Some(OPERATOR), "/v1/atlases/dev.cra.github-ops")
        .await;
    conforms(&doc, "get", "/v1/atlases/{atlas_id}", st, &manifest);
    let (st, generations) = s.get(Some(OPERATOR), "/v1/atlases/history").await;
    conforms(&doc, "get", "/v1/atlases/history", st, &generations);

    // Relay.
    let (st, project) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "proj-o", "name": "O"}),
        )
        .await;
    conforms(&doc, "post", "/v1/projects", st, &project);
    let (st, got) = s.get(Some(MAINT), "/v1/projects/proj-o").await;
    conforms(&doc, "get", "/v1/projects/{project_id}", st, &got);
    let (st, work) = s
        .post(Some(MAINT), "/v1/projects/proj-o/sessions", &json!({}))
        .await;
    conforms(
        &doc,
        "post",
        "/v1/projects/{project_id}/sessions",
        st,
        &work,
    );
    let (st, stored) = s
        .post(
            Some(MAINT),
            "/v1/projects/proj-o/packages",
            &package("pkg_o1", "proj-o", "maintainer-bot", Some(&sid)),
        )
        .await;
    conforms(
        &doc,
        "post",
        "/v1/projects/{project_id}/packages",
        st,
        &stored,
    );
    let (st, listing) = s
        .get(
            Some(MAINT),
            "/v1/projects/proj-o/packages?mode=latest&limit=5",
        )
        .await;
    conforms(
        &doc,
        "get",
        "/v1/projects/{project_id}/packages",
        st,
        &listing,
    );
    let (st, one) = s
        .get(Some(MAINT), "/v1/projects/proj-o/packages/pkg_o1")
        .await;
    conforms(
        &doc,
        "get",
        "/v1/projects/{project_id}/packages/{package_id}",
        st,
        &one,
    );
    let fact = json!({"subject": "svc", "predicate": "owner", "value": {"team": "x"}});
    let (st, asserted) = s
        .post(Some(MAINT), "/v1/projects/proj-o/facts", &fact)
        .await;
    conforms(
        &doc,
        "post",
        "/v1/projects/{project_id}/facts",
        st,
        &asserted,
    );
    let (st, facts) = s
        .get(
            Some(MAINT),
            "/v1/projects/proj-o/facts?subject=svc&predicate=owner",
        )
        .await;
    conforms(&doc, "get", "/v1/projects/{project_id}/facts", st, &facts);
    let (st, oriented) = s.get(Some(MAINT), "/v1/projects/proj-o/orient").await;
    conforms(
        &doc,
        "get",
        "/v1/projects/{project_id}/orient",
        st,
        &oriented,
    );
    let (st, digest) = s.get(Some(OPERATOR), "/v1/orchestrate").await;
    conforms(&doc, "get", "/v1/orchestrate", st, &digest);
    let (st, gone) = s
        .delete(
            Some(MAINT),
            "/v1/projects/proj-o/facts?subject=svc&predicate=owner",
        )
        .await;
    conforms(&doc, "delete", "/v1/projects/{project_id}/facts", st, &gone);
    let (st, archived) = s
        .post(Some(MAINT), "/v1/projects/proj-o/archive", &json!({}))
        .await;
    conforms(
        &doc,
        "post",
        "/v1/projects/{project_id}/archive",
        st,
        &archived,
    );

    // Refusals answer the error body.
    let (st, missing) = s.get(Some(OPERATOR), "/v1/atlases/no.such.atlas").await;
    conforms(&doc, "get", "/v1/atlases/{atlas_id}", st, &missing);
    s.stop().await;
}

//! A server with `[[redaction.rules]]` (`specs/redaction.md`): an API key in a session's goal
//! and a resolve's goal, a token at a context pointer and a card number in an execute's
//! parameters are replaced before anything is decided, recorded or answered. Each replacement
//! is a `context.redacted` event naming where and why, and the values appear in no answer, no
//! exported chain, no `/metrics` and no byte of the data directory; the chain still verifies.

use cra_runtime::config::RedactionRule;
use cra_store::testing::files_hold;
use serde_json::{Value, json};

use super::live::{AGENT, Live, OPERATOR, atlas_dir};

fn rule(pointer: Option<&str>, pattern: Option<&str>, reason: &str) -> RedactionRule {
    RedactionRule {
        pointer: pointer.map(str::to_owned),
        pattern: pattern.map(str::to_owned),
        reason: reason.to_owned(),
    }
}

/// A random run of `n` characters of `alphabet` (the seed is printed).
fn secret(alphabet: &str, n: usize) -> String {
    let seed: u64 = rand::random();
    eprintln!("secret seed {seed:016x}");
    let chars: Vec<char> = alphabet.chars().collect();
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            chars[(x >> 33) as usize % chars.len()]
        })
        .collect()
}

#[test]
fn redacted_values_appear_nowhere_and_each_replacement_is_recorded() {
    let api_key = format!("sk-{}", secret("abcdefghijklmnopqrstuvwxyz0123456789", 12));
    let token = secret("ABCDEFGHJKLMNPQRSTUVWXYZ", 20);
    let card = secret("0123456789", 16);
    let mut live = Live::start_configured(None, vec![atlas_dir()], |c| {
        c.redaction.rules = vec![
            rule(None, Some("sk-[a-z0-9]{12}"), "api key"),
            rule(Some("/context/token"), None, "credential"),
            rule(None, Some(r"\b[0-9]{16}\b"), "pci"),
            rule(Some("/result/echo/page"), None, "echoed page"),
        ];
    });
    let session = live.open_session(&format!("rotate {api_key}"));
    let (st, view) = live.call("GET", AGENT, &format!("/v1/sessions/{session}"), None);
    assert_eq!(st, 200, "{view}");
    assert_eq!(view["goal"], "rotate [REDACTED]");

    let mut req = live.resolve_request(
        "test.trace.ops",
        &session,
        &format!("read the runbook with {api_key}"),
        &["read"],
    );
    req["context"] = json!({"token": token, "ticket": "T-1"});
    let (st, resolution) = live.call("POST", AGENT, "/v1/resolve", Some(&req));
    assert_eq!(st, 200, "{resolution}");
    let rid = resolution["resolution_id"].as_str().unwrap().to_owned();
    let (st, executed) = live.execute(
        &session,
        &rid,
        "doc.read",
        json!({"page": format!("card {card}")}),
        None,
        None,
    );
    assert_eq!(st, 200, "{executed}");
    assert_eq!(executed["status"], "success", "{executed}");
    let (st, chain) = live.call("GET", OPERATOR, &format!("/v1/traces/{session}"), None);
    assert_eq!(st, 200, "{chain}");
    let (_, metrics) = live.call("GET", OPERATOR, "/metrics", None);
    let answers = [&view, &resolution, &executed, &chain, &metrics];
    for s in [&api_key, &token, &card] {
        for a in answers {
            assert!(!a.to_string().contains(s.as_str()), "{s} answered: {a}");
        }
    }
    // The echo executor answered the (redacted) page; the result rule replaced it whole.
    assert_eq!(
        executed["result"]["echo"]["page"], "[REDACTED]",
        "{executed}"
    );

    let events = chain.as_array().unwrap_or_else(|| panic!("{chain}"));
    let redactions: Vec<(String, String)> = events
        .iter()
        .filter(|e| e["event_type"] == "context.redacted")
        .map(|e| {
            let p = &e["payload"];
            (
                p["block_id"].as_str().unwrap().into(),
                p["redaction_reason"].as_str().unwrap().into(),
            )
        })
        .collect();
    let expected = [
        ("/goal", "api key"),
        ("/task/goal", "api key"),
        ("/context/token", "credential"),
        ("/execution/parameters/page", "pci"),
        ("/result/echo/page", "echoed page"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(b, r)| ((*b).into(), (*r).into()))
        .collect();
    assert_eq!(redactions, expected);
    let (st, verified) = live.call(
        "POST",
        OPERATOR,
        &format!("/v1/traces/{session}/verify"),
        None,
    );
    assert_eq!(st, 200, "{verified}");
    assert_eq!(verified["valid"], Value::Bool(true), "{verified}");

    live.stop();
    for s in [&api_key, &token, &card] {
        assert!(!files_hold(&live.data, s), "{s} is stored");
    }
}

fn redaction_atlas() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/redaction/atlas")
}

/// An atlas's own rules apply to the requests that name it or its actions, beside the
/// operator's; a request to another atlas keeps the value.
#[test]
fn an_atlas_redacts_what_its_manifest_names_in_requests_to_it() {
    let employee = secret("0123456789", 9);
    let mut live = Live::start_with(None, vec![atlas_dir(), redaction_atlas()]);
    let session = live.open_session("write notes");
    let resolution = live.resolve_in("test.redaction.hr", &session, "note", &["hr"]);
    let rid = resolution["resolution_id"].as_str().unwrap().to_owned();
    let params = json!({"employee": employee, "note": "promoted"});
    let (st, executed) = live.execute(&session, &rid, "employee.note", params, None, None);
    assert_eq!(st, 200, "{executed}");
    assert_eq!(executed["status"], "success", "{executed}");
    assert!(!executed.to_string().contains(&employee), "{executed}");
    let (_, chain) = live.call("GET", OPERATOR, &format!("/v1/traces/{session}"), None);
    assert!(!chain.to_string().contains(&employee));
    let redacted: Vec<&Value> = chain
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "context.redacted")
        .map(|e| &e["payload"])
        .collect();
    assert_eq!(redacted.len(), 1, "{redacted:?}");
    assert_eq!(redacted[0]["block_id"], "/execution/parameters/employee");
    assert_eq!(redacted[0]["redaction_reason"], "employee number");

    // The same value sent to the other atlas's action is not this atlas's to redact.
    let ops = live.resolve_in("test.trace.ops", &session, "read", &["read"]);
    let rid = ops["resolution_id"].as_str().unwrap().to_owned();
    let (st, read) = live.execute(
        &session,
        &rid,
        "doc.read",
        json!({"page": employee}),
        None,
        None,
    );
    assert_eq!(st, 200, "{read}");
    assert!(read.to_string().contains(&employee), "{read}");
}

/// `cra atlas check` refuses a rule that could break a request, at its pointer in the manifest.
#[test]
fn an_atlas_rule_outside_the_request_content_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(redaction_atlas().join("atlas.json")).unwrap();
    let bad = text.replace("/execution/parameters/employee", "/requester/session_id");
    std::fs::write(dir.path().join("atlas.json"), bad).unwrap();
    let checked = cra_cli::cmd::atlas::check_atlases(&cra_cli::cmd::atlas::CheckArgs {
        paths: vec![dir.path().to_owned()],
        with: Vec::new(),
        strict: false,
        output: cra_cli::cmd::atlas::CheckFormat::Json,
    })
    .unwrap();
    let d = &checked[0].diagnostics;
    assert!(
        d.iter()
            .any(|d| d.code == "invalid_redaction" && d.pointer == "/redaction/0"),
        "{d:?}"
    );
}

//! `cra approvals` against a server in this process: an approval asked for by a resolve with
//! intended parameters is listed, shown pending (exit 4), granted, shown granted (exit 0), and a
//! second decision is refused (exit 2).

use std::path::Path;

use clap::Parser;
use cra_cli::{Cli, Command, Exit};
use serde_json::{Value, json};

use crate::relay::Server;

/// `cra approvals ARGS --url URL --token TOKEN`, captured.
fn cra(server: &Server, args: &[&str]) -> (Exit, String, String) {
    let token = cra_runtime::auth::local_admin_token(&server.data).unwrap();
    let mut argv = vec!["cra", "approvals"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--url", &server.url, "--token", &token]);
    let Command::Approvals(c) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("not an approvals command")
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cra_cli::cmd::approvals::execute(c, &mut out, &mut err);
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The refund agent's key, beside the admin's: the admin decides, and nobody decides an
/// approval they requested (separation of duties).
pub(crate) const AGENT_TOKEN: &str = "refund-bot-key-000000000";

/// The keys file of `data`: an admin and the refund agent.
pub(crate) fn write_keys(data: &Path) {
    std::fs::create_dir_all(data).unwrap();
    let keys = format!(
        "[[keys]]\ntoken = \"admin-key-000000000000\"\nactor_id = \"admin\"\nactor_type = \"human\"\nroles = [\"admin\"]\n\n[[keys]]\ntoken = \"{AGENT_TOKEN}\"\nactor_id = \"refund-bot\"\nactor_type = \"agent\"\nroles = [\"agent\"]\n"
    );
    std::fs::write(data.join("api-keys.toml"), keys).unwrap();
}

/// Opens a session as the refund agent and resolves a refund of 600 with intended parameters,
/// which the params atlas gates: returns the approval id.
fn ask_for_approval(server: &Server) -> String {
    let token = AGENT_TOKEN;
    let http = cra_runtime::tls::blocking_http_client().build().unwrap();
    let post = |path: &str, body: Value| -> Value {
        let resp = http
            .post(format!("{}{path}", server.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .unwrap();
        let status = resp.status();
        let v: Value = resp.json().unwrap();
        assert!(status.is_success(), "{path}: {status} {v}");
        v
    };
    let session = post(
        "/v1/sessions",
        json!({"agent_id": "refund-bot", "goal": "refund"}),
    );
    let sid = session["session_id"].as_str().unwrap();
    let now = cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock));
    let res = post(
        "/v1/resolve",
        json!({
            "carp_version": "1.0",
            "request_id": cra_wire::IdGenerator::new_id(&cra_wire::UuidV7Ids),
            "timestamp": now,
            "operation": "resolve",
            "requester": {"agent_id": "refund-bot", "session_id": sid},
            "task": {"goal": "Refund the order",
                     "intended_parameters": {"refund.issue": {"amount": 600}}},
            "atlas_ids": ["com.example.params"]
        }),
    );
    assert_eq!(res["decision"]["type"], "requires_approval", "{res}");
    // The resolve opened nothing: the execute of the refund asks for the approval of this call.
    let now = cra_wire::clock::format_timestamp(cra_wire::Clock::now(&cra_wire::SystemClock));
    let call = json!({
        "carp_version": "1.0",
        "request_id": cra_wire::IdGenerator::new_id(&cra_wire::UuidV7Ids),
        "timestamp": now,
        "operation": "execute",
        "requester": {"agent_id": "refund-bot", "session_id": sid},
        "execution": {"resolution_id": res["resolution_id"], "action_id": "refund.issue",
                      "parameters": {"amount": 600}}
    });
    let resp = http
        .post(format!("{}/v1/execute", server.url))
        .bearer_auth(token)
        .json(&call)
        .send()
        .unwrap();
    let v: Value = resp.json().unwrap();
    assert_eq!(v["status"], "pending_approval", "{v}");
    res["decision"]["approval_id"].as_str().unwrap().to_owned()
}

#[test]
fn approvals_are_listed_shown_and_decided_once() {
    let tmp = tempfile::tempdir().unwrap();
    let atlas =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../cra-carp/tests/fixtures/params/atlas");
    write_keys(&tmp.path().join("data"));
    let server = Server::start_with(&tmp.path().join("data"), atlas);
    let (e, out, _) = cra(&server, &["list"]);
    assert_eq!((e, out.trim()), (Exit::Success, "no approval is pending"));

    let id = ask_for_approval(&server);
    let (e, out, err) = cra(&server, &["list", "-o", "json"]);
    assert_eq!(e, Exit::Success, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["approval_id"], id.as_str());
    // The approval gates the one call that asked for it.
    assert_eq!(listed[0]["actions"], json!(["refund.issue"]));
    assert_eq!(listed[0]["call"]["action_id"], "refund.issue");
    assert_eq!(
        listed[0]["call"]["parameters_hash"].as_str().unwrap(),
        cra_wire::hash::canonical_digest(&json!({"amount": 600}))
    );

    let (e, out, _) = cra(&server, &["show", &id, "-o", "json"]);
    assert_eq!(e, Exit::RequiresApproval, "pending: {out}");

    let (e, out, err) = cra(&server, &["grant", &id, "--note", "checked the order"]);
    assert_eq!(e, Exit::Success, "{err}");
    assert!(
        out.contains("granted") && out.contains("decided by admin"),
        "{out}"
    );

    let (e, out, _) = cra(&server, &["show", &id, "--wait", "5"]);
    assert_eq!(e, Exit::Success, "granted: {out}");

    let (e, _, err) = cra(&server, &["reject", &id]);
    assert_eq!(e, Exit::Negative);
    assert!(
        err.contains("already_exists") || err.contains("already"),
        "{err}"
    );

    let unknown = "0190a000-0000-7000-8000-00000000dead";
    let (e, _, err) = cra(&server, &["show", unknown]);
    assert_eq!(e, Exit::Negative);
    assert!(err.contains("approval_not_found"), "{err}");
}

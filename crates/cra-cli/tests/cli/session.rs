//! `cra session` against a server in this process, as a refund agent would use it with no
//! request written by hand: open, show, resolve with intended parameters (an approval is
//! needed), execute (pending, exit 4), an operator grants, execute again (success, exit 0), a
//! denied call (exit 2 with cra's token), bad parameters refused before anything is sent
//! (exit 1), another agent's name refused by the server, and end; then the chain verifies and
//! an operator's `cra trace tail` prints it, a readable line an event.

use std::path::Path;

use clap::Parser;
use cra_cli::{Cli, Command, Exit};
use serde_json::Value;

use crate::approvals::{AGENT_TOKEN, write_keys};
use crate::relay::Server;

/// `cra ARGS --url URL --token TOKEN` for a `session` or `approvals` command, captured.
fn cra(server: &Server, token: &str, args: &[&str]) -> (Exit, String, String) {
    let mut argv = vec!["cra"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--url", &server.url, "--token", token]);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = match Cli::try_parse_from(argv).unwrap().command {
        Command::Session(c) => cra_cli::cmd::session::execute(c, &mut out, &mut err),
        Command::Approvals(c) => cra_cli::cmd::approvals::execute(c, &mut out, &mut err),
        _ => panic!("not a session or approvals command"),
    };
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn an_agent_opens_resolves_waits_for_approval_executes_and_ends_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let atlas =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../cra-carp/tests/fixtures/params/atlas");
    write_keys(&tmp.path().join("data"));
    let server = Server::start_with(&tmp.path().join("data"), atlas);
    let agent = |args: &[&str]| cra(&server, AGENT_TOKEN, args);

    let (e, sid, err) = agent(&[
        "session",
        "open",
        "--agent",
        "refund-bot",
        "--goal",
        "refund order 7",
    ]);
    assert_eq!(e, Exit::Success, "{err}");
    let sid = sid.trim().to_owned();
    assert!(cra_wire::id::is_canonical_uuid(&sid), "{sid}");
    let (e, shown, _) = agent(&["session", "show", &sid, "-o", "json"]);
    let shown: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        (e, shown["agent_id"].as_str()),
        (Exit::Success, Some("refund-bot"))
    );

    // The requester is the session's agent (read from the server) unless --agent names one.
    let resolve = [
        "session",
        "resolve",
        &sid,
        "--goal",
        "Refund the order",
        "--intend",
        r#"refund.issue={"amount": 600}"#,
    ];
    let (e, resolution, err) = agent(&resolve);
    assert_eq!(e, Exit::Success, "{err}");
    assert!(
        err.contains("decision requires_approval") && err.contains("cra approvals show"),
        "{err}"
    );
    let resolution = resolution.trim().to_owned();
    let (e, _, _) = agent(&[&resolve[..], &["--fail-on", "approval"]].concat());
    assert_eq!(e, Exit::RequiresApproval);

    let refund = [
        "session",
        "execute",
        &sid,
        "--resolution",
        &resolution,
        "--action",
        "refund.issue",
        "--parameters",
        r#"{"amount": 600}"#,
    ];
    let (e, out, err) = agent(&refund);
    assert_eq!(
        (e, out.trim()),
        (Exit::RequiresApproval, "pending_approval"),
        "{err}"
    );
    assert!(err.contains("approval_pending"), "{err}");

    let admin = cra_runtime::auth::local_admin_token(&server.data).unwrap();
    let (_, listed, _) = cra(&server, &admin, &["approvals", "list", "-o", "json"]);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let approval = listed[0]["approval_id"].as_str().unwrap().to_owned();
    assert_eq!(
        cra(&server, &admin, &["approvals", "grant", &approval]).0,
        Exit::Success
    );

    let (e, out, err) = agent(&refund);
    assert_eq!(e, Exit::Success, "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("success"));
    let result: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(result["echo"]["amount"], 600);

    let main = [
        "session",
        "execute",
        &sid,
        "--resolution",
        &resolution,
        "--action",
        "branch.delete",
        "--parameters",
        r#"{"branch": "main"}"#,
    ];
    let (e, out, err) = agent(&main);
    assert_eq!((e, out.trim()), (Exit::Negative, "denied"), "{err}");
    assert!(
        err.contains("Protected branches cannot be deleted"),
        "{err}"
    );

    let (e, out, err) = agent(&[
        "session",
        "execute",
        &sid,
        "--resolution",
        &resolution,
        "--action",
        "refund.issue",
        "--parameters",
        "[1]",
    ]);
    assert_eq!((e, out.as_str()), (Exit::CouldNotRun, ""));
    assert!(err.contains("--parameters: give a JSON object"), "{err}");
    let (e, _, err) = agent(&[
        "session",
        "resolve",
        &sid,
        "--goal",
        "g",
        "--agent",
        "someone-else",
    ]);
    assert_eq!(e, Exit::Negative);
    assert!(err.contains("refused"), "{err}");

    assert_eq!(agent(&["session", "end", &sid]).0, Exit::Success);
    let (e, _, err) = agent(&refund);
    assert_eq!(e, Exit::Negative);
    assert!(err.contains("session_inactive"), "{err}");

    let (_, shown, _) = cra(&server, &admin, &["session", "show", &sid, "-o", "json"]);
    let ended: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(ended["status"], "ended");
    let chain: Vec<cra_trace::TraceEvent> = cra_runtime::tls::blocking_http_client()
        .build()
        .unwrap()
        .get(format!("{}/v1/traces/{sid}", server.url))
        .bearer_auth(&admin)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let types: Vec<&str> = chain.iter().map(|e| e.event_type.as_str()).collect();
    assert!(
        types.contains(&"action.executed") && types.contains(&"action.denied"),
        "{types:?}"
    );
    let report = cra_trace::verify_events_with(&chain, &cra_trace::VerifyOptions::default());
    assert!(report.findings.is_empty(), "{:?}", report.findings);

    // An operator's `cra trace tail` of the ended session: every event, one readable line
    // each, then exit 0 when the server closes the stream after `session.ended`.
    let tail = std::process::Command::new(env!("CARGO_BIN_EXE_cra"))
        .args([
            "trace",
            "tail",
            "--session",
            &sid,
            "--url",
            &server.url,
            "--token",
            &admin,
        ])
        .output()
        .unwrap();
    let printed = String::from_utf8(tail.stdout).unwrap();
    assert!(
        tail.status.success(),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    assert_eq!(printed.lines().count(), chain.len(), "{printed}");
    assert!(
        printed.contains(
            " action.denied action=branch.delete decision=deny policy=deny-protected-branches"
        ),
        "{printed}"
    );
    assert!(
        printed
            .lines()
            .last()
            .unwrap()
            .contains(&format!("{sid}#{} session.ended", chain.len() - 1))
    );
}

/// `cra trace tail` against a server that is not there backs off, then gives up saying so.
#[test]
fn tail_gives_up_on_an_unreachable_server_with_a_clear_error() {
    let tail = std::process::Command::new(env!("CARGO_BIN_EXE_cra"))
        .args([
            "trace",
            "tail",
            "--session",
            "s",
            "--url",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ])
        .args(["--retry-for", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8(tail.stderr).unwrap();
    assert_eq!(tail.status.code(), Some(1), "{err}");
    assert!(
        err.contains("giving up after 1 s without a connection"),
        "{err}"
    );
    assert!(
        err.contains("is `cra serve` running at http://127.0.0.1:9?"),
        "{err}"
    );
}

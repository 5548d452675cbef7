//! `cra relay ...` on a temporary data directory: deposit (hash of the §6.7 example), identity
//! mismatch (exit 2 with the wire error body), facts as-of, review flow, search, orient
//! Markdown, export -> import -> export byte-identical.

use std::path::Path;

use clap::Parser;
use cra_cli::{Cli, Command, Exit};
use serde_json::Value;

fn cra(data: &Path, args: &[&str], stdin: &str) -> (Exit, String, String) {
    let mut argv = vec!["cra", "relay", "--data", data.to_str().unwrap()];
    argv.extend_from_slice(args);
    let Command::Relay(a) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("not a relay command")
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cra_cli::cmd::relay::execute(a, &mut stdin.as_bytes(), &mut out, &mut err);
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

const MINIMAL: &str = r#"{"package_id":"pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d","project_id":"proj_dev_relay","relay_version":"0.1","title":"Shipped archive/de-archive","status":"complete","package_type":"milestone","review_type":"none","created_at":"2026-04-18T20:00:00Z","created_by":{"id":"jordan","type":"human","session_id":null},"tags":["archive","cli"],"decisions_made":["Soft archive via archived_at timestamp"],"open_questions":[],"handoff_note":"Migration 009 applied, dashboard filter works."}"#;

#[test]
fn relay_commands_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let (e, _, _) = cra(
        &d,
        &["project", "create", "proj_dev_relay", "Relay dev"],
        "",
    );
    assert_eq!(e, Exit::Success);

    let (e, out, _) = cra(&d, &["--actor", "jordan", "deposit", "-"], MINIMAL);
    assert_eq!(e, Exit::Success);
    assert_eq!(
        json(&out)["package"]["content_hash"],
        "sha256:0efe5d06aaaaf2dc735b3f9ce7cfc1a0f7cd715491ab61d991f57be1d4c0db33"
    );
    let (e, out, _) = cra(&d, &["--actor", "jordan", "deposit", "-"], MINIMAL);
    assert_eq!(
        (e, json(&out)["created"].clone()),
        (Exit::Success, Value::Bool(false))
    );

    let (e, _, err) = cra(&d, &["--actor", "mallory", "deposit", "-"], MINIMAL);
    assert_eq!(e, Exit::Negative);
    assert_eq!(json(&err)["error"], "identity_mismatch");
    let (e, _, err) = cra(&d, &["deposit", "-"], MINIMAL);
    assert_eq!(e, Exit::CouldNotRun, "writes need --actor: {err}");

    let assert = |v: &str, from: &str| {
        cra(
            &d,
            &[
                "--actor",
                "jordan",
                "facts",
                "assert",
                "--project",
                "proj_dev_relay",
                "--subject",
                "dash",
                "--predicate",
                "owner",
                "--value",
                v,
                "--valid-from",
                from,
            ],
            "",
        )
    };
    assert_eq!(assert("ana", "2026-04-01T00:00:00Z").0, Exit::Success);
    assert_eq!(assert("ben", "2026-04-10T00:00:00Z").0, Exit::Success);
    let (_, out, _) = cra(
        &d,
        &[
            "facts",
            "get",
            "--project",
            "proj_dev_relay",
            "--as-of",
            "2026-04-05T00:00:00Z",
        ],
        "",
    );
    assert_eq!(json(&out)[0]["value"], "ana");
    let (_, out, _) = cra(&d, &["facts", "get", "--project", "proj_dev_relay"], "");
    assert_eq!(json(&out)[0]["value"], "ben");
    let (_, out, _) = cra(
        &d,
        &["facts", "get", "--project", "proj_dev_relay", "--history"],
        "",
    );
    assert_eq!(json(&out).as_array().unwrap().len(), 2);

    let draft = MINIMAL
        .replace("pkg_1a2b", "pkg_dddd")
        .replace("\"complete\"", "\"draft\"");
    assert_eq!(
        cra(&d, &["--actor", "jordan", "deposit", "-"], &draft).0,
        Exit::Success
    );
    let id = "pkg_dddd3c4d5e6f7a8b9c0d1e2f3a4b5c6d";
    let (e, out, _) = cra(
        &d,
        &["--actor", "jordan", "flag", id, "--review-type", "agent"],
        "",
    );
    assert_eq!(
        (e, json(&out)["status"].clone()),
        (Exit::Success, "awaiting_review".into())
    );
    let (e, out, _) = cra(
        &d,
        &["--actor", "rev", "review", id, "--outcome", "complete"],
        "",
    );
    assert_eq!(
        (e, json(&out)["status"].clone()),
        (Exit::Success, "complete".into())
    );
    let (e, _, err) = cra(
        &d,
        &[
            "--actor",
            "rev",
            "review",
            id,
            "--outcome",
            "revision_requested",
        ],
        "",
    );
    assert_eq!(
        (e, json(&err)["error"].clone()),
        (Exit::Negative, "invalid_transition".into())
    );

    let (e, out, _) = cra(
        &d,
        &[
            "pull",
            "--project",
            "proj_dev_relay",
            "--query",
            "soft archive timestamp",
        ],
        "",
    );
    assert_eq!(e, Exit::Success);
    assert!(!json(&out).as_array().unwrap().is_empty());
    let (_, out, _) = cra(
        &d,
        &[
            "pull",
            "--project",
            "proj_dev_relay",
            "--latest",
            "--limit",
            "1",
        ],
        "",
    );
    assert_eq!(json(&out)["packages"][0]["package_id"], id);
    let (e, _, err) = cra(&d, &["pull", "--id", "pkg_none"], "");
    assert_eq!(
        (e, json(&err)["error"].clone()),
        (Exit::Negative, "package_not_found".into())
    );

    let (_, md, _) = cra(
        &d,
        &[
            "orient",
            "--project",
            "proj_dev_relay",
            "--window-days",
            "100000",
            "--markdown",
        ],
        "",
    );
    assert!(md.starts_with("# Orientation: Relay dev"), "{md}");
    assert!(md.contains("Migration 009 applied"));

    let ex = tmp.path().join("ex");
    assert_eq!(
        cra(&d, &["export", ex.to_str().unwrap()], "").0,
        Exit::Success
    );
    let d2 = tmp.path().join("data2");
    assert_eq!(
        cra(&d2, &["import", ex.to_str().unwrap()], "").0,
        Exit::Success
    );
    let ex2 = tmp.path().join("ex2");
    assert_eq!(
        cra(&d2, &["export", ex2.to_str().unwrap()], "").0,
        Exit::Success
    );
    for f in [
        "manifest.json",
        "projects.ndjson",
        "packages.ndjson",
        "facts.ndjson",
        "sessions.ndjson",
        "reviews.ndjson",
    ] {
        assert_eq!(
            std::fs::read(ex.join(f)).unwrap(),
            std::fs::read(ex2.join(f)).unwrap(),
            "{f}"
        );
    }
    // Importing again into a non-empty store is refused.
    assert_eq!(
        cra(&d2, &["import", ex.to_str().unwrap()], "").0,
        Exit::Negative
    );
}

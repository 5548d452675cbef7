//! `cra relay ...` on a temporary data directory: deposit (hash of the §6.7 example), identity
//! mismatch (exit 2 with the wire error body), facts as-of, review flow, search, orient
//! Markdown, export -> import -> export byte-identical; then every subcommand against a real
//! server started in this process (`--url`), and the refusal to open a directory it holds.

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
        &[
            "--actor",
            "jordan",
            "project",
            "create",
            "proj_dev_relay",
            "Relay dev",
        ],
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
    // Review gates apply to the local actor: the author may not review, nor may a human close
    // an agent review.
    for who in [["--actor", "jordan"], ["--actor", "rev"]] {
        let (e, _, err) = cra(
            &d,
            &[who[0], who[1], "review", id, "--outcome", "complete"],
            "",
        );
        assert_eq!(
            (e, json(&err)["error"].clone()),
            (Exit::Negative, "review_not_allowed".into())
        );
    }
    let (e, out, _) = cra(
        &d,
        &[
            "--actor",
            "rev",
            "--actor-type",
            "agent",
            "review",
            id,
            "--outcome",
            "complete",
        ],
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
    let found = json(&out);
    assert!(!found["packages"].as_array().unwrap().is_empty(), "{found}");
    assert_eq!(
        found["matches"][0]["package_id"],
        found["packages"][0]["package_id"]
    );
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
        cra(
            &d2,
            &["--actor", "jordan", "import", ex.to_str().unwrap()],
            ""
        )
        .0,
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
        cra(
            &d2,
            &["--actor", "jordan", "import", ex.to_str().unwrap()],
            ""
        )
        .0,
        Exit::Negative
    );
}

/// A `cra serve` in this process: no key file given, so it writes its admin key into its data
/// directory, which `cra relay --url` then finds.
pub(crate) struct Server {
    rt: tokio::runtime::Runtime,
    server: Option<cra_runtime::RunningServer>,
    pub(crate) url: String,
    pub(crate) data: std::path::PathBuf,
}

impl Server {
    fn start(data: &Path) -> Self {
        Self::start_with(
            data,
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases/dev.cra.github-ops"),
        )
    }

    /// A server over `data` with the one atlas `atlas`.
    pub(crate) fn start_with(data: &Path, atlas: std::path::PathBuf) -> Self {
        let mut config = cra_runtime::config::RuntimeConfig {
            addr: "127.0.0.1:0".into(),
            data: data.to_path_buf(),
            atlases: vec![atlas],
            ..Default::default()
        };
        config.limits.requests_per_second = 0;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (state, _) = cra_runtime::build_runtime(
            config,
            std::sync::Arc::new(cra_wire::SystemClock),
            std::sync::Arc::new(cra_wire::UuidV7Ids),
        )
        .unwrap();
        let server = rt
            .block_on(cra_runtime::start(state, std::future::pending()))
            .unwrap();
        let url = format!("http://{}", server.addr);
        Self {
            rt,
            server: Some(server),
            url,
            data: data.to_path_buf(),
        }
    }

    /// `cra relay --url <this server> --data <its data dir> ARGS`.
    fn cra(&self, args: &[&str], stdin: &str) -> (Exit, String, String) {
        let mut argv = vec!["--url", self.url.as_str()];
        argv.extend_from_slice(args);
        cra(&self.data, &argv, stdin)
    }

    fn ok(&self, args: &[&str], stdin: &str) -> Value {
        let (e, out, err) = self.cra(args, stdin);
        assert_eq!(e, Exit::Success, "cra relay {args:?}: {err}");
        json(&out)
    }

    fn refused(&self, args: &[&str], stdin: &str) -> Value {
        let (e, out, err) = self.cra(args, stdin);
        assert_eq!(e, Exit::Negative, "cra relay {args:?}: {out}");
        json(&err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            let _ = self.rt.block_on(s.shutdown());
        }
    }
}

/// The admin's package of the §6.7 example shape in `project`.
fn admin_package(id: &str, project: &str, status: &str, title: &str) -> String {
    MINIMAL
        .replace("pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d", id)
        .replace("proj_dev_relay", project)
        .replace("\"jordan\"", "\"admin\"")
        .replace("\"complete\"", &format!("\"{status}\""))
        .replace("Shipped archive/de-archive", title)
}

const EXPORT_FILES: [&str; 6] = [
    "manifest.json",
    "projects.ndjson",
    "packages.ndjson",
    "facts.ndjson",
    "sessions.ndjson",
    "reviews.ndjson",
];

/// Every `cra relay` subcommand against a server (`--url`; the credential from the data
/// directory's admin key or `--token`), printing what local mode prints; export from one server
/// and import into another is byte-identical; a local open of the held directory names the
/// server.
#[test]
fn relay_commands_against_a_server() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Server::start(&tmp.path().join("served"));
    let p = "proj_remote";

    let created = s.ok(&["project", "create", p, "Remote"], "");
    assert_eq!(created["project_id"], p);
    assert!(created["audit_session_id"].is_string(), "{created}");
    let e = s.refused(&["project", "create", p, "Remote"], "");
    assert_eq!(e["error"], "already_exists");

    // deposit from a file and from standard input; an identical replay is not created again.
    let first = admin_package("pkg_r1", p, "complete", "Soft archive shipped");
    let file = tmp.path().join("pkg_r1.json");
    std::fs::write(&file, &first).unwrap();
    let d = s.ok(&["deposit", file.to_str().unwrap()], "");
    assert_eq!(d["created"], true);
    assert!(
        d["package"]["content_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(s.ok(&["deposit", "-"], &first)["created"], false);
    // The same package deposited locally hashes and prints the same.
    let local = tmp.path().join("local");
    cra(
        &local,
        &["--actor", "admin", "project", "create", p, "Remote"],
        "",
    );
    let (e, out, err) = cra(&local, &["--actor", "admin", "deposit", "-"], &first);
    assert_eq!(e, Exit::Success, "{err}");
    assert_eq!(
        json(&out),
        d,
        "local and server mode print the same deposit"
    );
    // created_by.id must be the token's actor.
    let e = s.refused(&["deposit", "-"], &MINIMAL.replace("proj_dev_relay", p));
    assert_eq!(e["error"], "identity_mismatch");
    let e = s.refused(&["deposit", "-"], "{\"package_id\": 1}");
    assert_eq!(e["error"], "invalid_schema");

    let draft = admin_package("pkg_r2", p, "draft", "Vector index latency");
    assert_eq!(s.ok(&["deposit", "-"], &draft)["created"], true);

    // facts: assert twice, then every view, then invalidate.
    let fact = |value: &str, from: &str| {
        s.ok(
            &[
                "facts",
                "assert",
                "--project",
                p,
                "--subject",
                "dash",
                "--predicate",
                "owner",
                "--value",
                value,
                "--valid-from",
                from,
            ],
            "",
        )
    };
    let f1 = fact("ana", "2026-04-01T00:00:00Z");
    assert_eq!(f1["value"], "ana");
    assert!(
        f1.get("recorded_at").is_none() && f1.get("fact").is_none(),
        "{f1}"
    );
    let f2 = fact("ben", "2026-04-10T00:00:00Z");
    let get = |extra: &[&str]| {
        let mut args = vec!["facts", "get", "--project", p, "--subject", "dash"];
        args.extend_from_slice(extra);
        s.ok(&args, "")
    };
    assert_eq!(get(&[])[0]["value"], "ben");
    assert_eq!(get(&["--as-of", "2026-04-05T00:00:00Z"])[0]["value"], "ana");
    let hist = get(&["--history"]);
    assert_eq!(hist.as_array().unwrap().len(), 2);
    assert_eq!(hist[0]["valid_to"], f2["valid_from"]);
    // What the server believed when it recorded the first fact: ana.
    let believed = get(&["--recorded-as-of", f1["created_at"].as_str().unwrap()]);
    assert_eq!(believed[0]["value"], "ana", "{believed}");
    let e = s.refused(&["facts", "get", "--project", p, "--as-of", "soon"], "");
    assert_eq!(e["error"], "invalid_schema");
    let inv = || {
        s.ok(
            &[
                "facts",
                "invalidate",
                "--project",
                p,
                "--subject",
                "dash",
                "--predicate",
                "owner",
            ],
            "",
        )
    };
    assert_eq!(inv(), serde_json::json!({"invalidated": 1}));
    assert_eq!(inv(), serde_json::json!({"invalidated": 0}));
    assert_eq!(get(&[]), serde_json::json!([]));

    // review flow.
    let flagged = s.ok(
        &[
            "flag",
            "pkg_r2",
            "--review-type",
            "agent",
            "--note",
            "check",
        ],
        "",
    );
    assert_eq!(flagged["status"], "awaiting_review");
    // The admin key's actor authored pkg_r2 (and is human): the server refuses its review.
    let e = s.refused(&["review", "pkg_r2", "--outcome", "complete"], "");
    assert_eq!(e["error"], "review_not_allowed");
    let e = s.refused(&["flag", "pkg_r2", "--review-type", "agent"], "");
    assert_eq!(e["error"], "invalid_transition");
    let e = s.refused(&["flag", "pkg_none"], "");
    assert_eq!(e["error"], "package_not_found");

    // pull: specific, latest (with a filter), relevant with scores.
    let one = s.ok(&["pull", "--id", "pkg_r1"], "");
    assert_eq!(one, d["package"]);
    let e = s.refused(&["pull", "--id", "pkg_none"], "");
    assert_eq!(e["error"], "package_not_found");
    let latest = s.ok(&["pull", "--project", p, "--latest", "--limit", "1"], "");
    assert_eq!(latest["packages"][0]["package_id"], "pkg_r2");
    assert_eq!(latest["quarantined"], serde_json::json!([]));
    let tagged = s.ok(
        &[
            "pull",
            "--project",
            p,
            "--latest",
            "--tag",
            "cli",
            "--tag",
            "archive",
        ],
        "",
    );
    assert_eq!(tagged["packages"].as_array().unwrap().len(), 2);
    let none = s.ok(
        &["pull", "--project", p, "--latest", "--topic", "nothing"],
        "",
    );
    assert_eq!(none["packages"], serde_json::json!([]));
    let found = s.ok(&["pull", "--project", p, "--query", "vector latency"], "");
    assert_eq!(found["packages"][0]["package_id"], "pkg_r2", "{found}");
    assert_eq!(found["matches"][0]["package_id"], "pkg_r2");
    assert!(found["matches"][0]["score"].as_f64().unwrap() > 0.0);
    let e = s.refused(
        &["pull", "--project", p, "--query", "x", "--since", "later"],
        "",
    );
    assert_eq!(e["error"], "invalid_schema");

    // orient: the bundle and the briefing.
    let bundle = s.ok(&["orient", "--project", p, "--window-days", "100000"], "");
    assert_eq!(bundle["project"]["project_id"], p);
    assert_eq!(bundle["recent_packages"].as_array().unwrap().len(), 2);
    let (e, md, _) = s.cra(
        &[
            "orient",
            "--project",
            p,
            "--window-days",
            "100000",
            "--markdown",
        ],
        "",
    );
    assert_eq!(e, Exit::Success);
    assert!(md.starts_with("# Orientation: Remote"), "{md}");
    assert!(md.contains("Migration 009 applied"), "{md}");

    // archive refuses writes until unarchived.
    assert!(s.ok(&["project", "archive", p], "")["archived_at"].is_string());
    let e = s.refused(
        &["deposit", "-"],
        &admin_package("pkg_r3", p, "complete", "Late"),
    );
    assert_eq!(e["error"], "project_archived");
    assert!(s.ok(&["project", "unarchive", p], "")["archived_at"].is_null());

    // export (all, and one project) and import into a second, empty server.
    let ex = tmp.path().join("ex");
    let summary = s.ok(&["export", ex.to_str().unwrap()], "");
    assert_eq!(
        (
            summary["projects"].clone(),
            summary["packages"].clone(),
            summary["facts"].clone()
        ),
        (1.into(), 2.into(), 2.into())
    );
    let ex_p = tmp.path().join("ex_p");
    s.ok(&["export", ex_p.to_str().unwrap(), "--project", p], "");
    for f in EXPORT_FILES {
        assert_eq!(
            std::fs::read(ex.join(f)).unwrap(),
            std::fs::read(ex_p.join(f)).unwrap(),
            "{f}: the only project's export is the whole export"
        );
    }
    let t = Server::start(&tmp.path().join("served2"));
    let imported = t.ok(&["import", ex.to_str().unwrap(), "--member", "ops-bot"], "");
    assert_eq!(imported["packages"], 2);
    let ex2 = tmp.path().join("ex2");
    t.ok(&["export", ex2.to_str().unwrap()], "");
    for f in EXPORT_FILES {
        assert_eq!(
            std::fs::read(ex.join(f)).unwrap(),
            std::fs::read(ex2.join(f)).unwrap(),
            "{f}: export -> import -> export over HTTP is byte-identical"
        );
    }
    let e = t.refused(&["import", ex.to_str().unwrap()], "");
    assert_eq!(e["error"], "already_exists");
    // A tampered export is refused by name before anything is sent.
    let packages = std::fs::read_to_string(ex.join("packages.ndjson")).unwrap();
    std::fs::write(
        ex.join("packages.ndjson"),
        packages.replace("Soft archive shipped", "Hard archive shipped"),
    )
    .unwrap();
    let u = Server::start(&tmp.path().join("served3"));
    let e = u.refused(&["import", ex.to_str().unwrap()], "");
    assert_eq!(e["error"], "integrity_error");
    assert!(e["message"].as_str().unwrap().contains("pkg_r1"), "{e}");

    // Credentials: a wrong --token is refused by the server; no credential at all cannot run.
    let e = s.refused(&["--token", "cra_wrong", "pull", "--id", "pkg_r1"], "");
    assert_eq!(e["error"], "unauthenticated");
    let nowhere = tmp.path().join("no-keys");
    let (e, _, err) = cra(&nowhere, &["--url", &s.url, "pull", "--id", "pkg_r1"], "");
    assert_eq!(e, Exit::CouldNotRun);
    assert!(err.contains("--token"), "{err}");
    // An unreachable server cannot run either.
    let (e, _, err) = cra(
        &s.data,
        &["--url", "http://127.0.0.1:9", "pull", "--id", "pkg_r1"],
        "",
    );
    assert_eq!(e, Exit::CouldNotRun);
    assert!(err.contains("cannot reach the server"), "{err}");

    // Local mode on the directory the server holds: refused, naming the server's process.
    let (e, _, err) = cra(&s.data, &["facts", "get", "--project", p], "");
    assert_eq!(e, Exit::CouldNotRun);
    assert!(err.contains("held by a running cra server"), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "{err}"
    );
    assert!(err.contains("--url"), "{err}");
}

/// `cra relay session start|show|end` (§5.5), locally and against a server: the same session
/// shape either way; a deposit naming the session is listed in it; only its actor ends it.
#[test]
fn relay_sessions_from_the_command_line_in_both_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("local");
    let p = "proj_sessions";
    cra(
        &d,
        &["--actor", "jordan", "project", "create", p, "Sessions"],
        "",
    );
    let (e, out, err) = cra(
        &d,
        &["--actor", "jordan", "session", "start", "--project", p],
        "",
    );
    assert_eq!(e, Exit::Success, "{err}");
    let local = json(&out);
    let sid = local["session_id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with("sess_"), "{local}");
    let pkg = MINIMAL
        .replace("proj_dev_relay", p)
        .replace("\"session_id\":null", &format!("\"session_id\":\"{sid}\""));
    let (e, _, err) = cra(&d, &["--actor", "jordan", "deposit", "-"], &pkg);
    assert_eq!(e, Exit::Success, "{err}");
    let id = "pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d";
    let (e, _, err) = cra(&d, &["pull", "--id", id, "--project", p], "");
    assert_eq!(e, Exit::Success, "{err}");
    // Another project that exists: the package is not in it (an unknown project would be
    // `project_not_found`, as a server answers).
    cra(
        &d,
        &[
            "--actor",
            "jordan",
            "project",
            "create",
            "proj_other",
            "Other",
        ],
        "",
    );
    let (e, _, err) = cra(&d, &["pull", "--id", id, "--project", "proj_other"], "");
    assert_eq!(
        (e, json(&err)["error"].clone()),
        (Exit::Negative, "package_not_found".into())
    );
    let (e, out, _) = cra(&d, &["session", "show", &sid, "--project", p], "");
    assert_eq!(e, Exit::Success);
    assert_eq!(
        json(&out)["packages_deposited"],
        serde_json::json!(["pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"])
    );
    let (e, _, err) = cra(
        &d,
        &["--actor", "mallory", "session", "end", &sid, "--project", p],
        "",
    );
    assert_eq!(e, Exit::Negative);
    assert_eq!(json(&err)["error"], "unauthorized");
    let (e, _, err) = cra(
        &d,
        &["session", "show", &sid, "--project", "proj_other"],
        "",
    );
    assert_eq!(
        (e, json(&err)["error"].clone()),
        (Exit::Negative, "session_not_found".into())
    );
    let (e, out, _) = cra(
        &d,
        &["--actor", "jordan", "session", "end", &sid, "--project", p],
        "",
    );
    assert_eq!(e, Exit::Success);
    assert!(json(&out)["ended_at"].is_string());

    let s = Server::start(&tmp.path().join("served"));
    s.ok(&["project", "create", p, "Sessions"], "");
    let remote = s.ok(&["session", "start", "--project", p], "");
    let keys: Vec<&String> = remote.as_object().unwrap().keys().collect();
    let local_keys: Vec<&String> = local.as_object().unwrap().keys().collect();
    assert_eq!(keys, local_keys, "both modes print the same session shape");
    let rsid = remote["session_id"].as_str().unwrap();
    let shown = s.ok(&["session", "show", rsid, "--project", p], "");
    assert_eq!(shown, remote);
    let ended = s.ok(&["session", "end", rsid, "--project", p], "");
    assert!(ended["ended_at"].is_string(), "{ended}");
}

/// Local mode is a front door onto the service layer: every write is recorded in the project's
/// audit chain with the change, so a server started later on the directory serves the project
/// and its chain verifies. Reads without `--actor` work; writes without it do not.
#[test]
fn local_writes_are_recorded_and_a_later_server_serves_them() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let p = "proj_dev_relay";
    let ok = |args: &[&str], stdin: &str| {
        let (e, out, err) = cra(&d, args, stdin);
        assert_eq!(e, Exit::Success, "cra relay {args:?}: {err}");
        out
    };
    let (e, _, err) = cra(&d, &["project", "create", p, "Dev"], "");
    assert_eq!(e, Exit::CouldNotRun, "a project needs a creator: {err}");
    let created = json(&ok(
        &["--actor", "jordan", "project", "create", p, "Dev"],
        "",
    ));
    let audit = created["audit_session_id"].as_str().unwrap().to_owned();
    ok(&["--actor", "jordan", "deposit", "-"], MINIMAL);
    ok(
        &[
            "--actor",
            "jordan",
            "facts",
            "assert",
            "--project",
            p,
            "--subject",
            "dash",
            "--predicate",
            "owner",
            "--value",
            "ana",
        ],
        "",
    );
    let session = json(&ok(
        &["--actor", "jordan", "session", "start", "--project", p],
        "",
    ));
    let sid = session["session_id"].as_str().unwrap();
    ok(
        &["--actor", "jordan", "session", "end", sid, "--project", p],
        "",
    );
    ok(&["pull", "--latest", "--project", p], "");

    assert!(
        !d.join("api-keys.toml").exists(),
        "local mode writes no keys file: the first server start writes its admin key"
    );
    let s = Server::start(&d);
    let pulled = s.ok(
        &["pull", "--id", "pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"],
        "",
    );
    assert_eq!(pulled["project_id"], p);
    let token = cra_runtime::auth::local_admin_token(&d).unwrap();
    let events: Vec<Value> = cra_runtime::tls::blocking_http_client()
        .build()
        .unwrap()
        .get(format!("{}/v1/traces/{audit}", s.url))
        .bearer_auth(token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "session.started",
            "relay.project.created",
            "relay.package.deposited",
            "relay.fact.asserted",
            "relay.session.started",
            "relay.session.ended",
        ],
        "every local write is in the project's audit chain"
    );
    assert_eq!(events[1]["payload"]["created_by"]["id"], "jordan");
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    let report = cra_trace::verify::verify_text_reference(text.as_bytes(), true);
    assert!(report.is_valid(), "{:?}", report.findings);
}

/// `cra relay` local mode on a data directory encrypted at rest: with `--storage-key-file` it
/// writes and reads as without, and what it wrote (a project name, a short fact, a long
/// package) is in no file of the directory; without the key, with another, or with a key file
/// that cannot be read, the directory is refused at open with a message naming what it needs.
#[test]
fn local_mode_opens_an_encrypted_directory_with_its_key_only() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    let key_file = |name: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, cra_store::StorageKey::generate_text()).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (key, other) = (key_file("storage.key"), key_file("other.key"));
    let seed: u64 = rand::random();
    eprintln!("marker seed {seed:016x}");
    let m = format!("mk{seed:016x}");
    let p = "proj_dev_relay";
    let ok = |args: &[&str], stdin: &str| {
        let mut keyed = vec!["--storage-key-file", key.as_str(), "--actor", "jordan"];
        keyed.extend_from_slice(args);
        let (e, out, err) = cra(&d, &keyed, stdin);
        assert_eq!(e, Exit::Success, "cra relay {args:?}: {err}");
        json(&out)
    };
    ok(&["project", "create", p, &format!("Relay {m}")], "");
    let mut long = json(MINIMAL);
    long["handoff_note"] = Value::String(format!("{}{m}", "long handoff ".repeat(600)));
    ok(&["deposit", "-"], &long.to_string());
    let fact = [
        "facts",
        "assert",
        "--project",
        p,
        "--subject",
        "dash",
        "--predicate",
        "owner",
        "--value",
    ];
    ok(&[&fact[..], &[m.as_str()]].concat(), "");

    let pulled = ok(
        &["pull", "--id", "pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"],
        "",
    );
    assert_eq!(pulled["handoff_note"], long["handoff_note"]);
    assert_eq!(ok(&["facts", "get", "--project", p], "")[0]["value"], m);
    let found = ok(&["pull", "--project", p, "--query", &m], "");
    assert!(
        found
            .to_string()
            .contains("pkg_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"),
        "{found}"
    );
    assert!(
        !cra_store::testing::files_hold(&d, &m),
        "the marker is stored"
    );

    let refused = |flags: &[&str]| {
        let args = [flags, &["pull", "--latest", "--project", p]].concat();
        let (e, _, err) = cra(&d, &args, "");
        assert_eq!(e, Exit::CouldNotRun, "{err}");
        err
    };
    let none = refused(&[]);
    assert!(
        none.contains("no storage key is configured") && none.contains("--storage-key-file"),
        "{none}"
    );
    let wrong = refused(&["--storage-key-file", &other]);
    assert!(wrong.contains("not among the configured keys"), "{wrong}");
    let missing = tmp.path().join("missing.key");
    let unreadable = refused(&["--storage-key-file", missing.to_str().unwrap()]);
    assert!(
        unreadable.contains("--storage-key-file") && unreadable.contains("cannot read"),
        "{unreadable}"
    );
}

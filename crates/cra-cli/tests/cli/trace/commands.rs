//! `cra trace export | state | replay | diff | retention`: the library functions on a real session (redb,
//! and PostgreSQL when `CRA_TEST_POSTGRES_URL` is set), their refusals, and the binary.

use std::path::{Path, PathBuf};

use clap::Parser;
use cra_cli::cmd::trace::TraceCommand;
use cra_cli::cmd::trace_export::file_name;
use cra_cli::{Cli, Command, Exit};
use cra_trace::{ChainHead, EventDraft, TraceEvent, seal};
use serde_json::Value;

use super::live::{Live, OPERATOR, atlas_dir};

fn parse(args: &[&str]) -> TraceCommand {
    let mut full = vec!["cra", "trace"];
    full.extend_from_slice(args);
    match Cli::try_parse_from(full) {
        Ok(Cli {
            command: Command::Trace(t),
            ..
        }) => t,
        Ok(_) => panic!("not a trace command"),
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// Runs a parsed trace subcommand with `stdin`; returns (exit, stdout, stderr).
fn run(cmd: TraceCommand, stdin: &[u8]) -> (Exit, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let exit = match cmd {
        TraceCommand::Replay(a) => {
            cra_cli::cmd::trace_replay::replay(&a, stdin, &mut out, &mut err)
        }
        TraceCommand::Diff(a) => cra_cli::cmd::trace_diff::diff(&a, stdin, &mut out, &mut err),
        TraceCommand::State(a) => cra_cli::cmd::trace_state::state(&a, stdin, &mut out, &mut err),
        TraceCommand::Export(a) => {
            cra_cli::cmd::trace_export::export(&a, &mut out, &mut err, false)
        }
        TraceCommand::Verify(a) => {
            cra_cli::cmd::trace::verify(&a, stdin, &mut out, &mut err, false)
        }
        TraceCommand::Retention(a) => {
            cra_cli::cmd::trace_retention::retention(&a, &mut out, &mut err)
        }
        TraceCommand::Tail(_) => panic!("not here"),
    };
    (
        exit,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

fn cli(args: &[&str]) -> (Exit, String, String) {
    run(parse(args), b"")
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `cra atlas simulate ATLAS` against the chains `source` names, as a library call.
fn simulate(
    atlas: PathBuf,
    source: impl FnOnce(&mut cra_cli::cmd::atlas_simulate::SimulateArgs),
) -> cra_cli::cmd::atlas_simulate::SimulationReport {
    let mut args = cra_cli::cmd::atlas_simulate::SimulateArgs {
        atlas,
        with: vec![],
        against: vec![],
        store: cra_cli::cmd::trace_io::StoreArgs::default(),
        url: None,
        token: None,
        output: cra_cli::output::OutputFormat::Json,
    };
    source(&mut args);
    cra_cli::cmd::atlas_simulate::simulate(&args).unwrap()
}

fn read_events(path: &Path) -> Vec<TraceEvent> {
    cra_trace::diff::parse_events(&std::fs::read(path).unwrap()).unwrap()
}

/// Re-seals edited events into a valid chain (sequence, links, hashes).
fn reseal(events: &[TraceEvent]) -> String {
    let mut head = ChainHead::genesis();
    let mut text = String::new();
    for e in events {
        let sealed = seal(
            EventDraft {
                trace_id: e.trace_id.clone(),
                span_id: e.span_id.clone(),
                parent_span_id: e.parent_span_id.clone(),
                event_type: e.event_type.clone(),
                payload: e.payload.clone(),
            },
            &e.session_id,
            &head,
            e.event_id.clone(),
            e.timestamp.clone(),
        );
        head = ChainHead::after(&sealed);
        text.push_str(&serde_json::to_string(&sealed).unwrap());
        text.push('\n');
    }
    text
}

/// A copy of the fixture atlas whose deny policy on `db.drop` became an allow.
fn changed_atlas(dir: &Path) -> PathBuf {
    let copy = dir.join("changed-atlas");
    std::fs::create_dir_all(copy.join("context")).unwrap();
    std::fs::copy(
        atlas_dir().join("context/runbook.md"),
        copy.join("context/runbook.md"),
    )
    .unwrap();
    let text = std::fs::read_to_string(atlas_dir().join("atlas.json")).unwrap();
    let flipped = text.replacen(
        r#"{"policy_id": "deny-drop", "type": "deny""#,
        r#"{"policy_id": "deny-drop", "type": "allow""#,
        1,
    );
    assert_ne!(text, flipped, "the fixture changed; update the flip");
    std::fs::write(copy.join("atlas.json"), flipped).unwrap();
    copy
}

/// Exports a stopped live server's session from its data directory and checks the state.
fn check_state(doc: &Value, facts: &super::live::Facts) {
    assert_eq!(doc["ok"], true, "{doc:#}");
    assert_eq!(doc["chain"]["valid"], true);
    let store = &doc["store"];
    assert_eq!(store["equal"], true, "{store:#}");
    assert_eq!(store["checked"]["session"], 1);
    assert_eq!(store["checked"]["resolutions"], 4);
    assert_eq!(store["checked"]["approvals"], 2);
    // read-1, ci-1, ci-2, ci-3, deploy-2, deploy-3: every execution that ran, with a key.
    assert_eq!(store["checked"]["executions"], 6);
    assert_eq!(store["checked"]["counters"], 3);
    let unchecked = store["unchecked"].as_array().unwrap();
    assert!(
        unchecked.iter().any(|u| u
            .as_str()
            .unwrap()
            .starts_with("1 execution(s) without an idempotency key")),
        "{unchecked:?}"
    );

    let st = &doc["state"];
    assert_eq!(st["session"]["agent_id"], "ops-bot");
    assert_eq!(st["session"]["ended"], true);
    assert_eq!(st["resolutions"][&facts.allow]["decision"], "allow");
    assert_eq!(st["resolutions"][&facts.deny]["decision"], "deny");
    assert_eq!(
        st["resolutions"][&facts.gated]["decision"],
        "requires_approval"
    );
    let ap = &st["approvals"][&facts.approval];
    assert_eq!(ap["status"], "granted");
    assert_eq!(ap["decided_by"], "oscar");
    assert_eq!(ap["note"], "release window open");
    let mut statuses: Vec<(String, String, String)> = st["executions"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| {
            (
                x["action_id"].as_str().unwrap().to_owned(),
                x["status"].as_str().unwrap().to_owned(),
                x["error"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    statuses.sort();
    let want: Vec<(String, String, String)> = [
        ("ci.rerun", "denied", "budget_exhausted"),
        ("ci.rerun", "success", ""),
        ("ci.rerun", "success", ""),
        ("ci.rerun", "success", ""),
        ("db.drop", "denied", "action_not_allowed"),
        ("deploy.run", "error", "deploy_failed"),
        ("deploy.run", "pending_approval", "approval_pending"),
        ("deploy.run", "pending_approval", "approval_pending"),
        ("deploy.run", "success", ""),
        ("doc.read", "success", ""),
        ("doc.read", "success", ""),
    ]
    .iter()
    .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
    .collect();
    assert_eq!(statuses, want);
    assert_eq!(st["executions"][&facts.dedup_execution]["deduplicated"], 1);
    let counters: Vec<(String, String, u64)> = st["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["policy_id"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
                c["value"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counters,
        [
            ("budget-ci".to_owned(), "budget".to_owned(), 9),
            ("rl-everything".to_owned(), "rate".to_owned(), 7),
            ("rl-reads".to_owned(), "rate".to_owned(), 2),
        ]
    );
    assert!(st["issues"].as_array().unwrap().is_empty(), "{st:#}");
}

#[test]
fn a_live_session_exports_reconstructs_and_replays() {
    let mut live = Live::start(None);
    let facts = live.drive();
    let dir = live.dir.path().to_owned();
    let sid = facts.session.clone();

    // Over HTTP while the server runs (it holds the data directory).
    let http_file = dir.join("http.trace.jsonl");
    let (exit, _, err) = cli(&[
        "export",
        "--session",
        &sid,
        "--url",
        &live.base,
        "--token",
        OPERATOR,
        "--out",
        s(&http_file),
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    // Every readable chain over HTTP (GET /v1/traces lists them): the same bytes.
    let http_all = dir.join("http-all");
    let (exit, out, err) = cli(&[
        "export",
        "--all",
        "--url",
        &live.base,
        "--token",
        OPERATOR,
        "--out",
        s(&http_all),
        "--json",
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    assert_eq!(json(&out)["sessions"], 1, "{out}");
    assert_eq!(
        std::fs::read(http_all.join(file_name(&sid))).unwrap(),
        std::fs::read(&http_file).unwrap()
    );
    // `trace state` reads the chain from the server too, and rebuilds the state the exported
    // file does.
    let state = [
        "state", "-o", "json", "--url", &live.base, "--token", OPERATOR,
    ];
    let (exit, out, err) = cli(&[&state[..], &["--session", &sid]].concat());
    assert_eq!(exit, Exit::Success, "{out}{err}");
    let (_, from_file, _) = cli(&["state", "-o", "json", s(&http_file)]);
    let (server, file) = (json(&out), json(&from_file));
    assert_eq!(
        (&server["ok"], &server["chain"]["valid"]),
        (&serde_json::json!(true), &serde_json::json!(true))
    );
    assert_eq!(server["state"], file["state"]);
    assert!(
        !server["state"]["resolutions"]
            .as_object()
            .unwrap()
            .is_empty()
    );
    let (exit, out, _) = cli(&[
        &state[..],
        &["--session", "0190a000-0000-7000-8000-00000000dead"],
    ]
    .concat());
    assert_eq!(
        (exit, json(&out)["error"].as_str()),
        (Exit::CouldNotRun, Some("session_not_found")),
        "{out}"
    );
    let (exit, _, err) = cli(&["export", "--session", &sid, "--data", s(&live.data)]);
    assert_eq!(exit, Exit::CouldNotRun, "the server holds the directory");
    assert!(err.contains("in use"), "{err}");
    // `cra atlas simulate --url`: every chain the server lists, re-decided; the same atlas
    // flips nothing.
    let over_http = simulate(atlas_dir(), |a| {
        a.url = Some(live.base.clone());
        a.token = Some(OPERATOR.to_owned());
    });
    assert_eq!((over_http.resolves, over_http.flips()), (4, 0));
    assert!(over_http.errors.is_empty(), "{:?}", over_http.errors);
    live.stop();
    // `--data`: the stopped server's store, the same resolves; a changed atlas flips the one
    // request that could touch db.drop.
    let from_store = simulate(atlas_dir(), |a| a.store.data = Some(live.data.clone()));
    assert_eq!((from_store.resolves, from_store.flips()), (4, 0));
    // Its executes, decided again on the recorded history, decide as recorded: the budget
    // spent by the three re-runs refuses the fourth again, the granted approvals clear their
    // deploys, the pending one is pending again.
    let x = &from_store.executes;
    assert_eq!((x.decided, x.flipped()), (11, 0), "{x:#?}");
    assert!(x.errors.is_empty(), "{:?}", x.errors);
    let flipped = simulate(changed_atlas(&dir), |a| {
        a.store.data = Some(live.data.clone())
    });
    assert_eq!(flipped.resolves_flipped, 1, "{:?}", flipped.by_policy);
    // The execute of db.drop, refused by deny-drop, would now run; nothing else flips.
    let x = &flipped.executes;
    assert_eq!((x.decided, x.flipped()), (11, 1), "{x:#?}");
    let (n, examples) = &x.flips["allow"];
    assert_eq!(*n, 1);
    assert_eq!(examples[0]["action_id"], "db.drop");
    assert_eq!(examples[0]["recorded"], "deny by deny-drop");

    // From the data directory: every session, one file each, the same bytes as over HTTP.
    let all = dir.join("all");
    let (exit, out, err) = cli(&[
        "export",
        "--all",
        "--data",
        s(&live.data),
        "--out",
        s(&all),
        "--json",
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    let summary = json(&out);
    assert_eq!(summary["sessions"], 1);
    let file = all.join(file_name(&sid));
    assert_eq!(summary["files"][0]["file"], s(&file));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        std::fs::read(&http_file).unwrap()
    );
    let events = read_events(&file);
    assert_eq!(summary["events"], events.len());
    let (exit, out, _) = cli(&["verify", "--lifecycle", "-o", "json", s(&file)]);
    assert_eq!(exit, Exit::Success, "{out}");
    // One session to standard output.
    let (exit, out, _) = cli(&["export", "--session", &sid, "--data", s(&live.data)]);
    assert_eq!(exit, Exit::Success);
    assert_eq!(out.as_bytes(), std::fs::read(&file).unwrap());

    // State reconstruction equals the stored state.
    let (exit, out, err) = cli(&["state", s(&file), "--data", s(&live.data), "-o", "json"]);
    assert_eq!(exit, Exit::Success, "{out}{err}");
    check_state(&json(&out), &facts);
    let (exit, out, _) = cli(&["state", s(&file), "--data", s(&live.data)]);
    assert_eq!(exit, Exit::Success);
    assert!(out.contains("store (redb, "), "{out}");
    assert!(out.contains("): equal ("), "{out}");

    // A trace that says the approval was rejected (re-sealed, so the chain verifies) disagrees
    // with the store at exactly that point.
    let mut edited = events.clone();
    if let Some(e) = edited
        .iter_mut()
        .find(|e| e.event_type == "approval.granted")
    {
        e.event_type = "approval.rejected".into();
    }
    let tampered = dir.join("tampered.trace.jsonl");
    std::fs::write(&tampered, reseal(&edited)).unwrap();
    let (exit, out, _) = cli(&["state", s(&tampered), "--data", s(&live.data), "-o", "json"]);
    assert_eq!(exit, Exit::Negative, "{out}");
    let doc = json(&out);
    assert_eq!(doc["chain"]["valid"], true);
    let diffs = doc["store"]["differences"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!(
        diffs[0]["pointer"],
        format!("/approvals/{}/status", facts.approval)
    );
    assert_eq!(diffs[0]["trace"], "rejected");
    assert_eq!(diffs[0]["store"], "granted");

    // Replay against the same atlas: identical, with either recorded clock.
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(&atlas_dir()), "-o", "json"]);
    let doc = json(&out);
    assert_eq!(exit, Exit::Success, "{doc:#}");
    assert_eq!(doc["identical"], true);
    assert_eq!(doc["cases"], 4);
    assert_eq!(doc["same"], 4);
    assert_eq!(doc["chain"]["valid"], true);
    assert!(doc["warnings"].as_array().unwrap().is_empty(), "{doc:#}");
    let (exit, out, _) = cli(&[
        "replay",
        s(&file),
        "--atlas",
        s(&atlas_dir()),
        "--now-from-trace",
        "-o",
        "json",
    ]);
    assert_eq!(exit, Exit::Success, "{out}");
    let doc = json(&out);
    assert_eq!(doc["clock"], "event");
    let request_times: Vec<&str> = events
        .iter()
        .filter(|e| e.event_type == "carp.request.received")
        .map(|e| e.timestamp.as_str())
        .collect();
    let used: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["now"].as_str().unwrap())
        .collect();
    assert_eq!(used, request_times);

    // Against a deliberately changed atlas: a warning names the digests, and the divergence is
    // reported at its pointer.
    let changed = changed_atlas(&dir);
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(&changed), "-o", "json"]);
    assert_eq!(exit, Exit::Negative, "{out}");
    let doc = json(&out);
    assert_eq!(doc["identical"], false);
    assert_eq!(
        doc["same"], 3,
        "only the request that could touch db.drop diverges"
    );
    assert_eq!(doc["diverged"], 1);
    let w = &doc["warnings"][0];
    assert_eq!(w["kind"], "digest_differs");
    assert_eq!(w["atlas_id"], "test.trace.ops");
    assert_eq!(w["requests"], 4);
    assert_ne!(w["recorded"], w["supplied"]);
    let first = &doc["first_divergence"];
    assert_eq!(first["goal"], "drop the staging database");
    assert_eq!(first["pointer"], "/allowed_actions/0");
    assert_eq!(first["recorded"], Value::Null);
    assert_eq!(first["replayed"]["action_id"], "db.drop");
    let diverged = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["outcome"] == "diverged")
        .unwrap();
    let pointers: Vec<&str> = diverged["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["pointer"].as_str().unwrap())
        .collect();
    assert!(pointers.contains(&"/decision/type"), "{pointers:?}");
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(&changed)]);
    assert_eq!(exit, Exit::Negative);
    assert!(
        out.contains("warning: atlas test.trace.ops differs from the recorded one"),
        "{out}"
    );
    assert!(out.contains("first divergence: request"), "{out}");
    assert!(out.contains("  at /allowed_actions/0"), "{out}");

    // Both versions supplied: each request picks the one with its recorded digest.
    let (exit, out, _) = cli(&[
        "replay",
        s(&file),
        "--atlas",
        s(&changed),
        "--atlas",
        s(&atlas_dir()),
        "-o",
        "json",
    ]);
    assert_eq!(exit, Exit::Success, "{out}");
    assert!(json(&out)["warnings"].as_array().unwrap().is_empty());

    // Diff: the export against its tampered copy differs in one event's type, so the granted
    // approval is removed and a rejected one added.
    let (exit, out, _) = cli(&["diff", s(&file), s(&tampered), "-o", "json"]);
    assert_eq!(exit, Exit::Negative);
    let doc = json(&out);
    assert_eq!(doc["removed"][0]["event_type"], "approval.granted");
    assert_eq!(doc["added"][0]["event_type"], "approval.rejected");
    let (exit, _, _) = cli(&["diff", s(&file), s(&http_file)]);
    assert_eq!(exit, Exit::Success);
}

#[test]
fn a_postgres_session_reconstructs_equal() {
    let Some(url) = cra_store::testing::postgres_url("a_postgres_session_reconstructs_equal")
    else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "cli_trace_state");
    let mut live = Live::start(Some((&url, schema.name())));
    let facts = live.drive();
    live.stop();
    let dir = live.dir.path().to_owned();
    let all = dir.join("all");
    let (exit, _, err) = cli(&[
        "export",
        "--all",
        "--postgres",
        &url,
        "--postgres-schema",
        schema.name(),
        "--out",
        s(&all),
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    let file = all.join(file_name(&facts.session));
    let (exit, out, err) = cli(&[
        "state",
        s(&file),
        "--postgres",
        &url,
        "--postgres-schema",
        schema.name(),
        "-o",
        "json",
    ]);
    assert_eq!(exit, Exit::Success, "{out}{err}");
    let doc = json(&out);
    assert_eq!(doc["store"]["backend"], "postgres");
    check_state(&doc, &facts);
}

#[test]
fn refusals_exit_1_with_an_error_body() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.trace.jsonl");
    for cmd in [
        vec![
            "replay",
            s(&missing),
            "--atlas",
            s(&atlas_dir()),
            "-o",
            "json",
        ],
        vec!["state", s(&missing), "-o", "json"],
        vec!["diff", s(&missing), s(&missing), "-o", "json"],
    ] {
        let (exit, out, err) = cli(&cmd);
        assert_eq!(exit, Exit::CouldNotRun, "{cmd:?}");
        assert_eq!(json(&out)["error"], "not_found", "{cmd:?}");
        assert!(err.contains("cannot read"), "{err}");
    }
    // A line that is not an event.
    let bad = dir.path().join("bad.trace.jsonl");
    std::fs::write(&bad, "{\"trace_version\": \"1.0\"}\n").unwrap();
    let (exit, out, _) = cli(&["state", s(&bad), "-o", "json"]);
    assert_eq!(exit, Exit::CouldNotRun);
    let doc = json(&out);
    assert_eq!(doc["error"], "invalid_request");
    assert!(doc["message"].as_str().unwrap().contains("line 1"), "{doc}");
    // Both sides of a diff cannot be standard input.
    let (exit, _, err) = cli(&["diff", "-", "-"]);
    assert_eq!(exit, Exit::CouldNotRun);
    assert!(err.contains("only one"), "{err}");
    // An invalid atlas is exit 3, a missing one 1.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/session.trace.jsonl");
    let (exit, _, err) = cli(&[
        "replay",
        s(&example),
        "--atlas",
        s(&dir.path().join("nope")),
    ]);
    assert_eq!(exit, Exit::CouldNotRun, "{err}");
    let broken = dir.path().join("broken-atlas");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("atlas.json"), "{}").unwrap();
    let (exit, _, err) = cli(&["replay", s(&example), "--atlas", s(&broken)]);
    assert_eq!(exit, Exit::InvalidAtlas, "{err}");

    // Export: no database in the directory, no session, --all without a directory.
    let (exit, out, _) = cli(&[
        "export",
        "--session",
        "x",
        "--data",
        s(dir.path()),
        "--json",
        "--out",
        s(&missing),
    ]);
    assert_eq!(exit, Exit::CouldNotRun);
    assert_eq!(json(&out)["error"], "not_found");
    assert!(!dir.path().join("cra.redb").exists(), "nothing was created");
    let store_dir = dir.path().join("data");
    drop(cra_store::RedbStore::open(&store_dir).unwrap());
    let (exit, _, err) = cli(&["export", "--session", "nope", "--data", s(&store_dir)]);
    assert_eq!(exit, Exit::CouldNotRun);
    assert!(err.contains("no session nope"), "{err}");
    let (exit, _, err) = cli(&["export", "--all", "--data", s(&store_dir)]);
    assert_eq!(exit, Exit::CouldNotRun);
    assert!(err.contains("--out DIR"), "{err}");
    // An empty store exports nothing, successfully.
    let (exit, out, _) = cli(&[
        "export",
        "--all",
        "--data",
        s(&store_dir),
        "--out",
        s(&dir.path().join("none")),
        "--json",
    ]);
    assert_eq!(exit, Exit::Success);
    assert_eq!(json(&out)["sessions"], 0);
    // Neither --session nor --all.
    assert!(Cli::try_parse_from(["cra", "trace", "export"]).is_err());
}

#[test]
fn diff_reads_standard_input_and_includes_what_it_is_told() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cra-trace/tests/fixtures/diff/same-work-other-run");
    let a = fixtures.join("a.trace.jsonl");
    let b = std::fs::read(fixtures.join("b.trace.jsonl")).unwrap();
    let (exit, out, _) = run(parse(&["diff", s(&a), "-"]), &b);
    assert_eq!(exit, Exit::Success, "{out}");
    assert!(out.contains("20 paired"), "{out}");
    assert!(
        out.ends_with("same (ids, timestamps, hashes ignored)\n"),
        "{out}"
    );
    let (exit, out, _) = run(
        parse(&["diff", s(&a), "-", "--include", "ids,hashes", "-o", "json"]),
        &b,
    );
    assert_eq!(exit, Exit::Negative);
    let doc = json(&out);
    assert_eq!(doc["included"], serde_json::json!(["ids", "hashes"]));
    assert_eq!(doc["b"], "standard input");
    let first = &doc["changed"][0]["fields"];
    assert_eq!(first[0]["pointer"], "/event_id");
}

#[test]
fn the_binary_runs_diff_and_explains_every_command() {
    let bin = env!("CARGO_BIN_EXE_cra");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cra-trace/tests/fixtures/diff");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let o = run(&[
        "trace",
        "diff",
        s(&fixtures.join("extra-resolve/a.trace.jsonl")),
        s(&fixtures.join("extra-resolve/b.trace.jsonl")),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("+ added    B#9  carp.request.received \"check the CI status\""),
        "{text}"
    );
    assert!(
        text.contains(
            "traces differ (ids, timestamps, hashes ignored): 3 added, 0 removed, 0 changed"
        ),
        "{text}"
    );
    for (cmd, needle) in [
        ("replay", "--now-from-trace"),
        ("diff", "--include"),
        ("state", "--postgres"),
        ("export", "--all"),
    ] {
        let o = run(&["trace", cmd, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        let help = String::from_utf8(o.stdout).unwrap();
        assert!(help.contains(needle), "{cmd}: {help}");
        assert!(help.contains("Exit status"), "{cmd}: {help}");
    }
}

/// `cra trace retention` on a stopped server's data directory, at an injected clock: a dry run
/// lists the ended session and changes nothing; the run records it in the operator audit chain,
/// removes it, and the audit chain verifies; `--days 0` is refused with exit 1.
#[test]
fn retention_lists_then_removes_an_ended_session_and_records_it() {
    use cra_cli::cmd::trace_retention::run as apply;
    let mut live = Live::start(None);
    let facts = live.drive();
    live.stop();
    let data = live.data.clone();
    let args = |extra: &[&str]| {
        let mut v = vec!["retention", "--days", "30", "--data", s(&data)];
        v.extend_from_slice(extra);
        match parse(&v) {
            TraceCommand::Retention(a) => a,
            _ => unreachable!("a retention command"),
        }
    };
    let clock = cra_wire::FixedClock::parse("2026-04-15T00:00:00Z").unwrap();
    let ids = cra_wire::SequentialIds::new(1_776_211_200_000, 9);

    let dry = apply(&args(&["--dry-run"]), &clock, &ids).unwrap();
    assert!(dry.dry_run);
    let listed: Vec<&str> = dry.sessions.iter().map(|x| x.session_id.as_str()).collect();
    assert_eq!(listed, [facts.session.as_str()]);
    assert!(dry.recorded.is_none());
    let (exit, out, _) = cli(&["export", "--session", &facts.session, "--data", s(&data)]);
    assert_eq!(exit, Exit::Success, "a dry run removes nothing: {out}");

    let done = apply(&args(&[]), &clock, &ids).unwrap();
    assert_eq!(done.sessions.len(), 1);
    assert!(done.recorded.is_some(), "the removal is recorded");
    let (exit, _, err) = cli(&["export", "--session", &facts.session, "--data", s(&data)]);
    assert_eq!(exit, Exit::CouldNotRun, "removed: {err}");
    let audit = cra_store::retention::OPERATOR_AUDIT_SESSION;
    let file = live.dir.path().join("audit.trace.jsonl");
    let (exit, _, err) = cli(&[
        "export",
        "--session",
        audit,
        "--data",
        s(&data),
        "--out",
        s(&file),
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    let (exit, out, _) = cli(&["verify", "--lifecycle", "-o", "json", s(&file)]);
    assert_eq!(exit, Exit::Success, "{out}");
    let recorded = read_events(&file).pop().unwrap();
    assert_eq!(recorded.event_type, "operator.retention.applied");
    assert_eq!(
        recorded.payload["sessions"][0]["session_id"],
        facts.session.as_str()
    );

    let (exit, out, err) = cli(&["retention", "--days", "0", "--data", s(&data), "-o", "json"]);
    assert_eq!(exit, Exit::CouldNotRun, "{err}");
    assert_eq!(json(&out)["error"], "invalid_request", "{out}");
}

/// The refunds fixture atlas (`bind` on a looked-up order, a global `sum_within` per order).
fn refunds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trace/refunds")
}

/// How a refund of the refunds day was set up, and what the server answered.
struct Refund {
    session: String,
    order: String,
    amount: u64,
    /// Seconds between the order's lookup and the refund; `None`: never looked up.
    looked_up: Option<u32>,
    ran: bool,
}

/// A day of refunds on the refunds atlas, one session per refund: orders refunded three times
/// (the third overspends the order's 1,000 and is refused), large refunds, refunds long after
/// their lookup, refunds of orders never looked up.
fn drive_refunds(live: &mut Live) -> Vec<Refund> {
    let mut plan: Vec<(String, u64, Option<u32>)> = Vec::new();
    for o in 0..3 {
        for amount in [300, 400, 400] {
            plan.push((format!("capped-{o}"), amount, Some(1)));
        }
    }
    for (o, amount) in [450, 500, 700, 999].into_iter().enumerate() {
        plan.push((format!("large-{o}"), amount, Some(1)));
    }
    for o in 0..3 {
        plan.push((format!("slow-{o}"), 200, Some(120)));
    }
    for o in 0..2 {
        plan.push((format!("unseen-{o}"), 100, None));
    }
    let mut out = Vec::new();
    for (order, amount, looked_up) in plan {
        let (st, body) = live.call(
            "POST",
            super::live::AGENT,
            "/v1/sessions",
            Some(&serde_json::json!({"agent_id": "ops-bot", "goal": format!("refund {order}")})),
        );
        assert_eq!(st, 201, "{body}");
        let sid = body["session_id"].as_str().unwrap().to_owned();
        let r = live.resolve_in("test.trace.refunds", &sid, "refund an order", &["support"]);
        let rid = r["resolution_id"].as_str().unwrap().to_owned();
        if let Some(wait) = looked_up {
            let params = serde_json::json!({"order_id": order});
            let (st, body) = live.execute(&sid, &rid, "order.lookup", params, None, None);
            assert_eq!(
                (st, body["status"].as_str()),
                (200, Some("success")),
                "{body}"
            );
            live.wait(wait - 1);
        }
        let params = serde_json::json!({"order_id": order, "amount": amount});
        let (_, body) = live.execute(&sid, &rid, "refund.issue", params, None, None);
        assert!(body["status"].is_string(), "{body}");
        out.push(Refund {
            session: sid,
            order,
            amount,
            looked_up,
            ran: body["status"] == "success",
        });
    }
    out
}

/// The refunds atlas as `edit` rewrites its `atlas.json`, in `name` under the server's
/// directory.
fn refunds_variant(live: &Live, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = live.dir.path().join(name);
    std::fs::create_dir_all(dir.join("context")).unwrap();
    std::fs::copy(
        refunds_dir().join("context/refunds.md"),
        dir.join("context/refunds.md"),
    )
    .unwrap();
    let text = std::fs::read_to_string(refunds_dir().join("atlas.json")).unwrap();
    std::fs::write(dir.join("atlas.json"), edit(text)).unwrap();
    dir
}

/// Exports `session`'s chain from the stopped server's data directory and replays it against
/// `atlas`: the file, the exit and the `-o json` report.
fn export_and_replay(live: &Live, session: &str, atlas: &Path) -> (PathBuf, Exit, Value) {
    let file = live.dir.path().join(format!("{session}.trace.jsonl"));
    let (exit, _, err) = cli(&[
        "export",
        "--session",
        session,
        "--data",
        s(&live.data),
        "--out",
        s(&file),
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(atlas), "-o", "json"]);
    (file, exit, json(&out))
}

/// `cra atlas simulate` on a day of executes decided on parameters and history finds exactly
/// the planted flips: the unchanged atlas decides every execute as recorded (the third refund
/// of an order overspends again, a refund of an order never looked up is refused again); a
/// new deny of refunds above 400 and a lookup that must be at most a minute old flip exactly
/// the refunds the driver's own record says they should.
#[test]
fn simulate_re_decides_a_day_of_executes_and_finds_exactly_the_planted_flips() {
    let mut live = Live::start_with(None, vec![refunds_dir()]);
    let day = drive_refunds(&mut live);
    live.stop();
    let capped_refused = day
        .iter()
        .filter(|r| r.order.starts_with("capped") && !r.ran);
    assert_eq!(
        capped_refused.count(),
        3,
        "each capped order's third refund overspends"
    );
    assert!(
        day.iter()
            .all(|r| r.ran == r.looked_up.is_some() || r.order.starts_with("capped"))
    );

    let same = simulate(refunds_dir(), |a| a.store.data = Some(live.data.clone()));
    let lookups = day.iter().filter(|r| r.looked_up.is_some()).count();
    let x = &same.executes;
    assert_eq!((x.decided, x.flipped()), (lookups + day.len(), 0), "{x:#?}");
    assert!(x.errors.is_empty() && x.skipped.is_empty(), "{x:#?}");

    let dir = refunds_variant(&live, "planted", |text| {
        text.replacen(
            r#"{"policy_id": "allow-lookups""#,
            r#"{"policy_id": "deny-large", "type": "deny", "actions": ["refund.issue"], "priority": 100,
               "conditions": {"parameters": [{"pointer": "/amount", "gt": 400}]}},
               {"policy_id": "allow-lookups""#,
            1,
        )
        .replacen(r#""within_seconds": 3600"#, r#""within_seconds": 60"#, 1)
    });
    let want_large = day.iter().filter(|r| r.ran && r.amount > 400).count();
    let want_stale = day
        .iter()
        .filter(|r| r.ran && r.amount <= 400 && r.looked_up.is_some_and(|s| s > 60))
        .count();
    assert_eq!(
        (want_large, want_stale),
        (4, 3),
        "the day plants too little"
    );

    let report = simulate(dir.clone(), |a| a.store.data = Some(live.data.clone()));
    let x = &report.executes;
    let counts: Vec<(&str, usize)> = x.flips.iter().map(|(v, (n, _))| (v.as_str(), *n)).collect();
    assert_eq!(
        counts,
        [
            ("deny by default_deny", want_stale),
            ("deny by deny-large", want_large)
        ],
        "{x:#?}"
    );
    assert!(x.errors.is_empty(), "{x:#?}");
    let (_, examples) = &x.flips["deny by deny-large"];
    assert!(
        examples.iter().all(|e| e["recorded"] == "allow"),
        "{examples:?}"
    );

    // `cra trace replay` of one slow refund's chain: identical under the recorded atlas (its
    // bind reads the session's own lookup); under the planted one, the refund is the first
    // divergence.
    let slow = day.iter().find(|r| r.order == "slow-0").unwrap();
    let (file, exit, doc) = export_and_replay(&live, &slow.session, &refunds_dir());
    assert_eq!(exit, Exit::Success, "{doc:#}");
    assert_eq!(doc["executes"].as_array().unwrap().len(), 2, "{doc:#}");
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(&dir), "-o", "json"]);
    let doc = json(&out);
    assert_eq!(exit, Exit::Negative, "{doc:#}");
    let first = &doc["first_execute_divergence"];
    assert_eq!(
        (
            &first["action_id"],
            &first["recorded"]["outcome"],
            &first["replayed"]["policy_id"]
        ),
        (
            &serde_json::json!("refund.issue"),
            &serde_json::json!("allow"),
            &serde_json::json!("default_deny")
        ),
        "{doc:#}"
    );
    // A global total lives in other chains, but the refund recorded what its counter held
    // (`history` in `action.requested`): replayed alone, the refund refused for overspending its
    // order across sessions is refused again, by the same policy.
    let over = day
        .iter()
        .find(|r| r.order == "capped-0" && !r.ran)
        .unwrap();
    let (file, exit, doc) = export_and_replay(&live, &over.session, &refunds_dir());
    assert_eq!(exit, Exit::Success, "{doc:#}");
    let refund = &doc["executes"][1];
    assert_eq!(
        (&refund["outcome"], &refund["replayed"]["policy_id"]),
        (
            &serde_json::json!("same"),
            &serde_json::json!("allow-refunds")
        ),
        "{doc:#}"
    );
    assert_eq!(
        refund["recorded"]["error"], "rate_limit_exceeded",
        "{doc:#}"
    );
    // A recorded `history` that is not a history read (an edited chain, sealed again) is not
    // guessed around: that refund is an error saying so, and the replay fails.
    let mut events = read_events(&file);
    let requested = events
        .iter_mut()
        .filter(|e| e.event_type == "action.requested")
        .nth(1)
        .unwrap();
    assert!(requested.payload.get("history").is_some(), "{requested:?}");
    requested.payload["history"] = serde_json::json!({"counters": "all of them"});
    let edited = live.dir.path().join("edited-history.trace.jsonl");
    std::fs::write(&edited, reseal(&events)).unwrap();
    let (exit, out, _) = cli(&[
        "replay",
        s(&edited),
        "--atlas",
        s(&refunds_dir()),
        "-o",
        "json",
    ]);
    let doc = json(&out);
    assert_eq!(exit, Exit::Negative, "{doc:#}");
    let refund = &doc["executes"][1];
    assert_eq!(refund["outcome"], "error", "{doc:#}");
    assert!(
        refund["reason"]
            .as_str()
            .is_some_and(|r| r.contains("`history` is not a history read")),
        "{doc:#}"
    );
    // An atlas that asks of the total what the refund did not (a two-day window) is answered
    // from this one chain, which holds nothing spent: the refund comes out allowed, which is
    // reported as not comparable and is not an execute divergence. (The replay fails on the
    // resolve, whose constraint now carries the new window.)
    let wider = refunds_variant(&live, "wider", |text| {
        text.replacen(
            r#""window_seconds": 86400"#,
            r#""window_seconds": 172800"#,
            1,
        )
    });
    let (exit, out, _) = cli(&["replay", s(&file), "--atlas", s(&wider), "-o", "json"]);
    let doc = json(&out);
    assert_eq!(exit, Exit::Negative, "{doc:#}");
    assert_eq!(
        doc["first_divergence"]["pointer"],
        "/constraints/0/parameters/steps/0/history/1/sum_within/window_seconds",
        "{doc:#}"
    );
    assert!(doc["first_execute_divergence"].is_null(), "{doc:#}");
    let refund = &doc["executes"][1];
    assert_eq!(
        (
            &refund["outcome"],
            &refund["recorded"]["policy_id"],
            &refund["replayed"]["outcome"]
        ),
        (
            &serde_json::json!("not_comparable"),
            &serde_json::json!("allow-refunds"),
            &serde_json::json!("allow")
        ),
        "{doc:#}"
    );
    assert!(doc["first_execute_divergence"].is_null(), "{doc:#}");
}

/// `cra trace export --with-proofs` from a running server writes a tlog-proof@v1 beside the
/// chain; `cra trace verify --checkpoint --log-key` checks it offline: it passes as exported and
/// fails (exit 2) with a flipped proof byte, another log's key, or a chain cut short.
#[test]
fn an_exported_chain_s_head_is_proved_in_the_log_offline() {
    let mut live = Live::start(None);
    let facts = live.drive();
    let file = live.dir.path().join("proved.trace.jsonl");
    let (exit, _, err) = cli(&[
        "export",
        "--session",
        &facts.session,
        "--url",
        &live.base,
        "--token",
        OPERATOR,
        "--out",
        s(&file),
        "--with-proofs",
    ]);
    assert_eq!(exit, Exit::Success, "{err}");
    let proof = cra_cli::cmd::trace_proof::proof_path(&file);
    let key = crate::http_get(format!("{}/v1/log/key", live.base))
        .unwrap()
        .text()
        .unwrap();
    let key = key.trim();
    let verify = |chain: &Path, proof: &Path, key: &str| {
        cli(&[
            "verify",
            s(chain),
            "--checkpoint",
            s(proof),
            "--log-key",
            key,
        ])
    };
    let (exit, out, err) = verify(&file, &proof, key);
    assert_eq!(exit, Exit::Success, "{out}{err}");
    assert!(out.contains("in the log: the head is leaf"), "{out}");
    // -o json: one document, the log's finding a member of it
    let (exit, out, err) = cli(&[
        "verify",
        s(&file),
        "--checkpoint",
        s(&proof),
        "--log-key",
        key,
        "-o",
        "json",
    ]);
    assert_eq!(exit, Exit::Success, "{out}{err}");
    assert_eq!(out.trim().lines().count(), 1, "{out}");
    let doc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (doc["valid"].as_bool(), doc["log"]["included"].as_bool()),
        (Some(true), Some(true)),
        "{doc}"
    );

    // A flipped byte in the first inclusion hash.
    let text = std::fs::read_to_string(&proof).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("index ")).unwrap() + 1;
    let flipped_proof = live.dir.path().join("flipped.tlog-proof");
    let mut hash = cra_tlog::hash::from_base64(lines[at]).unwrap();
    hash[5] ^= 0x10;
    let mut changed: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    changed[at] = cra_tlog::hash::to_base64(&hash);
    std::fs::write(&flipped_proof, changed.join("\n") + "\n").unwrap();
    let (exit, out, _) = verify(&file, &flipped_proof, key);
    assert_eq!(exit, Exit::Negative, "{out}");
    assert!(out.contains("NOT in the log"), "{out}");

    // Another log's key.
    let other = cra_tlog::Ed25519Signer::from_seed(key.split('+').next().unwrap(), &[9; 32])
        .unwrap()
        .verifier()
        .to_key_string();
    let (exit, out, _) = verify(&file, &proof, &other);
    assert_eq!(exit, Exit::Negative, "{out}");

    // The chain without its last event: still a valid chain, but its head is not the one proved.
    let chain = std::fs::read_to_string(&file).unwrap();
    let mut events: Vec<&str> = chain.lines().collect();
    events.pop();
    let cut = live.dir.path().join("cut.trace.jsonl");
    std::fs::write(&cut, events.join("\n") + "\n").unwrap();
    let (exit, out, _) = verify(&cut, &proof, key);
    assert_eq!(exit, Exit::Negative, "{out}");
    live.stop();

    // From the stopped data directory: its latest checkpoint (cut by the export above) covers
    // the chain, and the proof made from the stored tiles verifies the same way.
    let offline = live.dir.path().join("offline.trace.jsonl");
    let data = live.data.display().to_string();
    let export_data = |file: &Path| {
        cli(&[
            "export",
            "--session",
            &facts.session,
            "--data",
            &data,
            "--out",
            s(file),
            "--with-proofs",
        ])
    };
    let (exit, _, err) = export_data(&offline);
    assert_eq!(exit, Exit::Success, "{err}");
    let offline_proof = cra_cli::cmd::trace_proof::proof_path(&offline);
    let (exit, out, err) = verify(&offline, &offline_proof, key);
    assert_eq!(exit, Exit::Success, "{out}{err}");
    assert!(out.contains("in the log: the head is leaf"), "{out}");
}

/// From a stopped store whose latest checkpoint is older than a chain's head, `--with-proofs`
/// fails and says how to get a checkpoint; nothing is signed offline.
#[test]
fn a_stored_chain_newer_than_the_last_checkpoint_gets_no_proof_offline() {
    let mut live = Live::start(None);
    let facts = live.drive();
    live.stop();
    let file = live.dir.path().join("unproved.trace.jsonl");
    let data = live.data.display().to_string();
    let (exit, _, err) = cli(&[
        "export",
        "--session",
        &facts.session,
        "--data",
        &data,
        "--out",
        s(&file),
        "--with-proofs",
    ]);
    assert_eq!(exit, Exit::CouldNotRun, "{err}");
    assert!(
        err.contains("start the server on it") || err.contains("does not cover"),
        "{err}"
    );
}

/// Issue 29, item 4: `export --all` exports every readable chain and lists the others. On
/// `fda2190` the first chain holding an event that no longer parsed (a number stored as
/// `Infinity` by an earlier version) stopped the export there.
#[test]
fn export_all_exports_every_readable_chain_and_lists_the_unreadable_one() {
    let Some(url) = cra_store::testing::postgres_url("export_all_lists_unreadable_chains") else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "cli_export_unreadable");
    let mut live = Live::start(Some((&url, schema.name())));
    let facts = live.drive();
    let other = live.open_session("a chain that stays readable");
    live.stop();
    // An event as an older version stored a number beyond a double's range.
    let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let poisoned = db
        .execute(
            &format!(
                "UPDATE \"{}\".trace_events SET body = replace(body, '\"payload\":{{', '\"payload\":{{\"n\":Infinity,') \
                 WHERE session_id = $1 AND sequence = 1",
                schema.name()
            ),
            &[&facts.session],
        )
        .unwrap();
    assert_eq!(poisoned, 1);
    let all = live.dir.path().join("all");
    let flags = ["--postgres", &url, "--postgres-schema", schema.name()];
    let mut args = vec!["export", "--all", "--json", "--out", s(&all)];
    args.extend(flags);
    let (exit, out, err) = cli(&args);
    assert_eq!(exit, Exit::Negative, "{out}{err}");
    let doc = json(&out);
    let unreadable = doc["unreadable"].as_array().unwrap();
    assert_eq!(unreadable.len(), 1, "{doc}");
    assert_eq!(unreadable[0]["session_id"], facts.session.as_str());
    assert!(unreadable[0]["reason"].is_string(), "{doc}");
    assert!(err.contains(&facts.session), "{err}");
    // Every other chain was exported, and verifies.
    let files = doc["files"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f["session_id"] == other.as_str()),
        "{doc}"
    );
    for f in files {
        let path = f["file"].as_str().unwrap();
        let (exit, out, err) = cli(&["verify", path]);
        assert_eq!(exit, Exit::Success, "{path}: {out}{err}");
    }
    assert!(!all.join(file_name(&facts.session)).exists());
    // The session alone: its readable prefix (event 0), and where it broke.
    let prefix = live.dir.path().join("prefix.trace.jsonl");
    let mut args = vec!["export", "--session", &facts.session, "--out", s(&prefix)];
    args.extend(flags);
    let (exit, out, err) = cli(&args);
    assert_eq!(exit, Exit::Negative, "{out}{err}");
    assert!(err.contains("event 1 of session"), "{err}");
    let text = std::fs::read_to_string(&prefix).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let (exit, out, err) = cli(&["verify", s(&prefix)]);
    assert_eq!(exit, Exit::Success, "the prefix verifies: {out}{err}");
    readers_over_http_yield_the_readable_prefix(&mut live, &facts.session, &prefix);
}

/// Issue 29, item 4, the server: `GET /v1/traces/{id}` of a chain with an event the store cannot
/// decode answers the readable prefix, shorter than its `CRA-Chain-Events` header; verify names
/// the event (`malformed_event`); `cra trace export --url` exports the prefix and says where it
/// broke. On `fda2190` the GET answered 500 and nothing of the chain.
fn readers_over_http_yield_the_readable_prefix(live: &mut Live, session: &str, prefix: &Path) {
    live.restart(|_| {});
    let http = cra_runtime::tls::blocking_http_client().build().unwrap();
    let url = format!("{}/v1/traces/{session}", live.base);
    let resp = http.get(&url).bearer_auth(OPERATOR).send().unwrap();
    assert_eq!(resp.status(), 200);
    let declared: u64 = resp.headers()["cra-chain-events"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let events: Vec<Value> = resp.json().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(declared > 1, "{declared}");
    let (status, report) = live.call(
        "POST",
        OPERATOR,
        &format!("/v1/traces/{session}/verify"),
        None,
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["valid"], false, "{report}");
    assert_eq!(report["first_error"]["code"], "malformed_event", "{report}");
    assert_eq!(report["first_error"]["sequence"], 1, "{report}");
    let over_http = live.dir.path().join("over-http.trace.jsonl");
    let (exit, out, err) = cli(&[
        "export",
        "--session",
        session,
        "--url",
        &live.base,
        "--token",
        OPERATOR,
        "--out",
        s(&over_http),
    ]);
    assert_eq!(exit, Exit::Negative, "{out}{err}");
    assert!(
        err.contains("read 1 of the chain's") && err.contains("malformed_event at sequence 1"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&over_http).unwrap(),
        std::fs::read(prefix).unwrap()
    );
    let all = live.dir.path().join("all-over-http");
    let (exit, out, err) = cli(&[
        "export",
        "--all",
        "--url",
        &live.base,
        "--token",
        OPERATOR,
        "--out",
        s(&all),
        "--json",
    ]);
    assert_eq!(exit, Exit::Negative, "{out}{err}");
    assert_eq!(json(&out)["unreadable"][0]["session_id"], session, "{out}");
    live.stop();
}

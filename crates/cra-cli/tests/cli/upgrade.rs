//! Issue 31, item 1: a deployment survives an upgrade. The data directory and the PostgreSQL
//! dump a server built from `fda2190` wrote (`crates/cra-store/tests/fixtures/fda2190/`, made by
//! its `make.sh`) are checked with `cra migrate --check` (exit 2, nothing changed), migrated
//! with `cra migrate`, served by `cra serve`, and every chain is exported from the server with
//! a proof that its head is in the transparency log and verified offline (lifecycle included).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cra_store::testing::{TestSchema, postgres_url};
use serde_json::Value;

use crate::serve::listening;
use crate::{Reaped, terminate};

/// A file of the `fda2190` fixtures.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cra-store/tests/fixtures/fda2190")
        .join(name)
}

/// Runs `cra` with `args`.
pub(crate) fn cra(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cra"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs `cra migrate` with `store` and `extra`, answering its exit code and JSON report.
fn migrate(store: &[&str], extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["migrate", "-o", "json"];
    args.extend_from_slice(store);
    args.extend_from_slice(extra);
    let out = cra(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    let doc = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), doc)
}

/// The store's check, upgrade and check again: 2 with the plan, then 0 having applied it, then
/// 0 and current. Answers the steps the upgrade took.
fn check_then_migrate(store: &[&str]) -> Vec<String> {
    let (code, plan) = migrate(store, &["--check"]);
    assert_eq!(code, 2, "{plan:#}");
    assert_eq!(
        (plan["current"].as_bool(), plan["applied"].as_bool()),
        (Some(false), Some(false)),
        "{plan:#}"
    );
    let steps: Vec<String> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_owned())
        .collect();
    assert!(steps.contains(&"tlog.backfill".to_owned()), "{plan:#}");
    // Text says the same, and that nothing changed.
    let mut args = vec!["migrate", "--check"];
    args.extend_from_slice(store);
    let text = cra(&args);
    assert_eq!(text.status.code(), Some(2));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("nothing was changed"), "{text}");
    assert!(text.contains("tlog.backfill"), "{text}");

    let (code, done) = migrate(store, &[]);
    assert_eq!(code, 0, "{done:#}");
    assert_eq!(done["applied"].as_bool(), Some(true), "{done:#}");
    assert_eq!(
        done["steps"], plan["steps"],
        "the upgrade did what the check said"
    );
    let (code, after) = migrate(store, &["--check"]);
    assert_eq!(code, 0, "{after:#}");
    assert_eq!(after["current"].as_bool(), Some(true), "{after:#}");
    assert_eq!(after["found"], after["target"], "{after:#}");
    steps
}

/// Every session the server at `base` serves, exported with its proof and verified offline
/// against the server's log key; answers how many.
pub(crate) fn verify_every_chain(base: &str, token: &str, dir: &Path) -> usize {
    let client = cra_runtime::tls::blocking_http_client().build().unwrap();
    let list: Value = client
        .get(format!("{base}/v1/traces"))
        .bearer_auth(token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let sessions: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("{list:#}"))
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    let key = crate::http_get(format!("{base}/v1/log/key"))
        .unwrap()
        .text()
        .unwrap();
    for session in &sessions {
        let file = dir.join(format!("{session}.trace.jsonl"));
        let path = file.to_str().unwrap();
        let out = cra(&[
            "trace",
            "export",
            "--session",
            session,
            "--url",
            base,
            "--token",
            token,
            "--out",
            path,
            "--with-proofs",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let proof = cra_cli::cmd::trace_proof::proof_path(&file);
        let out = cra(&[
            "trace",
            "verify",
            path,
            "--lifecycle",
            "--checkpoint",
            proof.to_str().unwrap(),
            "--log-key",
            key.trim(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{session}: {text}");
        assert!(text.contains("in the log: the head is leaf"), "{text}");
    }
    sessions.len()
}

/// Starts `cra serve` with `args` in `cwd`; answers the reaped child and its base URL.
pub(crate) fn serve(cwd: &Path, args: &[&str]) -> (Reaped, String) {
    let mut child = Reaped::new(
        Command::new(env!("CARGO_BIN_EXE_cra"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (addr, lines) = listening(child.child());
    // Drain the rest so the server never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

/// Starts `cra serve` on PostgreSQL `schema` at `url`, with a new log key (in `dir`, where its
/// data directory goes too); answers the child, its base URL and its admin token.
pub(crate) fn serve_postgres(dir: &Path, url: &str, schema: &str) -> (Reaped, String, String) {
    let key = dir.join("log.key");
    if !key.exists() {
        let out = cra(&[
            "log",
            "key",
            "generate",
            "--origin",
            "upgrade.example/cra-log",
            "--out",
            key.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let config = dir.join("cra.toml");
    std::fs::write(
        &config,
        format!(
            "postgres = \"{url}\"\npostgres_schema = \"{schema}\"\n\n[log]\norigin = \"upgrade.example/cra-log\"\nkey_file = \"{}\"\n",
            key.display()
        ),
    )
    .unwrap();
    let data = dir.join("data");
    let (child, base) = serve(
        dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
        ],
    );
    (child, base, admin_token(&data))
}

/// The admin token `cra serve` wrote into `data`'s keys file on its first start.
pub(crate) fn admin_token(data: &Path) -> String {
    let keys = std::fs::read_to_string(data.join("api-keys.toml")).unwrap();
    let line = keys.lines().find(|l| l.starts_with("token")).unwrap();
    line.split('"').nth(1).unwrap().to_owned()
}

#[test]
fn a_data_directory_fda2190_wrote_is_checked_migrated_served_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(fixture("cra.redb"), data.join("cra.redb")).unwrap();
    let data_arg = data.to_str().unwrap();
    let steps = check_then_migrate(&["--data", data_arg]);
    assert!(steps.contains(&"redb.format".to_owned()), "{steps:?}");

    let (child, base) = serve(dir.path(), &["--data", data_arg]);
    let token = admin_token(&data);
    // Four agents' sessions and the Relay project's chain.
    assert_eq!(verify_every_chain(&base, &token, dir.path()), 5);
    terminate(child.take());
}

#[test]
fn a_postgres_dump_fda2190_wrote_is_checked_migrated_served_and_verified() {
    let Some(url) = postgres_url("a_postgres_dump_fda2190_wrote_is_checked_migrated_served") else {
        return;
    };
    let schema = TestSchema::new(&url, "fda2190_cli");
    let dump = std::fs::read_to_string(fixture("pg.sql")).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&dump.replace("fda2190_fixture", schema.name()))
        .unwrap();
    let store = ["--postgres", &url, "--postgres-schema", schema.name()];
    let steps = check_then_migrate(&store);
    assert!(
        steps.contains(&"postgres.migration".to_owned()),
        "{steps:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (child, base, token) = serve_postgres(dir.path(), &url, schema.name());
    // Four agents' sessions and the Relay project's chain.
    assert_eq!(verify_every_chain(&base, &token, dir.path()), 5);
    terminate(child.take());
    // The schema goes after the server that used it.
    std::thread::spawn(move || drop(schema)).join().unwrap();
}

/// A copy of a running server's database file (a file-system snapshot taken without stopping
/// it) needs redb's repair: `cra migrate --check` says so and changes nothing (exit 1), and
/// `cra migrate` repairs it, then finds nothing else to do (exit 0).
#[test]
fn a_copy_taken_while_serving_is_repaired_by_cra_migrate() {
    let dir = tempfile::tempdir().unwrap();
    let (data, copy) = (dir.path().join("data"), dir.path().join("copy"));
    std::fs::create_dir_all(&copy).unwrap();
    let (child, _) = serve(dir.path(), &["--data", data.to_str().unwrap()]);
    std::fs::copy(data.join("cra.redb"), copy.join("cra.redb")).unwrap();
    terminate(child.take());
    let before = std::fs::read(copy.join("cra.redb")).unwrap();
    let store = ["--data", copy.to_str().unwrap()];

    let mut args = vec!["migrate", "--check"];
    args.extend_from_slice(&store);
    let out = cra(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not closed cleanly"), "{err}");
    assert!(
        std::fs::read(copy.join("cra.redb")).unwrap() == before,
        "--check wrote"
    );

    let mut args = vec!["migrate"];
    args.extend_from_slice(&store);
    let out = cra(&args);
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{text}{err}");
    assert!(err.contains("repair"), "{err}");
    assert!(text.contains("is current"), "{text}");
    let (code, after) = migrate(&store, &["--check"]);
    assert_eq!(
        (code, after["current"].as_bool()),
        (0, Some(true)),
        "{after:#}"
    );
}

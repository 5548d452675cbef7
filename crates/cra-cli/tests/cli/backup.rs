//! Issue 31, item 2: `cra backup` and `cra restore` as an operator runs them. A running
//! server's store (the `fda2190` fixture, upgraded) is backed up online, restored into a new
//! data directory that serves every chain verified with its log proof; a restore never
//! overwrites, an archive cut short is refused as partial, an agent's key cannot take a backup;
//! a PostgreSQL schema round-trips the same way, and the redb archive moves onto PostgreSQL.

use std::path::Path;

use cra_store::testing::{TestSchema, postgres_url};
use serde_json::Value;

use crate::terminate;
use crate::upgrade::{admin_token, cra, fixture, serve, serve_postgres, verify_every_chain};

/// Runs `cra` with `args` and `-o json`: the exit code, the JSON document and standard error.
fn json(args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = cra(&all);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap(), doc, err)
}

/// `cra backup --url BASE --token TOKEN --out OUT -o json`.
fn online_backup(base: &str, token: &str, out: &Path) -> (i32, Value, String) {
    json(&["backup", "--url", base, "--token", token, "--out", s(out)])
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_running_server_is_backed_up_online_and_restored_into_a_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(fixture("cra.redb"), data.join("cra.redb")).unwrap();
    // An admin key and an agent's, in the keys file the server will read.
    let keys = data.join("api-keys.toml");
    let add = |actor: &str, role: &str| {
        let out = cra(&[
            "keys",
            "add",
            "--api-keys",
            s(&keys),
            "--actor",
            actor,
            "--role",
            role,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let token = add("admin", "admin");
    let agent = add("bot", "agent");
    let (child, base) = serve(dir.path(), &["--data", s(&data)]);
    let archive = dir.path().join("cra.backup");

    // An agent's key is refused, and no file is left.
    let (code, _, err) = online_backup(&base, &agent, &archive);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("403"), "{err}");
    assert!(!archive.exists());

    let (code, manifest, err) = online_backup(&base, &token, &archive);
    assert_eq!(code, 0, "{err}");
    assert_eq!(manifest["backend"], "redb", "{manifest:#}");
    assert_eq!(manifest["chains"], 5, "{manifest:#}");
    assert!(!manifest["not_included"].as_array().unwrap().is_empty());
    let (code, _, err) = online_backup(&base, &token, &archive);
    assert_eq!(code, 1, "a backup never replaces a file: {err}");
    terminate(child.take());

    let restored = dir.path().join("restored");
    let (code, verified, err) = json(&["restore", s(&archive), "--data", s(&restored)]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verified["chains"], 5, "{verified:#}");
    let checkpoints = verified["checkpoints"].clone();
    let (code, _, err) = json(&["restore", s(&archive), "--data", s(&restored)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("already exists"), "{err}");

    // An archive cut before its manifest is a partial backup.
    let bytes = std::fs::read(&archive).unwrap();
    let cut = dir.path().join("cut.backup");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, err) = json(&["restore", s(&cut), "--data", s(&dir.path().join("other"))]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("partial backup"), "{err}");

    // The log's signer key is not in the archive (the manifest says so): the operator brings
    // it, or the store, which recorded the log's key, would refuse to start under a new one.
    std::fs::copy(data.join("log.key"), restored.join("log.key")).unwrap();
    let (child, base) = serve(dir.path(), &["--data", s(&restored)]);
    let token = admin_token(&restored);
    assert_eq!(verify_every_chain(&base, &token, dir.path()), 5);
    terminate(child.take());

    // The same archive moves the deployment onto PostgreSQL, where a server with the same log
    // key serves every chain verified with its proof from the moved log.
    if let Some(url) = postgres_url("a_running_server_is_backed_up_and_moved_to_postgres") {
        let schema = TestSchema::new(&url, "cli_backup_moved");
        let restore = [
            "restore",
            s(&archive),
            "--postgres",
            &url,
            "--postgres-schema",
            schema.name(),
        ];
        let (code, verified, err) = json(&restore);
        assert_eq!(code, 0, "{err}");
        assert_eq!(verified["chains"], 5, "{verified:#}");
        assert_eq!(verified["checkpoints"], checkpoints, "{verified:#}");
        let moved = dir.path().join("moved");
        std::fs::create_dir_all(&moved).unwrap();
        let config = moved.join("cra.toml");
        let origin = log_origin(&url, schema.name());
        std::fs::write(
            &config,
            format!(
                "postgres = \"{url}\"\npostgres_schema = \"{}\"\n\n[log]\norigin = \"{origin}\"\nkey_file = \"{}\"\n",
                schema.name(),
                data.join("log.key").display()
            ),
        )
        .unwrap();
        let keys = moved.join("data");
        let (child, base) = serve(&moved, &["--config", s(&config), "--data", s(&keys)]);
        let token = admin_token(&keys);
        assert_eq!(verify_every_chain(&base, &token, &moved), 5);
        terminate(child.take());
        let (code, _, err) = json(&restore);
        assert_eq!(code, 1, "never into a schema holding tables: {err}");
        std::thread::spawn(move || drop(schema)).join().unwrap();
    }
}

/// The origin of the log the schema holds.
fn log_origin(url: &str, schema: &str) -> String {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let sql = format!("SELECT origin FROM {schema}.tlog_state");
    client.query_one(&sql, &[]).unwrap().get(0)
}

#[test]
fn a_postgres_schema_round_trips_through_cra_backup_and_cra_restore() {
    let Some(url) = postgres_url("a_postgres_schema_round_trips_through_cra_backup") else {
        return;
    };
    let source = TestSchema::new(&url, "cli_backup_source");
    let dump = std::fs::read_to_string(fixture("pg.sql")).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&dump.replace("fda2190_fixture", source.name()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("pg.backup");
    let (code, manifest, err) = json(&[
        "backup",
        "--postgres",
        &url,
        "--postgres-schema",
        source.name(),
        "--out",
        s(&archive),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(manifest["backend"], "postgres", "{manifest:#}");
    let target = TestSchema::new(&url, "cli_backup_target");
    let (code, verified, err) = json(&[
        "restore",
        s(&archive),
        "--postgres",
        &url,
        "--postgres-schema",
        target.name(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verified["chains"], 5, "{verified:#}");

    // Online: a server on the restored schema hands out a backup of it through GET /v1/backup,
    // which restores into a third schema.
    let (child, base, token) = serve_postgres(dir.path(), &url, target.name());
    let online = dir.path().join("online.backup");
    let (code, manifest, err) = online_backup(&base, &token, &online);
    assert_eq!(code, 0, "{err}");
    assert_eq!(manifest["backend"], "postgres", "{manifest:#}");
    terminate(child.take());
    let third = TestSchema::new(&url, "cli_backup_third");
    let (code, verified, err) = json(&[
        "restore",
        s(&online),
        "--postgres",
        &url,
        "--postgres-schema",
        third.name(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(verified["chains"], manifest["chains"], "{verified:#}");
    assert!(verified["checkpoints"].as_u64().is_some(), "{verified:#}");
    // A redb target for a PostgreSQL archive is refused by name.
    let (code, _, err) = json(&["restore", s(&archive), "--data", s(&dir.path().join("d"))]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("restore it onto postgres"), "{err}");
    std::thread::spawn(move || drop((source, target)))
        .join()
        .unwrap();
}

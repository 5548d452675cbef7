//! A server with `[encryption] key_file` (`specs/storage-encryption.md`): the markers an agent
//! sends in a short and a long request are answered and exported whole, yet found in no file of
//! the data directory and no PostgreSQL row once the server stops; a server given another key
//! or none refuses to start and says which key it needs; `cra store reencrypt` moves every
//! record to a new key, after which the old one is refused (and rewrites a data directory's
//! file); `cra store rewrite` turns a plaintext data directory into a fresh file that reads
//! the same. On redb, and on PostgreSQL when
//! `CRA_TEST_POSTGRES_URL` is set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use cra_cli::cmd::store::{
    GenerateArgs, ReencryptArgs, StoreCommand, generate, reencrypt, rewrite,
};
use cra_cli::cmd::trace::TraceCommand;
use cra_cli::{Cli, Command, OutputFormat};
use cra_runtime::config::RuntimeConfig;
use cra_store::testing::{files_hold, rows_hold};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::json;

use super::live::{AGENT, Live, atlas_dir};

fn new_key(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    generate(&GenerateArgs {
        out: out.clone(),
        output: OutputFormat::Json,
    })
    .unwrap();
    out
}

fn marker(what: &str) -> String {
    let seed: u64 = rand::random();
    eprintln!("{what} marker seed {seed:016x}");
    format!("mk{what}{seed:016x}")
}

/// Runs a session whose resolve carries `short` and whose execute carries `long` (20 kB of
/// parameters ending with it); answers the session id after checking both are answered back.
fn drive(live: &mut Live, short: &str, long: &str) -> String {
    let session = live.open_session(&format!("encrypted {short}"));
    let req = live.resolve_request(
        "test.trace.ops",
        &session,
        &format!("read the runbook {short}"),
        &["read"],
    );
    let (st, answer) = live.call("POST", AGENT, "/v1/resolve", Some(&req));
    assert_eq!(st, 200, "{answer}");
    let page = format!("{}{long}", "page ".repeat(4_000));
    let resolution = answer["resolution_id"].as_str().unwrap().to_owned();
    let (st, executed) = live.execute(
        &session,
        &resolution,
        "doc.read",
        json!({"page": page}),
        None,
        None,
    );
    assert_eq!(st, 200, "{executed}");
    let (st, events) = live.call("GET", AGENT, &format!("/v1/traces/{session}"), None);
    assert_eq!(st, 200, "{events}");
    let text = events.to_string();
    assert!(
        text.contains(short) && text.contains(long),
        "the events read back whole"
    );
    session
}

/// `cra trace export --session S` of the stopped store with `flags`: (exit code, output).
fn export(flags: &[&str], session: &str) -> (u8, String) {
    let mut args = vec!["cra", "trace", "export", "--session", session];
    args.extend_from_slice(flags);
    let Ok(Cli {
        command: Command::Trace(TraceCommand::Export(a)),
        ..
    }) = Cli::try_parse_from(&args)
    else {
        panic!("{args:?} parses");
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = cra_cli::cmd::trace_export::export(&a, &mut out, &mut err, false);
    let text = String::from_utf8(out).unwrap() + &String::from_utf8(err).unwrap();
    (exit.code(), text)
}

/// The refusal of a server started on `config`.
fn refused(config: RuntimeConfig) -> String {
    let clock = Arc::new(FixedClock::parse("2026-03-02T12:00:00Z").unwrap());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 99));
    match cra_runtime::build_runtime(config, clock, ids) {
        Ok(_) => panic!("the server started"),
        Err(e) => e.to_string(),
    }
}

fn encrypted_server(postgres: Option<(&str, &str)>) {
    let keys = tempfile::tempdir().unwrap();
    let (first, second) = (
        new_key(keys.path(), "first.key"),
        new_key(keys.path(), "second.key"),
    );
    let (short, long) = (marker("short"), marker("long"));
    let mut live = Live::start_configured(postgres, vec![atlas_dir()], |c| {
        c.encryption.key_file = Some(first.clone());
    });
    let session = drive(&mut live, &short, &long);
    live.stop();
    for m in [&short, &long] {
        match postgres {
            None => assert!(!files_hold(&live.data, m), "{m} is in the data directory"),
            Some((url, schema)) => assert!(!rows_hold(url, schema, m), "{m} is in a row"),
        }
    }

    let store: Vec<String> = match postgres {
        None => vec!["--data".into(), live.data.display().to_string()],
        Some((url, schema)) => vec![
            "--postgres".into(),
            url.into(),
            "--postgres-schema".into(),
            schema.into(),
        ],
    };
    let store: Vec<&str> = store.iter().map(String::as_str).collect();
    let with = |key: &Path, retired: Option<&Path>| {
        let mut v = store.clone();
        v.extend(["--storage-key-file", key.to_str().unwrap()]);
        if let Some(r) = retired {
            v.extend(["--retired-key-file", r.to_str().unwrap()]);
        }
        v.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let (code, text) = export(&as_strs(&with(&first, None)), &session);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&short) && text.contains(&long));
    let (code, text) = export(&store, &session);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("no storage key is configured"), "{text}");

    // The server refuses to start without the key, or with another, naming the one it needs.
    let first_id = std::fs::read_to_string(&first).unwrap();
    let first_id = cra_store::StorageKey::parse(&first_id)
        .unwrap()
        .id()
        .to_string();
    let mut config = live.config.clone();
    config.encryption.key_file = None;
    let none = refused(config.clone());
    assert!(
        none.contains("no storage key is configured") && none.contains(&first_id),
        "{none}"
    );
    config.encryption.key_file = Some(second.clone());
    let other = refused(config.clone());
    assert!(
        other.contains("not among the configured keys") && other.contains(&first_id),
        "{other}"
    );

    // Rotation: the second key encrypts everything, the first is no longer needed.
    let args = ReencryptArgs::parse_from_store(&as_strs(&with(&second, Some(&first))));
    let mut progress = Vec::new();
    let done = reencrypt(&args, &mut progress).unwrap();
    assert_eq!(done.report.retired, vec![first_id.clone()]);
    assert!(!progress.is_empty(), "progress is shown");
    // A data directory is rewritten after: no freed page keeps the first key's records.
    assert_eq!(done.rewrite.is_some(), postgres.is_none(), "{done:?}");
    let (code, text) = export(&as_strs(&with(&second, None)), &session);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&long));
    config.encryption.key_file = Some(first.clone());
    let retired = refused(config);
    assert!(
        retired.contains("not among the configured keys"),
        "{retired}"
    );

    if postgres.is_none() {
        for m in [&short, &long] {
            assert!(!files_hold(&live.data, m), "{m} is in the data directory");
        }
    }
    live.restart(|c| c.encryption.key_file = Some(second.clone()));
    let (st, events) = live.call("GET", AGENT, &format!("/v1/traces/{session}"), None);
    assert_eq!(st, 200, "{events}");
    assert!(events.to_string().contains(&short));
    live.stop();
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Parses `cra store reencrypt` with these store flags.
trait ParseFromStore {
    fn parse_from_store(flags: &[&str]) -> Self;
}

impl ParseFromStore for ReencryptArgs {
    fn parse_from_store(flags: &[&str]) -> Self {
        let mut args = vec!["cra", "store", "reencrypt", "-o", "json"];
        args.extend_from_slice(flags);
        match Cli::try_parse_from(&args) {
            Ok(Cli {
                command: Command::Store(StoreCommand::Reencrypt(a)),
                ..
            }) => a,
            Ok(_) => panic!("not cra store reencrypt"),
            Err(e) => panic!("{args:?}: {e}"),
        }
    }
}

#[test]
fn an_encrypted_redb_store_holds_no_plaintext_and_rotates() {
    encrypted_server(None);
}

#[test]
fn an_encrypted_postgres_deployment_holds_no_plaintext_and_rotates() {
    let Some(url) = cra_store::testing::postgres_url("encrypted_postgres") else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, "encrypted_server");
    encrypted_server(Some((&url, schema.name())));
}

/// The control: without a key the same markers are in the data directory, so the search above
/// finds what is there.
#[test]
fn without_a_key_the_markers_are_stored_as_sent() {
    let (short, long) = (marker("short"), marker("long"));
    let mut live = Live::start(None);
    drive(&mut live, &short, &long);
    live.stop();
    assert!(files_hold(&live.data, &short) && files_hold(&live.data, &long));
}

/// `cra store rewrite` of a stopped server's directory: the file is replaced and the chain the
/// server recorded still exports and verifies; a directory without a database is refused with
/// what to give instead.
#[test]
fn store_rewrite_replaces_the_file_and_the_chains_still_verify() {
    let (short, long) = (marker("short"), marker("long"));
    let mut live = Live::start(None);
    let session = drive(&mut live, &short, &long);
    live.stop();
    let parsed = Cli::try_parse_from([
        "cra",
        "store",
        "rewrite",
        "--data",
        live.data.to_str().unwrap(),
        "-o",
        "json",
    ]);
    let Ok(Cli {
        command: Command::Store(StoreCommand::Rewrite(args)),
        ..
    }) = parsed
    else {
        panic!("cra store rewrite parses");
    };
    let mut progress = Vec::new();
    let report = rewrite(&args.data, &mut progress).unwrap();
    assert!(report.records("trace_events") > Some(0), "{report:?}");
    assert!(!progress.is_empty(), "progress is shown");
    let data = live.data.display().to_string();
    let (code, text) = export(&["--data", &data], &session);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&short) && text.contains(&long));

    let empty = tempfile::tempdir().unwrap();
    let refused = rewrite(empty.path(), &mut Vec::new()).unwrap_err();
    assert!(
        refused.message.contains("holds no cra database"),
        "{}",
        refused.message
    );
}

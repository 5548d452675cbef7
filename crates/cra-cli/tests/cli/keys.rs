//! `cra keys add|revoke|list` on a keys file, through the parser as a user types them: a new
//! key is written once with its token shown once, comments survive every edit, a revocation
//! by fingerprint or actor is what the server's loader reads, the last working admin key is
//! never revoked, and a refused edit leaves the file byte for byte as it was. `serve.rs` runs
//! the same commands against a running `cra serve`.

use std::path::Path;

use clap::Parser;
use cra_cli::cmd::keys::{KeysCommand, add, list, revoke};
use cra_cli::{Cli, Command};
use cra_runtime::auth::{KeysFile, Role, fingerprint};
use time::OffsetDateTime;

const FILE: &str = "# Our keys: rotate every quarter.\n\n[[keys]]\ntoken = \"admin-key-0000000000000\"\nactor_id = \"root\"\nactor_type = \"human\"\nroles = [\"admin\"]\n";

fn now() -> OffsetDateTime {
    cra_wire::clock::parse_rfc3339("2026-12-03T12:00:00Z").unwrap()
}

fn parse(args: &[&str], file: &Path) -> KeysCommand {
    let mut argv = vec!["cra", "keys"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--api-keys", file.to_str().unwrap()]);
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Keys(c) => c,
        _ => panic!("not a keys command"),
    }
}

#[test]
fn keys_are_added_revoked_and_listed_without_losing_the_files_comments() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-keys.toml");
    std::fs::write(&file, FILE).unwrap();

    let KeysCommand::Add(args) = parse(
        &[
            "add",
            "--actor",
            "ci-bot",
            "--type",
            "script",
            "--role",
            "agent",
            "--role",
            "author",
            "--namespace",
            "com.example",
            "--expires-in",
            "30d",
        ],
        &file,
    ) else {
        panic!()
    };
    let added = add(&args, now()).unwrap();
    assert!(added.token.starts_with("cra_") && added.token.len() == 68);
    assert_eq!(added.view.key, fingerprint(&added.token));
    assert_eq!(
        added.view.expires_at.as_deref(),
        Some("2027-01-02T12:00:00.000000Z")
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with("# Our keys: rotate every quarter."),
        "{text}"
    );
    let loaded = KeysFile::load(&file).unwrap();
    let entry = loaded.keys.iter().find(|k| k.actor_id == "ci-bot").unwrap();
    assert_eq!(entry.roles, [Role::Agent, Role::Author]);
    assert_eq!(entry.atlas_namespaces, ["com.example"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the keys file stays private");
    }

    // Listed by fingerprint, never by token; expiry and status by the clock given.
    let views = list(&file, now()).unwrap();
    assert_eq!(views.len(), 2);
    assert!(
        !serde_json::to_string(&views)
            .unwrap()
            .contains("admin-key-0000000000000")
    );
    let later = cra_wire::clock::parse_rfc3339("2027-01-02T12:00:00Z").unwrap();
    assert_eq!(list(&file, later).unwrap()[1].status, "expired");

    // Revoked by actor: marked, kept, and what the server's loader reads as revoked.
    let KeysCommand::Revoke(args) = parse(&["revoke", "--actor", "ci-bot"], &file) else {
        panic!()
    };
    let revoked = revoke(&args, now()).unwrap();
    assert_eq!((revoked.len(), revoked[0].status), (1, "revoked"));
    let loaded = KeysFile::load(&file).unwrap();
    assert!(
        loaded
            .keys
            .iter()
            .any(|k| k.actor_id == "ci-bot" && k.revoked)
    );
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .starts_with("# Our keys")
    );
}

#[test]
fn the_last_working_admin_key_is_never_revoked_and_a_refused_edit_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-keys.toml");
    std::fs::write(&file, FILE).unwrap();
    let admin = fingerprint("admin-key-0000000000000");
    let KeysCommand::Revoke(args) = parse(&["revoke", "--key", &admin], &file) else {
        panic!()
    };
    let e = revoke(&args, now()).unwrap_err();
    assert!(e.contains("no working admin key"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), FILE);

    // With a second admin key, the first can go (the admin key's rotation).
    let KeysCommand::Add(add_args) = parse(
        &[
            "add", "--actor", "root-2", "--type", "human", "--role", "admin",
        ],
        &file,
    ) else {
        panic!()
    };
    add(&add_args, now()).unwrap();
    assert_eq!(revoke(&args, now()).unwrap()[0].key, admin);

    // Nothing matches: said, nothing written.
    let before = std::fs::read_to_string(&file).unwrap();
    let KeysCommand::Revoke(args) = parse(&["revoke", "--key", "000000000000"], &file) else {
        panic!()
    };
    assert!(revoke(&args, now()).unwrap_err().contains("cra keys list"));
    // An expiry in the past is refused before anything is written.
    let KeysCommand::Add(args) = parse(
        &[
            "add",
            "--actor",
            "late",
            "--role",
            "agent",
            "--expires-at",
            "2020-01-01T00:00:00Z",
        ],
        &file,
    ) else {
        panic!()
    };
    assert!(add(&args, now()).unwrap_err().contains("not in the future"));
    // A file the server would refuse is not written over (here: a repeated actor id is fine,
    // but the broken entry below is not).
    std::fs::write(&file, format!("{before}\n[[keys]]\ntoken = \"short\"\n")).unwrap();
    let broken = std::fs::read_to_string(&file).unwrap();
    let KeysCommand::Add(args) = parse(&["add", "--actor", "x", "--role", "agent"], &file) else {
        panic!()
    };
    let e = add(&args, now()).unwrap_err();
    assert!(e.contains("not written"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), broken);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
}

/// A keys file that does not exist yet is made only by adding an admin key: `cra serve` makes
/// its own admin key only when it finds no file.
#[test]
fn a_new_keys_file_starts_with_an_admin_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data").join("api-keys.toml");
    let KeysCommand::Add(agent) = parse(&["add", "--actor", "bot", "--role", "agent"], &file)
    else {
        panic!()
    };
    assert!(add(&agent, now()).unwrap_err().contains("--role admin"));
    assert!(!file.exists());
    let KeysCommand::Add(admin) = parse(
        &[
            "add", "--actor", "root", "--type", "human", "--role", "admin",
        ],
        &file,
    ) else {
        panic!()
    };
    add(&admin, now()).unwrap();
    add(&agent, now()).unwrap();
    assert_eq!(list(&file, now()).unwrap().len(), 2);
}

#[test]
fn durations_and_instants_are_read_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("api-keys.toml");
    for bad in [
        ["--expires-in", "30"],
        ["--expires-in", "0d"],
        ["--expires-in", "-1d"],
        ["--expires-in", "2w"],
        ["--expires-at", "2027-01-01T00:00:00"],
    ] {
        let mut argv = vec!["cra", "keys", "add", "--actor", "a", "--role", "agent"];
        argv.extend_from_slice(&bad);
        argv.extend_from_slice(&["--api-keys", file.to_str().unwrap()]);
        assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
    }
}

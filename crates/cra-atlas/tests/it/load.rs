//! Loading: merge rules, digest, diagnostics with file, pointer and line.

use cra_atlas::{LoadError, PolicyType, load_dir};
use pretty_assertions::assert_eq;

use crate::{copy_fixture, fixture};

#[test]
fn minimal_atlas_merges_inline_and_folder_definitions() {
    let atlas = load_dir(&fixture("minimal")).unwrap();
    let m = &atlas.manifest;
    assert_eq!(m.atlas_id, "com.example.minimal");
    let policies: Vec<&str> = m.policies.iter().map(|p| p.policy_id.as_str()).collect();
    assert_eq!(policies, ["allow-read", "deny-delete"]);
    assert_eq!(m.policies[1].kind, PolicyType::Deny);
    let actions: Vec<&str> = m.actions.iter().map(|a| a.action_id.as_str()).collect();
    assert_eq!(actions, ["note.get", "note.list", "note.delete"]);
    assert_eq!(atlas.action_origins[0].file, "atlas.json");
    assert_eq!(atlas.action_origins[0].pointer, "/actions/0");
    assert_eq!(atlas.action_origins[2].file, "actions/notes.json");
    assert_eq!(atlas.action_origins[2].pointer, "/1");
    assert_eq!(atlas.policy_origins[1].pointer, "");
    assert_eq!(
        atlas.context["context/overview.md"],
        "# Notes\n\nNotes are append-only.\n"
    );
    assert_eq!(m.extra["x-team"], "docs");
    assert_eq!(atlas.files.len(), 4);
    assert_eq!(atlas.digest, cra_atlas::atlas_digest(&atlas.files));
    assert_eq!(atlas.digest.len(), 64);
    // note.delete is matched by `note.*` (deny), so nothing is ungoverned; no warnings at all.
    assert_eq!(atlas.warnings, vec![]);
}

#[test]
fn digest_changes_with_any_byte_and_ignores_hidden_files() {
    let (_tmp, dir) = copy_fixture("minimal");
    let before = load_dir(&dir).unwrap().digest;
    std::fs::write(dir.join(".DS_Store"), b"junk").unwrap();
    assert_eq!(load_dir(&dir).unwrap().digest, before);
    std::fs::write(dir.join("context/overview.md"), b"# Notes\n\nChanged.\n").unwrap();
    assert_ne!(load_dir(&dir).unwrap().digest, before);
}

#[test]
fn golden_peer_atlas_loads_and_reports_its_missing_context_file() {
    let err = load_dir(&fixture("golden-simple")).unwrap_err();
    let LoadError::Invalid { diagnostics, .. } = err else {
        panic!("expected Invalid, got {err}");
    };
    let errors: Vec<_> = diagnostics.iter().filter(|d| d.is_error()).collect();
    assert_eq!(errors.len(), 1, "{diagnostics:#?}");
    let d = errors[0];
    assert_eq!(d.code, "missing_file");
    assert_eq!(d.file, "atlas.json");
    assert_eq!(d.pointer, "/context_packs/0/files/0");
    assert_eq!(d.line, Some(26));
    assert!(d.message.contains("context/overview.md"), "{}", d.message);
}

#[test]
fn golden_peer_atlas_is_valid_once_its_context_file_exists() {
    let (_tmp, dir) = copy_fixture("golden-simple");
    std::fs::create_dir(dir.join("context")).unwrap();
    std::fs::write(dir.join("context/overview.md"), "# Resources\n").unwrap();
    let atlas = load_dir(&dir).unwrap();
    assert_eq!(atlas.manifest.actions.len(), 5);
    assert_eq!(atlas.manifest.policies.len(), 3);
}

#[test]
fn errors_name_file_pointer_and_line() {
    let (_tmp, dir) = copy_fixture("minimal");
    std::fs::write(
        dir.join("actions/notes.json"),
        "[\n  {\"action_id\": \"note.list\", \"name\": \"List\"},\n  {\"action_id\": \"Note.Delete\", \"name\": \"Delete\"}\n]\n",
    )
    .unwrap();
    let LoadError::Invalid { diagnostics, .. } = load_dir(&dir).unwrap_err() else {
        panic!("expected Invalid");
    };
    let d = &diagnostics[0];
    assert_eq!(
        (d.code.as_str(), d.file.as_str(), d.pointer.as_str(), d.line),
        ("invalid_id", "actions/notes.json", "/1/action_id", Some(3))
    );
}

#[cfg(unix)]
#[test]
fn symbolic_links_are_refused() {
    let (_tmp, dir) = copy_fixture("minimal");
    std::os::unix::fs::symlink("/etc/hostname", dir.join("context/host.md")).unwrap();
    let LoadError::Invalid { diagnostics, .. } = load_dir(&dir).unwrap_err() else {
        panic!("expected Invalid");
    };
    assert_eq!(diagnostics[0].code, "unsupported_file");
    assert_eq!(diagnostics[0].file, "context/host.md");
}

#[test]
fn unknown_x_fields_survive_and_other_unknown_fields_are_errors() {
    let (_tmp, dir) = copy_fixture("minimal");
    let path = dir.join("policies/deny.json");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "{",
        "{\"x-ticket\": {\"id\": 7}, \"x-note\": \"kept\", ",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let atlas = load_dir(&dir).unwrap();
    let p = &atlas.manifest.policies[1];
    assert_eq!(p.extra["x-note"], "kept");
    assert_eq!(p.extra["x-ticket"]["id"], 7);
    let back = serde_json::to_value(p).unwrap();
    assert_eq!(back["x-note"], "kept");

    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"x-note\"", "\"note\"");
    std::fs::write(&path, text).unwrap();
    let LoadError::Invalid { diagnostics, .. } = load_dir(&dir).unwrap_err() else {
        panic!("expected Invalid");
    };
    assert_eq!(diagnostics[0].pointer, "/note");
    assert_eq!(diagnostics[0].file, "policies/deny.json");
}

//! Atlas manifests and files as the loader reads them (`cra_atlas::validate::analyse`).
//!
//! Manifest input: the first byte picks which file of a small valid atlas (the `minimal` fixture
//! of `cra-atlas`) the rest replaces: `atlas.json`, a policies file, an actions file, a context
//! document, or an extra file at a path taken from the input.
//!
//! Oracles: analysis never panics and every diagnostic renders; a loaded atlas's digest is the
//! digest of its files; the formatter's output parses to the same value and is a fixed point.
//! The caller's hook gets each loaded atlas (the fuzz target compiles it for CARP and resolves a
//! request with it: `carp::compile_and_resolve`).

use std::collections::BTreeMap;
use std::path::Path;

use cra_atlas::LoadedAtlas;
use cra_atlas::fmt::{format_value, kind_of_file};
use cra_atlas::load::{atlas_digest, is_portable_path};
use cra_atlas::validate::analyse;

const MINIMAL: [(&str, &[u8]); 4] = [
    (
        "atlas.json",
        include_bytes!("../../crates/cra-atlas/tests/fixtures/minimal/atlas.json"),
    ),
    (
        "policies/deny.json",
        include_bytes!("../../crates/cra-atlas/tests/fixtures/minimal/policies/deny.json"),
    ),
    (
        "actions/notes.json",
        include_bytes!("../../crates/cra-atlas/tests/fixtures/minimal/actions/notes.json"),
    ),
    (
        "context/overview.md",
        include_bytes!("../../crates/cra-atlas/tests/fixtures/minimal/context/overview.md"),
    ),
];

fn check_fmt(path: &str, bytes: &[u8]) {
    let Some(kind) = kind_of_file(path) else {
        return;
    };
    let Ok(v) = cra_wire::json::parse_strict(bytes) else {
        return;
    };
    let once = format_value(&v, kind);
    let back = match cra_wire::json::parse_strict(once.as_bytes()) {
        Ok(b) => b,
        Err(e) => panic!("formatted {path} does not parse: {e}\n{once}"),
    };
    assert_eq!(back, v, "formatting {path} changed its value");
    assert_eq!(
        format_value(&back, kind),
        once,
        "formatting is not a fixed point"
    );
}

/// One file of a small atlas replaced by the input; `then` gets every atlas that loads.
pub fn atlas_manifest_with(data: &[u8], then: impl FnOnce(&LoadedAtlas)) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let mut files: BTreeMap<String, Vec<u8>> = MINIMAL
        .iter()
        .map(|(p, b)| ((*p).to_owned(), b.to_vec()))
        .collect();
    let which = usize::from(first % 5);
    let path = if which < MINIMAL.len() {
        MINIMAL[which].0.to_owned()
    } else {
        // `<path>\n<content>`: an extra file, wherever the input puts it.
        let cut = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let p = String::from_utf8_lossy(&rest[..cut]).into_owned();
        if !is_portable_path(&p) {
            return; // the directory and archive readers never hand such a path over
        }
        p
    };
    let content = if which < MINIMAL.len() {
        rest
    } else {
        rest.get(path.len() + 1..).unwrap_or(&[])
    };
    files.insert(path.clone(), content.to_vec());
    check_fmt(&path, content);
    let digest = atlas_digest(&files);
    let analysis = analyse(Path::new("fuzz"), files);
    for d in &analysis.diagnostics {
        let _ = d.to_string();
    }
    let Some(atlas) = analysis.atlas else {
        return;
    };
    if analysis.diagnostics.iter().any(|d| d.is_error()) {
        return;
    }
    assert_eq!(
        atlas.digest, digest,
        "digest is not the digest of the files"
    );
    then(&atlas);
}

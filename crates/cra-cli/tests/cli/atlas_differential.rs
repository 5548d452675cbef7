//! One atlas validator (issue 22 B.12): every atlas fixture, broken and valid, and every example
//! atlas goes through `cra atlas check` and through the runtime's doors, and each door gives the
//! same verdict with the same error codes.
//!
//! * `cra atlas check` ([`cra_cli::cmd::atlas::check_atlases`], with the fixture's `--with`);
//! * the runtime's start (and `--watch` reload) door, [`cra_runtime::atlases::load_all`] over the
//!   `--with` atlases and the fixture: the verdict (it answers a sentence, not codes);
//! * the runtime's HTTP door, [`cra_runtime::atlases::load_inline`] (what `POST` and `PUT
//!   /v1/atlases` call) on the fixture as an inline atlas, when its files can be sent inline (a
//!   manifest that is a JSON object, UTF-8 files): the verdict and the codes of stages 1 to 4. An
//!   inline install resolves dependencies against the set in force, not against `--with`, so the
//!   dependency codes are compared at the start door only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cra_cli::cmd::atlas::{CheckArgs, check_atlases};
use serde_json::{Map, Value};

/// Codes of the registry stage, which the HTTP door applies against the set in force.
const DEPENDENCY_CODES: [&str; 3] = [
    "dependency_missing",
    "dependency_unsatisfied",
    "duplicate_atlas",
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/atlas")
}

/// Every fixture: `(name, directory, --with directories)`.
fn corpus() -> Vec<(String, PathBuf, Vec<PathBuf>)> {
    let table: Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("broken.json")).unwrap())
            .unwrap();
    let mut out = Vec::new();
    for (name, want) in &table {
        let with = want
            .get("args")
            .and_then(Value::as_array)
            .map(|args| {
                args.windows(2)
                    .filter(|w| w[0] == "--with")
                    .map(|w| {
                        let p = w[1].as_str().unwrap();
                        PathBuf::from(p.replace("{fixtures}", fixtures().to_str().unwrap()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push((name.clone(), fixtures().join("broken").join(name), with));
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases");
    for root in [fixtures().join("valid"), examples] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("atlas.json").is_file())
            .collect();
        dirs.sort();
        for d in dirs {
            let name = format!(
                "{}/{}",
                root.file_name().unwrap().to_string_lossy(),
                d.file_name().unwrap().to_string_lossy()
            );
            out.push((name, d, Vec::new()));
        }
    }
    out.push((
        "golden-simple".into(),
        fixtures().join("golden-simple"),
        Vec::new(),
    ));
    out
}

/// The fixture as an inline atlas `{manifest, files}`, when it can be one.
fn inline(dir: &Path) -> Option<Value> {
    let files = cra_atlas::load::read_dir_files(dir, cra_atlas::load::Limits::default()).ok()?;
    let text = std::str::from_utf8(files.get("atlas.json")?).ok()?;
    // A manifest that repeats a key cannot travel as a JSON object: it is not sent inline.
    cra_wire::json::parse_strict_str(text).ok()?;
    let manifest: Value = serde_json::from_str(text).ok()?;
    if !manifest.is_object() {
        return None;
    }
    let mut rest = Map::new();
    for (path, bytes) in &files {
        if path != "atlas.json" {
            rest.insert(
                path.clone(),
                Value::String(String::from_utf8(bytes.clone()).ok()?),
            );
        }
    }
    Some(serde_json::json!({"manifest": manifest, "files": rest}))
}

/// The codes of an `invalid_atlas` refusal's field errors (`<code>: <message>`).
fn refusal_codes(e: &cra_runtime::ApiError) -> BTreeSet<String> {
    e.body
        .details
        .as_ref()
        .map(|d| {
            d.errors
                .iter()
                .filter_map(|f| f.message.split(':').next())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn cra_atlas_check_and_every_runtime_door_agree_on_every_atlas_fixture() {
    let corpus = corpus();
    assert!(corpus.len() >= 50, "only {} atlas fixtures", corpus.len());
    let (mut inline_compared, mut failures) = (0, Vec::new());
    for (name, dir, with) in &corpus {
        let args = CheckArgs {
            paths: vec![dir.clone()],
            with: with.clone(),
            strict: false,
            output: cra_cli::cmd::atlas::CheckFormat::Json,
        };
        let checked = check_atlases(&args).unwrap_or_else(|e| panic!("{name}: {e}"));
        let checked = &checked[0];
        let codes: BTreeSet<String> = checked
            .diagnostics
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.code.clone())
            .collect();
        let mut sources = with.clone();
        sources.push(dir.clone());
        let started = cra_runtime::atlases::load_all(&sources);
        if started.is_ok() != checked.is_valid() {
            failures.push(format!(
                "{name}: check says valid={} ({codes:?}), the runtime's start says {:?}",
                checked.is_valid(),
                started.err()
            ));
            continue;
        }
        let Some(body) = inline(dir) else { continue };
        inline_compared += 1;
        let posted = cra_runtime::atlases::load_inline(&body, "");
        let own: BTreeSet<String> = codes
            .iter()
            .filter(|c| !DEPENDENCY_CODES.contains(&c.as_str()))
            .cloned()
            .collect();
        let refused = posted.as_ref().err().map(refusal_codes).unwrap_or_default();
        if refused != own {
            failures.push(format!(
                "{name}: check's codes {own:?}, POST /v1/atlases refused with {refused:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        inline_compared >= 50,
        "only {inline_compared} fixtures went through the HTTP door"
    );
}

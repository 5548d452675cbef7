//! The one atlas validator: `cra atlas check`, every load of the runtime (start, `POST` and
//! `PUT /v1/atlases`, `--watch`) and the CLI commands that load atlases all call it, so an atlas
//! that checks valid is an atlas the runtime loads, and one it refuses is refused with the same
//! diagnostics (`specs/atlas.md`, "Validation stages and codes").
//!
//! It is [`cra_atlas::validate::analyse`] (files, shapes, meaning) followed by the evaluation
//! stage: the atlas compiled as resolution compiles it ([`CompiledAtlas::from_loaded`]). What
//! the compiler refuses and the earlier stages let through (a budget's `max_units: 2.5`, a
//! condition outside its range) becomes an error diagnostic at the file and pointer it concerns.

use std::collections::BTreeMap;
use std::path::Path;

use cra_atlas::diag::Diagnostic;
use cra_atlas::load::{LoadError, LoadedAtlas, MANIFEST_FILE, read_any};
use cra_atlas::validate::Analysis;

use crate::index::{CompileError, CompiledAtlas};

/// Analyses the files of one atlas through every stage, the evaluator's included.
pub fn analyse(source: &Path, files: BTreeMap<String, Vec<u8>>) -> Analysis {
    let mut analysis = cra_atlas::validate::analyse(source, files);
    if analysis.is_valid()
        && let Some(atlas) = &analysis.atlas
        && let Err(e) = CompiledAtlas::from_loaded(atlas)
    {
        analysis.diagnostics.insert(0, diagnostic(atlas, &e));
    }
    analysis
}

/// Validates already-read files and builds the atlas ([`analyse`]); fails with every diagnostic
/// when any error is found.
pub fn from_files(
    source: &Path,
    files: BTreeMap<String, Vec<u8>>,
) -> Result<LoadedAtlas, LoadError> {
    let analysis = analyse(source, files);
    match analysis.atlas {
        Some(atlas) if !analysis.diagnostics.iter().any(Diagnostic::is_error) => Ok(atlas),
        _ => Err(LoadError::Invalid {
            source_path: source.to_owned(),
            diagnostics: analysis.diagnostics,
        }),
    }
}

/// Loads an atlas directory or `.atlas.tar.gz` archive through [`from_files`].
pub fn load(path: &Path) -> Result<LoadedAtlas, LoadError> {
    let (files, _) = read_any(path)?;
    from_files(path, files)
}

/// The name [`CompiledAtlas`] gives a policy in its errors.
pub(crate) fn policy_owner(policy_id: &str) -> String {
    format!("policy `{policy_id}`")
}

/// The name [`CompiledAtlas`] gives a context pack in its errors.
pub(crate) fn pack_owner(pack_id: &str) -> String {
    format!("context pack `{pack_id}`")
}

/// The compile error `e` of `atlas` as a diagnostic at the file and pointer it concerns.
fn diagnostic(atlas: &LoadedAtlas, e: &CompileError) -> Diagnostic {
    let message = e.to_string();
    let (code, (file, pointer)) = match e {
        CompileError::PolicyParameters {
            policy_id, pointer, ..
        } => (
            "policy_parameters",
            inside(policy_at(atlas, policy_id), pointer),
        ),
        CompileError::BadPattern { policy_id, .. } => (
            "invalid_pattern",
            inside(policy_at(atlas, policy_id), "/actions"),
        ),
        CompileError::UnknownCondition {
            owner, condition, ..
        } => (
            "unknown_condition",
            inside(owner_at(atlas, owner), &format!("/conditions/{condition}")),
        ),
        CompileError::BadCondition { owner, pointer, .. } => {
            ("invalid_condition", inside(owner_at(atlas, owner), pointer))
        }
        CompileError::ParametersSchema { action_id, .. } => (
            "invalid_json_schema",
            inside(action_at(atlas, action_id), "/parameters_schema"),
        ),
        CompileError::MissingContextFile { pack_id, .. } => {
            ("missing_file", owner_at(atlas, &pack_owner(pack_id)))
        }
        CompileError::DuplicateAtlas { .. } => {
            ("duplicate_atlas", (MANIFEST_FILE.to_owned(), String::new()))
        }
        CompileError::Redaction { pointer, .. } => (
            "invalid_redaction",
            (MANIFEST_FILE.to_owned(), pointer.clone()),
        ),
    };
    Diagnostic::error(code, file, pointer, message)
}

/// `(file, pointer)` extended by `more` inside the object at `pointer`.
fn inside((file, pointer): (String, String), more: &str) -> (String, String) {
    (file, format!("{pointer}{more}"))
}

/// Where the policy `policy_id` was written.
fn policy_at(atlas: &LoadedAtlas, policy_id: &str) -> (String, String) {
    let i = atlas
        .manifest
        .policies
        .iter()
        .position(|p| p.policy_id == policy_id);
    origin(i.and_then(|i| atlas.policy_origins.get(i)))
}

/// Where the action `action_id` was written.
fn action_at(atlas: &LoadedAtlas, action_id: &str) -> (String, String) {
    let i = atlas
        .manifest
        .actions
        .iter()
        .position(|a| a.action_id.as_str() == action_id);
    origin(i.and_then(|i| atlas.action_origins.get(i)))
}

/// Where the policy or context pack the compiler named `owner` was written.
fn owner_at(atlas: &LoadedAtlas, owner: &str) -> (String, String) {
    if let Some(p) = atlas
        .manifest
        .policies
        .iter()
        .find(|p| policy_owner(&p.policy_id) == owner)
    {
        return policy_at(atlas, &p.policy_id);
    }
    let pack = atlas
        .manifest
        .context_packs
        .iter()
        .position(|p| pack_owner(&p.pack_id) == owner);
    match pack {
        Some(i) => (MANIFEST_FILE.to_owned(), format!("/context_packs/{i}")),
        None => (MANIFEST_FILE.to_owned(), String::new()),
    }
}

fn origin(o: Option<&cra_atlas::load::Origin>) -> (String, String) {
    o.map_or_else(
        || (MANIFEST_FILE.to_owned(), String::new()),
        |o| (o.file.clone(), o.pointer.clone()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid atlas whose one budget policy is written in `policies/limits.json`.
    fn atlas() -> LoadedAtlas {
        let manifest = serde_json::json!({
            "atlas_version": "1.0", "atlas_id": "com.example.check", "version": "1.0.0",
            "name": "Check", "description": "d",
            "context_packs": [{"pack_id": "guide", "name": "Guide", "files": ["context/g.md"], "priority": 1}],
            "policies": [{"policy_id": "allow", "type": "allow", "actions": ["*"]}],
            "actions": [{"action_id": "doc.get", "name": "Get", "description": "d",
                "parameters_schema": {"type": "object"}, "risk_tier": "low", "idempotent": true}]
        });
        let limits = serde_json::json!([{"policy_id": "bud", "type": "budget", "actions": ["doc.*"],
            "parameters": {"max_units": 3}}]);
        let files = BTreeMap::from([
            (MANIFEST_FILE.to_owned(), manifest.to_string().into_bytes()),
            (
                "policies/limits.json".to_owned(),
                limits.to_string().into_bytes(),
            ),
            ("context/g.md".to_owned(), b"guide".to_vec()),
        ]);
        from_files(Path::new("t"), files).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_compile_refusal_is_reported_at_the_file_and_pointer_of_what_it_names() {
        let a = atlas();
        let at = |e: CompileError| {
            let d = diagnostic(&a, &e);
            (d.code, d.file, d.pointer)
        };
        let params = CompileError::PolicyParameters {
            atlas_id: "com.example.check".into(),
            policy_id: "bud".into(),
            pointer: "/parameters/max_units".into(),
            message: "must be an integer".into(),
        };
        assert_eq!(
            at(params),
            (
                "policy_parameters".to_owned(),
                "policies/limits.json".to_owned(),
                "/0/parameters/max_units".to_owned()
            )
        );
        let pack = CompileError::BadCondition {
            atlas_id: "com.example.check".into(),
            owner: pack_owner("guide"),
            pointer: "/conditions/time_window/end_hour".into(),
            message: "must be 1 to 24".into(),
        };
        assert_eq!(
            at(pack),
            (
                "invalid_condition".to_owned(),
                MANIFEST_FILE.to_owned(),
                "/context_packs/0/conditions/time_window/end_hour".to_owned()
            )
        );
    }
}

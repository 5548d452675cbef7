//! Atlas validation: JSON Schema, identifiers, versions, merging and cross-references.
//!
//! [`analyse`] turns the files of an atlas into a [`LoadedAtlas`] and a list of
//! [`Diagnostic`]s, in stages; a stage runs only when the previous one found no error, so that
//! every reported problem is a real one rather than a consequence of an earlier one:
//!
//! 1. files: `atlas.json` exists; every JSON file parses strictly (duplicate keys refused);
//! 2. shape: `atlas.json` against `schemas/atlas-manifest.schema.json`, each policy (inline or in
//!    `policies/*.json`) against `atlas-policy.schema.json`, each action against
//!    `atlas-action.schema.json`, context-pack conditions against the policy schema's
//!    `$defs/conditions`; the §5.4 id regexes and the semver 2.0.0 grammar are in the schemas;
//! 3. meaning: duplicate ids (within a file and across inline/folder), cross-references
//!    (capabilities and policies naming unknown actions, context packs naming missing files,
//!    patterns matching nothing), parameter schemas that are not valid JSON Schemas,
//!    dependency ranges that do not parse, and authoring warnings.
//!
//! Dependencies are *resolved* by the registry ([`crate::registry`]), which knows the other
//! atlases. The codes are listed in `specs/atlas.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::OnceLock;

use cra_wire::json::{JsonError, parse_input};
use serde_json::Value;

use crate::diag::{Diagnostic, line_of_pointer_or_ancestor, push_pointer};
use crate::load::{LoadedAtlas, MANIFEST_FILE, Origin, atlas_digest};
use crate::model::{Action, Conditions, Manifest, Policy, PolicyType};
use crate::pattern;

/// `schemas/atlas-manifest.schema.json`, embedded.
pub const MANIFEST_SCHEMA: &str = include_str!("../../../schemas/atlas-manifest.schema.json");
/// `schemas/atlas-policy.schema.json`, embedded.
pub const POLICY_SCHEMA: &str = include_str!("../../../schemas/atlas-policy.schema.json");
/// `schemas/atlas-action.schema.json`, embedded.
pub const ACTION_SCHEMA: &str = include_str!("../../../schemas/atlas-action.schema.json");

/// The result of analysing an atlas's files.
#[derive(Debug)]
pub struct Analysis {
    /// The atlas, when it could be built (it may still carry errors in `diagnostics` from the
    /// meaning stage).
    pub atlas: Option<LoadedAtlas>,
    /// Every problem, errors first, then in file and pointer order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Analysis {
    /// True when no diagnostic is an error.
    pub fn is_valid(&self) -> bool {
        !self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

struct Schemas {
    /// Every member name the schemas define: what an unexpected member is compared with.
    keys: Vec<String>,
    manifest: jsonschema::Validator,
    policy: jsonschema::Validator,
    action: jsonschema::Validator,
    conditions: jsonschema::Validator,
}

fn schemas() -> Result<&'static Schemas, String> {
    static CELL: OnceLock<Result<Schemas, String>> = OnceLock::new();
    CELL.get_or_init(|| {
        let compile = |name: &str, text: &str| -> Result<(Value, jsonschema::Validator), String> {
            let value: Value = serde_json::from_str(text)
                .map_err(|e| format!("embedded schema {name} is not JSON: {e}"))?;
            let validator = jsonschema::validator_for(&value)
                .map_err(|e| format!("embedded schema {name} does not compile: {e}"))?;
            Ok((value, validator))
        };
        let (manifest_value, manifest) = compile("atlas-manifest", MANIFEST_SCHEMA)?;
        let (policy_value, policy) = compile("atlas-policy", POLICY_SCHEMA)?;
        let (action_value, action) = compile("atlas-action", ACTION_SCHEMA)?;
        let keys = member_names([&manifest_value, &policy_value, &action_value]);
        let mut conditions_schema = policy_value
            .pointer("/$defs/conditions")
            .cloned()
            .ok_or("embedded policy schema lacks $defs/conditions")?;
        if let Some(obj) = conditions_schema.as_object_mut() {
            obj.insert(
                "$schema".into(),
                Value::from("https://json-schema.org/draft/2020-12/schema"),
            );
            // Its references (`#/$defs/...`) resolve in the policy schema's definitions.
            if let Some(defs) = policy_value.get("$defs") {
                obj.insert("$defs".into(), defs.clone());
            }
        }
        let conditions = jsonschema::validator_for(&conditions_schema)
            .map_err(|e| format!("embedded conditions schema does not compile: {e}"))?;
        Ok(Schemas {
            keys,
            manifest,
            policy,
            action,
            conditions,
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Analyses the files of one atlas (module documentation). `source` is only recorded.
pub fn analyse(source: &Path, files: BTreeMap<String, Vec<u8>>) -> Analysis {
    let mut diags = Vec::new();
    let atlas = build(&files, &mut diags);
    let atlas = atlas.map(|(manifest, policy_origins, action_origins)| {
        semantic(
            &manifest,
            &policy_origins,
            &action_origins,
            &files,
            &mut diags,
        );
        let context = files
            .iter()
            .filter(|(p, _)| p.starts_with("context/"))
            .filter_map(|(p, b)| Some((p.clone(), String::from_utf8(b.clone()).ok()?)))
            .collect();
        LoadedAtlas {
            manifest,
            context,
            digest: atlas_digest(&files),
            files: BTreeMap::new(),
            source: source.to_owned(),
            policy_origins,
            action_origins,
            warnings: Vec::new(),
            signature: None,
        }
    });
    fill_lines(&mut diags, &files);
    diags.sort_by(|a, b| {
        (a.severity, &a.file, a.line, &a.pointer).cmp(&(b.severity, &b.file, b.line, &b.pointer))
    });
    let atlas = atlas.map(|mut a| {
        a.files = files;
        a.warnings = diags.iter().filter(|d| !d.is_error()).cloned().collect();
        a
    });
    Analysis {
        atlas,
        diagnostics: diags,
    }
}

/// Sets the line of every diagnostic that has none, from its JSON file's text and pointer.
pub fn fill_lines(diags: &mut [Diagnostic], files: &BTreeMap<String, Vec<u8>>) {
    for d in diags {
        if d.line.is_none()
            && let Some(text) = files
                .get(&d.file)
                .filter(|_| d.file.ends_with(".json"))
                .and_then(|b| std::str::from_utf8(b).ok())
        {
            d.line = line_of_pointer_or_ancestor(text, &d.pointer);
        }
    }
}

type Built = (Manifest, Vec<Origin>, Vec<Origin>);

fn parse_json(file: &str, bytes: &[u8], diags: &mut Vec<Diagnostic>) -> Option<Value> {
    match parse_input(bytes) {
        Ok(v) => Some(v),
        Err(JsonError::Syntax {
            line,
            column,
            message,
        }) => {
            let mut d = Diagnostic::error(
                "json_syntax",
                file,
                "",
                format!("not valid JSON (column {column}): {message}"),
            );
            d.line = Some(line);
            diags.push(d);
            None
        }
        Err(JsonError::DuplicateKey { pointer, key }) => {
            diags.push(Diagnostic::error(
                "duplicate_key",
                file,
                pointer,
                format!("the key `{key}` appears twice in this object: keep one"),
            ));
            None
        }
        Err(e @ JsonError::TooDeep { .. }) => {
            diags.push(Diagnostic::error("json_syntax", file, "", e.to_string()));
            None
        }
        Err(e @ JsonError::NotFinite { .. }) => {
            let pointer = e.pointer().to_owned();
            diags.push(Diagnostic::error(
                "number_range",
                file,
                pointer,
                e.to_string(),
            ));
            None
        }
    }
}

/// Runs `validator` on `value` and records each failure under `file` at `prefix` + its path.
fn schema_check(
    validator: &jsonschema::Validator,
    value: &Value,
    file: &str,
    prefix: &str,
    diags: &mut Vec<Diagnostic>,
) {
    for err in validator.iter_errors(value) {
        let mut pointer = format!("{prefix}{}", err.instance_path().as_str());
        // An unexpected member is reported at the member itself, not at its object.
        let mut hint = String::new();
        if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
            err.kind()
            && let [only] = unexpected.as_slice()
        {
            pointer = push_pointer(&pointer, only);
            let keys = schemas().map(|s| s.keys.as_slice()).unwrap_or_default();
            hint = crate::diag::suggestion(only, keys.iter().map(String::as_str));
        }
        // A missing member is reported where it belongs, so the author sees which field to add.
        if let jsonschema::error::ValidationErrorKind::Required { property } = err.kind()
            && let Some(name) = property.as_str()
        {
            pointer = push_pointer(&pointer, name);
        }
        let last = pointer.rsplit('/').next().unwrap_or("");
        let (code, pattern_hint) = match (err.kind().keyword(), last) {
            ("pattern", "atlas_id") => (
                "invalid_id",
                " (an atlas id is reverse-domain notation matching ^[a-z][a-z0-9]*(\\.[a-z][a-z0-9-]*)+$, e.g. com.example.support)",
            ),
            ("pattern", "action_id") => (
                "invalid_id",
                " (an action id is dotted lowercase matching ^[a-z][a-z0-9]*(\\.[a-z][a-z0-9]*)+$, e.g. ticket.lookup)",
            ),
            ("pattern", "version") => (
                "invalid_version",
                " (a version is Semantic Versioning 2.0.0, e.g. 1.4.0 or 2.0.0-rc.1)",
            ),
            ("const", "atlas_version") => (
                "schema",
                " (this implementation reads Atlas/1.0: write \"1.0\")",
            ),
            _ => ("schema", ""),
        };
        diags.push(Diagnostic::error(
            code,
            file,
            pointer,
            format!("{err}{pattern_hint}{hint}"),
        ));
    }
}

/// Every member name `schemas` define (`properties` at any depth), sorted.
fn member_names<'a>(schemas: impl IntoIterator<Item = &'a Value>) -> Vec<String> {
    fn collect(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(map) => {
                if let Some(Value::Object(props)) = map.get("properties") {
                    out.extend(props.keys().cloned());
                }
                map.values().for_each(|x| collect(x, out));
            }
            Value::Array(items) => items.iter().for_each(|x| collect(x, out)),
            _ => {}
        }
    }
    let mut keys = std::collections::BTreeSet::new();
    schemas.into_iter().for_each(|v| collect(v, &mut keys));
    keys.into_iter().collect()
}

/// Collects the policy (or action) objects held by one folder file.
fn folder_items(
    file: &str,
    value: Value,
    what: &str,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(Origin, Value)> {
    let origin = |pointer: String| Origin {
        file: file.to_owned(),
        pointer,
    };
    match value {
        Value::Object(_) => vec![(origin(String::new()), value)],
        Value::Array(items) => {
            if items.is_empty() {
                diags.push(Diagnostic::warning(
                    "empty_file",
                    file,
                    "",
                    format!("this file holds an empty array: add {what}s or delete the file"),
                ));
            }
            items
                .into_iter()
                .enumerate()
                .filter_map(|(i, item)| {
                    if item.is_object() {
                        Some((origin(format!("/{i}")), item))
                    } else {
                        diags.push(Diagnostic::error(
                            "schema",
                            file,
                            format!("/{i}"),
                            format!("each item must be a {what} object"),
                        ));
                        None
                    }
                })
                .collect()
        }
        _ => {
            diags.push(Diagnostic::error(
                "schema",
                file,
                "",
                format!("a {what} file holds one {what} object or an array of them"),
            ));
            Vec::new()
        }
    }
}

fn build(files: &BTreeMap<String, Vec<u8>>, diags: &mut Vec<Diagnostic>) -> Option<Built> {
    let schemas = match schemas() {
        Ok(s) => s,
        Err(message) => {
            diags.push(Diagnostic::error("internal", MANIFEST_FILE, "", message));
            return None;
        }
    };
    let Some(manifest_bytes) = files.get(MANIFEST_FILE) else {
        diags.push(Diagnostic::error(
            "missing_manifest",
            MANIFEST_FILE,
            "",
            "the atlas has no atlas.json at its root: every atlas needs a manifest (try `cra atlas init`)",
        ));
        return None;
    };
    let manifest_value = parse_json(MANIFEST_FILE, manifest_bytes, diags);

    // Folder-held policies and actions: top-level `*.json` files of `policies/` and `actions/`.
    let mut folder: [Vec<(Origin, Value)>; 2] = [Vec::new(), Vec::new()];
    for (path, bytes) in files {
        for (slot, (dir, what)) in [("policies/", "policy"), ("actions/", "action")]
            .into_iter()
            .enumerate()
        {
            let Some(rest) = path.strip_prefix(dir) else {
                continue;
            };
            if rest.contains('/') || !rest.ends_with(".json") {
                diags.push(Diagnostic::warning(
                    "ignored_file",
                    path,
                    "",
                    format!("only top-level *.json files of {dir} are read: this file is ignored"),
                ));
                continue;
            }
            if let Some(v) = parse_json(path, bytes, diags) {
                folder[slot].extend(folder_items(path, v, what, diags));
            }
        }
    }
    let mut manifest_value = manifest_value?;

    schema_check(&schemas.manifest, &manifest_value, MANIFEST_FILE, "", diags);
    let mut inline = |key: &str| -> Vec<(Origin, Value)> {
        match manifest_value.get_mut(key).map(Value::take) {
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        Origin {
                            file: MANIFEST_FILE.to_owned(),
                            pointer: format!("/{key}/{i}"),
                        },
                        v,
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut policies = inline("policies");
    let mut actions = inline("actions");
    let [folder_policies, folder_actions] = folder;
    policies.extend(folder_policies);
    actions.extend(folder_actions);
    if let Some(obj) = manifest_value.as_object_mut() {
        obj.remove("policies");
        obj.remove("actions");
    }
    for (o, v) in &policies {
        schema_check(&schemas.policy, v, &o.file, &o.pointer, diags);
    }
    for (o, v) in &actions {
        schema_check(&schemas.action, v, &o.file, &o.pointer, diags);
    }
    if let Some(packs) = manifest_value
        .get("context_packs")
        .and_then(Value::as_array)
    {
        for (i, pack) in packs.iter().enumerate() {
            if let Some(c) = pack.get("conditions") {
                let prefix = format!("/context_packs/{i}/conditions");
                schema_check(&schemas.conditions, c, MANIFEST_FILE, &prefix, diags);
            }
        }
    }
    if diags.iter().any(Diagnostic::is_error) {
        return None;
    }

    let mut ok = true;
    let manifest: Option<Manifest> = match serde_json::from_value(manifest_value) {
        Ok(m) => Some(m),
        Err(e) => {
            diags.push(Diagnostic::error(
                "schema",
                MANIFEST_FILE,
                "",
                format!("the manifest could not be read: {e}"),
            ));
            None
        }
    };
    let (policy_list, policy_origins) = decode_each::<Policy>(policies, "policy", &mut ok, diags);
    let (action_list, action_origins) = decode_each::<Action>(actions, "action", &mut ok, diags);
    let mut manifest = manifest.filter(|_| ok)?;
    manifest.policies = policy_list;
    manifest.actions = action_list;
    Some((manifest, policy_origins, action_origins))
}

/// Decodes each `(origin, value)` as a `T` (a policy or an action), keeping the origins of those
/// that decode and recording a diagnostic (and `ok = false`) for each that does not.
fn decode_each<T: serde::de::DeserializeOwned>(
    items: Vec<(Origin, Value)>,
    what: &str,
    ok: &mut bool,
    diags: &mut Vec<Diagnostic>,
) -> (Vec<T>, Vec<Origin>) {
    let mut decoded = Vec::new();
    let mut origins = Vec::new();
    for (o, v) in items {
        match serde_json::from_value::<T>(v) {
            Ok(item) => {
                decoded.push(item);
                origins.push(o);
            }
            Err(e) => {
                *ok = false;
                diags.push(Diagnostic::error(
                    "schema",
                    &o.file,
                    &o.pointer,
                    format!("the {what} could not be read: {e}"),
                ));
            }
        }
    }
    (decoded, origins)
}

fn at(o: &Origin, tail: &str) -> String {
    format!("{}{tail}", o.pointer)
}

fn conditions_checks(
    c: &Conditions,
    file: &str,
    pointer: &str,
    capability_ids: &BTreeSet<&str>,
    diags: &mut Vec<Diagnostic>,
) {
    if let Some(caps) = &c.capabilities {
        for (i, cap) in caps.iter().enumerate() {
            if !capability_ids.contains(cap.as_str()) {
                diags.push(Diagnostic::warning(
                    "unknown_capability",
                    file,
                    format!("{pointer}/capabilities/{i}"),
                    format!(
                        "no capability `{cap}` is declared in this atlas: this condition holds only \
                         for tasks naming a capability of another atlas{}",
                        crate::diag::suggestion(cap, capability_ids.iter().copied())
                    ),
                ));
            }
        }
    }
    if let Some(w) = &c.time_window
        && w.start_hour == w.end_hour
    {
        // An error, not a warning: the evaluator refuses such a window (an author who wrote
        // 9 to 9 may have meant the whole day, which is 0 to 24), so it could never load.
        diags.push(Diagnostic::error(
            "empty_time_window",
            file,
            format!("{pointer}/time_window"),
            "start_hour equals end_hour, an empty window: use 0 and 24 for the whole day, or remove it",
        ));
    }
}

fn semantic(
    manifest: &Manifest,
    policy_origins: &[Origin],
    action_origins: &[Origin],
    files: &BTreeMap<String, Vec<u8>>,
    diags: &mut Vec<Diagnostic>,
) {
    let m = MANIFEST_FILE;
    // Duplicate ids.
    let mut seen: HashMap<&str, &Origin> = HashMap::new();
    for (a, o) in manifest.actions.iter().zip(action_origins) {
        if let Some(first) = seen.insert(&a.action_id, o) {
            diags.push(Diagnostic::error(
                "duplicate_id",
                &o.file,
                at(o, "/action_id"),
                format!(
                    "action `{}` is defined twice: also in {} at `{}`; keep one",
                    a.action_id, first.file, first.pointer
                ),
            ));
            seen.insert(&a.action_id, first);
        }
    }
    let mut seen: HashMap<&str, &Origin> = HashMap::new();
    for (p, o) in manifest.policies.iter().zip(policy_origins) {
        if let Some(first) = seen.insert(&p.policy_id, o) {
            diags.push(Diagnostic::error(
                "duplicate_id",
                &o.file,
                at(o, "/policy_id"),
                format!(
                    "policy `{}` is defined twice: also in {} at `{}`; keep one",
                    p.policy_id, first.file, first.pointer
                ),
            ));
            seen.insert(&p.policy_id, first);
        }
    }
    let mut caps = BTreeMap::new();
    for (i, c) in manifest.capabilities.iter().enumerate() {
        if let Some(first) = caps.insert(c.capability_id.as_str(), i) {
            diags.push(Diagnostic::error(
                "duplicate_id",
                m,
                format!("/capabilities/{i}/capability_id"),
                format!(
                    "capability `{}` is declared twice (also at /capabilities/{first}): keep one",
                    c.capability_id
                ),
            ));
            caps.insert(c.capability_id.as_str(), first);
        }
    }
    let mut packs = BTreeMap::new();
    for (i, p) in manifest.context_packs.iter().enumerate() {
        if let Some(first) = packs.insert(p.pack_id.as_str(), i) {
            diags.push(Diagnostic::error(
                "duplicate_id",
                m,
                format!("/context_packs/{i}/pack_id"),
                format!(
                    "context pack `{}` is declared twice (also at /context_packs/{first}): keep one",
                    p.pack_id
                ),
            ));
            packs.insert(p.pack_id.as_str(), first);
        }
    }
    let action_ids: BTreeSet<&str> = manifest
        .actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect();
    let capability_ids: BTreeSet<&str> = caps.keys().copied().collect();

    // Capabilities name existing actions.
    for (i, c) in manifest.capabilities.iter().enumerate() {
        for (j, a) in c.actions.iter().enumerate() {
            if !action_ids.contains(a.as_str()) {
                diags.push(Diagnostic::error(
                    "unknown_action",
                    m,
                    format!("/capabilities/{i}/actions/{j}"),
                    format!(
                        "capability `{}` names action `{a}`, which this atlas does not define{}",
                        c.capability_id,
                        crate::diag::suggestion(a, action_ids.iter().copied())
                    ),
                ));
            }
        }
    }

    // Policies: patterns, parameters, conditions.
    for (p, o) in manifest.policies.iter().zip(policy_origins) {
        for (j, pat) in p.actions.iter().enumerate() {
            let pointer = at(o, &format!("/actions/{j}"));
            if let Err(e) = pattern::validate_pattern(pat) {
                diags.push(Diagnostic::error(
                    "invalid_pattern",
                    &o.file,
                    pointer,
                    e.to_string(),
                ));
            } else if pattern::is_exact(pat) {
                if !action_ids.contains(pat.as_str()) {
                    diags.push(Diagnostic::error(
                        "unknown_action",
                        &o.file,
                        pointer,
                        format!(
                            "policy `{}` names action `{pat}`, which this atlas does not define{}",
                            p.policy_id,
                            crate::diag::suggestion(pat, action_ids.iter().copied())
                        ),
                    ));
                }
            } else if !action_ids.iter().any(|id| pattern::matches(pat, id)) {
                diags.push(Diagnostic::warning(
                    "pattern_matches_nothing",
                    &o.file,
                    pointer,
                    format!(
                        "pattern `{pat}` of policy `{}` matches no action of this atlas",
                        p.policy_id
                    ),
                ));
            }
        }
        if p.kind == PolicyType::Deny
            && !p
                .parameters
                .as_ref()
                .is_some_and(|params| params.contains_key("reason"))
        {
            diags.push(Diagnostic::warning(
                "deny_without_reason",
                &o.file,
                at(o, ""),
                format!(
                    "deny policy `{}` gives no parameters.reason: agents are told why they are refused",
                    p.policy_id
                ),
            ));
        }
        if p.kind == PolicyType::Budget
            && let Some(costs) = p
                .parameters
                .as_ref()
                .and_then(|params| params.get("costs"))
                .and_then(Value::as_object)
        {
            for pat in costs.keys() {
                let pointer = at(
                    o,
                    &format!("/parameters/costs/{}", crate::diag::escape_token(pat)),
                );
                if let Err(e) = pattern::validate_pattern(pat) {
                    diags.push(Diagnostic::error(
                        "invalid_pattern",
                        &o.file,
                        pointer,
                        e.to_string(),
                    ));
                } else if !action_ids.iter().any(|id| pattern::matches(pat, id)) {
                    diags.push(Diagnostic::warning(
                        "pattern_matches_nothing",
                        &o.file,
                        pointer,
                        format!("cost pattern `{pat}` matches no action of this atlas"),
                    ));
                }
            }
        }
        if let Some(c) = &p.conditions {
            conditions_checks(c, &o.file, &at(o, "/conditions"), &capability_ids, diags);
        }
    }

    // An approval that is an action's only grant grants it on its own (specs/carp.md). That is
    // allowed, but worth a word: authors often mean "an allow, plus a human".
    for (p, o) in manifest.policies.iter().zip(policy_origins) {
        let enforced = |q: &Policy| {
            q.enforcement.or(manifest.enforcement) != Some(crate::model::Enforcement::LogOnly)
        };
        if p.kind != PolicyType::RequireApproval || !enforced(p) {
            continue;
        }
        let alone: Vec<&str> = manifest
            .actions
            .iter()
            .map(|a| a.action_id.as_str())
            .filter(|id| pattern::matches_any(&p.actions, id))
            .filter(|id| {
                !manifest.policies.iter().any(|q| {
                    q.kind == PolicyType::Allow
                        && enforced(q)
                        && pattern::matches_any(&q.actions, id)
                })
            })
            .collect();
        if !alone.is_empty() {
            diags.push(Diagnostic::warning(
                "approval_grants_alone",
                &o.file,
                at(o, "/actions"),
                format!(
                    "no allow policy matches {}, so require_approval `{}` grants {} on its own, \
                     to every agent its conditions admit: add an allow (the approval then gates \
                     what it grants) or give the approval the conditions you mean",
                    alone
                        .iter()
                        .map(|a| format!("`{a}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    p.policy_id,
                    if alone.len() == 1 { "it" } else { "them" },
                ),
            ));
        }
    }

    // Every action is governed by at least one policy (else default deny always refuses it).
    for (a, o) in manifest.actions.iter().zip(action_origins) {
        // Rate limits and budgets never grant or refuse on their own, so they do not count.
        if !manifest.policies.iter().any(|p| {
            matches!(
                p.kind,
                PolicyType::Deny | PolicyType::RequireApproval | PolicyType::Allow
            ) && pattern::matches_any(&p.actions, &a.action_id)
        }) {
            diags.push(Diagnostic::warning(
                "ungoverned_action",
                &o.file,
                at(o, "/action_id"),
                format!(
                    "no allow, require_approval or deny policy matches action `{}`, so default deny \
                     always refuses it: add an allow (or an explicit deny) policy",
                    a.action_id
                ),
            ));
        }
        for key in ["parameters_schema", "returns_schema"] {
            let schema = match key {
                "parameters_schema" => Some(&a.parameters_schema),
                _ => a.returns_schema.as_ref(),
            };
            if let Some(schema) = schema
                && let Err(e) = jsonschema::validator_for(schema)
            {
                diags.push(Diagnostic::error(
                    "invalid_json_schema",
                    &o.file,
                    at(o, &format!("/{key}{}", e.instance_path().as_str())),
                    format!(
                        "`{key}` of action `{}` is not a valid JSON Schema: {e}",
                        a.action_id
                    ),
                ));
            }
        }
    }

    // Context packs.
    let mut referenced = BTreeSet::new();
    for (i, pack) in manifest.context_packs.iter().enumerate() {
        for (j, f) in pack.files.iter().enumerate() {
            let pointer = format!("/context_packs/{i}/files/{j}");
            referenced.insert(f.as_str());
            match files.get(f) {
                None => diags.push(Diagnostic::error(
                    "missing_file",
                    m,
                    pointer,
                    format!(
                        "context pack `{}` names `{f}`, which is not in the atlas: add the file or \
                         remove it from `files`",
                        pack.pack_id
                    ),
                )),
                Some(bytes) if std::str::from_utf8(bytes).is_err() => {
                    diags.push(Diagnostic::error(
                        "not_utf8",
                        m,
                        pointer,
                        format!("context file `{f}` is not UTF-8 text: context documents are text"),
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(c) = &pack.conditions {
            conditions_checks(
                c,
                m,
                &format!("/context_packs/{i}/conditions"),
                &capability_ids,
                diags,
            );
        }
    }
    for path in files.keys().filter(|p| p.starts_with("context/")) {
        if !referenced.contains(path.as_str()) {
            diags.push(Diagnostic::warning(
                "unused_context",
                path,
                "",
                "no context pack names this document, so agents never receive it: add it to a pack",
            ));
        }
    }

    // Dependencies: ranges parse; no self-dependency.
    for (id, range) in &manifest.dependencies {
        let pointer = push_pointer("/dependencies", id);
        if id == &manifest.atlas_id {
            diags.push(Diagnostic::error(
                "self_dependency",
                m,
                pointer,
                "an atlas cannot depend on itself",
            ));
        } else if let Err(e) = semver::VersionReq::parse(range) {
            diags.push(Diagnostic::error(
                "invalid_range",
                m,
                pointer,
                format!("`{range}` is not a semver range (e.g. `^1.2`, `>=1.0, <2.0`): {e}"),
            ));
        }
    }
}

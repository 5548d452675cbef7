//! The skeleton atlas `cra atlas init` writes: the smallest atlas that passes
//! `cra atlas check --strict` and shows every part of the layout (a manifest with a capability
//! and a context pack, an action in `actions/`, policies in `policies/`, a context document).

use std::collections::BTreeMap;

use serde_json::json;

use crate::fmt::{Kind, format_value};

/// The §5.4.1 atlas id regex.
pub const ATLAS_ID_REGEX: &str = r"^[a-z][a-z0-9]*(\.[a-z][a-z0-9-]*)+$";

/// Why a skeleton could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScaffoldError {
    /// The id does not match §5.4.1.
    #[error(
        "`{0}` is not an atlas id: use reverse-domain notation matching {ATLAS_ID_REGEX}, e.g. com.example.support"
    )]
    BadId(String),
}

/// True when `id` matches the §5.4.1 regex.
pub fn is_atlas_id(id: &str) -> bool {
    let mut segments = id.split('.');
    let first_ok = segments.next().is_some_and(|s| {
        s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    let mut rest = 0;
    let rest_ok = segments.all(|s| {
        rest += 1;
        s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    });
    first_ok && rest_ok && rest > 0
}

/// The skeleton's files, relative path to text.
pub fn skeleton(atlas_id: &str) -> Result<BTreeMap<String, String>, ScaffoldError> {
    if !is_atlas_id(atlas_id) {
        return Err(ScaffoldError::BadId(atlas_id.to_owned()));
    }
    let last = atlas_id.rsplit('.').next().unwrap_or(atlas_id);
    let name: String = last
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(" ");
    let manifest = json!({
        "atlas_version": "1.0",
        "atlas_id": atlas_id,
        "version": "0.1.0",
        "name": name,
        "description": format!("What agents working on {name} may do, and what they need to know."),
        "authors": [],
        "license": "Apache-2.0",
        "domains": [last],
        "capabilities": [{
            "capability_id": "example",
            "name": "Example",
            "description": "Replace with a group of related actions.",
            "actions": ["example.echo"]
        }],
        "context_packs": [{
            "pack_id": "overview",
            "name": "Overview",
            "files": ["context/overview.md"],
            "priority": 100
        }]
    });
    let action = json!([{
        "action_id": "example.echo",
        "name": "Echo",
        "description": "Returns its parameters unchanged. Replace with a real action.",
        "risk_tier": "low",
        "idempotent": true,
        "executor": "builtin:echo",
        "parameters_schema": {
            "type": "object",
            "required": ["message"],
            "properties": { "message": { "type": "string", "maxLength": 1000 } },
            "additionalProperties": false
        }
    }]);
    let policies = json!([
        {
            "policy_id": "allow-example",
            "type": "allow",
            "description": "Agents may run the example actions.",
            "actions": ["example.*"]
        }
    ]);
    let overview = format!(
        "# {name}\n\nThis document is given to every agent using the `{atlas_id}` atlas. Explain the \
         domain, the systems the actions reach, and the rules an agent must follow.\n"
    );
    let mut files = BTreeMap::new();
    files.insert(
        "atlas.json".to_owned(),
        format_value(&manifest, Kind::Manifest),
    );
    files.insert(
        "actions/example.json".to_owned(),
        format_value(&action, Kind::Action),
    );
    files.insert(
        "policies/allow.json".to_owned(),
        format_value(&policies, Kind::Policy),
    );
    files.insert("context/overview.md".to_owned(), overview);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(is_atlas_id("com.example.customer-support"));
        assert!(is_atlas_id("dev.cra.github-ops"));
        assert!(!is_atlas_id("example"));
        assert!(!is_atlas_id("Com.example"));
        assert!(!is_atlas_id("com.-x"));
        assert!(!is_atlas_id("com-x.y"));
        assert!(!is_atlas_id("com..y"));
        assert!(skeleton("nope").is_err());
    }

    #[test]
    fn skeleton_is_a_valid_atlas_without_warnings() {
        let files = skeleton("com.example.new-thing").unwrap();
        let files = files
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        let analysis = crate::validate::analyse(std::path::Path::new("mem"), files);
        assert_eq!(analysis.diagnostics, vec![]);
        let atlas = analysis.atlas.unwrap();
        assert_eq!(atlas.manifest.name, "New Thing");
    }
}

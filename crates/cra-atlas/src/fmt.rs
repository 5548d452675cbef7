//! Canonical formatting of atlas JSON files (`cra atlas fmt`).
//!
//! The canonical form (see `specs/atlas.md`, "Formatting"):
//! * 2-space indentation, `": "` after keys, one member or element per line, a final newline;
//! * an array whose elements are all scalars is written on one line when that line stays within
//!   [`INLINE_WIDTH`] characters (`"actions": ["ticket.lookup", "ticket.search"]`);
//! * empty objects and arrays are `{}` and `[]`;
//! * members of the objects the atlas format defines come in a fixed order ([`key_rank`]), the
//!   most identifying first (`atlas_version`, `atlas_id`, `version`, `name`, ...; `policy_id`,
//!   `type`, ...; `action_id`, `name`, ...); any other member follows, in code-point order;
//! * everything else (JSON Schemas inside actions, policy parameters, `x-*` values): members in
//!   code-point order;
//! * strings and numbers are written as `serde_json` writes them (numbers keep their exact text).
//!
//! Formatting is idempotent and never changes the JSON value of a document.

use serde_json::Value;

/// Longest line for an inline scalar array, counted from the start of the value.
pub const INLINE_WIDTH: usize = 80;

/// Which atlas object a value is, to pick its member order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `atlas.json`.
    Manifest,
    /// One capability.
    Capability,
    /// One context pack.
    ContextPack,
    /// One policy.
    Policy,
    /// One action.
    Action,
    /// A conditions object.
    Conditions,
    /// A time window.
    TimeWindow,
    /// One test of a `parameters` condition.
    ParameterTest,
    /// Anything else.
    Other,
}

/// The fixed member order of each atlas object; `None` = after the listed members, by name.
pub fn key_rank(kind: Kind, key: &str) -> Option<usize> {
    let order: &[&str] = match kind {
        Kind::Manifest => &[
            "atlas_version",
            "atlas_id",
            "version",
            "name",
            "description",
            "authors",
            "license",
            "homepage",
            "repository",
            "domains",
            "dependencies",
            "enforcement",
            "capabilities",
            "context_packs",
            "policies",
            "actions",
        ],
        Kind::Capability => &[
            "capability_id",
            "name",
            "description",
            "actions",
            "context_packs",
        ],
        Kind::ContextPack => &[
            "pack_id",
            "name",
            "description",
            "files",
            "priority",
            "conditions",
        ],
        Kind::Policy => &[
            "policy_id",
            "type",
            "description",
            "actions",
            "priority",
            "enforcement",
            "conditions",
            "parameters",
        ],
        Kind::Action => &[
            "action_id",
            "name",
            "description",
            "risk_tier",
            "idempotent",
            "executor",
            "parameters_schema",
            "returns_schema",
        ],
        Kind::Conditions => &[
            "risk_tiers",
            "agents",
            "capabilities",
            "context_matches",
            "time_window",
            "parameters",
            "history",
        ],
        Kind::TimeWindow => &["start_hour", "end_hour", "weekdays"],
        Kind::ParameterTest => &crate::model::PARAMETER_TEST_MEMBERS,
        Kind::Other => &[],
    };
    order.iter().position(|k| *k == key)
}

fn child_kind(parent: Kind, key: &str) -> Kind {
    match (parent, key) {
        (Kind::Manifest, "capabilities") => Kind::Capability,
        (Kind::Manifest, "context_packs") => Kind::ContextPack,
        (Kind::Manifest, "policies") => Kind::Policy,
        (Kind::Manifest, "actions") => Kind::Action,
        (Kind::ContextPack | Kind::Policy, "conditions") => Kind::Conditions,
        (Kind::Conditions, "time_window") => Kind::TimeWindow,
        (Kind::Conditions, "parameters") => Kind::ParameterTest,
        _ => Kind::Other,
    }
}

/// The canonical text of `value`, an object of kind `kind` (or an array of them).
pub fn format_value(value: &Value, kind: Kind) -> String {
    let mut out = String::new();
    write(value, kind, 0, &mut out);
    out.push('\n');
    out
}

/// The kind of the top-level value of an atlas file, by its path (`None`: not formatted).
pub fn kind_of_file(path: &str) -> Option<Kind> {
    if path == crate::load::MANIFEST_FILE {
        return Some(Kind::Manifest);
    }
    let (dir, name) = path.split_once('/')?;
    if name.contains('/') || !name.ends_with(".json") {
        return None;
    }
    match dir {
        "policies" => Some(Kind::Policy),
        "actions" => Some(Kind::Action),
        _ => None,
    }
}

fn scalar(v: &Value) -> String {
    // Serialising a scalar cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

fn write(value: &Value, kind: Kind, indent: usize, out: &mut String) {
    let pad = |n: usize| "  ".repeat(n);
    match value {
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| {
                let ra = key_rank(kind, a).unwrap_or(usize::MAX);
                let rb = key_rank(kind, b).unwrap_or(usize::MAX);
                ra.cmp(&rb).then_with(|| a.cmp(b))
            });
            out.push_str("{\n");
            for (i, key) in keys.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                out.push_str(&scalar(&Value::String((*key).clone())));
                out.push_str(": ");
                write(&map[*key], child_kind(kind, key), indent + 1, out);
                if i + 1 < keys.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push('}');
        }
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Array(items) => {
            if items.iter().all(|v| !v.is_object() && !v.is_array()) {
                let inline = format!(
                    "[{}]",
                    items.iter().map(scalar).collect::<Vec<_>>().join(", ")
                );
                if inline.len() <= INLINE_WIDTH {
                    out.push_str(&inline);
                    return;
                }
            }
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                write(item, kind, indent + 1, out);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push(']');
        }
        other => out.push_str(&scalar(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_known_members_and_sorts_the_rest() {
        let v: Value = serde_json::from_str(
            r#"{"type":"deny","x-owner":"sec","actions":["a.b"],"policy_id":"p","parameters":{"reason":"r","a":1.50}}"#,
        )
        .unwrap();
        let text = format_value(&v, Kind::Policy);
        assert_eq!(
            text,
            "{\n  \"policy_id\": \"p\",\n  \"type\": \"deny\",\n  \"actions\": [\"a.b\"],\n  \"parameters\": {\n    \"a\": 1.50,\n    \"reason\": \"r\"\n  },\n  \"x-owner\": \"sec\"\n}\n"
        );
        let again: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(again, v);
        assert_eq!(format_value(&again, Kind::Policy), text);
    }

    #[test]
    fn long_scalar_arrays_break() {
        let long: Vec<String> = (0..20).map(|i| format!("item{i}")).collect();
        let v = serde_json::json!({ "domains": long, "authors": [] });
        let text = format_value(&v, Kind::Manifest);
        assert!(
            text.contains("\"authors\": [],\n  \"domains\": [\n    \"item0\",\n"),
            "{text}"
        );
        assert_eq!(kind_of_file("policies/a.json"), Some(Kind::Policy));
        assert_eq!(kind_of_file("policies/sub/a.json"), None);
        assert_eq!(kind_of_file("context/a.json"), None);
    }
}

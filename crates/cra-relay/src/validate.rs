//! Validation of a context package against §6 (every field), collecting one [`FieldError`] with a
//! JSON pointer per problem. Unknown fields are allowed and kept (§6, §12); the hash is computed
//! over what passes.

use cra_wire::FieldError;
use cra_wire::clock::parse_rfc3339;
use serde_json::{Map, Value};

use crate::model::{ActorType, Package, RELAY_VERSION, Status};

/// The §6.3 package types (others must start with `x-`).
pub const PACKAGE_TYPES: [&str; 8] = [
    "standard",
    "milestone",
    "decision",
    "handoff",
    "auto_deposit",
    "analysis",
    "question",
    "orchestrator_report",
];

/// Longest accepted identifier (package_id, project_id, session ids), in bytes.
pub const MAX_ID_LEN: usize = 256;

/// Checks `value` against §6 and returns it as a [`Package`], or every problem found.
pub fn validate_package(value: &Value) -> Result<Package, Vec<FieldError>> {
    let Some(obj) = value.as_object() else {
        return Err(vec![FieldError::new(
            "",
            "a context package must be a JSON object",
        )]);
    };
    let mut errors = Vec::new();
    let mut v = Checker {
        obj,
        errors: &mut errors,
    };

    v.id("package_id");
    v.id("project_id");
    match obj.get("relay_version") {
        Some(Value::String(s)) if s == RELAY_VERSION => {}
        Some(_) => v.err("/relay_version", "relay_version must be the string \"0.1\""),
        None => v.missing("relay_version"),
    }
    match obj.get("title") {
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if n == 0 || n > 200 {
                v.err(
                    "/title",
                    format!("title must be 1 to 200 characters, got {n}"),
                );
            }
        }
        Some(_) => v.err("/title", "title must be a string"),
        None => v.missing("title"),
    }
    match obj.get("status") {
        Some(Value::String(s)) if Status::parse(s).is_some() => {}
        Some(_) => v.err(
            "/status",
            "status must be one of draft, complete, awaiting_review, revision_requested",
        ),
        None => v.missing("status"),
    }
    match obj.get("package_type") {
        Some(Value::String(s)) if PACKAGE_TYPES.contains(&s.as_str()) || is_extension(s) => {}
        Some(_) => v.err(
            "/package_type",
            "package_type must be one of standard, milestone, decision, handoff, auto_deposit, \
             analysis, question, orchestrator_report, or an x-* extension type",
        ),
        None => v.missing("package_type"),
    }
    v.enum_field("review_type", &["none", "human", "agent"], false, true);
    match obj.get("created_at") {
        Some(Value::String(s)) => match parse_rfc3339(s) {
            Err(e) => v.err("/created_at", e.to_string()),
            // An instant with another offset names the moment, but a package states it in UTC
            // (`Z` or `+00:00`): readers compare these strings. (The parser reads every offset
            // into UTC, so the text is what is checked.)
            Ok(_) if !(s.ends_with(['Z', 'z']) || s.ends_with("+00:00")) => v.err(
                "/created_at",
                format!("created_at must be stated in UTC, ending in `Z`: `{s}` is not"),
            ),
            Ok(_) => {}
        },
        Some(_) => v.err(
            "/created_at",
            "created_at must be an RFC 3339 UTC timestamp string",
        ),
        None => v.missing("created_at"),
    }
    match obj.get("created_by") {
        Some(Value::Object(cb)) => {
            match cb.get("id") {
                Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID_LEN => {}
                Some(_) => v.err(
                    "/created_by/id",
                    "created_by.id must be a non-empty string of at most 256 bytes",
                ),
                None => v.err("/created_by/id", "created_by.id is required"),
            }
            match cb.get("type") {
                Some(Value::String(s)) if ActorType::parse(s).is_some() => {}
                Some(_) => v.err(
                    "/created_by/type",
                    "created_by.type must be one of human, agent, script",
                ),
                None => v.err("/created_by/type", "created_by.type is required"),
            }
            match cb.get("session_id") {
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                Some(_) => v.err(
                    "/created_by/session_id",
                    "created_by.session_id must be a string or null",
                ),
            }
        }
        Some(_) => v.err(
            "/created_by",
            "created_by must be an object {id, type, session_id?}",
        ),
        None => v.missing("created_by"),
    }

    // §6.4 optional fields.
    for key in ["description", "handoff_note", "content_md"] {
        v.string(key, false);
    }
    for key in [
        "parent_package_id",
        "topic",
        "artifact_type",
        "storage_path",
    ] {
        v.string(key, true);
    }
    for key in ["tags", "decisions_made", "open_questions"] {
        v.string_list(key);
    }
    v.enum_field("estimated_next_actor", &["human", "agent"], true, false);
    match obj.get("significance") {
        None => {}
        Some(Value::Number(n)) if n.as_i64().is_some_and(|i| (1..=10).contains(&i)) => {}
        Some(_) => v.err(
            "/significance",
            "significance must be an integer from 1 to 10",
        ),
    }
    match obj.get("deliverables") {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let base = format!("/deliverables/{i}");
                let Some(d) = item.as_object() else {
                    v.err(
                        &base,
                        "a deliverable must be an object {path, type, hash?, size_bytes?}",
                    );
                    continue;
                };
                for key in ["path", "type"] {
                    match d.get(key) {
                        Some(Value::String(s)) if !s.is_empty() => {}
                        Some(_) => v.err(
                            &format!("{base}/{key}"),
                            format!("deliverable {key} must be a non-empty string"),
                        ),
                        None => v.err(
                            &format!("{base}/{key}"),
                            format!("deliverable {key} is required"),
                        ),
                    }
                }
                match d.get("hash") {
                    None | Some(Value::Null) | Some(Value::String(_)) => {}
                    Some(_) => v.err(
                        &format!("{base}/hash"),
                        "deliverable hash must be a string such as sha256:<hex>",
                    ),
                }
                match d.get("size_bytes") {
                    None | Some(Value::Null) => {}
                    Some(Value::Number(n)) if n.as_u64().is_some() => {}
                    Some(_) => v.err(
                        &format!("{base}/size_bytes"),
                        "deliverable size_bytes must be a non-negative integer",
                    ),
                }
            }
        }
        Some(_) => v.err("/deliverables", "deliverables must be an array of objects"),
    }
    match obj.get("content_hash") {
        None | Some(Value::String(_)) => {}
        Some(_) => v.err(
            "/content_hash",
            "content_hash, when sent back, must be a string (it is recomputed, not trusted)",
        ),
    }
    // Numbers anywhere must have a canonical form, or the package cannot be hashed.
    if let Err(e) = cra_wire::canonical::relay_canonical(value) {
        let cra_wire::canonical::CanonicalError::NumberOutOfRange(_, ptr) = &e;
        v.err(ptr, e.to_string());
    }

    if errors.is_empty() {
        Ok(Package::from_validated(obj.clone()))
    } else {
        Err(errors)
    }
}

/// True for names in the `x-*` extension namespace.
pub fn is_extension(s: &str) -> bool {
    s.starts_with("x-") && s.len() > 2
}

/// Escapes a key for use in a JSON pointer (RFC 6901).
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

struct Checker<'a> {
    obj: &'a Map<String, Value>,
    errors: &'a mut Vec<FieldError>,
}

impl Checker<'_> {
    fn err(&mut self, pointer: &str, message: impl Into<String>) {
        self.errors.push(FieldError::new(pointer, message));
    }

    fn missing(&mut self, key: &str) {
        self.err(
            &format!("/{}", pointer_token(key)),
            format!("{key} is required (§6.1)"),
        );
    }

    fn id(&mut self, key: &str) {
        match self.obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID_LEN => {}
            Some(_) => self.err(
                &format!("/{key}"),
                format!("{key} must be a non-empty string of at most {MAX_ID_LEN} bytes"),
            ),
            None => self.missing(key),
        }
    }

    fn string(&mut self, key: &str, nullable: bool) {
        match self.obj.get(key) {
            None | Some(Value::String(_)) => {}
            Some(Value::Null) if nullable => {}
            Some(_) => self.err(
                &format!("/{key}"),
                if nullable {
                    format!("{key} must be a string or null")
                } else {
                    format!("{key} must be a string")
                },
            ),
        }
    }

    fn string_list(&mut self, key: &str) {
        match self.obj.get(key) {
            None => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if !item.is_string() {
                        self.err(
                            &format!("/{key}/{i}"),
                            format!("every item of {key} must be a string"),
                        );
                    }
                }
            }
            Some(_) => self.err(
                &format!("/{key}"),
                format!("{key} must be an array of strings"),
            ),
        }
    }

    fn enum_field(&mut self, key: &str, allowed: &[&str], nullable: bool, required: bool) {
        match self.obj.get(key) {
            None if required => self.missing(key),
            None => {}
            Some(Value::Null) if nullable => {}
            Some(Value::String(s)) if allowed.contains(&s.as_str()) => {}
            Some(_) => self.err(
                &format!("/{key}"),
                format!(
                    "{key} must be one of {}{}",
                    allowed.join(", "),
                    if nullable { ", or null" } else { "" }
                ),
            ),
        }
    }
}

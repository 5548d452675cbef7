//! The atlas `cra atlas import-mcp` writes for an MCP server cra did not write (`specs/mcp.md`,
//! "`cra mcp proxy` and `cra atlas import-mcp`"): one action per upstream tool, executed by
//! `mcp:<server>/<tool name>`, an allow policy for the tools annotated read-only, and for the
//! others a deny policy (or, when asked, an approval for each call).
//! Pure: the caller lists the tools; this makes the files.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::fmt::{Kind, format_value};

/// One tool as the upstream lists it (the parts the atlas needs).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTool {
    /// The upstream's name for it.
    pub name: String,
    /// Its title, when it has one.
    pub title: Option<String>,
    /// Its description.
    pub description: Option<String>,
    /// Its `inputSchema`.
    pub input_schema: Value,
    /// `annotations.readOnlyHint`.
    pub read_only: bool,
    /// `annotations.destructiveHint` (MCP's default when absent is true).
    pub destructive: bool,
    /// `annotations.idempotentHint`.
    pub idempotent: bool,
}

/// What the atlas decides for tools that are not read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Writes {
    /// Denied by an explicit deny policy: the default.
    #[default]
    Deny,
    /// Allowed once an operator approves each call.
    Approve,
}

/// Why no atlas was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The server name is not dotted lowercase segments.
    #[error(
        "`{0}` cannot start action ids: name the server with lowercase letters and digits, starting with a letter (e.g. fs, github)"
    )]
    BadServer(String),
    /// The atlas id does not match §5.4.1.
    #[error("`{0}` is not an atlas id: use reverse-domain notation, e.g. mcp.fs")]
    BadAtlasId(String),
    /// A tool name holds no letter or digit.
    #[error("the tool `{0}` has no letter or digit to make an action id from; rename it upstream")]
    Unnameable(String),
    /// Two tools make the same action id.
    #[error(
        "the tools `{0}` and `{1}` both become the action id `{2}`; an action id must name one tool"
    )]
    Collision(String, String, String),
    /// The upstream lists no tool.
    #[error("the upstream lists no tools; there is nothing to govern")]
    NoTools,
}

/// The action-id segments of a tool name: lowercased, each run of characters outside
/// `[a-z0-9]` one `.`, no `.` at either end, and a `t` before a segment starting with a digit.
/// `None` when nothing is left.
pub fn tool_segments(tool: &str) -> Option<String> {
    let lowered = tool.to_lowercase();
    let mut segments: Vec<String> = Vec::new();
    let mut current = String::new();
    for c in lowered.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            current.push(c);
        } else if !current.is_empty() {
            segments.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        segments.push(current);
    }
    if segments.is_empty() {
        return None;
    }
    let fixed: Vec<String> = segments
        .into_iter()
        .map(|s| {
            if s.starts_with(|c: char| c.is_ascii_digit()) {
                format!("t{s}")
            } else {
                s
            }
        })
        .collect();
    Some(fixed.join("."))
}

/// True when `server` is dotted segments of `[a-z][a-z0-9]*`.
fn is_server_name(server: &str) -> bool {
    server.split('.').all(|s| {
        s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    })
}

/// The action id of `tool` on `server`.
///
/// # Errors
/// [`ImportError::BadServer`] or [`ImportError::Unnameable`].
pub fn action_id_for(server: &str, tool: &str) -> Result<String, ImportError> {
    if !is_server_name(server) {
        return Err(ImportError::BadServer(server.to_owned()));
    }
    let segments = tool_segments(tool).ok_or_else(|| ImportError::Unnameable(tool.to_owned()))?;
    Ok(format!("{server}.{segments}"))
}

/// The executor reference of `tool` on `server`.
pub fn executor_ref(server: &str, tool: &str) -> String {
    format!("{EXECUTOR_PREFIX}{server}/{tool}")
}

/// What every `mcp` executor reference starts with.
pub const EXECUTOR_PREFIX: &str = "mcp:";

/// The server and tool an executor reference names (the inverse of [`executor_ref`]); `None`
/// for a reference that is not `mcp:<server>/<tool>`.
pub fn parse_executor_ref(executor: &str) -> Option<(&str, &str)> {
    executor.strip_prefix(EXECUTOR_PREFIX)?.split_once('/')
}

/// The atlas files for `tools` of `server`, relative path to text.
///
/// # Errors
/// A bad server name or atlas id, an unnameable tool, two tools with one action id, no tools.
pub fn atlas_files(
    server: &str,
    atlas_id: &str,
    tools: &[UpstreamTool],
    writes: Writes,
) -> Result<BTreeMap<String, String>, ImportError> {
    if !crate::scaffold::is_atlas_id(atlas_id) {
        return Err(ImportError::BadAtlasId(atlas_id.to_owned()));
    }
    if tools.is_empty() {
        return Err(ImportError::NoTools);
    }
    let mut ids: BTreeMap<String, &str> = BTreeMap::new();
    let mut actions = Vec::new();
    for tool in tools {
        let id = action_id_for(server, &tool.name)?;
        if let Some(other) = ids.insert(id.clone(), &tool.name) {
            return Err(ImportError::Collision(
                other.to_owned(),
                tool.name.clone(),
                id,
            ));
        }
        actions.push(action_of(server, &id, tool));
    }
    let reads: Vec<&String> = tools
        .iter()
        .filter(|t| t.read_only)
        .filter_map(|t| ids.iter().find(|(_, n)| **n == t.name).map(|(id, _)| id))
        .collect();
    let others: Vec<&String> = ids.keys().filter(|id| !reads.contains(id)).collect();
    let manifest = json!({
        "atlas_version": "1.0",
        "atlas_id": atlas_id,
        "version": "0.1.0",
        "name": format!("MCP server {server}"),
        "description": format!("The tools of the MCP server `{server}`, imported by `cra atlas import-mcp`; edit the policies to say who may call which."),
        "capabilities": [{
            "capability_id": server.replace('.', "-"),
            "name": format!("{server} tools"),
            "description": format!("Every tool of the MCP server `{server}`."),
            "actions": ids.keys().collect::<Vec<_>>(),
        }],
    });
    let mut policies = Vec::new();
    if !reads.is_empty() {
        policies.push(json!({
            "policy_id": "allow-read-only",
            "type": "allow",
            "description": "Tools the server annotates read-only. Every other tool is denied unless a policy below allows it.",
            "actions": reads,
        }));
    }
    if writes == Writes::Deny && !others.is_empty() {
        policies.push(json!({
            "policy_id": "deny-writes",
            "type": "deny",
            "description": "Tools that are not read-only. To let an operator approve each call instead, import again with --writes approve.",
            "actions": others,
            "parameters": {"reason": format!("The MCP server `{server}`'s tools that change something are not for agents here.")},
        }));
    }
    if writes == Writes::Approve && !others.is_empty() {
        policies.push(json!({
            "policy_id": "allow-writes",
            "type": "allow",
            "description": "Tools that change something, once approved (next policy).",
            "actions": others,
        }));
        policies.push(json!({
            "policy_id": "approve-writes",
            "type": "require_approval",
            "description": "An operator approves each call of a tool that changes something.",
            "actions": others,
        }));
    }
    let mut files = BTreeMap::new();
    files.insert(
        "atlas.json".to_owned(),
        format_value(&manifest, Kind::Manifest),
    );
    files.insert(
        "actions/tools.json".to_owned(),
        format_value(&Value::Array(actions), Kind::Action),
    );
    files.insert(
        "policies/policies.json".to_owned(),
        format_value(&Value::Array(policies), Kind::Policy),
    );
    Ok(files)
}

/// The action of one tool.
fn action_of(server: &str, id: &str, tool: &UpstreamTool) -> Value {
    let risk = if tool.read_only {
        "low"
    } else if tool.destructive {
        "high"
    } else {
        "medium"
    };
    let mut schema = tool.input_schema.clone();
    if let Value::Object(m) = &mut schema {
        // The atlas's schemas are self-contained: a `$schema` naming a draft is the upstream's.
        m.remove("$schema");
    }
    json!({
        "action_id": id,
        "name": tool.title.clone().unwrap_or_else(|| tool.name.clone()),
        "description": tool.description.clone().unwrap_or_default(),
        "risk_tier": risk,
        "idempotent": tool.read_only || tool.idempotent,
        "executor": executor_ref(server, &tool.name),
        "parameters_schema": schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, read_only: bool) -> UpstreamTool {
        UpstreamTool {
            name: name.to_owned(),
            title: None,
            description: Some(format!("The {name} tool.")),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            read_only,
            destructive: !read_only,
            idempotent: false,
        }
    }

    #[test]
    fn tool_names_become_action_ids_by_the_written_rule() {
        // The table in specs/mcp.md.
        assert_eq!(
            action_id_for("fs", "read_text_file").unwrap(),
            "fs.read.text.file"
        );
        assert_eq!(action_id_for("fs", "Read-File").unwrap(), "fs.read.file");
        assert_eq!(
            action_id_for("auth", "2fa_check").unwrap(),
            "auth.t2fa.check"
        );
        assert_eq!(action_id_for("fs", "__x__").unwrap(), "fs.x");
        assert_eq!(
            parse_executor_ref(&executor_ref("fs", "read/file")),
            Some(("fs", "read/file"))
        );
        assert_eq!(parse_executor_ref("http:fs"), None);
        assert_eq!(
            action_id_for("fs", "--"),
            Err(ImportError::Unnameable("--".into()))
        );
        assert!(matches!(
            action_id_for("Fs", "read"),
            Err(ImportError::BadServer(_))
        ));
    }

    #[test]
    fn two_tools_with_one_action_id_are_refused_naming_both() {
        let e = atlas_files(
            "fs",
            "mcp.fs",
            &[tool("read_file", true), tool("read-file", true)],
            Writes::Deny,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ImportError::Collision(
                "read_file".into(),
                "read-file".into(),
                "fs.read.file".into()
            )
        );
    }

    #[test]
    fn the_imported_atlas_is_valid_and_allows_only_reads_by_default() {
        let tools = [tool("read_text_file", true), tool("write_file", false)];
        for writes in [Writes::Deny, Writes::Approve] {
            let files = atlas_files("fs", "mcp.fs", &tools, writes).unwrap();
            let files = files
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            let analysis = crate::validate::analyse(std::path::Path::new("mem"), files);
            assert_eq!(analysis.diagnostics, vec![], "{writes:?}");
            let atlas = analysis.atlas.unwrap();
            let write = atlas.action("fs.write.file").unwrap();
            assert_eq!(write.executor.as_deref(), Some("mcp:fs/write_file"));
            let allowing: Vec<&str> = atlas
                .manifest
                .policies
                .iter()
                .map(|p| p.policy_id.as_str())
                .collect();
            match writes {
                Writes::Deny => assert_eq!(allowing, ["allow-read-only", "deny-writes"]),
                Writes::Approve => assert_eq!(
                    allowing,
                    ["allow-read-only", "allow-writes", "approve-writes"]
                ),
            }
        }
    }
}

//! Tool descriptors for model providers, generated from an atlas's actions.
//!
//! Targets and files (under the atlas's `adapters/` folder):
//!
//! | target             | file                             | one tool                                                 |
//! |--------------------|----------------------------------|----------------------------------------------------------|
//! | `openai-chat`      | `adapters/openai-chat.json`      | `{type: "function", function: {name, description, parameters}}` |
//! | `openai-responses` | `adapters/openai-responses.json` | `{type: "function", name, description, parameters, strict: false}` |
//! | `anthropic`        | `adapters/anthropic.json`        | `{name, description, input_schema}`                       |
//! | `mcp`              | `adapters/mcp.json`              | `{name, title, description, inputSchema, outputSchema?, annotations}` |
//!
//! Each file is `{"x-cra": {...}, "tools": [...]}`: `tools` is exactly what the provider's API
//! takes (the `tools` request parameter, or the `tools` of an MCP `tools/list` result), and
//! `x-cra` records the atlas id and version, the target, and the name mapping.
//!
//! Tool names: providers accept `^[a-zA-Z0-9_-]{1,64}$`, so dotted action ids are mapped by
//! replacing every `.` with `_` (`ticket.lookup` -> `ticket_lookup`). The mapping is reversible
//! because an action id matches `^[a-z][a-z0-9]*(\.[a-z][a-z0-9]*)+$` and so never contains `_`:
//! [`action_id_of`] replaces every `_` back with `.`. The file also carries the mapping explicitly
//! (`x-cra.names`: tool name -> action id) so consumers need not know the rule. The same mapping
//! is used for MCP (which would accept dots) so that one agent sees one name per action whatever
//! its provider.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::fmt::{Kind, format_value};
use crate::load::LoadedAtlas;
use crate::model::{Action, RiskTier};

/// Longest tool name the providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// One provider format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// OpenAI Chat Completions `tools`.
    OpenAiChat,
    /// OpenAI Responses API `tools`.
    OpenAiResponses,
    /// Anthropic Messages API `tools`.
    Anthropic,
    /// MCP `tools/list` result `tools`.
    Mcp,
}

impl Target {
    /// Every target, in file order.
    pub const ALL: [Target; 4] = [
        Target::OpenAiChat,
        Target::OpenAiResponses,
        Target::Anthropic,
        Target::Mcp,
    ];

    /// The name used on the command line and in `x-cra.target`.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::OpenAiChat => "openai-chat",
            Target::OpenAiResponses => "openai-responses",
            Target::Anthropic => "anthropic",
            Target::Mcp => "mcp",
        }
    }

    /// Parses a command-line name.
    pub fn parse(text: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// The file, relative to the atlas root.
    pub fn file(self) -> String {
        format!("adapters/{}.json", self.as_str())
    }
}

/// Why adapters could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// The mapped tool name is longer than providers accept.
    #[error(
        "action `{action_id}` maps to tool name `{name}` of {len} characters, more than the \
         {MAX_TOOL_NAME} providers accept: shorten the action id"
    )]
    NameTooLong {
        /// The action.
        action_id: String,
        /// The mapped name.
        name: String,
        /// Its length.
        len: usize,
    },
}

/// The tool name of an action id (module documentation).
pub fn tool_name(action_id: &str) -> String {
    action_id.replace('.', "_")
}

/// The action id of a tool name (the inverse of [`tool_name`]).
pub fn action_id_of(tool_name: &str) -> String {
    tool_name.replace('_', ".")
}

fn checked_name(a: &Action) -> Result<String, AdapterError> {
    let name = tool_name(&a.action_id);
    if name.len() > MAX_TOOL_NAME {
        return Err(AdapterError::NameTooLong {
            action_id: a.action_id.clone(),
            len: name.len(),
            name,
        });
    }
    Ok(name)
}

/// What an MCP tool is made of. An atlas's action (the `mcp` adapter file) and a resolution's
/// allowed action (the runtime's MCP server, `cra_runtime::mcp`) both have these, so both make
/// their tools with [`mcp_tool`].
#[derive(Debug, Clone, Copy)]
pub struct McpToolSource<'a> {
    /// The action's display name (`title`).
    pub name: &'a str,
    /// Its description (the name when empty).
    pub description: &'a str,
    /// Its parameters schema (`inputSchema`).
    pub parameters_schema: &'a Value,
    /// `high` and `critical` are `destructiveHint`.
    pub risk_tier: RiskTier,
    /// `idempotentHint`.
    pub idempotent: bool,
    /// Whether it runs through an executor (`openWorldHint`); `None` leaves the hint out.
    pub open_world: Option<bool>,
    /// `outputSchema`, declared only when it is an object schema.
    pub output_schema: Option<&'a Value>,
}

fn description_of<'a>(name: &'a str, description: &'a str) -> &'a str {
    if description.is_empty() {
        name
    } else {
        description
    }
}

fn description(a: &Action) -> &str {
    description_of(&a.name, &a.description)
}

/// A parameters schema as a tool input schema: an object schema (`type: object` added when the
/// author left it implicit).
fn input_schema_of(parameters_schema: &Value) -> Value {
    let mut schema = parameters_schema.clone();
    if let Value::Object(map) = &mut schema {
        map.entry("type").or_insert_with(|| Value::from("object"));
    }
    schema
}

fn input_schema(a: &Action) -> Value {
    input_schema_of(&a.parameters_schema)
}

/// The MCP tool (an item of a `tools/list` result) of `source`, named `name` ([`tool_name`]).
pub fn mcp_tool(name: &str, source: &McpToolSource<'_>) -> Value {
    let mut annotations = json!({
        "title": source.name,
        "destructiveHint": matches!(source.risk_tier, RiskTier::High | RiskTier::Critical),
        "idempotentHint": source.idempotent,
    });
    if let (Some(open), Some(map)) = (source.open_world, annotations.as_object_mut()) {
        map.insert("openWorldHint".into(), Value::Bool(open));
    }
    let mut t = json!({
        "name": name,
        "title": source.name,
        "description": description_of(source.name, source.description),
        "inputSchema": input_schema_of(source.parameters_schema),
        "annotations": annotations,
    });
    if let (Some(out), Some(map)) = (
        source
            .output_schema
            .filter(|s| s.get("type").and_then(Value::as_str) == Some("object")),
        t.as_object_mut(),
    ) {
        map.insert("outputSchema".into(), out.clone());
    }
    t
}

fn tool(target: Target, a: &Action, name: String) -> Value {
    match target {
        Target::OpenAiChat => json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description(a),
                "parameters": input_schema(a),
            }
        }),
        Target::OpenAiResponses => json!({
            "type": "function",
            "name": name,
            "description": description(a),
            "parameters": input_schema(a),
            "strict": false,
        }),
        Target::Anthropic => json!({
            "name": name,
            "description": description(a),
            "input_schema": input_schema(a),
        }),
        Target::Mcp => mcp_tool(
            &name,
            &McpToolSource {
                name: &a.name,
                description: &a.description,
                parameters_schema: &a.parameters_schema,
                risk_tier: a.risk_tier,
                idempotent: a.idempotent,
                open_world: Some(a.executor.is_some()),
                output_schema: a.returns_schema.as_ref(),
            },
        ),
    }
}

/// The adapter document for one target.
pub fn generate(atlas: &LoadedAtlas, target: Target) -> Result<Value, AdapterError> {
    let mut tools = Vec::new();
    let mut names = Map::new();
    for a in &atlas.manifest.actions {
        let name = checked_name(a)?;
        names.insert(name.clone(), Value::from(a.action_id.clone()));
        tools.push(tool(target, a, name));
    }
    Ok(json!({
        "x-cra": {
            "generated_by": "cra atlas adapters",
            "atlas_id": atlas.manifest.atlas_id,
            "atlas_version": atlas.manifest.version,
            "target": target.as_str(),
            "name_mapping": "every '.' of the action id becomes '_' (action ids never contain '_')",
            "names": names,
        },
        "tools": tools,
    }))
}

/// The text of every adapter file for `targets`, by relative path.
pub fn render(
    atlas: &LoadedAtlas,
    targets: &[Target],
) -> Result<BTreeMap<String, String>, AdapterError> {
    targets
        .iter()
        .map(|t| Ok((t.file(), format_value(&generate(atlas, *t)?, Kind::Other))))
        .collect()
}

/// Adapter files of `targets` that are missing from the atlas or differ from what would be
/// generated now (relative paths).
pub fn stale(atlas: &LoadedAtlas, targets: &[Target]) -> Result<Vec<String>, AdapterError> {
    Ok(render(atlas, targets)?
        .into_iter()
        .filter(|(path, text)| atlas.files.get(path).map(Vec::as_slice) != Some(text.as_bytes()))
        .map(|(path, _)| path)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_reversibly() {
        for id in ["ticket.lookup", "a.b.c", "repo2.pr.merge"] {
            let n = tool_name(id);
            assert!(!n.contains('.'));
            assert_eq!(action_id_of(&n), id);
        }
        assert_eq!(Target::parse("mcp"), Some(Target::Mcp));
        assert_eq!(Target::parse("gemini"), None);
        assert_eq!(Target::Anthropic.file(), "adapters/anthropic.json");
    }
}

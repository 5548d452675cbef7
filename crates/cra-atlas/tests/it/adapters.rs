//! Adapters: generated tools validate against provider schemas written from the providers'
//! documentation (`schemas/providers/`), and those schemas really refuse malformed tools.

use std::path::{Path, PathBuf};

use cra_atlas::adapters::{Target, action_id_of, generate, render};
use cra_atlas::load_dir;
use serde_json::{Value, json};

use crate::fixture;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn provider_schema(target: Target) -> jsonschema::Validator {
    let path = repo().join(format!("schemas/providers/{}.schema.json", target.as_str()));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn atlases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("atlases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("atlas.json").is_file())
        .collect();
    dirs.sort();
    dirs.push(fixture("minimal"));
    dirs
}

#[test]
fn generated_tools_validate_against_each_provider_schema() {
    let dirs = atlases();
    assert!(dirs.len() >= 4);
    for dir in dirs {
        let atlas = load_dir(&dir).unwrap();
        for target in Target::ALL {
            let doc = generate(&atlas, target).unwrap();
            let tools = &doc["tools"];
            let validator = provider_schema(target);
            let errors: Vec<String> = validator
                .iter_errors(tools)
                .map(|e| format!("{} at {}", e, e.instance_path().as_str()))
                .collect();
            assert!(
                errors.is_empty(),
                "{} {}: {errors:#?}",
                dir.display(),
                target.as_str()
            );
            assert_eq!(
                tools.as_array().unwrap().len(),
                atlas.manifest.actions.len()
            );
            // The mapping in the file is the rule, and it reverses.
            let names = doc["x-cra"]["names"].as_object().unwrap();
            assert_eq!(names.len(), atlas.manifest.actions.len());
            for (tool, action) in names {
                assert_eq!(action_id_of(tool), action.as_str().unwrap());
                assert!(atlas.action(action.as_str().unwrap()).is_some());
            }
        }
    }
}

#[test]
fn provider_schemas_refuse_malformed_tools() {
    let cases = [
        (
            Target::OpenAiChat,
            json!([{"type": "function", "function": {"name": "ticket.lookup"}}]),
        ),
        (
            Target::OpenAiChat,
            json!([{"function": {"name": "ticket_lookup"}}]),
        ),
        (
            Target::OpenAiResponses,
            json!([{"type": "function", "name": "ticket_lookup"}]),
        ),
        (
            Target::OpenAiResponses,
            json!([{"type": "function", "function": {"name": "x"}, "name": "x", "parameters": null, "strict": false}]),
        ),
        (
            Target::Anthropic,
            json!([{"name": "ticket.lookup", "input_schema": {"type": "object"}}]),
        ),
        (
            Target::Anthropic,
            json!([{"name": "ticket_lookup", "input_schema": {"type": "array"}}]),
        ),
        (
            Target::Anthropic,
            json!([{"name": "ticket_lookup", "parameters": {"type": "object"}}]),
        ),
        (
            Target::Mcp,
            json!([{"name": "ticket_lookup", "input_schema": {"type": "object"}}]),
        ),
        (
            Target::Mcp,
            json!([{"name": "ticket lookup", "inputSchema": {"type": "object"}}]),
        ),
        (
            Target::Mcp,
            json!([{"name": "t", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": "yes"}}]),
        ),
    ];
    for (target, tools) in cases {
        assert!(
            !provider_schema(target).is_valid(&tools),
            "{} accepted {tools}",
            target.as_str()
        );
    }
}

#[test]
fn rendered_files_are_canonical_and_stable() {
    let atlas = load_dir(&fixture("minimal")).unwrap();
    let a = render(&atlas, &Target::ALL).unwrap();
    let b = render(&atlas, &Target::ALL).unwrap();
    assert_eq!(a, b);
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        [
            "adapters/anthropic.json",
            "adapters/mcp.json",
            "adapters/openai-chat.json",
            "adapters/openai-responses.json"
        ]
    );
    let mcp: Value = serde_json::from_str(&a["adapters/mcp.json"]).unwrap();
    let delete = mcp["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "note_delete")
        .unwrap();
    assert_eq!(delete["annotations"]["destructiveHint"], true);
    // An action without an explicit object type still yields an object input schema.
    assert_eq!(delete["inputSchema"]["type"], "object");
}

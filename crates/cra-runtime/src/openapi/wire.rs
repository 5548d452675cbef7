//! The wire shapes the API's bodies take, for its description: the protocols' own JSON Schemas
//! (`schemas/*.schema.json`, the ones the validators use) embedded whole as components, and
//! documentation mirrors of the stores' and protocol crates' records (which know nothing of
//! OpenAPI). Every mirror is held to the server's real answers by `cra-runtime`'s `openapi`
//! integration test, which validates each answer of a session's flow against the schema its
//! route declares. They are never built: only their descriptions are used.
#![allow(dead_code)] // the mirrors are descriptions, never values

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

/// A body described by one of `schemas/`' JSON Schemas, named `$name` among the components.
macro_rules! external {
    ($(#[$doc:meta])* $ty:ident, $name:literal) => {
        $(#[$doc])*
        pub(crate) struct $ty;
        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                RefOr::Ref(Ref::from_schema_name($name))
            }
        }
        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

external!(
    /// A CARP/1.0 request (`schemas/carp-request.schema.json`).
    CarpRequest,
    "CarpRequest"
);
external!(
    /// A CARP/1.0 resolution (`schemas/carp-resolution.schema.json`).
    CarpResolution,
    "CarpResolution"
);
external!(
    /// A CARP/1.0 execute request (`schemas/carp-execute-request.schema.json`).
    CarpExecuteRequest,
    "CarpExecuteRequest"
);
external!(
    /// A CARP/1.0 execute response (`schemas/carp-execute-response.schema.json`).
    CarpExecuteResponse,
    "CarpExecuteResponse"
);
external!(
    /// An atlas manifest (`schemas/atlas-manifest.schema.json`).
    AtlasManifest,
    "AtlasManifest"
);
external!(
    /// A Relay context package as stored (`schemas/relay-package.schema.json`).
    RelayPackage,
    "RelayPackage"
);
external!(
    /// A Relay fact (`schemas/relay-fact.schema.json`).
    RelayFact,
    "RelayFact"
);
external!(
    /// A Relay work session (`schemas/relay-session.schema.json`).
    RelaySession,
    "RelaySession"
);
external!(
    /// A TRACE/1.0 event (`schemas/trace-event.schema.json`).
    TraceEvent,
    "TraceEvent"
);

/// The JSON Schemas embedded as components: name, and the schema file's text.
const EMBEDDED: &[(&str, &str)] = &[
    (
        "CarpRequest",
        include_str!("../../../../schemas/carp-request.schema.json"),
    ),
    (
        "CarpResolution",
        include_str!("../../../../schemas/carp-resolution.schema.json"),
    ),
    (
        "CarpExecuteRequest",
        include_str!("../../../../schemas/carp-execute-request.schema.json"),
    ),
    (
        "CarpExecuteResponse",
        include_str!("../../../../schemas/carp-execute-response.schema.json"),
    ),
    (
        "AtlasManifest",
        include_str!("../../../../schemas/atlas-manifest.schema.json"),
    ),
    (
        "AtlasPolicy",
        include_str!("../../../../schemas/atlas-policy.schema.json"),
    ),
    (
        "AtlasAction",
        include_str!("../../../../schemas/atlas-action.schema.json"),
    ),
    (
        "RelayPackage",
        include_str!("../../../../schemas/relay-package.schema.json"),
    ),
    (
        "RelayFact",
        include_str!("../../../../schemas/relay-fact.schema.json"),
    ),
    (
        "RelaySession",
        include_str!("../../../../schemas/relay-session.schema.json"),
    ),
    (
        "TraceEvent",
        include_str!("../../../../schemas/trace-event.schema.json"),
    ),
];

/// Where, in the embedded copies, a member the schema files leave as any object is typed by
/// another of them (the files say so in prose; the validators check those parts apart).
const TYPED_BY: &[(&str, &str, &str)] = &[
    ("AtlasManifest", "/properties/policies/items", "AtlasPolicy"),
    ("AtlasManifest", "/properties/actions/items", "AtlasAction"),
    (
        "AtlasManifest",
        "/properties/context_packs/items/properties/conditions",
        "AtlasPolicy/$defs/conditions",
    ),
];

/// Members that are free-form by their protocol, marked so (`additionalProperties: true`)
/// wherever they are untyped objects: TRACE's `payload`, CARP's `parameters`, `result` and
/// `context` (§3.2, "free key-value context"), an atlas's `metadata` and provider `adapters`
/// (keyed by provider, each in its tool format) and an action's `returns_schema` (itself a
/// JSON Schema); and a resolve's `intended_parameters`, per action that action's parameters.
/// No other object of the description is untyped (`specs/http.md`).
pub const FREE_FORM: &[&str] = &[
    "payload",
    "parameters",
    "intended_parameters",
    "result",
    "context",
    "metadata",
    "adapters",
    "returns_schema",
];

/// Adds the embedded schemas to `doc`'s components: each without `$schema` and `$id`, its
/// `#/$defs/...` references rewritten to point inside its component, the members [`TYPED_BY`]
/// names typed; then marks every free-form member of the document.
pub(crate) fn embed(doc: &mut Value) {
    for (name, text) in EMBEDDED {
        let Ok(mut schema) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        if let Some(o) = schema.as_object_mut() {
            o.remove("$schema");
            o.remove("$id");
        }
        rewrite_refs(&mut schema, name);
        for (owner, pointer, target) in TYPED_BY {
            if owner == name
                && let Some(slot) = schema.pointer_mut(pointer)
            {
                let mut typed =
                    serde_json::json!({"$ref": format!("#/components/schemas/{target}")});
                if let Some(d) = slot.get("description") {
                    typed["description"] = d.clone();
                }
                *slot = typed;
            }
        }
        doc["components"]["schemas"][*name] = schema;
    }
    mark_free_form(doc, None);
}

fn rewrite_refs(node: &mut Value, name: &str) {
    match node {
        Value::Object(o) => {
            if let Some(Value::String(r)) = o.get_mut("$ref")
                && let Some(rest) = r.strip_prefix("#/$defs/")
            {
                *r = format!("#/components/schemas/{name}/$defs/{rest}");
            }
            for v in o.values_mut() {
                rewrite_refs(v, name);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| rewrite_refs(v, name)),
        _ => {}
    }
}

/// Whether `node` is an object schema that says nothing of its members.
pub fn is_untyped_object(node: &Value) -> bool {
    node.as_object().is_some_and(is_untyped)
}

fn is_untyped(o: &serde_json::Map<String, Value>) -> bool {
    let typed = [
        "properties",
        "$ref",
        "allOf",
        "oneOf",
        "anyOf",
        "patternProperties",
    ]
    .iter()
    .any(|k| o.contains_key(*k));
    let any_member = o.get("additionalProperties").is_none_or(|a| {
        a == &Value::Bool(true) || a.as_object().is_some_and(serde_json::Map::is_empty)
    });
    o.get("type").is_some_and(|t| t == "object") && !typed && any_member
}

/// Marks the untyped objects of free-form members (`member` is the property `node` describes,
/// which `items` and `additionalProperties` inherit).
fn mark_free_form(node: &mut Value, member: Option<&str>) {
    match node {
        Value::Object(o) => {
            if member.is_some_and(|m| FREE_FORM.contains(&m)) && is_untyped(o) {
                o.insert("additionalProperties".into(), Value::Bool(true));
            }
            for (k, v) in o.iter_mut() {
                match k.as_str() {
                    "properties" => {
                        if let Value::Object(props) = v {
                            for (name, p) in props.iter_mut() {
                                mark_free_form(p, Some(name));
                            }
                        }
                    }
                    "items" | "additionalProperties" => mark_free_form(v, member),
                    _ => mark_free_form(v, None),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| mark_free_form(v, member)),
        _ => {}
    }
}

/// The call an approval was asked for (mirror of `cra_carp::store::ApprovalCall`).
#[derive(Serialize, ToSchema)]
pub(crate) struct ApprovalCall {
    /// The execute request that asked.
    pub execution_id: String,
    /// The gated action.
    pub action_id: String,
    /// `sha256:` of the call's parameters in TRACE canonical form.
    pub parameters_hash: String,
    /// The atlas that declares the action, as it was in force when the approval was asked.
    pub atlas_id: String,
    /// That atlas's digest: a grant does not carry over to another version.
    pub atlas_digest: String,
}

/// Where an approval stands.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ApprovalStatus {
    /// Waiting for an operator.
    Pending,
    /// Granted: the call it names may run once.
    Granted,
    /// Rejected.
    Rejected,
}

/// One approval (mirror of `cra_carp::store::ApprovalRecord`).
#[derive(Serialize, ToSchema)]
pub(crate) struct Approval {
    /// The approval's id (the resolution's decision names it).
    pub approval_id: String,
    /// The resolution it belongs to.
    pub resolution_id: String,
    /// The session of that resolution.
    pub session_id: String,
    /// The agent that asked.
    pub agent_id: String,
    /// The gated action ids.
    pub actions: Vec<String>,
    /// When it was asked.
    pub created_at: String,
    /// When it lapses, Unix microseconds.
    pub expires_at_us: i64,
    /// Pending, granted or rejected.
    pub status: ApprovalStatus,
    /// Who decided, once decided.
    pub decided_by: Option<String>,
    /// When it was decided, once decided.
    pub decided_at: Option<String>,
    /// The decider's note.
    pub note: Option<String>,
    /// The call it was asked for (absent for an approval a resolve opened before round 2).
    #[schema(required = false)]
    pub call: Option<ApprovalCall>,
}

/// One approval as `GET /v1/approvals/{id}` answers it.
#[derive(Serialize, ToSchema)]
pub(crate) struct ApprovalView {
    /// The approval.
    #[serde(flatten)]
    pub approval: Approval,
    /// Still pending, but its session ended: it can no longer be decided.
    pub lapsed: bool,
}

/// An atlas given inline (`POST /v1/atlases`).
#[derive(ToSchema)]
pub(crate) struct InlineAtlas {
    /// The manifest (`atlas.json`).
    pub manifest: AtlasManifest,
    /// Its other files by relative path, as UTF-8 text.
    #[schema(required = false)]
    pub files: Option<BTreeMap<String, String>>,
    /// The armored SSH signature over the atlas digest (`specs/atlas-signing.md`).
    #[schema(required = false)]
    pub signature: Option<String>,
}

/// The whole set of atlases in force (`PUT /v1/atlases`).
#[derive(ToSchema)]
pub(crate) struct AtlasSet {
    /// Every atlas, inline.
    pub atlases: Vec<InlineAtlas>,
}

/// One atlas of a catalog generation (mirror of `cra_store::catalog::CatalogEntry`).
#[derive(Serialize, ToSchema)]
pub(crate) struct CatalogEntry {
    /// The atlas id.
    pub atlas_id: String,
    /// Its version.
    pub version: String,
    /// Its digest.
    pub digest: String,
    /// The armored signature it was taken in with, when it had one.
    #[schema(required = false)]
    pub signature: Option<String>,
}

/// A Relay project (mirror of `cra_relay::model::Project`).
#[derive(Serialize, ToSchema)]
pub(crate) struct Project {
    /// Its id.
    pub project_id: String,
    /// Display name.
    pub name: String,
    /// When it was created.
    pub created_at: String,
    /// Set while archived.
    pub archived_at: Option<String>,
}

/// A project just created: the project and its audit chain's session.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedProject {
    /// The project.
    #[serde(flatten)]
    pub project: Project,
    /// The session id of its audit chain.
    pub audit_session_id: String,
}

/// A listing of packages (`GET /v1/projects/{id}/packages`).
#[derive(ToSchema)]
pub(crate) struct PackageListing {
    /// The packages, newest first (or best first for `relevant`).
    pub packages: Vec<RelayPackage>,
    /// Ids of stored packages whose content hash no longer verifies (not returned).
    pub quarantined: Vec<String>,
}

/// `DELETE /v1/projects/{id}/facts`: how many current rows were closed.
#[derive(Serialize, ToSchema)]
pub(crate) struct Invalidated {
    /// Rows invalidated.
    pub invalidated: u64,
}

/// A fact to assert (`POST /v1/projects/{id}/facts`).
#[derive(Serialize, ToSchema)]
pub(crate) struct AssertFact {
    /// What the fact is about.
    pub subject: String,
    /// The relation.
    pub predicate: String,
    /// The value: any JSON value.
    #[schema(value_type = Value)]
    pub value: Value,
    /// Valid from (default: now).
    #[schema(required = false)]
    pub valid_from: Option<String>,
    /// Valid until.
    #[schema(required = false)]
    pub valid_to: Option<String>,
    /// The package it came from.
    #[schema(required = false)]
    pub source_package_id: Option<String>,
    /// 0 to 1.
    #[schema(required = false)]
    pub confidence: Option<f64>,
    /// Tags.
    #[schema(required = false)]
    pub tags: Option<Vec<String>>,
}

/// Orientation for an agent arriving in a project (§8.3; mirror of
/// `cra_relay::digest::OrientationBundle`).
#[derive(ToSchema)]
pub(crate) struct OrientationBundle {
    /// The project.
    pub project: Project,
    /// Its newest packages in the window.
    pub recent_packages: Vec<RelayPackage>,
    /// Facts valid now.
    pub active_facts: Vec<RelayFact>,
    /// Open questions of the window's packages, deduplicated.
    pub open_questions: Vec<String>,
    /// The window, in days.
    pub window_days: u32,
    /// When it was made.
    pub generated_at: String,
}

/// A project's counts in a digest (mirror of `cra_relay::digest::ProjectCounts`).
#[derive(Serialize, ToSchema)]
pub(crate) struct ProjectCounts {
    /// The project.
    pub project_id: String,
    /// Its name.
    pub name: String,
    /// Packages deposited in the window.
    pub packages_in_window: u64,
    /// Packages awaiting review.
    pub awaiting_review: u64,
    /// Facts valid now.
    pub active_facts: u64,
    /// Open questions.
    pub open_questions: u64,
}

/// What happened in the window (mirror of `cra_relay::digest::Activity`).
#[derive(Serialize, ToSchema)]
pub(crate) struct Activity {
    /// Packages deposited.
    pub packages: u64,
    /// Packages by type.
    pub by_type: BTreeMap<String, u64>,
    /// Packages by status.
    pub by_status: BTreeMap<String, u64>,
    /// Packages by depositing actor.
    pub by_actor: BTreeMap<String, u64>,
    /// Decisions made.
    pub decisions: Vec<String>,
    /// The latest handoff note.
    pub latest_handoff: Option<String>,
}

/// A passage of a package that matched the focus (mirror of `cra_relay::digest::Snippet`).
#[derive(Serialize, ToSchema)]
pub(crate) struct Snippet {
    /// The package.
    pub package_id: String,
    /// Its project.
    pub project_id: String,
    /// Its title.
    pub title: String,
    /// The field the text is from.
    pub field: String,
    /// The text.
    pub text: String,
    /// How well it matched.
    pub score: f64,
}

/// `GET /v1/orchestrate` (§8.4; mirror of `cra_relay::digest::DigestBundle`).
#[derive(ToSchema)]
pub(crate) struct DigestBundle {
    /// The project, or none for every readable project.
    pub project_id: Option<String>,
    /// The focus text.
    pub focus: Option<String>,
    /// The window, in days.
    pub window_days: u32,
    /// When it was made.
    pub generated_at: String,
    /// What happened.
    pub activity: Activity,
    /// Facts valid now.
    pub active_facts: Vec<RelayFact>,
    /// Open questions.
    pub open_questions: Vec<String>,
    /// Passages matching the focus.
    pub snippets: Vec<Snippet>,
    /// Each project's counts.
    pub projects: Vec<ProjectCounts>,
}

/// An execute's answer: the execute response once admitted, the error body when not.
pub(crate) struct ExecuteAnswer;

impl PartialSchema for ExecuteAnswer {
    fn schema() -> RefOr<Schema> {
        utoipa::openapi::schema::OneOf::builder()
            .item(Ref::from_schema_name("CarpExecuteResponse"))
            .item(Ref::from_schema_name("ErrorBody"))
            .description(Some(
                "An execute response, or the error body for a request that was not admitted",
            ))
            .into()
    }
}

impl ToSchema for ExecuteAnswer {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("ExecuteAnswer")
    }
}

/// The `args` of `POST /v1/conformance/eval/{verb}`: which members a verb reads is in
/// `conformance/README.md` ("Verbs"). Inputs the suite sends malformed on purpose (`value`,
/// `event`, `request`, `manifest`, `package`) are any JSON value.
#[derive(ToSchema)]
pub(crate) struct ConformanceArgs {
    /// `canonical_trace`, `relay_canonical`: the value to write canonically.
    #[schema(required = false, value_type = Value)]
    pub value: Option<Value>,
    /// `hash_event`: the event, without `event_hash`.
    #[schema(required = false, value_type = Value)]
    pub event: Option<Value>,
    /// `verify_chain`: the events as objects.
    #[schema(required = false, value_type = Vec<Value>)]
    pub events: Option<Vec<Value>>,
    /// `verify_chain`: the events as JSON Lines, one string each.
    #[schema(required = false)]
    pub lines: Option<Vec<String>>,
    /// `verify_chain`: report every finding, not only the first.
    #[schema(required = false)]
    pub all_errors: Option<bool>,
    /// `validate_request`: the CARP request.
    #[schema(required = false, value_type = Value)]
    pub request: Option<Value>,
    /// `load_atlas`: the manifest.
    #[schema(required = false, value_type = Value)]
    pub manifest: Option<Value>,
    /// `load_atlas`: the other files by path.
    #[schema(required = false)]
    pub files: Option<BTreeMap<String, String>>,
    /// `content_hash`: the package.
    #[schema(required = false, value_type = Value)]
    pub package: Option<Value>,
    /// `replay`: the session.
    #[schema(required = false)]
    pub session_id: Option<String>,
    /// `replay`: inline atlases to replay against instead of the set in force.
    #[schema(required = false)]
    pub atlases: Option<Vec<InlineAtlas>>,
    /// `export_import`: the project.
    #[schema(required = false)]
    pub project_id: Option<String>,
    /// `export_import`: damage the export before importing it.
    #[schema(required = false)]
    pub tamper: Option<bool>,
}

/// A conformance verb's answer: its members depend on the verb (`conformance/README.md`).
#[derive(ToSchema)]
pub(crate) struct ConformanceAnswer {
    /// `canonical_trace`, `relay_canonical`: the canonical text.
    #[schema(required = false)]
    pub canonical: Option<String>,
    /// `hash_event`: the event's hash.
    #[schema(required = false)]
    pub event_hash: Option<String>,
    /// `content_hash`: `sha256:` and the hex digest.
    #[schema(required = false)]
    pub content_hash: Option<String>,
    /// `verify_chain`, `validate_request`, `load_atlas`: whether the input is valid.
    #[schema(required = false)]
    pub valid: Option<bool>,
    /// `verify_chain`: events checked.
    #[schema(required = false)]
    pub events: Option<u64>,
    /// `verify_chain`: the first failure (`sequence`, `line`, `code`, `field?`).
    #[schema(required = false, value_type = Value)]
    pub first_error: Option<Value>,
    /// `verify_chain`: every finding.
    #[schema(required = false, value_type = Vec<Value>)]
    pub findings: Option<Vec<Value>>,
    /// `validate_request`: each problem with its pointer.
    #[schema(required = false)]
    pub errors: Option<Vec<super::FieldErrorSchema>>,
    /// `load_atlas`: the atlas's id, version and digest.
    #[schema(required = false)]
    pub atlas_id: Option<String>,
    /// `load_atlas`: its version.
    #[schema(required = false)]
    pub version: Option<String>,
    /// `load_atlas`: its digest.
    #[schema(required = false)]
    pub digest: Option<String>,
    /// `load_atlas`: each diagnostic with its pointer.
    #[schema(required = false)]
    pub diagnostics: Option<Vec<super::FieldErrorSchema>>,
    /// `replay`: whether every resolution replayed identically.
    #[schema(required = false)]
    pub identical: Option<bool>,
    /// `replay`: resolutions replayed.
    #[schema(required = false)]
    pub resolutions: Option<u64>,
    /// `replay`: what decided otherwise (`action_id`, ...).
    #[schema(required = false, value_type = Vec<Value>)]
    pub divergences: Option<Vec<Value>>,
    /// `export_import`: the packages with their content hashes.
    #[schema(required = false, value_type = Vec<Value>)]
    pub packages: Option<Vec<Value>>,
    /// `export_import`: fact rows.
    #[schema(required = false)]
    pub facts: Option<u64>,
    /// `export_import`: whether every hash survived.
    #[schema(required = false)]
    pub hashes_preserved: Option<bool>,
    /// `export_import`: whether exporting the import gives the same bytes.
    #[schema(required = false)]
    pub reexport_identical: Option<bool>,
}

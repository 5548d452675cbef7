//! The conformance suite's evaluation verbs (`conformance/README.md`, "Verbs"), implemented once:
//! the runtime answers them on `POST /v1/conformance/eval/{verb}` and the in-process conformance
//! target calls the same functions, so both targets run the same code.
//!
//! * Pure verbs ([`eval_pure`]): `canonical_trace`, `hash_event`, `verify_chain`,
//!   `validate_request`, `load_atlas`, `relay_canonical`, `content_hash`. Any authenticated caller.
//! * Verbs over the server's state: `replay` re-resolves a session's recorded requests
//!   (`replay_answer`; the caller must be allowed to read the session) and `export_import`
//!   round-trips one Relay project through the export format ([`export_import`]; auditors,
//!   operators, admins, or the project's creator and members). Neither writes anything.
//! * [`TestClock`]: with `test_clock = true` (`cra serve --test-clock`) the server's injected
//!   clock can be set by an admin with `POST /v1/conformance/clock`, so fixtures that fix "now"
//!   (`setup.now`, `at_seconds`) run against a live server. Never for production: it lets an admin
//!   date every event.

use std::path::Path as FsPath;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use cra_carp::index::AtlasSet;
use cra_relay::RelayStore;
use cra_trace::TraceEvent;
use cra_wire::{Clock, Token};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use time::{Duration, OffsetDateTime};
use utoipa::ToSchema;

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, RawJson};
use crate::routes::Caller;
use crate::state::AppState;

/// The verbs `POST /v1/conformance/eval/{verb}` answers.
pub(crate) const EVAL_VERBS: &[&str] = &[
    "canonical_trace",
    "hash_event",
    "verify_chain",
    "validate_request",
    "load_atlas",
    "relay_canonical",
    "content_hash",
    "replay",
    "export_import",
];

/// A clock an admin may set (test mode only): the injected clock plus an offset. Setting it to
/// `T` makes "now" `T` at that instant; it then runs on with the injected clock (a frozen
/// injected clock stays frozen at `T`).
#[derive(Debug)]
pub struct TestClock {
    base: Arc<dyn Clock>,
    offset: Mutex<Duration>,
}

impl TestClock {
    /// A clock reading `base` until it is set.
    pub fn new(base: Arc<dyn Clock>) -> Self {
        Self {
            base,
            offset: Mutex::new(Duration::ZERO),
        }
    }

    /// Makes "now" `at`.
    pub fn set(&self, at: OffsetDateTime) {
        let offset = at - self.base.now();
        *self.offset.lock().unwrap_or_else(|p| p.into_inner()) = offset;
    }
}

impl Clock for TestClock {
    fn now(&self) -> OffsetDateTime {
        let offset = *self.offset.lock().unwrap_or_else(|p| p.into_inner());
        self.base.now() + offset
    }
}

/// An error as a verb's answer: the error body plus its HTTP `status` (what the HTTP target makes
/// of a refusal, so both targets answer alike).
pub fn error_answer(e: &ApiError) -> Value {
    let mut v = serde_json::to_value(&e.body).unwrap_or_else(|_| json!({}));
    v["status"] = json!(e.status());
    v
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a Value, ApiError> {
    args.get(name).ok_or_else(|| {
        ApiError::field(
            Token::InvalidRequest,
            format!("/{name}"),
            format!("missing member `{name}`"),
        )
    })
}

/// Answers a pure verb; `None` when `verb` is not one.
pub fn eval_pure(verb: &str, args: &Value) -> Option<Result<Value, ApiError>> {
    Some(match verb {
        "canonical_trace" => arg(args, "value").map(canonical_trace),
        "hash_event" => arg(args, "event").and_then(hash_event),
        "verify_chain" => verify_chain(args),
        "validate_request" => validate_request(args),
        "load_atlas" => load_atlas(args),
        "relay_canonical" => arg(args, "value").and_then(relay_canonical),
        "content_hash" => arg(args, "package").and_then(content_hash),
        _ => return None,
    })
}

/// `{canonical}`: the TRACE Appendix B canonical JSON of `value`.
pub fn canonical_trace(value: &Value) -> Value {
    json!({ "canonical": cra_wire::canonical::trace_canonical(value) })
}

/// `{event_hash}` of an event given without `event_hash`; 400 `malformed_event` when a field
/// the hash covers is missing or mistyped.
pub fn hash_event(event: &Value) -> Result<Value, ApiError> {
    let mut e = event.clone();
    if let Some(o) = e.as_object_mut() {
        // The hash is what is being computed; an event may come without it.
        o.entry("event_hash")
            .or_insert_with(|| Value::String(String::new()));
    }
    let ev: TraceEvent = serde_json::from_value(e).map_err(|err| {
        ApiError::new(
            Token::MalformedEvent,
            format!("the event cannot be hashed: {err}"),
        )
    })?;
    Ok(json!({ "event_hash": cra_trace::compute_event_hash(&ev) }))
}

/// The JSONL text a `verify_chain` call names: `lines` (raw lines, kept byte for byte) or
/// `events` (objects, one compact line each).
pub fn chain_text(args: &Value) -> Result<String, ApiError> {
    let mut text = String::new();
    if let Some(lines) = args.get("lines") {
        let lines = lines.as_array().ok_or_else(|| {
            ApiError::field(
                Token::InvalidRequest,
                "/lines",
                "`lines` is an array of strings",
            )
        })?;
        for (i, l) in lines.iter().enumerate() {
            let l = l.as_str().ok_or_else(|| {
                ApiError::field(
                    Token::InvalidRequest,
                    format!("/lines/{i}"),
                    "each line is a string (one JSONL line)",
                )
            })?;
            text.push_str(l);
            text.push('\n');
        }
    } else if let Some(events) = args.get("events") {
        let events = events.as_array().ok_or_else(|| {
            ApiError::field(
                Token::InvalidRequest,
                "/events",
                "`events` is an array of events",
            )
        })?;
        for e in events {
            text.push_str(&e.to_string());
            text.push('\n');
        }
    } else {
        return Err(ApiError::field(
            Token::InvalidRequest,
            "/events",
            "verify_chain needs `events` (objects) or `lines` (JSONL strings)",
        ));
    }
    Ok(text)
}

/// `{valid, events, first_error?, findings}` of a chain, verified by the streaming verifier
/// `cra trace verify` uses.
pub fn verify_chain(args: &Value) -> Result<Value, ApiError> {
    let text = chain_text(args)?;
    let all_errors = args
        .get("all_errors")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let options = cra_trace::VerifyOptions {
        all_errors,
        threads: 1,
        ..cra_trace::VerifyOptions::default()
    };
    let report = cra_trace::verify_reader(text.as_bytes(), &options, &mut |_| {})
        .map_err(|e| ApiError::internal("the chain could not be read", e))?;
    Ok(verification_answer(report.events, &report.findings))
}

/// The `verify_chain` answer for `events` checked and `findings`.
pub fn verification_answer(events: u64, findings: &[cra_trace::Finding]) -> Value {
    let list: Vec<Value> = findings
        .iter()
        .map(|f| {
            let mut finding =
                json!({"sequence": f.sequence, "line": f.line, "code": f.code.as_str()});
            if let Some(field) = f.field {
                finding["field"] = json!(field);
            }
            finding
        })
        .collect();
    let mut out = Map::new();
    out.insert("valid".into(), Value::Bool(list.is_empty()));
    out.insert("events".into(), json!(events));
    if let Some(first) = list.first() {
        out.insert("first_error".into(), first.clone());
    }
    out.insert("findings".into(), Value::Array(list));
    Value::Object(out)
}

/// `{valid, errors: [{pointer, message}]}`: the CARP request schema's verdict on `request`.
pub fn validate_request(args: &Value) -> Result<Value, ApiError> {
    let request = arg(args, "request")?;
    let errors = cra_carp::validate::shape_errors(request)
        .map_err(|e| ApiError::internal("the CARP request schema is unusable", e.message))?;
    Ok(json!({"valid": errors.is_empty(), "errors": errors}))
}

/// `{valid, atlas_id, version, digest, diagnostics}` of an inline atlas `{manifest, files?}`,
/// analysed as a directory holding those files, its dependencies resolved against a registry
/// holding only itself.
pub fn load_atlas(args: &Value) -> Result<Value, ApiError> {
    let files = crate::atlases::inline_files(args, "")?;
    let analysis = cra_carp::atlas_check::analyse(FsPath::new("(load_atlas)"), files);
    let dependency = analysis
        .atlas
        .as_ref()
        .map(|a| cra_atlas::Registry::new().dependency_diagnostics(a))
        .unwrap_or_default();
    let valid = analysis.is_valid() && !dependency.iter().any(cra_atlas::Diagnostic::is_error);
    let diagnostics: Vec<Value> = analysis
        .diagnostics
        .iter()
        .chain(&dependency)
        .filter(|d| d.is_error())
        .map(
            |d| json!({"file": d.file, "pointer": d.pointer, "code": d.code, "message": d.message}),
        )
        .collect();
    let mut out = json!({"valid": valid, "diagnostics": diagnostics});
    if let Some(a) = &analysis.atlas {
        out["atlas_id"] = json!(a.manifest.atlas_id);
        out["version"] = json!(a.manifest.version);
        out["digest"] = json!(a.digest);
    }
    Ok(out)
}

/// `{canonical}`: the Relay Appendix A canonical JSON of `value`; 400 `invalid_schema` for a
/// value Appendix A cannot write.
pub fn relay_canonical(value: &Value) -> Result<Value, ApiError> {
    cra_wire::canonical::relay_canonical(value)
        .map(|t| json!({ "canonical": t }))
        .map_err(|e| ApiError::new(Token::InvalidSchema, e.to_string()))
}

/// `{content_hash}` (`sha256:` + hex) of a package: Appendix A canonical JSON of the package
/// without its `content_hash` member.
pub fn content_hash(package: &Value) -> Result<Value, ApiError> {
    let Some(obj) = package.as_object() else {
        return Err(ApiError::field(
            Token::InvalidSchema,
            "/package",
            format!(
                "a package is a JSON object, found {}",
                crate::extract::json_kind(package)
            ),
        ));
    };
    let mut p = obj.clone();
    p.remove("content_hash");
    let text = cra_wire::canonical::relay_canonical(&Value::Object(p))
        .map_err(|e| ApiError::new(Token::InvalidSchema, e.to_string()))?;
    Ok(json!({ "content_hash": cra_wire::hash::sha256_prefixed(text.as_bytes()) }))
}

/// `{identical, resolutions, divergences}`: re-resolves the `carp.request.received` events of
/// `events` against `atlases` (`cra_carp::replay`) and lists each divergence with the action it
/// concerns.
pub(crate) fn replay_answer(events: &[TraceEvent], atlases: &AtlasSet) -> Value {
    let cases = cra_carp::replay::replay(events, atlases);
    let mut divergences = Vec::new();
    for c in &cases {
        match &c.outcome {
            cra_carp::replay::CaseOutcome::Same => {}
            cra_carp::replay::CaseOutcome::Diverged {
                pointer,
                recorded,
                replayed,
            } => {
                let action_id = [recorded, replayed]
                    .into_iter()
                    .find_map(|v| {
                        v.get("action_id")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .or_else(|| {
                        pointer
                            .ends_with("/action_id")
                            .then(|| recorded.as_str().map(str::to_owned))
                            .flatten()
                    });
                divergences.push(json!({"request_id": c.request_id, "pointer": pointer,
                    "recorded": recorded, "replayed": replayed, "action_id": action_id}));
            }
            cra_carp::replay::CaseOutcome::Error(e) => {
                divergences.push(json!({"request_id": c.request_id, "error": e}));
            }
        }
    }
    json!({"identical": divergences.is_empty(), "resolutions": cases.len(),
        "divergences": divergences})
}

/// Exports project `project_id` of `store` (Relay §10), optionally tampers with the export (the
/// first package's title changes, its recorded hash does not), imports it into a fresh empty
/// store, exports that again and compares: `{packages: [{package_id, content_hash}], facts,
/// hashes_preserved, reexport_identical}`. An export the import refuses is 409
/// `integrity_error`. Nothing is written to `store`.
pub fn export_import(
    store: &dyn RelayStore,
    project_id: &str,
    tamper: bool,
) -> Result<Value, ApiError> {
    use cra_relay::export::{only_project, parse, render};
    let internal = |what: &'static str| {
        move |e: cra_relay::store::RelayStoreError| ApiError::internal(what, e)
    };
    let snap = only_project(
        &store.snapshot().map_err(internal("reading the store"))?,
        project_id,
    );
    let mut files = render(&snap).map_err(internal("rendering the export"))?;
    if tamper {
        for (name, bytes) in &mut files {
            if name.starts_with("packages") {
                let text =
                    String::from_utf8_lossy(bytes).replacen("\"title\":\"", "\"title\":\"X", 1);
                *bytes = text.into_bytes();
            }
        }
    }
    let parsed = parse(&files).map_err(|e| {
        ApiError::new(
            Token::IntegrityError,
            format!("the import refused the export: {e}"),
        )
    })?;
    let dir = tempfile::tempdir()
        .map_err(|e| ApiError::internal("cannot make a scratch directory", e))?;
    let db = cra_store::RedbStore::open(dir.path())
        .map_err(|e| ApiError::internal("cannot open a scratch store", e))?;
    let scratch = cra_store::relay::RedbRelay::open(&db)
        .map_err(|e| ApiError::internal("cannot open a scratch store", e))?;
    scratch
        .restore(&parsed)
        .map_err(internal("importing into the scratch store"))?;
    let again = scratch
        .snapshot()
        .map_err(internal("reading the scratch store"))?;
    let files2 = render(&again).map_err(internal("rendering the re-export"))?;
    let pairs = |s: &cra_relay::store::Snapshot| -> Vec<(String, String)> {
        s.packages
            .iter()
            .map(|p| (p.package.package_id().to_owned(), p.content_hash.clone()))
            .collect()
    };
    // Each imported package's hash recomputed from its content: preserved means equal.
    let recomputed: Vec<(String, String)> = again
        .packages
        .iter()
        .map(|p| {
            let v = Value::Object(p.package.as_object().clone());
            let c = cra_wire::canonical::relay_canonical(&v).unwrap_or_default();
            (
                p.package.package_id().to_owned(),
                cra_wire::hash::sha256_prefixed(c.as_bytes()),
            )
        })
        .collect();
    let preserved = pairs(&snap) == pairs(&again) && recomputed == pairs(&again);
    Ok(json!({
        "packages": pairs(&again).into_iter()
            .map(|(id, h)| json!({"package_id": id, "content_hash": h}))
            .collect::<Vec<_>>(),
        "facts": again.facts.len(),
        "hashes_preserved": preserved,
        "reexport_identical": files == files2,
    }))
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, ApiError> {
    arg(args, name)?.as_str().ok_or_else(|| {
        ApiError::field(
            Token::InvalidRequest,
            format!("/{name}"),
            format!("`{name}` is a string"),
        )
    })
}

/// Answers one evaluation verb with the body `args` (the fixture's `args` object). Pure verbs:
/// any authenticated caller. `replay {session_id, atlases?}`: readers of the session; against the
/// given inline atlases, or the set in force. `export_import {project_id, tamper?}`: auditors,
/// operators, admins and the project's creator and members. Nothing is written.
#[utoipa::path(post, path = "/v1/conformance/eval/{verb}", tag = "conformance",
    request_body(content = crate::openapi::wire::ConformanceArgs, description = "The verb's `args` (conformance/README.md, Verbs)"),
    params(("verb" = String, Path, description = "canonical_trace, hash_event, verify_chain, validate_request, load_atlas, relay_canonical, content_hash, replay or export_import")),
    responses((status = 200, description = "The verb's answer", body = crate::openapi::wire::ConformanceAnswer),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, description = "No such verb, session or project", body = crate::openapi::ErrorBodySchema)))]
pub async fn eval(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(verb): Path<String>,
    RawJson(args): RawJson,
) -> ApiResult<Json<Value>> {
    match verb.as_str() {
        "replay" => {
            let id = string_arg(&args, "session_id")?.to_owned();
            // `trace` refuses a caller who may not read the session.
            let events = state.trace(&actor, &id).await?;
            let given = args.get("atlases").cloned();
            let in_force = state.atlases().set.clone();
            crate::error::run_blocking("the replay task failed", move || {
                let set = match given {
                    None => in_force,
                    Some(list) => Arc::new(atlas_set_of(&list)?),
                };
                Ok(Json(replay_answer(&events, &set)))
            })
            .await?
        }
        "export_import" => {
            let project = string_arg(&args, "project_id")?.to_owned();
            let tamper = match args.get("tamper") {
                None => false,
                Some(t) => t.as_bool().ok_or_else(|| {
                    ApiError::field(Token::InvalidRequest, "/tamper", "`tamper` is a boolean")
                })?,
            };
            let grants = state.project_grants(&project).await?;
            let member = grants.owner == actor.id || grants.members.contains(&actor.id);
            if !(member || actor.reads_all()) {
                return Err(ApiError::new(
                    Token::Unauthorized,
                    format!(
                        "{} may not read project `{project}`; its creator, members, auditors and operators may",
                        actor.id
                    ),
                ));
            }
            let store = state.backends.relay.clone();
            crate::error::run_blocking("the export task failed", move || {
                export_import(store.as_ref(), &project, tamper).map(Json)
            })
            .await?
        }
        pure => {
            let pure = pure.to_owned();
            crate::error::run_blocking("the evaluation task failed", move || {
                eval_pure(&pure, &args).unwrap_or_else(|| {
                    Err(ApiError::not_found(format!(
                        "`{pure}` is not an evaluation verb; the verbs are {}",
                        EVAL_VERBS.join(", ")
                    )))
                })
            })
            .await?
            .map(Json)
        }
    }
}

/// Compiles a list of inline atlases (validated as `POST /v1/atlases` validates one).
fn atlas_set_of(list: &Value) -> Result<AtlasSet, ApiError> {
    let items = list.as_array().ok_or_else(|| {
        ApiError::field(
            Token::InvalidRequest,
            "/atlases",
            "`atlases` is an array of inline atlases",
        )
    })?;
    let mut loaded = Vec::with_capacity(items.len());
    for (i, a) in items.iter().enumerate() {
        loaded.push(crate::atlases::load_inline(a, &format!("/atlases/{i}"))?);
    }
    AtlasSet::from_loaded(&loaded).map_err(|e| ApiError::new(Token::InvalidAtlas, e.to_string()))
}

/// `POST /v1/conformance/clock` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetClock {
    /// The instant "now" becomes (RFC 3339).
    pub now: String,
}

/// The clock after a change.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClockNow {
    /// "Now", in the wire form.
    pub now: String,
}

/// Sets the server's clock (admin; only when the server runs with `test_clock = true`, else
/// 501 `not_implemented`). Everything that reads "now" (request skew checks, resolution expiry,
/// event timestamps, Relay times) reads it from then on.
#[utoipa::path(post, path = "/v1/conformance/clock", tag = "conformance", request_body = SetClock,
    responses((status = 200, body = ClockNow),
              (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 501, description = "The server does not run with a test clock", body = crate::openapi::ErrorBodySchema)))]
pub async fn set_clock(
    State(state): State<AppState>,
    Caller(actor): Caller,
    JsonBody(body): JsonBody<SetClock>,
) -> ApiResult<Json<ClockNow>> {
    if !actor.has(Role::Admin) {
        return Err(ApiError::forbidden(
            "setting the clock needs the admin role",
        ));
    }
    let Some(clock) = &state.test_clock else {
        return Err(ApiError::new(
            Token::NotImplemented,
            "this server's clock cannot be set; start it with `cra serve --test-clock` (tests only)",
        )
        .with_capability("test_clock"));
    };
    let at = cra_wire::clock::parse_rfc3339(&body.now)
        .map_err(|e| ApiError::field(Token::InvalidRequest, "/now", e.to_string()))?;
    clock.set(at);
    tracing::warn!(now = %body.now, "the test clock was set");
    Ok(Json(ClockNow {
        now: cra_wire::clock::format_timestamp(clock.now()),
    }))
}

/// The routes of this module (merged into [`crate::routes::router`]).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new()
        .route("/v1/conformance/eval/{verb}", axum::routing::post(eval))
        .route("/v1/conformance/clock", axum::routing::post(set_clock))
}

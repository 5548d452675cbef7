//! Relay (Agentic Protocol v0.1) over HTTP: the routes of Relay §9.1 and those named in the
//! design (projects, archive, review, awaiting-review listing, fact queries).
//!
//! Access (our decision; the protocol leaves it to the implementation): a project is readable and
//! writable by its creator and by the actors listed in `members` when it was created; auditors
//! and operators read every project; admins do everything. Grants are recorded in the project's
//! audit chain (`relay.project.created`), so they are as tamper-evident as any event.
//!
//! Every write is a TRACE event: in the chain of `created_by.session_id` when that names an
//! active session of the same agent, otherwise in the project's audit chain, a session like any
//! other whose agent is `project:<project_id>` and whose id is derived from the project id.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cra_relay::fact::{FactQuery, FactView};
use cra_relay::{Actor as RelayActor, ActorType as RelayActorType, Relay, RelayError};
use cra_wire::Token;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::auth::{Actor, ActorType, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::{QueryParams, RawJson};
use crate::routes::Caller;
use crate::state::{AppState, Runtime};
use crate::tracelog::draft;

/// The project's audit-chain session id: a version-7-shaped UUID whose time field is zero and
/// whose other bits come from SHA-256(`cra/project-audit/` + project id), so every replica
/// derives the same id without shared state.
pub fn project_audit_session(project_id: &str) -> String {
    let h = Sha256::digest(format!("cra/project-audit/{project_id}").as_bytes());
    let mut b = [0u8; 16];
    b[6..].copy_from_slice(&h[..10]);
    b[6] = 0x70 | (b[6] & 0x0f);
    b[8] = 0x80 | (b[8] & 0x3f);
    uuid::Uuid::from_bytes(b).hyphenated().to_string()
}

fn relay_error(e: RelayError) -> ApiError {
    let body = e.to_body();
    let mut a = ApiError::new(e.token(), body.message.clone());
    a.body = body;
    a
}

fn relay_actor(a: &Actor) -> RelayActor {
    RelayActor::new(
        a.id.clone(),
        match a.actor_type {
            ActorType::Agent => RelayActorType::Agent,
            ActorType::Human => RelayActorType::Human,
            ActorType::Script => RelayActorType::Script,
        },
    )
}

/// Who may do what in a project.
#[derive(Debug, Clone)]
pub struct Grants {
    /// The creator.
    pub owner: String,
    /// Further writers.
    pub members: Vec<String>,
}

impl Runtime {
    async fn relay_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(Relay) -> Result<T, RelayError> + Send + 'static,
    ) -> ApiResult<T> {
        let relay = self.relay.clone();
        crate::error::run_blocking("a relay task failed", move || f(relay))
            .await?
            .map_err(relay_error)
    }

    /// The grants of `project_id`, read from its audit chain.
    pub async fn project_grants(&self, project_id: &str) -> ApiResult<Grants> {
        let sid = project_audit_session(project_id);
        let first = self.read_events_after(&sid, Some(0), 1).await?;
        let p = first
            .into_iter()
            .find(|e| e.event_type == "relay.project.created")
            .map(|e| e.payload)
            .ok_or_else(|| {
                ApiError::new(
                    Token::ProjectNotFound,
                    format!("no project `{project_id}`; create it with POST /v1/projects"),
                )
            })?;
        Ok(Grants {
            owner: p["created_by"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            members: p["members"]
                .as_array()
                .map(|m| {
                    m.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The project of package `package_id`, once `actor` is known to be allowed to write to it
    /// (404 for an unknown package, 403 without a grant).
    async fn writable_package_project(&self, actor: &Actor, package_id: &str) -> ApiResult<String> {
        let id = package_id.to_owned();
        let current = self.relay_call(move |r| r.pull_specific(&id)).await?;
        let pid = current.package.project_id().to_owned();
        self.require_project(actor, &pid, true).await?;
        Ok(pid)
    }

    async fn require_project(&self, actor: &Actor, project_id: &str, write: bool) -> ApiResult<()> {
        let g = self.project_grants(project_id).await?;
        let member = g.owner == actor.id || g.members.contains(&actor.id);
        let ok = actor.has(Role::Admin) || member || (!write && actor.reads_all());
        if ok {
            Ok(())
        } else {
            Err(ApiError::new(
                Token::Unauthorized,
                format!(
                    "{} is not granted {} project `{project_id}`; its creator lists members when creating it",
                    actor.id,
                    if write { "writes to" } else { "reads of" }
                ),
            ))
        }
    }

    /// Appends a Relay write's event: to `session_id`'s chain when it is an active session of
    /// `actor`, else to the project's audit chain. Returns the session id written to.
    async fn record_relay(
        &self,
        actor: &Actor,
        project_id: &str,
        session_id: Option<&str>,
        event_type: &str,
        payload: Value,
    ) -> ApiResult<String> {
        if let Some(sid) = session_id
            && cra_wire::id::is_canonical_uuid(sid)
            && let Ok(rec) = self.session_record(sid).await
            && rec.agent_id == actor.id
            && rec.is_active()
        {
            let t = self.ids.new_id();
            let s = self.ids.new_id();
            self.append_events(
                sid,
                &actor.id,
                vec![draft(&t, &s, None, event_type, payload)],
            )
            .await?;
            return Ok(sid.to_owned());
        }
        let sid = project_audit_session(project_id);
        let owner = format!("project:{project_id}");
        let t = self.ids.new_id();
        let s = self.ids.new_id();
        self.append_events(&sid, &owner, vec![draft(&t, &s, None, event_type, payload)])
            .await?;
        Ok(sid)
    }
}

/// `POST /v1/projects` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// The id.
    pub project_id: String,
    /// Display name.
    pub name: String,
    /// Actors besides the creator who may read and write.
    #[serde(default)]
    pub members: Vec<String>,
}

/// Creates a project and its audit chain.
#[utoipa::path(post, path = "/v1/projects", tag = "relay", request_body = Object,
    responses((status = 201, body = Object), (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub async fn create_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    crate::extract::JsonBody(body): crate::extract::JsonBody<CreateProject>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    actor.require(
        &[Role::Agent, Role::Author, Role::Operator],
        "creating a project",
    )?;
    crate::routes::sessions::check_id_field("/project_id", &body.project_id)?;
    for (i, m) in body.members.iter().enumerate() {
        crate::routes::sessions::check_id_field(&format!("/members/{i}"), m)?;
    }
    let (pid, name) = (body.project_id.clone(), body.name.clone());
    let project = state
        .relay_call(move |r| r.create_project(&pid, &name))
        .await?;
    let sid = project_audit_session(&body.project_id);
    let owner = format!("project:{}", body.project_id);
    let now = cra_wire::clock::format_timestamp(state.clock.now());
    let rec = cra_carp::store::SessionRecord {
        session_id: sid.clone(),
        agent_id: owner.clone(),
        parent_session_id: None,
        created_at: now,
        ended_at: None,
    };
    state.carp(move |s| s.create_session(&rec)).await?;
    let t = state.ids.new_id();
    let s = state.ids.new_id();
    state
        .append_events(
            &sid,
            &owner,
            vec![
                draft(&t, &s, None, "session.started", json!({"agent_id": owner, "goal": format!("audit chain of project {}", body.project_id), "project_id": body.project_id, "callsign": crate::routes::sessions::callsign_for(&sid)})),
                draft(&t, &s, None, "relay.project.created", json!({"project_id": body.project_id, "name": body.name, "created_by": {"id": actor.id, "type": actor.actor_type.as_str()}, "members": body.members})),
            ],
        )
        .await?;
    let mut v = serde_json::to_value(&project).map_err(|e| ApiError::internal("render", e))?;
    v["audit_session_id"] = json!(sid);
    Ok((StatusCode::CREATED, Json(v)))
}

/// A project.
#[utoipa::path(get, path = "/v1/projects/{project_id}", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    responses((status = 200, body = Object), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub async fn get_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, false).await?;
    let p = state.relay_call(move |r| r.project(&pid)).await?;
    serde_json::to_value(&p)
        .map(Json)
        .map_err(|e| ApiError::internal("render", e))
}

async fn set_archived(
    state: AppState,
    actor: Actor,
    pid: String,
    archive: bool,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, true).await?;
    let p2 = pid.clone();
    let p = state
        .relay_call(move |r| {
            if archive {
                r.archive(&p2)
            } else {
                r.unarchive(&p2)
            }
        })
        .await?;
    let ev = if archive {
        "relay.project.archived"
    } else {
        "relay.project.unarchived"
    };
    state
        .record_relay(
            &actor,
            &pid,
            None,
            ev,
            json!({"project_id": pid, "by": {"id": actor.id}}),
        )
        .await?;
    serde_json::to_value(&p)
        .map(Json)
        .map_err(|e| ApiError::internal("render", e))
}

/// Archives a project (writes refused until unarchived).
#[utoipa::path(post, path = "/v1/projects/{project_id}/archive", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), responses((status = 200, body = Object)))]
pub async fn archive(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    set_archived(state, actor, pid, true).await
}

/// Unarchives a project.
#[utoipa::path(post, path = "/v1/projects/{project_id}/unarchive", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), responses((status = 200, body = Object)))]
pub async fn unarchive(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    set_archived(state, actor, pid, false).await
}

/// §8.1 deposit.
#[utoipa::path(post, path = "/v1/projects/{project_id}/packages", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    request_body(content = Object, description = "A context package"),
    responses((status = 201, description = "Stored", body = Object), (status = 200, description = "Identical package already stored", body = Object),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 403, body = crate::openapi::ErrorBodySchema), (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub async fn deposit(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    state.require_project(&actor, &pid, true).await?;
    let ra = relay_actor(&actor);
    let p2 = pid.clone();
    let d = state
        .relay_call(move |r| r.deposit(&p2, &ra, &body))
        .await?;
    let wire = d.stored.to_wire();
    if d.created {
        state
            .record_relay(
                &actor,
                &pid,
                d.stored.package.session_id(),
                "relay.package.deposited",
                json!({"project_id": pid, "package_id": wire.get("package_id"), "content_hash": d.stored.content_hash, "created_by": {"id": actor.id, "type": actor.actor_type.as_str()}}),
            )
            .await?;
    }
    let status = if d.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(wire)).into_response())
}

/// Query of package listings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `latest` (default) or `relevant`.
    #[serde(default)]
    pub mode: Option<String>,
    /// How many.
    #[serde(default)]
    pub limit: Option<String>,
    /// For `relevant`.
    #[serde(default)]
    pub query: Option<String>,
    /// `awaiting_review` lists packages waiting for review.
    #[serde(default)]
    pub status: Option<String>,
}

fn parse_usize(name: &str, v: &Option<String>) -> ApiResult<Option<usize>> {
    v.as_deref()
        .map(|s| {
            s.parse::<usize>().map_err(|_| {
                ApiError::new(
                    Token::InvalidRequest,
                    format!("query parameter `{name}`: `{s}` is not a non-negative integer"),
                )
            })
        })
        .transpose()
}

/// §8.2 pull (latest / relevant) and the awaiting-review listing.
#[utoipa::path(get, path = "/v1/projects/{project_id}/packages", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("mode" = Option<String>, Query, description = "latest | relevant"),
           ("limit" = Option<u32>, Query, description = "How many"), ("query" = Option<String>, Query, description = "Search text (relevant)"),
           ("status" = Option<String>, Query, description = "awaiting_review")),
    responses((status = 200, body = Object), (status = 501, body = crate::openapi::ErrorBodySchema)))]
pub async fn list_packages(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, false).await?;
    let limit = parse_usize("limit", &q.limit)?;
    if let Some(s) = &q.status {
        if s != "awaiting_review" {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `status`: only `awaiting_review` is listed, not `{s}`"),
            ));
        }
        let pulled = state.relay_call(move |r| r.awaiting_review(&pid)).await?;
        return Ok(Json(
            json!({"packages": pulled.packages.iter().map(|p| p.to_wire()).collect::<Vec<_>>(), "quarantined": pulled.quarantined}),
        ));
    }
    match q.mode.as_deref() {
        None | Some("latest") => {
            let pulled = state
                .relay_call(move |r| r.pull_latest(&pid, limit))
                .await?;
            Ok(Json(
                json!({"packages": pulled.packages.iter().map(|p| p.to_wire()).collect::<Vec<_>>(), "quarantined": pulled.quarantined}),
            ))
        }
        Some("relevant") => {
            let query = cra_relay::store::SearchQuery {
                project_id: pid,
                query: q.query.clone().unwrap_or_default(),
                limit: limit.unwrap_or(5),
                topic: None,
                package_type: None,
                tags: Vec::new(),
                since: None,
                until: None,
            };
            let hits = state.relay_call(move |r| r.pull_relevant(&query)).await?;
            let hits: Vec<Value> = hits
                .iter()
                .map(|h| json!({"package": h.package.to_wire(), "score": h.score, "field": h.field, "chunk": h.chunk}))
                .collect();
            Ok(Json(json!({"hits": hits})))
        }
        Some(o) => Err(ApiError::new(
            Token::InvalidRequest,
            format!("query parameter `mode`: `{o}` is not latest or relevant"),
        )),
    }
}

/// §8.2 pull specific.
#[utoipa::path(get, path = "/v1/packages/{package_id}", tag = "relay",
    params(("package_id" = String, Path, description = "The package")),
    responses((status = 200, body = Object), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub async fn get_package(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let p = state.relay_call(move |r| r.pull_specific(&id)).await?;
    state
        .require_project(&actor, p.package.project_id(), false)
        .await?;
    Ok(Json(p.to_wire()))
}

/// `POST /v1/packages/{id}/flag` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagBody {
    /// `human` or `agent`.
    pub review_type: String,
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
}

/// §8.5 flag_for_review.
#[utoipa::path(post, path = "/v1/packages/{package_id}/flag", tag = "relay",
    params(("package_id" = String, Path, description = "The package")), request_body = Object,
    responses((status = 200, body = Object), (status = 400, body = crate::openapi::ErrorBodySchema)))]
pub async fn flag(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    crate::extract::JsonBody(body): crate::extract::JsonBody<FlagBody>,
) -> ApiResult<Json<Value>> {
    let pid = state.writable_package_project(&actor, &id).await?;
    let ra = relay_actor(&actor);
    let (rt, note) = (body.review_type.clone(), body.note.clone());
    let id3 = id.clone();
    let p = state
        .relay_call(move |r| r.flag_for_review(&id3, &rt, note.as_deref(), &ra))
        .await?;
    state
        .record_relay(&actor, &pid, p.package.session_id(), "relay.package.flagged",
            json!({"project_id": pid, "package_id": id, "review_type": body.review_type, "note": body.note, "content_hash": p.content_hash, "by": {"id": actor.id}}))
        .await?;
    Ok(Json(p.to_wire()))
}

/// `POST /v1/packages/{id}/review` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewBody {
    /// `complete` or `revision_requested`.
    pub outcome: String,
    /// The reviewer's note.
    #[serde(default)]
    pub note: Option<String>,
}

/// Review of a flagged package.
#[utoipa::path(post, path = "/v1/packages/{package_id}/review", tag = "relay",
    params(("package_id" = String, Path, description = "The package")), request_body = Object,
    responses((status = 200, body = Object), (status = 400, body = crate::openapi::ErrorBodySchema)))]
pub async fn review(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    crate::extract::JsonBody(body): crate::extract::JsonBody<ReviewBody>,
) -> ApiResult<Json<Value>> {
    let pid = state.writable_package_project(&actor, &id).await?;
    let ra = relay_actor(&actor);
    let (outcome, note) = (body.outcome.clone(), body.note.clone());
    let id3 = id.clone();
    let p = state
        .relay_call(move |r| r.review(&id3, &outcome, note.as_deref(), &ra))
        .await?;
    state
        .record_relay(&actor, &pid, None, "relay.package.reviewed",
            json!({"project_id": pid, "package_id": id, "outcome": body.outcome, "note": body.note, "content_hash": p.content_hash, "reviewer": {"id": actor.id, "type": actor.actor_type.as_str()}}))
        .await?;
    Ok(Json(p.to_wire()))
}

/// §8.6 assert_fact.
#[utoipa::path(post, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), request_body = Object,
    responses((status = 201, body = Object), (status = 400, body = crate::openapi::ErrorBodySchema)))]
pub async fn assert_fact(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    RawJson(body): RawJson,
) -> ApiResult<(StatusCode, Json<Value>)> {
    state.require_project(&actor, &pid, true).await?;
    let ra = relay_actor(&actor);
    let session = body
        .get("session_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let p2 = pid.clone();
    let rec = state
        .relay_call(move |r| r.assert_fact(&p2, &ra, &body))
        .await?;
    let v = serde_json::to_value(&rec).map_err(|e| ApiError::internal("render", e))?;
    state
        .record_relay(
            &actor,
            &pid,
            session.as_deref(),
            "relay.fact.asserted",
            json!({"project_id": pid, "fact": v["fact"], "by": {"id": actor.id}}),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// Fact query parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactParams {
    /// Subject.
    #[serde(default)]
    pub subject: Option<String>,
    /// Predicate.
    #[serde(default)]
    pub predicate: Option<String>,
    /// Valid-time instant.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Transaction-time instant.
    #[serde(default)]
    pub recorded_as_of: Option<String>,
    /// `true`: every row.
    #[serde(default)]
    pub history: Option<String>,
}

/// Current facts, point-in-time views, or history.
#[utoipa::path(get, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("subject" = Option<String>, Query, description = "Subject"),
           ("predicate" = Option<String>, Query, description = "Predicate"), ("as_of" = Option<String>, Query, description = "Valid time"),
           ("recorded_as_of" = Option<String>, Query, description = "Transaction time"), ("history" = Option<bool>, Query, description = "Every row")),
    responses((status = 200, body = [Object])))]
pub async fn facts(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<FactParams>,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, false).await?;
    let view = match (&q.as_of, &q.recorded_as_of, q.history.as_deref()) {
        (None, None, None | Some("false")) => FactView::Current,
        (Some(t), None, None | Some("false")) => FactView::AsOfValid(t.clone()),
        (None, Some(t), None | Some("false")) => FactView::AsOfRecorded(t.clone()),
        (None, None, Some("true")) => FactView::History,
        _ => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                "give at most one of as_of, recorded_as_of, history=true",
            ));
        }
    };
    let fq = FactQuery {
        subject: q.subject.clone(),
        predicate: q.predicate.clone(),
        view,
    };
    let rows = state.relay_call(move |r| r.facts(&pid, &fq)).await?;
    serde_json::to_value(&rows)
        .map(Json)
        .map_err(|e| ApiError::internal("render", e))
}

/// Invalidate query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvalidateParams {
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
}

/// §8.7 invalidate_fact.
#[utoipa::path(delete, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("subject" = String, Query, description = "Subject"), ("predicate" = String, Query, description = "Predicate")),
    responses((status = 200, body = Object)))]
pub async fn invalidate_fact(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<InvalidateParams>,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, true).await?;
    let (p2, s, p) = (pid.clone(), q.subject.clone(), q.predicate.clone());
    let n = state
        .relay_call(move |r| r.invalidate_fact(&p2, &s, &p))
        .await?;
    state
        .record_relay(&actor, &pid, None, "relay.fact.invalidated",
            json!({"project_id": pid, "subject": q.subject, "predicate": q.predicate, "invalidated": n, "by": {"id": actor.id}}))
        .await?;
    Ok(Json(json!({"invalidated": n})))
}

/// Orient query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrientParams {
    /// Window in days (default 14).
    #[serde(default)]
    pub window_days: Option<String>,
}

/// §8.3 orient.
#[utoipa::path(get, path = "/v1/projects/{project_id}/orient", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("window_days" = Option<u32>, Query, description = "Window")),
    responses((status = 200, body = Object)))]
pub async fn orient(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<OrientParams>,
) -> ApiResult<Json<Value>> {
    state.require_project(&actor, &pid, false).await?;
    let w =
        parse_usize("window_days", &q.window_days)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let b = state.relay_call(move |r| r.orient(&pid, w)).await?;
    serde_json::to_value(&b)
        .map(Json)
        .map_err(|e| ApiError::internal("render", e))
}

/// Orchestrate query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrchestrateParams {
    /// One project (absent: every project the caller may read).
    #[serde(default)]
    pub project: Option<String>,
    /// What to focus snippets on.
    #[serde(default)]
    pub focus: Option<String>,
    /// How many snippets.
    #[serde(default)]
    pub snippets: Option<String>,
}

/// §8.4 orchestrate (one project; the global form needs a readable-project filter, so it is
/// offered to readers of every project: auditors, operators, admins).
#[utoipa::path(get, path = "/v1/orchestrate", tag = "relay",
    params(("project" = Option<String>, Query, description = "The project"), ("focus" = Option<String>, Query, description = "Focus"), ("snippets" = Option<u32>, Query, description = "Snippets")),
    responses((status = 200, body = Object)))]
pub async fn orchestrate(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<OrchestrateParams>,
) -> ApiResult<Json<Value>> {
    match &q.project {
        Some(p) => state.require_project(&actor, p, false).await?,
        None => actor.require(
            &[Role::Auditor, Role::Operator],
            "orchestrating across every project",
        )?,
    }
    let snippets = parse_usize("snippets", &q.snippets)?;
    let b = state
        .relay_call(move |r| {
            r.orchestrate(q.project.as_deref(), q.focus.as_deref(), snippets, None)
        })
        .await?;
    serde_json::to_value(&b)
        .map(Json)
        .map_err(|e| ApiError::internal("render", e))
}

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
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use cra_relay::fact::{FactQuery, FactRecord, FactView};
use cra_relay::store::SearchQuery;
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
    crate::service::sessions::check_id_field("/project_id", &body.project_id)?;
    for (i, m) in body.members.iter().enumerate() {
        crate::service::sessions::check_id_field(&format!("/members/{i}"), m)?;
    }
    let (pid, name) = (body.project_id.clone(), body.name.clone());
    let project = state
        .relay_call(move |r| r.create_project(&pid, &name))
        .await?;
    let sid = state
        .open_audit_chain(
            &body.project_id,
            &body.name,
            &actor,
            &body.members,
            Value::Null,
        )
        .await?;
    let mut v = serde_json::to_value(&project).map_err(|e| ApiError::internal("render", e))?;
    v["audit_session_id"] = json!(sid);
    Ok((StatusCode::CREATED, Json(v)))
}

impl Runtime {
    /// Starts the audit chain of a project: `session.started`, then `relay.project.created`
    /// with the creator and members (the grants [`Runtime::project_grants`] reads) and, for an
    /// imported project, `imported` (what the import brought). Returns the chain's session id.
    async fn open_audit_chain(
        &self,
        project_id: &str,
        name: &str,
        creator: &Actor,
        members: &[String],
        imported: Value,
    ) -> ApiResult<String> {
        let sid = project_audit_session(project_id);
        let owner = format!("project:{project_id}");
        let now = cra_wire::clock::format_timestamp(self.clock.now());
        let rec = cra_carp::store::SessionRecord {
            session_id: sid.clone(),
            agent_id: owner.clone(),
            parent_session_id: None,
            created_at: now,
            ended_at: None,
        };
        self.carp(move |s| s.create_session(&rec)).await?;
        let mut created = json!({"project_id": project_id, "name": name, "created_by": {"id": creator.id, "type": creator.actor_type.as_str()}, "members": members});
        if !imported.is_null() {
            created["imported"] = imported;
        }
        let t = self.ids.new_id();
        let s = self.ids.new_id();
        self.append_events(
            &sid,
            &owner,
            vec![
                draft(&t, &s, None, "session.started", json!({"agent_id": owner, "goal": format!("audit chain of project {project_id}"), "project_id": project_id, "callsign": crate::service::sessions::callsign_for(&sid)})),
                draft(&t, &s, None, "relay.project.created", created),
            ],
        )
        .await?;
        Ok(sid)
    }
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
    /// How many (1 to 1000, default 5).
    #[serde(default)]
    pub limit: Option<String>,
    /// The search text (`relevant`).
    #[serde(default)]
    pub query: Option<String>,
    /// `awaiting_review` lists packages waiting for review.
    #[serde(default)]
    pub status: Option<String>,
    /// Only packages with this `topic`.
    #[serde(default)]
    pub topic: Option<String>,
    /// Only packages of this `package_type`.
    #[serde(default)]
    pub package_type: Option<String>,
    /// Only packages carrying every one of these tags (comma-separated).
    #[serde(default)]
    pub tags: Option<String>,
    /// Only packages whose `created_at` is at or after this instant (RFC 3339).
    #[serde(default)]
    pub since: Option<String>,
    /// Only packages whose `created_at` is before this instant (RFC 3339).
    #[serde(default)]
    pub until: Option<String>,
}

impl ListQuery {
    fn has_filters(&self) -> bool {
        self.topic.is_some()
            || self.package_type.is_some()
            || self.tags.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    fn search_query(&self, project_id: String, limit: Option<usize>) -> SearchQuery {
        SearchQuery {
            project_id,
            query: self.query.clone().unwrap_or_default(),
            limit: limit.unwrap_or(0),
            topic: self.topic.clone(),
            package_type: self.package_type.clone(),
            tags: self
                .tags
                .as_deref()
                .map(|t| {
                    t.split(',')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            since: self.since.clone(),
            until: self.until.clone(),
        }
    }
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
///
/// `latest` and the awaiting-review listing answer `{"packages": [...], "quarantined": [...]}`
/// (newest deposit first); `relevant` answers the same plus `matches`, in the same order as
/// `packages` (best first): `{package_id, score, field, chunk}`, the best chunk of each package
/// and its BM25 score. The filters (topic, package_type, tags, since, until) apply to both
/// modes. A store without search answers `relevant` with 501 `search_not_supported`.
#[utoipa::path(get, path = "/v1/projects/{project_id}/packages", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("mode" = Option<String>, Query, description = "latest | relevant"),
           ("limit" = Option<u32>, Query, description = "How many (1-1000, default 5)"), ("query" = Option<String>, Query, description = "Search text (relevant)"),
           ("status" = Option<String>, Query, description = "awaiting_review"),
           ("topic" = Option<String>, Query, description = "Only this topic"), ("package_type" = Option<String>, Query, description = "Only this package_type"),
           ("tags" = Option<String>, Query, description = "Only packages with every one of these comma-separated tags"),
           ("since" = Option<String>, Query, description = "created_at at or after (RFC 3339)"), ("until" = Option<String>, Query, description = "created_at before (RFC 3339)")),
    responses((status = 200, description = "{packages, quarantined} (+ matches for relevant)", body = Object),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 501, body = crate::openapi::ErrorBodySchema)))]
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
        if q.mode.is_some() || q.query.is_some() || q.has_filters() {
            return Err(ApiError::new(
                Token::InvalidRequest,
                "query parameter `status`: the awaiting-review listing takes no mode, query or filters",
            ));
        }
        let pulled = state.relay_call(move |r| r.awaiting_review(&pid)).await?;
        return Ok(Json(pulled.to_wire()));
    }
    match q.mode.as_deref() {
        None | Some("latest") => {
            if q.query.is_some() {
                return Err(ApiError::new(
                    Token::InvalidRequest,
                    "query parameter `query`: only mode=relevant searches; add mode=relevant",
                ));
            }
            let pulled = if q.has_filters() {
                let sq = q.search_query(pid, limit);
                state
                    .relay_call(move |r| r.pull_latest_matching(&sq))
                    .await?
            } else {
                state
                    .relay_call(move |r| r.pull_latest(&pid, limit))
                    .await?
            };
            Ok(Json(pulled.to_wire()))
        }
        Some("relevant") => {
            let sq = q.search_query(pid, limit);
            let found = state.relay_call(move |r| r.search(&sq)).await?;
            Ok(Json(found.to_wire()))
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

/// Review of a flagged package. The reviewer is the authenticated actor: a `human` review is
/// closed only by a human who is not the package's author, an `agent` review only by an agent
/// who is not; anyone else gets 403 `review_not_allowed` and nothing changes (specs/relay.md,
/// "Review gates").
#[utoipa::path(post, path = "/v1/packages/{package_id}/review", tag = "relay",
    params(("package_id" = String, Path, description = "The package")), request_body = Object,
    responses((status = 200, body = Object), (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, description = "`unauthorized` (no grant) or `review_not_allowed` (review gate)", body = crate::openapi::ErrorBodySchema)))]
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
    let v = rec.to_wire();
    state
        .record_relay(
            &actor,
            &pid,
            session.as_deref(),
            "relay.fact.asserted",
            json!({"project_id": pid, "fact": v, "by": {"id": actor.id}}),
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

/// Current facts, point-in-time views, or history: a JSON array of §7 fact objects (the wire
/// shape, unknown members included; the runtime's recorded and superseded times are not on the
/// wire, `recorded_as_of` queries them), ordered by subject, predicate, valid_from.
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
    let history = match q.history.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `history`: `{other}` is not true or false"),
            ));
        }
    };
    let view = match (&q.as_of, &q.recorded_as_of, history) {
        (None, None, false) => FactView::Current,
        (Some(t), None, false) => FactView::AsOfValid(t.clone()),
        (None, Some(t), false) => FactView::AsOfRecorded(t.clone()),
        (None, None, true) => FactView::History,
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
    Ok(Json(Value::Array(
        rows.iter().map(FactRecord::to_wire).collect(),
    )))
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
    /// `json` (default): the OrientationBundle; `markdown`: the briefing as `text/markdown`.
    #[serde(default)]
    pub format: Option<String>,
}

/// The media type of the orient briefing.
pub const MARKDOWN: &str = "text/markdown; charset=utf-8";

/// §8.3 orient: the OrientationBundle, or with `format=markdown` the same as a Markdown
/// briefing an agent can paste into its system prompt.
#[utoipa::path(get, path = "/v1/projects/{project_id}/orient", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("window_days" = Option<u32>, Query, description = "Window"),
           ("format" = Option<String>, Query, description = "json (default) | markdown")),
    responses((status = 200, description = "The OrientationBundle (JSON) or the briefing (text/markdown)", body = Object),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub async fn orient(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<OrientParams>,
) -> ApiResult<Response> {
    let markdown = match q.format.as_deref() {
        None | Some("json") => false,
        Some("markdown") => true,
        Some(o) => {
            return Err(ApiError::new(
                Token::InvalidRequest,
                format!("query parameter `format`: `{o}` is not json or markdown"),
            ));
        }
    };
    state.require_project(&actor, &pid, false).await?;
    let w =
        parse_usize("window_days", &q.window_days)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let b = state.relay_call(move |r| r.orient(&pid, w)).await?;
    if markdown {
        let text = cra_relay::digest::orientation_markdown(&b);
        return Ok(([(CONTENT_TYPE, MARKDOWN)], text).into_response());
    }
    serde_json::to_value(&b)
        .map(|v| Json(v).into_response())
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

/// The largest import bundle accepted, in bytes. Import is admin-only and restores a whole
/// store, so it is not bound by `limits.max_body_bytes` (a store of 10,000 packages exports
/// to tens of megabytes).
pub const IMPORT_MAX_BYTES: usize = 512 * 1024 * 1024;

fn export_error(e: cra_relay::export::ExportError) -> ApiError {
    let body = e.to_body();
    let mut a = ApiError::new(e.token(), body.message.clone());
    a.body = body;
    a
}

async fn export_bundle(state: AppState, project: Option<String>) -> ApiResult<Response> {
    let files = state
        .relay_call(move |r| {
            let all = r.store().snapshot()?;
            let snapshot = match &project {
                Some(p) => {
                    r.project(p)?;
                    cra_relay::export::only_project(&all, p)
                }
                None => all,
            };
            Ok(cra_relay::export::render(&snapshot)?)
        })
        .await?;
    Ok((
        [(CONTENT_TYPE, cra_relay::export::BUNDLE_MEDIA_TYPE)],
        cra_relay::export::bundle(&files),
    )
        .into_response())
}

/// Export (§10.3) of every project, as one NDJSON bundle: for each export file (projects,
/// packages, facts, sessions, reviews, then the manifest) a header line `{"file", "lines"}`
/// followed by the file's lines, byte for byte what `cra relay export DIR` writes. Admin only.
#[utoipa::path(get, path = "/v1/export", tag = "relay",
    responses((status = 200, description = "The bundle (application/x-ndjson)", body = String),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub async fn export_all(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<Response> {
    actor.require(&[Role::Admin], "exporting Relay data")?;
    export_bundle(state, None).await
}

/// Export of one project (its record, packages, facts with full history, sessions, review
/// records), as the bundle of `GET /v1/export`. Admin only.
#[utoipa::path(get, path = "/v1/projects/{project_id}/export", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    responses((status = 200, description = "The bundle (application/x-ndjson)", body = String),
              (status = 403, body = crate::openapi::ErrorBodySchema), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub async fn export_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Response> {
    actor.require(&[Role::Admin], "exporting Relay data")?;
    export_bundle(state, Some(pid)).await
}

/// Import query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportParams {
    /// Actors (comma-separated) granted every imported project besides the importing admin.
    #[serde(default)]
    pub members: Option<String>,
}

/// Import (§10.3) of a bundle (`GET /v1/export`'s form, `Content-Type: application/x-ndjson`)
/// into an empty Relay store. Every package hash and file digest is verified before anything
/// is written (a tampered package: 409 `integrity_error` naming it, nothing imported); the
/// restore is one transaction; each imported project then gets its audit chain with the
/// importing admin as creator and `members` as members. Admin only.
#[utoipa::path(post, path = "/v1/import", tag = "relay",
    params(("members" = Option<String>, Query, description = "Comma-separated actors granted the imported projects")),
    request_body(content = String, description = "An export bundle", content_type = "application/x-ndjson"),
    responses((status = 201, body = Object), (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema), (status = 409, body = crate::openapi::ErrorBodySchema),
              (status = 413, body = crate::openapi::ErrorBodySchema), (status = 415, body = crate::openapi::ErrorBodySchema)))]
pub async fn import(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ImportParams>,
    req: axum::extract::Request,
) -> ApiResult<(StatusCode, Json<Value>)> {
    actor.require(&[Role::Admin], "importing Relay data")?;
    let ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if essence != cra_relay::export::BUNDLE_MEDIA_TYPE {
        return Err(ApiError::new(
            Token::UnsupportedMediaType,
            format!(
                "the body is `{ct}`; send the export bundle as `Content-Type: {}`",
                cra_relay::export::BUNDLE_MEDIA_TYPE
            ),
        ));
    }
    let members: Vec<String> = q
        .members
        .as_deref()
        .map(|m| {
            m.split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for (i, m) in members.iter().enumerate() {
        crate::service::sessions::check_id_field(&format!("/members/{i}"), m)?;
    }
    let bytes = crate::extract::read_body(req, IMPORT_MAX_BYTES).await?;
    let snapshot = crate::error::run_blocking("the import check failed", move || {
        cra_relay::export::unbundle(&bytes).and_then(|f| cra_relay::export::parse(&f))
    })
    .await?
    .map_err(export_error)?;
    for p in &snapshot.projects {
        if self_has_chain(&state, &p.project_id).await? {
            return Err(ApiError::new(
                Token::AlreadyExists,
                format!(
                    "project `{}` already has an audit chain here; import into a server whose Relay store is empty",
                    p.project_id
                ),
            ));
        }
    }
    let store = state.relay.store().clone();
    let snap = snapshot.clone();
    crate::error::run_blocking("the import failed", move || store.restore(&snap))
        .await?
        .map_err(|e| export_error(cra_relay::export::ExportError::Store(e)))?;
    let count = |pid: &str| {
        json!({
            "packages": snapshot.packages.iter().filter(|p| p.package.project_id() == pid).count(),
            "facts": snapshot.facts.iter().filter(|f| f.fact.project_id == pid).count(),
            "sessions": snapshot.sessions.iter().filter(|s| s.project_id == pid).count(),
            "reviews": snapshot.reviews.iter().filter(|r| r.project_id == pid).count(),
        })
    };
    for p in &snapshot.projects {
        state
            .open_audit_chain(
                &p.project_id,
                &p.name,
                &actor,
                &members,
                count(&p.project_id),
            )
            .await?;
    }
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "imported": {
                "projects": snapshot.projects.len(),
                "packages": snapshot.packages.len(),
                "facts": snapshot.facts.len(),
                "sessions": snapshot.sessions.len(),
                "reviews": snapshot.reviews.len(),
            },
            "project_ids": snapshot.projects.iter().map(|p| p.project_id.clone()).collect::<Vec<_>>(),
            "members": members,
        })),
    ))
}

async fn self_has_chain(state: &AppState, project_id: &str) -> ApiResult<bool> {
    let sid = project_audit_session(project_id);
    Ok(state.carp(move |s| s.get_session(&sid)).await?.is_some())
}

//! Relay (Agentic Protocol v0.1) over HTTP: the routes of Relay §9.1 and those named in the
//! design (projects, archive, review, awaiting-review listing, fact queries). Each handler reads
//! its input and calls the Relay part of the service layer ([`crate::service::relay`]), which
//! holds the grants and records the events.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use cra_relay::fact::{FactQuery, FactRecord, FactView};
use cra_relay::store::SearchQuery;
use cra_wire::Token;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, QueryParams, RawJson};
use crate::routes::Caller;
use crate::service::relay::{CreateProject, Flag, PackageListing, Review};
use crate::state::AppState;

/// Creates a project and its audit chain.
#[utoipa::path(post, path = "/v1/projects", tag = "relay", request_body = crate::service::relay::CreateProject,
    responses((status = 201, body = crate::openapi::wire::CreatedProject), (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn create_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    JsonBody(body): JsonBody<CreateProject>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let created = state.create_project(&actor, body).await?;
    Ok((StatusCode::CREATED, Json(render(&created)?)))
}

/// A value's JSON for a response body.
fn render<T: serde::Serialize>(value: &T) -> ApiResult<Value> {
    serde_json::to_value(value).map_err(|e| ApiError::internal("render", e))
}

/// A project.
#[utoipa::path(get, path = "/v1/projects/{project_id}", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    responses((status = 200, body = crate::openapi::wire::Project), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(render(&state.project(&actor, &pid).await?)?))
}

/// Archives a project (writes refused until unarchived).
#[utoipa::path(post, path = "/v1/projects/{project_id}/archive", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), responses((status = 200, body = crate::openapi::wire::Project)))]
pub(crate) async fn archive(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(render(
        &state.set_archived(&actor, &pid, true).await?,
    )?))
}

/// Unarchives a project.
#[utoipa::path(post, path = "/v1/projects/{project_id}/unarchive", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), responses((status = 200, body = crate::openapi::wire::Project)))]
pub(crate) async fn unarchive(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(render(
        &state.set_archived(&actor, &pid, false).await?,
    )?))
}

/// Starts a Relay work session (§5.5) of the caller in a project it may write to.
#[utoipa::path(post, path = "/v1/projects/{project_id}/sessions", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    responses((status = 201, body = crate::openapi::wire::RelaySession), (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn start_session(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let session = state.start_relay_session(&actor, &pid).await?;
    Ok((StatusCode::CREATED, Json(render(&session)?)))
}

/// One Relay session of a project, with the packages deposited in it.
#[utoipa::path(get, path = "/v1/projects/{project_id}/sessions/{session_id}", tag = "relay",
    params(("project_id" = String, Path, description = "The project"),
           ("session_id" = String, Path, description = "The Relay session (sess_...)")),
    responses((status = 200, body = crate::openapi::wire::RelaySession), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get_session(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path((pid, sid)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(render(
        &state.relay_session(&actor, &pid, &sid).await?,
    )?))
}

/// Ends the caller's Relay session (only its own actor may).
#[utoipa::path(post, path = "/v1/projects/{project_id}/sessions/{session_id}/end", tag = "relay",
    params(("project_id" = String, Path, description = "The project"),
           ("session_id" = String, Path, description = "The Relay session (sess_...)")),
    responses((status = 200, body = crate::openapi::wire::RelaySession), (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn end_session(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path((pid, sid)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(render(
        &state.end_relay_session(&actor, &pid, &sid).await?,
    )?))
}

/// §8.1 deposit.
#[utoipa::path(post, path = "/v1/projects/{project_id}/packages", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    request_body(content = crate::openapi::wire::RelayPackage, description = "A context package"),
    responses((status = 201, description = "Stored", body = crate::openapi::wire::RelayPackage), (status = 200, description = "Identical package already stored", body = crate::openapi::wire::RelayPackage),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 403, body = crate::openapi::ErrorBodySchema), (status = 409, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn deposit(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    RawJson(body): RawJson,
) -> ApiResult<Response> {
    let d = state.deposit(&actor, &pid, body).await?;
    let status = if d.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(d.stored.to_wire())).into_response())
}

/// Query of package listings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
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
    /// The listing asked for, or 400 `invalid_request` naming the parameter that does not fit.
    fn listing(&self, project_id: &str) -> ApiResult<PackageListing> {
        let limit = parse_usize("limit", &self.limit)?;
        let bad = |m: String| Err(ApiError::new(Token::InvalidRequest, m));
        if let Some(s) = &self.status {
            if s != "awaiting_review" {
                return bad(format!(
                    "query parameter `status`: only `awaiting_review` is listed, not `{s}`"
                ));
            }
            if self.mode.is_some() || self.query.is_some() || self.has_filters() {
                return bad("query parameter `status`: the awaiting-review listing takes no mode, query or filters".into());
            }
            return Ok(PackageListing::AwaitingReview);
        }
        let query = self.search_query(project_id.to_owned(), limit);
        match self.mode.as_deref() {
            None | Some("latest") if self.query.is_some() => bad(
                "query parameter `query`: only mode=relevant searches; add mode=relevant".into(),
            ),
            None | Some("latest") if self.has_filters() => {
                Ok(PackageListing::LatestMatching(query))
            }
            None | Some("latest") => Ok(PackageListing::Latest { limit }),
            Some("relevant") => Ok(PackageListing::Relevant(query)),
            Some(o) => bad(format!(
                "query parameter `mode`: `{o}` is not latest or relevant"
            )),
        }
    }

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
    responses((status = 200, description = "{packages, quarantined} (+ matches for relevant)", body = crate::openapi::wire::PackageListing),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 501, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn list_packages(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<Value>> {
    let listing = q.listing(&pid)?;
    Ok(Json(state.packages(&actor, &pid, listing).await?.to_wire()))
}

/// `?project_id=` on the package routes: the project the package must belong to. Without it, the
/// package is that of the one project holding the id that the caller may use (409
/// `ambiguous_package_id` when there are several).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PackageScope {
    /// The project; a package of another project is `package_not_found`.
    #[serde(default)]
    pub project_id: Option<String>,
}

/// §8.2 pull specific.
#[utoipa::path(get, path = "/v1/packages/{package_id}", tag = "relay",
    params(("package_id" = String, Path, description = "The package"),
           ("project_id" = Option<String>, Query, description = "Only in this project")),
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 404, body = crate::openapi::ErrorBodySchema),
              (status = 409, description = "`ambiguous_package_id`: several readable projects hold the id", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get_package(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    QueryParams(scope): QueryParams<PackageScope>,
) -> ApiResult<Json<Value>> {
    let scope = scope.project_id.as_deref();
    Ok(Json(state.package(&actor, &id, scope).await?.to_wire()))
}

/// §8.2 pull specific, in a named project (404 `package_not_found` when it has no such package).
#[utoipa::path(get, path = "/v1/projects/{project_id}/packages/{package_id}", tag = "relay",
    params(("project_id" = String, Path, description = "The project"),
           ("package_id" = String, Path, description = "The package")),
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn get_project_package(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path((pid, id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        state.package(&actor, &id, Some(&pid)).await?.to_wire(),
    ))
}

/// §8.5 flag_for_review, in a named project.
#[utoipa::path(post, path = "/v1/projects/{project_id}/packages/{package_id}/flag", tag = "relay",
    params(("project_id" = String, Path, description = "The project"),
           ("package_id" = String, Path, description = "The package")), request_body = crate::service::relay::Flag,
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn flag_project_package(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path((pid, id)): Path<(String, String)>,
    JsonBody(body): JsonBody<Flag>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        state.flag(&actor, &id, Some(&pid), body).await?.to_wire(),
    ))
}

/// Review of a flagged package, in a named project (the review gates of `review` apply).
#[utoipa::path(post, path = "/v1/projects/{project_id}/packages/{package_id}/review", tag = "relay",
    params(("project_id" = String, Path, description = "The project"),
           ("package_id" = String, Path, description = "The package")), request_body = crate::service::relay::Review,
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn review_project_package(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path((pid, id)): Path<(String, String)>,
    JsonBody(body): JsonBody<Review>,
) -> ApiResult<Json<Value>> {
    Ok(Json(
        state.review(&actor, &id, Some(&pid), body).await?.to_wire(),
    ))
}

/// §8.5 flag_for_review.
#[utoipa::path(post, path = "/v1/packages/{package_id}/flag", tag = "relay",
    params(("package_id" = String, Path, description = "The package"),
           ("project_id" = Option<String>, Query, description = "Only in this project")), request_body = crate::service::relay::Flag,
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 409, description = "`ambiguous_package_id`: several writable projects hold the id", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn flag(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    QueryParams(scope): QueryParams<PackageScope>,
    JsonBody(body): JsonBody<Flag>,
) -> ApiResult<Json<Value>> {
    let scope = scope.project_id.as_deref();
    Ok(Json(state.flag(&actor, &id, scope, body).await?.to_wire()))
}

/// Review of a flagged package. The reviewer is the authenticated actor: a `human` review is
/// closed only by a human who is not the package's author, an `agent` review only by an agent
/// who is not; anyone else gets 403 `review_not_allowed` and nothing changes (specs/relay.md,
/// "Review gates").
#[utoipa::path(post, path = "/v1/packages/{package_id}/review", tag = "relay",
    params(("package_id" = String, Path, description = "The package"),
           ("project_id" = Option<String>, Query, description = "Only in this project")), request_body = crate::service::relay::Review,
    responses((status = 200, body = crate::openapi::wire::RelayPackage), (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, description = "`unauthorized` (no grant) or `review_not_allowed` (review gate)", body = crate::openapi::ErrorBodySchema),
              (status = 409, description = "`ambiguous_package_id`: several writable projects hold the id", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn review(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    QueryParams(scope): QueryParams<PackageScope>,
    JsonBody(body): JsonBody<Review>,
) -> ApiResult<Json<Value>> {
    let scope = scope.project_id.as_deref();
    Ok(Json(
        state.review(&actor, &id, scope, body).await?.to_wire(),
    ))
}

/// §8.6 assert_fact.
#[utoipa::path(post, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project")), request_body = crate::openapi::wire::AssertFact,
    responses((status = 201, body = crate::openapi::wire::RelayFact), (status = 400, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn assert_fact(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    RawJson(body): RawJson,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let fact = state.assert_fact(&actor, &pid, body).await?;
    Ok((StatusCode::CREATED, Json(fact.to_wire())))
}

/// Fact query parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FactParams {
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

impl FactParams {
    /// The fact read these parameters ask for: at most one of `as_of`, `recorded_as_of` and
    /// `history=true`.
    fn query(&self) -> ApiResult<FactQuery> {
        let history = match self.history.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::new(
                    Token::InvalidRequest,
                    format!("query parameter `history`: `{other}` is not true or false"),
                ));
            }
        };
        let view = match (&self.as_of, &self.recorded_as_of, history) {
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
        Ok(FactQuery {
            subject: self.subject.clone(),
            predicate: self.predicate.clone(),
            view,
        })
    }
}

/// Current facts, point-in-time views, or history: a JSON array of §7 fact objects (the wire
/// shape, unknown members included; the runtime's recorded and superseded times are not on the
/// wire, `recorded_as_of` queries them), ordered by subject, predicate, valid_from.
#[utoipa::path(get, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("subject" = Option<String>, Query, description = "Subject"),
           ("predicate" = Option<String>, Query, description = "Predicate"), ("as_of" = Option<String>, Query, description = "Valid time"),
           ("recorded_as_of" = Option<String>, Query, description = "Transaction time"), ("history" = Option<bool>, Query, description = "Every row")),
    responses((status = 200, body = [crate::openapi::wire::RelayFact])))]
pub(crate) async fn facts(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<FactParams>,
) -> ApiResult<Json<Value>> {
    let rows = state.facts(&actor, &pid, q.query()?).await?;
    Ok(Json(Value::Array(
        rows.iter().map(FactRecord::to_wire).collect(),
    )))
}

/// Invalidate query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InvalidateParams {
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
}

/// §8.7 invalidate_fact.
#[utoipa::path(delete, path = "/v1/projects/{project_id}/facts", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("subject" = String, Query, description = "Subject"), ("predicate" = String, Query, description = "Predicate")),
    responses((status = 200, body = crate::openapi::wire::Invalidated)))]
pub(crate) async fn invalidate_fact(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
    QueryParams(q): QueryParams<InvalidateParams>,
) -> ApiResult<Json<Value>> {
    let n = state
        .invalidate_fact(&actor, &pid, &q.subject, &q.predicate)
        .await?;
    Ok(Json(json!({"invalidated": n})))
}

/// Orient query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrientParams {
    /// Window in days (default 14).
    #[serde(default)]
    pub window_days: Option<String>,
    /// `json` (default): the OrientationBundle; `markdown`: the briefing as `text/markdown`.
    #[serde(default)]
    pub format: Option<String>,
}

/// The media type of the orient briefing.
pub(crate) const MARKDOWN: &str = "text/markdown; charset=utf-8";

/// §8.3 orient: the OrientationBundle, or with `format=markdown` the same as a Markdown
/// briefing an agent can paste into its system prompt.
#[utoipa::path(get, path = "/v1/projects/{project_id}/orient", tag = "relay",
    params(("project_id" = String, Path, description = "The project"), ("window_days" = Option<u32>, Query, description = "Window"),
           ("format" = Option<String>, Query, description = "json (default) | markdown")),
    responses((status = 200, description = "The OrientationBundle (JSON) or the briefing (text/markdown)", body = crate::openapi::wire::OrientationBundle),
              (status = 400, body = crate::openapi::ErrorBodySchema), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn orient(
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
    let w =
        parse_usize("window_days", &q.window_days)?.map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let b = state.orient(&actor, &pid, w).await?;
    if markdown {
        let text = cra_relay::digest::orientation_markdown(&b);
        return Ok(([(CONTENT_TYPE, MARKDOWN)], text).into_response());
    }
    Ok(Json(render(&b)?).into_response())
}

/// Orchestrate query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OrchestrateParams {
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
    responses((status = 200, body = crate::openapi::wire::DigestBundle)))]
pub(crate) async fn orchestrate(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<OrchestrateParams>,
) -> ApiResult<Json<Value>> {
    let snippets = parse_usize("snippets", &q.snippets)?;
    let b = state
        .orchestrate(&actor, q.project, q.focus, snippets)
        .await?;
    Ok(Json(render(&b)?))
}

/// The largest import bundle accepted, in bytes. Import is admin-only and restores a whole
/// store, so it is not bound by `limits.max_body_bytes` (a store of 10,000 packages exports
/// to tens of megabytes).
pub(crate) const IMPORT_MAX_BYTES: usize = 512 * 1024 * 1024;

/// The export bundle as a response.
fn bundle_response(bundle: Vec<u8>) -> Response {
    (
        [(CONTENT_TYPE, cra_relay::export::BUNDLE_MEDIA_TYPE)],
        bundle,
    )
        .into_response()
}

/// Export (§10.3) of every project, as one NDJSON bundle: for each export file (projects,
/// packages, facts, sessions, reviews, then the manifest) a header line `{"file", "lines"}`
/// followed by the file's lines, byte for byte what `cra relay export DIR` writes. Admin only.
#[utoipa::path(get, path = "/v1/export", tag = "relay",
    responses((status = 200, description = "The bundle (application/x-ndjson)", body = String),
              (status = 403, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn export_all(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<Response> {
    Ok(bundle_response(state.export(&actor, None).await?))
}

/// Export of one project (its record, packages, facts with full history, sessions, review
/// records), as the bundle of `GET /v1/export`. Admin only.
#[utoipa::path(get, path = "/v1/projects/{project_id}/export", tag = "relay",
    params(("project_id" = String, Path, description = "The project")),
    responses((status = 200, description = "The bundle (application/x-ndjson)", body = String),
              (status = 403, body = crate::openapi::ErrorBodySchema), (status = 404, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn export_project(
    State(state): State<AppState>,
    Caller(actor): Caller,
    Path(pid): Path<String>,
) -> ApiResult<Response> {
    Ok(bundle_response(state.export(&actor, Some(pid)).await?))
}

/// Import query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ImportParams {
    /// Actors (comma-separated) granted every imported project besides the importing admin.
    #[serde(default)]
    pub members: Option<String>,
}

impl ImportParams {
    /// The actors of `members`, comma-separated, blanks dropped.
    fn member_list(&self) -> Vec<String> {
        self.members
            .as_deref()
            .map(|m| {
                m.split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The body of an import: an export bundle (415 `unsupported_media_type` for any other
/// `Content-Type`), at most `IMPORT_MAX_BYTES`.
async fn bundle_body(req: axum::extract::Request) -> ApiResult<axum::body::Bytes> {
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
    crate::extract::read_body(req, IMPORT_MAX_BYTES, IMPORT_BODY_TIMEOUT).await
}

/// How long an import's bundle may take to arrive: ten minutes, for up to `IMPORT_MAX_BYTES`
/// (`limits.body_timeout_ms` is for ordinary requests).
const IMPORT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Import (§10.3) of a bundle (`GET /v1/export`'s form, `Content-Type: application/x-ndjson`)
/// into an empty Relay store. Every package hash and file digest is verified before anything
/// is written (a tampered package: 409 `integrity_error` naming it, nothing imported); the
/// restore is one transaction; each imported project then gets its audit chain with the
/// importing admin as creator and `members` as members. Admin only.
#[utoipa::path(post, path = "/v1/import", tag = "relay",
    params(("members" = Option<String>, Query, description = "Comma-separated actors granted the imported projects")),
    request_body(content = String, description = "An export bundle", content_type = "application/x-ndjson"),
    responses((status = 201, body = crate::service::relay::Imported), (status = 400, body = crate::openapi::ErrorBodySchema),
              (status = 403, body = crate::openapi::ErrorBodySchema), (status = 409, body = crate::openapi::ErrorBodySchema),
              (status = 413, body = crate::openapi::ErrorBodySchema), (status = 415, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn import(
    State(state): State<AppState>,
    Caller(actor): Caller,
    QueryParams(q): QueryParams<ImportParams>,
    req: axum::extract::Request,
) -> ApiResult<(StatusCode, Json<Value>)> {
    // Checked here as well as in the service, so that only an admin learns what the body
    // should have been.
    actor.require(&[Role::Admin], "importing Relay data")?;
    let members = q.member_list();
    let bytes = bundle_body(req).await?;
    let imported = state.import(&actor, members, bytes).await?;
    Ok((StatusCode::CREATED, Json(render(&imported)?)))
}

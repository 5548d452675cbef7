//! `/v1/health`, `/v1/conformance` (public), `/v1/whoami` (any credential), `/metrics`
//! (operators) and `/v1/backup` (admins).
//! The conformance suite's evaluation and clock routes live in [`crate::conformance`].

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Role;
use crate::error::ApiResult;
use crate::routes::Caller;
use crate::state::AppState;

/// `GET /v1/health`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` when the server answers and its store answers too (PostgreSQL is asked);
    /// `degraded` (still 200) when it serves the last good atlases or keys after a failed
    /// reload (`problems` says which); `unavailable`, with status 503 and `store_error`, when
    /// the store does not answer.
    pub status: String,
    /// The implementation version.
    pub version: String,
    /// When this process started serving.
    pub started_at: String,
    /// `redb` or `postgres`.
    pub store: String,
    /// Atlases in force.
    pub atlases: usize,
    /// This replica's id (`replica_id`; `local` on the embedded store): which replica answered.
    pub replica_id: String,
    /// Whether this replica runs the periodic work now (always on the embedded store; on
    /// PostgreSQL, the one replica holding the leader lock).
    pub leader: bool,
    /// The database's clock minus this machine's, in milliseconds, by the last sample: how far
    /// this replica's own clock is off (only on PostgreSQL, where the server's times are the
    /// database's, `specs/deployment.md`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// Why the store did not answer (only when `status` is `unavailable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// What keeps the replica `degraded` while it serves: a reload of the atlases (`--watch`)
    /// or of the keys that failed, the last good set staying in force (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// `GET /v1/whoami`: the actor a credential names.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Identity {
    /// The actor id.
    pub actor_id: String,
    /// `agent`, `human` or `script`.
    pub actor_type: String,
    /// The roles granted, sorted (`agent`, `author`, `auditor`, `operator`, `admin`).
    pub roles: Vec<String>,
    /// A fingerprint of the credential (never the credential): how log lines name it.
    pub key_fingerprint: String,
}

/// Who the presented credential is: its actor, type and roles (any credential). The console
/// asks it to choose its pages; the server enforces the roles on every other route.
#[utoipa::path(get, path = "/v1/whoami", tag = "system",
    responses((status = 200, description = "The caller's identity", body = Identity),
              (status = 401, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn whoami(Caller(actor): Caller) -> Json<Identity> {
    Json(Identity {
        actor_id: actor.id.clone(),
        actor_type: serde_json::to_value(actor.actor_type)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        roles: actor.roles.iter().map(|r| r.as_str().to_owned()).collect(),
        key_fingerprint: actor.key_fingerprint,
    })
}

/// `GET /v1/health/live`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Liveness {
    /// Always `ok`: the process answers.
    pub status: String,
}

/// Liveness: the process answers HTTP; nothing else is asked (not the store), so an
/// orchestrator restarts a replica only when it is stuck, never when its database is.
#[utoipa::path(get, path = "/v1/health/live", tag = "system",
    responses((status = 200, description = "The process answers", body = Liveness)))]
pub(crate) async fn live() -> Json<Liveness> {
    Json(Liveness {
        status: "ok".into(),
    })
}

/// Readiness, as `/v1/health` answers it: 503 `unavailable` when the store does not answer or
/// cannot write; 200 `degraded` with `problems` when a reload failed and the last good set
/// serves; else 200 `ok`.
#[utoipa::path(get, path = "/v1/health/ready", tag = "system",
    responses((status = 200, description = "Ready (`ok`), or serving the last good atlases or keys after a failed reload (`degraded`)", body = Health),
              (status = 503, description = "The store does not answer, or cannot write (a full disk)", body = Health)))]
pub(crate) async fn ready(state: State<AppState>) -> (StatusCode, Json<Health>) {
    health(state).await
}

/// How long the health check waits for the database before calling it unavailable.
const STORE_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Readiness: whether this replica can serve, its store included, and what is loaded.
#[utoipa::path(get, path = "/v1/health", tag = "system",
    responses((status = 200, description = "The server and its store are up", body = Health),
              (status = 503, description = "The store does not answer, or cannot write (a full disk)", body = Health)))]
pub(crate) async fn health(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    let store_error = probe_store(&state).await.err();
    let status = if store_error.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let problems = state.problems();
    let health = Health {
        status: match (&store_error, problems.is_empty()) {
            (Some(_), _) => "unavailable",
            (None, false) => "degraded",
            (None, true) => "ok",
        }
        .into(),
        version: env!("CARGO_PKG_VERSION").into(),
        started_at: state.started_at.clone(),
        store: state.backends.kind.into(),
        atlases: state.atlases().loaded.len(),
        replica_id: state.config.replica_id.clone().unwrap_or_default(),
        leader: *state.leading.borrow(),
        clock_offset_ms: state
            .backends
            .database_clock
            .as_ref()
            .and_then(|c| c.offset())
            .map(|o| i64::try_from(o.whole_milliseconds()).unwrap_or(i64::MAX)),
        store_error,
        problems,
    };
    (status, Json(health))
}

/// Asks the store, within [`STORE_PROBE_TIMEOUT`], whether it can serve: PostgreSQL whether it
/// answers, the embedded store whether it can write (`RedbStore::check_writable`).
async fn probe_store(state: &AppState) -> Result<(), String> {
    if let Some(redb) = state.backends.redb.clone() {
        // Not ready while a failed write (a full disk) has not been followed by one that
        // succeeds; the probe reopens the database, so it recovers once there is room.
        let check = tokio::task::spawn_blocking(move || redb.check_writable());
        let checked = match tokio::time::timeout(STORE_PROBE_TIMEOUT, check).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("the probe failed: {e}")),
            Err(_) => Err(format!(
                "the store did not reopen within {} s",
                STORE_PROBE_TIMEOUT.as_secs()
            )),
        };
        if let Err(e) = &checked {
            tracing::warn!(error = %e, "the store cannot write; answering not ready");
        }
        return checked;
    }
    let Some(pg) = state.backends.postgres.clone() else {
        return Ok(());
    };
    let ask = tokio::task::spawn_blocking(move || pg.ping());
    match tokio::time::timeout(STORE_PROBE_TIMEOUT, ask).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(e)) => Err(format!("the probe failed: {e}")),
        Err(_) => Err(format!(
            "PostgreSQL did not answer within {} s",
            STORE_PROBE_TIMEOUT.as_secs()
        )),
    }
}

/// The Relay conformance descriptor.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Conformance {
    /// `0.1`.
    pub protocol_version: String,
    /// `L0`..`L3`.
    pub conformance_level: String,
    /// The CRA conformance levels this deployment claims (CRA §7.1): `carp-core`, `trace-core`,
    /// `atlas-core`, `cra-full`.
    pub cra_levels: Vec<String>,
    /// Optional capabilities.
    pub capabilities: ConformanceCapabilities,
    /// Who implements it.
    pub implementation: Implementation,
}

/// Optional Relay capabilities.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConformanceCapabilities {
    /// Keyword + vector fusion.
    pub hybrid_search: bool,
    /// Vector search.
    pub semantic_search: bool,
    /// Live streams.
    pub realtime: bool,
    /// Blob storage.
    pub blob_storage: bool,
}

/// Implementation name and version.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Implementation {
    /// `cra`.
    pub name: String,
    /// The crate version.
    pub version: String,
}

/// The Relay conformance descriptor (Relay §10).
#[utoipa::path(get, path = "/v1/conformance", tag = "system",
    responses((status = 200, description = "What this deployment implements", body = Conformance)))]
pub(crate) async fn conformance(State(_state): State<AppState>) -> Json<Conformance> {
    Json(Conformance {
        protocol_version: "0.1".into(),
        conformance_level: "L3".into(),
        cra_levels: ["carp-core", "trace-core", "atlas-core", "cra-full"]
            .map(str::to_owned)
            .to_vec(),
        capabilities: ConformanceCapabilities {
            hybrid_search: false,
            semantic_search: false,
            realtime: true,
            blob_storage: false,
        },
        implementation: Implementation {
            name: "cra".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
    })
}

/// Prometheus text exposition of the runtime's counters (operator, auditor or admin).
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain"),
              (status = 403, description = "Not an operator", body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<impl IntoResponse> {
    actor.require(&[Role::Operator, Role::Auditor], "reading /metrics")?;
    let pending = state.carp_read(|s| s.list_pending_approvals()).await?;
    let log = state.0.log_sizes().await?;
    let now_us = cra_carp::eval::unix_micros(state.clock.now());
    let oldest_age = pending
        .iter()
        .filter_map(|a| cra_wire::clock::parse_rfc3339(&a.created_at).ok())
        .map(cra_carp::eval::unix_micros)
        .min()
        .map_or(0.0, |oldest| (now_us - oldest).max(0) as f64 / 1e6);
    let gauges = crate::metrics::render_gauges(&[
        (
            "cra_approvals_pending",
            "Approvals waiting for a decision now.",
            pending.len() as f64,
        ),
        (
            "cra_approvals_oldest_pending_age_seconds",
            "How long the oldest pending approval has waited (0 when none waits).",
            oldest_age,
        ),
        (
            "cra_stream_subscribers",
            "Live subscribers of this replica now (WebSocket streams, approval waits, the notifier).",
            state.hub.subscribers() as f64,
        ),
        (
            "cra_log_leaves",
            "Leaves of the transparency log now (one per TRACE event).",
            log.0 as f64,
        ),
        (
            "cra_log_checkpoint_leaves",
            "Leaves the latest signed checkpoint covers (0 before the first).",
            log.1.unwrap_or(0) as f64,
        ),
        (
            "cra_log_checkpoint_age_seconds",
            "How long ago a /metrics read of this replica first saw the latest signed checkpoint, so within one scrape interval of its publication (0 before the first).",
            state
                .metrics
                .checkpoint_age(log.1, std::time::Instant::now()),
        ),
    ]);
    let commits = crate::metrics::render_commits(&state.backends.commits);
    let atlases = state.atlases();
    let policies = state.metrics.render_policy_decisions(&|atlas, policy| {
        atlases
            .set
            .get(atlas)
            .is_some_and(|a| policy == "default_deny" || a.policy(policy).is_some())
    });
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        format!("{}{policies}{commits}{gauges}", state.metrics.render()),
    ))
}

/// The media type of a backup archive.
const TAR: &str = "application/x-tar";

/// An online backup of the whole store: a `cra-backup/1` archive (tar, `MANIFEST.json` last),
/// streamed as it was written (`specs/backup.md`). Admins only; recorded as `store.backed_up`.
#[utoipa::path(get, path = "/v1/backup", tag = "system",
    responses((status = 200, description = "The archive (application/x-tar)", content_type = "application/x-tar", body = Vec<u8>),
              (status = 403, body = crate::openapi::ErrorBodySchema),
              (status = 503, body = crate::openapi::ErrorBodySchema)))]
pub(crate) async fn backup(
    State(state): State<AppState>,
    Caller(actor): Caller,
) -> ApiResult<axum::response::Response> {
    use futures::StreamExt as _;
    let backup = state.0.backup(&actor).await?;
    let file = tokio::fs::File::open(&backup.file).await.map_err(|e| {
        crate::error::ApiError::new(
            cra_wire::Token::Unavailable,
            format!("the backup was written but cannot be read back: {e}"),
        )
    })?;
    let length = backup.manifest.entries.len();
    // The temporary directory goes when the body is sent (or the client leaves).
    let dir = backup.dir;
    let body = tokio_util::io::ReaderStream::new(file).map(move |chunk| {
        let _kept = &dir;
        chunk
    });
    Ok((
        [
            (CONTENT_TYPE, TAR.to_owned()),
            (
                axum::http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"cra.backup\"".to_owned(),
            ),
            (
                axum::http::HeaderName::from_static("cra-backup-entries"),
                length.to_string(),
            ),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

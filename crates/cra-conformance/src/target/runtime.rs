//! The runtime in-process: a fresh `cra-runtime` (redb data directory, the case's atlases, one
//! API key per fixture actor, the fixed clock and seeded ids) whose router is called directly,
//! without a socket. The in-process target plays through it the cases that need the runtime's
//! composition: TRACE emission (`with_trace`) and the HTTP contract (`http`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use serde_json::Value;
use tower::ServiceExt;

use crate::target::http::Transport;

/// The fixture actors and the role each needs.
const ACTORS: &[(&str, &str, &str)] = &[
    ("admin", "human", "admin"),
    ("agent-conf", "agent", "agent"),
    ("conformance-test-agent", "agent", "agent"),
    ("jordan", "human", "author"),
];

/// A runtime reached through its router.
pub struct RouterTransport {
    _dir: tempfile::TempDir,
    atlases: Value,
    rt: tokio::runtime::Runtime,
    router: axum::Router,
}

impl std::fmt::Debug for RouterTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouterTransport")
    }
}

/// The token of a fixture actor in the in-process runtime.
pub fn token_of(actor: &str) -> String {
    format!("cra_conformance_{}", actor.replace('-', "_"))
}

impl RouterTransport {
    /// Starts a runtime with the setup's atlases, the clock and the id generator.
    pub fn start(
        setup: &serde_json::Map<String, Value>,
        clock: Arc<dyn cra_wire::Clock>,
        ids: Arc<dyn cra_wire::IdGenerator>,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a directory: {e}"))?;
        let mut keys = String::new();
        for (id, kind, role) in ACTORS {
            keys.push_str(&format!(
                "[[keys]]\ntoken = \"{}\"\nactor_id = \"{id}\"\nactor_type = \"{kind}\"\nroles = [\"{role}\"]\n",
                token_of(id)
            ));
        }
        let keys_path = dir.path().join("api-keys.toml");
        std::fs::write(&keys_path, keys).map_err(|e| e.to_string())?;
        let mut atlases = Vec::new();
        for (i, a) in setup
            .get("atlases")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let root = dir.path().join(format!("atlas-{i}"));
            let mut files = BTreeMap::new();
            if let Some(m) = a.get("manifest") {
                files.insert("atlas.json".to_owned(), m.to_string());
            }
            for (k, v) in a
                .get("files")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                files.insert(k.clone(), v.as_str().unwrap_or_default().to_owned());
            }
            for (name, text) in files {
                let path = root.join(&name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                std::fs::write(&path, text).map_err(|e| e.to_string())?;
            }
            atlases.push(root);
        }
        let config = cra_runtime::RuntimeConfig {
            data: dir.path().join("data"),
            api_keys: Some(keys_path),
            atlases,
            ..cra_runtime::RuntimeConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start an async runtime: {e}"))?;
        let router = {
            let _guard = rt.enter();
            let (state, _) = cra_runtime::build_runtime(config, clock, ids)
                .map_err(|e| format!("the runtime did not start: {e}"))?;
            cra_runtime::routes::router(state)
        };
        let atlases = setup
            .get("atlases")
            .cloned()
            .unwrap_or(Value::Array(Vec::new()));
        Ok(Self {
            _dir: dir,
            atlases,
            rt,
            router,
        })
    }

    /// The tokens of the fixture actors, for [`crate::target::http::HttpTarget::over`].
    pub fn actor_tokens() -> BTreeMap<String, String> {
        ACTORS
            .iter()
            .map(|(id, _, _)| ((*id).to_owned(), token_of(id)))
            .collect()
    }
}

impl Transport for RouterTransport {
    fn name(&self) -> String {
        "in-process runtime".to_owned()
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
    ) -> Result<(u16, String), String> {
        let mut req = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req
            .body(body.map_or_else(Body::empty, Body::from))
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let router = self.router.clone();
        self.rt.block_on(async move {
            let resp = router
                .oneshot(req)
                .await
                .map_err(|e| format!("{method} {path}: {e}"))?;
            let status = resp.status().as_u16();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .map_err(|e| format!("{method} {path}: reading the body: {e}"))?;
            Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
        })
    }

    fn atlases_preloaded(&self) -> bool {
        true
    }

    fn replay(&self, events: &Value, atlases: Option<&Value>) -> Option<Result<Value, String>> {
        let Some(list) = events.as_array() else {
            // The probe call (`Null`): replay is offered.
            return Some(Ok(Value::Null));
        };
        Some(replay_events(list, atlases.unwrap_or(&self.atlases)))
    }
}

/// Re-resolves the recorded requests against `atlases` with `cra_carp::replay`.
fn replay_events(list: &[Value], atlases: &Value) -> Result<Value, String> {
    let events: Vec<cra_trace::TraceEvent> = list
        .iter()
        .map(|e| serde_json::from_value(e.clone()).map_err(|err| format!("trace event: {err}")))
        .collect::<Result<_, _>>()?;
    let mut loaded = Vec::new();
    for a in atlases.as_array().into_iter().flatten() {
        let mut files = BTreeMap::new();
        if let Some(m) = a.get("manifest") {
            files.insert("atlas.json".to_owned(), m.to_string().into_bytes());
        }
        for (k, v) in a
            .get("files")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            files.insert(
                k.clone(),
                v.as_str().unwrap_or_default().as_bytes().to_vec(),
            );
        }
        let analysis = cra_atlas::validate::analyse(std::path::Path::new("replay"), files);
        loaded.push(analysis.atlas.ok_or("a replay atlas could not be built")?);
    }
    let set = cra_carp::index::AtlasSet::from_loaded(&loaded).map_err(|e| e.to_string())?;
    let cases = cra_carp::replay::replay(&events, &set);
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
                divergences.push(
                    serde_json::json!({"request_id": c.request_id, "pointer": pointer,
                    "recorded": recorded, "replayed": replayed, "action_id": action_id}),
                );
            }
            cra_carp::replay::CaseOutcome::Error(e) => {
                divergences.push(serde_json::json!({"request_id": c.request_id, "error": e}));
            }
        }
    }
    Ok(
        serde_json::json!({"identical": divergences.is_empty(), "resolutions": cases.len(),
        "divergences": divergences}),
    )
}

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
        Ok(Self {
            _dir: dir,
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
}

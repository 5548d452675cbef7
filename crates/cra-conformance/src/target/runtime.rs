//! The runtime in-process: a fresh `cra-runtime` (redb data directory, one API key per fixture
//! actor, a test clock over the fixed clock, seeded ids) whose router is called directly, without
//! a socket, through the HTTP target's verb-to-route mapping (the case's atlases, clock and state
//! go through the same routes as on a live server). The in-process target plays through it the
//! cases that need the runtime's composition: TRACE emission (`with_trace`), the HTTP contract
//! (`http`) and `replay`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use crate::target::http::Transport;

/// The fixture actors and the role each needs.
const ACTORS: &[(&str, &str, &str)] = &[
    ("admin", "human", "admin"),
    ("agent-conf", "agent", "agent"),
    ("conformance-test-agent", "agent", "agent"),
    ("jordan", "human", "author"),
    ("riley", "human", "author"),
];

/// The type (`human`, `agent`) of a fixture actor, `None` for an actor the fixtures do not use.
pub fn actor_type_of(actor: &str) -> Option<&'static str> {
    ACTORS
        .iter()
        .find(|(id, _, _)| *id == actor)
        .map(|(_, kind, _)| *kind)
}

/// A runtime reached through its router.
pub struct RouterTransport {
    _dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    /// A planted defect: streams resume this many events past the `since_seq` asked for.
    resume_late: u64,
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

/// An API-keys file (`cra serve --api-keys`) with one key per fixture actor, each [`token_of`].
pub fn actor_keys_toml() -> String {
    let mut keys = String::new();
    for (id, kind, role) in ACTORS {
        keys.push_str(&format!(
            "[[keys]]\ntoken = \"{}\"\nactor_id = \"{id}\"\nactor_type = \"{kind}\"\nroles = [\"{role}\"]\n",
            token_of(id)
        ));
    }
    keys
}

impl RouterTransport {
    /// Starts a runtime with a test clock over `clock`, and the id generator; `tweak` changes
    /// its configuration (a planted defect: `resolution_cache_entries = 0`).
    pub fn start(
        clock: Arc<dyn cra_wire::Clock>,
        ids: Arc<dyn cra_wire::IdGenerator>,
        tweak: impl FnOnce(&mut cra_runtime::RuntimeConfig),
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a directory: {e}"))?;
        let keys_path = dir.path().join("api-keys.toml");
        std::fs::write(&keys_path, actor_keys_toml()).map_err(|e| e.to_string())?;
        // The case's atlases arrive as they do over HTTP (`PUT /v1/atlases`), and the clock is
        // set as it is on a live server (`POST /v1/conformance/clock`).
        let mut config = cra_runtime::RuntimeConfig {
            data: dir.path().join("data"),
            api_keys: Some(keys_path),
            test_clock: true,
            ..cra_runtime::RuntimeConfig::default()
        };
        tweak(&mut config);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start an async runtime: {e}"))?;
        let router = {
            let _guard = rt.enter();
            let (state, _) = cra_runtime::build_runtime(config, clock, ids)
                .map_err(|e| format!("the runtime did not start: {e}"))?;
            cra_runtime::router(state)
        };
        Ok(Self {
            _dir: dir,
            rt,
            router,
            resume_late: 0,
        })
    }

    /// The same transport whose streams resume `n` events past the `since_seq` asked for: the
    /// planted defect of a server that starts a resumed stream late.
    #[must_use]
    pub fn resuming_late(mut self, n: u64) -> Self {
        self.resume_late = n;
        self
    }

    /// The tokens of the fixture actors, for [`crate::target::http::HttpTarget::over`].
    pub fn actor_tokens() -> BTreeMap<String, String> {
        ACTORS
            .iter()
            .map(|(id, _, _)| ((*id).to_owned(), token_of(id)))
            .collect()
    }
}

/// `path` with its numeric `since_seq=N` made `N + by` (other paths unchanged).
fn shift_since_seq(path: &str, by: u64) -> String {
    let Some((head, tail)) = path.split_once("since_seq=") else {
        return path.to_owned();
    };
    let (n, rest) = tail.split_at(tail.find('&').unwrap_or(tail.len()));
    match n.parse::<u64>() {
        Ok(n) => format!("{head}since_seq={}{rest}", n + by),
        Err(_) => path.to_owned(),
    }
}

impl Transport for RouterTransport {
    fn name(&self) -> String {
        "in-process runtime".to_owned()
    }

    /// A WebSocket needs a connection: the router is served on a loopback socket for the
    /// stream's length, on this transport's runtime.
    fn stream(
        &self,
        request: &crate::target::ws::StreamRequest,
    ) -> Result<crate::target::ws::StreamRead, String> {
        let router = self.router.clone();
        let mut request = request.clone();
        if self.resume_late > 0 {
            request.path = shift_since_seq(&request.path, self.resume_late);
        }
        self.rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| format!("cannot listen on loopback: {e}"))?;
            let addr = listener
                .local_addr()
                .map_err(|e| format!("the loopback listener has no address: {e}"))?;
            let server = tokio::spawn(async move {
                let _ = axum::serve(listener, router.into_make_service()).await;
            });
            let read = crate::target::ws::read_stream(&format!("http://{addr}"), &request).await;
            server.abort();
            read
        })
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
}

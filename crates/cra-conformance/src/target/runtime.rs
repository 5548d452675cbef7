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

/// A defect planted in the runtime reached through a [`RouterTransport`] (teeth tests only):
/// the transport bends requests or answers the way a server with that defect would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeDefect {
    /// Streams resume one event past the `since_seq` asked for.
    ResumesLate,
    /// A `validate` request is resolved as a `resolve` (recorded, counted and cached as one),
    /// as cra did before issue 22 item 10.
    ValidateAsResolve,
    /// Event payloads lack the fields TRACE §4.3 requires beyond the action (`duration_ms`,
    /// `policy_id`, `violation_type`, `error_code`, `error_message`, the `resolution_id` of
    /// `action.approved`), as cra's did before issue 22 item 7.
    PayloadFieldsDropped,
    /// An atlas posted with the id and version of one in force but other content replaces it,
    /// as cra did before issue 22 item 12 (a published version then named two contents).
    AtlasConflictReplaces,
    /// An action is run by the executor of the first atlas in the set declaring its id, whatever
    /// atlas the resolution took it from, as cra did before issue 22 item 1.
    ExecutorOfFirstAtlas,
}

/// The payload fields [`RuntimeDefect::PayloadFieldsDropped`] leaves out of every event.
const DROPPED_FIELDS: &[&str] = &[
    "duration_ms",
    "policy_id",
    "violation_type",
    "error_code",
    "error_message",
];

/// A runtime reached through its router.
pub struct RouterTransport {
    _dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    defect: Option<RuntimeDefect>,
    /// The set the last `PUT /v1/atlases` put in force ([`RuntimeDefect::AtlasConflictReplaces`]).
    last_set: std::sync::Mutex<Option<serde_json::Value>>,
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
            defect: None,
            last_set: std::sync::Mutex::new(None),
        })
    }

    /// The same transport with `defect` planted.
    #[must_use]
    pub fn with_defect(mut self, defect: Option<RuntimeDefect>) -> Self {
        self.defect = defect;
        self
    }

    /// The request body as the defect bends it.
    fn bent_request(&self, method: &str, path: &str, body: Option<String>) -> Option<String> {
        if self.defect == Some(RuntimeDefect::ExecutorOfFirstAtlas)
            && method == "PUT"
            && path == "/v1/atlases"
        {
            let mut set: serde_json::Value = serde_json::from_str(body.as_deref()?).ok()?;
            first_atlas_executors(&mut set);
            return Some(set.to_string());
        }
        if self.defect != Some(RuntimeDefect::ValidateAsResolve)
            || method != "POST"
            || !path.starts_with("/v1/resolve")
        {
            return body;
        }
        let text = body?;
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(mut v) if v["operation"] == "validate" => {
                v["operation"] = serde_json::Value::from("resolve");
                Some(v.to_string())
            }
            _ => Some(text),
        }
    }

    /// The answer's body as the defect bends it.
    fn bent_answer(&self, path: &str, text: String) -> String {
        if self.defect != Some(RuntimeDefect::PayloadFieldsDropped) || !path.starts_with("/v1/") {
            return text;
        }
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(mut v) => {
                drop_payload_fields(&mut v);
                v.to_string()
            }
            Err(_) => text,
        }
    }

    /// The tokens of the fixture actors, for [`crate::target::http::HttpTarget::over`].
    pub fn actor_tokens() -> BTreeMap<String, String> {
        ACTORS
            .iter()
            .map(|(id, _, _)| ((*id).to_owned(), token_of(id)))
            .collect()
    }
}

/// Gives every action of the atlas set `set` (`{"atlases": [...]}`) the executor (or none) of
/// the first atlas declaring its id.
fn first_atlas_executors(set: &mut serde_json::Value) {
    let mut first: BTreeMap<String, Option<serde_json::Value>> = BTreeMap::new();
    let Some(atlases) = set["atlases"].as_array_mut() else {
        return;
    };
    for atlas in atlases {
        let Some(actions) = atlas["manifest"]["actions"].as_array_mut() else {
            continue;
        };
        for action in actions {
            let Some(id) = action["action_id"].as_str().map(str::to_owned) else {
                continue;
            };
            let Some(o) = action.as_object_mut() else {
                continue;
            };
            match first.get(&id) {
                None => {
                    first.insert(id, o.get("executor").cloned());
                }
                Some(Some(executor)) => {
                    o.insert("executor".to_owned(), executor.clone());
                }
                Some(None) => {
                    o.remove("executor");
                }
            }
        }
    }
}

/// Removes [`DROPPED_FIELDS`] (and an `action.approved`'s `resolution_id`) from the payload of
/// every event in `v`.
fn drop_payload_fields(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_payload_fields),
        serde_json::Value::Object(o) => {
            let approved =
                o.get("event_type").and_then(serde_json::Value::as_str) == Some("action.approved");
            if let (true, Some(serde_json::Value::Object(p))) =
                (o.contains_key("event_type"), o.get_mut("payload"))
            {
                for f in DROPPED_FIELDS {
                    p.remove(*f);
                }
                if approved {
                    p.remove("resolution_id");
                }
            }
            o.values_mut().for_each(drop_payload_fields);
        }
        _ => {}
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
        if self.defect == Some(RuntimeDefect::ResumesLate) {
            request.path = shift_since_seq(&request.path, 1);
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
        let body = self.bent_request(method, path, body);
        let answer = self.dispatch(method, path, token, body.clone())?;
        if self.defect == Some(RuntimeDefect::AtlasConflictReplaces) {
            return self.replace_on_conflict(method, path, token, body, answer);
        }
        Ok((answer.0, self.bent_answer(path, answer.1)))
    }
}

impl RouterTransport {
    /// One request through the router, as it is.
    fn dispatch(
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

    /// [`RuntimeDefect::AtlasConflictReplaces`]: remembers the set a `PUT /v1/atlases` put in
    /// force, and answers a `POST /v1/atlases` refused with `atlas_version_conflict` by putting
    /// that set in force again with the posted atlas in place of the one with its id.
    fn replace_on_conflict(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<String>,
        answer: (u16, String),
    ) -> Result<(u16, String), String> {
        let parsed = body.as_deref().and_then(|b| serde_json::from_str(b).ok());
        let mut set = self.last_set.lock().unwrap_or_else(|p| p.into_inner());
        match (method, path, parsed) {
            ("PUT", "/v1/atlases", Some(put)) if answer.0 == 200 => *set = Some(put),
            ("POST", "/v1/atlases", Some(posted))
                if answer.1.contains("\"atlas_version_conflict\"") =>
            {
                let Some(mut whole) = set.clone() else {
                    return Ok(answer);
                };
                let id = posted["manifest"]["atlas_id"].clone();
                if let Some(list) = whole["atlases"].as_array_mut() {
                    list.retain(|a| a["manifest"]["atlas_id"] != id);
                    list.push(posted);
                }
                drop(set);
                let put = self.dispatch("PUT", "/v1/atlases", token, Some(whole.to_string()))?;
                return Ok((201, put.1));
            }
            _ => {}
        }
        Ok(answer)
    }
}

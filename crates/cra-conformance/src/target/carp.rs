//! In-process CARP: the fixture's atlases validated as `POST /v1/atlases` validates them, CARP
//! over a fresh redb data directory with the fixture's fixed clock and seeded ids, answers in the
//! README's shapes. Actions run with the `builtin:echo` behaviour (the result is the parameters).

use std::sync::Arc;

use cra_carp::engine::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::index::AtlasSet;
use cra_carp::validate::{CarpError, parse_request};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Map, Value, json};

/// A deliberate CARP defect (teeth tests), applied to resolutions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarpMutation {
    /// Actions no policy granted are allowed (default allow).
    DefaultAllow,
    /// An action some allow policy names is allowed even when a deny policy matches it.
    DenyNotBeatingAllow,
    /// Required capabilities no atlas declares are dropped from the request before it is
    /// resolved, as cra did before issue 22 item 6.
    UnknownCapabilitiesDropped,
    /// An execute may use a resolution made in another session of the same agent, as cra did
    /// before issue 22 item 5.
    ResolutionAnySession,
    /// An execute refusal is answered with the error body alone, no execute response, as cra
    /// did before issue 22 item 9.
    RefusalAsErrorBody,
}

/// One case's CARP world.
pub struct CarpWorld {
    _dir: tempfile::TempDir,
    carp: Carp,
    manifests: Vec<Value>,
    mutation: Option<CarpMutation>,
    /// The session each resolution was made in (for [`CarpMutation::ResolutionAnySession`]).
    made_in: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl std::fmt::Debug for CarpWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CarpWorld")
    }
}

fn error(e: &CarpError) -> Value {
    let mut v = serde_json::to_value(e.to_body()).unwrap_or_else(|_| json!({}));
    v["error"] = json!(e.token.as_str());
    v["status"] = json!(e.token.http_status());
    v
}

impl CarpWorld {
    /// Loads the setup's atlases, opens the store and the setup's sessions.
    pub fn new(
        setup: &Map<String, Value>,
        clock: Arc<FixedClock>,
        seed: u64,
        mutation: Option<CarpMutation>,
    ) -> Result<Self, String> {
        let mut loaded = Vec::new();
        let mut manifests = Vec::new();
        for a in setup
            .get("atlases")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // Validated as `POST /v1/atlases` validates it.
            let atlas = cra_runtime::atlases::load_inline(a, "")
                .map_err(|e| format!("setup atlas invalid: {}", e.body.message))?;
            manifests.push(a.get("manifest").cloned().unwrap_or(Value::Null));
            loaded.push(atlas);
        }
        let set = AtlasSet::from_loaded(&loaded).map_err(|e| format!("setup atlases: {e}"))?;
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a data directory: {e}"))?;
        let store = cra_store::RedbStore::open(dir.path()).map_err(|e| e.to_string())?;
        let carp = Carp::new(
            Arc::new(store),
            Arc::new(set),
            clock,
            Arc::new(SequentialIds::new(1_700_000_000_000, seed)),
            CarpConfig::default(),
        );
        for s in setup
            .get("sessions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let agent = s
                .get("agent_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let id = s.get("session_id").and_then(Value::as_str);
            carp.open_session(agent, id, None)
                .map_err(|e| format!("setup session: {e:?}"))?;
        }
        Ok(Self {
            made_in: std::sync::Mutex::default(),
            _dir: dir,
            carp,
            manifests,
            mutation,
        })
    }

    /// Performs one CARP verb; `None` when `op` is not one.
    pub fn perform(&self, op: &str, args: &Value) -> Option<Value> {
        let raw = args.get("request").cloned().unwrap_or(Value::Null);
        let mut request = match op {
            "resolve" | "execute" => match parse_request(&raw) {
                Ok(r) => r,
                Err(e) => return Some(error(&e)),
            },
            _ => return None,
        };
        self.mutate_request(&mut request);
        Some(match op {
            "resolve" => match self.carp.resolve(&request, false, None) {
                Ok(res) => {
                    if let Ok(mut made_in) = self.made_in.lock() {
                        made_in.insert(
                            res.resolution_id.clone(),
                            request.requester.session_id.clone(),
                        );
                    }
                    let mut v = serde_json::to_value(res).unwrap_or(Value::Null);
                    self.mutate(&mut v);
                    v
                }
                Err(e) => error(&e),
            },
            _ => self.answer_refusal(match self.carp.execute_in_store(&request) {
                Ok(ExecuteOutcome::Run(cleared)) => {
                    let result = cleared.parameters.clone();
                    match self.carp.finish_execution(cleared, Ok(result)) {
                        Ok(resp) => serde_json::to_value(resp).unwrap_or(Value::Null),
                        Err(e) => error(&e),
                    }
                }
                Ok(
                    ExecuteOutcome::Answered(resp)
                    | ExecuteOutcome::OpenApproval { response: resp, .. },
                ) => {
                    let v = serde_json::to_value(&resp).unwrap_or(Value::Null);
                    match v.pointer("/error/code").and_then(Value::as_str) {
                        Some(code)
                            if v.get("status").and_then(Value::as_str) != Some("success") =>
                        {
                            let status = cra_wire::Token::parse(code)
                                .map_or(400, cra_wire::Token::http_status);
                            json!({"error": code, "status": status, "response": v})
                        }
                        _ => v,
                    }
                }
                Err(e) => {
                    // Refused before an execution existed: still answered as a `denied`
                    // response (§3.5), as the runtime answers an admitted request.
                    let response = self.carp.refused(&request, &e);
                    let mut v = error(&e);
                    v["response"] = serde_json::to_value(response).unwrap_or(Value::Null);
                    v
                }
            }),
        })
    }

    /// An execute refusal as answered: with its execute response, unless the
    /// [`CarpMutation::RefusalAsErrorBody`] defect drops it.
    fn answer_refusal(&self, mut answer: Value) -> Value {
        let refused = answer.get("error").is_some_and(Value::is_string);
        if refused
            && self.mutation == Some(CarpMutation::RefusalAsErrorBody)
            && let Some(o) = answer.as_object_mut()
        {
            o.remove("response");
        }
        answer
    }

    /// Applies the request-side defects: unknown capabilities dropped, or an execute moved into
    /// the session its resolution was made in.
    fn mutate_request(&self, request: &mut cra_carp::types::CarpRequest) {
        match self.mutation {
            Some(CarpMutation::UnknownCapabilitiesDropped) => {
                let declared = self.declared_capabilities();
                if let Some(caps) = request
                    .task
                    .as_mut()
                    .and_then(|t| t.required_capabilities.as_mut())
                {
                    caps.retain(|c| declared.contains(c));
                }
            }
            Some(CarpMutation::ResolutionAnySession) => {
                let made_in = request.execution.as_ref().and_then(|e| {
                    let sessions = self.made_in.lock().ok()?;
                    sessions.get(&e.resolution_id).cloned()
                });
                if let Some(session) = made_in {
                    request.requester.session_id = session;
                }
            }
            _ => {}
        }
    }

    /// Every capability id the case's atlases declare.
    fn declared_capabilities(&self) -> Vec<String> {
        self.manifests
            .iter()
            .filter_map(|m| m.get("capabilities").and_then(Value::as_array))
            .flatten()
            .filter_map(|c| c.get("capability_id").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    }

    fn allow_patterns(&self) -> Vec<String> {
        self.manifests
            .iter()
            .flat_map(|m| {
                m.get("policies")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("allow"))
            .flat_map(|p| {
                p.get("actions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect()
    }

    /// Applies the answer-side defects (default allow, deny not beating allow).
    fn mutate(&self, res: &mut Value) {
        let Some(m) = self.mutation.filter(|m| {
            matches!(
                m,
                CarpMutation::DefaultAllow | CarpMutation::DenyNotBeatingAllow
            )
        }) else {
            return;
        };
        let allows = self.allow_patterns();
        let denied = res
            .get("denied_actions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (flip, keep): (Vec<Value>, Vec<Value>) = denied.into_iter().partition(|d| {
            let pid = d
                .get("policy_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let aid = d
                .get("action_id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match m {
                CarpMutation::DefaultAllow => pid == "default_deny",
                CarpMutation::DenyNotBeatingAllow => {
                    pid != "default_deny" && cra_atlas::pattern::matches_any(&allows, aid)
                }
                CarpMutation::UnknownCapabilitiesDropped
                | CarpMutation::ResolutionAnySession
                | CarpMutation::RefusalAsErrorBody => false,
            }
        });
        if let Some(a) = res.get_mut("allowed_actions").and_then(Value::as_array_mut) {
            a.extend(
                flip.iter()
                    .map(|d| json!({"action_id": d["action_id"], "requires_confirmation": false})),
            );
        }
        res["denied_actions"] = Value::Array(keep.clone());
        if keep.is_empty()
            && res.pointer("/decision/type").and_then(Value::as_str) != Some("requires_approval")
        {
            res["decision"]["type"] = json!("allow");
        } else if !flip.is_empty()
            && res.pointer("/decision/type").and_then(Value::as_str) == Some("deny")
        {
            res["decision"]["type"] = json!("partial");
        }
    }
}

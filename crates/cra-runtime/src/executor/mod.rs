//! Who performs an allowed action. The atlas names an executor per action; the operator binds
//! names to endpoints, so an atlas can never point the runtime at an arbitrary URL:
//!
//! * `builtin:echo`: answers `{"echo": parameters}` (tests and demos).
//! * `http:<name>`: POSTs `{action_id, execution_id, parameters}` as JSON to the URL the
//!   operator configured as `[executors.<name>]`, with its timeout; a 2xx JSON answer is the result.
//! * `mcp:<name>/<tool>`: calls `<tool>` of the MCP server configured as `[executors.<name>]
//!   kind = "mcp"` ([`mcp`]).
//! * no executor: the agent performs the action itself. It may report the outcome inline as
//!   `execution.outcome` = `{"status": "success", "result": ...}` or
//!   `{"status": "error", "error": {"code", "message"}}`; without one the runtime records the
//!   authorisation and answers `{"performed_by": "agent"}`.

pub mod mcp;

use std::time::Duration;

use cra_carp::store::StoredResolution;
use cra_carp::types::ExecuteError;
use serde_json::{Value, json};

use crate::atlases::AtlasState;
use crate::config::ExecutorConfig;
use crate::state::Runtime;

fn fail(code: &str, message: impl Into<String>) -> ExecuteError {
    ExecuteError {
        code: code.to_owned(),
        message: message.into(),
        details: None,
    }
}

/// Reads an agent-reported outcome.
pub(crate) fn reported_outcome(outcome: &Value) -> Result<Value, ExecuteError> {
    match outcome.get("status").and_then(Value::as_str) {
        Some("success") => Ok(outcome.get("result").cloned().unwrap_or(Value::Null)),
        Some("error") => {
            let e = outcome.get("error");
            let s = |k: &str| {
                e.and_then(|e| e.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned()
            };
            Err(ExecuteError {
                code: if s("code").is_empty() {
                    "agent_reported_error".into()
                } else {
                    s("code")
                },
                message: s("message"),
                details: None,
            })
        }
        _ => Err(fail(
            "invalid_outcome",
            "execution.outcome.status must be `success` or `error`",
        )),
    }
}

async fn run_http(
    client: &reqwest::Client,
    name: &str,
    cfg: &ExecutorConfig,
    action_id: &str,
    execution_id: &str,
    parameters: &Value,
) -> Result<Value, ExecuteError> {
    let body =
        json!({"action_id": action_id, "execution_id": execution_id, "parameters": parameters});
    let resp = client
        .post(&cfg.url)
        .timeout(Duration::from_millis(cfg.timeout_ms))
        .json(&body)
        .send()
        .await
        .map_err(|e| {
            if e.is_timeout() {
                fail(
                    "executor_timeout",
                    format!(
                        "executor `{name}` did not answer within {} ms",
                        cfg.timeout_ms
                    ),
                )
            } else {
                fail(
                    "executor_unreachable",
                    format!("executor `{name}` could not be reached"),
                )
            }
        })?;
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.map_err(|_| {
        fail(
            "executor_unreachable",
            format!("executor `{name}` closed the connection"),
        )
    })?;
    let value: Value = if bytes.is_empty() {
        Value::Null
    } else {
        cra_wire::json::parse_strict(&bytes).unwrap_or_else(|_| {
            Value::String(String::from_utf8_lossy(&bytes).chars().take(4096).collect())
        })
    };
    if (200..300).contains(&status) {
        Ok(value)
    } else {
        Err(ExecuteError {
            code: "executor_error".into(),
            message: format!("executor `{name}` answered HTTP {status}"),
            details: Some(json!({"status": status, "body": value})),
        })
    }
}

/// The executor of `action_id` under the resolution `stored`: the one its resolve recorded (the
/// atlas that offered the action names it), never another atlas's action of the same id; `None`
/// when the atlas names none (the agent performs the action). A resolution stored before origins
/// were kept has none recorded; its action's executor is then the first loaded atlas's, as it
/// was when that resolution was made, and when no loaded atlas declares the action any more the
/// call is `executor_unavailable`: an action that lost its atlas never turns into one the agent
/// performs.
pub(crate) fn executor_of(
    atlases: &AtlasState,
    stored: Option<&StoredResolution>,
    action_id: &str,
) -> Result<Option<String>, ExecuteError> {
    if let Some(origin) = stored.and_then(|s| s.origins.get(action_id)) {
        return Ok(origin.executor.as_deref().map(str::to_owned));
    }
    match atlases.loaded.iter().find_map(|a| a.action(action_id)) {
        Some(action) => Ok(action.executor.clone()),
        None => Err(fail(
            "executor_unavailable",
            format!(
                "no atlas in force declares {action_id} any more, so cra cannot tell who performs it; resolve again"
            ),
        )),
    }
}

/// Keeps a number beyond a double's range ([`cra_wire::json::require_finite`]) out of the
/// chain: a result holding one becomes an `invalid_outcome` error, and error details holding one
/// are dropped, the message saying so. Recorded, either would make the chain unreadable.
fn finite_outcome(outcome: Result<Value, ExecuteError>) -> Result<Value, ExecuteError> {
    match outcome {
        Ok(result) => match cra_wire::json::require_finite(&result) {
            Ok(()) => Ok(result),
            Err(e) => Err(fail(
                "invalid_outcome",
                format!(
                    "the executor's result holds a number beyond a double's range at `{}`; it was not recorded",
                    e.pointer()
                ),
            )),
        },
        Err(mut error) => {
            if let Some(Err(e)) = error.details.as_ref().map(cra_wire::json::require_finite) {
                error.message = format!(
                    "{} (its error details held a number beyond a double's range at `{}` and were not recorded)",
                    error.message,
                    e.pointer()
                );
                error.details = None;
            }
            Err(error)
        }
    }
}

impl Runtime {
    /// Runs `executor` for an action and returns its result or error (never one holding a number
    /// beyond a double's range: a result holding one becomes `invalid_outcome`).
    pub async fn run_executor(
        &self,
        executor: Option<&str>,
        action_id: &str,
        execution_id: &str,
        parameters: &Value,
        reported: Option<&Value>,
    ) -> Result<Value, ExecuteError> {
        let outcome = self
            .dispatch(executor, action_id, execution_id, parameters, reported)
            .await;
        finite_outcome(outcome)
    }

    /// Runs `executor`: the agent's reported outcome, a built-in, an MCP tool or an HTTP endpoint.
    async fn dispatch(
        &self,
        executor: Option<&str>,
        action_id: &str,
        execution_id: &str,
        parameters: &Value,
        reported: Option<&Value>,
    ) -> Result<Value, ExecuteError> {
        match executor {
            None => match reported {
                Some(o) => reported_outcome(o),
                None => Ok(json!({"performed_by": "agent"})),
            },
            Some("builtin:echo") => Ok(json!({"echo": parameters})),
            Some(e) if e.starts_with(cra_atlas::mcp_import::EXECUTOR_PREFIX) => {
                self.mcp.run(e, parameters).await
            }
            Some(e) => match e.strip_prefix("http:") {
                Some(name) => match self.config.executors.get(name) {
                    Some(cfg) if cfg.kind == crate::config::ExecutorKind::Http => {
                        run_http(&self.http, name, cfg, action_id, execution_id, parameters).await
                    }
                    _ => Err(fail(
                        "executor_not_configured",
                        format!(
                            "no http endpoint is configured for executor `{name}`; an operator adds [executors.{name}] url = ... to the runtime configuration"
                        ),
                    )),
                },
                None => Err(fail(
                    "executor_unknown",
                    format!(
                        "executor `{e}` is not one this runtime provides (builtin:echo, http:<name>, mcp:<name>/<tool>)"
                    ),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 29, item 9: an action whose resolution recorded no origin (stored before origins
    /// were kept) and that no loaded atlas declares any more is `executor_unavailable`; until
    /// then it ran as an action the agent performs (`performed_by: agent`).
    #[test]
    fn an_action_no_atlas_declares_any_more_has_no_executor_rather_than_the_agent() {
        let none = AtlasState::empty();
        let e = executor_of(&none, None, "deploy.start").unwrap_err();
        assert_eq!(e.code, "executor_unavailable");
        assert!(e.message.contains("deploy.start"), "{}", e.message);
    }

    #[test]
    fn reported_outcomes() {
        assert_eq!(
            reported_outcome(&json!({"status": "success", "result": {"ok": 1}})).unwrap(),
            json!({"ok": 1})
        );
        let e = reported_outcome(
            &json!({"status": "error", "error": {"code": "boom", "message": "m"}}),
        )
        .unwrap_err();
        assert_eq!(e.code, "boom");
        assert_eq!(
            reported_outcome(&json!({"status": "maybe"}))
                .unwrap_err()
                .code,
            "invalid_outcome"
        );
    }
}

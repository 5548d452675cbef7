//! Request validation (CARP §3.6), one error token per rule.
//!
//! * Shape ([`parse_request`]): the request against `schemas/carp-request.schema.json` (compiled
//!   once), plus the timestamp's RFC 3339 form. Every violation is reported with its JSON
//!   pointer, token `invalid_request`.
//! * Rules (the `check_*` functions): pure checks over state the caller looked up, so the same
//!   code serves the runtime (state from a [`crate::CarpStore`]) and the in-process CLI.

use std::sync::OnceLock;

use cra_wire::clock::parse_rfc3339;
use cra_wire::{ErrorBody, FieldError, Token};
use serde_json::Value;
use time::OffsetDateTime;

use crate::store::{SessionRecord, StoredResolution};
use crate::types::{AllowedAction, CarpRequest, Execution, Resolution};

/// The default allowed distance between a request's timestamp and the runtime clock.
pub const DEFAULT_MAX_SKEW_SECONDS: i64 = 300;

/// A refused request: the token, a sentence, and the field-level problems.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CarpError {
    /// The wire token.
    pub token: Token,
    /// What happened and what to do.
    pub message: String,
    /// Field-level problems (JSON pointers into the request).
    pub errors: Vec<FieldError>,
    /// The policy that refused, when a policy did: the deny, rate limit, budget, time window or
    /// approval policy, or `default_deny` for an action no policy allowed. `None` for a refusal
    /// of the request itself (a bad field, an expired resolution).
    pub policy_id: Option<String>,
}

impl CarpError {
    /// An error without field details.
    pub fn new(token: Token, message: impl Into<String>) -> Self {
        Self {
            token,
            message: message.into(),
            errors: Vec::new(),
            policy_id: None,
        }
    }

    /// The same refusal, made by policy `policy_id`.
    pub fn by_policy(mut self, policy_id: impl Into<String>) -> Self {
        self.policy_id = Some(policy_id.into());
        self
    }

    /// The wire error body.
    pub fn to_body(&self) -> ErrorBody {
        let body = ErrorBody::new(self.token, self.message.clone());
        if self.errors.is_empty() {
            body
        } else {
            body.with_errors(self.errors.clone())
        }
    }
}

/// The JSON Schemas this crate publishes, embedded.
pub mod schemas {
    /// `schemas/carp-request.schema.json`.
    pub const REQUEST: &str = include_str!("../../../schemas/carp-request.schema.json");
    /// `schemas/carp-resolution.schema.json`.
    pub const RESOLUTION: &str = include_str!("../../../schemas/carp-resolution.schema.json");
    /// `schemas/carp-execute-request.schema.json`.
    pub const EXECUTE_REQUEST: &str =
        include_str!("../../../schemas/carp-execute-request.schema.json");
    /// `schemas/carp-execute-response.schema.json`.
    pub const EXECUTE_RESPONSE: &str =
        include_str!("../../../schemas/carp-execute-response.schema.json");
}

fn request_validator() -> Result<&'static jsonschema::Validator, CarpError> {
    static V: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    V.get_or_init(|| {
        let schema: Value = serde_json::from_str(schemas::REQUEST).map_err(|e| e.to_string())?;
        jsonschema::validator_for(&schema).map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| {
        CarpError::new(
            Token::InternalError,
            format!("the embedded CARP request schema does not compile: {e}"),
        )
    })
}

/// Every shape problem of `value` as a request, in schema order, with pointers.
pub fn shape_errors(value: &Value) -> Result<Vec<FieldError>, CarpError> {
    let v = request_validator()?;
    let mut out: Vec<FieldError> = v
        .iter_errors(value)
        .map(|e| {
            let pointer = e.instance_path().as_str().to_owned();
            let message = match pointer.as_str() {
                "/carp_version" => format!("{e}; this runtime speaks CARP \"1.0\""),
                _ => e.to_string(),
            };
            FieldError::new(pointer, message)
        })
        .collect();
    if let Some(Value::String(ts)) = value.get("timestamp")
        && let Err(e) = parse_rfc3339(ts)
    {
        out.push(FieldError::new("/timestamp", e.to_string()));
    }
    // A `required` failure is reported at the parent; name the missing member itself.
    for e in &mut out {
        if let Some(name) = missing_member(&e.message) {
            e.pointer = format!("{}/{}", e.pointer, name);
        }
    }
    Ok(out)
}

/// `"x" is a required property` -> `x`.
fn missing_member(message: &str) -> Option<String> {
    let rest = message.strip_prefix('"')?;
    let end = rest.find('"')?;
    rest[end..]
        .starts_with("\" is a required property")
        .then(|| rest[..end].to_owned())
}

/// Checks the shape of a JSON value and reads it as a request.
pub fn parse_request(value: &Value) -> Result<CarpRequest, CarpError> {
    let errors = shape_errors(value)?;
    if !errors.is_empty() {
        return Err(CarpError {
            policy_id: None,
            token: Token::InvalidRequest,
            message: format!(
                "the request is not a valid CARP/1.0 request ({} problem{}); see details",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            ),
            errors,
        });
    }
    // Read member by member from the object (not `from_value`, which re-renders numbers).
    let Value::Object(map) = value.clone() else {
        return Err(CarpError::new(
            Token::InvalidRequest,
            "the request is not a JSON object",
        ));
    };
    CarpRequest::try_from(map).map_err(|e| {
        CarpError::new(
            Token::InvalidRequest,
            format!("the request could not be read: {e}"),
        )
    })
}

/// Parses request text strictly (duplicate keys refused) and checks its shape.
pub fn parse_request_text(text: &str) -> Result<CarpRequest, CarpError> {
    let value: Value = cra_wire::json::parse_strict_str(text).map_err(|e| {
        CarpError::new(
            Token::InvalidRequest,
            format!("the request is not valid JSON: {e}"),
        )
    })?;
    parse_request(&value)
}

/// Rule 2: the timestamp is within `max_skew_seconds` of `now`, to the microsecond (300.000001 s
/// is refused: whole seconds would have let nearly one more second through).
pub fn check_clock_skew(
    request: &CarpRequest,
    now: OffsetDateTime,
    max_skew_seconds: i64,
) -> Result<(), CarpError> {
    let ts = parse_rfc3339(&request.timestamp).map_err(|e| CarpError {
        policy_id: None,
        token: Token::InvalidRequest,
        message: e.to_string(),
        errors: vec![FieldError::new("/timestamp", e.to_string())],
    })?;
    let skew = (ts - now).abs();
    if skew > time::Duration::seconds(max_skew_seconds) {
        let micros = skew.whole_microseconds();
        let (whole, fraction) = (micros / 1_000_000, micros % 1_000_000);
        return Err(CarpError {
            policy_id: None,
            token: Token::ClockSkew,
            message: format!(
                "the request timestamp {} is {whole}.{fraction:06} s from the runtime clock; at most {max_skew_seconds} s is accepted, check the client's clock",
                request.timestamp
            ),
            errors: vec![FieldError::new(
                "/timestamp",
                "outside the allowed clock skew",
            )],
        });
    }
    Ok(())
}

/// Rule 3: the session exists, is active and belongs to the requester.
pub fn check_session(
    request: &CarpRequest,
    session: Option<&SessionRecord>,
) -> Result<(), CarpError> {
    let sid = &request.requester.session_id;
    let Some(s) = session else {
        return Err(CarpError {
            policy_id: None,
            token: Token::SessionNotFound,
            message: format!("no session {sid}; open a session first"),
            errors: vec![FieldError::new("/requester/session_id", "unknown session")],
        });
    };
    if s.agent_id != request.requester.agent_id {
        return Err(CarpError {
            policy_id: None,
            token: Token::Forbidden,
            message: format!("session {sid} belongs to another agent; use a session you opened"),
            errors: vec![FieldError::new(
                "/requester/session_id",
                "session of another agent",
            )],
        });
    }
    if !s.is_active() {
        return Err(CarpError {
            policy_id: None,
            token: Token::SessionInactive,
            message: format!("session {sid} has ended; open a new session"),
            errors: vec![FieldError::new("/requester/session_id", "session ended")],
        });
    }
    check_parent(request, s)
}

/// A request that names `requester.parent_session_id` names the parent its session was opened
/// with (absent: no claim is made). A nested agent cannot claim another lineage than the one
/// recorded in `session.started`.
fn check_parent(request: &CarpRequest, session: &SessionRecord) -> Result<(), CarpError> {
    let Some(claimed) = &request.requester.parent_session_id else {
        return Ok(());
    };
    if session.parent_session_id.as_deref() == Some(claimed.as_str()) {
        return Ok(());
    }
    let sid = &request.requester.session_id;
    let recorded = match &session.parent_session_id {
        Some(p) => format!("was opened with parent {p}"),
        None => "was opened without a parent".to_owned(),
    };
    Err(CarpError {
        policy_id: None,
        token: Token::SessionMismatch,
        message: format!(
            "session {sid} {recorded}, not {claimed}; send the session's own parent_session_id or omit it"
        ),
        errors: vec![FieldError::new(
            "/requester/parent_session_id",
            "not the session's parent",
        )],
    })
}

/// Rule 1: `inserted` is what [`crate::CarpStore::insert_request_id`] answered.
pub fn check_request_id_new(request: &CarpRequest, inserted: bool) -> Result<(), CarpError> {
    if inserted {
        Ok(())
    } else {
        Err(CarpError {
            policy_id: None,
            token: Token::DuplicateRequestId,
            message: format!(
                "request_id {} was already used in session {}; send a new request_id",
                request.request_id, request.requester.session_id
            ),
            errors: vec![FieldError::new(
                "/request_id",
                "already used in this session",
            )],
        })
    }
}

/// The `execution` member of an execute request, or `invalid_request`.
pub fn execution_of(request: &CarpRequest) -> Result<&Execution, CarpError> {
    request.execution.as_ref().ok_or_else(|| CarpError {
        policy_id: None,
        token: Token::InvalidRequest,
        message: "an execute request needs an `execution` member".to_owned(),
        errors: vec![FieldError::new("/execution", "required for execute")],
    })
}

/// Rule 4: the resolution exists, belongs to the requester, was made in the requester's session
/// and has not expired at `now_us`. Returns the stored record.
pub fn check_resolution<'a>(
    request: &CarpRequest,
    stored: Option<&'a StoredResolution>,
    now_us: i64,
) -> Result<&'a StoredResolution, CarpError> {
    let exec = execution_of(request)?;
    let not_found = || CarpError {
        policy_id: None,
        token: Token::ResolutionNotFound,
        message: format!(
            "no resolution {} for this agent; resolve first",
            exec.resolution_id
        ),
        errors: vec![FieldError::new(
            "/execution/resolution_id",
            "unknown resolution",
        )],
    };
    let s = stored.ok_or_else(not_found)?;
    // Another agent's resolution is reported as unknown, so ids do not leak.
    if s.agent_id != request.requester.agent_id {
        return Err(not_found());
    }
    if s.session_id != request.requester.session_id {
        return Err(CarpError {
            policy_id: None,
            token: Token::SessionMismatch,
            message: format!(
                "resolution {} was made in session {}; execute it in that session, or resolve again in session {}",
                exec.resolution_id, s.session_id, request.requester.session_id
            ),
            errors: vec![FieldError::new(
                "/execution/resolution_id",
                "resolution of another session",
            )],
        });
    }
    if now_us >= s.expires_at_us {
        return Err(CarpError {
            policy_id: None,
            token: Token::ResolutionExpired,
            message: format!(
                "resolution {} expired (ttl {} s); resolve again",
                exec.resolution_id, s.resolution.ttl_seconds
            ),
            errors: vec![FieldError::new("/execution/resolution_id", "expired")],
        });
    }
    Ok(s)
}

/// Rule 4b: the execute's instant `now` is not before `resolution` was made by more than the
/// allowed skew: replicas' clocks may disagree that much (as clients' may), but an execute that
/// far before the resolution that allows it means a clock went back.
pub fn check_after_resolution(
    resolution: &Resolution,
    now: OffsetDateTime,
    max_skew_seconds: i64,
) -> Result<(), CarpError> {
    let Ok(made) = parse_rfc3339(&resolution.timestamp) else {
        return Ok(());
    };
    if made - now <= time::Duration::seconds(max_skew_seconds) {
        return Ok(());
    }
    Err(CarpError {
        policy_id: None,
        token: Token::ClockSkew,
        message: format!(
            "the runtime clock is more than {max_skew_seconds} s before resolution {} was made ({}): an execute cannot precede the resolution that allows it; the clock went back, or a replica's clock is behind",
            resolution.resolution_id, resolution.timestamp
        ),
        errors: vec![FieldError::new(
            "/execution/resolution_id",
            "made after the runtime clock's now",
        )],
    })
}

/// Rule 5: the action is in the resolution's `allowed_actions`.
pub fn check_action_allowed<'a>(
    request: &CarpRequest,
    resolution: &'a Resolution,
) -> Result<&'a AllowedAction, CarpError> {
    let exec = execution_of(request)?;
    resolution
        .allowed_actions
        .iter()
        .find(|a| *a.action_id == *exec.action_id)
        .ok_or_else(|| CarpError {
            policy_id: Some(deciding_policy(resolution, &exec.action_id)),
            token: Token::ActionNotAllowed,
            message: format!(
                "action {} is not allowed by resolution {}; resolve for it first",
                exec.action_id, resolution.resolution_id
            ),
            errors: vec![FieldError::new("/execution/action_id", "not allowed")],
        })
}

/// The policy that kept `action_id` out of `resolution`'s allowed actions: the one its denied
/// entry names, or `default_deny` when the resolution does not list the action at all.
fn deciding_policy(resolution: &Resolution, action_id: &str) -> String {
    resolution
        .denied_actions
        .iter()
        .find(|d| *d.action_id == *action_id)
        .map_or_else(|| "default_deny".to_owned(), |d| d.policy_id.to_string())
}

/// Rule 6: the parameters satisfy the action's compiled `parameters_schema`. Every violation is
/// reported, with pointers into the request (`/execution/parameters/...`).
pub fn check_parameters(
    validator: &jsonschema::Validator,
    action_id: &str,
    parameters: &Value,
) -> Result<(), CarpError> {
    let errors: Vec<FieldError> = validator
        .iter_errors(parameters)
        .map(|e| {
            let mut pointer = format!("/execution/parameters{}", e.instance_path().as_str());
            let message = e.to_string();
            if let Some(name) = missing_member(&message) {
                pointer = format!("{pointer}/{name}");
            }
            FieldError::new(pointer, message)
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CarpError {
            policy_id: None,
            token: Token::InvalidParameters,
            message: format!(
                "the parameters do not satisfy the parameters_schema of {action_id} ({} problem{}); see details",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            ),
            errors,
        })
    }
}

/// Compiles a schema taken from a stored resolution (used when the atlas that produced it is
/// no longer loaded, or changed since).
pub fn compile_schema(action_id: &str, schema: &Value) -> Result<jsonschema::Validator, CarpError> {
    jsonschema::validator_for(schema).map_err(|e| {
        CarpError::new(
            Token::InternalError,
            format!("the parameters_schema of {action_id} does not compile: {e}"),
        )
    })
}

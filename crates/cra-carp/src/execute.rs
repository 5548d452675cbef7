//! Execute authorisation: given the stored resolution (already checked to exist, belong to the
//! requester and be unexpired), the approval (if the action is gated) and the clock, decide
//! before any executor runs whether the execution may proceed, and with which counter charges.
//! Pure; the caller then asks the store to consume the charges atomically
//! ([`crate::CarpStore::try_consume`]) and only runs the executor if they fit.

use std::borrow::Cow;

use cra_wire::{FieldError, Token};
use serde_json::Value;
use time::OffsetDateTime;

use crate::eval::scope_key;
use crate::history::HistoryConditions;
use crate::index::{Scope, budget_cost};
use crate::params::ParamConditions;
use crate::store::{ApprovalRecord, ApprovalStatus, Charge, ChargeKind, ConsumeOutcome};
use crate::types::{AllowedAction, CarpRequest, ConstraintType, Resolution};
use crate::validate::{CarpError, check_parameters, execution_of};

/// What to do with an execute request.
#[derive(Debug, Clone, PartialEq)]
pub enum Authorization {
    /// May run once these charges are consumed.
    Proceed {
        /// The allowed action from the resolution.
        action: AllowedAction,
        /// Rate-limit and budget charges, in constraint order.
        charges: Vec<Charge>,
    },
    /// A gated call and no approval open under the resolution yet: the caller opens its
    /// approval for this call ([`crate::store::ApprovalCall`]) and answers it pending.
    OpenApproval {
        /// The resolution's approval id, which the opened approval takes.
        approval_id: String,
        /// The call's parameters digest, which the approval is bound to.
        parameters_hash: String,
    },
    /// Waiting for the resolution's approval.
    PendingApproval {
        /// The approval to decide.
        approval_id: String,
    },
    /// A rule refused it (approval rejected, outside a time window).
    Denied(CarpError),
}

fn scope_of(v: Option<&Value>) -> Scope {
    match v.and_then(Value::as_str) {
        Some("session") => Scope::Session,
        Some("global") => Scope::Global,
        _ => Scope::Agent,
    }
}

/// What is in force when an execute is decided, beside its resolution.
#[derive(Debug, Clone, Copy, Default)]
pub struct InForce<'a> {
    /// The atlases loaded now. A step of the resolution's `parameters` constraint whose tests
    /// are written exactly as the loaded policy's uses the policy's compiled tests instead of
    /// compiling them again; any other step is compiled from what the resolution recorded.
    pub atlases: Option<&'a crate::index::AtlasSet>,
    /// The atlas that offered the action, `(atlas_id, digest)` as it is loaded now (`None`
    /// when it is no longer loaded), which a granted approval must have been asked under.
    pub atlas: Option<(&'a str, &'a str)>,
}

/// Decides an execute request. `validator` is the compiled `parameters_schema` of the action;
/// `approval` is the record named by the resolution's `approval_id`, if any; `in_force` is what
/// the atlases say now.
#[expect(
    clippy::too_many_arguments,
    reason = "the inputs of one decision, each read by the caller from another place"
)]
pub fn authorize(
    request: &CarpRequest,
    resolution: &Resolution,
    action: &AllowedAction,
    validator: &jsonschema::Validator,
    approval: Option<&ApprovalRecord>,
    in_force: InForce<'_>,
    now: OffsetDateTime,
    marked: &mut Marked<'_>,
) -> Result<Authorization, CarpError> {
    let exec = execution_of(request)?;
    check_parameters(validator, &action.action_id, &exec.parameters)?;

    let call = Call {
        action_id: &action.action_id,
        parameters: &exec.parameters,
        ids: (&request.requester.agent_id, &request.requester.session_id),
        now_us: crate::eval::unix_micros(now),
    };
    let mut on_params = on_parameters(resolution, &call, in_force.atlases, marked)?;
    let gated = match &on_params.gate {
        Gate::AsResolved => action.requires_confirmation,
        Gate::Allow => false,
        Gate::Approval { .. } => true,
        Gate::Deny(refusal) => return Ok(Authorization::Denied(refusal.clone())),
    };
    let mut use_approval = None;
    if gated {
        // The call's digest, which every approval check compares (`action.requested`'s
        // `parameters_hash`).
        let hash = cra_wire::hash::canonical_digest(&exec.parameters);
        if let Gate::Approval { policy_id, bound } = &on_params.gate
            && let Some(refusal) = approval_binds(action, policy_id, bound.as_deref(), &hash)
        {
            return Ok(Authorization::Denied(refusal));
        }
        let Some(approval_id) = resolution.decision.approval_id.clone() else {
            return Err(CarpError::new(
                Token::InternalError,
                "the resolution gates this action but carries no approval_id",
            ));
        };
        let Some(approval) = approval else {
            return Ok(Authorization::OpenApproval {
                approval_id,
                parameters_hash: hash,
            });
        };
        // A refusal names the require_approval policy that gates the action.
        let gate = resolution.constraints.iter().find(|c| {
            c.kind == ConstraintType::RequireApproval && c.parameters.binds(&action.action_id)
        });
        let policy = gate.and_then(|c| c.parameters.get("policy_id")?.as_str());
        let by_gate = |refused: CarpError| match policy {
            Some(p) => refused.by_policy(p),
            None => refused,
        };
        if let Some(refusal) = approval_covers(approval, action, &hash, in_force.atlas) {
            return Ok(Authorization::Denied(by_gate(refusal)));
        }
        match approval.status {
            ApprovalStatus::Pending => {
                return Ok(Authorization::PendingApproval { approval_id });
            }
            ApprovalStatus::Rejected => {
                return Ok(Authorization::Denied(by_gate(CarpError::new(
                    Token::ApprovalRejected,
                    format!(
                        "approval {approval_id} for {} was rejected; resolve again or ask an approver",
                        action.action_id
                    ),
                ))));
            }
            ApprovalStatus::Granted => {
                // An approval asked for one call runs it once: its use is a charge, taken with
                // the call's limits in the store's one atomic step.
                use_approval = approval
                    .call
                    .as_ref()
                    .map(|_| approval_use(&approval_id, &request.requester.session_id, resolution));
            }
        }
    }

    let now_utc = now.to_offset(time::UtcOffset::UTC);
    let (hour, weekday) = (now_utc.hour(), now_utc.weekday().number_days_from_monday());
    let (agent, session) = (&request.requester.agent_id, &request.requester.session_id);
    let mut charges = Vec::new();
    for c in &resolution.constraints {
        if !c.parameters.binds(&action.action_id) {
            continue;
        }
        let p = &c.parameters;
        let policy_id = p
            .get("policy_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if on_params.unbound.contains(&policy_id) {
            continue; // A limit whose parameter conditions this call does not meet.
        }
        let u = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0);
        match c.kind {
            ConstraintType::TimeWindow => {
                let (start, end) = (u("start_hour"), u("end_hour"));
                let in_hours = if start < end {
                    u64::from(hour) >= start && u64::from(hour) < end
                } else {
                    u64::from(hour) >= start || u64::from(hour) < end
                };
                const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
                let on_day = p.get("weekdays").and_then(Value::as_array).is_none_or(|d| {
                    d.iter().any(|x| {
                        x.as_str()
                            .is_some_and(|s| s.eq_ignore_ascii_case(DAYS[weekday as usize]))
                    })
                });
                if !(in_hours && on_day) {
                    return Ok(Authorization::Denied(CarpError {
                        policy_id: Some(policy_id.clone()),
                        token: Token::ActionNotAllowed,
                        message: format!(
                            "{} may only run inside the time window of policy {policy_id} (UTC hours {start}-{end}); try again then",
                            action.action_id
                        ),
                        errors: vec![FieldError::new(
                            "/execution/action_id",
                            "outside the policy's time window",
                        )],
                    }));
                }
            }
            ConstraintType::RateLimit | ConstraintType::Budget => {
                let ids = (agent.as_str(), session.as_str());
                charges.extend(limit_charge(
                    c.kind,
                    policy_id,
                    &p.fields,
                    &action.action_id,
                    ids,
                ));
            }
            ConstraintType::RequireApproval | ConstraintType::Parameters => {}
        }
    }
    charges.append(&mut on_params.charges);
    charges.extend(use_approval);
    Ok(Authorization::Proceed {
        action: action.clone(),
        charges,
    })
}

/// The charge a rate limit or budget (`kind`) of `policy_id` with the constraint fields `fields`
/// takes for one call of `action_id` by `ids` (agent, session); `None` for another kind.
pub(crate) fn limit_charge(
    kind: ConstraintType,
    policy_id: String,
    fields: &serde_json::Map<String, Value>,
    action_id: &str,
    ids: (&str, &str),
) -> Option<Charge> {
    let u = |k: &str| fields.get(k).and_then(Value::as_u64).unwrap_or(0);
    let scope_key = scope_key(scope_of(fields.get("scope")), ids.0, ids.1);
    let kind = match kind {
        ConstraintType::RateLimit => ChargeKind::Rate {
            max_calls: u("max_calls"),
            window_seconds: u("window_seconds"),
        },
        ConstraintType::Budget => {
            let costs = fields.get("costs").and_then(Value::as_object);
            ChargeKind::Budget {
                max_units: u("max_units"),
                units: costs.map_or(1, |c| budget_cost(c, action_id)),
            }
        }
        _ => return None,
    };
    Some(Charge {
        policy_id,
        scope_key,
        kind,
    })
}

/// Whether a history predicate's counter has a mark for a key after an instant:
/// `(counter, scope_key, since_us)` ([`crate::history::HistoryConditions::predicates_hold`]).
pub type Marked<'a> = dyn FnMut(&str, &str, i64) -> Result<bool, CarpError> + 'a;

/// The call an execute asks for, as the steps of a walk read it (the `parameters` constraint's,
/// a shadow plan's).
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The action.
    pub action_id: &'a str,
    /// The call's parameters (already checked against the action's schema).
    pub parameters: &'a Value,
    /// The requester's agent and session.
    pub ids: (&'a str, &'a str),
    /// The instant of the decision, Unix microseconds.
    pub now_us: i64,
}

/// What a resolution's `parameters` constraint decides for one call of the action.
struct OnParameters {
    gate: Gate,
    /// Rate-limit and budget policies whose parameter conditions this call does not meet: their
    /// constraints do not charge it.
    unbound: Vec<String>,
    /// The `count_within` and `sum_within` charges of the limits that bind the call: those of
    /// every step that holds (a deny's has none).
    charges: Vec<Charge>,
}

/// The grant or refusal the call's parameters lead to.
enum Gate {
    /// No `parameters` constraint binds the action: the resolution's answer stands.
    AsResolved,
    /// An allow decided: runs without an approval.
    Allow,
    /// A `require_approval` decided: runs once the resolution's approval is granted, and, when
    /// the deciding policy tests parameters, only with the parameters the approval was asked for
    /// (`bound`, their digest).
    Approval {
        policy_id: String,
        bound: Option<String>,
    },
    /// A deny (or, when no grant holds, the default deny) decided.
    Deny(CarpError),
}

/// Walks the steps of the `parameters` constraint binding `action_id`, if any, on the call's
/// `parameters`: the first deny, require_approval or allow whose tests hold (or that has none)
/// decides, as it would have at resolve; limits whose tests fail are left unbound.
fn on_parameters(
    resolution: &Resolution,
    call: &Call<'_>,
    atlases: Option<&crate::index::AtlasSet>,
    marked: &mut Marked<'_>,
) -> Result<OnParameters, CarpError> {
    let action_id = call.action_id;
    let mut out = OnParameters {
        gate: Gate::AsResolved,
        unbound: Vec::new(),
        charges: Vec::new(),
    };
    let Some(c) = resolution
        .constraints
        .iter()
        .find(|c| c.kind == ConstraintType::Parameters && c.parameters.binds(action_id))
    else {
        return Ok(out);
    };
    let corrupt = || {
        CarpError::new(
            Token::InternalError,
            format!(
                "the stored resolution's constraint {} is malformed; resolve again",
                c.constraint_id
            ),
        )
    };
    let steps = c
        .parameters
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(corrupt)?;
    // The atlas the constraint came from, as loaded now: its policies' compiled tests are
    // reused for every step written as they are.
    let loaded = c
        .parameters
        .get("atlas_id")
        .and_then(Value::as_str)
        .and_then(|id| atlases?.get(id));
    let Walk {
        decided,
        unbound,
        holding,
    } = walk_steps(steps, loaded, call, marked, &corrupt)?;
    out.unbound = unbound;
    // A limit stated on a policy binds every call the policy applies to, whichever grant
    // decides: an approval above a threshold does not lift the allow's daily total.
    let binding = holding
        .into_iter()
        .filter_map(|h| Some((h.policy_id, h.history.filter(|k| k.has_limits())?)));
    let refuse = |policy_id: &str, reason: &str| CarpError {
        policy_id: Some(policy_id.to_owned()),
        token: Token::ActionNotAllowed,
        message: format!("{reason} ({action_id} was refused on its parameters)"),
        errors: vec![FieldError::new(
            "/execution/parameters",
            "the call's parameters are refused by policy",
        )],
    };
    out.gate = match decided {
        Some(("allow", ..)) => Gate::Allow,
        Some(("require_approval", policy_id, step)) => Gate::Approval {
            policy_id: policy_id.to_owned(),
            bound: step
                .get("when")
                .and_then(|_| c.parameters.get("intended_parameters_hash")?.as_str())
                .map(str::to_owned),
        },
        Some((_, policy_id, step)) => {
            let reason = step.get("reason").and_then(Value::as_str);
            let reason =
                reason.map_or_else(|| format!("Denied by policy {policy_id}"), str::to_owned);
            Gate::Deny(refuse(policy_id, &reason))
        }
        None => Gate::Deny(refuse(
            crate::eval::DEFAULT_DENY,
            "No policy allows this action with these parameters and this history",
        )),
    };
    if matches!(out.gate, Gate::Deny(_)) {
        return Ok(out);
    }
    for (policy_id, h) in binding {
        match h.charges(call.parameters, call.ids) {
            Ok(mut charges) => out.charges.append(&mut charges),
            Err(u) => {
                out.gate = Gate::Deny(CarpError {
                    policy_id: Some(policy_id.to_owned()),
                    token: Token::ActionNotAllowed,
                    message: format!(
                        "policy {policy_id} limits {action_id} by its parameters, and this call's {} {} (counter {})",
                        u.pointer, u.message, u.counter
                    ),
                    errors: vec![FieldError::new(
                        format!("/execution/parameters{}", u.pointer),
                        u.message,
                    )],
                });
                return Ok(out);
            }
        }
    }
    Ok(out)
}

/// A step of a walk whose tests held on the call.
pub(crate) struct Holding<'s, 'a> {
    pub(crate) policy_id: &'s str,
    /// The step as written.
    pub(crate) step: &'s Value,
    /// Its history tests, compiled (borrowed from the loaded policy when written alike).
    pub(crate) history: Option<Cow<'a, HistoryConditions>>,
}

/// What walking a list of steps on a call gives.
pub(crate) struct Walk<'s, 'a> {
    /// The first grant or deny whose tests hold (or that has none): `(type, policy_id, step)`.
    pub(crate) decided: Option<(&'s str, &'s str, &'s Value)>,
    /// Rate-limit and budget policies whose tests fail.
    pub(crate) unbound: Vec<String>,
    /// Every step whose tests hold, in order.
    pub(crate) holding: Vec<Holding<'s, 'a>>,
}

/// Walks `steps` (`{policy_id, type, when?, history?}`, as written by
/// [`crate::eval::step_of`]) on the call: each step's parameter tests, then its history
/// predicates (read through `marked`). `loaded` is the atlas the steps came from as loaded now;
/// a step written as its policy is uses the policy's compiled tests. A malformed step is
/// `corrupt()`.
pub(crate) fn walk_steps<'s, 'a>(
    steps: &'s [Value],
    loaded: Option<&'a crate::index::CompiledAtlas>,
    call: &Call<'_>,
    marked: &mut Marked<'_>,
    corrupt: &dyn Fn() -> CarpError,
) -> Result<Walk<'s, 'a>, CarpError> {
    let mut walk = Walk {
        decided: None,
        unbound: Vec::new(),
        holding: Vec::new(),
    };
    for step in steps {
        let text = |k: &str| step.get(k).and_then(Value::as_str);
        let (Some(kind), Some(policy_id)) = (text("type"), text("policy_id")) else {
            return Err(corrupt());
        };
        let policy = loaded.and_then(|a| a.policy(policy_id));
        let history = match step.get("history") {
            None => None,
            Some(h) => Some(match policy.and_then(|p| p.conditions.history.as_ref()) {
                Some(k) if k.written() == h => Cow::Borrowed(k),
                _ => Cow::Owned(HistoryConditions::compile(policy_id, h).map_err(|_| corrupt())?),
            }),
        };
        let mut holds = match step.get("when") {
            None => true,
            Some(w) => match policy.and_then(|p| p.conditions.parameters.as_ref()) {
                Some(k) if k.written() == w => k.holds(call.parameters),
                _ => ParamConditions::compile(w)
                    .map_err(|_| corrupt())?
                    .holds(call.parameters),
            },
        };
        if holds && let Some(h) = &history {
            holds = h.predicates_hold(call.parameters, call.ids, call.now_us, marked)?;
        }
        let limits = kind == "rate_limit" || kind == "budget";
        if !holds {
            if limits {
                walk.unbound.push(policy_id.to_owned());
            }
            continue;
        }
        if !limits && walk.decided.is_none() {
            walk.decided = Some((kind, policy_id, step));
        }
        walk.holding.push(Holding {
            policy_id,
            step,
            history,
        });
    }
    Ok(walk)
}

/// Whether the resolution's approval covers this call when a `require_approval` that tests
/// parameters decided: the action must have been gated at resolve (the task stated intended
/// parameters on which the policy held), and the call's parameters must be those (`bound`).
fn approval_binds(
    action: &AllowedAction,
    policy_id: &str,
    bound: Option<&str>,
    hash: &str,
) -> Option<CarpError> {
    let id = &action.action_id;
    if !action.requires_confirmation {
        return Some(
            CarpError::new(
                Token::ApprovalRequired,
                format!(
                    "policy {policy_id} requires a human approval for {id} with these parameters, and the resolution asked for none; resolve again with task.intended_parameters.{id} set to them, then execute once the approval is granted"
                ),
            )
            .by_policy(policy_id),
        );
    }
    match bound {
        Some(b) if b != hash => Some(
            CarpError::new(
                Token::ApprovalMismatch,
                format!(
                    "the approval under policy {policy_id} was asked for other parameters of {id} ({b}) than this call's ({hash}); execute with the parameters the approval was asked for, or resolve again with these"
                ),
            )
            .by_policy(policy_id),
        ),
        _ => None,
    }
}

/// The charge that uses a granted approval up: one run in a window twice the resolution's
/// lifetime, after which no execute under the resolution is accepted anyway. Session-scoped,
/// so a session's removal by retention removes it.
fn approval_use(approval_id: &str, session_id: &str, resolution: &Resolution) -> Charge {
    Charge {
        policy_id: format!("approval:{approval_id}"),
        scope_key: format!("session:{session_id}"),
        kind: ChargeKind::Once {
            window_seconds: resolution.ttl_seconds.saturating_mul(2).max(1),
        },
    }
}

/// Whether an opened approval covers this call: the same action, the same parameters (digest of
/// the canonical form) and the same atlas version it was asked under. An approval opened by a
/// resolve before round 2 (no `call`) covers every action it names.
fn approval_covers(
    approval: &ApprovalRecord,
    action: &AllowedAction,
    hash: &str,
    atlas: Option<(&str, &str)>,
) -> Option<CarpError> {
    let call = approval.call.as_ref()?;
    let (id, approval_id) = (action.action_id.as_str(), &approval.approval_id);
    let mismatch = |why: String| {
        Some(CarpError::new(
            Token::ApprovalMismatch,
            format!(
                "approval {approval_id} was asked for another call: {why}; execute that call, or resolve again to ask an approval for this one"
            ),
        ))
    };
    if call.action_id != id {
        return mismatch(format!("action {} (this call: {id})", call.action_id));
    }
    if call.parameters_hash != hash {
        return mismatch(format!(
            "parameters {} (this call: {hash})",
            call.parameters_hash
        ));
    }
    match atlas {
        Some((atlas_id, digest)) if atlas_id == call.atlas_id && digest == call.atlas_digest => {
            None
        }
        Some((atlas_id, digest)) => mismatch(format!(
            "atlas {} at {} (in force now: {atlas_id} at {digest})",
            call.atlas_id, call.atlas_digest
        )),
        None => mismatch(format!(
            "atlas {} at {}, which is no longer loaded",
            call.atlas_id, call.atlas_digest
        )),
    }
}

/// Seconds until a refused windowed charge would fit, for `Retry-After`: the least `d` in
/// `1..=window_seconds` such that the units recorded now that are still inside the window at
/// `now + d`, plus `need`, stay at most `max` (a rate limit needs 1 of `max_calls`). A binary
/// search over the counter (`log2(window)` reads; a refusal is rare). `None` when the charge
/// can never fit (`need > max`, or an approval's use: it fits no later run by waiting).
/// Charges recorded later can make the wait longer: the answer
/// is advice, the charge at retry decides.
pub fn window_retry_after(
    store: &dyn crate::CarpStore,
    charge: &Charge,
    now_us: i64,
) -> Result<Option<u64>, crate::CarpStoreError> {
    let Some((max, need, window_seconds)) = charge.kind.windowed() else {
        return Ok(None);
    };
    if need > max || matches!(charge.kind, ChargeKind::Once { .. }) {
        return Ok(None);
    }
    let window_us = crate::eval::seconds_to_us(window_seconds);
    let fits_after = |d: u64| -> Result<bool, crate::CarpStoreError> {
        let since = now_us
            .saturating_add(crate::eval::seconds_to_us(d))
            .saturating_sub(window_us);
        let used = store.rate_count(&charge.policy_id, &charge.scope_key, since, now_us)?;
        Ok(used.saturating_add(need) <= max)
    };
    let (mut lo, mut hi) = (1u64, window_seconds.max(1));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits_after(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(Some(lo))
}

/// The policy a counter belongs to: a history limit's counter `<policy_id>#<n>` is its
/// policy's; any other counter is named by its policy id.
fn counter_policy(counter: &str) -> &str {
    counter.rsplit_once('#').map_or(counter, |(p, _)| p)
}

/// The error for a charge the store refused.
pub fn refusal_error(outcome: &ConsumeOutcome) -> Option<CarpError> {
    match outcome {
        ConsumeOutcome::Consumed { .. } => None,
        ConsumeOutcome::Refused {
            policy_id: counter,
            kind: ChargeKind::Once { .. },
            ..
        } => {
            let approval_id = counter.strip_prefix("approval:").unwrap_or(counter);
            Some(CarpError::new(
                Token::ApprovalUsed,
                format!(
                    "approval {approval_id} has run its call once already; resolve again to ask for another approval"
                ),
            ))
        }
        ConsumeOutcome::Refused {
            policy_id,
            kind:
                ChargeKind::Rate {
                    max_calls,
                    window_seconds,
                },
            used,
            ..
        } => Some(CarpError::new(
            Token::RateLimitExceeded,
            format!(
                "rate limit {policy_id} reached: {used} of {max_calls} executions in the last {window_seconds} s; wait and retry"
            ),
        )
        .by_policy(counter_policy(policy_id))),
        ConsumeOutcome::Refused {
            policy_id: counter,
            kind:
                ChargeKind::Window {
                    max_units,
                    window_seconds,
                    units,
                },
            used,
            ..
        } => {
            let (used, max, units) = (
                crate::history::decimal(*used),
                crate::history::decimal(*max_units),
                crate::history::decimal(*units),
            );
            let policy_id = counter_policy(counter);
            Some(CarpError::new(
                Token::RateLimitExceeded,
                format!(
                    "policy {policy_id} limits the total of this call's amount to {max} in {window_seconds} s ({counter}): {used} is counted, and {units} more does not fit; wait for earlier calls to leave the window, or ask for less"
                ),
            )
            .by_policy(policy_id))
        }
        ConsumeOutcome::Refused {
            policy_id,
            kind: ChargeKind::Budget { max_units, units },
            used,
            ..
        } => Some(CarpError::new(
            Token::BudgetExhausted,
            format!(
                "budget {policy_id} cannot cover {units} more units: {used} of {max_units} spent"
            ),
        )
        .by_policy(policy_id)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    /// A resolution whose only constraint is a `parameters` one binding `x.run` with `steps`.
    fn with_steps(steps: Value) -> Resolution {
        serde_json::from_value(json!({
            "carp_version": "1.0", "resolution_id": "r", "request_id": "q",
            "timestamp": "2026-01-05T10:00:00.000000Z",
            "decision": {"type": "allow", "reason": null},
            "context_blocks": [], "allowed_actions": [], "denied_actions": [],
            "constraints": [{"constraint_id": "parameters:x.run", "type": "parameters",
                             "parameters": {"atlas_id": "a", "actions": ["x.run"], "steps": steps}}],
            "ttl_seconds": 3600, "trace_id": "t"
        }))
        .unwrap()
    }

    /// The walk of `action_id` called with `parameters` by agent `a` in session `s` at 1 s, with
    /// marks on the counters listed in `marks` only.
    fn walk_with(
        r: &Resolution,
        action_id: &str,
        parameters: &Value,
        marks: &[&str],
    ) -> Result<OnParameters, CarpError> {
        let call = Call {
            action_id,
            parameters,
            ids: ("a", "s"),
            now_us: 1_000_000,
        };
        on_parameters(r, &call, None, &mut |counter, _, _| {
            Ok(marks.contains(&counter))
        })
    }

    fn walk(
        r: &Resolution,
        action_id: &str,
        parameters: &Value,
    ) -> Result<OnParameters, CarpError> {
        walk_with(r, action_id, parameters, &[])
    }

    #[test]
    fn history_predicates_gate_a_grant_and_the_limits_of_every_holding_step_charge() {
        let steps = json!([
            {"policy_id": "allow-after", "type": "allow",
             "history": [{"after": {"action": "lookup"}, "scope": "session"},
                         {"count_within": {"max": 2, "window_seconds": 60}, "scope": "agent"}]},
            {"policy_id": "rl", "type": "rate_limit",
             "history": [{"sum_within": {"pointer": "/amount", "max": 10, "window_seconds": 60}, "scope": "global"}]}
        ]);
        let r = with_steps(steps);
        let before = walk(&r, "x.run", &json!({"amount": 1})).unwrap();
        assert!(
            matches!(before.gate, Gate::Deny(_)),
            "no lookup yet: the default deny"
        );
        assert!(before.charges.is_empty());
        let after = walk_with(&r, "x.run", &json!({"amount": 1}), &["allow-after#0"]).unwrap();
        assert!(matches!(after.gate, Gate::Allow));
        let counters: Vec<&str> = after.charges.iter().map(|c| c.policy_id.as_str()).collect();
        assert_eq!(counters, ["allow-after#1", "rl#0"], "in step order");
        let lacking = walk_with(&r, "x.run", &json!({}), &["allow-after#0"]).unwrap();
        let Gate::Deny(e) = lacking.gate else {
            panic!("a call without the summed member was let through")
        };
        assert_eq!(e.policy_id.as_deref(), Some("rl"));
        assert_eq!(e.errors[0].pointer, "/execution/parameters/amount");
    }

    #[test]
    fn a_malformed_parameters_constraint_refuses_as_an_internal_error() {
        for steps in [
            json!("not a list"),
            json!([{"type": "deny"}]),
            json!([{"policy_id": "d", "type": "deny", "when": [{"pointer": "x"}]}]),
            json!([{"policy_id": "d", "type": "allow", "history": [{"after": {}}]}]),
        ] {
            let e = walk(&with_steps(steps.clone()), "x.run", &json!({}))
                .err()
                .unwrap_or_else(|| panic!("{steps} was accepted"));
            assert_eq!(e.token, Token::InternalError, "{steps}");
            assert!(e.message.contains("parameters:x.run"), "{}", e.message);
        }
    }

    #[test]
    fn the_first_holding_step_decides_and_failing_limits_are_unbound() {
        let steps = json!([
            {"policy_id": "deny-main", "type": "deny", "reason": "No.",
             "when": [{"pointer": "/branch", "equals": "main"}]},
            {"policy_id": "rl", "type": "rate_limit",
             "when": [{"pointer": "/level", "equals": "debug"}]},
            {"policy_id": "allow-all", "type": "allow"}
        ]);
        let r = with_steps(steps);
        let main = walk(&r, "x.run", &json!({"branch": "main"})).unwrap();
        let Gate::Deny(e) = main.gate else {
            panic!("main was not denied")
        };
        assert_eq!(e.policy_id.as_deref(), Some("deny-main"));
        assert!(e.message.starts_with("No."), "{}", e.message);
        let other = walk(&r, "x.run", &json!({"branch": "x", "level": "info"})).unwrap();
        assert!(matches!(other.gate, Gate::Allow));
        assert_eq!(other.unbound, ["rl"]);
        let unbound = walk(&r, "y.run", &json!({})).unwrap();
        assert!(matches!(unbound.gate, Gate::AsResolved));
    }
}

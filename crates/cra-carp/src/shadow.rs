//! Shadow mode at execute (`specs/carp.md`, "Shadow mode"): what an execute would have been
//! decided with the `log_only` policies enforced, beside what it was decided.
//!
//! A resolve that grants an action some `log_only` policy matches stores a [`ShadowPlan`] with
//! the action's origin: the walk execute makes on the call as enforced (`enforced`), and the same
//! walk with the `log_only` policies in it (`shadow`). At execute, [`at_execute`] walks both on
//! the call's parameters and history, and checks the `log_only` limits of the shadow walk
//! without charging them. Where the two decide otherwise (another outcome or another deciding
//! policy), the execute's `action.requested` records the shadow's; nothing of it ever changes the
//! answer. The enforced limits are left to the store's atomic consume, alike for both walks, so
//! they never make a disagreement.
//!
//! Pure, like [`crate::execute`]: marks and counters are read through the caller's closures.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::execute::{Call, Marked, Walk, limit_charge, walk_steps};
use crate::explain::{Outcome, ShadowExplain};
use crate::index::CompiledAtlas;
use crate::store::Charge;
use crate::types::ConstraintType;
use crate::validate::CarpError;
use cra_wire::Token;

/// The two walks execute makes for a granted action some `log_only` policy matches. Each is a
/// list of steps as the `parameters` constraint writes them, complete (also when the outcome does
/// not depend on the call). A `shadow` step of a `log_only` policy says `log_only: true`, and a
/// `log_only` rate limit or budget carries its constraint's fields as `limit`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowPlan {
    /// The walk as enforced.
    pub enforced: Vec<Value>,
    /// The walk with the `log_only` policies enforced.
    pub shadow: Vec<Value>,
}

impl ShadowPlan {
    /// The plan of an action from its two walks' steps (policy indexes into `atlas`).
    pub(crate) fn of(atlas: &CompiledAtlas, enforced: &[usize], shadow: &[usize]) -> Self {
        let step = |pi: usize| Value::Object(crate::eval::step_of(atlas, pi));
        let shadow_step = |pi: usize| {
            let mut s = crate::eval::step_of(atlas, pi);
            if atlas.policies[pi].shadow {
                s.insert("log_only".to_owned(), Value::Bool(true));
                if let Some(limit) = crate::eval::limit_of(atlas, pi) {
                    s.insert("limit".to_owned(), Value::Object(limit));
                }
            }
            Value::Object(s)
        };
        ShadowPlan {
            enforced: enforced.iter().map(|&pi| step(pi)).collect(),
            shadow: shadow.iter().map(|&pi| shadow_step(pi)).collect(),
        }
    }
}

/// Whether a charge would fit now, read without taking it.
pub type Fits<'a> = dyn FnMut(&Charge) -> Result<bool, CarpError> + 'a;

/// What shadow mode makes of one execute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShadowDecision {
    /// What the shadow walk decides for the call, when it differs from what the enforced walk
    /// decides; `None` when they agree.
    pub disagreement: Option<ShadowExplain>,
    /// The `log_only` limits' charges, uncapped ([`crate::store::ChargeKind::uncapped`]): taken
    /// with the call's own when it runs, so each limit counts the calls it let through. Empty
    /// when the shadow refuses the call (a call it refuses is not one it would have counted).
    pub counted: Vec<Charge>,
}

/// Walks `plan` on the call. `loaded` is the atlas that offered the action, as loaded now (its
/// compiled tests are reused for steps written alike). `marked` reads history marks and `fits`
/// the counters of the `log_only` limits.
pub fn at_execute(
    plan: &ShadowPlan,
    loaded: Option<&CompiledAtlas>,
    call: Call<'_>,
    marked: &mut Marked<'_>,
    fits: &mut Fits<'_>,
) -> Result<ShadowDecision, CarpError> {
    let corrupt = || {
        CarpError::new(
            Token::InternalError,
            format!(
                "the stored shadow plan of {} is malformed; resolve again",
                call.action_id
            ),
        )
    };
    let enforced = walk_steps(&plan.enforced, loaded, &call, marked, &corrupt)?;
    let shadow = walk_steps(&plan.shadow, loaded, &call, marked, &corrupt)?;
    let (outcome, by) = gate_of(&enforced);
    let (mut s_outcome, mut s_by) = gate_of(&shadow);
    let mut counted = Vec::new();
    if s_outcome != Outcome::Deny {
        match shadow_limits(&shadow, &call, fits)? {
            Ok(charges) => {
                counted = charges
                    .into_iter()
                    .map(|c| Charge {
                        kind: c.kind.uncapped(),
                        ..c
                    })
                    .collect();
            }
            Err(limited) => (s_outcome, s_by) = (Outcome::Deny, limited),
        }
    }
    let disagreement = (s_outcome != outcome || s_by != by).then(|| ShadowExplain {
        outcome: s_outcome,
        decided_by: s_by.to_owned(),
    });
    Ok(ShadowDecision {
        disagreement,
        counted,
    })
}

/// The outcome a walk's deciding step gives, and its policy (`default_deny` when none decides).
fn gate_of<'s>(walk: &Walk<'s, '_>) -> (Outcome, &'s str) {
    match walk.decided {
        Some(("allow", p, _)) => (Outcome::Allow, p),
        Some(("require_approval", p, _)) => (Outcome::RequiresApproval, p),
        Some((_, p, _)) => (Outcome::Deny, p),
        None => (Outcome::Deny, crate::eval::DEFAULT_DENY),
    }
}

/// The charges of the `log_only` limits of the shadow walk's holding steps, each checked
/// without charging it; `Err` names the first limit the call would not fit (or that cannot
/// count it).
fn shadow_limits<'s>(
    shadow: &Walk<'s, '_>,
    call: &Call<'_>,
    fits: &mut Fits<'_>,
) -> Result<Result<Vec<Charge>, &'s str>, CarpError> {
    let mut all = Vec::new();
    for h in &shadow.holding {
        if h.step.get("log_only") != Some(&Value::Bool(true)) {
            continue;
        }
        let mut charges = Vec::new();
        if let Some(limit) = h.step.get("limit").and_then(Value::as_object) {
            let kind = match h.step.get("type").and_then(Value::as_str) {
                Some("rate_limit") => ConstraintType::RateLimit,
                _ => ConstraintType::Budget,
            };
            charges.extend(limit_charge(
                kind,
                h.policy_id.to_owned(),
                limit,
                call.action_id,
                call.ids,
            ));
        }
        if let Some(history) = h.history.as_ref().filter(|k| k.has_limits()) {
            match history.charges(call.parameters, call.ids) {
                Ok(mut c) => charges.append(&mut c),
                Err(_) => return Ok(Err(h.policy_id)),
            }
        }
        for charge in &charges {
            if !fits(charge)? {
                return Ok(Err(h.policy_id));
            }
        }
        all.append(&mut charges);
    }
    Ok(Ok(all))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::store::ChargeKind;

    /// An allow for every call, and a `log_only` deny of `/branch` `main` before it.
    fn deny_main() -> ShadowPlan {
        ShadowPlan {
            enforced: vec![json!({"policy_id": "allow-all", "type": "allow"})],
            shadow: vec![
                json!({"policy_id": "shadow-main", "type": "deny", "log_only": true,
                       "when": [{"pointer": "/branch", "equals": "main"}]}),
                json!({"policy_id": "allow-all", "type": "allow"}),
            ],
        }
    }

    /// At most `max` calls a minute per session, in the shadow only.
    fn shadow_limit(max: u64) -> ShadowPlan {
        ShadowPlan {
            enforced: vec![json!({"policy_id": "allow-all", "type": "allow"})],
            shadow: vec![
                json!({"policy_id": "shadow-rl", "type": "rate_limit", "log_only": true,
                       "limit": {"max_calls": max, "window_seconds": 60, "scope": "session"}}),
                json!({"policy_id": "allow-all", "type": "allow"}),
            ],
        }
    }

    /// Walks `plan` for `x.run` with `parameters`, with the marks listed in `marks` and `used`
    /// units counted on every counter.
    fn decide(plan: &ShadowPlan, parameters: Value, marks: &[&str], used: u64) -> ShadowDecision {
        let call = Call {
            action_id: "x.run",
            parameters: &parameters,
            ids: ("a", "s"),
            now_us: 1_000_000,
        };
        let mut marked = |counter: &str, _: &str, _: i64| Ok(marks.contains(&counter));
        let mut fits = |c: &Charge| {
            let (max, need, _) = c.kind.windowed().unwrap();
            Ok(used + need <= max)
        };
        at_execute(plan, None, call, &mut marked, &mut fits).unwrap()
    }

    #[test]
    fn a_log_only_deny_disagrees_on_the_calls_it_matches_only() {
        let main = decide(&deny_main(), json!({"branch": "main"}), &[], 0);
        let d = main.disagreement.expect("the shadow deny of main");
        assert_eq!(
            (d.outcome, d.decided_by.as_str()),
            (Outcome::Deny, "shadow-main")
        );
        for agreeing in [json!({"branch": "dev"}), json!({})] {
            let got = decide(&deny_main(), agreeing.clone(), &[], 0);
            assert_eq!(got, ShadowDecision::default(), "{agreeing}");
        }
    }

    #[test]
    fn a_log_only_limit_is_checked_without_charging_and_counted_uncapped() {
        let room = decide(&shadow_limit(1), json!({}), &[], 0);
        assert_eq!(room.disagreement, None, "a call the limit has room for");
        assert_eq!(room.counted.len(), 1);
        let counted = &room.counted[0];
        assert_eq!(
            (counted.policy_id.as_str(), counted.scope_key.as_str()),
            ("shadow-rl", "session:s")
        );
        assert_eq!(
            counted.kind,
            ChargeKind::Rate {
                max_calls: 1,
                window_seconds: 60
            }
            .uncapped()
        );

        let full = decide(&shadow_limit(1), json!({}), &[], 1);
        let d = full.disagreement.expect("the shadow limit is full");
        assert_eq!(
            (d.outcome, d.decided_by.as_str()),
            (Outcome::Deny, "shadow-rl")
        );
        assert!(
            full.counted.is_empty(),
            "a call the shadow refuses is not counted"
        );
    }

    #[test]
    fn history_predicates_decide_both_walks_and_a_shadow_that_agrees_is_silent() {
        let after = |policy_id: &str, log_only: bool| {
            json!({"policy_id": policy_id, "type": "allow", "log_only": log_only,
                   "history": [{"after": {"action": "lookup"}, "scope": "session"}]})
        };
        let plan = ShadowPlan {
            enforced: vec![json!({"policy_id": "allow-all", "type": "allow"})],
            shadow: vec![after("shadow-after", true)],
        };
        let before = decide(&plan, json!({}), &[], 0);
        let d = before
            .disagreement
            .expect("no lookup yet: the shadow's default deny");
        assert_eq!(
            (d.outcome, d.decided_by.as_str()),
            (Outcome::Deny, "default_deny")
        );
        let looked_up = decide(&plan, json!({}), &["shadow-after#0"], 0);
        let d = looked_up.disagreement.expect("another deciding policy");
        assert_eq!(
            (d.outcome, d.decided_by.as_str()),
            (Outcome::Allow, "shadow-after")
        );
        let same = ShadowPlan {
            enforced: vec![after("a", false)],
            shadow: vec![after("a", false)],
        };
        assert_eq!(decide(&same, json!({}), &[], 0), ShadowDecision::default());
    }

    #[test]
    fn a_malformed_plan_refuses_as_an_internal_error() {
        let plan = ShadowPlan {
            enforced: vec![json!({"type": "allow"})],
            shadow: vec![],
        };
        let call = Call {
            action_id: "x.run",
            parameters: &json!({}),
            ids: ("a", "s"),
            now_us: 0,
        };
        let e = at_execute(&plan, None, call, &mut |_, _, _| Ok(false), &mut |_| {
            Ok(true)
        })
        .unwrap_err();
        assert_eq!(e.token, Token::InternalError);
        assert!(e.message.contains("x.run"), "{}", e.message);
    }
}

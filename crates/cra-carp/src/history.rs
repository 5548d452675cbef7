//! Conditions over the history of calls (`conditions.history`): a list of tests, each naming its
//! scope (`session`, `agent` or `global`), all of which must hold for the policy to apply.
//!
//! Two kinds of test, with one storage mechanism (the store's windowed counters, the same ones
//! rate limits use, so they hold across replicas and are written in the transaction that
//! records the call):
//!
//! * **Predicates**, read at execute: `after` (the call comes only after a succeeded call of
//!   another action, optionally within a window and with matching parameters) and `bind` (a
//!   parameter must equal one a succeeded call of another action was made with). When an action
//!   succeeds, every predicate naming it leaves a *mark*: one event on the predicate's counter,
//!   keyed by the scope and the values of the earlier call it compares. A predicate holds when
//!   its key has a mark in the window.
//! * **Limits**, charged at execute with the rest of the call's limits, atomically:
//!   `count_within` (at most `max` calls in a sliding window) and `sum_within` (a running total
//!   of a numeric parameter at most `max` in a sliding window). Both may be kept per value of a
//!   parameter (`per`).
//!
//! The invariants:
//! * **Omission never helps.** A predicate whose call member is absent does not hold (as in
//!   [`crate::params`]); a limit whose `per` or summed member is absent, or a summed member that
//!   is not a non-negative decimal of at most six places, refuses the call instead of letting
//!   it escape the count.
//! * **Totals are exact.** Amounts are counted in millionths as integers
//!   ([`micro_units`]), never as floats, so a total never passes `max` by rounding.
//!
//! An execute records what it read ([`HistoryRead`]: each mark asked for, each counter a charge
//! found) in its `action.requested`, so a replay of that chain alone decides it again on the same
//! history.
//!
//! Counter ids are `<policy_id>#<n>` (the test's index in the list), so a policy's counters never
//! mix with another's or with its own rate limit.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::eval::{scope_key, seconds_to_us};
use crate::index::Scope;
use crate::params::{ParamConditionError, err, is_json_pointer};
use crate::store::{Charge, ChargeKind, ConsumeOutcome, Mark};

/// The kinds of test, as written (each test holds exactly one of them, and `scope`).
pub const KINDS: [&str; 4] = ["after", "bind", "count_within", "sum_within"];

/// A predicate on earlier succeeded calls (`after` or `bind`).
#[derive(Debug, Clone)]
struct Seen {
    counter: String,
    action: String,
    scope: Scope,
    within_seconds: Option<u64>,
    /// Pointers into this call's parameters, and, at the same index, into the earlier call's.
    call: Vec<String>,
    earlier: Vec<String>,
}

/// A limit on calls in a sliding window (`count_within` or `sum_within`).
#[derive(Debug, Clone)]
struct Limit {
    counter: String,
    scope: Scope,
    window_seconds: u64,
    per: Option<String>,
    /// The summed member and the total's maximum in millionths; `None` counts calls.
    sum: Option<(String, u64)>,
    /// The maximum number of calls, when counting.
    max_calls: u64,
}

/// A compiled `conditions.history` list, with the JSON it came from.
#[derive(Debug, Clone)]
pub struct HistoryConditions {
    seen: Vec<Seen>,
    limits: Vec<Limit>,
    written: Value,
}

impl PartialEq for HistoryConditions {
    fn eq(&self, other: &Self) -> bool {
        self.written == other.written
    }
}

/// Why a call cannot be counted by a limit: the pointer of the member at fault and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncountable {
    /// The counter of the limit.
    pub counter: String,
    /// Pointer into the call's parameters.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// `n` in millionths, when it is a non-negative decimal with at most six decimal places that
/// fits: `500.25` is `500_250_000`, `1e-6` is `1`. Read from the number's decimal text (with its
/// exponent, if any), never through a float.
pub fn micro_units(n: &Number) -> Option<u64> {
    if let Some(u) = n.as_u64() {
        return u.checked_mul(1_000_000);
    }
    let text = n.to_string();
    if text.starts_with('-') {
        return None;
    }
    let (mantissa, exp) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.trim_start_matches('+').parse::<i64>().ok()?),
        None => (text.as_str(), 0),
    };
    let (whole, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits = format!("{whole}{frac}");
    // The value is digits * 10^-places.
    let mut places = i64::try_from(frac.len()).ok()?.checked_sub(exp)?;
    while places > 6 && digits.ends_with('0') {
        digits.pop();
        places -= 1;
    }
    if places > 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u64.checked_pow(u32::try_from(6 - places).ok()?)?;
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// Millionths as the shortest decimal text (`500250000` is `500.25`).
pub fn decimal(micro: u64) -> String {
    let (whole, frac) = (micro / 1_000_000, micro % 1_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let frac = format!("{frac:06}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// The counter key of `scope` narrowed to the values at `pointers` of `parameters`: the scope's
/// key alone without pointers, else `<scope>|<digest of the values>`. `None` when a member is
/// absent.
fn keyed(
    scope: Scope,
    agent: &str,
    session: &str,
    parameters: &Value,
    pointers: &[String],
) -> Option<String> {
    let base = scope_key(scope, agent, session);
    if pointers.is_empty() {
        return Some(base);
    }
    let values = pointers
        .iter()
        .map(|p| parameters.pointer(p).cloned())
        .collect::<Option<Vec<Value>>>()?;
    Some(format!(
        "{base}|{}",
        cra_wire::hash::canonical_digest(&Value::Array(values))
    ))
}

/// Reads a test member: `None` when absent.
struct Fields<'a> {
    obj: &'a Map<String, Value>,
    at: String,
}

impl Fields<'_> {
    fn at(&self, member: &str) -> String {
        format!("{}/{member}", self.at)
    }

    fn allow_only(&self, members: &[&str]) -> Result<(), ParamConditionError> {
        match self
            .obj
            .keys()
            .find(|k| !k.starts_with("x-") && !members.contains(&k.as_str()))
        {
            Some(k) => Err(err(
                self.at(k),
                format!("is not a member here; use {}", members.join(", ")),
            )),
            None => Ok(()),
        }
    }

    fn seconds(&self, member: &str, required: bool) -> Result<Option<u64>, ParamConditionError> {
        match self.obj.get(member) {
            None if required => Err(err(
                self.at(member),
                "is required (whole seconds, 1 or more)",
            )),
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(err(self.at(member), "must be whole seconds, 1 or more")),
            },
        }
    }

    fn pointer(&self, member: &str, required: bool) -> Result<Option<String>, ParamConditionError> {
        match self.obj.get(member) {
            None if required => Err(err(self.at(member), "is required (a JSON pointer)")),
            None => Ok(None),
            Some(Value::String(p)) if !p.is_empty() && is_json_pointer(p) => Ok(Some(p.clone())),
            Some(_) => Err(err(
                self.at(member),
                "must be an RFC 6901 JSON pointer into the parameters, like /customer_id",
            )),
        }
    }

    fn action(&self) -> Result<String, ParamConditionError> {
        match self.obj.get("action") {
            Some(Value::String(a)) if !a.is_empty() && !a.contains('*') => Ok(a.clone()),
            Some(_) => Err(err(
                self.at("action"),
                "must be one action id (no wildcards), like customer.lookup",
            )),
            None => Err(err(
                self.at("action"),
                "is required (the earlier action's id)",
            )),
        }
    }
}

fn scope_of(test: &Map<String, Value>, at: &str) -> Result<Scope, ParamConditionError> {
    match test.get("scope").and_then(Value::as_str) {
        Some("session") => Ok(Scope::Session),
        Some("agent") => Ok(Scope::Agent),
        Some("global") => Ok(Scope::Global),
        _ => Err(err(
            format!("{at}/scope"),
            "is required: session, agent or global (whose calls the test looks at)",
        )),
    }
}

impl HistoryConditions {
    /// Compiles the list as written in `conditions.history` of `policy_id` (or in a
    /// constraint's step).
    pub fn compile(policy_id: &str, written: &Value) -> Result<Self, ParamConditionError> {
        let Some(list) = written.as_array().filter(|l| !l.is_empty()) else {
            return Err(err(String::new(), "must be a non-empty array of tests"));
        };
        let mut out = Self {
            seen: Vec::new(),
            limits: Vec::new(),
            written: written.clone(),
        };
        for (i, t) in list.iter().enumerate() {
            let at = format!("/{i}");
            let Some(obj) = t.as_object() else {
                return Err(err(
                    at,
                    "must be an object: one of after, bind, count_within, sum_within, and scope",
                ));
            };
            let kinds: Vec<&str> = KINDS
                .iter()
                .copied()
                .filter(|k| obj.contains_key(*k))
                .collect();
            let [kind] = kinds[..] else {
                return Err(err(
                    at,
                    format!(
                        "must hold exactly one of {} (it holds {})",
                        KINDS.join(", "),
                        kinds.len()
                    ),
                ));
            };
            if let Some(k) = obj
                .keys()
                .find(|k| *k != kind && *k != "scope" && !k.starts_with("x-"))
            {
                return Err(err(
                    format!("{at}/{k}"),
                    "is not a member of a history test; use its kind and scope",
                ));
            }
            let scope = scope_of(obj, &at)?;
            let counter = format!("{policy_id}#{i}");
            let inner_at = format!("{at}/{kind}");
            let Some(inner) = obj.get(kind).and_then(Value::as_object) else {
                return Err(err(inner_at, "must be an object"));
            };
            let f = Fields {
                obj: inner,
                at: inner_at,
            };
            match kind {
                "after" => out.seen.push(compile_after(&f, counter, scope)?),
                "bind" => out.seen.push(compile_bind(&f, counter, scope)?),
                _ => out.limits.push(compile_limit(&f, kind, counter, scope)?),
            }
        }
        Ok(out)
    }

    /// The list as written.
    pub fn written(&self) -> &Value {
        &self.written
    }

    /// True when the list holds a `count_within` or `sum_within`.
    pub fn has_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// Whether every `after` and `bind` holds for a call with `parameters` at `now_us`:
    /// `marked(counter, key, since_us)` says whether the counter has a mark for the key after
    /// `since_us`.
    pub fn predicates_hold<E>(
        &self,
        parameters: &Value,
        (agent, session): (&str, &str),
        now_us: i64,
        marked: &mut dyn FnMut(&str, &str, i64) -> Result<bool, E>,
    ) -> Result<bool, E> {
        for s in &self.seen {
            let Some(key) = keyed(s.scope, agent, session, parameters, &s.call) else {
                return Ok(false);
            };
            let since = s
                .within_seconds
                .map_or(i64::MIN, |w| now_us.saturating_sub(seconds_to_us(w)));
            if !marked(&s.counter, &key, since)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The charges of the limits for a call with `parameters`, or why it cannot be counted.
    pub fn charges(
        &self,
        parameters: &Value,
        (agent, session): (&str, &str),
    ) -> Result<Vec<Charge>, Uncountable> {
        let mut out = Vec::with_capacity(self.limits.len());
        for l in &self.limits {
            let uncountable = |pointer: &str, message: &str| Uncountable {
                counter: l.counter.clone(),
                pointer: pointer.to_owned(),
                message: message.to_owned(),
            };
            let per: Vec<String> = l.per.iter().cloned().collect();
            let Some(scope_key) = keyed(l.scope, agent, session, parameters, &per) else {
                let p = l.per.as_deref().unwrap_or_default();
                return Err(uncountable(
                    p,
                    "is absent, and the limit is kept per its value",
                ));
            };
            let kind = match &l.sum {
                None => ChargeKind::Rate {
                    max_calls: l.max_calls,
                    window_seconds: l.window_seconds,
                },
                Some((pointer, max_units)) => {
                    let amount = parameters.pointer(pointer);
                    let Some(units) = amount.and_then(Value::as_number).and_then(micro_units)
                    else {
                        return Err(uncountable(
                            pointer,
                            "must be a non-negative number with at most six decimal places, as the limit totals it",
                        ));
                    };
                    ChargeKind::Window {
                        max_units: *max_units,
                        window_seconds: l.window_seconds,
                        units,
                    }
                }
            };
            out.push(Charge {
                policy_id: l.counter.clone(),
                scope_key,
                kind,
            });
        }
        Ok(out)
    }

    /// The marks a succeeded call of `action_id` with `parameters` leaves on this list's
    /// predicates, at `at_us`. A predicate whose compared member the call lacks gets none.
    pub fn marks<'a>(
        &'a self,
        action_id: &'a str,
        parameters: &'a Value,
        (agent, session): (&'a str, &'a str),
        at_us: i64,
    ) -> impl Iterator<Item = Mark> + 'a {
        // Borrowed, not cloned: every succeeded call asks every history policy.
        self.seen
            .iter()
            .filter(move |s| s.action == action_id)
            .filter_map(move |s| {
                let key = keyed(s.scope, agent, session, parameters, &s.earlier)?;
                Some(Mark {
                    counter: s.counter.clone(),
                    scope_key: key,
                    at_us,
                })
            })
    }

    /// A line per test for an explanation: its kind and what it looks at.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for s in &self.seen {
            let within = s
                .within_seconds
                .map_or(String::new(), |w| format!(" within {w} s"));
            parts.push(format!("after {}{within} ({})", s.action, s.scope.as_str()));
        }
        for l in &self.limits {
            let per = l
                .per
                .as_deref()
                .map_or(String::new(), |p| format!(" per {p}"));
            parts.push(match &l.sum {
                None => format!(
                    "at most {} calls in {} s{per} ({})",
                    l.max_calls,
                    l.window_seconds,
                    l.scope.as_str()
                ),
                Some((p, max)) => format!(
                    "{p} totals at most {} in {} s{per} ({})",
                    decimal(*max),
                    l.window_seconds,
                    l.scope.as_str()
                ),
            });
        }
        parts.join("; ")
    }
}

fn compile_after(
    f: &Fields<'_>,
    counter: String,
    scope: Scope,
) -> Result<Seen, ParamConditionError> {
    f.allow_only(&["action", "within_seconds", "match"])?;
    let (mut call, mut earlier) = (Vec::new(), Vec::new());
    if let Some(m) = f.obj.get("match") {
        let Some(m) = m.as_object().filter(|m| !m.is_empty()) else {
            return Err(err(
                f.at("match"),
                "must be a non-empty object: this call's pointer to the earlier call's pointer",
            ));
        };
        for (ours, theirs) in m {
            let ok = |p: &str| !p.is_empty() && is_json_pointer(p);
            match theirs.as_str() {
                Some(t) if ok(ours) && ok(t) => {
                    call.push(ours.clone());
                    earlier.push(t.to_owned());
                }
                _ => {
                    return Err(err(
                        f.at("match"),
                        "maps JSON pointers to JSON pointers, like {\"/customer_id\": \"/id\"}",
                    ));
                }
            }
        }
    }
    Ok(Seen {
        counter,
        action: f.action()?,
        scope,
        within_seconds: f.seconds("within_seconds", false)?,
        call,
        earlier,
    })
}

fn compile_bind(
    f: &Fields<'_>,
    counter: String,
    scope: Scope,
) -> Result<Seen, ParamConditionError> {
    f.allow_only(&["pointer", "action", "from", "within_seconds"])?;
    let pointer = f.pointer("pointer", true)?.unwrap_or_default();
    let from = f.pointer("from", false)?.unwrap_or_else(|| pointer.clone());
    Ok(Seen {
        counter,
        action: f.action()?,
        scope,
        within_seconds: f.seconds("within_seconds", false)?,
        call: vec![pointer],
        earlier: vec![from],
    })
}

fn compile_limit(
    f: &Fields<'_>,
    kind: &str,
    counter: String,
    scope: Scope,
) -> Result<Limit, ParamConditionError> {
    let summing = kind == "sum_within";
    if summing {
        f.allow_only(&["pointer", "max", "window_seconds", "per"])?;
    } else {
        f.allow_only(&["max", "window_seconds", "per"])?;
    }
    let max = f.obj.get("max").and_then(Value::as_number);
    let (sum, max_calls) = if summing {
        let Some(max) = max.and_then(micro_units) else {
            return Err(err(
                f.at("max"),
                "is required: a non-negative number with at most six decimal places",
            ));
        };
        (
            Some((f.pointer("pointer", true)?.unwrap_or_default(), max)),
            0,
        )
    } else {
        match max.and_then(Number::as_u64) {
            Some(n) if n >= 1 => (None, n),
            _ => {
                return Err(err(
                    f.at("max"),
                    "is required: a whole number of calls, 1 or more",
                ));
            }
        }
    };
    Ok(Limit {
        counter,
        scope,
        window_seconds: f.seconds("window_seconds", true)?.unwrap_or(1),
        per: f.pointer("per", false)?,
        sum,
        max_calls,
    })
}

/// What an execute's decision read of history: the marks its predicates asked for and the
/// counters its charges found. Recorded in the call's `action.requested` (`history`), as a
/// resolve records the counters it read, so a replay of the chain alone decides the call on the
/// same history, whatever other sessions wrote (agent and global scopes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRead {
    /// Each mark asked for, with the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<MarkRead>,
    /// Each counter a charge found: every charge of a consumed call, or the one that refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<CounterRead>,
}

/// One mark asked for: whether `counter` had a mark for `key` in the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkRead {
    /// The predicate's counter (`<policy_id>#<n>`).
    pub counter: String,
    /// The scope's key, narrowed by the compared values' digest.
    pub key: String,
    /// The window the mark had to fall in, counted back from the decision; absent: any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within_seconds: Option<u64>,
    /// Whether it had one.
    pub found: bool,
}

/// What one counter held before the call: executions or units in the charge's window, or a
/// budget's units spent (`window_seconds` absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterRead {
    /// The limit's policy (`<policy_id>#<n>` for a history limit).
    pub policy_id: String,
    /// The counter's scope key.
    pub scope_key: String,
    /// The window counted, for a windowed charge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u64>,
    /// What it held, not counting the call's own charges.
    pub used: u64,
}

/// The window a mark was asked for: `since_us` counted back from `now_us`; `None` for any time
/// ([`HistoryConditions::predicates_hold`] asks `i64::MIN` then).
fn within_seconds(since_us: i64, now_us: i64) -> Option<u64> {
    (since_us != i64::MIN)
        .then(|| u64::try_from(now_us.saturating_sub(since_us) / 1_000_000).unwrap_or(0))
}

/// The units of `charges` before `at` on the same counter as `charges[at]`: the store counts a
/// call's charges on one counter together, and its `used` includes them.
pub(crate) fn earlier_units(charges: &[Charge], at: usize) -> u64 {
    let c = &charges[at];
    charges[..at]
        .iter()
        .filter(|e| e.policy_id == c.policy_id && e.scope_key == c.scope_key)
        .map(|e| e.kind.cap_and_units().1)
        .fold(0, u64::saturating_add)
}

impl HistoryRead {
    /// True when nothing was read (the event then leaves `history` out).
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty() && self.counters.is_empty()
    }

    /// Records that a mark on `counter` for `key` after `since_us` was asked for at `now_us`.
    pub fn mark(&mut self, counter: &str, key: &str, since_us: i64, now_us: i64, found: bool) {
        self.marks.push(MarkRead {
            counter: counter.to_owned(),
            key: key.to_owned(),
            within_seconds: within_seconds(since_us, now_us),
            found,
        });
    }

    /// The recorded answer to a mark asked for now, if it was recorded.
    pub fn mark_found(&self, counter: &str, key: &str, since_us: i64, now_us: i64) -> Option<bool> {
        let within = within_seconds(since_us, now_us);
        self.marks
            .iter()
            .find(|m| m.counter == counter && m.key == key && m.within_seconds == within)
            .map(|m| m.found)
    }

    /// Records what the store's consume of `charges` found on each counter.
    pub fn consumed(&mut self, charges: &[Charge], outcome: &ConsumeOutcome) {
        let read = |at: usize, used: u64| {
            let c = &charges[at];
            CounterRead {
                policy_id: c.policy_id.clone(),
                scope_key: c.scope_key.clone(),
                window_seconds: c.kind.windowed().map(|(_, _, w)| w),
                used: used.saturating_sub(earlier_units(charges, at)),
            }
        };
        match outcome {
            ConsumeOutcome::Consumed { used } => {
                let reads = used.iter().enumerate().map(|(at, &u)| read(at, u));
                self.counters.extend(reads);
            }
            ConsumeOutcome::Refused { at, used, .. } => {
                if *at < charges.len() {
                    self.counters.push(read(*at, *used));
                }
            }
        }
    }

    /// What the counter of `charges[at]` held before the call, if it was recorded, with the
    /// call's earlier charges on that counter added, as the store counts them.
    pub fn counter_used(&self, charges: &[Charge], at: usize) -> Option<u64> {
        let c = &charges[at];
        let window = c.kind.windowed().map(|(_, _, w)| w);
        self.counters
            .iter()
            .find(|r| {
                r.policy_id == c.policy_id
                    && r.scope_key == c.scope_key
                    && r.window_seconds == window
            })
            .map(|r| r.used.saturating_add(earlier_units(charges, at)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn amounts_are_counted_exactly_in_millionths() {
        let n = |v: Value| v.as_number().cloned().unwrap();
        assert_eq!(micro_units(&n(json!(500))), Some(500_000_000));
        assert_eq!(micro_units(&n(json!(500.25))), Some(500_250_000));
        assert_eq!(micro_units(&n(json!(0.1))), Some(100_000));
        assert_eq!(
            micro_units(&n(json!(0.000001))),
            Some(1),
            "printed with an exponent"
        );
        assert_eq!(micro_units(&n(json!(1.5e3))), Some(1_500_000_000));
        assert_eq!(micro_units(&n(json!(1e-7))), None);
        assert_eq!(micro_units(&n(json!(1.0000001))), None, "seven places");
        assert_eq!(micro_units(&n(json!(-1))), None);
        assert_eq!(micro_units(&n(json!(-0.5))), None);
        assert_eq!(micro_units(&n(json!(u64::MAX))), None, "does not fit");
        assert_eq!(decimal(500_250_000), "500.25");
        assert_eq!(decimal(1_000_000_000), "1000");
        assert_eq!(decimal(1), "0.000001");
    }

    #[test]
    fn a_test_holds_exactly_one_kind_and_a_scope() {
        let bad = |v: Value| HistoryConditions::compile("p", &v).unwrap_err().pointer;
        assert_eq!(bad(json!([])), "");
        assert_eq!(bad(json!([{"scope": "session"}])), "/0");
        assert_eq!(
            bad(
                json!([{"after": {"action": "a"}, "bind": {"pointer": "/x", "action": "a"}, "scope": "session"}])
            ),
            "/0"
        );
        assert_eq!(bad(json!([{"after": {"action": "a"}}])), "/0/scope");
        assert_eq!(
            bad(json!([{"after": {"action": "a.*"}, "scope": "agent"}])),
            "/0/after/action"
        );
        assert_eq!(
            bad(json!([{"count_within": {"max": 0, "window_seconds": 5}, "scope": "agent"}])),
            "/0/count_within/max"
        );
        assert_eq!(
            bad(json!([{"sum_within": {"pointer": "/a", "max": 10}, "scope": "global"}])),
            "/0/sum_within/window_seconds"
        );
        assert_eq!(
            bad(
                json!([{"sum_within": {"pointer": "a", "max": 10, "window_seconds": 5}, "scope": "global"}])
            ),
            "/0/sum_within/pointer"
        );
        assert_eq!(
            bad(json!([{"after": {"action": "a", "match": {"/x": 1}}, "scope": "session"}])),
            "/0/after/match"
        );
        assert_eq!(
            bad(json!([{"after": {"action": "a", "when": 1}, "scope": "session"}])),
            "/0/after/when"
        );
    }

    #[test]
    fn a_limit_refuses_a_call_it_cannot_count() {
        let h = HistoryConditions::compile(
            "p",
            &json!([{"sum_within": {"pointer": "/amount", "max": 1000, "window_seconds": 86400,
                                    "per": "/customer"}, "scope": "global"}]),
        )
        .unwrap();
        let ids = ("a", "s");
        assert_eq!(
            h.charges(&json!({"amount": 5}), ids).unwrap_err().pointer,
            "/customer"
        );
        assert_eq!(
            h.charges(&json!({"customer": "c", "amount": "5"}), ids)
                .unwrap_err()
                .pointer,
            "/amount"
        );
        let c = h
            .charges(&json!({"customer": "c", "amount": 5.5}), ids)
            .unwrap();
        assert_eq!(c[0].policy_id, "p#0");
        assert!(c[0].scope_key.starts_with("global|sha256:"));
        assert_eq!(
            c[0].kind,
            ChargeKind::Window {
                max_units: 1_000_000_000,
                window_seconds: 86400,
                units: 5_500_000
            }
        );
    }

    #[test]
    fn a_mark_and_a_check_meet_on_the_same_key_only_for_equal_values() {
        let h = HistoryConditions::compile(
            "p",
            &json!([{"bind": {"pointer": "/customer_id", "action": "lookup", "from": "/id"},
                     "scope": "session"}]),
        )
        .unwrap();
        let ids = ("a", "s");
        let marks: Vec<Mark> = h.marks("lookup", &json!({"id": "c-1"}), ids, 10).collect();
        assert_eq!(marks.len(), 1);
        assert_eq!(h.marks("other", &json!({"id": "c-1"}), ids, 10).count(), 0);
        assert_eq!(
            h.marks("lookup", &json!({}), ids, 10).count(),
            0,
            "absent member"
        );
        let check = |params: Value| {
            h.predicates_hold::<()>(&params, ids, 20, &mut |c, k, _| {
                Ok(c == marks[0].counter && k == marks[0].scope_key)
            })
            .unwrap()
        };
        assert!(check(json!({"customer_id": "c-1"})));
        assert!(!check(json!({"customer_id": "c-2"})));
        assert!(
            !check(json!({})),
            "an absent member never satisfies the test"
        );
    }

    /// The record keeps what a counter held before the call (the store's `used` less the
    /// call's earlier charges on that counter) and gives back, for each charge, what the store
    /// counted; a mark is found again only under the same counter, key and window.
    #[test]
    fn a_history_read_records_what_counters_held_before_the_call() {
        let charge = |policy: &str, units| Charge {
            policy_id: policy.to_owned(),
            scope_key: "global".to_owned(),
            kind: ChargeKind::Window {
                max_units: 100,
                window_seconds: 60,
                units,
            },
        };
        let charges = [charge("a", 3), charge("b", 1), charge("a", 4)];
        let mut read = HistoryRead::default();
        read.consumed(
            &charges,
            &ConsumeOutcome::Consumed {
                used: vec![10, 0, 13],
            },
        );
        let held: Vec<u64> = read.counters.iter().map(|c| c.used).collect();
        assert_eq!(
            held,
            [10, 0, 10],
            "the second charge on `a` found the first one's 3"
        );
        assert_eq!(read.counter_used(&charges, 2), Some(13));
        let refused = ConsumeOutcome::Refused {
            at: 2,
            policy_id: "a".into(),
            scope_key: "global".into(),
            kind: charges[2].kind.clone(),
            used: 98,
        };
        let mut refusal = HistoryRead::default();
        refusal.consumed(&charges, &refused);
        assert_eq!(refusal.counters.len(), 1, "only the counter that refused");
        assert_eq!(refusal.counters[0].used, 95);
        // Two identical charges on one counter: the store names the one it refused by its
        // index, so the first's 3 units are taken off what the second found.
        let twice = [charge("a", 3), charge("a", 3)];
        let mut refusal = HistoryRead::default();
        refusal.consumed(
            &twice,
            &ConsumeOutcome::Refused {
                at: 1,
                policy_id: "a".into(),
                scope_key: "global".into(),
                kind: twice[1].kind.clone(),
                used: 98,
            },
        );
        assert_eq!(refusal.counters[0].used, 95, "the second charge refused");

        let now = 1_000 * 1_000_000;
        read.mark("p#0", "global|k", now - 60 * 1_000_000, now, true);
        read.mark("p#1", "global|k", i64::MIN, now, false);
        let later = now + 5;
        assert_eq!(
            read.mark_found("p#0", "global|k", later - 60 * 1_000_000, later),
            Some(true)
        );
        assert_eq!(read.mark_found("p#0", "global|k", i64::MIN, later), None);
        assert_eq!(
            read.mark_found("p#1", "global|k", i64::MIN, later),
            Some(false)
        );
        assert_eq!(read.mark_found("p#1", "global|j", i64::MIN, later), None);
        let json = serde_json::to_value(&read).unwrap();
        assert_eq!(
            json["marks"][1],
            serde_json::json!({"counter": "p#1", "key": "global|k", "found": false})
        );
        assert_eq!(
            json["counters"][0],
            serde_json::json!({"policy_id": "a", "scope_key": "global", "window_seconds": 60, "used": 10})
        );
    }
}

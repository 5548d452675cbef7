//! Conditions on history through the engine (`specs/carp.md`, "Conditions on history"): one
//! table per kind of test, with windows' edges and absent members, on the in-memory store (the
//! stores' own contract covers redb and PostgreSQL; `cra-runtime`'s `history` tests run the
//! same atlas over HTTP on both). The atlas is `tests/fixtures/history/atlas`.

use std::cell::Cell;
use std::sync::Arc;

use cra_carp::Resolution;
use cra_carp::engine::{Carp, CarpConfig, ExecuteOutcome};
use cra_carp::memory::MemoryStore;
use cra_carp::types::{ConstraintType, ExecuteStatus};
use cra_carp::validate::parse_request;
use cra_wire::{FixedClock, SequentialIds};
use serde_json::{Value, json};
use time::Duration;

use crate::common::{atlas_set, fixture};

/// Two sessions of one agent and one of another, over one store and clock.
struct World {
    carp: Carp,
    clock: Arc<FixedClock>,
    n: Cell<u32>,
}

const S1: (&str, &str) = ("agent-1", "0190a000-0000-7000-8000-00000000f001");
const S2: (&str, &str) = ("agent-1", "0190a000-0000-7000-8000-00000000f002");
const S3: (&str, &str) = ("agent-2", "0190a000-0000-7000-8000-00000000f003");

impl World {
    fn new() -> Self {
        let clock = Arc::new(FixedClock::parse("2026-01-05T10:00:00Z").unwrap());
        let carp = Carp::new(
            Arc::new(MemoryStore::new()),
            Arc::new(atlas_set(&[fixture("history/atlas")])),
            clock.clone(),
            Arc::new(SequentialIds::new(1_767_607_200_000, 9)),
            CarpConfig::default(),
        );
        for (agent, session) in [S1, S2, S3] {
            carp.open_session(agent, Some(session), None).unwrap();
        }
        Self {
            carp,
            clock,
            n: Cell::new(0),
        }
    }

    fn header(&self, who: (&str, &str), operation: &str) -> Value {
        self.n.set(self.n.get() + 1);
        json!({
            "carp_version": "1.0",
            "request_id": format!("0190a000-0000-7000-8000-{:012x}", self.n.get()),
            "timestamp": cra_wire::clock::format_timestamp(cra_wire::Clock::now(self.clock.as_ref())),
            "operation": operation,
            "requester": {"agent_id": who.0, "session_id": who.1},
        })
    }

    fn resolve(&self, who: (&str, &str)) -> Resolution {
        let mut r = self.header(who, "resolve");
        r["task"] = json!({"goal": "work"});
        self.carp
            .resolve(&parse_request(&r).unwrap(), false, None)
            .unwrap()
    }

    /// Resolves, then executes `action` with `params` and runs the echo executor when cleared:
    /// `"success"`, or the refusal as `"<status or refused> <token> <policy>"`.
    fn call(&self, who: (&str, &str), action: &str, params: Value) -> String {
        let res = self.resolve(who);
        self.call_under(who, &res, action, params)
    }

    /// Executes `action` with `params` under the resolution `res`, as [`World::call`] does.
    fn call_under(
        &self,
        who: (&str, &str),
        res: &Resolution,
        action: &str,
        params: Value,
    ) -> String {
        let mut r = self.header(who, "execute");
        r["execution"] = json!({
            "resolution_id": res.resolution_id, "action_id": action, "parameters": params,
        });
        let resp = match self.carp.execute_in_store(&parse_request(&r).unwrap()) {
            Ok(ExecuteOutcome::Run(run)) => self
                .carp
                .finish_execution(run, Ok(json!({"ok": true})))
                .unwrap(),
            Ok(
                ExecuteOutcome::Answered(resp)
                | ExecuteOutcome::OpenApproval { response: resp, .. },
            ) => resp,
            Err(e) => {
                let policy = e.policy_id.unwrap_or_default();
                return format!("refused {} {policy}", e.token.as_str());
            }
        };
        let Some(err) = resp.error else {
            assert_eq!(resp.status, ExecuteStatus::Success);
            return "success".into();
        };
        let policy = err
            .details
            .as_ref()
            .and_then(|d| d.get("policy_id")?.as_str().map(str::to_owned))
            .unwrap_or_default();
        format!("denied {} {policy}", err.code)
    }

    fn advance(&self, seconds: i64) {
        self.clock.advance(Duration::seconds(seconds));
    }
}

const NO_ALLOW: &str = "denied action_not_allowed default_deny";

#[test]
fn a_history_policy_lists_its_action_allowed_with_its_steps_at_resolve() {
    let w = World::new();
    let res = w.resolve(S1);
    let allowed: Vec<&str> = res
        .allowed_actions
        .iter()
        .map(|a| a.action_id.as_str())
        .collect();
    assert!(allowed.contains(&"refund.issue"), "{allowed:?}");
    assert!(
        allowed.contains(&"transfer.send"),
        "a history deny never refuses at resolve"
    );
    let c = res
        .constraints
        .iter()
        .find(|c| c.kind == ConstraintType::Parameters && c.parameters.binds("refund.issue"))
        .expect("refund.issue's steps");
    let steps = c.parameters.get("steps").unwrap();
    assert_eq!(steps[0]["policy_id"], "allow-refund-looked-up");
    assert!(steps[0]["history"].is_array(), "{steps}");
}

#[test]
fn bind_holds_only_for_the_value_a_succeeded_call_of_the_session_used() {
    let w = World::new();
    let refund = |who, customer: &str| {
        w.call(
            who,
            "refund.issue",
            json!({"customer_id": customer, "amount": 10}),
        )
    };
    assert_eq!(refund(S1, "C-1"), NO_ALLOW, "nothing looked up yet");
    assert_eq!(
        w.call(S1, "customer.lookup", json!({"customer_id": "C-1"})),
        "success"
    );
    assert_eq!(refund(S1, "C-1"), "success");
    assert_eq!(refund(S1, "C-2"), NO_ALLOW, "another customer");
    assert_eq!(refund(S2, "C-1"), NO_ALLOW, "looked up in another session");
    assert_eq!(
        w.call(S1, "refund.issue", json!({"amount": 10})),
        NO_ALLOW,
        "an absent member never satisfies the test"
    );
    assert_eq!(
        w.call(S1, "customer.lookup", json!({})),
        "success",
        "a lookup without the member leaves no mark"
    );
    assert_eq!(w.call(S1, "refund.issue", json!({"amount": 10})), NO_ALLOW);
}

#[test]
fn sum_within_totals_per_value_across_sessions_to_the_window_edge() {
    let w = World::new();
    for who in [S1, S2, S3] {
        for c in ["C-1", "C-2"] {
            assert_eq!(
                w.call(who, "customer.lookup", json!({"customer_id": c})),
                "success"
            );
        }
    }
    let refund = |who, customer: &str, amount: Value| {
        w.call(
            who,
            "refund.issue",
            json!({"customer_id": customer, "amount": amount}),
        )
    };
    let over = "denied rate_limit_exceeded allow-refund-looked-up";
    assert_eq!(refund(S1, "C-1", json!(600.5)), "success");
    assert_eq!(refund(S2, "C-1", json!(400)), over, "1,000.50 in a day");
    assert_eq!(
        refund(S3, "C-1", json!(399.5)),
        "success",
        "exactly 1,000 fits"
    );
    assert_eq!(refund(S3, "C-1", json!(0.000001)), over);
    assert_eq!(
        refund(S2, "C-2", json!(1000)),
        "success",
        "another customer's total"
    );
    assert_eq!(
        refund(S1, "C-1", json!(0)),
        "success",
        "nothing more fits nothing"
    );
    // The window is (now - 86,400 s, now]: at the first refund's instant plus a day it leaves.
    w.advance(86_399);
    assert_eq!(refund(S1, "C-1", json!(1)), over);
    w.advance(1);
    assert_eq!(refund(S1, "C-1", json!(600.5)), "success");
    assert_eq!(
        w.call(
            S1,
            "refund.issue",
            json!({"customer_id": "C-1", "amount": 1.0000001})
        ),
        "denied action_not_allowed allow-refund-looked-up",
        "seven decimal places cannot be counted exactly"
    );
}

#[test]
fn after_holds_within_its_window_and_count_within_counts_per_value() {
    let w = World::new();
    let send = |who, channel: &str| w.call(who, "report.send", json!({"channel": channel}));
    assert_eq!(send(S1, "ops"), NO_ALLOW, "no report built yet");
    assert_eq!(w.call(S1, "report.build", json!({})), "success");
    w.advance(59);
    assert_eq!(send(S1, "ops"), "success", "59 s after the build");
    assert_eq!(send(S1, "ops"), "success");
    let limited = "denied rate_limit_exceeded allow-send-after-build";
    assert_eq!(
        send(S1, "ops"),
        limited,
        "the third in a minute on one channel"
    );
    assert_eq!(send(S1, "sales"), "success", "counted per channel");
    assert_eq!(
        w.call(S1, "report.send", json!({})),
        "denied action_not_allowed allow-send-after-build",
        "a call without the per member cannot be counted, so it is refused"
    );
    assert_eq!(
        send(S2, "ops"),
        NO_ALLOW,
        "the build was in another session"
    );
    w.advance(1);
    assert_eq!(
        send(S1, "sales"),
        NO_ALLOW,
        "60 s after the build: out of its window"
    );
}

#[test]
fn a_deny_after_a_matching_call_refuses_in_every_session() {
    let w = World::new();
    let transfer = |who, from: &str| w.call(who, "transfer.send", json!({"from": from}));
    assert_eq!(transfer(S1, "A-1"), "success");
    assert_eq!(
        w.call(S3, "account.freeze", json!({"account": "A-1"})),
        "success"
    );
    let frozen = "denied action_not_allowed deny-transfers-from-frozen";
    assert_eq!(transfer(S1, "A-1"), frozen);
    assert_eq!(transfer(S2, "A-1"), frozen);
    assert_eq!(transfer(S2, "A-2"), "success", "another account");
}

/// `window_retry_after` on exact instants: a `sum_within` total of 10.0 over 100 s holds 6.0
/// charged at 0 s and 3.0 at 30 s; asked at 50 s for 4.0 more, it fits once the 6.0 leaves the
/// window, at 100 s: 50 s from now, not 49 (the window is `(t - 100 s, t]`). A rate limit of 2
/// in 60 s with calls at 10 s and 20 s, asked at 25 s, fits at 70 s: 45 s. A charge above the
/// total can never fit: no advice.
#[test]
fn retry_after_is_the_exact_wait_until_a_windowed_charge_fits() {
    use cra_carp::execute::window_retry_after;
    use cra_carp::store::{CarpStore, Charge, ChargeKind, ConsumeOutcome};
    let s = cra_carp::memory::MemoryStore::new();
    let sec = |n: i64| n * 1_000_000;
    let total = |units: u64| Charge {
        policy_id: "refunds#0".into(),
        scope_key: "global".into(),
        kind: ChargeKind::Window {
            max_units: 10_000_000,
            window_seconds: 100,
            units,
        },
    };
    for (units, at, used) in [(6_000_000, 0, 0), (3_000_000, 30, 6_000_000)] {
        assert_eq!(
            s.try_consume(&[total(units)], sec(at)).unwrap(),
            ConsumeOutcome::Consumed { used: vec![used] }
        );
    }
    assert!(matches!(
        s.try_consume(&[total(4_000_000)], sec(50)).unwrap(),
        ConsumeOutcome::Refused { .. }
    ));
    assert_eq!(
        window_retry_after(&s, &total(4_000_000), sec(50)).unwrap(),
        Some(50)
    );
    assert_eq!(
        window_retry_after(&s, &total(1_000_000), sec(50)).unwrap(),
        Some(1),
        "1.0 more fits at once: the least advice is 1 s"
    );
    assert_eq!(
        window_retry_after(&s, &total(11_000_000), sec(50)).unwrap(),
        None
    );

    let rate = Charge {
        policy_id: "calls".into(),
        scope_key: "agent:a".into(),
        kind: ChargeKind::Rate {
            max_calls: 2,
            window_seconds: 60,
        },
    };
    for at in [10, 20] {
        s.try_consume(std::slice::from_ref(&rate), sec(at)).unwrap();
    }
    assert_eq!(window_retry_after(&s, &rate, sec(25)).unwrap(), Some(45));
}

/// After the atlas changed, a resolution made before decides nothing more (`resolution_stale`,
/// issue 29, item 9: until then it decided on the tests it had recorded, so a tightened limit
/// did not apply to it); a resolution of the loaded atlas counts by its tests. Here the loaded
/// atlas raised `report.send`'s count from 2 to 5 a minute.
#[test]
fn an_execute_decides_under_the_atlas_in_force_never_a_replaced_one() {
    let mut w = World::new();
    assert_eq!(w.call(S1, "report.build", json!({})), "success");
    let before = w.resolve(S1);
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("history/atlas").join("atlas.json")).unwrap();
    let raised = text.replacen("\"max\": 2,", "\"max\": 5,", 1);
    assert_ne!(text, raised, "the fixture changed; update the edit");
    std::fs::write(tmp.path().join("atlas.json"), raised).unwrap();
    w.carp
        .set_atlases(Arc::new(atlas_set(&[tmp.path().to_owned()])));
    let send = |res: &Resolution| w.call_under(S1, res, "report.send", json!({"channel": "ops"}));
    assert_eq!(send(&before).trim_end(), "refused resolution_stale");
    let after = w.resolve(S1);
    for _ in 0..5 {
        assert_eq!(
            send(&after),
            "success",
            "a resolution of the loaded atlas counts 5"
        );
    }
    assert_eq!(
        send(&after),
        "denied rate_limit_exceeded allow-send-after-build",
    );
}

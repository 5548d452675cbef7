//! Conditions on history over HTTP, on redb and on PostgreSQL with two replicas: "look up before
//! you change" holds per session, and a customer's daily refund total holds across sessions,
//! agents and replicas, because the counters are the store's. The atlas is cra-carp's
//! `tests/fixtures/history/atlas`.

use cra_store::testing::{TestSchema, postgres_url};
use serde_json::{Value, json};

use crate::support::{AGENT, AGENT2, TestServer, assert_refused, execute_request, rid};

fn history_atlas() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../cra-carp/tests/fixtures/history/atlas"
    ))
}

/// Resolves in `session` and executes `action` with `params`: the HTTP answer.
async fn call(
    s: &TestServer,
    (key, agent, session): (&str, &str, &str),
    action: &str,
    params: Value,
) -> (u16, Value) {
    let mut req = crate::support::resolve_request(agent, session, &rid(), &[]);
    req["atlas_ids"] = json!(["com.example.history"]);
    let (st, res) = s.post(Some(key), "/v1/resolve", &req).await;
    assert_eq!(st, 200, "{res}");
    let id = res["resolution_id"].as_str().unwrap();
    let exec = execute_request(agent, session, &rid(), id, action, params);
    s.post(Some(key), "/v1/execute", &exec).await
}

fn ok(got: &(u16, Value)) {
    assert_eq!(got.0, 200, "{}", got.1);
    assert_eq!(got.1["status"], "success", "{}", got.1);
}

/// The scenario, on `a` and `b` (the same server, or two replicas of one database).
async fn refunds(a: &TestServer, b: &TestServer) {
    let s1 = ("ops", a.open_session(AGENT, "ops-bot").await);
    let s2 = ("other", b.open_session(AGENT2, "other-bot").await);
    let one = (AGENT, "ops-bot", s1.1.as_str());
    let two = (AGENT2, "other-bot", s2.1.as_str());
    let refund = |c: &str, amount: f64| json!({"customer_id": c, "amount": amount});

    // Look up before you change: per session, per customer.
    let before = call(a, one, "refund.issue", refund("C-1", 10.0)).await;
    assert_refused(&before, 403, "action_not_allowed");
    ok(&call(a, one, "customer.lookup", json!({"customer_id": "C-1"})).await);
    ok(&call(b, two, "customer.lookup", json!({"customer_id": "C-1"})).await);
    let other = call(a, one, "refund.issue", refund("C-2", 10.0)).await;
    assert_refused(&other, 403, "action_not_allowed");

    // The customer's total holds across sessions, agents and replicas.
    ok(&call(a, one, "refund.issue", refund("C-1", 700.0)).await);
    let over = call(b, two, "refund.issue", refund("C-1", 300.5)).await;
    assert_refused(&over, 429, "rate_limit_exceeded");
    assert_eq!(
        over.1["error"]["details"]["policy_id"],
        "allow-refund-looked-up"
    );
    // Advice within the window (the first refund leaves it in a day by redb's clock, the test
    // clock; PostgreSQL counts charges on its own clock, which the fixed test clock is not).
    let wait = over.1["error"]["details"]["retry_after_seconds"].as_u64();
    assert!(
        wait.is_some_and(|w| (1..=86_400).contains(&w)),
        "{}",
        over.1
    );
    ok(&call(b, two, "refund.issue", refund("C-1", 300.0)).await);
    let full = call(a, one, "refund.issue", refund("C-1", 0.01)).await;
    assert_refused(&full, 429, "rate_limit_exceeded");

    // The refusals are recorded with the deciding policy, and the executor never ran them.
    let events = a.events(&s1.1).await;
    let executed = events
        .iter()
        .filter(|e| e["event_type"] == "action.executed")
        .count();
    assert_eq!(
        executed, 2,
        "one lookup and one refund ran in the first session"
    );
}

#[tokio::test]
async fn a_refund_needs_a_lookup_and_a_customers_total_holds_across_sessions() {
    let s = TestServer::start_with(|c| c.atlases.push(history_atlas())).await;
    refunds(&s, &s).await;
    s.stop().await;
}

/// Two replicas over one PostgreSQL schema: the marks and totals one writes, the other reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_counters_hold_across_postgres_replicas() {
    let Some(url) = postgres_url("the_history_counters_hold_across_postgres_replicas") else {
        return;
    };
    let schema = TestSchema::new(&url, "history");
    let replica = |url: String, name: String, id: &str| {
        let id = id.to_owned();
        move |c: &mut cra_runtime::config::RuntimeConfig| {
            c.postgres = Some(url);
            c.postgres_schema = name;
            c.replica_id = Some(id);
            c.atlases.push(history_atlas());
        }
    };
    let name = schema.name().to_owned();
    let a = TestServer::start_blocking_seeded(42, replica(url.clone(), name.clone(), "r1")).await;
    let b = TestServer::start_blocking_seeded(43, replica(url, name, "r2")).await;
    refunds(&a, &b).await;
    a.stop_blocking().await;
    b.stop_blocking().await;
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

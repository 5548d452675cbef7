//! The CARP store contract (`cra_carp::store_contract`) on both backends, plus concurrent
//! consumers racing for the last units of a limit.

use std::sync::{Arc, Barrier};

use cra_carp::store::{CarpStore, Charge, ChargeKind, ConsumeOutcome};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{PgStore, RedbStore, StoreConfig};

/// A store and the storage it lives in, dropped together.
#[derive(Debug)]
struct Held<S> {
    store: S,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<TestSchema>,
}

fn redb() -> Held<RedbStore> {
    let dir = tempfile::tempdir().unwrap();
    Held {
        store: RedbStore::open(dir.path()).unwrap(),
        _dir: Some(dir),
        _schema: None,
    }
}

fn pg(url: &str, name: &str) -> Held<PgStore> {
    let schema = TestSchema::new(url, name);
    Held {
        store: schema.store(StoreConfig::default()).unwrap(),
        _dir: None,
        _schema: Some(schema),
    }
}

/// Forwards every call to the held store.
macro_rules! forward {
    ($t:ty) => {
        impl CarpStore for Held<$t> {
            fn create_session(
                &self,
                s: &cra_carp::store::SessionRecord,
            ) -> Result<(), cra_carp::store::CarpStoreError> {
                self.store.create_session(s)
            }
            fn get_session(
                &self,
                id: &str,
            ) -> Result<Option<cra_carp::store::SessionRecord>, cra_carp::store::CarpStoreError>
            {
                self.store.get_session(id)
            }
            fn sessions_of(
                &self,
                agent: &str,
            ) -> Result<Option<Vec<String>>, cra_carp::store::CarpStoreError> {
                self.store.sessions_of(agent)
            }
            fn end_session(
                &self,
                id: &str,
                at: &str,
            ) -> Result<cra_carp::store::SessionRecord, cra_carp::store::CarpStoreError> {
                self.store.end_session(id, at)
            }
            fn insert_request_id(
                &self,
                s: &str,
                r: &str,
            ) -> Result<bool, cra_carp::store::CarpStoreError> {
                self.store.insert_request_id(s, r)
            }
            fn has_request_id(
                &self,
                s: &str,
                r: &str,
            ) -> Result<bool, cra_carp::store::CarpStoreError> {
                self.store.has_request_id(s, r)
            }
            fn record_resolve(
                &self,
                s: &str,
                r: &str,
                res: &cra_carp::store::StoredResolution,
            ) -> Result<bool, cra_carp::store::CarpStoreError> {
                self.store.record_resolve(s, r, res)
            }
            fn put_resolution(
                &self,
                r: &cra_carp::store::StoredResolution,
            ) -> Result<(), cra_carp::store::CarpStoreError> {
                self.store.put_resolution(r)
            }
            fn get_resolution(
                &self,
                id: &str,
            ) -> Result<Option<cra_carp::store::StoredResolution>, cra_carp::store::CarpStoreError>
            {
                self.store.get_resolution(id)
            }
            fn get_execution_by_key(
                &self,
                s: &str,
                k: &str,
            ) -> Result<Option<cra_carp::store::ExecutionRecord>, cra_carp::store::CarpStoreError>
            {
                self.store.get_execution_by_key(s, k)
            }
            fn record_execution(
                &self,
                e: &cra_carp::store::ExecutionRecord,
            ) -> Result<cra_carp::store::ExecutionRecord, cra_carp::store::CarpStoreError> {
                self.store.record_execution(e)
            }
            fn rate_count(
                &self,
                p: &str,
                s: &str,
                a: i64,
                b: i64,
            ) -> Result<u64, cra_carp::store::CarpStoreError> {
                self.store.rate_count(p, s, a, b)
            }
            fn has_event(
                &self,
                p: &str,
                s: &str,
                a: i64,
                b: i64,
            ) -> Result<bool, cra_carp::store::CarpStoreError> {
                self.store.has_event(p, s, a, b)
            }
            fn budget_spent(
                &self,
                p: &str,
                s: &str,
            ) -> Result<u64, cra_carp::store::CarpStoreError> {
                self.store.budget_spent(p, s)
            }
            fn try_consume(
                &self,
                c: &[Charge],
                at: i64,
            ) -> Result<ConsumeOutcome, cra_carp::store::CarpStoreError> {
                self.store.try_consume(c, at)
            }
            fn try_consume_now(
                &self,
                c: &[Charge],
                clock: &dyn cra_wire::Clock,
            ) -> Result<(ConsumeOutcome, i64), cra_carp::store::CarpStoreError> {
                self.store.try_consume_now(c, clock)
            }
            fn claim_execution(
                &self,
                l: &cra_carp::store::ExecutionLease,
            ) -> Result<cra_carp::store::ClaimOutcome, cra_carp::store::CarpStoreError> {
                self.store.claim_execution(l)
            }
            fn claim_and_consume_now(
                &self,
                l: &cra_carp::store::ExecutionLease,
                c: &[Charge],
                clock: &dyn cra_wire::Clock,
            ) -> Result<
                (cra_carp::store::ClaimOutcome, Option<(ConsumeOutcome, i64)>),
                cra_carp::store::CarpStoreError,
            > {
                self.store.claim_and_consume_now(l, c, clock)
            }
            fn release_execution(&self, id: &str) -> Result<(), cra_carp::store::CarpStoreError> {
                self.store.release_execution(id)
            }
            fn leases_of(
                &self,
                owner: &str,
            ) -> Result<Vec<cra_carp::store::ExecutionLease>, cra_carp::store::CarpStoreError> {
                self.store.leases_of(owner)
            }
            fn create_approval(
                &self,
                a: &cra_carp::store::ApprovalRecord,
            ) -> Result<(), cra_carp::store::CarpStoreError> {
                self.store.create_approval(a)
            }
            fn get_approval(
                &self,
                id: &str,
            ) -> Result<Option<cra_carp::store::ApprovalRecord>, cra_carp::store::CarpStoreError>
            {
                self.store.get_approval(id)
            }
            fn decide_approval(
                &self,
                id: &str,
                d: cra_carp::store::ApprovalDecision,
                by: &str,
                note: Option<&str>,
                at: &str,
            ) -> Result<cra_carp::store::ApprovalRecord, cra_carp::store::CarpStoreError> {
                self.store.decide_approval(id, d, by, note, at)
            }
            fn list_pending_approvals(
                &self,
            ) -> Result<Vec<cra_carp::store::ApprovalRecord>, cra_carp::store::CarpStoreError> {
                self.store.list_pending_approvals()
            }
            fn list_decided_approvals(
                &self,
                limit: usize,
            ) -> Result<Vec<cra_carp::store::ApprovalRecord>, cra_carp::store::CarpStoreError> {
                self.store.list_decided_approvals(limit)
            }
        }
    };
}
forward!(RedbStore);
forward!(PgStore);

#[test]
fn redb_keeps_the_carp_store_contract() {
    cra_carp::store_contract::check_all(&|| Box::new(redb()) as Box<dyn CarpStore>);
}

#[test]
fn postgres_keeps_the_carp_store_contract() {
    let Some(url) = postgres_url("postgres_keeps_the_carp_store_contract") else {
        return;
    };
    cra_carp::store_contract::check_all(&|| {
        Box::new(pg(&url, "carp_contract")) as Box<dyn CarpStore>
    });
}

/// 16 threads race for a budget of 10 units and a rate limit of 12 calls: exactly 10 win.
fn race(store: Arc<dyn CarpStore>) {
    let charges = vec![
        Charge {
            policy_id: "rl".into(),
            scope_key: "global".into(),
            kind: ChargeKind::Rate {
                max_calls: 12,
                window_seconds: 3600,
            },
        },
        Charge {
            policy_id: "b".into(),
            scope_key: "agent:a".into(),
            kind: ChargeKind::Budget {
                max_units: 10,
                units: 1,
            },
        },
    ];
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (store, charges, barrier) = (store.clone(), charges.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                store
                    .try_consume(&charges, 1_000_000 + i)
                    .unwrap()
                    .is_consumed()
            })
        })
        .collect();
    let won = handles
        .into_iter()
        .filter(|_| true)
        .map(|h| h.join().unwrap())
        .filter(|w| *w)
        .count();
    assert_eq!(won, 10);
    assert_eq!(store.budget_spent("b", "agent:a").unwrap(), 10);
    assert_eq!(store.rate_count("rl", "global", 0, i64::MAX).unwrap(), 10);
}

/// 16 threads race to add 300 to a running total of at most 1,000 in a day (`sum_within`):
/// exactly 3 win, and the total never passes the maximum.
fn race_for_a_total(store: Arc<dyn CarpStore>) {
    let charge = Charge {
        policy_id: "allow-refund#1".into(),
        scope_key: "global|sha256:c".into(),
        kind: ChargeKind::Window {
            max_units: 1_000,
            window_seconds: 86_400,
            units: 300,
        },
    };
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (store, charge, barrier) = (store.clone(), charge.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // One instant for all: a window counts up to its instant, so charges given
                // out of order would not see each other (the runtime reads the instant under
                // the store's lock, `try_consume_now`, so its instants are in order).
                let at = 1_000_000;
                store
                    .try_consume(std::slice::from_ref(&charge), at)
                    .unwrap()
                    .is_consumed()
            })
        })
        .collect();
    let won = handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|w| *w)
        .count();
    assert_eq!(won, 3);
    let total = store.rate_count("allow-refund#1", "global|sha256:c", 0, i64::MAX);
    assert_eq!(total.unwrap(), 900);
}

#[test]
fn concurrent_calls_never_overspend_a_windowed_total() {
    race_for_a_total(Arc::new(redb()));
    if let Some(url) = postgres_url("concurrent_calls_never_overspend_a_windowed_total") {
        race_for_a_total(Arc::new(pg(&url, "carp_total_race")));
    }
}

#[test]
fn concurrent_consumers_never_overspend() {
    race(Arc::new(redb()));
    if let Some(url) = postgres_url("concurrent_consumers_never_overspend") {
        race(Arc::new(pg(&url, "carp_race")));
    }
}

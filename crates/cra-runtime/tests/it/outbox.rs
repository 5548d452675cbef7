//! Issue 22 B.14: no Relay change goes unaudited. A Relay write keeps the events it owes in the
//! store with the change; a server that stops between the write and the append leaves them
//! there, and the next start appends them, once, to the chain they were owed to (the project's
//! audit chain when that session has ended meanwhile).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cra_carp::store::{StateChange, StateDone, StateLog};
use cra_trace::store::ChainStoreError;
use serde_json::json;

use crate::support::{ADMIN, MAINT, TestServer};

/// The runtime's state log, losing every outbox settlement while `cut` is set: the hook that
/// stops a server between a Relay write and the append of its events.
struct CutSettlements {
    inner: Arc<dyn StateLog>,
    cut: AtomicBool,
}

impl StateLog for CutSettlements {
    fn record_and_append_then(
        &self,
        change: StateChange,
        drafts: Vec<cra_trace::PreparedDraft>,
        done: StateDone,
    ) {
        if matches!(change, StateChange::Settle(_)) && self.cut.load(Ordering::SeqCst) {
            let gone = "the server stopped before the append (test hook)";
            done(Err(ChainStoreError::Unavailable(gone.into()).into()));
        } else {
            self.inner.record_and_append_then(change, drafts, done);
        }
    }
}

async fn serve_cut() -> (TestServer, Arc<CutSettlements>) {
    let mut hook = None;
    let s = TestServer::start_hooked(|rt| {
        let cut = Arc::new(CutSettlements {
            inner: rt.backends.state_log.clone(),
            cut: AtomicBool::new(false),
        });
        rt.backends.state_log = cut.clone();
        hook = Some(cut);
    })
    .await;
    (s, hook.unwrap())
}

fn audit(project_id: &str) -> String {
    cra_runtime::service::relay::project_audit_session(project_id)
}

fn outbox_len(s: &TestServer) -> usize {
    let rt = &s.server.as_ref().unwrap().state.0;
    rt.backends.relay.outbox().unwrap().len()
}

/// A project created, a fact asserted and a package deposited (into an agent's session that then
/// ends) while the server cannot append: each change is made and answered 503, its events wait
/// in the outbox, and the next start appends them exactly once: the project's audit chain opens
/// with its two events, the fact goes to the audit chain, and the deposit, owed to a session
/// that has ended, goes to the audit chain too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_writes_cut_off_before_their_append_are_recorded_at_the_next_start() {
    let (s, hook) = serve_cut().await;
    crate::relay::new_project(&s, MAINT, "p-ok").await;
    let sid = s.open_session(MAINT, "maintainer-bot").await;

    hook.cut.store(true, Ordering::SeqCst);
    let (st, body) = s
        .post(
            Some(MAINT),
            "/v1/projects",
            &json!({"project_id": "p-cut", "name": "Cut off"}),
        )
        .await;
    assert_eq!(
        (st, body["error"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let (st, body) = s
        .post(
            Some(MAINT),
            "/v1/projects/p-ok/facts",
            &json!({"subject": "svc", "predicate": "owner", "value": "team-a"}),
        )
        .await;
    assert_eq!(st, 503, "{body}");
    let package = crate::relay::package("pkg_cut", "p-ok", "maintainer-bot", Some(&sid));
    let (st, body) = s
        .post(Some(MAINT), "/v1/projects/p-ok/packages", &package)
        .await;
    assert_eq!(st, 503, "{body}");
    hook.cut.store(false, Ordering::SeqCst);
    assert_eq!(outbox_len(&s), 3, "three changes wait for their events");
    // Before the restart: the changes are stored, their events are not.
    assert_eq!(
        s.event_types(&audit("p-ok")).await,
        ["session.started", "relay.project.created"]
    );
    assert!(
        !s.event_types(&sid)
            .await
            .contains(&"relay.package.deposited".to_owned())
    );
    let (st, body) = s.delete(Some(MAINT), &format!("/v1/sessions/{sid}")).await;
    assert_eq!(st, 204, "{body}");

    drop(hook);
    let dir = s.stop_keep().await;
    let s = TestServer::start_in(dir, |_| {}).await;
    assert_eq!(outbox_len(&s), 0, "the start appended every entry");
    assert_eq!(
        s.event_types(&audit("p-cut")).await,
        ["session.started", "relay.project.created"]
    );
    let (st, body) = s.get(Some(MAINT), "/v1/projects/p-cut").await;
    assert_eq!(st, 200, "the creator's grant is back: {body}");
    assert_eq!(
        s.event_types(&audit("p-ok")).await,
        [
            "session.started",
            "relay.project.created",
            "relay.fact.asserted",
            "relay.package.deposited"
        ],
        "each owed event once, the deposit moved off the ended session"
    );
    let audit_ok = s.events(&audit("p-ok")).await;
    assert_eq!(audit_ok[3]["payload"]["package_id"], "pkg_cut");
    let (st, verdict) = s
        .post(
            Some(ADMIN),
            &format!("/v1/traces/{}/verify", audit("p-ok")),
            &json!({}),
        )
        .await;
    assert_eq!(st, 200, "{verdict}");
    assert_eq!(verdict["valid"], true, "{verdict}");
    assert!(
        !s.event_types(&sid)
            .await
            .contains(&"relay.package.deposited".to_owned()),
        "nothing follows session.ended"
    );
    s.stop().await;
}

/// A read that finds a package's stored bytes changed behind the server's back quarantines it
/// (409 `integrity_error`), and that change is recorded too: `relay.package.quarantined` in the
/// project's audit chain, once, naming the stored and the recomputed hash.
#[tokio::test]
async fn a_quarantine_found_by_a_read_is_recorded_once() {
    let s = TestServer::start().await;
    crate::relay::new_project(&s, MAINT, "p-tamper").await;
    let package = crate::relay::package("pkg_t", "p-tamper", "maintainer-bot", None);
    let (st, deposited) = s
        .post(Some(MAINT), "/v1/projects/p-tamper/packages", &package)
        .await;
    assert_eq!(st, 201, "{deposited}");
    let data = s.data.clone();
    let dir = s.stop_keep().await;
    retitle_stored_package(&data, "p-tamper", "pkg_t");

    let s = TestServer::start_in(dir, |_| {}).await;
    let path = "/v1/projects/p-tamper/packages/pkg_t";
    for _ in 0..2 {
        crate::support::assert_error(&s.get(Some(MAINT), path).await, 409, "integrity_error");
    }
    let events = s.events(&audit("p-tamper")).await;
    let quarantines: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event_type"] == "relay.package.quarantined")
        .collect();
    assert_eq!(quarantines.len(), 1, "recorded once: {events:#?}");
    let payload = &quarantines[0]["payload"];
    assert_eq!(payload["package_id"], "pkg_t");
    assert_eq!(payload["content_hash"], deposited["content_hash"]);
    assert!(
        payload["recomputed"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
            && payload["recomputed"] != deposited["content_hash"],
        "{payload}"
    );
    s.stop().await;
}

/// Changes the title of package `id` of `project` in the redb store of `data` (the server is
/// stopped), keeping its stored content hash: tampering.
fn retitle_stored_package(data: &std::path::Path, project: &str, id: &str) {
    use redb::{ReadableTable, TableDefinition};
    const PACKAGES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_packages");
    let store = cra_store::RedbStore::open(data).unwrap();
    let db = store.handle();
    let key = format!("{project}\0{id}");
    let tx = db.begin_write().unwrap();
    {
        let mut t = tx.open_table(PACKAGES).unwrap();
        let bytes = t.get(key.as_str()).unwrap().unwrap().value().to_vec();
        // Stored as the store stores records (compressed when that pays; no key here).
        let text = cra_store::redb::record::unpack(&bytes).unwrap();
        let mut row: serde_json::Value = serde_json::from_slice(&text).unwrap();
        row["package"]["title"] = json!("changed behind the server's back");
        let stored = cra_store::redb::record::pack(serde_json::to_vec(&row).unwrap());
        t.insert(key.as_str(), stored.as_slice()).unwrap();
    }
    tx.commit().unwrap();
}

/// An outbox that owes an entry this version cannot read (as a later version might write).
struct Unreadable;

impl cra_relay::store::Outbox for Unreadable {
    fn entries(
        &self,
        _: cra_relay::store::Written<'_>,
    ) -> Result<Vec<cra_relay::store::OutboxEntry>, cra_relay::store::RelayStoreError> {
        Ok(vec![cra_relay::store::OutboxEntry {
            key: "unreadable".into(),
            body: "{\"from\": \"a later version\"}".into(),
        }])
    }
}

/// An outbox entry the start cannot read does not stop the server: it is logged and left in
/// place, for a version that can read it.
#[tokio::test]
async fn an_outbox_entry_this_version_cannot_read_is_left_in_place() {
    let s = TestServer::start().await;
    let relay = s.server.as_ref().unwrap().state.0.backends.relay.clone();
    let project = cra_relay::Project {
        project_id: "p-later".into(),
        name: "later".into(),
        created_at: "2026-03-02T10:00:00Z".into(),
        archived_at: None,
    };
    relay
        .with_outbox(Arc::new(Unreadable))
        .create_project(&project)
        .unwrap();
    drop(relay);
    let dir = s.stop_keep().await;
    let s = TestServer::start_in(dir, |_| {}).await;
    let left = s
        .server
        .as_ref()
        .unwrap()
        .state
        .0
        .backends
        .relay
        .outbox()
        .unwrap();
    assert_eq!(left.len(), 1, "the entry stays");
    assert_eq!(left[0].key, "unreadable");
    s.stop().await;
}

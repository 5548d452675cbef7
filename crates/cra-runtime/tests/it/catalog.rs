//! The atlases in force kept in the store's atlas catalog (`crate::atlases::catalog`): an
//! installed atlas survives a restart; a directory atlas whose id and version are stored with
//! other content fails the start unless `--replace-atlases`; on PostgreSQL an install on one
//! replica reaches another's decisions; the history of changes reads newest first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cra_runtime::build_runtime;
use cra_store::AtlasCatalog;
use cra_store::retention::OPERATOR_AUDIT_SESSION;
use cra_store::testing::{TestSchema, postgres_url};
use cra_wire::{FixedClock, SequentialIds};
use serde_json::Value;

use crate::support::*;
use crate::system::inline_example;

const PAYMENTS: &str = "com.example.payments";

/// A copy of the `dev.cra.github-ops` atlas under `dir` whose description says `description`:
/// the same id and version, other content.
fn edited_github_ops(dir: &Path, description: &str) -> PathBuf {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../atlases/dev.cra.github-ops");
    let to = dir.join("github-ops-edited");
    copy_dir(&from, &to);
    let manifest = to.join("atlas.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    m["description"] = Value::from(description);
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    to
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let target = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &target);
        } else {
            std::fs::copy(&p, &target).unwrap();
        }
    }
}

/// `atlas_id -> digest` of the atlases `s` has in force.
async fn in_force(s: &TestServer) -> Vec<(String, String)> {
    let (st, body) = s.get(Some(AGENT), "/v1/atlases").await;
    assert_eq!(st, 200, "{body}");
    let mut out: Vec<(String, String)> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let field = |k: &str| a[k].as_str().unwrap().to_owned();
            (field("atlas_id"), field("digest"))
        })
        .collect();
    out.sort();
    out
}

fn digest_of(set: &[(String, String)], id: &str) -> Option<String> {
    set.iter().find(|(a, _)| a == id).map(|(_, d)| d.clone())
}

/// Invariant: the atlases in force are the store's; an install survives the restart, and a
/// directory atlas never silently changes a published version.
#[tokio::test]
async fn an_installed_atlas_survives_a_restart_and_a_changed_published_version_needs_replace() {
    let s = TestServer::start().await;
    let (st, body) = s
        .post(Some(AUTHOR), "/v1/atlases", &inline_example(PAYMENTS))
        .await;
    assert_eq!(st, 201, "{body}");
    let before = in_force(&s).await;
    let dir = s.stop_keep().await;

    let s = TestServer::start_in(dir, |_| {}).await;
    assert_eq!(
        in_force(&s).await,
        before,
        "the install outlived the restart"
    );
    let dir = s.stop_keep().await;

    // The same id and version with other content: the start fails and says what to do.
    let edited = edited_github_ops(dir.path(), "edited without a new version");
    let (mut config, _) = test_config(dir.path());
    config.atlases = vec![edited.clone()];
    let clock = Arc::new(FixedClock::parse(T0).unwrap());
    let ids = Arc::new(SequentialIds::new(1_772_445_600_000, 44));
    let refused = tokio::task::spawn_blocking(move || build_runtime(config, clock, ids))
        .await
        .unwrap();
    let message = match refused {
        Ok(_) => panic!("a changed published version started"),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("dev.cra.github-ops") && message.contains("--replace-atlases"),
        "{message}"
    );

    // With --replace-atlases it replaces the stored one; the installed atlas stays, and the
    // start's change is in the operator audit chain.
    let s = TestServer::start_in(dir, |c| {
        c.atlases = vec![edited];
        c.replace_atlases = true;
    })
    .await;
    let after = in_force(&s).await;
    assert_eq!(digest_of(&after, PAYMENTS), digest_of(&before, PAYMENTS));
    assert_ne!(
        digest_of(&after, "dev.cra.github-ops"),
        digest_of(&before, "dev.cra.github-ops")
    );
    let events = s.events(OPERATOR_AUDIT_SESSION).await;
    let last = events.last().unwrap();
    assert_eq!(last["event_type"], "atlas.replaced");
    assert_eq!(last["payload"]["source"], "start");
    assert_eq!(last["payload"]["atlas_id"], "dev.cra.github-ops");
    s.stop().await;
}

/// Invariant: every change of the atlases in force is a generation of the catalog's history,
/// readable newest first by authors, auditors and operators (not agents), paged by `before`.
#[tokio::test]
async fn the_catalog_s_history_lists_every_change_newest_first() {
    let s = TestServer::start().await;
    let (st, body) = s
        .post(Some(AUTHOR), "/v1/atlases", &inline_example(PAYMENTS))
        .await;
    assert_eq!(st, 201, "{body}");
    let (st, page) = s.get(Some(AUDITOR), "/v1/atlases/history").await;
    assert_eq!(st, 200, "{page}");
    let generations = page["generations"].as_array().unwrap();
    let numbers: Vec<u64> = generations
        .iter()
        .map(|g| g["generation"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![2, 1], "{page}");
    let newest = &generations[0];
    assert_eq!(
        (newest["actor"].as_str(), newest["reason"].as_str()),
        (Some("alice"), Some("install")),
        "{newest}"
    );
    assert_eq!(newest["recorded"], true, "{newest}");
    let ids: Vec<&str> = newest["atlases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["atlas_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![PAYMENTS, "dev.cra.github-ops"]);
    assert_eq!(generations[1]["reason"], "start", "{page}");
    assert!(page.get("next_before").is_none(), "the last page: {page}");

    // One per page: the first names the next; the next is the last.
    let (st, first) = s.get(Some(OPERATOR), "/v1/atlases/history?limit=1").await;
    assert_eq!(st, 200, "{first}");
    assert_eq!(first["generations"][0]["generation"], 2);
    assert_eq!(first["next_before"], 2, "{first}");
    let (st, last) = s
        .get(Some(AUTHOR), "/v1/atlases/history?limit=1&before=2")
        .await;
    assert_eq!(st, 200, "{last}");
    assert_eq!(last["generations"][0]["generation"], 1);
    assert!(last.get("next_before").is_none(), "{last}");

    assert_error(
        &s.get(Some(AGENT), "/v1/atlases/history").await,
        403,
        "forbidden",
    );
    for bad in ["limit=0", "limit=101", "limit=x", "before=-1", "since=3"] {
        let got = s
            .get(Some(AUDITOR), &format!("/v1/atlases/history?{bad}"))
            .await;
        assert_error(&got, 400, "invalid_request");
    }
    s.stop().await;
}

/// The store's catalog behind a test's hand: the first commit finds another replica's change
/// committed just before it (`Interloper`), or every commit fails (`Down`).
#[derive(Debug)]
struct Meddling {
    inner: Arc<dyn AtlasCatalog>,
    down: bool,
    interloped: std::sync::atomic::AtomicBool,
}

impl AtlasCatalog for Meddling {
    fn head(&self) -> Result<Option<cra_store::catalog::Generation>, cra_store::BackendError> {
        self.inner.head()
    }
    fn files(
        &self,
        digest: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, cra_store::BackendError> {
        self.inner.files(digest)
    }
    fn commit(
        &self,
        change: &cra_store::catalog::CatalogChange<'_>,
    ) -> Result<u64, cra_store::catalog::CommitError> {
        if self.down {
            let e = cra_store::BackendError::Backend("the catalog is down".to_owned());
            return Err(e.into());
        }
        if !self
            .interloped
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let head = self.inner.head().unwrap().unwrap();
            let none = std::collections::BTreeMap::new();
            self.inner
                .commit(&cra_store::catalog::CatalogChange {
                    after: Some(head.number),
                    members: &head.members,
                    files: &none,
                    actor: "another-replica",
                    reason: "install",
                    recorded: true,
                })
                .unwrap();
        }
        self.inner.commit(change)
    }
    fn mark_recorded(&self, number: u64) -> Result<bool, cra_store::BackendError> {
        self.inner.mark_recorded(number)
    }
    fn last_recorded(
        &self,
    ) -> Result<Option<cra_store::catalog::Generation>, cra_store::BackendError> {
        self.inner.last_recorded()
    }
    fn history(
        &self,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<cra_store::catalog::Generation>, cra_store::BackendError> {
        self.inner.history(before, limit)
    }
}

fn meddle(rt: &mut cra_runtime::Runtime, down: bool) {
    let inner = rt.atlas_catalog.clone().unwrap();
    rt.atlas_catalog = Some(Arc::new(Meddling {
        inner,
        down,
        interloped: std::sync::atomic::AtomicBool::new(false),
    }));
}

/// Invariant: a change built on a generation another replica replaced meanwhile is built again
/// on the newest one and committed after it (nothing of either is lost).
#[tokio::test]
async fn a_change_that_lost_the_race_to_the_catalog_is_built_again_on_the_newest() {
    let s = TestServer::start_hooked(|rt| meddle(rt, false)).await;
    let (st, body) = s
        .post(Some(AUTHOR), "/v1/atlases", &inline_example(PAYMENTS))
        .await;
    assert_eq!(st, 201, "{body}");
    assert!(digest_of(&in_force(&s).await, PAYMENTS).is_some());
    let head = s
        .server
        .as_ref()
        .unwrap()
        .state
        .atlas_catalog
        .as_ref()
        .unwrap()
        .head();
    let head = head.unwrap().unwrap();
    assert_eq!(
        head.number, 3,
        "the start's, the other replica's, then the install"
    );
    assert_eq!(head.members.len(), 2);
    s.stop().await;
}

/// Invariant: an install the catalog cannot take is 503 `unavailable` and changes nothing in
/// force.
#[tokio::test]
async fn an_install_the_catalog_cannot_take_is_unavailable_and_changes_nothing() {
    let s = TestServer::start_hooked(|rt| meddle(rt, true)).await;
    let before = in_force(&s).await;
    assert_error(
        &s.post(Some(AUTHOR), "/v1/atlases", &inline_example(PAYMENTS))
            .await,
        503,
        "unavailable",
    );
    assert_eq!(in_force(&s).await, before);
    s.stop().await;
}

/// Invariant: a change stored but not recorded (a crash between the catalog commit and the
/// event's append) is recorded by the next start, once.
#[tokio::test]
async fn a_stored_change_a_crash_left_unrecorded_is_recorded_by_the_next_start() {
    let s = TestServer::start().await;
    let dir = s.stop_keep().await;
    {
        // What the crashed server did: commit a generation without its event.
        let store = cra_store::RedbStore::open(dir.path().join("data")).unwrap();
        let head = store.head().unwrap().unwrap();
        assert!(
            head.recorded,
            "a first start's set is configuration, not a change"
        );
        let no_files = std::collections::BTreeMap::new();
        store
            .commit(&cra_store::catalog::CatalogChange {
                after: Some(head.number),
                members: &[],
                files: &no_files,
                actor: "root",
                reason: "replace_set",
                recorded: false,
            })
            .unwrap();
    }
    // Started without directory atlases, so the start changes nothing itself.
    let s = TestServer::start_in(dir, |c| c.atlases = Vec::new()).await;
    assert!(in_force(&s).await.is_empty());
    let events = s.events(OPERATOR_AUDIT_SESSION).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["session.started", "atlas.removed"]);
    let removed = &events[1]["payload"];
    assert_eq!(removed["atlas_id"], "dev.cra.github-ops");
    assert_eq!(removed["actor"], "root");
    assert_eq!(removed["source"], "replace_set");
    let dir = s.stop_keep().await;
    let s = TestServer::start_in(dir, |c| c.atlases = Vec::new()).await;
    assert_eq!(
        s.events(OPERATOR_AUDIT_SESSION).await.len(),
        2,
        "recorded once"
    );
    s.stop().await;
}

/// Invariant: on a schema shared by replicas, an atlas installed through one is in force on
/// the others as soon as the feed announces it, and their decisions record its digest; a
/// replica started later reads it from the store.
#[tokio::test]
async fn an_atlas_installed_on_one_replica_decides_on_another_postgres() {
    let Some(url) = postgres_url("an_atlas_installed_on_one_replica_decides_on_another_postgres")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "atlas_replicas");
    let replica = |seed: u64| {
        let (url, name) = (url.clone(), schema.name().to_owned());
        async move {
            TestServer::start_with_seed(seed, move |c| {
                c.postgres = Some(url);
                c.postgres_schema = name;
            })
            .await
        }
    };
    let (one, two) = (replica(7).await, replica(8).await);
    let mut changed = two.server.as_ref().unwrap().state.tool_lists.subscribe();
    let (st, installed) = one
        .post(Some(AUTHOR), "/v1/atlases", &inline_example(PAYMENTS))
        .await;
    assert_eq!(st, 201, "{installed}");
    let deadline = std::time::Duration::from_secs(10);
    tokio::time::timeout(deadline, async {
        while digest_of(&in_force(&two).await, PAYMENTS).is_none() {
            changed.changed().await.unwrap();
        }
    })
    .await
    .expect("the other replica took the install within the deadline");

    let sid = two.open_session(AGENT, "ops-bot").await;
    let mut request = resolve_request("ops-bot", &sid, &rid(), &["treasury-read"]);
    request["atlas_ids"] = serde_json::json!([PAYMENTS]);
    let (st, res) = two.post(Some(AGENT), "/v1/resolve", &request).await;
    assert_eq!(st, 200, "{res}");
    let events = two.events(&sid).await;
    assert_eq!(
        events[1]["payload"]["atlas_digests"][PAYMENTS], installed["digest"],
        "the decision records the digest it used"
    );

    // A replica started after the install, with only the directory atlas, has it too.
    let three = replica(9).await;
    assert_eq!(in_force(&three).await, in_force(&one).await);
    for s in [one, two, three] {
        s.stop_blocking().await;
    }
    tokio::task::spawn_blocking(move || drop(schema))
        .await
        .unwrap();
}

//! The atlas catalog (`cra_store::catalog`) on both backends: generations are dense and only
//! added, a commit is a compare-and-set on the newest one, files are stored once by digest, and
//! everything survives reopening; the history reads newest first. On PostgreSQL a commit is announced on the feed.

use std::collections::BTreeMap;

use cra_store::AtlasCatalog;
use cra_store::catalog::{CatalogChange, CatalogEntry, CommitError};
use cra_store::pg::feed::FeedEvent;
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{RedbStore, StoreConfig};

use crate::backends::{backends, fixed};

fn entry(id: &str, version: &str, digest: &str) -> CatalogEntry {
    CatalogEntry {
        atlas_id: id.to_owned(),
        version: version.to_owned(),
        digest: digest.to_owned(),
        signature: None,
    }
}

fn files(text: &str) -> BTreeMap<String, Vec<u8>> {
    let mut f = BTreeMap::new();
    f.insert("atlas.json".to_owned(), text.as_bytes().to_vec());
    f
}

fn commit(
    store: &dyn AtlasCatalog,
    after: Option<u64>,
    members: &[CatalogEntry],
    given: &[(&str, &BTreeMap<String, Vec<u8>>)],
) -> Result<u64, CommitError> {
    let files: BTreeMap<String, &BTreeMap<String, Vec<u8>>> =
        given.iter().map(|(d, f)| ((*d).to_owned(), *f)).collect();
    store.commit(&CatalogChange {
        after,
        members,
        files: &files,
        actor: "tester",
        reason: "install",
        recorded: false,
    })
}

/// Invariant: a commit writes generation `after + 1` only while `after` is the newest; a stale
/// or incomplete change writes nothing (no generation, no files); a generation is marked
/// recorded once, and the newest recorded one is found.
#[test]
fn the_catalog_commits_only_on_its_newest_generation_and_refusals_write_nothing() {
    let (_, config) = fixed();
    for b in backends("catalog_cas", || config.clone()) {
        let store = b.store.as_ref() as &dyn AtlasCatalog;
        assert_eq!(store.head().unwrap(), None, "{}", b.name);
        let (a1, b1) = (files("a1"), files("b1"));
        let signed = CatalogEntry {
            signature: Some("-----BEGIN SSH SIGNATURE-----".to_owned()),
            ..entry("com.example.b", "1.0.0", "db1")
        };
        let first = [signed.clone(), entry("com.example.a", "1.0.0", "da1")];
        let n = commit(store, None, &first, &[("da1", &a1), ("db1", &b1)]).unwrap();
        assert_eq!(n, 1, "{}", b.name);
        let head = store.head().unwrap().unwrap();
        assert_eq!(head.number, 1);
        assert_eq!(head.members[0].atlas_id, "com.example.a", "stored by id");
        assert_eq!(head.members[1], signed, "{}: the signature is kept", b.name);
        assert_eq!(
            (head.actor.as_str(), head.reason.as_str()),
            ("tester", "install")
        );
        assert!(head.committed_at.ends_with('Z'), "{}", head.committed_at);
        assert_eq!(store.files("da1").unwrap(), Some(a1.clone()));
        assert_eq!(store.files("nope").unwrap(), None);

        // Built on the empty catalog, or on generation 1 twice: stale, nothing written.
        let a2 = files("a2");
        let second = [entry("com.example.a", "2.0.0", "da2")];
        let stale = commit(store, None, &second, &[("da2", &a2)]).unwrap_err();
        assert_eq!(stale, CommitError::Stale { newest: Some(1) }, "{}", b.name);
        assert_eq!(store.files("da2").unwrap(), None, "{}: no files", b.name);
        assert_eq!(commit(store, Some(1), &second, &[("da2", &a2)]).unwrap(), 2);
        let again = commit(store, Some(1), &first, &[]).unwrap_err();
        assert_eq!(again, CommitError::Stale { newest: Some(2) }, "{}", b.name);

        // A member whose files are neither stored nor given.
        let missing = commit(
            store,
            Some(2),
            &[entry("com.example.c", "1.0.0", "dc1")],
            &[],
        );
        assert!(
            matches!(missing, Err(CommitError::MissingFiles { ref digest, .. }) if digest == "dc1"),
            "{}: {missing:?}",
            b.name
        );
        // Stored files are reused: generation 3 names an atlas of generation 1 without files.
        assert_eq!(commit(store, Some(2), &first, &[]).unwrap(), 3);
        assert_eq!(store.head().unwrap().unwrap().members.len(), 2);
        // Recording: the newest recorded generation, marked once.
        assert_eq!(store.last_recorded().unwrap(), None, "{}", b.name);
        assert!(store.mark_recorded(2).unwrap());
        assert!(!store.mark_recorded(2).unwrap(), "{}: marked once", b.name);
        assert!(
            !store.mark_recorded(9).unwrap(),
            "{}: no such generation",
            b.name
        );
        let recorded = store.last_recorded().unwrap().unwrap();
        assert_eq!(
            (recorded.number, recorded.recorded),
            (2, true),
            "{}",
            b.name
        );
        assert!(!store.head().unwrap().unwrap().recorded);
        // Two members with one id are refused.
        let twice = [entry("x", "1.0.0", "da1"), entry("x", "2.0.0", "da2")];
        assert!(commit(store, Some(3), &twice, &[]).is_err(), "{}", b.name);
        assert_eq!(store.head().unwrap().unwrap().number, 3, "{}", b.name);
        // The history: newest first, paged by `before`.
        let numbers = |before, limit| -> Vec<u64> {
            let page = store.history(before, limit).unwrap();
            page.iter().map(|g| g.number).collect()
        };
        assert_eq!(numbers(None, 10), vec![3, 2, 1], "{}", b.name);
        assert_eq!(numbers(None, 2), vec![3, 2], "{}", b.name);
        assert_eq!(numbers(Some(2), 10), vec![1], "{}", b.name);
        assert_eq!(numbers(Some(1), 10), Vec::<u64>::new(), "{}", b.name);
        let second = &store.history(Some(3), 1).unwrap()[0];
        assert_eq!((second.number, second.recorded), (2, true), "{}", b.name);
        assert_eq!(second.members, vec![entry("com.example.a", "2.0.0", "da2")]);
    }
}

/// Invariant: the catalog outlives the process that wrote it.
#[test]
fn the_catalog_survives_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let a = files("a");
    {
        let store = RedbStore::open(dir.path()).unwrap();
        commit(&store, None, &[entry("a", "1.0.0", "da")], &[("da", &a)]).unwrap();
    }
    let store = RedbStore::open(dir.path()).unwrap();
    assert_eq!(
        store.head().unwrap().unwrap().members,
        vec![entry("a", "1.0.0", "da")]
    );
    assert_eq!(store.files("da").unwrap(), Some(a.clone()));

    let Some(url) = postgres_url("catalog_reopen") else {
        return;
    };
    let schema = TestSchema::new(&url, "catalog_reopen");
    {
        let pg = schema.store(StoreConfig::default()).unwrap();
        commit(&pg, None, &[entry("a", "1.0.0", "da")], &[("da", &a)]).unwrap();
    }
    let pg = schema.store(StoreConfig::default()).unwrap();
    assert_eq!(pg.head().unwrap().unwrap().number, 1);
    assert_eq!(pg.files("da").unwrap(), Some(a));
}

/// Invariant (`pg/catalog.rs`): every replica listening on the schema hears each committed
/// generation, with the committing store's origin; a stale commit is not announced.
#[test]
fn postgres_catalog_generations_are_announced_to_every_replica() {
    let Some(url) = postgres_url("catalog_feed") else {
        return;
    };
    let schema = TestSchema::new(&url, "catalog_feed");
    let (one, two) = (
        schema.store(StoreConfig::default()).unwrap(),
        schema.store(StoreConfig::default()).unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel::<FeedEvent>();
    let _listener = one
        .listen(move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    let a = files("a");
    commit(&two, None, &[entry("a", "1.0.0", "da")], &[("da", &a)]).unwrap();
    assert!(commit(&one, None, &[entry("a", "1.0.0", "da")], &[]).is_err());
    commit(&one, Some(1), &[], &[]).unwrap();
    let ten = std::time::Duration::from_secs(10);
    let heard: Vec<FeedEvent> = (0..2).map(|_| rx.recv_timeout(ten).unwrap()).collect();
    assert_eq!(
        heard,
        vec![
            FeedEvent::Atlases {
                origin: two.origin(),
                generation: 1
            },
            FeedEvent::Atlases {
                origin: one.origin(),
                generation: 2
            },
        ]
    );
    assert!(rx.try_recv().is_err(), "the stale commit was not announced");
}

//! Relay's records encrypted at rest on both backends: a random marker written in a project, a
//! short and a long package, a review note, a short and a long fact, a session and the outbox is
//! found in no byte of the data directory and no PostgreSQL row, yet reads back whole (and is
//! found by `pull` relevant); keys that did not encrypt the store are refused when it opens; a
//! rotation moves every Relay record to the new key; records written before encryption still
//! read, and re-encryption leaves no plaintext row behind.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cra_relay::fact::FactQuery;
use cra_relay::store::{Outbox, OutboxEntry, RelayStore, RelayStoreError, SearchQuery, Written};
use cra_relay::{Actor, ActorType, Relay, testkit};
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::{BackendError, Encryption, RedbStore, ReencryptReport};
use serde_json::json;

use super::{Place, key, marker};
use crate::backends::fixed;

/// Relay's tables whose values are records (and so must all be encrypted).
const RECORD_TABLES: [&str; 6] = [
    "relay_projects",
    "relay_packages",
    "relay_reviews",
    "relay_facts",
    "relay_sessions",
    "relay_outbox",
];

impl Place {
    /// Relay on this place's store, opened with `enc`.
    fn relay(&self, enc: Encryption) -> Result<Arc<dyn RelayStore>, BackendError> {
        let config = fixed().1.with_encryption(enc);
        Ok(match self {
            Place::Dir(dir) => {
                let store = RedbStore::open_with(dir.path().join("data"), config)?;
                Arc::new(RedbRelay::open(&store)?)
            }
            Place::Schema(schema, _) => Arc::new(PgRelay::new(schema.store(config)?)),
        })
    }

    /// `cra store reencrypt` of this place with `enc`.
    fn reencrypt(&self, enc: Encryption) -> ReencryptReport {
        let config = fixed().1.with_encryption(enc);
        match self {
            Place::Dir(dir) => RedbStore::open_with(dir.path().join("data"), config)
                .unwrap()
                .reencrypt(&mut |_, _| {}),
            Place::Schema(schema, _) => schema.store(config).unwrap().reencrypt(&mut |_, _| {}),
        }
        .unwrap()
    }

    /// The key id of every stored Relay record (`plaintext` for one not encrypted). The store
    /// must be closed (redb) first.
    fn relay_key_ids(&self) -> BTreeSet<String> {
        match self {
            Place::Dir(dir) => redb_key_ids(&dir.path().join("data")),
            Place::Schema(schema, url) => {
                let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
                let mut ids = BTreeSet::new();
                for table in RECORD_TABLES {
                    let sql = format!("SELECT body FROM {}.{table}", schema.name());
                    for row in c.query(&sql, &[]).unwrap() {
                        ids.insert(text_key_id(row.get(0)));
                    }
                }
                ids
            }
        }
    }
}

fn text_key_id(stored: &str) -> String {
    match stored.strip_prefix("encrypted:") {
        Some(rest) => rest[..8].to_owned(),
        None => "plaintext".to_owned(),
    }
}

fn bytes_key_id(stored: &[u8]) -> String {
    match stored.first() {
        Some(2) => hex::encode(&stored[1..5]),
        _ => "plaintext".to_owned(),
    }
}

fn redb_key_ids(dir: &std::path::Path) -> BTreeSet<String> {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    let db = redb::Database::open(dir.join(cra_store::redb::DATABASE_FILE)).unwrap();
    let txn = db.begin_read().unwrap();
    let mut ids = BTreeSet::new();
    for table in [
        "relay_projects",
        "relay_packages",
        "relay_facts",
        "relay_sessions",
    ] {
        let t = txn
            .open_table(TableDefinition::<&str, &[u8]>::new(table))
            .unwrap();
        for row in t.iter().unwrap() {
            ids.insert(bytes_key_id(row.unwrap().1.value()));
        }
    }
    let reviews = TableDefinition::<(&str, u64), &[u8]>::new("relay_reviews");
    for row in txn.open_table(reviews).unwrap().iter().unwrap() {
        ids.insert(bytes_key_id(row.unwrap().1.value()));
    }
    let outbox = TableDefinition::<&str, &str>::new("relay_outbox");
    for row in txn.open_table(outbox).unwrap().iter().unwrap() {
        ids.insert(text_key_id(row.unwrap().1.value()));
    }
    ids
}

/// Owes, for every write, a short and a long outbox entry holding the marker, as the events a
/// write owes its chain hold what it wrote. They stay: no trace committer settles them here.
struct Owes {
    prefix: String,
    marker: String,
    next: AtomicU64,
}

impl Outbox for Owes {
    fn entries(&self, _: Written<'_>) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        let long = format!("{}{}", "owed event ".repeat(500), self.marker);
        Ok([self.marker.clone(), long]
            .into_iter()
            .map(|text| OutboxEntry {
                key: format!(
                    "{}-{}",
                    self.prefix,
                    self.next.fetch_add(1, Ordering::Relaxed)
                ),
                body: json!({ "owed": text }).to_string(),
            })
            .collect())
    }
}

/// Relay over `store`, its ids from `seed` (so two writers' sessions do not collide).
fn relay(store: Arc<dyn RelayStore>, seed: u64) -> Relay {
    Relay::new(
        store,
        Arc::new(cra_wire::FixedClock::parse(testkit::START).unwrap()),
        Arc::new(cra_wire::SequentialIds::new(1_776_542_400_000, seed)),
        Arc::new(cra_relay::session::SeededCallsigns::new(seed)),
    )
}

fn long_text(what: &str, m: &str) -> String {
    format!("{}{m}", format!("long {what} ").repeat(600))
}

/// Writes `m` into project `project`'s name, a short package's title, a long package's content,
/// a review note, a short and a long fact, a session's actor and the outbox; answers the
/// session's id.
fn write_relay(store: Arc<dyn RelayStore>, project: &str, m: &str, seed: u64) -> String {
    let owes = Owes {
        prefix: project.to_owned(),
        marker: m.to_owned(),
        next: AtomicU64::new(0),
    };
    let r = relay(store.with_outbox(Arc::new(owes)), seed);
    let jordan = testkit::jordan();
    r.create_project(project, &format!("project {m}")).unwrap();
    let mut short = testkit::package("pkg_short", "draft");
    short["project_id"] = json!(project);
    short["title"] = json!(format!("short {m}"));
    let mut long = testkit::package("pkg_long", "draft");
    long["project_id"] = json!(project);
    long["content_md"] = json!(long_text("package", m));
    for p in [&short, &long] {
        assert!(r.deposit(project, &jordan, p).unwrap().created);
    }
    let note = format!("note {m}");
    r.flag_for_review(project, "pkg_short", "human", Some(&note), &jordan)
        .unwrap();
    for (predicate, value) in [("owner", m.to_owned()), ("runbook", long_text("fact", m))] {
        let fact = json!({"subject": "dash", "predicate": predicate, "value": value});
        r.assert_fact(project, &jordan, &fact).unwrap();
    }
    let actor = Actor::new(format!("actor-{m}"), ActorType::Agent);
    r.start_session(project, &actor).unwrap().session_id
}

/// Reads back what [`write_relay`] wrote and checks the marker is in each record.
fn read_relay(store: Arc<dyn RelayStore>, project: &str, m: &str, session: &str) {
    let r = relay(store.clone(), 0);
    assert_eq!(r.project(project).unwrap().name, format!("project {m}"));
    let short = r.pull_specific(project, "pkg_short").unwrap();
    assert_eq!(short.package.as_object()["title"], format!("short {m}"));
    let long = r.pull_specific(project, "pkg_long").unwrap();
    assert_eq!(
        long.package.as_object()["content_md"],
        long_text("package", m)
    );
    let reviews = r.reviews(project, "pkg_short").unwrap();
    assert_eq!(reviews[0].note, Some(format!("note {m}")));
    let mut values: Vec<String> = r
        .facts(project, &FactQuery::default())
        .unwrap()
        .into_iter()
        .map(|f| f.fact.value)
        .collect();
    values.sort();
    assert_eq!(values, [long_text("fact", m), m.to_owned()]);
    assert_eq!(r.session(session).unwrap().actor_id, format!("actor-{m}"));
    let owed = store.outbox().unwrap();
    let prefix = format!("{project}-");
    let ours: Vec<&OutboxEntry> = owed.iter().filter(|e| e.key.starts_with(&prefix)).collect();
    assert!(!ours.is_empty() && ours.iter().all(|e| e.body.contains(m)));
    let query = SearchQuery {
        project_id: project.to_owned(),
        query: m.to_owned(),
        limit: 5,
        ..Default::default()
    };
    let found: BTreeSet<String> = r
        .pull_relevant(&query)
        .unwrap()
        .into_iter()
        .map(|h| h.package.package.package_id().to_owned())
        .collect();
    assert_eq!(
        found,
        BTreeSet::from(["pkg_short".into(), "pkg_long".into()])
    );
}

#[test]
fn with_a_key_no_relay_record_is_stored_in_plaintext_and_every_one_reads_back() {
    for place in Place::all("encryption_relay_no_plaintext") {
        let (secret, visible) = (marker(), marker());
        let k = key();
        let store = place.relay(Encryption::new(k.clone(), Vec::new())).unwrap();
        let session = write_relay(store.clone(), testkit::PROJECT, &secret, 1);
        read_relay(store, testkit::PROJECT, &secret, &session);
        assert!(
            !place.holds(&secret),
            "{}: the marker is stored",
            place.name()
        );
        assert_eq!(
            place.relay_key_ids(),
            BTreeSet::from([k.id().to_string()]),
            "{}",
            place.name()
        );

        // The same records without a key are found: the checks above can fail.
        let control = place.fresh("encryption_relay_control");
        let plain = control.relay(Encryption::plaintext()).unwrap();
        let session = write_relay(plain.clone(), testkit::PROJECT, &visible, 1);
        read_relay(plain, testkit::PROJECT, &visible, &session);
        assert!(
            control.holds(&visible),
            "{}: the control holds it",
            control.name()
        );
        assert_eq!(
            control.relay_key_ids(),
            BTreeSet::from(["plaintext".into()])
        );
    }
}

#[test]
fn a_relay_store_refuses_at_open_keys_that_did_not_encrypt_it() {
    for place in Place::all("encryption_relay_refuses_other_keys") {
        let first = key();
        let store = place.relay(Encryption::new(first.clone(), Vec::new()));
        write_relay(store.unwrap(), testkit::PROJECT, &marker(), 1);
        let none = place
            .relay(Encryption::plaintext())
            .unwrap_err()
            .to_string();
        assert!(
            none.contains("no storage key is configured") && none.contains(&first.id().to_string()),
            "{}: {none}",
            place.name()
        );
        let other = place
            .relay(Encryption::new(key(), Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(
            other.contains("not among the configured keys"),
            "{}: {other}",
            place.name()
        );
    }
}

/// A plaintext Relay over a database whose records are encrypted (a tool that skipped the
/// store's admission) gets an error naming the key, never a wrong answer.
#[test]
fn a_relay_without_the_key_cannot_read_encrypted_records_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let k = key();
    let config = fixed()
        .1
        .with_encryption(Encryption::new(k.clone(), Vec::new()));
    let store = RedbStore::open_with(dir.path(), config).unwrap();
    write_relay(
        Arc::new(RedbRelay::open(&store).unwrap()),
        testkit::PROJECT,
        &marker(),
        1,
    );
    let blind = RedbRelay::new(store.handle().clone()).unwrap();
    let Err(e) = blind.get_package(testkit::PROJECT, "pkg_long") else {
        panic!("read without the key");
    };
    let e = e.to_string();
    assert!(
        e.contains("no storage key is configured") && e.contains(&k.id().to_string()),
        "{e}"
    );
}

#[test]
fn a_rotation_moves_every_relay_record_to_the_new_key() {
    for place in Place::all("encryption_relay_rotation") {
        let (old, new) = (key(), key());
        let m = marker();
        let store = place.relay(Encryption::new(old.clone(), Vec::new()));
        let before = write_relay(store.unwrap(), "proj_before", &m, 1);

        let rotated = place
            .relay(Encryption::new(new.clone(), vec![old.clone()]))
            .unwrap();
        read_relay(rotated.clone(), "proj_before", &m, &before);
        let after = write_relay(rotated, "proj_after", &m, 2);
        let ids = place.relay_key_ids();
        assert_eq!(ids.len(), 2, "{}: {ids:?}", place.name());

        let report = place.reencrypt(Encryption::new(new.clone(), vec![old.clone()]));
        for table in RECORD_TABLES {
            let n = report.tables.iter().find(|(t, _)| t == table);
            assert!(
                matches!(n, Some((_, n)) if *n > 0),
                "{}: {table} in {report:?}",
                place.name()
            );
        }
        assert_eq!(
            place.relay_key_ids(),
            BTreeSet::from([new.id().to_string()]),
            "{}",
            place.name()
        );
        let store = place.relay(Encryption::new(new, Vec::new())).unwrap();
        read_relay(store.clone(), "proj_before", &m, &before);
        read_relay(store, "proj_after", &m, &after);
        assert!(!place.holds(&m), "{}: the marker is stored", place.name());
    }
}

/// A store written as plaintext and then given a key: the old records read, new ones are
/// encrypted, search finds both, and re-encryption leaves no plaintext record nor any row holding
/// the marker (PostgreSQL deletes the plaintext search chunks too; redb is rewritten after).
#[test]
fn relay_records_written_before_encryption_read_and_are_encrypted_by_reencryption() {
    for place in Place::all("encryption_relay_plaintext_before") {
        let m = marker();
        let before = write_relay(
            place.relay(Encryption::plaintext()).unwrap(),
            "proj_before",
            &m,
            1,
        );
        let k = key();
        let keyed = place.relay(Encryption::new(k.clone(), Vec::new())).unwrap();
        read_relay(keyed.clone(), "proj_before", &m, &before);
        let after = write_relay(keyed.clone(), "proj_after", &m, 2);
        read_relay(keyed, "proj_after", &m, &after);
        let mixed = place.relay_key_ids();
        assert!(
            mixed.contains("plaintext") && mixed.contains(&k.id().to_string()),
            "{}: {mixed:?}",
            place.name()
        );

        place.reencrypt(Encryption::new(k.clone(), Vec::new()));
        assert_eq!(
            place.relay_key_ids(),
            BTreeSet::from([k.id().to_string()]),
            "{}",
            place.name()
        );
        if let Place::Dir(dir) = &place {
            // redb keeps freed pages until it reuses them: the rewrite leaves only live records.
            cra_store::redb::rewrite::rewrite(&dir.path().join("data"), &mut |_, _| {}).unwrap();
        }
        assert!(!place.holds(&m), "{}: the marker is stored", place.name());
        let store = place.relay(Encryption::new(k, Vec::new())).unwrap();
        read_relay(store.clone(), "proj_before", &m, &before);
        read_relay(store, "proj_after", &m, &after);
    }
}

/// Invariant (PostgreSQL with a key): each replica searches an index of its own in memory, which
/// it brings up to date before every search from what any replica stored. A package another
/// replica deposits after this one's index was made is found; one it quarantines afterwards is
/// no longer found.
#[test]
fn an_encrypted_replica_searches_what_another_replica_stored_postgres() {
    let name = "encryption_relay_replicas_search";
    let Some(url) = cra_store::testing::postgres_url(name) else {
        return;
    };
    let schema = cra_store::testing::TestSchema::new(&url, name);
    let enc = Encryption::new(key(), Vec::new());
    let replica = || -> Arc<dyn RelayStore> {
        let config = fixed().1.with_encryption(enc.clone());
        Arc::new(PgRelay::new(schema.store(config).unwrap()))
    };
    let (writer, reader) = (replica(), replica());
    let m = marker();
    let (writes, reads) = (relay(writer.clone(), 1), relay(reader, 2));
    writes.create_project(testkit::PROJECT, "replicas").unwrap();
    let query = SearchQuery {
        project_id: testkit::PROJECT.to_owned(),
        query: m.clone(),
        limit: 5,
        ..Default::default()
    };
    let found = |r: &Relay| -> Vec<String> {
        let hits = r.pull_relevant(&query).unwrap();
        hits.into_iter()
            .map(|h| h.package.package.package_id().to_owned())
            .collect()
    };
    assert!(found(&reads).is_empty(), "the reader's index is made empty");

    let mut package = testkit::package("pkg_short", "draft");
    package["project_id"] = json!(testkit::PROJECT);
    package["title"] = json!(format!("short {m}"));
    let jordan = testkit::jordan();
    assert!(
        writes
            .deposit(testkit::PROJECT, &jordan, &package)
            .unwrap()
            .created
    );
    assert_eq!(found(&reads), ["pkg_short"], "another replica's deposit");

    writer
        .quarantine_package(testkit::PROJECT, "pkg_short", "sha256:00")
        .unwrap();
    assert!(found(&reads).is_empty(), "another replica's quarantine");
}

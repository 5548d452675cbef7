//! Relay on both backends: the whole `cra_relay::testkit` suite (every §11 level item, every §8
//! error token, every §5.3 transition, 16-thread `assert_fact`, export/import round trip) against
//! redb and, when `CRA_TEST_POSTGRES_URL` is set, PostgreSQL, each also with a storage key (its
//! records encrypted, PostgreSQL then searching in memory); plus search quality on the corpus.

use std::sync::{Arc, Mutex};

use cra_relay::store::RelayStore;
use cra_relay::testkit;
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::{Encryption, RedbStore, StorageKey, StoreConfig};

/// Encryption with a new random key.
fn keyed() -> Encryption {
    let key = StorageKey::parse(&StorageKey::generate_text()).unwrap();
    Encryption::new(key, Vec::new())
}

/// Keeps every data directory (and its store) alive until the test ends.
#[derive(Default)]
struct RedbFactory {
    held: Mutex<Vec<(tempfile::TempDir, RedbStore)>>,
    encryption: Encryption,
}

impl RedbFactory {
    fn make(&self) -> Arc<dyn RelayStore> {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig::default().with_encryption(self.encryption.clone());
        let store = RedbStore::open_with(dir.path(), config).unwrap();
        let relay = RedbRelay::open(&store).unwrap();
        self.held.lock().unwrap().push((dir, store));
        Arc::new(relay)
    }
}

/// A fresh schema per store, dropped when the test ends.
struct PgFactory {
    url: String,
    held: Mutex<Vec<TestSchema>>,
    encryption: Encryption,
}

impl PgFactory {
    fn new(url: String, encryption: Encryption) -> Self {
        Self {
            url,
            held: Mutex::new(Vec::new()),
            encryption,
        }
    }

    fn make(&self) -> Arc<dyn RelayStore> {
        let schema = TestSchema::new(&self.url, "relay");
        let config = StoreConfig::default().with_encryption(self.encryption.clone());
        let store = schema.store(config).unwrap();
        self.held.lock().unwrap().push(schema);
        Arc::new(PgRelay::new(store))
    }
}

fn on_redb(encryption: Encryption, case: testkit::Case) {
    let f = RedbFactory {
        encryption,
        ..Default::default()
    };
    case(&|| f.make());
}

fn on_pg(name: &str, encryption: Encryption, case: testkit::Case) {
    let Some(url) = postgres_url(name) else {
        return;
    };
    let f = PgFactory::new(url, encryption);
    case(&|| f.make());
}

fn case(name: &str) -> testkit::Case {
    testkit::SUITE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| *c)
        .unwrap_or_else(|| panic!("no relay suite case {name}"))
}

macro_rules! relay_suite {
    ($($name:ident),* $(,)?) => {
        mod redb_backend {
            use cra_store::Encryption;
            $(
                #[test]
                fn $name() {
                    super::on_redb(Encryption::plaintext(), super::case(stringify!($name)));
                }
            )*
        }
        mod pg_backend {
            use cra_store::Encryption;
            $(
                #[test]
                fn $name() {
                    super::on_pg(concat!("relay::pg_backend::", stringify!($name)), Encryption::plaintext(), super::case(stringify!($name)));
                }
            )*
        }
        mod redb_encrypted {
            $(
                #[test]
                fn $name() {
                    super::on_redb(super::keyed(), super::case(stringify!($name)));
                }
            )*
        }
        mod pg_encrypted {
            $(
                #[test]
                fn $name() {
                    super::on_pg(concat!("relay::pg_encrypted::", stringify!($name)), super::keyed(), super::case(stringify!($name)));
                }
            )*
        }
        #[test]
        fn every_suite_case_runs_on_both_backends() {
            let named = [$(stringify!($name)),*];
            for (n, _) in testkit::SUITE {
                assert!(named.contains(n), "suite case {n} is not run here");
            }
        }
    };
}

relay_suite!(
    l0_pull_specific_and_latest,
    l0_unknown_and_extension_fields_round_trip,
    l0_orient_bundle,
    l1_deposit_hashes_match_vectors,
    l1_idempotent_deposit,
    err_duplicate_package_id,
    package_ids_are_unique_per_project,
    err_invalid_schema_pointers,
    err_project_archived,
    err_identity_mismatch,
    err_package_not_found,
    err_project_not_found,
    err_search_not_supported_or_search_works,
    err_integrity_quarantine,
    l2_assert_supersedes_atomically,
    l2_point_in_time_queries,
    l2_invalidate_counts,
    l2_fact_source_package,
    l2_concurrent_assert_16_threads,
    l2_recorded_time_never_goes_back,
    l3_status_transitions,
    l3_flag_review_and_awaiting_list,
    l3_review_gates,
    sessions_callsign_and_provenance,
    orchestrate_digest,
    orient_window_answers_as_a_full_scan,
    orient_reads_only_the_window,
    export_import_round_trip,
    import_refuses_tampered_package,
);

// ---- upgrades ----------------------------------------------------------------------------------

/// A redb database written before package ids were per project (packages and reviews keyed by
/// `package_id` alone) is rekeyed when Relay opens it, once: its packages and reviews read back
/// by (project, id), and a second project may then deposit the same id.
#[test]
fn redb_packages_of_an_earlier_version_are_rekeyed_by_project_on_open() {
    use cra_relay::testkit::PROJECT;
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path()).unwrap();
    let relay = cra_relay::Relay::new(
        Arc::new(RedbRelay::open(&store).unwrap()),
        Arc::new(cra_wire::FixedClock::parse("2026-03-02T10:00:00Z").unwrap()),
        Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 5)),
        Arc::new(cra_relay::session::SeededCallsigns::new(5)),
    );
    let jordan = cra_relay::Actor::new("jordan", cra_relay::ActorType::Human);
    relay.create_project(PROJECT, "dev").unwrap();
    let mut old = testkit::package("pkg_old", "draft");
    old["project_id"] = serde_json::json!(PROJECT);
    relay.deposit(PROJECT, &jordan, &old).unwrap();
    relay
        .flag_for_review(PROJECT, "pkg_old", "agent", None, &jordan)
        .unwrap();
    let before = relay.pull_specific(PROJECT, "pkg_old").unwrap();
    drop(relay);
    earlier_version_keys(&store.handle().get().unwrap());

    let reopened = RedbRelay::open(&store).unwrap();
    assert_eq!(
        reopened.get_package(PROJECT, "pkg_old").unwrap(),
        Some(before)
    );
    assert_eq!(reopened.list_reviews(PROJECT, "pkg_old").unwrap().len(), 1);
    assert_eq!(reopened.find_package("pkg_old").unwrap().len(), 1);
    drop(reopened);
    let again = RedbRelay::open(&store).unwrap();
    assert_eq!(
        again.list_reviews(PROJECT, "pkg_old").unwrap().len(),
        1,
        "rekeyed once"
    );
}

/// A PostgreSQL schema written before package ids were per project (migrations up to 0011, a
/// package, its search chunk and its review keyed by `package_id` alone) is migrated by 0012 when
/// a store connects: the package, its review and its search hit read back by (project, id), and a
/// second project may then deposit the same id.
#[test]
fn postgres_packages_of_an_earlier_version_are_rekeyed_by_migration_0012() {
    use cra_relay::testkit::PROJECT;
    let name = "postgres_packages_of_an_earlier_version_are_rekeyed_by_migration_0012";
    let Some(url) = postgres_url(name) else {
        return;
    };
    let schema = TestSchema::new(&url, "rekey");
    let mut old = testkit::package("pkg_old", "draft");
    old["project_id"] = serde_json::json!(PROJECT);
    let hash = cra_relay::model::content_hash_of(old.as_object().unwrap()).unwrap();
    schema_before_0012(&url, schema.name(), &old, &hash);

    let relay = PgRelay::new(schema.store(StoreConfig::default()).unwrap());
    let stored = relay.get_package(PROJECT, "pkg_old").unwrap().unwrap();
    assert_eq!(stored.content_hash, hash);
    assert_eq!(relay.list_reviews(PROJECT, "pkg_old").unwrap().len(), 1);
    let query = cra_relay::store::SearchQuery {
        project_id: PROJECT.to_owned(),
        query: "old package".to_owned(),
        limit: 5,
        ..Default::default()
    };
    assert_eq!(relay.search(&query).unwrap().len(), 1, "its chunk is found");
    let r = cra_relay::Relay::new(
        Arc::new(relay),
        Arc::new(cra_wire::FixedClock::parse("2026-03-02T10:00:00Z").unwrap()),
        Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 5)),
        Arc::new(cra_relay::session::SeededCallsigns::new(5)),
    );
    r.create_project("proj_b", "B").unwrap();
    let mut again = testkit::package("pkg_old", "draft");
    again["project_id"] = serde_json::json!("proj_b");
    let jordan = cra_relay::Actor::new("jordan", cra_relay::ActorType::Human);
    assert!(r.deposit("proj_b", &jordan, &again).unwrap().created);
}

/// The ids orient should answer over `relay` at `now` (window 14 days), found the way orient
/// found them before the creation-time index: every package listed, then filtered.
fn orient_ids_by_full_scan(relay: &cra_relay::Relay, now: &str) -> Vec<String> {
    let start = cra_wire::clock::parse_rfc3339(now).unwrap() - time::Duration::days(14);
    relay
        .list(
            testkit::PROJECT,
            &cra_relay::store::PackageFilter::default(),
        )
        .unwrap()
        .packages
        .iter()
        .filter(|p| cra_wire::clock::parse_rfc3339(p.package.created_at()).unwrap() >= start)
        .take(cra_relay::digest::ORIENT_MAX_PACKAGES)
        .map(|p| p.package.package_id().to_owned())
        .collect()
}

fn orient_ids(relay: &cra_relay::Relay) -> Vec<String> {
    relay
        .orient(testkit::PROJECT, None)
        .unwrap()
        .recent_packages
        .iter()
        .map(|p| p["package_id"].as_str().unwrap().to_owned())
        .collect()
}

/// `created_at` forms for the upgrade tests, in and out of a 14-day window ending at
/// `2026-04-18T21:00:00Z`.
const STATED: [&str; 6] = [
    "2026-04-18T20:00:00Z",
    "2026-03-01T00:00:00Z",
    "2026-04-10T08:30:00.5Z",
    "2026-04-10T08:30:00+00:00",
    "2026-04-04T20:59:59.999999999Z",
    "2026-04-18t20:59:00.000001z",
];

/// A redb database written before the creation-time index (no `relay_package_created` entries,
/// no mark) gets the index when Relay opens it, once: orient then answers what a full scan
/// answers (with no index it would answer nothing).
#[test]
fn redb_packages_stored_before_the_creation_index_are_indexed_on_open() {
    use cra_relay::testkit::PROJECT;
    const NOW: &str = "2026-04-18T21:00:00Z";
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path()).unwrap();
    let relay = |s: &RedbStore| {
        cra_relay::Relay::new(
            Arc::new(RedbRelay::open(s).unwrap()),
            Arc::new(cra_wire::FixedClock::parse(NOW).unwrap()),
            Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 5)),
            Arc::new(cra_relay::session::SeededCallsigns::new(5)),
        )
    };
    let r = relay(&store);
    let jordan = cra_relay::Actor::new("jordan", cra_relay::ActorType::Human);
    r.create_project(PROJECT, "dev").unwrap();
    for i in 0..30 {
        let mut p = testkit::package(&format!("pkg_{i:02}"), "complete");
        p["created_at"] = serde_json::json!(STATED[i % STATED.len()]);
        r.deposit(PROJECT, &jordan, &p).unwrap();
    }
    let before = orient_ids(&r);
    drop(r);
    {
        use redb::TableDefinition;
        const CREATED: TableDefinition<'_, (&str, &str, u64), &str> =
            TableDefinition::new("relay_package_created");
        const META: TableDefinition<'_, &str, u64> = TableDefinition::new("relay_meta");
        let tx = store.handle().begin_write().unwrap();
        tx.delete_table(CREATED).unwrap();
        tx.open_table(META)
            .unwrap()
            .remove("package_created")
            .unwrap();
        tx.commit().unwrap();
    }
    let r = relay(&store);
    assert_eq!(orient_ids(&r), before);
    assert_eq!(orient_ids(&r), orient_ids_by_full_scan(&r, NOW));
    assert_eq!(before.len(), 20);
}

/// A PostgreSQL schema written before 0015 (packages without `created_key`) is keyed by the
/// migration: each usual `created_at` form gets exactly the application's key, an unusual one
/// (a leap second) is left NULL and still read, and orient answers what a full scan answers.
#[test]
fn postgres_packages_stored_before_0015_are_keyed_by_the_migration() {
    use cra_relay::testkit::PROJECT;
    const NOW: &str = "2026-04-18T21:00:00Z";
    let name = "postgres_packages_stored_before_0015_are_keyed_by_the_migration";
    let Some(url) = postgres_url(name) else {
        return;
    };
    let schema = TestSchema::new(&url, "created");
    let mut client = schema_before(&url, schema.name(), 15);
    let project = serde_json::json!({"project_id": PROJECT, "name": "dev",
        "created_at": "2026-03-02T10:00:00Z"})
    .to_string();
    client
        .execute(
            "INSERT INTO relay_projects (project_id, body) VALUES ($1, $2)",
            &[&PROJECT, &project],
        )
        .unwrap();
    let unusual = "2026-04-30T23:59:60Z";
    let mut stated: Vec<&str> = STATED.iter().copied().cycle().take(30).collect();
    stated.insert(3, unusual);
    for (i, created_at) in stated.iter().enumerate() {
        let mut p = testkit::package(&format!("pkg_{i:02}"), "complete");
        p["created_at"] = serde_json::json!(created_at);
        let hash = cra_relay::model::content_hash_of(p.as_object().unwrap()).unwrap();
        let (id, body) = (format!("pkg_{i:02}"), p.to_string());
        client
            .execute(
                "INSERT INTO relay_packages (package_id, project_id, content_hash, body)
                 VALUES ($1, $2, $3, $4)",
                &[&id, &PROJECT, &hash, &body],
            )
            .unwrap();
    }
    let relay = PgRelay::new(schema.store(StoreConfig::default()).unwrap());
    let keys = client
        .query(
            "SELECT body::jsonb ->> 'created_at', created_key FROM relay_packages",
            &[],
        )
        .unwrap();
    assert_eq!(keys.len(), stated.len());
    for row in keys {
        let (created_at, key): (String, Option<String>) = (row.get(0), row.get(1));
        if created_at == unusual {
            assert_eq!(key, None, "left to the application");
            assert!(cra_relay::store::created_key(&created_at).is_some());
        } else {
            assert_eq!(
                key,
                cra_relay::store::created_key(&created_at),
                "{created_at}"
            );
        }
    }
    let r = cra_relay::Relay::new(
        Arc::new(relay),
        Arc::new(cra_wire::FixedClock::parse(NOW).unwrap()),
        Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 5)),
        Arc::new(cra_relay::session::SeededCallsigns::new(5)),
    );
    let ids = orient_ids(&r);
    assert_eq!(ids, orient_ids_by_full_scan(&r, NOW));
    assert!(
        ids.contains(&"pkg_03".to_owned()),
        "the unkeyed row is read"
    );
}

/// On PostgreSQL a windowed listing pages its two walks with plans that read no more than the
/// page (here its first, 32 rows): the deposit walk backwards along a deposit-order index, the
/// window walk along `relay_packages_created`, neither scanning the table nor sorting, right
/// after an import
/// (which gathers the statistics) of two projects, one with 5 of 3,005 packages in the window,
/// the other all in it; one plan per walk, whichever project. orient answers both projects as a
/// full scan does.
#[test]
fn postgres_windowed_listing_pages_both_walks_by_index() {
    use cra_relay::testkit::PROJECT;
    let Some(url) = postgres_url("relay::postgres_windowed_listing_pages_both_walks_by_index")
    else {
        return;
    };
    let schema = TestSchema::new(&url, "window");
    let relay = PgRelay::new(schema.store(StoreConfig::default()).unwrap());
    let mut snap = cra_relay::store::Snapshot {
        projects: vec![cra_relay::model::Project {
            project_id: PROJECT.to_owned(),
            name: "window".to_owned(),
            created_at: "2026-01-01T00:00:00Z".to_owned(),
            archived_at: None,
        }],
        ..Default::default()
    };
    let mut full = snap.projects[0].clone();
    full.project_id = "proj_full".to_owned();
    snap.projects.push(full);
    for i in 0..6005 {
        let mut p = testkit::package(&format!("pkg_{i:04}"), "complete");
        if (5..3005).contains(&i) {
            p["created_at"] = serde_json::json!("2025-06-01T00:00:00Z");
        }
        if i >= 3005 {
            p["project_id"] = serde_json::json!("proj_full");
        }
        let hash = cra_relay::model::content_hash_of(p.as_object().unwrap()).unwrap();
        p["content_hash"] = serde_json::json!(hash);
        snap.packages
            .push(cra_relay::model::StoredPackage::from_wire(&p).unwrap());
    }
    relay.restore(&snap).unwrap();
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("SET search_path TO {};", schema.name()))
        .unwrap();
    let since = cra_relay::store::created_key("2026-04-01T00:00:00Z").unwrap();
    let explain = |client: &mut postgres::Client,
                   sql: &str,
                   params: &[&(dyn postgres::types::ToSql + Sync)]| {
        client
            .query(&format!("EXPLAIN {sql}"), params)
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0) + "\n")
            .collect::<String>()
    };
    for project in [PROJECT, "proj_full"] {
        let deposits = explain(
            &mut client,
            cra_store::relay::pg::DEPOSITS_PAGE_SQL,
            &[&project, &i64::MAX, &32i64],
        );
        assert!(deposits.contains("Index Scan Backward"), "{deposits}");
        let window = explain(
            &mut client,
            cra_store::relay::pg::WINDOW_PAGE_SQL,
            &[&project, &since, &since, &i64::MIN, &32i64],
        );
        assert!(window.contains("using relay_packages_created"), "{window}");
        for plan in [&deposits, &window] {
            assert!(
                !plan.contains("Seq Scan") && !plan.contains("Sort"),
                "{plan}"
            );
        }
    }
    let r = cra_relay::Relay::new(
        Arc::new(relay),
        Arc::new(cra_wire::FixedClock::parse("2026-04-18T21:00:00Z").unwrap()),
        Arc::new(cra_wire::SequentialIds::new(1_772_445_600_000, 5)),
        Arc::new(cra_relay::session::SeededCallsigns::new(5)),
    );
    assert_eq!(
        orient_ids(&r),
        ["pkg_0004", "pkg_0003", "pkg_0002", "pkg_0001", "pkg_0000"]
    );
    let full: Vec<String> = r
        .orient("proj_full", None)
        .unwrap()
        .recent_packages
        .iter()
        .map(|p| p["package_id"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..20).map(|i| format!("pkg_{:04}", 6004 - i)).collect();
    assert_eq!(full, expected);
}

/// Writes into schema `schema` what a server of the version before 0012 left: migrations 0001 to
/// 0011 applied and recorded as `cra-store` records them, project [`testkit::PROJECT`], the
/// package `old` (content hash `hash`) with one search chunk, and one review record.
fn schema_before_0012(url: &str, schema: &str, old: &serde_json::Value, hash: &str) {
    let mut client = schema_before(url, schema, 12);
    let project = serde_json::json!({"project_id": testkit::PROJECT, "name": "dev",
        "created_at": "2026-03-02T10:00:00Z"});
    let review = serde_json::json!({"package_id": "pkg_old", "project_id": testkit::PROJECT,
        "action": "flag", "from_status": "draft", "to_status": "awaiting_review",
        "review_type": "human", "actor": {"id": "jordan", "type": "human"},
        "at": "2026-03-02T10:00:00Z", "content_hash": hash});
    let (project_text, review_text) = (project.to_string(), review.to_string());
    let old_text = serde_json::Value::Object(old.as_object().unwrap().clone()).to_string();
    let p = testkit::PROJECT;
    let rows: [(&str, Vec<&(dyn postgres::types::ToSql + Sync)>); 4] = [
        (
            "INSERT INTO relay_projects (project_id, body) VALUES ($1, $2)",
            vec![&p, &project_text],
        ),
        (
            "INSERT INTO relay_packages (package_id, project_id, content_hash, body)
             VALUES ('pkg_old', $1, $2, $3)",
            vec![&p, &hash, &old_text],
        ),
        (
            "INSERT INTO relay_chunks (package_id, project_id, ord, field, chunk)
             VALUES ('pkg_old', $1, 0, 'title', 'the old package')",
            vec![&p],
        ),
        (
            "INSERT INTO relay_reviews (package_id, body) VALUES ('pkg_old', $1)",
            vec![&review_text],
        ),
    ];
    for (sql, params) in rows {
        client.execute(sql, &params).unwrap();
    }
}

/// Creates schema `schema` with migrations 0001 up to (not including) `before` applied and
/// recorded as `cra-store` records them; returns a connection whose search path is the schema.
fn schema_before(url: &str, schema: &str, before: i32) -> postgres::Client {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; SET search_path TO {schema};
             CREATE TABLE cra_migrations (version integer PRIMARY KEY, name text NOT NULL,
                 checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());"
        ))
        .unwrap();
    for path in files {
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let (number, rest) = file.split_once('_').unwrap();
        let version: i32 = number.parse().unwrap();
        if version >= before {
            continue;
        }
        let sql = std::fs::read_to_string(&path).unwrap();
        client.batch_execute(&sql).unwrap();
        let checksum = cra_wire::hash::sha256_hex(sql.as_bytes());
        let name = rest.trim_end_matches(".sql");
        client
            .execute(
                "INSERT INTO cra_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                &[&version, &name, &checksum],
            )
            .unwrap();
    }
    client
}
/// Rewrites `db`'s package and review keys in the form of the version before per-project ids,
/// and removes the mark of the rekeying.
fn earlier_version_keys(db: &redb::Database) {
    use redb::{ReadableTable, TableDefinition};
    const PACKAGES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_packages");
    const REVIEWS: TableDefinition<'_, (&str, u64), &[u8]> = TableDefinition::new("relay_reviews");
    const META: TableDefinition<'_, &str, u64> = TableDefinition::new("relay_meta");
    let tx = db.begin_write().unwrap();
    {
        let mut packages = tx.open_table(PACKAGES).unwrap();
        let rows: Vec<(String, Vec<u8>)> = packages
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value().to_owned(), v.value().to_vec())
            })
            .collect();
        for (key, bytes) in rows {
            let (_, id) = key.split_once('\0').expect("a per-project key");
            packages.remove(key.as_str()).unwrap();
            packages.insert(id, bytes.as_slice()).unwrap();
        }
        let mut reviews = tx.open_table(REVIEWS).unwrap();
        let rows: Vec<(String, u64, Vec<u8>)> = reviews
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                let (key, n) = k.value();
                (key.to_owned(), n, v.value().to_vec())
            })
            .collect();
        for (key, n, bytes) in rows {
            let (_, id) = key.split_once('\0').expect("a per-project key");
            reviews.remove((key.as_str(), n)).unwrap();
            reviews.insert((id, n), bytes.as_slice()).unwrap();
        }
        tx.open_table(META).unwrap().remove("package_keys").unwrap();
    }
    tx.commit().unwrap();
}

// ---- search quality ------------------------------------------------------------------------

fn corpus() -> serde_json::Value {
    serde_json::from_str(include_str!(
        "../../../cra-relay/tests/fixtures/search/corpus.json"
    ))
    .unwrap()
}

/// Deposits the corpus and returns (recall@5, MRR) for the queries that share a title word and
/// for those that share none, printing both.
fn search_quality(store: Arc<dyn RelayStore>, backend: &str) -> ((f64, f64), (f64, f64)) {
    use cra_relay::{Actor, ActorType};
    let (r, _) = testkit::relay(store);
    let c = corpus();
    r.create_project("proj_search", "Search corpus").unwrap();
    for p in c["packages"].as_array().unwrap() {
        let who = &p["created_by"];
        let actor = Actor::new(
            who["id"].as_str().unwrap(),
            ActorType::parse(who["type"].as_str().unwrap()).unwrap(),
        );
        r.deposit("proj_search", &actor, p).unwrap();
    }
    let mut halves = [(0.0, 0.0, 0usize), (0.0, 0.0, 0usize)];
    for q in c["queries"].as_array().unwrap() {
        let hits = r
            .pull_relevant(&cra_relay::store::SearchQuery {
                project_id: "proj_search".into(),
                query: q["query"].as_str().unwrap().into(),
                limit: 5,
                ..Default::default()
            })
            .unwrap();
        let want = q["relevant"][0].as_str().unwrap();
        let rank = hits
            .iter()
            .position(|h| h.package.package.package_id() == want);
        let half = &mut halves[usize::from(!q["shares_title_word"].as_bool().unwrap())];
        half.2 += 1;
        if let Some(i) = rank {
            half.0 += 1.0;
            half.1 += 1.0 / (i as f64 + 1.0);
        }
    }
    let m = |h: (f64, f64, usize)| (h.0 / h.2 as f64, h.1 / h.2 as f64);
    let (a, b) = (m(halves[0]), m(halves[1]));
    println!(
        "relay search quality on {backend}: title-word queries recall@5 {:.3} MRR {:.3}; no-title-word queries recall@5 {:.3} MRR {:.3}",
        a.0, a.1, b.0, b.1
    );
    (a, b)
}

#[test]
fn search_quality_redb() {
    let f = RedbFactory::default();
    let (with_title, without) = search_quality(f.make(), "redb/tantivy");
    assert!(with_title.0 >= 0.8, "recall@5 {with_title:?}");
    assert!(without.0 >= 0.8, "recall@5 {without:?}");
}

#[test]
fn search_quality_pg() {
    let Some(url) = postgres_url("relay::search_quality_pg") else {
        return;
    };
    let f = PgFactory::new(url, Encryption::plaintext());
    let (with_title, without) = search_quality(f.make(), "postgres/fts");
    assert!(with_title.0 >= 0.8, "recall@5 {with_title:?}");
    assert!(without.0 >= 0.8, "recall@5 {without:?}");
}

fn search_filters(store: Arc<dyn RelayStore>) {
    use cra_relay::store::SearchQuery;
    let (r, _) = testkit::relay(store);
    r.create_project(testkit::PROJECT, "x").unwrap();
    let mut a = testkit::package("pkg_fa", "complete");
    a["topic"] = serde_json::json!("infra");
    a["tags"] = serde_json::json!(["ops", "q1"]);
    a["content_md"] = serde_json::json!("Failover drill for the replica database.");
    let mut b = testkit::package("pkg_fb", "complete");
    b["topic"] = serde_json::json!("billing");
    b["created_at"] = serde_json::json!("2026-01-01T00:00:00Z");
    b["content_md"] = serde_json::json!("Replica of the invoice database for reporting.");
    r.deposit(testkit::PROJECT, &testkit::jordan(), &a).unwrap();
    r.deposit(testkit::PROJECT, &testkit::jordan(), &b).unwrap();
    let ids = |q: SearchQuery| -> Vec<String> {
        let mut v: Vec<String> = r
            .pull_relevant(&q)
            .unwrap()
            .into_iter()
            .map(|h| h.package.package.package_id().to_owned())
            .collect();
        v.sort();
        v
    };
    let base = SearchQuery {
        project_id: testkit::PROJECT.into(),
        query: "replica database".into(),
        limit: 5,
        ..Default::default()
    };
    assert_eq!(ids(base.clone()), ["pkg_fa", "pkg_fb"]);
    assert_eq!(
        ids(SearchQuery {
            topic: Some("infra".into()),
            ..base.clone()
        }),
        ["pkg_fa"]
    );
    assert_eq!(
        ids(SearchQuery {
            tags: vec!["ops".into()],
            ..base.clone()
        }),
        ["pkg_fa"]
    );
    assert_eq!(
        ids(SearchQuery {
            until: Some("2026-02-01T00:00:00Z".into()),
            ..base.clone()
        }),
        ["pkg_fb"]
    );
    assert_eq!(
        ids(SearchQuery {
            since: Some("2026-02-01T00:00:00Z".into()),
            ..base.clone()
        }),
        ["pkg_fa"]
    );
    assert_eq!(
        ids(SearchQuery {
            package_type: Some("decision".into()),
            ..base.clone()
        }),
        Vec::<String>::new()
    );
    let hit = &r
        .pull_relevant(&SearchQuery {
            topic: Some("infra".into()),
            ..base
        })
        .unwrap()[0];
    assert_eq!(hit.field, "content_md", "best chunk is reported");
    assert!(hit.score > 0.0);
}

/// PostgreSQL with a storage key searches an in-memory index, as redb does.
#[test]
fn search_quality_pg_encrypted() {
    let Some(url) = postgres_url("relay::search_quality_pg_encrypted") else {
        return;
    };
    let f = PgFactory::new(url, keyed());
    let (with_title, without) = search_quality(f.make(), "postgres/encrypted/tantivy");
    assert!(with_title.0 >= 0.8, "recall@5 {with_title:?}");
    assert!(without.0 >= 0.8, "recall@5 {without:?}");
}

#[test]
fn search_filters_redb() {
    let f = RedbFactory::default();
    search_filters(f.make());
}

#[test]
fn search_filters_pg() {
    let Some(url) = postgres_url("relay::search_filters_pg") else {
        return;
    };
    let f = PgFactory::new(url, Encryption::plaintext());
    search_filters(f.make());
}

// ---- export/import at scale ------------------------------------------------------------------

/// 10,000 packages (every tenth flagged for review, so with review records) and 10,000 facts with
/// history, built fast on the in-memory test store, then restored into `make()` stores:
/// export -> import into an empty store -> export must give identical bytes.
fn round_trip_at_scale(make: &dyn Fn() -> Arc<dyn RelayStore>) {
    use cra_relay::export::{parse, render};
    let mem: Arc<dyn RelayStore> = Arc::new(cra_relay::store::memory::MemoryStore::new());
    let (r, clock) = testkit::relay(mem);
    testkit::populate(&r, &clock, 10_000, 10_000);
    let reference = render(&r.store().snapshot().unwrap()).unwrap();
    let first = make();
    first.restore(&parse(&reference).unwrap()).unwrap();
    let exported = render(&first.snapshot().unwrap()).unwrap();
    assert_eq!(exported, reference, "a backend exports what it imported");
    let second = make();
    second.restore(&parse(&exported).unwrap()).unwrap();
    let again = render(&second.snapshot().unwrap()).unwrap();
    assert_eq!(
        again, exported,
        "export -> import -> export is byte-identical"
    );
    let snap = second.snapshot().unwrap();
    assert_eq!((snap.packages.len(), snap.facts.len()), (10_000, 10_000));
    assert_eq!(snap.reviews.len(), 1_000);
}

#[test]
fn export_import_10k_redb() {
    let f = RedbFactory::default();
    round_trip_at_scale(&|| f.make());
}

#[test]
fn export_import_10k_pg() {
    let Some(url) = postgres_url("relay::export_import_10k_pg") else {
        return;
    };
    let f = PgFactory::new(url, Encryption::plaintext());
    round_trip_at_scale(&|| f.make());
}

//! Upgrades (`specs/upgrades.md`): a store `fda2190` wrote is planned without being changed,
//! then opened (which upgrades it) into a store whose plan is empty and whose chains, log,
//! approvals and Relay records all read back; a store a newer cra wrote is refused by a plan and
//! by an open alike, and left as it was.

use cra_relay::store::RelayStore;
use cra_store::RedbStore;
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::upgrade::UpgradePlan;
use cra_store::{BackendError, PgStore};

use crate::backends::fixed;
use crate::tlog::{fda2190_data_dir, load_fda2190_dump};

/// The kinds of a plan's steps, in order.
fn kinds(plan: &UpgradePlan) -> Vec<&'static str> {
    plan.steps.iter().map(|s| s.step).collect()
}

/// What `fda2190`'s Relay records must read as after the upgrade: the project's two packages
/// (by their ids within the project) and its two facts, the second superseding the first.
fn check_fda2190_relay(relay: &dyn RelayStore) {
    let snapshot = relay.snapshot().unwrap();
    let mut packages: Vec<&str> = snapshot
        .packages
        .iter()
        .map(|p| p.package.package_id())
        .collect();
    packages.sort_unstable();
    assert_eq!(packages, ["pkg_fixture_0", "pkg_fixture_1"]);
    for id in packages {
        assert!(
            relay.get_package("fixture-proj", id).unwrap().is_some(),
            "{id} by its project"
        );
    }
    assert_eq!(snapshot.facts.len(), 2, "{:?}", snapshot.facts);
    let current: Vec<_> = snapshot
        .facts
        .iter()
        .filter(|f| f.fact.valid_to.is_none())
        .collect();
    assert_eq!(current.len(), 1, "one fact superseded: {current:?}");
    assert_eq!(current[0].fact.value, serde_json::json!("team-b"));
}

/// Every chain of an upgraded fixture verifies, and every approval its chains requested reads
/// back: seven (each resolve of the admin's asked for one, as did the maintainer's merge), of
/// which the admin granted exactly one.
fn check_fda2190_state(store: &dyn crate::backends::TestStore) {
    let sessions = store.sessions().unwrap();
    assert_eq!(
        sessions.len(),
        5,
        "three admin sessions, a maintainer's and the Relay project's chain"
    );
    let mut open = std::collections::BTreeMap::<String, u64>::new();
    let mut approvals = std::collections::BTreeSet::new();
    for s in &sessions {
        let record = store.get_session(&s.session_id).unwrap();
        if let Some(r) = record.filter(|r| r.is_active()) {
            *open.entry(r.agent_id).or_default() += 1;
        }
        crate::backends::verify_stored(store, &s.session_id).unwrap();
        for e in store.read_range(&s.session_id, 0, u64::MAX).unwrap() {
            if e.event_type == "approval.requested" {
                approvals.insert(e.payload["approval_id"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(approvals.len(), 7, "{approvals:?}");
    let granted = approvals
        .iter()
        .map(|id| {
            store
                .get_approval(id)
                .unwrap()
                .expect("every approval reads back")
        })
        .filter(|a| a.decided_by.as_deref() == Some("admin"))
        .count();
    assert_eq!(granted, 1);
    // The open-sessions counter the upgrade made agrees with the records it counted.
    assert!(!open.is_empty(), "the fixture leaves sessions open");
    for (agent, n) in &open {
        assert_eq!(store.open_sessions(agent).unwrap(), *n, "{agent}");
    }
}

/// The invariant "a plan writes nothing" on redb: planning twice answers the same plan and
/// leaves the database file byte for byte as it was.
#[test]
fn a_redb_directory_written_by_fda2190_is_planned_without_a_write_then_upgraded() {
    let (_dir, data) = fda2190_data_dir();
    let file = data.join(cra_store::redb::DATABASE_FILE);
    let before = std::fs::read(&file).unwrap();
    let plan = cra_store::redb::upgrade::plan(&data).unwrap();
    assert_eq!(plan.found, "none");
    assert_eq!(
        plan.target,
        format!("data format {}", cra_store::redb::upgrade::FORMAT)
    );
    assert_eq!(
        kinds(&plan),
        [
            "redb.tables",
            "tlog.backfill",
            "carp.owner_index",
            "carp.open_sessions",
            "relay.package_keys",
            "relay.created_index",
            "redb.format"
        ],
        "{plan:#?}"
    );
    assert!(plan.steps[1].description.contains("5 chains"), "{plan:#?}");
    assert_eq!(cra_store::redb::upgrade::plan(&data).unwrap(), plan);
    assert!(std::fs::read(&file).unwrap() == before, "a plan wrote");

    {
        let store = RedbStore::open_with(&data, fixed().1).unwrap();
        let relay = RedbRelay::open(&store).unwrap();
        check_fda2190_state(&store);
        check_fda2190_relay(&relay);
    }
    let after = cra_store::redb::upgrade::plan(&data).unwrap();
    assert!(after.is_current(), "{after:#?}");
    assert_eq!(
        after.found,
        format!("data format {}", cra_store::redb::upgrade::FORMAT)
    );
}

/// A fresh data directory is current as soon as it is created.
#[test]
fn a_new_data_directory_is_current() {
    let dir = tempfile::tempdir().unwrap();
    drop(RedbStore::open_with(dir.path(), fixed().1).unwrap());
    let plan = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    // Relay's tables are created when Relay first opens the database.
    assert_eq!(kinds(&plan), ["redb.tables"], "{plan:#?}");
    {
        let store = RedbStore::open_with(dir.path(), fixed().1).unwrap();
        RedbRelay::open(&store).unwrap();
    }
    let plan = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    assert!(plan.is_current(), "{plan:#?}");
}

/// Records `format` in the data directory `dir` (no store open), as a newer cra would.
fn write_format(dir: &std::path::Path, format: u64) {
    const FORMAT: redb::TableDefinition<'static, &str, u64> =
        redb::TableDefinition::new("cra_format");
    let db = redb::Database::open(dir.join(cra_store::redb::DATABASE_FILE)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(FORMAT)
        .unwrap()
        .insert("version", format)
        .unwrap();
    txn.commit().unwrap();
}

/// The invariant "an older cra refuses a newer store before it changes anything", on redb: a
/// directory recording a format above this build's is refused by name by a plan and by an open,
/// and its file is unchanged.
#[test]
fn a_data_directory_a_newer_cra_wrote_is_refused_and_left_as_it_was() {
    let (_dir, data) = fda2190_data_dir();
    let newer = cra_store::redb::upgrade::FORMAT + 1;
    write_format(&data, newer);
    let file = data.join(cra_store::redb::DATABASE_FILE);
    let before = std::fs::read(&file).unwrap();
    let refused = |e: BackendError| match e {
        BackendError::NewerFormat { found, known, .. } => {
            assert_eq!((found, known), (newer, cra_store::redb::upgrade::FORMAT));
            let text = e.to_string();
            assert!(text.contains("newer cra"), "{text}");
            assert!(text.contains("Nothing was changed"), "{text}");
        }
        other => panic!("not refused as newer: {other}"),
    };
    refused(cra_store::redb::upgrade::plan(&data).unwrap_err());
    refused(RedbStore::open_with(&data, fixed().1).unwrap_err());
    assert!(std::fs::read(&file).unwrap() == before, "a refusal wrote");
    assert!(
        !data.join(cra_store::redb::OWNER_FILE).exists(),
        "a refusal claimed the directory"
    );
}

/// The same on PostgreSQL: the dump `fda2190` wrote is planned (the migrations since, the log's
/// backfill) without a write, then a connect migrates it and the plan is empty.
#[test]
fn a_postgres_dump_written_by_fda2190_is_planned_without_a_write_then_upgraded() {
    let Some(url) = postgres_url("a_postgres_dump_written_by_fda2190_is_planned") else {
        return;
    };
    let schema = TestSchema::new(&url, "fda2190_plan");
    load_fda2190_dump(&url, &schema);
    let plan = cra_store::pg::upgrade::plan(&url, schema.name()).unwrap();
    let migrations = plan
        .steps
        .iter()
        .filter(|s| s.step == "postgres.migration")
        .count();
    assert!(migrations >= 10, "{plan:#?}");
    assert!(
        plan.steps
            .iter()
            .any(|s| s.description.contains("0017 (tlog)")),
        "{plan:#?}"
    );
    assert_eq!(
        kinds(&plan).iter().rev().take(2).collect::<Vec<_>>(),
        [&"carp.open_sessions", &"tlog.backfill"],
        "{plan:#?}"
    );
    assert!(plan.found.starts_with("migration "), "{plan:#?}");
    assert_eq!(
        cra_store::pg::upgrade::plan(&url, schema.name()).unwrap(),
        plan
    );

    let store = schema.store(fixed().1).unwrap();
    check_fda2190_state(&store);
    check_fda2190_relay(&PgRelay::new(store.clone()));
    let after = cra_store::pg::upgrade::plan(&url, schema.name()).unwrap();
    assert!(after.is_current(), "{after:#?}");
    assert_eq!(after.found, after.target);
    drop(store);
}

/// The invariant "replicas starting together count an upgraded schema's open sessions once":
/// four stores opened at the same instant on the `fda2190` dump (one migrates, the others wait
/// on the migrations' lock, then all reach the count) leave each agent's counter equal to its
/// open records, not a multiple of it; a session then started counts on top.
#[test]
fn replicas_starting_together_on_an_old_schema_count_its_open_sessions_once() {
    let Some(url) = postgres_url("replicas_starting_together_count_open_sessions_once") else {
        return;
    };
    use cra_carp::store::CarpStore;
    use cra_trace::store::ChainStore;
    let schema = TestSchema::new(&url, "fda2190_race");
    load_fda2190_dump(&url, &schema);
    let barrier = std::sync::Barrier::new(4);
    let stores: Vec<PgStore> = std::thread::scope(|s| {
        let starts: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    PgStore::connect_with(&url, schema.name(), fixed().1, 2).unwrap()
                })
            })
            .collect();
        starts.into_iter().map(|t| t.join().unwrap()).collect()
    });
    check_fda2190_state(&stores[0]);
    let agent = stores[0]
        .sessions()
        .unwrap()
        .iter()
        .filter_map(|s| stores[1].get_session(&s.session_id).unwrap())
        .find(|r| r.is_active())
        .unwrap()
        .agent_id;
    let before = stores[2].open_sessions(&agent).unwrap();
    stores[3]
        .create_session(&cra_carp::store::SessionRecord {
            session_id: "0196b5a0-0000-7000-8000-0000000000cc".into(),
            agent_id: agent.clone(),
            parent_session_id: None,
            created_at: "2026-03-01T00:00:00.000000Z".into(),
            ended_at: None,
        })
        .unwrap();
    assert_eq!(stores[0].open_sessions(&agent).unwrap(), before + 1);
    drop(stores);
}

/// A schema that does not exist yet is planned as a new deployment: the schema, then every
/// migration.
#[test]
fn a_missing_schema_is_planned_as_a_new_deployment() {
    let Some(url) = postgres_url("a_missing_schema_is_planned_as_a_new_deployment") else {
        return;
    };
    let schema = TestSchema::new(&url, "plan_new");
    let plan = cra_store::pg::upgrade::plan(&url, schema.name()).unwrap();
    assert_eq!(plan.found, "none");
    assert_eq!(kinds(&plan).first(), Some(&"postgres.schema"));
    assert!(kinds(&plan)[1..].iter().all(|k| *k == "postgres.migration"));
}

/// The invariant "an older cra refuses a newer store", on PostgreSQL: a schema holding a
/// migration this build does not embed is refused by a plan and by a connect, and nothing of the
/// connect's migrations is applied.
#[test]
fn a_schema_a_newer_cra_migrated_is_refused() {
    let Some(url) = postgres_url("a_schema_a_newer_cra_migrated_is_refused") else {
        return;
    };
    let schema = TestSchema::new(&url, "plan_newer");
    drop(schema.store(fixed().1).unwrap());
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO {}.cra_migrations (version, name, checksum) VALUES (9999, 'future', 'x')",
            schema.name()
        ))
        .unwrap();
    let refused = |e: BackendError| {
        assert!(
            matches!(e, BackendError::UnknownMigration { version: 9999 }),
            "{e}"
        );
        assert!(e.to_string().contains("newer cra"), "{e}");
    };
    refused(cra_store::pg::upgrade::plan(&url, schema.name()).unwrap_err());
    refused(PgStore::connect_with(&url, schema.name(), fixed().1, 4).unwrap_err());
}

/// A copy of a database file taken while a store has it open is what an unclean stop leaves: a
/// plan cannot read it without redb's repair and says so by name (changing nothing), and once
/// [`cra_store::redb::upgrade::repair`] has run, the plan reads it and finds it current.
#[test]
fn a_directory_left_by_an_unclean_stop_is_planned_after_its_repair() {
    let dir = tempfile::tempdir().unwrap();
    let (live, copy) = (dir.path().join("live"), dir.path().join("copy"));
    std::fs::create_dir_all(&copy).unwrap();
    let store = RedbStore::open_with(&live, fixed().1).unwrap();
    RedbRelay::open(&store).unwrap();
    let name = cra_store::redb::DATABASE_FILE;
    std::fs::copy(live.join(name), copy.join(name)).unwrap();
    drop(store);
    let before = std::fs::read(copy.join(name)).unwrap();
    let err = cra_store::redb::upgrade::plan(&copy).unwrap_err();
    assert!(matches!(err, BackendError::NeedsRepair { .. }), "{err}");
    assert!(err.to_string().contains("cra migrate"), "{err}");
    assert!(
        std::fs::read(copy.join(name)).unwrap() == before,
        "a plan wrote"
    );
    cra_store::redb::upgrade::repair(&copy).unwrap();
    let plan = cra_store::redb::upgrade::plan(&copy).unwrap();
    assert!(plan.is_current(), "{plan:#?}");
}

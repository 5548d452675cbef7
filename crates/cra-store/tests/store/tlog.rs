//! The transparency log as each backend keeps it: one leaf per stored event, in commit order,
//! appended with the events, and a store written before the log backfilled on open.

use std::collections::BTreeMap;
use std::sync::Arc;

use cra_store::RedbStore;
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::tlog::LogReader;
use cra_trace::TraceEvent;
use cra_trace::store::ChainStore;

use crate::backends::{TestStore, backends, fixed, note};

/// Every stored event of `sessions`, by its hash.
fn stored(store: &dyn TestStore, sessions: &[String]) -> Vec<TraceEvent> {
    sessions
        .iter()
        .flat_map(|s| store.read_range(s, 0, u64::MAX).unwrap())
        .collect()
}

/// Checks the invariant: the log holds exactly one leaf per stored event, each event's place
/// names its chain and sequence, a chain's leaves are in its order, and the stored tree's root
/// is the Merkle Tree Hash of the entry bundles' event hashes in leaf order.
fn check_one_leaf_per_event(store: &dyn TestStore, events: &[TraceEvent]) -> Vec<String> {
    let size = store.log_size().unwrap();
    assert_eq!(size, events.len() as u64, "one leaf per event");
    let mut by_index = BTreeMap::new();
    for e in events {
        let hash = cra_tlog::hash::from_hex(&e.event_hash).unwrap();
        let place = store
            .leaf_place(&hash)
            .unwrap()
            .expect("every event has a leaf");
        assert_eq!(
            (place.session_id.as_str(), place.sequence),
            (e.session_id.as_str(), e.sequence)
        );
        assert!(
            by_index.insert(place.leaf_index, e.clone()).is_none(),
            "two events, one leaf"
        );
    }
    assert_eq!(
        by_index.keys().copied().collect::<Vec<_>>(),
        (0..size).collect::<Vec<_>>()
    );
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for e in by_index.values() {
        if let Some(before) = last.insert(&e.session_id, e.sequence) {
            assert!(before < e.sequence, "a chain's leaves follow its order");
        }
    }
    let leaves: Vec<_> = by_index
        .values()
        .map(|e| cra_tlog::leaf_hash(&cra_tlog::hash::from_hex(&e.event_hash).unwrap()))
        .collect();
    let reader = LogReader::new(store).unwrap();
    assert_eq!(reader.root(size).unwrap(), cra_tlog::root_of(&leaves));
    by_index.values().map(|e| e.event_hash.clone()).collect()
}

/// Three rounds of two events in each session, a second apart.
fn write_rounds(store: &dyn ChainStore, clock: &cra_wire::FixedClock, sessions: &[String]) {
    for round in 0..3 {
        for s in sessions {
            store
                .append(s, vec![note(round), note(round + 10)])
                .unwrap();
        }
        clock.advance(time::Duration::seconds(1));
    }
}

/// Checks a backfilled log: one leaf per event, in `(timestamp, session_id, sequence)` order.
fn check_backfill_order(store: &dyn TestStore, sessions: &[String]) {
    let events = stored(store, sessions);
    let order = check_one_leaf_per_event(store, &events);
    let mut expected = events.clone();
    expected.sort_by(|x, y| {
        (&x.timestamp, &x.session_id, x.sequence).cmp(&(&y.timestamp, &y.session_id, y.sequence))
    });
    let expected: Vec<String> = expected.iter().map(|e| e.event_hash.clone()).collect();
    assert_eq!(order, expected);
}

#[test]
fn every_stored_event_is_one_leaf_in_commit_order() {
    let (_, config) = fixed();
    for b in backends("every_stored_event_is_one_leaf", || config.clone()) {
        let store = b.store.clone();
        let sessions: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
        std::thread::scope(|scope| {
            for s in &sessions {
                let store = store.clone();
                scope.spawn(move || {
                    for n in 0..40 {
                        let drafts = (0..(n % 3 + 1)).map(note).collect();
                        store.append(s, drafts).unwrap();
                    }
                });
            }
        });
        let events = stored(&*store, &sessions);
        assert_eq!(events.len(), 6 * (14 + 13 * 2 + 13 * 3), "{}", b.name);
        check_one_leaf_per_event(&*store, &events);
    }
}

#[test]
fn a_refused_append_adds_no_leaf() {
    let (_, config) = fixed();
    for b in backends("a_refused_append_adds_no_leaf", || config.clone()) {
        let store = &*b.store;
        store.append("s", vec![note(0)]).unwrap();
        store
            .append(
                "s",
                vec![crate::backends::draft(
                    cra_trace::store::SESSION_ENDED,
                    serde_json::json!({}),
                )],
            )
            .unwrap();
        assert!(store.append("s", vec![note(2)]).is_err(), "{}", b.name);
        let events = stored(store, &["s".to_owned()]);
        assert_eq!(events.len(), 2);
        check_one_leaf_per_event(store, &events);
    }
}

/// A redb data directory written before the log (its tables dropped here) gets every event as
/// a leaf when opened, ordered by `(timestamp, session_id, sequence)`.
#[test]
fn a_redb_directory_written_before_the_log_is_backfilled() {
    let (clock, config) = fixed();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let sessions: Vec<String> = ["b", "a", "c"].iter().map(|s| (*s).to_owned()).collect();
    {
        let store = RedbStore::open_with(&path, config.clone()).unwrap();
        write_rounds(&store, &clock, &sessions);
    }
    {
        let db = redb::Database::open(path.join(cra_store::redb::DATABASE_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        for table in cra_store::testing::REDB_LOG_TABLES {
            txn.delete_table(redb::TableDefinition::<(), ()>::new(table))
                .unwrap_or_default();
        }
        txn.commit().unwrap();
    }
    let store: Arc<dyn TestStore> = Arc::new(RedbStore::open_with(&path, config).unwrap());
    check_backfill_order(&*store, &sessions);
}

/// The same on PostgreSQL: a schema whose log is empty (as migration 0017 leaves one written
/// before it) is backfilled by the next server to start, in the same order.
#[test]
fn a_postgres_schema_written_before_the_log_is_backfilled() {
    let Some(url) = postgres_url("a_postgres_schema_written_before_the_log_is_backfilled") else {
        return;
    };
    let (clock, config) = fixed();
    let schema = TestSchema::new(&url, "tlog_backfill");
    let sessions: Vec<String> = ["b", "a", "c"].iter().map(|s| (*s).to_owned()).collect();
    {
        let store = schema.store(config.clone()).unwrap();
        write_rounds(&store, &clock, &sessions);
        let mut client = store.client().unwrap();
        client
            .batch_execute(
                "DELETE FROM tlog_state; DELETE FROM tlog_tiles; DELETE FROM tlog_leaves;",
            )
            .unwrap();
    }
    let store: Arc<dyn TestStore> = Arc::new(schema.store(config).unwrap());
    check_backfill_order(&*store, &sessions);
}

/// The fixtures a server built from `fda2190` (the commit before the log) wrote
/// (`tests/fixtures/fda2190/README.md`).
pub(crate) fn fda2190_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fda2190")
        .join(name)
}

/// A data directory holding a copy of the database `fda2190` wrote (the directory lives as long
/// as the `TempDir`).
pub(crate) fn fda2190_data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(
        fda2190_fixture("cra.redb"),
        data.join(cra_store::redb::DATABASE_FILE),
    )
    .unwrap();
    (dir, data)
}

/// Runs the fixture `pg.sql` into `schema` (empty): the schema `fda2190` wrote, as it wrote it.
pub(crate) fn load_fda2190_dump(url: &str, schema: &TestSchema) {
    let dump = std::fs::read_to_string(fda2190_fixture("pg.sql")).unwrap();
    let sql = dump.replace("fda2190_fixture", schema.name());
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client.batch_execute(&sql).unwrap();
}

/// Checks a store opened on a fixture: at least its three sessions, every chain verifying, and
/// the log backfilled in order.
fn check_fda2190_backfill(store: &dyn TestStore) {
    let sessions: Vec<String> = store
        .sessions()
        .unwrap()
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert!(sessions.len() >= 3, "{sessions:?}");
    for s in &sessions {
        crate::backends::verify_stored(store, s).unwrap();
    }
    check_backfill_order(store, &sessions);
}

/// Checks the owner index of a store opened on a fixture (issue 29, item 3): `fda2190` kept
/// none, so the store built it when it opened, and it lists the three sessions of the fixture's
/// agent, `admin`, and nothing for an agent with none.
fn check_fda2190_owner_index(store: &dyn cra_carp::store::CarpStore) {
    let mine = store
        .sessions_of("admin")
        .unwrap()
        .expect("a plaintext store keeps the index");
    assert_eq!(mine.len(), 3, "{mine:?}");
    for id in &mine {
        assert_eq!(store.get_session(id).unwrap().unwrap().agent_id, "admin");
    }
    assert_eq!(store.sessions_of("nobody").unwrap(), Some(Vec::new()));
}

/// A data directory `fda2190` wrote (three sessions, each with two resolves, one ended) opens
/// with every event a leaf, in `(timestamp, session_id, sequence)` order, every chain still
/// verifying, and its sessions in the owner index.
#[test]
fn a_redb_directory_written_by_fda2190_is_backfilled() {
    let (_dir, data) = fda2190_data_dir();
    let store = RedbStore::open_with(&data, fixed().1).unwrap();
    check_fda2190_backfill(&store);
    check_fda2190_owner_index(&store);
}

/// A data directory `fda2190` wrote, once this version has opened it (and backfilled its log),
/// rewrites into a fresh file: every table it holds is one the rewrite knows, and afterwards
/// every chain verifies and the log has the same leaves in the same order.
#[test]
fn a_redb_directory_written_by_fda2190_rewrites_after_its_upgrade() {
    use cra_store::tlog::LogStore;
    let (_dir, data) = fda2190_data_dir();
    let size = RedbStore::open_with(&data, fixed().1)
        .unwrap()
        .log_size()
        .unwrap();
    let report = cra_store::redb::rewrite::rewrite(&data, &mut |_, _| {}).unwrap();
    assert!(report.records("trace_events") > Some(0), "{report:?}");
    let store = RedbStore::open_with(&data, fixed().1).unwrap();
    assert_eq!(store.log_size().unwrap(), size);
    check_fda2190_backfill(&store);
    check_fda2190_owner_index(&store);
}

/// The same for a `pg_dump` of a schema `fda2190` wrote, restored under this test's schema: the
/// migrations since then run, and the next server to start backfills the log.
#[test]
fn a_postgres_dump_written_by_fda2190_is_backfilled() {
    let Some(url) = postgres_url("a_postgres_dump_written_by_fda2190_is_backfilled") else {
        return;
    };
    let schema = TestSchema::new(&url, "fda2190_dump");
    load_fda2190_dump(&url, &schema);
    let store = schema.store(fixed().1).unwrap();
    check_fda2190_backfill(&store);
    check_fda2190_owner_index(&store);
}

/// A store records its log's identity on first use and refuses another one by name afterwards
/// (a replica configured with another key or origin cannot start), keeping the first.
#[test]
fn a_store_refuses_a_second_log_identity() {
    use cra_store::tlog::{LogError, LogIdentity};
    let (_, config) = fixed();
    for b in backends("a_store_refuses_a_second_log_identity", || config.clone()) {
        let first = LogIdentity {
            origin: "a.example/log".into(),
            verifier_key: "a.example/log+00000001+AQ==".into(),
        };
        let other = LogIdentity {
            origin: "b.example/log".into(),
            ..first.clone()
        };
        b.store.settle_identity(&first, &[]).unwrap();
        b.store.settle_identity(&first, &[]).unwrap();
        let err = b.store.settle_identity(&other, &[]).unwrap_err();
        assert!(
            matches!(err, LogError::Identity { .. }),
            "{}: {err}",
            b.name
        );
        assert!(err.to_string().contains("a.example/log"), "{err}");
        b.store.settle_identity(&first, &[]).unwrap();
    }
}

/// A log key rotation moves the stored identity only through a configuration that still signs
/// with the stored key (`log.rotation_key_files`): the new key with the old one rotating is
/// recorded; afterwards the new key alone is accepted and the old one alone, or another origin
/// with the old key rotating, is refused.
#[test]
fn a_store_moves_its_log_key_only_through_a_rotation() {
    use cra_store::tlog::{LogError, LogIdentity, Settled};
    let (_, config) = fixed();
    for b in backends("a_store_moves_its_log_key_only_through_a_rotation", || {
        config.clone()
    }) {
        let old = LogIdentity {
            origin: "a.example/log".into(),
            verifier_key: "a.example/log+00000001+AQ==".into(),
        };
        let new = LogIdentity {
            verifier_key: "a.example/log+00000002+Ag==".into(),
            ..old.clone()
        };
        assert_eq!(b.store.settle_identity(&old, &[]).unwrap(), Settled::First);
        // Phase 1: the old key still primary, the new one signing beside it.
        let settled = b
            .store
            .settle_identity(&old, std::slice::from_ref(&new.verifier_key))
            .unwrap();
        assert_eq!(settled, Settled::Same, "{}", b.name);
        // Without the old key among the rotating ones, the new one is refused.
        let err = b.store.settle_identity(&new, &[]).unwrap_err();
        assert!(matches!(err, LogError::Identity { .. }), "{}", b.name);
        // Another origin never takes over, rotating or not.
        let elsewhere = LogIdentity {
            origin: "b.example/log".into(),
            ..new.clone()
        };
        let rotating = [old.verifier_key.clone()];
        assert!(b.store.settle_identity(&elsewhere, &rotating).is_err());
        // Phase 2: the new key primary, the old one rotating: recorded, and said.
        let moved = Settled::Moved {
            previous_key: old.verifier_key.clone(),
        };
        assert_eq!(b.store.settle_identity(&new, &rotating).unwrap(), moved);
        assert_eq!(
            b.store.settle_identity(&new, &rotating).unwrap(),
            Settled::Same
        );
        // Phase 3: the new key alone; the old one alone is refused now.
        assert_eq!(b.store.settle_identity(&new, &[]).unwrap(), Settled::Same);
        let err = b.store.settle_identity(&old, &[]).unwrap_err();
        assert!(err.to_string().contains("00000002"), "{}: {err}", b.name);
    }
}

/// Retention removes a whole ended session's events, never its leaves: the log keeps its size
/// and the root it had at every earlier size, so checkpoints cut before the removal stay
/// consistent with every later one.
#[test]
fn retention_removes_events_but_never_leaves() {
    use cra_store::RetentionPolicy;
    use cra_store::retention::apply_retention;
    use cra_trace::store::SESSION_ENDED;
    use cra_wire::Clock as _;
    use time::Duration;

    let (clock, config) = fixed();
    for b in backends("retention_removes_events_but_never_leaves", || {
        config.clone()
    }) {
        let s = &*b.store;
        let t0 = clock.now();
        s.append(
            "gone",
            vec![
                note(0),
                crate::backends::draft(SESSION_ENDED, serde_json::json!({})),
            ],
        )
        .unwrap();
        s.append("kept", vec![note(1)]).unwrap();
        let size = s.log_size().unwrap();
        let root = LogReader::new(s).unwrap().root(size).unwrap();
        let gone = s.read_range("gone", 0, 2).unwrap();
        clock.set(t0 + Duration::days(30));
        let ids = cra_wire::SequentialIds::new(1_772_366_400_000, 77);
        let report = apply_retention(s, &RetentionPolicy::days(7).unwrap(), &*clock, &ids).unwrap();
        assert_eq!(report.removed.len(), 1, "{}: {report:?}", b.name);
        assert!(s.read_range("gone", 0, 2).unwrap().is_empty(), "{}", b.name);
        let after = s.log_size().unwrap();
        assert!(
            after > size,
            "{}: the removal's audit event is a new leaf",
            b.name
        );
        let reader = LogReader::new(s).unwrap();
        assert_eq!(
            reader.root(size).unwrap(),
            root,
            "{}: the old tree is intact",
            b.name
        );
        for e in &gone {
            let leaf = cra_tlog::hash::from_hex(&e.event_hash).unwrap();
            let index = placed(s, &leaf, &gone, e);
            let hashes = reader.inclusion(index, after).unwrap();
            let root = reader.root(after).unwrap();
            let leaf_hash = cra_tlog::leaf_hash(&leaf);
            assert!(
                cra_tlog::proof::verify_inclusion(&leaf_hash, index, after, &hashes, &root).is_ok(),
                "{}: a removed event is still proved in the log",
                b.name
            );
        }
    }
}

/// The leaf index of `e`, one of `gone` (the chain as it was): its place when the store still
/// knows it, else its position among the first leaves (the chain was appended first).
fn placed(s: &dyn TestStore, leaf: &cra_tlog::Hash, gone: &[TraceEvent], e: &TraceEvent) -> u64 {
    match s.leaf_place(leaf).unwrap() {
        Some(p) => p.leaf_index,
        None => gone
            .iter()
            .position(|g| g.event_hash == e.event_hash)
            .unwrap() as u64,
    }
}

/// Invariant: an append whose log write fails stores nothing (its events and leaves go together
/// or not at all), and the chains and log go on as if it had never been sent. On redb a run
/// whose session id is over 65,535 bytes cannot be stored, so the log write of such an append
/// fails after its events were written in the same transaction.
#[test]
fn a_failing_log_write_stores_none_of_its_append() {
    let (_, config) = fixed();
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(dir.path(), config).unwrap();
    let sessions = vec!["a".to_owned()];
    store.append("a", vec![note(0), note(1)]).unwrap();
    let huge = "h".repeat(70_000);
    let refused = store.append(&huge, vec![note(2)]);
    assert!(
        refused.is_err(),
        "the append whose log write fails is refused"
    );
    assert!(store.read_range(&huge, 0, u64::MAX).unwrap().is_empty());
    let next = store.append("a", vec![note(3)]).unwrap();
    assert_eq!(
        next[0].sequence, 2,
        "the chain goes on from its last stored event"
    );
    let events = stored(&store, &sessions);
    check_one_leaf_per_event(&store, &events);
}

/// Invariant: checkpoints published at once (replicas cutting together, a cut racing the
/// timer) are serialised by the store: a publish answers a checkpoint at least as large as its
/// own and as every checkpoint answered before it began, only the publishes that answered their
/// own note are stored, and the latest is the largest.
#[test]
fn checkpoints_published_at_once_never_go_back() {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};
    let seed: u64 = rand::rng().random();
    eprintln!("seed {seed}");
    let mut sizes: Vec<u64> = (1..=48).collect();
    sizes.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let size_of = |note: &str| note.strip_prefix("note ").unwrap().parse::<u64>().unwrap();
    let (_, config) = fixed();
    for b in backends("checkpoints_published_at_once_never_go_back", || {
        config.clone()
    }) {
        let answered = AtomicU64::new(0);
        let stored: Vec<u64> = std::thread::scope(|scope| {
            let workers: Vec<_> = sizes
                .chunks(12)
                .map(|chunk| {
                    let (store, answered) = (&b.store, &answered);
                    scope.spawn(move || {
                        let mut own = Vec::new();
                        for &size in chunk {
                            let before = answered.load(Ordering::SeqCst);
                            let note = store.publish_checkpoint(size, &format!("note {size}"));
                            let got = size_of(&note.unwrap());
                            assert!(got >= size.max(before), "{size}: {got} after {before}");
                            answered.fetch_max(got, Ordering::SeqCst);
                            if got == size {
                                own.push(size);
                            }
                        }
                        own
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let listed: Vec<u64> = b
            .store
            .checkpoints(100)
            .unwrap()
            .iter()
            .map(|n| size_of(n))
            .collect();
        let mut expected = stored.clone();
        expected.sort_unstable_by(|x, y| y.cmp(x));
        assert_eq!(listed, expected, "{}", b.name);
        assert_eq!(
            listed.first(),
            Some(&48),
            "{}: the latest is the largest",
            b.name
        );
    }
}

/// The sessions of the `runs-layout` fixture and what each appends, in turn: runs of one event,
/// runs that cross entry bundles, and one append that fills more than a tile.
const RUNS_LAYOUT_APPENDS: [(&str, u64); 9] = [
    ("alpha", 1),
    ("beta", 40),
    ("alpha", 3),
    ("gamma", 300),
    ("beta", 1),
    ("delta", 200),
    ("alpha", 120),
    ("gamma", 2),
    ("epsilon", 90),
];

/// Writes the `runs-layout` fixture (`tests/fixtures/runs-layout/make.sh` runs it with the code
/// of the commit it names): a data directory whose log holds full and partial entry bundles in
/// the layout of that commit, and `log.txt` with the log's size and root.
#[test]
#[ignore = "writes a fixture; run by tests/fixtures/runs-layout/make.sh"]
fn write_the_runs_layout_fixture() {
    use cra_store::tlog::LogStore as _;
    let out = std::path::PathBuf::from(std::env::var("CRA_FIXTURE_DIR").unwrap());
    let (clock, config) = fixed();
    let store = RedbStore::open_with(&out, config).unwrap();
    for round in 0..2u64 {
        for (session, n) in RUNS_LAYOUT_APPENDS {
            store
                .append(session, (0..n).map(|i| note(round * 1000 + i)).collect())
                .unwrap();
            clock.advance(time::Duration::seconds(1));
        }
    }
    let size = store.log_size().unwrap();
    let root = LogReader::new(&store).unwrap().root(size).unwrap();
    std::fs::write(
        out.join("log.txt"),
        format!("{size} {}\n", cra_tlog::hash::to_hex(&root)),
    )
    .unwrap();
}

/// The `runs-layout` fixture's directory.
fn runs_layout_fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs-layout")
}

/// A data directory holding a copy of the `runs-layout` fixture's database, and that file.
fn runs_layout_data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(cra_store::redb::DATABASE_FILE);
    std::fs::copy(runs_layout_fixture().join("cra.redb"), &file).unwrap();
    (dir, file)
}

/// The runs-layout fixture with entry bundle 2 removed, as damage would leave it: the conversion
/// at open refuses it, naming the bundle, and leaves the log as it was, still to be converted
/// (the conversion is one transaction: a refusal never half-applies).
#[test]
fn a_runs_layout_directory_missing_an_entry_bundle_is_refused_and_left_as_it_was() {
    let (dir, file) = runs_layout_data_dir();
    {
        let db = redb::Database::open(&file).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(redb::TableDefinition::<(u8, u64), &[u8]>::new("tlog_tiles"))
            .unwrap()
            .remove((u8::MAX, 2))
            .unwrap()
            .expect("the fixture holds entry bundle 2");
        txn.commit().unwrap();
    }
    let tiles = || {
        let db = redb::Database::open(&file).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let table = txn
            .open_table(redb::TableDefinition::<(u8, u64), &[u8]>::new("tlog_tiles"))
            .unwrap();
        redb::ReadableTable::iter(&table)
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value(), v.value().to_vec())
            })
            .collect::<Vec<_>>()
    };
    let before = tiles();
    let Err(e) = RedbStore::open_with(dir.path(), fixed().1) else {
        panic!("a log missing an entry bundle was opened");
    };
    assert!(e.to_string().contains("entry bundle 2 is missing"), "{e}");
    assert!(
        tiles() == before,
        "the refused conversion changed the log's tiles"
    );
    let plan = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    assert!(
        plan.steps.iter().any(|s| s.step == "tlog.layout"),
        "{plan:#?}"
    );
}

/// A data directory written in the runs layout (`tests/fixtures/runs-layout`, by `9285a96`'s
/// store) is planned with its layout step and no write, then converted when opened: the same
/// tree (the size and root that code read), one leaf per event in its place, a layout the plan
/// no longer names, and appends go on in a tree consistent with the one it had.
#[test]
fn a_redb_directory_in_the_runs_layout_is_converted_to_data_in_runs() {
    use cra_store::tlog::LogStore as _;
    let fixture = runs_layout_fixture();
    let (dir, file) = runs_layout_data_dir();
    let log = std::fs::read_to_string(fixture.join("log.txt")).unwrap();
    let (size, root) = log.trim().split_once(' ').unwrap();
    let (size, root): (u64, _) = (
        size.parse().unwrap(),
        cra_tlog::hash::from_hex(root).unwrap(),
    );

    let before = std::fs::read(&file).unwrap();
    let plan = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    let steps: Vec<&str> = plan.steps.iter().map(|s| s.step).collect();
    assert!(steps.contains(&"tlog.layout"), "{plan:#?}");
    assert!(std::fs::read(&file).unwrap() == before, "a plan wrote");

    let (clock, config) = fixed();
    clock.advance(time::Duration::hours(1));
    let store = RedbStore::open_with(dir.path(), config).unwrap();
    cra_store::relay::RedbRelay::open(&store).unwrap();
    assert_eq!(store.log_size().unwrap(), size);
    let reader = LogReader::new(&store).unwrap();
    assert_eq!(reader.root(size).unwrap(), root);
    let mut sessions: Vec<String> = RUNS_LAYOUT_APPENDS
        .iter()
        .map(|(s, _)| (*s).to_owned())
        .collect();
    sessions.sort();
    sessions.dedup();
    check_one_leaf_per_event(&store, &stored(&store, &sessions));

    store.append("zeta", (0..300).map(note).collect()).unwrap();
    sessions.push("zeta".into());
    check_one_leaf_per_event(&store, &stored(&store, &sessions));
    let reader = LogReader::new(&store).unwrap();
    let grown = store.log_size().unwrap();
    assert_eq!(grown, size + 300);
    let proof = reader.consistency(size, grown).unwrap();
    cra_tlog::verify_consistency(size, grown, &root, &reader.root(grown).unwrap(), &proof).unwrap();
    drop(reader);
    drop(store);
    let after = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    assert!(
        after.steps.iter().all(|s| s.step != "tlog.layout"),
        "{after:#?}"
    );
}

/// A data directory of data format 3, whose log kept every run in `tlog_runs` and had no
/// `tlog_edge` (made here from one this build wrote, its edge's rows moved into `tlog_runs`), is
/// planned with the edge's table and the format and no conversion, then opened with the same
/// tree, and appends go on in a tree consistent with it.
#[test]
fn a_format_3_directory_opens_with_an_empty_edge() {
    use cra_store::tlog::LogStore as _;
    let (clock, config) = fixed();
    let dir = tempfile::tempdir().unwrap();
    let mut sessions: Vec<String> = vec!["a".into(), "b".into()];
    let (size, root) = {
        let store = RedbStore::open_with(dir.path(), config.clone()).unwrap();
        cra_store::relay::RedbRelay::open(&store).unwrap();
        write_rounds(&store, &clock, &sessions);
        let size = store.log_size().unwrap();
        (size, LogReader::new(&store).unwrap().root(size).unwrap())
    };
    {
        let db = redb::Database::open(dir.path().join(cra_store::redb::DATABASE_FILE)).unwrap();
        let txn = db.begin_write().unwrap();
        let edge = redb::TableDefinition::<u64, &[u8]>::new("tlog_edge");
        let rows: Vec<(u64, Vec<u8>)> = redb::ReadableTable::iter(&txn.open_table(edge).unwrap())
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value(), v.value().to_vec())
            })
            .collect();
        assert!(!rows.is_empty(), "small appends wait in the edge");
        {
            let runs = redb::TableDefinition::<u64, &[u8]>::new("tlog_runs");
            let mut runs = txn.open_table(runs).unwrap();
            for (first, row) in &rows {
                runs.insert(first, row.as_slice()).unwrap();
            }
            let format = redb::TableDefinition::<&str, u64>::new("cra_format");
            txn.open_table(format)
                .unwrap()
                .insert("version", 3)
                .unwrap();
        }
        assert!(txn.delete_table(edge).unwrap());
        txn.commit().unwrap();
    }
    let plan = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    assert_eq!(plan.found, "data format 3");
    let steps: Vec<&str> = plan.steps.iter().map(|s| s.step).collect();
    assert_eq!(steps, ["redb.tables", "redb.format"], "{plan:#?}");
    assert!(
        plan.steps[0].description.ends_with("tables tlog_edge"),
        "{plan:#?}"
    );

    let store = RedbStore::open_with(dir.path(), config).unwrap();
    assert_eq!(store.log_size().unwrap(), size);
    assert_eq!(LogReader::new(&store).unwrap().root(size).unwrap(), root);
    store.append("c", (0..5).map(note).collect()).unwrap();
    sessions.push("c".into());
    check_one_leaf_per_event(&store, &stored(&store, &sessions));
    let reader = LogReader::new(&store).unwrap();
    let proof = reader.consistency(size, size + 5).unwrap();
    let grown = reader.root(size + 5).unwrap();
    cra_tlog::verify_consistency(size, size + 5, &root, &grown, &proof).unwrap();
    drop(reader);
    drop(store);
    let after = cra_store::redb::upgrade::plan(dir.path()).unwrap();
    assert!(after.is_current(), "{after:#?}");
}

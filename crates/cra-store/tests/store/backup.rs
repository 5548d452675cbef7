//! Backups and restores (`specs/backup.md`) on both backends: the `fda2190` fixtures (chains,
//! approvals, Relay records) with a signed checkpoint, backed up while an appender goes on
//! writing, restore into a new store where every chain, the log, the checkpoint and the Relay
//! records read back; an archive cut short or changed is refused, a restore never overwrites,
//! and a store that does not verify is not put in place.

use std::sync::atomic::{AtomicBool, Ordering};

use cra_relay::store::RelayStore;
use cra_store::backup::archive::{Archive, MANIFEST};
use cra_store::backup::{BackupError, Manifest};
use cra_store::relay::{PgRelay, RedbRelay};
use cra_store::testing::{TestSchema, postgres_url};
use cra_store::tlog::{LogReader, LogStore};
use cra_store::{PgStore, RedbStore};
use cra_trace::store::ChainStore;

use crate::backends::fixed;
use crate::tlog::{fda2190_data_dir, load_fda2190_dump};

const NOW: &str = "2026-03-01T12:00:00Z";

/// Publishes a checkpoint of the whole log, signed as a server signs it.
fn checkpoint(log: &dyn LogStore) {
    let size = log.log_size().unwrap();
    let root = LogReader::at(log, size).root(size).unwrap();
    let origin = "backup.example/cra-log";
    let signer = cra_tlog::Ed25519Signer::from_seed(origin, &[3; 32]).unwrap();
    let note = cra_tlog::Checkpoint::new(origin, size, root)
        .unwrap()
        .sign(&signer)
        .unwrap();
    log.publish_checkpoint(size, &note.to_text()).unwrap();
}

/// Appends one event to a fresh session until `stop`, so a backup runs beside a writer.
fn keep_appending(chains: &dyn ChainStore, stop: &AtomicBool) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) || n == 0 {
        // A session id as the runtime makes them: the verifier refuses any other form.
        let session = format!("0196b5a0-0000-7000-8000-{n:012x}");
        let draft = crate::backends::draft("session.started", serde_json::json!({"n": n}));
        chains.append(&session, vec![draft]).unwrap();
        n += 1;
    }
    n
}

/// What a restored store must hold that its source held: the same chains with the same heads,
/// the same Relay records, a log at least as long and the checkpoint.
fn check_same(
    source: (&dyn ChainStore, &dyn RelayStore),
    restored: (&dyn ChainStore, &dyn RelayStore, &dyn LogStore),
    manifest: &Manifest,
) {
    let heads = |c: &dyn ChainStore| {
        c.sessions()
            .unwrap()
            .into_iter()
            .map(|s| (s.session_id, s.head.head_hash))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (before, after) = (heads(source.0), heads(restored.0));
    assert_eq!(after.len() as u64, manifest.chains);
    for (id, head) in &after {
        assert_eq!(before.get(id), Some(head), "chain {id}");
    }
    assert_eq!(source.1.snapshot().unwrap(), restored.1.snapshot().unwrap());
    assert!(restored.2.log_size().unwrap() >= manifest.log_size);
    assert_eq!(restored.2.checkpoints(10).unwrap().len(), 1);
}

#[test]
fn a_redb_store_backed_up_while_written_restores_and_verifies() {
    let (_dir, data) = fda2190_data_dir();
    let store = RedbStore::open_with(&data, fixed().1).unwrap();
    let relay = RedbRelay::open(&store).unwrap();
    checkpoint(&store);
    let out = tempfile::tempdir().unwrap();
    let archive = out.path().join("cra.backup");
    let stop = AtomicBool::new(false);
    let manifest = std::thread::scope(|s| {
        let writer = s.spawn(|| keep_appending(&store, &stop));
        let m = cra_store::backup::redb::backup_store(&store, &archive, NOW, &mut |_, _| {});
        stop.store(true, Ordering::SeqCst);
        assert!(writer.join().unwrap() > 0);
        m.unwrap()
    });
    assert_eq!(manifest.backend, "redb");
    assert_eq!(
        manifest.store_format,
        format!("data format {}", cra_store::redb::upgrade::FORMAT)
    );
    assert!(manifest.chains >= 5, "{manifest:?}");
    assert!(!manifest.not_included.is_empty());

    let target = out.path().join("restored");
    let opened = Archive::open(&archive).unwrap();
    assert_eq!(opened.manifest, manifest);
    let verified =
        cra_store::backup::redb::restore(&opened, &target, fixed().1, &mut |_| {}).unwrap();
    assert_eq!(verified.chains, manifest.chains);
    assert_eq!(verified.checkpoints, 1);
    assert!(!target.join(".cra-restore").exists());
    let restored = RedbStore::open_with(&target, fixed().1).unwrap();
    let restored_relay = RedbRelay::open(&restored).unwrap();
    check_same(
        (&store, &relay),
        (&restored, &restored_relay, &restored),
        &manifest,
    );

    // Never over a database, and never onto another backend.
    let again = cra_store::backup::redb::restore(&opened, &target, fixed().1, &mut |_| {});
    assert!(matches!(again, Err(BackupError::Exists(_))), "{again:?}");
    // A backup never replaces a file either.
    let twice = cra_store::backup::redb::backup_store(&store, &archive, NOW, &mut |_, _| {});
    assert!(matches!(twice, Err(BackupError::Exists(_))), "{twice:?}");
}

/// The archive at `path` cut before its manifest, and with one byte of its data changed.
fn damaged_copies(path: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bytes = std::fs::read(path).unwrap();
    let at = bytes
        .windows(MANIFEST.len())
        .rposition(|w| w == MANIFEST.as_bytes())
        .unwrap();
    let cut = path.with_extension("cut");
    std::fs::write(&cut, &bytes[..at]).unwrap();
    let mut changed = bytes.clone();
    changed[1024] ^= 0x01;
    let flipped = path.with_extension("flipped");
    std::fs::write(&flipped, changed).unwrap();
    (cut, flipped)
}

/// The invariant "a restore reports success only for an archive that is whole": one cut short
/// (no manifest) is a partial backup, one with a changed byte does not match its manifest.
#[test]
fn an_archive_cut_short_or_changed_is_refused() {
    let (dir, data) = fda2190_data_dir();
    drop(RedbStore::open_with(&data, fixed().1).unwrap());
    let archive = dir.path().join("cra.backup");
    cra_store::backup::redb::backup_dir(&data, &archive, NOW, &mut |_, _| {}).unwrap();
    let (cut, flipped) = damaged_copies(&archive);
    let err = Archive::open(&cut).unwrap_err();
    assert!(matches!(err, BackupError::Partial(_)), "{err}");
    assert!(err.to_string().contains("partial backup"), "{err}");
    let err = Archive::open(&flipped).unwrap_err();
    assert!(matches!(err, BackupError::Damaged(_)), "{err}");
}

#[test]
fn a_postgres_schema_backed_up_while_written_restores_and_verifies() {
    let Some(url) = postgres_url("a_postgres_schema_backed_up_while_written_restores") else {
        return;
    };
    let source = TestSchema::new(&url, "backup_source");
    load_fda2190_dump(&url, &source);
    let store = source.store(fixed().1).unwrap();
    let relay = PgRelay::new(store.clone());
    checkpoint(&store);
    let out = tempfile::tempdir().unwrap();
    let archive = out.path().join("cra.backup");
    let stop = AtomicBool::new(false);
    let manifest = std::thread::scope(|s| {
        let writer = s.spawn(|| keep_appending(&store, &stop));
        let m = cra_store::backup::pg::backup(&url, source.name(), &archive, NOW, &mut |_, _| {});
        stop.store(true, Ordering::SeqCst);
        assert!(writer.join().unwrap() > 0);
        m.unwrap()
    });
    assert_eq!(manifest.backend, "postgres");
    assert!(
        manifest.store_format.starts_with("migration "),
        "{manifest:?}"
    );

    let target = TestSchema::new(&url, "backup_target");
    let opened = Archive::open(&archive).unwrap();
    let verified =
        cra_store::backup::pg::restore(&opened, &url, target.name(), fixed().1, &mut |_| {})
            .unwrap();
    assert_eq!(
        (verified.chains, verified.checkpoints),
        (manifest.chains, 1)
    );
    let restored = target.store(fixed().1).unwrap();
    check_same(
        (&store, &relay),
        (&restored, &PgRelay::new(restored.clone()), &restored),
        &manifest,
    );
    let again =
        cra_store::backup::pg::restore(&opened, &url, target.name(), fixed().1, &mut |_| {});
    assert!(
        matches!(again, Err(BackupError::SchemaInUse(_))),
        "{again:?}"
    );
    // A PostgreSQL archive is not moved onto redb: the error says where it can go.
    let err =
        cra_store::backup::redb::restore(&opened, &out.path().join("d"), fixed().1, &mut |_| {})
            .unwrap_err();
    assert!(matches!(err, BackupError::Backend { .. }), "{err}");
    assert!(
        err.to_string().contains("restore it onto postgres"),
        "{err}"
    );
    drop((store, restored));
}

/// The invariant "a store that does not verify is not put in place": a schema whose stored
/// event was changed behind the chain's back backs up (the archive matches its manifest), and
/// its restore fails verification naming the chain, and leaves no schema behind.
#[test]
fn a_restore_that_does_not_verify_leaves_nothing() {
    let Some(url) = postgres_url("a_restore_that_does_not_verify_leaves_nothing") else {
        return;
    };
    let source = TestSchema::new(&url, "backup_bad");
    load_fda2190_dump(&url, &source);
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let changed = client
        .execute(
            &format!(
                "UPDATE {}.trace_events SET body = replace(body, 'fixture 1', 'fixture 7')
                 WHERE sequence = 0 AND body LIKE '%fixture 1%'",
                source.name()
            ),
            &[],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let out = tempfile::tempdir().unwrap();
    let archive = out.path().join("cra.backup");
    cra_store::backup::pg::backup(&url, source.name(), &archive, NOW, &mut |_, _| {}).unwrap();
    let target = TestSchema::new(&url, "backup_bad_target");
    let opened = Archive::open(&archive).unwrap();
    let err = cra_store::backup::pg::restore(&opened, &url, target.name(), fixed().1, &mut |_| {})
        .unwrap_err();
    assert!(matches!(err, BackupError::Verify(_)), "{err}");
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
            &[&target.name()],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "a failed restore left its schema");
    drop(PgStore::connect_with(&url, source.name(), fixed().1, 2).unwrap());
}

/// Everything a store holds, read through its traits, to compare two stores area by area
/// ([`assert_same`]).
#[derive(Debug, PartialEq)]
struct Contents {
    /// Each chain's summary (head, times, bytes) and its events.
    chains: Vec<(cra_trace::store::SessionSummary, Vec<serde_json::Value>)>,
    /// Each session's record with the open count of its agent.
    sessions: Vec<String>,
    /// Each event's place in the log.
    leaves: Vec<Option<cra_store::tlog::LeafPlace>>,
    /// The log's size, root and checkpoints.
    log: (u64, cra_tlog::Hash, Vec<String>),
    /// The pending approvals.
    pending: Vec<String>,
    /// The budget spent and the rate counted.
    counters: (u64, u64),
    /// The catalog's generations, and the newest one's first atlas's files.
    catalog: Vec<String>,
    files: Option<std::collections::BTreeMap<String, Vec<u8>>>,
}

/// Compares two stores' contents area by area, so a failure names the area (and the chain).
fn assert_same(moved: &Contents, source: &Contents) {
    assert_eq!(moved.chains.len(), source.chains.len(), "chains");
    for (m, s) in moved.chains.iter().zip(&source.chains) {
        assert_eq!(m, s, "chain {}", s.0.session_id);
    }
    assert_eq!(moved.sessions, source.sessions, "CARP sessions");
    assert_eq!(moved.leaves, source.leaves, "the events' leaves");
    assert_eq!(
        moved.log, source.log,
        "the log's size, root and checkpoints"
    );
    assert_eq!(moved.pending, source.pending, "pending approvals");
    assert_eq!(moved.counters, source.counters, "counters");
    assert_eq!(moved.catalog, source.catalog, "catalog");
    assert_eq!(moved.files, source.files, "atlas files");
}

const RATE: &str = "p-rate";
const BUDGET: &str = "p-budget";

fn contents(store: &dyn crate::backends::TestStore) -> Contents {
    use cra_carp::store::CarpStore;
    let mut chains = Vec::new();
    let mut sessions = Vec::new();
    let mut leaves = Vec::new();
    for summary in store.sessions().unwrap() {
        let events = store.read_range(&summary.session_id, 0, u64::MAX).unwrap();
        for e in &events {
            let hash = cra_tlog::hash::from_hex(&e.event_hash).unwrap();
            leaves.push(store.leaf_place(&hash).unwrap());
        }
        if let Some(s) = CarpStore::get_session(store, &summary.session_id).unwrap() {
            let open = store.open_sessions(&s.agent_id).unwrap();
            sessions.push(format!(
                "{} open {open}",
                serde_json::to_string(&s).unwrap()
            ));
        }
        let events = events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect();
        chains.push((summary, events));
    }
    let size = store.log_size().unwrap();
    let root = LogReader::at(store, size).root(size).unwrap();
    let pending = store
        .list_pending_approvals()
        .unwrap()
        .iter()
        .map(|a| serde_json::to_string(a).unwrap())
        .collect();
    let head = store.head().unwrap();
    let files = head
        .as_ref()
        .and_then(|g| store.files(&g.members[0].digest).unwrap());
    Contents {
        chains,
        sessions,
        leaves,
        log: (size, root, store.checkpoints(usize::MAX).unwrap()),
        pending,
        counters: (
            store.budget_spent(BUDGET, "global").unwrap(),
            store.rate_count(RATE, "global", 0, i64::MAX).unwrap(),
        ),
        catalog: store
            .history(None, 100)
            .unwrap()
            .iter()
            .map(|g| serde_json::to_string(g).unwrap())
            .collect(),
        files,
    }
}

/// Gives a store what the `fda2190` fixture lacks: every kind of CARP record (under the
/// configured key), a pending approval, spent rate and budget counters, and an atlas catalog.
fn add_every_area(store: &RedbStore, session: &str, marker: &str) {
    use cra_carp::store::{CarpStore, Charge, ChargeKind};
    use cra_store::AtlasCatalog;
    crate::encryption::write_everything(store, session, marker);
    let mut waiting = cra_carp::store_contract::sample_approval("ap-waiting");
    waiting.session_id = session.to_owned();
    store.create_approval(&waiting).unwrap();
    let charges = [
        Charge {
            policy_id: RATE.into(),
            scope_key: "global".into(),
            kind: ChargeKind::Rate {
                max_calls: 10,
                window_seconds: 60,
            },
        },
        Charge {
            policy_id: BUDGET.into(),
            scope_key: "global".into(),
            kind: ChargeKind::Budget {
                max_units: 100,
                units: 7,
            },
        },
    ];
    store.try_consume(&charges, 1_772_366_400_000_000).unwrap();
    let entry = cra_store::catalog::CatalogEntry {
        atlas_id: "dev.cra.moved".into(),
        version: "1.0.0".into(),
        digest: "sha256:moved".into(),
        signature: None,
    };
    let files =
        std::collections::BTreeMap::from([("atlas.json".to_owned(), marker.as_bytes().to_vec())]);
    let given = std::collections::BTreeMap::from([(entry.digest.clone(), &files)]);
    store
        .commit(&cra_store::catalog::CatalogChange {
            after: None,
            members: &[entry],
            files: &given,
            actor: "tester",
            reason: "install",
            recorded: true,
        })
        .unwrap();
}

/// The cross-backend restore (`specs/backup.md`, "Across backends"): a redb archive of the
/// `fda2190` data directory, upgraded and then given every kind of record under a storage key,
/// counters, a catalog, a log of over two full tiles holding the leaves of a removed chain, and
/// a signed checkpoint, restores onto PostgreSQL. There every area reads
/// back as the source holds it (chains event by event, the log's leaves, root and checkpoint,
/// CARP records and counts, the catalog, Relay), no record is stored in the clear, and the
/// restored store goes on: an append extends the same log.
#[test]
fn a_redb_archive_restores_onto_postgres_and_every_area_reads_back() {
    let Some(url) = postgres_url("a_redb_archive_restores_onto_postgres") else {
        return;
    };
    let enc = cra_store::Encryption::new(crate::encryption::key(), Vec::new());
    let config = fixed().1.with_encryption(enc);
    let (dir, data) = fda2190_data_dir();
    let store = RedbStore::open_with(&data, config.clone()).unwrap();
    let relay = RedbRelay::open(&store).unwrap();
    let secret = format!("mk{:016x}", rand::random::<u64>());
    eprintln!("marker {secret}");
    let session = "0196b5a0-0000-7000-8000-0000000000aa";
    add_every_area(&store, session, &secret);
    // Past two full tiles, appended to chains in turn, so the leaves of a chain are not
    // contiguous; then an ended chain removed, as retention does: its leaves stay in the log.
    for n in 0..420u64 {
        let chain = format!("0196b5a0-0000-7000-8000-0000000001{:02x}", n % 3);
        let note = crate::backends::draft("session.note", serde_json::json!({"n": n}));
        store.append(&chain, vec![note]).unwrap();
    }
    let ended = store
        .sessions()
        .unwrap()
        .into_iter()
        .find(|s| s.ended)
        .unwrap();
    let removal: &dyn cra_store::retention::SessionRemoval = &store;
    assert!(
        removal
            .remove_session(&ended.session_id, &ended.head)
            .unwrap()
    );
    checkpoint(&store);
    let archive = dir.path().join("cra.backup");
    let manifest =
        cra_store::backup::redb::backup_store(&store, &archive, NOW, &mut |_, _| {}).unwrap();

    let target = TestSchema::new(&url, "backup_moved");
    let opened = Archive::open(&archive).unwrap();
    let verified =
        cra_store::backup::pg::restore(&opened, &url, target.name(), config.clone(), &mut |_| {})
            .unwrap();
    assert_eq!(
        (verified.chains, verified.checkpoints),
        (manifest.chains, 1)
    );
    assert_eq!(verified.log_size, manifest.log_size);
    assert!(manifest.log_size > 512, "{manifest:?}");
    assert!(!cra_store::backup::transfer::staging_path(&archive).exists());
    let restored = target.store(config.clone()).unwrap();
    let restored_relay = PgRelay::new(restored.clone());
    assert_same(&contents(&restored), &contents(&store));
    check_same(
        (&store, &relay),
        (&restored, &restored_relay, &restored),
        &manifest,
    );
    assert_eq!(restored_relay.outbox().unwrap(), relay.outbox().unwrap());
    crate::encryption::read_everything(&restored, session, &secret);
    assert!(
        !cra_store::testing::rows_hold(&url, target.name(), &secret),
        "a record moved in the clear"
    );

    // The moved store goes on where the source stopped: an append is the log's next leaf.
    let more = crate::backends::draft("session.note", serde_json::json!({"after": "move"}));
    let sealed = restored.append(session, vec![more]).unwrap();
    let hash = cra_tlog::hash::from_hex(&sealed[0].event_hash).unwrap();
    let place = restored.leaf_place(&hash).unwrap().unwrap();
    assert_eq!(place.leaf_index, manifest.log_size);

    // Never into a schema holding tables.
    let again = cra_store::backup::pg::restore(&opened, &url, target.name(), config, &mut |_| {});
    assert!(
        matches!(again, Err(BackupError::SchemaInUse(_))),
        "{again:?}"
    );
    drop((store, restored));
}

/// The invariant "a refusal never half-applies", for the move onto PostgreSQL: an archive whose
/// records a storage key encrypted, restored without that key, is refused before anything is
/// written (no table in the schema, no staging directory left beside the archive); a staging
/// directory a crashed restore left there is cleared, and the next restore goes through.
#[test]
fn a_refused_move_leaves_nothing_and_a_crashed_one_is_cleared() {
    let Some(url) = postgres_url("a_refused_move_leaves_nothing") else {
        return;
    };
    let enc = cra_store::Encryption::new(crate::encryption::key(), Vec::new());
    let keyed = fixed().1.with_encryption(enc);
    let (dir, data) = fda2190_data_dir();
    let store = RedbStore::open_with(&data, keyed.clone()).unwrap();
    crate::encryption::write_everything(&store, "0196b5a0-0000-7000-8000-0000000000bb", "mk-x");
    let archive = dir.path().join("cra.backup");
    cra_store::backup::redb::backup_store(&store, &archive, NOW, &mut |_, _| {}).unwrap();
    drop(store);
    let opened = Archive::open(&archive).unwrap();
    let staging = cra_store::backup::transfer::staging_path(&archive);
    let target = TestSchema::new(&url, "backup_move_refused");

    let err = cra_store::backup::pg::restore(&opened, &url, target.name(), fixed().1, &mut |_| {})
        .unwrap_err();
    assert!(matches!(err, BackupError::Store(_)), "{err}");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&target.name()],
        )
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a refused move wrote tables");
    assert!(
        !staging.exists(),
        "a refused move left its staging directory"
    );

    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("cra.redb"), b"left by a crash").unwrap();
    let verified =
        cra_store::backup::pg::restore(&opened, &url, target.name(), keyed, &mut |_| {}).unwrap();
    assert_eq!(verified.chains, opened.manifest.chains);
    assert!(!staging.exists());
}

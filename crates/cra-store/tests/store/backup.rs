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
    assert_eq!(manifest.store_format, "data format 2");
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
    // A redb archive is not restored onto PostgreSQL.
    if let Some(url) = postgres_url("an_archive_cut_short_or_changed_is_refused") {
        let schema = TestSchema::new(&url, "backup_cross");
        let opened = Archive::open(&archive).unwrap();
        let err =
            cra_store::backup::pg::restore(&opened, &url, schema.name(), fixed().1, &mut |_| {})
                .unwrap_err();
        assert!(matches!(err, BackupError::Backend { .. }), "{err}");
    }
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

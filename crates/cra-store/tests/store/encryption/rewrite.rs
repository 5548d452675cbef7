//! A data directory's database rewritten into a fresh file (`cra_store::redb::rewrite`): after
//! re-encryption the old file still holds the replaced plaintext in freed pages and the new one
//! holds it nowhere, with every record, chain and log leaf kept; a table the rewrite does not
//! know is refused with nothing changed; a partial rewrite left by a crash is replaced, and a
//! refused one leaves none; a held directory is refused.

use cra_store::redb::rewrite::{REWRITE_FILE, rewrite};
use cra_store::testing::files_hold;
use cra_store::tlog::LogStore;
use cra_store::{BackendError, Encryption, RedbStore};

use super::{Place, key, marker, read_everything, write_everything};
use crate::backends::fixed;

/// A table no area of this version names, as a newer cra might add.
const FUTURE: redb::TableDefinition<'_, &str, u64> = redb::TableDefinition::new("future_table");

/// Writes every kind of record of session `s` with `marker`, and a row in [`FUTURE`], then
/// closes the store.
fn written_with_a_future_table(dir: &std::path::Path, marker: &str) {
    let store = open(dir, Encryption::plaintext());
    write_everything(&store, "s", marker);
    let txn = store.handle().begin_write().unwrap();
    txn.open_table(FUTURE).unwrap().insert("kept", 7).unwrap();
    txn.commit().unwrap();
}

/// Sessions written by the first test.
const SESSIONS: u64 = 20;

fn open(dir: &std::path::Path, enc: Encryption) -> RedbStore {
    RedbStore::open_with(dir, fixed().1.with_encryption(enc)).unwrap()
}

/// Invariant: re-encryption and then a rewrite leave no byte of a record's old plaintext in the
/// data directory, and the rewritten store reads every record, verifies every chain and keeps
/// every leaf of the log.
#[test]
fn a_plaintext_store_reencrypted_then_rewritten_holds_the_plaintext_nowhere() {
    let place = Place::Dir(tempfile::tempdir().unwrap());
    let Place::Dir(tmp) = &place else {
        unreachable!()
    };
    let dir = tmp.path().join("data");
    let m = marker();
    let plain = open(&dir, Encryption::plaintext());
    // Several sessions: with one, this test found no stale plaintext after re-encryption (redb
    // had reused or cut off the freed pages); with several, freed pages stay inside the file.
    for i in 0..SESSIONS {
        write_everything(&plain, &format!("s{i}"), &m);
    }
    drop(plain);
    let k = key();
    let store = open(&dir, Encryption::new(k.clone(), Vec::new()));
    let size = store.log_size().unwrap();
    assert!(size >= 2, "the events are logged");
    store.reencrypt(&mut |_, _| {}).unwrap();
    drop(store);
    // What the rewrite is for: redb frees the replaced pages without clearing them.
    assert!(
        place.holds(&m),
        "re-encryption alone left no plaintext: redb now clears freed pages, and the rewrite's \
         reason (specs/storage-encryption.md) should say so"
    );

    let mut told = Vec::new();
    let report = rewrite(&dir, &mut |t, n| told.push((t.to_owned(), n))).unwrap();
    assert!(!place.holds(&m), "the rewritten directory holds the marker");
    assert!(!dir.join(REWRITE_FILE).exists());
    assert!(
        report.bytes_after > 0 && report.bytes_before > 0,
        "{report:?}"
    );
    assert_eq!(report.records("trace_events"), Some(SESSIONS), "{report:?}");
    assert!(told.iter().any(|(t, _)| t == "carp_approvals"), "{told:?}");

    let store = open(&dir, Encryption::new(k, Vec::new()));
    for i in 0..SESSIONS {
        read_everything(&store, &format!("s{i}"), &m);
    }
    assert_eq!(store.log_size().unwrap(), size);
    // The plaintext control: without a key the rewritten records do not open.
    drop(store);
    assert!(RedbStore::open_with(&dir, fixed().1).is_err());
}

/// Invariant: a rewrite never drops data: a table that no area of this version names is refused
/// before anything is written, and the database is left as it was.
#[test]
fn a_rewrite_refuses_a_table_it_does_not_know_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let m = marker();
    written_with_a_future_table(&dir, &m);

    let refused = rewrite(&dir, &mut |_, _| {}).unwrap_err();
    let text = refused.to_string();
    assert!(
        text.contains("future_table") && text.contains("nothing was rewritten"),
        "{text}"
    );
    assert!(!dir.join(REWRITE_FILE).exists());
    let store = open(&dir, Encryption::plaintext());
    read_everything(&store, "s", &m);
    let txn = store.handle().begin_read().unwrap();
    let kept = txn.open_table(FUTURE).unwrap().get("kept").unwrap();
    assert_eq!(kept.map(|v| v.value()), Some(7));
}

/// Invariant: a rewrite that fails leaves no partial file behind: one a crash left before is
/// removed by a refused rewrite too, and the database is left as it was.
#[test]
fn a_refused_rewrite_leaves_no_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let m = marker();
    written_with_a_future_table(&dir, &m);
    std::fs::write(dir.join(REWRITE_FILE), b"half a database").unwrap();

    rewrite(&dir, &mut |_, _| {}).unwrap_err();
    assert!(!dir.join(REWRITE_FILE).exists());
    read_everything(&open(&dir, Encryption::plaintext()), "s", &m);
}

/// Invariant: the old file is replaced only by a whole new one, so a rewrite that a crash cut
/// short leaves a partial file that the next rewrite replaces.
#[test]
fn a_rewrite_replaces_the_partial_file_a_crash_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let m = marker();
    write_everything(&open(&dir, Encryption::plaintext()), "s", &m);
    std::fs::write(dir.join(REWRITE_FILE), b"half a database").unwrap();
    rewrite(&dir, &mut |_, _| {}).unwrap();
    assert!(!dir.join(REWRITE_FILE).exists());
    read_everything(&open(&dir, Encryption::plaintext()), "s", &m);
}

#[test]
fn a_rewrite_of_a_directory_a_process_holds_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let held = open(&dir, Encryption::plaintext());
    let refused = rewrite(&dir, &mut |_, _| {}).unwrap_err();
    assert!(matches!(refused, BackendError::InUse { .. }), "{refused}");
    drop(held);
    assert!(!files_hold(&dir, "half"), "nothing was written");
    rewrite(&dir, &mut |_, _| {}).unwrap();
}

/// Every table cra itself writes is one the rewrite knows: the disk-full health probe's
/// (`RedbStore::check_writable` writes `cra_write_probe` after a failed write) and the data
/// format's are copied, not refused as a newer cra's (the probe's once was).
#[test]
fn a_rewrite_copies_the_tables_the_health_probe_and_the_format_wrote() {
    const PROBE: redb::TableDefinition<'_, &str, &str> =
        redb::TableDefinition::new("cra_write_probe");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let store = open(&dir, Encryption::plaintext());
        cra_store::relay::RedbRelay::open(&store).unwrap();
        let txn = store.handle().begin_write().unwrap();
        txn.open_table(PROBE)
            .unwrap()
            .insert("probe", "2026-03-01T12:00:00Z")
            .unwrap();
        txn.commit().unwrap();
    }
    let report = rewrite(&dir, &mut |_, _| {}).unwrap();
    assert_eq!(report.records("cra_write_probe"), Some(1), "{report:?}");
    assert_eq!(report.records("cra_format"), Some(1), "{report:?}");
    let plan = cra_store::redb::upgrade::plan(&dir).unwrap();
    assert!(plan.is_current(), "{plan:#?}");
}

//! Backups of a data directory's database: every table, as one read transaction sees it, copied
//! into a fresh database file that becomes the archive's one data entry. A stopped directory is
//! read through a read-only open ([`backup_dir`]); a running server's store through its own
//! handle ([`backup_store`]), while it goes on writing.

use std::path::{Path, PathBuf};

use ::redb::{ReadTransaction, ReadableDatabase};

use super::archive::{Archive, Writer, partial_path};
use super::{BackupError, FORMAT, Manifest, Verified, keys_not_included, verify_store};
use crate::StoreConfig;
use crate::redb::{DATABASE_FILE, RedbStore, backend, rewrite, upgrade};

/// The archive entry holding the database file.
pub const DATABASE_ENTRY: &str = "redb/cra.redb";

/// The directory a restore builds the store in, inside the target, before it moves the file.
const STAGING: &str = ".cra-restore";

/// Backs up the data directory `dir` of a stopped server into the new archive `out`, reading it
/// without writing. `created_at` is the time to record; `progress` is told each table's name
/// and the records copied so far.
pub fn backup_dir(
    dir: &Path,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    let db = upgrade::open_read_only(dir)?;
    let txn = db.begin_read().map_err(backend)?;
    backup_txn(&txn, out, created_at, progress)
}

/// Backs up the open store `store` (a running server's) into the new archive `out`: the view of
/// one read transaction, taken while writers go on.
pub fn backup_store(
    store: &RedbStore,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    let txn = store.handle().begin_read().map_err(backend)?;
    backup_txn(&txn, out, created_at, progress)
}

/// The snapshot file built beside the archive before it goes in.
fn snapshot_path(out: &Path) -> PathBuf {
    let mut name = partial_path(out).into_os_string();
    name.push(".redb");
    PathBuf::from(name)
}

fn backup_txn(
    txn: &ReadTransaction,
    out: &Path,
    created_at: &str,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Manifest, BackupError> {
    let mut writer = Writer::create(out)?;
    let snapshot = snapshot_path(out);
    let written = (|| {
        rewrite::snapshot(txn, &snapshot, progress)?;
        let manifest = Manifest {
            format: FORMAT.to_owned(),
            backend: "redb".to_owned(),
            created_at: created_at.to_owned(),
            cra_version: env!("CARGO_PKG_VERSION").to_owned(),
            store_format: upgrade::recorded_text(txn)?,
            chains: upgrade::rows(txn, crate::redb::trace::HEADS)?,
            log_size: crate::redb::tlog::size_read(txn)?,
            not_included: keys_not_included(),
            entries: Vec::new(),
        };
        writer.add_file(DATABASE_ENTRY, &snapshot)?;
        writer.finish(manifest)
    })();
    let _ = rewrite::remove_if_present(&snapshot);
    written
}

/// Restores the redb archive `archive` into the data directory `dir`, which must hold no
/// database: the file is built and verified in `dir/.cra-restore` (opening it upgrades it when an
/// earlier cra wrote it) and moved into place only once every chain and checkpoint verifies.
pub fn restore(
    archive: &Archive,
    dir: &Path,
    config: StoreConfig,
    progress: &mut dyn FnMut(u64),
) -> Result<Verified, BackupError> {
    archive.manifest.require_backend("redb")?;
    let target = dir.join(DATABASE_FILE);
    if target.exists() {
        return Err(BackupError::Exists(target));
    }
    let staging = dir.join(STAGING);
    super::fresh_staging(&staging)?;
    let staged = staging.join(DATABASE_FILE);
    let verified = archive
        .extract(DATABASE_ENTRY, &staged)
        .and_then(|()| verify_staged(&staging, config, archive, progress));
    if verified.is_ok() {
        std::fs::rename(&staged, &target).map_err(|e| rewrite::io(&target, &e))?;
        rewrite::sync_dir(dir)?;
    }
    let _ = std::fs::remove_dir_all(&staging);
    verified
}

/// Opens the staged store (and Relay's tables, as a server's start does) and verifies it.
fn verify_staged(
    staging: &Path,
    config: StoreConfig,
    archive: &Archive,
    progress: &mut dyn FnMut(u64),
) -> Result<Verified, BackupError> {
    let store = RedbStore::open_with(staging, config)?;
    crate::relay::RedbRelay::open(&store).map_err(|e| BackupError::Verify(e.to_string()))?;
    let verified = verify_store(&store, &store, progress)?;
    super::check_counts(&archive.manifest, &verified)?;
    Ok(verified)
}

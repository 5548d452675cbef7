//! A data directory's database rewritten into a fresh file ([`rewrite`]).
//!
//! redb copies a page when it changes it and frees the old copy, which stays in the file until
//! the space is used again. So after [`RedbStore::reencrypt`](super::RedbStore::reencrypt) the
//! file can still hold the plaintext (or a retired key's ciphertext) of every record it replaced,
//! and after retention the records it removed. A rewrite copies every table into a new file beside
//! the old one, `cra.redb.rewrite`, which then replaces it: the new file holds only what the
//! tables hold.
//!
//! Invariants:
//! - **Nothing is lost.** A table this version of cra does not know is refused before anything
//!   is written, and every table's length is compared between the two files before the rename.
//! - **The old file stays until the new one is whole and durable**: a failed copy removes its
//!   partial `cra.redb.rewrite`, and a crash before the rename leaves the old file as it was
//!   and a partial one, which the next rewrite replaces; the rename is atomic and the
//!   directory is synced after it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ::redb::{
    Database, Durability, Key, MultimapTableHandle, ReadTransaction, ReadableDatabase,
    ReadableTable, ReadableTableMetadata, TableDefinition, TableError, TableHandle, Value,
};

use super::{DATABASE_FILE, backend, open_error};
use crate::BackendError;

/// The file a rewrite builds before it replaces the database.
pub const REWRITE_FILE: &str = "cra.redb.rewrite";

/// Records copied per write transaction of the new file.
const CHUNK: u64 = 4_096;

/// What a rewrite did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RewriteReport {
    /// Each table copied and its records.
    pub tables: Vec<(String, u64)>,
    /// The database file's size before, in bytes.
    pub bytes_before: u64,
    /// Its size after.
    pub bytes_after: u64,
}

impl RewriteReport {
    /// The records copied in `table`; `None` when the old file had no such table.
    pub fn records(&self, table: &str) -> Option<u64> {
        self.tables
            .iter()
            .find(|(t, _)| t == table)
            .map(|(_, n)| *n)
    }
}

/// Rewrites the database of the data directory `dir` (no server may hold it) into a fresh file
/// that replaces it. `progress` is told each table's name and the records copied so far.
///
/// # Errors
/// [`BackendError::InUse`] while a process holds the directory; [`BackendError::Backend`] for a
/// table this version does not know (nothing is changed), a copy whose length differs, or an I/O
/// error (the old file is left as it was).
pub fn rewrite(
    dir: &Path,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<RewriteReport, BackendError> {
    let file = dir.join(DATABASE_FILE);
    let fresh = dir.join(REWRITE_FILE);
    let bytes_before = file_size(&file)?;
    let tables = match copy_into(dir, &file, &fresh, progress) {
        Ok(tables) => tables,
        Err(e) => {
            // A failed copy leaves no partial file behind (a crash may; the next rewrite
            // replaces it).
            let _ = remove_if_present(&fresh);
            return Err(e);
        }
    };
    std::fs::rename(&fresh, &file).map_err(|e| io(&file, &e))?;
    sync_dir(dir)?;
    Ok(RewriteReport {
        tables,
        bytes_before,
        bytes_after: file_size(&file)?,
    })
}

/// Copies every table of `file` into a new database at `fresh`, made durable; answers each
/// table and its records.
fn copy_into(
    dir: &Path,
    file: &Path,
    fresh: &Path,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Vec<(String, u64)>, BackendError> {
    let source = Database::open(file).map_err(|e| open_error(dir, file, e))?;
    let from = source.begin_read().map_err(backend)?;
    snapshot(&from, fresh, progress)
}

/// Copies every table `from` reads into a new database file at `fresh` (replacing any file
/// there), made durable: the database as of `from`'s transaction, which writers may pass
/// meanwhile. Answers each table and its records. Refuses (writing nothing) a table this build
/// does not know.
pub(crate) fn snapshot(
    from: &ReadTransaction,
    fresh: &Path,
    progress: &mut dyn FnMut(&str, u64),
) -> Result<Vec<(String, u64)>, BackendError> {
    refuse_unknown(from)?;
    remove_if_present(fresh)?;
    let dir = fresh.parent().unwrap_or(Path::new("."));
    let target = Database::create(fresh).map_err(|e| open_error(dir, fresh, e))?;
    let mut copier = Copier::new(from, Some(&target), progress);
    every_table(&mut copier)?;
    // The copies were committed without syncing; this commit makes them durable together.
    let mut txn = target.begin_write().map_err(backend)?;
    txn.set_durability(Durability::Immediate).map_err(backend)?;
    txn.commit().map_err(backend)?;
    Ok(copier.copied)
}

/// Passes every table of the database to `copier`: each area names its own.
fn every_table(copier: &mut Copier<'_>) -> Result<(), BackendError> {
    super::trace::copy_tables(copier)?;
    super::carp::copy_tables(copier)?;
    super::catalog::copy_tables(copier)?;
    super::tlog::copy_tables(copier)?;
    super::keys::copy_tables(copier)?;
    super::upgrade::copy_tables(copier)?;
    // Written by a health probe after a failed write (`RedbStore::check_writable`).
    copier.copy(super::WRITE_PROBE)?;
    crate::relay::redb::copy_tables(copier)
}

/// The name of every table this build keeps (whether or not `from` has it).
pub(crate) fn known_tables(from: &ReadTransaction) -> Result<BTreeSet<String>, BackendError> {
    let mut quiet = |_: &str, _: u64| {};
    let mut names = Copier::new(from, None, &mut quiet);
    every_table(&mut names)?;
    Ok(names.known)
}

/// Refuses a database holding a table no area names (a newer cra's, or a multimap table): a
/// rewrite would drop it.
fn refuse_unknown(from: &ReadTransaction) -> Result<(), BackendError> {
    let known = known_tables(from)?;
    let mut unknown: Vec<String> = from
        .list_tables()
        .map_err(backend)?
        .map(|t| t.name().to_owned())
        .filter(|name| !known.contains(name))
        .collect();
    unknown.extend(
        from.list_multimap_tables()
            .map_err(backend)?
            .map(|t| t.name().to_owned()),
    );
    if unknown.is_empty() {
        return Ok(());
    }
    Err(backend(format!(
        "the database holds tables this version of cra does not know ({}); nothing was \
         rewritten: rewrite it with the cra that wrote them",
        unknown.join(", ")
    )))
}

/// Copies tables from a read transaction of the old file into the new one; with no target, only
/// learns their names.
pub(crate) struct Copier<'a> {
    from: &'a ReadTransaction,
    to: Option<&'a Database>,
    known: BTreeSet<String>,
    copied: Vec<(String, u64)>,
    progress: &'a mut dyn FnMut(&str, u64),
}

impl<'a> Copier<'a> {
    fn new(
        from: &'a ReadTransaction,
        to: Option<&'a Database>,
        progress: &'a mut dyn FnMut(&str, u64),
    ) -> Self {
        Self {
            from,
            to,
            known: BTreeSet::new(),
            copied: Vec::new(),
            progress,
        }
    }

    /// Copies `table` (nothing when the old file never created it), `CHUNK` records per write
    /// transaction, then checks that the copy is as long as the original.
    pub(crate) fn copy<K: Key + 'static, V: Value + 'static>(
        &mut self,
        table: TableDefinition<'_, K, V>,
    ) -> Result<(), BackendError> {
        let name = table.name().to_owned();
        self.known.insert(name.clone());
        let Some(to) = self.to else {
            return Ok(());
        };
        let source = match self.from.open_table(table) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(backend(e)),
        };
        let mut rows = source.iter().map_err(backend)?;
        let mut copied = 0u64;
        loop {
            let mut txn = to.begin_write().map_err(backend)?;
            txn.set_durability(Durability::None).map_err(backend)?;
            let mut more = false;
            {
                let mut t = txn.open_table(table).map_err(backend)?;
                for row in rows.by_ref() {
                    let (k, v) = row.map_err(backend)?;
                    t.insert(k.value(), v.value()).map_err(backend)?;
                    copied += 1;
                    if copied.is_multiple_of(CHUNK) {
                        more = true;
                        break;
                    }
                }
            }
            txn.commit().map_err(backend)?;
            (self.progress)(&name, copied);
            if !more {
                break;
            }
        }
        let written = to
            .begin_read()
            .map_err(backend)?
            .open_table(table)
            .map_err(backend)?
            .len()
            .map_err(backend)?;
        let read = source.len().map_err(backend)?;
        if written != read || copied != read {
            return Err(backend(format!(
                "table {name}: {read} records, of which {copied} were read and {written} written; \
                 the old file is left as it was"
            )));
        }
        self.copied.push((name, copied));
        Ok(())
    }
}

fn file_size(file: &Path) -> Result<u64, BackendError> {
    std::fs::metadata(file)
        .map(|m| m.len())
        .map_err(|e| io(file, &e))
}

pub(crate) fn remove_if_present(file: &Path) -> Result<(), BackendError> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(file, &e)),
        _ => Ok(()),
    }
}

/// Makes a rename in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), BackendError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, &e))
}

pub(crate) fn io(path: &Path, e: &std::io::Error) -> BackendError {
    BackendError::DataDir {
        path: PathBuf::from(path),
        reason: e.to_string(),
    }
}

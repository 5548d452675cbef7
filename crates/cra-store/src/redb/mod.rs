//! The embedded backend: one data directory holding one redb database file, `cra.redb`, shared by
//! every area (TRACE chains here, CARP state in `carp.rs`, the atlas catalog in `catalog.rs`, the
//! transparency log in `tlog.rs`, the storage keys that encrypted the records in `keys.rs`, Relay
//! in `src/relay/`).
//!
//! redb lets one process open the file at a time; a second open fails with
//! [`BackendError::InUse`], naming the holder recorded in the directory's `owner` file.

pub(crate) mod carp;
pub(crate) mod catalog;
pub mod handle;
mod heads;
mod keys;
pub mod record;
pub mod rewrite;
pub(crate) mod tlog;
pub(crate) mod trace;
pub mod upgrade;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::redb::{Database, DatabaseError};

pub use handle::DatabaseHandle;

use crate::{BackendError, StoreConfig};

use crate::collector::Collector;

/// The space a data directory's file system must have available for
/// [`RedbStore::check_writable`] to call the store writable (4 MiB: a few of redb's allocations).
pub const MIN_FREE_BYTES: u64 = 4 * 1024 * 1024;

/// The table [`RedbStore::check_writable`] writes its probe to.
const WRITE_PROBE: ::redb::TableDefinition<'static, &str, &str> =
    ::redb::TableDefinition::new("cra_write_probe");

/// The database file inside a data directory.
pub const DATABASE_FILE: &str = "cra.redb";
/// The file naming the process that holds the directory (informational; redb's lock is the guard).
pub const OWNER_FILE: &str = "owner";

/// The redb store of one data directory. Cloning is cheap and shares the database.
#[derive(Clone)]
pub struct RedbStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    db: Arc<DatabaseHandle>,
    config: StoreConfig,
    heads: heads::Heads,
    hash_index: tlog::HashIndex,
    edge_hashes: tlog::EdgeHashes,
    low_blocks: tlog::LowBlocks,
    collector: Collector<trace::Append>,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl RedbStore {
    /// Opens (creating if needed) the data directory `dir` with the system clock and UUIDv7 ids.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, BackendError> {
        Self::open_with(dir, StoreConfig::default())
    }

    /// Opens (creating if needed) the data directory `dir` with the given clock and ids.
    pub fn open_with(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Self, BackendError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| BackendError::DataDir {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        let file = dir.join(DATABASE_FILE);
        upgrade::admit_file(&dir, &file)?;
        let db = Database::builder()
            .set_cache_size(config.redb_cache_bytes)
            .create(&file)
            .map_err(|e| open_error(&dir, &file, e))?;
        upgrade::admit(&db, &dir)?;
        let owner = format!(
            "pid {} since {}",
            std::process::id(),
            cra_wire::clock::format_timestamp(config.clock.now())
        );
        std::fs::write(dir.join(OWNER_FILE), owner).map_err(|e| BackendError::DataDir {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        let db = Arc::new(db);
        trace::create_tables(&db)?;
        catalog::create_tables(&db)?;
        tlog::create_tables(&db, &config.encryption)?;
        keys::admit(&db, &config.encryption)?;
        // After the key is admitted: building the owner index of an older directory decodes
        // its session records.
        carp::create_tables(&db, &config.encryption)?;
        upgrade::record(&db)?;
        let db = Arc::new(DatabaseHandle::new(db, file, config.redb_cache_bytes));
        let collector = {
            let (db, config) = (db.clone(), config.clone());
            // One committer: redb runs one write transaction at a time anyway; appenders seal.
            let partial = Arc::new(tlog::PartialTile::default());
            Collector::start("cra-redb-commit", 1, move |batch| {
                trace::commit_batch(&db, &config, &partial, batch);
            })?
        };
        Ok(Self {
            inner: Arc::new(Inner {
                dir,
                db,
                config,
                heads: heads::Heads::default(),
                hash_index: tlog::HashIndex::default(),
                edge_hashes: tlog::EdgeHashes::default(),
                low_blocks: tlog::LowBlocks::default(),
                collector,
            }),
        })
    }

    /// What this store's committer has measured (`/metrics`).
    pub fn commit_stats(&self) -> Arc<crate::stats::CommitStats> {
        self.inner.collector.stats()
    }

    /// The shared database, for areas that keep their own tables in it: begin each transaction
    /// through it and keep no `Database` of your own, since it is reopened after a failed write
    /// ([`handle`]). redb serialises write transactions; keep them short.
    pub fn handle(&self) -> &Arc<DatabaseHandle> {
        &self.inner.db
    }

    /// Whether the store can write: `Err` with the reason while a failed write has not been
    /// followed by a successful one. A failed database is reopened here (so a health probe
    /// recovers it once the disk has room) and proves itself with one small durable write.
    ///
    /// Also `Err` while the file system holding the directory has less than
    /// [`MIN_FREE_BYTES`] available: the next write would likely fail, and a small probe write
    /// could still succeed, so space is what decides readiness on a full disk.
    pub fn check_writable(&self) -> Result<(), String> {
        let db = self.handle();
        match fs4::available_space(&self.inner.dir) {
            Ok(free) if free < MIN_FREE_BYTES => {
                return Err(format!(
                    "the file system holding {} has {free} bytes available, under the {} the \
                     store needs to accept writes: free some space; the store recovers by itself",
                    self.inner.dir.display(),
                    MIN_FREE_BYTES
                ));
            }
            _ => {}
        }
        if db.failure().is_none() {
            return Ok(());
        }
        db.reopen()?;
        let probe = || -> Result<(), String> {
            let mut txn = db.begin_write().map_err(|e| e.to_string())?;
            txn.set_durability(::redb::Durability::Immediate)
                .map_err(|e| e.to_string())?;
            txn.open_table(WRITE_PROBE)
                .map_err(|e| e.to_string())?
                .insert(
                    "probe",
                    cra_wire::clock::format_timestamp(self.config().clock.now()).as_str(),
                )
                .map_err(|e| e.to_string())?;
            txn.commit().map_err(|e| e.to_string())
        };
        match probe() {
            Ok(()) => {
                db.clear();
                Ok(())
            }
            Err(e) => {
                db.mark_failed(&e);
                Err(format!("the store cannot write: {e}"))
            }
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The clock and ids this store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    pub(crate) fn collector(&self) -> &Collector<trace::Append> {
        &self.inner.collector
    }

    pub(crate) fn heads(&self) -> &heads::Heads {
        &self.inner.heads
    }

    pub(crate) fn hash_index(&self) -> &tlog::HashIndex {
        &self.inner.hash_index
    }

    pub(crate) fn edge_hashes(&self) -> &tlog::EdgeHashes {
        &self.inner.edge_hashes
    }

    pub(crate) fn low_blocks(&self) -> &tlog::LowBlocks {
        &self.inner.low_blocks
    }
}

/// The error of opening `file` in the data directory `dir`: [`BackendError::InUse`], naming the
/// holder, when another process has it open.
pub(crate) fn open_error(dir: &Path, file: &Path, e: DatabaseError) -> BackendError {
    match e {
        DatabaseError::DatabaseAlreadyOpen => {
            let holder = std::fs::read_to_string(dir.join(OWNER_FILE))
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "holder unknown".to_owned());
            BackendError::InUse {
                path: dir.to_path_buf(),
                holder,
            }
        }
        e => BackendError::Redb {
            path: file.to_path_buf(),
            reason: e.to_string(),
        },
    }
}

/// Turns any redb error into a [`BackendError::Backend`].
pub(crate) fn backend(e: impl std::fmt::Display) -> BackendError {
    BackendError::Backend(format!("redb: {e}"))
}

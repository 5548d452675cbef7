//! The database of a data directory as every area reaches it, and its reopening after a write
//! failed (a full disk).
//!
//! redb refuses every transaction once a write to its file has failed (`PreviousIo`), even after
//! space is freed: only a new `Database` recovers, and opening one needs the old one gone (the
//! file is locked while any handle or transaction is alive). So no area keeps a `Database` of
//! its own: each transaction begins through the [`DatabaseHandle`]. A commit of the committer
//! that fails, or a transaction refused for an I/O error, marks it failed; the next transaction
//! begun through it, the next batch of appends and the health probe
//! ([`crate::RedbStore::check_writable`]) then swap in a freshly opened database
//! ([`DatabaseHandle::reopen`]). The store reports not ready until a write succeeds again, and
//! recovers without a restart once the disk has room.
//!
//! Invariant: every commit that returned `Ok` is durable (appends commit with
//! `Durability::Immediate`; state written with `Durability::None` is made durable by the next
//! append, before anything about it is answered), so a reopened database holds every
//! acknowledged write, and what a failed commit held was never acknowledged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ::redb::{
    Database, DatabaseError, ReadTransaction, ReadableDatabase, StorageError, TransactionError,
};

/// How long the committer and the health probe wait, reopening, for the transactions still
/// holding the old database's file (a transaction begun meanwhile tries once, without waiting).
const REOPEN_WAIT: Duration = Duration::from_secs(5);

/// Where the handle stands after a failed write.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// No write has failed since the last one that succeeded.
    Healthy,
    /// A write failed (the reason): the database must be reopened.
    Failed(String),
    /// Reopened after the failure (its reason), not yet proven by a successful write.
    Reopened(String),
}

/// The database of a data directory, reopened after a failed write (see the module doc).
pub struct DatabaseHandle {
    file: PathBuf,
    cache_bytes: usize,
    /// `None` only after a reopen could not open the file again.
    db: RwLock<Option<Arc<Database>>>,
    standing: Mutex<Standing>,
}

impl std::fmt::Debug for DatabaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseHandle")
            .field("file", &self.file)
            .field("failure", &self.failure())
            .finish_non_exhaustive()
    }
}

/// The error of a transaction begun while the database could not be reopened.
fn closed(reason: &str) -> TransactionError {
    TransactionError::Storage(StorageError::Io(std::io::Error::other(format!(
        "the store is closed after a failed write ({reason}); it reopens once the disk has room"
    ))))
}

/// Whether `e` says the file could not be written or read (now or in an earlier transaction).
fn is_io(e: &TransactionError) -> bool {
    matches!(
        e,
        TransactionError::Storage(StorageError::Io(_) | StorageError::PreviousIo)
    )
}

impl DatabaseHandle {
    pub(crate) fn new(db: Arc<Database>, file: PathBuf, cache_bytes: usize) -> Self {
        Self {
            file,
            cache_bytes,
            db: RwLock::new(Some(db)),
            standing: Mutex::new(Standing::Healthy),
        }
    }

    fn standing(&self) -> std::sync::MutexGuard<'_, Standing> {
        self.standing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The database as it is now (reopened first if a write failed), for a caller that needs it
    /// whole.
    pub fn get(&self) -> Result<Arc<Database>, TransactionError> {
        // A failure the reopen cannot mend yet leaves the slot empty: answered just below.
        let _ = self.reopen_within(Duration::ZERO);
        let slot = self.db.read().unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some(db) => Ok(db.clone()),
            None => Err(closed(self.failure().as_deref().unwrap_or("unknown"))),
        }
    }

    /// Begins a read transaction.
    pub fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        self.get()?.begin_read().inspect_err(|e| self.note(e))
    }

    /// Begins a write transaction.
    pub fn begin_write(&self) -> Result<::redb::WriteTransaction, TransactionError> {
        self.get()?.begin_write().inspect_err(|e| self.note(e))
    }

    /// A transaction refused for an I/O error marks the database failed.
    fn note(&self, e: &TransactionError) {
        if is_io(e) {
            self.mark_failed(&e.to_string());
        }
    }

    /// Records that a write failed with `reason`: the database is reopened before the next
    /// transaction, and the store reports not ready until a write succeeds again.
    pub(crate) fn mark_failed(&self, reason: &str) {
        let mut standing = self.standing();
        if !matches!(*standing, Standing::Failed(_)) {
            *standing = Standing::Failed(reason.to_owned());
        }
    }

    /// The write failure not yet followed by a successful write, if any.
    pub fn failure(&self) -> Option<String> {
        match &*self.standing() {
            Standing::Healthy => None,
            Standing::Failed(r) | Standing::Reopened(r) => Some(r.clone()),
        }
    }

    /// Replaces a failed database with a freshly opened one (redb repairs the file as it opens
    /// it), waiting up to 5 s for transactions still using the old one; does
    /// nothing unless a write failed and the database has not been reopened since.
    pub fn reopen(&self) -> Result<(), String> {
        self.reopen_within(REOPEN_WAIT)
    }

    fn reopen_within(&self, wait: Duration) -> Result<(), String> {
        // The committer asks before every batch: a healthy database costs it no write lock.
        if !matches!(*self.standing(), Standing::Failed(_)) {
            return Ok(());
        }
        let mut slot = self.db.write().unwrap_or_else(PoisonError::into_inner);
        // Asked again under the lock: another caller may have reopened it meanwhile.
        let reason = match &*self.standing() {
            Standing::Failed(r) => r.clone(),
            Standing::Healthy | Standing::Reopened(_) => return Ok(()),
        };
        drop(slot.take());
        let started = Instant::now();
        loop {
            let opened = Database::builder()
                .set_cache_size(self.cache_bytes)
                .create(&self.file);
            match opened {
                Ok(db) => {
                    *slot = Some(Arc::new(db));
                    *self.standing() = Standing::Reopened(reason);
                    return Ok(());
                }
                Err(DatabaseError::DatabaseAlreadyOpen) if started.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("cannot reopen {}: {e}", self.file.display())),
            }
        }
    }

    /// Forgets the failure: a write has succeeded since.
    pub(crate) fn clear(&self) {
        *self.standing() = Standing::Healthy;
    }
}

//! The storage trait Relay needs ([`RelayStore`]): synchronous, object-safe, `Send + Sync`, used
//! as `Arc<dyn RelayStore>`. `cra-store` implements it for redb and PostgreSQL. Every method that
//! changes more than one row is one transaction in the implementation.
//!
//! `memory::MemoryStore` exists only for unit tests (`cfg(test)` or the `test-support`
//! feature); the product never uses it.

#[cfg(any(test, feature = "test-support"))]
pub mod memory;

use std::fmt;
use std::sync::Arc;

use crate::fact::{FactQuery, FactRecord, NewFact, SupersessionError};
use crate::model::{Project, ReviewRecord, Session, Status, StoredPackage};

/// What a store could not do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RelayStoreError {
    /// A record with this key exists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// No record with this key.
    #[error("{0} was not found")]
    NotFound(String),
    /// A compare-and-swap saw a different version than expected (a concurrent writer won).
    #[error("{0} was changed concurrently; read it again and retry")]
    Conflict(String),
    /// A fact supersession that would make an interval end before it starts.
    #[error(transparent)]
    Supersession(#[from] SupersessionError),
    /// This backend has no search index.
    #[error("this store has no search capability")]
    SearchUnsupported,
    /// The backend failed (I/O, database, corrupt record); nothing was changed.
    #[error("storage failure: {0}")]
    Backend(String),
}

/// The result of an insert-if-absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// The package was new and is now stored.
    Inserted,
    /// A package with this id already exists (returned as stored).
    Existing(StoredPackage),
}

/// Which packages of a project a listing wants (always newest deposit first).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PackageFilter {
    /// Only packages in this status.
    pub status: Option<Status>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Include packages quarantined after a failed verification.
    pub include_quarantined: bool,
    /// Only packages whose `created_at` is at or after this instant, given as a [`created_key`]
    /// (orient's and orchestrate's window). A package whose `created_at` does not parse is
    /// never admitted. Backends answer it from an index of the keys, so a windowed listing
    /// reads the window, not the project.
    pub created_since: Option<String>,
}

impl PackageFilter {
    /// True when `p` passes the status, quarantine and creation-time filters.
    pub fn admits(&self, p: &StoredPackage) -> bool {
        (self.include_quarantined || p.quarantined.is_none())
            && self.status.is_none_or(|s| p.package.status() == s)
            && self.created_since.as_deref().is_none_or(|since| {
                created_key(p.package.created_at()).is_some_and(|k| k.as_str() >= since)
            })
    }
}

/// The index key of a package's `created_at`: its UTC instant as fixed-width text,
/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` (nine fractional digits), so that text order is time order
/// whatever form the package stated (`Z` or `+00:00`, any number of fractional digits). `None`
/// when the text is not an RFC 3339 timestamp. Stores index packages by this key.
pub fn created_key(created_at: &str) -> Option<String> {
    cra_wire::clock::parse_rfc3339(created_at)
        .ok()
        .map(instant_key)
}

/// The [`created_key`] of an instant (for the lower bound of a window).
pub fn instant_key(t: time::OffsetDateTime) -> String {
    cra_wire::clock::format_timestamp_nanos(t)
}

/// A windowed listing ([`PackageFilter::created_since`]) for a backend that can walk a project's
/// deposits newest first and, separately, the keys of its creation-time index from the window's
/// start. It walks both in lockstep and answers from whichever ends first, so it reads about
/// min(deposits newer than the `limit`-th admitted one, packages in the window) rows:
///
/// - `by_deposit`: the project's packages, newest deposit first, loaded lazily. When it ends, or
///   has yielded `limit` packages that `filter` admits, those are the answer. Without a limit it
///   is not walked.
/// - `window`: (deposit sequence, handle) of every package of the project whose key is at or
///   after `created_since`, in any order. When it ends, the handles are sorted newest deposit
///   first and loaded by `load` (a handle whose package is gone yields `None`) until `limit`
///   admitted packages are found.
pub fn list_window<H, E>(
    filter: &PackageFilter,
    by_deposit: impl Iterator<Item = Result<StoredPackage, E>>,
    window: impl Iterator<Item = Result<(u64, H), E>>,
    mut load: impl FnMut(H) -> Result<Option<StoredPackage>, E>,
) -> Result<Vec<StoredPackage>, E> {
    let limit = filter.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut by_deposit = filter.limit.is_some().then_some(by_deposit);
    let mut window = window;
    let mut found = Vec::new();
    let mut handles = Vec::new();
    loop {
        if let Some(walk) = by_deposit.as_mut() {
            match walk.next() {
                None => return Ok(found),
                Some(p) => {
                    let p = p?;
                    if filter.admits(&p) {
                        found.push(p);
                        if found.len() >= limit {
                            return Ok(found);
                        }
                    }
                }
            }
        }
        match window.next() {
            None => break,
            Some(h) => handles.push(h?),
        }
    }
    handles.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
    let mut out = Vec::new();
    for (_, h) in handles {
        if out.len() >= limit {
            break;
        }
        if let Some(p) = load(h)?
            && filter.admits(&p)
        {
            out.push(p);
        }
    }
    Ok(out)
}

/// A `pull` mode `relevant` query.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SearchQuery {
    /// Scope.
    pub project_id: String,
    /// Free text.
    pub query: String,
    /// At most this many packages.
    pub limit: usize,
    /// Only packages with this `topic`.
    pub topic: Option<String>,
    /// Only packages with this `package_type`.
    pub package_type: Option<String>,
    /// Only packages carrying every one of these tags.
    pub tags: Vec<String>,
    /// Only packages created at or after this instant (RFC 3339).
    pub since: Option<String>,
    /// Only packages created before this instant (RFC 3339).
    pub until: Option<String>,
}

/// One package found by search, with its best chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The package.
    pub package: StoredPackage,
    /// The backend's relevance score (higher is better; scales differ between backends).
    pub score: f64,
    /// The field the best chunk came from (`title`, `description`, `decisions_made`, ...).
    pub field: String,
    /// The best chunk's text.
    pub chunk: String,
}

impl SearchHit {
    /// The wire form: `{"score", "field", "chunk", "package"}` (the package with its content_hash).
    pub fn to_wire(&self) -> serde_json::Value {
        serde_json::json!({
            "score": self.score,
            "field": self.field,
            "chunk": self.chunk,
            "package": self.package.to_wire(),
        })
    }
}

impl serde::Serialize for SearchHit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(s)
    }
}

/// Everything an export holds, in export order; also what an import writes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// Projects by id.
    pub projects: Vec<Project>,
    /// Packages by (project_id, deposit order).
    pub packages: Vec<StoredPackage>,
    /// Every fact row (full history), in [`crate::fact::sort_facts`] order.
    pub facts: Vec<FactRecord>,
    /// Sessions by id.
    pub sessions: Vec<Session>,
    /// Review records by (package_id, at, order written).
    pub reviews: Vec<ReviewRecord>,
}

// --- the audit outbox ----------------------------------------------------------------------

/// An entry of the audit outbox: the TRACE events a write owes its chain. It is stored in the
/// write's own transaction, so a change is never stored without the events that tell of it; the
/// transaction that appends the events removes it (`cra_carp::store::StateChange::Settle`), and
/// whatever a crash left between the two is appended at the next start. Its body is the
/// writer's (the runtime's JSON); the store keeps it as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Unique; the removal names it.
    pub key: String,
    /// What to append, in the writer's encoding.
    pub body: String,
}

/// What a write changed, as its [`Outbox`] is told inside the write's transaction. A write that
/// changed nothing (a package already stored, a session already ended) tells nothing.
#[derive(Debug, Clone, Copy)]
pub enum Written<'a> {
    /// A project created, archived or unarchived.
    Project(&'a Project),
    /// A package inserted, or replaced by a flag or a review.
    Package(&'a StoredPackage),
    /// A fact inserted (superseding the current one, if any).
    Fact(&'a FactRecord),
    /// The current facts of a (subject, predicate) closed: how many.
    Invalidated(usize),
    /// A session started or ended.
    Session(&'a Session),
    /// An import restored.
    Restored(&'a Snapshot),
    /// A package quarantined: a read found its stored bytes no longer match its hash
    /// (`quarantined` holds the hash recomputed).
    Quarantined(&'a StoredPackage),
}

/// Turns a write's change into the outbox entries stored with it.
pub trait Outbox: Send + Sync {
    /// The entries `written` owes; none for a change that owes no event.
    fn entries(&self, written: Written<'_>) -> Result<Vec<OutboxEntry>, RelayStoreError>;
}

/// The storage Relay needs.
pub trait RelayStore: Send + Sync + fmt::Debug {
    /// Creates a project; [`RelayStoreError::AlreadyExists`] if the id is taken.
    fn create_project(&self, project: &Project) -> Result<(), RelayStoreError>;
    /// One project.
    fn get_project(&self, project_id: &str) -> Result<Option<Project>, RelayStoreError>;
    /// Every project, by id.
    fn list_projects(&self) -> Result<Vec<Project>, RelayStoreError>;
    /// Sets or clears `archived_at`; returns the updated project.
    fn set_archived(
        &self,
        project_id: &str,
        archived_at: Option<&str>,
    ) -> Result<Project, RelayStoreError>;

    /// Stores `package` unless its project holds a package with its `package_id`, atomically
    /// (ids are unique within a project, §6: another project may use the same id). When the
    /// package names a session (`created_by.session_id`) that exists, the id is appended to that
    /// session's `packages_deposited` in the same transaction.
    fn insert_package(&self, package: &StoredPackage) -> Result<InsertOutcome, RelayStoreError>;
    /// Package `package_id` of `project_id`, as stored (not verified: [`crate::ops::Relay`]
    /// verifies).
    fn get_package(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Option<StoredPackage>, RelayStoreError>;
    /// Every project's package with id `package_id`, by project id, as stored.
    fn find_package(&self, package_id: &str) -> Result<Vec<StoredPackage>, RelayStoreError>;
    /// A project's packages, newest deposit first.
    fn list_packages(
        &self,
        project_id: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, RelayStoreError>;
    /// Replaces the package of `updated`'s project and id whose stored hash is still
    /// `expected_hash` and records `review`, in one transaction; [`RelayStoreError::Conflict`]
    /// when the hash moved.
    fn update_package(
        &self,
        expected_hash: &str,
        updated: &StoredPackage,
        review: &ReviewRecord,
    ) -> Result<(), RelayStoreError>;
    /// Marks a package as failing verification (kept for inspection, hidden from listings);
    /// `reason` is the hash recomputed. A package already quarantined is left as it is.
    fn quarantine_package(
        &self,
        project_id: &str,
        package_id: &str,
        reason: &str,
    ) -> Result<(), RelayStoreError>;
    /// The review records of a package, oldest first.
    fn list_reviews(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Vec<ReviewRecord>, RelayStoreError>;

    /// Supersedes the current fact of (project, subject, predicate), if any, and inserts the new
    /// one, atomically (decided by [`crate::fact::supersede`]); returns the inserted row. `now`
    /// is called once, inside the transaction, and the write is stamped
    /// [`crate::fact::recorded_instant`] of it and the project's latest recorded instant, under
    /// a lock that serialises the project's fact writes: recorded time never goes backwards in
    /// commit order, whatever clocks the callers have.
    fn assert_fact(
        &self,
        new: NewFact,
        now: &dyn Fn() -> String,
    ) -> Result<FactRecord, RelayStoreError>;
    /// Closes every current fact of (project, subject, predicate) (see
    /// [`crate::fact::invalidate`]) at the recorded instant stamped as for
    /// [`RelayStore::assert_fact`]; returns how many.
    fn invalidate_facts(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
        now: &dyn Fn() -> String,
    ) -> Result<usize, RelayStoreError>;
    /// The facts of a project that `query` selects (see [`crate::fact::select`]).
    fn facts(
        &self,
        project_id: &str,
        query: &FactQuery,
    ) -> Result<Vec<FactRecord>, RelayStoreError>;

    /// Creates or replaces a session.
    fn put_session(&self, session: &Session) -> Result<(), RelayStoreError>;
    /// One session.
    fn get_session(&self, session_id: &str) -> Result<Option<Session>, RelayStoreError>;
    /// Ends a session at `ended_at` in one write, so a deposit recording itself in the session
    /// meanwhile is never lost; an ended session is returned unchanged, an unknown one is `None`.
    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<Option<Session>, RelayStoreError>;

    /// Whether [`RelayStore::search`] works.
    fn supports_search(&self) -> bool {
        false
    }
    /// BM25 search (best chunk per package), or [`RelayStoreError::SearchUnsupported`].
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, RelayStoreError> {
        let _ = query;
        Err(RelayStoreError::SearchUnsupported)
    }

    /// This store, with every write made through it also storing, in the write's transaction,
    /// the entries `outbox` makes of what the write changed.
    fn with_outbox(&self, outbox: Arc<dyn Outbox>) -> Arc<dyn RelayStore>;
    /// The outbox entries not yet removed, by key.
    fn outbox(&self) -> Result<Vec<OutboxEntry>, RelayStoreError>;

    /// Everything, in export order (see [`Snapshot`]).
    fn snapshot(&self) -> Result<Snapshot, RelayStoreError>;
    /// Writes a snapshot into an empty store in one transaction, preserving the given package
    /// order as deposit order; [`RelayStoreError::AlreadyExists`] if any record exists.
    fn restore(&self, snapshot: &Snapshot) -> Result<(), RelayStoreError>;
}

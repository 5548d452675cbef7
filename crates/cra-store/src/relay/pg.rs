//! [`PgRelay`]: Relay's storage in the PostgreSQL schema of a [`crate::PgStore`] (tables from
//! `migrations/0006_relay.sql`). Multi-row changes are one transaction each; fact supersession
//! serialises on a transaction-scoped advisory lock of (project, subject, predicate), and a
//! partial unique index guarantees at most one current fact regardless. Recorded time is stamped
//! under the row lock of the project's `relay_fact_clock` row (`migrations/0010`), so it never
//! goes backwards in commit order, whichever replica (and clock) writes. `pull` relevant uses
//! PostgreSQL full-text search (`english` configuration, `ts_rank_cd`) over the same chunks the
//! embedded backend indexes, best chunk per package. A write made through a store with an
//! outbox ([`RelayStore::with_outbox`]) stores the outbox's entries in `relay_outbox`
//! (`migrations/0011`) in its own transaction. Each package row carries its
//! [`cra_relay::store::created_key`] (`migrations/0015`, which keys the rows stored before it),
//! indexed by project, so a windowed listing (orient, orchestrate) reads the window.
//!
//! With a storage key (the store's [`Encryption`]), every `body` column (projects, packages,
//! reviews, facts, sessions, the outbox) is stored in the text form of the encryption, the
//! table's name being the associated data; no SQL reads inside a body, so the fact clock's seed
//! is computed here. The full-text search chunks (`relay_chunks`) are plaintext, so such a store
//! writes none (`cra store reencrypt` deletes those written before) and searches an in-memory
//! index instead ([`super::search::SyncedIndex`]). Ids, fact subjects and predicates, content
//! hashes, quarantine reasons, creation keys and sequence numbers stay in their own plaintext
//! columns, which the queries need (`specs/storage-encryption.md`).

use cra_relay::fact::{self, FactQuery, FactRecord, NewFact};
use cra_relay::model::{Project, ReviewRecord, Session, StoredPackage};
use std::sync::{Arc, Mutex};

use cra_relay::store::{
    InsertOutcome, Outbox, OutboxEntry, PackageFilter, RelayStore, RelayStoreError, SearchHit,
    SearchQuery, Snapshot, Written, created_key,
};
use postgres::Transaction;
use serde_json::Value;

use super::search::{SyncedIndex, hits};
use crate::PgStore;
use crate::encryption::Encryption;

fn be(e: impl std::fmt::Display + std::fmt::Debug) -> RelayStoreError {
    RelayStoreError::Backend(format!("postgres: {e} ({e:?})"))
}

const PROJECTS: &str = "relay_projects";
const PACKAGES: &str = "relay_packages";
const REVIEWS: &str = "relay_reviews";
const FACTS: &str = "relay_facts";
const SESSIONS: &str = "relay_sessions";
pub(crate) const OUTBOX: &str = "relay_outbox";

/// How Relay's records are stored in the `body` columns: their JSON, encrypted in the text form
/// ([`Encryption::encrypt_text`], the table's name being the associated data) when the store has
/// a storage key.
#[derive(Clone, Debug)]
struct Codec(Encryption);

impl Codec {
    /// Whether bodies are encrypted (so that no plaintext, search chunks included, is stored).
    fn encrypts(&self) -> bool {
        self.0.current().is_some()
    }

    /// The JSON `text` as stored in `table`.
    fn seal(&self, table: &str, text: String) -> Result<String, RelayStoreError> {
        self.0
            .encrypt_text(table, text)
            .map_err(|e| RelayStoreError::Backend(format!("cannot store a record of {table}: {e}")))
    }

    /// The JSON text [`Codec::seal`] stored in `table` (or stored before encryption).
    fn open(&self, table: &str, stored: &str) -> Result<String, RelayStoreError> {
        self.0
            .decrypt_text(table, stored)
            .map(std::borrow::Cow::into_owned)
            .map_err(|e| {
                RelayStoreError::Backend(format!("a record of {table} does not read: {e}"))
            })
    }

    fn enc<T: serde::Serialize>(&self, table: &str, t: &T) -> Result<String, RelayStoreError> {
        self.seal(table, serde_json::to_string(t).map_err(be)?)
    }

    fn dec<T: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        stored: &str,
    ) -> Result<T, RelayStoreError> {
        serde_json::from_str(&self.open(table, stored)?)
            .map_err(|e| RelayStoreError::Backend(format!("corrupt relay record: {e}")))
    }

    fn enc_package(&self, p: &StoredPackage) -> Result<String, RelayStoreError> {
        self.enc(PACKAGES, &Value::Object(p.package.as_object().clone()))
    }

    fn dec_package(
        &self,
        body: &str,
        hash: String,
        quarantined: Option<String>,
    ) -> Result<StoredPackage, RelayStoreError> {
        let mut wire: Value = self.dec(PACKAGES, body)?;
        if let Some(o) = wire.as_object_mut() {
            o.insert("content_hash".into(), Value::String(hash));
        }
        let mut p = StoredPackage::from_wire(&wire).map_err(|errs| {
            RelayStoreError::Backend(format!(
                "stored package no longer validates: {}",
                errs.iter()
                    .map(|e| format!("{} {}", e.pointer, e.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })?;
        p.quarantined = quarantined;
        Ok(p)
    }
}

/// A page of a project's (`$1`) deposits older than `$2`, newest first, at most `$3`: the
/// deposit walk of a windowed listing, backwards along a deposit-order index. (The listing
/// pages both walks itself rather than leave the choice to the planner, whose estimate of a
/// project's window from whole-table statistics can be wrong by the whole project.) Public so a
/// test can explain it.
pub const DEPOSITS_PAGE_SQL: &str =
    "SELECT seq, body, content_hash, quarantined FROM relay_packages
  WHERE project_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3";

/// A page of the creation-time index of project `$1` from key `$2` on, after (`$3`, `$4`) in
/// (key, seq) order, at most `$5` entries: the window walk of a windowed listing, an index-only
/// scan of `relay_packages_created`. The first page passes (`$2`, the least seq) as (`$3`,
/// `$4`): the scan starts at the row bound. Public so a test can explain it.
pub const WINDOW_PAGE_SQL: &str = "SELECT created_key, seq FROM relay_packages
  WHERE project_id = $1 AND created_key >= $2 AND (created_key, seq) > ($3, $4)
  ORDER BY created_key, seq LIMIT $5";

/// The first page of either walk; each next page is twice as long (to [`MAX_PAGE`]), so a walk
/// of n rows takes about log2(n) round trips.
const FIRST_PAGE: i64 = 32;
const MAX_PAGE: i64 = 8192;

/// Rows per statement when restoring an import.
const RESTORE_BATCH: usize = 2000;

/// Relay over a PostgreSQL schema.
#[derive(Clone)]
pub struct PgRelay {
    store: PgStore,
    codec: Codec,
    /// The in-memory search index of a store whose bodies are encrypted, made on first use.
    index: Arc<Mutex<Option<Arc<SyncedIndex>>>>,
    outbox: Option<Arc<dyn Outbox>>,
}

impl std::fmt::Debug for PgRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgRelay")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl PgRelay {
    /// Relay in `store`'s schema (its migrations create the tables), its records encrypted
    /// with the store's storage key when one is configured.
    pub fn new(store: PgStore) -> Self {
        Self {
            codec: Codec(store.config().encryption.clone()),
            store,
            index: Arc::new(Mutex::new(None)),
            outbox: None,
        }
    }

    /// Stores the outbox entries of `written` in `tx`, the write's transaction.
    fn owe(&self, tx: &mut Transaction<'_>, written: Written<'_>) -> Result<(), RelayStoreError> {
        let Some(outbox) = &self.outbox else {
            return Ok(());
        };
        for OutboxEntry { key, body } in outbox.entries(written)? {
            tx.execute(
                "INSERT INTO relay_outbox (key, body) VALUES ($1, $2)",
                &[&key, &self.codec.seal(OUTBOX, body)?],
            )
            .map_err(be)?;
        }
        Ok(())
    }

    fn with_tx<T>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>) -> Result<T, RelayStoreError>,
    ) -> Result<T, RelayStoreError> {
        let mut client = self.store.client().map_err(be)?;
        let mut tx = client.transaction().map_err(be)?;
        let out = f(&mut tx)?;
        tx.commit().map_err(be)?;
        Ok(out)
    }

    fn write_chunks(
        &self,
        tx: &mut Transaction<'_>,
        p: &StoredPackage,
    ) -> Result<(), RelayStoreError> {
        let id = p.package.package_id();
        tx.execute(
            "DELETE FROM relay_chunks WHERE project_id = $1 AND package_id = $2",
            &[&p.package.project_id(), &id],
        )
        .map_err(be)?;
        // Chunks are plaintext: a store that encrypts searches its own index instead.
        if p.quarantined.is_some() || self.codec.encrypts() {
            return Ok(());
        }
        for (i, (field, text)) in cra_relay::search::chunks(&p.package)
            .into_iter()
            .enumerate()
        {
            let ord = i32::try_from(i).unwrap_or(i32::MAX);
            tx.execute(
                "INSERT INTO relay_chunks (package_id, project_id, ord, field, chunk) VALUES ($1, $2, $3, $4, $5)",
                &[&id, &p.package.project_id(), &ord, &field, &text],
            )
            .map_err(be)?;
        }
        Ok(())
    }

    fn insert_raw(
        &self,
        tx: &mut Transaction<'_>,
        p: &StoredPackage,
    ) -> Result<bool, RelayStoreError> {
        let body = self.codec.enc_package(p)?;
        let n = tx
            .execute(
                "INSERT INTO relay_packages (package_id, project_id, content_hash, quarantined, body, created_key)
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (project_id, package_id) DO NOTHING",
                &[&p.package.package_id(), &p.package.project_id(), &p.content_hash, &p.quarantined, &body,
                  &created_key(p.package.created_at())],
            )
            .map_err(be)?;
        if n == 1 {
            self.write_chunks(tx, p)?;
        }
        Ok(n == 1)
    }

    /// The recorded instant of a fact write to `project`: [`fact::recorded_instant`] of the
    /// clock (read after the lock) and the project's mark, which it advances. The mark's row
    /// lock, held to commit, serialises the project's fact writes across replicas; a project
    /// without a mark is seeded from its stored rows ([`PgRelay::latest_recorded`]).
    fn stamp(
        &self,
        tx: &mut Transaction<'_>,
        project: &str,
        now: &dyn Fn() -> String,
    ) -> Result<String, RelayStoreError> {
        const LOCK: &str =
            "SELECT recorded_at FROM relay_fact_clock WHERE project_id = $1 FOR UPDATE";
        let mut row = tx.query_opt(LOCK, &[&project]).map_err(be)?;
        if row.is_none() {
            let seed = self.latest_recorded(tx, project)?;
            tx.execute(
                "INSERT INTO relay_fact_clock (project_id, recorded_at) VALUES ($1, $2)
                 ON CONFLICT (project_id) DO NOTHING",
                &[&project, &seed],
            )
            .map_err(be)?;
            row = tx.query_opt(LOCK, &[&project]).map_err(be)?;
        }
        let last: Option<String> = row.map(|r| r.get(0)).filter(|l: &String| !l.is_empty());
        let stamp = fact::recorded_instant(last.as_deref(), &now());
        tx.execute(
            "UPDATE relay_fact_clock SET recorded_at = $2 WHERE project_id = $1",
            &[&project, &stamp],
        )
        .map_err(be)?;
        Ok(stamp)
    }

    /// The latest recorded instant of `project`'s stored facts ([`fact::latest_recorded`]; empty
    /// without facts), read here rather than in SQL because the bodies may be encrypted.
    fn latest_recorded(
        &self,
        tx: &mut Transaction<'_>,
        project: &str,
    ) -> Result<String, RelayStoreError> {
        let rows = tx
            .query(
                "SELECT body FROM relay_facts WHERE project_id = $1",
                &[&project],
            )
            .map_err(be)?;
        let facts = rows
            .iter()
            .map(|r| self.codec.dec(FACTS, r.get::<_, &str>(0)))
            .collect::<Result<Vec<FactRecord>, _>>()?;
        Ok(fact::latest_recorded(&facts).unwrap_or_default())
    }

    /// `pull` relevant in a store whose bodies are encrypted: the in-memory index
    /// ([`SyncedIndex`], made on first use), first brought up to date with the project's
    /// packages as stored now, whichever replica wrote them.
    fn search_in_memory(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, RelayStoreError> {
        let index = {
            let mut guard = self.index.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_ref() {
                Some(ix) => ix.clone(),
                None => guard.insert(Arc::new(SyncedIndex::new()?)).clone(),
            }
        };
        self.sync_index(&index, &query.project_id)?;
        let raw = index.search(query, query.limit)?;
        hits(query, raw, |id| self.get_package(&query.project_id, id))
    }

    /// Indexes again each package of `project` whose stored version (content hash, quarantine)
    /// is not the one `index` holds.
    fn sync_index(&self, index: &SyncedIndex, project: &str) -> Result<(), RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let versions = c
            .query(
                "SELECT package_id, content_hash, quarantined IS NOT NULL FROM relay_packages
                  WHERE project_id = $1",
                &[&project],
            )
            .map_err(be)?;
        let stale = index.stale(
            project,
            versions.iter().map(|r| (r.get(0), (r.get(1), r.get(2)))),
        );
        if stale.is_empty() {
            return Ok(());
        }
        let rows = c
            .query(
                "SELECT body, content_hash, quarantined FROM relay_packages
                  WHERE project_id = $1 AND package_id = ANY($2)",
                &[&project, &stale],
            )
            .map_err(be)?;
        let packages = rows
            .iter()
            .map(|r| self.codec.dec_package(r.get(0), r.get(1), r.get(2)))
            .collect::<Result<Vec<_>, _>>()?;
        index.upsert(&packages)
    }

    /// A windowed listing: [`cra_relay::store::list_window`] over pages of the project's
    /// deposits ([`DEPOSITS_PAGE_SQL`]) and of its creation-time index ([`WINDOW_PAGE_SQL`]),
    /// plus the project's rows without a key (stored before migration 0015 in an unusual form),
    /// which join the window's candidates and are checked here; in one read-only
    /// repeatable-read transaction, so both walks see one snapshot.
    fn list_window(
        &self,
        c: &mut postgres::Client,
        project_id: &str,
        since: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, RelayStoreError> {
        use std::cell::RefCell;
        use std::collections::VecDeque;
        let tx = c
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(be)?;
        let tx = RefCell::new(tx);
        let row_package = |r: &postgres::Row| self.codec.dec_package(r.get(1), r.get(2), r.get(3));

        // The deposit walk.
        let mut deposits: VecDeque<StoredPackage> = VecDeque::new();
        let (mut before, mut page, mut deposits_done) = (i64::MAX, FIRST_PAGE, false);
        let by_deposit = std::iter::from_fn(|| {
            if deposits.is_empty() && !deposits_done {
                let rows = tx
                    .borrow_mut()
                    .query(DEPOSITS_PAGE_SQL, &[&project_id, &before, &page])
                    .map_err(be);
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(e) => return Some(Err(e)),
                };
                deposits_done = i64::try_from(rows.len()).unwrap_or(i64::MAX) < page;
                page = (page * 2).min(MAX_PAGE);
                for r in &rows {
                    before = r.get(0);
                    match row_package(r) {
                        Ok(p) => deposits.push_back(p),
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
            deposits.pop_front().map(Ok)
        });

        // The window walk: the unkeyed rows first (one query; normally none), then the index.
        let unkeyed: Vec<i64> = tx
            .borrow_mut()
            .query(
                "SELECT seq FROM relay_packages WHERE project_id = $1 AND created_key IS NULL",
                &[&project_id],
            )
            .map_err(be)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut entries: VecDeque<i64> = unkeyed.into();
        // The walk starts at (since, MIN), not before it: the btree scan starts at the row
        // bound, so a bound below `since` would read every older entry of the project first.
        let (mut after, mut wpage, mut window_done) =
            ((since.to_owned(), i64::MIN), FIRST_PAGE, false);
        let window = std::iter::from_fn(|| {
            if entries.is_empty() && !window_done {
                let rows = tx
                    .borrow_mut()
                    .query(
                        WINDOW_PAGE_SQL,
                        &[&project_id, &since, &after.0, &after.1, &wpage],
                    )
                    .map_err(be);
                let rows = match rows {
                    Ok(rows) => rows,
                    Err(e) => return Some(Err(e)),
                };
                window_done = i64::try_from(rows.len()).unwrap_or(i64::MAX) < wpage;
                wpage = (wpage * 2).min(MAX_PAGE);
                for r in &rows {
                    after = (r.get(0), r.get(1));
                    entries.push_back(after.1);
                }
            }
            entries
                .pop_front()
                .map(|seq| Ok((u64::try_from(seq).unwrap_or(0), seq)))
        });
        let load = |seq: i64| -> Result<Option<StoredPackage>, RelayStoreError> {
            tx.borrow_mut()
                .query_opt(
                    "SELECT seq, body, content_hash, quarantined FROM relay_packages WHERE seq = $1",
                    &[&seq],
                )
                .map_err(be)?
                .map(|r| row_package(&r))
                .transpose()
        };
        let out = cra_relay::store::list_window(filter, by_deposit, window, load)?;
        tx.into_inner().commit().map_err(be)?;
        Ok(out)
    }

    fn lock_key(tx: &mut Transaction<'_>, key: &str) -> Result<(), RelayStoreError> {
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 6))",
            &[&key],
        )
        .map_err(be)?;
        Ok(())
    }
}

impl RelayStore for PgRelay {
    fn create_project(&self, project: &Project) -> Result<(), RelayStoreError> {
        self.with_tx(|tx| {
            let n = tx
                .execute(
                    "INSERT INTO relay_projects (project_id, body) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                    &[&project.project_id, &self.codec.enc(PROJECTS, project)?],
                )
                .map_err(be)?;
            if n == 0 {
                return Err(RelayStoreError::AlreadyExists(format!("project {}", project.project_id)));
            }
            self.owe(tx, Written::Project(project))
        })
    }

    fn get_project(&self, project_id: &str) -> Result<Option<Project>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let row = c
            .query_opt(
                "SELECT body FROM relay_projects WHERE project_id = $1",
                &[&project_id],
            )
            .map_err(be)?;
        row.map(|r| self.codec.dec(PROJECTS, r.get::<_, &str>(0)))
            .transpose()
    }

    fn list_projects(&self) -> Result<Vec<Project>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let rows = c
            .query(
                "SELECT body FROM relay_projects ORDER BY project_id COLLATE \"C\"",
                &[],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| self.codec.dec(PROJECTS, r.get::<_, &str>(0)))
            .collect()
    }

    fn set_archived(
        &self,
        project_id: &str,
        archived_at: Option<&str>,
    ) -> Result<Project, RelayStoreError> {
        self.with_tx(|tx| {
            let row = tx
                .query_opt(
                    "SELECT body FROM relay_projects WHERE project_id = $1 FOR UPDATE",
                    &[&project_id],
                )
                .map_err(be)?
                .ok_or_else(|| RelayStoreError::NotFound(format!("project {project_id}")))?;
            let mut p: Project = self.codec.dec(PROJECTS, row.get::<_, &str>(0))?;
            p.archived_at = archived_at.map(str::to_owned);
            tx.execute(
                "UPDATE relay_projects SET body = $2 WHERE project_id = $1",
                &[&project_id, &self.codec.enc(PROJECTS, &p)?],
            )
            .map_err(be)?;
            self.owe(tx, Written::Project(&p))?;
            Ok(p)
        })
    }

    fn insert_package(&self, package: &StoredPackage) -> Result<InsertOutcome, RelayStoreError> {
        self.with_tx(|tx| {
            if !self.insert_raw(tx, package)? {
                let row = tx
                    .query_one(
                        "SELECT body, content_hash, quarantined FROM relay_packages WHERE project_id = $1 AND package_id = $2",
                        &[&package.package.project_id(), &package.package.package_id()],
                    )
                    .map_err(be)?;
                return Ok(InsertOutcome::Existing(self.codec.dec_package(row.get(0), row.get(1), row.get(2))?));
            }
            if let Some(sid) = package.package.session_id() {
                let row = tx
                    .query_opt("SELECT body FROM relay_sessions WHERE session_id = $1 FOR UPDATE", &[&sid])
                    .map_err(be)?;
                if let Some(row) = row {
                    let mut s: Session = self.codec.dec(SESSIONS, row.get::<_, &str>(0))?;
                    s.packages_deposited.push(package.package.package_id().to_owned());
                    tx.execute("UPDATE relay_sessions SET body = $2 WHERE session_id = $1", &[&sid, &self.codec.enc(SESSIONS, &s)?])
                        .map_err(be)?;
                }
            }
            self.owe(tx, Written::Package(package))?;
            Ok(InsertOutcome::Inserted)
        })
    }

    fn get_package(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Option<StoredPackage>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let row = c
            .query_opt(
                "SELECT body, content_hash, quarantined FROM relay_packages
                  WHERE project_id = $1 AND package_id = $2",
                &[&project_id, &package_id],
            )
            .map_err(be)?;
        row.map(|r| self.codec.dec_package(r.get(0), r.get(1), r.get(2)))
            .transpose()
    }

    fn find_package(&self, package_id: &str) -> Result<Vec<StoredPackage>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let rows = c
            .query(
                "SELECT body, content_hash, quarantined FROM relay_packages
                  WHERE package_id = $1 ORDER BY project_id COLLATE \"C\"",
                &[&package_id],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| self.codec.dec_package(r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    fn list_packages(
        &self,
        project_id: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let limit = filter.limit.unwrap_or(usize::MAX);
        if let Some(since) = &filter.created_since {
            return self.list_window(&mut c, project_id, since, filter);
        }
        let rows = c
            .query(
                "SELECT body, content_hash, quarantined FROM relay_packages WHERE project_id = $1 ORDER BY seq DESC",
                &[&project_id],
            )
            .map_err(be)?;
        let mut out = Vec::new();
        for r in &rows {
            if out.len() >= limit {
                break;
            }
            let p = self.codec.dec_package(r.get(0), r.get(1), r.get(2))?;
            if filter.admits(&p) {
                out.push(p);
            }
        }
        Ok(out)
    }

    fn update_package(
        &self,
        expected_hash: &str,
        updated: &StoredPackage,
        review: &ReviewRecord,
    ) -> Result<(), RelayStoreError> {
        let (project, id) = (updated.package.project_id(), updated.package.package_id());
        self.with_tx(|tx| {
            let row = tx
                .query_opt(
                    "SELECT content_hash FROM relay_packages WHERE project_id = $1 AND package_id = $2 FOR UPDATE",
                    &[&project, &id],
                )
                .map_err(be)?
                .ok_or_else(|| RelayStoreError::NotFound(format!("package {id}")))?;
            if row.get::<_, &str>(0) != expected_hash {
                return Err(RelayStoreError::Conflict(format!("package {id}")));
            }
            let body = self.codec.enc_package(updated)?;
            tx.execute(
                "UPDATE relay_packages SET body = $3, content_hash = $4, quarantined = $5, created_key = $6
                  WHERE project_id = $1 AND package_id = $2",
                &[&project, &id, &body, &updated.content_hash, &updated.quarantined,
                  &created_key(updated.package.created_at())],
            )
            .map_err(be)?;
            self.write_chunks(tx, updated)?;
            tx.execute(
                "INSERT INTO relay_reviews (project_id, package_id, body) VALUES ($1, $2, $3)",
                &[&project, &id, &self.codec.enc(REVIEWS, review)?],
            )
                .map_err(be)?;
            self.owe(tx, Written::Package(updated))
        })
    }

    fn quarantine_package(
        &self,
        project_id: &str,
        package_id: &str,
        reason: &str,
    ) -> Result<(), RelayStoreError> {
        self.with_tx(|tx| {
            let row = tx
                .query_opt(
                    "SELECT body, content_hash, quarantined FROM relay_packages
                      WHERE project_id = $1 AND package_id = $2 FOR UPDATE",
                    &[&project_id, &package_id],
                )
                .map_err(be)?
                .ok_or_else(|| RelayStoreError::NotFound(format!("package {package_id}")))?;
            let mut p = self.codec.dec_package(row.get(0), row.get(1), row.get(2))?;
            if p.quarantined.is_some() {
                return Ok(());
            }
            p.quarantined = Some(reason.to_owned());
            tx.execute(
                "UPDATE relay_packages SET quarantined = $3 WHERE project_id = $1 AND package_id = $2",
                &[&project_id, &package_id, &reason],
            )
            .map_err(be)?;
            self.owe(tx, Written::Quarantined(&p))?;
            tx.execute(
                "DELETE FROM relay_chunks WHERE project_id = $1 AND package_id = $2",
                &[&project_id, &package_id],
            )
            .map_err(be)?;
            Ok(())
        })
    }

    fn list_reviews(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Vec<ReviewRecord>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let rows = c
            .query(
                "SELECT body FROM relay_reviews WHERE project_id = $1 AND package_id = $2 ORDER BY id",
                &[&project_id, &package_id],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| self.codec.dec(REVIEWS, r.get::<_, &str>(0)))
            .collect()
    }

    fn assert_fact(
        &self,
        new: NewFact,
        now: &dyn Fn() -> String,
    ) -> Result<FactRecord, RelayStoreError> {
        self.with_tx(|tx| {
            let f = &new.record.fact;
            let (project, subject, predicate) = (f.project_id.clone(), f.subject.clone(), f.predicate.clone());
            Self::lock_key(tx, &format!("{project}\u{1f}{subject}\u{1f}{predicate}"))?;
            let cur: Option<FactRecord> = tx
                .query_opt(
                    "SELECT body FROM relay_facts WHERE project_id = $1 AND subject = $2 AND predicate = $3 AND is_current FOR UPDATE",
                    &[&project, &subject, &predicate],
                )
                .map_err(be)?
                .map(|r| self.codec.dec(FACTS, r.get::<_, &str>(0)))
                .transpose()?;
            let stamp = self.stamp(tx, &project, now)?;
            let (closed, inserted) = fact::supersede(cur.as_ref(), new, &stamp)?;
            if let Some(c) = closed {
                tx.execute(
                    "UPDATE relay_facts SET is_current = false, body = $2 WHERE fact_id = $1",
                    &[&c.fact.fact_id, &self.codec.enc(FACTS, &c)?],
                )
                .map_err(be)?;
            }
            tx.execute(
                "INSERT INTO relay_facts (fact_id, project_id, subject, predicate, is_current, body) VALUES ($1, $2, $3, $4, true, $5)",
                &[&inserted.fact.fact_id, &project, &subject, &predicate, &self.codec.enc(FACTS, &inserted)?],
            )
            .map_err(be)?;
            self.owe(tx, Written::Fact(&inserted))?;
            Ok(inserted)
        })
    }

    fn invalidate_facts(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
        now: &dyn Fn() -> String,
    ) -> Result<usize, RelayStoreError> {
        self.with_tx(|tx| {
            Self::lock_key(tx, &format!("{project_id}\u{1f}{subject}\u{1f}{predicate}"))?;
            let now = self.stamp(tx, project_id, now)?;
            let now = now.as_str();
            let rows = tx
                .query(
                    "SELECT body FROM relay_facts WHERE project_id = $1 AND subject = $2 AND predicate = $3 AND is_current FOR UPDATE",
                    &[&project_id, &subject, &predicate],
                )
                .map_err(be)?;
            for r in &rows {
                let rec: FactRecord = self.codec.dec(FACTS, r.get::<_, &str>(0))?;
                let closed = fact::invalidate(&rec, now);
                tx.execute(
                    "UPDATE relay_facts SET is_current = false, body = $2 WHERE fact_id = $1",
                    &[&closed.fact.fact_id, &self.codec.enc(FACTS, &closed)?],
                )
                .map_err(be)?;
            }
            self.owe(tx, Written::Invalidated(rows.len()))?;
            Ok(rows.len())
        })
    }

    fn facts(
        &self,
        project_id: &str,
        query: &FactQuery,
    ) -> Result<Vec<FactRecord>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let rows = c
            .query(
                "SELECT body FROM relay_facts WHERE project_id = $1
                   AND ($2::text IS NULL OR subject = $2) AND ($3::text IS NULL OR predicate = $3)
                   AND (NOT $4 OR is_current)",
                &[
                    &project_id,
                    &query.subject,
                    &query.predicate,
                    &matches!(query.view, fact::FactView::Current),
                ],
            )
            .map_err(be)?;
        let recs = rows
            .iter()
            .map(|r| self.codec.dec(FACTS, r.get::<_, &str>(0)))
            .collect::<Result<Vec<FactRecord>, _>>()?;
        Ok(fact::select(recs, query))
    }

    fn put_session(&self, session: &Session) -> Result<(), RelayStoreError> {
        self.with_tx(|tx| {
            tx.execute(
                "INSERT INTO relay_sessions (session_id, project_id, body) VALUES ($1, $2, $3)
                 ON CONFLICT (session_id) DO UPDATE SET body = EXCLUDED.body",
                &[
                    &session.session_id,
                    &session.project_id,
                    &self.codec.enc(SESSIONS, session)?,
                ],
            )
            .map_err(be)?;
            self.owe(tx, Written::Session(session))
        })
    }

    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<Option<Session>, RelayStoreError> {
        self.with_tx(|tx| {
            let row = tx
                .query_opt(
                    "SELECT body FROM relay_sessions WHERE session_id = $1 FOR UPDATE",
                    &[&session_id],
                )
                .map_err(be)?;
            let Some(row) = row else { return Ok(None) };
            let mut s: Session = self.codec.dec(SESSIONS, row.get::<_, &str>(0))?;
            if s.ended_at.is_none() {
                s.ended_at = Some(ended_at.to_owned());
                tx.execute(
                    "UPDATE relay_sessions SET body = $2 WHERE session_id = $1",
                    &[&session_id, &self.codec.enc(SESSIONS, &s)?],
                )
                .map_err(be)?;
                self.owe(tx, Written::Session(&s))?;
            }
            Ok(Some(s))
        })
    }

    fn get_session(&self, session_id: &str) -> Result<Option<Session>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let row = c
            .query_opt(
                "SELECT body FROM relay_sessions WHERE session_id = $1",
                &[&session_id],
            )
            .map_err(be)?;
        row.map(|r| self.codec.dec(SESSIONS, r.get::<_, &str>(0)))
            .transpose()
    }

    fn supports_search(&self) -> bool {
        true
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, RelayStoreError> {
        if self.codec.encrypts() {
            return self.search_in_memory(query);
        }
        // Any word may match (OR), so a query need not contain every word of a chunk.
        let words: Vec<String> = query
            .query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        if words.is_empty() {
            return Ok(Vec::new());
        }
        let tsquery = words.join(" | ");
        let mut c = self.store.client().map_err(be)?;
        let limit = i64::try_from(query.limit.saturating_mul(40).max(100)).unwrap_or(i64::MAX);
        let rows = c
            .query(
                "SELECT c.package_id, c.field, c.chunk, ts_rank_cd(c.tsv, q, 1)::float8 AS rank
                   FROM relay_chunks c, to_tsquery('english', $2) q
                  WHERE c.project_id = $1 AND c.tsv @@ q
                  ORDER BY rank DESC, c.package_id, c.ord
                  LIMIT $3",
                &[&query.project_id, &tsquery, &limit],
            )
            .map_err(be)?;
        let mut seen = std::collections::BTreeSet::new();
        let mut raw = Vec::new();
        for r in &rows {
            let id: String = r.get(0);
            if seen.insert(id.clone()) {
                raw.push((
                    id,
                    r.get::<_, f64>(3),
                    r.get::<_, String>(1),
                    r.get::<_, String>(2),
                ));
            }
        }
        drop(c);
        hits(query, raw, |id| self.get_package(&query.project_id, id))
    }

    fn snapshot(&self) -> Result<Snapshot, RelayStoreError> {
        self.with_tx(|tx| {
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", &[]).map_err(be)?;
            let mut snap = Snapshot::default();
            for r in tx.query("SELECT body FROM relay_projects ORDER BY project_id COLLATE \"C\"", &[]).map_err(be)? {
                snap.projects.push(self.codec.dec(PROJECTS, r.get::<_, &str>(0))?);
            }
            for r in tx
                .query(
                    "SELECT body, content_hash, quarantined FROM relay_packages ORDER BY project_id COLLATE \"C\", seq",
                    &[],
                )
                .map_err(be)?
            {
                snap.packages.push(self.codec.dec_package(r.get(0), r.get(1), r.get(2))?);
            }
            for r in tx.query("SELECT body FROM relay_facts", &[]).map_err(be)? {
                snap.facts.push(self.codec.dec(FACTS, r.get::<_, &str>(0))?);
            }
            fact::sort_facts(&mut snap.facts);
            for r in tx.query("SELECT body FROM relay_sessions ORDER BY session_id COLLATE \"C\"", &[]).map_err(be)? {
                snap.sessions.push(self.codec.dec(SESSIONS, r.get::<_, &str>(0))?);
            }
            let mut reviews = Vec::new();
            for r in tx.query("SELECT body FROM relay_reviews ORDER BY id", &[]).map_err(be)? {
                reviews.push(self.codec.dec(REVIEWS, r.get::<_, &str>(0))?);
            }
            snap.reviews = cra_relay::export::sort_reviews(reviews);
            Ok(snap)
        })
    }

    fn restore(&self, snapshot: &Snapshot) -> Result<(), RelayStoreError> {
        self.with_tx(|tx| {
            let used: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM relay_projects) OR EXISTS (SELECT 1 FROM relay_packages) OR EXISTS (SELECT 1 FROM relay_facts)",
                    &[],
                )
                .map_err(be)?
                .get(0);
            if used {
                return Err(RelayStoreError::AlreadyExists("data in the target store (import needs an empty store)".into()));
            }
            for p in &snapshot.projects {
                tx.execute("INSERT INTO relay_projects (project_id, body) VALUES ($1, $2)", &[&p.project_id, &self.codec.enc(PROJECTS, p)?])
                    .map_err(be)?;
            }
            // Batched (UNNEST WITH ORDINALITY keeps the given order, so `seq` follows it).
            for batch in snapshot.packages.chunks(RESTORE_BATCH) {
                let mut cols: [Vec<String>; 4] = Default::default();
                let mut quarantined: Vec<Option<String>> = Vec::new();
                let mut keys: Vec<Option<String>> = Vec::new();
                let (mut c_id, mut c_proj, mut c_ord, mut c_field, mut c_text) =
                    (Vec::new(), Vec::new(), Vec::<i32>::new(), Vec::new(), Vec::new());
                for p in batch {
                    let id = p.package.package_id().to_owned();
                    cols[0].push(id.clone());
                    cols[1].push(p.package.project_id().to_owned());
                    cols[2].push(p.content_hash.clone());
                    cols[3].push(self.codec.enc_package(p)?);
                    quarantined.push(p.quarantined.clone());
                    keys.push(created_key(p.package.created_at()));
                    if p.quarantined.is_none() && !self.codec.encrypts() {
                        for (i, (field, text)) in cra_relay::search::chunks(&p.package).into_iter().enumerate() {
                            c_id.push(id.clone());
                            c_proj.push(p.package.project_id().to_owned());
                            c_ord.push(i32::try_from(i).unwrap_or(i32::MAX));
                            c_field.push(field.to_owned());
                            c_text.push(text);
                        }
                    }
                }
                tx.execute(
                    "INSERT INTO relay_packages (package_id, project_id, content_hash, quarantined, body, created_key)
                     SELECT a, b, c, d, e, f FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
                          WITH ORDINALITY AS t(a, b, c, d, e, f, n) ORDER BY n",
                    &[&cols[0], &cols[1], &cols[2], &quarantined, &cols[3], &keys],
                )
                .map_err(be)?;
                tx.execute(
                    "INSERT INTO relay_chunks (package_id, project_id, ord, field, chunk)
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::int4[], $4::text[], $5::text[])",
                    &[&c_id, &c_proj, &c_ord, &c_field, &c_text],
                )
                .map_err(be)?;
            }
            for batch in snapshot.facts.chunks(RESTORE_BATCH) {
                let mut cols: [Vec<String>; 5] = Default::default();
                let mut current = Vec::new();
                for r in batch {
                    cols[0].push(r.fact.fact_id.clone());
                    cols[1].push(r.fact.project_id.clone());
                    cols[2].push(r.fact.subject.clone());
                    cols[3].push(r.fact.predicate.clone());
                    cols[4].push(self.codec.enc(FACTS, r)?);
                    current.push(r.is_current());
                }
                tx.execute(
                    "INSERT INTO relay_facts (fact_id, project_id, subject, predicate, is_current, body)
                     SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::text[])",
                    &[&cols[0], &cols[1], &cols[2], &cols[3], &current, &cols[4]],
                )
                .map_err(be)?;
            }
            for s in &snapshot.sessions {
                tx.execute(
                    "INSERT INTO relay_sessions (session_id, project_id, body) VALUES ($1, $2, $3)",
                    &[&s.session_id, &s.project_id, &self.codec.enc(SESSIONS, s)?],
                )
                .map_err(be)?;
            }
            for batch in snapshot.reviews.chunks(RESTORE_BATCH) {
                let projects: Vec<&str> = batch.iter().map(|r| r.project_id.as_str()).collect();
                let ids: Vec<&str> = batch.iter().map(|r| r.package_id.as_str()).collect();
                let bodies = batch.iter().map(|r| self.codec.enc(REVIEWS, r)).collect::<Result<Vec<String>, _>>()?;
                tx.execute(
                    "INSERT INTO relay_reviews (project_id, package_id, body)
                     SELECT a, b, c FROM UNNEST($1::text[], $2::text[], $3::text[])
                          WITH ORDINALITY AS t(a, b, c, n) ORDER BY n",
                    &[&projects, &ids, &bodies],
                )
                .map_err(be)?;
            }
            // A bulk load: give the planner the packages' statistics now, as autovacuum would
            // only later, so the windowed listing's page queries walk their indexes from the
            // first read (ANALYZE counts this transaction's own rows).
            tx.batch_execute("ANALYZE relay_packages").map_err(be)?;
            self.owe(tx, Written::Restored(snapshot))
        })
    }

    fn with_outbox(&self, outbox: Arc<dyn Outbox>) -> Arc<dyn RelayStore> {
        Arc::new(Self {
            store: self.store.clone(),
            codec: self.codec.clone(),
            index: self.index.clone(),
            outbox: Some(outbox),
        })
    }

    fn outbox(&self) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        let mut c = self.store.client().map_err(be)?;
        let rows = c
            .query(
                "SELECT key, body FROM relay_outbox ORDER BY key COLLATE \"C\"",
                &[],
            )
            .map_err(be)?;
        rows.iter()
            .map(|r| {
                Ok(OutboxEntry {
                    key: r.get(0),
                    body: self.codec.open(OUTBOX, r.get(1))?,
                })
            })
            .collect()
    }
}

//! [`RedbRelay`]: Relay's storage in the shared redb database of a data directory.
//!
//! Tables (record values are JSON, numbers keeping their exact text, stored as `redb::record`
//! stores a CARP record: compressed when that pays, then encrypted with the store's storage key,
//! the table's name being the associated data, when one is configured):
//! `relay_projects` (project_id -> record), `relay_packages` (`project_id\0package_id` -> seq,
//! hash, quarantine, object: ids are unique per project), `relay_package_order` ((project_id,
//! seq) -> package_id), `relay_reviews` ((`project_id\0package_id`, seq) -> record),
//! `relay_facts` (`project\0subject\0predicate\0fact_id` -> record), `relay_fact_current`
//! (`project\0subject\0predicate` -> key of the current row), `relay_sessions` (session_id ->
//! record), `relay_meta` (counters), `relay_fact_clock` (project_id -> the latest recorded
//! instant of its facts; created on open, and seeded from the stored rows the first time a
//! project without a mark is written, so data written before it keeps working), `relay_outbox`
//! (key -> the events a write owes its chain, as text, encrypted in the text form; emptied by the
//! trace committer), `relay_package_created` ((project_id, created key, seq) -> package_id: the
//! creation-time index that orient's and orchestrate's window reads, keyed by
//! [`cra_relay::store::created_key`]; packages whose `created_at` does not parse have no entry).
//! The keys, the order and creation-time indexes, the counters and the fact clock stay in the
//! clear: ids, fact subjects and predicates, timestamps and numbers (`specs/storage-encryption.md`).
//! Records written before encryption was turned on still read ([`Encryption::decrypt`]).
//!
//! Data written before ids were per project keyed packages and reviews by `package_id` alone;
//! opening such a database rekeys them once, in one transaction ([`RedbRelay::new`]). Data written
//! before the creation-time index gets it the same way: the first open builds it from the stored
//! packages and marks the database (`relay_meta` `package_created`).
//!
//! redb serialises write transactions, so each multi-row change (insert-if-absent plus session
//! append, compare-and-swap plus review record, supersession plus insert) is one atomic commit.

use std::sync::{Arc, Mutex};

use cra_relay::store::{Outbox, OutboxEntry, Written};

use ::redb::{ReadableTable, ReadableTableMetadata, TableDefinition, TableError, TableHandle};
use cra_relay::fact::{self, FactQuery, FactRecord, NewFact};
use cra_relay::model::{Project, ReviewRecord, Session, StoredPackage};
use cra_relay::store::{
    InsertOutcome, PackageFilter, RelayStore, RelayStoreError, SearchHit, SearchQuery, Snapshot,
    created_key, list_window,
};
use serde_json::{Value, json};

use super::search::{ChunkIndex, hits};
use crate::encryption::Encryption;
use crate::redb::record;

const PROJECTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_projects");
const PACKAGES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_packages");
const ORDER: TableDefinition<'_, (&str, u64), &str> = TableDefinition::new("relay_package_order");
const CREATED: TableDefinition<'_, (&str, &str, u64), &str> =
    TableDefinition::new("relay_package_created");
/// Review records (re-encrypted by `RedbStore::reencrypt`, as the tables of [`RECORDS`]).
pub(crate) const REVIEWS: TableDefinition<'_, (&str, u64), &[u8]> =
    TableDefinition::new("relay_reviews");
const FACTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_facts");
const CURRENT: TableDefinition<'_, &str, &str> = TableDefinition::new("relay_fact_current");
const SESSIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("relay_sessions");
/// The tables of records keyed by text, which `RedbStore::reencrypt` re-encrypts.
pub(crate) const RECORDS: [TableDefinition<'_, &str, &[u8]>; 4] =
    [PROJECTS, PACKAGES, FACTS, SESSIONS];
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("relay_meta");
pub(crate) const FACT_CLOCK: TableDefinition<'_, &str, &str> =
    TableDefinition::new("relay_fact_clock");
/// The audit outbox: written by Relay writes, emptied by the trace committer's transaction that
/// appends an entry's events (`crate::redb::carp`).
pub(crate) const OUTBOX: TableDefinition<'_, &str, &str> = TableDefinition::new("relay_outbox");

/// The conversions opening Relay's tables will make (`rekey_packages`, `build_created_index`),
/// as read from `txn` (`crate::redb::upgrade::plan`).
pub(crate) fn pending(
    txn: &::redb::ReadTransaction,
    steps: &mut Vec<crate::upgrade::UpgradeStep>,
) -> Result<(), crate::BackendError> {
    use crate::redb::backend;
    use crate::upgrade::UpgradeStep;
    let (mut done_keys, mut done_created) = (false, false);
    match txn.open_table(META) {
        Ok(meta) => {
            done_keys = meta.get("package_keys").map_err(backend)?.is_some();
            done_created = meta.get("package_created").map_err(backend)?.is_some();
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(backend(e)),
    }
    let (mut packages, mut unkeyed) = (0u64, 0u64);
    match txn.open_table(PACKAGES) {
        Ok(t) => {
            for row in t.iter().map_err(backend)? {
                let (k, _) = row.map_err(backend)?;
                packages += 1;
                unkeyed += u64::from(!k.value().contains('\0'));
            }
        }
        Err(TableError::TableDoesNotExist(_)) => {}
        Err(e) => return Err(backend(e)),
    }
    if !done_keys && unkeyed > 0 {
        steps.push(UpgradeStep::new(
            "relay.package_keys",
            format!("key {unkeyed} Relay packages by their project"),
        ));
    }
    if !done_created && packages > 0 {
        steps.push(UpgradeStep::new(
            "relay.created_index",
            format!("index {packages} Relay packages by their creation time"),
        ));
    }
    Ok(())
}

/// Passes Relay's tables to a rewrite of the database (`crate::redb::rewrite`).
pub(crate) fn copy_tables(
    c: &mut crate::redb::rewrite::Copier<'_>,
) -> Result<(), crate::BackendError> {
    for table in RECORDS {
        c.copy(table)?;
    }
    c.copy(ORDER)?;
    c.copy(CREATED)?;
    c.copy(REVIEWS)?;
    c.copy(CURRENT)?;
    c.copy(META)?;
    c.copy(FACT_CLOCK)?;
    c.copy(OUTBOX)
}

fn be(e: impl std::fmt::Display) -> RelayStoreError {
    RelayStoreError::Backend(format!("redb: {e}"))
}

/// How Relay's records are stored in their tables: their JSON as [`crate::redb::record::store`]
/// stores it (compressed when that pays, then encrypted with the store's [`Encryption`], the
/// table's name being the associated data), the outbox's text in the text form.
#[derive(Clone, Debug, Default)]
struct Codec(Encryption);

impl Codec {
    /// `t` as stored in `table`.
    fn enc<T: serde::Serialize>(
        &self,
        table: impl TableHandle,
        t: &T,
    ) -> Result<Vec<u8>, RelayStoreError> {
        let json = serde_json::to_vec(t).map_err(be)?;
        record::store(&self.0, table.name(), json).map_err(|e| {
            RelayStoreError::Backend(format!("cannot store a record of {}: {e}", table.name()))
        })
    }

    /// The record [`Codec::enc`] stored in `table` (or stored before encryption or compression).
    fn dec<T: serde::de::DeserializeOwned>(
        &self,
        table: impl TableHandle,
        b: &[u8],
    ) -> Result<T, RelayStoreError> {
        let text = record::load(&self.0, table.name(), b).map_err(|e| {
            RelayStoreError::Backend(format!("a record of {} does not read: {e}", table.name()))
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| RelayStoreError::Backend(format!("corrupt relay record: {e}")))
    }

    /// An outbox entry's body as stored in [`OUTBOX`].
    fn enc_text(&self, body: &str) -> Result<String, RelayStoreError> {
        self.0
            .encrypt_text(OUTBOX.name(), body.to_owned())
            .map_err(|e| RelayStoreError::Backend(format!("cannot store an outbox entry: {e}")))
    }

    /// The body [`Codec::enc_text`] stored (or stored before encryption).
    fn dec_text(&self, stored: &str) -> Result<String, RelayStoreError> {
        self.0
            .decrypt_text(OUTBOX.name(), stored)
            .map(std::borrow::Cow::into_owned)
            .map_err(|e| RelayStoreError::Backend(format!("an outbox entry does not read: {e}")))
    }

    fn enc_package(&self, seq: u64, p: &StoredPackage) -> Result<Vec<u8>, RelayStoreError> {
        self.enc(
            PACKAGES,
            &json!({
                "seq": seq,
                "content_hash": p.content_hash,
                "quarantined": p.quarantined,
                "package": Value::Object(p.package.as_object().clone()),
            }),
        )
    }

    fn dec_package(&self, b: &[u8]) -> Result<(u64, StoredPackage), RelayStoreError> {
        let v: Value = self.dec(PACKAGES, b)?;
        let seq = v["seq"].as_u64().unwrap_or(0);
        let mut wire = v["package"].clone();
        if let Some(o) = wire.as_object_mut() {
            o.insert("content_hash".into(), v["content_hash"].clone());
        }
        // Stored objects were validated on the way in; a record that no longer validates is kept
        // visible as quarantined rather than failing every read.
        match StoredPackage::from_wire(&wire) {
            Ok(mut p) => {
                p.quarantined = v["quarantined"].as_str().map(str::to_owned);
                Ok((seq, p))
            }
            Err(errs) => Err(RelayStoreError::Backend(format!(
                "stored package no longer validates: {}",
                errs.iter()
                    .map(|e| format!("{} {}", e.pointer, e.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            ))),
        }
    }
}

/// A package's key in `relay_packages` and `relay_reviews`: its project, NUL, its id.
fn package_key(project_id: &str, package_id: &str) -> String {
    format!("{project_id}\0{package_id}")
}

fn key_of(p: &StoredPackage) -> String {
    package_key(p.package.project_id(), p.package.package_id())
}

/// Rekeys packages and reviews written under `package_id` alone (before ids were per project)
/// under [`package_key`], once: `relay_meta` `package_keys` marks a database done.
fn rekey_packages(tx: &::redb::WriteTransaction, codec: &Codec) -> Result<(), RelayStoreError> {
    let mut meta = tx.open_table(META).map_err(be)?;
    if meta.get("package_keys").map_err(be)?.is_some() {
        return Ok(());
    }
    let mut packages = tx.open_table(PACKAGES).map_err(be)?;
    let mut old = Vec::new();
    for row in packages.iter().map_err(be)? {
        let (k, v) = row.map_err(be)?;
        if !k.value().contains('\0') {
            old.push((k.value().to_owned(), v.value().to_vec()));
        }
    }
    for (id, bytes) in old {
        let (_, p) = codec.dec_package(&bytes)?;
        packages.remove(id.as_str()).map_err(be)?;
        packages
            .insert(key_of(&p).as_str(), bytes.as_slice())
            .map_err(be)?;
    }
    let mut reviews = tx.open_table(REVIEWS).map_err(be)?;
    let mut moved = Vec::new();
    for row in reviews.iter().map_err(be)? {
        let (k, v) = row.map_err(be)?;
        let (id, n) = k.value();
        if !id.contains('\0') {
            moved.push((id.to_owned(), n, v.value().to_vec()));
        }
    }
    for (id, n, bytes) in moved {
        let record: ReviewRecord = codec.dec(REVIEWS, &bytes)?;
        reviews.remove((id.as_str(), n)).map_err(be)?;
        let key = package_key(&record.project_id, &id);
        reviews
            .insert((key.as_str(), n), bytes.as_slice())
            .map_err(be)?;
    }
    meta.insert("package_keys", 1).map_err(be)?;
    Ok(())
}

/// Adds package `p` (deposit `seq`) to the creation-time index, if its `created_at` parses.
fn index_created(
    created: &mut ::redb::Table<'_, (&str, &str, u64), &str>,
    seq: u64,
    p: &StoredPackage,
) -> Result<(), RelayStoreError> {
    if let Some(k) = created_key(p.package.created_at()) {
        created
            .insert(
                (p.package.project_id(), k.as_str(), seq),
                p.package.package_id(),
            )
            .map_err(be)?;
    }
    Ok(())
}

/// Builds the creation-time index of the packages stored before it existed, once: `relay_meta`
/// `package_created` marks a database done (every later write keeps the index).
fn build_created_index(
    tx: &::redb::WriteTransaction,
    codec: &Codec,
) -> Result<(), RelayStoreError> {
    let mut meta = tx.open_table(META).map_err(be)?;
    if meta.get("package_created").map_err(be)?.is_some() {
        return Ok(());
    }
    let packages = tx.open_table(PACKAGES).map_err(be)?;
    let mut created = tx.open_table(CREATED).map_err(be)?;
    for row in packages.iter().map_err(be)? {
        let (_, v) = row.map_err(be)?;
        let (seq, p) = codec.dec_package(v.value())?;
        index_created(&mut created, seq, &p)?;
    }
    meta.insert("package_created", 1).map_err(be)?;
    Ok(())
}

fn fact_prefix(project: &str, subject: &str, predicate: &str) -> String {
    format!("{project}\0{subject}\0{predicate}")
}

fn fact_key(r: &FactRecord) -> String {
    format!(
        "{}\0{}",
        fact_prefix(&r.fact.project_id, &r.fact.subject, &r.fact.predicate),
        r.fact.fact_id
    )
}

/// Relay over a shared redb database. A store made by [`RelayStore::with_outbox`] shares the
/// database and the search index of the one it was made from.
pub struct RedbRelay {
    db: Arc<crate::redb::DatabaseHandle>,
    codec: Codec,
    index: Arc<Mutex<Option<ChunkIndex>>>,
    outbox: Option<Arc<dyn Outbox>>,
}

impl std::fmt::Debug for RedbRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbRelay").finish_non_exhaustive()
    }
}

impl RedbRelay {
    /// Relay's tables in `db` (created if missing; packages of an earlier version rekeyed),
    /// records stored as plaintext: for a database without storage keys. A data directory's
    /// store is opened with [`RedbRelay::open`], which encrypts as the store does.
    pub fn new(db: Arc<crate::redb::DatabaseHandle>) -> Result<Self, RelayStoreError> {
        Self::with_codec(db, Codec::default())
    }

    /// Relay over the database of an opened data directory, its records encrypted with the
    /// store's storage key when one is configured.
    pub fn open(store: &crate::RedbStore) -> Result<Self, RelayStoreError> {
        let codec = Codec(store.config().encryption.clone());
        Self::with_codec(store.handle().clone(), codec)
    }

    fn with_codec(
        db: Arc<crate::redb::DatabaseHandle>,
        codec: Codec,
    ) -> Result<Self, RelayStoreError> {
        let tx = db.begin_write().map_err(be)?;
        {
            tx.open_table(PROJECTS).map_err(be)?;
            tx.open_table(PACKAGES).map_err(be)?;
            tx.open_table(ORDER).map_err(be)?;
            tx.open_table(CREATED).map_err(be)?;
            tx.open_table(REVIEWS).map_err(be)?;
            tx.open_table(FACTS).map_err(be)?;
            tx.open_table(CURRENT).map_err(be)?;
            tx.open_table(SESSIONS).map_err(be)?;
            tx.open_table(META).map_err(be)?;
            tx.open_table(FACT_CLOCK).map_err(be)?;
            tx.open_table(OUTBOX).map_err(be)?;
        }
        rekey_packages(&tx, &codec)?;
        build_created_index(&tx, &codec)?;
        tx.commit().map_err(be)?;
        Ok(Self {
            db,
            codec,
            index: Arc::new(Mutex::new(None)),
            outbox: None,
        })
    }

    /// Stores the outbox entries of `written` in `tx`, the write's transaction.
    fn owe(
        &self,
        tx: &::redb::WriteTransaction,
        written: Written<'_>,
    ) -> Result<(), RelayStoreError> {
        let Some(outbox) = &self.outbox else {
            return Ok(());
        };
        let entries = outbox.entries(written)?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut t = tx.open_table(OUTBOX).map_err(be)?;
        for OutboxEntry { key, body } in &entries {
            let stored = self.codec.enc_text(body)?;
            t.insert(key.as_str(), stored.as_str()).map_err(be)?;
        }
        Ok(())
    }

    fn reindex(&self, packages: &[&StoredPackage]) -> Result<(), RelayStoreError> {
        let guard = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ix) = guard.as_ref() {
            ix.upsert(packages)?;
        }
        Ok(())
    }

    fn next(meta: &mut ::redb::Table<'_, &str, u64>, key: &str) -> Result<u64, RelayStoreError> {
        let n = meta.get(key).map_err(be)?.map(|g| g.value()).unwrap_or(0);
        meta.insert(key, n + 1).map_err(be)?;
        Ok(n)
    }

    /// The recorded instant of a fact write to `project` in `tx` (redb serialises write
    /// transactions, so this is under the lock): [`fact::recorded_instant`] of `now` and the
    /// project's mark, which it advances. Call it before opening the fact tables.
    fn stamp(
        &self,
        tx: &::redb::WriteTransaction,
        project: &str,
        now: &str,
    ) -> Result<String, RelayStoreError> {
        let mut clock = tx.open_table(FACT_CLOCK).map_err(be)?;
        let mark = clock
            .get(project)
            .map_err(be)?
            .map(|g| g.value().to_owned());
        let last = match mark {
            Some(m) => Some(m),
            None => {
                let facts = tx.open_table(FACTS).map_err(be)?;
                let prefix = format!("{project}\0");
                let mut rows = Vec::new();
                for row in facts.range(prefix.as_str()..).map_err(be)? {
                    let (k, v) = row.map_err(be)?;
                    if !k.value().starts_with(&prefix) {
                        break;
                    }
                    rows.push(self.codec.dec::<FactRecord>(FACTS, v.value())?);
                }
                fact::latest_recorded(&rows)
            }
        };
        let stamp = fact::recorded_instant(last.as_deref(), now);
        clock.insert(project, stamp.as_str()).map_err(be)?;
        Ok(stamp)
    }

    fn all_packages(&self) -> Result<Vec<(u64, StoredPackage)>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(PACKAGES).map_err(be)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(be)? {
            let (_, v) = row.map_err(be)?;
            out.push(self.codec.dec_package(v.value())?);
        }
        Ok(out)
    }
}

fn missing_ok<T>(r: Result<T, TableError>) -> Result<Option<T>, RelayStoreError> {
    match r {
        Ok(t) => Ok(Some(t)),
        Err(TableError::TableDoesNotExist(_)) => Ok(None),
        Err(e) => Err(be(e)),
    }
}

impl RelayStore for RedbRelay {
    fn create_project(&self, project: &Project) -> Result<(), RelayStoreError> {
        let tx = self.db.begin_write().map_err(be)?;
        {
            let mut t = tx.open_table(PROJECTS).map_err(be)?;
            if t.get(project.project_id.as_str()).map_err(be)?.is_some() {
                return Err(RelayStoreError::AlreadyExists(format!(
                    "project {}",
                    project.project_id
                )));
            }
            t.insert(
                project.project_id.as_str(),
                self.codec.enc(PROJECTS, project)?.as_slice(),
            )
            .map_err(be)?;
        }
        self.owe(&tx, Written::Project(project))?;
        tx.commit().map_err(be)
    }

    fn get_project(&self, project_id: &str) -> Result<Option<Project>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let Some(t) = missing_ok(tx.open_table(PROJECTS))? else {
            return Ok(None);
        };
        t.get(project_id)
            .map_err(be)?
            .map(|g| self.codec.dec(PROJECTS, g.value()))
            .transpose()
    }

    fn list_projects(&self) -> Result<Vec<Project>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(PROJECTS).map_err(be)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(be)? {
            out.push(self.codec.dec(PROJECTS, row.map_err(be)?.1.value())?);
        }
        Ok(out)
    }

    fn set_archived(
        &self,
        project_id: &str,
        archived_at: Option<&str>,
    ) -> Result<Project, RelayStoreError> {
        let tx = self.db.begin_write().map_err(be)?;
        let project = {
            let mut t = tx.open_table(PROJECTS).map_err(be)?;
            let mut p: Project = match t.get(project_id).map_err(be)? {
                Some(g) => self.codec.dec(PROJECTS, g.value())?,
                None => return Err(RelayStoreError::NotFound(format!("project {project_id}"))),
            };
            p.archived_at = archived_at.map(str::to_owned);
            t.insert(project_id, self.codec.enc(PROJECTS, &p)?.as_slice())
                .map_err(be)?;
            p
        };
        self.owe(&tx, Written::Project(&project))?;
        tx.commit().map_err(be)?;
        Ok(project)
    }

    fn insert_package(&self, package: &StoredPackage) -> Result<InsertOutcome, RelayStoreError> {
        let id = package.package.package_id();
        let key = key_of(package);
        let tx = self.db.begin_write().map_err(be)?;
        {
            let mut t = tx.open_table(PACKAGES).map_err(be)?;
            if let Some(g) = t.get(key.as_str()).map_err(be)? {
                let (_, existing) = self.codec.dec_package(g.value())?;
                return Ok(InsertOutcome::Existing(existing));
            }
            let mut meta = tx.open_table(META).map_err(be)?;
            let seq = Self::next(&mut meta, "package_seq")?;
            t.insert(
                key.as_str(),
                self.codec.enc_package(seq, package)?.as_slice(),
            )
            .map_err(be)?;
            tx.open_table(ORDER)
                .map_err(be)?
                .insert((package.package.project_id(), seq), id)
                .map_err(be)?;
            index_created(&mut tx.open_table(CREATED).map_err(be)?, seq, package)?;
            if let Some(sid) = package.package.session_id() {
                let mut st = tx.open_table(SESSIONS).map_err(be)?;
                let existing: Option<Session> = st
                    .get(sid)
                    .map_err(be)?
                    .map(|g| self.codec.dec(SESSIONS, g.value()))
                    .transpose()?;
                if let Some(mut s) = existing {
                    s.packages_deposited.push(id.to_owned());
                    st.insert(sid, self.codec.enc(SESSIONS, &s)?.as_slice())
                        .map_err(be)?;
                }
            }
        }
        self.owe(&tx, Written::Package(package))?;
        tx.commit().map_err(be)?;
        self.reindex(&[package])?;
        Ok(InsertOutcome::Inserted)
    }

    fn get_package(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Option<StoredPackage>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(PACKAGES).map_err(be)?;
        let g = t
            .get(package_key(project_id, package_id).as_str())
            .map_err(be)?;
        g.map(|g| self.codec.dec_package(g.value()).map(|(_, p)| p))
            .transpose()
    }

    fn find_package(&self, package_id: &str) -> Result<Vec<StoredPackage>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let projects = tx.open_table(PROJECTS).map_err(be)?;
        let t = tx.open_table(PACKAGES).map_err(be)?;
        let mut out = Vec::new();
        for row in projects.iter().map_err(be)? {
            let (project, _) = row.map_err(be)?;
            let key = package_key(project.value(), package_id);
            if let Some(g) = t.get(key.as_str()).map_err(be)? {
                out.push(self.codec.dec_package(g.value())?.1);
            }
        }
        Ok(out)
    }

    fn list_packages(
        &self,
        project_id: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let order = tx.open_table(ORDER).map_err(be)?;
        let t = tx.open_table(PACKAGES).map_err(be)?;
        if let Some(since) = &filter.created_since {
            let load = |id: &str| -> Result<Option<StoredPackage>, RelayStoreError> {
                t.get(package_key(project_id, id).as_str())
                    .map_err(be)?
                    .map(|g| self.codec.dec_package(g.value()).map(|(_, p)| p))
                    .transpose()
            };
            let by_deposit = order
                .range((project_id, 0u64)..=(project_id, u64::MAX))
                .map_err(be)?
                .rev()
                .filter_map(|row| match row.map_err(be) {
                    Ok((_, id)) => load(id.value()).transpose(),
                    Err(e) => Some(Err(e)),
                });
            let created = tx.open_table(CREATED).map_err(be)?;
            let window = created
                .range((project_id, since.as_str(), 0u64)..)
                .map_err(be)?
                .map(|row| {
                    let (k, id) = row.map_err(be)?;
                    let (project, _, seq) = k.value();
                    Ok((project == project_id).then(|| (seq, id.value().to_owned())))
                })
                .map_while(Result::transpose);
            return list_window(filter, by_deposit, window, |id| load(&id));
        }
        let limit = filter.limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        for row in order
            .range((project_id, 0u64)..=(project_id, u64::MAX))
            .map_err(be)?
            .rev()
        {
            if out.len() >= limit {
                break;
            }
            let (_, id) = row.map_err(be)?;
            let key = package_key(project_id, id.value());
            if let Some(g) = t.get(key.as_str()).map_err(be)? {
                let (_, p) = self.codec.dec_package(g.value())?;
                if filter.admits(&p) {
                    out.push(p);
                }
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
        let id = updated.package.package_id();
        let key = key_of(updated);
        let tx = self.db.begin_write().map_err(be)?;
        {
            let mut t = tx.open_table(PACKAGES).map_err(be)?;
            let (seq, current) = match t.get(key.as_str()).map_err(be)? {
                Some(g) => self.codec.dec_package(g.value())?,
                None => return Err(RelayStoreError::NotFound(format!("package {id}"))),
            };
            if current.content_hash != expected_hash {
                return Err(RelayStoreError::Conflict(format!("package {id}")));
            }
            t.insert(
                key.as_str(),
                self.codec.enc_package(seq, updated)?.as_slice(),
            )
            .map_err(be)?;
            let (was, now) = (
                created_key(current.package.created_at()),
                created_key(updated.package.created_at()),
            );
            if was != now {
                let mut created = tx.open_table(CREATED).map_err(be)?;
                if let Some(k) = was {
                    created
                        .remove((updated.package.project_id(), k.as_str(), seq))
                        .map_err(be)?;
                }
                index_created(&mut created, seq, updated)?;
            }
            let mut meta = tx.open_table(META).map_err(be)?;
            let n = Self::next(&mut meta, "review_seq")?;
            tx.open_table(REVIEWS)
                .map_err(be)?
                .insert(
                    (key.as_str(), n),
                    self.codec.enc(REVIEWS, review)?.as_slice(),
                )
                .map_err(be)?;
        }
        self.owe(&tx, Written::Package(updated))?;
        tx.commit().map_err(be)?;
        self.reindex(&[updated])
    }

    fn quarantine_package(
        &self,
        project_id: &str,
        package_id: &str,
        reason: &str,
    ) -> Result<(), RelayStoreError> {
        let key = package_key(project_id, package_id);
        let tx = self.db.begin_write().map_err(be)?;
        let p = {
            let mut t = tx.open_table(PACKAGES).map_err(be)?;
            let (seq, mut p) = match t.get(key.as_str()).map_err(be)? {
                Some(g) => self.codec.dec_package(g.value())?,
                None => return Err(RelayStoreError::NotFound(format!("package {package_id}"))),
            };
            if p.quarantined.is_some() {
                return Ok(());
            }
            p.quarantined = Some(reason.to_owned());
            t.insert(key.as_str(), self.codec.enc_package(seq, &p)?.as_slice())
                .map_err(be)?;
            p
        };
        self.owe(&tx, Written::Quarantined(&p))?;
        tx.commit().map_err(be)?;
        self.reindex(&[&p])
    }

    fn list_reviews(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Vec<ReviewRecord>, RelayStoreError> {
        let key = package_key(project_id, package_id);
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(REVIEWS).map_err(be)?;
        let mut out = Vec::new();
        for row in t
            .range((key.as_str(), 0u64)..=(key.as_str(), u64::MAX))
            .map_err(be)?
        {
            out.push(self.codec.dec(REVIEWS, row.map_err(be)?.1.value())?);
        }
        Ok(out)
    }

    fn assert_fact(
        &self,
        new: NewFact,
        now: &dyn Fn() -> String,
    ) -> Result<FactRecord, RelayStoreError> {
        let f = &new.record.fact;
        let prefix = fact_prefix(&f.project_id, &f.subject, &f.predicate);
        let tx = self.db.begin_write().map_err(be)?;
        let stamp = self.stamp(&tx, &f.project_id, &now())?;
        let inserted = {
            let mut facts = tx.open_table(FACTS).map_err(be)?;
            let mut current = tx.open_table(CURRENT).map_err(be)?;
            let cur_key: Option<String> = current
                .get(prefix.as_str())
                .map_err(be)?
                .map(|g| g.value().to_owned());
            let cur: Option<FactRecord> = match &cur_key {
                Some(k) => facts
                    .get(k.as_str())
                    .map_err(be)?
                    .map(|g| self.codec.dec(FACTS, g.value()))
                    .transpose()?,
                None => None,
            };
            let (closed, inserted) = fact::supersede(cur.as_ref(), new, &stamp)?;
            if let (Some(k), Some(c)) = (&cur_key, closed) {
                facts
                    .insert(k.as_str(), self.codec.enc(FACTS, &c)?.as_slice())
                    .map_err(be)?;
            }
            let key = fact_key(&inserted);
            facts
                .insert(key.as_str(), self.codec.enc(FACTS, &inserted)?.as_slice())
                .map_err(be)?;
            current.insert(prefix.as_str(), key.as_str()).map_err(be)?;
            inserted
        };
        self.owe(&tx, Written::Fact(&inserted))?;
        tx.commit().map_err(be)?;
        Ok(inserted)
    }

    fn invalidate_facts(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
        now: &dyn Fn() -> String,
    ) -> Result<usize, RelayStoreError> {
        let prefix = fact_prefix(project_id, subject, predicate);
        let tx = self.db.begin_write().map_err(be)?;
        let now = self.stamp(&tx, project_id, &now())?;
        let now = now.as_str();
        let n = {
            let mut facts = tx.open_table(FACTS).map_err(be)?;
            let mut current = tx.open_table(CURRENT).map_err(be)?;
            let key = current
                .remove(prefix.as_str())
                .map_err(be)?
                .map(|g| g.value().to_owned());
            match key {
                Some(k) => {
                    let row: Option<FactRecord> = facts
                        .get(k.as_str())
                        .map_err(be)?
                        .map(|g| self.codec.dec(FACTS, g.value()))
                        .transpose()?;
                    match row {
                        Some(r) if r.is_current() => {
                            let closed = fact::invalidate(&r, now);
                            facts
                                .insert(k.as_str(), self.codec.enc(FACTS, &closed)?.as_slice())
                                .map_err(be)?;
                            1
                        }
                        _ => 0,
                    }
                }
                None => 0,
            }
        };
        self.owe(&tx, Written::Invalidated(n))?;
        tx.commit().map_err(be)?;
        Ok(n)
    }

    fn facts(
        &self,
        project_id: &str,
        query: &FactQuery,
    ) -> Result<Vec<FactRecord>, RelayStoreError> {
        let mut prefix = format!("{project_id}\0");
        if let Some(s) = &query.subject {
            prefix.push_str(s);
            prefix.push('\0');
            if let Some(p) = &query.predicate {
                prefix.push_str(p);
                prefix.push('\0');
            }
        }
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(FACTS).map_err(be)?;
        let mut rows = Vec::new();
        for row in t.range(prefix.as_str()..).map_err(be)? {
            let (k, v) = row.map_err(be)?;
            if !k.value().starts_with(&prefix) {
                break;
            }
            rows.push(self.codec.dec::<FactRecord>(FACTS, v.value())?);
        }
        Ok(fact::select(rows, query))
    }

    fn put_session(&self, session: &Session) -> Result<(), RelayStoreError> {
        let tx = self.db.begin_write().map_err(be)?;
        tx.open_table(SESSIONS)
            .map_err(be)?
            .insert(
                session.session_id.as_str(),
                self.codec.enc(SESSIONS, session)?.as_slice(),
            )
            .map_err(be)?;
        self.owe(&tx, Written::Session(session))?;
        tx.commit().map_err(be)
    }

    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<Option<Session>, RelayStoreError> {
        let tx = self.db.begin_write().map_err(be)?;
        let ended = {
            let mut t = tx.open_table(SESSIONS).map_err(be)?;
            let found: Option<Session> = t
                .get(session_id)
                .map_err(be)?
                .map(|g| self.codec.dec(SESSIONS, g.value()))
                .transpose()?;
            match found {
                None => None,
                Some(mut s) => {
                    if s.ended_at.is_none() {
                        s.ended_at = Some(ended_at.to_owned());
                        t.insert(session_id, self.codec.enc(SESSIONS, &s)?.as_slice())
                            .map_err(be)?;
                        self.owe(&tx, Written::Session(&s))?;
                    }
                    Some(s)
                }
            }
        };
        tx.commit().map_err(be)?;
        Ok(ended)
    }

    fn get_session(&self, session_id: &str) -> Result<Option<Session>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let t = tx.open_table(SESSIONS).map_err(be)?;
        t.get(session_id)
            .map_err(be)?
            .map(|g| self.codec.dec(SESSIONS, g.value()))
            .transpose()
    }

    fn supports_search(&self) -> bool {
        true
    }

    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, RelayStoreError> {
        let mut guard = self.index.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let ix = ChunkIndex::new()?;
            let all = self.all_packages()?;
            let refs: Vec<&StoredPackage> = all.iter().map(|(_, p)| p).collect();
            ix.upsert(&refs)?;
            *guard = Some(ix);
        }
        let raw = match guard.as_ref() {
            Some(ix) => ix.search(query, query.limit)?,
            None => Vec::new(),
        };
        drop(guard);
        hits(query, raw, |id| self.get_package(&query.project_id, id))
    }

    fn with_outbox(&self, outbox: Arc<dyn Outbox>) -> Arc<dyn RelayStore> {
        Arc::new(Self {
            db: self.db.clone(),
            codec: self.codec.clone(),
            index: self.index.clone(),
            outbox: Some(outbox),
        })
    }

    fn outbox(&self) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let Some(t) = missing_ok(tx.open_table(OUTBOX))? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for row in t.iter().map_err(be)? {
            let (k, v) = row.map_err(be)?;
            out.push(OutboxEntry {
                key: k.value().to_owned(),
                body: self.codec.dec_text(v.value())?,
            });
        }
        Ok(out)
    }

    fn snapshot(&self) -> Result<Snapshot, RelayStoreError> {
        let tx = self.db.begin_read().map_err(be)?;
        let mut snap = Snapshot::default();
        for row in tx.open_table(PROJECTS).map_err(be)?.iter().map_err(be)? {
            snap.projects
                .push(self.codec.dec(PROJECTS, row.map_err(be)?.1.value())?);
        }
        let packages = tx.open_table(PACKAGES).map_err(be)?;
        for row in tx.open_table(ORDER).map_err(be)?.iter().map_err(be)? {
            let (order, id) = row.map_err(be)?;
            let key = package_key(order.value().0, id.value());
            if let Some(g) = packages.get(key.as_str()).map_err(be)? {
                snap.packages.push(self.codec.dec_package(g.value())?.1);
            }
        }
        for row in tx.open_table(FACTS).map_err(be)?.iter().map_err(be)? {
            snap.facts
                .push(self.codec.dec(FACTS, row.map_err(be)?.1.value())?);
        }
        fact::sort_facts(&mut snap.facts);
        for row in tx.open_table(SESSIONS).map_err(be)?.iter().map_err(be)? {
            snap.sessions
                .push(self.codec.dec(SESSIONS, row.map_err(be)?.1.value())?);
        }
        let mut reviews = Vec::new();
        for row in tx.open_table(REVIEWS).map_err(be)?.iter().map_err(be)? {
            reviews.push(self.codec.dec(REVIEWS, row.map_err(be)?.1.value())?);
        }
        snap.reviews = cra_relay::export::sort_reviews(reviews);
        Ok(snap)
    }

    fn restore(&self, snapshot: &Snapshot) -> Result<(), RelayStoreError> {
        let tx = self.db.begin_write().map_err(be)?;
        {
            let mut projects = tx.open_table(PROJECTS).map_err(be)?;
            let mut packages = tx.open_table(PACKAGES).map_err(be)?;
            let mut facts = tx.open_table(FACTS).map_err(be)?;
            if !projects.is_empty().map_err(be)?
                || !packages.is_empty().map_err(be)?
                || !facts.is_empty().map_err(be)?
            {
                return Err(RelayStoreError::AlreadyExists(
                    "data in the target store (import needs an empty store)".into(),
                ));
            }
            let mut order = tx.open_table(ORDER).map_err(be)?;
            let mut created = tx.open_table(CREATED).map_err(be)?;
            let mut meta = tx.open_table(META).map_err(be)?;
            let mut current = tx.open_table(CURRENT).map_err(be)?;
            let mut sessions = tx.open_table(SESSIONS).map_err(be)?;
            let mut reviews = tx.open_table(REVIEWS).map_err(be)?;
            for p in &snapshot.projects {
                projects
                    .insert(
                        p.project_id.as_str(),
                        self.codec.enc(PROJECTS, p)?.as_slice(),
                    )
                    .map_err(be)?;
            }
            for p in &snapshot.packages {
                let seq = Self::next(&mut meta, "package_seq")?;
                let id = p.package.package_id();
                packages
                    .insert(
                        key_of(p).as_str(),
                        self.codec.enc_package(seq, p)?.as_slice(),
                    )
                    .map_err(be)?;
                order
                    .insert((p.package.project_id(), seq), id)
                    .map_err(be)?;
                index_created(&mut created, seq, p)?;
            }
            for r in &snapshot.facts {
                let key = fact_key(r);
                facts
                    .insert(key.as_str(), self.codec.enc(FACTS, r)?.as_slice())
                    .map_err(be)?;
                if r.is_current() {
                    let prefix =
                        fact_prefix(&r.fact.project_id, &r.fact.subject, &r.fact.predicate);
                    current.insert(prefix.as_str(), key.as_str()).map_err(be)?;
                }
            }
            for s in &snapshot.sessions {
                sessions
                    .insert(
                        s.session_id.as_str(),
                        self.codec.enc(SESSIONS, s)?.as_slice(),
                    )
                    .map_err(be)?;
            }
            for r in &snapshot.reviews {
                let n = Self::next(&mut meta, "review_seq")?;
                let key = package_key(&r.project_id, &r.package_id);
                reviews
                    .insert((key.as_str(), n), self.codec.enc(REVIEWS, r)?.as_slice())
                    .map_err(be)?;
            }
        }
        self.owe(&tx, Written::Restored(snapshot))?;
        tx.commit().map_err(be)?;
        let refs: Vec<&StoredPackage> = snapshot.packages.iter().collect();
        self.reindex(&refs)
    }
}

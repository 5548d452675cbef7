//! An in-memory [`RelayStore`] for unit tests only (a mutex around maps; every method is one
//! critical section, so multi-row changes are atomic). Never used by the product. Like the
//! product's backends it keeps each project's deposit order and a creation-time index, so a
//! listing reads what it returns and a windowed one the window ([`super::list_window`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::{
    InsertOutcome, Outbox, OutboxEntry, PackageFilter, RelayStore, RelayStoreError, Snapshot,
    Written, created_key, list_window,
};
use crate::fact::{self, FactQuery, FactRecord, NewFact};
use crate::model::{Project, ReviewRecord, Session, StoredPackage};

#[derive(Debug, Default)]
struct Inner {
    projects: BTreeMap<String, Project>,
    /// By (project_id, package_id).
    packages: BTreeMap<(String, String), (u64, StoredPackage)>,
    /// (project_id, seq) -> package_id: deposit order.
    order: BTreeMap<(String, u64), String>,
    /// (project_id, created key, seq): the creation-time index (packages whose `created_at`
    /// parses).
    created: BTreeSet<(String, String, u64)>,
    next_seq: u64,
    reviews: Vec<ReviewRecord>,
    facts: Vec<FactRecord>,
    sessions: BTreeMap<String, Session>,
    outbox: BTreeMap<String, String>,
}

impl Inner {
    /// Stores `p` as the next deposit.
    fn push_package(&mut self, p: &StoredPackage) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let (project, id) = package_key(p);
        self.order.insert((project.clone(), seq), id);
        if let Some(k) = created_key(p.package.created_at()) {
            self.created.insert((project, k, seq));
        }
        self.packages.insert(package_key(p), (seq, p.clone()));
    }

    /// The recorded instant of a fact write to `project_id` (see [`fact::recorded_instant`]).
    fn stamp(&self, project_id: &str, now: &str) -> String {
        let last = fact::latest_recorded(
            self.facts
                .iter()
                .filter(|r| r.fact.project_id == project_id),
        );
        fact::recorded_instant(last.as_deref(), now)
    }
}

fn package_key(p: &StoredPackage) -> (String, String) {
    (
        p.package.project_id().to_owned(),
        p.package.package_id().to_owned(),
    )
}

/// See the module documentation. A store made by [`RelayStore::with_outbox`] shares the maps
/// of the one it was made from.
#[derive(Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    outbox: Option<Arc<dyn Outbox>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores the outbox entries of `written` in `g`; called before the change itself, so a
    /// failure changes nothing.
    fn owe(&self, g: &mut Inner, written: Written<'_>) -> Result<(), RelayStoreError> {
        if let Some(outbox) = &self.outbox {
            for OutboxEntry { key, body } in outbox.entries(written)? {
                g.outbox.insert(key, body);
            }
        }
        Ok(())
    }

    /// Test hook: overwrites a stored package's object without touching its hash (tampering).
    pub fn tamper(&self, package_id: &str, stored: StoredPackage) {
        let mut g = self.lock();
        let key = (
            stored.package.project_id().to_owned(),
            package_id.to_owned(),
        );
        if let Some(entry) = g.packages.get_mut(&key) {
            entry.1.package = stored.package;
        }
    }
}

impl RelayStore for MemoryStore {
    fn create_project(&self, project: &Project) -> Result<(), RelayStoreError> {
        let mut g = self.lock();
        if g.projects.contains_key(&project.project_id) {
            return Err(RelayStoreError::AlreadyExists(format!(
                "project {}",
                project.project_id
            )));
        }
        self.owe(&mut g, Written::Project(project))?;
        g.projects
            .insert(project.project_id.clone(), project.clone());
        Ok(())
    }

    fn get_project(&self, project_id: &str) -> Result<Option<Project>, RelayStoreError> {
        Ok(self.lock().projects.get(project_id).cloned())
    }

    fn list_projects(&self) -> Result<Vec<Project>, RelayStoreError> {
        Ok(self.lock().projects.values().cloned().collect())
    }

    fn set_archived(
        &self,
        project_id: &str,
        archived_at: Option<&str>,
    ) -> Result<Project, RelayStoreError> {
        let mut g = self.lock();
        let mut p = g
            .projects
            .get(project_id)
            .cloned()
            .ok_or_else(|| RelayStoreError::NotFound(format!("project {project_id}")))?;
        p.archived_at = archived_at.map(str::to_owned);
        self.owe(&mut g, Written::Project(&p))?;
        g.projects.insert(project_id.to_owned(), p.clone());
        Ok(p)
    }

    fn insert_package(&self, package: &StoredPackage) -> Result<InsertOutcome, RelayStoreError> {
        let mut g = self.lock();
        let id = package.package.package_id().to_owned();
        let key = package_key(package);
        if let Some((_, existing)) = g.packages.get(&key) {
            return Ok(InsertOutcome::Existing(existing.clone()));
        }
        self.owe(&mut g, Written::Package(package))?;
        g.push_package(package);
        if let Some(sid) = package.package.session_id()
            && let Some(s) = g.sessions.get_mut(sid)
        {
            s.packages_deposited.push(id);
        }
        Ok(InsertOutcome::Inserted)
    }

    fn get_package(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Option<StoredPackage>, RelayStoreError> {
        let key = (project_id.to_owned(), package_id.to_owned());
        Ok(self.lock().packages.get(&key).map(|(_, p)| p.clone()))
    }

    fn find_package(&self, package_id: &str) -> Result<Vec<StoredPackage>, RelayStoreError> {
        Ok(self
            .lock()
            .packages
            .iter()
            .filter(|((_, id), _)| id == package_id)
            .map(|(_, (_, p))| p.clone())
            .collect())
    }

    fn list_packages(
        &self,
        project_id: &str,
        filter: &PackageFilter,
    ) -> Result<Vec<StoredPackage>, RelayStoreError> {
        let g = self.lock();
        let project = project_id.to_owned();
        let load = |id: &String| {
            g.packages
                .get(&(project.clone(), id.clone()))
                .map(|(_, p)| p.clone())
        };
        let by_deposit = g
            .order
            .range((project.clone(), 0)..=(project.clone(), u64::MAX))
            .rev()
            .filter_map(|(_, id)| load(id));
        let Some(since) = &filter.created_since else {
            let limit = filter.limit.unwrap_or(usize::MAX);
            return Ok(by_deposit
                .filter(|p| filter.admits(p))
                .take(limit)
                .collect());
        };
        let window = g
            .created
            .range((project.clone(), since.clone(), 0)..)
            .take_while(|(p, _, _)| *p == project)
            .filter_map(|(_, _, seq)| {
                let id = g.order.get(&(project.clone(), *seq))?;
                Some(Ok((*seq, id)))
            });
        list_window(filter, by_deposit.map(Ok), window, |id| Ok(load(id)))
    }

    fn update_package(
        &self,
        expected_hash: &str,
        updated: &StoredPackage,
        review: &ReviewRecord,
    ) -> Result<(), RelayStoreError> {
        let mut g = self.lock();
        let id = updated.package.package_id();
        let key = package_key(updated);
        let stored_hash = g
            .packages
            .get(&key)
            .map(|e| e.1.content_hash.clone())
            .ok_or_else(|| RelayStoreError::NotFound(format!("package {id}")))?;
        if stored_hash != expected_hash {
            return Err(RelayStoreError::Conflict(format!("package {id}")));
        }
        self.owe(&mut g, Written::Package(updated))?;
        if let Some((seq, old)) = g.packages.get(&key).cloned() {
            let project = key.0.clone();
            if let Some(k) = created_key(old.package.created_at()) {
                g.created.remove(&(project.clone(), k, seq));
            }
            if let Some(k) = created_key(updated.package.created_at()) {
                g.created.insert((project, k, seq));
            }
        }
        if let Some(entry) = g.packages.get_mut(&key) {
            entry.1 = updated.clone();
        }
        g.reviews.push(review.clone());
        Ok(())
    }

    fn quarantine_package(
        &self,
        project_id: &str,
        package_id: &str,
        reason: &str,
    ) -> Result<(), RelayStoreError> {
        let mut g = self.lock();
        let key = (project_id.to_owned(), package_id.to_owned());
        let mut p = g
            .packages
            .get(&key)
            .map(|e| e.1.clone())
            .ok_or_else(|| RelayStoreError::NotFound(format!("package {package_id}")))?;
        if p.quarantined.is_some() {
            return Ok(());
        }
        p.quarantined = Some(reason.to_owned());
        self.owe(&mut g, Written::Quarantined(&p))?;
        if let Some(entry) = g.packages.get_mut(&key) {
            entry.1 = p;
        }
        Ok(())
    }

    fn list_reviews(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Vec<ReviewRecord>, RelayStoreError> {
        Ok(self
            .lock()
            .reviews
            .iter()
            .filter(|r| r.project_id == project_id && r.package_id == package_id)
            .cloned()
            .collect())
    }

    fn assert_fact(
        &self,
        new: NewFact,
        now: &dyn Fn() -> String,
    ) -> Result<FactRecord, RelayStoreError> {
        let mut g = self.lock();
        let now = g.stamp(&new.record.fact.project_id, &now());
        let now = now.as_str();
        let key = (
            new.record.fact.project_id.clone(),
            new.record.fact.subject.clone(),
            new.record.fact.predicate.clone(),
        );
        let idx = g.facts.iter().position(|r| {
            r.is_current()
                && r.fact.project_id == key.0
                && r.fact.subject == key.1
                && r.fact.predicate == key.2
        });
        let current = idx.map(|i| g.facts[i].clone());
        let (closed, inserted) = fact::supersede(current.as_ref(), new, now)?;
        self.owe(&mut g, Written::Fact(&inserted))?;
        if let (Some(i), Some(c)) = (idx, closed) {
            g.facts[i] = c;
        }
        g.facts.push(inserted.clone());
        Ok(inserted)
    }

    fn invalidate_facts(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
        now: &dyn Fn() -> String,
    ) -> Result<usize, RelayStoreError> {
        let mut g = self.lock();
        let now = g.stamp(project_id, &now());
        let now = now.as_str();
        let closing = |r: &FactRecord| {
            r.is_current()
                && r.fact.project_id == project_id
                && r.fact.subject == subject
                && r.fact.predicate == predicate
        };
        let n = g.facts.iter().filter(|r| closing(r)).count();
        self.owe(&mut g, Written::Invalidated(n))?;
        for r in g.facts.iter_mut() {
            if closing(r) {
                *r = fact::invalidate(r, now);
            }
        }
        Ok(n)
    }

    fn facts(
        &self,
        project_id: &str,
        query: &FactQuery,
    ) -> Result<Vec<FactRecord>, RelayStoreError> {
        let g = self.lock();
        let rows = g
            .facts
            .iter()
            .filter(|r| r.fact.project_id == project_id)
            .cloned();
        Ok(fact::select(rows, query))
    }

    fn put_session(&self, session: &Session) -> Result<(), RelayStoreError> {
        let mut g = self.lock();
        self.owe(&mut g, Written::Session(session))?;
        g.sessions
            .insert(session.session_id.clone(), session.clone());
        Ok(())
    }

    fn get_session(&self, session_id: &str) -> Result<Option<Session>, RelayStoreError> {
        Ok(self.lock().sessions.get(session_id).cloned())
    }

    fn end_session(
        &self,
        session_id: &str,
        ended_at: &str,
    ) -> Result<Option<Session>, RelayStoreError> {
        let mut g = self.lock();
        let Some(mut s) = g.sessions.get(session_id).cloned() else {
            return Ok(None);
        };
        if s.ended_at.is_none() {
            s.ended_at = Some(ended_at.to_owned());
            self.owe(&mut g, Written::Session(&s))?;
            g.sessions.insert(session_id.to_owned(), s.clone());
        }
        Ok(Some(s))
    }

    fn with_outbox(&self, outbox: Arc<dyn Outbox>) -> Arc<dyn RelayStore> {
        Arc::new(Self {
            inner: self.inner.clone(),
            outbox: Some(outbox),
        })
    }

    fn outbox(&self) -> Result<Vec<OutboxEntry>, RelayStoreError> {
        Ok(self
            .lock()
            .outbox
            .iter()
            .map(|(key, body)| OutboxEntry {
                key: key.clone(),
                body: body.clone(),
            })
            .collect())
    }

    fn snapshot(&self) -> Result<Snapshot, RelayStoreError> {
        let g = self.lock();
        let mut packages: Vec<&(u64, StoredPackage)> = g.packages.values().collect();
        packages
            .sort_by(|a, b| (a.1.package.project_id(), a.0).cmp(&(b.1.package.project_id(), b.0)));
        let mut facts = g.facts.clone();
        fact::sort_facts(&mut facts);
        Ok(Snapshot {
            projects: g.projects.values().cloned().collect(),
            packages: packages.into_iter().map(|(_, p)| p.clone()).collect(),
            facts,
            sessions: g.sessions.values().cloned().collect(),
            reviews: crate::export::sort_reviews(g.reviews.clone()),
        })
    }

    fn restore(&self, snapshot: &Snapshot) -> Result<(), RelayStoreError> {
        let mut g = self.lock();
        if !g.projects.is_empty() || !g.packages.is_empty() || !g.facts.is_empty() {
            return Err(RelayStoreError::AlreadyExists(
                "data in the target store (import needs an empty store)".into(),
            ));
        }
        self.owe(&mut g, Written::Restored(snapshot))?;
        for p in &snapshot.projects {
            g.projects.insert(p.project_id.clone(), p.clone());
        }
        for p in &snapshot.packages {
            g.push_package(p);
        }
        g.facts = snapshot.facts.clone();
        for s in &snapshot.sessions {
            g.sessions.insert(s.session_id.clone(), s.clone());
        }
        g.reviews = snapshot.reviews.clone();
        Ok(())
    }
}

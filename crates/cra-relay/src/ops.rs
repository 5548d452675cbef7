//! The Relay operations (§8) and the project, review and session operations around them, over an
//! `Arc<dyn RelayStore>` with an injected clock, id generator and callsign source. Pure
//! decisions (validation, hashing, transitions, supersession) live in the other modules; this is
//! where they meet the store.

use std::sync::Arc;

use cra_wire::clock::{format_timestamp, parse_rfc3339};
use cra_wire::{Clock, FieldError, IdGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use crate::error::RelayError;
use crate::fact::{AssertedBy, Fact, FactQuery, FactRecord, NewFact};
use crate::model::{
    Actor, ActorType, Package, Project, RELAY_VERSION, ReviewRecord, Session, Status, StoredPackage,
};
use crate::session::CallsignSource;
use crate::store::{InsertOutcome, PackageFilter, RelayStore, SearchHit, SearchQuery};
use crate::validate::{MAX_ID_LEN, validate_package};

/// Default `limit` of `pull` latest and relevant (§8.2).
pub const DEFAULT_PULL_LIMIT: usize = 5;
/// Largest accepted `limit`.
pub const MAX_PULL_LIMIT: usize = 1000;

/// The conformance descriptor (§11.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConformanceDescriptor {
    /// `0.1`.
    pub protocol_version: String,
    /// `L3`.
    pub conformance_level: String,
    /// What is supported.
    pub capabilities: Capabilities,
    /// Who we are.
    pub implementation: Implementation,
}

/// §10.2 capabilities (plus `keyword_search`, which says whether `pull` relevant works).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Keyword + vector fusion: not offered.
    pub hybrid_search: bool,
    /// Vector search: not offered.
    pub semantic_search: bool,
    /// Subscriptions: not offered.
    pub realtime: bool,
    /// Blob uploads: not offered.
    pub blob_storage: bool,
    /// BM25 keyword search behind `pull` mode `relevant`.
    pub keyword_search: bool,
}

/// §11.5 implementation block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Implementation {
    /// `cra`.
    pub name: String,
    /// Crate version.
    pub version: String,
}

/// The outcome of a deposit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deposited {
    /// The stored package.
    pub stored: StoredPackage,
    /// False when an identical package was already stored (idempotent replay, HTTP 200 vs 201).
    pub created: bool,
}

/// A listing plus the packages that failed verification while listing (now quarantined).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pulled {
    /// Verified packages.
    pub packages: Vec<StoredPackage>,
    /// Ids of packages that failed verification and were quarantined.
    pub quarantined: Vec<String>,
}

/// The answer of `pull` mode `relevant`: packages ranked best first (best chunk per package),
/// plus the ids of packages that failed verification on the way out (now quarantined).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Relevant {
    /// Verified hits, best first.
    pub hits: Vec<SearchHit>,
    /// Ids of packages that failed verification and were quarantined.
    pub quarantined: Vec<String>,
}

impl Relevant {
    /// The wire answer (specs/relay.md, "pull relevant on the wire"): `packages` holds the
    /// packages exactly as `pull` latest does (the §6 object plus `content_hash`), best first;
    /// `matches` holds, in the same order, `{package_id, score, field, chunk}`; `quarantined`
    /// as for latest. The package objects carry nothing extra, so a client may deposit them back
    /// unchanged.
    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "packages": self.hits.iter().map(|h| h.package.to_wire()).collect::<Vec<_>>(),
            "matches": self.hits.iter().map(|h| serde_json::json!({
                "package_id": h.package.package.package_id(),
                "score": h.score,
                "field": h.field,
                "chunk": h.chunk,
            })).collect::<Vec<_>>(),
            "quarantined": self.quarantined,
        })
    }
}

impl Pulled {
    /// The wire answer of `pull` latest and of the awaiting-review listing:
    /// `{"packages": [...], "quarantined": [...]}`.
    pub fn to_wire(&self) -> Value {
        serde_json::json!({
            "packages": self.packages.iter().map(StoredPackage::to_wire).collect::<Vec<_>>(),
            "quarantined": self.quarantined,
        })
    }
}

/// The Relay service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Relay {
    store: Arc<dyn RelayStore>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGenerator>,
    callsigns: Arc<dyn CallsignSource>,
}

impl Relay {
    /// A service over `store`.
    pub fn new(
        store: Arc<dyn RelayStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGenerator>,
        callsigns: Arc<dyn CallsignSource>,
    ) -> Self {
        Self {
            store,
            clock,
            ids,
            callsigns,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn RelayStore> {
        &self.store
    }

    /// This service with every store write also storing `outbox`'s entries for what it changed
    /// ([`RelayStore::with_outbox`]).
    pub fn with_outbox(&self, outbox: Arc<dyn crate::store::Outbox>) -> Self {
        Self {
            store: self.store.with_outbox(outbox),
            ..self.clone()
        }
    }

    /// The current time in wire form.
    pub fn now(&self) -> String {
        format_timestamp(self.clock.now())
    }

    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// §11.5.
    pub fn conformance(&self) -> ConformanceDescriptor {
        ConformanceDescriptor {
            protocol_version: RELAY_VERSION.into(),
            conformance_level: "L3".into(),
            capabilities: Capabilities {
                hybrid_search: false,
                semantic_search: false,
                realtime: false,
                blob_storage: false,
                keyword_search: self.store.supports_search(),
            },
            implementation: Implementation {
                name: "cra".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
        }
    }

    // ---- projects ------------------------------------------------------------------------

    /// Creates a project (`POST /v1/projects {project_id, name}`).
    pub fn create_project(&self, project_id: &str, name: &str) -> Result<Project, RelayError> {
        let mut errors = Vec::new();
        if project_id.is_empty() || project_id.len() > MAX_ID_LEN {
            errors.push(FieldError::new(
                "/project_id",
                "project_id must be a non-empty string of at most 256 bytes",
            ));
        }
        if name.is_empty() {
            errors.push(FieldError::new("/name", "name must be a non-empty string"));
        }
        if !errors.is_empty() {
            return Err(RelayError::InvalidSchema {
                what: "project",
                errors,
            });
        }
        let project = Project {
            project_id: project_id.into(),
            name: name.into(),
            created_at: self.now(),
            archived_at: None,
        };
        match self.store.create_project(&project) {
            Ok(()) => Ok(project),
            Err(crate::store::RelayStoreError::AlreadyExists(_)) => {
                Err(RelayError::ProjectExists(project_id.into()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// One project.
    pub fn project(&self, project_id: &str) -> Result<Project, RelayError> {
        self.store
            .get_project(project_id)?
            .ok_or_else(|| RelayError::ProjectNotFound(project_id.into()))
    }

    /// Every project.
    pub fn projects(&self) -> Result<Vec<Project>, RelayError> {
        Ok(self.store.list_projects()?)
    }

    /// Archives a project (reversible); archived projects refuse writes.
    pub fn archive(&self, project_id: &str) -> Result<Project, RelayError> {
        let p = self.project(project_id)?;
        if p.archived_at.is_some() {
            return Ok(p);
        }
        Ok(self.store.set_archived(project_id, Some(&self.now()))?)
    }

    /// Reverses [`Relay::archive`].
    pub fn unarchive(&self, project_id: &str) -> Result<Project, RelayError> {
        self.project(project_id)?;
        Ok(self.store.set_archived(project_id, None)?)
    }

    fn writable_project(&self, project_id: &str) -> Result<Project, RelayError> {
        let p = self.project(project_id)?;
        if p.archived_at.is_some() {
            return Err(RelayError::ProjectArchived(project_id.into()));
        }
        Ok(p)
    }

    // ---- deposit and pull ----------------------------------------------------------------

    /// §8.1 deposit into `project_id` as `actor`.
    pub fn deposit(
        &self,
        project_id: &str,
        actor: &Actor,
        value: &Value,
    ) -> Result<Deposited, RelayError> {
        let package = validate_package(value).map_err(|errors| RelayError::InvalidSchema {
            what: "package",
            errors,
        })?;
        if package.project_id() != project_id {
            return Err(RelayError::schema(
                "package",
                "/project_id",
                format!(
                    "project_id `{}` differs from the project deposited into (`{project_id}`)",
                    package.project_id()
                ),
            ));
        }
        check_attribution(
            ["created_by.id", "created_by.type"],
            package.created_by_id(),
            package.created_by_type(),
            actor,
        )?;
        self.writable_project(project_id)?;
        let stored = StoredPackage {
            content_hash: hash(&package)?,
            package,
            quarantined: None,
        };
        match self.store.insert_package(&stored)? {
            InsertOutcome::Inserted => Ok(Deposited {
                stored,
                created: true,
            }),
            InsertOutcome::Existing(existing) => {
                // Same content means same hash: key order, a returned content_hash, `1.0`
                // against `1` or an explicit null member do not make a different package.
                if existing.content_hash == stored.content_hash {
                    Ok(Deposited {
                        stored: existing,
                        created: false,
                    })
                } else {
                    Err(RelayError::DuplicatePackageId(
                        stored.package.package_id().into(),
                    ))
                }
            }
        }
    }

    /// Verifies a stored package; on mismatch quarantines it and reports it.
    fn verified(&self, stored: StoredPackage) -> Result<StoredPackage, RelayError> {
        if let Some(reason) = &stored.quarantined {
            return Err(RelayError::Integrity {
                package_id: stored.package.package_id().into(),
                stored: stored.content_hash.clone(),
                recomputed: reason.clone(),
            });
        }
        match stored.verify() {
            Ok(()) => Ok(stored),
            Err(recomputed) => {
                let id = stored.package.package_id().to_owned();
                self.store
                    .quarantine_package(stored.package.project_id(), &id, &recomputed)?;
                Err(RelayError::Integrity {
                    package_id: id,
                    stored: stored.content_hash,
                    recomputed,
                })
            }
        }
    }

    /// §8.2 pull `specific`: package `package_id` of `project_id` (ids are unique within a
    /// project), verified.
    pub fn pull_specific(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<StoredPackage, RelayError> {
        let stored = self
            .store
            .get_package(project_id, package_id)?
            .ok_or_else(|| {
                RelayError::PackageNotFound(format!("{package_id} in project {project_id}"))
            })?;
        self.verified(stored)
    }

    /// The project of package `package_id`: `project` when named, else the one project holding
    /// that id ([`RelayError::PackageNotFound`] for none, [`RelayError::AmbiguousPackageId`]
    /// for several).
    pub fn locate_package(
        &self,
        project: Option<&str>,
        package_id: &str,
    ) -> Result<String, RelayError> {
        if let Some(p) = project {
            return Ok(p.to_owned());
        }
        let mut holders = self.projects_of_package(package_id)?;
        match holders.len() {
            0 => Err(RelayError::PackageNotFound(package_id.into())),
            1 => Ok(holders.remove(0)),
            _ => Err(RelayError::AmbiguousPackageId {
                package_id: package_id.into(),
                projects: holders.join(", "),
            }),
        }
    }

    /// The projects holding a package with id `package_id`, by project id (not verified: pull
    /// the one wanted with [`Relay::pull_specific`]).
    pub fn projects_of_package(&self, package_id: &str) -> Result<Vec<String>, RelayError> {
        Ok(self
            .store
            .find_package(package_id)?
            .into_iter()
            .map(|p| p.package.project_id().to_owned())
            .collect())
    }

    fn verify_all(&self, rows: Vec<StoredPackage>) -> Result<Pulled, RelayError> {
        let mut out = Pulled::default();
        for p in rows {
            let id = p.package.package_id().to_owned();
            match self.verified(p) {
                Ok(p) => out.packages.push(p),
                Err(RelayError::Integrity { .. }) => out.quarantined.push(id),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Lists a project's packages, verified (newest deposit first).
    pub fn list(&self, project_id: &str, filter: &PackageFilter) -> Result<Pulled, RelayError> {
        self.project(project_id)?;
        let rows = self.store.list_packages(project_id, filter)?;
        self.verify_all(rows)
    }

    /// §8.2 pull `latest` (default limit 5).
    pub fn pull_latest(
        &self,
        project_id: &str,
        limit: Option<usize>,
    ) -> Result<Pulled, RelayError> {
        let limit = check_limit(limit)?;
        self.list(
            project_id,
            &PackageFilter {
                limit: Some(limit),
                ..PackageFilter::default()
            },
        )
    }

    /// §8.2 pull `latest` narrowed by the filters of `query` (topic, package_type, every tag,
    /// created_at range; its `query` text is ignored), newest deposit first, at most
    /// `query.limit` packages (0: the default).
    pub fn pull_latest_matching(&self, query: &SearchQuery) -> Result<Pulled, RelayError> {
        let q = checked_filters(query)?;
        self.project(&q.project_id)?;
        let rows: Vec<StoredPackage> = self
            .store
            .list_packages(&q.project_id, &PackageFilter::default())?
            .into_iter()
            .filter(|p| crate::search::admits(&q, &p.package))
            .take(q.limit)
            .collect();
        self.verify_all(rows)
    }

    /// §8.2 pull `relevant`: BM25 over the searchable fields, best chunk per package.
    pub fn pull_relevant(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, RelayError> {
        Ok(self.search(query)?.hits)
    }

    /// §8.2 pull `relevant` with the packages that failed verification on the way out: BM25
    /// over the searchable fields, best chunk per package, filtered by topic, package_type, every
    /// tag and created_at range. `since` / `until` must be RFC 3339.
    pub fn search(&self, query: &SearchQuery) -> Result<Relevant, RelayError> {
        self.project(&query.project_id)?;
        if !self.store.supports_search() {
            return Err(RelayError::SearchNotSupported);
        }
        if query.query.trim().is_empty() {
            return Err(RelayError::schema(
                "query",
                "/query",
                "query must contain at least one word",
            ));
        }
        let q = checked_filters(query)?;
        let hits = self.store.search(&q)?;
        let mut out = Relevant::default();
        for h in hits {
            let id = h.package.package.package_id().to_owned();
            match self.verified(h.package.clone()) {
                Ok(p) => out.hits.push(SearchHit { package: p, ..h }),
                Err(RelayError::Integrity { .. }) => out.quarantined.push(id),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Packages of a project in `awaiting_review` (L3).
    pub fn awaiting_review(&self, project_id: &str) -> Result<Pulled, RelayError> {
        self.list(
            project_id,
            &PackageFilter {
                status: Some(Status::AwaitingReview),
                ..PackageFilter::default()
            },
        )
    }

    // ---- review ----------------------------------------------------------------------------

    /// §8.5 flag_for_review of package `package_id` of `project_id`: status ->
    /// `awaiting_review`, `review_type` -> `human` | `agent`.
    pub fn flag_for_review(
        &self,
        project_id: &str,
        package_id: &str,
        review_type: &str,
        note: Option<&str>,
        actor: &Actor,
    ) -> Result<StoredPackage, RelayError> {
        if !matches!(review_type, "human" | "agent") {
            return Err(RelayError::schema(
                "flag",
                "/review_type",
                "review_type must be human or agent",
            ));
        }
        self.transition(
            (project_id, package_id),
            Status::AwaitingReview,
            Some(review_type),
            note,
            actor,
            "flag",
        )
    }

    /// Refuses a flag that would lower a human gate: once a package's `review_type` is `human`,
    /// only a human may flag it for an `agent` review (otherwise the author could re-flag a
    /// package a human sent back and have an agent complete it).
    fn check_flag(current: &Package, review_type: &str, actor: &Actor) -> Result<(), RelayError> {
        if current.review_type() == "human"
            && review_type != "human"
            && actor.actor_type != ActorType::Human
        {
            return Err(review_refused(
                current,
                actor,
                "the package is gated on a human review; only a human may flag it for another review type",
            ));
        }
        Ok(())
    }

    /// A reviewer's outcome on package `package_id` of `project_id`: `complete` or
    /// `revision_requested` (L3).
    pub fn review(
        &self,
        project_id: &str,
        package_id: &str,
        outcome: &str,
        note: Option<&str>,
        actor: &Actor,
    ) -> Result<StoredPackage, RelayError> {
        let to = match outcome {
            "complete" => Status::Complete,
            "revision_requested" => Status::RevisionRequested,
            _ => {
                return Err(RelayError::schema(
                    "review",
                    "/outcome",
                    "outcome must be complete or revision_requested",
                ));
            }
        };
        self.transition((project_id, package_id), to, None, note, actor, "review")
    }

    fn transition(
        &self,
        (project_id, package_id): (&str, &str),
        to: Status,
        review_type: Option<&str>,
        note: Option<&str>,
        actor: &Actor,
        action: &str,
    ) -> Result<StoredPackage, RelayError> {
        let current = self.pull_specific(project_id, package_id)?;
        self.writable_project(current.package.project_id())?;
        let from = current.package.status();
        if !from.can_become(to) {
            return Err(RelayError::InvalidTransition {
                package_id: package_id.into(),
                from: from.as_str().into(),
                to: to.as_str().into(),
                hint: if from == Status::Complete {
                    "complete is terminal: deposit a new package with parent_package_id"
                } else {
                    "allowed: draft -> complete|awaiting_review, awaiting_review -> complete|revision_requested, revision_requested -> awaiting_review|complete"
                },
            });
        }
        match review_type {
            Some(rt) => Self::check_flag(&current.package, rt, actor)?,
            None => check_reviewer(&current.package, actor)?,
        }
        let package = current.package.with_status(to, review_type);
        let updated = StoredPackage {
            content_hash: hash(&package)?,
            package,
            quarantined: None,
        };
        let record = ReviewRecord {
            package_id: package_id.into(),
            project_id: updated.package.project_id().into(),
            action: action.into(),
            from_status: from,
            to_status: to,
            review_type: updated.package.review_type().into(),
            actor: actor.clone(),
            at: self.now(),
            note: note.map(str::to_owned),
            content_hash: updated.content_hash.clone(),
        };
        self.store
            .update_package(&current.content_hash, &updated, &record)?;
        Ok(updated)
    }

    /// The review records of a package, oldest first.
    pub fn reviews(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<Vec<ReviewRecord>, RelayError> {
        Ok(self.store.list_reviews(project_id, package_id)?)
    }

    // ---- facts -----------------------------------------------------------------------------

    /// §8.6 assert_fact from a wire body (`subject`, `predicate`, `value`, optional
    /// `valid_from`, `source_package_id`, `confidence`, `asserted_by`, `tags`, `x-*`).
    pub fn assert_fact(
        &self,
        project_id: &str,
        actor: &Actor,
        body: &Value,
    ) -> Result<FactRecord, RelayError> {
        let now = self.now();
        let (mut fact, explicit) = parse_fact_input(project_id, actor, body, &now, &*self.ids)?;
        self.writable_project(project_id)?;
        if let Some(source) = &fact.source_package_id {
            let package = self.source_package(project_id, source)?;
            let unstated = body.get("asserted_by").is_none_or(Value::is_null);
            if unstated && attributed_to(&package, actor) {
                fact.asserted_by.session_id = package.package.session_id().map(str::to_owned);
            }
        }
        let record = FactRecord {
            recorded_at: now.clone(),
            superseded_at: None,
            fact,
        };
        Ok(self.store.assert_fact(
            NewFact {
                record,
                explicit_valid_from: explicit,
            },
            &|| self.now(),
        )?)
    }

    /// The package a fact names as its source: it must exist in the fact's project (404
    /// `package_not_found` otherwise, and nothing is asserted).
    fn source_package(
        &self,
        project_id: &str,
        package_id: &str,
    ) -> Result<StoredPackage, RelayError> {
        self.store
            .get_package(project_id, package_id)?
            .ok_or_else(|| {
                RelayError::PackageNotFound(format!(
                    "{package_id} (the fact's source_package_id) in project {project_id}"
                ))
            })
    }

    /// §8.7 invalidate_fact: closes the current fact(s) of (subject, predicate); returns how many.
    pub fn invalidate_fact(
        &self,
        project_id: &str,
        subject: &str,
        predicate: &str,
    ) -> Result<usize, RelayError> {
        if subject.is_empty() || predicate.is_empty() {
            return Err(RelayError::schema(
                "fact",
                if subject.is_empty() {
                    "/subject"
                } else {
                    "/predicate"
                },
                "subject and predicate are required",
            ));
        }
        self.writable_project(project_id)?;
        Ok(self
            .store
            .invalidate_facts(project_id, subject, predicate, &|| self.now())?)
    }

    /// Fact reads: current, as of a valid time, as recorded at a time, or full history. Times in
    /// the query may be any RFC 3339 form; they are normalised here.
    pub fn facts(
        &self,
        project_id: &str,
        query: &FactQuery,
    ) -> Result<Vec<FactRecord>, RelayError> {
        self.project(project_id)?;
        let mut q = query.clone();
        q.view = match &query.view {
            crate::fact::FactView::AsOfValid(t) => {
                crate::fact::FactView::AsOfValid(normalise_time(t, "/as_of")?)
            }
            crate::fact::FactView::AsOfRecorded(t) => {
                crate::fact::FactView::AsOfRecorded(normalise_time(t, "/recorded_as_of")?)
            }
            other => other.clone(),
        };
        Ok(self.store.facts(project_id, &q)?)
    }

    // ---- sessions --------------------------------------------------------------------------

    /// Starts a session for `actor` in a project, with a fresh callsign.
    pub fn start_session(&self, project_id: &str, actor: &Actor) -> Result<Session, RelayError> {
        self.writable_project(project_id)?;
        let session = Session {
            session_id: format!("sess_{}", self.ids.new_uuid().simple()),
            project_id: project_id.into(),
            actor_id: actor.id.clone(),
            actor_type: actor.actor_type,
            callsign: Some(self.callsigns.next_callsign()),
            started_at: self.now(),
            ended_at: None,
            packages_deposited: Vec::new(),
        };
        self.store.put_session(&session)?;
        Ok(session)
    }

    /// One session.
    pub fn session(&self, session_id: &str) -> Result<Session, RelayError> {
        self.store
            .get_session(session_id)?
            .ok_or_else(|| RelayError::SessionNotFound(session_id.into()))
    }

    /// Ends a session; only its own actor may. Ending an ended session returns it unchanged.
    /// The end is one store write ([`RelayStore::end_session`]): a deposit recording itself in
    /// the session at the same moment is kept.
    pub fn end_session(&self, session_id: &str, actor: &Actor) -> Result<Session, RelayError> {
        let s = self.session(session_id)?;
        if s.actor_id != actor.id {
            return Err(RelayError::Unauthorized(format!(
                "session {session_id} belongs to {}; only its actor may end it",
                s.actor_id
            )));
        }
        self.store
            .end_session(session_id, &self.now())?
            .ok_or_else(|| RelayError::SessionNotFound(session_id.into()))
    }
}

/// Whether `package` was created by `actor` (id and type), so that a fact asserted from it
/// takes the package's `created_by` as its default `asserted_by` (§7.1), session included.
fn attributed_to(package: &StoredPackage, actor: &Actor) -> bool {
    package.package.created_by_id() == actor.id
        && package.package.created_by_type() == Some(actor.actor_type)
}

/// An actor may only write as itself (specs/relay.md, "Attribution"): the `id` and, when the
/// input names one, the `type` of `created_by` / `asserted_by` must be the authenticated actor's.
fn check_attribution(
    [id_field, type_field]: [&'static str; 2],
    claimed_id: &str,
    claimed_type: Option<ActorType>,
    actor: &Actor,
) -> Result<(), RelayError> {
    if claimed_id != actor.id {
        return Err(RelayError::IdentityMismatch {
            field: id_field,
            claimed: claimed_id.into(),
            actor: actor.id.clone(),
        });
    }
    match claimed_type {
        Some(t) if t != actor.actor_type => Err(RelayError::IdentityMismatch {
            field: type_field,
            claimed: t.as_str().into(),
            actor: format!("{} ({})", actor.id, actor.actor_type.as_str()),
        }),
        _ => Ok(()),
    }
}

/// Who may record a reviewer outcome (Relay §5.3 "blocked on a reviewer (human or agent) per
/// review_type", P5 "humans are decision gates, declared in advance"; specs/relay.md, "Review
/// gates"). A package whose `review_type` is `human` or `agent` is completed or sent back only
/// by an actor of that type who is not its author (`created_by.id`), whatever its status. With
/// `review_type: none` any writer may, except that the author may not close a review it is
/// waiting on (from `awaiting_review` or `revision_requested`); finishing one's own draft is not
/// a review.
fn check_reviewer(package: &Package, actor: &Actor) -> Result<(), RelayError> {
    let wanted = ActorType::parse(package.review_type());
    if wanted.is_none() && package.status() == Status::Draft {
        return Ok(());
    }
    if let Some(t) = wanted
        && t != actor.actor_type
    {
        let reason = format!(
            "its review_type is {}, so only a {} other than its author may record the outcome",
            t.as_str(),
            t.as_str()
        );
        return Err(review_refused(package, actor, &reason));
    }
    if package.created_by_id() == actor.id {
        return Err(review_refused(
            package,
            actor,
            "an author may not review their own package; another reviewer must record the outcome",
        ));
    }
    Ok(())
}

fn review_refused(package: &Package, actor: &Actor, reason: &str) -> RelayError {
    RelayError::ReviewNotAllowed {
        package_id: package.package_id().into(),
        actor: format!("{} ({})", actor.id, actor.actor_type.as_str()),
        reason: reason.into(),
    }
}

fn hash(package: &Package) -> Result<String, RelayError> {
    package
        .content_hash()
        .map_err(|e| RelayError::schema("package", "", e.to_string()))
}

fn check_limit(limit: Option<usize>) -> Result<usize, RelayError> {
    match limit {
        None => Ok(DEFAULT_PULL_LIMIT),
        Some(n) if (1..=MAX_PULL_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(RelayError::schema(
            "query",
            "/limit",
            format!("limit must be 1 to {MAX_PULL_LIMIT}, got {n}"),
        )),
    }
}

/// The limit (0 means the default) and the time filters of a listing query, checked: `since`
/// and `until` must be RFC 3339 (reported at `/since`, `/until`) and are normalised.
fn checked_filters(query: &SearchQuery) -> Result<SearchQuery, RelayError> {
    let mut q = query.clone();
    q.limit = check_limit(Some(q.limit).filter(|l| *l > 0))?;
    q.since = q
        .since
        .as_deref()
        .map(|t| normalise_time(t, "/since"))
        .transpose()?;
    q.until = q
        .until
        .as_deref()
        .map(|t| normalise_time(t, "/until"))
        .transpose()?;
    Ok(q)
}

/// Reads an RFC 3339 time and renders it in cra's fixed-width wire form.
pub fn normalise_time(t: &str, pointer: &str) -> Result<String, RelayError> {
    parse_rfc3339(t)
        .map(format_timestamp)
        .map_err(|e| RelayError::schema("query", pointer, e.to_string()))
}

fn parse_fact_input(
    project_id: &str,
    actor: &Actor,
    body: &Value,
    now: &str,
    ids: &dyn IdGenerator,
) -> Result<(Fact, bool), RelayError> {
    let Some(obj) = body.as_object() else {
        return Err(RelayError::schema(
            "fact",
            "",
            "a fact must be a JSON object",
        ));
    };
    let mut errors = Vec::new();
    let req = |key: &str, errors: &mut Vec<FieldError>| -> String {
        match obj.get(key) {
            Some(Value::String(s)) if !s.is_empty() || key == "value" => s.clone(),
            Some(Value::String(_)) => {
                errors.push(FieldError::new(
                    format!("/{key}"),
                    format!("{key} must not be empty"),
                ));
                String::new()
            }
            Some(_) => {
                errors.push(FieldError::new(
                    format!("/{key}"),
                    if key == "value" {
                        "value must be a string (numbers are sent as strings, §7.1)".to_owned()
                    } else {
                        format!("{key} must be a string")
                    },
                ));
                String::new()
            }
            None => {
                errors.push(FieldError::new(
                    format!("/{key}"),
                    format!("{key} is required"),
                ));
                String::new()
            }
        }
    };
    let subject = req("subject", &mut errors);
    let predicate = req("predicate", &mut errors);
    let value = req("value", &mut errors);
    match obj.get("project_id") {
        None | Some(Value::Null) => {}
        Some(Value::String(p)) if p == project_id => {}
        Some(_) => errors.push(FieldError::new(
            "/project_id",
            format!("project_id differs from the project asserted into (`{project_id}`)"),
        )),
    }
    let (valid_from, explicit) = match obj.get("valid_from") {
        None | Some(Value::Null) => (now.to_owned(), false),
        Some(Value::String(s)) => match parse_rfc3339(s) {
            Ok(t) => (format_timestamp(t), true),
            Err(e) => {
                errors.push(FieldError::new("/valid_from", e.to_string()));
                (now.to_owned(), true)
            }
        },
        Some(_) => {
            errors.push(FieldError::new(
                "/valid_from",
                "valid_from must be an RFC 3339 string",
            ));
            (now.to_owned(), true)
        }
    };
    if let Some(v) = obj.get("valid_to")
        && !v.is_null()
    {
        errors.push(FieldError::new(
            "/valid_to",
            "valid_to is set by supersession or invalidation, not by the asserter",
        ));
    }
    let source_package_id = match obj.get("source_package_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            errors.push(FieldError::new(
                "/source_package_id",
                "source_package_id must be a string or null",
            ));
            None
        }
    };
    let confidence = match obj.get("confidence") {
        None | Some(Value::Null) => Number::from(1u8),
        Some(Value::Number(n)) if n.as_f64().is_some_and(|f| (0.0..=1.0).contains(&f)) => n.clone(),
        Some(_) => {
            errors.push(FieldError::new(
                "/confidence",
                "confidence must be a number from 0.0 to 1.0",
            ));
            Number::from(1u8)
        }
    };
    let asserted_by = match obj.get("asserted_by") {
        None | Some(Value::Null) => AssertedBy {
            id: actor.id.clone(),
            actor_type: actor.actor_type,
            session_id: None,
        },
        Some(v) => match serde_json::from_value::<AssertedBy>(v.clone()) {
            Ok(a) => {
                check_attribution(
                    ["asserted_by.id", "asserted_by.type"],
                    &a.id,
                    Some(a.actor_type),
                    actor,
                )?;
                a
            }
            Err(e) => {
                errors.push(FieldError::new(
                    "/asserted_by",
                    format!(
                        "asserted_by must be {{id, type: human|agent|script, session_id?}}: {e}"
                    ),
                ));
                AssertedBy {
                    id: actor.id.clone(),
                    actor_type: ActorType::Human,
                    session_id: None,
                }
            }
        },
    };
    let tags = match obj.get("tags") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut tags = Vec::new();
            for (i, t) in items.iter().enumerate() {
                match t.as_str() {
                    Some(s) => tags.push(s.to_owned()),
                    None => errors.push(FieldError::new(
                        format!("/tags/{i}"),
                        "every tag must be a string",
                    )),
                }
            }
            tags
        }
        Some(_) => {
            errors.push(FieldError::new("/tags", "tags must be an array of strings"));
            Vec::new()
        }
    };
    if !errors.is_empty() {
        return Err(RelayError::InvalidSchema {
            what: "fact",
            errors,
        });
    }
    const KNOWN: [&str; 12] = [
        "fact_id",
        "project_id",
        "subject",
        "predicate",
        "value",
        "valid_from",
        "valid_to",
        "source_package_id",
        "confidence",
        "asserted_by",
        "created_at",
        "tags",
    ];
    let extra: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let fact = Fact {
        fact_id: format!("fact_{}", ids.new_uuid().simple()),
        project_id: project_id.into(),
        subject,
        predicate,
        value,
        valid_from,
        valid_to: None,
        source_package_id,
        confidence,
        asserted_by,
        created_at: now.to_owned(),
        tags,
        extra,
    };
    Ok((fact, explicit))
}

//! Relay (Agentic Protocol v0.1) operations: projects and their grants, deposit, pull and search,
//! review, facts, orientation, export and import. Each checks the caller's grant on the project,
//! calls the Relay service ([`cra_relay::Relay`], on a blocking thread) and records what it
//! changed as a TRACE event ([`events`]).
//!
//! Access (our decision; the protocol leaves it to the implementation): a project is readable and
//! writable by its creator and by the actors listed in `members` when it was created; auditors
//! and operators read every project; admins do everything. Grants are recorded in the project's
//! audit chain (`relay.project.created`), so they are as tamper-evident as any event.
//!
//! Every write is a TRACE event: in the chain of `created_by.session_id` when that names an
//! active session of the same agent, otherwise in the project's audit chain, a session like any
//! other whose agent is `project:<project_id>` and whose id is derived from the project id
//! ([`project_audit_session`]).

pub mod events;

use cra_relay::export::ExportError;
use cra_relay::fact::{FactQuery, FactRecord};
use cra_relay::ops::{Pulled, Relevant};
use cra_relay::store::SearchQuery;
use cra_relay::{
    Actor as RelayActor, ActorType as RelayActorType, Project, Relay, RelayError, model::Session,
};
use cra_relay::{StoredPackage, digest};
use cra_trace::{EventDraft, Payload, Span};
use cra_wire::Token;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::events::{
    FactAsserted, FactInvalidated, ImportCounts, PackageDeposited, PackageFlagged, PackageReviewed,
    ProjectArchived, ProjectCreated, ProjectUnarchived, RelaySessionEnded, RelaySessionStarted,
    WrittenBy,
};
use crate::auth::{Actor, ActorType, Role};
use crate::error::{ApiError, ApiResult};
use crate::service::sessions::{callsign_for, check_id_field};
use crate::state::Runtime;

/// The project's audit-chain session id: a version-7-shaped UUID whose time field is zero and
/// whose other bits come from SHA-256(`cra/project-audit/` + project id), so every replica
/// derives the same id without shared state.
pub fn project_audit_session(project_id: &str) -> String {
    cra_trace::event::derived_session_id(&format!("cra/project-audit/{project_id}"))
}

/// The agent id of a project's audit chain.
fn audit_agent(project_id: &str) -> String {
    format!("project:{project_id}")
}

fn relay_actor(a: &Actor) -> RelayActor {
    RelayActor::new(
        a.id.clone(),
        match a.actor_type {
            ActorType::Agent => RelayActorType::Agent,
            ActorType::Human => RelayActorType::Human,
            ActorType::Script => RelayActorType::Script,
        },
    )
}

/// Who may do what in a project.
#[derive(Debug, Clone)]
pub struct Grants {
    /// The creator.
    pub owner: String,
    /// Further writers.
    pub members: Vec<String>,
}

/// A new project: `POST /v1/projects`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// The id.
    pub project_id: String,
    /// Display name.
    pub name: String,
    /// Actors besides the creator who may read and write.
    #[serde(default)]
    pub members: Vec<String>,
}

/// A project just created, and the session id of its audit chain.
#[derive(Debug, Serialize)]
pub struct CreatedProject {
    /// The project.
    #[serde(flatten)]
    pub project: Project,
    /// Its audit chain.
    pub audit_session_id: String,
}

/// Which packages a listing asks for.
#[derive(Debug, Clone)]
pub enum PackageListing {
    /// The newest deposits (§8.2 latest), at most `limit` (the service's default when absent).
    Latest {
        /// How many.
        limit: Option<usize>,
    },
    /// The newest deposits that pass the query's filters (its text is not used).
    LatestMatching(SearchQuery),
    /// The best matches of the query's text (§8.2 relevant), filtered.
    Relevant(SearchQuery),
    /// The packages waiting for review.
    AwaitingReview,
}

/// A listing's answer.
#[derive(Debug)]
pub enum PackageList {
    /// Newest first.
    Pulled(Pulled),
    /// Best first, with the matching chunks.
    Relevant(Relevant),
}

impl PackageList {
    /// The wire answer (specs/relay.md).
    pub fn to_wire(&self) -> Value {
        match self {
            Self::Pulled(p) => p.to_wire(),
            Self::Relevant(r) => r.to_wire(),
        }
    }
}

/// How a flagged package's review ended, or why it is flagged.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flag {
    /// `human` or `agent`.
    pub review_type: String,
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
}

/// A reviewer's verdict on a flagged package.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Review {
    /// `complete` or `revision_requested`.
    pub outcome: String,
    /// The reviewer's note.
    #[serde(default)]
    pub note: Option<String>,
}

/// What an import brought in, in all and per project.
#[derive(Debug, Serialize)]
pub struct Imported {
    /// The counts of everything imported.
    pub imported: ImportTotals,
    /// The projects, each now with an audit chain.
    pub project_ids: Vec<String>,
    /// The actors granted every imported project besides the importing admin.
    pub members: Vec<String>,
}

/// Counts of an import's records.
#[derive(Debug, Serialize)]
pub struct ImportTotals {
    /// Projects.
    pub projects: usize,
    /// Packages.
    pub packages: usize,
    /// Fact rows.
    pub facts: usize,
    /// Relay sessions.
    pub sessions: usize,
    /// Review records.
    pub reviews: usize,
}

impl Runtime {
    async fn relay_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(Relay) -> Result<T, RelayError> + Send + 'static,
    ) -> ApiResult<T> {
        let relay = self.relay.clone();
        Ok(crate::error::run_blocking("a relay task failed", move || f(relay)).await??)
    }

    /// The grants of `project_id`, read from its audit chain.
    pub async fn project_grants(&self, project_id: &str) -> ApiResult<Grants> {
        let sid = project_audit_session(project_id);
        let first = self.read_events_after(&sid, Some(0), 1).await?;
        let p = first
            .into_iter()
            .find(|e| e.event_type == ProjectCreated::EVENT_TYPE)
            .map(|e| e.payload)
            .ok_or_else(|| {
                ApiError::new(
                    Token::ProjectNotFound,
                    format!("no project `{project_id}`; create it with POST /v1/projects"),
                )
            })?;
        let text = |v: &Value| v.as_str().map(str::to_owned);
        Ok(Grants {
            owner: text(&p["created_by"]["id"]).unwrap_or_default(),
            members: p["members"]
                .as_array()
                .map(|m| m.iter().filter_map(text).collect())
                .unwrap_or_default(),
        })
    }

    /// Refuses `actor` (403 `unauthorized`) unless granted reads, or with `write` writes, of
    /// `project_id` (404 `project_not_found` for an unknown project).
    pub async fn require_project(
        &self,
        actor: &Actor,
        project_id: &str,
        write: bool,
    ) -> ApiResult<()> {
        let g = self.project_grants(project_id).await?;
        let member = g.owner == actor.id || g.members.contains(&actor.id);
        if actor.has(Role::Admin) || member || (!write && actor.reads_all()) {
            return Ok(());
        }
        Err(ApiError::new(
            Token::Unauthorized,
            format!(
                "{} is not granted {} project `{project_id}`; its creator lists members when creating it",
                actor.id,
                if write { "writes to" } else { "reads of" }
            ),
        ))
    }

    /// Package `package_id` (in `scope` when a project is named), once `actor` is known to be
    /// granted reads of its project, or with `write` writes (404 for an unknown package, or one
    /// outside `scope`; 403 without a grant).
    async fn granted_package(
        &self,
        actor: &Actor,
        package_id: &str,
        scope: Option<&str>,
        write: bool,
    ) -> ApiResult<StoredPackage> {
        let p = self.scoped_package(package_id, scope).await?;
        self.require_project(actor, p.package.project_id(), write)
            .await?;
        Ok(p)
    }

    /// Package `package_id`, which must belong to `scope` when a project is named (404
    /// `package_not_found` otherwise: a project-scoped route never reaches another project's
    /// package).
    async fn scoped_package(
        &self,
        package_id: &str,
        scope: Option<&str>,
    ) -> ApiResult<StoredPackage> {
        let id = package_id.to_owned();
        let p = self.relay_call(move |r| r.pull_specific(&id)).await?;
        match scope {
            Some(project) if p.package.project_id() != project => Err(ApiError::new(
                Token::PackageNotFound,
                format!("project `{project}` has no package `{package_id}`"),
            )),
            _ => Ok(p),
        }
    }

    /// Appends a Relay write's event: to `session_id`'s chain when it is an active session of
    /// `actor`, else to the project's audit chain. Returns the session id written to.
    async fn record_relay<P: Payload>(
        &self,
        actor: &Actor,
        project_id: &str,
        session_id: Option<&str>,
        payload: &P,
    ) -> ApiResult<String> {
        let draft = self.relay_draft(payload);
        if let Some(sid) = session_id
            && cra_wire::id::is_canonical_uuid(sid)
            && let Ok(rec) = self.session_record(sid).await
            && rec.agent_id == actor.id
            && rec.is_active()
        {
            self.append_events(sid, &actor.id, vec![draft]).await?;
            return Ok(sid.to_owned());
        }
        let sid = project_audit_session(project_id);
        self.append_events(&sid, &audit_agent(project_id), vec![draft])
            .await?;
        Ok(sid)
    }

    /// A Relay write's event, on a span of its own.
    fn relay_draft<P: Payload>(&self, payload: &P) -> EventDraft {
        self.root_draft(payload)
    }

    /// Starts the audit chain of a project: `session.started`, then `relay.project.created`
    /// with the creator and members (the grants [`Runtime::project_grants`] reads) and, for an
    /// imported project, what the import brought. Returns the chain's session id.
    async fn open_audit_chain(
        &self,
        project: &Project,
        creator: &Actor,
        members: &[String],
        imported: Option<ImportCounts>,
    ) -> ApiResult<String> {
        let project_id = project.project_id.as_str();
        let sid = project_audit_session(project_id);
        let owner = audit_agent(project_id);
        let now = cra_wire::clock::format_timestamp(self.clock.now());
        let rec = cra_carp::store::SessionRecord::opened(&sid, &owner, now);
        self.carp(move |s| s.create_session(&rec)).await?;
        let goal = format!("audit chain of project {project_id}");
        let callsign = callsign_for(&sid);
        let started = cra_carp::events::SessionStarted {
            agent_id: &owner,
            actor: Some(creator.event_ref()),
            goal: &goal,
            project_id: Some(project_id),
            parent_session_id: None,
            callsign: Some(&callsign),
        };
        let created = ProjectCreated {
            project_id,
            name: &project.name,
            created_by: creator.event_ref(),
            members,
            imported,
        };
        let (t, s) = (self.ids.new_id(), self.ids.new_id());
        let span = Span::root(&t, &s);
        let drafts = vec![span.draft_of(&started), span.draft_of(&created)];
        self.append_events(&sid, &owner, drafts).await?;
        Ok(sid)
    }

    /// Creates a project and its audit chain, `actor` its creator.
    pub async fn create_project(
        &self,
        actor: &Actor,
        input: CreateProject,
    ) -> ApiResult<CreatedProject> {
        actor.require(
            &[Role::Agent, Role::Author, Role::Operator],
            "creating a project",
        )?;
        check_id_field("/project_id", &input.project_id)?;
        for (i, m) in input.members.iter().enumerate() {
            check_id_field(&format!("/members/{i}"), m)?;
        }
        let (pid, name) = (input.project_id.clone(), input.name.clone());
        let project = self
            .relay_call(move |r| r.create_project(&pid, &name))
            .await?;
        let audit_session_id = self
            .open_audit_chain(&project, actor, &input.members, None)
            .await?;
        Ok(CreatedProject {
            project,
            audit_session_id,
        })
    }

    /// A project, to a reader of it.
    pub async fn project(&self, actor: &Actor, project_id: &str) -> ApiResult<Project> {
        self.require_project(actor, project_id, false).await?;
        let pid = project_id.to_owned();
        self.relay_call(move |r| r.project(&pid)).await
    }

    /// Archives a project (writes refused until it is unarchived) or unarchives it.
    pub async fn set_archived(
        &self,
        actor: &Actor,
        project_id: &str,
        archived: bool,
    ) -> ApiResult<Project> {
        self.require_project(actor, project_id, true).await?;
        let pid = project_id.to_owned();
        let project = self
            .relay_call(move |r| {
                if archived {
                    r.archive(&pid)
                } else {
                    r.unarchive(&pid)
                }
            })
            .await?;
        let by = WrittenBy { id: &actor.id };
        if archived {
            let event = ProjectArchived { project_id, by };
            self.record_relay(actor, project_id, None, &event).await?;
        } else {
            let event = ProjectUnarchived { project_id, by };
            self.record_relay(actor, project_id, None, &event).await?;
        }
        Ok(project)
    }

    /// §8.1 deposit of `package` (the wire object) into `project_id`. An identical package
    /// already stored is answered as it is (`created: false`) and records nothing.
    pub async fn deposit(
        &self,
        actor: &Actor,
        project_id: &str,
        package: Value,
    ) -> ApiResult<cra_relay::ops::Deposited> {
        self.require_project(actor, project_id, true).await?;
        let ra = relay_actor(actor);
        let pid = project_id.to_owned();
        let d = self
            .relay_call(move |r| r.deposit(&pid, &ra, &package))
            .await?;
        if d.created {
            let event = PackageDeposited {
                project_id,
                package_id: d.stored.package.package_id(),
                content_hash: &d.stored.content_hash,
                created_by: actor.event_ref(),
            };
            let session = d.stored.package.session_id();
            self.record_relay(actor, project_id, session, &event)
                .await?;
        }
        Ok(d)
    }

    /// §8.2 pull (latest, relevant) and the awaiting-review listing, to a reader of the project.
    pub async fn packages(
        &self,
        actor: &Actor,
        project_id: &str,
        listing: PackageListing,
    ) -> ApiResult<PackageList> {
        self.require_project(actor, project_id, false).await?;
        let pid = project_id.to_owned();
        let with_project = |mut q: SearchQuery| {
            q.project_id = project_id.to_owned();
            q
        };
        Ok(match listing {
            PackageListing::Latest { limit } => {
                PackageList::Pulled(self.relay_call(move |r| r.pull_latest(&pid, limit)).await?)
            }
            PackageListing::LatestMatching(q) => {
                let q = with_project(q);
                PackageList::Pulled(self.relay_call(move |r| r.pull_latest_matching(&q)).await?)
            }
            PackageListing::Relevant(q) => {
                let q = with_project(q);
                PackageList::Relevant(self.relay_call(move |r| r.search(&q)).await?)
            }
            PackageListing::AwaitingReview => {
                PackageList::Pulled(self.relay_call(move |r| r.awaiting_review(&pid)).await?)
            }
        })
    }

    /// §8.2 pull specific, to a reader of the package's project.
    pub async fn package(
        &self,
        actor: &Actor,
        package_id: &str,
        scope: Option<&str>,
    ) -> ApiResult<StoredPackage> {
        self.granted_package(actor, package_id, scope, false).await
    }

    /// §8.5 flag_for_review, by a writer of the package's project.
    pub async fn flag(
        &self,
        actor: &Actor,
        package_id: &str,
        scope: Option<&str>,
        flag: Flag,
    ) -> ApiResult<StoredPackage> {
        let current = self.granted_package(actor, package_id, scope, true).await?;
        let pid = current.package.project_id().to_owned();
        let (ra, id, f) = (relay_actor(actor), package_id.to_owned(), flag.clone());
        let p = self
            .relay_call(move |r| r.flag_for_review(&id, &f.review_type, f.note.as_deref(), &ra))
            .await?;
        let event = PackageFlagged {
            project_id: &pid,
            package_id,
            review_type: &flag.review_type,
            note: flag.note.as_deref(),
            content_hash: &p.content_hash,
            by: WrittenBy { id: &actor.id },
        };
        self.record_relay(actor, &pid, p.package.session_id(), &event)
            .await?;
        Ok(p)
    }

    /// Review of a flagged package. The reviewer is `actor`: a `human` review is closed only by a
    /// human who is not the package's author, an `agent` review only by an agent who is not;
    /// anyone else gets 403 `review_not_allowed` and nothing changes (specs/relay.md, "Review
    /// gates").
    pub async fn review(
        &self,
        actor: &Actor,
        package_id: &str,
        scope: Option<&str>,
        review: Review,
    ) -> ApiResult<StoredPackage> {
        let current = self.granted_package(actor, package_id, scope, true).await?;
        let pid = current.package.project_id().to_owned();
        let (ra, id, v) = (relay_actor(actor), package_id.to_owned(), review.clone());
        let p = self
            .relay_call(move |r| r.review(&id, &v.outcome, v.note.as_deref(), &ra))
            .await?;
        let event = PackageReviewed {
            project_id: &pid,
            package_id,
            outcome: &review.outcome,
            note: review.note.as_deref(),
            content_hash: &p.content_hash,
            reviewer: actor.event_ref(),
        };
        self.record_relay(actor, &pid, None, &event).await?;
        Ok(p)
    }

    /// Starts a Relay work session (§5.5) of `actor`, a writer of `project_id`, with a fresh
    /// callsign; recorded as `relay.session.started` in the project's audit chain.
    pub async fn start_relay_session(&self, actor: &Actor, project_id: &str) -> ApiResult<Session> {
        self.require_project(actor, project_id, true).await?;
        let (ra, pid) = (relay_actor(actor), project_id.to_owned());
        let session = self.relay_call(move |r| r.start_session(&pid, &ra)).await?;
        let event = RelaySessionStarted {
            project_id,
            session_id: &session.session_id,
            callsign: session.callsign.as_deref(),
            actor: actor.event_ref(),
        };
        self.record_relay(actor, project_id, None, &event).await?;
        Ok(session)
    }

    /// The Relay session `session_id` of `project_id`, to a reader of the project (404
    /// `session_not_found` when the project has no such session).
    pub async fn relay_session(
        &self,
        actor: &Actor,
        project_id: &str,
        session_id: &str,
    ) -> ApiResult<Session> {
        self.require_project(actor, project_id, false).await?;
        self.project_session(project_id, session_id).await
    }

    /// The Relay session `session_id` when it belongs to `project_id` (404 `session_not_found`
    /// otherwise); the caller has checked the grants.
    async fn project_session(&self, project_id: &str, session_id: &str) -> ApiResult<Session> {
        let id = session_id.to_owned();
        let found = self.relay_call(move |r| r.session(&id)).await;
        let missing = || {
            ApiError::new(
                Token::SessionNotFound,
                format!(
                    "project `{project_id}` has no Relay session `{session_id}`; start one with POST /v1/projects/{project_id}/sessions"
                ),
            )
        };
        match found {
            Ok(s) if s.project_id == project_id => Ok(s),
            Ok(_) => Err(missing()),
            Err(e) if e.token() == Some(Token::SessionNotFound) => Err(missing()),
            Err(e) => Err(e),
        }
    }

    /// Ends `actor`'s Relay session `session_id` of `project_id` (only its own actor may: 403
    /// `unauthorized`); recorded as `relay.session.ended` with the packages deposited in it.
    /// Ending an ended session answers it unchanged and records nothing.
    pub async fn end_relay_session(
        &self,
        actor: &Actor,
        project_id: &str,
        session_id: &str,
    ) -> ApiResult<Session> {
        self.require_project(actor, project_id, true).await?;
        let before = self.project_session(project_id, session_id).await?;
        let (ra, id) = (relay_actor(actor), session_id.to_owned());
        let ended = self.relay_call(move |r| r.end_session(&id, &ra)).await?;
        if before.ended_at.is_none() {
            let event = RelaySessionEnded {
                project_id,
                session_id,
                packages_deposited: &ended.packages_deposited,
                by: WrittenBy { id: &actor.id },
            };
            self.record_relay(actor, project_id, None, &event).await?;
        }
        Ok(ended)
    }

    /// §8.6 assert_fact of `fact` (the wire object) in `project_id`.
    pub async fn assert_fact(
        &self,
        actor: &Actor,
        project_id: &str,
        fact: Value,
    ) -> ApiResult<FactRecord> {
        self.require_project(actor, project_id, true).await?;
        let ra = relay_actor(actor);
        let session = fact
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let pid = project_id.to_owned();
        let rec = self
            .relay_call(move |r| r.assert_fact(&pid, &ra, &fact))
            .await?;
        let event = FactAsserted {
            project_id,
            fact: rec.to_wire(),
            by: WrittenBy { id: &actor.id },
        };
        self.record_relay(actor, project_id, session.as_deref(), &event)
            .await?;
        Ok(rec)
    }

    /// Current facts, point-in-time views or history, to a reader of the project.
    pub async fn facts(
        &self,
        actor: &Actor,
        project_id: &str,
        query: FactQuery,
    ) -> ApiResult<Vec<FactRecord>> {
        self.require_project(actor, project_id, false).await?;
        let pid = project_id.to_owned();
        self.relay_call(move |r| r.facts(&pid, &query)).await
    }

    /// §8.7 invalidate_fact: closes the current rows of (`subject`, `predicate`). Returns how
    /// many it closed.
    pub async fn invalidate_fact(
        &self,
        actor: &Actor,
        project_id: &str,
        subject: &str,
        predicate: &str,
    ) -> ApiResult<usize> {
        self.require_project(actor, project_id, true).await?;
        let (pid, s, p) = (
            project_id.to_owned(),
            subject.to_owned(),
            predicate.to_owned(),
        );
        let invalidated = self
            .relay_call(move |r| r.invalidate_fact(&pid, &s, &p))
            .await?;
        let event = FactInvalidated {
            project_id,
            subject,
            predicate,
            invalidated,
            by: WrittenBy { id: &actor.id },
        };
        self.record_relay(actor, project_id, None, &event).await?;
        Ok(invalidated)
    }

    /// §8.3 orient: the project's OrientationBundle over `window_days`.
    pub async fn orient(
        &self,
        actor: &Actor,
        project_id: &str,
        window_days: Option<u32>,
    ) -> ApiResult<digest::OrientationBundle> {
        self.require_project(actor, project_id, false).await?;
        let pid = project_id.to_owned();
        self.relay_call(move |r| r.orient(&pid, window_days)).await
    }

    /// §8.4 orchestrate, of one project (its readers), or without one of every project the
    /// caller may read (Relay errata): all of them for auditors, operators and admins, the
    /// projects it created or is a member of for anyone else (none: an empty digest).
    pub async fn orchestrate(
        &self,
        actor: &Actor,
        project_id: Option<String>,
        focus: Option<String>,
        snippets: Option<usize>,
    ) -> ApiResult<digest::DigestBundle> {
        let Some(project_id) = project_id else {
            // Without a project: every project the caller may read (Relay errata).
            let mut readable = Vec::new();
            for p in self.relay_call(|r| r.projects()).await? {
                if self
                    .require_project(actor, &p.project_id, false)
                    .await
                    .is_ok()
                {
                    readable.push(p.project_id);
                }
            }
            return self
                .relay_call(move |r| {
                    r.orchestrate_among(&readable, focus.as_deref(), snippets, None)
                })
                .await;
        };
        self.require_project(actor, &project_id, false).await?;
        self.relay_call(move |r| r.orchestrate(Some(&project_id), focus.as_deref(), snippets, None))
            .await
    }

    /// Export (§10.3) of every project or of one, as the NDJSON bundle
    /// (`cra_relay::export::bundle`). Admin only.
    pub async fn export(&self, actor: &Actor, project_id: Option<String>) -> ApiResult<Vec<u8>> {
        actor.require(&[Role::Admin], "exporting Relay data")?;
        let files = self
            .relay_call(move |r| {
                let all = r.store().snapshot()?;
                let snapshot = match &project_id {
                    Some(p) => {
                        r.project(p)?;
                        cra_relay::export::only_project(&all, p)
                    }
                    None => all,
                };
                Ok(cra_relay::export::render(&snapshot)?)
            })
            .await?;
        Ok(cra_relay::export::bundle(&files))
    }

    /// Import (§10.3) of `bundle` into an empty Relay store. Every package hash and file digest
    /// is verified before anything is written (a tampered package: 409 `integrity_error` naming
    /// it, nothing imported); the restore is one transaction; each imported project then gets
    /// its audit chain with `actor` as creator and `members` as members. Admin only.
    pub async fn import(
        &self,
        actor: &Actor,
        members: Vec<String>,
        bundle: impl AsRef<[u8]> + Send + 'static,
    ) -> ApiResult<Imported> {
        actor.require(&[Role::Admin], "importing Relay data")?;
        for (i, m) in members.iter().enumerate() {
            check_id_field(&format!("/members/{i}"), m)?;
        }
        let snapshot = crate::error::run_blocking("the import check failed", move || {
            cra_relay::export::unbundle(bundle.as_ref()).and_then(|f| cra_relay::export::parse(&f))
        })
        .await??;
        for p in &snapshot.projects {
            let sid = project_audit_session(&p.project_id);
            if self.carp(move |s| s.get_session(&sid)).await?.is_some() {
                return Err(ApiError::new(
                    Token::AlreadyExists,
                    format!(
                        "project `{}` already has an audit chain here; import into a server whose Relay store is empty",
                        p.project_id
                    ),
                ));
            }
        }
        let store = self.relay.store().clone();
        let snap = snapshot.clone();
        crate::error::run_blocking("the import failed", move || store.restore(&snap))
            .await?
            .map_err(ExportError::Store)?;
        for p in &snapshot.projects {
            let counts = ImportCounts::of(&snapshot, &p.project_id);
            self.open_audit_chain(p, actor, &members, Some(counts))
                .await?;
        }
        Ok(Imported {
            imported: ImportTotals {
                projects: snapshot.projects.len(),
                packages: snapshot.packages.len(),
                facts: snapshot.facts.len(),
                sessions: snapshot.sessions.len(),
                reviews: snapshot.reviews.len(),
            },
            project_ids: snapshot
                .projects
                .iter()
                .map(|p| p.project_id.clone())
                .collect(),
            members,
        })
    }
}

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
//! ([`project_audit_session`]). The store keeps a write's events with the change, in its
//! transaction, until they are appended (the `outbox` module), so no change goes unaudited.

pub mod events;
pub(crate) mod outbox;

use cra_relay::export::ExportError;
use cra_relay::fact::{FactQuery, FactRecord};
use cra_relay::ops::{Pulled, Relevant};
use cra_relay::store::SearchQuery;
use cra_relay::store::Written;
use cra_relay::{
    Actor as RelayActor, ActorType as RelayActorType, Project, Relay, RelayError, model::Session,
};
use cra_relay::{StoredPackage, digest};
use cra_trace::{Payload, Span, TraceEvent};
use cra_wire::Token;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

use self::events::{
    FactAsserted, FactInvalidated, ImportCounts, PackageDeposited, PackageFlagged, PackageReviewed,
    ProjectArchived, ProjectCreated, ProjectUnarchived, RelaySessionEnded, RelaySessionStarted,
    WrittenBy,
};
use self::outbox::{Chain, Owed, Plan, Planner};
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
    format!("{}{project_id}", crate::auth::PROJECT_ACTOR_PREFIX)
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
#[derive(Debug, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Flag {
    /// `human` or `agent`.
    pub review_type: String,
    /// Why.
    #[serde(default)]
    pub note: Option<String>,
}

/// A reviewer's verdict on a flagged package.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Review {
    /// `complete` or `revision_requested`.
    pub outcome: String,
    /// The reviewer's note.
    #[serde(default)]
    pub note: Option<String>,
}

/// What an import brought in, in all and per project.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Imported {
    /// The counts of everything imported.
    pub imported: ImportTotals,
    /// The projects, each now with an audit chain.
    pub project_ids: Vec<String>,
    /// The actors granted every imported project besides the importing admin.
    pub members: Vec<String>,
}

/// Counts of an import's records.
#[derive(Debug, Serialize, utoipa::ToSchema)]
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
    /// Runs the Relay operation `f`, which changes nothing but may quarantine a package it
    /// finds tampered with (recorded as `relay.package.quarantined`, the outbox module).
    async fn relay_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(Relay) -> Result<T, RelayError> + Send + 'static,
    ) -> ApiResult<T> {
        self.relay_write(Box::new(|_: Written<'_>| Vec::new()), f)
            .await
    }

    /// The grants of `project_id`, read from its audit chain.
    pub(crate) async fn project_grants(&self, project_id: &str) -> ApiResult<Grants> {
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
    pub(crate) async fn require_project(
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

    /// Package `package_id` of project `scope`, or, without one, of the one project holding
    /// that id that `actor` may read (ids are unique per project only), once `actor` is known to
    /// be granted reads of its project, or with `write` writes. 404 for an id no project holds
    /// (or `scope` does not), and for one held only by projects `actor` may not read (the same
    /// answer, so ids cannot be probed); 403 for a write `actor` may read but not make; 409
    /// `ambiguous_package_id` when several projects `actor` may use hold it.
    async fn granted_package(
        &self,
        actor: &Actor,
        package_id: &str,
        scope: Option<&str>,
        write: bool,
    ) -> ApiResult<StoredPackage> {
        // `project_of_package` only answers a project whose grant it checked.
        let project = match scope {
            Some(project) => {
                self.require_project(actor, project, write).await?;
                project.to_owned()
            }
            None => self.project_of_package(actor, package_id, write).await?,
        };
        let id = package_id.to_owned();
        let found = self
            .relay_call(move |r| r.pull_specific(&project, &id))
            .await;
        match (found, scope) {
            (Err(e), Some(project)) if e.token() == Some(Token::PackageNotFound) => {
                Err(ApiError::new(
                    Token::PackageNotFound,
                    format!("project `{project}` has no package `{package_id}`"),
                ))
            }
            (found, _) => found,
        }
    }

    /// The project of package `package_id` for a route that names none: the one project
    /// holding the id that `actor` is granted (reads, or with `write` writes) (see
    /// [`Runtime::granted_package`]).
    async fn project_of_package(
        &self,
        actor: &Actor,
        package_id: &str,
        write: bool,
    ) -> ApiResult<String> {
        let id = package_id.to_owned();
        let holders = self.relay_call(move |r| r.projects_of_package(&id)).await?;
        let mut usable = Vec::new();
        // The first refusal of a write to a project `actor` reads: only such a caller learns
        // that the package exists.
        let mut refusal = None;
        for project in holders {
            match self.require_project(actor, &project, write).await {
                Ok(()) => usable.push(project),
                // A store that cannot answer is not a refusal of access.
                Err(e) if e.token() != Some(Token::Unauthorized) => return Err(e),
                Err(e) if refusal.is_none() && write => {
                    if self.require_project(actor, &project, false).await.is_ok() {
                        refusal = Some(e);
                    }
                }
                Err(_) => {}
            }
        }
        let not_found =
            || ApiError::new(Token::PackageNotFound, format!("no package `{package_id}`"));
        match (usable.len(), refusal) {
            (1, _) => Ok(usable.remove(0)),
            // A reader refused a write may know the package; anyone else gets the answer an
            // unknown id gets, so that package ids of other projects cannot be probed.
            (0, Some(refused)) => Err(refused),
            (0, None) => Err(not_found()),
            _ => Err(ApiError::new(
                Token::AmbiguousPackageId,
                format!(
                    "package id `{package_id}` names packages in projects {}; name one with ?project_id= or GET /v1/projects/{{project_id}}/packages/{package_id}",
                    usable
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// The chain a Relay write of `actor` goes to: `session_id`'s when that is an active CARP
    /// session of `actor`, else the project's audit chain.
    async fn relay_chain(
        &self,
        actor: &Actor,
        project_id: &str,
        session_id: Option<&str>,
    ) -> Chain {
        if let Some(sid) = session_id
            && cra_wire::id::is_canonical_uuid(sid)
            && let Ok(rec) = self.session_record(sid).await
            && rec.agent_id == actor.id
            && rec.is_active()
        {
            return Chain {
                session_id: sid.to_owned(),
                owner: actor.id.clone(),
                project_id: project_id.to_owned(),
            };
        }
        Chain::audit(project_id)
    }

    /// Runs the Relay write `op` with `plan` naming the events each of its changes owes: the
    /// store keeps them with the change (the `outbox` module), and they are appended and published
    /// before this returns. A failure to append them is answered (the change is made; its
    /// events wait in the outbox for the next start).
    async fn relay_write<T, E>(
        &self,
        plan: Plan,
        op: impl FnOnce(Relay) -> Result<T, E> + Send + 'static,
    ) -> ApiResult<T>
    where
        T: Send + 'static,
        E: Into<ApiError> + Send + 'static,
    {
        let planner = Arc::new(Planner::new(self.ids.clone(), plan));
        let outbox: Arc<dyn cra_relay::store::Outbox> = planner.clone();
        let relay = self.relay.with_outbox(outbox);
        let done = crate::error::run_blocking("a relay task failed", move || op(relay))
            .await
            .and_then(|r| r.map_err(Into::into));
        let owed = planner.take();
        // A change is stored with the entry owing its events (a read owes none).
        if !owed.is_empty() {
            cra_store::fault_point!("relay.write.stored");
        }
        let settled = self.settle_owed(owed).await;
        let value = done?;
        settled?;
        Ok(value)
    }

    /// Appends the events of outbox entries this server just made, removing the entries, and
    /// publishes them.
    async fn settle_owed(&self, owed: Vec<(String, Owed)>) -> ApiResult<()> {
        if owed.is_empty() {
            return Ok(());
        }
        let (carp, log) = (self.backends.carp.clone(), self.backends.state_log.clone());
        let settled = crate::error::run_blocking("an outbox settlement failed", move || {
            owed.into_iter()
                .map(|(key, owed)| outbox::settle(carp.as_ref(), log.as_ref(), &key, owed))
                .collect::<Result<Vec<_>, _>>()
        })
        .await?
        .map_err(|e| match e {
            cra_carp::store::StateLogError::Chain(e) => crate::tracelog::chain_error(e),
            cra_carp::store::StateLogError::Store(e) => {
                crate::service::sessions::carp_store_error(e)
            }
        })?;
        for s in settled {
            self.publish_settled(&s.chain, &s.events);
        }
        Ok(())
    }

    fn publish_settled(&self, chain: &Chain, events: &[TraceEvent]) {
        self.metrics.add_events(events.len() as u64);
        self.hub.publish(&chain.session_id, &chain.owner, events);
    }

    /// The events that open the audit chain of `project`: `session.started`, then
    /// `relay.project.created` with the creator and members (the grants
    /// [`Runtime::project_grants`] reads) and, for an imported project, what the import brought.
    fn audit_opening(
        ids: &dyn cra_wire::IdGenerator,
        opened_at: &str,
        project: &cra_relay::Project,
        creator: &Actor,
        members: &[String],
        imported: Option<ImportCounts>,
    ) -> Owed {
        let project_id = project.project_id.as_str();
        let chain = Chain::audit(project_id);
        let goal = format!("audit chain of project {project_id}");
        let callsign = callsign_for(&chain.session_id);
        let started = cra_carp::events::SessionStarted {
            agent_id: &chain.owner,
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
        let (t, s) = (ids.new_id(), ids.new_id());
        let span = Span::root(&t, &s);
        let drafts = vec![span.draft_of(&started), span.draft_of(&created)];
        let opens = cra_carp::store::SessionRecord::opened(
            &chain.session_id,
            &chain.owner,
            opened_at.to_owned(),
        );
        Owed {
            chain,
            opens: Some(opens),
            drafts,
        }
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
        let (ids, creator, members) = (self.ids.clone(), actor.clone(), input.members.clone());
        let opened_at = cra_wire::clock::format_timestamp(self.clock.now());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Project(p) => vec![Self::audit_opening(
                ids.as_ref(),
                &opened_at,
                p,
                &creator,
                &members,
                None,
            )],
            _ => Vec::new(),
        });
        let (pid, name) = (input.project_id.clone(), input.name.clone());
        let project = self
            .relay_write(plan, move |r| r.create_project(&pid, &name))
            .await?;
        Ok(CreatedProject {
            audit_session_id: project_audit_session(&project.project_id),
            project,
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
        let (ids, by) = (self.ids.clone(), actor.id.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Project(p) => {
                let (project_id, by) = (p.project_id.as_str(), WrittenBy { id: &by });
                let chain = Chain::audit(project_id);
                vec![if archived {
                    Owed::event(chain, ids.as_ref(), &ProjectArchived { project_id, by })
                } else {
                    Owed::event(chain, ids.as_ref(), &ProjectUnarchived { project_id, by })
                }]
            }
            _ => Vec::new(),
        });
        let pid = project_id.to_owned();
        self.relay_write(plan, move |r| {
            if archived {
                r.archive(&pid)
            } else {
                r.unarchive(&pid)
            }
        })
        .await
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
        let session = package
            .get("created_by")
            .and_then(|c| c.get("session_id"))
            .and_then(Value::as_str);
        let chain = self.relay_chain(actor, project_id, session).await;
        let (ids, creator) = (self.ids.clone(), actor.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Package(p) => {
                let event = PackageDeposited {
                    project_id: &chain.project_id,
                    package_id: p.package.package_id(),
                    content_hash: &p.content_hash,
                    created_by: creator.event_ref(),
                };
                vec![Owed::event(chain.clone(), ids.as_ref(), &event)]
            }
            _ => Vec::new(),
        });
        let ra = relay_actor(actor);
        let pid = project_id.to_owned();
        self.relay_write(plan, move |r| r.deposit(&pid, &ra, &package))
            .await
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
        let chain = self
            .relay_chain(actor, &pid, current.package.session_id())
            .await;
        let (ids, by, f) = (self.ids.clone(), actor.id.clone(), flag.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Package(p) => {
                let event = PackageFlagged {
                    project_id: &chain.project_id,
                    package_id: p.package.package_id(),
                    review_type: &f.review_type,
                    note: f.note.as_deref(),
                    content_hash: &p.content_hash,
                    by: WrittenBy { id: &by },
                };
                vec![Owed::event(chain.clone(), ids.as_ref(), &event)]
            }
            _ => Vec::new(),
        });
        let (ra, id) = (relay_actor(actor), package_id.to_owned());
        self.relay_write(plan, move |r| {
            r.flag_for_review(&pid, &id, &flag.review_type, flag.note.as_deref(), &ra)
        })
        .await
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
        let chain = Chain::audit(&pid);
        let (ids, reviewer, v) = (self.ids.clone(), actor.clone(), review.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Package(p) => {
                let event = PackageReviewed {
                    project_id: &chain.project_id,
                    package_id: p.package.package_id(),
                    outcome: &v.outcome,
                    note: v.note.as_deref(),
                    content_hash: &p.content_hash,
                    reviewer: reviewer.event_ref(),
                };
                vec![Owed::event(chain.clone(), ids.as_ref(), &event)]
            }
            _ => Vec::new(),
        });
        let (ra, id) = (relay_actor(actor), package_id.to_owned());
        self.relay_write(plan, move |r| {
            r.review(&pid, &id, &review.outcome, review.note.as_deref(), &ra)
        })
        .await
    }

    /// Starts a Relay work session (§5.5) of `actor`, a writer of `project_id`, with a fresh
    /// callsign; recorded as `relay.session.started` in the project's audit chain.
    pub async fn start_relay_session(&self, actor: &Actor, project_id: &str) -> ApiResult<Session> {
        self.require_project(actor, project_id, true).await?;
        let (ids, starter) = (self.ids.clone(), actor.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Session(s) => {
                let event = RelaySessionStarted {
                    project_id: &s.project_id,
                    session_id: &s.session_id,
                    callsign: s.callsign.as_deref(),
                    actor: starter.event_ref(),
                };
                vec![Owed::event(
                    Chain::audit(&s.project_id),
                    ids.as_ref(),
                    &event,
                )]
            }
            _ => Vec::new(),
        });
        let (ra, pid) = (relay_actor(actor), project_id.to_owned());
        self.relay_write(plan, move |r| r.start_session(&pid, &ra))
            .await
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
        self.project_session(project_id, session_id).await?;
        let (ids, by) = (self.ids.clone(), actor.id.clone());
        // The store tells of the end only when this call ended the session.
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Session(s) => {
                let event = RelaySessionEnded {
                    project_id: &s.project_id,
                    session_id: &s.session_id,
                    packages_deposited: &s.packages_deposited,
                    by: WrittenBy { id: &by },
                };
                vec![Owed::event(
                    Chain::audit(&s.project_id),
                    ids.as_ref(),
                    &event,
                )]
            }
            _ => Vec::new(),
        });
        let (ra, id) = (relay_actor(actor), session_id.to_owned());
        self.relay_write(plan, move |r| r.end_session(&id, &ra))
            .await
    }

    /// §8.6 assert_fact of `fact` (the wire object) in `project_id`.
    pub async fn assert_fact(
        &self,
        actor: &Actor,
        project_id: &str,
        fact: Value,
    ) -> ApiResult<FactRecord> {
        self.require_project(actor, project_id, true).await?;
        let session = fact.get("session_id").and_then(Value::as_str);
        let chain = self.relay_chain(actor, project_id, session).await;
        let (ids, by) = (self.ids.clone(), actor.id.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Fact(rec) => {
                let event = FactAsserted {
                    project_id: &chain.project_id,
                    fact: rec.to_wire(),
                    by: WrittenBy { id: &by },
                };
                vec![Owed::event(chain.clone(), ids.as_ref(), &event)]
            }
            _ => Vec::new(),
        });
        let ra = relay_actor(actor);
        let pid = project_id.to_owned();
        self.relay_write(plan, move |r| r.assert_fact(&pid, &ra, &fact))
            .await
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
        let (ids, by, chain) = (self.ids.clone(), actor.id.clone(), Chain::audit(project_id));
        let (subj, pred) = (s.clone(), p.clone());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Invalidated(invalidated) => {
                let event = FactInvalidated {
                    project_id: &chain.project_id,
                    subject: &subj,
                    predicate: &pred,
                    invalidated,
                    by: WrittenBy { id: &by },
                };
                vec![Owed::event(chain.clone(), ids.as_ref(), &event)]
            }
            _ => Vec::new(),
        });
        self.relay_write(plan, move |r| r.invalidate_fact(&pid, &s, &p))
            .await
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
        let (ids, creator, grants) = (self.ids.clone(), actor.clone(), members.clone());
        let opened_at = cra_wire::clock::format_timestamp(self.clock.now());
        let plan: Plan = Box::new(move |w: Written<'_>| match w {
            Written::Restored(snap) => snap
                .projects
                .iter()
                .map(|p| {
                    let counts = ImportCounts::of(snap, &p.project_id);
                    Self::audit_opening(
                        ids.as_ref(),
                        &opened_at,
                        p,
                        &creator,
                        &grants,
                        Some(counts),
                    )
                })
                .collect(),
            _ => Vec::new(),
        });
        let snap = snapshot.clone();
        self.relay_write(plan, move |r| {
            r.store().restore(&snap).map_err(ExportError::Store)
        })
        .await?;
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

//! The TRACE events of Relay writes (`specs/http.md`, "Relay events"), one struct per payload.
//! A writer is named by id (`by`), or by id and type where the type decides something: the
//! creator of a project or package, and a reviewer (human reviews need a human).

use cra_carp::events::ActorRef;
use cra_relay::store::Snapshot;
use cra_trace::Payload;
use serde::Serialize;
use serde_json::Value;

/// The writer of an event that needs only its id.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WrittenBy<'a> {
    /// The actor's id.
    pub id: &'a str,
}

/// `relay.project.created`: event 1 of a project's audit chain, holding its grants.
#[derive(Debug, Serialize)]
pub(crate) struct ProjectCreated<'a> {
    /// The project.
    pub project_id: &'a str,
    /// Its display name.
    pub name: &'a str,
    /// The creator, granted reads and writes.
    pub created_by: ActorRef<'a>,
    /// Further actors granted reads and writes.
    pub members: &'a [String],
    /// For an imported project: what the import brought.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imported: Option<ImportCounts>,
}

impl Payload for ProjectCreated<'_> {
    const EVENT_TYPE: &'static str = "relay.project.created";
}

/// How many records of each kind an import brought into one project.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct ImportCounts {
    /// Packages.
    pub packages: usize,
    /// Fact rows.
    pub facts: usize,
    /// Relay sessions.
    pub sessions: usize,
    /// Review records.
    pub reviews: usize,
}

impl ImportCounts {
    /// The counts of `project_id`'s records in `snapshot`.
    pub(crate) fn of(snapshot: &Snapshot, project_id: &str) -> Self {
        Self {
            packages: snapshot
                .packages
                .iter()
                .filter(|p| p.package.project_id() == project_id)
                .count(),
            facts: snapshot
                .facts
                .iter()
                .filter(|f| f.fact.project_id == project_id)
                .count(),
            sessions: snapshot
                .sessions
                .iter()
                .filter(|s| s.project_id == project_id)
                .count(),
            reviews: snapshot
                .reviews
                .iter()
                .filter(|r| r.project_id == project_id)
                .count(),
        }
    }
}

/// `relay.project.archived`: writes are refused from here on.
#[derive(Debug, Serialize)]
pub struct ProjectArchived<'a> {
    /// The project.
    pub project_id: &'a str,
    /// Who archived it.
    pub by: WrittenBy<'a>,
}

impl Payload for ProjectArchived<'_> {
    const EVENT_TYPE: &'static str = "relay.project.archived";
}

/// `relay.project.unarchived`: writes are accepted again.
#[derive(Debug, Serialize)]
pub(crate) struct ProjectUnarchived<'a> {
    /// The project.
    pub project_id: &'a str,
    /// Who unarchived it.
    pub by: WrittenBy<'a>,
}

impl Payload for ProjectUnarchived<'_> {
    const EVENT_TYPE: &'static str = "relay.project.unarchived";
}

/// `relay.package.deposited`: a package was stored (an identical redeposit records nothing).
#[derive(Debug, Serialize)]
pub(crate) struct PackageDeposited<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The package.
    pub package_id: &'a str,
    /// Its content hash (Relay §4).
    pub content_hash: &'a str,
    /// The depositor, as authenticated (never as the body says).
    pub created_by: ActorRef<'a>,
}

impl Payload for PackageDeposited<'_> {
    const EVENT_TYPE: &'static str = "relay.package.deposited";
}

/// `relay.package.quarantined`: a read found a package's stored bytes no longer match its
/// content hash; it is kept for inspection and answered 409 `integrity_error` from then on.
#[derive(Debug, Serialize)]
pub(crate) struct PackageQuarantined<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The package.
    pub package_id: &'a str,
    /// The content hash stored with it.
    pub content_hash: &'a str,
    /// The hash its stored bytes have now.
    pub recomputed: &'a str,
}

impl Payload for PackageQuarantined<'_> {
    const EVENT_TYPE: &'static str = "relay.package.quarantined";
}

/// `relay.package.flagged`: a package now waits for a review.
#[derive(Debug, Serialize)]
pub(crate) struct PackageFlagged<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The package.
    pub package_id: &'a str,
    /// `human` or `agent`.
    pub review_type: &'a str,
    /// Why.
    pub note: Option<&'a str>,
    /// The content hash of the package flagged.
    pub content_hash: &'a str,
    /// Who flagged it.
    pub by: WrittenBy<'a>,
}

impl Payload for PackageFlagged<'_> {
    const EVENT_TYPE: &'static str = "relay.package.flagged";
}

/// `relay.package.reviewed`: a flagged package's review closed.
#[derive(Debug, Serialize)]
pub(crate) struct PackageReviewed<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The package.
    pub package_id: &'a str,
    /// `complete` or `revision_requested`.
    pub outcome: &'a str,
    /// The reviewer's note.
    pub note: Option<&'a str>,
    /// The content hash of the package after the review.
    pub content_hash: &'a str,
    /// The reviewer, as authenticated.
    pub reviewer: ActorRef<'a>,
}

impl Payload for PackageReviewed<'_> {
    const EVENT_TYPE: &'static str = "relay.package.reviewed";
}

/// `relay.fact.asserted`: a fact row was recorded.
#[derive(Debug, Serialize)]
pub(crate) struct FactAsserted<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The fact's wire object (Relay §7, unknown members included).
    pub fact: Value,
    /// Who asserted it.
    pub by: WrittenBy<'a>,
}

impl Payload for FactAsserted<'_> {
    const EVENT_TYPE: &'static str = "relay.fact.asserted";
}

/// `relay.fact.invalidated`: the current rows of a subject and predicate were closed.
#[derive(Debug, Serialize)]
pub(crate) struct FactInvalidated<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The subject.
    pub subject: &'a str,
    /// The predicate.
    pub predicate: &'a str,
    /// How many rows were closed.
    pub invalidated: usize,
    /// Who invalidated them.
    pub by: WrittenBy<'a>,
}

impl Payload for FactInvalidated<'_> {
    const EVENT_TYPE: &'static str = "relay.fact.invalidated";
}

/// `relay.session.started`: an actor began a Relay work session (§5.5) in the project.
#[derive(Debug, Serialize)]
pub(crate) struct RelaySessionStarted<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The session (`sess_<32 hex>`).
    pub session_id: &'a str,
    /// Its callsign, the memorable name an operator asks about.
    pub callsign: Option<&'a str>,
    /// The actor working in it.
    pub actor: ActorRef<'a>,
}

impl Payload for RelaySessionStarted<'_> {
    const EVENT_TYPE: &'static str = "relay.session.started";
}

/// `relay.session.ended`: its actor ended a Relay work session, with what it deposited.
#[derive(Debug, Serialize)]
pub(crate) struct RelaySessionEnded<'a> {
    /// The project.
    pub project_id: &'a str,
    /// The session.
    pub session_id: &'a str,
    /// The packages deposited in it.
    pub packages_deposited: &'a [String],
    /// Who ended it (its actor).
    pub by: WrittenBy<'a>,
}

impl Payload for RelaySessionEnded<'_> {
    const EVENT_TYPE: &'static str = "relay.session.ended";
}

#[cfg(test)]
mod tests {
    use cra_trace::Span;
    use serde_json::json;

    use super::*;

    /// `payload`'s event has its type and, as canonical text, exactly `value`.
    fn same<P: Payload>(payload: &P, event_type: &str, value: &Value) {
        let event = Span::root("t", "s").event(payload);
        assert_eq!(event.draft.event_type, event_type);
        assert_eq!(
            event.canonical_payload(),
            cra_wire::canonical::trace_canonical(value)
        );
    }

    /// Each payload is the object the routes wrote before the events were typed, member for
    /// member (`null` notes included, `imported` only for an imported project).
    #[test]
    fn relay_payloads_are_the_objects_they_replace() {
        let by = WrittenBy { id: "ann" };
        let ann = || ActorRef::of("ann", "human");
        let members = ["bob".to_owned()];
        let created = ProjectCreated {
            project_id: "p",
            name: "P\u{e9}",
            created_by: ann(),
            members: &members,
            imported: None,
        };
        let expected = json!({"project_id": "p", "name": "P\u{e9}", "created_by": {"id": "ann", "type": "human"}, "members": ["bob"]});
        same(&created, "relay.project.created", &expected);
        let counts = ImportCounts {
            packages: 3,
            facts: 2,
            sessions: 1,
            reviews: 0,
        };
        let mut with_import = expected.clone();
        with_import["imported"] = json!({"packages": 3, "facts": 2, "sessions": 1, "reviews": 0});
        let imported = ProjectCreated {
            imported: Some(counts),
            ..created
        };
        same(&imported, "relay.project.created", &with_import);
        let by_ann = json!({"project_id": "p", "by": {"id": "ann"}});
        same(
            &ProjectArchived {
                project_id: "p",
                by,
            },
            "relay.project.archived",
            &by_ann,
        );
        same(
            &ProjectUnarchived {
                project_id: "p",
                by,
            },
            "relay.project.unarchived",
            &by_ann,
        );
        same(
            &PackageDeposited {
                project_id: "p",
                package_id: "k",
                content_hash: "sha256:00",
                created_by: ActorRef::of("a1", "agent"),
            },
            "relay.package.deposited",
            &json!({"project_id": "p", "package_id": "k", "content_hash": "sha256:00", "created_by": {"id": "a1", "type": "agent"}}),
        );
        same(
            &PackageFlagged {
                project_id: "p",
                package_id: "k",
                review_type: "human",
                note: None,
                content_hash: "sha256:00",
                by,
            },
            "relay.package.flagged",
            &json!({"project_id": "p", "package_id": "k", "review_type": "human", "note": null, "content_hash": "sha256:00", "by": {"id": "ann"}}),
        );
        same(
            &PackageReviewed {
                project_id: "p",
                package_id: "k",
                outcome: "complete",
                note: Some("ok"),
                content_hash: "sha256:01",
                reviewer: ann(),
            },
            "relay.package.reviewed",
            &json!({"project_id": "p", "package_id": "k", "outcome": "complete", "note": "ok", "content_hash": "sha256:01", "reviewer": {"id": "ann", "type": "human"}}),
        );
        let fact = json!({"subject": "s", "predicate": "p", "object": 1.50, "x-note": "kept"});
        same(
            &FactAsserted {
                project_id: "p",
                fact: fact.clone(),
                by,
            },
            "relay.fact.asserted",
            &json!({"project_id": "p", "fact": fact, "by": {"id": "ann"}}),
        );
        same(
            &FactInvalidated {
                project_id: "p",
                subject: "s",
                predicate: "p",
                invalidated: 2,
                by,
            },
            "relay.fact.invalidated",
            &json!({"project_id": "p", "subject": "s", "predicate": "p", "invalidated": 2, "by": {"id": "ann"}}),
        );
    }
}

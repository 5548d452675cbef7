//! The Relay wire objects: actors, projects, context packages (§6, kept as the exact JSON object
//! received so unknown and `x-*` fields round-trip), their content hash (§6.6 + errata), review
//! records and sessions (§5.5).

use std::fmt;

use cra_wire::canonical::CanonicalError;
use cra_wire::canonical::relay::relay_canonical_without;
use cra_wire::hash::sha256_prefixed;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this implementation speaks.
pub const RELAY_VERSION: &str = "0.1";

/// The wire key that carries the content hash beside (never inside) the hashed object.
pub const CONTENT_HASH_KEY: &str = "content_hash";

/// The kind of an actor (§5.4, §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorType {
    /// A person.
    Human,
    /// An AI agent.
    Agent,
    /// A scheduled or scripted tool.
    Script,
}

impl ActorType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorType::Human => "human",
            ActorType::Agent => "agent",
            ActorType::Script => "script",
        }
    }

    /// The actor type spelled `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "human" => Some(ActorType::Human),
            "agent" => Some(ActorType::Agent),
            "script" => Some(ActorType::Script),
            _ => None,
        }
    }
}

/// The authenticated caller of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    /// Actor identifier (what `created_by.id` must equal).
    pub id: String,
    /// Actor kind.
    #[serde(rename = "type")]
    pub actor_type: ActorType,
}

impl Actor {
    /// An actor.
    pub fn new(id: impl Into<String>, actor_type: ActorType) -> Self {
        Self {
            id: id.into(),
            actor_type,
        }
    }
}

/// Package lifecycle state (§5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Work in progress.
    Draft,
    /// Blocked on a reviewer.
    AwaitingReview,
    /// The reviewer asked for changes.
    RevisionRequested,
    /// Final; terminal.
    Complete,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 4] = [
        Status::Draft,
        Status::AwaitingReview,
        Status::RevisionRequested,
        Status::Complete,
    ];

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::AwaitingReview => "awaiting_review",
            Status::RevisionRequested => "revision_requested",
            Status::Complete => "complete",
        }
    }

    /// The status spelled `s`.
    pub fn parse(s: &str) -> Option<Self> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether §5.3 allows moving from `self` to `to`. Nothing leaves `complete`.
    pub fn can_become(self, to: Status) -> bool {
        use Status::*;
        matches!(
            (self, to),
            (Draft, Complete)
                | (Draft, AwaitingReview)
                | (AwaitingReview, Complete)
                | (AwaitingReview, RevisionRequested)
                | (RevisionRequested, AwaitingReview)
                | (RevisionRequested, Complete)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A project: the unit of scope, access control, archival and export (§5.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    /// Identifier.
    pub project_id: String,
    /// Human-readable name.
    pub name: String,
    /// When the project was created (cra wire timestamp).
    pub created_at: String,
    /// Set while archived; archived projects refuse writes.
    #[serde(default)]
    pub archived_at: Option<String>,
}

/// A validated context package: the JSON object exactly as deposited (minus `content_hash`),
/// so unknown and `x-*` fields round-trip untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    raw: Map<String, Value>,
}

impl Package {
    /// Wraps an object already checked by [`crate::validate::validate_package`].
    pub(crate) fn from_validated(mut raw: Map<String, Value>) -> Self {
        raw.remove(CONTENT_HASH_KEY);
        Self { raw }
    }

    /// The JSON object (without `content_hash`).
    pub fn as_object(&self) -> &Map<String, Value> {
        &self.raw
    }

    fn str_field(&self, key: &str) -> &str {
        self.raw.get(key).and_then(Value::as_str).unwrap_or("")
    }

    fn opt_str(&self, key: &str) -> Option<&str> {
        self.raw.get(key).and_then(Value::as_str)
    }

    fn str_list(&self, key: &str) -> Vec<&str> {
        self.raw
            .get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// `package_id`.
    pub fn package_id(&self) -> &str {
        self.str_field("package_id")
    }
    /// `project_id`.
    pub fn project_id(&self) -> &str {
        self.str_field("project_id")
    }
    /// `title`.
    pub fn title(&self) -> &str {
        self.str_field("title")
    }
    /// `status` (validated on construction; `draft` is never reached as a fallback in practice).
    pub fn status(&self) -> Status {
        Status::parse(self.str_field("status")).unwrap_or(Status::Draft)
    }
    /// `package_type`.
    pub fn package_type(&self) -> &str {
        self.str_field("package_type")
    }
    /// `review_type`.
    pub fn review_type(&self) -> &str {
        self.str_field("review_type")
    }
    /// `created_at` exactly as deposited.
    pub fn created_at(&self) -> &str {
        self.str_field("created_at")
    }
    /// `created_by.id`.
    pub fn created_by_id(&self) -> &str {
        self.raw
            .get("created_by")
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// `created_by.type` (validated on deposit: human, agent or script).
    pub fn created_by_type(&self) -> Option<ActorType> {
        self.raw
            .get("created_by")
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
            .and_then(ActorType::parse)
    }
    /// `created_by.session_id`, when set.
    pub fn session_id(&self) -> Option<&str> {
        self.raw
            .get("created_by")
            .and_then(|c| c.get("session_id"))
            .and_then(Value::as_str)
    }
    /// `description` (default "").
    pub fn description(&self) -> &str {
        self.str_field("description")
    }
    /// `handoff_note` (default "").
    pub fn handoff_note(&self) -> &str {
        self.str_field("handoff_note")
    }
    /// `content_md` (default "").
    pub fn content_md(&self) -> &str {
        self.str_field("content_md")
    }
    /// `topic`.
    pub fn topic(&self) -> Option<&str> {
        self.opt_str("topic")
    }
    /// `tags` (default empty).
    pub fn tags(&self) -> Vec<&str> {
        self.str_list("tags")
    }
    /// `decisions_made` (default empty).
    pub fn decisions(&self) -> Vec<&str> {
        self.str_list("decisions_made")
    }
    /// `open_questions` (default empty).
    pub fn open_questions(&self) -> Vec<&str> {
        self.str_list("open_questions")
    }
    /// `significance` (default 5).
    pub fn significance(&self) -> i64 {
        self.raw
            .get("significance")
            .and_then(Value::as_i64)
            .unwrap_or(5)
    }

    /// A copy with `status` (and, when given, `review_type`) replaced.
    pub fn with_status(&self, status: Status, review_type: Option<&str>) -> Package {
        let mut raw = self.raw.clone();
        raw.insert("status".into(), Value::String(status.as_str().into()));
        if let Some(rt) = review_type {
            raw.insert("review_type".into(), Value::String(rt.into()));
        }
        Package { raw }
    }

    /// The content hash (§6.6, errata): `sha256:` + hex of the Relay canonical form of the
    /// object without `content_hash`.
    pub fn content_hash(&self) -> Result<String, CanonicalError> {
        content_hash_of(&self.raw)
    }
}

/// The content hash of a package object; a `content_hash` member, if any, is left out.
pub fn content_hash_of(object: &Map<String, Value>) -> Result<String, CanonicalError> {
    let canonical = relay_canonical_without(object, CONTENT_HASH_KEY)?;
    Ok(sha256_prefixed(canonical.as_bytes()))
}

/// A package as kept by a store: the object, its hash, and whether it failed verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPackage {
    /// The package.
    pub package: Package,
    /// The hash computed when it was written.
    pub content_hash: String,
    /// Set (with the reason) once a read found the stored bytes no longer match the hash.
    pub quarantined: Option<String>,
}

impl StoredPackage {
    /// The wire form: the package object plus `content_hash`.
    pub fn to_wire(&self) -> Value {
        let mut obj = self.package.raw.clone();
        obj.insert(
            CONTENT_HASH_KEY.into(),
            Value::String(self.content_hash.clone()),
        );
        Value::Object(obj)
    }

    /// Rebuilds a stored package from its wire form, trusting nothing: the object is validated
    /// again and `content_hash` must be present. Whether it matches is checked by [`Self::verify`].
    pub fn from_wire(value: &Value) -> Result<StoredPackage, Vec<cra_wire::FieldError>> {
        let hash = value
            .get(CONTENT_HASH_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                vec![cra_wire::FieldError::new(
                    "/content_hash",
                    "a stored package must carry its content_hash",
                )]
            })?;
        let package = crate::validate::validate_package(value)?;
        Ok(StoredPackage {
            package,
            content_hash: hash,
            quarantined: None,
        })
    }

    /// Recomputes the hash; `Err` carries the recomputed value when it differs from the stored one.
    pub fn verify(&self) -> Result<(), String> {
        match self.package.content_hash() {
            Ok(h) if h == self.content_hash => Ok(()),
            Ok(h) => Err(h),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Serialize for StoredPackage {
    /// As [`StoredPackage::to_wire`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(s)
    }
}

/// Who moved a package through review, when, and why: kept beside the (hashed) package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// The package.
    pub package_id: String,
    /// The owning project.
    pub project_id: String,
    /// `flag` (flag_for_review) or `review` (a reviewer's outcome).
    pub action: String,
    /// Status before.
    pub from_status: Status,
    /// Status after.
    pub to_status: Status,
    /// `review_type` after the change.
    pub review_type: String,
    /// The acting reviewer (or flagger).
    pub actor: Actor,
    /// When (cra wire timestamp).
    pub at: String,
    /// Free text.
    #[serde(default)]
    pub note: Option<String>,
    /// The package's content hash after the change.
    pub content_hash: String,
}

/// A work session of one actor in one project (§5.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// `sess_` + 32 hex.
    pub session_id: String,
    /// Scope.
    pub project_id: String,
    /// The producing actor.
    pub actor_id: String,
    /// Actor kind.
    pub actor_type: ActorType,
    /// Adjective-noun memorability aid; not unique.
    pub callsign: Option<String>,
    /// Start (cra wire timestamp).
    pub started_at: String,
    /// End; `None` while active.
    pub ended_at: Option<String>,
    /// Packages deposited in this session, in deposit order.
    pub packages_deposited: Vec<String>,
}

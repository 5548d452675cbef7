//! The errors of Relay operations, each mapped to its wire token (§8, errata) and error body.

use cra_wire::{ErrorBody, FieldError, Token};

use crate::store::RelayStoreError;

/// Why a Relay operation was refused or failed. Nothing is changed when one is returned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RelayError {
    /// The input does not match its wire schema; every bad field is listed with its pointer.
    #[error("the {what} does not match the Relay wire schema: {}", summary(.errors))]
    InvalidSchema {
        /// `package`, `fact`, ...
        what: &'static str,
        /// Each problem.
        errors: Vec<FieldError>,
    },
    /// A package id that exists with different content.
    #[error(
        "package {0} already exists with different content; packages are immutable, deposit a new package with parent_package_id instead"
    )]
    DuplicatePackageId(String),
    /// A package id held by several projects, asked for without naming one.
    #[error(
        "package id {package_id} names packages in projects {projects}; name the project (ids are unique within a project only)"
    )]
    AmbiguousPackageId {
        /// The id.
        package_id: String,
        /// The projects holding it, comma-separated.
        projects: String,
    },
    /// Writes to an archived project.
    #[error("project {0} is archived; unarchive it before writing")]
    ProjectArchived(String),
    /// `created_by` (or `asserted_by`) names another actor than the acting one: its `id` is
    /// not the actor's id, or its `type` is not the actor's type.
    #[error(
        "{field} is `{claimed}` but the authenticated actor is `{actor}`; an actor may only write as itself"
    )]
    IdentityMismatch {
        /// Which field (`created_by.id`, `created_by.type`, `asserted_by.id`, `asserted_by.type`).
        field: &'static str,
        /// What the input claimed.
        claimed: String,
        /// Who is acting.
        actor: String,
    },
    /// The caller may not record this review outcome (specs/relay.md, "Review gates").
    #[error("{actor} may not review package {package_id}: {reason}")]
    ReviewNotAllowed {
        /// The package.
        package_id: String,
        /// The acting actor, as `id (type)`.
        actor: String,
        /// Which rule refused it and who may review instead.
        reason: String,
    },
    /// The caller may not make this write (e.g. ending someone else's session).
    #[error("{0}")]
    Unauthorized(String),
    /// No such project.
    #[error("no project {0}; create it first (POST /v1/projects)")]
    ProjectNotFound(String),
    /// No such package.
    #[error("no package {0}")]
    PackageNotFound(String),
    /// No such session.
    #[error("no session {0}")]
    SessionNotFound(String),
    /// A status change §5.3 does not allow.
    #[error("package {package_id} cannot go from {from} to {to} (§5.3); {hint}")]
    InvalidTransition {
        /// The package.
        package_id: String,
        /// Current status.
        from: String,
        /// Requested status.
        to: String,
        /// What to do instead.
        hint: &'static str,
    },
    /// The stored package no longer matches its content hash; it is quarantined.
    #[error(
        "package {package_id} failed verification (stored {stored}, recomputed {recomputed}) and is quarantined; restore it from an export"
    )]
    Integrity {
        /// The package.
        package_id: String,
        /// The hash stored beside it.
        stored: String,
        /// The hash of the bytes now stored.
        recomputed: String,
    },
    /// `pull` relevant without search.
    #[error("this deployment has no search index; pull with mode=latest or mode=specific")]
    SearchNotSupported,
    /// A project id is taken.
    #[error("project {0} already exists")]
    ProjectExists(String),
    /// A concurrent writer changed the record first.
    #[error("{0} was changed concurrently; read it again and retry")]
    Conflict(String),
    /// The store failed.
    #[error("storage failure, nothing was changed: {0}")]
    Store(String),
}

fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                if e.pointer.is_empty() {
                    "/"
                } else {
                    &e.pointer
                },
                e.message
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl RelayError {
    /// An `invalid_schema` error with one problem.
    pub fn schema(what: &'static str, pointer: &str, message: impl Into<String>) -> Self {
        RelayError::InvalidSchema {
            what,
            errors: vec![FieldError::new(pointer, message)],
        }
    }

    /// The wire token.
    pub fn token(&self) -> Token {
        match self {
            RelayError::InvalidSchema { .. } => Token::InvalidSchema,
            RelayError::DuplicatePackageId(_) => Token::DuplicatePackageId,
            RelayError::AmbiguousPackageId { .. } => Token::AmbiguousPackageId,
            RelayError::ProjectArchived(_) => Token::ProjectArchived,
            RelayError::IdentityMismatch { .. } => Token::IdentityMismatch,
            RelayError::ReviewNotAllowed { .. } => Token::ReviewNotAllowed,
            RelayError::Unauthorized(_) => Token::Unauthorized,
            RelayError::ProjectNotFound(_) => Token::ProjectNotFound,
            RelayError::PackageNotFound(_) => Token::PackageNotFound,
            RelayError::SessionNotFound(_) => Token::SessionNotFound,
            RelayError::InvalidTransition { .. } => Token::InvalidTransition,
            RelayError::Integrity { .. } => Token::IntegrityError,
            RelayError::SearchNotSupported => Token::SearchNotSupported,
            RelayError::ProjectExists(_) => Token::AlreadyExists,
            RelayError::Conflict(_) => Token::AlreadyExists,
            RelayError::Store(_) => Token::Unavailable,
        }
    }

    /// The HTTP status.
    pub fn http_status(&self) -> u16 {
        self.token().http_status()
    }

    /// The wire error body.
    pub fn to_body(&self) -> ErrorBody {
        let body = ErrorBody::new(self.token(), self.to_string());
        match self {
            RelayError::InvalidSchema { errors, .. } => body.with_errors(errors.clone()),
            RelayError::SearchNotSupported => body.with_capability("search"),
            RelayError::IdentityMismatch { field, .. } => body.with_errors(vec![FieldError::new(
                format!("/{}", field.replace('.', "/")),
                self.to_string(),
            )]),
            _ => body,
        }
    }
}

impl From<RelayStoreError> for RelayError {
    fn from(e: RelayStoreError) -> Self {
        match e {
            RelayStoreError::Supersession(s) => {
                RelayError::schema("fact", "/valid_from", s.to_string())
            }
            RelayStoreError::SearchUnsupported => RelayError::SearchNotSupported,
            RelayStoreError::Conflict(what) => RelayError::Conflict(what),
            RelayStoreError::NotFound(what) => RelayError::Store(format!("{what} vanished")),
            other => RelayError::Store(other.to_string()),
        }
    }
}

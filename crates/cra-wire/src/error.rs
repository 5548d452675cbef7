//! The one error body every cra HTTP route answers with, and the table of error tokens.
//!
//! Shape (errata, "Error bodies"):
//! `{"error": token, "message": text, "details"?: {"errors": [{"pointer", "message"}]}, "capability"?: name}`.
//! [`Token`] is the single list of tokens; `specs/errors.md` mirrors it and a test keeps the two equal.

use serde::{Deserialize, Serialize};

/// One problem with one field of an input, located by its JSON pointer (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// JSON pointer of the offending value (`""` for the whole document).
    pub pointer: String,
    /// What is wrong and, where it helps, what would be right.
    pub message: String,
}

impl FieldError {
    /// A problem at `pointer`.
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// The `details` member of an error body.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ErrorDetails {
    /// Every field-level problem found, in document order.
    pub errors: Vec<FieldError>,
}

/// The wire error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The machine-readable token (see [`Token`]).
    pub error: String,
    /// A sentence for people: what happened and what to do next.
    pub message: String,
    /// Field-level problems, when the input was at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ErrorDetails>,
    /// The missing capability, on 501 answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
}

impl ErrorBody {
    /// A body with `token` and `message` and nothing else.
    pub fn new(token: Token, message: impl Into<String>) -> Self {
        Self {
            error: token.as_str().to_owned(),
            message: message.into(),
            details: None,
            capability: None,
        }
    }

    /// Adds field-level problems.
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.details = Some(ErrorDetails { errors });
        self
    }

    /// Names the missing capability (for 501 answers).
    pub fn with_capability(mut self, capability: impl Into<String>) -> Self {
        self.capability = Some(capability.into());
        self
    }
}

macro_rules! tokens {
    ($( #[doc = $doc:literal] $variant:ident = ($text:literal, $status:literal), )*) => {
        /// Every error token cra answers with, and its HTTP status.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Token { $( #[doc = $doc] $variant, )* }

        impl Token {
            /// All tokens, in table order.
            pub const ALL: &'static [Token] = &[$(Token::$variant,)*];

            /// The token as it appears in `error`.
            pub fn as_str(self) -> &'static str {
                match self { $(Token::$variant => $text,)* }
            }

            /// One sentence saying what the token means (the variant's documentation).
            pub fn description(self) -> &'static str {
                match self { $(Token::$variant => $doc.trim_ascii_start(),)* }
            }

            /// The HTTP status this token is answered with.
            pub fn http_status(self) -> u16 {
                match self { $(Token::$variant => $status,)* }
            }

            /// The token spelled `text`, if there is one.
            pub fn parse(text: &str) -> Option<Token> {
                match text { $($text => Some(Token::$variant),)* _ => None }
            }
        }
    };
}

tokens! {
    /// The body is not JSON, not the expected shape, or a field is out of range (CARP §3.6).
    InvalidRequest = ("invalid_request", 400),
    /// A Relay package or fact does not match its wire schema.
    InvalidSchema = ("invalid_schema", 400),
    /// Execute parameters fail the action's `parameters_schema`.
    InvalidParameters = ("invalid_parameters", 400),
    /// A request's timestamp is more than the allowed skew from the runtime clock.
    ClockSkew = ("clock_skew", 400),
    /// A Relay package status change not allowed by §5.3.
    InvalidTransition = ("invalid_transition", 400),
    /// An atlas failed validation.
    InvalidAtlas = ("invalid_atlas", 400),
    /// A TRACE event lacks a field or has one of the wrong type, so it cannot be hashed.
    MalformedEvent = ("malformed_event", 400),
    /// No credentials, or credentials that are not valid.
    Unauthenticated = ("unauthenticated", 401),
    /// The caller is authenticated but lacks the role or grant.
    Forbidden = ("forbidden", 403),
    /// Relay's token for a write the caller may not make.
    Unauthorized = ("unauthorized", 403),
    /// `requester.agent_id`, `created_by` or `asserted_by` (id or type) differs from the authenticated actor.
    IdentityMismatch = ("identity_mismatch", 403),
    /// The session has ended.
    SessionInactive = ("session_inactive", 403),
    /// A resolution of another session, or a `parent_session_id` that is not the session's.
    SessionMismatch = ("session_mismatch", 403),
    /// The action is not in the resolution's `allowed_actions`.
    ActionNotAllowed = ("action_not_allowed", 403),
    /// Writes to an archived Relay project are refused.
    ProjectArchived = ("project_archived", 403),
    /// A Relay review outcome the caller may not record: a `human` review needs a human who is not the author, an `agent` review an agent who is not the author.
    ReviewNotAllowed = ("review_not_allowed", 403),
    /// The approval for this resolution was rejected.
    ApprovalRejected = ("approval_rejected", 403),
    /// The call's parameters need a human approval the resolution did not ask for: resolve again with `task.intended_parameters` for the action.
    ApprovalRequired = ("approval_required", 403),
    /// The approval was asked for another call (action, parameters or atlas version) than this one: an approval runs the call it was asked for.
    ApprovalMismatch = ("approval_mismatch", 403),
    /// The approval has run its call once already: resolve again to ask for another approval.
    ApprovalUsed = ("approval_used", 403),
    /// A rate-limit policy's window is exhausted.
    RateLimitExceeded = ("rate_limit_exceeded", 429),
    /// A budget policy's units are spent.
    BudgetExhausted = ("budget_exhausted", 429),
    /// No such route or resource.
    NotFound = ("not_found", 404),
    /// No such session.
    SessionNotFound = ("session_not_found", 404),
    /// No such resolution.
    ResolutionNotFound = ("resolution_not_found", 404),
    /// No such atlas (or no version satisfying the range).
    AtlasNotFound = ("atlas_not_found", 404),
    /// No such approval.
    ApprovalNotFound = ("approval_not_found", 404),
    /// No such Relay project.
    ProjectNotFound = ("project_not_found", 404),
    /// No such Relay package.
    PackageNotFound = ("package_not_found", 404),
    /// The resolution's ttl has passed.
    ResolutionExpired = ("resolution_expired", 409),
    /// The atlas that allowed the action changed (or went) since the resolution; resolve again.
    ResolutionStale = ("resolution_stale", 409),
    /// The `request_id` was already used in this session.
    DuplicateRequestId = ("duplicate_request_id", 409),
    /// A package with this id and different content exists.
    DuplicatePackageId = ("duplicate_package_id", 409),
    /// A package id names packages in several projects the caller may read; name the project.
    AmbiguousPackageId = ("ambiguous_package_id", 409),
    /// An atlas with this id and version is in force with other content; a published version never changes.
    AtlasVersionConflict = ("atlas_version_conflict", 409),
    /// The resource already exists (e.g. a project id).
    AlreadyExists = ("already_exists", 409),
    /// The approval is still pending.
    ApprovalPending = ("approval_pending", 409),
    /// An execution with this idempotency key is still running; retry for its outcome.
    ExecutionInProgress = ("execution_in_progress", 409),
    /// The idempotency key was first used for another call (action or parameters): a key names one call, so send this one with a new key.
    IdempotencyKeyReused = ("idempotency_key_reused", 409),
    /// The stored record failed its integrity check and is quarantined.
    IntegrityError = ("integrity_error", 409),
    /// The request body did not arrive within the configured time.
    RequestTimeout = ("request_timeout", 408),
    /// The request body exceeds the configured limit.
    PayloadTooLarge = ("payload_too_large", 413),
    /// The content type is not `application/json`.
    UnsupportedMediaType = ("unsupported_media_type", 415),
    /// Too many requests for this key.
    TooManyRequests = ("too_many_requests", 429),
    /// A quota of this server is used up: open sessions of an agent, events in a session.
    QuotaExceeded = ("quota_exceeded", 429),
    /// Something failed inside the runtime; nothing was changed.
    InternalError = ("internal_error", 500),
    /// A capability this deployment does not provide.
    NotImplemented = ("not_implemented", 501),
    /// `pull` mode `relevant` without a search capability.
    SearchNotSupported = ("search_not_supported", 501),
    /// The backing store is unavailable.
    Unavailable = ("unavailable", 503),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for t in Token::ALL {
            assert_eq!(Token::parse(t.as_str()), Some(*t));
            assert!(seen.insert(t.as_str()), "duplicate token {}", t.as_str());
            assert!(
                [400, 401, 403, 404, 408, 409, 413, 415, 429, 500, 501, 503]
                    .contains(&t.http_status())
            );
        }
    }

    #[test]
    fn body_omits_absent_members() {
        let b = ErrorBody::new(Token::SessionNotFound, "no session 1");
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"error":"session_not_found","message":"no session 1"}"#
        );
    }
}

#[cfg(test)]
mod spec_table {
    use super::Token;

    /// `specs/errors.md` and [`Token`] must list the same tokens with the same statuses.
    #[test]
    fn specs_errors_table_matches_the_enum() {
        let doc = include_str!("../../../specs/errors.md");
        let mut documented: Vec<(String, u16)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let token = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                let status = cells.get(2)?.parse().ok()?;
                Some((token.to_owned(), status))
            })
            .collect();
        let mut actual: Vec<(String, u16)> = Token::ALL
            .iter()
            .map(|t| (t.as_str().to_owned(), t.http_status()))
            .collect();
        documented.sort();
        actual.sort();
        assert_eq!(
            documented, actual,
            "specs/errors.md is out of date with cra_wire::Token"
        );
    }
}

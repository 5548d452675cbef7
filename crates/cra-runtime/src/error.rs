//! The runtime's one error type: every refusal any operation or route gives is an [`ApiError`]:
//! the shared wire body (`cra_wire::ErrorBody`: token, message, JSON pointers). It carries no
//! transport status; the HTTP door renders it with the status its [`Token`] maps to.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use cra_carp::validate::CarpError;
use cra_wire::{ErrorBody, FieldError, Token};

/// A refusal: a token (which fixes the HTTP status), a message for people, and field-level
/// details.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} ({}): {}", body.error, self.status(), body.message)]
pub struct ApiError {
    /// The wire body.
    pub body: ErrorBody,
}

impl From<CarpError> for ApiError {
    /// A CARP refusal, with its field-level problems.
    fn from(e: CarpError) -> Self {
        let a = Self::new(e.token, e.message);
        if e.errors.is_empty() {
            a
        } else {
            a.with_errors(e.errors)
        }
    }
}

impl From<cra_relay::RelayError> for ApiError {
    /// A Relay refusal, its body as the Relay service words it.
    fn from(e: cra_relay::RelayError) -> Self {
        Self { body: e.to_body() }
    }
}

impl From<cra_relay::export::ExportError> for ApiError {
    /// A refused export or import, its body as the export module words it.
    fn from(e: cra_relay::export::ExportError) -> Self {
        Self { body: e.to_body() }
    }
}

impl ApiError {
    /// A refusal with `token` and `message`.
    pub fn new(token: Token, message: impl Into<String>) -> Self {
        Self {
            body: ErrorBody::new(token, message),
        }
    }

    /// The HTTP status of this refusal: its token's (500 for a token this build does not know).
    pub fn status(&self) -> u16 {
        self.token().map_or(500, Token::http_status)
    }

    /// A refusal caused by one field, located by its JSON pointer.
    pub fn field(token: Token, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        let message = message.into();
        let pointer = pointer.into();
        let summary = if pointer.is_empty() {
            message.clone()
        } else {
            format!("{pointer}: {message}")
        };
        Self::new(token, summary).with_errors(vec![FieldError::new(pointer, message)])
    }

    /// Adds field-level problems.
    pub fn with_errors(mut self, errors: Vec<FieldError>) -> Self {
        self.body = self.body.with_errors(errors);
        self
    }

    /// Names a missing capability (501 answers).
    pub fn with_capability(mut self, capability: impl Into<String>) -> Self {
        self.body = self.body.with_capability(capability);
        self
    }

    /// The token of this refusal.
    pub fn token(&self) -> Option<Token> {
        Token::parse(&self.body.error)
    }

    /// A failure inside the runtime. The detail goes to the log, not to the caller.
    pub fn internal(context: &str, detail: impl std::fmt::Display) -> Self {
        tracing::error!(%detail, "{context}");
        Self::new(
            Token::InternalError,
            format!("{context}; nothing was changed, retry later or see the server log"),
        )
    }

    /// 404 `not_found` for `what`.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(Token::NotFound, what)
    }

    /// 403 `forbidden` with `message`.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Token::Forbidden, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body).unwrap_or_else(|_| {
            br#"{"error":"internal_error","message":"could not render the error body"}"#.to_vec()
        });
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        // RFC 6750 §3: a 401 names the scheme the client should authenticate with (MCP clients
        // rely on it to start their authorization flow).
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"cra\""),
            );
        }
        response
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

/// Runs blocking store or engine work (the storage traits are synchronous) off the async
/// threads. A task that panicked or was cancelled becomes a 500 naming `what`.
pub(crate) async fn run_blocking<T, F>(what: &'static str, f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(what, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_the_token() {
        for t in Token::ALL {
            let e = ApiError::new(*t, "x");
            assert_eq!(e.status(), t.http_status());
            assert_eq!(e.token(), Some(*t));
        }
    }

    #[test]
    fn field_errors_carry_the_pointer() {
        let e = ApiError::field(Token::InvalidRequest, "/task/goal", "must be a string");
        let d = e.body.details.unwrap_or_default();
        assert_eq!(d.errors[0].pointer, "/task/goal");
        assert_eq!(e.body.message, "/task/goal: must be a string");
    }
}

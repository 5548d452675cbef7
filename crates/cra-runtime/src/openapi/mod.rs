//! The OpenAPI document, generated from the handlers' annotations (utoipa). `cargo xtask codegen`
//! writes it to `schemas/openapi.json`; `--check` fails when the committed file is stale.
//!
//! * [`wire`]: the bodies' shapes: the protocols' JSON Schemas embedded, and mirrors.

use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::routes;

pub mod wire;

/// One problem with one field (documentation mirror of `cra_wire::FieldError`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = FieldError)]
pub(crate) struct FieldErrorSchema {
    /// JSON pointer of the offending value.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// `details` of an error body.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ErrorDetails)]
pub(crate) struct ErrorDetailsSchema {
    /// Field-level problems.
    pub errors: Vec<FieldErrorSchema>,
}

/// The one error body (documentation mirror of `cra_wire::ErrorBody`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = ErrorBody)]
pub(crate) struct ErrorBodySchema {
    /// The token (see specs/errors.md).
    pub error: String,
    /// For people.
    pub message: String,
    /// Field-level problems.
    pub details: Option<ErrorDetailsSchema>,
    /// The missing capability (501).
    pub capability: Option<String>,
}

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cra runtime",
        description = "CARP/1.0, TRACE/1.0, Atlas/1.0 and Relay v0.1 over HTTP. Every error answers the ErrorBody; authenticate with `Authorization: Bearer <API key or JWT>`."
    ),
    paths(
        routes::system::health,
        routes::system::live,
        routes::system::ready,
        routes::system::conformance,
        routes::system::metrics,
        routes::system::whoami,
        routes::system::backup,
        routes::sessions::create,
        routes::sessions::get,
        routes::sessions::end,
        routes::traces::list,
        routes::traces::get,
        routes::traces::verify,
        crate::stream::stream,
        routes::atlases::list,
        routes::atlases::get,
        routes::atlases::install,
        routes::atlases::replace,
        routes::atlases::history,
        crate::conformance::eval,
        crate::conformance::set_clock,
        routes::carp::resolve,
        routes::carp::execute,
        routes::approvals::list,
        routes::approvals::show,
        routes::approvals::decide,
        routes::relay::create_project,
        routes::relay::get_project,
        routes::relay::archive,
        routes::relay::unarchive,
        routes::relay::start_session,
        routes::relay::get_session,
        routes::relay::end_session,
        routes::relay::deposit,
        routes::relay::list_packages,
        routes::relay::get_package,
        routes::relay::flag,
        routes::relay::get_project_package,
        routes::relay::flag_project_package,
        routes::relay::review_project_package,
        routes::relay::review,
        routes::relay::assert_fact,
        routes::relay::facts,
        routes::relay::invalidate_fact,
        routes::relay::orient,
        routes::relay::orchestrate,
        routes::relay::export_all,
        routes::relay::export_project,
        routes::relay::import,
        routes::log::key,
        routes::log::checkpoint,
        routes::log::cut,
        routes::log::inclusion,
        routes::log::consistency,
        routes::log::receipt,
        routes::log::tile,
    ),
    components(schemas(ErrorBodySchema, ErrorDetailsSchema, FieldErrorSchema))
)]
pub struct ApiDoc;

/// The OpenAPI document as pretty JSON with a trailing newline (the committed form): the
/// handlers' description with the protocols' JSON Schemas embedded ([`wire`] says how).
pub fn openapi_json() -> String {
    let mut doc = serde_json::to_value(ApiDoc::openapi())
        .unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}));
    wire::embed(&mut doc);
    let mut s =
        serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    s.push('\n');
    s
}
